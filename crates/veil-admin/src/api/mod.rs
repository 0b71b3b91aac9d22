//! The JSON admin API under `/api/v1`: protocol-neutral operations over the engine, by resource (queues,
//! messages, redrives). Reads never change state: a peek or browse issues no receipt and counts no receive.
//! Destructive operations write one line on the `veil::audit` tracing target. The OpenAPI document is
//! generated from these handlers' annotations and served at `/api/v1/openapi.json`.

mod apply;
mod messages;
mod queues;
mod redrive;
pub(crate) mod test_clock;
pub mod types;

pub(crate) use queues::apply_settings;

use axum::extract::DefaultBodyLimit;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use utoipa::OpenApi;
use veil_core::{EngineError, MoveTaskError};

use crate::{limits, AdminState};
use types::{ErrorBody, ErrorDetail};

#[derive(OpenApi)]
#[openapi(
    info(
        title = "Veil admin API",
        description = "Protocol-neutral operations over every queue of a Veil server, whatever protocol \
                       made it. Peeks and browses change nothing."
    ),
    paths(
        queues::list,
        queues::create,
        queues::detail,
        queues::update,
        queues::delete,
        queues::purge,
        queues::series,
        messages::browse,
        messages::send,
        messages::receive,
        messages::get_one,
        messages::delete_one,
        messages::ack,
        messages::visibility,
        messages::history,
        redrive::start,
        redrive::list,
        redrive::cancel,
        apply::apply,
    )
)]
pub struct ApiDoc;

pub(crate) fn routes() -> Router<AdminState> {
    let queue = "/queues/{namespace}/{queue}";
    Router::new()
        .route("/openapi.json", get(|| async { Json(ApiDoc::openapi()) }))
        .route("/queues", get(queues::list).post(queues::create))
        .route("/queues/apply", post(apply::apply))
        .route(
            queue,
            get(queues::detail)
                .patch(queues::update)
                .delete(queues::delete),
        )
        .route(&format!("{queue}/purge"), post(queues::purge))
        .route(&format!("{queue}/series"), get(queues::series))
        .route(
            &format!("{queue}/messages"),
            get(messages::browse).post(messages::send),
        )
        .route(
            &format!("{queue}/messages/receive"),
            post(messages::receive),
        )
        .route(&format!("{queue}/messages/ack"), post(messages::ack))
        .route(
            &format!("{queue}/messages/{{message}}/history"),
            get(messages::history),
        )
        .route(
            &format!("{queue}/messages/visibility"),
            post(messages::visibility),
        )
        .route(
            &format!("{queue}/messages/{{message}}"),
            get(messages::get_one).delete(messages::delete_one),
        )
        .route(
            &format!("{queue}/redrive"),
            get(redrive::list).post(redrive::start),
        )
        .route(
            &format!("{queue}/redrive/{{task}}"),
            axum::routing::delete(redrive::cancel),
        )
        .layer(DefaultBodyLimit::max(limits::REQUEST_BODY_BYTES_MAX))
}

/// Why an admin request failed; each maps to one status and a stable `code`.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error("the server is starting: the store is not open yet")]
    Starting,
    #[error("queue {namespace}/{name} does not exist")]
    QueueNotFound { namespace: String, name: String },
    #[error("queue {0} already exists")]
    QueueExists(String),
    #[error("no message {0} in this queue")]
    MessageNotFound(String),
    #[error("{0}")]
    InvalidArgument(String),
    #[error("to purge, repeat the queue's name in \"confirm\" (got {0:?})")]
    ConfirmationMismatch(String),
    #[error("the receipt is not valid for this queue's current delivery of the message")]
    ReceiptInvalid,
    #[error("{0}")]
    OverLimit(String),
    #[error("the queue already has a running redrive")]
    RedriveRunning,
    #[error("the redrive is not running")]
    RedriveNotRunning,
    #[error("no such redrive")]
    RedriveNotFound,
    #[error("{0}")]
    NotADeadLetterQueue(String),
    #[error("storage failed: {0}")]
    Store(String),
    #[error("this endpoint requires the admin token: Authorization: Bearer <token>")]
    Unauthorized,
    #[error("without an admin token this endpoint answers only requests to a loopback host (localhost, 127.0.0.1, [::1]) or one listed in admin_allowed_hosts")]
    HostNotAllowed,
    #[error("this admin endpoint has no token, so its API and /metrics answer only connections from its own loopback; set an admin token (VEIL_ADMIN_TOKEN) to reach them from elsewhere")]
    LoopbackOnly,
    #[error(
        "the admin endpoint is working on as many requests as its admission limit allows; retry"
    )]
    Throttled,
}

impl ApiError {
    fn status_and_code(&self) -> (StatusCode, &'static str) {
        use ApiError::*;
        match self {
            Starting => (StatusCode::SERVICE_UNAVAILABLE, "Starting"),
            QueueNotFound { .. } => (StatusCode::NOT_FOUND, "QueueNotFound"),
            QueueExists(_) => (StatusCode::CONFLICT, "QueueExists"),
            MessageNotFound(_) => (StatusCode::NOT_FOUND, "MessageNotFound"),
            InvalidArgument(_) => (StatusCode::BAD_REQUEST, "InvalidArgument"),
            ConfirmationMismatch(_) => (StatusCode::BAD_REQUEST, "ConfirmationMismatch"),
            ReceiptInvalid => (StatusCode::BAD_REQUEST, "ReceiptInvalid"),
            OverLimit(_) => (StatusCode::CONFLICT, "OverLimit"),
            RedriveRunning => (StatusCode::CONFLICT, "RedriveRunning"),
            RedriveNotRunning => (StatusCode::CONFLICT, "RedriveNotRunning"),
            RedriveNotFound => (StatusCode::NOT_FOUND, "RedriveNotFound"),
            NotADeadLetterQueue(_) => (StatusCode::BAD_REQUEST, "NotADeadLetterQueue"),
            Store(_) => (StatusCode::INTERNAL_SERVER_ERROR, "StoreFailed"),
            Unauthorized => (StatusCode::UNAUTHORIZED, "Unauthorized"),
            HostNotAllowed => (StatusCode::FORBIDDEN, "HostNotAllowed"),
            LoopbackOnly => (StatusCode::FORBIDDEN, "LoopbackOnly"),
            Throttled => (StatusCode::TOO_MANY_REQUESTS, "Throttled"),
        }
    }
}

impl From<EngineError> for ApiError {
    fn from(error: EngineError) -> Self {
        match error {
            EngineError::QueueNotFound(key) => ApiError::QueueNotFound {
                namespace: key.namespace,
                name: key.name,
            },
            EngineError::ReceiptInvalid
            | EngineError::ReceiptOfAnotherQueue
            | EngineError::MessageNotAvailable
            | EngineError::ReceiptExpired => ApiError::ReceiptInvalid,
            EngineError::OverLimit { .. } => ApiError::OverLimit(error.to_string()),
            EngineError::MessageTooLarge {
                size_bytes,
                max_bytes,
            } => ApiError::InvalidArgument(format!(
                "the message is {size_bytes} bytes; this queue takes at most {max_bytes}"
            )),
            // The store's own words go to the log, never to the client (docs/security.md "Errors that
            // say nothing inside").
            EngineError::Store(_) => ApiError::Store(crate::engine_error_text(&error)),
            other => ApiError::InvalidArgument(other.to_string()),
        }
    }
}

impl From<MoveTaskError> for ApiError {
    fn from(error: MoveTaskError) -> Self {
        match error {
            MoveTaskError::AlreadyRunning => ApiError::RedriveRunning,
            MoveTaskError::NotRunning => ApiError::RedriveNotRunning,
            MoveTaskError::TaskNotFound => ApiError::RedriveNotFound,
            MoveTaskError::Engine(engine) => engine.into(),
            other => ApiError::InvalidArgument(other.to_string()),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let (status, code) = self.status_and_code();
        let body = ErrorBody {
            error: ErrorDetail {
                code: code.to_owned(),
                message: self.to_string(),
            },
        };
        (status, Json(body)).into_response()
    }
}

pub(crate) type ApiResult<T> = Result<Json<T>, ApiError>;

/// One line on the audit log for an operator's destructive or settings-changing request; its identity is
/// `admin` when the endpoint has a token (the caller proved it), else empty.
pub(crate) fn audit(action: &str, key: &veil_core::QueueKey, outcome: &str) {
    veil_telemetry::audit::record(&veil_telemetry::audit::AuditEvent {
        action,
        protocol: veil_telemetry::Protocol::Admin,
        namespace: &key.namespace,
        queue: &key.name,
        identity: crate::auth::identity(),
        client: "",
        outcome,
    });
}
