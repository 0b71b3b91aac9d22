//! Engine scenarios for the message lifecycle of docs/semantics.md §1–2, each named after the rule it checks, driven by a
//! manual clock: no test sleeps for a visibility timeout.

mod common;

use common::*;
use veil_core::*;

#[tokio::test]
async fn a_received_message_is_hidden_until_its_deadline() {
    let h = Harness::new();
    let q = h.queue("q").await;
    h.send(&q, "a").await;
    let got = h.receive_one(&q, 30).await;
    assert_eq!(body(&got), "a");
    h.advance_s(29);
    assert!(
        h.receive(&q, 10, None).await.is_empty(),
        "hidden for the whole timeout"
    );
    h.advance_s(1);
    let again = h.receive_one(&q, 30).await;
    assert_eq!(
        again.payload.message_id, got.payload.message_id,
        "redelivered after the deadline"
    );
    assert_eq!(again.state.receive_count, 2);
}

#[tokio::test]
async fn receive_uses_the_queue_default_visibility_when_none_is_given() {
    let h = Harness::new();
    let config = QueueConfig {
        visibility_timeout_ms: 5_000,
        ..QueueConfig::default()
    };
    let q = h.queue_with("q", config).await;
    h.send(&q, "a").await;
    assert_eq!(h.receive(&q, 1, None).await.len(), 1);
    h.advance_s(4);
    assert!(h.receive(&q, 1, None).await.is_empty());
    h.advance_s(1);
    assert_eq!(h.receive(&q, 1, None).await.len(), 1);
}

#[tokio::test]
async fn receive_returns_at_most_max_messages_in_time_next_visible_order() {
    let h = Harness::new();
    let q = h.queue("q").await;
    for i in 0..5 {
        h.send(&q, &format!("m{i}")).await;
        h.advance_s(1);
    }
    let got = h.receive(&q, 3, Some(30)).await;
    let bodies: Vec<_> = got.iter().map(body).collect();
    assert_eq!(bodies, ["m0", "m1", "m2"]);
}

#[tokio::test]
async fn every_receive_issues_a_new_receipt() {
    let h = Harness::new();
    let q = h.queue("q").await;
    h.send(&q, "a").await;
    let first = h.receive_one(&q, 1).await;
    h.advance_s(1);
    let second = h.receive_one(&q, 1).await;
    assert_ne!(first.receipt, second.receipt);
}

#[tokio::test]
async fn receive_count_and_first_receive_time_are_kept() {
    let h = Harness::new();
    let q = h.queue("q").await;
    h.send(&q, "a").await;
    h.advance_s(2);
    let first = h.receive_one(&q, 1).await;
    assert_eq!(first.state.receive_count, 1);
    assert_eq!(first.state.first_received_at, START_MS + 2_000);
    assert_eq!(first.state.sent_at, START_MS);
    h.advance_s(5);
    let second = h.receive_one(&q, 1).await;
    assert_eq!(second.state.receive_count, 2);
    assert_eq!(
        second.state.first_received_at,
        START_MS + 2_000,
        "first receive time is set once"
    );
}

#[tokio::test]
async fn standard_delete_accepts_any_receipt_veil_issued() {
    let h = Harness::new();
    let q = h.queue("q").await;
    h.send(&q, "a").await;
    let old = h.receive_one(&q, 1).await.receipt.unwrap();
    h.advance_s(1);
    let _new = h.receive_one(&q, 1).await;
    let outcome = h
        .engine
        .delete(&q, &old, ReceiptRule::AnyIssued)
        .await
        .unwrap();
    assert_eq!(outcome, DeleteOutcome::Deleted);
    assert_eq!(
        h.engine
            .delete(&q, &old, ReceiptRule::AnyIssued)
            .await
            .unwrap(),
        DeleteOutcome::AlreadyGone
    );
    h.advance_s(100);
    assert!(
        h.receive(&q, 10, None).await.is_empty(),
        "a deleted message is never delivered again"
    );
}

#[tokio::test]
async fn current_receipt_rule_rejects_a_stale_receipt() {
    let h = Harness::new();
    let q = h.queue("q").await;
    h.send(&q, "a").await;
    let old = h.receive_one(&q, 1).await.receipt.unwrap();
    h.advance_s(1);
    let new = h.receive_one(&q, 1).await.receipt.unwrap();
    let stale = h.engine.delete(&q, &old, ReceiptRule::Current).await;
    assert!(
        matches!(stale, Err(EngineError::MessageNotAvailable)),
        "{stale:?}"
    );
    assert_eq!(
        h.engine
            .delete(&q, &new, ReceiptRule::Current)
            .await
            .unwrap(),
        DeleteOutcome::Deleted
    );
}

#[tokio::test]
async fn a_receipt_stays_current_after_its_deadline_until_the_next_receive() {
    let h = Harness::new();
    let q = h.queue("q").await;
    h.send(&q, "a").await;
    let receipt = h.receive_one(&q, 1).await.receipt.unwrap();
    h.advance_s(10);
    assert_eq!(
        h.engine
            .delete(&q, &receipt, ReceiptRule::Current)
            .await
            .unwrap(),
        DeleteOutcome::Deleted
    );
}

#[tokio::test]
async fn a_receipt_veil_never_issued_is_invalid() {
    let h = Harness::new();
    let q = h.queue("q").await;
    h.send(&q, "a").await;
    for forged in [
        "",
        "abc",
        "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",
    ] {
        let result = h.engine.delete(&q, forged, ReceiptRule::AnyIssued).await;
        assert!(
            matches!(result, Err(EngineError::ReceiptInvalid)),
            "{forged:?}: {result:?}"
        );
    }
    let other = ReceiptKey::new([1; 32]);
    let foreign = other.encode(&receipt::Receipt {
        queue: 1,
        seq: 0,
        generation: 1,
        issued_at: START_MS,
    });
    assert!(matches!(
        h.engine.delete(&q, &foreign, ReceiptRule::AnyIssued).await,
        Err(EngineError::ReceiptInvalid)
    ));
}

#[tokio::test]
async fn a_receipt_of_another_queue_is_refused_as_such() {
    let h = Harness::new();
    let a = h.queue("a").await;
    let b = h.queue("b").await;
    h.send(&a, "x").await;
    let receipt = h.receive_one(&a, 30).await.receipt.unwrap();
    assert!(matches!(
        h.engine.delete(&b, &receipt, ReceiptRule::AnyIssued).await,
        Err(EngineError::ReceiptOfAnotherQueue)
    ));
    assert_eq!(
        h.stats(&a).hidden,
        1,
        "the message in its own queue is untouched"
    );
}

#[tokio::test]
async fn a_receipt_does_not_survive_its_queue_being_recreated() {
    let h = Harness::new();
    let q = h.queue("q").await;
    h.send(&q, "a").await;
    let receipt = h.receive_one(&q, 30).await.receipt.unwrap();
    h.engine.delete_queue(&q).await.unwrap();
    let q = h.queue("q").await;
    h.send(&q, "b").await;
    assert!(matches!(
        h.engine.delete(&q, &receipt, ReceiptRule::AnyIssued).await,
        Err(EngineError::ReceiptOfAnotherQueue)
    ));
    assert_eq!(h.stats(&q).visible, 1);
}

#[tokio::test]
async fn change_visibility_counts_from_the_call() {
    let h = Harness::new();
    let q = h.queue("q").await;
    h.send(&q, "a").await;
    let receipt = h.receive_one(&q, 60).await.receipt.unwrap();
    h.advance_s(15);
    let visible_at = h
        .engine
        .change_visibility(&q, &receipt, sqs_change(10))
        .await
        .unwrap();
    assert_eq!(visible_at, START_MS + 25_000);
    h.advance_s(9);
    assert!(h.receive(&q, 1, None).await.is_empty());
    h.advance_s(1);
    assert_eq!(
        h.receive(&q, 1, None).await.len(),
        1,
        "visible 10 s after the call, not 10 s after the receive"
    );
}

#[tokio::test]
async fn change_visibility_past_twelve_hours_from_the_receive_is_an_error_not_a_clamp() {
    let h = Harness::new();
    let q = h.queue("q").await;
    h.send(&q, "a").await;
    let receipt = h.receive_one(&q, 60).await.receipt.unwrap();
    h.advance_s(3_600);
    let too_far = h
        .engine
        .change_visibility(&q, &receipt, sqs_change(43_200))
        .await;
    assert!(
        matches!(too_far, Err(EngineError::VisibilityPastLimit { .. })),
        "{too_far:?}"
    );
    // The message keeps its old deadline: nothing was shortened silently.
    let stats = h.stats(&q);
    assert_eq!(
        (stats.visible, stats.hidden),
        (1, 0),
        "the original 60 s deadline passed long ago"
    );
    let exact = h.receive_one(&q, 60).await.receipt.unwrap();
    let received_at = h.clock.now();
    let visible_at = h
        .engine
        .change_visibility(&q, &exact, sqs_change(43_200))
        .await
        .expect("exactly 12 h is allowed");
    assert_eq!(
        visible_at,
        received_at + 43_200_000,
        "and applied unclamped"
    );
    h.advance_s(43_199);
    assert_eq!(h.stats(&q).hidden, 1);
    h.advance_s(1);
    assert_eq!(h.stats(&q).visible, 1);
}

#[tokio::test]
async fn change_visibility_is_not_remembered_for_the_next_receive() {
    let h = Harness::new();
    let config = QueueConfig {
        visibility_timeout_ms: 30_000,
        ..QueueConfig::default()
    };
    let q = h.queue_with("q", config).await;
    h.send(&q, "a").await;
    let receipt = h.receive(&q, 1, None).await.remove(0).receipt.unwrap();
    h.engine
        .change_visibility(&q, &receipt, sqs_change(300))
        .await
        .unwrap();
    h.advance_s(300);
    assert_eq!(h.receive(&q, 1, None).await.len(), 1);
    h.advance_s(30);
    assert_eq!(
        h.receive(&q, 1, None).await.len(),
        1,
        "the next receive used the queue's 30 s again"
    );
}

#[tokio::test]
async fn change_visibility_to_zero_makes_the_message_visible_at_once() {
    let h = Harness::new();
    let q = h.queue("q").await;
    h.send(&q, "a").await;
    let receipt = h.receive_one(&q, 600).await.receipt.unwrap();
    h.engine
        .change_visibility(&q, &receipt, sqs_change(0))
        .await
        .unwrap();
    assert_eq!(h.receive(&q, 1, None).await.len(), 1);
}

#[tokio::test]
async fn change_visibility_with_a_receipt_of_an_earlier_receive_fails() {
    let h = Harness::new();
    let q = h.queue("q").await;
    h.send(&q, "a").await;
    let old = h.receive_one(&q, 1).await.receipt.unwrap();
    h.advance_s(1);
    h.receive_one(&q, 30).await;
    let result = h.engine.change_visibility(&q, &old, sqs_change(10)).await;
    assert!(
        matches!(result, Err(EngineError::MessageNotAvailable)),
        "{result:?}"
    );
}

#[tokio::test]
async fn change_visibility_after_the_deadline_but_before_a_new_receive_succeeds() {
    let h = Harness::new();
    let q = h.queue("q").await;
    h.send(&q, "a").await;
    let receipt = h.receive_one(&q, 1).await.receipt.unwrap();
    h.advance_s(5);
    h.engine
        .change_visibility(&q, &receipt, sqs_change(30))
        .await
        .unwrap();
    assert!(
        h.receive(&q, 1, None).await.is_empty(),
        "hidden again by the change"
    );
    assert_eq!(h.stats(&q).hidden, 1);
}

#[tokio::test]
async fn peek_changes_nothing() {
    let h = Harness::new();
    let q = h.queue("q").await;
    h.send(&q, "a").await;
    h.send(&q, "b").await;
    let peeked = h.engine.peek(&q, 10).await.unwrap();
    assert_eq!(peeked.iter().map(body).collect::<Vec<_>>(), ["a", "b"]);
    assert!(peeked
        .iter()
        .all(|m| m.receipt.is_none() && m.state.receive_count == 0));
    let got = h.receive(&q, 10, Some(30)).await;
    assert_eq!(got.len(), 2, "peek hid nothing");
    assert!(
        got.iter().all(|m| m.state.receive_count == 1),
        "peek did not count"
    );
    assert!(
        h.engine.peek(&q, 10).await.unwrap().is_empty(),
        "peek shows only visible messages"
    );
}

#[tokio::test]
async fn a_delayed_message_is_not_delivered_before_its_delay() {
    let h = Harness::new();
    let q = h.queue("q").await;
    let mut message = NewMessage::new("late");
    message.delay_ms = Some(10_000);
    h.engine.send(&q, vec![message]).await.unwrap();
    assert_eq!(h.stats(&q).delayed, 1);
    h.advance_s(9);
    assert!(h.receive(&q, 1, None).await.is_empty());
    h.advance_s(1);
    assert_eq!(h.receive(&q, 1, None).await.len(), 1);
}

#[tokio::test]
async fn the_queue_delay_applies_when_a_message_names_none() {
    let h = Harness::new();
    let q = h
        .queue_with(
            "q",
            QueueConfig {
                delay_ms: 5_000,
                ..QueueConfig::default()
            },
        )
        .await;
    h.send(&q, "a").await;
    assert!(h.receive(&q, 1, None).await.is_empty());
    h.advance_s(5);
    assert_eq!(h.receive(&q, 1, None).await.len(), 1);
}

#[tokio::test]
async fn an_expired_message_is_never_delivered_and_is_removed() {
    let h = Harness::new();
    let q = h
        .queue_with(
            "q",
            QueueConfig {
                retention_ms: Some(60_000),
                ..QueueConfig::default()
            },
        )
        .await;
    h.send(&q, "old").await;
    h.advance_s(30);
    h.send(&q, "young").await;
    h.advance_s(30);
    let got = h.receive(&q, 10, Some(30)).await;
    assert_eq!(got.iter().map(body).collect::<Vec<_>>(), ["young"]);
    assert_eq!(h.stats(&q).counters.expiries, 1);
    assert_eq!(
        h.store.message_count(),
        1,
        "the expired message left the store"
    );
}

#[tokio::test]
async fn a_hidden_message_also_expires() {
    let h = Harness::new();
    let q = h
        .queue_with(
            "q",
            QueueConfig {
                retention_ms: Some(60_000),
                ..QueueConfig::default()
            },
        )
        .await;
    h.send(&q, "a").await;
    h.receive_one(&q, 600).await;
    h.advance_s(60);
    h.engine.sweep();
    assert_eq!(h.stats(&q).hidden, 0);
    assert_eq!(h.store.message_count(), 0);
}

#[tokio::test]
async fn a_message_that_never_expires_is_kept() {
    let h = Harness::new();
    let q = h.queue("q").await;
    let mut forever = NewMessage::new("forever");
    forever.ttl = Some(Ttl::Never);
    h.engine.send(&q, vec![forever]).await.unwrap();
    h.advance_s(365 * 24 * 3_600);
    assert_eq!(
        h.receive(&q, 1, None).await.len(),
        1,
        "a message that never expires is kept"
    );
}

#[tokio::test]
async fn purge_deletes_every_message() {
    let h = Harness::new();
    let q = h.queue("q").await;
    for i in 0..3 {
        h.send(&q, &i.to_string()).await;
    }
    h.receive_one(&q, 30).await;
    assert_eq!(h.engine.purge(&q, None).await.unwrap(), 3);
    let stats = h.stats(&q);
    assert_eq!((stats.visible, stats.hidden, stats.delayed), (0, 0, 0));
    assert_eq!(h.store.message_count(), 0);
    assert_eq!(h.engine.last_purge_at(&q).unwrap(), Some(START_MS));
}

#[tokio::test]
async fn a_purge_within_the_minimum_interval_is_refused() {
    let h = Harness::new();
    let q = h.queue("q").await;
    h.engine.purge(&q, Some(60_000)).await.unwrap();
    h.send(&q, "kept").await;
    h.advance_s(59);
    let result = h.engine.purge(&q, Some(60_000)).await;
    assert!(
        matches!(result, Err(EngineError::PurgeTooSoon { .. })),
        "{result:?}"
    );
    assert_eq!(h.stats(&q).visible, 1, "the refused purge deleted nothing");
    h.advance_s(1);
    assert_eq!(h.engine.purge(&q, Some(60_000)).await.unwrap(), 1);
}

#[tokio::test]
async fn a_standard_queue_at_its_inflight_limit_fails_receive_with_over_limit() {
    let h = Harness::new();
    let q = h
        .queue_with(
            "q",
            QueueConfig {
                inflight_max: 2,
                ..QueueConfig::default()
            },
        )
        .await;
    for i in 0..4 {
        h.send(&q, &i.to_string()).await;
    }
    assert_eq!(
        h.receive(&q, 10, Some(30)).await.len(),
        2,
        "a receive stops at the limit"
    );
    let options = ReceiveOptions {
        dead_letter: veil_core::DeadLetterTiming::OnReceive,
        max_messages: 1,
        visibility_ms: None,
        wait_ms: Some(0),
        attempt_id: None,
        consumer: None,
    };
    let result = h.engine.receive(&q, options).await;
    assert!(
        matches!(
            result,
            Err(EngineError::OverLimit {
                inflight: 2,
                limit: 2
            })
        ),
        "{result:?}"
    );
    h.advance_s(30);
    assert_eq!(
        h.receive(&q, 10, Some(30)).await.len(),
        2,
        "room again once messages returned"
    );
}

#[tokio::test]
async fn stats_count_visible_hidden_and_delayed_messages_and_totals() {
    let h = Harness::new();
    let q = h.queue("q").await;
    h.send(&q, "visible").await;
    h.send(&q, "hidden").await;
    let mut late = NewMessage::new("delayed");
    late.delay_ms = Some(60_000);
    h.engine.send(&q, vec![late]).await.unwrap();
    h.advance_s(3);
    let got = h.receive(&q, 1, Some(10)).await;
    let stats = h.stats(&q);
    assert_eq!((stats.visible, stats.hidden, stats.delayed), (1, 1, 1));
    assert_eq!(stats.oldest_age_ms, 3_000);
    assert_eq!((stats.counters.sends, stats.counters.deliveries), (3, 1));
    h.advance_s(10);
    let stats = h.stats(&q);
    assert_eq!(
        (stats.visible, stats.hidden, stats.counters.redeliveries),
        (2, 0, 1)
    );
    let again = h.receive_one(&q, 30).await;
    h.engine
        .delete(
            &q,
            again.receipt.as_deref().unwrap(),
            ReceiptRule::AnyIssued,
        )
        .await
        .unwrap();
    assert_eq!(h.stats(&q).counters.deletes, 1);
    drop(got);
}

#[tokio::test]
async fn azure_update_rotates_the_receipt_and_may_replace_the_body() {
    let h = Harness::new();
    let q = h.queue("q").await;
    h.send(&q, "v1").await;
    let old = h.receive_one(&q, 30).await.receipt.unwrap();
    let change = VisibilityChange {
        receipts: veil_core::ReceiptRule::Current,
        visibility_ms: 0,
        since_receive_ms_max: None,
        not_past_expiry: true,
    };
    let updated = h
        .engine
        .update(&q, &old, change, Some("v2".into()))
        .await
        .unwrap();
    assert_ne!(updated.receipt, old);
    assert!(matches!(
        h.engine.delete(&q, &old, ReceiptRule::Current).await,
        Err(EngineError::MessageNotAvailable)
    ));
    let peeked = h.engine.peek(&q, 1).await.unwrap();
    assert_eq!(body(&peeked[0]), "v2");
    assert_eq!(
        h.engine
            .delete(&q, &updated.receipt, ReceiptRule::Current)
            .await
            .unwrap(),
        DeleteOutcome::Deleted
    );
}

#[tokio::test]
async fn azure_update_cannot_push_visibility_past_expiry() {
    let h = Harness::new();
    let q = h
        .queue_with(
            "q",
            QueueConfig {
                retention_ms: Some(60_000),
                ..QueueConfig::default()
            },
        )
        .await;
    h.send(&q, "a").await;
    let receipt = h.receive_one(&q, 10).await.receipt.unwrap();
    let change = VisibilityChange {
        receipts: veil_core::ReceiptRule::Current,
        visibility_ms: 61_000,
        since_receive_ms_max: None,
        not_past_expiry: true,
    };
    let result = h.engine.update(&q, &receipt, change, None).await;
    assert!(
        matches!(result, Err(EngineError::VisibilityPastExpiry)),
        "{result:?}"
    );
}

#[tokio::test]
async fn a_restart_is_invisible_to_clients() {
    let mut h = Harness::new();
    let q = h.queue("q").await;
    h.send(&q, "hidden").await;
    h.send(&q, "visible").await;
    let hidden = h.receive_one(&q, 60).await;
    h.restart();
    let stats = h.stats(&q);
    assert_eq!(
        (stats.visible, stats.hidden, stats.counters.sends),
        (1, 1, 2)
    );
    let got = h.receive(&q, 10, Some(60)).await;
    assert_eq!(
        got.iter().map(body).collect::<Vec<_>>(),
        ["visible"],
        "the hidden message stayed hidden"
    );
    let receipt = hidden.receipt.unwrap();
    h.engine
        .change_visibility(&q, &receipt, sqs_change(0))
        .await
        .expect("a receipt from before the restart works");
    let again = h.receive_one(&q, 60).await;
    assert_eq!(again.state.receive_count, 2, "the receive count survived");
    // Sequence numbers are never reused after a restart.
    let next = h.send(&q, "after").await;
    assert!(next.seq > again.seq);
}

#[tokio::test]
async fn creating_an_existing_queue_reports_it_instead_of_replacing_it() {
    let h = Harness::new();
    let q = h
        .queue_with(
            "q",
            QueueConfig {
                delay_ms: 1_000,
                ..QueueConfig::default()
            },
        )
        .await;
    let outcome = h
        .engine
        .create_queue(q.clone(), QueueConfig::default())
        .await
        .unwrap();
    match outcome {
        CreateOutcome::Existing(info) => assert_eq!(info.config.delay_ms, 1_000),
        CreateOutcome::Created(_) => panic!("an existing queue was created again"),
    }
}

#[tokio::test]
async fn namespaces_keep_queues_of_the_same_name_apart() {
    let h = Harness::new();
    let a = QueueKey::new(DEFAULT_NAMESPACE, "orders");
    let b = QueueKey::new("sqs:000000000000:eu-west-1", "orders");
    h.engine
        .create_queue(a.clone(), QueueConfig::default())
        .await
        .unwrap();
    h.engine
        .create_queue(b.clone(), QueueConfig::default())
        .await
        .unwrap();
    h.send(&a, "x").await;
    assert_eq!(h.stats(&a).visible, 1);
    assert_eq!(h.stats(&b).visible, 0);
    assert_eq!(h.engine.list_queues(DEFAULT_NAMESPACE, "").len(), 1);
}

#[tokio::test]
async fn an_oversized_message_is_refused_whole() {
    let h = Harness::new();
    let q = h
        .queue_with(
            "q",
            QueueConfig {
                message_size_bytes_max: 4,
                ..QueueConfig::default()
            },
        )
        .await;
    let result = h
        .engine
        .send(&q, vec![NewMessage::new("ok"), NewMessage::new("too long")])
        .await;
    assert!(matches!(
        result,
        Err(EngineError::MessageTooLarge {
            size_bytes: 8,
            max_bytes: 4
        })
    ));
    assert_eq!(
        h.stats(&q).visible,
        0,
        "nothing of a refused batch was stored"
    );
}

/// The engine compares the size its front-end counted (by the protocol's rule) with the limit, and counts
/// nothing itself: a short body counted large is refused, a long one counted small is kept.
#[tokio::test]
async fn the_size_limit_is_judged_on_the_size_the_sender_counted() {
    let h = Harness::new();
    let q = h
        .queue_with(
            "q",
            QueueConfig {
                message_size_bytes_max: 4,
                ..QueueConfig::default()
            },
        )
        .await;
    let counted_large = NewMessage {
        size_bytes: 5,
        ..NewMessage::new("ok")
    };
    assert!(matches!(
        h.engine.send(&q, vec![counted_large]).await,
        Err(EngineError::MessageTooLarge {
            size_bytes: 5,
            max_bytes: 4
        })
    ));
    let counted_small = NewMessage {
        size_bytes: 4,
        ..NewMessage::new("a longer body")
    };
    h.engine.send(&q, vec![counted_small]).await.unwrap();
    assert_eq!(h.stats(&q).visible, 1);
}

#[tokio::test]
async fn a_delete_batch_reports_each_receipt_on_its_own() {
    let h = Harness::new();
    let q = h.queue("q").await;
    h.send(&q, "a").await;
    let receipt = h.receive_one(&q, 30).await.receipt.unwrap();
    let outcomes = h
        .engine
        .delete_batch(&q, &[&receipt, "forged", &receipt], ReceiptRule::AnyIssued)
        .await
        .unwrap();
    assert!(matches!(outcomes[0], Ok(DeleteOutcome::Deleted)));
    assert!(matches!(outcomes[1], Err(EngineError::ReceiptInvalid)));
    assert!(matches!(outcomes[2], Ok(DeleteOutcome::AlreadyGone)));
    assert_eq!(h.stats(&q).counters.deletes, 1);
}

#[tokio::test]
async fn the_receipt_of_a_send_is_current_until_the_first_receive() {
    let h = Harness::new();
    let q = h.queue("q").await;
    let sent = h.send(&q, "a").await;
    let put_receipt = h.engine.receipt_of_send(&sent);
    let change = VisibilityChange {
        receipts: veil_core::ReceiptRule::Current,
        visibility_ms: 5_000,
        since_receive_ms_max: None,
        not_past_expiry: true,
    };
    let updated = h
        .engine
        .update(&q, &put_receipt, change, None)
        .await
        .unwrap();
    assert!(
        h.receive(&q, 1, None).await.is_empty(),
        "the update hid the message"
    );
    assert!(matches!(
        h.engine
            .delete(&q, &put_receipt, ReceiptRule::Current)
            .await,
        Err(EngineError::MessageNotAvailable)
    ));
    h.advance_s(5);
    let got = h.receive_one(&q, 30).await;
    assert!(matches!(
        h.engine
            .delete(&q, &updated.receipt, ReceiptRule::Current)
            .await,
        Err(EngineError::MessageNotAvailable)
    ));
    assert_eq!(
        h.engine
            .delete(&q, got.receipt.as_deref().unwrap(), ReceiptRule::Current)
            .await
            .unwrap(),
        DeleteOutcome::Deleted
    );
}
