//! Redrive: moving a dead-letter (poison) queue's messages back to the queues they came from, or to one
//! queue, with progress. It is the engine's message move task, the same one SQS's StartMessageMoveTask runs,
//! so Azure poison queues and KubeMQ dead-letter channels get it too.

use axum::extract::{Path, State};
use axum::Json;

use super::queues::{key_of, outcome};
use super::types::*;
use super::{audit, ApiError, ApiResult};
use crate::AdminState;

/// Starts a redrive of this queue's messages; 409 if one is already running. Without `to`, 400
/// `NotADeadLetterQueue` when the queue is no queue's dead-letter queue and its next message was not
/// dead-lettered: such a redrive would have nowhere to send it.
#[utoipa::path(post, path = "/api/v1/queues/{namespace}/{queue}/redrive", tag = "redrive",
    params(("namespace" = String, Path), ("queue" = String, Path)), request_body = RedriveRequest,
    responses((status = 200, body = Redrive), (status = 400, body = ErrorBody), (status = 404, body = ErrorBody),
        (status = 409, body = ErrorBody)))]
pub(crate) async fn start(
    State(state): State<AdminState>,
    Path((namespace, queue)): Path<(String, String)>,
    Json(request): Json<RedriveRequest>,
) -> ApiResult<Redrive> {
    let engine = &state.engine()?;
    let key = key_of(namespace, queue);
    engine.queue_info(&key).await?;
    let destination = request.to.as_ref().map(veil_core::QueueKey::from);
    if destination.is_none() {
        if let Err(refused) = has_an_origin(engine, &key).await {
            audit("redrive", &key, "NotADeadLetterQueue");
            return Err(refused);
        }
    }
    let result = engine
        .start_move_task(&key, destination.as_ref(), request.rate_per_s_max)
        .await;
    audit("redrive", &key, outcome(&result));
    Ok(Json(Redrive::from(result?)))
}

/// Whether a redrive back to where the messages came from can start: the queue is some queue's dead-letter
/// queue (its redrive policy names it), or its next message records the queue it was dead-lettered from (a
/// KubeMQ message's own policy, a queue's rule since removed). Otherwise the task would stop on its first
/// message with `origin_unknown`, so it is refused before it starts.
async fn has_an_origin(
    engine: &veil_core::Dispatch,
    key: &veil_core::QueueKey,
) -> Result<(), ApiError> {
    if !engine.dead_letter_sources(key).await?.is_empty() {
        return Ok(());
    }
    let next = engine.peek(key, 1).await?;
    let why = match next.first() {
        Some(message) if message.payload.dead_letter_source().is_some() => return Ok(()),
        Some(_) => "its next message was not dead-lettered from anywhere",
        None => "it holds no visible message",
    };
    Err(ApiError::NotADeadLetterQueue(format!(
        "{}/{} is no queue's dead-letter queue and {why}, so a redrive would not know where to send \
         its messages; name a target with \"to\" (veil redrive QUEUE --to TARGET)",
        key.namespace, key.name
    )))
}

/// This queue's redrives, most recent first, with their progress.
#[utoipa::path(get, path = "/api/v1/queues/{namespace}/{queue}/redrive", tag = "redrive",
    params(("namespace" = String, Path), ("queue" = String, Path)),
    responses((status = 200, body = RedriveList), (status = 404, body = ErrorBody)))]
pub(crate) async fn list(
    State(state): State<AdminState>,
    Path((namespace, queue)): Path<(String, String)>,
) -> ApiResult<RedriveList> {
    let engine = &state.engine()?;
    let key = key_of(namespace, queue);
    engine.queue_info(&key).await?;
    let redrives = engine
        .move_tasks(&key)
        .await?
        .into_iter()
        .map(Redrive::from)
        .collect();
    Ok(Json(RedriveList { redrives }))
}

/// Cancels a running redrive; what it moved stays moved.
#[utoipa::path(delete, path = "/api/v1/queues/{namespace}/{queue}/redrive/{task}", tag = "redrive",
    params(("namespace" = String, Path), ("queue" = String, Path), ("task" = String, Path)),
    responses((status = 200, body = Redrive), (status = 404, body = ErrorBody), (status = 409, body = ErrorBody)))]
pub(crate) async fn cancel(
    State(state): State<AdminState>,
    Path((namespace, queue, task)): Path<(String, String, String)>,
) -> ApiResult<Redrive> {
    let engine = &state.engine()?;
    let key = key_of(namespace, queue);
    let id = uuid::Uuid::parse_str(&task)
        .map_err(|_| ApiError::RedriveNotFound)?
        .into_bytes();
    let result = engine.cancel_move_task(&key, &id).await;
    audit("cancel_redrive", &key, outcome(&result));
    Ok(Json(Redrive::from(result?)))
}
