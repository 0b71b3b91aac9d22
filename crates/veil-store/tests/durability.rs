//! The redb store under the real engine: what was acknowledged is there after the store is closed and opened
//! again — or dropped without closing (no final checkpoint, what `kill -9` leaves) at any point of the log —,
//! and concurrent submissions share commits (group commit). A crash in the middle of a checkpoint (redb
//! committed, the segment not yet removed) is in `tests/faults.rs`.

use std::sync::Arc;
use std::time::Duration;

use veil_core::{
    Engine, ManualClock, MessageRedrivePolicy, NewMessage, QueueConfig, QueueKey, ReceiptKey,
    ReceiptRule, ReceiveOptions, Store, DEFAULT_NAMESPACE,
};
use veil_store::{RedbStore, StoreOptions};

const START_MS: u64 = 1_700_000_000_000;

fn engine_on(store: Arc<RedbStore>, clock: &ManualClock) -> Engine {
    Engine::open(store, Arc::new(clock.clone()), ReceiptKey::new([3; 32])).expect("engine opens")
}

fn orders() -> QueueKey {
    QueueKey::new(DEFAULT_NAMESPACE, "orders")
}

fn receive_one(visibility_ms: u64) -> ReceiveOptions {
    ReceiveOptions {
        dead_letter: veil_core::DeadLetterTiming::OnReceive,
        max_messages: 1,
        visibility_ms: Some(visibility_ms),
        wait_ms: Some(0),
        attempt_id: None,
        consumer: None,
    }
}

/// How a test's first store stops before the reopen.
#[derive(Clone, Copy, Debug)]
enum Stop {
    /// `close`: the writer commits and checkpoints everything, as at a clean shutdown.
    Close,
    /// `abandon`: the writer stops without its final checkpoint, as `kill -9` leaves the disk; the reopen
    /// replays the log.
    DropWithoutClose,
}

impl Stop {
    fn stop(self, store: &RedbStore) {
        match self {
            Stop::Close => store.close(),
            Stop::DropWithoutClose => store.abandon(),
        }
    }
}

/// Segments of a few KiB: the scenarios below rotate the log and run checkpoints before they stop.
fn tiny_segments() -> StoreOptions {
    StoreOptions {
        wal_segment_bytes_max: 512,
        ..StoreOptions::default()
    }
}

#[tokio::test]
async fn acknowledged_changes_survive_reopening_the_store() {
    for stop in [Stop::Close, Stop::DropWithoutClose] {
        for options in [StoreOptions::default, tiny_segments] {
            acknowledged_changes_survive(stop, options).await;
        }
    }
}

async fn acknowledged_changes_survive(stop: Stop, options: fn() -> StoreOptions) {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(START_MS);
    let receipt;
    {
        let store = Arc::new(RedbStore::open(dir.path(), options()).unwrap());
        let engine = engine_on(store.clone(), &clock);
        engine
            .create_queue(orders(), QueueConfig::default())
            .await
            .unwrap();
        let sends = (0..3).map(|i| NewMessage::new(format!("m{i}"))).collect();
        engine.send(&orders(), sends).await.unwrap();
        let got = engine
            .receive(&orders(), receive_one(60_000))
            .await
            .unwrap();
        receipt = got[0].receipt.clone().unwrap();
        let second = engine
            .receive(&orders(), receive_one(60_000))
            .await
            .unwrap();
        engine
            .delete(
                &orders(),
                second[0].receipt.as_deref().unwrap(),
                ReceiptRule::AnyIssued,
            )
            .await
            .unwrap();
        stop.stop(&store);
    }
    let store = Arc::new(RedbStore::open(dir.path(), options()).unwrap());
    let engine = engine_on(store, &clock);
    let stats = engine.stats(&orders()).unwrap();
    assert_eq!(
        (stats.visible, stats.hidden),
        (1, 1),
        "one visible, one still hidden, one deleted ({stop:?})"
    );
    assert_eq!(stats.counters.sends, 3);
    assert_eq!(stats.counters.deletes, 1);
    // The receipt from before the restart still settles its message.
    engine
        .delete(&orders(), &receipt, ReceiptRule::Current)
        .await
        .unwrap();
    clock.advance(Duration::from_secs(61));
    let left = engine.receive(&orders(), receive_one(1_000)).await.unwrap();
    assert_eq!(left.len(), 1);
    assert_eq!(left[0].payload.body.as_ref(), b"m2");
}

#[tokio::test]
async fn concurrent_sends_share_commits() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(START_MS);
    let store = Arc::new(RedbStore::open(dir.path(), StoreOptions::default()).unwrap());
    let engine = Arc::new(engine_on(store.clone(), &clock));
    engine
        .create_queue(orders(), QueueConfig::default())
        .await
        .unwrap();
    let before = store.commit_count();
    let senders = 200;
    let tasks: Vec<_> = (0..senders)
        .map(|i| {
            let engine = engine.clone();
            tokio::spawn(async move {
                engine
                    .send(&orders(), vec![NewMessage::new(format!("{i}"))])
                    .await
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap().unwrap();
    }
    let commits = store.commit_count() - before;
    assert!(
        commits < senders,
        "{senders} concurrent sends took {commits} commits: no group commit"
    );
    assert_eq!(engine.stats(&orders()).unwrap().visible, senders);
}

#[tokio::test]
async fn deleting_a_queue_removes_its_messages_from_disk() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(START_MS);
    let store = Arc::new(RedbStore::open(dir.path(), StoreOptions::default()).unwrap());
    let engine = engine_on(store.clone(), &clock);
    engine
        .create_queue(orders(), QueueConfig::default())
        .await
        .unwrap();
    engine
        .send(&orders(), vec![NewMessage::new("x")])
        .await
        .unwrap();
    engine.delete_queue(&orders()).await.unwrap();
    let mut left = 0;
    store.load_messages(&mut |_, _, _| left += 1).unwrap();
    assert_eq!(left, 0);
    assert!(store.load_queues().unwrap().queues.is_empty());
}

#[tokio::test]
async fn a_batch_of_deletes_or_visibility_changes_is_one_commit() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(START_MS);
    let store = Arc::new(RedbStore::open(dir.path(), StoreOptions::default()).unwrap());
    let engine = engine_on(store.clone(), &clock);
    engine
        .create_queue(orders(), QueueConfig::default())
        .await
        .unwrap();
    engine
        .send(
            &orders(),
            (0..10).map(|i| NewMessage::new(format!("{i}"))).collect(),
        )
        .await
        .unwrap();
    let options = ReceiveOptions {
        dead_letter: veil_core::DeadLetterTiming::OnReceive,
        max_messages: 10,
        visibility_ms: Some(60_000),
        wait_ms: Some(0),
        attempt_id: None,
        consumer: None,
    };
    let got = engine.receive(&orders(), options).await.unwrap();
    let receipts: Vec<&str> = got.iter().map(|m| m.receipt.as_deref().unwrap()).collect();

    let before = store.commit_count();
    let change = veil_core::VisibilityChange {
        receipts: veil_core::ReceiptRule::Current,
        visibility_ms: 0,
        since_receive_ms_max: None,
        not_past_expiry: false,
    };
    let entries: Vec<_> = receipts[..5].iter().map(|r| (*r, change)).collect();
    let changed = engine
        .change_visibility_batch(&orders(), &entries)
        .await
        .unwrap();
    assert!(changed.iter().all(Result::is_ok));
    assert_eq!(
        store.commit_count() - before,
        1,
        "five visibility changes, one commit"
    );

    let before = store.commit_count();
    let outcomes = engine
        .delete_batch(&orders(), &receipts[5..], ReceiptRule::AnyIssued)
        .await
        .unwrap();
    assert!(outcomes.iter().all(Result::is_ok));
    assert_eq!(store.commit_count() - before, 1, "five deletes, one commit");
    assert_eq!(engine.stats(&orders()).unwrap().visible, 5);
}

fn with_own_redrive(body: &str, dead_letter_queue: Option<QueueKey>) -> NewMessage {
    NewMessage {
        redrive: Some(MessageRedrivePolicy {
            max_receive_count: 1,
            dead_letter_queue,
        }),
        ..NewMessage::new(body.to_owned())
    }
}

#[tokio::test]
async fn a_message_redrive_is_on_disk_until_its_message_leaves() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(START_MS);
    let dead = QueueKey::new(DEFAULT_NAMESPACE, "dead");
    {
        let store = Arc::new(RedbStore::open(dir.path(), StoreOptions::default()).unwrap());
        let engine = engine_on(store.clone(), &clock);
        engine
            .create_queue(orders(), QueueConfig::default())
            .await
            .unwrap();
        let sends = vec![
            with_own_redrive("moves", Some(dead.clone())),
            with_own_redrive("deleted", None),
        ];
        engine.send(&orders(), sends).await.unwrap();
        let got = engine.receive(&orders(), receive_one(1_000)).await.unwrap();
        assert_eq!(got[0].payload.body.as_ref(), b"moves");
        let second = engine
            .receive(&orders(), receive_one(60_000))
            .await
            .unwrap();
        engine
            .delete(
                &orders(),
                second[0].receipt.as_deref().unwrap(),
                ReceiptRule::AnyIssued,
            )
            .await
            .unwrap();
        let mut redrives = 0;
        store.load_redrives(&mut |_, _, _| redrives += 1).unwrap();
        assert_eq!(redrives, 1, "the deleted message's redrive left with it");
        store.close();
    }
    clock.advance(Duration::from_secs(2));
    let store = Arc::new(RedbStore::open(dir.path(), StoreOptions::default()).unwrap());
    let engine = engine_on(store.clone(), &clock);
    let options = ReceiveOptions {
        dead_letter: veil_core::DeadLetterTiming::OnReceive,
        max_messages: 10,
        visibility_ms: Some(60_000),
        wait_ms: Some(0),
        attempt_id: None,
        consumer: None,
    };
    assert!(
        engine
            .receive(&orders(), options.clone())
            .await
            .unwrap()
            .is_empty(),
        "after the restart the message's own rule still moves it"
    );
    let moved = engine.receive(&dead, options).await.unwrap();
    assert_eq!(moved.len(), 1);
    assert_eq!(moved[0].redrive, None);
    assert_eq!(moved[0].payload.dead_letter_source(), Some(&orders()));
    let mut redrives = 0;
    store.load_redrives(&mut |_, _, _| redrives += 1).unwrap();
    assert_eq!(redrives, 0, "the move cleared the rule on disk too");
}

#[test]
fn a_data_directory_of_another_storage_format_is_refused_with_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    {
        let db = redb::Database::create(dir.path().join("veil.redb")).unwrap();
        let txn = db.begin_write().unwrap();
        {
            let mut meta = txn
                .open_table(redb::TableDefinition::<&str, &[u8]>::new("meta"))
                .unwrap();
            meta.insert("next_queue_id", 5u64.to_be_bytes().as_slice())
                .unwrap();
        }
        txn.commit().unwrap();
    }
    let error = match RedbStore::open(dir.path(), StoreOptions::default()) {
        Ok(_) => panic!("a store without a format version must be refused"),
        Err(error) => error.to_string(),
    };
    assert!(error.contains("storage format"), "{error}");
}

#[tokio::test]
async fn a_data_directory_written_by_this_build_opens_again() {
    // Once a queue exists the file has data, so reopening it succeeds only if the first open stamped it with
    // this build's format version (an unstamped file with data is refused, as above).
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(START_MS);
    {
        let store = Arc::new(RedbStore::open(dir.path(), StoreOptions::default()).unwrap());
        let engine = engine_on(store.clone(), &clock);
        engine
            .create_queue(orders(), QueueConfig::default())
            .await
            .unwrap();
        store.close();
    }
    let store = Arc::new(RedbStore::open(dir.path(), StoreOptions::default()).unwrap());
    assert!(engine_on(store, &clock).queue_exists(&orders()));
}

/// One step of the workload below: send a message, and every third step receive one and delete it.
async fn workload_step(engine: &Engine, step: usize) {
    let body = format!("{step:04}-{}", "b".repeat(200));
    engine
        .send(&orders(), vec![NewMessage::new(body)])
        .await
        .unwrap();
    if step % 3 == 2 {
        let got = engine
            .receive(&orders(), receive_one(60_000))
            .await
            .unwrap();
        engine
            .delete(
                &orders(),
                got[0].receipt.as_deref().unwrap(),
                ReceiptRule::AnyIssued,
            )
            .await
            .unwrap();
    }
}

#[tokio::test]
async fn a_drop_without_close_at_any_point_of_the_log_keeps_every_acknowledged_change() {
    // Steps 0..n with 512-byte segments: the stop falls in the first segment, right after a rotation, while a
    // checkpoint may be running, and after many checkpoints.
    for steps in [0, 1, 2, 3, 5, 8, 13, 21, 34] {
        let dir = tempfile::tempdir().unwrap();
        let clock = ManualClock::new(START_MS);
        {
            let store = Arc::new(RedbStore::open(dir.path(), tiny_segments()).unwrap());
            let engine = engine_on(store.clone(), &clock);
            engine
                .create_queue(orders(), QueueConfig::default())
                .await
                .unwrap();
            for step in 0..steps {
                workload_step(&engine, step).await;
            }
            store.abandon();
        }
        let store = Arc::new(RedbStore::open(dir.path(), tiny_segments()).unwrap());
        let engine = engine_on(store.clone(), &clock);
        let stats = engine.stats(&orders()).unwrap();
        let deletes = (steps / 3) as u64;
        assert_eq!(
            (stats.visible, stats.hidden),
            (steps as u64 - deletes, 0),
            "after {steps} steps"
        );
        assert_eq!(
            (stats.counters.sends, stats.counters.deletes),
            (steps as u64, deletes),
            "after {steps} steps"
        );
        // The bodies left are exactly the ones never deleted (each delete took the oldest).
        let mut left = Vec::new();
        loop {
            let got = engine
                .receive(&orders(), receive_one(60_000))
                .await
                .unwrap();
            let Some(message) = got.first() else { break };
            left.push(String::from_utf8_lossy(&message.payload.body)[..4].to_owned());
        }
        let expected: Vec<String> = (deletes as usize..steps)
            .map(|step| format!("{step:04}"))
            .collect();
        assert_eq!(left, expected, "after {steps} steps");
        store.close();
    }
}
