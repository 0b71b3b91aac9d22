//! Queue attributes: parsing the `Attributes` of CreateQueue / SetQueueAttributes into typed settings (with
//! SQS's ranges), applying them to the engine's [`QueueConfig`], and rendering a queue's settings and counts as
//! GetQueueAttributes shows them.

use std::collections::BTreeMap;

use crate::limits as sqs_limits;
use serde_json::{json, Value};
use veil_core::limits::SECOND_MS;
use veil_core::{DedupScope, FifoConfig, QueueConfig, QueueInfo, QueueKey, RedrivePolicy};

use crate::error::{ErrorCode, SqsError, SqsResult};
use crate::namespace::NamespaceMap;

/// Attributes GetQueueAttributes returns for `All`, in this order; those a queue has no value for (no
/// policy, no KMS key, the FIFO attributes of a standard queue) are left out.
pub const ALL_ATTRIBUTES: &[&str] = &[
    "ApproximateNumberOfMessages",
    "ApproximateNumberOfMessagesNotVisible",
    "ApproximateNumberOfMessagesDelayed",
    "CreatedTimestamp",
    "DelaySeconds",
    "LastModifiedTimestamp",
    "MaximumMessageSize",
    "MessageRetentionPeriod",
    "QueueArn",
    "ReceiveMessageWaitTimeSeconds",
    "VisibilityTimeout",
    "Policy",
    "RedrivePolicy",
    "RedriveAllowPolicy",
    "KmsMasterKeyId",
    "KmsDataKeyReusePeriodSeconds",
    "SqsManagedSseEnabled",
    "FifoQueue",
    "ContentBasedDeduplication",
    "DeduplicationScope",
    "FifoThroughputLimit",
];

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
            .and_then(|text| parse_redrive_allow_policy(text).ok())
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

fn seconds(name: &str, value: &str, min: u64, max: u64) -> SqsResult<u64> {
    value
        .trim()
        .parse::<u64>()
        .ok()
        .filter(|v| (min..=max).contains(v))
        .ok_or_else(|| SqsError::invalid_attribute_value(name))
}

/// AWS's answer when one request turns on both kinds of server-side encryption (recorded in LocalStack's
/// `test_sse_kms_and_sqs_are_mutually_exclusive` snapshot, both protocols).
fn both_encryptions() -> SqsError {
    SqsError::new(
        ErrorCode::InvalidAttributeName,
        "You can use one type of server-side encryption (SSE) at one time. You can either enable KMS SSE \
         or SQS SSE.",
    )
}

/// A standard queue refuses the FIFO attributes with AWS's texts (LocalStack's AWS-recorded
/// `test_create_standard_queue_with_fifo_attribute_raises_error`, `test_set_unsupported_attribute_standard`
/// and `test_set_unsupported_attribute_fifo` snapshots): `FifoQueue` (also `true`, in SetQueueAttributes) and
/// `ContentBasedDeduplication` are unknown, the two throughput settings need `FifoQueue`.
fn standard_queue_fifo_attribute(name: &str) -> SqsError {
    match name {
        "DeduplicationScope" | "FifoThroughputLimit" => SqsError::new(
            ErrorCode::InvalidAttributeName,
            format!("You can specify the {name} only when FifoQueue is set to true."),
        ),
        _ => SqsError::unknown_attribute(name),
    }
}

/// A FIFO queue's own attributes. `FifoQueue` may be repeated as `true` but never turned off (AWS's text,
/// LocalStack's AWS-recorded `test_set_unsupported_attribute_fifo` snapshot); the booleans are read without
/// regard to case, as AWS does (`"FifoQueue": "True"` in LocalStack's AWS-validated
/// `test_fifo_delete_after_visibility_timeout`).
fn fifo_setting(name: &str, value: &str) -> SqsResult<QueueSetting> {
    let flag = |value: &str| match value.trim().to_ascii_lowercase().as_str() {
        "true" => Some(true),
        "false" => Some(false),
        _ => None,
    };
    Ok(match name {
        "FifoQueue" if flag(value) == Some(true) => QueueSetting::FifoQueue,
        "FifoQueue" => {
            return Err(SqsError::new(
                ErrorCode::InvalidAttributeValue,
                "Invalid value for the parameter FifoQueue. Reason: Modifying queue type is not supported.",
            ))
        }
        "ContentBasedDeduplication" => QueueSetting::ContentBasedDeduplication(
            flag(value).ok_or_else(|| SqsError::invalid_attribute_value(name))?,
        ),
        "DeduplicationScope" => QueueSetting::DeduplicationScope(
            [DedupScope::Queue, DedupScope::Group]
                .into_iter()
                .find(|scope| dedup_scope_name(*scope) == value.trim())
                .ok_or_else(|| SqsError::invalid_attribute_value(name))?,
        ),
        _ => QueueSetting::FifoThroughputLimit(
            ThroughputLimit::parse(value).ok_or_else(|| SqsError::invalid_attribute_value(name))?,
        ),
    })
}

/// High throughput needs deduplication by message group: a FIFO queue whose settings (after a change) pair
/// `FifoThroughputLimit=perMessageGroupId` with `DeduplicationScope=queue` is refused with AWS's text (as
/// relayed by the Terraform AWS provider, cloudfoundry/csb-brokerpak-aws's FIFO notes). The other pairing,
/// deduplication by group at `perQueue`, is allowed.
pub fn check_fifo_settings(config: &QueueConfig) -> SqsResult<()> {
    let Some(fifo) = &config.fifo else {
        return Ok(());
    };
    if ThroughputLimit::of(config) == ThroughputLimit::PerMessageGroupId
        && fifo.dedup_scope != DedupScope::Group
    {
        return Err(SqsError::new(
            ErrorCode::InvalidAttributeValue,
            "Invalid value for the parameter FifoThroughputLimit. Reason: To set FifoThroughputLimit to \
             perMessageGroupId, the DeduplicationScope must be messageGroup.",
        ));
    }
    Ok(())
}

/// `true` or `false`, as SQS spells them.
fn boolean(name: &str, value: &str) -> SqsResult<bool> {
    match value.trim() {
        "true" => Ok(true),
        "false" => Ok(false),
        _ => Err(SqsError::invalid_attribute_value(name)),
    }
}

/// An access policy must be a JSON object (AWS answers `Invalid value for the parameter Policy.`
/// otherwise); an empty value removes the policy.
fn policy(value: &str) -> SqsResult<Option<String>> {
    if value.trim().is_empty() {
        return Ok(None);
    }
    match serde_json::from_str::<Value>(value) {
        Ok(Value::Object(_)) => Ok(Some(value.to_string())),
        _ => Err(SqsError::invalid_attribute_value("Policy")),
    }
}

fn redrive_policy_error(value: &str, reason: &str) -> SqsError {
    SqsError::invalid_value("RedrivePolicy", value, reason)
}

/// `{"deadLetterTargetArn":"arn:…","maxReceiveCount":5}`; the count may be a number or a numeric string.
fn parse_redrive_policy(value: &str, names: &NamespaceMap) -> SqsResult<RedrivePolicy> {
    let parsed: Value =
        serde_json::from_str(value).map_err(|_| redrive_policy_error(value, "Invalid JSON."))?;
    let target = parsed
        .get("deadLetterTargetArn")
        .and_then(Value::as_str)
        .ok_or_else(|| {
            redrive_policy_error(
                value,
                "Redrive policy does not contain deadLetterTargetArn.",
            )
        })?;
    let count = match parsed.get("maxReceiveCount") {
        Some(Value::Number(n)) => n.as_u64(),
        Some(Value::String(s)) => s.trim().parse::<u64>().ok(),
        _ => None,
    }
    .and_then(|n| u32::try_from(n).ok())
    .filter(|n| (sqs_limits::MAX_RECEIVE_COUNT_MIN..=sqs_limits::MAX_RECEIVE_COUNT_MAX).contains(n))
    .ok_or_else(|| {
        let given = parsed
            .get("maxReceiveCount")
            .map_or_else(String::new, |count| match count {
                Value::String(text) => text.clone(),
                other => other.to_string(),
            });
        redrive_policy_error(
            value,
            &format!(
                "Invalid value for maxReceiveCount: {given}, valid values are from {} to {} both inclusive.",
                sqs_limits::MAX_RECEIVE_COUNT_MIN,
                sqs_limits::MAX_RECEIVE_COUNT_MAX
            ),
        )
    })?;
    let dead_letter_queue = names
        .key_from_arn(target)
        .ok_or_else(|| redrive_policy_error(value, "Invalid deadLetterTargetArn."))?;
    Ok(RedrivePolicy {
        dead_letter_queue,
        max_receive_count: count,
    })
}

/// `{"redrivePermission":"byQueue","sourceQueueArns":["arn:…"]}`; returns it normalized (compact JSON).
fn parse_redrive_allow_policy(value: &str) -> SqsResult<(RedrivePermission, String)> {
    let error = |reason: &str| SqsError::invalid_value("RedriveAllowPolicy", value, reason);
    let parsed: Value = serde_json::from_str(value).map_err(|_| error("Invalid JSON."))?;
    let arns: Option<Vec<String>> = match parsed.get("sourceQueueArns") {
        None | Some(Value::Null) => None,
        Some(Value::Array(items)) => Some(
            items
                .iter()
                .map(|item| item.as_str().map(str::to_string))
                .collect::<Option<_>>()
                .ok_or_else(|| error("sourceQueueArns must be a list of ARNs."))?,
        ),
        Some(_) => return Err(error("sourceQueueArns must be a list of ARNs.")),
    };
    let permission = match parsed.get("redrivePermission").and_then(Value::as_str) {
        Some("allowAll") | Some("denyAll") if arns.as_ref().is_some_and(|a| !a.is_empty()) => {
            return Err(error(
                "sourceQueueArns may be given only when redrivePermission is byQueue.",
            ))
        }
        Some("allowAll") => RedrivePermission::AllowAll,
        Some("denyAll") => RedrivePermission::DenyAll,
        Some("byQueue") => {
            let arns = arns.unwrap_or_default();
            if arns.is_empty() || arns.len() > sqs_limits::REDRIVE_ALLOW_SOURCE_ARNS_MAX {
                return Err(error(&format!(
                    "byQueue needs 1 to {} sourceQueueArns.",
                    sqs_limits::REDRIVE_ALLOW_SOURCE_ARNS_MAX
                )));
            }
            RedrivePermission::ByQueue(arns)
        }
        _ => {
            return Err(error(
                "redrivePermission must be allowAll, denyAll or byQueue.",
            ))
        }
    };
    Ok((permission, parsed.to_string()))
}

/// Parses the attributes of CreateQueue / SetQueueAttributes for a FIFO (`fifo`) or standard queue. Unknown
/// names → InvalidAttributeName; FIFO attributes → their settings on a FIFO queue and AWS's answers on a
/// standard one; both kinds of encryption at once → AWS's refusal.
pub fn parse_settings(
    attributes: &BTreeMap<String, String>,
    names: &NamespaceMap,
    fifo: bool,
) -> SqsResult<Vec<(String, QueueSetting)>> {
    let mut settings = Vec::with_capacity(attributes.len());
    for (name, value) in attributes {
        settings.push((name.clone(), parse_setting(name, value, names, fifo)?));
    }
    let kms_key = settings
        .iter()
        .any(|(_, s)| matches!(s, QueueSetting::KmsMasterKeyId(Some(_))));
    let sse_sqs = settings
        .iter()
        .any(|(_, s)| *s == QueueSetting::SqsManagedSseEnabled(true));
    if kms_key && sse_sqs {
        return Err(both_encryptions());
    }
    Ok(settings)
}

fn parse_setting(
    name: &str,
    value: &str,
    names: &NamespaceMap,
    fifo: bool,
) -> SqsResult<QueueSetting> {
    Ok(match name {
        "VisibilityTimeout" => QueueSetting::VisibilityTimeoutSeconds(seconds(
            name,
            value,
            0,
            sqs_limits::VISIBILITY_TIMEOUT_S_MAX,
        )?),
        "DelaySeconds" => {
            QueueSetting::DelaySeconds(seconds(name, value, 0, sqs_limits::DELAY_S_MAX)?)
        }
        "MessageRetentionPeriod" => QueueSetting::MessageRetentionPeriodSeconds(seconds(
            name,
            value,
            sqs_limits::RETENTION_S_MIN,
            sqs_limits::RETENTION_S_MAX,
        )?),
        "MaximumMessageSize" => QueueSetting::MaximumMessageSizeBytes(seconds(
            name,
            value,
            sqs_limits::MESSAGE_SIZE_BYTES_MIN,
            sqs_limits::MESSAGE_SIZE_BYTES_MAX,
        )?),
        "ReceiveMessageWaitTimeSeconds" => QueueSetting::ReceiveMessageWaitTimeSeconds(seconds(
            name,
            value,
            0,
            sqs_limits::RECEIVE_WAIT_S_MAX,
        )?),
        "RedrivePolicy" if value.trim().is_empty() => QueueSetting::RedrivePolicy(None),
        "RedrivePolicy" => QueueSetting::RedrivePolicy(Some(parse_redrive_policy(value, names)?)),
        "RedriveAllowPolicy" if value.trim().is_empty() => QueueSetting::RedriveAllowPolicy(None),
        "RedriveAllowPolicy" => {
            let (permission, normalized) = parse_redrive_allow_policy(value)?;
            QueueSetting::RedriveAllowPolicy(Some((normalized, permission)))
        }
        "Policy" => QueueSetting::Policy(policy(value)?),
        "KmsMasterKeyId" => QueueSetting::KmsMasterKeyId(
            Some(value.trim().to_string()).filter(|key| !key.is_empty()),
        ),
        "KmsDataKeyReusePeriodSeconds" => QueueSetting::KmsDataKeyReusePeriodSeconds(seconds(
            name,
            value,
            sqs_limits::KMS_DATA_KEY_REUSE_S_MIN,
            sqs_limits::KMS_DATA_KEY_REUSE_S_MAX,
        )?),
        "SqsManagedSseEnabled" => QueueSetting::SqsManagedSseEnabled(boolean(name, value)?),
        "FifoQueue"
        | "ContentBasedDeduplication"
        | "DeduplicationScope"
        | "FifoThroughputLimit"
            if fifo =>
        {
            fifo_setting(name, value)?
        }
        "FifoQueue"
        | "ContentBasedDeduplication"
        | "DeduplicationScope"
        | "FifoThroughputLimit" => return Err(standard_queue_fifo_attribute(name)),
        _ => return Err(SqsError::unknown_attribute(name)),
    })
}

fn set_protocol_setting(config: &mut QueueConfig, key: &str, value: Option<String>) {
    match value {
        Some(value) => {
            config.protocol_settings.insert(key.to_string(), value);
        }
        None => {
            config.protocol_settings.remove(key);
        }
    }
}

/// Writes one setting into a queue's configuration.
pub fn apply(config: &mut QueueConfig, setting: &QueueSetting) {
    match setting {
        QueueSetting::VisibilityTimeoutSeconds(s) => config.visibility_timeout_ms = s * SECOND_MS,
        QueueSetting::DelaySeconds(s) => config.delay_ms = s * SECOND_MS,
        QueueSetting::MessageRetentionPeriodSeconds(s) => config.retention_ms = Some(s * SECOND_MS),
        QueueSetting::MaximumMessageSizeBytes(bytes) => {
            config.message_size_bytes_max = u32::try_from(*bytes).unwrap_or(u32::MAX)
        }
        QueueSetting::ReceiveMessageWaitTimeSeconds(s) => config.receive_wait_ms = s * SECOND_MS,
        QueueSetting::RedrivePolicy(policy) => config.redrive_policy = policy.clone(),
        QueueSetting::RedriveAllowPolicy(policy) => set_protocol_setting(
            config,
            REDRIVE_ALLOW_POLICY_SETTING,
            policy.as_ref().map(|(json, _)| json.clone()),
        ),
        QueueSetting::Policy(policy) => {
            set_protocol_setting(config, POLICY_SETTING, policy.clone())
        }
        QueueSetting::KmsMasterKeyId(key) => {
            if key.is_some() {
                set_protocol_setting(config, SQS_MANAGED_SSE_SETTING, Some("false".into()));
            }
            set_protocol_setting(config, KMS_MASTER_KEY_ID_SETTING, key.clone());
        }
        QueueSetting::KmsDataKeyReusePeriodSeconds(s) => {
            // The default is not stored, so that resetting it reads as never set (as AWS shows it).
            let stored = (*s != sqs_limits::KMS_DATA_KEY_REUSE_S_DEFAULT).then(|| s.to_string());
            set_protocol_setting(config, KMS_DATA_KEY_REUSE_SETTING, stored);
        }
        // On is the default and is not stored, so that CreateQueue with `SqsManagedSseEnabled=true` (what CDK
        // and Terraform send) finds an existing new queue unchanged; turning it on turns SSE-KMS off.
        QueueSetting::SqsManagedSseEnabled(true) => {
            set_protocol_setting(config, KMS_MASTER_KEY_ID_SETTING, None);
            set_protocol_setting(config, KMS_DATA_KEY_REUSE_SETTING, None);
            set_protocol_setting(config, SQS_MANAGED_SSE_SETTING, None);
        }
        QueueSetting::SqsManagedSseEnabled(false) => {
            set_protocol_setting(config, SQS_MANAGED_SSE_SETTING, Some("false".into()))
        }
        QueueSetting::FifoQueue => {}
        QueueSetting::ContentBasedDeduplication(on) => {
            if let Some(fifo) = config.fifo.as_mut() {
                fifo.content_based_dedup = *on;
            }
        }
        QueueSetting::DeduplicationScope(scope) => {
            if let Some(fifo) = config.fifo.as_mut() {
                fifo.dedup_scope = *scope;
            }
        }
        QueueSetting::FifoThroughputLimit(limit) => {
            let stored =
                (*limit == ThroughputLimit::PerMessageGroupId).then(|| limit.as_str().to_string());
            set_protocol_setting(config, FIFO_THROUGHPUT_LIMIT_SETTING, stored);
        }
    }
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

/// The configuration of a new SQS queue before its attributes are applied: a standard queue may hold
/// `inflight_max` messages in flight; a FIFO queue (`fifo`) AWS's 20,000, deduplicates by id across the queue
/// for SQS's 5 minutes, and does not deduplicate by content until `ContentBasedDeduplication` says so.
pub fn default_config(inflight_max: u32, fifo: bool) -> QueueConfig {
    QueueConfig {
        visibility_timeout_ms: sqs_limits::VISIBILITY_TIMEOUT_S_DEFAULT * SECOND_MS,
        delay_ms: 0,
        retention_ms: Some(sqs_limits::RETENTION_S_DEFAULT * SECOND_MS),
        message_size_bytes_max: u32::try_from(sqs_limits::MESSAGE_SIZE_BYTES_MAX)
            .unwrap_or(u32::MAX),
        receive_wait_ms: 0,
        inflight_max: if fifo {
            sqs_limits::FIFO_INFLIGHT_MESSAGES_MAX
        } else {
            inflight_max
        },
        fifo: fifo.then_some(FifoConfig {
            content_based_dedup: false,
            dedup_scope: DedupScope::Queue,
            dedup_interval_ms: sqs_limits::FIFO_DEDUP_INTERVAL_MS,
        }),
        ..QueueConfig::default()
    }
}

/// Whether a name is one GetQueueAttributes knows (`All` included).
pub fn is_known_attribute(name: &str) -> bool {
    name == "All" || ALL_ATTRIBUTES.contains(&name)
}

/// One attribute of a queue as SQS renders it; `None` when the queue has no value for it.
pub fn render(name: &str, info: &QueueInfo, names: &NamespaceMap, region: &str) -> Option<String> {
    let config = &info.config;
    let seconds = |ms: u64| (ms / SECOND_MS).to_string();
    Some(match name {
        "ApproximateNumberOfMessages" => info.stats.visible.to_string(),
        "ApproximateNumberOfMessagesNotVisible" => info.stats.hidden.to_string(),
        "ApproximateNumberOfMessagesDelayed" => info.stats.delayed.to_string(),
        "CreatedTimestamp" => seconds(info.created_at),
        "LastModifiedTimestamp" => seconds(info.modified_at),
        "DelaySeconds" => seconds(config.delay_ms),
        "MaximumMessageSize" => config.message_size_bytes_max.to_string(),
        // A queue that keeps messages forever (made through another protocol) shows SQS's longest retention.
        "MessageRetentionPeriod" => config
            .retention_ms
            .map_or(sqs_limits::RETENTION_S_MAX.to_string(), seconds),
        "QueueArn" => names.queue_arn(&info.key, region),
        "ReceiveMessageWaitTimeSeconds" => seconds(config.receive_wait_ms),
        "VisibilityTimeout" => seconds(config.visibility_timeout_ms),
        "RedrivePolicy" => {
            let policy = config.redrive_policy.as_ref()?;
            json!({
                "deadLetterTargetArn": names.queue_arn(&policy.dead_letter_queue, region),
                "maxReceiveCount": policy.max_receive_count,
            })
            .to_string()
        }
        "RedriveAllowPolicy" => redrive_allow_policy(config)?.to_string(),
        "Policy" => config.protocol_settings.get(POLICY_SETTING)?.clone(),
        "KmsMasterKeyId" => config
            .protocol_settings
            .get(KMS_MASTER_KEY_ID_SETTING)?
            .clone(),
        // Shown with a key only, and then 300 s unless set (AWS shows neither once the key is removed).
        "KmsDataKeyReusePeriodSeconds" => {
            config.protocol_settings.get(KMS_MASTER_KEY_ID_SETTING)?;
            config
                .protocol_settings
                .get(KMS_DATA_KEY_REUSE_SETTING)
                .cloned()
                .unwrap_or_else(|| sqs_limits::KMS_DATA_KEY_REUSE_S_DEFAULT.to_string())
        }
        // SSE-SQS is on for a new queue, as AWS creates queues since 2022.
        "SqsManagedSseEnabled" => config
            .protocol_settings
            .get(SQS_MANAGED_SSE_SETTING)
            .cloned()
            .unwrap_or_else(|| "true".to_string()),
        // A FIFO queue shows its four attributes; a standard queue none of them.
        "FifoQueue" => config.fifo.map(|_| "true".to_string())?,
        "ContentBasedDeduplication" => config.fifo?.content_based_dedup.to_string(),
        "DeduplicationScope" => dedup_scope_name(config.fifo?.dedup_scope).to_string(),
        "FifoThroughputLimit" => {
            config.fifo?;
            ThroughputLimit::of(config).as_str().to_string()
        }
        _ => return None,
    })
}

/// The key of a queue's dead-letter queue, if it has a redrive policy.
pub fn dead_letter_target(config: &QueueConfig) -> Option<&QueueKey> {
    config.redrive_policy.as_ref().map(|p| &p.dead_letter_queue)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::refusal;

    fn names() -> NamespaceMap {
        NamespaceMap {
            default_account: "000000000000".into(),
            default_region: "us-east-1".into(),
        }
    }

    fn parse(name: &str, value: &str) -> SqsResult<Vec<(String, QueueSetting)>> {
        parse_settings(
            &BTreeMap::from([(name.into(), value.into())]),
            &names(),
            false,
        )
    }

    #[test]
    fn numeric_attributes_are_range_checked() {
        assert_eq!(
            parse("VisibilityTimeout", "43200").unwrap()[0].1,
            QueueSetting::VisibilityTimeoutSeconds(43_200)
        );
        for (name, value) in [
            ("VisibilityTimeout", "43201"),
            ("MessageRetentionPeriod", "59"),
            ("MaximumMessageSize", "1023"),
            ("ReceiveMessageWaitTimeSeconds", "21"),
            ("DelaySeconds", "-1"),
            ("KmsDataKeyReusePeriodSeconds", "59"),
            ("KmsDataKeyReusePeriodSeconds", "86401"),
            ("SqsManagedSseEnabled", "yes"),
            ("Policy", "not json"),
        ] {
            assert_eq!(
                refusal(parse(name, value)),
                (
                    ErrorCode::InvalidAttributeValue,
                    format!("Invalid value for the parameter {name}.")
                )
            );
        }
    }

    #[test]
    fn redrive_policy_accepts_numeric_or_string_counts_within_1_to_1000() {
        let arn = "arn:aws:sqs:us-east-1:000000000000:dlq";
        let ok = parse(
            "RedrivePolicy",
            &format!(r#"{{"deadLetterTargetArn":"{arn}","maxReceiveCount":"5"}}"#),
        )
        .unwrap();
        assert_eq!(
            ok[0].1,
            QueueSetting::RedrivePolicy(Some(RedrivePolicy {
                dead_letter_queue: QueueKey::new(veil_core::DEFAULT_NAMESPACE, "dlq"),
                max_receive_count: 5
            }))
        );
        for count in ["0", "1001"] {
            let policy = format!(r#"{{"deadLetterTargetArn":"{arn}","maxReceiveCount":{count}}}"#);
            assert_eq!(
                parse("RedrivePolicy", &policy).unwrap_err(),
                SqsError::invalid_value(
                    "RedrivePolicy",
                    &policy,
                    &format!(
                        "Invalid value for maxReceiveCount: {count}, valid values are from 1 to 1000 both \
                         inclusive."
                    )
                )
            );
        }
        assert_eq!(
            parse("RedrivePolicy", "").unwrap()[0].1,
            QueueSetting::RedrivePolicy(None)
        );
    }

    #[test]
    fn redrive_allow_policy_by_queue_needs_1_to_10_arns() {
        let one = r#"{"redrivePermission":"byQueue","sourceQueueArns":["a"]}"#;
        assert_eq!(parse("RedriveAllowPolicy", one).map(|s| s.len()), Ok(1));
        let none = r#"{"redrivePermission":"byQueue","sourceQueueArns":[]}"#.to_string();
        let eleven: Vec<String> = (0..11).map(|i| format!("\"a{i}\"")).collect();
        let too_many = format!(
            r#"{{"redrivePermission":"byQueue","sourceQueueArns":[{}]}}"#,
            eleven.join(",")
        );
        for json in [none, too_many] {
            assert_eq!(
                parse("RedriveAllowPolicy", &json).unwrap_err(),
                SqsError::invalid_value(
                    "RedriveAllowPolicy",
                    &json,
                    "byQueue needs 1 to 10 sourceQueueArns."
                )
            );
        }
        let unknown = r#"{"redrivePermission":"sometimes"}"#;
        assert_eq!(
            parse("RedriveAllowPolicy", unknown).unwrap_err(),
            SqsError::invalid_value(
                "RedriveAllowPolicy",
                unknown,
                "redrivePermission must be allowAll, denyAll or byQueue."
            )
        );
    }

    #[test]
    fn unknown_and_fifo_attributes_are_refused_with_aws_texts() {
        let error = |name: &str, value: &str| parse(name, value).unwrap_err();
        assert_eq!(
            error("Colour", "blue").code,
            crate::ErrorCode::InvalidAttributeName
        );
        for value in ["true", "false"] {
            let unknown = error("FifoQueue", value);
            assert_eq!(
                (unknown.code, unknown.message.as_str()),
                (
                    crate::ErrorCode::InvalidAttributeName,
                    "Unknown Attribute FifoQueue."
                )
            );
        }
        assert_eq!(
            error("ContentBasedDeduplication", "true").message,
            "Unknown Attribute ContentBasedDeduplication."
        );
        assert_eq!(
            error("DeduplicationScope", "queue").message,
            "You can specify the DeduplicationScope only when FifoQueue is set to true."
        );
    }

    fn configured(attributes: &[(&str, &str)]) -> SqsResult<QueueConfig> {
        let given: BTreeMap<String, String> = attributes
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let mut config = default_config(10, false);
        for (_, setting) in parse_settings(&given, &names(), false)? {
            apply(&mut config, &setting);
        }
        Ok(config)
    }

    fn shown(config: &QueueConfig, name: &str) -> Option<String> {
        let info = QueueInfo {
            id: 1,
            key: QueueKey::new(veil_core::DEFAULT_NAMESPACE, "q"),
            config: config.clone(),
            created_at: 0,
            modified_at: 0,
            stats: veil_core::QueueStats::default(),
        };
        render(name, &info, &names(), "us-east-1")
    }

    #[test]
    fn encryption_attributes_round_trip_as_aws_shows_them() {
        let fresh = configured(&[]).unwrap();
        assert_eq!(
            shown(&fresh, "SqsManagedSseEnabled").as_deref(),
            Some("true")
        );
        assert_eq!(shown(&fresh, "KmsMasterKeyId"), None);
        assert_eq!(shown(&fresh, "KmsDataKeyReusePeriodSeconds"), None);
        let kms = configured(&[
            ("KmsMasterKeyId", "alias/aws/sqs"),
            ("KmsDataKeyReusePeriodSeconds", "6000"),
        ])
        .unwrap();
        assert_eq!(
            shown(&kms, "KmsMasterKeyId").as_deref(),
            Some("alias/aws/sqs")
        );
        assert_eq!(
            shown(&kms, "KmsDataKeyReusePeriodSeconds").as_deref(),
            Some("6000")
        );
        assert_eq!(
            shown(&kms, "SqsManagedSseEnabled").as_deref(),
            Some("false")
        );
        let mut reset = kms.clone();
        for (_, setting) in parse_settings(
            &BTreeMap::from([
                ("KmsMasterKeyId".to_string(), String::new()),
                (
                    "KmsDataKeyReusePeriodSeconds".to_string(),
                    "300".to_string(),
                ),
            ]),
            &names(),
            false,
        )
        .unwrap()
        {
            apply(&mut reset, &setting);
        }
        assert_eq!(shown(&reset, "KmsMasterKeyId"), None);
        assert_eq!(shown(&reset, "KmsDataKeyReusePeriodSeconds"), None);
        assert_eq!(
            shown(&reset, "SqsManagedSseEnabled").as_deref(),
            Some("false")
        );
        let mut sse_on = fresh.clone();
        apply(&mut sse_on, &QueueSetting::SqsManagedSseEnabled(true));
        assert_eq!(sse_on, fresh, "turning on the default changes nothing");
        let mut back_on = kms.clone();
        apply(&mut back_on, &QueueSetting::SqsManagedSseEnabled(true));
        assert_eq!(shown(&back_on, "KmsMasterKeyId"), None);
        assert_eq!(
            shown(&back_on, "SqsManagedSseEnabled").as_deref(),
            Some("true")
        );
        let both = configured(&[("KmsMasterKeyId", "k"), ("SqsManagedSseEnabled", "true")]);
        assert_eq!(
            both.unwrap_err().message,
            "You can use one type of server-side encryption (SSE) at one time. You can either enable \
             KMS SSE or SQS SSE."
        );
    }

    #[test]
    fn policy_is_kept_as_given_and_an_empty_value_removes_it() {
        let text = r#"{"Version":"2012-10-17","Statement":[]}"#;
        let with_policy = configured(&[("Policy", text)]).unwrap();
        assert_eq!(
            with_policy
                .protocol_settings
                .get(POLICY_SETTING)
                .map(String::as_str),
            Some(text)
        );
        assert_eq!(shown(&with_policy, "Policy").as_deref(), Some(text));
        let mut removed = with_policy.clone();
        apply(&mut removed, &QueueSetting::Policy(None));
        assert_eq!(shown(&removed, "Policy"), None);
        assert_eq!(
            refusal(configured(&[("Policy", "[1]")])),
            (
                ErrorCode::InvalidAttributeValue,
                "Invalid value for the parameter Policy.".to_string()
            )
        );
    }

    fn fifo_configured(attributes: &[(&str, &str)]) -> SqsResult<QueueConfig> {
        let given: BTreeMap<String, String> = attributes
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let mut config = default_config(10, true);
        for (_, setting) in parse_settings(&given, &names(), true)? {
            apply(&mut config, &setting);
        }
        check_fifo_settings(&config)?;
        Ok(config)
    }

    #[test]
    fn fifo_attributes_set_the_engines_fifo_config_and_show_on_fifo_queues_only() {
        let fresh = fifo_configured(&[("FifoQueue", "True")]).unwrap();
        assert_eq!(fresh.inflight_max, sqs_limits::FIFO_INFLIGHT_MESSAGES_MAX);
        let shown_all = |config: &QueueConfig| {
            [
                "FifoQueue",
                "ContentBasedDeduplication",
                "DeduplicationScope",
                "FifoThroughputLimit",
            ]
            .map(|name| shown(config, name).unwrap_or_default())
        };
        assert_eq!(shown_all(&fresh), ["true", "false", "queue", "perQueue"]);
        let tuned = fifo_configured(&[
            ("ContentBasedDeduplication", "TRUE"),
            ("DeduplicationScope", "messageGroup"),
            ("FifoThroughputLimit", "perMessageGroupId"),
        ])
        .unwrap();
        let engine_side = tuned.fifo.unwrap();
        assert!(engine_side.content_based_dedup);
        assert_eq!(engine_side.dedup_scope, DedupScope::Group);
        assert_eq!(
            engine_side.dedup_interval_ms,
            sqs_limits::FIFO_DEDUP_INTERVAL_MS
        );
        assert_eq!(
            shown_all(&tuned),
            ["true", "true", "messageGroup", "perMessageGroupId"]
        );
        let per_queue = fifo_configured(&[("FifoThroughputLimit", "perQueue")]).unwrap();
        assert_eq!(
            per_queue, fresh,
            "the default throughput limit is not stored"
        );
        let standard = configured(&[]).unwrap();
        assert_eq!(shown_all(&standard), ["", "", "", ""]);
        assert!(is_known_attribute("FifoThroughputLimit"));
    }

    #[test]
    fn a_fifo_queue_refuses_to_become_standard_and_bad_fifo_values() {
        assert_eq!(
            refusal(fifo_configured(&[("FifoQueue", "false")])),
            (
                ErrorCode::InvalidAttributeValue,
                "Invalid value for the parameter FifoQueue. Reason: Modifying queue type is not supported."
                    .to_string()
            )
        );
        for (name, value) in [
            ("ContentBasedDeduplication", "yes"),
            ("DeduplicationScope", "group"),
            ("FifoThroughputLimit", "perGroup"),
        ] {
            assert_eq!(
                refusal(fifo_configured(&[(name, value)])),
                (
                    ErrorCode::InvalidAttributeValue,
                    format!("Invalid value for the parameter {name}.")
                )
            );
        }
    }

    #[test]
    fn per_message_group_throughput_needs_deduplication_by_message_group() {
        assert_eq!(
            refusal(fifo_configured(&[("FifoThroughputLimit", "perMessageGroupId")])),
            (
                ErrorCode::InvalidAttributeValue,
                "Invalid value for the parameter FifoThroughputLimit. Reason: To set FifoThroughputLimit to \
                 perMessageGroupId, the DeduplicationScope must be messageGroup."
                    .to_string()
            )
        );
        assert!(fifo_configured(&[("DeduplicationScope", "messageGroup")]).is_ok());
    }

    #[test]
    fn fifo_throughput_settings_on_a_standard_queue_need_fifo_queue() {
        for name in ["DeduplicationScope", "FifoThroughputLimit"] {
            assert_eq!(
                refusal(parse(name, "x")),
                (
                    ErrorCode::InvalidAttributeName,
                    format!("You can specify the {name} only when FifoQueue is set to true.")
                )
            );
        }
    }
}
