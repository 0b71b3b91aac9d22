//! Per-message delivery history (docs/semantics.md §9): each test is named after the rule it checks. Manual clock, no
//! sleeping; restarts reopen an engine over the same in-memory store.

mod common;

use std::sync::Arc;

use common::*;
use veil_core::*;

fn consumer(identity: &str) -> Consumer {
    Consumer::new(
        Protocol::Sqs,
        Some("10.0.0.7:4711".parse().expect("an address")),
        Some(identity.to_owned()),
    )
}

/// A receive of one message by `identity` with `visibility_s`.
async fn receive_as<S: Store>(
    h: &Harness<S>,
    key: &QueueKey,
    identity: &str,
    visibility_s: u64,
) -> Vec<Message> {
    let options = ReceiveOptions {
        visibility_ms: Some(visibility_s * 1_000),
        wait_ms: Some(0),
        consumer: Some(consumer(identity)),
        ..ReceiveOptions::new(1)
    };
    h.engine.receive(key, options).await.unwrap()
}

fn history_of<S: Store>(h: &Harness<S>, key: &QueueKey, id: &[u8; 16]) -> MessageHistory {
    h.engine
        .history(key, id)
        .unwrap()
        .expect("the message has a history")
}

fn ending(record: &DeliveryRecord) -> Option<&DeliveryEnding> {
    record.ended.as_ref().map(|end| &end.how)
}

#[tokio::test]
async fn a_receive_records_when_to_whom_and_for_how_long() {
    let h = Harness::new();
    let q = h.queue("orders").await;
    let sent = h.send(&q, "m").await;
    assert!(
        h.engine.history(&q, &sent.message_id).unwrap().is_none(),
        "a message never delivered has no history"
    );
    h.advance_s(5);
    let got = receive_as(&h, &q, "AKIDEXAMPLE", 30).await;
    assert_eq!(got.len(), 1);
    let history = history_of(&h, &q, &sent.message_id);
    assert_eq!(history.seq, sent.seq);
    assert!(!history.deleted);
    assert_eq!(history.deliveries.len(), 1);
    let delivery = &history.deliveries[0];
    assert_eq!(delivery.received_at, START_MS + 5_000);
    assert_eq!(delivery.receive_count, 1);
    assert_eq!(delivery.visibility_ms, 30_000);
    assert_eq!(delivery.consumer.as_deref(), Some(&consumer("AKIDEXAMPLE")));
    assert_eq!(delivery.ended, None, "in flight");
    assert_eq!(history.in_flight_until, Some(START_MS + 35_000));
}

#[tokio::test]
async fn a_visibility_change_is_recorded_and_a_change_to_zero_releases() {
    let h = Harness::new();
    let q = h.queue("orders").await;
    let sent = h.send(&q, "m").await;
    let got = receive_as(&h, &q, "a", 30).await;
    let receipt = got[0].receipt.clone().unwrap();
    h.advance_s(10);
    h.engine
        .change_visibility(&q, &receipt, sqs_change(120))
        .await
        .unwrap();
    let history = history_of(&h, &q, &sent.message_id);
    let delivery = &history.deliveries[0];
    assert_eq!(delivery.visibility_changes, 1);
    assert_eq!(
        delivery.last_visibility_change,
        Some(VisibilityChangeRecord {
            at: START_MS + 10_000,
            visibility_ms: 120_000
        })
    );
    assert_eq!(history.in_flight_until, Some(START_MS + 130_000));
    h.advance_s(1);
    h.engine
        .change_visibility(&q, &receipt, sqs_change(0))
        .await
        .unwrap();
    let history = history_of(&h, &q, &sent.message_id);
    let end = history.deliveries[0].ended.clone().expect("ended");
    assert_eq!(
        (end.at, end.how),
        (START_MS + 11_000, DeliveryEnding::Released)
    );
    assert_eq!(history.in_flight_until, None);
}

#[tokio::test]
async fn a_delivery_whose_deadline_passed_reads_as_lapsed_and_the_next_receive_records_it() {
    let h = Harness::new();
    let q = h.queue("orders").await;
    let sent = h.send(&q, "m").await;
    receive_as(&h, &q, "first", 30).await;
    h.advance_s(31);
    let history = history_of(&h, &q, &sent.message_id);
    let end = history.deliveries[0]
        .ended
        .clone()
        .expect("rendered as lapsed");
    assert_eq!(
        (end.at, end.how),
        (START_MS + 30_000, DeliveryEnding::Lapsed)
    );
    receive_as(&h, &q, "second", 30).await;
    let history = history_of(&h, &q, &sent.message_id);
    assert_eq!(history.deliveries.len(), 2);
    assert_eq!(
        history.deliveries[0].ended,
        Some(DeliveryEnd {
            at: START_MS + 30_000,
            how: DeliveryEnding::Lapsed
        }),
        "written when the message was received again"
    );
    assert_eq!(history.deliveries[1].receive_count, 2);
    assert_eq!(
        history.deliveries[1]
            .consumer
            .as_ref()
            .and_then(|c| c.identity.as_deref()),
        Some("second")
    );
    assert_eq!(history.deliveries[1].ended, None);
}

#[tokio::test]
async fn a_dead_lettered_message_keeps_its_history_in_the_dead_letter_queue() {
    let h = Harness::new();
    let dlq = h.queue("orders-dlq").await;
    let q = h
        .queue_with(
            "orders",
            QueueConfig {
                redrive_policy: Some(RedrivePolicy {
                    dead_letter_queue: dlq.clone(),
                    max_receive_count: 2,
                }),
                ..QueueConfig::default()
            },
        )
        .await;
    let sent = h.send(&q, "m").await;
    for _ in 0..2 {
        receive_as(&h, &q, "c", 10).await;
        h.advance_s(11);
    }
    assert!(
        receive_as(&h, &q, "c", 10).await.is_empty(),
        "the third receive moves it"
    );
    assert!(h.engine.history(&q, &sent.message_id).unwrap().is_none());
    let history = history_of(&h, &dlq, &sent.message_id);
    assert_eq!(history.queue, dlq);
    assert_eq!(history.deliveries.len(), 2);
    assert_eq!(
        ending(&history.deliveries[0]),
        Some(&DeliveryEnding::Lapsed)
    );
    assert_eq!(
        ending(&history.deliveries[1]),
        Some(&DeliveryEnding::DeadLettered {
            to: Box::new(dlq.clone())
        })
    );
    // Delivered in the dead-letter queue, it goes on counting there.
    receive_as(&h, &dlq, "inspector", 10).await;
    let history = history_of(&h, &dlq, &sent.message_id);
    assert_eq!(history.deliveries.len(), 3);
    assert_eq!(history.deliveries[2].receive_count, 3);
}

#[tokio::test]
async fn a_requeued_message_keeps_its_history_ended_as_moved() {
    let h = Harness::new();
    let source = h.queue("source").await;
    let target = h.queue("target").await;
    let sent = h.send(&source, "m").await;
    let held = receive_as(&h, &source, "c", 30).await.remove(0);
    h.engine
        .move_message(&source, held.receipt.as_deref().unwrap(), &target)
        .await
        .unwrap();
    let history = history_of(&h, &target, &sent.message_id);
    assert_eq!(
        ending(&history.deliveries[0]),
        Some(&DeliveryEnding::Moved {
            to: Box::new(target.clone())
        })
    );
    assert_eq!(history.in_flight_until, None);
}

#[tokio::test]
async fn a_deleted_message_answers_from_the_recent_deletes_until_a_restart() {
    let mut h = Harness::new();
    let q = h.queue("orders").await;
    let sent = h.send(&q, "m").await;
    let held = receive_as(&h, &q, "c", 30).await.remove(0);
    h.advance_s(2);
    h.engine
        .delete(&q, held.receipt.as_deref().unwrap(), ReceiptRule::Current)
        .await
        .unwrap();
    let history = history_of(&h, &q, &sent.message_id);
    assert!(history.deleted);
    assert_eq!(
        history.deliveries[0].ended,
        Some(DeliveryEnd {
            at: START_MS + 2_000,
            how: DeliveryEnding::Deleted
        })
    );
    assert_eq!(
        h.store.history_count(),
        0,
        "the store deleted it with the message"
    );
    h.restart();
    assert!(
        h.engine.history(&q, &sent.message_id).unwrap().is_none(),
        "the record of deleted messages is not durable"
    );
}

#[tokio::test]
async fn the_recent_deletes_are_bounded_per_queue() {
    let h = Harness::new();
    let q = h.queue("orders").await;
    let count = limits::DELETED_HISTORIES_KEPT + 1;
    let messages = (0..count)
        .map(|i| NewMessage::new(format!("m{i}")))
        .collect();
    let sent = h.engine.send(&q, messages).await.unwrap();
    let options = ReceiveOptions {
        wait_ms: Some(0),
        ..ReceiveOptions::new(limits::RECEIVE_MESSAGES_MAX)
    };
    let got = h.engine.receive(&q, options).await.unwrap();
    assert_eq!(got.len(), count);
    for message in &got {
        let receipt = message.receipt.as_deref().unwrap();
        h.engine
            .delete(&q, receipt, ReceiptRule::Current)
            .await
            .unwrap();
    }
    assert!(
        h.engine.history(&q, &sent[0].message_id).unwrap().is_none(),
        "the oldest delete is forgotten"
    );
    assert!(history_of(&h, &q, &sent[1].message_id).deleted);
}

#[tokio::test]
async fn a_queue_with_history_off_writes_no_history() {
    let h = Harness::over(Arc::new(CountingStore::default()));
    let q = h
        .queue_with(
            "quiet",
            QueueConfig {
                delivery_history: false,
                ..QueueConfig::default()
            },
        )
        .await;
    let sent = h.send(&q, "m").await;
    let held = receive_as(&h, &q, "c", 30).await.remove(0);
    h.engine
        .change_visibility(&q, held.receipt.as_deref().unwrap(), sqs_change(60))
        .await
        .unwrap();
    assert_eq!(h.store.history_writes(), 0);
    assert!(h.engine.history(&q, &sent.message_id).unwrap().is_none());

    // Switched on, the next delivery is recorded, with one write in the receive's own submission.
    h.engine
        .update_queue_config(&q, |config| {
            config.delivery_history = true;
            Ok(())
        })
        .await
        .unwrap();
    h.advance_s(61);
    let submissions = h.store.submissions();
    receive_as(&h, &q, "c", 30).await;
    assert_eq!(
        h.store.submissions(),
        submissions + 1,
        "no commit of its own"
    );
    assert_eq!(h.store.history_writes(), 1);
    assert_eq!(history_of(&h, &q, &sent.message_id).deliveries.len(), 1);
}

#[tokio::test]
async fn a_history_keeps_the_last_eight_deliveries() {
    let h = Harness::new();
    let q = h.queue("orders").await;
    let sent = h.send(&q, "m").await;
    let receives = limits::DELIVERY_HISTORY_ENTRIES_MAX as u32 + 2;
    for _ in 0..receives {
        receive_as(&h, &q, "c", 10).await;
        h.advance_s(11);
    }
    let history = history_of(&h, &q, &sent.message_id);
    assert_eq!(
        history.deliveries.len(),
        limits::DELIVERY_HISTORY_ENTRIES_MAX
    );
    let counts: Vec<u32> = history.deliveries.iter().map(|d| d.receive_count).collect();
    assert_eq!(counts, (3..=receives).collect::<Vec<_>>(), "the oldest go");
    assert!(history
        .deliveries
        .iter()
        .all(|d| d.ended.as_ref().map(|e| &e.how) == Some(&DeliveryEnding::Lapsed)));
}

#[tokio::test]
async fn histories_survive_a_restart_and_are_found_by_id() {
    let mut h = Harness::new();
    let q = h.queue("orders").await;
    // One delivered once (its stored history does not know its id yet), one twice (it does).
    let once = h.send(&q, "once").await;
    receive_as(&h, &q, "c", 30).await;
    let twice = h.send(&q, "twice").await;
    receive_as(&h, &q, "c", 10).await;
    h.advance_s(11);
    receive_as(&h, &q, "c", 10).await;
    let before_once = history_of(&h, &q, &once.message_id);
    let before_twice = history_of(&h, &q, &twice.message_id);
    h.restart();
    assert_eq!(history_of(&h, &q, &once.message_id), before_once);
    assert_eq!(history_of(&h, &q, &twice.message_id), before_twice);
    assert!(h.engine.history(&q, &[7; 16]).unwrap().is_none());
    h.engine.check_invariants();
}

#[tokio::test]
async fn purging_a_queue_drops_its_histories() {
    let h = Harness::new();
    let q = h.queue("orders").await;
    let sent = h.send(&q, "m").await;
    receive_as(&h, &q, "c", 30).await;
    h.engine.purge(&q, None).await.unwrap();
    assert!(h.engine.history(&q, &sent.message_id).unwrap().is_none());
    assert_eq!(h.store.history_count(), 0);
    h.engine.check_invariants();
}
