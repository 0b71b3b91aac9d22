//! Moves between partitions (crate::inbox; docs/decisions/0011-partitioned-ownership.md step 7): two engines,
//! each one partition of two, over stores of their own, with one manual clock. What one partition's commit
//! sends to the other's inbox is delivered by the test (`ferry`), as the database's table would hold it; each
//! entry must arrive exactly once, as the move would have arrived within one engine.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{SECRET, START_MS};
use veil_core::inbox::Placement;
use veil_core::memory_store::MemoryStore;
use veil_core::partition::partition_of;
use veil_core::*;

const PARTITIONS: u32 = 2;

/// Two partitions of one cluster.
struct Pair {
    clock: ManualClock,
    stores: [Arc<MemoryStore>; 2],
    engines: [Arc<Engine>; 2],
}

impl Pair {
    fn new() -> Self {
        let clock = ManualClock::new(START_MS);
        let stores = [Arc::new(MemoryStore::new()), Arc::new(MemoryStore::new())];
        let engines = [0, 1].map(|partition| {
            let engine = Engine::open(
                stores[partition as usize].clone(),
                Arc::new(clock.clone()),
                ReceiptKey::new(SECRET),
            )
            .expect("opens")
            .placed(Placement {
                partition,
                count: PARTITIONS,
            });
            Arc::new(engine)
        });
        Self {
            clock,
            stores,
            engines,
        }
    }

    /// A queue named `prefix…` that belongs to `partition`, created there with `config`.
    async fn queue_in(&self, partition: u32, prefix: &str, config: QueueConfig) -> QueueKey {
        let key = (0..)
            .map(|i| QueueKey::new(DEFAULT_NAMESPACE, format!("{prefix}-{i}")))
            .find(|key| partition_of(key, PARTITIONS) == partition)
            .expect("some name hashes there");
        self.engine_of(&key)
            .create_queue(key.clone(), config)
            .await
            .expect("creates");
        key
    }

    fn engine_of(&self, key: &QueueKey) -> &Engine {
        &self.engines[partition_of(key, PARTITIONS) as usize]
    }

    /// Delivers what each store sent to the other's inbox, then lets both engines accept theirs. Returns how
    /// many entries crossed.
    async fn ferry(&self) -> usize {
        let mut crossed = 0;
        for store in &self.stores {
            for (partition, entry, payload) in store.take_outbox() {
                self.stores[partition as usize].deliver(entry, payload);
                crossed += 1;
            }
        }
        for engine in &self.engines {
            engine.drain_inbox().await.expect("accepts");
        }
        crossed
    }

    async fn send(&self, key: &QueueKey, body: &str) -> SentMessage {
        self.engine_of(key)
            .send(key, vec![NewMessage::new(body.to_owned())])
            .await
            .expect("sends")
            .remove(0)
    }

    async fn receive(&self, key: &QueueKey, visibility_s: u64) -> Vec<Message> {
        let options = ReceiveOptions {
            dead_letter: DeadLetterTiming::OnReceive,
            max_messages: 10,
            visibility_ms: Some(visibility_s * 1_000),
            wait_ms: Some(0),
            attempt_id: None,
            consumer: None,
        };
        self.engine_of(key)
            .receive(key, options)
            .await
            .expect("receives")
    }

    fn stats(&self, key: &QueueKey) -> QueueStats {
        self.engine_of(key).stats(key).expect("exists")
    }

    fn advance_s(&self, seconds: u64) {
        self.clock.advance(Duration::from_secs(seconds));
    }

    fn inboxes_empty(&self) -> bool {
        self.stores.iter().all(|store| store.inbox_count() == 0)
    }
}

/// A queue `jobs` in partition 0 and a queue `retry` in partition 1, and one message sent to `jobs`, received
/// and re-queued to `retry` (so in partition 1's inbox until the next ferry). Returns the queues and the send.
async fn requeued_across(pair: &Pair) -> (QueueKey, QueueKey, SentMessage) {
    let source = pair.queue_in(0, "jobs", QueueConfig::default()).await;
    let target = pair.queue_in(1, "retry", QueueConfig::default()).await;
    let sent = pair.send(&source, "job").await;
    let held = pair.receive(&source, 30).await.remove(0);
    let receipt = held.receipt.expect("a receive has a receipt");
    pair.engine_of(&source)
        .move_message(&source, &receipt, &target)
        .await
        .expect("moves");
    (source, target, sent)
}

fn dead_lettering_to(dlq: &QueueKey, max_receive_count: u32) -> QueueConfig {
    QueueConfig {
        redrive_policy: Some(RedrivePolicy {
            dead_letter_queue: dlq.clone(),
            max_receive_count,
        }),
        ..QueueConfig::default()
    }
}

#[tokio::test]
async fn a_dead_letter_reaches_its_queue_in_another_partition_exactly_once() {
    let pair = Pair::new();
    let dlq = pair.queue_in(1, "dlq", QueueConfig::default()).await;
    let source = pair.queue_in(0, "source", dead_lettering_to(&dlq, 1)).await;
    let sent = pair.send(&source, "poison").await;
    assert_eq!(pair.receive(&source, 1).await.len(), 1);
    pair.advance_s(1);
    assert!(
        pair.receive(&source, 1).await.is_empty(),
        "the receive after the maximum moves the message instead of delivering it"
    );
    let left = pair.stats(&source);
    assert_eq!((left.visible, left.hidden), (0, 0));
    assert_eq!(left.counters.dead_letter_moves, 1);
    assert_eq!(pair.stores[0].message_count(), 0, "it left its store");
    assert_eq!(pair.ferry().await, 1);
    assert!(pair.inboxes_empty(), "accepting removes the entry");
    let moved = pair.receive(&dlq, 30).await;
    assert_eq!(moved.len(), 1);
    assert_eq!(moved[0].payload.message_id, sent.message_id);
    assert_eq!(&moved[0].payload.body[..], b"poison");
    assert_eq!(moved[0].state.sent_at, START_MS, "the send time is kept");
    assert_eq!(
        moved[0].state.receive_count, 2,
        "the receive count carries into the dead-letter queue (1 before the move, this receive's)"
    );
    assert_eq!(moved[0].payload.dead_letter_source(), Some(&source));
    assert_eq!(pair.ferry().await, 0, "nothing crosses twice");
    assert_eq!(pair.stats(&dlq).hidden, 1);
    engines_consistent(&pair);
}

#[tokio::test]
async fn a_requeue_into_another_partition_arrives_fresh_and_counts_as_a_send() {
    let pair = Pair::new();
    let (source, target, sent) = requeued_across(&pair).await;
    assert_eq!(pair.stats(&source).counters.moves_out, 1);
    assert_eq!(pair.ferry().await, 1);
    let arrived = pair.receive(&target, 30).await.remove(0);
    assert_eq!(arrived.payload.message_id, sent.message_id);
    assert_eq!(
        arrived.state.receive_count, 1,
        "fresh: this is its first receive"
    );
    assert_eq!(pair.stats(&target).counters.sends, 1);
    assert_eq!(
        arrived.payload.moved_from.as_ref().map(|m| &m.queue),
        Some(&source)
    );
    engines_consistent(&pair);
}

#[tokio::test]
async fn a_move_task_returns_dead_letters_to_their_origins_in_another_partition() {
    let pair = Pair::new();
    let dlq = pair.queue_in(1, "dlq", QueueConfig::default()).await;
    let origin = pair.queue_in(0, "origin", dead_lettering_to(&dlq, 1)).await;
    for body in ["a", "b", "c"] {
        pair.send(&origin, body).await;
    }
    assert_eq!(pair.receive(&origin, 1).await.len(), 3);
    pair.advance_s(1);
    assert!(pair.receive(&origin, 1).await.is_empty());
    assert_eq!(pair.ferry().await, 3);
    assert_eq!(pair.stats(&dlq).visible, 3);
    let task = pair.engines[1]
        .start_move_task(&dlq, None, None)
        .await
        .expect("starts");
    assert_eq!(task.to_move, 3);
    pair.advance_s(1);
    pair.engines[1].drive_move_tasks().await.expect("steps");
    assert_eq!(pair.stats(&dlq).visible, 0);
    assert_eq!(pair.ferry().await, 3);
    let back = pair.receive(&origin, 30).await;
    let mut bodies: Vec<_> = back.iter().map(|m| m.payload.body.to_vec()).collect();
    bodies.sort();
    assert_eq!(bodies, [b"a".to_vec(), b"b".to_vec(), b"c".to_vec()]);
    let tasks = pair.engines[1].move_tasks(&dlq).expect("listed");
    assert_eq!(tasks[0].moved, 3);
    engines_consistent(&pair);
}

#[tokio::test]
async fn an_entry_whose_target_is_gone_goes_back_to_the_queue_it_left() {
    let pair = Pair::new();
    let (source, target, sent) = requeued_across(&pair).await;
    pair.engines[1]
        .delete_queue(&target)
        .await
        .expect("deletes");
    assert_eq!(
        pair.ferry().await,
        1,
        "the entry reaches the target's partition"
    );
    assert_eq!(pair.ferry().await, 1, "and comes back from there");
    assert!(pair.inboxes_empty());
    let back = pair.receive(&source, 30).await;
    assert_eq!(back.len(), 1, "the message is back, visible");
    assert_eq!(back[0].payload.message_id, sent.message_id);
    engines_consistent(&pair);
}

#[tokio::test]
async fn an_entry_whose_target_and_source_are_gone_is_dropped() {
    let pair = Pair::new();
    let source = pair.queue_in(0, "jobs", QueueConfig::default()).await;
    let target = pair.queue_in(1, "retry", QueueConfig::default()).await;
    pair.send(&source, "job").await;
    let held = pair.receive(&source, 30).await.remove(0);
    pair.engine_of(&source)
        .move_message(&source, &held.receipt.expect("a receipt"), &target)
        .await
        .expect("moves");
    pair.engines[1]
        .delete_queue(&target)
        .await
        .expect("deletes");
    pair.engines[0]
        .delete_queue(&source)
        .await
        .expect("deletes");
    pair.ferry().await;
    pair.ferry().await;
    assert_eq!(pair.ferry().await, 0, "nothing left travelling");
    assert!(pair.inboxes_empty());
    assert_eq!(
        pair.stores[0].message_count() + pair.stores[1].message_count(),
        0
    );
}

fn engines_consistent(pair: &Pair) {
    for (engine, store) in pair.engines.iter().zip(&pair.stores) {
        engine.check_invariants();
        let in_memory: usize = engine
            .list_queues(DEFAULT_NAMESPACE, "")
            .iter()
            .map(|info| engine.message_count(&info.key).expect("listed"))
            .sum();
        assert_eq!(in_memory, store.message_count(), "memory and store agree");
    }
}

/// A small deterministic generator (xorshift64*): the seed alone reproduces a run.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// Every message id found in the pair's queues (any state), with how many times.
async fn stored_ids(
    pair: &Pair,
    queues: &[QueueKey],
) -> std::collections::HashMap<[u8; 16], usize> {
    let mut found = std::collections::HashMap::new();
    for key in queues {
        let mut from = 0;
        loop {
            let page = pair
                .engine_of(key)
                .browse(key, from, 1_000)
                .await
                .expect("browses");
            let Some(last) = page.last() else { break };
            from = last.seq + 1;
            for message in &page {
                *found.entry(message.payload.message_id).or_insert(0) += 1;
            }
        }
    }
    found
}

/// Random sends, receives (which dead-letter into the other partition), re-queues across partitions, deletes
/// and clock steps, with the inboxes delivered at random moments: once everything in flight has arrived,
/// every message sent and not deleted is in exactly one queue. Prints the seed of a failing run.
#[tokio::test]
async fn moves_between_partitions_neither_lose_nor_duplicate_under_random_interleavings() {
    for seed in 1..=40u64 {
        let outcome = tokio::spawn(random_run(seed)).await;
        if let Err(panic) = outcome {
            panic!("seed {seed} failed (rerun with this seed): {panic:?}");
        }
    }
}

async fn random_run(seed: u64) {
    let pair = Pair::new();
    let mut rng = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
    let dead = [
        pair.queue_in(0, "dead", QueueConfig::default()).await,
        pair.queue_in(1, "dead", QueueConfig::default()).await,
    ];
    // Each partition's working queue dead-letters into the other partition's.
    let work = [
        pair.queue_in(0, "work", dead_lettering_to(&dead[1], 2))
            .await,
        pair.queue_in(1, "work", dead_lettering_to(&dead[0], 2))
            .await,
    ];
    let queues = [
        work[0].clone(),
        work[1].clone(),
        dead[0].clone(),
        dead[1].clone(),
    ];
    let (mut sent, mut deleted) = (
        std::collections::HashSet::new(),
        std::collections::HashSet::new(),
    );
    for step in 0..300 {
        let key = &queues[rng.below(queues.len())];
        match rng.below(10) {
            0..=2 => {
                sent.insert(pair.send(key, &format!("{seed}-{step}")).await.message_id);
            }
            3..=5 => {
                let visibility_s = rng.below(2) as u64;
                let got = pair.receive(key, visibility_s).await;
                for message in got {
                    let receipt = message.receipt.expect("a receive has receipts");
                    match rng.below(3) {
                        0 => {
                            let engine = pair.engine_of(key);
                            if engine
                                .delete(key, &receipt, ReceiptRule::Current)
                                .await
                                .is_ok()
                            {
                                deleted.insert(message.payload.message_id);
                            }
                        }
                        1 => {
                            let target = &queues[rng.below(queues.len())];
                            if target != key {
                                // A stale receipt is refused; the message then stays where it was.
                                let _ = pair
                                    .engine_of(key)
                                    .move_message(key, &receipt, target)
                                    .await;
                            }
                        }
                        _ => {}
                    }
                }
            }
            6 | 7 => pair.advance_s(1),
            _ => {
                pair.ferry().await;
            }
        }
    }
    while pair.ferry().await > 0 {}
    let found = stored_ids(&pair, &queues).await;
    let expected: std::collections::HashSet<_> = sent.difference(&deleted).copied().collect();
    let duplicated: Vec<_> = found.iter().filter(|(_, n)| **n > 1).collect();
    assert!(
        duplicated.is_empty(),
        "seed {seed}: {} messages stored more than once, e.g. {:?}",
        duplicated.len(),
        duplicated.first()
    );
    let present: std::collections::HashSet<_> = found.keys().copied().collect();
    assert_eq!(
        present,
        expected,
        "seed {seed}: the queues hold {} messages, {} were sent and not deleted",
        present.len(),
        expected.len()
    );
    assert!(
        pair.inboxes_empty(),
        "seed {seed}: entries left in an inbox"
    );
    engines_consistent(&pair);
}
