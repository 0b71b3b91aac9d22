//! The write-ahead log under crashes: a store stopped without its final checkpoint (what `kill -9` leaves) is
//! rebuilt from the log at the next open; a log whose tail was cut at any byte, or damaged, gives back exactly
//! the records before the damage (none of which was acknowledged after the damage point); damage anywhere but
//! the newest segment stops start-up instead of skipping acknowledged changes.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use veil_core::{
    Engine, ManualClock, NewMessage, QueueConfig, QueueKey, ReceiptKey, ReceiptRule,
    ReceiveOptions, Store, StoreError, DEFAULT_NAMESPACE,
};
use veil_store::{RedbStore, StoreOptions};

const START_MS: u64 = 1_700_000_000_000;

/// Segments far smaller than the default's 64 MiB, so that copying a crashed data directory is quick.
fn small_segments() -> StoreOptions {
    StoreOptions {
        wal_segment_bytes_max: 64 * 1024,
        ..StoreOptions::default()
    }
}

fn orders() -> QueueKey {
    QueueKey::new(DEFAULT_NAMESPACE, "orders")
}

fn engine_on(store: Arc<RedbStore>) -> Engine {
    Engine::open(
        store,
        Arc::new(ManualClock::new(START_MS)),
        ReceiptKey::new([3; 32]),
    )
    .expect("engine opens")
}

fn segments(dir: &Path) -> Vec<PathBuf> {
    let mut found: Vec<PathBuf> = std::fs::read_dir(dir)
        .expect("lists")
        .map(|e| e.expect("entry").path())
        .filter(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("wal-"))
        })
        .collect();
    found.sort();
    found
}

fn copy_dir(from: &Path, to: &Path) {
    for entry in std::fs::read_dir(from).expect("lists") {
        let entry = entry.expect("entry");
        std::fs::copy(entry.path(), to.join(entry.file_name())).expect("copies");
    }
}

/// Bodies a receive of everything returns after reopening `dir`.
async fn bodies_after_reopening(dir: &Path) -> Vec<String> {
    let store = Arc::new(RedbStore::open(dir, small_segments()).expect("opens"));
    let engine = engine_on(store.clone());
    let mut options = ReceiveOptions::new(10);
    options.wait_ms = Some(0);
    let mut bodies: Vec<String> = match engine.receive(&orders(), options).await {
        Ok(got) => got
            .iter()
            .map(|m| String::from_utf8_lossy(&m.payload.body).into_owned())
            .collect(),
        Err(veil_core::EngineError::QueueNotFound(_)) => Vec::new(),
        Err(other) => panic!("receive failed: {other}"),
    };
    bodies.sort();
    drop(engine);
    store.close();
    bodies
}

/// Where each record of a segment ends, walking the record headers (the format in ARCHITECTURE.md: an 8-byte
/// magic, then `length: u32 LE`, `crc: u32 LE`, `length` bytes; zeros after the last record).
fn record_ends(segment: &[u8]) -> Vec<u64> {
    let mut ends = Vec::new();
    let mut at = 8;
    while let Some(header) = segment.get(at..at + 4) {
        let length = u32::from_le_bytes(header.try_into().expect("4 bytes")) as usize;
        if length == 0 {
            break;
        }
        at += 8 + length;
        ends.push(at as u64);
    }
    ends
}

/// A crashed store with one queue and `sends` messages, each sent (and acknowledged) alone. Returns the
/// newest segment and where the record of each send ends in it.
async fn crashed_store_with_sends(dir: &Path, sends: usize) -> (PathBuf, Vec<u64>) {
    let store = Arc::new(RedbStore::open(dir, small_segments()).expect("opens"));
    let engine = engine_on(store.clone());
    engine
        .create_queue(orders(), QueueConfig::default())
        .await
        .expect("creates");
    for i in 0..sends {
        engine
            .send(&orders(), vec![NewMessage::new(format!("m{i}"))])
            .await
            .expect("sends");
    }
    drop(engine);
    store.abandon();
    let segment = segments(dir).pop().expect("a segment");
    let ends = record_ends(&std::fs::read(&segment).expect("reads"));
    assert_eq!(
        ends.len(),
        sends + 1,
        "the queue's creation, then one record per send"
    );
    (segment, ends[1..].to_vec())
}

#[tokio::test]
async fn a_crash_is_recovered_from_the_log_and_the_log_is_then_removed() {
    let dir = tempfile::tempdir().unwrap();
    let (crashed_segment, _) = crashed_store_with_sends(dir.path(), 3).await;
    assert!(crashed_segment.exists(), "a crash leaves the log");
    let store = RedbStore::open(dir.path(), small_segments()).expect("opens");
    assert_eq!(
        store.recovered().records,
        4,
        "the queue's creation and three sends"
    );
    assert_eq!(store.recovered().torn_bytes, 0);
    assert!(!crashed_segment.exists(), "the replayed segment is removed");
    assert_eq!(segments(dir.path()).len(), 1, "only the new, empty segment");
    drop(store);
    assert_eq!(bodies_after_reopening(dir.path()).await, ["m0", "m1", "m2"]);
}

#[tokio::test]
async fn a_log_cut_at_any_byte_of_its_last_records_keeps_exactly_the_whole_records_before_the_cut()
{
    let crashed = tempfile::tempdir().unwrap();
    let (segment, ends) = crashed_store_with_sends(crashed.path(), 3).await;
    let name = segment.file_name().expect("named").to_owned();
    for cut in ends[0]..=ends[2] {
        let dir = tempfile::tempdir().unwrap();
        copy_dir(crashed.path(), dir.path());
        let file = std::fs::OpenOptions::new()
            .write(true)
            .open(dir.path().join(&name))
            .expect("opens");
        file.set_len(cut).expect("truncates");
        drop(file);
        let expected: Vec<String> = (0..3)
            .filter(|&i| ends[i] <= cut)
            .map(|i| format!("m{i}"))
            .collect();
        assert_eq!(
            bodies_after_reopening(dir.path()).await,
            expected,
            "log cut at byte {cut} (records end at {ends:?})"
        );
    }
}

#[tokio::test]
async fn a_damaged_byte_in_the_last_record_loses_only_that_record() {
    let crashed = tempfile::tempdir().unwrap();
    let (segment, ends) = crashed_store_with_sends(crashed.path(), 3).await;
    let name = segment.file_name().expect("named").to_owned();
    let original = std::fs::read(&segment).expect("reads");
    for at in ends[1]..ends[2] {
        let dir = tempfile::tempdir().unwrap();
        copy_dir(crashed.path(), dir.path());
        let mut damaged = original.clone();
        damaged[at as usize] ^= 0x01;
        std::fs::write(dir.path().join(&name), damaged).expect("writes");
        assert_eq!(
            bodies_after_reopening(dir.path()).await,
            ["m0", "m1"],
            "byte {at} damaged"
        );
    }
}

#[tokio::test]
async fn damage_in_a_segment_before_the_newest_stops_start_up() {
    let dir = tempfile::tempdir().unwrap();
    let (segment, _) = crashed_store_with_sends(dir.path(), 3).await;
    // A newer segment after this one: this one must then have been complete, and a damaged record is damage.
    let generation: u64 = segment.file_name().expect("named").to_string_lossy()
        ["wal-".len().."wal-".len() + 20]
        .parse()
        .expect("a generation");
    let newer = dir.path().join(format!("wal-{:020}.log", generation + 1));
    std::fs::copy(&segment, newer).expect("copies");
    let mut damaged = std::fs::read(&segment).expect("reads");
    let last_end = *record_ends(&damaged).last().expect("records") as usize;
    damaged[last_end - 1] ^= 0x01;
    std::fs::write(&segment, damaged).expect("writes");
    match RedbStore::open(dir.path(), small_segments()) {
        Err(StoreError::Corrupt(why)) => assert!(why.contains("not the newest"), "{why}"),
        Err(other) => panic!("expected corruption, got {other}"),
        Ok(_) => panic!("a store with a damaged older segment opened"),
    }
}

#[tokio::test]
async fn a_deleted_message_reads_as_gone_whether_or_not_its_send_was_checkpointed() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(RedbStore::open(dir.path(), small_segments()).expect("opens"));
    let engine = engine_on(store.clone());
    engine
        .create_queue(orders(), QueueConfig::default())
        .await
        .expect("creates");
    let checkpointed = engine
        .send(&orders(), vec![NewMessage::new("old")])
        .await
        .expect("sends")
        .remove(0);
    store.checkpoint_now().expect("checkpoints");
    let logged = engine
        .send(&orders(), vec![NewMessage::new("new")])
        .await
        .expect("sends")
        .remove(0);
    let queue = checkpointed.queue;
    let both = [checkpointed.seq, logged.seq];
    let before = store.read_payloads(queue, &both).expect("reads");
    assert!(before.iter().all(Option::is_some), "both readable");
    let mut options = ReceiveOptions::new(10);
    options.wait_ms = Some(0);
    for message in engine.receive(&orders(), options).await.expect("receives") {
        let receipt = message.receipt.expect("a receipt");
        engine
            .delete(&orders(), &receipt, ReceiptRule::Current)
            .await
            .expect("deletes");
    }
    assert_eq!(
        store.read_payloads(queue, &both).expect("reads"),
        [None, None],
        "deleted messages are gone, from the log's memory and from redb alike"
    );
}
