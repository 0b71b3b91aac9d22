//! FIFO queues in the engine (docs/semantics.md §4), with a manual clock: strict order within a message group,
//! a group blocked while a message of it is in flight, deduplication inside the interval (durable across a
//! restart), receive attempts, the FIFO in-flight limit, dead-letter moves that keep the group, and the
//! receipt rule that expires with the visibility.

mod common;

use common::*;
use veil_core::*;

fn fifo(content_based_dedup: bool, dedup_scope: DedupScope) -> QueueConfig {
    QueueConfig {
        fifo: Some(FifoConfig {
            content_based_dedup,
            dedup_scope,
            ..FifoConfig::default()
        }),
        ..QueueConfig::default()
    }
}

fn grouped(body: &str, group: &str, dedup_id: &str) -> NewMessage {
    NewMessage {
        group: Some(group.to_owned()),
        dedup_id: Some(dedup_id.to_owned()),
        ..NewMessage::new(body.to_owned())
    }
}

async fn send(h: &Harness, key: &QueueKey, message: NewMessage) -> SentMessage {
    h.engine.send(key, vec![message]).await.unwrap().remove(0)
}

/// Sends `bodies` to `group`, each deduplicated by its own body.
async fn send_all(h: &Harness, key: &QueueKey, group: &str, bodies: &[&str]) {
    for body in bodies {
        send(h, key, grouped(body, group, body)).await;
    }
}

fn bodies(messages: &[Message]) -> Vec<&str> {
    messages.iter().map(body).collect()
}

async fn delete(h: &Harness, key: &QueueKey, message: &Message) {
    let receipt = message.receipt.as_deref().unwrap();
    let outcome = h.engine.delete(key, receipt, ReceiptRule::Unexpired).await;
    assert_eq!(outcome.unwrap(), DeleteOutcome::Deleted);
}

#[tokio::test]
async fn a_group_delivers_in_send_order_and_one_receive_takes_several_of_it() {
    let h = Harness::new();
    let q = h
        .queue_with("orders.fifo", fifo(false, DedupScope::Queue))
        .await;
    send_all(&h, &q, "g", &["1", "2", "3", "4"]).await;
    let got = h.receive(&q, 3, Some(30)).await;
    assert_eq!(bodies(&got), ["1", "2", "3"]);
    assert!(
        got.windows(2).all(|w| w[0].seq < w[1].seq),
        "sequence numbers increase"
    );
    h.engine.check_invariants();
}

#[tokio::test]
async fn a_group_with_a_message_in_flight_delivers_nothing_while_other_groups_flow() {
    let h = Harness::new();
    let q = h
        .queue_with("orders.fifo", fifo(false, DedupScope::Queue))
        .await;
    send_all(&h, &q, "a", &["a1", "a2"]).await;
    send_all(&h, &q, "b", &["b1", "b2"]).await;
    let first = h.receive_one(&q, 30).await;
    assert_eq!(body(&first), "a1");
    let next = h.receive(&q, 10, Some(30)).await;
    assert_eq!(
        bodies(&next),
        ["b1", "b2"],
        "group a is blocked, group b is not"
    );
    assert!(
        h.receive(&q, 10, Some(30)).await.is_empty(),
        "both groups blocked"
    );
    delete(&h, &q, &first).await;
    assert_eq!(bodies(&h.receive(&q, 10, Some(30)).await), ["a2"]);
    h.engine.check_invariants();
}

#[tokio::test]
async fn visibility_expiry_redelivers_the_head_of_the_group_first() {
    let h = Harness::new();
    let q = h
        .queue_with("orders.fifo", fifo(false, DedupScope::Queue))
        .await;
    send_all(&h, &q, "g", &["1", "2", "3"]).await;
    assert_eq!(body(&h.receive_one(&q, 5).await), "1");
    h.advance_s(6);
    let again = h.receive(&q, 10, Some(30)).await;
    assert_eq!(bodies(&again), ["1", "2", "3"]);
    assert_eq!(again[0].state.receive_count, 2);
    h.engine.check_invariants();
}

#[tokio::test]
async fn a_head_made_visible_early_waits_while_a_later_message_of_its_group_is_in_flight() {
    let h = Harness::new();
    let q = h
        .queue_with("orders.fifo", fifo(false, DedupScope::Queue))
        .await;
    send_all(&h, &q, "g", &["1", "2"]).await;
    let got = h.receive(&q, 2, Some(30)).await;
    let change = VisibilityChange {
        receipts: ReceiptRule::Unexpired,
        ..sqs_change(0)
    };
    let receipt = got[0].receipt.as_deref().unwrap();
    h.engine
        .change_visibility(&q, receipt, change)
        .await
        .unwrap();
    assert!(
        h.receive(&q, 10, Some(30)).await.is_empty(),
        "2 is still in flight"
    );
    h.advance_s(31);
    assert_eq!(bodies(&h.receive(&q, 10, Some(30)).await), ["1", "2"]);
    h.engine.check_invariants();
}

#[tokio::test]
async fn a_duplicate_inside_the_interval_is_accepted_and_never_delivered_even_after_a_delete() {
    let h = Harness::new();
    let q = h
        .queue_with("orders.fifo", fifo(false, DedupScope::Queue))
        .await;
    let original = send(&h, &q, grouped("x", "g", "id-1")).await;
    let duplicate = send(&h, &q, grouped("other body", "g", "id-1")).await;
    assert!(duplicate.duplicate && !original.duplicate);
    assert_eq!(
        (duplicate.message_id, duplicate.seq),
        (original.message_id, original.seq)
    );
    let got = h.receive(&q, 10, Some(30)).await;
    assert_eq!(bodies(&got), ["x"]);
    delete(&h, &q, &got[0]).await;
    h.advance_s(299);
    assert!(
        send(&h, &q, grouped("x", "g", "id-1")).await.duplicate,
        "counted from the first send"
    );
    assert!(h.receive(&q, 10, Some(30)).await.is_empty());
    h.advance_s(1);
    assert!(
        !send(&h, &q, grouped("x", "g", "id-1")).await.duplicate,
        "the interval has passed"
    );
    assert_eq!(h.stats(&q).visible, 1);
    h.engine.check_invariants();
}

#[tokio::test]
async fn content_based_deduplication_compares_the_body() {
    let h = Harness::new();
    let q = h
        .queue_with("orders.fifo", fifo(true, DedupScope::Queue))
        .await;
    let by_body = |body: &str| NewMessage {
        group: Some("g".into()),
        ..NewMessage::new(body.to_owned())
    };
    assert!(!send(&h, &q, by_body("same")).await.duplicate);
    assert!(send(&h, &q, by_body("same")).await.duplicate);
    assert!(!send(&h, &q, by_body("different")).await.duplicate);
    let got = h.receive(&q, 10, Some(30)).await;
    assert_eq!(bodies(&got), ["same", "different"]);
    let expected = "0967115f2813a3541eaef77de9d9d5773f1c0c04314b0bbfe4ff3b3b1c55b5d5";
    assert_eq!(
        got[0].payload.dedup_id.as_deref(),
        Some(expected),
        "SHA-256 of the body, hex"
    );
}

#[tokio::test]
async fn message_group_scope_deduplicates_within_each_group_only() {
    let h = Harness::new();
    let q = h
        .queue_with("orders.fifo", fifo(false, DedupScope::Group))
        .await;
    assert!(!send(&h, &q, grouped("a", "g1", "id")).await.duplicate);
    assert!(!send(&h, &q, grouped("b", "g2", "id")).await.duplicate);
    assert!(send(&h, &q, grouped("c", "g1", "id")).await.duplicate);
    let queue_scope = h
        .queue_with("other.fifo", fifo(false, DedupScope::Queue))
        .await;
    send(&h, &queue_scope, grouped("a", "g1", "id")).await;
    assert!(
        send(&h, &queue_scope, grouped("b", "g2", "id"))
            .await
            .duplicate
    );
}

#[tokio::test]
async fn deduplication_ids_survive_a_restart_and_leave_after_the_interval() {
    let mut h = Harness::new();
    let q = h
        .queue_with("orders.fifo", fifo(false, DedupScope::Queue))
        .await;
    let original = send(&h, &q, grouped("x", "g", "id-1")).await;
    h.restart();
    let again = send(&h, &q, grouped("x", "g", "id-1")).await;
    assert!(again.duplicate);
    assert_eq!(again.message_id, original.message_id);
    h.advance_s(301);
    h.engine.sweep();
    h.restart();
    assert!(
        !send(&h, &q, grouped("x", "g", "id-1")).await.duplicate,
        "the store forgot it too"
    );
}

#[tokio::test]
async fn group_order_survives_a_restart() {
    let mut h = Harness::new();
    let q = h
        .queue_with("orders.fifo", fifo(false, DedupScope::Queue))
        .await;
    send_all(&h, &q, "a", &["a1", "a2"]).await;
    send_all(&h, &q, "b", &["b1"]).await;
    let held = h.receive_one(&q, 30).await;
    assert_eq!(body(&held), "a1");
    h.restart();
    h.engine.check_invariants();
    assert_eq!(
        bodies(&h.receive(&q, 10, Some(120)).await),
        ["b1"],
        "a is still blocked"
    );
    h.advance_s(31);
    assert_eq!(bodies(&h.receive(&q, 10, Some(30)).await), ["a1", "a2"]);
}

#[tokio::test]
async fn fifo_sends_need_a_group_and_a_dedup_id_unless_content_based() {
    let h = Harness::new();
    let q = h
        .queue_with("orders.fifo", fifo(false, DedupScope::Queue))
        .await;
    let no_group = NewMessage {
        dedup_id: Some("d".into()),
        ..NewMessage::new("x")
    };
    let err = h.engine.send(&q, vec![no_group]).await.unwrap_err();
    assert!(matches!(err, EngineError::GroupRequired), "{err:?}");
    let no_dedup = NewMessage {
        group: Some("g".into()),
        ..NewMessage::new("x")
    };
    let err = h.engine.send(&q, vec![no_dedup]).await.unwrap_err();
    assert!(matches!(err, EngineError::DedupIdRequired), "{err:?}");
    assert_eq!(
        h.engine.message_count(&q).unwrap(),
        0,
        "nothing of a refused send is stored"
    );
}

#[tokio::test]
async fn a_standard_queue_keeps_the_group_but_never_blocks_on_it() {
    let h = Harness::new();
    let q = h.queue("fair").await;
    for body in ["1", "2"] {
        send(&h, &q, grouped(body, "g", body)).await;
    }
    let first = h.receive_one(&q, 30).await;
    assert_eq!(first.payload.group.as_deref(), Some("g"));
    assert_eq!(
        first.payload.dedup_id, None,
        "standard queues do not deduplicate"
    );
    assert_eq!(
        body(&h.receive_one(&q, 30).await),
        "2",
        "not blocked by 1 in flight"
    );
}

#[tokio::test]
async fn a_retried_receive_attempt_returns_the_same_messages_and_receipts() {
    let h = Harness::new();
    let q = h
        .queue_with("orders.fifo", fifo(false, DedupScope::Queue))
        .await;
    send_all(&h, &q, "a", &["a1", "a2"]).await;
    send_all(&h, &q, "b", &["b1"]).await;
    let attempt = |id: &str| ReceiveOptions {
        visibility_ms: Some(30_000),
        wait_ms: Some(0),
        attempt_id: Some(id.to_owned()),
        ..ReceiveOptions::new(2)
    };
    let first = h.engine.receive(&q, attempt("try-1")).await.unwrap();
    h.advance_s(10);
    let retry = h.engine.receive(&q, attempt("try-1")).await.unwrap();
    let receipts = |m: &[Message]| m.iter().map(|m| m.receipt.clone()).collect::<Vec<_>>();
    assert_eq!(bodies(&retry), bodies(&first));
    assert_eq!(receipts(&retry), receipts(&first));
    assert_eq!(
        retry[0].state.visible_at,
        h.engine.now() + 30_000,
        "the retry resets the visibility"
    );
    let other = h.engine.receive(&q, attempt("try-2")).await.unwrap();
    assert_eq!(bodies(&other), ["b1"]);
    delete(&h, &q, &first[0]).await;
    let changed = h.engine.receive(&q, attempt("try-1")).await.unwrap();
    assert!(
        changed.is_empty(),
        "a changed attempt is a new receive; a2 is still in flight"
    );
    h.engine.check_invariants();
}

#[tokio::test]
async fn a_fifo_queue_at_its_inflight_limit_returns_nothing_instead_of_failing() {
    let h = Harness::new();
    let config = QueueConfig {
        inflight_max: 2,
        ..fifo(false, DedupScope::Queue)
    };
    let q = h.queue_with("orders.fifo", config).await;
    for group in ["a", "b", "c"] {
        send(&h, &q, grouped(group, group, group)).await;
    }
    assert_eq!(h.receive(&q, 10, Some(30)).await.len(), 2);
    assert!(h.receive(&q, 10, Some(30)).await.is_empty());
}

#[tokio::test]
async fn a_receipt_of_a_fifo_message_expires_with_its_visibility() {
    let h = Harness::new();
    let q = h
        .queue_with("orders.fifo", fifo(false, DedupScope::Queue))
        .await;
    send_all(&h, &q, "g", &["1"]).await;
    let got = h.receive_one(&q, 5).await;
    h.advance_s(5);
    let receipt = got.receipt.as_deref().unwrap();
    let err = h
        .engine
        .delete(&q, receipt, ReceiptRule::Unexpired)
        .await
        .unwrap_err();
    assert!(matches!(err, EngineError::ReceiptExpired), "{err:?}");
    let again = h.receive_one(&q, 5).await;
    let err = h
        .engine
        .delete(&q, receipt, ReceiptRule::Unexpired)
        .await
        .unwrap_err();
    assert!(
        matches!(err, EngineError::ReceiptExpired),
        "a superseded receipt: {err:?}"
    );
    delete(&h, &q, &again).await;
}

#[tokio::test]
async fn a_dead_letter_move_keeps_the_group_and_unblocks_it() {
    let h = Harness::new();
    let dlq = h
        .queue_with("dead.fifo", fifo(false, DedupScope::Queue))
        .await;
    let config = QueueConfig {
        redrive_policy: Some(RedrivePolicy {
            dead_letter_queue: dlq.clone(),
            max_receive_count: 1,
        }),
        ..fifo(false, DedupScope::Queue)
    };
    let q = h.queue_with("orders.fifo", config).await;
    send_all(&h, &q, "g", &["1", "2"]).await;
    assert_eq!(body(&h.receive_one(&q, 5).await), "1");
    h.advance_s(5);
    let next = h.receive(&q, 10, Some(30)).await;
    assert_eq!(
        bodies(&next),
        ["2"],
        "1 moved on this receive and 2 followed at once"
    );
    let dead = h.receive(&dlq, 10, Some(30)).await;
    assert_eq!(bodies(&dead), ["1"]);
    assert_eq!(dead[0].payload.group.as_deref(), Some("g"));
    h.engine.check_invariants();
}

#[tokio::test]
async fn purge_and_expiry_keep_the_groups_consistent() {
    let h = Harness::new();
    let config = QueueConfig {
        retention_ms: Some(60_000),
        ..fifo(false, DedupScope::Queue)
    };
    let q = h.queue_with("orders.fifo", config).await;
    send_all(&h, &q, "g", &["1", "2"]).await;
    h.advance_s(30);
    send_all(&h, &q, "g", &["3"]).await;
    h.advance_s(31);
    assert_eq!(
        bodies(&h.receive(&q, 10, Some(30)).await),
        ["3"],
        "1 and 2 expired"
    );
    h.engine.check_invariants();
    send_all(&h, &q, "h", &["4", "5"]).await;
    h.engine.purge(&q, None).await.unwrap();
    h.engine.check_invariants();
    assert_eq!(h.stats(&q).visible + h.stats(&q).hidden, 0);
}

#[tokio::test]
async fn a_queue_cannot_become_or_stop_being_fifo() {
    let h = Harness::new();
    let standard = h.queue("plain").await;
    let fifo_queue = h
        .queue_with("orders.fifo", fifo(false, DedupScope::Queue))
        .await;
    let to_fifo = h.engine.update_queue_config(&standard, |config| {
        config.fifo = Some(FifoConfig::default());
        Ok(())
    });
    assert!(matches!(
        to_fifo.await,
        Err(EngineError::InvalidArgument(_))
    ));
    let to_standard = h.engine.update_queue_config(&fifo_queue, |config| {
        config.fifo = None;
        Ok(())
    });
    assert!(matches!(
        to_standard.await,
        Err(EngineError::InvalidArgument(_))
    ));
    let content_based = h.engine.update_queue_config(&fifo_queue, |config| {
        config.fifo = Some(FifoConfig {
            content_based_dedup: true,
            ..FifoConfig::default()
        });
        Ok(())
    });
    assert!(
        content_based.await.is_ok(),
        "its deduplication settings may change"
    );
}
