//! The end of a run: faults healed, every timeout passed, a restart, then every queue drained through the
//! checked path. Every message that must exist has to be delivered by then (docs/reliability.md,
//! "Deterministic simulation").

use std::collections::BTreeMap;

use veil_core::{Clock, ReceiptRule};

use super::driver::{Outcome, Request};
use super::model::Held;
use super::{key, Sim, Violation};
use crate::limits::*;
use crate::ops::*;

impl Sim<'_> {
    pub(super) fn liveness(&mut self) -> Result<(), Violation> {
        self.heal_and_wait()?;
        let drained = self.drain_all()?;
        self.check_all_delivered(&drained)
    }

    /// Heals every fault, answers every request still waiting, passes every window and restarts.
    fn heal_and_wait(&mut self) -> Result<(), Violation> {
        // Heal: a fail-stopped store needs a restart; otherwise the disk catches up.
        self.store.heal();
        self.restart_if_the_power_went()?;
        if self.store.failed() {
            self.crash(0)?;
        }
        self.store.flush(usize::MAX);
        self.poll_all()?;
        // Long polls still waiting end at their deadline.
        self.clock
            .advance_ms(VISIBILITY_MS_MAX + DELAY_MS_MAX + RECEIVE_WAIT_MS_MAX + 1_000);
        for _ in 0..SETTLE_PASSES_MAX {
            self.store.flush(usize::MAX);
            self.poll_all()?;
        }
        if !self.inflight.is_empty() {
            return Err(self.violation(
                "stuck request",
                format!(
                    "{} requests never answered with the store healed and every wait passed",
                    self.inflight.len()
                ),
            ));
        }
        // What those last answers made invisible becomes visible again.
        self.clock
            .advance_ms(VISIBILITY_MS_MAX + DELAY_MS_MAX + RECEIVE_WAIT_MS_MAX + 1_000);
        // A restart as well: what is recovered must deliver too. The real store may learn only now that a
        // background checkpoint failed; it then refuses to serve and needs a restart from the disk.
        if let Err(violation) = self.reopen() {
            if !self.store.failed() {
                return Err(violation);
            }
            self.crash(0)?;
        }
        self.stats.restarts += 1;
        self.check_step()?;
        Ok(())
    }

    /// Drains every queue through the checked path; what each drained message was delivered, by tag.
    fn drain_all(&mut self) -> Result<BTreeMap<u64, usize>, Violation> {
        let mut drained: BTreeMap<u64, usize> = BTreeMap::new();
        loop {
            let mut progress = false;
            for queue in 0..QUEUE_NAMES.len() {
                if !self.engine.queue_exists(&key(queue)) {
                    continue;
                }
                for _ in 0..DRAIN_RECEIVES_MAX {
                    let got = self.drain_once(queue, &mut drained)?;
                    if got == 0 {
                        break;
                    }
                    progress = true;
                }
            }
            // Move tasks still running move what they have to (nothing else would).
            let engine = self.engine.clone();
            let _ = self.settle(Box::pin(async move { engine.drive_move_tasks().await }));
            if !progress {
                break;
            }
        }
        Ok(drained)
    }

    /// Every message that must exist was delivered by the drain.
    fn check_all_delivered(&mut self, drained: &BTreeMap<u64, usize>) -> Result<(), Violation> {
        let now = self.clock.now();
        for (&tag, msg) in &self.msgs {
            let must_exist = msg.acked_tick.is_some()
                && msg.maybe_gone.is_none()
                && msg.deleted.is_none()
                && !msg.never_stored;
            if must_exist && !drained.contains_key(&tag) && !self.maybe_expired_at(tag, now) {
                return Err(self.violation(
                    "liveness",
                    format!(
                        "m{tag}, sent to {} and acknowledged, was never delivered by the final drain",
                        QUEUE_NAMES[msg.origin]
                    ),
                ));
            }
        }
        self.stats.drained += drained.len() as u64;
        Ok(())
    }

    /// One receive of the drain and the delete of what it got, both through the checked path.
    fn drain_once(
        &mut self,
        queue: usize,
        drained: &mut BTreeMap<u64, usize>,
    ) -> Result<usize, Violation> {
        let client = CLIENTS;
        self.tick += 1;
        self.receive(
            client,
            queue,
            RECEIVE_MAX,
            DRAIN_VISIBILITY_MS,
            0,
            Protocol::Sqs,
            false,
        )?;
        self.store.flush(usize::MAX);
        self.poll_all()?;
        let held: Vec<Held> = self.clients[usize::from(client)].held.drain(..).collect();
        if held.is_empty() {
            return Ok(0);
        }
        for h in &held {
            *drained.entry(h.tag).or_insert(0) += 1;
        }
        let count = held.len();
        let receipts: Vec<String> = held.iter().map(|h| h.receipt.clone()).collect();
        let tags: Vec<u64> = held.iter().map(|h| h.tag).collect();
        self.tick += 1;
        for &tag in &tags {
            self.maybe_gone(tag);
        }
        let engine = self.engine.clone();
        let future = Box::pin(async move {
            let refs: Vec<&str> = receipts.iter().map(String::as_str).collect();
            Outcome::Deleted(
                engine
                    .delete_batch(&key(queue), &refs, ReceiptRule::AnyIssued)
                    .await,
            )
        });
        self.start(Request::Delete { tags }, future)?;
        self.store.flush(usize::MAX);
        self.poll_all()?;
        self.check_step()?;
        Ok(count)
    }
}
