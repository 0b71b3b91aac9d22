//! The checks after every step, against the store as it really is: what it holds durably (what a crash now
//! would keep) must contain every acknowledged message and nothing deleted, refused or unknown; and when the
//! store is idle, the engine's statistics must equal a recount of it.

use std::collections::{BTreeMap, HashMap};

use veil_core::{Clock, Counters, MessageState, Millis, QueueId, QueueKey, QueueStats, Seq};

use super::{key, tag_of, Sim, Violation};
use crate::limits::*;
use crate::ops::*;

impl Sim<'_> {
    pub(super) fn queue_id(&self, queue: usize) -> Option<QueueId> {
        let snapshot = self.store.durable()?.load_queues().ok()?;
        snapshot
            .queues
            .iter()
            .find(|(record, _)| record.key == key(queue))
            .map(|(record, _)| record.id)
    }

    /// Every stored message's generation, by (queue, seq); `None` when what is durable cannot be read now
    /// (`Backend::durable`).
    pub(super) fn durable_states(&self) -> Option<HashMap<(QueueId, Seq), u32>> {
        let mut states = HashMap::new();
        let _ = self
            .store
            .durable()?
            .load_messages(&mut |queue, seq, state| {
                states.insert((queue, seq), state.generation);
            });
        Some(states)
    }

    /// Every stored message's tag, with how many times it is stored; `None` when what is durable cannot be
    /// read now.
    pub(super) fn durable_tags(&self) -> Option<BTreeMap<u64, u32>> {
        let durable = self.store.durable()?;
        let mut seqs: BTreeMap<QueueId, Vec<Seq>> = BTreeMap::new();
        let _ =
            durable.load_messages(&mut |queue, seq, _| seqs.entry(queue).or_default().push(seq));
        let mut tags = BTreeMap::new();
        for (queue, seqs) in seqs {
            if let Ok(payloads) = durable.read_payloads(queue, &seqs) {
                for payload in payloads.into_iter().flatten() {
                    // A body that is no tag counts under u64::MAX: the scan reports it.
                    let tag = tag_of(&payload.body).unwrap_or(u64::MAX);
                    *tags.entry(tag).or_insert(0) += 1;
                }
            }
        }
        Some(tags)
    }

    pub(super) fn expect_durable(&self, tag: u64, kind: &'static str) -> Result<(), Violation> {
        let msg = &self.msgs[&tag];
        if msg.maybe_gone.is_none()
            && !self.maybe_expired(tag)
            && self.durable_tags().is_some_and(|d| !d.contains_key(&tag))
        {
            return Err(self.violation(kind, format!("m{tag} is not in the store")));
        }
        Ok(())
    }

    pub(super) fn check_step(&mut self) -> Result<(), Violation> {
        self.engine.check_invariants();
        let Some(stored) = self.durable_tags() else {
            return Ok(());
        };
        self.stats.durability_checks += 1;
        for (&tag, &count) in &stored {
            let Some(msg) = self.msgs.get(&tag) else {
                return Err(self.violation(
                    "unknown message stored",
                    format!("the store holds a message nobody sent (tag {tag})"),
                ));
            };
            if count > 1 {
                return Err(self.violation(
                    "message stored twice",
                    format!("the store holds m{tag} {count} times"),
                ));
            }
            if msg.never_stored {
                return Err(self.violation(
                    "never-stored message stored",
                    format!(
                        "m{tag} was answered as a duplicate or refused, yet the store holds it"
                    ),
                ));
            }
            if msg.deleted.is_some() {
                return Err(self.violation(
                    "acknowledged delete undone",
                    format!("m{tag}'s delete was acknowledged, yet the store holds it"),
                ));
            }
        }
        for (&tag, msg) in &self.msgs {
            let must_exist = msg.acked_tick.is_some()
                && msg.maybe_gone.is_none()
                && msg.deleted.is_none()
                && !msg.never_stored;
            if must_exist && !stored.contains_key(&tag) && !self.maybe_expired(tag) {
                return Err(self.violation(
                    "acknowledged message lost",
                    format!(
                        "m{tag}, sent to {} and acknowledged, is no longer in the store (nothing that could remove it was asked for)",
                        QUEUE_NAMES[msg.origin]
                    ),
                ));
            }
        }
        Ok(())
    }

    /// Brings every queue up to now so that no statistics call changes anything; false when the store did not
    /// become idle. One pass may not be enough: a dead-letter move can land an already expired message in a
    /// queue the sweep visited before, and the next look at that queue expires it.
    fn settle_engine(&mut self) -> Result<bool, Violation> {
        let keys: Vec<QueueKey> = (0..QUEUE_NAMES.len()).map(key).collect();
        for _ in 0..SETTLE_PASSES_MAX {
            self.engine.sweep();
            for key in &keys {
                let _ = self.engine.stats(key);
            }
            if self.store.pending_count() == 0 {
                break;
            }
            self.store.flush(usize::MAX);
            self.poll_all()?;
        }
        Ok(self.store.pending_count() == 0)
    }

    /// With nothing pending in the store, the engine's statistics equal a recount of what the store holds.
    pub(super) fn check_quiescent(&mut self) -> Result<(), Violation> {
        if self.store.failed() || self.store.pending_count() > 0 {
            return Ok(());
        }
        if !self.settle_engine()? {
            return Ok(());
        }
        let now = self.clock.now();
        let Some(durable) = self.store.durable() else {
            return Ok(());
        };
        let snapshot = durable
            .load_queues()
            .map_err(|e| self.violation("store unreadable", e.to_string()))?;
        let mut states: HashMap<QueueId, Vec<(Seq, MessageState)>> = HashMap::new();
        let _ = durable.load_messages(&mut |queue, seq, state| {
            states.entry(queue).or_default().push((seq, state))
        });
        self.stats.recounts += 1;
        for (record, counters) in &snapshot.queues {
            let stats = match self.engine.stats(&record.key) {
                Ok(stats) => stats,
                Err(error) => {
                    return Err(self.violation(
                        "statistics",
                        format!(
                            "the stored queue {} is unknown to the engine: {error}",
                            record.key
                        ),
                    ))
                }
            };
            let stored = states.remove(&record.id).unwrap_or_default();
            if counters.sends != stored.len() as u64 + counters.departed() {
                return Err(self.violation(
                    "totals",
                    format!(
                        "{}: {} stored, but the stored totals do not add up: {counters:?}",
                        record.key,
                        stored.len()
                    ),
                ));
            }
            let recount = recount(*counters, &stored, now);
            if stats != recount {
                return Err(self.violation(
                    "statistics",
                    format!(
                        "{}: the engine says {stats:?}, a recount of the store says {recount:?}",
                        record.key
                    ),
                ));
            }
        }
        Ok(())
    }
}

/// A queue's statistics as a recount of what the store holds for it (in sequence order) says they are at `now`.
fn recount(counters: Counters, stored: &[(Seq, MessageState)], now: Millis) -> QueueStats {
    let mut recount = QueueStats {
        counters,
        ..Default::default()
    };
    for (seq, state) in stored {
        if state.visible_at <= now {
            recount.visible += 1;
        } else if state.receive_count > 0 {
            recount.hidden += 1;
        } else {
            recount.delayed += 1;
        }
        recount.stored_bytes += u64::from(state.body_bytes);
        recount.seq_range = Some(match recount.seq_range {
            None => (*seq, *seq),
            Some((first, _)) => (first, *seq),
        });
    }
    // The index's "oldest" is its lowest sequence number's age.
    recount.oldest_age_ms = stored
        .first()
        .map_or(0, |(_, s)| now.saturating_sub(s.sent_at));
    recount
}
