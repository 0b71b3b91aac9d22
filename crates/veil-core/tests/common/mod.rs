//! Shared fixtures of the engine tests: an engine over the in-memory store with a manual clock, or over
//! PostgreSQL when `VEIL_TEST_STORE=postgres` (./scripts/test runs the scenario tests both ways; the server is
//! `VEIL_TEST_POSTGRES_URL`, each harness in a schema of its own, and a restart reopens the store).

#![allow(dead_code, clippy::new_without_default)]

use std::sync::Arc;
use std::time::Duration;

use veil_core::memory_store::MemoryStore;
use veil_core::*;
use veil_postgres::PgStore;

/// `postgres` runs `Harness::new()` over [`PgStore`].
pub const TEST_STORE_ENV: &str = "VEIL_TEST_STORE";

pub const START_MS: Millis = 1_700_000_000_000;
pub const SECRET: [u8; 32] = [42; 32];

/// What a disk store does at a restart of the engine over it.
pub type RestartHook<S> = Box<dyn Fn(&S)>;

/// An engine over `store` (the in-memory store or PostgreSQL, see [`TestStore`], unless a test brings its
/// own) with a manual clock.
pub struct Harness<S: Store = TestStore> {
    pub clock: ManualClock,
    pub store: Arc<S>,
    pub engine: Arc<Engine>,
    /// Runs at a restart before the new engine opens: a disk store closes (or crashes) and opens again here.
    on_restart: Option<RestartHook<S>>,
}

impl Harness {
    /// Over the store `VEIL_TEST_STORE` names (memory by default).
    pub fn new() -> Self {
        let store = TestStore::from_env();
        let postgres = matches!(store, TestStore::Postgres(_));
        let harness = Self::over(Arc::new(store));
        if postgres {
            harness.on_restart(TestStore::reopen)
        } else {
            harness
        }
    }
}

/// The store scenario tests run over: veil-core's memory store, or [`PgStore`] in a fresh schema.
pub enum TestStore {
    Memory(MemoryStore),
    Postgres(PgTestStore),
}

/// A [`PgStore`] that a restart reopens (dropped without closing first: what a killed process leaves).
pub struct PgTestStore {
    options: veil_postgres::PgOptions,
    current: parking_lot::RwLock<Arc<PgStore>>,
}

impl TestStore {
    pub fn from_env() -> Self {
        if std::env::var(TEST_STORE_ENV).as_deref() != Ok("postgres") {
            return Self::Memory(MemoryStore::new());
        }
        let test = std::thread::current()
            .name()
            .unwrap_or("engine")
            .rsplit("::")
            .next()
            .unwrap_or("engine")
            .to_owned();
        let options = veil_postgres::testing::test_options(&test).unwrap_or_else(|| {
            panic!(
                "{TEST_STORE_ENV}=postgres needs {}",
                veil_postgres::testing::TEST_URL_ENV
            )
        });
        Self::postgres(options)
    }

    pub fn postgres(options: veil_postgres::PgOptions) -> Self {
        let store = PgStore::open(options.clone(), veil_postgres::Scope::Whole)
            .expect("the PostgreSQL store opens");
        Self::Postgres(PgTestStore {
            options,
            current: parking_lot::RwLock::new(Arc::new(store)),
        })
    }

    /// A process restart as the store sees it (the memory store has nothing to do).
    pub fn reopen(&self) {
        if let Self::Postgres(pg) = self {
            let mut current = pg.current.write();
            *current = Arc::new(
                PgStore::open(pg.options.clone(), veil_postgres::Scope::Whole)
                    .expect("the PostgreSQL store reopens"),
            );
        }
    }

    fn store(&self) -> Arc<dyn Store> {
        match self {
            Self::Memory(_) => unreachable!("the memory store is used in place"),
            Self::Postgres(pg) => pg.current.read().clone(),
        }
    }

    fn with<T>(&self, each: impl FnOnce(&dyn Store) -> T) -> T {
        match self {
            Self::Memory(memory) => each(memory),
            Self::Postgres(_) => each(self.store().as_ref()),
        }
    }

    /// Number of stored messages (tests compare it with the engine's view).
    pub fn message_count(&self) -> usize {
        match self {
            Self::Memory(memory) => memory.message_count(),
            Self::Postgres(pg) => pg.current.read().stored_counts().expect("counted").0 as usize,
        }
    }

    /// Number of stored delivery histories (tests: each belongs to a stored message).
    pub fn history_count(&self) -> usize {
        match self {
            Self::Memory(memory) => memory.history_count(),
            Self::Postgres(pg) => pg.current.read().stored_counts().expect("counted").1 as usize,
        }
    }
}

impl Store for TestStore {
    fn load_queues(&self) -> Result<store::Snapshot, StoreError> {
        self.with(|store| store.load_queues())
    }
    fn load_messages(
        &self,
        each: &mut dyn FnMut(QueueId, Seq, MessageState),
    ) -> Result<(), StoreError> {
        self.with(|store| store.load_messages(each))
    }
    fn load_redrives(
        &self,
        each: &mut dyn FnMut(QueueId, Seq, MessageRedrivePolicy),
    ) -> Result<(), StoreError> {
        self.with(|store| store.load_redrives(each))
    }
    fn load_groups(&self, each: &mut dyn FnMut(QueueId, Seq, String)) -> Result<(), StoreError> {
        self.with(|store| store.load_groups(each))
    }
    fn load_dedup(
        &self,
        each: &mut dyn FnMut(QueueId, String, DedupEntry),
    ) -> Result<(), StoreError> {
        self.with(|store| store.load_dedup(each))
    }
    fn load_move_tasks(&self) -> Result<Vec<MoveTaskRecord>, StoreError> {
        self.with(|store| store.load_move_tasks())
    }
    fn load_history(
        &self,
        each: &mut dyn FnMut(QueueId, Seq, DeliveryHistory),
    ) -> Result<(), StoreError> {
        self.with(|store| store.load_history(each))
    }
    fn submit(&self, ops: Vec<StoreOp>) -> store::Commit {
        self.with(|store| store.submit(ops))
    }
    fn read_payloads(
        &self,
        queue: QueueId,
        seqs: &[Seq],
    ) -> Result<Vec<Option<Payload>>, StoreError> {
        self.with(|store| store.read_payloads(queue, seqs))
    }
    fn read_payloads_later(&self, queue: QueueId, seqs: Vec<Seq>) -> store::PayloadRead {
        self.with(|store| store.read_payloads_later(queue, seqs))
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

    /// A queue whose redrive policy moves a message to `dead_letter_queue` on the receive after its
    /// `max_receive_count`th.
    pub async fn queue_dead_lettering_to(
        &self,
        name: &str,
        dead_letter_queue: &QueueKey,
        max_receive_count: u32,
    ) -> QueueKey {
        let policy = RedrivePolicy {
            dead_letter_queue: dead_letter_queue.clone(),
            max_receive_count,
        };
        let config = QueueConfig {
            redrive_policy: Some(policy),
            ..QueueConfig::default()
        };
        self.queue_with(name, config).await
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
    fn read_payloads_later(&self, queue: QueueId, seqs: Vec<Seq>) -> store::PayloadRead {
        self.inner.read_payloads_later(queue, seqs)
    }
}
