//! What verifying every page checksum at open costs (docs/reliability.md "Storage faults"): fills a store
//! with `<MiB>` of 4 KiB messages that stay queued (so they live in `veil.redb`), closes it, then opens the
//! redb file alternately with and without redb's integrity check and prints the median of each.
//!
//! `cargo run --release -p veil-store --example verify_cost -- <empty or filled dir> [MiB, default 1024] [runs]`

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use veil_core::{Engine, ManualClock, NewMessage, QueueConfig, QueueKey, ReceiptKey};
use veil_store::{Durability, RedbStore, StoreOptions};

const BODY_BYTES: usize = 4096;
const BATCH: usize = 10;

fn fill(dir: &Path, mib: usize) {
    let options = StoreOptions {
        durability: Durability::Relaxed,
        ..StoreOptions::default()
    };
    let store = Arc::new(RedbStore::open(dir, options).expect("opens"));
    let engine = Engine::open(
        store.clone(),
        Arc::new(ManualClock::new(1_700_000_000_000)),
        ReceiptKey::new([3; 32]),
    )
    .expect("engine");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime");
    let key = QueueKey::new(veil_core::DEFAULT_NAMESPACE, "backlog");
    runtime.block_on(async {
        let config = QueueConfig {
            message_size_bytes_max: BODY_BYTES as u32 * 2,
            ..QueueConfig::default()
        };
        engine
            .create_queue(key.clone(), config)
            .await
            .expect("creates");
        let batches = mib * 1024 * 1024 / BODY_BYTES / BATCH;
        for b in 0..batches {
            let sends = (0..BATCH)
                .map(|i| NewMessage::new(format!("{b:08}{i:02}{}", "v".repeat(BODY_BYTES - 10))))
                .collect();
            engine.send(&key, sends).await.expect("sends");
        }
    });
    drop(engine);
    store.close();
}

fn open_ms(path: &Path, verify: bool) -> f64 {
    let started = Instant::now();
    let db = redb::Database::builder()
        .set_check_integrity_on_open(verify)
        .create(path)
        .expect("opens");
    let elapsed = started.elapsed();
    drop(db);
    elapsed.as_secs_f64() * 1e3
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

fn main() {
    let mut args = std::env::args().skip(1);
    let dir = args.next().expect("usage: verify_cost <dir> [MiB] [runs]");
    let mib: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(1024);
    let runs: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(5);
    let dir = Path::new(&dir);
    let file = dir.join("veil.redb");
    if !file.exists() {
        let started = Instant::now();
        fill(dir, mib);
        println!("filled {} MiB in {:?}", mib, started.elapsed());
    }
    let bytes = std::fs::metadata(&file).expect("the store file").len();
    // Warm the page cache once, so that both variants read from memory (a cold start adds the disk's read
    // time of the whole file to the verified open only).
    open_ms(&file, true);
    let (mut plain, mut verified) = (Vec::new(), Vec::new());
    for _ in 0..runs {
        plain.push(open_ms(&file, false));
        verified.push(open_ms(&file, true));
        std::thread::sleep(Duration::from_millis(100));
    }
    println!(
        "veil.redb {:.0} MiB, {runs} runs each, warm page cache: open {:.1} ms, open with integrity check {:.1} ms \
         (medians)",
        bytes as f64 / 1048576.0,
        median(plain),
        median(verified)
    );
}
