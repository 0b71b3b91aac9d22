//! Bodies written once (docs/decisions/0013-bodies-written-once.md): a body that outlives its log segment is
//! read back from that segment, kept as `body-<generation>.log`, across checkpoints and restarts; a segment
//! whose bodies are mostly gone is reclaimed (its survivors copied forward, the file removed); a kept segment
//! that is missing stops start-up, and a damaged one fails the reads of its own messages only.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use veil_core::{
    Engine, ManualClock, NewMessage, QueueConfig, QueueKey, ReceiptKey, ReceiptRule,
    ReceiveOptions, Seq, Store, StoreError, DEFAULT_NAMESPACE,
};
use veil_store::{Fault, FaultPlan, RedbStore, StoreOptions};

const START_MS: u64 = 1_700_000_000_000;
const BODY_BYTES: usize = 1000;

/// Segments of 64 KiB: about sixty 1 KB messages each, so that a few hundred messages span several.
fn small_segments() -> StoreOptions {
    StoreOptions {
        wal_segment_bytes_max: 64 * 1024,
        ..StoreOptions::default()
    }
}

fn orders() -> QueueKey {
    QueueKey::new(DEFAULT_NAMESPACE, "orders")
}

fn open(dir: &Path) -> (Arc<RedbStore>, Engine) {
    open_with(dir, small_segments())
}

fn open_with(dir: &Path, options: StoreOptions) -> (Arc<RedbStore>, Engine) {
    let store = Arc::new(RedbStore::open(dir, options).expect("opens"));
    let engine = Engine::open(
        store.clone(),
        Arc::new(ManualClock::new(START_MS)),
        ReceiptKey::new([3; 32]),
    )
    .expect("engine opens");
    (store, engine)
}

fn body(n: usize) -> String {
    format!("{n:06}-{}", "b".repeat(BODY_BYTES))
}

/// A short-lived message's body: the same size as the kept ones, told apart from them.
fn churn_body(n: usize) -> String {
    format!("churn-{n:06}-{}", "c".repeat(BODY_BYTES))
}

/// The kept body segments in `dir`, oldest first.
fn body_segments(dir: &Path) -> Vec<PathBuf> {
    let mut found: Vec<PathBuf> = std::fs::read_dir(dir)
        .expect("lists")
        .map(|e| e.expect("entry").path())
        .filter(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("body-"))
        })
        .collect();
    found.sort();
    found
}

/// A new store whose `orders` queue holds `count` messages, checkpointed: their bodies are in kept segments.
async fn store_with_messages(dir: &Path, count: usize) -> (Arc<RedbStore>, Engine) {
    let (store, engine) = open(dir);
    engine
        .create_queue(orders(), QueueConfig::default())
        .await
        .expect("creates");
    send(&engine, 0, count).await;
    store.checkpoint_now().expect("checkpoints");
    (store, engine)
}

/// The messages `store_with_messages(dir, 300)` keeps once every number not divisible by ten is deleted.
fn tenth() -> BTreeSet<String> {
    (0..300).filter(|n| n % 10 == 0).map(body).collect()
}

/// Sends `count` messages numbered from `first`, ten per batch.
async fn send(engine: &Engine, first: usize, count: usize) {
    let numbers: Vec<usize> = (first..first + count).collect();
    for chunk in numbers.chunks(10) {
        let batch = chunk.iter().map(|&n| NewMessage::new(body(n))).collect();
        engine.send(&orders(), batch).await.expect("sends");
    }
}

/// Every stored message's seq and body, read through the store as a receive reads them.
fn stored_bodies(store: &RedbStore) -> Vec<(Seq, Result<String, StoreError>)> {
    let mut keys = Vec::new();
    store
        .load_messages(&mut |queue, seq, _| keys.push((queue, seq)))
        .expect("loads");
    keys.into_iter()
        .map(|(queue, seq)| {
            let read = store.read_payloads(queue, &[seq]).map(|mut payloads| {
                let payload = payloads
                    .pop()
                    .flatten()
                    .expect("a stored message has a payload");
                String::from_utf8_lossy(&payload.body).into_owned()
            });
            (seq, read)
        })
        .collect()
}

/// The bodies of the stored messages of `orders` (short-lived ones left by a crash aside).
fn readable_bodies(store: &RedbStore) -> BTreeSet<String> {
    stored_bodies(store)
        .into_iter()
        .map(|(seq, read)| read.unwrap_or_else(|e| panic!("seq {seq}: {e}")))
        .filter(|body| !body.starts_with("churn-"))
        .collect()
}

/// Receives every visible message and deletes those `drop` picks by number; returns how many it deleted.
async fn delete_where(engine: &Engine, drop: impl Fn(usize) -> bool) -> usize {
    let mut deleted = 0;
    loop {
        let mut options = ReceiveOptions::new(10);
        options.wait_ms = Some(0);
        options.visibility_ms = Some(3_600_000);
        let got = engine.receive(&orders(), options).await.expect("receives");
        if got.is_empty() {
            return deleted;
        }
        for message in got {
            let number: usize = String::from_utf8_lossy(&message.payload.body)[..6]
                .parse()
                .expect("numbered");
            if drop(number) {
                let receipt = message.receipt.as_deref().expect("a receipt");
                engine
                    .delete(&orders(), receipt, ReceiptRule::AnyIssued)
                    .await
                    .expect("deletes");
                deleted += 1;
            }
        }
    }
}

/// Sends and deletes short-lived messages until the writer has closed `segments` more segments: each
/// closing checkpoints the previous one and appends the relocation a checkpoint planned.
async fn churn(engine: &Engine, dir: &Path, segments: usize) {
    let wal = |dir: &Path| {
        std::fs::read_dir(dir)
            .expect("lists")
            .filter_map(|e| {
                let name = e.expect("entry").file_name().to_string_lossy().into_owned();
                name.strip_prefix("wal-")?
                    .strip_suffix(".log")?
                    .parse::<u64>()
                    .ok()
            })
            .max()
            .unwrap_or(0)
    };
    let target = wal(dir) + segments as u64;
    let churn_key = QueueKey::new(DEFAULT_NAMESPACE, "churn");
    drop(
        engine
            .create_queue(churn_key.clone(), QueueConfig::default())
            .await,
    );
    while wal(dir) < target {
        let batch = (0..10).map(|n| NewMessage::new(churn_body(n))).collect();
        engine.send(&churn_key, batch).await.expect("sends");
        engine.purge(&churn_key, None).await.expect("purges");
    }
}

#[tokio::test]
async fn a_body_that_outlives_its_segment_is_read_from_the_kept_segment_after_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let expected: BTreeSet<String> = (0..300).map(body).collect();
    {
        let (store, engine) = store_with_messages(dir.path(), 300).await;
        assert!(
            body_segments(dir.path()).len() >= 3,
            "300 KB of bodies stay in their 64 KiB segments: {:?}",
            body_segments(dir.path())
        );
        assert_eq!(readable_bodies(&store), expected);
        drop(engine);
        store.close();
    }
    let (store, _engine) = open(dir.path());
    assert_eq!(readable_bodies(&store), expected);
}

#[tokio::test]
async fn a_segment_whose_bodies_are_mostly_gone_is_reclaimed_and_its_survivors_stay_readable() {
    let dir = tempfile::tempdir().unwrap();
    let survivors = tenth();
    {
        let (store, engine) = store_with_messages(dir.path(), 300).await;
        let before = body_segments(dir.path());
        assert_eq!(delete_where(&engine, |n| n % 10 != 0).await, 270);
        churn(&engine, dir.path(), 6).await;
        store.checkpoint_now().expect("checkpoints");
        let after = body_segments(dir.path());
        let still_kept: Vec<&PathBuf> = before.iter().filter(|p| after.contains(p)).collect();
        assert!(
            still_kept.is_empty(),
            "every segment that kept a tenth of its bodies was reclaimed: {still_kept:?} of {before:?}"
        );
        assert_eq!(readable_bodies(&store), survivors);
        drop(engine);
        store.close();
    }
    let (store, _engine) = open(dir.path());
    assert_eq!(readable_bodies(&store), survivors);
}

#[tokio::test]
async fn a_crash_with_a_relocation_not_yet_checkpointed_loses_no_body() {
    let dir = tempfile::tempdir().unwrap();
    let survivors = tenth();
    {
        let (store, engine) = store_with_messages(dir.path(), 300).await;
        delete_where(&engine, |n| n % 10 != 0).await;
        drop(engine);
        store.close();
    }
    {
        // After the reopen, the first checkpoint plans a relocation, the writer appends it to the segment it
        // closes next, and that segment's checkpoint (the second) fails: the relocation is in the log only.
        let options = StoreOptions {
            faults: Some(Arc::new(FaultPlan::new(Fault::CheckpointEio, 2))),
            ..small_segments()
        };
        let (store, engine) = open_with(dir.path(), options);
        let churn_key = QueueKey::new(DEFAULT_NAMESPACE, "churn");
        engine
            .create_queue(churn_key.clone(), QueueConfig::default())
            .await
            .expect("creates");
        for round in 0.. {
            assert!(round < 10_000, "the injected checkpoint failure never came");
            let batch = (0..10).map(|n| NewMessage::new(churn_body(n))).collect();
            if engine.send(&churn_key, batch).await.is_err() {
                break;
            }
        }
        drop(engine);
        store.abandon();
    }
    assert!(
        unapplied_relocations(dir.path()) > 0,
        "the log holds a relocation no checkpoint applied"
    );
    let before = body_segments(dir.path());
    let (store, _engine) = open(dir.path());
    assert_eq!(readable_bodies(&store), survivors);
    let after = body_segments(dir.path());
    assert!(
        before.iter().any(|p| !after.contains(p)),
        "recovery applied the relocation and removed the segment it emptied: {before:?} → {after:?}"
    );
}

/// Relocation records in the log segments no checkpoint applied yet (`wal-` files).
fn unapplied_relocations(dir: &Path) -> usize {
    std::fs::read_dir(dir)
        .expect("lists")
        .map(|e| e.expect("entry").path())
        .filter(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("wal-"))
        })
        .map(|p| {
            let bytes = std::fs::read(&p).expect("reads");
            veil_store::fuzzing::parse_segment(&bytes)
                .expect("parses")
                .relocations
                .len()
        })
        .sum()
}

#[tokio::test]
async fn a_missing_body_segment_stops_start_up_with_a_corruption_error() {
    let dir = tempfile::tempdir().unwrap();
    {
        let (store, engine) = store_with_messages(dir.path(), 200).await;
        drop(engine);
        store.close();
    }
    let missing = body_segments(dir.path()).remove(0);
    std::fs::remove_file(&missing).expect("removes");
    match RedbStore::open(dir.path(), small_segments()) {
        Err(StoreError::Corrupt(why)) => {
            let name = missing.file_name().expect("a name").to_string_lossy();
            assert!(why.contains(name.as_ref()), "{why}");
        }
        Err(other) => panic!("{other}"),
        Ok(_) => panic!("a missing body segment must stop start-up"),
    }
}

#[tokio::test]
async fn a_damaged_body_segment_fails_the_reads_of_its_own_messages_only() {
    let dir = tempfile::tempdir().unwrap();
    {
        let (store, engine) = store_with_messages(dir.path(), 200).await;
        drop(engine);
        store.close();
    }
    let segments = body_segments(dir.path());
    assert!(segments.len() >= 2, "{segments:?}");
    let damaged = &segments[0];
    let mut bytes = std::fs::read(damaged).expect("reads");
    // Halfway into a 64 KiB segment: inside one of its records of ten sends.
    bytes[32 * 1024] ^= 0x10;
    std::fs::write(damaged, &bytes).expect("writes");

    let (store, _engine) = open(dir.path());
    let reads = stored_bodies(&store);
    let failed: Vec<&StoreError> = reads.iter().filter_map(|(_, r)| r.as_ref().err()).collect();
    assert!(!failed.is_empty(), "the damaged record's messages fail");
    for error in &failed {
        let StoreError::Corrupt(why) = error else {
            panic!("not reported as corruption: {error}");
        };
        let name = damaged.file_name().expect("a name").to_string_lossy();
        assert!(why.contains(name.as_ref()), "{why}");
    }
    let served = reads.iter().filter(|(_, r)| r.is_ok()).count();
    assert!(
        served >= 150,
        "the messages of other records are served: {served} of {}",
        reads.len()
    );
    let mut stored = 0;
    store
        .load_messages(&mut |_, _, _| stored += 1)
        .expect("loads");
    assert_eq!(stored, 200, "no message is lost over the damage");
}

#[tokio::test]
async fn a_segment_kept_after_closing_early_gives_back_its_preallocated_space() {
    let dir = tempfile::tempdir().unwrap();
    let full_size = StoreOptions::default();
    let kept_bytes = |dir: &Path| -> u64 {
        body_segments(dir)
            .iter()
            .map(|p| std::fs::metadata(p).expect("metadata").len())
            .sum()
    };
    {
        // A checkpoint on demand closes a 64 MiB segment holding ten bodies.
        let (store, engine) = open_with(dir.path(), full_size.clone());
        engine
            .create_queue(orders(), QueueConfig::default())
            .await
            .expect("creates");
        send(&engine, 0, 10).await;
        store.checkpoint_now().expect("checkpoints");
        let kept = kept_bytes(dir.path());
        assert!(
            (10 * BODY_BYTES as u64..64 * 1024).contains(&kept),
            "the kept segment is cut after its last record: {kept} bytes"
        );
        // Ten more, left for recovery to replay and keep.
        send(&engine, 10, 10).await;
        drop(engine);
        store.abandon();
    }
    let (store, _engine) = open_with(dir.path(), full_size);
    let kept = kept_bytes(dir.path());
    assert!(
        (20 * BODY_BYTES as u64..128 * 1024).contains(&kept),
        "a segment kept by recovery is cut too: {kept} bytes"
    );
    assert_eq!(readable_bodies(&store), (0..20).map(body).collect());
}
