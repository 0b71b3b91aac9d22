//! Time as an interface. The engine decides visibility from a `now` it reads from a [`Clock`]; timers only
//! wake waiters (long polls) and never decide anything themselves. Tests drive a [`ManualClock`] so that no
//! test sleeps for a visibility timeout.

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
}

/// The wall clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
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
