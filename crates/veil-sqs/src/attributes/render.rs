//! GetQueueAttributes: a queue's settings and counts as SQS renders each attribute.

use serde_json::json;
use veil_core::limits::SECOND_MS;
use veil_core::QueueInfo;

use super::{
    dedup_scope_name, redrive_allow_policy, ThroughputLimit, KMS_DATA_KEY_REUSE_SETTING,
    KMS_MASTER_KEY_ID_SETTING, POLICY_SETTING, SQS_MANAGED_SSE_SETTING,
};
use crate::limits as sqs_limits;
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
