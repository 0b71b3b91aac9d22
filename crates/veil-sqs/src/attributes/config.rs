//! Writing checked settings into a queue's engine configuration: what the engine interprets goes into its
//! fields, what only SQS reads into the queue's protocol settings; and a new SQS queue's defaults.

use veil_core::limits::SECOND_MS;
use veil_core::{DedupScope, FifoConfig, QueueConfig};

use super::{
    QueueSetting, ThroughputLimit, FIFO_THROUGHPUT_LIMIT_SETTING, KMS_DATA_KEY_REUSE_SETTING,
    KMS_MASTER_KEY_ID_SETTING, POLICY_SETTING, REDRIVE_ALLOW_POLICY_SETTING,
    SQS_MANAGED_SSE_SETTING,
};
use crate::limits as sqs_limits;

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
