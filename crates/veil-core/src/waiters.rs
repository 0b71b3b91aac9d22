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
//!
//! A waiter of a standard queue is also *parked* with what it asked for: a send that makes messages ready
//! delivers them to the oldest parked waiters itself, under the same lock, and its store changes carry those
//! deliveries, so one commit makes both the send and the receive durable (issue 28: a woken waiter used to
//! deliver under its own commit, queued behind the send's, two `fdatasync`s between a send and the answer to
//! the waiter). The delivery reaches the waiter through a one-shot slot after the commit was submitted; a
//! waiter whose slot closed (its receive went away) is skipped under the lock, before anything is delivered.

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use tokio::sync::futures::OwnedNotified;
use tokio::sync::{oneshot, Notify};

use crate::engine::HandOff;
use crate::model::ReceiveOptions;

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
    /// Waiters a send may deliver to directly, oldest first. An entry whose waiter went away (its slot
    /// closed) stays until a hand-off or a registration passes it; `register` keeps the list within twice
    /// the live waiters.
    parked: VecDeque<Parked>,
}

/// A waiting receive of a standard queue as a send sees it: what it asked for and where its delivery goes.
pub(crate) struct Parked {
    pub options: ReceiveOptions,
    pub max_messages: usize,
    /// Filled by the send that delivered to this waiter, after its commit was submitted.
    pub slot: oneshot::Sender<HandOff>,
}

impl Waiters {
    /// A waiter for the next wake-up; call under the lock of the attempt that found nothing.
    pub fn register(&self) -> Waiting {
        self.waiting_for(None)
    }

    /// A waiter for the next wake-up that a send may also deliver to directly ([`Waiters::take_parked`]);
    /// call under the lock of the attempt that found nothing, for a standard queue.
    pub fn park(&mut self, options: &ReceiveOptions, max_messages: usize) -> Waiting {
        let (slot, handed) = oneshot::channel();
        if self.parked.len() >= 2 * self.waiting().max(8) {
            self.parked.retain(|p| !p.slot.is_closed());
        }
        self.parked.push_back(Parked {
            options: options.clone(),
            max_messages,
            slot,
        });
        self.waiting_for(Some(handed))
    }

    /// The oldest parked waiter still waiting, taken out of the list.
    pub fn take_parked(&mut self) -> Option<Parked> {
        while let Some(parked) = self.parked.pop_front() {
            if !parked.slot.is_closed() {
                return Some(parked);
            }
        }
        None
    }

    /// Puts back a waiter [`Waiters::take_parked`] took and the send delivered nothing to, as the oldest.
    pub fn unpark(&mut self, parked: Parked) {
        self.parked.push_front(parked);
    }

    fn waiting_for(&self, handed: Option<oneshot::Receiver<HandOff>>) -> Waiting {
        let mut notified = Box::pin(self.notify.clone().notified_owned());
        // In the wait list now, not at its first poll: a `notify_one` between the lock's release and that
        // poll would otherwise be stored as one permit for however many waiters it was meant for.
        notified.as_mut().enable();
        self.waiting.fetch_add(1, Ordering::Relaxed);
        Waiting {
            notified,
            handed,
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

/// A registered waiter: resolves when woken, with the delivery a send handed it if it was parked. Dropping it
/// unresolved gives a wake it got to the next waiter.
pub(crate) struct Waiting {
    notified: Pin<Box<OwnedNotified>>,
    /// A parked waiter's slot. A sender dropped without a delivery (the queue deleted) is a plain wake: the
    /// waiter re-checks.
    handed: Option<oneshot::Receiver<HandOff>>,
    waiting: Arc<AtomicUsize>,
}

impl Waiting {
    /// Closes a parked waiter's slot and returns a delivery that reached it. A waiter that woke for another
    /// reason (its timer, a plain wake, shutdown) calls this before it is dropped: a send that chose it just
    /// then has either delivered already, and the delivery is served, or finds the slot closed and makes its
    /// messages visible again. Without it, a delivery could be dropped with the waiter and its messages stay
    /// hidden for a visibility timeout.
    pub fn close(&mut self) -> Option<HandOff> {
        let handed = self.handed.as_mut()?;
        handed.close();
        handed.try_recv().ok()
    }
}

impl Future for Waiting {
    type Output = Option<HandOff>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<HandOff>> {
        if let Some(handed) = self.handed.as_mut() {
            if let Poll::Ready(result) = Pin::new(handed).poll(cx) {
                self.handed = None;
                return Poll::Ready(result.ok());
            }
        }
        self.notified.as_mut().poll(cx).map(|()| None)
    }
}

impl Drop for Waiting {
    fn drop(&mut self) {
        self.waiting.fetch_sub(1, Ordering::Relaxed);
    }
}
