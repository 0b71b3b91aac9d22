//! Messages on a standard queue through the AWS SDK for Rust against the real `veil` binary: sends and batches
//! with message attributes and the MD5s Veil answers (the Rust SDK does not check them, unlike boto3, so these
//! tests do), receives with system and message attributes, visibility timeouts, and deletes one by one and in
//! batches.

use std::collections::HashMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use aws_sdk_sqs::primitives::Blob;
use aws_sdk_sqs::types::{
    DeleteMessageBatchRequestEntry, Message, MessageAttributeValue, MessageSystemAttributeName,
    SendMessageBatchRequestEntry,
};
use aws_sdk_sqs::Client;
use veil_sdk_rust_tests::{
    create_queue as queue, md5_hex, md5_of_message_attributes, system_attribute as system, Veil,
};

fn string(v: &str) -> MessageAttributeValue {
    MessageAttributeValue::builder()
        .data_type("String")
        .string_value(v)
        .build()
        .unwrap()
}

fn number(v: &str) -> MessageAttributeValue {
    MessageAttributeValue::builder()
        .data_type("Number")
        .string_value(v)
        .build()
        .unwrap()
}

fn binary(v: &[u8]) -> MessageAttributeValue {
    MessageAttributeValue::builder()
        .data_type("Binary")
        .binary_value(Blob::new(v))
        .build()
        .unwrap()
}

/// Receives once, waiting up to `wait` seconds.
async fn receive(sqs: &Client, url: &str, visibility: i32, wait: i32) -> Vec<Message> {
    veil_sdk_rust_tests::receive(sqs, url, Some(visibility), wait).await
}

/// Receives until `n` messages arrived (at most 5 s), hiding them for `visibility` seconds.
async fn receive_n(sqs: &Client, url: &str, n: usize, visibility: i32) -> Vec<Message> {
    let mut got = Vec::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while got.len() < n && std::time::Instant::now() < deadline {
        got.extend(receive(sqs, url, visibility, 1).await);
    }
    assert_eq!(got.len(), n, "expected {n} messages, got {got:?}");
    got
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

#[tokio::test]
async fn a_sent_message_is_answered_with_the_md5s_of_its_body_and_attributes() {
    let veil = Veil::start();
    let sqs = veil.client();
    let url = queue(&sqs, "md5s").await;
    let body = "héllo, wörld — ✓";
    let attrs: HashMap<String, MessageAttributeValue> = [
        ("kind".to_owned(), string("greeting")),
        ("price".to_owned(), number("-12.50")),
        ("blob".to_owned(), binary(&[0, 1, 2, 0xfe, 0xff])),
        (
            "custom".to_owned(),
            MessageAttributeValue::builder()
                .data_type("String.utf8")
                .string_value("ü")
                .build()
                .unwrap(),
        ),
    ]
    .into();
    let sent = sqs
        .send_message()
        .queue_url(&url)
        .message_body(body)
        .set_message_attributes(Some(attrs.clone()))
        .send()
        .await
        .expect("SendMessage");
    assert_eq!(sent.md5_of_message_body(), Some(&*md5_hex(body.as_bytes())));
    assert_eq!(
        sent.md5_of_message_attributes(),
        Some(&*md5_of_message_attributes(&attrs))
    );
    assert!(sent.message_id().is_some_and(|id| !id.is_empty()));
    assert_eq!(
        sent.sequence_number(),
        None,
        "a standard queue has no sequence numbers"
    );

    let got = receive_n(&sqs, &url, 1, 30).await;
    let m = &got[0];
    assert_eq!(m.message_id(), sent.message_id());
    assert_eq!(m.body(), Some(body));
    assert_eq!(m.md5_of_body(), Some(&*md5_hex(body.as_bytes())));
    assert_eq!(
        m.md5_of_message_attributes(),
        Some(&*md5_of_message_attributes(&attrs))
    );
    // The attributes come back as sent: the Number's text unchanged, the Binary's bytes exact.
    let received = m.message_attributes.clone().expect("message attributes");
    assert_eq!(received, attrs);
    assert_eq!(received["price"].string_value(), Some("-12.50"));
    assert_eq!(
        received["blob"].binary_value().map(|b| b.as_ref().to_vec()),
        Some(vec![0, 1, 2, 0xfe, 0xff])
    );
}

#[tokio::test]
async fn each_entry_of_a_send_batch_is_answered_with_its_own_md5s() {
    let veil = Veil::start();
    let sqs = veil.client();
    let url = queue(&sqs, "batch").await;
    let first: HashMap<String, MessageAttributeValue> = [("n".to_owned(), number("1e3"))].into();
    let second: HashMap<String, MessageAttributeValue> = [
        ("s".to_owned(), string("two")),
        ("b".to_owned(), binary(b"\x00two")),
    ]
    .into();
    let out = sqs
        .send_message_batch()
        .queue_url(&url)
        .entries(
            SendMessageBatchRequestEntry::builder()
                .id("first")
                .message_body("body one")
                .set_message_attributes(Some(first.clone()))
                .build()
                .unwrap(),
        )
        .entries(
            SendMessageBatchRequestEntry::builder()
                .id("second")
                .message_body("body two")
                .set_message_attributes(Some(second.clone()))
                .build()
                .unwrap(),
        )
        .entries(
            SendMessageBatchRequestEntry::builder()
                .id("third")
                .message_body("plain")
                .build()
                .unwrap(),
        )
        .send()
        .await
        .expect("SendMessageBatch");
    assert!(out.failed().is_empty(), "{:?}", out.failed());
    let by_id: HashMap<&str, _> = out.successful().iter().map(|e| (e.id(), e)).collect();
    assert_eq!(by_id.len(), 3);
    assert_eq!(by_id["first"].md5_of_message_body(), md5_hex(b"body one"));
    assert_eq!(
        by_id["first"].md5_of_message_attributes(),
        Some(&*md5_of_message_attributes(&first))
    );
    assert_eq!(by_id["second"].md5_of_message_body(), md5_hex(b"body two"));
    assert_eq!(
        by_id["second"].md5_of_message_attributes(),
        Some(&*md5_of_message_attributes(&second))
    );
    assert_eq!(by_id["third"].md5_of_message_body(), md5_hex(b"plain"));
    assert_eq!(
        by_id["third"].md5_of_message_attributes(),
        None,
        "no attributes, no digest"
    );

    let got = receive_n(&sqs, &url, 3, 30).await;
    let by_body: HashMap<&str, &Message> = got.iter().map(|m| (m.body().unwrap(), m)).collect();
    assert_eq!(
        by_body["body one"].message_id(),
        Some(by_id["first"].message_id())
    );
    assert_eq!(
        by_body["body one"].message_attributes.as_ref(),
        Some(&first)
    );
    assert_eq!(
        by_body["body two"].message_attributes.as_ref(),
        Some(&second)
    );
    assert_eq!(
        by_body["plain"]
            .message_attributes
            .as_ref()
            .map(HashMap::len)
            .unwrap_or(0),
        0
    );
    assert_eq!(by_body["plain"].md5_of_message_attributes(), None);
}

#[tokio::test]
async fn a_received_message_carries_its_system_attributes() {
    let veil = Veil::start();
    let sqs = veil.client();
    let url = queue(&sqs, "system").await;
    let before = now_ms();
    sqs.send_message()
        .queue_url(&url)
        .message_body("x")
        .send()
        .await
        .expect("SendMessage");
    let after = now_ms();

    let m = receive_n(&sqs, &url, 1, 0).await.remove(0);
    assert_eq!(
        system(&m, MessageSystemAttributeName::ApproximateReceiveCount),
        Some("1")
    );
    let sent: i64 = system(&m, MessageSystemAttributeName::SentTimestamp)
        .expect("SentTimestamp")
        .parse()
        .unwrap();
    assert!(
        (before - 1000..=after + 1000).contains(&sent),
        "SentTimestamp {sent} is epoch ms of the send"
    );
    let first: i64 = system(
        &m,
        MessageSystemAttributeName::ApproximateFirstReceiveTimestamp,
    )
    .expect("ApproximateFirstReceiveTimestamp")
    .parse()
    .unwrap();
    assert!(
        first >= sent - 1000 && first <= now_ms() + 1000,
        "first receive {first} after the send {sent}"
    );
    assert!(system(&m, MessageSystemAttributeName::SenderId).is_some_and(|s| !s.is_empty()));

    // Visible again at once (visibility 0): the second receive counts 2 and keeps the first receive's time.
    let again = receive_n(&sqs, &url, 1, 30).await.remove(0);
    assert_eq!(again.message_id(), m.message_id());
    assert_eq!(
        system(&again, MessageSystemAttributeName::ApproximateReceiveCount),
        Some("2")
    );
    assert_eq!(
        system(
            &again,
            MessageSystemAttributeName::ApproximateFirstReceiveTimestamp
        ),
        Some(&*first.to_string())
    );
    assert_ne!(
        again.receipt_handle(),
        m.receipt_handle(),
        "each receive issues its own receipt"
    );

    // Asking for one system attribute by name returns only that one.
    sqs.change_message_visibility()
        .queue_url(&url)
        .receipt_handle(again.receipt_handle().unwrap())
        .visibility_timeout(0)
        .send()
        .await
        .expect("ChangeMessageVisibility");
    let only = sqs
        .receive_message()
        .queue_url(&url)
        .message_system_attribute_names(MessageSystemAttributeName::SentTimestamp)
        .wait_time_seconds(1)
        .send()
        .await
        .expect("ReceiveMessage")
        .messages
        .unwrap_or_default();
    assert_eq!(only.len(), 1);
    let names: Vec<_> = only[0]
        .attributes
        .as_ref()
        .map(|a| a.keys().cloned().collect())
        .unwrap_or_default();
    assert_eq!(names, [MessageSystemAttributeName::SentTimestamp]);
}

#[tokio::test]
async fn a_received_message_stays_hidden_until_its_visibility_timeout() {
    let veil = Veil::start();
    let sqs = veil.client();
    let url = queue(&sqs, "hidden").await;
    sqs.send_message()
        .queue_url(&url)
        .message_body("once")
        .send()
        .await
        .expect("SendMessage");
    let m = receive_n(&sqs, &url, 1, 30).await.remove(0);

    // Hidden while its 30 s last (on the server's test clock): 25 s later a receive gets nothing.
    veil.advance_clock(25);
    let during = receive(&sqs, &url, 30, 0).await;
    assert!(during.is_empty(), "delivered while hidden: {during:?}");

    veil.advance_clock(6);
    let after = receive_n(&sqs, &url, 1, 30).await.remove(0);
    assert_eq!(after.message_id(), m.message_id());
    assert_eq!(
        system(&after, MessageSystemAttributeName::ApproximateReceiveCount),
        Some("2")
    );
}

#[tokio::test]
async fn changing_a_visibility_to_zero_makes_the_message_visible_at_once() {
    let veil = Veil::start();
    let sqs = veil.client();
    let url = queue(&sqs, "change").await;
    sqs.send_message()
        .queue_url(&url)
        .message_body("back")
        .send()
        .await
        .expect("SendMessage");
    let m = receive_n(&sqs, &url, 1, 30).await.remove(0);
    assert!(
        receive(&sqs, &url, 30, 0).await.is_empty(),
        "hidden for 30 s"
    );

    sqs.change_message_visibility()
        .queue_url(&url)
        .receipt_handle(m.receipt_handle().unwrap())
        .visibility_timeout(0)
        .send()
        .await
        .expect("ChangeMessageVisibility");
    let again = receive(&sqs, &url, 10, 0).await;
    assert_eq!(
        again.len(),
        1,
        "visible at once after the change: {again:?}"
    );
    assert_eq!(again[0].message_id(), m.message_id());

    // Extending a visibility keeps it hidden past the 10 s it was received with, until the 30 s from the
    // change ran out (the server's test clock).
    sqs.change_message_visibility()
        .queue_url(&url)
        .receipt_handle(again[0].receipt_handle().unwrap())
        .visibility_timeout(30)
        .send()
        .await
        .expect("ChangeMessageVisibility");
    veil.advance_clock(15);
    assert!(
        receive(&sqs, &url, 30, 0).await.is_empty(),
        "the longer visibility holds"
    );
    veil.advance_clock(16);
    assert_eq!(
        receive(&sqs, &url, 30, 0).await.len(),
        1,
        "visible again when the extended visibility ran out"
    );
}

#[tokio::test]
async fn a_deleted_message_is_never_delivered_again() {
    let veil = Veil::start();
    let sqs = veil.client();
    let url = queue(&sqs, "delete").await;
    sqs.send_message()
        .queue_url(&url)
        .message_body("gone")
        .send()
        .await
        .expect("SendMessage");
    sqs.send_message()
        .queue_url(&url)
        .message_body("kept")
        .send()
        .await
        .expect("SendMessage");
    let got = receive_n(&sqs, &url, 2, 30).await;
    let gone = got.iter().find(|m| m.body() == Some("gone")).unwrap();
    sqs.delete_message()
        .queue_url(&url)
        .receipt_handle(gone.receipt_handle().unwrap())
        .send()
        .await
        .expect("DeleteMessage");

    // Past both visibility timeouts (the server's test clock): only the kept one is visible again.
    veil.advance_clock(31);
    let later = receive_n(&sqs, &url, 1, 30).await;
    assert_eq!(
        later[0].body(),
        Some("kept"),
        "only the undeleted message comes back"
    );
    assert!(receive(&sqs, &url, 30, 1).await.is_empty());
}

#[tokio::test]
async fn a_delete_batch_with_a_bad_receipt_handle_fails_only_that_entry() {
    let veil = Veil::start();
    let sqs = veil.client();
    let url = queue(&sqs, "delete-batch").await;
    for body in ["a", "b"] {
        sqs.send_message()
            .queue_url(&url)
            .message_body(body)
            .send()
            .await
            .expect("SendMessage");
    }
    let got = receive_n(&sqs, &url, 2, 30).await;
    let mut batch = sqs.delete_message_batch().queue_url(&url);
    for (i, m) in got.iter().enumerate() {
        batch = batch.entries(
            DeleteMessageBatchRequestEntry::builder()
                .id(format!("ok{i}"))
                .receipt_handle(m.receipt_handle().unwrap())
                .build()
                .unwrap(),
        );
    }
    let out = batch
        .entries(
            DeleteMessageBatchRequestEntry::builder()
                .id("bad")
                .receipt_handle("not-a-receipt")
                .build()
                .unwrap(),
        )
        .send()
        .await
        .expect("DeleteMessageBatch answers per entry");
    let mut ok: Vec<&str> = out.successful().iter().map(|e| e.id()).collect();
    ok.sort();
    assert_eq!(ok, ["ok0", "ok1"]);
    assert_eq!(out.failed().len(), 1, "{:?}", out.failed());
    let failed = &out.failed()[0];
    assert_eq!(failed.id(), "bad");
    assert_eq!(failed.code(), "ReceiptHandleIsInvalid");
    assert!(failed.sender_fault());
    assert!(
        failed
            .message()
            .is_some_and(|m| m.contains("not-a-receipt")),
        "{failed:?}"
    );

    // Past their visibility timeout (the server's test clock) neither comes back.
    veil.advance_clock(31);
    assert!(
        receive(&sqs, &url, 30, 1).await.is_empty(),
        "both deleted messages stay deleted"
    );
}

#[tokio::test]
async fn a_long_poll_returns_a_message_sent_while_it_waits() {
    let veil = Veil::start();
    let sqs = veil.client();
    let url = queue(&sqs, "long-poll").await;
    let started = std::time::Instant::now();
    let polling = {
        let (sqs, url) = (sqs.clone(), url.clone());
        tokio::spawn(async move { receive(&sqs, &url, 30, 10).await })
    };
    // The message is sent once the poll has parked (the server's gauge says so), not after a guess.
    while veil.long_polls_waiting("long-poll") == 0 {
        assert!(!polling.is_finished(), "the poll ended before it parked");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    sqs.send_message()
        .queue_url(&url)
        .message_body("late")
        .send()
        .await
        .expect("SendMessage");
    let got = polling.await.unwrap();
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(got[0].body(), Some("late"));
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "answered when the message came, not at the end of its 10 s wait"
    );
}
