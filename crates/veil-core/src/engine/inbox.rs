//! Messages arriving from other partitions (crate::inbox): a partition's engine accepts the entries of its
//! inbox into its queues, each in the same commit that removes the entry. An entry whose target no longer
//! exists goes back to the queue it left (through that queue's partition's inbox when it is elsewhere), or is
//! dropped when that queue is gone too — as a message is dropped with its deleted queue.

use super::{Engine, State};
use crate::clock::Millis;
use crate::error::EngineResult;
use crate::inbox::{self, ArrivalRule, Inbound, Outbound};
use crate::limits;
use crate::model::QueueId;
use crate::store::{Commit, StoreOp};

/// What becomes of one inbox entry.
enum Fate {
    /// It arrives in this queue of the engine.
    Arrive(QueueId, Outbound),
    /// It goes on to another partition's inbox as this entry, or nowhere (`None`).
    Forward(Option<(crate::partition::Partition, Outbound)>),
}

impl Engine {
    /// Accepts up to `limits::INBOX_ENTRIES_PER_DRAIN_MAX` waiting inbox entries, durably. Returns how many it
    /// took, so that a caller drains again at once while entries keep coming and waits when none did. A node
    /// calls it for each partition it owns, one call at a time per engine (an entry read twice before its
    /// acceptance commits would arrive twice).
    pub async fn drain_inbox(&self) -> EngineResult<usize> {
        if self.placement.is_none() {
            return Ok(0);
        }
        let entries = self
            .store
            .read_inbox_later(limits::INBOX_ENTRIES_PER_DRAIN_MAX)
            .await?;
        let taken = entries.len();
        let commit = self.accept_inbound(entries);
        Self::durable(commit).await?;
        Ok(taken)
    }

    /// Under the lock: each entry arrives in its queue (created first when its rule says so), goes back
    /// towards the queue it left, or is dropped; the waiters of every queue something arrived in wake.
    fn accept_inbound(&self, entries: Vec<Inbound>) -> Option<Commit> {
        let now = self.clock.now();
        let mut guard = self.state.lock();
        let state = &mut *guard;
        let mut ops = Vec::new();
        let mut woken: Vec<(QueueId, bool)> = Vec::new();
        for Inbound { id, entry } in entries {
            match self.fate(state, entry, now, &mut ops) {
                Fate::Arrive(target, entry) => {
                    let earliest = Self::accept_one(state, id, target, entry, now, &mut ops);
                    match woken.iter_mut().find(|(t, _)| *t == target) {
                        Some((_, rearm)) => *rearm |= earliest,
                        None => woken.push((target, earliest)),
                    }
                }
                Fate::Forward(to) => ops.push(StoreOp::ForwardInbound(Box::new(
                    crate::store::ForwardInbound { id, to },
                ))),
            }
        }
        for (target, _) in &woken {
            ops.push(StoreOp::put_counters(
                *target,
                state.queues[target].counters,
            ));
        }
        Self::wake_targets(state, woken);
        self.submit(ops)
    }

    /// Where an entry goes: its target if it is here (created if its rule says so), else back to the queue
    /// it left, else nowhere.
    fn fate(
        &self,
        state: &mut State,
        entry: Outbound,
        now: Millis,
        ops: &mut Vec<StoreOp>,
    ) -> Fate {
        let placement = self.placement.expect("only a placed engine has an inbox");
        if let Some(partition) = placement.elsewhere(&entry.target) {
            return Fate::Forward(Some((partition, entry))); // sent to the wrong inbox: pass it on
        }
        if let Some(&target) = state.by_key.get(&entry.target) {
            return Fate::Arrive(target, entry);
        }
        if let ArrivalRule::DeadLetterCreating { create_with } = &entry.rule {
            let config = create_with.clone();
            let target = Self::insert_queue(state, entry.target.clone(), config, now, ops);
            return Fate::Arrive(target, entry);
        }
        let Some(source) = entry
            .moved_from
            .as_ref()
            .filter(|_| entry.rule != ArrivalRule::Returned)
            .map(|moved_from| moved_from.queue.clone())
        else {
            return Fate::Forward(None); // a returned message whose source is gone too
        };
        let returned = Outbound {
            target: source,
            rule: ArrivalRule::Returned,
            moved_from: None,
            ..entry
        };
        match placement.elsewhere(&returned.target) {
            Some(partition) => Fate::Forward(Some((partition, returned))),
            None => match state.by_key.get(&returned.target) {
                Some(&source) => Fate::Arrive(source, returned),
                None => Fate::Forward(None),
            },
        }
    }

    /// Puts one entry's message into `target` under a new seq, as its rule says, and queues the store's
    /// acceptance (the message in, the entry out). Returns the wake-up hint of the insert.
    fn accept_one(
        state: &mut State,
        id: u64,
        target: QueueId,
        entry: Outbound,
        now: Millis,
        ops: &mut Vec<StoreOp>,
    ) -> bool {
        let index = state.queues.get_mut(&target).expect("resolved by fate");
        let retention_ms = index.record.config.retention_ms;
        let arrived = inbox::arrival_state(&entry.rule, entry.state, retention_ms, now);
        let (seq, fifo_group, wake) = Self::place_arrival(
            index,
            arrived,
            entry.group,
            entry.redrive.as_ref(),
            (now, ops),
        );
        // Every arrival is the target's send, as a move within one engine is (docs/semantics.md §9).
        index.counters.sends += 1;
        ops.push(StoreOp::AcceptInbound(Box::new(
            crate::store::AcceptInbound {
                id,
                to: (target, seq),
                state: arrived,
                moved_from: entry.moved_from,
                redrive: entry.redrive,
                fifo_group,
            },
        )));
        Self::history_arrives(index, seq, entry.history, ops);
        wake
    }
}
