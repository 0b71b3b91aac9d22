//! Disk space comes back: bodies stay in the log segments that wrote them (docs/decisions/
//! 0013-bodies-written-once.md), so once a large queue's messages are gone, the checkpoint after removes
//! their segments; redb's file only ever held their small rows.

use std::sync::Arc;

use veil_core::{
    Engine, ManualClock, NewMessage, QueueConfig, QueueKey, ReceiptKey, DEFAULT_NAMESPACE,
};
use veil_store::{RedbStore, StoreOptions};

const MESSAGE_BYTES: usize = 24 * 1024;
/// Batches of ten: 72 MiB in all, above the size from which start-up compacts (64 MiB).
const BATCHES: usize = 300;

fn store_file_bytes(dir: &std::path::Path) -> u64 {
    std::fs::metadata(dir.join("veil.redb"))
        .expect("the store file")
        .len()
}

/// Bytes of the kept body segments (`body-*.log`).
fn body_segment_bytes(dir: &std::path::Path) -> u64 {
    std::fs::read_dir(dir)
        .expect("lists")
        .map(|entry| entry.expect("entry"))
        .filter(|entry| entry.file_name().to_string_lossy().starts_with("body-"))
        .map(|entry| entry.metadata().expect("metadata").len())
        .sum()
}

#[tokio::test]
async fn the_space_of_purged_messages_is_returned_by_the_next_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    let key = QueueKey::new(DEFAULT_NAMESPACE, "large");
    {
        let store = Arc::new(RedbStore::open(dir.path(), StoreOptions::default()).expect("opens"));
        let engine = Engine::open(
            store.clone(),
            Arc::new(ManualClock::new(1_700_000_000_000)),
            ReceiptKey::new([3; 32]),
        )
        .expect("engine opens");
        let config = QueueConfig {
            message_size_bytes_max: MESSAGE_BYTES as u32,
            ..QueueConfig::default()
        };
        engine
            .create_queue(key.clone(), config)
            .await
            .expect("creates");
        let body = "x".repeat(MESSAGE_BYTES);
        for _ in 0..BATCHES {
            let batch = (0..10).map(|_| NewMessage::new(body.clone())).collect();
            engine.send(&key, batch).await.expect("sends");
        }
        store.checkpoint_now().expect("checkpoints");
        let bodies = (BATCHES * 10 * MESSAGE_BYTES) as u64;
        let kept = body_segment_bytes(dir.path());
        assert!(
            kept >= bodies,
            "the bodies stay in their log segments: {kept} bytes kept for {bodies}"
        );
        let rows = store_file_bytes(dir.path());
        assert!(
            rows < bodies / 20,
            "the store file holds rows, not bodies: {rows} bytes for {bodies} of bodies"
        );
        engine.purge(&key, None).await.expect("purges");
        store.checkpoint_now().expect("checkpoints");
        assert_eq!(
            body_segment_bytes(dir.path()),
            0,
            "the checkpoint after the purge removed the segments"
        );
        drop(engine);
        store.close();
    }
    let store = RedbStore::open(dir.path(), StoreOptions::default()).expect("opens");
    assert_eq!(body_segment_bytes(dir.path()), 0);
    drop(store);
}
