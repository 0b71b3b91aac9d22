//! The admin API's JSON shapes. Times are milliseconds since the Unix epoch (`*_ms`), durations are in the
//! unit their name ends with; a body travels as base64 (`body_base64`, exact bytes) and, when it is UTF-8,
//! also as text (`body`).

use std::collections::BTreeMap;

use base64::Engine as _;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use veil_core::{
    AttributeData, AttributeValue, Message, MoveReason, MoveTaskRecord, MoveTaskStatus, QueueInfo,
    QueueKey, QueueOverview, NEVER,
};

pub(crate) fn b64() -> base64::engine::GeneralPurpose {
    base64::engine::general_purpose::STANDARD
}

/// A queue named by its namespace and name.
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
pub struct QueueRef {
    pub namespace: String,
    pub name: String,
}

impl From<&QueueKey> for QueueRef {
    fn from(key: &QueueKey) -> Self {
        Self {
            namespace: key.namespace.clone(),
            name: key.name.clone(),
        }
    }
}

impl From<&QueueRef> for QueueKey {
    fn from(queue: &QueueRef) -> Self {
        QueueKey::new(queue.namespace.clone(), queue.name.clone())
    }
}

/// One queue with its counts: what the queue list and the console's table show.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct QueueSummary {
    pub namespace: String,
    pub name: String,
    pub fifo: bool,
    /// The protocol whose create made the queue (`sqs`, `azure`, `kubemq`, `admin`); null when unknown.
    pub created_by: Option<String>,
    /// Receivable now.
    pub visible: u64,
    /// Hidden by a receive until deleted or its visibility timeout ends: the hidden backlog.
    pub inflight: u64,
    /// Not yet visible and never received (a delay).
    pub delayed: u64,
    pub stored_bytes: u64,
    /// Age of the oldest stored message in any state; 0 when empty.
    pub oldest_age_ms: u64,
    /// Running totals since the queue was created (the detail's `totals` has them all): messages sent,
    /// deliveries made, messages deleted. Two lists a few seconds apart give rates (`veil top`).
    pub sent: u64,
    pub received: u64,
    pub deleted: u64,
}

impl From<&QueueOverview> for QueueSummary {
    fn from(queue: &QueueOverview) -> Self {
        let counters = &queue.stats.counters;
        Self {
            namespace: queue.key.namespace.clone(),
            name: queue.key.name.clone(),
            fifo: queue.fifo,
            created_by: queue.created_by.clone(),
            visible: queue.stats.visible,
            inflight: queue.stats.hidden,
            delayed: queue.stats.delayed,
            stored_bytes: queue.stats.stored_bytes,
            oldest_age_ms: queue.stats.oldest_age_ms,
            sent: counters.sends,
            received: counters.deliveries,
            deleted: counters.deletes,
        }
    }
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct QueueList {
    pub queues: Vec<QueueSummary>,
}

/// Running totals since the queue was created (they survive restarts; docs/semantics.md §9, "Totals"). They
/// add up: `sent` = visible + in flight + delayed + `deleted` + `purged` + `expired` + `dead_lettered` +
/// `moved_out`.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct QueueTotals {
    /// Messages that entered the queue: sent by a client (a FIFO duplicate is not), or moved here (dead
    /// letters, a redrive's or a re-queue's messages).
    pub sent: u64,
    /// Deliveries: a message received three times counts three.
    pub received: u64,
    /// Deliveries that ended with the message visible again, unsettled: the visibility timeout ended (at
    /// once for a receive with visibility 0) or the consumer gave it back (visibility 0, a nack).
    pub redelivered: u64,
    /// Messages deleted one by one, by a consumer (delete, ack) or an operator.
    pub deleted: u64,
    /// Messages removed by a purge (SQS PurgeQueue, Azure Clear Messages, KubeMQ AckAllQueueMessages, the
    /// admin API).
    pub purged: u64,
    /// Messages removed because their time to live passed.
    pub expired: u64,
    /// Messages a dead-letter rule took away: moved to the dead-letter queue, or dropped by a message's own
    /// rule that names none.
    pub dead_lettered: u64,
    /// Messages moved to another queue by a redrive (a move task) or their consumer (KubeMQ's re-queue).
    pub moved_out: u64,
}

/// A queue's settings. On PATCH every field is optional; only those given change.
#[derive(Clone, Debug, Default, Serialize, Deserialize, ToSchema)]
pub struct QueueSettings {
    pub visibility_timeout_s: Option<u64>,
    pub delay_s: Option<u64>,
    /// Null (on read) keeps messages forever.
    pub retention_s: Option<u64>,
    pub message_size_bytes_max: Option<u32>,
    pub receive_wait_s: Option<u64>,
    pub inflight_max: Option<u32>,
    /// Whether each message's recent deliveries are recorded (on by default; off saves one small write per
    /// receive).
    pub delivery_history: Option<bool>,
}

/// Where a queue's messages go after too many receives.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct DeadLetterRule {
    pub dead_letter_queue: QueueRef,
    pub max_receive_count: u32,
}

/// One queue in full.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct QueueDetail {
    pub queue: QueueSummary,
    pub settings: QueueSettings,
    pub dead_letter: Option<DeadLetterRule>,
    /// Queues whose dead-letter rule names this one.
    pub dead_letter_sources: Vec<QueueRef>,
    pub totals: QueueTotals,
    pub tags: BTreeMap<String, String>,
    pub metadata: BTreeMap<String, String>,
    pub created_at_ms: u64,
    pub modified_at_ms: u64,
    /// The newest stored message's seq; null when the queue is empty. A browse from the seq after it sees
    /// only messages sent later (`veil messages tail`).
    pub last_seq: Option<u64>,
}

impl QueueDetail {
    pub fn new(info: &QueueInfo, summary: QueueSummary, sources: Vec<QueueRef>) -> Self {
        let config = &info.config;
        let counters = &info.stats.counters;
        Self {
            queue: summary,
            settings: QueueSettings {
                visibility_timeout_s: Some(config.visibility_timeout_ms / 1000),
                delay_s: Some(config.delay_ms / 1000),
                retention_s: config.retention_ms.map(|ms| ms / 1000),
                message_size_bytes_max: Some(config.message_size_bytes_max),
                receive_wait_s: Some(config.receive_wait_ms / 1000),
                inflight_max: Some(config.inflight_max),
                delivery_history: Some(config.delivery_history),
            },
            dead_letter: config.redrive_policy.as_ref().map(|p| DeadLetterRule {
                dead_letter_queue: QueueRef::from(&p.dead_letter_queue),
                max_receive_count: p.max_receive_count,
            }),
            dead_letter_sources: sources,
            totals: QueueTotals {
                sent: counters.sends,
                received: counters.deliveries,
                redelivered: counters.redeliveries,
                deleted: counters.deletes,
                purged: counters.purges,
                expired: counters.expiries,
                dead_lettered: counters.dead_letter_moves + counters.dead_letter_drops,
                moved_out: counters.moves_out,
            },
            tags: config.settings_under(veil_core::SQS_TAG_SETTING_PREFIX),
            metadata: config.settings_under(veil_core::AZURE_METADATA_SETTING_PREFIX),
            created_at_ms: info.created_at,
            modified_at_ms: info.modified_at,
            last_seq: info.stats.seq_range.map(|(_, last)| last),
        }
    }
}

/// A queue to create.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct CreateQueue {
    /// Defaults to `default`, the namespace SQS's default account, Azure's development account and KubeMQ
    /// share.
    pub namespace: Option<String>,
    pub name: String,
    #[serde(default)]
    pub fifo: bool,
    #[serde(default)]
    pub settings: QueueSettings,
}

/// Purging deletes every message, so the request repeats the queue's name.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct PurgeRequest {
    pub confirm: String,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct Purged {
    pub purged: u64,
}

#[derive(Clone, Copy, Debug, Serialize, Deserialize, ToSchema, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum MessageState {
    Visible,
    Inflight,
    Delayed,
}

/// A message attribute (SQS message attributes, KubeMQ tags): a string or base64 binary value.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct Attribute {
    /// `String`, `Number`, `Binary`, optionally with a `.custom` suffix.
    pub data_type: String,
    pub string_value: Option<String>,
    pub binary_value_base64: Option<String>,
}

/// A stored message as an operator sees it.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct MessageView {
    pub id: String,
    /// The message's position in its queue: the admin API's handle for it (also accepted: `id`).
    pub seq: u64,
    pub state: MessageState,
    /// The body as text when it is UTF-8.
    pub body: Option<String>,
    pub body_base64: String,
    pub attributes: BTreeMap<String, Attribute>,
    pub receive_count: u32,
    pub sent_at_ms: u64,
    /// When it becomes (or became) visible.
    pub visible_at_ms: u64,
    /// Null when it never expires.
    pub expires_at_ms: Option<u64>,
    pub first_received_at_ms: Option<u64>,
    pub group: Option<String>,
    pub dedup_id: Option<String>,
    /// The queue an engine move brought it from, and why (`dead_letter` or `requeue`).
    pub moved_from: Option<QueueRef>,
    pub moved_reason: Option<String>,
    /// Only on a receive: settles or extends this delivery.
    pub receipt: Option<String>,
}

impl MessageView {
    pub fn new(message: Message, now: u64) -> Self {
        let state = &message.state;
        let payload = message.payload;
        let phase = if state.visible_at <= now {
            MessageState::Visible
        } else if state.receive_count > 0 {
            MessageState::Inflight
        } else {
            MessageState::Delayed
        };
        Self {
            id: veil_core::message_id_text(&payload.message_id),
            seq: message.seq,
            state: phase,
            body: std::str::from_utf8(&payload.body).ok().map(str::to_owned),
            body_base64: b64().encode(&payload.body),
            attributes: payload
                .attributes
                .into_iter()
                .map(|(name, value)| (name, Attribute::from(value)))
                .collect(),
            receive_count: state.receive_count,
            sent_at_ms: payload.sent_at,
            visible_at_ms: state.visible_at,
            expires_at_ms: (state.expires_at != NEVER).then_some(state.expires_at),
            first_received_at_ms: (state.first_received_at != 0).then_some(state.first_received_at),
            group: payload.group,
            dedup_id: payload.dedup_id,
            moved_reason: payload.moved_from.as_ref().map(|m| {
                match m.reason {
                    MoveReason::DeadLetter => "dead_letter",
                    MoveReason::Requeue => "requeue",
                }
                .to_owned()
            }),
            moved_from: payload
                .moved_from
                .as_ref()
                .map(|m| QueueRef::from(&m.queue)),
            receipt: message.receipt,
        }
    }
}

impl From<AttributeValue> for Attribute {
    fn from(value: AttributeValue) -> Self {
        let (string_value, binary_value_base64) = match value.value {
            AttributeData::String(text) => (Some(text), None),
            AttributeData::Binary(bytes) => (None, Some(b64().encode(bytes))),
        };
        Self {
            data_type: value.data_type,
            string_value,
            binary_value_base64,
        }
    }
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct MessageList {
    pub messages: Vec<MessageView>,
    /// A browse (`state=all`) that filled its page: the `from_seq` of the next page. Absent when the page
    /// reached the end of the queue, and on every other list.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_from_seq: Option<u64>,
}

/// One message to send. Give exactly one of `body` (text) and `body_base64` (bytes).
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct NewMessage {
    pub body: Option<String>,
    pub body_base64: Option<String>,
    #[serde(default)]
    pub attributes: BTreeMap<String, Attribute>,
    pub delay_s: Option<u64>,
    /// Time to live; the queue's retention when absent.
    pub ttl_s: Option<u64>,
    /// Required by a FIFO queue.
    pub group: Option<String>,
    pub dedup_id: Option<String>,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct SendRequest {
    pub messages: Vec<NewMessage>,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct SentView {
    pub id: String,
    pub seq: u64,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct Sent {
    pub sent: Vec<SentView>,
}

/// A receive through the admin API: a real delivery (counts, hides, issues receipts), unlike a peek.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct ReceiveRequest {
    pub max: Option<usize>,
    pub visibility_timeout_s: Option<u64>,
    pub wait_s: Option<u64>,
}

/// Settles one delivery by its receipt.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct AckRequest {
    pub receipt: String,
}

/// Moves a received message's visibility deadline to now + `visibility_timeout_s` (0 releases it).
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct VisibilityRequest {
    pub receipt: String,
    pub visibility_timeout_s: u64,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct VisibilityChanged {
    pub visible_at_ms: u64,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct Deleted {
    pub deleted: bool,
}

/// Starts moving a dead-letter (poison) queue's messages back: each to the queue it was dead-lettered from,
/// or all to `to`.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct RedriveRequest {
    pub to: Option<QueueRef>,
    /// At most this many messages per second; as fast as possible when absent.
    pub rate_per_s_max: Option<u32>,
}

#[derive(Clone, Copy, Debug, Serialize, Deserialize, ToSchema, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum RedriveStatus {
    Running,
    Completed,
    Cancelled,
    Failed,
}

/// A redrive (message move task) and its progress.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct Redrive {
    pub id: String,
    pub source: QueueRef,
    pub destination: Option<QueueRef>,
    pub rate_per_s_max: Option<u32>,
    pub started_at_ms: u64,
    pub to_move: u64,
    pub moved: u64,
    pub status: RedriveStatus,
    /// Why it failed: `target_queue_missing` or `origin_unknown`.
    pub failure: Option<String>,
}

impl From<MoveTaskRecord> for Redrive {
    fn from(task: MoveTaskRecord) -> Self {
        Self {
            id: uuid::Uuid::from_bytes(task.id).to_string(),
            source: QueueRef::from(&task.source_key),
            destination: task
                .destination
                .as_ref()
                .map(|(_, key)| QueueRef::from(key)),
            rate_per_s_max: task.rate_per_s_max,
            started_at_ms: task.started_at,
            to_move: task.to_move,
            moved: task.moved,
            status: match task.status {
                MoveTaskStatus::Running => RedriveStatus::Running,
                MoveTaskStatus::Completed => RedriveStatus::Completed,
                MoveTaskStatus::Cancelled => RedriveStatus::Cancelled,
                MoveTaskStatus::Failed => RedriveStatus::Failed,
            },
            failure: task.failure.map(|f| {
                match f {
                    veil_core::MoveTaskFailure::TargetQueueMissing => "target_queue_missing",
                    veil_core::MoveTaskFailure::OriginUnknown => "origin_unknown",
                }
                .to_owned()
            }),
        }
    }
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct RedriveList {
    pub redrives: Vec<Redrive>,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct SeriesView {
    pub samples: Vec<crate::series::Sample>,
}

/// Every error answer: `{"error": {"code": ..., "message": ...}}`.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct ErrorBody {
    pub error: ErrorDetail,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct ErrorDetail {
    /// Stable, for scripts: `QueueNotFound`, `MessageNotFound`, `QueueExists`, `InvalidArgument`,
    /// `ConfirmationMismatch`, `ReceiptInvalid`, `RedriveRunning`, `RedriveNotRunning`, `OverLimit`,
    /// `Starting`, `StoreFailed`.
    pub code: String,
    pub message: String,
}

/// A message's recent deliveries (at most 8), oldest first: the answer to "why was it delivered five times?".
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct HistoryView {
    pub id: String,
    /// Its position in the queue it is in now (a dead-lettered message has a new one in the dead-letter queue).
    pub seq: u64,
    pub queue: QueueRef,
    /// The message was deleted; its history is from the in-memory record of recent deletes (lost at restart).
    pub deleted: bool,
    /// The deadline of the delivery in flight, if one is.
    pub in_flight_until_ms: Option<u64>,
    pub deliveries: Vec<DeliveryView>,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct DeliveryView {
    pub received_at_ms: u64,
    /// The receive count this delivery gave the message.
    pub receive_count: u32,
    /// `sqs`, `azure`, `kubemq` or `admin`; null when the front-end did not say.
    pub protocol: Option<String>,
    /// The client's address.
    pub client: Option<String>,
    /// The caller's identity where the protocol names one (SQS access key id, Azure account, KubeMQ client id).
    pub identity: Option<String>,
    /// The visibility timeout the receive granted.
    pub visibility_timeout_ms: u64,
    /// Visibility changes (extensions) made during the delivery, and the last one.
    pub visibility_changes: u32,
    pub last_visibility_change: Option<VisibilityChangeView>,
    pub ended: EndedView,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct VisibilityChangeView {
    pub at_ms: u64,
    pub visibility_timeout_ms: u64,
}

/// How a delivery ended: `in_flight` (not yet), `deleted`, `released` (visibility 0 / nack), `lapsed` (its
/// timeout ended unsettled), `dead_lettered` or `moved` (to `to`).
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct EndedView {
    pub how: String,
    pub at_ms: Option<u64>,
    pub to: Option<QueueRef>,
}

impl From<veil_core::MessageHistory> for HistoryView {
    fn from(history: veil_core::MessageHistory) -> Self {
        use veil_core::DeliveryEnding as E;
        Self {
            id: veil_core::message_id_text(&history.message_id),
            seq: history.seq,
            queue: QueueRef::from(&history.queue),
            deleted: history.deleted,
            in_flight_until_ms: history.in_flight_until,
            deliveries: history
                .deliveries
                .into_iter()
                .map(|d| DeliveryView {
                    received_at_ms: d.received_at,
                    receive_count: d.receive_count,
                    protocol: d.consumer.as_ref().map(|c| c.protocol.as_str().to_owned()),
                    client: d
                        .consumer
                        .as_ref()
                        .and_then(|c| c.address)
                        .map(|a| a.to_string()),
                    identity: d.consumer.and_then(|c| c.identity.clone()),
                    visibility_timeout_ms: d.visibility_ms,
                    visibility_changes: d.visibility_changes,
                    last_visibility_change: d.last_visibility_change.map(|c| {
                        VisibilityChangeView {
                            at_ms: c.at,
                            visibility_timeout_ms: c.visibility_ms,
                        }
                    }),
                    ended: match d.ended {
                        None => EndedView {
                            how: "in_flight".into(),
                            at_ms: None,
                            to: None,
                        },
                        Some(end) => {
                            let (how, to) = match end.how {
                                E::Deleted => ("deleted", None),
                                E::Released => ("released", None),
                                E::Lapsed => ("lapsed", None),
                                E::DeadLettered { to } => {
                                    ("dead_lettered", Some(QueueRef::from(&*to)))
                                }
                                E::Moved { to } => ("moved", Some(QueueRef::from(&*to))),
                            };
                            EndedView {
                                how: how.into(),
                                at_ms: Some(end.at),
                                to,
                            }
                        }
                    },
                })
                .collect(),
        }
    }
}
