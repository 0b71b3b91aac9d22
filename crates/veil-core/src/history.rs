//! Per-message delivery history (docs/semantics.md §9): for every stored message that has been delivered, its last
//! [`limits::DELIVERY_HISTORY_ENTRIES_MAX`] deliveries — when, through which protocol, to which client, the
//! visibility granted and how each ended — so that an operator can answer "why was this message delivered
//! five times?".
//!
//! What is kept, and why this shape:
//! - Only delivered messages that still exist have an entry (a sparse map beside the index, like the
//!   message redrive rules), so a queue whose messages are never received pays nothing, and the fixed
//!   per-message cost of the index (`MessageState`, 48 bytes) is unchanged.
//! - A history is persisted whole, as one bounded vector (`StoreOp::PutHistory`, last write wins), written in
//!   the same submission as the state change it records: no extra commit, and the log's checkpoint and
//!   overlay need no merging rules.
//! - Only what cannot be derived is written. A delivery that is still open is rendered at read time: "in
//!   flight" while the message is Hidden under that delivery's generation, "lapsed" once its deadline passed.
//!   A lapse is written only when the next receive closes the record anyway (it writes the history then).
//! - A deleted message's history goes with it from the store. The engine keeps the histories of the most
//!   recently deleted messages of each queue in memory ([`limits::DELETED_HISTORIES_KEPT`]) so that a question
//!   asked right after a delete still answers "deleted"; that part is NOT durable and a restart forgets it.
//! - Message ids are random, and the engine never sees a payload under its lock, so a history learns its
//!   message's id after the receive read the payload (`Histories::learn_ids`, one more short critical section
//!   per receive that delivered a message for the first time) and is then found by id with one hash probe. A
//!   history restored after a restart before it learned its id is matched by reading payloads outside the
//!   lock, in bounded batches (`Engine::history`).

use std::collections::hash_map::Entry;
use std::collections::{BTreeSet, HashSet, VecDeque};
use std::net::SocketAddr;
use std::ops::Bound;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::clock::Millis;
use crate::limits;
use crate::model::{MessageState, QueueKey, Seq};

/// The protocol a delivery was made through.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Protocol {
    Sqs,
    Azure,
    Kubemq,
    /// An operator's tool (the admin API), not a protocol front-end.
    Admin,
}

impl Protocol {
    pub fn as_str(self) -> &'static str {
        match self {
            Protocol::Sqs => "sqs",
            Protocol::Azure => "azure",
            Protocol::Kubemq => "kubemq",
            Protocol::Admin => "admin",
        }
    }
}

/// Who received a message: what the front-end knows of its client.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Consumer {
    pub protocol: Protocol,
    /// The client's address, when the transport gives one.
    pub address: Option<SocketAddr>,
    /// The protocol's name for the client, when it gives one: SQS's access key id, Azure's account name,
    /// KubeMQ's ClientID.
    pub identity: Option<String>,
}

impl Consumer {
    pub fn new(protocol: Protocol, address: Option<SocketAddr>, identity: Option<String>) -> Self {
        Self {
            protocol,
            address,
            identity,
        }
    }
}

/// The latest visibility change of a delivery that did not end it (a change to a non-zero visibility).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct VisibilityChangeRecord {
    pub at: Millis,
    /// The new visibility, counted from `at`.
    pub visibility_ms: Millis,
}

/// How a delivery ended.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum DeliveryEnding {
    /// The consumer deleted (acknowledged) the message.
    Deleted,
    /// The consumer gave the message back at once: visibility changed to 0, or a nack.
    Released,
    /// Its deadline passed without a settlement: the message became visible again (or was received again).
    Lapsed,
    /// A dead-letter rule moved the message to `to`. Boxed, as is `Moved`'s: every delivery record holds room
    /// for an ending, and few end in a move.
    DeadLettered { to: Box<QueueKey> },
    /// The message was moved (re-queued, or by a move task) to `to`.
    Moved { to: Box<QueueKey> },
}

/// When and how a delivery ended.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeliveryEnd {
    pub at: Millis,
    pub how: DeliveryEnding,
}

/// One delivery of a message.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeliveryRecord {
    pub received_at: Millis,
    /// The message's receive count after this delivery.
    pub receive_count: u32,
    /// The message's generation under this delivery (its receipt's); an Azure update raises it. A delivery
    /// is in flight while the message is Hidden with this generation.
    pub generation: u32,
    /// `None` when the front-end did not say. Shared: a queue's records of one client hold one copy
    /// ([`Histories`] interns them), and the store's copy of a history shares it too. Serialized as the
    /// consumer itself.
    pub consumer: Option<Arc<Consumer>>,
    /// The visibility the receive granted.
    pub visibility_ms: Millis,
    /// Visibility changes to a non-zero value during this delivery (extensions, shortenings).
    pub visibility_changes: u32,
    pub last_visibility_change: Option<VisibilityChangeRecord>,
    /// `None` while open: in flight, or lapsed without anything having written it (rendered at read time).
    pub ended: Option<DeliveryEnd>,
}

/// A message's deliveries as the store keeps them: oldest first, at most
/// [`limits::DELIVERY_HISTORY_ENTRIES_MAX`].
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeliveryHistory {
    /// Learned after the first receive read the payload; `None` until then (and after a restart, for a
    /// history written before it was learned).
    pub message_id: Option<[u8; 16]>,
    pub deliveries: Vec<DeliveryRecord>,
}

impl DeliveryHistory {
    /// The last delivery, if it is not yet ended.
    fn open_last(&mut self) -> Option<&mut DeliveryRecord> {
        self.deliveries.last_mut().filter(|r| r.ended.is_none())
    }

    /// Ends the last delivery with a move, unless it already ended otherwise: a release stays visible as the
    /// cause only until the move it led to (KubeMQ's dead-letter on release) replaces it.
    fn end_with_move(&mut self, how: DeliveryEnding, now: Millis) {
        if let Some(last) = self.deliveries.last_mut() {
            let replaceable = match &last.ended {
                None => true,
                Some(end) => end.how == DeliveryEnding::Released,
            };
            if replaceable {
                last.ended = Some(DeliveryEnd { at: now, how });
            }
        }
    }
}

/// What `Engine::history` answers.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MessageHistory {
    pub queue: QueueKey,
    pub message_id: [u8; 16],
    /// The message's position in `queue` (a moved message has a new one in its new queue).
    pub seq: Seq,
    /// Answered from the in-memory record of recently deleted messages (not durable).
    pub deleted: bool,
    /// The deadline of the delivery in flight, if one is.
    pub in_flight_until: Option<Millis>,
    /// Oldest first. Open deliveries are rendered: the one in flight stays open; one whose deadline passed
    /// ends `Lapsed` at its deadline.
    pub deliveries: Vec<DeliveryRecord>,
}

impl MessageHistory {
    /// Renders `history` as of `now`, with `state` the message's current state (`None` once deleted).
    pub(crate) fn render(
        queue: QueueKey,
        (seq, message_id): (Seq, [u8; 16]),
        history: &DeliveryHistory,
        state: Option<MessageState>,
        now: Millis,
    ) -> Self {
        let mut deliveries = history.deliveries.clone();
        let mut in_flight_until = None;
        if let (Some(last), Some(state)) = (deliveries.last_mut(), state) {
            if last.ended.is_none() {
                if state.generation == last.generation && state.visible_at > now {
                    in_flight_until = Some(state.visible_at);
                } else {
                    last.ended = Some(DeliveryEnd {
                        at: state.visible_at.min(now),
                        how: DeliveryEnding::Lapsed,
                    });
                }
            }
        }
        Self {
            queue,
            message_id,
            seq,
            deleted: state.is_none(),
            in_flight_until,
            deliveries,
        }
    }
}

/// One queue's histories: of its delivered messages, and (in memory only) of its recently deleted ones.
#[derive(Default)]
pub(crate) struct Histories {
    /// Keyed by seqs and (below) message ids Veil assigns, so hashed fast (docs/decisions/0014-hashing.md);
    /// the consumers, which clients name, keep SipHash.
    live: foldhash::HashMap<Seq, DeliveryHistory>,
    /// Message id → seq of the live histories that know their id: a look-up by id is one hash probe, not a
    /// scan of every delivered message under the engine lock.
    by_id: foldhash::HashMap<[u8; 16], Seq>,
    /// Live histories that do not know their id and that a look-up walks: restored after a restart before
    /// they learned it, moved in without it, and any left in `fresh` when a look-up began. Ordered, so a
    /// look-up can walk it in bounded steps.
    without_id: BTreeSet<Seq>,
    /// Histories begun by a receive that will learn their ids from its payload read in a moment. Kept apart
    /// from the ordered set because every first delivery passes through here, and a hash set's insert and
    /// remove cost a third of the B-tree's (docs/benchmarks.md, "The delivery history's cost"). A look-up moves
    /// them into `without_id` first, so one whose receive never learned (its payload read failed, or its
    /// caller went away after the commit) is still found.
    fresh: foldhash::HashSet<Seq>,
    /// Most recent last; bounded by [`limits::DELETED_HISTORIES_KEPT`]. Not durable.
    deleted: VecDeque<(Seq, DeliveryHistory)>,
    /// The consumers recent records name, one shared copy each; bounded by
    /// [`limits::HISTORY_CONSUMERS_INTERNED_MAX`] (then it starts over: records keep their copies).
    consumers: HashSet<Arc<Consumer>>,
}

impl Histories {
    /// The shared copy of `consumer` for a new record.
    pub fn consumer(&mut self, consumer: &Consumer) -> Arc<Consumer> {
        if let Some(shared) = self.consumers.get(consumer) {
            return shared.clone();
        }
        if self.consumers.len() >= limits::HISTORY_CONSUMERS_INTERNED_MAX {
            self.consumers.clear();
        }
        let shared = Arc::new(consumer.clone());
        self.consumers.insert(shared.clone());
        shared
    }

    /// Restores a history read from the store at start-up.
    pub fn restore(&mut self, seq: Seq, history: DeliveryHistory) {
        self.insert_live(seq, history);
    }

    /// Puts a moved message's history in under its new seq.
    pub fn arrived(&mut self, seq: Seq, history: DeliveryHistory) {
        self.insert_live(seq, history);
    }

    fn insert_live(&mut self, seq: Seq, history: DeliveryHistory) {
        match history.message_id {
            Some(id) => {
                self.by_id.insert(id, seq);
            }
            None => {
                self.without_id.insert(seq);
            }
        }
        self.live.insert(seq, history);
    }

    /// `seq`'s history no longer waits for its id (learned, or the history is gone).
    fn forget_unknown_id(&mut self, seq: Seq) {
        if !self.fresh.remove(&seq) {
            self.without_id.remove(&seq);
        }
    }

    /// Takes a live history out of every map.
    fn remove_live(&mut self, seq: Seq) -> Option<DeliveryHistory> {
        if self.live.is_empty() {
            return None; // the common case for a queue nobody receives from: no hashing
        }
        let history = self.live.remove(&seq)?;
        match history.message_id {
            Some(id) => {
                self.by_id.remove(&id);
            }
            None => self.forget_unknown_id(seq),
        }
        Some(history)
    }

    /// Records a delivery of `seq`; `previous` is the message's state before it. Returns the history to
    /// write and whether it still needs its message id.
    pub fn delivered(
        &mut self,
        seq: Seq,
        previous: MessageState,
        record: DeliveryRecord,
    ) -> (&DeliveryHistory, bool) {
        let history = match self.live.entry(seq) {
            Entry::Occupied(entry) => entry.into_mut(),
            Entry::Vacant(entry) => {
                self.fresh.insert(seq);
                entry.insert(DeliveryHistory::default())
            }
        };
        if let Some(open) = history.open_last() {
            // Received again while its last delivery was open: that one lapsed at its deadline.
            open.ended = Some(DeliveryEnd {
                at: previous.visible_at.min(record.received_at),
                how: DeliveryEnding::Lapsed,
            });
        }
        if history.deliveries.len() >= limits::DELIVERY_HISTORY_ENTRIES_MAX {
            history.deliveries.remove(0);
        }
        // Room for this record only: a first push would take room for four, and most messages are delivered
        // once (docs/benchmarks.md, "Memory per stored message").
        history.deliveries.reserve_exact(1);
        history.deliveries.push(record);
        let wants_id = history.message_id.is_none();
        (history, wants_id)
    }

    /// Records a visibility change of `seq`'s open delivery (0 releases it). `generation` is the message's
    /// after the change (an update raises it). Returns the history to write, if there is one.
    pub fn visibility_changed(
        &mut self,
        seq: Seq,
        visibility_ms: Millis,
        generation: u32,
        now: Millis,
    ) -> Option<&DeliveryHistory> {
        if self.live.is_empty() {
            return None;
        }
        let history = self.live.get_mut(&seq)?;
        let open = history.open_last()?;
        open.generation = generation;
        if visibility_ms == 0 {
            open.ended = Some(DeliveryEnd {
                at: now,
                how: DeliveryEnding::Released,
            });
        } else {
            open.visibility_changes = open.visibility_changes.saturating_add(1);
            open.last_visibility_change = Some(VisibilityChangeRecord {
                at: now,
                visibility_ms,
            });
        }
        Some(history)
    }

    /// `seq` was deleted: its history ends `Deleted` and joins the in-memory record of deleted messages.
    pub fn deleted(&mut self, seq: Seq, now: Millis) {
        let Some(mut history) = self.remove_live(seq) else {
            return;
        };
        if let Some(open) = history.open_last() {
            open.ended = Some(DeliveryEnd {
                at: now,
                how: DeliveryEnding::Deleted,
            });
        }
        if self.deleted.len() >= limits::DELETED_HISTORIES_KEPT {
            self.deleted.pop_front();
        }
        self.deleted.push_back((seq, history));
    }

    /// Takes `seq`'s history out as the message leaves for another queue.
    pub fn take(&mut self, seq: Seq) -> Option<DeliveryHistory> {
        self.remove_live(seq)
    }

    /// Drops `seq`'s history (the message expired, or was dropped).
    pub fn forget(&mut self, seq: Seq) {
        self.remove_live(seq);
    }

    /// Drops every live history (a purge).
    pub fn clear(&mut self) {
        self.live.clear();
        self.by_id.clear();
        self.without_id.clear();
        self.fresh.clear();
    }

    /// Gives the histories of `seq`s their message ids, live or recently deleted.
    pub fn learn_ids(&mut self, ids: impl IntoIterator<Item = (Seq, [u8; 16])>) {
        for (seq, id) in ids {
            if let Some(history) = self.live.get_mut(&seq) {
                if history.message_id.is_none() {
                    history.message_id = Some(id);
                    self.forget_unknown_id(seq);
                    self.by_id.insert(id, seq);
                }
            } else if let Some((_, history)) =
                self.deleted.iter_mut().rev().find(|(s, _)| *s == seq)
            {
                history.message_id.get_or_insert(id);
            }
        }
    }

    /// The live or recently deleted history with this message id, with its seq and whether it is deleted.
    pub fn find(&self, message_id: &[u8; 16]) -> Option<(Seq, &DeliveryHistory, bool)> {
        let live = self
            .by_id
            .get(message_id)
            .and_then(|seq| Some((*seq, self.live.get(seq)?, false)));
        live.or_else(|| {
            self.deleted
                .iter()
                .rev()
                .find(|(_, h)| h.message_id.as_ref() == Some(message_id))
                .map(|(seq, h)| (*seq, h, true))
        })
    }

    /// The recently deleted history of `seq`, when it is still kept and knows its message id (the admin API's
    /// history by seq after a delete: the message is no longer there to say its id).
    pub fn deleted_by_seq(&self, seq: Seq) -> Option<(&DeliveryHistory, [u8; 16])> {
        self.deleted
            .iter()
            .rev()
            .find(|(s, _)| *s == seq)
            .and_then(|(_, h)| Some((h, h.message_id?)))
    }

    /// Up to `max` seqs after `after` whose live history does not know its message id.
    pub fn without_id(&mut self, after: Option<Seq>, max: usize) -> Vec<Seq> {
        self.without_id.extend(self.fresh.drain());
        let range = match after {
            Some(after) => (Bound::Excluded(after), Bound::Unbounded),
            None => (Bound::Unbounded, Bound::Unbounded),
        };
        self.without_id.range(range).take(max).copied().collect()
    }

    /// Seqs with a live history (tests: each has a message).
    pub fn live_seqs(&self) -> impl Iterator<Item = Seq> + '_ {
        self.live.keys().copied()
    }
}

/// Ends a leaving message's last delivery with its move (see [`DeliveryHistory::end_with_move`]).
pub(crate) fn ended_by_move(
    mut history: DeliveryHistory,
    how: DeliveryEnding,
    now: Millis,
) -> DeliveryHistory {
    history.end_with_move(how, now);
    history
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(generation: u32) -> DeliveryRecord {
        DeliveryRecord {
            received_at: 1_000,
            receive_count: generation,
            generation,
            consumer: None,
            visibility_ms: 30_000,
            visibility_changes: 0,
            last_visibility_change: None,
            ended: None,
        }
    }

    #[test]
    fn records_of_one_consumer_share_one_copy_which_serializes_as_the_consumer() {
        let mut histories = Histories::default();
        let client = Consumer::new(
            Protocol::Sqs,
            Some("127.0.0.1:4000".parse().unwrap()),
            Some("AKIDEXAMPLE".into()),
        );
        let first = histories.consumer(&client);
        let second = histories.consumer(&client.clone());
        assert!(Arc::ptr_eq(&first, &second));
        let other = histories.consumer(&Consumer::new(Protocol::Sqs, None, None));
        assert!(!Arc::ptr_eq(&first, &other));
        // The log's and the store's bytes do not change with the sharing.
        let shared = postcard::to_allocvec(&Some(first)).unwrap();
        let plain = postcard::to_allocvec(&Some(client)).unwrap();
        assert_eq!(shared, plain);
    }

    fn unreceived() -> MessageState {
        MessageState {
            sent_at: 0,
            visible_at: 0,
            expires_at: crate::model::NEVER,
            first_received_at: 0,
            receive_count: 0,
            generation: 0,
            body_bytes: 0,
            dead_letter_on_release: false,
        }
    }

    #[test]
    fn a_history_whose_receive_never_learned_its_id_is_still_walked_by_a_look_up() {
        let mut histories = Histories::default();
        histories.delivered(3, unreceived(), record(1));
        histories.delivered(5, unreceived(), record(1));
        histories.learn_ids([(5, [5; 16])]);
        assert_eq!(histories.without_id(None, 10), vec![3]);
        assert_eq!(histories.find(&[5; 16]).map(|(seq, _, _)| seq), Some(5));
        // Learned later (by the look-up's own payload read): no longer walked.
        histories.learn_ids([(3, [3; 16])]);
        assert_eq!(histories.without_id(None, 10), Vec::<Seq>::new());
        assert_eq!(histories.find(&[3; 16]).map(|(seq, _, _)| seq), Some(3));
    }

    #[test]
    fn a_deleted_history_leaves_nothing_to_walk() {
        let mut histories = Histories::default();
        histories.delivered(3, unreceived(), record(1));
        histories.deleted(3, 2_000);
        histories.restore(4, DeliveryHistory::default());
        histories.forget(4);
        assert_eq!(histories.without_id(None, 10), Vec::<Seq>::new());
    }

    #[test]
    fn a_deleted_history_is_found_by_its_seq_once_it_knows_its_id() {
        let mut histories = Histories::default();
        histories.delivered(3, unreceived(), record(1));
        histories.delivered(4, unreceived(), record(1));
        histories.learn_ids([(3, [3; 16])]);
        histories.deleted(3, 2_000);
        histories.deleted(4, 2_000);
        assert_eq!(histories.deleted_by_seq(3).map(|(_, id)| id), Some([3; 16]));
        assert!(
            histories.deleted_by_seq(4).is_none(),
            "without its id it cannot be rendered"
        );
        assert!(histories.deleted_by_seq(5).is_none());
    }

    #[test]
    fn a_history_holds_room_for_the_deliveries_it_has_not_four() {
        let mut histories = Histories::default();
        let state = unreceived();
        let (history, _) = histories.delivered(7, state, record(1));
        assert_eq!(history.deliveries.capacity(), 1);
        for generation in 2..=limits::DELIVERY_HISTORY_ENTRIES_MAX as u32 + 3 {
            let (history, _) = histories.delivered(7, state, record(generation));
            assert!(history.deliveries.len() <= limits::DELIVERY_HISTORY_ENTRIES_MAX);
            assert_eq!(history.deliveries.capacity(), history.deliveries.len());
        }
    }
}
