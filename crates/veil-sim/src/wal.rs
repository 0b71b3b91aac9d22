//! `--store wal`: the engine over veil-store's real write-ahead log, checkpointer and recovery ([`RedbStore`])
//! on a simulated disk ([`SimDisk`]), with segments small enough that every seed rolls segments, runs
//! checkpoints and recovers across them (docs/reliability.md, "Deterministic simulation").
//!
//! The generator's faults become disk faults: a failed commit is an EIO or ENOSPC on the next write or sync
//! (of the log, or of the redb file under a checkpoint); a crash is a power loss now or at a seeded later
//! write or sync (in an append, a segment's creation, a checkpoint, a recovery), after which the store is
//! dropped without shutdown and opened again from what the disk kept. Some seeds also flip bits in what the
//! disk reads. The store's threads are waited for after every request (`settle`), so a seed replays the same
//! calls on the disk.

use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use veil_core::history::DeliveryHistory;
use veil_core::move_task::MoveTaskRecord;
use veil_core::store::{Commit, Snapshot};
use veil_core::{
    DedupEntry, MessageRedrivePolicy, MessageState, Payload, QueueId, Seq, Store, StoreError,
    StoreOp,
};
use veil_store::{Effect, IoOp, RedbStore, SimDisk, SimFault, StoreOptions};

use crate::backend::Backend;
use crate::disk::{Counters, Incarnation};
use crate::limits::*;

/// What the disk did in one run, for the summary.
#[derive(Clone, Copy, Debug, Default)]
pub struct DiskStats {
    pub power_losses: u64,
    pub recoveries: u64,
    /// Recoveries the power interrupted (then recovered again).
    pub recoveries_interrupted: u64,
    /// Recoveries an injected EIO or ENOSPC failed (then tried again).
    pub recoveries_failed: u64,
    /// Recoveries that found more than one log segment (a checkpoint the crash interrupted).
    pub recoveries_across_segments: u64,
    pub eio: u64,
    pub enospc: u64,
    /// Seeds whose disk flips bits in what it reads.
    pub flip_seeds: u64,
    /// Faults the disk injected (EIO, ENOSPC, flipped reads, power losses at a write or sync).
    pub faults_injected: u64,
    /// Recoveries refused because what they read failed a checksum (a flipped bit detected).
    pub corruption_detected: u64,
    /// Log segments created (rolls) and checkpointed (applied to redb and removed).
    pub segments: u64,
    pub checkpoints: u64,
    /// Waits for the checkpointer that gave up (the run may not replay exactly); 0 in a sound run.
    pub idle_timeouts: u64,
}

impl DiskStats {
    pub fn add(&mut self, other: &DiskStats) {
        self.power_losses += other.power_losses;
        self.recoveries += other.recoveries;
        self.recoveries_interrupted += other.recoveries_interrupted;
        self.recoveries_across_segments += other.recoveries_across_segments;
        self.recoveries_failed += other.recoveries_failed;
        self.eio += other.eio;
        self.enospc += other.enospc;
        self.flip_seeds += other.flip_seeds;
        self.faults_injected += other.faults_injected;
        self.corruption_detected += other.corruption_detected;
        self.segments += other.segments;
        self.checkpoints += other.checkpoints;
        self.idle_timeouts += other.idle_timeouts;
    }
}

/// The real store, one submission at a time: each is answered, and the writer and checkpointer are done
/// with it, before `submit` returns, so that the disk sees the same calls in the same order on every replay
/// of a seed (the writer would otherwise group whatever happened to queue up meanwhile).
pub struct Counted {
    inner: RedbStore,
    incarnation: Arc<Incarnation>,
    submitted: AtomicU64,
    /// Waits for the checkpointer that gave up, shared with the run's statistics.
    idle_timeouts: Arc<AtomicU64>,
}

impl Counted {
    /// Waits until the writer has finished with everything submitted (an empty submission is answered only
    /// after the group before it and the segment roll that group caused) and no checkpoint is running.
    fn settle(&self) {
        drop(block_on(self.inner.submit(Vec::new())));
        let began = Instant::now();
        while !self.incarnation.is_idle() {
            if began.elapsed() > Duration::from_millis(WAL_IDLE_WAIT_MS_MAX) {
                self.idle_timeouts.fetch_add(1, Ordering::Relaxed);
                return;
            }
            std::thread::yield_now();
        }
    }
}

impl Store for Counted {
    fn load_queues(&self) -> Result<Snapshot, StoreError> {
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

    fn submit(&self, ops: Vec<StoreOp>) -> Commit {
        self.submitted.fetch_add(1, Ordering::Relaxed);
        let result = block_on(self.inner.submit(ops));
        self.settle();
        Box::pin(std::future::ready(result))
    }

    fn read_payloads(
        &self,
        queue: QueueId,
        seqs: &[Seq],
    ) -> Result<Vec<Option<Payload>>, StoreError> {
        self.inner.read_payloads(queue, seqs)
    }
}

/// The running store and the process it belongs to.
struct Running {
    store: Arc<Counted>,
    incarnation: Arc<Incarnation>,
}

pub struct WalStore {
    disk: SimDisk,
    dir: PathBuf,
    /// The wal mode's own decisions (which fault, where the power goes), drawn from the run's seed apart
    /// from the generator's stream, so that the generated scenario is the same in both modes.
    rng: Mutex<ChaCha8Rng>,
    running: Running,
    /// Segments created and checkpointed, counted by every process's view of the disk.
    counters: Arc<Counters>,
    idle_timeouts: Arc<AtomicU64>,
    stats: Mutex<DiskStats>,
    /// The files whose reads flip bits in this run, if any.
    flips: Option<&'static str>,
}

fn options() -> StoreOptions {
    StoreOptions {
        wal_segment_bytes_max: WAL_SEGMENT_BYTES_SIM,
        cache_bytes: WAL_CACHE_BYTES_SIM,
        ..StoreOptions::default()
    }
}

impl WalStore {
    /// An empty disk for seed `seed`. `log_flips`: reads of the log may flip bits too, not only reads of the
    /// redb file (off by default, so that the kept redb flip seeds keep flipping the redb file; it found the
    /// lost-records bug of docs/reliability.md, "Deterministic simulation").
    pub fn new(seed: u64, log_flips: bool, read_flips: bool) -> Result<Self, String> {
        let disk = SimDisk::new(seed);
        let mut rng = ChaCha8Rng::seed_from_u64(seed ^ WAL_SEED_SALT);
        let flips = rng.random_bool(WAL_FLIP_SEEDS_SHARE).then(|| {
            if rng.random_bool(0.5) && log_flips {
                "wal-"
            } else {
                ".redb"
            }
        });
        // Drawn either way, so that `--no-read-flips` leaves every other draw of the seed as it was.
        let flips = flips.filter(|_| read_flips);
        if let Some(files) = flips {
            disk.inject(flip_fault(files));
        }
        let dir = PathBuf::from(WAL_DATA_DIR);
        let stats = Mutex::new(DiskStats {
            flip_seeds: u64::from(flips.is_some()),
            ..DiskStats::default()
        });
        let counters = Arc::new(Counters::default());
        let idle_timeouts = Arc::new(AtomicU64::new(0));
        let running = open(&disk, &dir, &counters, &stats, flips, &idle_timeouts)?;
        Ok(Self {
            disk,
            dir,
            rng: Mutex::new(rng),
            running,
            counters,
            idle_timeouts,
            stats,
            flips,
        })
    }
}

/// Reads of `files` (a part of their name) return a flipped bit now and then.
fn flip_fault(files: &str) -> SimFault {
    let per_million = if files == "wal-" {
        WAL_LOG_FLIPS_PER_MILLION
    } else {
        WAL_FLIPS_PER_MILLION
    };
    SimFault::random(IoOp::Read, per_million, Effect::FlipBit).on_files(files)
}

/// Opens the store on the disk, recovering what a crash left. A power loss during recovery, or a flipped bit
/// that recovery detected (the disk's bytes are right; the read was not), is retried; anything else that
/// stops recovery is a violation.
fn open(
    disk: &SimDisk,
    dir: &Path,
    counters: &Arc<Counters>,
    stats: &Mutex<DiskStats>,
    flips: Option<&'static str>,
    idle_timeouts: &Arc<AtomicU64>,
) -> Result<Running, String> {
    let mut last_error = String::new();
    let segments = disk
        .names(dir)
        .iter()
        .filter(|name| name.starts_with("wal-"))
        .count();
    if segments > 1 {
        stats.lock().recoveries_across_segments += 1;
    }
    for attempt in 0..RECOVERY_ATTEMPTS_MAX {
        if attempt > 0 {
            // The first attempt meets the faults still armed (a power loss or an EIO during recovery); the
            // next ones a healthy disk, as an operator's restart after replacing it would.
            disk.heal();
        }
        let incarnation = Arc::new(Incarnation::new(disk, dir, counters.clone()));
        let faults_before = disk.stats().faults_injected;
        match RedbStore::open_on(incarnation.clone(), dir, options()) {
            Ok(inner) => {
                stats.lock().recoveries += 1;
                if attempt > 0 {
                    if let Some(files) = flips {
                        disk.inject(flip_fault(files));
                    }
                }
                let store = Arc::new(Counted {
                    inner,
                    incarnation: incarnation.clone(),
                    submitted: AtomicU64::new(0),
                    idle_timeouts: idle_timeouts.clone(),
                });
                return Ok(Running { store, incarnation });
            }
            Err(_) if incarnation.dead() => stats.lock().recoveries_interrupted += 1,
            // An injected fault struck recovery (the disk is healthy again on the next try).
            Err(error) if disk.stats().faults_injected > faults_before => {
                let mut stats = stats.lock();
                match error {
                    StoreError::Corrupt(_) if flips.is_some() => stats.corruption_detected += 1,
                    _ => stats.recoveries_failed += 1,
                }
                last_error = error.to_string();
            }
            Err(error) => return Err(error.to_string()),
        }
    }
    Err(format!(
        "recovery did not finish in {RECOVERY_ATTEMPTS_MAX} attempts: {last_error}"
    ))
}

/// Polls a future on this thread until it is ready, parking between polls (the store's writer answers
/// from its own thread and wakes this one).
fn block_on<F: Future>(future: F) -> F::Output {
    struct Unpark(std::thread::Thread);
    impl Wake for Unpark {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }
    }
    let waker = Waker::from(Arc::new(Unpark(std::thread::current())));
    let mut cx = Context::from_waker(&waker);
    let mut future = pin!(future);
    loop {
        if let Poll::Ready(value) = future.as_mut().poll(&mut cx) {
            return value;
        }
        std::thread::park_timeout(Duration::from_millis(WAL_PARK_MS));
    }
}

impl Backend for WalStore {
    fn engine_store(&self) -> Arc<dyn Store> {
        self.running.store.clone()
    }

    fn durable(&self) -> Option<&dyn Store> {
        // Nothing submitted since recovery: the store holds exactly what recovery found on the disk.
        let submitted = self.running.store.submitted.load(Ordering::Relaxed);
        (submitted == 0).then_some(&*self.running.store as &dyn Store)
    }

    fn pending_count(&self) -> usize {
        0
    }

    fn failed(&self) -> bool {
        *self.running.store.inner.failed().borrow()
    }

    fn flush(&self, _count: usize) -> usize {
        self.settle();
        0
    }

    fn fail(&self, reached_disk: bool) -> bool {
        let mut rng = self.rng.lock();
        let (op, effect) = if reached_disk {
            (IoOp::Sync, Effect::Eio)
        } else if rng.random_bool(0.5) {
            (IoOp::Write, Effect::Enospc)
        } else {
            (IoOp::Write, Effect::Eio)
        };
        let files = if rng.random_bool(WAL_LOG_FAULT_SHARE) {
            "wal-"
        } else {
            ".redb"
        };
        let mut stats = self.stats.lock();
        match effect {
            Effect::Enospc => stats.enospc += 1,
            _ => stats.eio += 1,
        }
        self.disk
            .inject(SimFault::nth(op, 1, effect).on_files(files));
        true
    }

    fn crash(&mut self, kept: usize) -> Option<usize> {
        self.stats.lock().power_losses += 1;
        if kept == 0 {
            self.disk.crash();
            return Some(0);
        }
        // `kept` (1..=3) scales how far away the power loss is: within the next few commits.
        let (op, nth) = {
            let mut rng = self.rng.lock();
            let op = if rng.random_bool(0.5) {
                IoOp::Write
            } else {
                IoOp::Sync
            };
            (
                op,
                rng.random_range(1..=kept as u64 * WAL_CRASH_CALLS_PER_KEPT),
            )
        };
        self.disk.inject(SimFault::nth(op, nth, Effect::Crash));
        None
    }

    fn power_went(&self) -> bool {
        self.running.incarnation.dead()
    }

    fn recover(&mut self) -> Result<(), String> {
        if !self.running.incarnation.dead() {
            self.disk.crash();
        }
        let running = open(
            &self.disk,
            &self.dir,
            &self.counters,
            &self.stats,
            self.flips,
            &self.idle_timeouts,
        )?;
        self.running = running;
        Ok(())
    }

    fn settle(&self) -> bool {
        // Every submission settles before it is answered (`Counted::submit`).
        false
    }

    fn heal(&self) {
        self.disk.heal();
    }

    fn restarts_when_failed(&self) -> bool {
        true
    }

    fn reads_flip(&self) -> bool {
        self.flips.is_some()
    }

    fn disk_stats(&self) -> Option<DiskStats> {
        let mut stats = *self.stats.lock();
        stats.faults_injected = self.disk.stats().faults_injected;
        stats.segments = self.counters.segments.load(Ordering::Relaxed);
        stats.checkpoints = self.counters.checkpoints.load(Ordering::Relaxed);
        stats.idle_timeouts = self.idle_timeouts.load(Ordering::Relaxed);
        Some(stats)
    }
}
