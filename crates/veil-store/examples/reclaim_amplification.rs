//! Write amplification of bodies written once (docs/decisions/0013-bodies-written-once.md): a queue where one
//! message in ten is kept for the whole run and the other nine are received and deleted at once. Every segment
//! then keeps about a tenth of its bodies, falls under the reclaim threshold (25% live), and its survivors are
//! copied forward. Prints the bytes the log took from commits, the bytes relocations copied, their ratio, and
//! the kept segments' size against the bodies still stored.
//!
//! `cargo run --release -p veil-store --example reclaim_amplification -- [DIR] [MESSAGES] [SEGMENT_KIB]
//! [BODY_BYTES]` (defaults: a temporary directory, 200,000 messages of 1,024 bytes, 4,096 KiB segments;
//! relaxed durability, since syncs do not change what is written). Given a DIR, the data directory is left
//! there: its `body-` files hold relocation records (how `fuzz/corpus/store_wal`'s relocation seed was made).

use std::path::Path;
use std::sync::Arc;

use veil_core::{
    Engine, ManualClock, NewMessage, QueueConfig, QueueKey, ReceiptKey, ReceiptRule,
    ReceiveOptions, DEFAULT_NAMESPACE,
};
use veil_store::{Durability, RedbStore, StoreOptions};
use veil_telemetry::StoreMetrics;

const KEEP_ONE_IN: usize = 10;

fn body_segment_bytes(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .flatten()
                .filter(|e| e.file_name().to_string_lossy().starts_with("body-"))
                .filter_map(|e| e.metadata().ok())
                .map(|m| m.len())
                .sum()
        })
        .unwrap_or(0)
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let temporary = tempfile::tempdir()?;
    let dir = args
        .next()
        .map_or_else(|| temporary.path().to_path_buf(), Into::into);
    let messages: usize = args.next().map_or(Ok(200_000), |a| a.parse())?;
    let segment_kib: u64 = args.next().map_or(Ok(4096), |a| a.parse())?;
    let body_bytes: usize = args.next().map_or(Ok(1024), |a| a.parse())?;

    let metrics = StoreMetrics::default();
    let options = StoreOptions {
        durability: Durability::Relaxed,
        wal_segment_bytes_max: segment_kib * 1024,
        metrics: metrics.clone(),
        ..StoreOptions::default()
    };
    let store = Arc::new(RedbStore::open(&dir, options)?);
    let engine = Engine::open(
        store.clone(),
        Arc::new(ManualClock::new(1_700_000_000_000)),
        ReceiptKey::new([3; 32]),
    )?;
    let queue = QueueKey::new(DEFAULT_NAMESPACE, "amplification");
    engine
        .create_queue(queue.clone(), QueueConfig::default())
        .await?;
    let body = "a".repeat(body_bytes);
    let mut kept = 0usize;
    for first in (0..messages).step_by(10) {
        let batch = (0..10).map(|_| NewMessage::new(body.clone())).collect();
        engine.send(&queue, batch).await?;
        let mut options = ReceiveOptions::new(10);
        options.wait_ms = Some(0);
        options.visibility_ms = Some(24 * 3_600_000);
        for (offset, message) in engine
            .receive(&queue, options)
            .await?
            .into_iter()
            .enumerate()
        {
            if (first + offset) % KEEP_ONE_IN == 0 {
                kept += 1;
                continue;
            }
            if let Some(receipt) = message.receipt.as_deref() {
                engine
                    .delete(&queue, receipt, ReceiptRule::AnyIssued)
                    .await?;
            }
        }
    }
    store.checkpoint_now()?;
    let written = metrics.written_bytes();
    let relocated = metrics.relocated_bytes();
    let sent = (messages * body_bytes) as u64;
    let live = (kept * body_bytes) as u64;
    let on_disk = body_segment_bytes(&dir);
    println!(
        "messages {messages} of {body_bytes} B, one in {KEEP_ONE_IN} kept ({kept}), {segment_kib} KiB segments"
    );
    println!("log bytes from commits   {written}");
    println!("log bytes relocated      {relocated}");
    println!(
        "relocated / committed    {:.3}   (bound: 1 / (1 - 0.25) - 1 = 0.333)",
        relocated as f64 / written as f64
    );
    println!(
        "bodies sent              {sent}   log bytes per body byte sent {:.3}",
        (written + relocated) as f64 / sent as f64
    );
    println!(
        "kept segments            {on_disk}   per live body byte {:.3}",
        on_disk as f64 / live as f64
    );
    drop(engine);
    store.close();
    Ok(())
}
