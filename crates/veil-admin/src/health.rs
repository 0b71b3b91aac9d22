//! The probes: `/healthz` answers 200 while the process serves HTTP at all; `/readyz` answers 200 only while
//! the store is open and every listener is bound, and 503 while starting and once a graceful stop began, so
//! that Kubernetes sends traffic only to a node that can serve it.

use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;
use axum::Router;
use tokio::sync::watch;

use crate::AdminState;

/// Where the server is in its life, as the readiness probe reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    Starting,
    Ready,
    Stopping,
}

/// The server's phase, set by the server and read by `/readyz`. A watch channel because one writer (the
/// server's start and stop sequence) and many readers (probe requests) share it without a lock.
#[derive(Clone)]
pub struct Readiness {
    phase: watch::Sender<Phase>,
}

impl Default for Readiness {
    fn default() -> Self {
        Self {
            phase: watch::Sender::new(Phase::Starting),
        }
    }
}

impl Readiness {
    pub fn set(&self, phase: Phase) {
        self.phase.send_replace(phase);
    }

    pub fn phase(&self) -> Phase {
        *self.phase.borrow()
    }
}

pub(crate) fn routes() -> Router<AdminState> {
    Router::new()
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz))
}

async fn readyz(State(state): State<AdminState>) -> (StatusCode, &'static str) {
    match state.readiness.phase() {
        Phase::Ready => (StatusCode::OK, "ready\n"),
        Phase::Starting => (StatusCode::SERVICE_UNAVAILABLE, "starting\n"),
        Phase::Stopping => (StatusCode::SERVICE_UNAVAILABLE, "stopping\n"),
    }
}
