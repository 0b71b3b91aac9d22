//! Attributes through the whole path a request takes: parsed, applied to a queue's configuration, and
//! rendered back as GetQueueAttributes shows them.

use std::collections::BTreeMap;

use veil_core::{QueueConfig, QueueInfo, QueueKey};

use super::*;
use crate::error::{refusal, ErrorCode, SqsResult};
use crate::limits as sqs_limits;
use crate::namespace::NamespaceMap;

fn names() -> NamespaceMap {
    NamespaceMap {
        default_account: "000000000000".into(),
        default_region: "us-east-1".into(),
    }
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
