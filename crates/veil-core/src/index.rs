//! The in-memory index of one queue: each message's [`MessageState`] plus ordered sets that answer "what is
//! visible now, in time-next-visible order", "when does the next Hidden or Delayed message return" and "what
//! has expired" without scanning. Time is passed in; the index never reads a clock. Bodies are not here.
//!
//! Per message the index holds one `MessageState` (48 bytes) in a [`SeqSlab`] chunk and one `(visible_at,
//! seq)` entry in `ready` or `pending`. Expiry is found through one `(expiry lower bound, chunk)` entry per
//! chunk of `slab::CHUNK_LEN` sequence numbers, not one per message.
//!
//! A FIFO queue's visible messages enter `ready` only as their group's head; the others wait "behind" it
//! (counted, in no ordered set) and enter `ready` when the head leaves (docs/semantics.md §4).

use crate::clock::Millis;
use crate::fifo::Fifo;
use crate::history::Histories;
use crate::limits;
use crate::model::{
    Counters, MessageRedrivePolicy, MessageState, QueueRecord, QueueStats, Seq, NEVER,
};
use crate::slab::{ExpiryBound, SeqSlab};
use crate::store::StoreOp;
use crate::waiters::Waiters;
use std::collections::{BTreeSet, HashMap};

pub(crate) struct QueueIndex {
    pub record: QueueRecord,
    pub counters: Counters,
    states: SeqSlab,
    /// Visible messages by (visible_at, seq): the order receives and peeks deliver in.
    ready: BTreeSet<(Millis, Seq)>,
    /// Hidden and Delayed messages by deadline; promoted to `ready` lazily by `advance`.
    pending: BTreeSet<(Millis, Seq)>,
    /// (lower bound of the chunk's expiry times, chunk) for every chunk with an expiring message.
    expiry_chunks: BTreeSet<(Millis, u64)>,
    /// Pending messages that were received at least once (in flight).
    hidden: u64,
    /// Pending messages never received (delayed / inserted invisible).
    delayed: u64,
    next_seq: Seq,
    /// Sum of the stored messages' `body_bytes`.
    stored_bytes: u64,
    /// The rules of messages sent with their own dead-letter policy. Sparse: most messages have none, so the
    /// per-message cost stays in `states`.
    redrives: HashMap<Seq, MessageRedrivePolicy>,
    /// This queue's long-polling receivers. The index counts the messages that become deliverable; the engine
    /// wakes that many waiters when the operation ends (src/waiters.rs). Waiters re-check the index
    /// themselves, so a spurious wake is harmless.
    pub waiters: Waiters,
    pub last_purge_at: Option<Millis>,
    /// Messages released (visible again after a delivery, by a lapse or a nack) with their receives used up
    /// under an `OnRelease` dead-letter rule. The engine drains it before it lets go of the lock, so it is
    /// empty between operations.
    released: Vec<Seq>,
    /// Group order, deduplication and receive attempts; `Some` exactly for a FIFO queue.
    pub fifo: Option<Box<Fifo>>,
    /// Deliveries counted by the receive count they gave the message, per
    /// `limits::DELIVERY_RECEIVE_COUNT_BUCKETS` plus one bucket for the rest. In memory only: a restart
    /// resets it, which Prometheus reads as a counter reset.
    pub deliveries_by_receive_count: [u64; limits::DELIVERY_RECEIVE_COUNT_BUCKETS.len() + 1],
    /// Sum of the receive counts the counted deliveries gave (a histogram's sum).
    pub deliveries_receive_count_sum: u64,
    /// Delivery histories of delivered messages (sparse, like `redrives`) and, in memory only, of recently
    /// deleted ones (docs/semantics.md §9).
    pub history: Histories,
}

/// What `advance` changed.
#[derive(Default)]
pub(crate) struct Advanced {
    pub counters_changed: bool,
    /// Messages removed because they expired.
    pub expired: u64,
}

impl QueueIndex {
    pub fn new(record: QueueRecord, counters: Counters) -> Self {
        let next_seq = record.seq_reserved;
        let fifo = record.config.fifo.map(|_| Box::default());
        Self {
            record,
            counters,
            states: SeqSlab::default(),
            ready: BTreeSet::new(),
            pending: BTreeSet::new(),
            expiry_chunks: BTreeSet::new(),
            hidden: 0,
            delayed: 0,
            next_seq,
            stored_bytes: 0,
            redrives: HashMap::new(),
            waiters: Waiters::default(),
            last_purge_at: None,
            released: Vec::new(),
            fifo,
            deliveries_by_receive_count: [0; limits::DELIVERY_RECEIVE_COUNT_BUCKETS.len() + 1],
            deliveries_receive_count_sum: 0,
            history: Histories::default(),
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
            ops.push(StoreOp::PutQueue(Box::new(self.record.clone())));
        }
        let seq = self.next_seq;
        self.next_seq += 1;
        seq
    }

    /// Counts one delivery that gave its message `receive_count`.
    pub fn count_delivery(&mut self, receive_count: u32) {
        let bucket = limits::DELIVERY_RECEIVE_COUNT_BUCKETS
            .iter()
            .position(|&le| receive_count <= le)
            .unwrap_or(limits::DELIVERY_RECEIVE_COUNT_BUCKETS.len());
        self.deliveries_by_receive_count[bucket] += 1;
        self.deliveries_receive_count_sum += u64::from(receive_count);
    }

    /// Up to `max` stored messages from `from` on, whatever their state.
    pub fn states_from(&self, from: Seq, max: usize) -> Vec<(Seq, MessageState)> {
        self.states.range_from(from, max)
    }

    pub fn get(&self, seq: Seq) -> Option<MessageState> {
        self.states.get(seq)
    }

    pub fn len(&self) -> usize {
        self.states.len()
    }

    pub fn hidden(&self) -> u64 {
        self.hidden
    }

    /// Whether `advance(now)` would change anything: a pending deadline or an expiry has come.
    pub fn is_due(&self, now: Millis) -> bool {
        self.pending.first().is_some_and(|&(at, _)| at <= now)
            || self
                .expiry_chunks
                .first()
                .is_some_and(|&(bound, _)| bound <= now)
    }

    /// The earliest deadline of a Hidden or Delayed message.
    pub fn next_pending_due(&self) -> Option<Millis> {
        self.pending.first().map(|(at, _)| *at)
    }

    fn track_expiry(&mut self, bound: ExpiryBound) {
        match bound {
            ExpiryBound::Unchanged => {}
            ExpiryBound::Lowered { chunk, old, new } => {
                if old != NEVER {
                    self.expiry_chunks.remove(&(old, chunk));
                }
                self.expiry_chunks.insert((new, chunk));
            }
            ExpiryBound::Freed { chunk, old } => {
                if old != NEVER {
                    self.expiry_chunks.remove(&(old, chunk));
                }
            }
        }
    }

    /// Puts a message into `ready` or `pending` by its deadline. Returns true when it became the earliest
    /// pending deadline, i.e. when long-polling receivers should re-arm their timers; one that became
    /// deliverable is counted in `waiters` instead.
    fn schedule(&mut self, seq: Seq, state: MessageState, now: Millis) -> bool {
        if state.visible_at <= now {
            self.make_visible(state.visible_at, seq);
            false
        } else {
            let earliest = self
                .next_pending_due()
                .is_none_or(|due| state.visible_at < due);
            self.pending.insert((state.visible_at, seq));
            if state.receive_count > 0 {
                self.hidden += 1;
                if let Some(fifo) = &mut self.fifo {
                    fifo.count_inflight(seq, true);
                }
            } else {
                self.delayed += 1;
            }
            earliest
        }
    }

    /// Puts a visible message into `ready`, or behind its group's head. Returns true when it entered `ready`.
    fn make_visible(&mut self, visible_at: Millis, seq: Seq) -> bool {
        match &mut self.fifo {
            Some(fifo) if !fifo.is_head(seq) => {
                fifo.behind += 1;
                false
            }
            _ => {
                self.ready.insert((visible_at, seq));
                self.waiters.gained(1);
                true
            }
        }
    }

    /// Takes a message out of `ready` or `pending`.
    fn unschedule(&mut self, seq: Seq, state: MessageState) {
        if self.pending.remove(&(state.visible_at, seq)) {
            if state.receive_count > 0 {
                self.hidden -= 1;
                if let Some(fifo) = &mut self.fifo {
                    fifo.count_inflight(seq, false);
                }
            } else {
                self.delayed -= 1;
            }
        } else if self.ready.remove(&(state.visible_at, seq)) {
            self.waiters.lost();
        } else {
            let fifo = self.fifo.as_mut();
            let fifo = fifo.unwrap_or_else(|| panic!("seq {seq} neither ready nor pending"));
            assert!(
                fifo.behind > 0 && !fifo.is_head(seq),
                "seq {seq} neither ready, pending nor behind its group's head"
            );
            fifo.behind -= 1;
        }
    }

    /// Adds a message; a FIFO queue's joins `group` (the empty group when it names none). Returns the
    /// wake-up hint of `schedule`.
    pub fn insert(
        &mut self,
        seq: Seq,
        state: MessageState,
        group: Option<&str>,
        now: Millis,
    ) -> bool {
        if let Some(fifo) = &mut self.fifo {
            fifo.join(seq, group.unwrap_or_default());
        }
        let bound = self.states.insert(seq, state);
        self.track_expiry(bound);
        self.stored_bytes += u64::from(state.body_bytes);
        self.schedule(seq, state, now)
    }

    /// Gives a stored message its own dead-letter rule (at send, or when rebuilding after a restart).
    pub fn set_redrive(&mut self, seq: Seq, policy: MessageRedrivePolicy) {
        assert!(
            self.states.get(seq).is_some(),
            "redrive for unknown seq {seq}"
        );
        self.redrives.insert(seq, policy);
    }

    /// The message's own dead-letter rule, if it has one.
    pub fn redrive(&self, seq: Seq) -> Option<&MessageRedrivePolicy> {
        if self.redrives.is_empty() {
            return None; // the common case: skip hashing
        }
        self.redrives.get(&seq)
    }

    /// Removes a message from every structure.
    pub fn remove(&mut self, seq: Seq) -> Option<MessageState> {
        let (state, bound) = self.states.remove(seq)?;
        self.track_expiry(bound);
        self.unschedule(seq, state);
        self.forget(seq, state);
        Some(state)
    }

    /// Drops what the index keeps beside a removed message's state.
    fn forget(&mut self, seq: Seq, state: MessageState) {
        self.stored_bytes -= u64::from(state.body_bytes);
        if !self.redrives.is_empty() {
            self.redrives.remove(&seq);
        }
        self.history.forget(seq);
        let Some(new_head) = self.fifo.as_mut().and_then(|fifo| fifo.leave(seq)) else {
            return;
        };
        // The new head waited behind the old one if it is visible (in neither ordered set).
        let head_state = self.states.get(new_head).expect("group members are stored");
        if !self.pending.contains(&(head_state.visible_at, new_head)) {
            let fifo = self.fifo.as_mut().expect("checked above");
            fifo.behind -= 1;
            self.ready.insert((head_state.visible_at, new_head));
            self.waiters.gained(1);
        }
    }

    /// The message's group in a FIFO queue.
    pub fn group_of(&self, seq: Seq) -> Option<&str> {
        self.fifo.as_ref()?.group_of(seq).map(|name| &**name)
    }

    /// Replaces a message's state. Returns the wake-up hint of `schedule`.
    pub fn replace(&mut self, seq: Seq, state: MessageState, now: Millis) -> bool {
        let old = self.states.get(seq);
        let old = old.unwrap_or_else(|| panic!("replace of unknown seq {seq}"));
        self.unschedule(seq, old);
        self.stored_bytes =
            self.stored_bytes - u64::from(old.body_bytes) + u64::from(state.body_bytes);
        let bound = self.states.set(seq, state);
        self.track_expiry(bound);
        if state.visible_at <= now && state.receive_count > 0 {
            if state.receive_count == old.receive_count {
                // A delivered message made visible by something other than a receive (a nack) is released;
                // the delivery it ends counts as a redelivery if it was still in flight.
                if old.visible_at > now {
                    self.counters.redeliveries += 1;
                }
                self.note_release(seq, state);
            } else {
                // Delivered with visibility 0: the delivery lapses at once.
                self.counters.redeliveries += 1;
            }
        }
        self.schedule(seq, state, now)
    }

    /// Remembers a released message whose dead-letter rule moves it on release (docs/semantics.md, "Dead letters").
    fn note_release(&mut self, seq: Seq, state: MessageState) {
        if !state.dead_letter_on_release {
            return;
        }
        let max_receive_count = match self.redrive(seq) {
            Some(policy) => Some(policy.max_receive_count),
            None => self
                .record
                .config
                .redrive_policy
                .as_ref()
                .map(|policy| policy.max_receive_count),
        };
        if max_receive_count.is_some_and(|max| state.receive_count >= max) {
            self.released.push(seq);
        }
    }

    /// The released messages due to move under an `OnRelease` rule, noted since the last call.
    pub fn take_released(&mut self) -> Vec<Seq> {
        std::mem::take(&mut self.released)
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
            self.make_visible(at, seq);
            let state = self.states.get(seq);
            assert!(state.is_some(), "pending seq {seq} has no state");
            if let Some(state) = state.filter(|s| s.receive_count > 0) {
                self.hidden -= 1;
                if let Some(fifo) = &mut self.fifo {
                    fifo.count_inflight(seq, false);
                }
                self.counters.redeliveries += 1;
                advanced.counters_changed = true;
                self.note_release(seq, state);
            } else {
                self.delayed -= 1;
            }
        }
        while let Some(&(bound, chunk)) = self.expiry_chunks.first() {
            if bound > now {
                break;
            }
            self.expiry_chunks.pop_first();
            for (seq, state) in self.states.chunk_entries(chunk) {
                if state.expires_at <= now {
                    // The chunk's expiry entry was popped above, so a Freed chunk needs no untracking.
                    self.states.remove(seq);
                    self.unschedule(seq, state);
                    self.forget(seq, state);
                    advanced.expired += 1;
                    ops.push(StoreOp::DeleteMessage {
                        queue: self.id(),
                        seq,
                    });
                    self.counters.expiries += 1;
                    advanced.counters_changed = true;
                }
            }
            if let Some(exact) = self.states.refresh_expiry_bound(chunk) {
                if exact != NEVER {
                    self.expiry_chunks.insert((exact, chunk));
                }
            }
        }
        self.forget_dedup_ids(now, ops);
        advanced
    }

    /// Forgets a FIFO queue's deduplication ids whose interval has passed, in memory and in the store.
    fn forget_dedup_ids(&mut self, now: Millis, ops: &mut Vec<StoreOp>) {
        let queue = self.id();
        let (Some(fifo), Some(config)) = (&mut self.fifo, self.record.config.fifo) else {
            return;
        };
        for key in fifo.dedup.expire(now, config.dedup_interval_ms) {
            ops.push(StoreOp::DeleteDedup { queue, key });
        }
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

    /// Up to `max` visible messages in the order a peek shows them: delivery order. A FIFO queue shows every
    /// visible message, group by group in send order — also those waiting behind a head in flight — with the
    /// groups ordered by their heads.
    pub fn peek_order(&self, now: Millis, max: usize) -> Vec<Seq> {
        let Some(fifo) = &self.fifo else {
            return self.ready.iter().take(max).map(|&(_, seq)| seq).collect();
        };
        let mut visible: Vec<((Millis, Seq), Seq)> = Vec::new();
        for (_, seqs, _) in fifo.groups() {
            let head = seqs[0];
            let head_at = self.states.get(head).map_or(NEVER, |s| s.visible_at);
            visible.extend(
                seqs.into_iter()
                    .filter(|&seq| self.states.get(seq).is_some_and(|s| s.visible_at <= now))
                    .map(|seq| ((head_at, head), seq)),
            );
        }
        visible.sort_unstable();
        visible.into_iter().take(max).map(|(_, seq)| seq).collect()
    }

    /// Removes every message.
    pub fn clear(&mut self) -> u64 {
        let count = self.states.len() as u64;
        self.states.clear();
        self.ready.clear();
        self.pending.clear();
        self.expiry_chunks.clear();
        self.hidden = 0;
        self.delayed = 0;
        self.stored_bytes = 0;
        self.redrives.clear();
        self.history.clear();
        self.released.clear();
        if let Some(fifo) = &mut self.fifo {
            fifo.clear();
        }
        // Every waiter re-checks: its timer may be armed for a deadline that is gone.
        self.waiters.wake_all();
        count
    }

    /// Queues the store write of the counters if they differ from `before` (taken when the operation began),
    /// so that a total moves in the same commit as the change it counts.
    pub fn persist_counters_since(&self, before: Counters, ops: &mut Vec<StoreOp>) {
        if self.counters != before {
            ops.push(StoreOp::put_counters(self.id(), self.counters));
        }
    }

    pub fn stats(&self, now: Millis) -> QueueStats {
        let oldest_age_ms = self
            .states
            .first()
            .map(|(_, s)| now.saturating_sub(s.sent_at))
            .unwrap_or(0);
        QueueStats {
            visible: self.ready.len() as u64 + self.fifo.as_ref().map_or(0, |f| f.behind),
            hidden: self.hidden,
            delayed: self.delayed,
            oldest_age_ms,
            stored_bytes: self.stored_bytes,
            seq_range: self
                .states
                .first()
                .zip(self.states.last())
                .map(|((first, _), (last, _))| (first, last)),
            counters: self.counters,
        }
    }

    /// A FIFO queue's groups agree with the states: every message in exactly one group, in-flight counts
    /// exact, only heads ready, every visible non-head behind.
    fn check_groups(&self, fifo: &Fifo, now: Millis) {
        assert_eq!(
            fifo.member_count(),
            self.states.len(),
            "every message has a group"
        );
        let mut behind = 0u64;
        for (name, seqs, inflight) in fifo.groups() {
            assert!(!seqs.is_empty(), "group {name} is not empty");
            let mut counted = 0u32;
            for (position, &seq) in seqs.iter().enumerate() {
                let state = self.states.get(seq).expect("group members are stored");
                let in_pending = self.pending.contains(&(state.visible_at, seq));
                let in_ready = self.ready.contains(&(state.visible_at, seq));
                if in_pending && state.receive_count > 0 {
                    counted += 1;
                }
                if !in_pending {
                    assert!(state.visible_at <= now, "a visible member is due");
                    assert_eq!(in_ready, position == 0, "only group {name}'s head is ready");
                    behind += u64::from(position != 0);
                }
            }
            assert_eq!(counted, inflight, "group {name}'s in-flight count");
        }
        assert_eq!(behind, fifo.behind, "behind counts the visible non-heads");
    }

    /// Checks the index's own bookkeeping; used by tests after every step.
    pub fn check_invariants(&self, now: Millis) {
        let behind = self.fifo.as_ref().map_or(0, |f| f.behind);
        assert_eq!(
            self.ready.len() + self.pending.len() + behind as usize,
            self.states.len(),
            "every message is ready, pending or behind its group's head"
        );
        if let Some(fifo) = &self.fifo {
            self.check_groups(fifo, now);
        }
        assert_eq!(
            self.hidden + self.delayed,
            self.pending.len() as u64,
            "hidden + delayed = pending"
        );
        assert_eq!(
            self.counters.sends,
            self.states.len() as u64 + self.counters.departed(),
            "every message sent is stored or counted as departed: {:?}",
            self.counters
        );
        let behind_seqs =
            self.fifo
                .iter()
                .flat_map(|fifo| fifo.groups())
                .flat_map(|(_, seqs, _)| {
                    seqs.into_iter().filter(|&seq| {
                        let state = self.states.get(seq).expect("group members are stored");
                        !self.ready.contains(&(state.visible_at, seq))
                            && !self.pending.contains(&(state.visible_at, seq))
                    })
                });
        let body_bytes: u64 = self
            .ready
            .iter()
            .chain(&self.pending)
            .map(|&(_, seq)| seq)
            .chain(behind_seqs)
            .filter_map(|seq| self.states.get(seq))
            .map(|state| u64::from(state.body_bytes))
            .sum();
        assert_eq!(
            body_bytes, self.stored_bytes,
            "stored bytes are the sum of body lengths"
        );
        for seq in self.redrives.keys() {
            assert!(
                self.states.get(*seq).is_some(),
                "redrive of seq {seq} has a message"
            );
        }
        for seq in self.history.live_seqs() {
            assert!(
                self.states.get(seq).is_some(),
                "history of seq {seq} has a message"
            );
        }
        for &(at, seq) in &self.pending {
            let state = self.states.get(seq).expect("pending entries have a state");
            assert_eq!(state.visible_at, at);
        }
        for &(at, seq) in &self.ready {
            let state = self.states.get(seq).expect("ready entries have a state");
            assert_eq!(state.visible_at, at);
            assert!(at <= now, "a ready entry is due");
        }
        for (chunk, bound) in self.states.expiry_bounds() {
            let entries = self.states.chunk_entries(chunk);
            assert!(
                entries
                    .clone()
                    .into_iter()
                    .all(|(_, s)| s.expires_at >= bound),
                "chunk {chunk}'s expiry bound is too high"
            );
            if entries.into_iter().any(|(_, s)| s.expires_at != NEVER) {
                assert!(
                    self.expiry_chunks.contains(&(bound, chunk)),
                    "chunk {chunk} with expiring messages is tracked"
                );
            }
        }
    }
}
