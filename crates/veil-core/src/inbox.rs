//! Messages on their way into a queue of another partition (docs/decisions/0011-partitioned-ownership.md, step
//! 7). One engine holds one partition's queues, so a dead-letter move, a re-queue or a move task whose target
//! hashes elsewhere cannot put the message in its target under the engine's lock. Instead the source's commit
//! takes the message out of its queue and writes it to the target partition's inbox (`StoreOp::SendToInbox`),
//! and the target's owner later accepts each inbox entry into its queue in one commit that also removes the
//! entry (`StoreOp::AcceptInbound`). Each step is one transaction, so a crash between the two neither loses
//! the message (the entry stays until accepted) nor duplicates it (accepting removes the entry it came from).

use serde::{Deserialize, Serialize};

use crate::clock::Millis;
use crate::history::DeliveryHistory;
use crate::model::{MessageRedrivePolicy, MessageState, MovedFrom, QueueConfig, QueueKey, NEVER};
use crate::partition::Partition;

/// What travels with a message into another partition's inbox (the body stays in the store, which copies it
/// into the entry in the same statement that removes the message).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Outbound {
    pub target: QueueKey,
    pub rule: ArrivalRule,
    /// The message's state when it left its queue.
    pub state: MessageState,
    /// Where it came from and why, recorded in its payload on arrival (`None`: the payload's own is kept).
    pub moved_from: Option<MovedFrom>,
    /// The message's own dead-letter rule.
    pub redrive: Option<MessageRedrivePolicy>,
    /// Its group in the queue it left; a FIFO target orders it in that group.
    pub group: Option<String>,
    /// Its delivery history, its last delivery already ended by the move.
    pub history: Option<DeliveryHistory>,
}

/// How a message arrives in its target, decided by what moved it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ArrivalRule {
    /// A queue's redrive policy moved it: receive count and send time kept, expiry by the target's retention
    /// counted from the send (docs/semantics.md §3).
    DeadLetter,
    /// A message's own dead-letter rule moved it: it arrives fresh; a target that does not exist is created
    /// with `create_with` (KubeMQ creates channels on use).
    DeadLetterCreating { create_with: QueueConfig },
    /// A consumer's re-queue or a move task moved it: it arrives fresh and counts as a send at the target.
    Requeue,
    /// Its target was gone, so it came back to the queue it left, as it left (visible, counts kept).
    Returned,
}

/// An entry read from a partition's inbox: its number there and what it carries.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Inbound {
    pub id: u64,
    pub entry: Outbound,
}

/// Where an engine's messages may go: its own partition's queues, or another partition's inbox. An engine
/// without a placement holds every queue (embedded, or a cluster's single leader).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Placement {
    pub partition: Partition,
    pub count: u32,
}

impl Placement {
    /// The partition of `key` when it is not this one.
    pub fn elsewhere(&self, key: &QueueKey) -> Option<Partition> {
        let partition = crate::partition::partition_of(key, self.count);
        (partition != self.partition).then_some(partition)
    }
}

/// The state a message has on arrival under `rule`, at `now`, in a target keeping messages `retention_ms`.
pub fn arrival_state(
    rule: &ArrivalRule,
    left: MessageState,
    retention_ms: Option<Millis>,
    now: Millis,
) -> MessageState {
    match rule {
        ArrivalRule::DeadLetter => MessageState {
            visible_at: now,
            expires_at: retention_ms.map_or(NEVER, |ms| left.sent_at.saturating_add(ms)),
            dead_letter_on_release: false,
            ..left
        },
        ArrivalRule::DeadLetterCreating { .. } | ArrivalRule::Requeue => fresh(left, now),
        ArrivalRule::Returned => MessageState {
            visible_at: now,
            dead_letter_on_release: false,
            ..left
        },
    }
}

/// A moved message's state when it arrives as a fresh one: visible now, never received, its expiry kept.
pub fn fresh(moved: MessageState, now: Millis) -> MessageState {
    MessageState {
        visible_at: now,
        first_received_at: 0,
        receive_count: 0,
        dead_letter_on_release: false,
        ..moved
    }
}
