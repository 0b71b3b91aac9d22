//! Moving a held message to another queue in one step (KubeMQ's re-queue): it arrives fresh, keeps its
//! identity, body, own redrive rule and expiry, and a crash can neither duplicate nor lose it.

mod common;

use common::*;
use veil_core::*;

fn with_rule_and_ttl(body: &str, dead_letter_queue: Option<&QueueKey>) -> NewMessage {
    NewMessage {
        redrive: Some(MessageRedrivePolicy {
            max_receive_count: 3,
            dead_letter_queue: dead_letter_queue.cloned(),
        }),
        ttl: Some(Ttl::After(100_000)),
        ..NewMessage::new(body.to_owned())
    }
}

#[tokio::test]
async fn a_moved_message_arrives_fresh_with_its_id_body_rule_and_expiry() {
    let h = Harness::new();
    let source = h.queue("work").await;
    let target = h.queue("elsewhere").await;
    let dead = QueueKey::new(DEFAULT_NAMESPACE, "dead");
    let sent = h
        .engine
        .send(&source, vec![with_rule_and_ttl("payload", Some(&dead))])
        .await
        .unwrap()
        .remove(0);
    h.advance_s(5);
    let held = h.receive_one(&source, 30).await;
    h.engine
        .move_message(&source, held.receipt.as_deref().unwrap(), &target)
        .await
        .unwrap();
    let source_stats = h.stats(&source);
    assert_eq!(source_stats.visible + source_stats.hidden, 0);
    assert_eq!(
        (source_stats.counters.moves_out, source_stats.stored_bytes),
        (1, 0)
    );
    let target_stats = h.stats(&target);
    assert_eq!(
        (
            target_stats.visible,
            target_stats.counters.sends,
            target_stats.stored_bytes
        ),
        (1, 1, 7)
    );
    let moved = h.receive_one(&target, 30).await;
    assert_eq!(moved.payload.message_id, sent.message_id);
    assert_eq!(body(&moved), "payload");
    assert_eq!(
        moved.state.receive_count, 1,
        "the first delivery in its new queue"
    );
    assert_eq!(
        moved.state.expires_at, sent.expires_at,
        "the expiry is kept"
    );
    assert_eq!(moved.redrive.map(|r| r.dead_letter_queue), Some(Some(dead)));
    assert_eq!(
        moved.payload.dead_letter_source(),
        None,
        "a re-queue is no dead letter"
    );
    assert_eq!(
        moved.payload.moved_from,
        Some(MovedFrom {
            queue: source.clone(),
            reason: MoveReason::Requeue
        }),
        "but it records where it came from (KubeMQ's ReRoutedFromQueue)"
    );
    h.engine.check_invariants();
}

#[tokio::test]
async fn a_move_needs_the_current_receipt_and_an_existing_target() {
    let h = Harness::new();
    let source = h.queue("work").await;
    let target = h.queue("elsewhere").await;
    h.send(&source, "x").await;
    let first = h.receive_one(&source, 1).await;
    h.advance_s(2);
    let second = h.receive_one(&source, 30).await;
    let stale = h
        .engine
        .move_message(&source, first.receipt.as_deref().unwrap(), &target)
        .await;
    assert!(
        matches!(stale, Err(EngineError::MessageNotAvailable)),
        "{stale:?}"
    );
    let missing = QueueKey::new(DEFAULT_NAMESPACE, "missing");
    let nowhere = h
        .engine
        .move_message(&source, second.receipt.as_deref().unwrap(), &missing)
        .await;
    assert!(
        matches!(&nowhere, Err(EngineError::QueueNotFound(key)) if *key == missing),
        "{nowhere:?}"
    );
    assert_eq!(h.stats(&source).hidden, 1, "the message stays where it was");
    assert_eq!(h.stats(&target).visible, 0);
}

#[tokio::test]
async fn a_move_is_durable_and_keeps_the_rule_across_a_restart() {
    let mut h = Harness::new();
    let source = h.queue("work").await;
    let target = h.queue("elsewhere").await;
    h.engine
        .send(&source, vec![with_rule_and_ttl("payload", None)])
        .await
        .unwrap();
    let held = h.receive_one(&source, 30).await;
    h.engine
        .move_message(&source, held.receipt.as_deref().unwrap(), &target)
        .await
        .unwrap();
    h.restart();
    h.engine.check_invariants();
    assert_eq!(h.engine.message_count(&source).unwrap(), 0);
    let moved = h.engine.peek(&target, 10).await.unwrap();
    assert_eq!(moved.len(), 1);
    assert_eq!(
        moved[0].redrive.as_ref().map(|r| r.max_receive_count),
        Some(3)
    );
}

#[tokio::test]
async fn a_re_queued_dead_letter_records_its_latest_move() {
    let h = Harness::new();
    let dlq = h.queue("dlq").await;
    let source = h.queue_dead_lettering_to("source", &dlq, 1).await;
    let elsewhere = h.queue("elsewhere").await;
    h.send(&source, "poison").await;
    h.receive_one(&source, 1).await;
    h.advance_s(2);
    assert!(
        h.receive(&source, 10, None).await.is_empty(),
        "moved to the DLQ"
    );
    let dead = h.receive_one(&dlq, 30).await;
    h.engine
        .move_message(&dlq, dead.receipt.as_deref().unwrap(), &elsewhere)
        .await
        .unwrap();
    let moved = h.receive_one(&elsewhere, 30).await;
    assert_eq!(
        moved.payload.moved_from,
        Some(MovedFrom {
            queue: dlq.clone(),
            reason: MoveReason::Requeue
        }),
        "the latest move is the one recorded"
    );
}
