//! Queues: list across namespaces and protocols with counts, create, detail and settings, delete, purge
//! (confirmed by repeating the name) and the last hour's counts.

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::Json;
use serde::Deserialize;
use utoipa::IntoParams;
use veil_core::{CreateOutcome, QueueConfig, QueueKey, CREATED_BY_SETTING, DEFAULT_NAMESPACE};

use super::types::*;
use super::{audit, ApiError, ApiResult};
use crate::AdminState;

#[derive(Debug, Deserialize, IntoParams)]
pub(crate) struct ListParams {
    /// Only this namespace.
    namespace: Option<String>,
    /// Only names starting with this.
    prefix: Option<String>,
}

/// The queue a path names.
pub(crate) fn key_of(namespace: String, queue: String) -> QueueKey {
    QueueKey::new(namespace, queue)
}

/// Every queue of every protocol, ordered by namespace and name, with its counts.
#[utoipa::path(get, path = "/api/v1/queues", params(ListParams), tag = "queues",
    responses((status = 200, body = QueueList)))]
pub(crate) async fn list(
    State(state): State<AdminState>,
    Query(params): Query<ListParams>,
) -> ApiResult<QueueList> {
    let engine = &state.engine()?;
    let queues = engine
        .overview()
        .await?
        .iter()
        .filter(|q| {
            params
                .namespace
                .as_ref()
                .is_none_or(|ns| &q.key.namespace == ns)
        })
        .filter(|q| {
            params
                .prefix
                .as_ref()
                .is_none_or(|p| q.key.name.starts_with(p))
        })
        .map(QueueSummary::from)
        .collect();
    Ok(Json(QueueList { queues }))
}

/// Creates a queue with the engine's defaults and the settings given (409 if the name is taken).
#[utoipa::path(post, path = "/api/v1/queues", request_body = CreateQueue, tag = "queues",
    responses((status = 201, body = QueueDetail), (status = 409, body = ErrorBody)))]
pub(crate) async fn create(
    State(state): State<AdminState>,
    Json(request): Json<CreateQueue>,
) -> Result<(StatusCode, Json<QueueDetail>), ApiError> {
    let engine = &state.engine()?;
    let namespace = request
        .namespace
        .unwrap_or_else(|| DEFAULT_NAMESPACE.to_owned());
    let key = QueueKey::new(namespace, request.name);
    if let Some(reason) = crate::names::refusal(&key) {
        return Err(ApiError::InvalidArgument(reason));
    }
    let mut config = QueueConfig::default();
    if request.fifo {
        config.fifo = Some(Default::default());
    }
    apply_settings(&mut config, &request.settings)?;
    config
        .protocol_settings
        .insert(CREATED_BY_SETTING.into(), "admin".into());
    match engine.create_queue(key.clone(), config).await? {
        CreateOutcome::Created(_) => {
            audit("create_queue", &key, "ok");
            Ok((StatusCode::CREATED, detail_of(&state, &key).await?))
        }
        CreateOutcome::Existing(_) => Err(ApiError::QueueExists(format!(
            "{}/{}",
            key.namespace, key.name
        ))),
    }
}

/// Applies the settings given, checked against the engine's ranges.
pub(crate) fn apply_settings(
    config: &mut QueueConfig,
    settings: &QueueSettings,
) -> Result<(), ApiError> {
    use veil_core::limits::{RECEIVE_WAIT_MS_MAX, VISIBILITY_TIMEOUT_MS_MAX};
    let ms = |s: u64| s.saturating_mul(1000);
    if let Some(s) = settings.visibility_timeout_s {
        if ms(s) > VISIBILITY_TIMEOUT_MS_MAX {
            return Err(ApiError::InvalidArgument(format!(
                "visibility_timeout_s must be at most {}",
                VISIBILITY_TIMEOUT_MS_MAX / 1000
            )));
        }
        config.visibility_timeout_ms = ms(s);
    }
    if let Some(s) = settings.delay_s {
        if ms(s) > VISIBILITY_TIMEOUT_MS_MAX {
            return Err(ApiError::InvalidArgument(format!(
                "delay_s must be at most {}",
                VISIBILITY_TIMEOUT_MS_MAX / 1000
            )));
        }
        config.delay_ms = ms(s);
    }
    if let Some(s) = settings.receive_wait_s {
        if ms(s) > RECEIVE_WAIT_MS_MAX {
            return Err(ApiError::InvalidArgument(format!(
                "receive_wait_s must be at most {}",
                RECEIVE_WAIT_MS_MAX / 1000
            )));
        }
        config.receive_wait_ms = ms(s);
    }
    if let Some(s) = settings.retention_s {
        if s == 0 || s > crate::limits::RETENTION_S_MAX {
            return Err(ApiError::InvalidArgument(format!(
                "retention_s must be from 1 to {}",
                crate::limits::RETENTION_S_MAX
            )));
        }
        config.retention_ms = Some(ms(s));
    }
    if let Some(bytes) = settings.message_size_bytes_max {
        if bytes == 0 {
            return Err(ApiError::InvalidArgument(
                "message_size_bytes_max must be at least 1".into(),
            ));
        }
        config.message_size_bytes_max = bytes;
    }
    if let Some(max) = settings.inflight_max {
        config.inflight_max = max;
    }
    if let Some(on) = settings.delivery_history {
        config.delivery_history = on;
    }
    Ok(())
}

async fn detail_of(state: &AdminState, key: &QueueKey) -> Result<Json<QueueDetail>, ApiError> {
    let engine = &state.engine()?;
    let info = engine.queue_info(key).await?;
    let overview = engine.overview_of(key).await?;
    let sources = engine
        .dead_letter_sources(key)
        .await?
        .iter()
        .map(QueueRef::from)
        .collect();
    Ok(Json(QueueDetail::new(
        &info,
        QueueSummary::from(&overview),
        sources,
    )))
}

/// A queue's counts, settings, dead-letter rule and sources, totals, tags and metadata.
#[utoipa::path(get, path = "/api/v1/queues/{namespace}/{queue}", tag = "queues",
    params(("namespace" = String, Path), ("queue" = String, Path)),
    responses((status = 200, body = QueueDetail), (status = 404, body = ErrorBody)))]
pub(crate) async fn detail(
    State(state): State<AdminState>,
    Path((namespace, queue)): Path<(String, String)>,
) -> ApiResult<QueueDetail> {
    detail_of(&state, &key_of(namespace, queue)).await
}

/// Changes the settings given and leaves the others.
#[utoipa::path(patch, path = "/api/v1/queues/{namespace}/{queue}", tag = "queues",
    params(("namespace" = String, Path), ("queue" = String, Path)), request_body = QueueSettings,
    responses((status = 200, body = QueueDetail), (status = 404, body = ErrorBody)))]
pub(crate) async fn update(
    State(state): State<AdminState>,
    Path((namespace, queue)): Path<(String, String)>,
    Json(settings): Json<QueueSettings>,
) -> ApiResult<QueueDetail> {
    let engine = &state.engine()?;
    let key = key_of(namespace, queue);
    // Checked first for a precise error, then applied to the queue's settings as they are at the change.
    apply_settings(&mut engine.queue_info(&key).await?.config, &settings)?;
    engine
        .update_queue_config(&key, |config| {
            apply_settings(config, &settings)
                .map_err(|e| veil_core::EngineError::InvalidArgument(e.to_string()))
        })
        .await?;
    audit("set_queue_settings", &key, "ok");
    detail_of(&state, &key).await
}

/// Deletes the queue and every message in it.
#[utoipa::path(delete, path = "/api/v1/queues/{namespace}/{queue}", tag = "queues",
    params(("namespace" = String, Path), ("queue" = String, Path)),
    responses((status = 200, body = Deleted), (status = 404, body = ErrorBody)))]
pub(crate) async fn delete(
    State(state): State<AdminState>,
    Path((namespace, queue)): Path<(String, String)>,
) -> ApiResult<Deleted> {
    let engine = &state.engine()?;
    let key = key_of(namespace, queue);
    let result = engine.delete_queue(&key).await;
    audit("delete_queue", &key, outcome(&result));
    result?;
    Ok(Json(Deleted { deleted: true }))
}

pub(crate) fn outcome<T, E>(result: &Result<T, E>) -> &'static str
where
    for<'a> &'a E: Into<ApiErrorCode>,
{
    match result {
        Ok(_) => "ok",
        Err(error) => error.into().0,
    }
}

/// An error's stable code, for the audit line.
pub(crate) struct ApiErrorCode(pub &'static str);

impl From<&veil_core::EngineError> for ApiErrorCode {
    fn from(error: &veil_core::EngineError) -> Self {
        ApiErrorCode(match error {
            veil_core::EngineError::QueueNotFound(_) => "QueueNotFound",
            veil_core::EngineError::Store(_) => "StoreFailed",
            _ => "InvalidArgument",
        })
    }
}

impl From<&veil_core::MoveTaskError> for ApiErrorCode {
    fn from(error: &veil_core::MoveTaskError) -> Self {
        use veil_core::MoveTaskError::*;
        ApiErrorCode(match error {
            SourceNotFound => "QueueNotFound",
            AlreadyRunning => "RedriveRunning",
            NotRunning => "RedriveNotRunning",
            TaskNotFound => "RedriveNotFound",
            Engine(_) => "StoreFailed",
            _ => "InvalidArgument",
        })
    }
}

/// Deletes every message of the queue. `confirm` must repeat the queue's name.
#[utoipa::path(post, path = "/api/v1/queues/{namespace}/{queue}/purge", tag = "queues",
    params(("namespace" = String, Path), ("queue" = String, Path)), request_body = PurgeRequest,
    responses((status = 200, body = Purged), (status = 400, body = ErrorBody), (status = 404, body = ErrorBody)))]
pub(crate) async fn purge(
    State(state): State<AdminState>,
    Path((namespace, queue)): Path<(String, String)>,
    Json(request): Json<PurgeRequest>,
) -> ApiResult<Purged> {
    let engine = &state.engine()?;
    let key = key_of(namespace, queue);
    if request.confirm != key.name {
        audit("purge", &key, "ConfirmationMismatch");
        return Err(ApiError::ConfirmationMismatch(request.confirm));
    }
    let result = engine.purge(&key, None).await;
    audit("purge", &key, outcome(&result));
    Ok(Json(Purged { purged: result? }))
}

/// The queue's visible / in-flight / delayed counts over the last hour (sampled in memory).
#[utoipa::path(get, path = "/api/v1/queues/{namespace}/{queue}/series", tag = "queues",
    params(("namespace" = String, Path), ("queue" = String, Path)),
    responses((status = 200, body = SeriesView)))]
pub(crate) async fn series(
    State(state): State<AdminState>,
    Path((namespace, queue)): Path<(String, String)>,
) -> ApiResult<SeriesView> {
    let key = key_of(namespace, queue);
    state.engine()?.queue_info(&key).await?;
    Ok(Json(SeriesView {
        samples: state.series.of(&key),
    }))
}
