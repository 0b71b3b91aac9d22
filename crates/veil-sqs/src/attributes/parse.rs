//! Reading CreateQueue / SetQueueAttributes: each attribute checked against SQS's ranges and spellings and
//! turned into a [`QueueSetting`], with AWS's answers for unknown names, FIFO attributes on a standard queue
//! and conflicting encryption settings.

use std::collections::BTreeMap;

use serde_json::Value;
use veil_core::{DedupScope, QueueConfig, RedrivePolicy};

use super::{dedup_scope_name, QueueSetting, RedrivePermission, ThroughputLimit};
use crate::error::{ErrorCode, SqsError, SqsResult};
use crate::limits as sqs_limits;
use crate::namespace::NamespaceMap;

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
pub(super) fn parse_redrive_allow_policy(value: &str) -> SqsResult<(RedrivePermission, String)> {
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

#[cfg(test)]
mod tests {
    use veil_core::QueueKey;

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
