//! The operator's engine calls (docs/semantics.md §8 "Operating Veil"): the overview behind metrics and the
//! console, browse, and an operator's delete by sequence number. Inspecting never changes state.

mod common;

use common::*;
use veil_core::*;

#[tokio::test]
async fn overview_counts_visible_inflight_and_delayed_exactly() {
    let h = Harness::new();
    let q = h.queue("jobs").await;
    h.send(&q, "a").await;
    h.send(&q, "b").await;
    let mut delayed = NewMessage::new("later");
    delayed.delay_ms = Some(60_000);
    h.engine.send(&q, vec![delayed]).await.unwrap();
    h.receive_one(&q, 30).await;

    let overview = h.engine.overview();
    assert_eq!(overview.len(), 1);
    let stats = overview[0].stats;
    assert_eq!((stats.visible, stats.hidden, stats.delayed), (1, 1, 1));
    assert_eq!(stats.counters.sends, 3);
    assert_eq!(stats.counters.deliveries, 1);
}

#[tokio::test]
async fn overview_brings_lapsed_visibility_up_to_now() {
    let h = Harness::new();
    let q = h.queue("jobs").await;
    h.send(&q, "a").await;
    h.receive_one(&q, 5).await;
    h.advance_s(6);

    let stats = h.engine.overview()[0].stats;
    assert_eq!(
        (stats.visible, stats.hidden),
        (1, 0),
        "the lapse is counted at once"
    );
    assert_eq!(stats.counters.redeliveries, 1);
}

#[tokio::test]
async fn overview_lists_every_namespace_in_key_order_with_its_creator() {
    let h = Harness::new();
    let mut by_sqs = QueueConfig::default();
    by_sqs
        .protocol_settings
        .insert(CREATED_BY_SETTING.into(), "sqs".into());
    h.engine
        .create_queue(QueueKey::new("zeta", "b"), QueueConfig::default())
        .await
        .unwrap();
    h.engine
        .create_queue(QueueKey::new("alpha", "a"), by_sqs)
        .await
        .unwrap();

    let overview = h.engine.overview();
    let keys: Vec<_> = overview.iter().map(|q| q.key.clone()).collect();
    assert_eq!(
        keys,
        [QueueKey::new("alpha", "a"), QueueKey::new("zeta", "b")]
    );
    assert_eq!(overview[0].created_by.as_deref(), Some("sqs"));
    assert_eq!(overview[1].created_by, None);
}

#[tokio::test]
async fn deliveries_are_counted_by_the_receive_count_they_give() {
    let h = Harness::new();
    let q = h.queue("jobs").await;
    h.send(&q, "a").await;
    for _ in 0..4 {
        h.receive_one(&q, 1).await;
        h.advance_s(2);
    }
    let queue = &h.engine.overview()[0];
    // Buckets: <=1, <=2, <=5, <=10, more: the 1st, the 2nd, then the 3rd and 4th receive.
    assert_eq!(queue.deliveries_by_receive_count, [1, 1, 2, 0, 0]);
    assert_eq!(queue.deliveries_receive_count_sum, 1 + 2 + 3 + 4);
}

#[tokio::test]
async fn browse_shows_every_state_and_changes_nothing() {
    let h = Harness::new();
    let q = h.queue("jobs").await;
    for body in ["a", "b", "c"] {
        h.send(&q, body).await;
    }
    let received = h.receive_one(&q, 30).await;
    let before = h.stats(&q);

    let all = h.engine.browse(&q, 0, 10).await.unwrap();
    assert_eq!(all.iter().map(body).collect::<Vec<_>>(), ["a", "b", "c"]);
    assert!(all.iter().all(|m| m.receipt.is_none()));
    assert_eq!(
        all[0].state.receive_count, 1,
        "the received one shows its count"
    );
    assert_eq!(h.stats(&q), before, "browsing counted nothing");
    // Its receipt is still current: browsing issued no new delivery.
    h.engine
        .delete(
            &q,
            received.receipt.as_deref().unwrap(),
            ReceiptRule::Current,
        )
        .await
        .unwrap();
}

#[tokio::test]
async fn browse_pages_by_sequence_number() {
    let h = Harness::new();
    let q = h.queue("jobs").await;
    for i in 0..70 {
        h.send(&q, &format!("m{i}")).await;
    }
    let first = h.engine.browse(&q, 0, 40).await.unwrap();
    assert_eq!(first.len(), 40);
    let next = h
        .engine
        .browse(&q, first.last().unwrap().seq + 1, 40)
        .await
        .unwrap();
    assert_eq!(next.len(), 30);
    assert_eq!(body(&next[0]), "m40");
}

#[tokio::test]
async fn remove_message_deletes_one_message_in_any_state_and_counts_it() {
    let h = Harness::new();
    let q = h.queue("jobs").await;
    let kept = h.send(&q, "kept").await;
    let hidden = h.send(&q, "hidden").await;
    h.engine.send(&q, vec![NewMessage::new("x")]).await.unwrap();
    let received = h.receive(&q, 2, Some(30)).await;
    assert_eq!(received.len(), 2);

    assert!(h.engine.remove_message(&q, hidden.seq).await.unwrap());
    assert!(
        !h.engine.remove_message(&q, hidden.seq).await.unwrap(),
        "already gone"
    );
    let left: Vec<_> = h.engine.browse(&q, 0, 10).await.unwrap();
    assert_eq!(
        left.iter().map(|m| m.seq).collect::<Vec<_>>(),
        [kept.seq, kept.seq + 2]
    );
    assert_eq!(h.stats(&q).counters.deletes, 1);
    assert_eq!(h.stats(&q).hidden, 1);
}

#[tokio::test]
async fn removed_message_stays_removed_after_a_restart() {
    let mut h = Harness::new();
    let q = h.queue("jobs").await;
    let gone = h.send(&q, "gone").await;
    h.send(&q, "kept").await;
    h.engine.remove_message(&q, gone.seq).await.unwrap();
    h.restart();
    let left = h.engine.browse(&q, 0, 10).await.unwrap();
    assert_eq!(left.iter().map(body).collect::<Vec<_>>(), ["kept"]);
}
