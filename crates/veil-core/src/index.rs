//! The in-memory index of one queue: each message's [`MessageState`] plus ordered sets that answer "what is
//! visible now, in time-next-visible order", "when does the next Hidden or Delayed message return" and "what
//! has expired" without scanning. Time is passed in; the index never reads a clock. Bodies are not here.
//!
//! Per message the index holds one `MessageState` (40 bytes) in a B-tree keyed by seq, one `(visible_at, seq)`
//! entry in `ready` or `pending`, and one `(expires_at, seq)` entry in `expiry` when the message expires.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use tokio::sync::Notify;

use crate::clock::Millis;
use crate::limits;
use crate::model::{Counters, MessageState, QueueRecord, QueueStats, Seq, NEVER};
use crate::store::StoreOp;

pub(crate) struct QueueIndex {
    pub record: QueueRecord,
    pub counters: Counters,
    messages: BTreeMap<Seq, MessageState>,
    /// Visible messages by (visible_at, seq): the order receives and peeks deliver in.
    ready: BTreeSet<(Millis, Seq)>,
    /// Hidden and Delayed messages by deadline; promoted to `ready` lazily by `advance`.
    pending: BTreeSet<(Millis, Seq)>,
    /// Messages that expire, by expiry.
    expiry: BTreeSet<(Millis, Seq)>,
    /// Pending messages that were received at least once (in flight).
    hidden: u64,
    /// Pending messages never received (delayed / inserted invisible).
    delayed: u64,
    next_seq: Seq,
    /// Wakes this queue's long-polling receivers on a send, a nack, or an earlier pending deadline; they
    /// re-check the index themselves, so a spurious wake is harmless.
    pub notify: Arc<Notify>,
    pub last_purge_at: Option<Millis>,
}

/// What `advance` changed.
#[derive(Default)]
pub(crate) struct Advanced {
    pub counters_changed: bool,
}

impl QueueIndex {
    pub fn new(record: QueueRecord, counters: Counters) -> Self {
        let next_seq = record.seq_reserved;
        Self {
            record,
            counters,
            messages: BTreeMap::new(),
            ready: BTreeSet::new(),
            pending: BTreeSet::new(),
            expiry: BTreeSet::new(),
            hidden: 0,
            delayed: 0,
            next_seq,
            notify: Arc::new(Notify::new()),
            last_purge_at: None,
        }
    }

    pub fn id(&self) -> u64 {
        self.record.id
    }

    /// Hands out the next sequence number, recording a new reserved block in the store when needed so that a
    /// restart never reuses one.
    pub fn alloc_seq(&mut self, ops: &mut Vec<StoreOp>) -> Seq {
        if self.next_seq >= self.record.seq_reserved {
            self.record.seq_reserved = self.next_seq + limits::SEQ_RESERVE_BLOCK;
            ops.push(StoreOp::PutQueue(self.record.clone()));
        }
        let seq = self.next_seq;
        self.next_seq += 1;
        seq
    }

    pub fn get(&self, seq: Seq) -> Option<MessageState> {
        self.messages.get(&seq).copied()
    }

    pub fn len(&self) -> usize {
        self.messages.len()
    }

    pub fn hidden(&self) -> u64 {
        self.hidden
    }

    /// The earliest deadline of a Hidden or Delayed message.
    pub fn next_pending_due(&self) -> Option<Millis> {
        self.pending.first().map(|(at, _)| *at)
    }

    /// Adds a message. Returns true when it is visible now or became the earliest pending deadline, i.e. when
    /// long-polling receivers should re-check.
    pub fn insert(&mut self, seq: Seq, state: MessageState, now: Millis) -> bool {
        let previous = self.messages.insert(seq, state);
        assert!(previous.is_none(), "seq {seq} inserted twice");
        if state.expires_at != NEVER {
            self.expiry.insert((state.expires_at, seq));
        }
        if state.visible_at <= now {
            self.ready.insert((state.visible_at, seq));
            true
        } else {
            let earliest = self
                .next_pending_due()
                .is_none_or(|due| state.visible_at < due);
            self.pending.insert((state.visible_at, seq));
            if state.receive_count > 0 {
                self.hidden += 1;
            } else {
                self.delayed += 1;
            }
            earliest
        }
    }

    /// Removes a message from every structure.
    pub fn remove(&mut self, seq: Seq) -> Option<MessageState> {
        let state = self.messages.remove(&seq)?;
        if state.expires_at != NEVER {
            let was_there = self.expiry.remove(&(state.expires_at, seq));
            assert!(was_there, "seq {seq} missing from the expiry index");
        }
        if self.pending.remove(&(state.visible_at, seq)) {
            if state.receive_count > 0 {
                self.hidden -= 1;
            } else {
                self.delayed -= 1;
            }
        } else {
            let was_there = self.ready.remove(&(state.visible_at, seq));
            assert!(was_there, "seq {seq} neither ready nor pending");
        }
        Some(state)
    }

    /// Replaces a message's state. Returns the same wake-up hint as `insert`.
    pub fn replace(&mut self, seq: Seq, state: MessageState, now: Millis) -> bool {
        let old = self.remove(seq);
        assert!(old.is_some(), "replace of unknown seq {seq}");
        self.insert(seq, state, now)
    }

    /// Brings the index up to `now`: pending messages whose deadline passed become visible (a Hidden one is a
    /// redelivery), and expired messages are removed with a store delete each.
    pub fn advance(&mut self, now: Millis, ops: &mut Vec<StoreOp>) -> Advanced {
        let mut advanced = Advanced::default();
        while let Some(&(at, seq)) = self.pending.first() {
            if at > now {
                break;
            }
            self.pending.pop_first();
            self.ready.insert((at, seq));
            let state = self.messages.get(&seq).copied();
            assert!(state.is_some(), "pending seq {seq} has no state");
            if state.is_some_and(|s| s.receive_count > 0) {
                self.hidden -= 1;
                self.counters.redeliveries += 1;
                advanced.counters_changed = true;
            } else {
                self.delayed -= 1;
            }
        }
        while let Some(&(at, seq)) = self.expiry.first() {
            if at > now {
                break;
            }
            self.remove(seq);
            ops.push(StoreOp::DeleteMessage {
                queue: self.id(),
                seq,
            });
            self.counters.expiries += 1;
            advanced.counters_changed = true;
        }
        advanced
    }

    /// The first visible message strictly after `after` in delivery order.
    pub fn next_ready(&self, after: Option<(Millis, Seq)>) -> Option<(Millis, Seq)> {
        match after {
            None => self.ready.first().copied(),
            Some(cursor) => self
                .ready
                .range((
                    std::ops::Bound::Excluded(cursor),
                    std::ops::Bound::Unbounded,
                ))
                .next()
                .copied(),
        }
    }

    /// Removes every message.
    pub fn clear(&mut self) -> u64 {
        let count = self.messages.len() as u64;
        self.messages.clear();
        self.ready.clear();
        self.pending.clear();
        self.expiry.clear();
        self.hidden = 0;
        self.delayed = 0;
        count
    }

    pub fn stats(&self, now: Millis) -> QueueStats {
        let oldest_age_ms = self
            .messages
            .values()
            .next()
            .map(|s| now.saturating_sub(s.sent_at))
            .unwrap_or(0);
        QueueStats {
            visible: self.ready.len() as u64,
            hidden: self.hidden,
            delayed: self.delayed,
            oldest_age_ms,
            counters: self.counters,
        }
    }

    /// Checks the index's own bookkeeping; used by tests after every step.
    pub fn check_invariants(&self, now: Millis) {
        assert_eq!(
            self.ready.len() + self.pending.len(),
            self.messages.len(),
            "every message is ready xor pending"
        );
        assert_eq!(
            self.hidden + self.delayed,
            self.pending.len() as u64,
            "hidden + delayed = pending"
        );
        for &(at, seq) in &self.pending {
            let state = self.messages[&seq];
            assert_eq!(state.visible_at, at);
        }
        for &(at, seq) in &self.ready {
            let state = self.messages[&seq];
            assert_eq!(state.visible_at, at);
            assert!(at <= now, "a ready entry is due");
        }
        let expiring = self
            .messages
            .values()
            .filter(|s| s.expires_at != NEVER)
            .count();
        assert_eq!(expiring, self.expiry.len(), "expiry index matches");
    }
}
