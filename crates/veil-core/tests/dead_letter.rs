//! Dead-lettering (docs/semantics.md §3): a receive that would deliver a message whose receive count already equals the
//! queue's maximum moves it to the dead-letter queue instead, keeping its id, body, send time and count.

mod common;

use common::*;
use veil_core::*;

async fn with_dead_letter_queue(h: &Harness, max_receive_count: u32) -> (QueueKey, QueueKey) {
    let dlq = h.queue("dlq").await;
    let source = h
        .queue_dead_lettering_to("source", &dlq, max_receive_count)
        .await;
    (source, dlq)
}

#[tokio::test]
async fn a_message_moves_on_the_receive_after_max_receive_count() {
    let h = Harness::new();
    let (source, dlq) = with_dead_letter_queue(&h, 2).await;
    let sent = h.send(&source, "poison").await;
    h.advance_s(5);
    for _ in 0..2 {
        h.receive_one(&source, 1).await;
        h.advance_s(1);
    }
    assert_eq!(
        h.stats(&dlq).visible,
        0,
        "the move happens on a receive, not when visibility lapses"
    );
    assert!(
        h.receive(&source, 10, None).await.is_empty(),
        "the third receive moves instead of delivering"
    );
    let stats = h.stats(&source);
    assert_eq!((stats.visible, stats.counters.dead_letter_moves), (0, 1));
    let moved = h.receive_one(&dlq, 30).await;
    assert_eq!(moved.payload.message_id, sent.message_id);
    assert_eq!(body(&moved), "poison");
    assert_eq!(
        moved.state.sent_at, START_MS,
        "the original send time is kept"
    );
    assert_eq!(
        moved.state.receive_count, 3,
        "the receive count carries into the dead-letter queue"
    );
    assert_eq!(moved.payload.dead_letter_source(), Some(&source));
}

#[tokio::test]
async fn dead_letter_retention_counts_from_the_original_send() {
    let h = Harness::new();
    let dlq = h
        .queue_with(
            "dlq",
            QueueConfig {
                retention_ms: Some(100_000),
                ..QueueConfig::default()
            },
        )
        .await;
    let policy = RedrivePolicy {
        dead_letter_queue: dlq.clone(),
        max_receive_count: 1,
    };
    let source = h
        .queue_with(
            "source",
            QueueConfig {
                redrive_policy: Some(policy),
                ..QueueConfig::default()
            },
        )
        .await;
    h.send(&source, "a").await;
    h.receive_one(&source, 1).await;
    h.advance_s(90);
    assert!(h.receive(&source, 1, None).await.is_empty());
    assert_eq!(h.stats(&dlq).visible, 1);
    h.advance_s(10);
    assert!(
        h.receive(&dlq, 1, None).await.is_empty(),
        "expired 100 s after the original send"
    );
}

#[tokio::test]
async fn a_receive_past_moved_messages_still_delivers_healthy_ones() {
    let h = Harness::new();
    let (source, dlq) = with_dead_letter_queue(&h, 1).await;
    h.send(&source, "bad").await;
    h.receive_one(&source, 1).await;
    h.advance_s(1);
    h.send(&source, "good").await;
    let got = h.receive(&source, 10, Some(30)).await;
    assert_eq!(got.iter().map(body).collect::<Vec<_>>(), ["good"]);
    assert_eq!(h.stats(&dlq).visible, 1);
}

#[tokio::test]
async fn dead_letter_sources_lists_the_queues_that_point_here() {
    let h = Harness::new();
    let (source, dlq) = with_dead_letter_queue(&h, 3).await;
    assert_eq!(
        h.engine.dead_letter_sources(&dlq).unwrap(),
        vec![source.clone()]
    );
    assert!(h.engine.dead_letter_sources(&source).unwrap().is_empty());
}

#[tokio::test]
async fn dead_letter_state_survives_a_restart() {
    let mut h = Harness::new();
    let (source, dlq) = with_dead_letter_queue(&h, 1).await;
    h.send(&source, "a").await;
    h.receive_one(&source, 1).await;
    h.advance_s(1);
    assert!(
        h.receive(&source, 1, None).await.is_empty(),
        "the second receive moves the message"
    );
    h.restart();
    assert_eq!(h.stats(&source).counters.dead_letter_moves, 1);
    let moved = h.receive_one(&dlq, 30).await;
    assert_eq!(moved.payload.dead_letter_source(), Some(&source));
}

#[tokio::test]
async fn without_its_dead_letter_queue_a_message_keeps_being_delivered() {
    let h = Harness::new();
    let (source, dlq) = with_dead_letter_queue(&h, 1).await;
    h.engine.delete_queue(&dlq).await.unwrap();
    h.send(&source, "a").await;
    h.receive_one(&source, 1).await;
    h.advance_s(1);
    assert_eq!(h.receive_one(&source, 1).await.state.receive_count, 2);
}
