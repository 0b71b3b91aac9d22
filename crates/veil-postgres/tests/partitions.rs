//! Partitions against a real PostgreSQL (skipped without `VEIL_TEST_POSTGRES_URL`; ./scripts/test starts
//! one): the partition count is fixed once and places the queues that were there before; a partition's store
//! loads only its queues, hands out ids from its own range and refuses a queue of another partition; each
//! partition's lease fences its own writes and no other's; nodes see each other alive.

use std::time::Duration;

use veil_core::*;
use veil_postgres::partition::{self, first_queue_id, partition_of};
use veil_postgres::partition_lease::{self, PartitionLease};
use veil_postgres::testing::test_options;
use veil_postgres::{connect, LeaderAddrs, PgOptions, PgStore, Scope, SharedWriter};

const PARTITIONS: u32 = 4;
const TERM: Duration = Duration::from_secs(30);

fn queue(id: QueueId, name: &str) -> QueueRecord {
    QueueRecord {
        id,
        key: QueueKey::new(DEFAULT_NAMESPACE, name),
        config: QueueConfig::default(),
        created_at: 1_000,
        modified_at: 2_000,
        seq_reserved: 64,
    }
}

/// A queue name that hashes to `partition`, the `n`th such.
fn name_in(partition: u32, n: usize) -> String {
    (0..)
        .map(|i| format!("queue-{i}"))
        .filter(|name| {
            partition_of(&QueueKey::new(DEFAULT_NAMESPACE, name), PARTITIONS) == partition
        })
        .nth(n)
        .expect("some name hashes to every partition")
}

fn addrs(rpc: &str) -> LeaderAddrs {
    LeaderAddrs { rpc: rpc.into() }
}

/// A database with eight queues made before partitions (ids 1 to 8), and the cluster's count fixed.
async fn established(test: &str) -> Option<(PgOptions, Vec<QueueRecord>)> {
    let options = test_options(test)?;
    let whole = PgStore::open(options.clone(), Scope::Whole).expect("opens");
    let before: Vec<_> = (1..=8).map(|id| queue(id, &format!("old-{id}"))).collect();
    whole
        .submit(
            before
                .iter()
                .cloned()
                .map(|record| StoreOp::PutQueue(Box::new(record)))
                .collect(),
        )
        .await
        .expect("the queues are written");
    whole
        .submit(vec![StoreOp::PutNextQueueId(9)])
        .await
        .expect("the counter is written");
    whole.close();
    let mut client = connect(&options).await.expect("connects");
    assert_eq!(
        partition::establish(&mut client, PARTITIONS, partition::Shard::ALONE)
            .await
            .unwrap(),
        PARTITIONS
    );
    Some((options, before))
}

async fn take(options: &PgOptions, partition: u32, node: &str) -> PartitionLease {
    let client = connect(options).await.unwrap();
    partition_lease::try_acquire(&client, partition, node, &addrs(node), TERM)
        .await
        .unwrap()
        .expect("the partition is free")
}

fn open(options: &PgOptions, lease: PartitionLease) -> PgStore {
    PgStore::open(
        options.clone(),
        Scope::Partition {
            partition: lease.partition,
            count: PARTITIONS,
            epoch: lease.epoch,
        },
    )
    .expect("the partition's store opens")
}

#[tokio::test]
async fn the_partition_count_is_fixed_once_and_places_the_queues_already_there() {
    let Some((options, before)) = established("partitions_fixed").await else {
        return;
    };
    let mut client = connect(&options).await.unwrap();
    assert_eq!(
        partition::establish(&mut client, 16, partition::Shard::ALONE)
            .await
            .unwrap(),
        PARTITIONS,
        "a later setting does not change the count in force"
    );
    assert_eq!(partition::count(&client).await.unwrap(), Some(PARTITIONS));
    for record in &before {
        let row = client
            .query_one(
                "SELECT partition FROM veil_queue WHERE id = $1",
                &[&(record.id as i64)],
            )
            .await
            .unwrap();
        assert_eq!(
            row.get::<_, i32>(0) as u32,
            partition_of(&record.key, PARTITIONS),
            "{} sits in its hash's partition",
            record.key.name
        );
    }
    assert_eq!(partition_lease::table(&client).await.unwrap().len(), 4);
}

#[tokio::test]
async fn a_partitions_store_loads_only_its_queues_and_numbers_new_ones_from_its_range() {
    let Some((options, before)) = established("partitions_load").await else {
        return;
    };
    for partition in 0..PARTITIONS {
        let store = open(&options, take(&options, partition, "node-a").await);
        let snapshot = store.load_queues().unwrap();
        let mut loaded: Vec<_> = snapshot.queues.iter().map(|(r, _)| r.id).collect();
        loaded.sort_unstable();
        let expected: Vec<_> = before
            .iter()
            .filter(|r| partition_of(&r.key, PARTITIONS) == partition)
            .map(|r| r.id)
            .collect();
        assert_eq!(
            loaded, expected,
            "partition {partition} loads its own queues"
        );
        let first = if partition == 0 {
            9
        } else {
            first_queue_id(partition) as u64
        };
        assert_eq!(
            snapshot.next_queue_id, first,
            "partition {partition} continues its own id range"
        );
        store
            .submit(vec![
                StoreOp::PutQueue(Box::new(queue(first, &name_in(partition, 0)))),
                StoreOp::PutNextQueueId(first + 1),
            ])
            .await
            .expect("a queue of the partition is written");
        store.close();
        let reopened = open(&options, take(&options, partition, "node-a").await);
        assert_eq!(reopened.load_queues().unwrap().next_queue_id, first + 1);
        reopened.close();
    }
}

#[tokio::test]
async fn a_partitions_store_refuses_a_queue_of_another_partition() {
    let Some((options, _)) = established("partitions_refuse").await else {
        return;
    };
    let store = open(&options, take(&options, 1, "node-a").await);
    match store
        .submit(vec![StoreOp::PutQueue(Box::new(queue(
            1 << 40,
            &name_in(2, 0),
        )))])
        .await
    {
        Err(StoreError::Io(message)) => {
            assert!(message.contains("belongs to partition 2"), "{message}")
        }
        other => panic!("expected the queue refused, got {other:?}"),
    }
}

#[tokio::test]
async fn a_partitions_lease_fences_its_own_writes_and_no_others() {
    let Some((options, _)) = established("partitions_fence").await else {
        return;
    };
    let mine = take(&options, 1, "node-a").await;
    let other = take(&options, 2, "node-a").await;
    let (store, untouched) = (open(&options, mine), open(&options, other));
    store
        .submit(vec![StoreOp::PutQueue(Box::new(queue(
            1 << 40,
            &name_in(1, 0),
        )))])
        .await
        .expect("the owner writes");
    let client = connect(&options).await.unwrap();
    partition_lease::release(&client, "node-a", mine)
        .await
        .unwrap();
    let taken = take(&options, 1, "node-b").await;
    assert_eq!(taken.epoch, mine.epoch + 1, "a takeover bumps the epoch");
    match store
        .submit(vec![StoreOp::PutQueue(Box::new(queue(
            1 << 40,
            &name_in(1, 0),
        )))])
        .await
    {
        Err(StoreError::Unavailable(message)) => {
            assert!(message.contains("no longer owns partition 1"), "{message}")
        }
        other => panic!("expected the deposed owner fenced, got {other:?}"),
    }
    untouched
        .submit(vec![StoreOp::PutQueue(Box::new(queue(
            2 << 40,
            &name_in(2, 0),
        )))])
        .await
        .expect("another partition's owner writes on");
}

#[tokio::test]
async fn a_shared_writer_fails_a_fenced_partition_alone_and_commits_the_others_of_its_group() {
    let Some((mut options, _)) = established("partitions_shared_writer").await else {
        return;
    };
    options.writers = 1; // one lane: both partitions' submissions commit in the same groups
    let writer = SharedWriter::start(options.clone()).expect("the writer starts");
    let shared = |lease: PartitionLease| {
        PgStore::open_shared(
            options.clone(),
            Scope::Partition {
                partition: lease.partition,
                count: PARTITIONS,
                epoch: lease.epoch,
            },
            &writer,
        )
        .expect("the partition's store opens")
    };
    let (one, two) = (
        take(&options, 1, "node-a").await,
        take(&options, 2, "node-a").await,
    );
    let (deposed, kept) = (shared(one), shared(two));
    let (a, b) = futures_util::future::join(
        deposed.submit(vec![StoreOp::PutQueue(Box::new(queue(
            1 << 40,
            &name_in(1, 0),
        )))]),
        kept.submit(vec![StoreOp::PutQueue(Box::new(queue(
            2 << 40,
            &name_in(2, 0),
        )))]),
    )
    .await;
    a.expect("both owners write");
    b.expect("both owners write");

    let client = connect(&options).await.unwrap();
    partition_lease::release(&client, "node-a", one)
        .await
        .unwrap();
    take(&options, 1, "node-b").await;
    let (fenced, written) = futures_util::future::join(
        deposed.submit(vec![StoreOp::PutQueue(Box::new(queue(
            (1 << 40) + 1,
            &name_in(1, 1),
        )))]),
        kept.submit(vec![StoreOp::PutQueue(Box::new(queue(
            (2 << 40) + 1,
            &name_in(2, 1),
        )))]),
    )
    .await;
    match fenced {
        Err(StoreError::Unavailable(message)) => {
            assert!(message.contains("no longer owns partition 1"), "{message}")
        }
        other => panic!("expected the deposed partition fenced, got {other:?}"),
    }
    written.expect("the partition still owned commits, whatever shared its group");
    assert!(
        *deposed.failed().borrow(),
        "the fenced partition's store failed"
    );
    assert!(
        !*kept.failed().borrow(),
        "the other partition's store did not"
    );
    let names = |partition: i32| {
        let client = &client;
        async move {
            client
                .query_one(
                    "SELECT count(*) FROM veil_queue WHERE partition = $1 AND id >= $2",
                    &[&partition, &(i64::from(partition) << 40)],
                )
                .await
                .unwrap()
                .get::<_, i64>(0)
        }
    };
    assert_eq!(
        names(1).await,
        1,
        "nothing of the fenced submission committed"
    );
    assert_eq!(names(2).await, 2);
    kept.submit(vec![StoreOp::PutQueue(Box::new(queue(
        (2 << 40) + 2,
        &name_in(2, 2),
    )))])
    .await
    .expect("and it goes on");
    deposed.close();
    kept.close();
}

#[tokio::test]
async fn a_live_lease_is_never_taken_and_a_renewal_says_which_are_still_held() {
    let Some((options, _)) = established("partitions_lease").await else {
        return;
    };
    let client = connect(&options).await.unwrap();
    let a = take(&options, 0, "node-a").await;
    let b = take(&options, 3, "node-a").await;
    assert_eq!(
        partition_lease::try_acquire(&client, 0, "node-b", &addrs("b"), TERM)
            .await
            .unwrap(),
        None,
        "a live lease is not taken"
    );
    partition_lease::release(&client, "node-a", b)
        .await
        .unwrap();
    take(&options, 3, "node-b").await;
    let held = partition_lease::renew(&client, "node-a", &[a, b], TERM)
        .await
        .unwrap();
    assert_eq!(held, vec![0], "partition 3 went to node-b");
    let table = partition_lease::table(&client).await.unwrap();
    let owners: Vec<_> = table
        .iter()
        .map(|row| (row.node.as_str(), row.live))
        .collect();
    assert_eq!(
        owners,
        vec![("node-a", true), ("", false), ("", false), ("node-b", true)]
    );
    assert_eq!(table[3].addrs, addrs("node-b"));
}

#[tokio::test]
async fn nodes_see_each_other_alive_until_they_leave() {
    let Some(options) = test_options("partitions_nodes") else {
        return;
    };
    PgStore::open(options.clone(), Scope::Whole)
        .unwrap()
        .close();
    let client = connect(&options).await.unwrap();
    let beat = |node: &'static str| {
        let client = &client;
        async move { partition_lease::heartbeat(client, node, &addrs(node), TERM).await }
    };
    assert_eq!(beat("node-b").await.unwrap(), vec!["node-b"]);
    assert_eq!(beat("node-a").await.unwrap(), vec!["node-a", "node-b"]);
    partition_lease::leave(&client, "node-b").await.unwrap();
    assert_eq!(beat("node-a").await.unwrap(), vec!["node-a"]);
    partition_lease::heartbeat(&client, "node-c", &addrs("c"), Duration::ZERO)
        .await
        .unwrap();
    assert_eq!(
        beat("node-a").await.unwrap(),
        vec!["node-a"],
        "a node whose term ran out is not counted"
    );
}

/// An engine over partition `lease`'s store, placed in it, with a manual clock at `now`.
fn engine_over(options: &PgOptions, lease: &PartitionLease, now: Millis) -> Engine {
    Engine::open(
        std::sync::Arc::new(open(options, *lease)),
        std::sync::Arc::new(ManualClock::new(now)),
        ReceiptKey::new([9; 32]),
    )
    .expect("the engine opens")
    .placed(veil_core::inbox::Placement {
        partition: lease.partition,
        count: PARTITIONS,
    })
}

#[tokio::test]
async fn a_dead_letter_crosses_partitions_through_the_inbox_once_across_restarts() {
    let Some((options, _)) = established("partitions_inbox").await else {
        return;
    };
    let (source_lease, dlq_lease) = (take(&options, 0, "a").await, take(&options, 1, "b").await);
    let dlq = QueueKey::new(DEFAULT_NAMESPACE, name_in(1, 0));
    let source = QueueKey::new(DEFAULT_NAMESPACE, name_in(0, 0));
    let now = 1_700_000_000_000;
    let receiving = engine_over(&options, &dlq_lease, now);
    receiving
        .create_queue(dlq.clone(), QueueConfig::default())
        .await
        .unwrap();
    let sending = engine_over(&options, &source_lease, now);
    let config = QueueConfig {
        redrive_policy: Some(RedrivePolicy {
            dead_letter_queue: dlq.clone(),
            max_receive_count: 1,
        }),
        ..QueueConfig::default()
    };
    sending.create_queue(source.clone(), config).await.unwrap();
    let sent = sending
        .send(&source, vec![NewMessage::new("poison".to_owned())])
        .await
        .unwrap()
        .remove(0);
    let receive = |visibility_ms| ReceiveOptions {
        dead_letter: DeadLetterTiming::OnReceive,
        max_messages: 10,
        visibility_ms: Some(visibility_ms),
        wait_ms: Some(0),
        attempt_id: None,
        consumer: None,
    };
    assert_eq!(sending.receive(&source, receive(0)).await.unwrap().len(), 1);
    assert!(
        sending
            .receive(&source, receive(0))
            .await
            .unwrap()
            .is_empty(),
        "the second receive dead-letters it into the other partition's inbox"
    );
    // Both partitions' processes die (nothing closed); the entry is in the database, not in any engine.
    drop((sending, receiving));
    let receiving = engine_over(&options, &dlq_lease, now);
    assert_eq!(receiving.message_count(&dlq).unwrap(), 0);
    assert_eq!(receiving.drain_inbox().await.unwrap(), 1);
    assert_eq!(receiving.drain_inbox().await.unwrap(), 0, "accepted once");
    drop(receiving);
    let receiving = engine_over(&options, &dlq_lease, now);
    assert_eq!(
        receiving.drain_inbox().await.unwrap(),
        0,
        "the acceptance removed the entry in the same commit"
    );
    let moved = receiving.receive(&dlq, receive(30_000)).await.unwrap();
    assert_eq!(moved.len(), 1, "the dead letter is there, once");
    assert_eq!(moved[0].payload.message_id, sent.message_id);
    assert_eq!(&moved[0].payload.body[..], b"poison");
    assert_eq!(moved[0].payload.dead_letter_source(), Some(&source));
    let sending = engine_over(&options, &source_lease, now);
    assert_eq!(
        sending.message_count(&source).unwrap(),
        0,
        "and gone from its source"
    );
}
