//! Long polling: a waiting receive wakes promptly on a send, on a delay ending, on a visibility deadline
//! passing and on a nack, and returns empty when its wait ends. A change that makes k messages deliverable
//! wakes k waiters, oldest first, and no wake-up is lost (ARCHITECTURE.md, "Long polling"). The clock is
//! manual; the only real time here is a guard that fails a test whose waiter never wakes.

mod common;

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
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

/// Counts the wake-ups of one hand-polled waiter.
#[derive(Default)]
struct Probe(AtomicUsize);

impl Wake for Probe {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

type Receiving = Pin<Box<dyn Future<Output = EngineResult<Vec<Message>>> + Send>>;

/// A long poll polled by hand, so a test sees exactly which waiters a change woke, and can let another
/// consumer act between a wake and the woken waiter's re-check.
struct Waiter {
    receiving: Receiving,
    probe: Arc<Probe>,
}

impl Waiter {
    /// A long poll of one message that has registered (polled once, found nothing).
    fn registered(engine: &Arc<Engine>, key: &QueueKey) -> Self {
        let (engine, key) = (engine.clone(), key.clone());
        let receiving: Receiving = Box::pin(async move {
            let options = ReceiveOptions {
                dead_letter: veil_core::DeadLetterTiming::OnReceive,
                max_messages: 1,
                visibility_ms: Some(30_000),
                wait_ms: Some(WAIT_MS),
                attempt_id: None,
                consumer: None,
            };
            engine.receive(&key, options).await
        });
        let mut waiter = Self {
            receiving,
            probe: Arc::default(),
        };
        assert!(waiter.poll().is_pending(), "nothing to receive yet");
        waiter.probe.0.store(0, Ordering::SeqCst);
        waiter
    }

    fn poll(&mut self) -> Poll<EngineResult<Vec<Message>>> {
        let waker = Waker::from(self.probe.clone());
        self.receiving
            .as_mut()
            .poll(&mut Context::from_waker(&waker))
    }

    fn wakes(&self) -> usize {
        self.probe.0.load(Ordering::SeqCst)
    }

    /// Runs the woken waiter to its answer (the delivery awaits the store's commit).
    async fn received(mut self) -> Vec<String> {
        let messages = tokio::time::timeout(STUCK, self.receiving.as_mut())
            .await
            .expect("the waiter did not finish")
            .unwrap();
        messages.iter().map(|m| body(m).to_owned()).collect()
    }
}

fn wakes(waiters: &[Waiter]) -> Vec<usize> {
    waiters.iter().map(Waiter::wakes).collect()
}

#[tokio::test]
async fn a_send_of_one_message_wakes_one_waiter() {
    let h = Harness::new();
    let q = h.queue("q").await;
    let mut waiters: Vec<Waiter> = (0..3).map(|_| Waiter::registered(&h.engine, &q)).collect();
    h.send(&q, "a").await;
    assert_eq!(wakes(&waiters), [1, 0, 0], "the oldest waiter, and only it");
    let first = waiters.remove(0);
    assert_eq!(first.received().await, ["a"]);
    assert!(waiters.iter_mut().all(|w| w.poll().is_pending()));
}

#[tokio::test]
async fn a_send_of_n_messages_wakes_n_waiters() {
    let h = Harness::new();
    let q = h.queue("q").await;
    let mut waiters: Vec<Waiter> = (0..5).map(|_| Waiter::registered(&h.engine, &q)).collect();
    let batch = ["a", "b", "c"].map(NewMessage::new).to_vec();
    h.engine.send(&q, batch).await.unwrap();
    assert_eq!(wakes(&waiters), [1, 1, 1, 0, 0]);
    let mut got = Vec::new();
    for waiter in waiters.drain(..3) {
        got.extend(waiter.received().await);
    }
    got.sort();
    assert_eq!(got, ["a", "b", "c"]);
    assert!(waiters.iter_mut().all(|w| w.poll().is_pending()));
}

#[tokio::test]
async fn a_fifo_send_wakes_one_waiter_per_group_head_that_became_deliverable() {
    let h = Harness::new();
    let config = QueueConfig {
        fifo: Some(FifoConfig::default()),
        ..QueueConfig::default()
    };
    let q = h.queue_with("q.fifo", config).await;
    let waiters: Vec<Waiter> = (0..4).map(|_| Waiter::registered(&h.engine, &q)).collect();
    let grouped = |body: &str, group: &str| NewMessage {
        group: Some(group.to_owned()),
        dedup_id: Some(body.to_owned()),
        ..NewMessage::new(body.to_owned())
    };
    let batch = vec![grouped("a1", "a"), grouped("a2", "a"), grouped("b1", "b")];
    h.engine.send(&q, batch).await.unwrap();
    assert_eq!(
        wakes(&waiters),
        [1, 1, 0, 0],
        "two groups, two heads: a2 waits behind a1"
    );
}

/// A FIFO queue, and a send of one message in a group of its own: a FIFO send wakes its waiters (it does
/// not deliver to them itself as a standard queue's does), so a woken waiter may find its message taken.
async fn fifo_queue(h: &Harness) -> QueueKey {
    let config = QueueConfig {
        fifo: Some(FifoConfig::default()),
        ..QueueConfig::default()
    };
    h.queue_with("q.fifo", config).await
}

async fn send_grouped(h: &Harness, key: &QueueKey, body: &str) {
    let message = NewMessage {
        group: Some(body.to_owned()),
        dedup_id: Some(body.to_owned()),
        ..NewMessage::new(body.to_owned())
    };
    h.engine.send(key, vec![message]).await.unwrap();
}

#[tokio::test]
async fn a_waiter_woken_for_a_message_another_consumer_took_waits_again_and_loses_no_wake() {
    let h = Harness::new();
    let q = fifo_queue(&h).await;
    let mut a = Waiter::registered(&h.engine, &q);
    let b = Waiter::registered(&h.engine, &q);
    send_grouped(&h, &q, "taken").await;
    assert_eq!((a.wakes(), b.wakes()), (1, 0));
    // Another consumer takes the message before the woken waiter re-checks.
    h.receive_one(&q, 30).await;
    assert!(a.poll().is_pending(), "found nothing: waits again");
    send_grouped(&h, &q, "next").await;
    assert_eq!(
        (a.wakes(), b.wakes()),
        (1, 1),
        "b waited longer than a's new registration"
    );
    assert_eq!(b.received().await, ["next"]);
    send_grouped(&h, &q, "last").await;
    assert_eq!(
        a.wakes(),
        2,
        "a's wait went on and is woken for the next message"
    );
    assert_eq!(a.received().await, ["last"]);
}

#[tokio::test]
async fn a_waiter_dropped_after_its_wake_passes_it_to_the_next_waiter() {
    let h = Harness::new();
    let q = fifo_queue(&h).await;
    let a = Waiter::registered(&h.engine, &q);
    let b = Waiter::registered(&h.engine, &q);
    send_grouped(&h, &q, "a").await;
    assert_eq!((a.wakes(), b.wakes()), (1, 0));
    drop(a); // the client went away before its request ran again
    assert_eq!(b.wakes(), 1, "the wake went on to b");
    assert_eq!(b.received().await, ["a"]);
}

#[tokio::test]
async fn a_send_delivers_to_the_oldest_waiter_in_its_own_commit() {
    let h = Harness::over(Arc::new(CountingStore::default()));
    let q = h.queue("q").await;
    let a = Waiter::registered(&h.engine, &q);
    let mut b = Waiter::registered(&h.engine, &q);
    let before = h.store.submissions();
    h.send(&q, "handed").await;
    assert_eq!(a.received().await, ["handed"]);
    assert_eq!(
        h.store.submissions(),
        before + 1,
        "the waiter's delivery is durable with the send: no commit of its own"
    );
    assert!(b.poll().is_pending(), "one message, one waiter");
    h.advance_s(31);
    assert_eq!(
        h.receive(&q, 10, Some(30)).await.len(),
        1,
        "the handed message was in flight under the waiter's visibility timeout, and then visible again"
    );
}

#[tokio::test]
async fn a_delivery_handed_to_a_waiter_whose_wait_ended_meanwhile_is_still_served() {
    let h = Harness::new();
    // Both branches ready at once: a regression that lets the timer win loses the delivery in some rounds.
    for round in 0..20 {
        // A queue per round: the clock moves past earlier rounds' visibility timeouts.
        let q = h.queue(&format!("q{round}")).await;
        let waiter = Waiter::registered(&h.engine, &q);
        let body = format!("m{round}");
        h.send(&q, &body).await;
        // The hand-off is in the waiter's slot, and its wait is over too: both are ready at its next poll.
        h.advance_s(WAIT_MS / 1000 + 1);
        assert_eq!(waiter.received().await, [body], "round {round}");
        let visible = h.receive(&q, 10, Some(30)).await;
        assert!(
            visible.is_empty(),
            "round {round}: {} visible",
            visible.len()
        );
    }
}

#[tokio::test]
async fn a_waiter_that_went_away_gets_nothing_and_the_next_one_gets_the_message() {
    let h = Harness::new();
    let q = h.queue("q").await;
    let a = Waiter::registered(&h.engine, &q);
    let b = Waiter::registered(&h.engine, &q);
    drop(a); // its client went away while it waited
    h.send(&q, "m").await;
    assert_eq!(b.wakes(), 1);
    assert_eq!(b.received().await, ["m"]);
}

#[tokio::test]
async fn a_purge_and_a_deletion_wake_every_waiter() {
    let h = Harness::new();
    let q = h.queue("q").await;
    let mut waiters: Vec<Waiter> = (0..3).map(|_| Waiter::registered(&h.engine, &q)).collect();
    h.engine.purge(&q, None).await.unwrap();
    assert_eq!(wakes(&waiters), [1, 1, 1]);
    assert!(waiters.iter_mut().all(|w| w.poll().is_pending()));
    h.engine.delete_queue(&q).await.unwrap();
    // Woken again, each: by the wake and by its hand-off slot closing with the queue, one waker call each.
    assert!(
        wakes(&waiters).iter().all(|&n| n >= 2),
        "{:?}",
        wakes(&waiters)
    );
    for waiter in &mut waiters {
        assert!(matches!(
            waiter.poll(),
            Poll::Ready(Err(EngineError::QueueNotFound(_)))
        ));
    }
}
