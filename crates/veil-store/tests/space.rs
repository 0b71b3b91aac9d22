//! Disk space comes back: once a large queue's messages are gone, the next start-up compacts the store file
//! (redb reuses free pages but returns the file's space only at its end).

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

#[tokio::test]
async fn the_space_of_purged_messages_is_returned_at_the_next_start() {
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
        let full = store_file_bytes(dir.path());
        assert!(
            full > 64 * 1024 * 1024,
            "the messages are in the file: {full} bytes"
        );
        engine.purge(&key, None).await.expect("purges");
        drop(engine);
        store.close();
        assert!(
            store_file_bytes(dir.path()) > full / 2,
            "redb keeps the freed pages inside the file until compaction"
        );
    }
    let store = RedbStore::open(dir.path(), StoreOptions::default()).expect("opens");
    let compacted = store_file_bytes(dir.path());
    assert!(
        compacted < 1024 * 1024,
        "start-up compacted the mostly free file to {compacted} bytes"
    );
    drop(store);
}
