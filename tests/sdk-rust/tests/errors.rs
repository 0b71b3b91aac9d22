//! The errors the AWS SDK for Rust models for SQS, provoked on the real `veil` binary: each must arrive as the
//! SDK's typed variant (matched from the `x-amzn-query-error` code, or from `__type` where there is none) with
//! the code AWS answers, because Rust applications match on these variants rather than on strings.

use aws_sdk_sqs::error::ProvideErrorMetadata;
use aws_sdk_sqs::types::{QueueAttributeName, SendMessageBatchRequestEntry};
use veil_sdk_rust_tests::{create_queue as queue, Veil, ACCOUNT, REGION};

fn entry(id: &str) -> SendMessageBatchRequestEntry {
    SendMessageBatchRequestEntry::builder()
        .id(id)
        .message_body("x")
        .build()
        .unwrap()
}

#[tokio::test]
async fn creating_an_existing_queue_with_other_attributes_is_queue_name_exists() {
    let veil = Veil::start();
    let sqs = veil.client();
    queue(&sqs, "taken").await;
    let err = sqs
        .create_queue()
        .queue_name("taken")
        .attributes(QueueAttributeName::VisibilityTimeout, "99")
        .send()
        .await
        .expect_err("other attributes for an existing name");
    assert_eq!(err.code(), Some("QueueAlreadyExists"));
    assert!(err.into_service_error().is_queue_name_exists());
}

#[tokio::test]
async fn a_receipt_handle_veil_never_issued_is_receipt_handle_is_invalid() {
    let veil = Veil::start();
    let sqs = veil.client();
    let url = queue(&sqs, "receipts").await;
    let err = sqs
        .delete_message()
        .queue_url(&url)
        .receipt_handle("bogus")
        .send()
        .await
        .expect_err("bogus receipt");
    assert_eq!(err.code(), Some("ReceiptHandleIsInvalid"));
    assert!(err.into_service_error().is_receipt_handle_is_invalid());
}

#[tokio::test]
async fn malformed_batches_are_the_sdks_batch_errors() {
    let veil = Veil::start();
    let sqs = veil.client();
    let url = queue(&sqs, "batches").await;

    let mut eleven = sqs.send_message_batch().queue_url(&url);
    for i in 0..11 {
        eleven = eleven.entries(entry(&format!("e{i}")));
    }
    let err = eleven.send().await.expect_err("11 entries");
    assert_eq!(
        err.code(),
        Some("AWS.SimpleQueueService.TooManyEntriesInBatchRequest")
    );
    assert!(err
        .into_service_error()
        .is_too_many_entries_in_batch_request());

    let err = sqs
        .send_message_batch()
        .queue_url(&url)
        .entries(entry("same"))
        .entries(entry("same"))
        .send()
        .await;
    let err = err.expect_err("repeated ids");
    assert_eq!(
        err.code(),
        Some("AWS.SimpleQueueService.BatchEntryIdsNotDistinct")
    );
    assert!(err.into_service_error().is_batch_entry_ids_not_distinct());

    let err = sqs
        .send_message_batch()
        .queue_url(&url)
        .entries(entry("no spaces"))
        .send()
        .await;
    let err = err.expect_err("a bad id");
    assert_eq!(
        err.code(),
        Some("AWS.SimpleQueueService.InvalidBatchEntryId")
    );
    assert!(err.into_service_error().is_invalid_batch_entry_id());

    let err = sqs
        .send_message_batch()
        .queue_url(&url)
        .set_entries(Some(vec![]))
        .send()
        .await;
    let err = err.expect_err("no entries");
    assert_eq!(err.code(), Some("AWS.SimpleQueueService.EmptyBatchRequest"));
    assert!(err.into_service_error().is_empty_batch_request());
}

#[tokio::test]
async fn a_body_with_a_character_sqs_does_not_allow_is_invalid_message_contents() {
    let veil = Veil::start();
    let sqs = veil.client();
    let url = queue(&sqs, "contents").await;
    let err = sqs
        .send_message()
        .queue_url(&url)
        .message_body("a\u{1}b")
        .send()
        .await
        .expect_err("U+0001");
    assert_eq!(err.code(), Some("InvalidMessageContents"));
    assert!(err.into_service_error().is_invalid_message_contents());
}

#[tokio::test]
async fn an_unknown_attribute_name_is_invalid_attribute_name() {
    let veil = Veil::start();
    let sqs = veil.client();
    let url = queue(&sqs, "attrs").await;
    let err = sqs
        .get_queue_attributes()
        .queue_url(&url)
        .attribute_names(QueueAttributeName::from("NoSuchAttribute"))
        .send()
        .await
        .expect_err("an unknown attribute");
    assert_eq!(err.code(), Some("InvalidAttributeName"));
    assert!(err.into_service_error().is_invalid_attribute_name());
}

#[tokio::test]
async fn a_second_purge_within_a_minute_is_purge_queue_in_progress() {
    let veil = Veil::start();
    let sqs = veil.client();
    let url = queue(&sqs, "purged").await;
    sqs.purge_queue()
        .queue_url(&url)
        .send()
        .await
        .expect("PurgeQueue");
    let err = sqs
        .purge_queue()
        .queue_url(&url)
        .send()
        .await
        .expect_err("a second purge");
    assert_eq!(
        err.code(),
        Some("AWS.SimpleQueueService.PurgeQueueInProgress")
    );
    assert!(err.into_service_error().is_purge_queue_in_progress());
}

#[tokio::test]
async fn a_move_task_from_a_queue_that_does_not_exist_is_resource_not_found() {
    let veil = Veil::start();
    let sqs = veil.client();
    let arn = format!("arn:aws:sqs:{REGION}:{ACCOUNT}:nowhere");
    let err = sqs
        .start_message_move_task()
        .source_arn(&arn)
        .send()
        .await
        .expect_err("no such source");
    assert_eq!(err.code(), Some("ResourceNotFoundException"));
    assert_eq!(err.raw_response().map(|r| r.status().as_u16()), Some(404));
    assert!(err.into_service_error().is_resource_not_found_exception());
    let err = sqs
        .list_message_move_tasks()
        .source_arn(&arn)
        .send()
        .await
        .expect_err("no such source");
    assert!(err.into_service_error().is_resource_not_found_exception());
}
