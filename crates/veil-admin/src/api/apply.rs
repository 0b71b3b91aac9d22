//! `POST /api/v1/queues/apply`: a list of declared queues applied to the running server (`veil queues apply`),
//! or, with `dry_run`, only what applying would change (crate::declare).

use axum::extract::State;
use axum::Json;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::types::ErrorBody;
use super::{audit, ApiError, ApiResult};
use crate::declare::{self, Change, ChangeAction, QueueDeclaration};
use crate::AdminState;

#[derive(Debug, Deserialize, ToSchema)]
pub struct ApplyRequest {
    pub queues: Vec<QueueDeclaration>,
    /// Say what would change and change nothing.
    #[serde(default)]
    pub dry_run: bool,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct Applied {
    pub dry_run: bool,
    /// One per declared queue, in the list's order.
    pub changes: Vec<Change>,
}

/// Creates the queues of the list that are missing and brings the others to its settings, tags, metadata
/// and dead-letter rules; deletes nothing. 400 with the entry named when the list cannot be applied, in which
/// case nothing changed.
#[utoipa::path(post, path = "/api/v1/queues/apply", request_body = ApplyRequest, tag = "queues",
    responses((status = 200, body = Applied), (status = 400, body = ErrorBody)))]
pub(crate) async fn apply(
    State(state): State<AdminState>,
    Json(request): Json<ApplyRequest>,
) -> ApiResult<Applied> {
    let engine = &state.engine()?;
    let changes = declare::apply(engine, &request.queues, request.dry_run)
        .await
        .map_err(|error| ApiError::InvalidArgument(error.to_string()))?;
    if !request.dry_run {
        for (declaration, change) in request.queues.iter().zip(&changes) {
            if change.action != ChangeAction::Unchanged {
                audit("apply_queue", &declaration.key(), "ok");
            }
        }
    }
    Ok(Json(Applied {
        dry_run: request.dry_run,
        changes,
    }))
}
