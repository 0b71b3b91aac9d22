//! Long polling: a waiting receive wakes promptly on a send, on a delay ending, on a visibility deadline
//! passing and on a nack, and returns empty when its wait ends. The clock is manual; the only real time here
//! is a guard that fails a test whose waiter never wakes.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::*;
use veil_core::*;

const WAIT_MS: u64 = 20_000;
/// Real time after which a waiter that should have woken is declared stuck.
const STUCK: Duration = Duration::from_secs(2);

fn spawn_waiter(engine: &Arc<Engine>, key: &QueueKey) -> tokio::task::JoinHandle<Vec<Message>> {
    let engine = engine.clone();
    let key = key.clone();
    tokio::spawn(async move {
        let options = ReceiveOptions {
            dead_letter: veil_core::DeadLetterTiming::OnReceive,
            max_messages: 10,
            visibility_ms: Some(30_000),
            wait_ms: Some(WAIT_MS),
            attempt_id: None,
            consumer: None,
        };
        engine.receive(&key, options).await.unwrap()
    })
}

/// Lets the waiter run until it blocks.
async fn settle() {
    for _ in 0..10 {
        tokio::task::yield_now().await;
    }
}

async fn woken(waiter: tokio::task::JoinHandle<Vec<Message>>) -> Vec<Message> {
    tokio::time::timeout(STUCK, waiter)
        .await
        .expect("the waiter did not wake")
        .unwrap()
}

#[tokio::test]
async fn a_long_poll_wakes_on_a_send() {
    let h = Harness::new();
    let q = h.queue("q").await;
    let waiter = spawn_waiter(&h.engine, &q);
    settle().await;
    assert!(!waiter.is_finished(), "nothing to receive yet");
    h.send(&q, "a").await;
    let got = woken(waiter).await;
    assert_eq!(got.iter().map(body).collect::<Vec<_>>(), ["a"]);
}

#[tokio::test]
async fn a_long_poll_wakes_when_a_delay_ends() {
    let h = Harness::new();
    let q = h.queue("q").await;
    let mut late = NewMessage::new("late");
    late.delay_ms = Some(5_000);
    h.engine.send(&q, vec![late]).await.unwrap();
    let waiter = spawn_waiter(&h.engine, &q);
    settle().await;
    assert!(!waiter.is_finished());
    h.advance_s(5);
    assert_eq!(woken(waiter).await.len(), 1);
}

#[tokio::test]
async fn a_long_poll_wakes_when_a_visibility_deadline_passes() {
    let h = Harness::new();
    let q = h.queue("q").await;
    h.send(&q, "a").await;
    h.receive_one(&q, 3).await;
    let waiter = spawn_waiter(&h.engine, &q);
    settle().await;
    assert!(!waiter.is_finished());
    h.advance_s(3);
    let got = woken(waiter).await;
    assert_eq!(got[0].state.receive_count, 2);
}

#[tokio::test]
async fn a_long_poll_wakes_on_a_nack() {
    let h = Harness::new();
    let q = h.queue("q").await;
    h.send(&q, "a").await;
    let receipt = h.receive_one(&q, 600).await.receipt.unwrap();
    let waiter = spawn_waiter(&h.engine, &q);
    settle().await;
    h.engine
        .change_visibility(&q, &receipt, sqs_change(0))
        .await
        .unwrap();
    assert_eq!(woken(waiter).await.len(), 1);
}

#[tokio::test]
async fn a_long_poll_wakes_for_a_deadline_shortened_while_it_waits() {
    let h = Harness::new();
    let q = h.queue("q").await;
    h.send(&q, "a").await;
    let receipt = h.receive_one(&q, 600).await.receipt.unwrap();
    let waiter = spawn_waiter(&h.engine, &q);
    settle().await;
    h.engine
        .change_visibility(&q, &receipt, sqs_change(2))
        .await
        .unwrap();
    settle().await;
    h.advance_s(2);
    assert_eq!(
        woken(waiter).await.len(),
        1,
        "the waiter re-armed its timer for the earlier deadline"
    );
}

#[tokio::test]
async fn a_long_poll_returns_empty_when_its_wait_ends() {
    let h = Harness::new();
    let q = h.queue("q").await;
    let waiter = spawn_waiter(&h.engine, &q);
    settle().await;
    h.clock.advance_ms(WAIT_MS - 1);
    settle().await;
    assert!(!waiter.is_finished(), "still waiting 1 ms before the end");
    h.clock.advance_ms(1);
    assert!(woken(waiter).await.is_empty());
}

#[tokio::test]
async fn shutdown_ends_long_polls_at_once() {
    let h = Harness::new();
    let q = h.queue("q").await;
    let waiter = spawn_waiter(&h.engine, &q);
    settle().await;
    h.engine.shutdown();
    assert!(woken(waiter).await.is_empty());
}

#[tokio::test]
async fn a_long_poll_on_a_deleted_queue_ends_with_queue_not_found() {
    let h = Harness::new();
    let q = h.queue("q").await;
    let engine = h.engine.clone();
    let key = q.clone();
    let waiter = tokio::spawn(async move {
        engine
            .receive(
                &key,
                ReceiveOptions {
                    dead_letter: veil_core::DeadLetterTiming::OnReceive,
                    max_messages: 1,
                    visibility_ms: None,
                    wait_ms: Some(WAIT_MS),
                    attempt_id: None,
                    consumer: None,
                },
            )
            .await
    });
    settle().await;
    h.engine.delete_queue(&q).await.unwrap();
    let result = tokio::time::timeout(STUCK, waiter)
        .await
        .expect("woken")
        .unwrap();
    assert!(matches!(result, Err(EngineError::QueueNotFound(_))));
}
