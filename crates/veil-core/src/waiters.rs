//! The long-polling receivers of one queue and the rule that wakes them (ARCHITECTURE.md, "Long polling"): a
//! change that makes k messages deliverable wakes about k waiters, oldest first, instead of all of them — with
//! thousands of idle long polls, waking every one for each send costs milliseconds of wasted re-checks.
//!
//! The index counts what became deliverable (`gained`: entries into the ready set, net of what left it in the
//! same operation, so a FIFO group's messages count once, as their head) and the engine calls [`Waiters::wake`]
//! under the lock when the operation ends. Two changes still wake every waiter: an earlier pending deadline
//! (each waiter sleeps until the earliest one it saw, so each must re-arm) and the queue's deletion or purge.
//! Timers never change the index: a waiter whose timer fires re-checks under the lock like any other.
//!
//! No wake-up is lost: a waiter registers under the lock of the attempt that found nothing, and is enabled
//! there (in tokio's wait list at once), so a wake after the lock is let go finds it. A woken waiter that
//! finds nothing (another consumer took the message) registers again before the lock is let go. A waiter
//! dropped after its wake arrived but before it ran (its timer fired too, the client went away) passes the
//! wake to the next waiter: tokio's `Notify` forwards a `notify_one` on drop.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use tokio::sync::futures::OwnedNotified;
use tokio::sync::Notify;

/// One queue's waiters and the wake-ups owed to them by the operation under way.
#[derive(Default)]
pub(crate) struct Waiters {
    notify: Arc<Notify>,
    /// Registered waiters not yet dropped; a bound on useful `notify_one`s.
    waiting: Arc<AtomicUsize>,
    /// Messages that became deliverable in the operation under way.
    gained: usize,
    /// The earliest pending deadline moved earlier in the operation under way.
    rearm: bool,
}

impl Waiters {
    /// A waiter for the next wake-up; call under the lock of the attempt that found nothing.
    pub fn register(&self) -> Waiting {
        let mut notified = Box::pin(self.notify.clone().notified_owned());
        // In the wait list now, not at its first poll: a `notify_one` between the lock's release and that
        // poll would otherwise be stored as one permit for however many waiters it was meant for.
        notified.as_mut().enable();
        self.waiting.fetch_add(1, Ordering::Relaxed);
        Waiting {
            notified,
            waiting: self.waiting.clone(),
        }
    }

    /// Long polls waiting on this queue now: the admin endpoint's `veil_queue_long_polls_waiting`.
    pub fn waiting(&self) -> usize {
        self.waiting.load(Ordering::Relaxed)
    }

    /// `n` messages became deliverable.
    pub fn gained(&mut self, n: usize) {
        self.gained = self.gained.saturating_add(n);
    }

    /// A deliverable message was taken (delivered, deleted, moved) in the same operation.
    pub fn lost(&mut self) {
        self.gained = self.gained.saturating_sub(1);
    }

    /// The earliest pending deadline moved earlier: every waiter must re-arm its timer.
    pub fn rearm(&mut self) {
        self.rearm = true;
    }

    /// Wakes the waiters the operation owes: every one after a `rearm`, else one per message gained (FIFO).
    /// Called under the lock when an operation on the queue ends.
    pub fn wake(&mut self) {
        if std::mem::take(&mut self.rearm) {
            self.gained = 0;
            self.notify.notify_waiters();
            return;
        }
        let wakes = std::mem::take(&mut self.gained).min(self.waiting.load(Ordering::Relaxed));
        for _ in 0..wakes {
            self.notify.notify_one();
        }
    }

    /// Wakes every waiter (queue deleted or purged): each re-checks and ends or re-arms.
    pub fn wake_all(&mut self) {
        self.gained = 0;
        self.rearm = false;
        self.notify.notify_waiters();
    }
}

/// A registered waiter: resolves when woken. Dropping it unresolved gives a wake it got to the next waiter.
pub(crate) struct Waiting {
    notified: Pin<Box<OwnedNotified>>,
    waiting: Arc<AtomicUsize>,
}

impl Future for Waiting {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        self.notified.as_mut().poll(cx)
    }
}

impl Drop for Waiting {
    fn drop(&mut self) {
        self.waiting.fetch_sub(1, Ordering::Relaxed);
    }
}
