//! The test-only clock control of docs/testing.md "Test clock": `POST /api/v1/test/clock/advance` moves
//! the server's clock forward, so that an end-to-end test sees a visibility timeout or a retention period
//! lapse without sleeping through it. Routed only when the server runs with `--unsafe-test-clock`; absent
//! from the OpenAPI document.

use axum::extract::State;
use axum::routing::post;
use axum::{Json, Router};
use serde::{Deserialize, Serialize};
use std::time::Duration;
use veil_core::Clock;

use super::{ApiError, ApiResult};
use crate::AdminState;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct AdvanceRequest {
    /// How far to move the clock forward, in milliseconds.
    by_ms: u64,
}

#[derive(Serialize)]
pub(crate) struct ClockReading {
    /// The server's clock after the advance, in Unix milliseconds.
    now_ms: u64,
    /// How far the server's clock is ahead of the wall clock, in milliseconds.
    offset_ms: u64,
}

pub(crate) fn routes() -> Router<AdminState> {
    Router::new().route("/test/clock/advance", post(advance))
}

/// Moves the clock, then runs the expiry sweep and a move-task step before answering, so that whatever the
/// new time expires or allows has happened when the test reads it. Long-poll waiters wake on the clock itself.
async fn advance(
    State(state): State<AdminState>,
    Json(request): Json<AdvanceRequest>,
) -> ApiResult<ClockReading> {
    let clock = state.test_clock.clone().ok_or(ApiError::Starting)?;
    // The test clock is a single node's: its engine is this process's own.
    let engine = state.engine()?.local().cloned().ok_or(ApiError::Starting)?;
    clock.advance(Duration::from_millis(request.by_ms));
    engine.sweep();
    engine.drive_move_tasks().await?;
    Ok(Json(ClockReading {
        now_ms: clock.now(),
        offset_ms: u64::try_from(clock.offset().as_millis()).unwrap_or(u64::MAX),
    }))
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use axum::body::Body;
    use axum::http::{Request, StatusCode};
    use tower::ServiceExt;
    use veil_core::memory_store::MemoryStore;
    use veil_core::{Engine, OffsetClock, ReceiptKey};

    use crate::{router, AdminState, EngineSlot, Readiness, Registry, Series};

    fn state(clock: &OffsetClock) -> AdminState {
        let engine = Engine::open(
            Arc::new(MemoryStore::new()),
            Arc::new(clock.clone()),
            ReceiptKey::new([7; 32]),
        )
        .expect("engine opens over an empty store");
        let slot = EngineSlot::default();
        *slot.write() = Some(Arc::new(engine).into());
        AdminState::new(
            slot,
            Registry::default(),
            Readiness::default(),
            Series::default(),
        )
    }

    async fn advance(state: AdminState, by_ms: u64) -> StatusCode {
        let request = Request::post("/api/v1/test/clock/advance")
            .header("host", "127.0.0.1:9325")
            .header("content-type", "application/json")
            .body(Body::from(format!("{{\"by_ms\":{by_ms}}}")))
            .expect("request");
        let response = router(state).oneshot(request).await.expect("answer");
        response.status()
    }

    #[tokio::test]
    async fn the_clock_advance_route_exists_only_with_the_test_clock() {
        let clock = OffsetClock::new();
        assert_eq!(advance(state(&clock), 5_000).await, StatusCode::NOT_FOUND);
        assert_eq!(clock.offset(), std::time::Duration::ZERO);
        let with_clock = state(&clock).with_test_clock(Some(clock.clone()));
        assert_eq!(advance(with_clock, 5_000).await, StatusCode::OK);
        assert_eq!(clock.offset(), std::time::Duration::from_secs(5));
    }
}
