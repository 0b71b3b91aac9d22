//! Shared fixtures of the engine tests: an engine over the in-memory store with a manual clock.

#![allow(dead_code, clippy::new_without_default)]

use std::sync::Arc;
use std::time::Duration;

use veil_core::memory_store::MemoryStore;
use veil_core::*;

pub const START_MS: Millis = 1_700_000_000_000;
pub const SECRET: [u8; 32] = [42; 32];

/// What a disk store does at a restart of the engine over it.
pub type RestartHook<S> = Box<dyn Fn(&S)>;

/// An engine over `store` (the in-memory store unless a test brings its own) with a manual clock.
pub struct Harness<S: Store = MemoryStore> {
    pub clock: ManualClock,
    pub store: Arc<S>,
    pub engine: Arc<Engine>,
    /// Runs at a restart before the new engine opens: a disk store closes (or crashes) and opens again here.
    on_restart: Option<RestartHook<S>>,
}

impl Harness {
    pub fn new() -> Self {
        Self::over(Arc::new(MemoryStore::new()))
    }
}

impl<S: Store> Harness<S> {
    /// An engine over `store`, its clock at [`START_MS`].
    pub fn over(store: Arc<S>) -> Self {
        let clock = ManualClock::new(START_MS);
        let engine = Arc::new(
            Engine::open(
                store.clone(),
                Arc::new(clock.clone()),
                ReceiptKey::new(SECRET),
            )
            .unwrap(),
        );
        Self {
            clock,
            store,
            engine,
            on_restart: None,
        }
    }

    /// Runs `hook` at every restart, before the new engine reads the store.
    pub fn on_restart(mut self, hook: impl Fn(&S) + 'static) -> Self {
        self.on_restart = Some(Box::new(hook));
        self
    }

    /// A new engine over the same store and clock: what a process restart looks like to the engine.
    pub fn restart(&mut self) {
        if let Some(hook) = &self.on_restart {
            hook(&self.store);
        }
        self.engine = Arc::new(
            Engine::open(
                self.store.clone(),
                Arc::new(self.clock.clone()),
                ReceiptKey::new(SECRET),
            )
            .unwrap(),
        );
    }

    pub async fn queue(&self, name: &str) -> QueueKey {
        self.queue_with(name, QueueConfig::default()).await
    }

    pub async fn queue_with(&self, name: &str, config: QueueConfig) -> QueueKey {
        let key = QueueKey::new(DEFAULT_NAMESPACE, name);
        self.engine.create_queue(key.clone(), config).await.unwrap();
        key
    }

    pub async fn send(&self, key: &QueueKey, body: &str) -> SentMessage {
        self.engine
            .send(key, vec![NewMessage::new(body.to_owned())])
            .await
            .unwrap()
            .remove(0)
    }

    pub async fn receive(
        &self,
        key: &QueueKey,
        max: usize,
        visibility_s: Option<u64>,
    ) -> Vec<Message> {
        let options = ReceiveOptions {
            dead_letter: veil_core::DeadLetterTiming::OnReceive,
            max_messages: max,
            visibility_ms: visibility_s.map(|s| s * 1_000),
            wait_ms: Some(0),
            attempt_id: None,
            consumer: None,
        };
        self.engine.receive(key, options).await.unwrap()
    }

    pub async fn receive_one(&self, key: &QueueKey, visibility_s: u64) -> Message {
        let mut got = self.receive(key, 1, Some(visibility_s)).await;
        assert_eq!(got.len(), 1, "expected one message");
        got.remove(0)
    }

    pub fn advance_s(&self, seconds: u64) {
        self.clock.advance(Duration::from_secs(seconds));
    }

    pub fn stats(&self, key: &QueueKey) -> QueueStats {
        self.engine.stats(key).unwrap()
    }
}

pub fn body(message: &Message) -> &str {
    std::str::from_utf8(&message.payload.body).unwrap()
}

pub fn sqs_change(visibility_s: u64) -> VisibilityChange {
    VisibilityChange {
        receipts: veil_core::ReceiptRule::Current,
        visibility_ms: visibility_s * 1_000,
        since_receive_ms_max: Some(12 * limits::HOUR_MS),
        not_past_expiry: false,
    }
}

/// The in-memory store, counting submissions: how a test sees that a batch reached the store as one commit.
#[derive(Default)]
pub struct CountingStore {
    inner: MemoryStore,
    submissions: std::sync::atomic::AtomicUsize,
    /// `StoreOp::PutHistory` operations submitted (the delivery history's writes).
    history_writes: std::sync::atomic::AtomicUsize,
}

impl CountingStore {
    /// Submissions so far, empty ones (barriers) included.
    pub fn submissions(&self) -> usize {
        self.submissions.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// `StoreOp::PutHistory` operations so far.
    pub fn history_writes(&self) -> usize {
        self.history_writes
            .load(std::sync::atomic::Ordering::SeqCst)
    }
}

impl Store for CountingStore {
    fn load_queues(&self) -> Result<store::Snapshot, StoreError> {
        self.inner.load_queues()
    }
    fn load_messages(
        &self,
        each: &mut dyn FnMut(QueueId, Seq, MessageState),
    ) -> Result<(), StoreError> {
        self.inner.load_messages(each)
    }
    fn load_redrives(
        &self,
        each: &mut dyn FnMut(QueueId, Seq, MessageRedrivePolicy),
    ) -> Result<(), StoreError> {
        self.inner.load_redrives(each)
    }
    fn load_groups(&self, each: &mut dyn FnMut(QueueId, Seq, String)) -> Result<(), StoreError> {
        self.inner.load_groups(each)
    }
    fn load_dedup(
        &self,
        each: &mut dyn FnMut(QueueId, String, DedupEntry),
    ) -> Result<(), StoreError> {
        self.inner.load_dedup(each)
    }
    fn load_move_tasks(&self) -> Result<Vec<MoveTaskRecord>, StoreError> {
        self.inner.load_move_tasks()
    }
    fn load_history(
        &self,
        each: &mut dyn FnMut(QueueId, Seq, DeliveryHistory),
    ) -> Result<(), StoreError> {
        self.inner.load_history(each)
    }
    fn submit(&self, ops: Vec<StoreOp>) -> store::Commit {
        self.submissions
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let history_writes = ops
            .iter()
            .filter(|op| matches!(op, StoreOp::PutHistory { .. }))
            .count();
        self.history_writes
            .fetch_add(history_writes, std::sync::atomic::Ordering::SeqCst);
        self.inner.submit(ops)
    }
    fn read_payloads(
        &self,
        queue: QueueId,
        seqs: &[Seq],
    ) -> Result<Vec<Option<Payload>>, StoreError> {
        self.inner.read_payloads(queue, seqs)
    }
}
