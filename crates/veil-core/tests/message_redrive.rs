//! A message's own dead-letter rule (KubeMQ's MaxReceiveCount / MaxReceiveQueue, docs/semantics.md §3 "per message for
//! KubeMQ"): decided by the engine inside the receive, so the move is atomic and survives restarts.

mod common;

use common::*;
use veil_core::*;

fn with_policy(
    body: &str,
    max_receive_count: u32,
    dead_letter_queue: Option<&QueueKey>,
) -> NewMessage {
    NewMessage {
        redrive: Some(MessageRedrivePolicy {
            max_receive_count,
            dead_letter_queue: dead_letter_queue.cloned(),
        }),
        ..NewMessage::new(body.to_owned())
    }
}

async fn send(h: &Harness, key: &QueueKey, message: NewMessage) -> SentMessage {
    h.engine.send(key, vec![message]).await.unwrap().remove(0)
}

/// Receives `times` times with a visibility of 1 s, letting each lapse.
async fn receive_and_let_lapse(h: &Harness, key: &QueueKey, times: usize) {
    for _ in 0..times {
        h.receive_one(key, 1).await;
        h.advance_s(1);
    }
}

#[tokio::test]
async fn a_message_policy_moves_it_fresh_after_max_receive_count() {
    let h = Harness::new();
    let source = h.queue("orders").await;
    let dead = h.queue("dead").await;
    let sent = send(&h, &source, with_policy("poison", 2, Some(&dead))).await;
    receive_and_let_lapse(&h, &source, 2).await;
    assert!(
        h.receive(&source, 10, None).await.is_empty(),
        "the third receive moves instead of delivering"
    );
    let stats = h.stats(&source);
    assert_eq!((stats.visible, stats.counters.dead_letter_moves), (0, 1));
    let moved = h.receive_one(&dead, 30).await;
    assert_eq!(moved.payload.message_id, sent.message_id);
    assert_eq!(body(&moved), "poison");
    assert_eq!(
        moved.state.receive_count, 1,
        "KubeMQ resets the count: this is the first delivery in the dead-letter channel"
    );
    assert_eq!(moved.redrive, None, "the policy is cleared by the move");
    assert_eq!(moved.payload.dead_letter_source(), Some(&source));
    h.engine.check_invariants();
}

#[tokio::test]
async fn a_message_policy_takes_precedence_over_the_queue_policy() {
    let h = Harness::new();
    let queue_dlq = h.queue("queue-dlq").await;
    let message_dlq = h.queue("message-dlq").await;
    let source = h
        .queue_with(
            "source",
            QueueConfig {
                redrive_policy: Some(RedrivePolicy {
                    dead_letter_queue: queue_dlq.clone(),
                    max_receive_count: 5,
                }),
                ..QueueConfig::default()
            },
        )
        .await;
    send(&h, &source, with_policy("own rule", 1, Some(&message_dlq))).await;
    receive_and_let_lapse(&h, &source, 1).await;
    assert!(h.receive(&source, 10, None).await.is_empty());
    assert_eq!(h.stats(&message_dlq).visible, 1);
    assert_eq!(h.stats(&queue_dlq).visible, 0);
}

#[tokio::test]
async fn a_message_policy_without_a_queue_drops_the_message() {
    let h = Harness::new();
    let source = h.queue("orders").await;
    send(&h, &source, with_policy("doomed", 1, None)).await;
    receive_and_let_lapse(&h, &source, 1).await;
    assert!(h.receive(&source, 10, None).await.is_empty());
    let stats = h.stats(&source);
    assert_eq!(stats.visible + stats.hidden + stats.delayed, 0);
    assert_eq!(
        (
            stats.counters.dead_letter_drops,
            stats.counters.dead_letter_moves
        ),
        (1, 0)
    );
    assert_eq!(h.store.message_count(), 0, "the drop is stored too");
}

#[tokio::test]
async fn a_missing_dead_letter_queue_is_created_with_the_source_settings() {
    let h = Harness::new();
    let source = h
        .queue_with(
            "orders",
            QueueConfig {
                visibility_timeout_ms: 60_000,
                retention_ms: None,
                ..QueueConfig::default()
            },
        )
        .await;
    let dead = QueueKey::new(DEFAULT_NAMESPACE, "not-yet");
    send(&h, &source, with_policy("x", 1, Some(&dead))).await;
    receive_and_let_lapse(&h, &source, 1).await;
    assert!(h.receive(&source, 10, None).await.is_empty());
    let info = h.engine.queue_info(&dead).unwrap();
    assert_eq!(info.config.visibility_timeout_ms, 60_000);
    assert_eq!(info.config.retention_ms, None);
    assert_eq!(info.stats.visible, 1);
}

#[tokio::test]
async fn a_message_policy_survives_a_restart() {
    let mut h = Harness::new();
    let source = h.queue("orders").await;
    let dead = h.queue("dead").await;
    send(&h, &source, with_policy("poison", 1, Some(&dead))).await;
    send(&h, &source, NewMessage::new("healthy")).await;
    h.restart();
    let peeked = h.engine.peek(&source, 10).await.unwrap();
    assert_eq!(
        peeked[0].redrive.as_ref().map(|p| p.max_receive_count),
        Some(1)
    );
    assert_eq!(peeked[1].redrive, None);
    receive_and_let_lapse(&h, &source, 1).await; // delivers "poison" once
    h.restart();
    let got = h.receive(&source, 10, Some(30)).await;
    assert_eq!(got.len(), 1);
    assert_eq!(body(&got[0]), "healthy");
    assert_eq!(h.stats(&dead).visible, 1, "poison moved after the restart");
    h.restart();
    h.engine.check_invariants();
    assert_eq!(h.stats(&dead).visible, 1);
}

#[tokio::test]
async fn deleting_a_message_forgets_its_policy() {
    let mut h = Harness::new();
    let source = h.queue("orders").await;
    send(&h, &source, with_policy("x", 3, None)).await;
    let got = h.receive_one(&source, 30).await;
    h.engine
        .delete(
            &source,
            got.receipt.as_deref().unwrap(),
            ReceiptRule::AnyIssued,
        )
        .await
        .unwrap();
    h.restart(); // a policy left behind would make the restart refuse the store as corrupt
    h.engine.check_invariants();
}

#[tokio::test]
async fn stored_bytes_follow_sends_deletes_updates_and_expiry() {
    let h = Harness::new();
    let key = h.queue("q").await;
    assert_eq!(h.stats(&key).stored_bytes, 0);
    h.send(&key, "12345").await;
    let expiring = NewMessage {
        ttl: Some(Ttl::After(10_000)),
        ..NewMessage::new("123")
    };
    h.engine.send(&key, vec![expiring]).await.unwrap();
    assert_eq!(h.stats(&key).stored_bytes, 8);
    let got = h.receive_one(&key, 30).await;
    let updated = h
        .engine
        .update(
            &key,
            got.receipt.as_deref().unwrap(),
            sqs_change(30),
            Some(bytes::Bytes::from_static(b"1234567890")),
        )
        .await
        .unwrap();
    assert_eq!(
        h.stats(&key).stored_bytes,
        13,
        "an update replaces the body's length"
    );
    h.advance_s(11);
    assert_eq!(
        h.stats(&key).stored_bytes,
        10,
        "expiry removes the expired body's length"
    );
    h.engine
        .delete(&key, &updated.receipt, ReceiptRule::Current)
        .await
        .unwrap();
    assert_eq!(h.stats(&key).stored_bytes, 0);
    h.engine.check_invariants();
}

#[tokio::test]
async fn seq_range_spans_the_oldest_and_newest_stored_message() {
    let h = Harness::new();
    let key = h.queue("q").await;
    assert_eq!(h.stats(&key).seq_range, None);
    let first = h.send(&key, "a").await;
    h.send(&key, "b").await;
    let last = h.send(&key, "c").await;
    assert_eq!(h.stats(&key).seq_range, Some((first.seq, last.seq)));
    let got = h.receive_one(&key, 30).await;
    h.engine
        .delete(
            &key,
            got.receipt.as_deref().unwrap(),
            ReceiptRule::AnyIssued,
        )
        .await
        .unwrap();
    assert_eq!(h.stats(&key).seq_range, Some((first.seq + 1, last.seq)));
}

#[tokio::test]
async fn a_receive_reports_the_expired_messages_it_removed() {
    let h = Harness::new();
    let key = h.queue("q").await;
    for body in ["a", "b"] {
        let message = NewMessage {
            ttl: Some(Ttl::After(1_000)),
            ..NewMessage::new(body.to_owned())
        };
        h.engine.send(&key, vec![message]).await.unwrap();
    }
    h.send(&key, "lives").await;
    h.advance_s(2);
    let options = ReceiveOptions {
        dead_letter: veil_core::DeadLetterTiming::OnReceive,
        max_messages: 10,
        visibility_ms: None,
        wait_ms: Some(0),
        attempt_id: None,
        consumer: None,
    };
    let received = h
        .engine
        .receive_detailed(&key, options.clone())
        .await
        .unwrap();
    assert_eq!((received.messages.len(), received.expired), (1, 2));
    let again = h.engine.receive_detailed(&key, options).await.unwrap();
    assert_eq!(again.expired, 0, "each expiry is reported once");
}

#[tokio::test]
async fn a_message_policy_of_zero_receives_is_refused() {
    let h = Harness::new();
    let source = h.queue("orders").await;
    let refused = h
        .engine
        .send(&source, vec![with_policy("x", 0, None)])
        .await;
    assert!(
        matches!(refused, Err(EngineError::InvalidArgument(_))),
        "{refused:?}"
    );
    assert_eq!(h.stats(&source).counters.sends, 0);
}
