//! The admission limit of one listener (docs/reliability.md "Load and overload", docs/security.md "Limits
//! against abuse"): at most `max_requests_in_flight` requests are worked on at once; one more waits at most
//! `admission_wait` for a slot and is then answered with the protocol's throttling error at once. Under
//! overload clients get an error they retry with back-off instead of a response that comes ever later, the
//! work queued inside the server stays bounded, and latency stays bounded by the limit over the throughput.
//!
//! A request takes its slot only once its body is read and its caller authenticated: the serve loop hands
//! the listener's [`Admission`] to the handler in the request's extensions and the handler calls [`admit`]
//! after authentication. A client that cannot authenticate — however slowly it sends its body — never holds
//! a slot an authenticated one needs (docs/security.md "Limits against abuse").
//!
//! A long poll gives its slot back when the engine parks it ([`Admitted::release`], called through
//! `veil_core::park`): waiting costs a connection, which `max_connections` bounds, not work.

use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::limits::Limits;

/// One listener's admission limit.
#[derive(Clone, Debug)]
pub struct Admission {
    /// `None`: no limit.
    slots: Option<Arc<Semaphore>>,
    wait: Duration,
}

/// A request's slot, held until the request is answered or released earlier; a request carries it in its
/// extensions.
#[derive(Clone, Debug, Default)]
pub struct Admitted(Arc<Mutex<Option<OwnedSemaphorePermit>>>);

impl Admitted {
    /// Gives the slot back before the request ends (a long poll that parks). Idempotent.
    pub fn release(&self) {
        self.0.lock().take();
    }
}

/// A request refused by its listener's admission limit: the handler answers with its protocol's throttling
/// error.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("the listener is working on as many requests as its admission limit allows")]
pub struct AdmissionRefused;

/// Enters the admission limit of the listener that served a request (its extensions carry the
/// [`Admission`]); a request that came through no listener (a router in a test) is admitted without a slot.
/// Called by a handler once the request's body is read and its caller authenticated.
pub async fn admit(extensions: &axum::http::Extensions) -> Result<Admitted, AdmissionRefused> {
    match extensions.get::<Admission>() {
        None => Ok(Admitted::default()),
        Some(admission) => admission.enter().await.ok_or(AdmissionRefused),
    }
}

impl Admission {
    pub fn new(limits: &Limits) -> Self {
        Self {
            slots: (limits.max_requests_in_flight > 0)
                .then(|| Arc::new(Semaphore::new(limits.max_requests_in_flight))),
            wait: limits.admission_wait,
        }
    }

    /// Admits every request (a service used without a listener, as in tests).
    pub fn unlimited() -> Self {
        Self {
            slots: None,
            wait: Duration::ZERO,
        }
    }

    /// A slot, waiting for one at most the admission wait; `None` when the request is to be refused.
    pub async fn enter(&self) -> Option<Admitted> {
        let Some(slots) = &self.slots else {
            return Some(Admitted::default());
        };
        let permit = match slots.clone().try_acquire_owned() {
            Ok(permit) => permit,
            Err(_) => match tokio::time::timeout(self.wait, slots.clone().acquire_owned()).await {
                Ok(Ok(permit)) => permit,
                // Timed out, or the semaphore closed (it never is).
                _ => return None,
            },
        };
        Some(Admitted(Arc::new(Mutex::new(Some(permit)))))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limited(max: usize, wait_ms: u64) -> Admission {
        Admission::new(&Limits {
            max_requests_in_flight: max,
            admission_wait: Duration::from_millis(wait_ms),
            ..Limits::default()
        })
    }

    #[tokio::test(start_paused = true)]
    async fn a_request_beyond_the_limit_waits_the_admission_wait_then_is_refused() {
        let admission = limited(2, 50);
        let _a = admission.enter().await.expect("first slot");
        let _b = admission.enter().await.expect("second slot");
        let started = tokio::time::Instant::now();
        assert!(admission.enter().await.is_none());
        assert_eq!(started.elapsed(), Duration::from_millis(50));
    }

    #[tokio::test(start_paused = true)]
    async fn a_released_slot_admits_a_waiting_request() {
        let admission = limited(1, 50);
        let parked = admission.enter().await.expect("slot");
        let waiting = tokio::spawn({
            let admission = admission.clone();
            async move { admission.enter().await.is_some() }
        });
        tokio::task::yield_now().await;
        parked.release();
        parked.release(); // idempotent
        assert!(waiting.await.expect("joined"));
    }

    #[tokio::test]
    async fn without_a_limit_every_request_is_admitted() {
        let admission = limited(0, 0);
        let held: Vec<_> = futures_held(&admission, 10_000).await;
        assert_eq!(held.len(), 10_000);
    }

    #[tokio::test(start_paused = true)]
    async fn a_request_is_admitted_through_the_admission_its_listener_gave_it() {
        let admission = limited(1, 10);
        let mut extensions = axum::http::Extensions::new();
        extensions.insert(admission.clone());
        let held = admit(&extensions).await.expect("the only slot");
        assert_eq!(admit(&extensions).await.err(), Some(AdmissionRefused));
        drop(held);
        assert!(admit(&extensions).await.is_ok());
    }

    #[tokio::test]
    async fn a_request_that_came_through_no_listener_is_admitted() {
        let extensions = axum::http::Extensions::new();
        for _ in 0..3 {
            assert!(admit(&extensions).await.is_ok());
        }
    }

    async fn futures_held(admission: &Admission, n: usize) -> Vec<Admitted> {
        let mut held = Vec::with_capacity(n);
        for _ in 0..n {
            held.push(admission.enter().await.expect("no limit"));
        }
        held
    }
}
