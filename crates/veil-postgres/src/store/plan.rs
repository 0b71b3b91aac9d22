//! How a group commit's operations become a few set-based statements instead of one statement each.
//!
//! The group's operations are read in order into a [`Batch`] that keeps, per key, only the net effect of what
//! it absorbed (a state written after a message's insert is folded into the insert; a delete drops what the
//! batch had pending for that message; the last counters of a queue win). A batch is written as at most one
//! multi-row statement per kind of change (`batch::statements`), in a fixed order — deduplication ids,
//! message deletes, inserts, state updates, body updates, delivery histories, counters — that gives the same
//! tables as applying its operations one by one, because after coalescing no key has two kinds of change in
//! one batch that this order could reverse.
//!
//! What a batch cannot absorb without losing that equivalence ends it: an operation on a whole queue (create,
//! delete, purge), a move (it reads the message it moves), the next queue id, a move task, and an insert of a
//! message the batch deletes or wrote a history for before. Those are written as they are, between batches, in their place.

use std::collections::BTreeMap;

use bytes::Bytes;
use veil_core::{Counters, DedupEntry, DeliveryHistory, MessageState, QueueId, Seq, StoreOp};

/// A message's key in every message table.
pub type Key = (QueueId, Seq);

/// A message inserted (or replaced whole) by the batch: its `PutMessage`, taken out of the operation as it is
/// (already boxed, so the batch keeps it without another allocation).
pub type NewMessage = veil_core::store::PutMessage;

/// A `PutMessage`'s message; any other operation back as it was.
pub fn take_put(op: StoreOp) -> Result<Box<NewMessage>, StoreOp> {
    match op {
        StoreOp::PutMessage(put) => Ok(put),
        other => Err(other),
    }
}

/// What the batch does to one message.
#[derive(Clone, Debug, PartialEq)]
pub enum MessageWrite {
    /// Gone (with its body and history), whatever the batch did to it before.
    Delete,
    Insert(Box<NewMessage>),
    /// Changes to a message the batch did not insert; applied only if it exists.
    Update {
        state: Option<MessageState>,
        body: Option<(Bytes, [u8; 16])>,
    },
}

/// The net effect of consecutive operations, by key.
#[derive(Debug, Default, PartialEq)]
pub struct Batch {
    pub messages: BTreeMap<Key, MessageWrite>,
    /// Written only for messages that exist once the batch's inserts and deletes are done.
    pub histories: BTreeMap<Key, DeliveryHistory>,
    /// `None`: the key is forgotten.
    pub dedup: BTreeMap<(QueueId, String), Option<DedupEntry>>,
    pub counters: BTreeMap<QueueId, Counters>,
}

/// One step of a group's transaction.
#[derive(Debug, PartialEq)]
pub enum Step {
    Batch(Batch),
    /// An operation written by itself, after the steps before it (boxed: rare, and much larger than a step
    /// of the batch kind's handle).
    One(Box<StoreOp>),
}

/// The steps that apply `ops`, in their order, with as few statements as coalescing allows.
pub fn plan(ops: Vec<StoreOp>) -> Vec<Step> {
    let mut steps = Vec::new();
    let mut batch = Batch::default();
    for op in ops {
        let Err(op) = batch.absorb(op) else {
            continue;
        };
        if !batch.is_empty() {
            steps.push(Step::Batch(std::mem::take(&mut batch)));
        }
        // A fresh batch absorbs every operation a batch can hold; the rest are written alone.
        if let Err(op) = batch.absorb(*op) {
            steps.push(Step::One(op));
        }
    }
    if !batch.is_empty() {
        steps.push(Step::Batch(batch));
    }
    steps
}

impl Batch {
    /// Takes in `other`'s changes, all of keys this batch does not hold (another partition's queues: a
    /// node's shared writer writes every partition's batch of a group as one).
    pub fn merge(&mut self, other: Batch) {
        debug_assert!(other
            .messages
            .keys()
            .all(|key| !self.messages.contains_key(key)));
        self.messages.extend(other.messages);
        self.histories.extend(other.histories);
        self.dedup.extend(other.dedup);
        self.counters.extend(other.counters);
    }

    pub fn is_empty(&self) -> bool {
        self.messages.is_empty()
            && self.histories.is_empty()
            && self.dedup.is_empty()
            && self.counters.is_empty()
    }

    /// Takes `op` into the batch, or hands it back when the batch cannot hold it (see the module's text).
    fn absorb(&mut self, op: StoreOp) -> Result<(), Box<StoreOp>> {
        if let StoreOp::PutMessage(put) = &op {
            if self.insert_must_wait((put.queue, put.seq)) {
                return Err(Box::new(op));
            }
        }
        let op = match take_put(op) {
            Ok(message) => {
                self.messages
                    .insert((message.queue, message.seq), MessageWrite::Insert(message));
                return Ok(());
            }
            Err(other) => other,
        };
        match op {
            StoreOp::PutState { queue, seq, state } => self.put_state((queue, seq), state),
            StoreOp::ReplaceBody {
                queue,
                seq,
                body,
                body_md5,
            } => self.replace_body((queue, seq), body, body_md5),
            StoreOp::DeleteMessage { queue, seq } => {
                self.messages.insert((queue, seq), MessageWrite::Delete);
                self.histories.remove(&(queue, seq));
            }
            StoreOp::PutHistory {
                queue,
                seq,
                history,
            } => {
                // A history of a message deleted before it is not written (as one by one: it has no message).
                if self.messages.get(&(queue, seq)) != Some(&MessageWrite::Delete) {
                    self.histories.insert((queue, seq), history);
                }
            }
            StoreOp::PutDedup { queue, key, entry } => {
                self.dedup.insert((queue, key), Some(entry));
            }
            StoreOp::DeleteDedup { queue, key } => {
                self.dedup.insert((queue, key), None);
            }
            StoreOp::PutCounters { queue, counters } => {
                self.counters.insert(queue, *counters);
            }
            other => return Err(Box::new(other)),
        }
        Ok(())
    }

    /// An insert after a delete of the same message, or after a history written when the message may not
    /// have existed (one by one that history would not be written; in the batch it would land on the
    /// insert), waits for the next batch.
    fn insert_must_wait(&self, key: Key) -> bool {
        let pending = self.messages.get(&key);
        let deleted = pending == Some(&MessageWrite::Delete);
        let history_before =
            self.histories.contains_key(&key) && !matches!(pending, Some(MessageWrite::Insert(_)));
        deleted || history_before
    }

    fn put_state(&mut self, key: Key, new: MessageState) {
        match self.messages.get_mut(&key) {
            // As one by one: the update finds no message.
            Some(MessageWrite::Delete) => {}
            Some(MessageWrite::Insert(message)) => message.state = new,
            Some(MessageWrite::Update { state, .. }) => *state = Some(new),
            None => {
                self.messages.insert(
                    key,
                    MessageWrite::Update {
                        state: Some(new),
                        body: None,
                    },
                );
            }
        }
    }

    fn replace_body(&mut self, key: Key, new: Bytes, md5: [u8; 16]) {
        match self.messages.get_mut(&key) {
            Some(MessageWrite::Delete) => {}
            Some(MessageWrite::Insert(message)) => {
                message.payload.body = new;
                message.payload.body_md5 = md5;
            }
            Some(MessageWrite::Update { body, .. }) => *body = Some((new, md5)),
            None => {
                self.messages.insert(
                    key,
                    MessageWrite::Update {
                        state: None,
                        body: Some((new, md5)),
                    },
                );
            }
        }
    }
}

#[cfg(test)]
mod tests;
