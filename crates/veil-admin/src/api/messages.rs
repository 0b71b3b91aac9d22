//! Messages: browse/peek (changes nothing), send, receive (a real delivery), acknowledge or change the
//! visibility of a delivery by its receipt, and an operator's delete of one message by its seq or id.

use std::collections::BTreeMap;

use axum::extract::{Path, Query, State};
use axum::Json;
use base64::Engine as _;
use serde::Deserialize;
use utoipa::IntoParams;
use veil_core::{
    AttributeData, AttributeValue, Dispatch, Message, QueueKey, ReceiptRule, ReceiveOptions, Ttl,
    VisibilityChange,
};

use super::queues::{key_of, outcome};
use super::types::*;
use super::{audit, ApiError, ApiResult};
use crate::{limits, AdminState};

#[derive(Debug, Deserialize, IntoParams)]
pub(crate) struct BrowseParams {
    /// `visible` (default): the next messages a receive would get, in that order (a peek). `all`: every
    /// stored message in sequence order, hidden and delayed ones included.
    state: Option<String>,
    /// With `state=all`: start at this sequence number (a page's `next_from_seq`, or the `seq` after the last
    /// one seen).
    from_seq: Option<u64>,
    /// At most this many (default 10, at most 1000).
    max: Option<usize>,
}

/// Peeks or browses a queue without changing anything: no receipt, no receive count, no visibility change.
#[utoipa::path(get, path = "/api/v1/queues/{namespace}/{queue}/messages", tag = "messages",
    params(("namespace" = String, Path), ("queue" = String, Path), BrowseParams),
    responses((status = 200, body = MessageList), (status = 404, body = ErrorBody)))]
pub(crate) async fn browse(
    State(state): State<AdminState>,
    Path((namespace, queue)): Path<(String, String)>,
    Query(params): Query<BrowseParams>,
) -> ApiResult<MessageList> {
    let engine = &state.engine()?;
    let key = key_of(namespace, queue);
    let max = params
        .max
        .unwrap_or(10)
        .clamp(1, veil_core::limits::BROWSE_MESSAGES_MAX);
    match params.state.as_deref().unwrap_or("visible") {
        "visible" => Ok(Json(views(engine, engine.peek(&key, max).await?))),
        "all" => {
            let messages = engine
                .browse(&key, params.from_seq.unwrap_or(0), max)
                .await?;
            // A full page may have more after it; the cursor is the seq after its last message.
            let next_from_seq = (messages.len() == max)
                .then(|| messages.last().map(|m| m.seq + 1))
                .flatten();
            let mut list = views(engine, messages);
            list.next_from_seq = next_from_seq;
            Ok(Json(list))
        }
        other => Err(ApiError::InvalidArgument(format!(
            "state must be \"visible\" or \"all\", not {other:?}"
        ))),
    }
}

fn views(engine: &Dispatch, messages: Vec<Message>) -> MessageList {
    let now = engine.now();
    MessageList {
        messages: messages
            .into_iter()
            .map(|m| MessageView::new(m, now))
            .collect(),
        next_from_seq: None,
    }
}

/// Sends messages (at most 1000 per request).
#[utoipa::path(post, path = "/api/v1/queues/{namespace}/{queue}/messages", tag = "messages",
    params(("namespace" = String, Path), ("queue" = String, Path)), request_body = SendRequest,
    responses((status = 200, body = Sent), (status = 400, body = ErrorBody), (status = 404, body = ErrorBody)))]
pub(crate) async fn send(
    State(state): State<AdminState>,
    Path((namespace, queue)): Path<(String, String)>,
    Json(request): Json<SendRequest>,
) -> ApiResult<Sent> {
    let engine = &state.engine()?;
    let key = key_of(namespace, queue);
    if request.messages.is_empty() || request.messages.len() > limits::SEND_MESSAGES_MAX {
        return Err(ApiError::InvalidArgument(format!(
            "send between 1 and {} messages per request",
            limits::SEND_MESSAGES_MAX
        )));
    }
    // The queue's size limit is the engine's to apply, in the send itself (one engine call).
    let messages = request
        .messages
        .into_iter()
        .map(new_message)
        .collect::<Result<Vec<_>, _>>()?;
    let sent = engine.send(&key, messages).await?;
    Ok(Json(Sent {
        sent: sent
            .iter()
            .map(|s| SentView {
                id: veil_core::message_id_text(&s.message_id),
                seq: s.seq,
            })
            .collect(),
    }))
}

fn new_message(message: NewMessage) -> Result<veil_core::NewMessage, ApiError> {
    let body = match (message.body, message.body_base64) {
        (Some(text), None) => bytes::Bytes::from(text),
        (None, Some(encoded)) => b64()
            .decode(encoded)
            .map_err(|e| ApiError::InvalidArgument(format!("body_base64 is not base64: {e}")))?
            .into(),
        _ => {
            return Err(ApiError::InvalidArgument(
                "give exactly one of body and body_base64".into(),
            ))
        }
    };
    let attributes = attributes(message.attributes)?;
    let size = veil_core::stored_size_bytes(&body, &attributes);
    let mut new = veil_core::NewMessage::new(body);
    new.attributes = attributes;
    new.size_bytes = size;
    new.delay_ms = message.delay_s.map(|s| s.saturating_mul(1000));
    new.ttl = message.ttl_s.map(|s| Ttl::After(s.saturating_mul(1000)));
    new.sender_id = "admin".into();
    new.group = message.group;
    new.dedup_id = message.dedup_id;
    Ok(new)
}

fn attributes(given: BTreeMap<String, Attribute>) -> Result<veil_core::Attributes, ApiError> {
    given
        .into_iter()
        .map(|(name, attribute)| {
            let value = match (attribute.string_value, attribute.binary_value_base64) {
                (Some(text), None) => AttributeData::String(text),
                (None, Some(encoded)) => AttributeData::Binary(
                    b64()
                        .decode(encoded)
                        .map_err(|e| {
                            ApiError::InvalidArgument(format!(
                                "attribute {name:?} is not base64: {e}"
                            ))
                        })?
                        .into(),
                ),
                _ => {
                    return Err(ApiError::InvalidArgument(format!(
                    "attribute {name:?} needs exactly one of string_value and binary_value_base64"
                )))
                }
            };
            Ok((
                name,
                AttributeValue {
                    data_type: attribute.data_type,
                    value,
                },
            ))
        })
        .collect()
}

/// Receives like a consumer: each message is hidden for the visibility timeout, its receive count grows and
/// a receipt is issued.
#[utoipa::path(post, path = "/api/v1/queues/{namespace}/{queue}/messages/receive", tag = "messages",
    params(("namespace" = String, Path), ("queue" = String, Path)), request_body = ReceiveRequest,
    responses((status = 200, body = MessageList), (status = 404, body = ErrorBody)))]
pub(crate) async fn receive(
    State(state): State<AdminState>,
    Path((namespace, queue)): Path<(String, String)>,
    Json(request): Json<ReceiveRequest>,
) -> ApiResult<MessageList> {
    let engine = &state.engine()?;
    let key = key_of(namespace, queue);
    let max = request.max.unwrap_or(1);
    if max == 0 || max > limits::RECEIVE_MESSAGES_MAX {
        return Err(ApiError::InvalidArgument(format!(
            "max must be between 1 and {}",
            limits::RECEIVE_MESSAGES_MAX
        )));
    }
    let wait_s = request.wait_s.unwrap_or(0);
    if wait_s > limits::RECEIVE_WAIT_S_MAX {
        return Err(ApiError::InvalidArgument(format!(
            "wait_s must be at most {}",
            limits::RECEIVE_WAIT_S_MAX
        )));
    }
    let mut options = ReceiveOptions::new(max);
    options.visibility_ms = request.visibility_timeout_s.map(|s| s.saturating_mul(1000));
    options.wait_ms = Some(wait_s * 1000);
    options.consumer = Some(veil_core::Consumer {
        protocol: veil_core::Protocol::Admin,
        address: None,
        identity: None,
    });
    let messages = engine.receive(&key, options).await?;
    Ok(Json(views(engine, messages)))
}

/// Deletes (acknowledges) the delivery a receipt names.
#[utoipa::path(post, path = "/api/v1/queues/{namespace}/{queue}/messages/ack", tag = "messages",
    params(("namespace" = String, Path), ("queue" = String, Path)), request_body = AckRequest,
    responses((status = 200, body = Deleted), (status = 400, body = ErrorBody)))]
pub(crate) async fn ack(
    State(state): State<AdminState>,
    Path((namespace, queue)): Path<(String, String)>,
    Json(request): Json<AckRequest>,
) -> ApiResult<Deleted> {
    let engine = &state.engine()?;
    let key = key_of(namespace, queue);
    let outcome = engine
        .delete(&key, &request.receipt, ReceiptRule::Current)
        .await?;
    Ok(Json(Deleted {
        deleted: outcome == veil_core::DeleteOutcome::Deleted,
    }))
}

/// Changes a received message's visibility: hidden until now + `visibility_timeout_s` (0 releases it).
#[utoipa::path(post, path = "/api/v1/queues/{namespace}/{queue}/messages/visibility", tag = "messages",
    params(("namespace" = String, Path), ("queue" = String, Path)), request_body = VisibilityRequest,
    responses((status = 200, body = VisibilityChanged), (status = 400, body = ErrorBody)))]
pub(crate) async fn visibility(
    State(state): State<AdminState>,
    Path((namespace, queue)): Path<(String, String)>,
    Json(request): Json<VisibilityRequest>,
) -> ApiResult<VisibilityChanged> {
    let engine = &state.engine()?;
    let key = key_of(namespace, queue);
    let change = VisibilityChange {
        visibility_ms: request.visibility_timeout_s.saturating_mul(1000),
        since_receive_ms_max: None,
        not_past_expiry: false,
        receipts: ReceiptRule::Current,
    };
    let visible_at_ms = engine
        .change_visibility(&key, &request.receipt, change)
        .await?;
    Ok(Json(VisibilityChanged { visible_at_ms }))
}

/// Finds a message by its seq (digits) or its id (a UUID; this scans the queue).
pub(crate) async fn find(
    engine: &Dispatch,
    key: &QueueKey,
    message: &str,
) -> Result<Message, ApiError> {
    let not_found = || ApiError::MessageNotFound(message.to_owned());
    if let Ok(seq) = message.parse::<u64>() {
        return engine
            .browse(key, seq, 1)
            .await?
            .into_iter()
            .find(|m| m.seq == seq)
            .ok_or_else(not_found);
    }
    let id = uuid::Uuid::parse_str(message)
        .map_err(|_| {
            ApiError::InvalidArgument(format!("{message:?} is neither a seq nor a message id"))
        })?
        .into_bytes();
    let mut from = 0;
    loop {
        let page = engine
            .browse(key, from, veil_core::limits::BROWSE_MESSAGES_MAX)
            .await?;
        let Some(last) = page.last().map(|m| m.seq) else {
            return Err(not_found());
        };
        if let Some(found) = page.into_iter().find(|m| m.payload.message_id == id) {
            return Ok(found);
        }
        from = last + 1;
    }
}

/// One message by its seq or id, in any state, without changing it.
#[utoipa::path(get, path = "/api/v1/queues/{namespace}/{queue}/messages/{message}", tag = "messages",
    params(("namespace" = String, Path), ("queue" = String, Path),
           ("message" = String, Path, description = "the message's seq, or its id")),
    responses((status = 200, body = MessageView), (status = 404, body = ErrorBody)))]
pub(crate) async fn get_one(
    State(state): State<AdminState>,
    Path((namespace, queue, message)): Path<(String, String, String)>,
) -> ApiResult<MessageView> {
    let engine = &state.engine()?;
    let key = key_of(namespace, queue);
    let found = find(engine, &key, &message).await?;
    Ok(Json(MessageView::new(found, engine.now())))
}

/// Deletes one message by its seq or id, whatever its state (no receipt needed).
#[utoipa::path(delete, path = "/api/v1/queues/{namespace}/{queue}/messages/{message}", tag = "messages",
    params(("namespace" = String, Path), ("queue" = String, Path),
           ("message" = String, Path, description = "the message's seq, or its id")),
    responses((status = 200, body = Deleted), (status = 404, body = ErrorBody)))]
pub(crate) async fn delete_one(
    State(state): State<AdminState>,
    Path((namespace, queue, message)): Path<(String, String, String)>,
) -> ApiResult<Deleted> {
    let engine = &state.engine()?;
    let key = key_of(namespace, queue);
    let found = find(engine, &key, &message).await?;
    let result = engine.remove_message(&key, found.seq).await;
    audit("delete_message", &key, outcome(&result));
    if !result? {
        return Err(ApiError::MessageNotFound(message));
    }
    Ok(Json(Deleted { deleted: true }))
}

/// A message's last deliveries: when, through which protocol, to which client, the visibility granted and how
/// each ended. Reading it changes nothing. A recently deleted message still answers (by id or seq), from memory; a
/// stored message never delivered answers with no deliveries.
#[utoipa::path(get, path = "/api/v1/queues/{namespace}/{queue}/messages/{message}/history", tag = "messages",
    params(("namespace" = String, Path), ("queue" = String, Path),
           ("message" = String, Path, description = "the message's seq, or its id")),
    responses((status = 200, body = HistoryView), (status = 404, body = ErrorBody)))]
pub(crate) async fn history(
    State(state): State<AdminState>,
    Path((namespace, queue, message)): Path<(String, String, String)>,
) -> ApiResult<HistoryView> {
    let engine = &state.engine()?;
    let key = key_of(namespace, queue);
    // A deleted message has no seq to browse to any more: by id, ask the engine directly; by seq, ask for the
    // recently deleted one when the queue no longer holds it.
    let id = match uuid::Uuid::parse_str(&message) {
        Ok(id) => id.into_bytes(),
        Err(_) => match find(engine, &key, &message).await {
            Ok(found) => found.payload.message_id,
            Err(ApiError::MessageNotFound(_)) => {
                let deleted = match message.parse::<u64>() {
                    Ok(seq) => engine.deleted_history(&key, seq).await?,
                    Err(_) => None,
                };
                return deleted
                    .map(|found| Json(HistoryView::from(found)))
                    .ok_or(ApiError::MessageNotFound(message));
            }
            Err(other) => return Err(other),
        },
    };
    if let Some(found) = engine.history(&key, &id).await? {
        return Ok(Json(HistoryView::from(found)));
    }
    // Stored but never delivered (or delivered while the queue's history was off): no deliveries to show.
    let stored = find(engine, &key, &message).await?;
    Ok(Json(HistoryView {
        id: veil_core::message_id_text(&stored.payload.message_id),
        seq: stored.seq,
        queue: QueueRef::from(&key),
        deleted: false,
        in_flight_until_ms: None,
        deliveries: Vec::new(),
    }))
}
