//! The store reports through the `StoreMetrics` handle it is given: each group commit moves the fsync and
//! written-bytes counters, a checkpoint counts, and opening records the recovery time.

use std::sync::Arc;

use veil_core::{
    Engine, ManualClock, NewMessage, QueueConfig, QueueKey, ReceiptKey, DEFAULT_NAMESPACE,
};
use veil_store::{Durability, RedbStore, StoreOptions};
use veil_telemetry::Telemetry;

const START_MS: u64 = 1_700_000_000_000;

fn open(dir: &std::path::Path, telemetry: &Telemetry, durability: Durability) -> Arc<RedbStore> {
    let options = StoreOptions {
        durability,
        metrics: telemetry.store(),
        ..StoreOptions::default()
    };
    Arc::new(RedbStore::open(dir, options).expect("opens"))
}

fn engine_on(store: Arc<RedbStore>) -> Engine {
    let clock = ManualClock::new(START_MS);
    Engine::open(store, Arc::new(clock), ReceiptKey::new([5; 32])).expect("engine opens")
}

#[tokio::test]
async fn a_durable_commit_moves_the_fsync_and_written_bytes_counters() {
    let dir = tempfile::tempdir().expect("tempdir");
    let telemetry = Telemetry::default();
    let store = open(dir.path(), &telemetry, Durability::Durable);
    let engine = engine_on(store.clone());
    let metrics = telemetry.store();
    let (fsyncs, bytes) = (metrics.fsyncs(), metrics.written_bytes());
    let key = QueueKey::new(DEFAULT_NAMESPACE, "orders");
    engine
        .create_queue(key.clone(), QueueConfig::default())
        .await
        .expect("creates");
    engine
        .send(&key, vec![NewMessage::new("hello")])
        .await
        .expect("sends");
    assert!(metrics.fsyncs() >= fsyncs + 2, "one sync per commit");
    assert_eq!(
        metrics.fsyncs(),
        store.commit_count(),
        "every durable commit syncs once"
    );
    assert!(
        metrics.written_bytes() > bytes + 5,
        "the record holds at least the body"
    );
    store.checkpoint_now().expect("checkpoints");
    assert_eq!(metrics.checkpoints(), 1);
    let text = telemetry.encode_text().expect("encodes");
    assert!(
        text.contains("veil_store_commit_duration_seconds_count 2"),
        "{text}"
    );
    drop(engine);
    store.close();
}

#[tokio::test]
async fn a_relaxed_commit_writes_bytes_without_an_fsync() {
    let dir = tempfile::tempdir().expect("tempdir");
    let telemetry = Telemetry::default();
    let store = open(dir.path(), &telemetry, Durability::Relaxed);
    let engine = engine_on(store.clone());
    let key = QueueKey::new(DEFAULT_NAMESPACE, "orders");
    engine
        .create_queue(key, QueueConfig::default())
        .await
        .expect("creates");
    let metrics = telemetry.store();
    assert_eq!(metrics.fsyncs(), 0);
    assert!(metrics.written_bytes() > 0);
    drop(engine);
    store.close();
}

#[test]
fn opening_the_store_records_its_recovery_time() {
    let dir = tempfile::tempdir().expect("tempdir");
    let telemetry = Telemetry::default();
    let store = open(dir.path(), &telemetry, Durability::Durable);
    store.close();
    let text = telemetry.encode_text().expect("encodes");
    let line = text
        .lines()
        .find(|line| line.starts_with("veil_store_recovery_duration_seconds "))
        .expect("the gauge is exposed");
    let seconds: f64 = line
        .rsplit(' ')
        .next()
        .and_then(|value| value.parse().ok())
        .expect("a number");
    assert!(seconds > 0.0, "{line}");
}
