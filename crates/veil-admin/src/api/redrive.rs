//! Redrive: moving a dead-letter (poison) queue's messages back to the queues they came from, or to one
//! queue, with progress. It is the engine's message move task, the same one SQS's StartMessageMoveTask runs,
//! so Azure poison queues and KubeMQ dead-letter channels get it too.

use axum::extract::{Path, State};
use axum::Json;

use super::queues::{key_of, outcome};
use super::types::*;
use super::{audit, ApiError, ApiResult};
use crate::AdminState;

/// Starts a redrive of this queue's messages; 409 if one is already running.
#[utoipa::path(post, path = "/api/v1/queues/{namespace}/{queue}/redrive", tag = "redrive",
    params(("namespace" = String, Path), ("queue" = String, Path)), request_body = RedriveRequest,
    responses((status = 200, body = Redrive), (status = 404, body = ErrorBody), (status = 409, body = ErrorBody)))]
pub(crate) async fn start(
    State(state): State<AdminState>,
    Path((namespace, queue)): Path<(String, String)>,
    Json(request): Json<RedriveRequest>,
) -> ApiResult<Redrive> {
    let engine = &state.engine()?;
    let key = key_of(namespace, queue);
    engine.queue_info(&key).await?;
    let destination = request.to.as_ref().map(veil_core::QueueKey::from);
    let result = engine
        .start_move_task(&key, destination.as_ref(), request.rate_per_s_max)
        .await;
    audit("redrive", &key, outcome(&result));
    Ok(Json(Redrive::from(result?)))
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
