//! A queue's totals (docs/semantics.md §9, "Totals"): each way a message leaves a queue has its own total, an
//! arrival by a move is the target's send, and a delivery that ends with the message visible again is a
//! redelivery however it ended. `QueueIndex::check_invariants` asserts the sum after each scenario:
//! sent = stored + deleted + purged + expired + dead-lettered + moved out.

mod common;

use common::*;
use veil_core::*;

fn totals_since(before: Counters, after: Counters) -> [(&'static str, u64); 9] {
    [
        ("sends", after.sends - before.sends),
        ("deliveries", after.deliveries - before.deliveries),
        ("redeliveries", after.redeliveries - before.redeliveries),
        ("deletes", after.deletes - before.deletes),
        ("expiries", after.expiries - before.expiries),
        (
            "dead_letter_moves",
            after.dead_letter_moves - before.dead_letter_moves,
        ),
        (
            "dead_letter_drops",
            after.dead_letter_drops - before.dead_letter_drops,
        ),
        ("purges", after.purges - before.purges),
        ("moves_out", after.moves_out - before.moves_out),
    ]
}

/// The totals that moved, by how much.
fn moved(before: Counters, after: Counters) -> Vec<(&'static str, u64)> {
    totals_since(before, after)
        .into_iter()
        .filter(|&(_, n)| n != 0)
        .collect()
}

#[tokio::test]
async fn a_purge_counts_purged_and_no_delete() {
    let h = Harness::new();
    let q = h.queue("orders").await;
    for body in ["a", "b", "c"] {
        h.send(&q, body).await;
    }
    h.receive_one(&q, 30).await; // one in flight: purged too
    let before = h.stats(&q).counters;
    assert_eq!(h.engine.purge(&q, None).await.unwrap(), 3);
    assert_eq!(moved(before, h.stats(&q).counters), [("purges", 3)]);
    h.engine.check_invariants();
}

#[tokio::test]
async fn a_purge_counts_a_message_past_its_time_to_live_as_expired() {
    let h = Harness::new();
    let q = h.queue("orders").await;
    let mut short = NewMessage::new("short".to_owned());
    short.ttl = Some(Ttl::After(1_000));
    h.engine.send(&q, vec![short]).await.unwrap();
    h.send(&q, "long").await;
    let before = h.stats(&q).counters;
    h.advance_s(2);
    assert_eq!(h.engine.purge(&q, None).await.unwrap(), 1);
    assert_eq!(
        moved(before, h.stats(&q).counters),
        [("expiries", 1), ("purges", 1)]
    );
    h.engine.check_invariants();
}

#[tokio::test]
async fn a_receive_with_visibility_0_is_a_redelivery_at_once() {
    let h = Harness::new();
    let q = h.queue("orders").await;
    h.send(&q, "peeked by a receive").await;
    let before = h.stats(&q).counters;
    h.receive_one(&q, 0).await;
    assert_eq!(
        moved(before, h.stats(&q).counters),
        [("deliveries", 1), ("redeliveries", 1)]
    );
    assert_eq!(h.stats(&q).visible, 1);
}

#[tokio::test]
async fn a_message_given_back_while_in_flight_is_a_redelivery() {
    let h = Harness::new();
    let q = h.queue("orders").await;
    h.send(&q, "released").await;
    let held = h.receive_one(&q, 30).await;
    let before = h.stats(&q).counters;
    h.engine
        .change_visibility(&q, held.receipt.as_deref().unwrap(), sqs_change(0))
        .await
        .unwrap();
    assert_eq!(moved(before, h.stats(&q).counters), [("redeliveries", 1)]);
    // Extended, not given back: nothing counted.
    let held = h.receive_one(&q, 30).await;
    let before = h.stats(&q).counters;
    h.engine
        .change_visibility(&q, held.receipt.as_deref().unwrap(), sqs_change(60))
        .await
        .unwrap();
    assert_eq!(moved(before, h.stats(&q).counters), []);
}

#[tokio::test]
async fn a_redelivery_by_release_survives_a_restart() {
    let mut h = Harness::new();
    let q = h.queue("orders").await;
    h.send(&q, "released").await;
    let held = h.receive_one(&q, 30).await;
    h.engine
        .change_visibility(&q, held.receipt.as_deref().unwrap(), sqs_change(0))
        .await
        .unwrap();
    let counted = h.stats(&q).counters;
    assert_eq!(counted.redeliveries, 1);
    h.restart();
    assert_eq!(h.stats(&q).counters, counted, "written with the change");
}

#[tokio::test]
async fn a_dead_letter_is_the_dead_letter_queues_send() {
    let h = Harness::new();
    let dlq = h.queue("dlq").await;
    let source = h.queue_dead_lettering_to("source", &dlq, 1).await;
    h.send(&source, "poison").await;
    h.receive_one(&source, 1).await;
    h.advance_s(2);
    let (source_before, dlq_before) = (h.stats(&source).counters, h.stats(&dlq).counters);
    assert!(h.receive(&source, 10, Some(30)).await.is_empty());
    assert_eq!(
        moved(source_before, h.stats(&source).counters),
        [("dead_letter_moves", 1)]
    );
    assert_eq!(moved(dlq_before, h.stats(&dlq).counters), [("sends", 1)]);
    h.engine.check_invariants();
}

#[tokio::test]
async fn a_requeue_is_a_move_out_and_the_targets_send_not_a_delete() {
    let h = Harness::new();
    let (q, other) = (h.queue("orders").await, h.queue("other").await);
    h.send(&q, "elsewhere").await;
    let held = h.receive_one(&q, 30).await;
    let (q_before, other_before) = (h.stats(&q).counters, h.stats(&other).counters);
    h.engine
        .move_message(&q, held.receipt.as_deref().unwrap(), &other)
        .await
        .unwrap();
    assert_eq!(moved(q_before, h.stats(&q).counters), [("moves_out", 1)]);
    assert_eq!(
        moved(other_before, h.stats(&other).counters),
        [("sends", 1)]
    );
    h.engine.check_invariants();
}
