//! Queue attributes: parsing the `Attributes` of CreateQueue / SetQueueAttributes into typed settings (with
//! SQS's ranges, parse.rs), applying them to the engine's [`QueueConfig`] (config.rs), and rendering a queue's
//! settings and counts as GetQueueAttributes shows them (render.rs). This file holds the types they share and
//! where SQS keeps what the engine does not interpret.

mod config;
mod parse;
mod render;
#[cfg(test)]
mod tests;

use veil_core::{DedupScope, QueueConfig, QueueKey, RedrivePolicy};

pub use self::config::{apply, default_config};
pub use self::parse::{check_fifo_settings, parse_settings};
pub use self::render::{is_known_attribute, render, ALL_ATTRIBUTES};

/// Where the attributes SQS keeps but the engine does not interpret are stored: the queue's protocol
/// settings, under `sqs.<attribute>` (like [`REDRIVE_ALLOW_POLICY_SETTING`]). Infrastructure-as-code tools
/// (Terraform, CDK, CloudFormation) set them and read them back, so they must round-trip even though Veil
/// neither enforces the access policy nor encrypts with the key.
pub const POLICY_SETTING: &str = "sqs.Policy";
pub const KMS_MASTER_KEY_ID_SETTING: &str = "sqs.KmsMasterKeyId";
pub const KMS_DATA_KEY_REUSE_SETTING: &str = "sqs.KmsDataKeyReusePeriodSeconds";
pub const SQS_MANAGED_SSE_SETTING: &str = "sqs.SqsManagedSseEnabled";
/// A FIFO queue's `FifoThroughputLimit`: SQS's throughput mode, which Veil keeps but does not act on (it has
/// no per-queue throughput quota). Only `perMessageGroupId` is stored, so that a queue left at the default
/// reads the same whether `perQueue` was given or not (CreateQueue's idempotency check compares configs).
pub const FIFO_THROUGHPUT_LIMIT_SETTING: &str = "sqs.FifoThroughputLimit";

/// A FIFO queue's `FifoThroughputLimit`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ThroughputLimit {
    PerQueue,
    PerMessageGroupId,
}

impl ThroughputLimit {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::PerQueue => "perQueue",
            Self::PerMessageGroupId => "perMessageGroupId",
        }
    }

    fn parse(value: &str) -> Option<Self> {
        [Self::PerQueue, Self::PerMessageGroupId]
            .into_iter()
            .find(|limit| limit.as_str() == value.trim())
    }

    fn of(config: &QueueConfig) -> Self {
        match config.protocol_settings.get(FIFO_THROUGHPUT_LIMIT_SETTING) {
            Some(_) => Self::PerMessageGroupId,
            None => Self::PerQueue,
        }
    }
}

/// `DeduplicationScope` as SQS spells it.
fn dedup_scope_name(scope: DedupScope) -> &'static str {
    match scope {
        DedupScope::Queue => "queue",
        DedupScope::Group => "messageGroup",
    }
}

/// Who may use a queue as its dead-letter queue.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RedrivePermission {
    AllowAll,
    DenyAll,
    /// Only the queues with these ARNs.
    ByQueue(Vec<String>),
}

impl RedrivePermission {
    /// Reads a stored `RedriveAllowPolicy`; an unreadable one allows everything, as if absent.
    pub fn from_stored(policy: Option<&str>) -> Self {
        policy
            .and_then(|text| parse::parse_redrive_allow_policy(text).ok())
            .map_or(Self::AllowAll, |(permission, _)| permission)
    }

    pub fn allows(&self, source_arn: &str) -> bool {
        match self {
            Self::AllowAll => true,
            Self::DenyAll => false,
            Self::ByQueue(arns) => arns.iter().any(|arn| arn == source_arn),
        }
    }
}

/// One attribute of CreateQueue / SetQueueAttributes, checked and converted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum QueueSetting {
    VisibilityTimeoutSeconds(u64),
    DelaySeconds(u64),
    MessageRetentionPeriodSeconds(u64),
    MaximumMessageSizeBytes(u64),
    ReceiveMessageWaitTimeSeconds(u64),
    /// `None` removes the policy (an empty value).
    RedrivePolicy(Option<RedrivePolicy>),
    /// The normalized JSON and what it permits; `None` removes it.
    RedriveAllowPolicy(Option<(String, RedrivePermission)>),
    /// An access policy (JSON, kept as given); `None` removes it (an empty value, as in SQS).
    Policy(Option<String>),
    /// SSE-KMS: the key; `None` (an empty value) turns SSE-KMS off. Setting a key turns SSE-SQS off, as in
    /// SQS (`SqsManagedSseEnabled` reads `false` once a key is set: LocalStack's AWS-recorded
    /// `test_set_queue_attributes_default_values` snapshot).
    KmsMasterKeyId(Option<String>),
    /// SSE-KMS data key reuse, 60-86,400 s.
    KmsDataKeyReusePeriodSeconds(u64),
    /// SSE-SQS on or off.
    SqsManagedSseEnabled(bool),
    /// `FifoQueue=true` given to a FIFO queue: it changes nothing (a queue's type is fixed at creation).
    FifoQueue,
    /// A FIFO queue deduplicates a send without a deduplication id by the SHA-256 of its body.
    ContentBasedDeduplication(bool),
    DeduplicationScope(DedupScope),
    FifoThroughputLimit(ThroughputLimit),
}

/// Where a queue's `RedriveAllowPolicy` is kept: the engine does not interpret it (only SQS checks it, when
/// another queue names this one as its dead-letter queue), so it is a protocol setting of the queue.
pub const REDRIVE_ALLOW_POLICY_SETTING: &str = "sqs.RedriveAllowPolicy";

/// The queue's `RedriveAllowPolicy` as it was set, if any.
pub fn redrive_allow_policy(config: &QueueConfig) -> Option<&str> {
    config
        .protocol_settings
        .get(REDRIVE_ALLOW_POLICY_SETTING)
        .map(String::as_str)
}

/// The key of a queue's dead-letter queue, if it has a redrive policy.
pub fn dead_letter_target(config: &QueueConfig) -> Option<&QueueKey> {
    config.redrive_policy.as_ref().map(|p| &p.dead_letter_queue)
}
