//! Bit flips in the redb file (docs/reliability.md "Storage faults"): a store closed cleanly, one byte of
//! `veil.redb` flipped at a random offset, then opened and read in full. Every outcome must be an error or
//! exactly the data that was written (a flip in free space changes nothing); never a panic, never different
//! data served. The seed is printed; `VEIL_FLIP_SEED=<seed>` replays a run, `VEIL_FLIPS=<n>` runs more flips.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use veil_core::{
    Engine, ManualClock, NewMessage, QueueConfig, QueueKey, ReceiptKey, ReceiveOptions, Store,
    DEFAULT_NAMESPACE,
};
use veil_store::{RedbStore, StoreOptions};

const START_MS: u64 = 1_700_000_000_000;
/// Flips per run in CI; each opens a copy of a small store.
const FLIPS_DEFAULT: u64 = 100;
const QUEUES: usize = 3;
const MESSAGES_PER_QUEUE: usize = 40;

/// splitmix64: a seed is all it takes to replay a run.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

/// Log segments of 64 KiB: each open allocates one, and the test opens many stores.
fn small_segments() -> StoreOptions {
    StoreOptions {
        wal_segment_bytes_max: 64 * 1024,
        ..StoreOptions::default()
    }
}

/// Everything a start-up would serve, as text to compare.
fn everything(dir: &Path) -> Result<String, String> {
    let store = RedbStore::open(dir, small_segments()).map_err(|e| e.to_string())?;
    let snapshot = store.load_queues().map_err(|e| e.to_string())?;
    let mut states = BTreeMap::new();
    store
        .load_messages(&mut |queue, seq, state| {
            states.insert((queue, seq), format!("{state:?}"));
        })
        .map_err(|e| e.to_string())?;
    let mut payloads = Vec::new();
    for &(queue, seq) in states.keys() {
        let payload = store
            .read_payloads(queue, &[seq])
            .map_err(|e| e.to_string())?;
        payloads.push(format!("{payload:?}"));
    }
    store.close();
    Ok(format!("{snapshot:?}\n{states:?}\n{payloads:?}"))
}

async fn written_store(dir: &Path) {
    let store = Arc::new(RedbStore::open(dir, small_segments()).expect("opens"));
    let engine = Engine::open(
        store.clone(),
        Arc::new(ManualClock::new(START_MS)),
        ReceiptKey::new([3; 32]),
    )
    .expect("engine opens");
    for q in 0..QUEUES {
        let key = QueueKey::new(DEFAULT_NAMESPACE, format!("queue-{q}"));
        engine
            .create_queue(key.clone(), QueueConfig::default())
            .await
            .expect("creates");
        for m in 0..MESSAGES_PER_QUEUE {
            let body = format!("queue {q} message {m} {}", "z".repeat(m * 7));
            engine
                .send(&key, vec![NewMessage::new(body)])
                .await
                .expect("sends");
        }
        let mut receive = ReceiveOptions::new(5);
        receive.wait_ms = Some(0);
        engine.receive(&key, receive).await.expect("receives");
    }
    drop(engine);
    store.close();
}

#[tokio::test]
async fn a_flipped_byte_in_the_store_file_is_an_error_or_changes_nothing_never_other_data() {
    let seed = std::env::var("VEIL_FLIP_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(1, |d| d.as_nanos() as u64)
        });
    let flips = std::env::var("VEIL_FLIPS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(FLIPS_DEFAULT);
    println!("bit flips: seed {seed} (VEIL_FLIP_SEED={seed} replays), {flips} flips");
    let original = tempfile::tempdir().expect("a temporary directory");
    written_store(original.path()).await;
    let expected = everything(original.path()).expect("the undamaged store reads");
    let file_bytes = std::fs::read(original.path().join("veil.redb")).expect("reads");
    let mut rng = Rng(seed);
    let (mut refused, mut unchanged, mut served_other, mut panicked) = (0, 0, 0, 0);
    for flip in 0..flips {
        let dir = tempfile::tempdir().expect("a temporary directory");
        for entry in std::fs::read_dir(original.path()).expect("lists") {
            let entry = entry.expect("entry");
            std::fs::copy(entry.path(), dir.path().join(entry.file_name())).expect("copies");
        }
        let offset = (rng.next() % file_bytes.len() as u64) as usize;
        let bit = 1u8 << (rng.next() % 8);
        let mut damaged = file_bytes.clone();
        damaged[offset] ^= bit;
        std::fs::write(dir.path().join("veil.redb"), &damaged).expect("writes");
        let path = dir.path().to_path_buf();
        match std::panic::catch_unwind(|| everything(&path)) {
            Err(_) => {
                panicked += 1;
                println!("flip {flip}: byte {offset} bit {bit:#04x}: PANIC");
            }
            Ok(Err(_)) => refused += 1,
            Ok(Ok(got)) if got == expected => unchanged += 1,
            Ok(Ok(_)) => {
                served_other += 1;
                println!("flip {flip}: byte {offset} bit {bit:#04x}: served other data");
            }
        }
    }
    println!(
        "bit flips: seed {seed}, file {} bytes, {flips} flips: {refused} refused with an error, \
         {unchanged} changed nothing, {served_other} served other data, {panicked} panicked",
        file_bytes.len()
    );
    assert_eq!(
        (served_other, panicked),
        (0, 0),
        "seed {seed}: a flipped byte was served as data or panicked"
    );
}
