//! Time as an interface. The engine decides visibility from a `now` it reads from a [`Clock`]; timers only
//! wake waiters (long polls) and never decide anything themselves. Tests drive a [`ManualClock`] so that no
//! test sleeps for a visibility timeout; end-to-end tests run the server on an [`OffsetClock`] (the
//! test-only setting of docs/testing.md "Test clock") for the same reason.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::sync::watch;

/// Milliseconds since the Unix epoch. Every time in the engine is one of these.
pub type Millis = u64;

/// A boxed future returned by [`Clock::sleep_until`].
pub type Sleep = Pin<Box<dyn Future<Output = ()> + Send>>;

/// The one source of time for the engine.
pub trait Clock: Send + Sync + 'static {
    /// The current time.
    fn now(&self) -> Millis;
    /// Completes once `now() >= deadline` (or soon after). Used only to wake long-polling waiters.
    fn sleep_until(&self, deadline: Millis) -> Sleep;
    /// Monotonic nanoseconds since an arbitrary start, for measuring how long something took (monitoring
    /// only: no rule reads it). A clock that does not measure returns 0.
    fn ticks_ns(&self) -> u64 {
        0
    }
}

/// The wall clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn ticks_ns(&self) -> u64 {
        static START: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
        START
            .get_or_init(std::time::Instant::now)
            .elapsed()
            .as_nanos() as u64
    }

    fn now(&self) -> Millis {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis() as Millis)
            .unwrap_or(0)
    }

    fn sleep_until(&self, deadline: Millis) -> Sleep {
        let wait_ms = deadline.saturating_sub(self.now());
        Box::pin(tokio::time::sleep(Duration::from_millis(wait_ms)))
    }
}

/// A clock that moves only when a test tells it to. Sleepers wake when `advance`/`set` passes their deadline.
#[derive(Debug, Clone)]
pub struct ManualClock {
    /// The current time; a watch channel so that sleepers are woken by every change.
    now: Arc<watch::Sender<Millis>>,
}

impl ManualClock {
    pub fn new(start: Millis) -> Self {
        let (tx, _rx) = watch::channel(start);
        Self { now: Arc::new(tx) }
    }

    pub fn advance(&self, by: Duration) {
        self.now.send_modify(|t| *t += by.as_millis() as Millis);
    }

    pub fn advance_ms(&self, by_ms: Millis) {
        self.now.send_modify(|t| *t += by_ms);
    }

    pub fn set(&self, to: Millis) {
        self.now.send_modify(|t| *t = to);
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Millis {
        *self.now.borrow()
    }

    fn sleep_until(&self, deadline: Millis) -> Sleep {
        let mut rx = self.now.subscribe();
        Box::pin(async move {
            // An error means the clock was dropped: nothing will ever advance it, so sleep forever like time
            // that stopped.
            if rx.wait_for(|t| *t >= deadline).await.is_err() {
                std::future::pending::<()>().await;
            }
        })
    }
}

/// The wall clock plus an offset that only grows: the server's clock under the test-only setting of
/// docs/testing.md "Test clock", so that an end-to-end test moves time past a visibility timeout or a
/// retention period instead of sleeping through it. Never used in production: moving time forward expires
/// leases and messages early.
#[derive(Debug, Clone, Default)]
pub struct OffsetClock {
    /// How far this clock is ahead of the wall clock, in milliseconds; a watch channel so that sleepers
    /// re-check their deadline the moment it grows.
    offset_ms: Arc<watch::Sender<Millis>>,
}

impl OffsetClock {
    /// A clock reading the wall clock (offset zero).
    pub fn new() -> Self {
        Self::default()
    }

    /// Moves this clock forward by `by`, waking every sleeper whose deadline it passes.
    pub fn advance(&self, by: Duration) {
        let by_ms = Millis::try_from(by.as_millis()).unwrap_or(Millis::MAX);
        self.offset_ms.send_modify(|t| *t = t.saturating_add(by_ms));
    }

    /// How far this clock is ahead of the wall clock.
    pub fn offset(&self) -> Duration {
        Duration::from_millis(*self.offset_ms.borrow())
    }
}

impl Clock for OffsetClock {
    fn ticks_ns(&self) -> u64 {
        SystemClock.ticks_ns()
    }

    fn now(&self) -> Millis {
        SystemClock.now().saturating_add(*self.offset_ms.borrow())
    }

    fn sleep_until(&self, deadline: Millis) -> Sleep {
        let clock = self.clone();
        let mut changed = self.offset_ms.subscribe();
        Box::pin(async move {
            loop {
                let wait_ms = deadline.saturating_sub(clock.now());
                if wait_ms == 0 {
                    return;
                }
                // Either the wall clock reaches the deadline or an advance may have; both are re-checked. The
                // sender lives in `clock`, so `changed` cannot fail while this future holds it.
                let _ =
                    tokio::time::timeout(Duration::from_millis(wait_ms), changed.changed()).await;
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_offset_clock_reads_the_wall_clock_plus_what_it_was_advanced() {
        let clock = OffsetClock::new();
        let before = SystemClock.now();
        clock.advance(Duration::from_secs(3_600));
        let read = clock.now();
        let after = SystemClock.now();
        assert!((before + 3_600_000..=after + 3_600_000).contains(&read));
        assert_eq!(clock.offset(), Duration::from_secs(3_600));
    }

    #[tokio::test]
    async fn advancing_an_offset_clock_wakes_a_sleeper_whose_deadline_it_passes() {
        let clock = OffsetClock::new();
        let deadline = clock.now() + 3_600_000;
        let sleeper = tokio::spawn(clock.sleep_until(deadline));
        tokio::task::yield_now().await;
        assert!(!sleeper.is_finished(), "an hour has not passed");
        clock.advance(Duration::from_secs(3_600));
        // The guard only keeps a broken wake-up from hanging the test: the sleeper's deadline is an hour away.
        let woken = tokio::time::timeout(Duration::from_secs(30), sleeper).await;
        assert!(matches!(woken, Ok(Ok(()))));
    }
}
