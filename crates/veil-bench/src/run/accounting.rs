//! The accounting of a run: which messages were delivered and how often, and the final tally against what
//! was acknowledged (sent, received, duplicates, redeliveries, missing). Kept apart from the I/O so that the
//! rules that fail a run (a MISSING or a duplicate message) are tested on their own.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use serde::{Deserialize, Serialize};

use super::body::BodyId;

/// Shards of the received-message table, so consumers rarely contend on one lock.
const SHARDS: usize = 16;

/// Every delivery of this run's messages, counted per message, shared by the consumers of one run.
pub(super) struct Received {
    shards: Vec<Mutex<HashMap<u64, u32>>>,
    /// Distinct messages delivered so far, kept apart so that the drain can check it without the locks.
    unique: AtomicU64,
}

impl Received {
    pub(super) fn new() -> Self {
        Self {
            shards: (0..SHARDS).map(|_| Mutex::new(HashMap::new())).collect(),
            unique: AtomicU64::new(0),
        }
    }

    /// Notes one delivery; returns how many times the message had been delivered before.
    pub(super) fn record(&self, id: &BodyId) -> u32 {
        let key = id.key();
        let shard = &self.shards[(key as usize ^ (key >> 48) as usize) % SHARDS];
        let mut map = shard
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let count = map.entry(key).or_insert(0);
        let before = *count;
        *count += 1;
        if before == 0 {
            self.unique.fetch_add(1, Ordering::Relaxed);
        }
        before
    }

    /// Distinct messages delivered so far.
    pub(super) fn unique(&self) -> u64 {
        self.unique.load(Ordering::Relaxed)
    }

    /// Every message's delivery count, once the consumers are done.
    pub(super) fn take_all(&self) -> HashMap<u64, u32> {
        let mut received = HashMap::new();
        for shard in &self.shards {
            let mut map = shard.lock().unwrap_or_else(|p| p.into_inner());
            received.extend(map.drain());
        }
        received
    }
}

/// The final tally of a run.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Counts {
    /// Messages whose send was acknowledged.
    pub sent: u64,
    /// Messages in send requests that failed (the server may or may not have stored them).
    pub send_failed: u64,
    /// Distinct messages of this run received at least once.
    pub received: u64,
    /// Of those, messages whose send had failed (stored despite the error).
    pub received_unacknowledged: u64,
    /// Deliveries of this run's messages, counting every repeat.
    pub deliveries: u64,
    /// Messages whose delete was acknowledged.
    pub deleted: u64,
    /// Repeat deliveries when none was expected (deletes on, every delete succeeded within the visibility
    /// timeout): a broken at-least-once-with-visibility guarantee.
    pub duplicates: u64,
    /// Repeat deliveries that the configuration explains (no deletes, a short visibility timeout, failed or
    /// late deletes).
    pub redeliveries: u64,
    /// Acknowledged sends never received; `None` when the run did not drain (so it cannot tell).
    pub missing: Option<u64>,
    /// Received bodies that were not this run's (another run's leftovers, or not veil-bench's).
    pub foreign: u64,
    pub send_requests: u64,
    pub receive_requests: u64,
    pub empty_receives: u64,
    pub delete_requests: u64,
}

/// Counts derived from what was acknowledged and what was received, separated from the I/O so it is tested
/// on its own.
pub fn account(
    acked: &[Vec<u64>],
    received: &HashMap<u64, u32>,
    drained: bool,
    redelivery_expected: bool,
) -> Counts {
    let mut counts = Counts::default();
    let mut acked_received = 0u64;
    for (producer, seqs) in acked.iter().enumerate() {
        counts.sent += seqs.len() as u64;
        for &seq in seqs {
            let key = ((producer as u64) << 48) | (seq & 0xffff_ffff_ffff);
            if received.contains_key(&key) {
                acked_received += 1;
            }
        }
    }
    counts.received = received.len() as u64;
    counts.received_unacknowledged = counts.received - acked_received;
    counts.deliveries = received.values().map(|&n| u64::from(n)).sum();
    let repeats = counts.deliveries - counts.received;
    if redelivery_expected {
        counts.redeliveries = repeats;
    } else {
        counts.duplicates = repeats;
    }
    counts.missing = drained.then_some(counts.sent - acked_received);
    counts
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(producer: u64, seq: u64) -> u64 {
        (producer << 48) | seq
    }

    #[test]
    fn accounting_finds_missing_and_duplicates() {
        let acked = vec![vec![0, 1, 2], vec![0, 1]];
        // producer 0 seq 1 never arrives; producer 1 seq 0 arrives twice; producer 1 seq 5 was never acked.
        let received = HashMap::from([
            (key(0, 0), 1),
            (key(0, 2), 1),
            (key(1, 0), 2),
            (key(1, 1), 1),
            (key(1, 5), 1),
        ]);
        let counts = account(&acked, &received, true, false);
        assert_eq!(counts.sent, 5);
        assert_eq!(counts.received, 5);
        assert_eq!(counts.received_unacknowledged, 1);
        assert_eq!(counts.deliveries, 6);
        assert_eq!(counts.duplicates, 1);
        assert_eq!(counts.redeliveries, 0);
        assert_eq!(counts.missing, Some(1));
    }

    #[test]
    fn expected_repeats_are_redeliveries_and_undrained_runs_do_not_claim_missing() {
        let acked = vec![vec![0, 1]];
        let received = HashMap::from([(key(0, 0), 3)]);
        let counts = account(&acked, &received, false, true);
        assert_eq!(counts.duplicates, 0);
        assert_eq!(counts.redeliveries, 2);
        assert_eq!(counts.missing, None);
    }

    #[test]
    fn clean_run_has_nothing_missing() {
        let acked = vec![vec![0, 1], vec![0]];
        let received = HashMap::from([(key(0, 0), 1), (key(0, 1), 1), (key(1, 0), 1)]);
        let counts = account(&acked, &received, true, false);
        assert_eq!(
            (counts.missing, counts.duplicates, counts.received),
            (Some(0), 0, 3)
        );
    }
}
