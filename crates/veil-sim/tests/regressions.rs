//! Every failure the simulator found, kept with its seed (docs/reliability.md, "Deterministic simulation").
//! Most were the checker's own mistakes, found while building it; each seed stays here so that the checker
//! keeps handling the situation it got wrong. Engine bugs also get a focused test.

use std::sync::Arc;
use std::task::{Context, Poll, Waker};

use veil_core::memory_store::MemoryStore;
use veil_core::{
    DeadLetterTiming, Engine, ManualClock, NewMessage, QueueConfig, QueueKey, ReceiptKey,
    ReceiveOptions, RedrivePolicy,
};
use veil_sim::limits::STEPS_DEFAULT;
use veil_sim::{report, run_pinned, Options, Pinned};

/// Runs a kept seed, first checking that it still generates the run it was kept for (`pin.rs`): a changed
/// generator fails here, loudly, instead of passing without exercising anything.
fn passes(pinned: Pinned) {
    let result = run_pinned(&pinned, Options::default()).unwrap_or_else(|why| panic!("{why}"));
    if let Some(violation) = result.violation {
        panic!(
            "{}",
            report(pinned.seed, pinned.steps, violation, Options::default())
        );
    }
}

/// A kept seed as `veil-sim --seed N --steps S --pin` prints it.
const fn pin(seed: u64, steps: usize, digest: &'static str, requests: u64) -> Pinned {
    Pinned {
        seed,
        steps,
        digest,
        requests,
    }
}

/// A retried FIFO receive (same attempt id) gets the messages of the first again, same receipts: not a
/// second message of the group in flight.
#[test]
fn seed_21_a_retried_fifo_receive_is_not_two_of_a_group_in_flight() {
    passes(pin(21, STEPS_DEFAULT, "33988c311554e7a1", 200));
}

/// A receive answers only the messages that still exist when it reads their payloads after its commit: an
/// earlier message of the group that expired meanwhile is no FIFO order violation.
#[test]
fn seed_47_a_fifo_message_that_expired_before_the_answer_does_not_hold_its_group_back() {
    passes(pin(47, STEPS_DEFAULT, "a555cedae5392215", 180));
}

/// The final drain starts after every answered receive's window has passed.
#[test]
fn seed_65_liveness_waits_for_the_windows_of_the_last_answers() {
    passes(pin(65, STEPS_DEFAULT, "71643f17bc03268b", 248));
}

/// A dead-letter move can land an already expired message in a queue a sweep visited before; the
/// statistics check settles until nothing is pending. Also found: sweeps visited queues in hash order, so a
/// seed did not replay the same run (fixed in veil-core: sweeps go in id order).
#[test]
fn seed_170_statistics_are_compared_once_the_engine_has_settled() {
    passes(pin(170, STEPS_DEFAULT, "fce29c645656c7c1", 182));
}

/// A long poll waiting before a send may deliver that message (and its dead-letter rule may drop it).
#[test]
fn seed_323_a_waiting_long_poll_may_receive_later_sends() {
    passes(pin(323, STEPS_DEFAULT, "431c5766d78b2dfd", 214));
}

/// Answers can come back in another order than the deliveries happened: a long poll that started first
/// delivered second (a higher receive count) but was answered first. Receive counts are compared in
/// generation order, and a long poll's window binds only requests that started after its answer.
#[test]
fn seed_100109_of_1500_steps_a_long_poll_answered_first_may_have_delivered_last() {
    passes(pin(100_109, 1_500, "963afc83f78e80a7", 1104));
}

/// Two FIFO receives with the same attempt id in flight at once: the retry gives the first one's messages
/// the retry's visibility (SQS resets it), so the first answer's window binds only until the retry started.
#[test]
fn seed_23988_a_retried_receive_attempt_resets_the_visibility_of_its_messages() {
    passes(pin(23_988, STEPS_DEFAULT, "0f7e74e3bf153db2", 232));
}

/// A message moved by its own dead-letter rule arrives without the rule; re-queued to a queue with a redrive
/// policy, that policy moves it (to orders-dlq), not the rule it no longer has.
#[test]
fn seed_93270_a_message_moved_by_its_own_rule_follows_the_queue_policy_after() {
    passes(pin(93_270, STEPS_DEFAULT, "2ed5eed38330920f", 210));
}

fn now<F: std::future::Future>(future: F) -> F::Output {
    let mut future = Box::pin(future);
    match future
        .as_mut()
        .poll(&mut Context::from_waker(Waker::noop()))
    {
        Poll::Ready(value) => value,
        Poll::Pending => panic!("the memory store resolves every commit at once"),
    }
}

/// The engine fix behind seed 170: a sweep brings queues up to now in id order, so one history gives one
/// state. Here the source (lower id) releases a used-up KubeMQ delivery into its dead-letter queue, where it
/// arrives already past that queue's retention; visited after the source, the queue expires it in the same
/// sweep — every time, not on half of the runs.
#[test]
fn a_sweep_visits_queues_in_id_order() {
    for _ in 0..20 {
        let clock = ManualClock::new(1_000_000);
        let engine = Engine::open(
            Arc::new(MemoryStore::new()),
            Arc::new(clock.clone()),
            ReceiptKey::new([1; 32]),
        )
        .expect("an empty store opens");
        let (source, dead) = (
            QueueKey::new("default", "source"),
            QueueKey::new("default", "source-dlq"),
        );
        let source_config = QueueConfig {
            redrive_policy: Some(RedrivePolicy {
                dead_letter_queue: dead.clone(),
                max_receive_count: 1,
            }),
            ..QueueConfig::default()
        };
        now(engine.create_queue(source.clone(), source_config)).expect("created");
        let dead_config = QueueConfig {
            retention_ms: Some(60_000),
            ..QueueConfig::default()
        };
        now(engine.create_queue(dead.clone(), dead_config)).expect("created");
        now(engine.send(&source, vec![NewMessage::new("m")])).expect("sent");
        let options = ReceiveOptions {
            visibility_ms: Some(1_000),
            wait_ms: Some(0),
            dead_letter: DeadLetterTiming::OnRelease,
            ..ReceiveOptions::new(1)
        };
        assert_eq!(
            now(engine.receive(&source, options))
                .expect("received")
                .len(),
            1
        );
        clock.advance_ms(120_000);
        engine.sweep();
        // Counted without bringing the queues up to now (which would expire it anyway).
        assert_eq!(engine.message_count(&source).expect("exists"), 0);
        assert_eq!(engine.message_count(&dead).expect("exists"), 0);
    }
}
