//! Measures the engine's in-memory cost per stored message: heap bytes held by the index after sending N
//! messages (and after hiding some of them), counted exactly by a counting allocator. The store here drops
//! every operation, so only the engine's own memory is counted. Run:
//! `cargo run --release -p veil-core --example index_memory -- 1000000 200000`

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use veil_core::store::{Commit, Snapshot};
use veil_core::*;

/// Counts live heap bytes.
struct Counting;

static LIVE_BYTES: AtomicUsize = AtomicUsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE_BYTES.fetch_add(layout.size(), Ordering::Relaxed);
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE_BYTES.fetch_sub(layout.size(), Ordering::Relaxed);
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// A store that keeps nothing: the example measures the engine alone.
struct NullStore;

impl Store for NullStore {
    fn load_queues(&self) -> Result<Snapshot, StoreError> {
        Ok(Snapshot::default())
    }
    fn load_messages(
        &self,
        _each: &mut dyn FnMut(QueueId, Seq, MessageState),
    ) -> Result<(), StoreError> {
        Ok(())
    }
    fn load_redrives(
        &self,
        _each: &mut dyn FnMut(QueueId, Seq, MessageRedrivePolicy),
    ) -> Result<(), StoreError> {
        Ok(())
    }
    fn load_groups(&self, _each: &mut dyn FnMut(QueueId, Seq, String)) -> Result<(), StoreError> {
        Ok(())
    }
    fn load_dedup(
        &self,
        _each: &mut dyn FnMut(QueueId, String, DedupEntry),
    ) -> Result<(), StoreError> {
        Ok(())
    }
    fn load_history(
        &self,
        _each: &mut dyn FnMut(QueueId, Seq, DeliveryHistory),
    ) -> Result<(), StoreError> {
        Ok(())
    }
    fn load_move_tasks(&self) -> Result<Vec<MoveTaskRecord>, StoreError> {
        Ok(Vec::new())
    }
    fn submit(&self, _ops: Vec<StoreOp>) -> Commit {
        Box::pin(std::future::ready(Ok(())))
    }
    fn read_payloads(
        &self,
        _queue: QueueId,
        seqs: &[Seq],
    ) -> Result<Vec<Option<Payload>>, StoreError> {
        Ok(seqs.iter().map(|_| None).collect())
    }
}

fn main() {
    let mut args = std::env::args().skip(1);
    let stored: usize = args
        .next()
        .and_then(|a| a.parse().ok())
        .unwrap_or(1_000_000);
    let hidden: usize = args
        .next()
        .and_then(|a| a.parse().ok())
        .unwrap_or(stored / 5);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let engine = Engine::open(Arc::new(NullStore), Arc::new(SystemClock), ReceiptKey::new([0; 32])).expect("open");
        let key = QueueKey::new(DEFAULT_NAMESPACE, "memory");
        let config = QueueConfig { inflight_max: u32::MAX, ..QueueConfig::default() };
        engine.create_queue(key.clone(), config).await.expect("create");
        let before = LIVE_BYTES.load(Ordering::Relaxed);
        for _ in 0..stored / 10 {
            let batch = (0..10).map(|_| NewMessage::new(bytes::Bytes::new())).collect();
            engine.send(&key, batch).await.expect("send");
        }
        let after_send = LIVE_BYTES.load(Ordering::Relaxed);
        let per_message = (after_send - before) as f64 / stored as f64;
        println!("{stored} stored, all visible: {per_message:.1} bytes of engine memory per message");
        // A consumer as the SQS front-end names one: its address and access key.
        let consumer = Consumer::new(Protocol::Sqs, Some("127.0.0.1:40000".parse().expect("address")), Some("AKIDEXAMPLE".into()));
        let options = ReceiveOptions { max_messages: 1_000, visibility_ms: Some(3_600_000), wait_ms: Some(0), dead_letter: DeadLetterTiming::OnReceive, attempt_id: None, consumer: Some(consumer) };
        let mut received = 0;
        while received < hidden {
            // Payload reads return None from the null store, so count through the statistics instead.
            engine.receive(&key, options.clone()).await.expect("receive");
            received = engine.stats(&key).expect("stats").hidden as usize;
        }
        let after_hide = LIVE_BYTES.load(Ordering::Relaxed);
        let per_message = (after_hide - before) as f64 / stored as f64;
        println!("{stored} stored, {received} hidden: {per_message:.1} bytes of engine memory per message");
    });
}
