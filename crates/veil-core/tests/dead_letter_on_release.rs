//! Deliveries made with `DeadLetterTiming::OnRelease` (KubeMQ's rule, docs/semantics.md §3 "Dead letters"): a
//! message whose receives are used up moves when that delivery is released — nacked (visibility 0) or its
//! visibility lapsing — not on the next receive from its source, so a consumer of the dead-letter queue sees it
//! at once. It applies to the message's own rule and to the queue's. The SQS rule (`OnReceive`) is checked
//! beside it: there the move waits for the receive. Manual clock, no sleeping.

mod common;

use common::*;
use veil_core::*;

fn with_rule(body: &str, max_receive_count: u32, dead_letter_queue: &QueueKey) -> NewMessage {
    NewMessage {
        redrive: Some(MessageRedrivePolicy {
            max_receive_count,
            dead_letter_queue: Some(dead_letter_queue.clone()),
        }),
        ..NewMessage::new(body.to_owned())
    }
}

/// `orders` holding one message `body` whose own rule moves it to `orders-dead` after `max_receive_count`
/// receives; returns (orders, orders-dead).
async fn orders_with_rule(h: &Harness, body: &str, max_receive_count: u32) -> (QueueKey, QueueKey) {
    let source = h.queue("orders").await;
    let dead = h.queue("orders-dead").await;
    h.engine
        .send(&source, vec![with_rule(body, max_receive_count, &dead)])
        .await
        .unwrap();
    (source, dead)
}

/// A receive of one message with KubeMQ's dead-letter timing.
async fn receive_on_release(h: &Harness, key: &QueueKey, visibility_s: u64) -> Message {
    let options = ReceiveOptions {
        max_messages: 1,
        visibility_ms: Some(visibility_s * 1_000),
        wait_ms: Some(0),
        dead_letter: DeadLetterTiming::OnRelease,
        attempt_id: None,
        consumer: None,
    };
    let mut got = h.engine.receive(key, options).await.unwrap();
    assert_eq!(got.len(), 1, "expected one message");
    got.remove(0)
}

fn nack() -> VisibilityChange {
    VisibilityChange {
        receipts: veil_core::ReceiptRule::Current,
        visibility_ms: 0,
        since_receive_ms_max: None,
        not_past_expiry: false,
    }
}

/// Visible messages of `key`, read without touching any other queue (so it cannot trigger the move itself).
fn visible(h: &Harness, key: &QueueKey) -> u64 {
    h.stats(key).visible
}

#[tokio::test]
async fn a_nack_that_uses_up_the_receives_moves_the_message_at_once() {
    let h = Harness::new();
    let (source, dead) = orders_with_rule(&h, "poison", 2).await;

    let first = receive_on_release(&h, &source, 30).await;
    h.engine
        .change_visibility(&source, first.receipt.as_deref().unwrap(), nack())
        .await
        .unwrap();
    assert_eq!(visible(&h, &dead), 0, "one receive left: the nack keeps it");

    let second = receive_on_release(&h, &source, 30).await;
    h.engine
        .change_visibility(&source, second.receipt.as_deref().unwrap(), nack())
        .await
        .unwrap();
    assert_eq!(
        visible(&h, &dead),
        1,
        "the second nack moves it, no receive needed"
    );
    let moved = h.receive_one(&dead, 30).await;
    assert_eq!(body(&moved), "poison");
    assert_eq!(moved.payload.dead_letter_source(), Some(&source));
    let source_stats = h.stats(&source);
    assert_eq!(source_stats.visible + source_stats.hidden, 0);
    assert_eq!(source_stats.counters.dead_letter_moves, 1);
    h.engine.check_invariants();
}

#[tokio::test]
async fn a_lapse_that_uses_up_the_receives_moves_the_message_on_the_sweep() {
    let h = Harness::new();
    let (source, dead) = orders_with_rule(&h, "slow", 1).await;
    receive_on_release(&h, &source, 10).await;
    h.advance_s(9);
    h.engine.sweep();
    assert_eq!(visible(&h, &dead), 0, "still hidden: nothing to move yet");
    h.advance_s(1);
    assert_eq!(
        visible(&h, &dead),
        0,
        "nobody touched the source yet (the server sweeps every second)"
    );
    h.engine.sweep();
    assert_eq!(
        visible(&h, &dead),
        1,
        "the sweep saw the lapse and moved it"
    );
    assert_eq!(h.stats(&source).counters.redeliveries, 1);
    h.engine.check_invariants();
}

#[tokio::test]
async fn any_operation_on_the_source_moves_a_lapsed_message() {
    let h = Harness::new();
    let (source, dead) = orders_with_rule(&h, "slow", 1).await;
    receive_on_release(&h, &source, 10).await;
    h.advance_s(10);
    h.send(&source, "another").await;
    assert_eq!(visible(&h, &dead), 1);
    assert_eq!(visible(&h, &source), 1, "only the new message is left");
}

#[tokio::test]
async fn a_queue_rule_moves_on_release_too() {
    let h = Harness::new();
    let dead = h.queue("dead").await;
    let source = h
        .queue_with(
            "source",
            QueueConfig {
                redrive_policy: Some(RedrivePolicy {
                    dead_letter_queue: dead.clone(),
                    max_receive_count: 1,
                }),
                ..QueueConfig::default()
            },
        )
        .await;
    h.send(&source, "a").await;
    let got = receive_on_release(&h, &source, 30).await;
    h.engine
        .change_visibility(&source, got.receipt.as_deref().unwrap(), nack())
        .await
        .unwrap();
    assert_eq!(visible(&h, &dead), 1);
    let moved = h.receive_one(&dead, 30).await;
    assert_eq!(
        moved.state.receive_count, 2,
        "a queue-policy move keeps the count, as on receive"
    );
}

#[tokio::test]
async fn on_receive_timing_waits_for_the_next_receive() {
    let h = Harness::new();
    let (source, dead) = orders_with_rule(&h, "sqs-like", 1).await;
    let got = h.receive_one(&source, 30).await;
    h.engine
        .change_visibility(&source, got.receipt.as_deref().unwrap(), nack())
        .await
        .unwrap();
    h.engine.sweep();
    assert_eq!(
        visible(&h, &dead),
        0,
        "OnReceive: the nack does not move it"
    );
    assert_eq!(visible(&h, &source), 1);
    assert!(
        h.receive(&source, 10, None).await.is_empty(),
        "the receive moves it"
    );
    assert_eq!(visible(&h, &dead), 1);
}

#[tokio::test]
async fn a_deleted_message_is_not_moved_by_a_later_lapse() {
    let h = Harness::new();
    let (source, dead) = orders_with_rule(&h, "done", 1).await;
    let got = receive_on_release(&h, &source, 10).await;
    h.engine
        .delete(
            &source,
            got.receipt.as_deref().unwrap(),
            ReceiptRule::Current,
        )
        .await
        .unwrap();
    h.advance_s(10);
    h.engine.sweep();
    assert_eq!(visible(&h, &dead), 0);
    assert_eq!(h.stats(&source).counters.dead_letter_moves, 0);
}

#[tokio::test]
async fn a_release_move_survives_a_restart() {
    let mut h = Harness::new();
    let source = h.queue("orders").await;
    let dead = h.queue("orders-dead").await;
    let sent = h
        .engine
        .send(&source, vec![with_rule("kept", 1, &dead)])
        .await
        .unwrap()
        .remove(0);
    let got = receive_on_release(&h, &source, 30).await;
    h.engine
        .change_visibility(&source, got.receipt.as_deref().unwrap(), nack())
        .await
        .unwrap();
    h.restart();
    let moved = h.receive_one(&dead, 30).await;
    assert_eq!(moved.payload.message_id, sent.message_id);
    assert_eq!(h.stats(&source).visible, 0);
    h.engine.check_invariants();
}

#[tokio::test]
async fn a_delivery_made_before_a_restart_still_moves_when_it_lapses_after() {
    let mut h = Harness::new();
    let (source, dead) = orders_with_rule(&h, "in flight", 1).await;
    receive_on_release(&h, &source, 10).await;
    h.restart();
    h.advance_s(10);
    h.engine.sweep();
    assert_eq!(
        visible(&h, &dead),
        1,
        "the delivery's timing is stored with the message state"
    );
}
