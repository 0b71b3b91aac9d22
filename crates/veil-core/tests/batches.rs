//! Batch operations (docs/semantics.md §2): a receive, delete, visibility change or move of several messages is applied
//! under one engine lock and reaches the store as one submission, while each entry keeps its own result.
//! Submissions are counted by `CountingStore`; the lock is held exactly while the one submission is made
//! (`Engine::on_queue`), so one submission per batch is one critical section per batch.

mod common;

use std::sync::Arc;

use common::*;
use veil_core::*;

fn counting() -> Harness<CountingStore> {
    Harness::over(Arc::new(CountingStore::default()))
}

/// Sends `count` messages and receives them all, returning their receipts in send order.
async fn held(h: &Harness<CountingStore>, key: &QueueKey, count: usize) -> Vec<String> {
    let messages = (0..count)
        .map(|n| NewMessage::new(format!("m{n}")))
        .collect();
    h.engine.send(key, messages).await.unwrap();
    let received = h.receive(key, count, Some(30)).await;
    assert_eq!(received.len(), count, "every message received");
    received
        .into_iter()
        .map(|message| message.receipt.unwrap())
        .collect()
}

#[tokio::test]
async fn a_receive_of_many_messages_commits_once() {
    let h = counting();
    let q = h.queue("q").await;
    let messages = (0..10).map(|n| NewMessage::new(format!("m{n}"))).collect();
    h.engine.send(&q, messages).await.unwrap();
    let before = h.store.submissions();
    let received = h.receive(&q, 10, Some(30)).await;
    assert_eq!(received.len(), 10);
    assert_eq!(
        h.store.submissions() - before,
        1,
        "ten deliveries, one commit"
    );
}

#[tokio::test]
async fn a_delete_batch_commits_once() {
    let h = counting();
    let q = h.queue("q").await;
    let receipts = held(&h, &q, 5).await;
    let receipts: Vec<&str> = receipts.iter().map(String::as_str).collect();
    let before = h.store.submissions();
    let outcomes = h
        .engine
        .delete_batch(&q, &receipts, ReceiptRule::Current)
        .await
        .unwrap();
    assert!(outcomes
        .iter()
        .all(|o| matches!(o, Ok(DeleteOutcome::Deleted))));
    assert_eq!(
        h.store.submissions() - before,
        1,
        "five deletes, one commit"
    );
    assert_eq!(h.engine.message_count(&q).unwrap(), 0);
}

#[tokio::test]
async fn a_change_visibility_batch_commits_once() {
    let h = counting();
    let q = h.queue("q").await;
    let receipts = held(&h, &q, 5).await;
    let entries: Vec<(&str, VisibilityChange)> = receipts
        .iter()
        .map(|receipt| (receipt.as_str(), sqs_change(0)))
        .collect();
    let before = h.store.submissions();
    let results = h
        .engine
        .change_visibility_batch(&q, &entries)
        .await
        .unwrap();
    assert!(results.iter().all(Result::is_ok));
    assert_eq!(
        h.store.submissions() - before,
        1,
        "five changes, one commit"
    );
    assert_eq!(h.stats(&q).visible, 5, "every change applied");
}

#[tokio::test]
async fn a_change_visibility_batch_reports_each_entry_on_its_own() {
    let h = counting();
    let q = h.queue("q").await;
    let receipts = held(&h, &q, 2).await;
    let too_long = VisibilityChange {
        visibility_ms: 13 * limits::HOUR_MS,
        ..sqs_change(0)
    };
    let entries = [
        (receipts[0].as_str(), sqs_change(0)),
        ("forged", sqs_change(0)),
        (receipts[1].as_str(), too_long),
    ];
    let before = h.store.submissions();
    let results = h
        .engine
        .change_visibility_batch(&q, &entries)
        .await
        .unwrap();
    assert!(results[0].is_ok());
    assert!(matches!(results[1], Err(EngineError::ReceiptInvalid)));
    assert!(matches!(
        results[2],
        Err(EngineError::VisibilityPastLimit { .. })
    ));
    assert_eq!(h.store.submissions() - before, 1, "the good entry's commit");
    assert_eq!(h.stats(&q).visible, 1, "only the good entry changed");
}

#[tokio::test]
async fn a_move_batch_commits_once() {
    let h = counting();
    let q = h.queue("q").await;
    let target = h.queue("target").await;
    let receipts = held(&h, &q, 5).await;
    let receipts: Vec<&str> = receipts.iter().map(String::as_str).collect();
    let before = h.store.submissions();
    let results = h
        .engine
        .move_messages(&q, &receipts, &target)
        .await
        .unwrap();
    assert!(results.iter().all(Result::is_ok));
    assert_eq!(h.store.submissions() - before, 1, "five moves, one commit");
    assert_eq!(h.engine.message_count(&q).unwrap(), 0);
    assert_eq!(h.stats(&target).visible, 5, "arrived visible");
    assert_eq!(h.stats(&q).counters.moves_out, 5);
    assert_eq!(h.stats(&target).counters.sends, 5);
    h.engine.check_invariants();
}

#[tokio::test]
async fn a_move_batch_reports_each_receipt_on_its_own_and_moves_the_rest() {
    let h = counting();
    let q = h.queue("q").await;
    let target = h.queue("target").await;
    let receipts = held(&h, &q, 2).await;
    let stale = receipts[1].clone();
    // Released and received again, the second message's first receipt is stale.
    h.engine
        .change_visibility(&q, &stale, sqs_change(0))
        .await
        .unwrap();
    h.receive_one(&q, 30).await;
    let results = h
        .engine
        .move_messages(&q, &[&receipts[0], "forged", &stale], &target)
        .await
        .unwrap();
    assert!(results[0].is_ok());
    assert!(matches!(results[1], Err(EngineError::ReceiptInvalid)));
    assert!(matches!(results[2], Err(EngineError::MessageNotAvailable)));
    assert_eq!(
        h.engine.message_count(&q).unwrap(),
        1,
        "the stale one stays"
    );
    assert_eq!(h.engine.message_count(&target).unwrap(), 1);
    h.engine.check_invariants();
}

#[tokio::test]
async fn a_move_batch_to_a_missing_queue_fails_whole_and_moves_nothing() {
    let h = counting();
    let q = h.queue("q").await;
    let receipts = held(&h, &q, 2).await;
    let receipts: Vec<&str> = receipts.iter().map(String::as_str).collect();
    let missing = QueueKey::new(DEFAULT_NAMESPACE, "missing");
    let outcome = h.engine.move_messages(&q, &receipts, &missing).await;
    assert!(matches!(outcome, Err(EngineError::QueueNotFound(_))));
    assert_eq!(h.engine.message_count(&q).unwrap(), 2);
}

#[tokio::test]
async fn a_send_each_commits_once_and_refuses_only_the_messages_at_fault() {
    let h = counting();
    let config = QueueConfig {
        message_size_bytes_max: 8,
        ..QueueConfig::default()
    };
    let q = h.queue_with("q", config).await;
    let mut never_deliverable = NewMessage::new("rule");
    never_deliverable.redrive = Some(MessageRedrivePolicy {
        max_receive_count: 0,
        dead_letter_queue: None,
    });
    let messages = vec![
        NewMessage::new("first"),
        NewMessage::new("far too large"),
        never_deliverable,
        NewMessage::new("last"),
    ];
    let before = h.store.submissions();
    let results = h.engine.send_each(&q, messages).await.unwrap();
    assert_eq!(h.store.submissions() - before, 1, "two stored, one commit");
    assert!(results[0].is_ok());
    assert!(matches!(
        results[1],
        Err(EngineError::MessageTooLarge { max_bytes: 8, .. })
    ));
    assert!(matches!(results[2], Err(EngineError::InvalidArgument(_))));
    assert!(results[3].is_ok());
    let bodies: Vec<String> = h
        .receive(&q, 10, Some(30))
        .await
        .iter()
        .map(|m| body(m).to_owned())
        .collect();
    assert_eq!(bodies, ["first", "last"], "the others stored, in order");
}

#[tokio::test]
async fn a_send_each_to_a_fifo_queue_refuses_a_message_without_a_group_alone() {
    let h = counting();
    let config = QueueConfig {
        fifo: Some(FifoConfig {
            content_based_dedup: true,
            ..FifoConfig::default()
        }),
        ..QueueConfig::default()
    };
    let q = h.queue_with("q.fifo", config).await;
    let mut grouped = NewMessage::new("grouped");
    grouped.group = Some("g".into());
    let results = h
        .engine
        .send_each(&q, vec![NewMessage::new("loose"), grouped])
        .await
        .unwrap();
    assert!(matches!(results[0], Err(EngineError::GroupRequired)));
    assert!(results[1].is_ok());
    assert_eq!(h.engine.message_count(&q).unwrap(), 1);
}
