//! The pure conversion layer: KubeMQ wire messages to engine types and back, KubeMQ's validation rules with
//! its in-band error texts, and the mapping of engine errors to those texts. No sockets, no engine calls, so
//! every rule is tested on structs.
//!
//! KubeMQ fields the engine has no slot for (Metadata, the client's own MessageID) travel as reserved message
//! attributes under [`RESERVED_PREFIX`]; Tags are the other attributes. The per-message dead-letter policy is
//! the engine's own [`MessageRedrivePolicy`], so the move to MaxReceiveQueue is atomic. Sequence numbers on the wire are the engine's `seq + 1`, because KubeMQ
//! counts from 1 and its SDKs treat 0 as "no sequence".

use std::collections::HashMap;

use veil_core::{
    stored_size_bytes, AttributeData, AttributeValue, Attributes, EngineError, Message,
    MessageRedrivePolicy, Millis, NewMessage, QueueKey, SentMessage, Ttl, DEFAULT_NAMESPACE, NEVER,
};

use crate::limits;
use crate::pb;

/// Attributes under this prefix carry KubeMQ fields and are not shown as Tags.
pub const RESERVED_PREFIX: &str = "kubemq.";
pub const ATTR_METADATA: &str = "kubemq.metadata";
pub const ATTR_MESSAGE_ID: &str = "kubemq.message_id";

const NANOS_PER_MS: i64 = 1_000_000;

/// The KubeMQ server settings in force (docs/semantics.md §KubeMQ); each defaults to KubeMQ's value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Settings {
    pub max_number_of_messages: i32,
    pub max_wait_timeout_s: i32,
    pub max_expiration_s: i32,
    pub max_delay_s: i32,
    pub max_receive_count: i32,
    pub max_visibility_s: i32,
    pub default_visibility_s: i32,
    pub default_wait_timeout_s: i32,
    pub max_inflight: u32,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            max_number_of_messages: limits::MAX_NUMBER_OF_MESSAGES,
            max_wait_timeout_s: limits::MAX_WAIT_TIMEOUT_S,
            max_expiration_s: limits::MAX_EXPIRATION_S,
            max_delay_s: limits::MAX_DELAY_S,
            max_receive_count: limits::MAX_RECEIVE_COUNT,
            max_visibility_s: limits::MAX_VISIBILITY_S,
            default_visibility_s: limits::DEFAULT_VISIBILITY_S,
            default_wait_timeout_s: limits::DEFAULT_WAIT_TIMEOUT_S,
            max_inflight: limits::MAX_INFLIGHT,
        }
    }
}

/// A KubeMQ in-band error: its text is what goes into `Error` with `IsError = true`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum KubemqError {
    #[error("Error 400: invalid client id, cannot be empty")]
    ClientIdMissing,
    /// Veil's bound on a ClientID (docs/security.md "Identifiers"): KubeMQ keeps it with every message and
    /// delivery, so an unbounded one would be stored uncounted.
    #[error("Error 400: invalid client id, must be at most {max_bytes} bytes without control characters")]
    ClientIdInvalid { max_bytes: usize },
    /// An identifier the engine refuses (docs/security.md "Identifiers").
    #[error("Error 400: {0}")]
    Invalid(String),
    /// KubeMQ's refusal of a queue's channel name (its server's `ErrInvalidQueueName`, which every queue RPC
    /// answers for a bad name), also for the length and characters its SDKs refuse ([`validate_channel`]).
    #[error(
        "Error 120: invalid queue name value, cannot be empty, contains wildcards ,white spaces and end with dot"
    )]
    QueueNameInvalid,
    #[error("Error 400: invalid message, metadata and body cannot both be empty")]
    MessageEmpty,
    #[error("Error 400: invalid tags, a message may carry at most {max} tags")]
    TooManyTags { max: usize },
    #[error("Error 400: invalid tag key, must be 1 to {max_bytes} bytes")]
    TagKeyInvalid { max_bytes: usize },
    #[error("Error 400: invalid tag value, must be at most {max_bytes} bytes")]
    TagValueTooLong { max_bytes: usize },
    #[error("Error 400: invalid expiration seconds, must be between 0 and {max}")]
    ExpirationOutOfRange { max: i32 },
    #[error("Error 400: invalid delay seconds, must be between 0 and {max}")]
    DelayOutOfRange { max: i32 },
    #[error("Error 400: invalid max receive count, must be between 0 and {max}")]
    MaxReceiveCountOutOfRange { max: i32 },
    #[error("Error 400: invalid max number of messages, must be between 1 and {max}")]
    MaxItemsOutOfRange { max: i32 },
    #[error("Error 400: invalid wait timeout, must be between 0 and {max_s} seconds")]
    WaitOutOfRange { max_s: i32 },
    #[error("Error 400: invalid visibility seconds, must be between 1 and {max}")]
    VisibilityOutOfRange { max: i32 },
    #[error("Error 400: invalid requeue channel name")]
    RequeueChannelInvalid,
    #[error("Error 400: invalid request type")]
    RequestTypeInvalid,
    #[error("Error 404: no responder for this channel")]
    NoResponder,
    #[error("Error 404: transaction {0} not found")]
    TransactionNotFound(String),
    #[error("Error 404: sequence {0} is not an active offset of this transaction")]
    SequenceNotActive(u64),
    #[error("Error 400: no active message to act on, receive one first")]
    NoActiveMessage,
    #[error(
        "Error 400: a message is already active on this stream, ack, reject or resend it first"
    )]
    MessageAlreadyActive,
    /// A downstream Get that finished after its stream's requests ended: its messages went back to the queue.
    #[error(
        "Error 400: the stream's requests ended before the poll was answered, its messages were returned to the queue"
    )]
    StreamEnded,
    #[error("Error 404: no new messages in queue")]
    NoNewMessages,
    #[error(
        "Error 409: the message is no longer held by this receiver (its visibility timeout passed)"
    )]
    NotHeld,
    #[error("Error 413: message of {size_bytes} bytes exceeds the limit of {max_bytes} bytes")]
    TooLarge { size_bytes: usize, max_bytes: u32 },
    #[error("Error 429: the channel already has {inflight} messages in flight (limit {limit})")]
    OverLimit { inflight: u64, limit: u32 },
    #[error("Error 400: visibility would end more than {max_s} seconds after the receive")]
    VisibilityPastLimit { max_s: u64 },
    /// KubeMQ's refusal by its authorization policy (docs/security.md "KubeMQ").
    #[error("Error 412: access denied to resource")]
    AccessDenied,
    /// The store cannot be reached (a cluster's database down; docs/cluster.md); the client may retry.
    #[error("Error 503: service unavailable, {0}")]
    Unavailable(String),
    #[error("Error 500: {0}")]
    Internal(String),
}

impl From<EngineError> for KubemqError {
    fn from(error: EngineError) -> Self {
        match error {
            EngineError::ReceiptInvalid
            | EngineError::ReceiptOfAnotherQueue
            | EngineError::MessageNotAvailable => KubemqError::NotHeld,
            EngineError::OverLimit { inflight, limit } => {
                KubemqError::OverLimit { inflight, limit }
            }
            EngineError::MessageTooLarge {
                size_bytes,
                max_bytes,
            } => KubemqError::TooLarge {
                size_bytes,
                max_bytes,
            },
            EngineError::VisibilityPastLimit { max_ms, .. } => KubemqError::VisibilityPastLimit {
                max_s: max_ms / 1_000,
            },
            // The store's own words (a database's error text, a peer's address) go to the log, never to the
            // client (docs/security.md "Errors that say nothing inside").
            EngineError::Store(store @ veil_core::StoreError::Unavailable(_)) => {
                tracing::warn!(error = %store, "kubemq request answered unavailable");
                KubemqError::Unavailable("the store cannot be reached now, retry".into())
            }
            EngineError::Store(store) => {
                tracing::error!(error = %store, "kubemq request failed in the store");
                KubemqError::Internal("internal error, retry".into())
            }
            EngineError::InvalidArgument(reason) => KubemqError::Invalid(reason),
            // What is left is the caller's to change (a FIFO queue's missing group, an expired receipt, a purge
            // too soon, a queue gone): a 400 in KubeMQ's words, never a 500.
            other => KubemqError::Invalid(other.to_string()),
        }
    }
}

/// KubeMQ's rules for a queue's channel name (docs/semantics.md §KubeMQ): its server's (2.4.0: not empty, no
/// space, no `*` or `>` wildcard, no trailing `.`), its documentation's (no leading `.`) and its SDKs' (at
/// most [`limits::CHANNEL_NAME_BYTES_MAX`] bytes of ASCII letters, digits, `.`, `_`, `-` and `/`). Every
/// breach is KubeMQ's queue-name error. The length is checked first, so a long name costs nothing more.
pub fn validate_channel(channel: &str) -> Result<(), KubemqError> {
    let valid = !channel.is_empty()
        && channel.len() <= limits::CHANNEL_NAME_BYTES_MAX
        && channel.bytes().all(channel_byte)
        && !channel.starts_with('.')
        && !channel.ends_with('.');
    if valid {
        Ok(())
    } else {
        Err(KubemqError::QueueNameInvalid)
    }
}

/// A byte KubeMQ's SDKs allow in a queue's channel name (their `^[a-zA-Z0-9._\-/>*]+$`, without the
/// wildcards, which no queue name may contain).
fn channel_byte(byte: u8) -> bool {
    byte.is_ascii_alphanumeric() || matches!(byte, b'.' | b'_' | b'-' | b'/')
}

/// The names a message carries — its sender's ClientID (within Veil's bound; an empty one is KubeMQ's own
/// refusal in [`validate_message`]), its channel and its dead-letter channel (`MaxReceiveQueue`) — checked
/// before anything else looks at them (the authorization policy's expressions, the audit log), in KubeMQ's
/// order.
pub fn validate_names(message: &pb::QueueMessage) -> Result<(), KubemqError> {
    validate_client_id_bound(&message.client_id)?;
    validate_channel(&message.channel)?;
    match dead_letter_channel(message) {
        Some(channel) => validate_channel(channel),
        None => Ok(()),
    }
}

/// The channel a message names as its dead-letter target (`Policy.MaxReceiveQueue`), if any.
pub fn dead_letter_channel(message: &pb::QueueMessage) -> Option<&str> {
    message
        .policy
        .as_ref()
        .map(|policy| policy.max_receive_queue.as_str())
        .filter(|channel| !channel.is_empty())
}

/// Veil's bound on a message's tags (docs/semantics.md §KubeMQ): at most [`limits::MESSAGE_TAGS_MAX`], each
/// key 1 to [`limits::TAG_KEY_BYTES_MAX`] bytes and each value at most [`limits::TAG_VALUE_BYTES_MAX`], so one
/// message's tags total at most 10 × (256 + 4,096) = 43,520 bytes.
pub fn validate_tags(tags: &HashMap<String, String>) -> Result<(), KubemqError> {
    if tags.len() > limits::MESSAGE_TAGS_MAX {
        return Err(KubemqError::TooManyTags {
            max: limits::MESSAGE_TAGS_MAX,
        });
    }
    for (key, value) in tags {
        let shared = veil_core::ident::check(veil_core::ident::IdentKind::AttributeName, key);
        if shared.is_err() || key.len() > limits::TAG_KEY_BYTES_MAX {
            return Err(KubemqError::TagKeyInvalid {
                max_bytes: limits::TAG_KEY_BYTES_MAX,
            });
        }
        if value.len() > limits::TAG_VALUE_BYTES_MAX {
            return Err(KubemqError::TagValueTooLong {
                max_bytes: limits::TAG_VALUE_BYTES_MAX,
            });
        }
    }
    Ok(())
}

/// A request's ClientID: KubeMQ's own refusal when empty, Veil's bound ([`limits::CLIENT_ID_BYTES_MAX`], no
/// control character) otherwise — the id is kept with every message sent and every delivery received.
pub fn validate_client_id(client_id: &str) -> Result<(), KubemqError> {
    if client_id.is_empty() {
        return Err(KubemqError::ClientIdMissing);
    }
    veil_core::ident::check(veil_core::ident::IdentKind::ConsumerIdentity, client_id).map_err(
        |_| KubemqError::ClientIdInvalid {
            max_bytes: limits::CLIENT_ID_BYTES_MAX,
        },
    )
}

/// Veil's bound on a ClientID where KubeMQ lets it be empty (ack-all, channel queries) and wherever one reaches
/// the policy or the audit log: an empty id passes, any other must pass [`validate_client_id`].
pub fn validate_client_id_bound(client_id: &str) -> Result<(), KubemqError> {
    if client_id.is_empty() {
        return Ok(());
    }
    validate_client_id(client_id)
}

/// KubeMQ's send validation, in KubeMQ's order: client id, channel, content, then Veil's bound on tags, then
/// the policy's ranges and dead-letter channel.
pub fn validate_message(
    message: &pb::QueueMessage,
    settings: &Settings,
) -> Result<(), KubemqError> {
    validate_client_id(&message.client_id)?;
    validate_channel(&message.channel)?;
    if message.metadata.is_empty() && message.body.is_empty() {
        return Err(KubemqError::MessageEmpty);
    }
    validate_tags(&message.tags)?;
    if let Some(policy) = &message.policy {
        if !(0..=settings.max_expiration_s).contains(&policy.expiration_seconds) {
            return Err(KubemqError::ExpirationOutOfRange {
                max: settings.max_expiration_s,
            });
        }
        if !(0..=settings.max_delay_s).contains(&policy.delay_seconds) {
            return Err(KubemqError::DelayOutOfRange {
                max: settings.max_delay_s,
            });
        }
        if !(0..=settings.max_receive_count).contains(&policy.max_receive_count) {
            return Err(KubemqError::MaxReceiveCountOutOfRange {
                max: settings.max_receive_count,
            });
        }
        if !policy.max_receive_queue.is_empty() {
            validate_channel(&policy.max_receive_queue)?;
        }
    }
    Ok(())
}

fn string_attribute(value: impl Into<String>) -> AttributeValue {
    AttributeValue {
        data_type: "String".to_string(),
        value: AttributeData::String(value.into()),
    }
}

fn attribute_text(attributes: &Attributes, name: &str) -> Option<String> {
    match attributes.get(name).map(|a| &a.value) {
        Some(AttributeData::String(text)) => Some(text.clone()),
        Some(AttributeData::Binary(bytes)) => Some(String::from_utf8_lossy(bytes).into_owned()),
        None => None,
    }
}

/// A validated wire message as the engine stores it. ExpirationSeconds 0 means never; otherwise KubeMQ counts
/// expiry from the end of the delay (`ExpirationAt = now + delay + expiration`), so the engine's TTL is both.
pub fn to_new_message(message: pb::QueueMessage) -> NewMessage {
    let mut attributes = Attributes::new();
    for (name, value) in message.tags {
        if !name.starts_with(RESERVED_PREFIX) {
            attributes.insert(name, string_attribute(value));
        }
    }
    if !message.metadata.is_empty() {
        attributes.insert(
            ATTR_METADATA.to_string(),
            string_attribute(message.metadata),
        );
    }
    if !message.message_id.is_empty() {
        attributes.insert(
            ATTR_MESSAGE_ID.to_string(),
            string_attribute(message.message_id),
        );
    }
    let policy = message.policy.unwrap_or_default();
    let redrive =
        (policy.max_receive_count > 0 || !policy.max_receive_queue.is_empty()).then(|| {
            MessageRedrivePolicy {
                // KubeMQ: MaxReceiveCount 0 with a MaxReceiveQueue means the maximum.
                max_receive_count: if policy.max_receive_count == 0 {
                    limits::MAX_RECEIVE_COUNT as u32
                } else {
                    policy.max_receive_count as u32
                },
                dead_letter_queue: (!policy.max_receive_queue.is_empty())
                    .then(|| QueueKey::new(DEFAULT_NAMESPACE, policy.max_receive_queue.clone())),
            }
        });
    let delay_ms = Millis::from(policy.delay_seconds.max(0) as u32) * 1_000;
    let ttl = if policy.expiration_seconds <= 0 {
        Ttl::Never
    } else {
        Ttl::After(delay_ms + Millis::from(policy.expiration_seconds as u32) * 1_000)
    };
    NewMessage {
        // KubeMQ sets no rule of its own: a message counts as the data it stores, tags, reserved attributes
        // and the sender's ClientID included.
        size_bytes: stored_size_bytes(&message.body, &attributes) + message.client_id.len(),
        body: message.body,
        attributes,
        delay_ms: Some(delay_ms),
        ttl: Some(ttl),
        sender_id: message.client_id,
        redrive,
        moved_from: None,
        group: None,
        dedup_id: None,
    }
}

pub fn nanos(ms: Millis) -> i64 {
    i64::try_from(ms)
        .unwrap_or(i64::MAX / NANOS_PER_MS)
        .saturating_mul(NANOS_PER_MS)
}

/// The wire sequence of an engine seq (KubeMQ counts from 1).
pub fn wire_sequence(seq: u64) -> u64 {
    seq + 1
}

/// The send result: the client's MessageID when it gave one, times in Unix nanoseconds, 0 for "none".
pub fn send_result(
    sent: &SentMessage,
    client_message_id: &str,
    channel: &str,
) -> pb::SendQueueMessageResult {
    pb::SendQueueMessageResult {
        message_id: if client_message_id.is_empty() {
            veil_core::message_id_text(&sent.message_id)
        } else {
            client_message_id.to_string()
        },
        sent_at: nanos(sent.sent_at),
        expiration_at: if sent.expires_at == NEVER {
            0
        } else {
            nanos(sent.expires_at)
        },
        delayed_to: if sent.visible_at > sent.sent_at {
            nanos(sent.visible_at)
        } else {
            0
        },
        ref_channel: channel.to_string(),
        ..Default::default()
    }
}

pub fn send_error(
    error: &KubemqError,
    client_message_id: &str,
    channel: &str,
) -> pb::SendQueueMessageResult {
    pb::SendQueueMessageResult {
        message_id: client_message_id.to_string(),
        is_error: true,
        error: error.to_string(),
        ref_channel: channel.to_string(),
        ..Default::default()
    }
}

/// A delivered or peeked message on the wire.
pub fn to_queue_message(message: &Message, channel: &str) -> pb::QueueMessage {
    let attributes = &message.payload.attributes;
    let mut tags = HashMap::new();
    for (name, value) in attributes {
        if name.starts_with(RESERVED_PREFIX) {
            continue;
        }
        let text = match &value.value {
            AttributeData::String(text) => text.clone(),
            AttributeData::Binary(bytes) => String::from_utf8_lossy(bytes).into_owned(),
        };
        tags.insert(name.clone(), text);
    }
    let rerouted_from = message
        .payload
        .moved_from
        .as_ref()
        .map(|moved| moved.queue.name.clone());
    let policy = message
        .redrive
        .as_ref()
        .map(|redrive| pb::QueueMessagePolicy {
            max_receive_count: i32::try_from(redrive.max_receive_count).unwrap_or(i32::MAX),
            max_receive_queue: redrive
                .dead_letter_queue
                .as_ref()
                .map(|key| key.name.clone())
                .unwrap_or_default(),
            ..Default::default()
        });
    pb::QueueMessage {
        message_id: attribute_text(attributes, ATTR_MESSAGE_ID)
            .unwrap_or_else(|| message.message_id_string()),
        client_id: message.payload.sender_id.clone(),
        channel: channel.to_string(),
        metadata: attribute_text(attributes, ATTR_METADATA).unwrap_or_default(),
        body: message.payload.body.clone(),
        tags,
        attributes: Some(pb::QueueMessageAttributes {
            timestamp: nanos(message.payload.sent_at),
            sequence: wire_sequence(message.seq),
            md5_of_body: hex::encode(message.payload.body_md5),
            receive_count: i32::try_from(message.state.receive_count).unwrap_or(i32::MAX),
            re_routed: rerouted_from.is_some(),
            re_routed_from_queue: rerouted_from.unwrap_or_default(),
            expiration_at: if message.state.expires_at == NEVER {
                0
            } else {
                nanos(message.state.expires_at)
            },
            delayed_to: if message.state.first_received_at == 0
                && message.state.visible_at > message.state.sent_at
            {
                nanos(message.state.visible_at)
            } else {
                0
            },
        }),
        policy,
        ..Default::default()
    }
}

/// The JSON body of a `list-channels` reply, in the shape the SDKs decode (`name`, `type`, `lastActivity`,
/// `isActive`, `incoming` / `outgoing` stats); `search` keeps channels whose name contains it.
pub fn channel_list_json(queues: &[veil_core::QueueInfo], search: &str) -> Vec<u8> {
    let channels: Vec<serde_json::Value> = queues
        .iter()
        .filter(|info| info.key.name.contains(search))
        .map(|info| {
            let stats = &info.stats;
            serde_json::json!({
                "name": info.key.name,
                "type": "queues",
                "lastActivity": info.modified_at,
                "isActive": stats.visible + stats.hidden + stats.delayed > 0,
                "incoming": {
                    "messages": stats.counters.sends,
                    "volume": 0,
                    "waiting": 0,
                    "expired": 0,
                    "delayed": 0,
                },
                "outgoing": {
                    "messages": stats.counters.deliveries,
                    "volume": 0,
                    "waiting": stats.visible,
                    "expired": stats.counters.expiries,
                    "delayed": stats.delayed,
                },
            })
        })
        .collect();
    serde_json::Value::Array(channels).to_string().into_bytes()
}

/// QueuesInfo over the channels whose name contains `filter` (all when empty): per channel its stored
/// messages and body bytes, the sequence numbers of its oldest and newest stored message (0 when empty), its
/// sends and deliveries so far, its visible backlog and the receivers waiting on it; then the totals.
pub fn queues_info(
    queues: &[veil_core::QueueInfo],
    filter: &str,
    subscribers: &HashMap<String, u64>,
) -> pb::QueuesInfo {
    let as_i64 = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
    let channels: Vec<pb::QueueInfo> = queues
        .iter()
        .filter(|info| info.key.name.contains(filter))
        .map(|info| {
            let stats = &info.stats;
            let (first, last) = stats.seq_range.map_or((0, 0), |(first, last)| {
                (wire_sequence(first), wire_sequence(last))
            });
            pb::QueueInfo {
                name: info.key.name.clone(),
                messages: as_i64(stats.visible + stats.hidden + stats.delayed),
                bytes: as_i64(stats.stored_bytes),
                first_sequence: as_i64(first),
                last_sequence: as_i64(last),
                sent: as_i64(stats.counters.sends),
                delivered: as_i64(stats.counters.deliveries),
                waiting: as_i64(stats.visible),
                subscribers: as_i64(subscribers.get(&info.key.name).copied().unwrap_or(0)),
            }
        })
        .collect();
    pb::QueuesInfo {
        total_queue: i32::try_from(channels.len()).unwrap_or(i32::MAX),
        sent: channels.iter().map(|c| c.sent).fold(0, i64::saturating_add),
        delivered: channels
            .iter()
            .map(|c| c.delivered)
            .fold(0, i64::saturating_add),
        waiting: channels
            .iter()
            .map(|c| c.waiting)
            .fold(0, i64::saturating_add),
        queues: channels,
    }
}

#[cfg(test)]
#[path = "convert_tests.rs"]
mod tests;
