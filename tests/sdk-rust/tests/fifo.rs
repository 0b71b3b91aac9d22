//! FIFO queues through the AWS SDK for Rust against the real `veil` binary: deduplication (content-based and
//! by explicit id: a duplicate within the window is answered with the first MessageId and delivered once) and
//! the order of each message group, with the FIFO system attributes the SDK parses.

use std::collections::HashMap;

use aws_sdk_sqs::types::{
    Message, MessageSystemAttributeName, QueueAttributeName, SendMessageBatchRequestEntry,
};
use aws_sdk_sqs::Client;
use veil_sdk_rust_tests::{receive, system_attribute as system, Veil};

async fn fifo_queue(sqs: &Client, name: &str, content_based: bool) -> String {
    sqs.create_queue()
        .queue_name(name)
        .attributes(QueueAttributeName::FifoQueue, "true")
        .attributes(
            QueueAttributeName::ContentBasedDeduplication,
            content_based.to_string(),
        )
        .send()
        .await
        .expect("CreateQueue")
        .queue_url
        .unwrap()
}

/// Receives, deleting each message, until nothing more comes (each receive may wait 1 s).
async fn drain(sqs: &Client, url: &str) -> Vec<Message> {
    let mut all = Vec::new();
    loop {
        let got = receive(sqs, url, None, 1).await;
        if got.is_empty() {
            return all;
        }
        for m in &got {
            sqs.delete_message()
                .queue_url(url)
                .receipt_handle(m.receipt_handle().unwrap())
                .send()
                .await
                .expect("DeleteMessage");
        }
        all.extend(got);
    }
}

#[tokio::test]
async fn a_duplicate_by_content_within_the_window_gets_the_first_message_id_and_is_delivered_once()
{
    let veil = Veil::start();
    let sqs = veil.client();
    let url = fifo_queue(&sqs, "content.fifo", true).await;
    let send = |body: &'static str| {
        sqs.send_message()
            .queue_url(&url)
            .message_group_id("g")
            .message_body(body)
            .send()
    };
    let first = send("same body").await.expect("SendMessage");
    let again = send("same body")
        .await
        .expect("a duplicate is answered like a success");
    let other = send("another body").await.expect("SendMessage");
    assert_eq!(again.message_id(), first.message_id());
    assert_eq!(again.sequence_number(), first.sequence_number());
    assert_ne!(other.message_id(), first.message_id());
    let (a, b): (u128, u128) = (
        first
            .sequence_number()
            .expect("SequenceNumber")
            .parse()
            .unwrap(),
        other
            .sequence_number()
            .expect("SequenceNumber")
            .parse()
            .unwrap(),
    );
    assert!(b > a, "sequence numbers grow in send order: {a} then {b}");

    let got = drain(&sqs, &url).await;
    let bodies: Vec<_> = got.iter().map(|m| m.body().unwrap()).collect();
    assert_eq!(bodies, ["same body", "another body"]);
    // Content-based: the deduplication id is the body's SHA-256 in hex.
    let dedup =
        system(&got[0], MessageSystemAttributeName::MessageDeduplicationId).expect("dedup id");
    assert_eq!(dedup.len(), 64, "{dedup}");
    assert_eq!(
        system(&got[0], MessageSystemAttributeName::MessageGroupId),
        Some("g")
    );
    assert_eq!(
        system(&got[0], MessageSystemAttributeName::SequenceNumber),
        first.sequence_number()
    );
}

#[tokio::test]
async fn a_duplicate_by_explicit_id_gets_the_first_message_id_and_is_delivered_once() {
    let veil = Veil::start();
    let sqs = veil.client();
    let url = fifo_queue(&sqs, "explicit.fifo", false).await;
    let send = |body: &'static str, dedup: &'static str| {
        sqs.send_message()
            .queue_url(&url)
            .message_group_id("g")
            .message_deduplication_id(dedup)
            .message_body(body)
            .send()
    };
    let first = send("one", "id-1").await.expect("SendMessage");
    // Same id, other body: still the duplicate of the first.
    let dup = send("one, changed", "id-1").await.expect("SendMessage");
    // Same body, other id: a new message.
    let second = send("one", "id-2").await.expect("SendMessage");
    assert_eq!(dup.message_id(), first.message_id());
    assert_ne!(second.message_id(), first.message_id());

    // In a batch too: an entry repeating an earlier id is answered with the earlier message's id.
    let batch = sqs
        .send_message_batch()
        .queue_url(&url)
        .entries(
            SendMessageBatchRequestEntry::builder()
                .id("dup")
                .message_body("batch dup")
                .message_group_id("g")
                .message_deduplication_id("id-2")
                .build()
                .unwrap(),
        )
        .send()
        .await
        .expect("SendMessageBatch");
    assert!(batch.failed().is_empty(), "{:?}", batch.failed());
    assert_eq!(
        Some(batch.successful()[0].message_id()),
        second.message_id()
    );

    let got = drain(&sqs, &url).await;
    let bodies: Vec<_> = got.iter().map(|m| m.body().unwrap()).collect();
    assert_eq!(
        bodies,
        ["one", "one"],
        "each distinct id once, the first body kept"
    );
    assert_eq!(
        system(&got[0], MessageSystemAttributeName::MessageDeduplicationId),
        Some("id-1")
    );
    assert_eq!(
        system(&got[1], MessageSystemAttributeName::MessageDeduplicationId),
        Some("id-2")
    );
}

#[tokio::test]
async fn each_message_group_is_delivered_in_send_order() {
    let veil = Veil::start();
    let sqs = veil.client();
    let url = fifo_queue(&sqs, "groups.fifo", true).await;
    // Interleaved sends over three groups, some in batches.
    for i in 0..6 {
        for g in ["a", "b"] {
            sqs.send_message()
                .queue_url(&url)
                .message_group_id(g)
                .message_body(format!("{g}{i}"))
                .send()
                .await
                .expect("SendMessage");
        }
    }
    let mut batch = sqs.send_message_batch().queue_url(&url);
    for i in 0..5 {
        batch = batch.entries(
            SendMessageBatchRequestEntry::builder()
                .id(format!("c{i}"))
                .message_group_id("c")
                .message_body(format!("c{i}"))
                .build()
                .unwrap(),
        );
    }
    batch.send().await.expect("SendMessageBatch");

    // While a group's head is in flight, nothing behind it in that group is delivered.
    let first = sqs
        .receive_message()
        .queue_url(&url)
        .max_number_of_messages(1)
        .visibility_timeout(30)
        .send()
        .await
        .expect("ReceiveMessage")
        .messages
        .unwrap_or_default();
    assert_eq!(first.len(), 1);
    assert_eq!(
        first[0].body(),
        Some("a0"),
        "the oldest message comes first"
    );
    let rest = sqs
        .receive_message()
        .queue_url(&url)
        .max_number_of_messages(10)
        .message_system_attribute_names(MessageSystemAttributeName::MessageGroupId)
        .send()
        .await
        .expect("ReceiveMessage")
        .messages
        .unwrap_or_default();
    assert!(
        rest.iter()
            .all(|m| system(m, MessageSystemAttributeName::MessageGroupId) != Some("a")),
        "group a is locked by its head in flight: {rest:?}"
    );
    for m in first.iter().chain(&rest) {
        sqs.change_message_visibility()
            .queue_url(&url)
            .receipt_handle(m.receipt_handle().unwrap())
            .visibility_timeout(0)
            .send()
            .await
            .expect("ChangeMessageVisibility");
    }

    let got = drain(&sqs, &url).await;
    let mut groups: HashMap<String, Vec<String>> = HashMap::new();
    for m in &got {
        let g = system(m, MessageSystemAttributeName::MessageGroupId)
            .expect("MessageGroupId")
            .to_owned();
        groups
            .entry(g)
            .or_default()
            .push(m.body().unwrap().to_owned());
    }
    for g in ["a", "b"] {
        let expected: Vec<String> = (0..6).map(|i| format!("{g}{i}")).collect();
        assert_eq!(groups[g], expected, "group {g} in send order");
    }
    let expected: Vec<String> = (0..5).map(|i| format!("c{i}")).collect();
    assert_eq!(groups["c"], expected, "group c in batch order");
    assert_eq!(got.len(), 17);
}
