//! Queue attributes: parsing the `Attributes` of CreateQueue / SetQueueAttributes into typed settings (with
//! SQS's ranges), applying them to the engine's [`QueueConfig`], and rendering a queue's settings and counts as
//! GetQueueAttributes shows them.

use std::collections::BTreeMap;

use crate::limits as sqs_limits;
use serde_json::{json, Value};
use veil_core::limits::SECOND_MS;
use veil_core::{QueueConfig, QueueInfo, QueueKey, RedrivePolicy};

use crate::error::{SqsError, SqsResult};
use crate::namespace::NamespaceMap;
use crate::validate::fifo_not_supported;

/// Attributes GetQueueAttributes returns for `All`, in this order.
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
    "RedrivePolicy",
    "RedriveAllowPolicy",
    "SqsManagedSseEnabled",
];

/// Real SQS attribute names that a standard Veil queue never has a value for; asking for them is not an error.
const ATTRIBUTES_WITHOUT_VALUE: &[&str] = &[
    "Policy",
    "KmsMasterKeyId",
    "KmsDataKeyReusePeriodSeconds",
    "FifoQueue",
    "ContentBasedDeduplication",
    "DeduplicationScope",
    "FifoThroughputLimit",
];

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
    /// `FifoQueue=false` or `SqsManagedSseEnabled=false`: what a Veil queue is anyway.
    NoChange,
}

fn invalid(name: &str) -> SqsError {
    SqsError::invalid_attribute_value(name, "The value is outside the allowed range or malformed.")
}

fn seconds(name: &str, value: &str, min: u64, max: u64) -> SqsResult<u64> {
    value
        .trim()
        .parse::<u64>()
        .ok()
        .filter(|v| (min..=max).contains(v))
        .ok_or_else(|| {
            SqsError::invalid_attribute_value(
                name,
                &format!("Must be an integer from {min} to {max}."),
            )
        })
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
        redrive_policy_error(
            value,
            &format!(
                "Invalid value for maxReceiveCount: must be an integer from {} to {}.",
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

/// Parses the attributes of CreateQueue / SetQueueAttributes. Unknown names → InvalidAttributeName; FIFO
/// attributes → the FIFO-not-supported error; encryption and access policies → a not-supported error.
pub fn parse_settings(
    attributes: &BTreeMap<String, String>,
    names: &NamespaceMap,
) -> SqsResult<Vec<(String, QueueSetting)>> {
    let mut settings = Vec::with_capacity(attributes.len());
    for (name, value) in attributes {
        let setting = match name.as_str() {
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
            "ReceiveMessageWaitTimeSeconds" => QueueSetting::ReceiveMessageWaitTimeSeconds(
                seconds(name, value, 0, sqs_limits::RECEIVE_WAIT_S_MAX)?,
            ),
            "RedrivePolicy" if value.trim().is_empty() => QueueSetting::RedrivePolicy(None),
            "RedrivePolicy" => {
                QueueSetting::RedrivePolicy(Some(parse_redrive_policy(value, names)?))
            }
            "RedriveAllowPolicy" if value.trim().is_empty() => {
                QueueSetting::RedriveAllowPolicy(None)
            }
            "RedriveAllowPolicy" => {
                let (permission, normalized) = parse_redrive_allow_policy(value)?;
                QueueSetting::RedriveAllowPolicy(Some((normalized, permission)))
            }
            "FifoQueue" => match value.trim() {
                "false" => QueueSetting::NoChange,
                "true" => return Err(fifo_not_supported()),
                _ => return Err(invalid(name)),
            },
            "ContentBasedDeduplication" | "DeduplicationScope" | "FifoThroughputLimit" => {
                return Err(SqsError::unknown_attribute(name))
            }
            "SqsManagedSseEnabled" => match value.trim() {
                "false" => QueueSetting::NoChange,
                _ => {
                    return Err(SqsError::invalid_attribute_value(
                        name,
                        "Server-side encryption is not supported by Veil yet.",
                    ))
                }
            },
            "Policy" | "KmsMasterKeyId" | "KmsDataKeyReusePeriodSeconds" => {
                return Err(SqsError::invalid_attribute_value(
                    name,
                    "This attribute is not supported by Veil yet.",
                ))
            }
            _ => return Err(SqsError::unknown_attribute(name)),
        };
        settings.push((name.clone(), setting));
    }
    Ok(settings)
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
        QueueSetting::RedriveAllowPolicy(policy) => match policy {
            Some((json, _)) => {
                config
                    .protocol_settings
                    .insert(REDRIVE_ALLOW_POLICY_SETTING.to_string(), json.clone());
            }
            None => {
                config
                    .protocol_settings
                    .remove(REDRIVE_ALLOW_POLICY_SETTING);
            }
        },
        QueueSetting::NoChange => {}
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

/// The configuration of a new SQS queue before its attributes are applied.
pub fn default_config(inflight_max: u32) -> QueueConfig {
    QueueConfig {
        visibility_timeout_ms: sqs_limits::VISIBILITY_TIMEOUT_S_DEFAULT * SECOND_MS,
        delay_ms: 0,
        retention_ms: Some(sqs_limits::RETENTION_S_DEFAULT * SECOND_MS),
        message_size_bytes_max: u32::try_from(sqs_limits::MESSAGE_SIZE_BYTES_MAX)
            .unwrap_or(u32::MAX),
        receive_wait_ms: 0,
        inflight_max,
        ..QueueConfig::default()
    }
}

/// Whether a name is one GetQueueAttributes knows (`All` included).
pub fn is_known_attribute(name: &str) -> bool {
    name == "All" || ALL_ATTRIBUTES.contains(&name) || ATTRIBUTES_WITHOUT_VALUE.contains(&name)
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
        "SqsManagedSseEnabled" => "false".to_string(),
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

    fn names() -> NamespaceMap {
        NamespaceMap {
            default_account: "000000000000".into(),
            default_region: "us-east-1".into(),
        }
    }

    fn parse(name: &str, value: &str) -> SqsResult<Vec<(String, QueueSetting)>> {
        parse_settings(&BTreeMap::from([(name.into(), value.into())]), &names())
    }

    #[test]
    fn numeric_attributes_are_range_checked() {
        assert!(parse("VisibilityTimeout", "43200").is_ok());
        assert!(parse("VisibilityTimeout", "43201").is_err());
        assert!(parse("MessageRetentionPeriod", "59").is_err());
        assert!(parse("MaximumMessageSize", "1023").is_err());
        assert!(parse("ReceiveMessageWaitTimeSeconds", "21").is_err());
        assert!(parse("DelaySeconds", "-1").is_err());
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
            assert!(parse(
                "RedrivePolicy",
                &format!(r#"{{"deadLetterTargetArn":"{arn}","maxReceiveCount":{count}}}"#)
            )
            .is_err());
        }
        assert_eq!(
            parse("RedrivePolicy", "").unwrap()[0].1,
            QueueSetting::RedrivePolicy(None)
        );
    }

    #[test]
    fn redrive_allow_policy_by_queue_needs_1_to_10_arns() {
        assert!(parse(
            "RedriveAllowPolicy",
            r#"{"redrivePermission":"byQueue","sourceQueueArns":["a"]}"#
        )
        .is_ok());
        assert!(parse(
            "RedriveAllowPolicy",
            r#"{"redrivePermission":"byQueue","sourceQueueArns":[]}"#
        )
        .is_err());
        let eleven: Vec<String> = (0..11).map(|i| format!("\"a{i}\"")).collect();
        let json = format!(
            r#"{{"redrivePermission":"byQueue","sourceQueueArns":[{}]}}"#,
            eleven.join(",")
        );
        assert!(parse("RedriveAllowPolicy", &json).is_err());
        assert!(parse("RedriveAllowPolicy", r#"{"redrivePermission":"sometimes"}"#).is_err());
    }

    #[test]
    fn unknown_and_fifo_attributes_are_refused() {
        assert_eq!(
            parse("Colour", "blue").unwrap_err().code,
            crate::ErrorCode::InvalidAttributeName
        );
        assert!(parse("FifoQueue", "true").is_err());
        assert_eq!(
            parse("FifoQueue", "false").unwrap()[0].1,
            QueueSetting::NoChange
        );
    }
}
