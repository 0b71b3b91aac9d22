//! The stored shape of a queue record (storage format 6) outlives the in-memory one: SQS's tags and Azure's
//! metadata moved from fields of `QueueConfig` into its protocol settings, while every store (redb tables,
//! the write-ahead log, PostgreSQL; all postcard) keeps writing them as fields. The fixtures here were
//! written by the code before the move; they must decode to the same queue and encode back byte for byte.

use std::collections::BTreeMap;

use veil_core::{
    QueueConfig, QueueKey, QueueRecord, RedrivePolicy, StoreOp, AZURE_METADATA_SETTING_PREFIX,
    CREATED_BY_SETTING, SQS_TAG_SETTING_PREFIX,
};

fn fixture(name: &str) -> Vec<u8> {
    let path = format!("{}/tests/fixtures/{name}", env!("CARGO_MANIFEST_DIR"));
    let hex = std::fs::read_to_string(&path).expect("fixture exists");
    let hex = hex.trim();
    (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).expect("fixture is hex"))
        .collect()
}

/// The queue the fixtures hold, as the code after the move sees it.
fn expected_record() -> QueueRecord {
    let mut config = QueueConfig {
        redrive_policy: Some(RedrivePolicy {
            dead_letter_queue: QueueKey::new("default", "dlq"),
            max_receive_count: 3,
        }),
        ..QueueConfig::default()
    };
    config
        .protocol_settings
        .insert("sqs.Policy".into(), "{}".into());
    config
        .protocol_settings
        .insert(CREATED_BY_SETTING.into(), "sqs".into());
    config.set_settings_under(
        SQS_TAG_SETTING_PREFIX,
        BTreeMap::from([
            ("team".into(), "payments".into()),
            ("cost.centre".into(), "42".into()),
        ]),
    );
    config.set_settings_under(
        AZURE_METADATA_SETTING_PREFIX,
        BTreeMap::from([("owner".into(), "alice".into())]),
    );
    QueueRecord {
        id: 7,
        key: QueueKey::new("default", "orders"),
        config,
        created_at: 1_700_000_000_000,
        modified_at: 1_700_000_000_500,
        seq_reserved: 1024,
    }
}

#[test]
fn a_queue_record_written_before_tags_and_metadata_moved_reads_back_the_same_queue() {
    let bytes = fixture("queue_record_format6.hex");
    let record: QueueRecord = postcard::from_bytes(&bytes).expect("decodes");
    assert_eq!(record, expected_record());
    let tags = record.config.settings_under(SQS_TAG_SETTING_PREFIX);
    assert_eq!(tags.get("cost.centre").map(String::as_str), Some("42"));
    let metadata = record.config.settings_under(AZURE_METADATA_SETTING_PREFIX);
    assert_eq!(metadata.get("owner").map(String::as_str), Some("alice"));
}

#[test]
fn a_queue_record_is_written_in_the_same_bytes_as_before_tags_and_metadata_moved() {
    let encoded = postcard::to_stdvec(&expected_record()).expect("encodes");
    assert_eq!(encoded, fixture("queue_record_format6.hex"));
}

#[test]
fn a_log_record_creating_a_queue_written_before_the_move_replays_the_same_queue() {
    let bytes = fixture("put_queue_log_record_format6.hex");
    let ops: Vec<StoreOp> = postcard::from_bytes(&bytes).expect("decodes");
    match ops.as_slice() {
        [StoreOp::PutNextQueueId(8), StoreOp::PutQueue(record)] => {
            assert_eq!(**record, expected_record())
        }
        other => panic!("unexpected log record: {other:?}"),
    }
    let encoded = postcard::to_stdvec(&ops).expect("encodes");
    assert_eq!(encoded, bytes);
}
