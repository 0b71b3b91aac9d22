//! The engine lock, timed: how long operations wait for it and hold it, so that whether the one lock of
//! ADR 0002 bounds a machine with more cores is a measurement (`/metrics`, docs/decisions/0012-engine-lock-and-cores.md)
//! rather than a guess. A lock held for H of every second caps that engine at 1/H of its current rate, however many cores
//! serve the requests around it.
//!
//! Time comes through the clock port ([`Clock::ticks_ns`]), as every other time in this crate: the system
//! clock reads the monotonic clock, a manual clock reads zero (the engine tests measure nothing). The
//! figures only ever feed monitoring; no decision reads them.

use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::{Mutex, MutexGuard};

use crate::clock::Clock;
use crate::limits::ENGINE_LOCK_BUCKETS_NS;

/// A mutex whose every acquisition records its wait and its hold into [`LockTimes::process`].
pub(super) struct TimedMutex<T> {
    inner: Mutex<T>,
    clock: Arc<dyn Clock>,
}

impl<T> TimedMutex<T> {
    pub(super) fn new(value: T, clock: Arc<dyn Clock>) -> Self {
        Self {
            inner: Mutex::new(value),
            clock,
        }
    }

    pub(super) fn lock(&self) -> TimedGuard<'_, T> {
        let asked = self.clock.ticks_ns();
        let guard = self.inner.lock();
        let acquired = self.clock.ticks_ns();
        LockTimes::process()
            .wait
            .record(acquired.saturating_sub(asked));
        TimedGuard {
            guard,
            clock: self.clock.as_ref(),
            acquired,
        }
    }
}

/// Records the hold when dropped, after the critical section's last statement.
pub(super) struct TimedGuard<'a, T> {
    guard: MutexGuard<'a, T>,
    clock: &'a dyn Clock,
    acquired: u64,
}

impl<T> Drop for TimedGuard<'_, T> {
    fn drop(&mut self) {
        let held = self.clock.ticks_ns().saturating_sub(self.acquired);
        LockTimes::process().hold.record(held);
    }
}

impl<T> Deref for TimedGuard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.guard
    }
}

impl<T> DerefMut for TimedGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        &mut self.guard
    }
}

/// The engine locks' times in this process (every partition's engine adds to the same figures).
#[derive(Default)]
pub struct LockTimes {
    /// From asking for the lock to holding it.
    pub wait: DurationHistogram,
    /// From holding the lock to letting it go.
    pub hold: DurationHistogram,
}

impl LockTimes {
    pub fn process() -> &'static LockTimes {
        static TIMES: std::sync::OnceLock<LockTimes> = std::sync::OnceLock::new();
        TIMES.get_or_init(LockTimes::default)
    }
}

/// Counts of durations at most each of [`ENGINE_LOCK_BUCKETS_NS`] (not cumulative; the last slot counts what
/// is longer than every bound), their sum and their number. Relaxed atomics: a scrape may see one record's
/// count before its sum, which monitoring tolerates.
pub struct DurationHistogram {
    buckets: [AtomicU64; ENGINE_LOCK_BUCKETS_NS.len() + 1],
    sum_ns: AtomicU64,
}

impl Default for DurationHistogram {
    fn default() -> Self {
        Self {
            buckets: std::array::from_fn(|_| AtomicU64::new(0)),
            sum_ns: AtomicU64::new(0),
        }
    }
}

/// A copy of a [`DurationHistogram`] at one moment.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DurationCounts {
    /// Per bucket of [`ENGINE_LOCK_BUCKETS_NS`], then the overflow; not cumulative.
    pub buckets: Vec<u64>,
    pub sum_ns: u64,
}

impl DurationCounts {
    pub fn count(&self) -> u64 {
        self.buckets.iter().sum()
    }
}

impl DurationHistogram {
    fn record(&self, ns: u64) {
        let slot = ENGINE_LOCK_BUCKETS_NS
            .iter()
            .position(|bound| ns <= *bound)
            .unwrap_or(ENGINE_LOCK_BUCKETS_NS.len());
        self.buckets[slot].fetch_add(1, Ordering::Relaxed);
        self.sum_ns.fetch_add(ns, Ordering::Relaxed);
    }

    pub fn counts(&self) -> DurationCounts {
        DurationCounts {
            buckets: self
                .buckets
                .iter()
                .map(|b| b.load(Ordering::Relaxed))
                .collect(),
            sum_ns: self.sum_ns.load(Ordering::Relaxed),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_duration_counts_in_the_first_bucket_that_holds_it_and_past_the_last_in_the_overflow() {
        let histogram = DurationHistogram::default();
        histogram.record(0);
        histogram.record(ENGINE_LOCK_BUCKETS_NS[0]);
        histogram.record(ENGINE_LOCK_BUCKETS_NS[0] + 1);
        histogram.record(u64::MAX / 2);
        let counts = histogram.counts();
        assert_eq!(counts.buckets[0], 2);
        assert_eq!(counts.buckets[1], 1);
        assert_eq!(counts.buckets[ENGINE_LOCK_BUCKETS_NS.len()], 1);
        assert_eq!(counts.count(), 4);
        assert_eq!(
            counts.sum_ns,
            ENGINE_LOCK_BUCKETS_NS[0] * 2 + 1 + u64::MAX / 2
        );
    }
}
