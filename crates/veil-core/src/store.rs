//! The persistence port. The engine describes every change as [`StoreOp`]s, hands them to a [`Store`] in the
//! order it applied them in memory, and answers its caller only once the returned [`Commit`] resolves, i.e.
//! once the change is durable. Implementations group concurrent submissions into one fsync (group commit).
//! The engine never touches files; `veil-store` implements this trait on an embedded database.

use std::future::Future;
use std::pin::Pin;

use crate::history::DeliveryHistory;
use crate::inbox::{Inbound, Outbound};
use crate::model::{
    Counters, DedupEntry, MessageRedrivePolicy, MessageState, MovedFrom, Payload, QueueId,
    QueueRecord, Seq,
};
use crate::move_task::MoveTaskRecord;
use crate::partition::Partition;

/// Clone: a send that delivers to waiting receives shares its commit, and so its outcome, with them.
#[derive(Clone, Debug, thiserror::Error, serde::Serialize, serde::Deserialize)]
pub enum StoreError {
    #[error("storage I/O failed: {0}")]
    Io(String),
    #[error("stored data is corrupt: {0}")]
    Corrupt(String),
    /// The data was written in a storage format this build does not read.
    #[error("incompatible storage format: {0}")]
    Incompatible(String),
    #[error("the store is closed")]
    Closed,
    /// The storage service cannot be reached or did not answer in time (a shared database that is down,
    /// failing over, or unreachable). Front-ends answer their protocol's "service unavailable"; retrying later
    /// may succeed.
    #[error("storage unavailable: {0}")]
    Unavailable(String),
}

/// One durable change. Serializable because a store may log changes before it applies them (veil-store's
/// write-ahead log).
///
/// Kept at 72 bytes ([`STORE_OP_BYTES_MAX`]): an operation is moved by value several times on its way to the
/// disk (into the submission, the writer's group, the log window it is held in until its checkpoint), and the
/// frequent ones (a state, counters, a history, a delete) carry at most 64 bytes. The rare or large ones are
/// boxed. A message's own operation is boxed too: one allocation per message instead of copying ~300 bytes at
/// each of those moves (docs/benchmarks.md, "Operations kept small"). Boxing changes no encoding: serde writes
/// a newtype variant holding a struct exactly as the struct variant it replaced, in postcard and in JSON.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum StoreOp {
    PutQueue(Box<QueueRecord>),
    /// Removes the queue and all its messages.
    DeleteQueue(QueueId),
    PutCounters {
        queue: QueueId,
        /// Boxed: nine totals would take the operation over its bound.
        counters: Box<Counters>,
    },
    PutMessage(Box<PutMessage>),
    PutState {
        queue: QueueId,
        seq: Seq,
        state: MessageState,
    },
    DeleteMessage {
        queue: QueueId,
        seq: Seq,
    },
    /// Removes every message of the queue, keeping the queue.
    PurgeQueue(QueueId),
    /// Moves a message to another queue (a dead-letter move or a re-queue). The payload records where and why
    /// it came from; the message's own redrive rule moves only when given here.
    MoveMessage(Box<MoveMessage>),
    ReplaceBody {
        queue: QueueId,
        seq: Seq,
        body: bytes::Bytes,
        body_md5: [u8; 16],
    },
    /// The next queue id to hand out.
    PutNextQueueId(QueueId),
    /// Remembers a FIFO queue's deduplication key (the id, prefixed by the group under group scope).
    PutDedup {
        queue: QueueId,
        key: String,
        entry: DedupEntry,
    },
    /// Forgets a deduplication key whose interval has passed.
    DeleteDedup {
        queue: QueueId,
        key: String,
    },
    /// Writes a message move task (started, progressed or finished), keyed by its number.
    PutMoveTask(Box<MoveTaskRecord>),
    /// Forgets a move task: an old finished one, or one whose source queue is gone.
    DeleteMoveTask {
        number: u64,
    },
    /// Writes a message's delivery history whole (bounded, last write wins; docs/semantics.md §9). Deleted with the
    /// message; moved messages get theirs written anew under their new (queue, seq), after the move.
    /// Appended last: the log encodes variants by index.
    PutHistory {
        queue: QueueId,
        seq: Seq,
        history: DeliveryHistory,
    },
    /// Takes a message out of its queue into the inbox of `partition`, which holds its target
    /// ([`crate::inbox`]); its body goes with the entry, in the same transaction. Only a partition's store
    /// (PostgreSQL) is sent this.
    SendToInbox(Box<SendToInbox>),
    /// Makes inbox entry `id` the message at `to` and removes the entry, in one transaction. `moved_from`
    /// `None` keeps the origin the message had before it left.
    AcceptInbound(Box<AcceptInbound>),
    /// Hands inbox entry `id` on to the inbox of another partition as `entry` (a message going back to the
    /// queue it left, its target gone), or drops it (`None`: its source is gone too).
    ForwardInbound(Box<ForwardInbound>),
}

impl StoreOp {
    /// The write of a queue's totals.
    pub fn put_counters(queue: QueueId, counters: Counters) -> Self {
        StoreOp::PutCounters {
            queue,
            counters: Box::new(counters),
        }
    }
}

/// The bound on `size_of::<StoreOp>()` (see [`StoreOp`]), checked by a test.
pub const STORE_OP_BYTES_MAX: usize = 72;

/// [`StoreOp::PutMessage`]: a new message (a send, or a move's arrival in a store that keeps no inbox).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PutMessage {
    pub queue: QueueId,
    pub seq: Seq,
    pub payload: Payload,
    pub state: MessageState,
    /// The message's own dead-letter rule; kept apart from the payload so that start-up can rebuild the
    /// index without reading bodies.
    pub redrive: Option<MessageRedrivePolicy>,
    /// The message's group when its queue is FIFO, kept apart from the payload for the same reason:
    /// start-up rebuilds each group's order from it.
    pub fifo_group: Option<String>,
}

/// [`StoreOp::MoveMessage`].
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct MoveMessage {
    pub from: (QueueId, Seq),
    pub to: (QueueId, Seq),
    pub state: MessageState,
    pub moved_from: MovedFrom,
    pub redrive: Option<MessageRedrivePolicy>,
    /// The message's group when the target queue is FIFO.
    pub fifo_group: Option<String>,
}

/// [`StoreOp::SendToInbox`].
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SendToInbox {
    pub from: (QueueId, Seq),
    pub partition: Partition,
    pub entry: Outbound,
}

/// [`StoreOp::AcceptInbound`].
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct AcceptInbound {
    pub id: u64,
    pub to: (QueueId, Seq),
    pub state: MessageState,
    pub moved_from: Option<MovedFrom>,
    pub redrive: Option<MessageRedrivePolicy>,
    pub fifo_group: Option<String>,
}

/// [`StoreOp::ForwardInbound`].
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ForwardInbound {
    pub id: u64,
    pub to: Option<(Partition, Outbound)>,
}

/// Resolves once the submitted operations (and everything submitted before them) are durable.
pub type Commit = Pin<Box<dyn Future<Output = Result<(), StoreError>> + Send>>;

/// Resolves to the payloads [`Store::read_payloads_later`] was asked for.
pub type PayloadRead =
    Pin<Box<dyn Future<Output = Result<Vec<Option<Payload>>, StoreError>> + Send>>;

/// Resolves to the entries [`Store::read_inbox_later`] found.
pub type InboxRead = Pin<Box<dyn Future<Output = Result<Vec<Inbound>, StoreError>> + Send>>;

/// What start-up reads back.
#[derive(Debug, Default)]
pub struct Snapshot {
    pub next_queue_id: QueueId,
    pub queues: Vec<(QueueRecord, Counters)>,
}

pub trait Store: Send + Sync + 'static {
    /// Queues and their counters, read once at start-up.
    fn load_queues(&self) -> Result<Snapshot, StoreError>;
    /// Calls `each` for every stored message's state, in (queue, seq) order. Bodies are not read.
    fn load_messages(
        &self,
        each: &mut dyn FnMut(QueueId, Seq, MessageState),
    ) -> Result<(), StoreError>;
    /// Calls `each` for every stored message's own redrive policy (few messages have one).
    fn load_redrives(
        &self,
        each: &mut dyn FnMut(QueueId, Seq, MessageRedrivePolicy),
    ) -> Result<(), StoreError>;
    /// Calls `each` for every message of a FIFO queue with its group, in (queue, seq) order.
    fn load_groups(&self, each: &mut dyn FnMut(QueueId, Seq, String)) -> Result<(), StoreError>;
    /// Calls `each` for every remembered deduplication key of a FIFO queue.
    fn load_dedup(
        &self,
        each: &mut dyn FnMut(QueueId, String, DedupEntry),
    ) -> Result<(), StoreError>;
    /// Every message move task, in start order (their numbers), read once at start-up.
    fn load_move_tasks(&self) -> Result<Vec<MoveTaskRecord>, StoreError>;
    /// Calls `each` for every stored delivery history (only delivered messages have one), read once at
    /// start-up.
    fn load_history(
        &self,
        each: &mut dyn FnMut(QueueId, Seq, DeliveryHistory),
    ) -> Result<(), StoreError>;
    /// Queues `ops` behind everything submitted before. Must be called in the order the engine applied the
    /// changes; an empty `ops` is a barrier that resolves once everything before it is durable.
    fn submit(&self, ops: Vec<StoreOp>) -> Commit;
    /// Reads message payloads that are durable; `None` for a message that no longer exists.
    fn read_payloads(
        &self,
        queue: QueueId,
        seqs: &[Seq],
    ) -> Result<Vec<Option<Payload>>, StoreError>;
    /// [`Store::read_payloads`] as a future, which a receive awaits: a store whose reads wait on the network
    /// (PostgreSQL) answers it without blocking the caller's thread for the round trip. By default the read
    /// happens at once (a local store's read is a lookup in memory or the page cache).
    fn read_payloads_later(&self, queue: QueueId, seqs: Vec<Seq>) -> PayloadRead {
        Box::pin(std::future::ready(self.read_payloads(queue, &seqs)))
    }
    /// The oldest entries, at most `limit`, waiting in the inbox of this store's partition (messages moved
    /// here from queues of other partitions; [`crate::inbox`]). A store that holds every queue has no inbox.
    fn read_inbox_later(&self, limit: usize) -> InboxRead {
        let _ = limit;
        Box::pin(std::future::ready(Ok(Vec::new())))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_operation_stays_within_its_bound_because_it_is_moved_by_value_on_its_way_to_disk() {
        let size = std::mem::size_of::<StoreOp>();
        assert!(
            size <= STORE_OP_BYTES_MAX,
            "StoreOp is {size} bytes, over STORE_OP_BYTES_MAX ({STORE_OP_BYTES_MAX}): box the variant that grew"
        );
    }
}
