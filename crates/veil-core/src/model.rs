//! The engine's data model: queue identity and settings, messages as sent, as stored and as delivered,
//! and the statistics an operator reads. Protocol front-ends translate their wire shapes into these.

use std::collections::BTreeMap;
use std::ops::Bound;

use bytes::Bytes;
use serde::{Deserialize, Serialize};

use crate::clock::Millis;
use crate::limits;

/// A queue's number, unique for the life of the data directory and never reused, so that a receipt issued
/// for a deleted queue can never act on a new queue of the same name.
pub type QueueId = u64;
/// A message's position in its queue: unique per queue, increasing with send order, never reused.
pub type Seq = u64;

/// `expires_at` of a message that never expires.
pub const NEVER: Millis = Millis::MAX;

/// The namespace that the SQS default account/region, the Azure development account and KubeMQ share.
pub const DEFAULT_NAMESPACE: &str = "default";

/// A queue's name within its namespace (docs/semantics.md §7).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct QueueKey {
    pub namespace: String,
    pub name: String,
}

impl QueueKey {
    pub fn new(namespace: impl Into<String>, name: impl Into<String>) -> Self {
        Self {
            namespace: namespace.into(),
            name: name.into(),
        }
    }
}

impl std::fmt::Display for QueueKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// When a dead-letter rule (the queue's or the message's own) moves a message that has used up its receives.
/// It is a property of the receive that delivered the message — of the protocol's rule — not of the rule:
/// docs/semantics.md §3 "Dead letters".
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum DeadLetterTiming {
    /// SQS and Azure: the receive that would deliver the message once more moves it instead.
    #[default]
    OnReceive,
    /// KubeMQ: as soon as this delivery is released with the receives used up — rejected (visibility 0), its
    /// visibility lapsing, or its consumer going away — so a consumer of the dead-letter queue sees it at once.
    /// A receive of any protocol still moves a used-up message it finds.
    OnRelease,
}

/// Where a queue's messages go once they have been received too often.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RedrivePolicy {
    pub dead_letter_queue: QueueKey,
    /// A message whose `receive_count` has reached this is moved, at the moment its delivery's
    /// [`DeadLetterTiming`] says.
    pub max_receive_count: u32,
}

/// A message's own dead-letter rule (KubeMQ's per-message `MaxReceiveCount` / `MaxReceiveQueue`). It takes
/// precedence over the queue's [`RedrivePolicy`]: a receive that would deliver the message when its
/// `receive_count` already equals `max_receive_count` moves it to `dead_letter_queue` instead, as a fresh
/// message there (receive count reset, this rule cleared, its expiry kept), or drops it when there is none.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MessageRedrivePolicy {
    pub max_receive_count: u32,
    /// Created with the source queue's settings if it does not exist when the move happens.
    pub dead_letter_queue: Option<QueueKey>,
}

/// Which sends a FIFO queue's deduplication compares (docs/semantics.md §4).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum DedupScope {
    /// A deduplication id is unique across the whole queue.
    #[default]
    Queue,
    /// A deduplication id is unique within its message group.
    Group,
}

/// How a queue orders and deduplicates by message group (SQS FIFO queues; docs/semantics.md §4). A queue is
/// FIFO from its creation to its deletion.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FifoConfig {
    /// A send without a deduplication id uses the SHA-256 of its body instead of being refused.
    pub content_based_dedup: bool,
    pub dedup_scope: DedupScope,
    /// How long a deduplication id is remembered, counted from the first send that used it.
    pub dedup_interval_ms: Millis,
}

impl Default for FifoConfig {
    fn default() -> Self {
        Self {
            content_based_dedup: false,
            dedup_scope: DedupScope::Queue,
            dedup_interval_ms: limits::DEDUP_INTERVAL_MS_DEFAULT,
        }
    }
}

/// A queue's settings. Every field is enforced by the engine; the protocols choose the defaults. What only
/// one protocol interprets (SQS's tags, Azure's metadata, access policies) is kept in `protocol_settings`.
///
/// Stored as [`StoredQueueConfig`], the record shape of storage format 6, so that data written before the
/// protocol-only fields moved into `protocol_settings` reads back unchanged (and the other way round).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "StoredQueueConfig", into = "StoredQueueConfig")]
pub struct QueueConfig {
    pub visibility_timeout_ms: Millis,
    pub delay_ms: Millis,
    /// `None` keeps messages forever.
    pub retention_ms: Option<Millis>,
    pub message_size_bytes_max: u32,
    pub receive_wait_ms: Millis,
    pub redrive_policy: Option<RedrivePolicy>,
    /// At this many Hidden messages a receive fails with `OverLimit` (a FIFO queue's returns nothing instead).
    pub inflight_max: u32,
    /// `Some` for a FIFO queue: strict order within each message group, and deduplicated sends.
    pub fifo: Option<FifoConfig>,
    /// Durable settings a front-end keeps for a queue that the engine does not interpret (e.g. Azure's
    /// stored access policies and metadata, SQS's policy and tags), keyed by a protocol prefix.
    pub protocol_settings: BTreeMap<String, String>,
    /// Record each delivered message's last deliveries (docs/semantics.md §9; `Engine::history`). On by default; off, the
    /// queue records and writes no history. Stored with the queue (a new field of the record: storage
    /// format 6, since postcard has no field defaults).
    pub delivery_history: bool,
}

impl Default for QueueConfig {
    fn default() -> Self {
        Self {
            visibility_timeout_ms: limits::VISIBILITY_TIMEOUT_MS_DEFAULT,
            delay_ms: 0,
            retention_ms: Some(limits::RETENTION_MS_DEFAULT),
            message_size_bytes_max: limits::MESSAGE_SIZE_BYTES_DEFAULT,
            receive_wait_ms: 0,
            redrive_policy: None,
            inflight_max: limits::INFLIGHT_MESSAGES_DEFAULT,
            fifo: None,
            protocol_settings: BTreeMap::new(),
            delivery_history: true,
        }
    }
}

impl QueueConfig {
    /// The protocol settings under `prefix`, keyed by what follows it (a front-end's map kept in
    /// `protocol_settings`, such as SQS's tags under [`SQS_TAG_SETTING_PREFIX`]).
    pub fn settings_under(&self, prefix: &str) -> BTreeMap<String, String> {
        self.protocol_settings
            .range::<str, _>((Bound::Included(prefix), Bound::Unbounded))
            .take_while(|(key, _)| key.starts_with(prefix))
            .map(|(key, value)| (key[prefix.len()..].to_owned(), value.clone()))
            .collect()
    }

    /// Replaces the protocol settings under `prefix` with `map`, each key prefixed.
    pub fn set_settings_under(&mut self, prefix: &str, map: BTreeMap<String, String>) {
        self.protocol_settings
            .retain(|key, _| !key.starts_with(prefix));
        self.protocol_settings.extend(
            map.into_iter()
                .map(|(key, value)| (format!("{prefix}{key}"), value)),
        );
    }
}

/// Where SQS's queue tags are kept in `protocol_settings` (one entry per tag: this prefix, then the tag's key).
/// Named here, not in veil-sqs, because [`StoredQueueConfig`] stores them in a field of their own.
pub const SQS_TAG_SETTING_PREFIX: &str = "sqs.tag.";
/// Where Azure's queue metadata is kept in `protocol_settings` (one entry per name), for the same reason.
pub const AZURE_METADATA_SETTING_PREFIX: &str = "azure.metadata.";

/// [`QueueConfig`] as storage format 6 encodes it (postcard, fields in this order, no field defaults): the
/// shape of every stored queue record (redb, the write-ahead log, PostgreSQL). Tags and metadata have fields
/// of their own here; in memory they are protocol settings. Change this shape only with a new storage format.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoredQueueConfig {
    pub visibility_timeout_ms: Millis,
    pub delay_ms: Millis,
    pub retention_ms: Option<Millis>,
    pub message_size_bytes_max: u32,
    pub receive_wait_ms: Millis,
    pub redrive_policy: Option<RedrivePolicy>,
    pub inflight_max: u32,
    #[serde(default)]
    pub fifo: Option<FifoConfig>,
    /// The protocol settings under [`SQS_TAG_SETTING_PREFIX`].
    pub tags: BTreeMap<String, String>,
    /// The protocol settings under [`AZURE_METADATA_SETTING_PREFIX`].
    pub metadata: BTreeMap<String, String>,
    /// The other protocol settings.
    #[serde(default)]
    pub protocol_settings: BTreeMap<String, String>,
    pub delivery_history: bool,
}

impl From<StoredQueueConfig> for QueueConfig {
    fn from(stored: StoredQueueConfig) -> Self {
        let mut config = Self {
            visibility_timeout_ms: stored.visibility_timeout_ms,
            delay_ms: stored.delay_ms,
            retention_ms: stored.retention_ms,
            message_size_bytes_max: stored.message_size_bytes_max,
            receive_wait_ms: stored.receive_wait_ms,
            redrive_policy: stored.redrive_policy,
            inflight_max: stored.inflight_max,
            fifo: stored.fifo,
            protocol_settings: stored.protocol_settings,
            delivery_history: stored.delivery_history,
        };
        config.set_settings_under(SQS_TAG_SETTING_PREFIX, stored.tags);
        config.set_settings_under(AZURE_METADATA_SETTING_PREFIX, stored.metadata);
        config
    }
}

impl From<QueueConfig> for StoredQueueConfig {
    fn from(mut config: QueueConfig) -> Self {
        let tags = config.settings_under(SQS_TAG_SETTING_PREFIX);
        let metadata = config.settings_under(AZURE_METADATA_SETTING_PREFIX);
        config.set_settings_under(SQS_TAG_SETTING_PREFIX, BTreeMap::new());
        config.set_settings_under(AZURE_METADATA_SETTING_PREFIX, BTreeMap::new());
        Self {
            visibility_timeout_ms: config.visibility_timeout_ms,
            delay_ms: config.delay_ms,
            retention_ms: config.retention_ms,
            message_size_bytes_max: config.message_size_bytes_max,
            receive_wait_ms: config.receive_wait_ms,
            redrive_policy: config.redrive_policy,
            inflight_max: config.inflight_max,
            fifo: config.fifo,
            tags,
            metadata,
            protocol_settings: config.protocol_settings,
            delivery_history: config.delivery_history,
        }
    }
}

/// A queue as the store keeps it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct QueueRecord {
    pub id: QueueId,
    pub key: QueueKey,
    pub config: QueueConfig,
    pub created_at: Millis,
    pub modified_at: Millis,
    /// Sequence numbers below this may have been handed out; after a restart the queue continues from here.
    pub seq_reserved: Seq,
}

/// Running totals of what happened to a queue's messages (docs/semantics.md §9, "Totals"). Persisted with
/// the changes that move them. Every message that entered the queue left it in exactly one way or is still
/// there: `sends` = stored + `deletes` + `purges` + `expiries` + `dead_letter_moves` + `dead_letter_drops` +
/// `moves_out` ([`Counters::departed`]; `QueueIndex::check_invariants` asserts it).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counters {
    /// Messages that entered the queue: a client's send (not a FIFO duplicate), or an arrival moved here (a
    /// dead letter, a move task's or a re-queue's message, one returned from a queue that was gone).
    pub sends: u64,
    pub deliveries: u64,
    /// Deliveries that ended with the message visible again, unsettled: its deadline passed (at once for a
    /// receive with visibility 0) or its consumer gave it back (visibility changed to 0, a nack).
    pub redeliveries: u64,
    /// Messages deleted one by one: by their consumer (SQS delete, Azure delete, KubeMQ ack) or an operator.
    pub deletes: u64,
    pub expiries: u64,
    pub dead_letter_moves: u64,
    /// Messages dropped by their own redrive policy, which named no dead-letter queue.
    pub dead_letter_drops: u64,
    /// Messages removed by a purge (SQS PurgeQueue, Azure Clear Messages, KubeMQ AckAllQueueMessages, the
    /// admin API's purge).
    pub purges: u64,
    /// Messages moved to another queue by a move task (a redrive) or their consumer (KubeMQ's re-queue).
    pub moves_out: u64,
}

impl Counters {
    /// Messages that left the queue, in any of the ways counted.
    pub fn departed(&self) -> u64 {
        self.deletes
            + self.purges
            + self.expiries
            + self.dead_letter_moves
            + self.dead_letter_drops
            + self.moves_out
    }
}

/// One user attribute of a message (SQS message attributes, KubeMQ tags), kept as opaque labelled data: the
/// engine checks neither the label nor the value; SQS's typing rules live in veil-sqs
/// (`validate/message_attributes.rs`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AttributeValue {
    /// The sender's type label (SQS's `String`, `Number`, `Binary`, with an optional `.custom` suffix).
    pub data_type: String,
    pub value: AttributeData,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum AttributeData {
    String(String),
    Binary(Bytes),
}

pub type Attributes = BTreeMap<String, AttributeValue>;

/// The immutable part of a stored message (its body may be replaced by Azure's update).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Payload {
    pub message_id: [u8; 16],
    pub body: Bytes,
    /// MD5 of `body`, computed once at send (SQS returns it on every send and receive).
    pub body_md5: [u8; 16],
    pub attributes: Attributes,
    pub sent_at: Millis,
    pub sender_id: String,
    /// Set when an engine move brought the message here: as a dead letter, or re-queued by its consumer.
    pub moved_from: Option<MovedFrom>,
    /// The message group it was sent with (FIFO order; kept and returned on standard queues too).
    pub group: Option<String>,
    /// The deduplication id a FIFO queue compared it by: the sender's, or the body's SHA-256 in hex.
    pub dedup_id: Option<String>,
}

impl Payload {
    /// The queue this message was dead-lettered from, if it was (SQS's `DeadLetterQueueSourceArn`).
    pub fn dead_letter_source(&self) -> Option<&QueueKey> {
        self.moved_from
            .as_ref()
            .filter(|moved| moved.reason == MoveReason::DeadLetter)
            .map(|moved| &moved.queue)
    }
}

/// Where and why an engine move brought a message into its queue (KubeMQ shows both as `ReRouted` /
/// `ReRoutedFromQueue`; SQS shows only dead letters).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MovedFrom {
    pub queue: QueueKey,
    pub reason: MoveReason,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum MoveReason {
    /// A dead-letter rule moved it (docs/semantics.md §3).
    DeadLetter,
    /// Its consumer moved it (KubeMQ's re-queue, `Engine::move_message`), or sent a modified copy in its place.
    Requeue,
}

/// The mutable part of a stored message. The engine keeps exactly this in memory for every message.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MessageState {
    pub sent_at: Millis,
    pub visible_at: Millis,
    /// [`NEVER`] when the message does not expire.
    pub expires_at: Millis,
    /// 0 until the first receive.
    pub first_received_at: Millis,
    pub receive_count: u32,
    /// Bumped by every receive and update; a receipt is current while its generation equals this.
    pub generation: u32,
    /// The body's length, so that a queue's stored bytes are known without reading bodies.
    pub body_bytes: u32,
    /// The latest delivery was made by a receive with [`DeadLetterTiming::OnRelease`]: releasing it with the
    /// receives used up moves the message at once. Fits in the padding, so the state stays 48 bytes.
    pub dead_letter_on_release: bool,
}

/// How long a new message lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Ttl {
    After(Millis),
    Never,
}

/// A remembered deduplication id of a FIFO queue: a later send with the same id inside the interval is
/// accepted and answered with this message's id and sequence number, and never stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DedupEntry {
    /// The first send with this id; the id is forgotten `dedup_interval_ms` after it.
    pub sent_at: Millis,
    pub message_id: [u8; 16],
    pub seq: Seq,
}

/// A message to send.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NewMessage {
    pub body: Bytes,
    pub attributes: Attributes,
    /// The size the message counts against the queue's `message_size_bytes_max`, counted by the sending
    /// protocol's rule (SQS's lives in veil-sqs); the engine only compares it with the limit.
    pub size_bytes: usize,
    /// `None` uses the queue's delay.
    pub delay_ms: Option<Millis>,
    /// `None` uses the queue's retention.
    pub ttl: Option<Ttl>,
    pub sender_id: String,
    /// The message's own dead-letter rule, if any.
    pub redrive: Option<MessageRedrivePolicy>,
    /// Set when the message is sent in place of another that its consumer settles (KubeMQ's
    /// SendModifiedMessage): recorded in the payload like a move's origin.
    pub moved_from: Option<MovedFrom>,
    /// Required by a FIFO queue; kept and returned by any queue.
    pub group: Option<String>,
    /// A FIFO queue's deduplication id; without one a queue with content-based deduplication uses the
    /// body's SHA-256, and any other FIFO queue refuses the send. Ignored by standard queues.
    pub dedup_id: Option<String>,
}

/// The MD5 digest of a body (SQS's `MD5OfMessageBody`), kept with the message so it is computed once.
pub fn body_md5(body: &[u8]) -> [u8; 16] {
    use md5::{Digest, Md5};
    Md5::digest(body).into()
}

/// The bytes of a message's data as the model keeps it: its body, and each attribute's name, type label and
/// data. The count of front-ends whose protocol sets no rule of its own (KubeMQ, the admin API).
pub fn stored_size_bytes(body: &[u8], attributes: &Attributes) -> usize {
    body.len()
        + attributes
            .iter()
            .map(|(name, value)| {
                let data = match &value.value {
                    AttributeData::String(text) => text.len(),
                    AttributeData::Binary(bytes) => bytes.len(),
                };
                name.len() + value.data_type.len() + data
            })
            .sum::<usize>()
}

impl NewMessage {
    /// A message of `body` alone, counted as its body's length; a caller that adds attributes sets
    /// `size_bytes` by its protocol's rule.
    pub fn new(body: impl Into<Bytes>) -> Self {
        let body: Bytes = body.into();
        Self {
            size_bytes: body.len(),
            body,
            attributes: Attributes::new(),
            delay_ms: None,
            ttl: None,
            sender_id: String::new(),
            redrive: None,
            moved_from: None,
            group: None,
            dedup_id: None,
        }
    }
}

/// What a send returns for each message.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SentMessage {
    pub message_id: [u8; 16],
    pub body_md5: [u8; 16],
    pub queue: QueueId,
    pub seq: Seq,
    pub sent_at: Millis,
    pub visible_at: Millis,
    pub expires_at: Millis,
    /// A FIFO send whose deduplication id was seen inside the interval: accepted, not stored; `message_id`
    /// and `seq` are the first send's.
    pub duplicate: bool,
}

/// A message as receive or peek returns it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Message {
    pub seq: Seq,
    pub payload: Payload,
    pub state: MessageState,
    /// The new receipt for a receive; `None` for a peek.
    pub receipt: Option<String>,
    /// The message's own dead-letter rule, if it was sent with one.
    pub redrive: Option<MessageRedrivePolicy>,
}

impl Message {
    pub fn message_id_string(&self) -> String {
        message_id_text(&self.payload.message_id)
    }
}

/// A message id as every protocol shows it: a lower-case hyphenated UUID. Encoded into a buffer rather than
/// through `Display`, whose formatting machinery cost ~1,000 instructions per id, twice per message sent and
/// received (docs/benchmarks.md, "Instructions per message").
pub fn message_id_text(id: &[u8; 16]) -> String {
    let mut buffer = uuid::Uuid::encode_buffer();
    uuid::Uuid::from_bytes(*id)
        .hyphenated()
        .encode_lower(&mut buffer)
        .to_owned()
}

/// Options of one receive.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReceiveOptions {
    pub max_messages: usize,
    /// `None` uses the queue's visibility timeout.
    pub visibility_ms: Option<Millis>,
    /// Long-poll wait; 0 returns at once, `None` uses the queue's `receive_wait_ms`.
    pub wait_ms: Option<Millis>,
    /// When a dead-letter rule moves what this receive delivers (the protocol's rule).
    pub dead_letter: DeadLetterTiming,
    /// A FIFO queue answers a retry with the same attempt id, while none of the messages it delivered has
    /// changed, with the same messages and receipts (SQS's `ReceiveRequestAttemptId`). Ignored by standard
    /// queues.
    pub attempt_id: Option<String>,
    /// Who receives, for the delivery history (docs/semantics.md §9); `None` when the caller does not say.
    pub consumer: Option<crate::history::Consumer>,
}

impl ReceiveOptions {
    /// Up to `max_messages` with the queue's visibility and wait, dead letters moved on receive.
    pub fn new(max_messages: usize) -> Self {
        Self {
            max_messages,
            visibility_ms: None,
            wait_ms: None,
            dead_letter: DeadLetterTiming::OnReceive,
            attempt_id: None,
            consumer: None,
        }
    }
}

/// What a receive returned, and what it found expired on the way.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Received {
    pub messages: Vec<Message>,
    /// Messages of the queue this receive found past their expiry and removed (KubeMQ's `MessagesExpired`).
    /// The server's periodic sweep removes expired messages too; those are not counted here.
    pub expired: u64,
}

/// Which receipts an operation honours (docs/semantics.md §2).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ReceiptRule {
    /// SQS standard queues: any receipt Veil issued for the message.
    AnyIssued,
    /// Azure: only the receipt of the latest receive or update, even after its visibility lapsed.
    Current,
    /// SQS FIFO queues: only the receipt of the latest receive, and only until its visibility lapses; any
    /// other is expired.
    Unexpired,
}

/// What a delete did.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum DeleteOutcome {
    Deleted,
    /// The receipt was issued by Veil but its message is already gone (SQS answers 200).
    AlreadyGone,
}

/// A change of a Hidden message's visibility deadline.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct VisibilityChange {
    /// The new deadline is `now + visibility_ms`.
    pub visibility_ms: Millis,
    /// Refuse a deadline later than this long after the receive (SQS/KubeMQ: 12 h).
    pub since_receive_ms_max: Option<Millis>,
    /// Refuse a deadline past the message's expiry (Azure).
    pub not_past_expiry: bool,
    /// Which receipts of the message may change it: SQS standard queues honour any receipt Veil issued for it
    /// (AWS changes the message's visibility even through the handle of an earlier receive); Azure and KubeMQ
    /// need the current one.
    pub receipts: ReceiptRule,
}

/// The result of Azure's update: a new receipt and the new deadline.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Updated {
    pub receipt: String,
    pub visible_at: Millis,
}

/// What an operator needs to see about a queue, including its hidden backlog.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct QueueStats {
    pub visible: u64,
    pub hidden: u64,
    pub delayed: u64,
    /// Age of the oldest stored message, 0 when the queue is empty.
    pub oldest_age_ms: Millis,
    /// Sum of the stored messages' body lengths.
    pub stored_bytes: u64,
    /// Sequence numbers of the oldest and newest stored message; `None` when the queue is empty.
    pub seq_range: Option<(Seq, Seq)>,
    pub counters: Counters,
}

/// A queue's settings, times and statistics.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct QueueInfo {
    pub id: QueueId,
    pub key: QueueKey,
    pub config: QueueConfig,
    pub created_at: Millis,
    pub modified_at: Millis,
    pub stats: QueueStats,
}

/// Whether create made a new queue.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum CreateOutcome {
    Created(QueueInfo),
    /// The queue existed; the caller compares settings and decides whether that is an error.
    Existing(QueueInfo),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_message_id_is_shown_as_a_lower_case_hyphenated_uuid() {
        let id: [u8; 16] = std::array::from_fn(|i| (i * 17) as u8);
        assert_eq!(message_id_text(&id), uuid::Uuid::from_bytes(id).to_string());
        assert_eq!(message_id_text(&id), "00112233-4455-6677-8899-aabbccddeeff");
    }

    #[test]
    fn settings_under_a_prefix_are_only_the_keys_that_start_with_it() {
        let mut config = QueueConfig::default();
        config
            .protocol_settings
            .insert("sqs.tagline".into(), "not a tag".into());
        config
            .protocol_settings
            .insert("sqs.Policy".into(), "{}".into());
        config.set_settings_under(
            SQS_TAG_SETTING_PREFIX,
            BTreeMap::from([("a".into(), "1".into()), ("b.c".into(), "2".into())]),
        );
        assert_eq!(
            config.settings_under(SQS_TAG_SETTING_PREFIX),
            BTreeMap::from([("a".into(), "1".into()), ("b.c".into(), "2".into())])
        );
        config.set_settings_under(
            SQS_TAG_SETTING_PREFIX,
            BTreeMap::from([("d".into(), "3".into())]),
        );
        assert_eq!(
            config.protocol_settings.len(),
            3,
            "the old tags replaced, the rest kept"
        );
        assert_eq!(config.protocol_settings["sqs.tag.d"], "3");
    }

    #[test]
    fn the_stored_shape_keeps_tags_and_metadata_apart_from_the_other_settings() {
        let mut config = QueueConfig::default();
        config.set_settings_under(
            SQS_TAG_SETTING_PREFIX,
            BTreeMap::from([("t".into(), "1".into())]),
        );
        config.set_settings_under(
            AZURE_METADATA_SETTING_PREFIX,
            BTreeMap::from([("m".into(), "2".into())]),
        );
        config
            .protocol_settings
            .insert("azure.acl".into(), "<x/>".into());
        let stored = StoredQueueConfig::from(config.clone());
        assert_eq!(stored.tags, BTreeMap::from([("t".into(), "1".into())]));
        assert_eq!(stored.metadata, BTreeMap::from([("m".into(), "2".into())]));
        assert_eq!(stored.protocol_settings.len(), 1);
        assert_eq!(QueueConfig::from(stored), config);
    }
}
