//! The durable store behind veil-core's [`Store`] port: a write-ahead log in front of redb
//! (docs/decisions/0004-write-ahead-log.md).
//!
//! A commit is one sequential append to the log and one fdatasync, shared by every submission that queued up
//! meanwhile (group commit; see `writer.rs`). The log's operations are kept in memory (`overlay.rs`) until a
//! checkpoint applies them to redb's tables (`tables.rs`, `checkpoint.rs`) in the background, skipping the
//! messages that came and went within the segment. Start-up replays what no checkpoint holds yet.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Instant;

use redb::{Database, ReadableDatabase, ReadableTable};
use tokio::sync::{oneshot, watch};
use veil_core::store::{Commit, Snapshot};
use veil_core::{
    Counters, DedupEntry, DeliveryHistory, MessageRedrivePolicy, MessageState, MoveTaskRecord,
    Payload, QueueId, QueueRecord, Seq, Store, StoreError, StoreOp,
};
use veil_telemetry::StoreMetrics;

use crate::bodies::BodyFiles;
use crate::checkpoint::{recover, Recovered};
use crate::codec::decode;
use crate::faults::FaultPlan;
use crate::io::{FsIo, RedbBackend, StorageIo};
use crate::limits::{
    CACHE_BYTES_DEFAULT, COMPACT_FILE_BYTES_MIN, COMPACT_FILE_PER_ROW_BYTES_MIN, PROBE_BYTES,
    REOPEN_FREE_SEGMENTS_MIN, WAL_SEGMENT_BYTES_MAX,
};
use crate::overlay::{Found, Overlay};
use crate::tables::{
    self, redb_err, COUNTERS, DEDUP, GROUPS, HISTORY, META, MOVE_TASKS, NEXT_QUEUE_ID, QUEUES,
    REDRIVES, STATES,
};
use crate::wal::Segment;
use crate::writer::{Job, Writer};

pub(crate) const DATABASE_FILE: &str = "veil.redb";

/// Whether a commit waits for fsync.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Durability {
    /// fsync before any success is returned (the default; docs/semantics.md §5).
    #[default]
    Durable,
    /// No fsync of the log: a machine crash may lose acknowledged changes (a killed process loses nothing, the
    /// kernel still has the writes). Opt-in, for throughput experiments only.
    Relaxed,
}

#[derive(Clone, Debug)]
pub struct StoreOptions {
    pub durability: Durability,
    pub cache_bytes: usize,
    /// A log segment this large is closed and checkpointed into redb.
    pub wal_segment_bytes_max: u64,
    /// Where the writer reports commits, syncs and bytes, and start-up its recovery time (the server's
    /// telemetry; the default is a detached handle).
    pub metrics: StoreMetrics,
    /// Faults to inject, for the store's own tests (`faults.rs`); `None` everywhere else.
    pub faults: Option<Arc<FaultPlan>>,
}

impl Default for StoreOptions {
    fn default() -> Self {
        Self {
            durability: Durability::default(),
            cache_bytes: CACHE_BYTES_DEFAULT,
            wal_segment_bytes_max: WAL_SEGMENT_BYTES_MAX,
            metrics: StoreMetrics::default(),
            faults: None,
        }
    }
}

/// The durable store. Submissions go to a single writer thread through a channel.
pub struct RedbStore {
    db: Arc<Database>,
    /// The log's operations not yet checkpointed; shared with the writer (which adds to it) and the
    /// checkpointer (which drops a window once redb holds it). Held only for lookups, never across I/O.
    overlay: Arc<Mutex<Overlay>>,
    /// To the writer thread; `None` once closed. Behind a mutex only so that `close` can take it; sends are
    /// made under the engine's lock, so this one is never contended.
    jobs: Mutex<Option<mpsc::Sender<Job>>>,
    /// Joined by `close` so that the last commit and the final checkpoint finish before the process exits.
    writer: Mutex<Option<JoinHandle<()>>>,
    path: PathBuf,
    /// Log syncs (group commits) so far; shared with the writer thread (group-commit tests and metrics).
    commits: Arc<AtomicU64>,
    recovered: Recovered,
    /// Turns true when the writer fail-stops (see [`RedbStore::failed`]).
    failed: watch::Receiver<bool>,
    /// The kept log segments holding checkpointed bodies; shared with the writer and the checkpointer.
    files: Arc<BodyFiles>,
}

impl RedbStore {
    /// Opens (or creates) the store in `dir` on the real file system, replaying the log a crash left behind.
    pub fn open(dir: &Path, options: StoreOptions) -> Result<Self, StoreError> {
        Self::open_on(Arc::new(FsIo), dir, options)
    }

    /// Opens (or creates) the store in `dir` on `io`: the real file system ([`FsIo`], what [`RedbStore::open`]
    /// uses) or a simulated disk ([`crate::SimDisk`]) that the simulator crashes and fails. Every file of the
    /// store (log segments, the redb file) goes through `io` (docs/decisions/0010-storage-io.md).
    pub fn open_on(
        io: Arc<dyn StorageIo>,
        dir: &Path,
        options: StoreOptions,
    ) -> Result<Self, StoreError> {
        let started = Instant::now();
        // Private before anything is written into it (docs/security.md "The data directory").
        io.prepare_dir(dir)
            .map_err(|e| StoreError::Io(format!("preparing {}: {e}", dir.display())))?;
        let path = dir.join(DATABASE_FILE);
        let db = open_database(io.as_ref(), &path, options.cache_bytes)?;
        tables::prepare(&db, &path)?;
        let recovered = recover(&db, io.as_ref(), dir)?;
        let mut db = db;
        compact_if_mostly_free(io.as_ref(), &mut db, &path)?;
        options.metrics.recovered(started.elapsed());
        let segment = Segment::create(
            io.as_ref(),
            dir,
            recovered.next_generation,
            options.wal_segment_bytes_max,
        )?;
        let db = Arc::new(db);
        let files = Arc::new(BodyFiles::new(io.clone(), dir.to_path_buf()));
        let overlay = Arc::new(Mutex::new(Overlay::new(segment.generation)));
        let commits = Arc::new(AtomicU64::new(0));
        let (failed_watch, failed) = watch::channel(false);
        let writer = Writer {
            io,
            dir: dir.to_path_buf(),
            db: db.clone(),
            overlay: overlay.clone(),
            segment,
            durability: options.durability,
            segment_bytes_max: options.wal_segment_bytes_max,
            commits: commits.clone(),
            metrics: options.metrics,
            failed: None,
            records: Vec::new(),
            failed_watch,
            faults: options.faults,
            files: files.clone(),
            pending_relocation: None,
            offsets: Vec::new(),
        };
        let (tx, rx) = mpsc::channel();
        let writer = std::thread::Builder::new()
            .name("veil-store-writer".into())
            .spawn(move || writer.run(&rx))
            .map_err(|e| StoreError::Io(format!("starting the writer thread: {e}")))?;
        Ok(Self {
            db,
            overlay,
            jobs: Mutex::new(Some(tx)),
            writer: Mutex::new(Some(writer)),
            path,
            commits,
            recovered,
            failed,
            files,
        })
    }

    /// Turns true when a log write, sync or checkpoint has failed. From then on the store refuses every write
    /// (the engine's memory may hold changes the disk does not), while reads keep working; only a reopen —
    /// drop the engine, open the store and the engine again from disk — takes writes again. The server
    /// watches it (docs/reliability.md "Storage faults").
    pub fn failed(&self) -> watch::Receiver<bool> {
        self.failed.clone()
    }

    /// How many group commits the writer has made (each one log sync in durable mode).
    pub fn commit_count(&self) -> u64 {
        self.commits.load(Ordering::Relaxed)
    }

    /// What start-up replayed from the log.
    pub fn recovered(&self) -> &Recovered {
        &self.recovered
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Makes redb hold everything acknowledged so far. The loaders call it, so they read every durable change
    /// (at start-up it has nothing to do).
    pub fn checkpoint_now(&self) -> Result<(), StoreError> {
        let (done, answer) = mpsc::channel();
        let sent = match self.jobs.lock() {
            Ok(jobs) => jobs
                .as_ref()
                .is_some_and(|tx| tx.send(Job::Checkpoint { done }).is_ok()),
            Err(_) => false,
        };
        if !sent {
            return Ok(()); // closed: the writer checkpointed everything before it stopped
        }
        answer.recv().unwrap_or(Err(StoreError::Closed))
    }

    /// Stops as a crash right after the last acknowledged commit would leave the disk: the writer exits without
    /// its final checkpoint, so the next [`RedbStore::open`] replays the log. For crash tests and recovery
    /// benchmarks; a running server stops with [`RedbStore::close`].
    pub fn abandon(&self) {
        if let Ok(jobs) = self.jobs.lock() {
            if let Some(tx) = jobs.as_ref() {
                let _writer_gone_is_fine = tx.send(Job::Abandon);
            }
        }
        self.close();
    }

    /// Stops accepting submissions, waits for the writer to commit and checkpoint what it has, and returns.
    pub fn close(&self) {
        self.jobs.lock().map(|mut jobs| jobs.take()).ok();
        let handle = self.writer.lock().ok().and_then(|mut w| w.take());
        if let Some(handle) = handle {
            if handle.join().is_err() {
                tracing::error!("the store writer thread panicked");
            }
        }
    }
}

/// Opens redb's file on `io`. Every page's checksum is verified at open (docs/reliability.md "Storage faults"):
/// redb trusts a cleanly closed file otherwise, and serves a flipped byte as data or panics on it. The check
/// reads the whole file once per start-up; nothing on the request path pays for it.
fn open_database(
    io: &dyn StorageIo,
    path: &Path,
    cache_bytes: usize,
) -> Result<Database, StoreError> {
    let mut builder = Database::builder();
    builder
        .set_cache_size(cache_bytes)
        .set_check_integrity_on_open(true);
    let backend = io
        .redb_backend(path)
        .map_err(|e| StoreError::Io(format!("opening {}: {e}", path.display())))?;
    let db = match backend {
        RedbBackend::File(file) => builder.create_with_backend(file),
        RedbBackend::Io(adapter) => builder.create_with_backend(adapter),
    };
    db.map_err(|e| open_error(e, path))
}

/// A file redb finds damaged is corruption, named with its path, so that start-up stops with a clear error.
fn open_error(error: redb::DatabaseError, path: &Path) -> StoreError {
    match error {
        redb::DatabaseError::Storage(redb::StorageError::Corrupted(why)) => {
            StoreError::Corrupt(format!(
            "{} fails its checksums ({why}): it was changed outside Veil (a bad disk, a bit flip); \
             restore the data directory from a backup",
            path.display()
        ))
        }
        other => StoreError::Io(format!("opening {}: {other}", path.display())),
    }
}

/// The file [`probe_writable`] writes and removes.
const PROBE_FILE: &str = "veil-probe.tmp";

/// Whether a failed store in `dir` could be reopened now: a small write with fdatasync, then the file's
/// removal, succeed, and the file system has room for the log segments a reopen needs
/// (`REOPEN_FREE_SEGMENTS_MIN` of `segment_bytes`). The error says what is still wrong.
pub fn probe_writable(dir: &Path, segment_bytes: u64) -> Result<(), StoreError> {
    let path = dir.join(PROBE_FILE);
    let io = |e: std::io::Error| StoreError::Io(format!("probing {}: {e}", path.display()));
    let written = crate::private::private_file_options()
        .write(true)
        .create(true)
        .truncate(true)
        .open(&path)
        .and_then(|mut file| {
            std::io::Write::write_all(&mut file, &[0; PROBE_BYTES])?;
            file.sync_data()
        })
        .map_err(io);
    let removed = std::fs::remove_file(&path).map_err(io);
    written?;
    removed?;
    let free = free_bytes(dir)?;
    let needed = segment_bytes.saturating_mul(REOPEN_FREE_SEGMENTS_MIN);
    if free < needed {
        return Err(StoreError::Io(format!(
            "{} has {free} bytes free; reopening the store needs {needed}",
            dir.display()
        )));
    }
    Ok(())
}

/// Bytes an unprivileged writer may still allocate on the file system of `dir`.
fn free_bytes(dir: &Path) -> Result<u64, StoreError> {
    use std::os::unix::ffi::OsStrExt;
    let io = |e: std::io::Error| StoreError::Io(format!("statvfs {}: {e}", dir.display()));
    let c_path = std::ffi::CString::new(dir.as_os_str().as_bytes())
        .map_err(|e| StoreError::Io(format!("{}: {e}", dir.display())))?;
    let mut stat = std::mem::MaybeUninit::<libc::statvfs>::zeroed();
    // SAFETY: a NUL-terminated path and a pointer to a zeroed statvfs that lives through the call.
    if unsafe { libc::statvfs(c_path.as_ptr(), stat.as_mut_ptr()) } != 0 {
        return Err(io(std::io::Error::last_os_error()));
    }
    // SAFETY: statvfs returned 0, so it filled the struct (and it was zeroed before).
    let stat = unsafe { stat.assume_init() };
    // fsblkcnt_t and c_ulong are u64 here but narrower on 32-bit targets.
    #[allow(clippy::useless_conversion)]
    let (blocks, block_bytes) = (u64::from(stat.f_bavail), u64::from(stat.f_frsize));
    Ok(blocks.saturating_mul(block_bytes))
}

/// Returns the space of deleted messages to the file system when most of the file is free pages. redb reuses
/// free pages but gives the file back only at its end, so after a large queue is drained or purged the file
/// would keep its size; compaction needs the database to itself, hence only at start-up. Whether the file is
/// mostly free is judged from the row bytes the checkpoints counted (`meta.row_bytes`): redb's own
/// statistics walk every page, which for a large live store costs more than the start-up itself.
fn compact_if_mostly_free(
    io: &dyn StorageIo,
    db: &mut Database,
    path: &Path,
) -> Result<(), StoreError> {
    let file_bytes = io
        .file_len(path)
        .map_err(|e| StoreError::Io(format!("reading {}: {e}", path.display())))?;
    let row_bytes = tables::read_meta_u64(db, tables::ROW_BYTES_KEY)?;
    if file_bytes < COMPACT_FILE_BYTES_MIN
        || file_bytes < row_bytes.saturating_mul(COMPACT_FILE_PER_ROW_BYTES_MIN)
    {
        return Ok(());
    }
    let started = std::time::Instant::now();
    while db
        .compact()
        .map_err(|e| StoreError::Io(format!("compacting {}: {e}", path.display())))?
    {}
    let compacted_bytes = io
        .file_len(path)
        .map_err(|e| StoreError::Io(format!("reading {}: {e}", path.display())))?;
    tracing::info!(
        file_bytes,
        row_bytes,
        compacted_bytes,
        elapsed_ms = started.elapsed().as_millis() as u64,
        "compacted the store file: most of it was free"
    );
    Ok(())
}

impl Drop for RedbStore {
    fn drop(&mut self) {
        self.close();
    }
}

impl Store for RedbStore {
    fn load_queues(&self) -> Result<Snapshot, StoreError> {
        self.checkpoint_now()?;
        let txn = self.db.begin_read().map_err(redb_err!("starting a read"))?;
        let meta = txn.open_table(META).map_err(redb_err!("opening meta"))?;
        let next_queue_id = match meta.get(NEXT_QUEUE_ID).map_err(redb_err!("reading meta"))? {
            Some(guard) => {
                let bytes: [u8; 8] = guard
                    .value()
                    .try_into()
                    .map_err(|_| StoreError::Corrupt("next_queue_id is not 8 bytes".into()))?;
                u64::from_be_bytes(bytes)
            }
            None => 1,
        };
        let queues_table = txn
            .open_table(QUEUES)
            .map_err(redb_err!("opening queues"))?;
        let counters_table = txn
            .open_table(COUNTERS)
            .map_err(redb_err!("opening counters"))?;
        let mut queues = Vec::new();
        for entry in queues_table.iter().map_err(redb_err!("listing queues"))? {
            let (id, value) = entry.map_err(redb_err!("reading a queue"))?;
            let record: QueueRecord = decode(value.value(), "a queue record")?;
            let counters: Counters = match counters_table
                .get(id.value())
                .map_err(redb_err!("reading counters"))?
            {
                Some(guard) => decode(guard.value(), "queue counters")?,
                None => Counters::default(),
            };
            queues.push((record, counters));
        }
        Ok(Snapshot {
            next_queue_id,
            queues,
        })
    }

    fn load_messages(
        &self,
        each: &mut dyn FnMut(QueueId, Seq, MessageState),
    ) -> Result<(), StoreError> {
        self.checkpoint_now()?;
        let txn = self.db.begin_read().map_err(redb_err!("starting a read"))?;
        let states = txn
            .open_table(STATES)
            .map_err(redb_err!("opening states"))?;
        for entry in states.iter().map_err(redb_err!("scanning states"))? {
            let (key, value) = entry.map_err(redb_err!("reading a state"))?;
            let (queue, seq) = key.value();
            each(queue, seq, decode(value.value(), "a message state")?);
        }
        Ok(())
    }

    fn load_redrives(
        &self,
        each: &mut dyn FnMut(QueueId, Seq, MessageRedrivePolicy),
    ) -> Result<(), StoreError> {
        self.checkpoint_now()?;
        let txn = self.db.begin_read().map_err(redb_err!("starting a read"))?;
        let redrives = txn
            .open_table(REDRIVES)
            .map_err(redb_err!("opening redrives"))?;
        for entry in redrives.iter().map_err(redb_err!("scanning redrives"))? {
            let (key, value) = entry.map_err(redb_err!("reading a redrive"))?;
            let (queue, seq) = key.value();
            each(queue, seq, decode(value.value(), "a message redrive")?);
        }
        Ok(())
    }

    fn load_groups(&self, each: &mut dyn FnMut(QueueId, Seq, String)) -> Result<(), StoreError> {
        self.checkpoint_now()?;
        let txn = self.db.begin_read().map_err(redb_err!("starting a read"))?;
        let groups = txn
            .open_table(GROUPS)
            .map_err(redb_err!("opening groups"))?;
        for entry in groups.iter().map_err(redb_err!("scanning groups"))? {
            let (key, value) = entry.map_err(redb_err!("reading a group"))?;
            let (queue, seq) = key.value();
            each(queue, seq, value.value().to_owned());
        }
        Ok(())
    }

    fn load_dedup(
        &self,
        each: &mut dyn FnMut(QueueId, String, DedupEntry),
    ) -> Result<(), StoreError> {
        self.checkpoint_now()?;
        let txn = self.db.begin_read().map_err(redb_err!("starting a read"))?;
        let dedup = txn.open_table(DEDUP).map_err(redb_err!("opening dedup"))?;
        for entry in dedup.iter().map_err(redb_err!("scanning dedup"))? {
            let (key, value) = entry.map_err(redb_err!("reading a deduplication id"))?;
            let (queue, id) = key.value();
            each(
                queue,
                id.to_owned(),
                decode(value.value(), "a deduplication id")?,
            );
        }
        Ok(())
    }

    fn load_history(
        &self,
        each: &mut dyn FnMut(QueueId, Seq, DeliveryHistory),
    ) -> Result<(), StoreError> {
        self.checkpoint_now()?;
        let txn = self.db.begin_read().map_err(redb_err!("starting a read"))?;
        let history = txn
            .open_table(HISTORY)
            .map_err(redb_err!("opening history"))?;
        for entry in history.iter().map_err(redb_err!("scanning history"))? {
            let (key, value) = entry.map_err(redb_err!("reading a history"))?;
            let (queue, seq) = key.value();
            each(queue, seq, decode(value.value(), "a delivery history")?);
        }
        Ok(())
    }

    fn load_move_tasks(&self) -> Result<Vec<MoveTaskRecord>, StoreError> {
        self.checkpoint_now()?;
        let txn = self.db.begin_read().map_err(redb_err!("starting a read"))?;
        let tasks = txn
            .open_table(MOVE_TASKS)
            .map_err(redb_err!("opening move_tasks"))?;
        let mut records = Vec::new();
        for entry in tasks.iter().map_err(redb_err!("scanning move_tasks"))? {
            let (_, value) = entry.map_err(redb_err!("reading a move task"))?;
            records.push(decode(value.value(), "a move task")?);
        }
        Ok(records)
    }

    fn submit(&self, ops: Vec<StoreOp>) -> Commit {
        if let Some(op) = ops.iter().find(|op| is_partitions_op(op)) {
            // Refused before the log: only a cluster partition's engine sends these, and the embedded store
            // holds every queue (one engine, no partitions, no inboxes).
            let refused = StoreError::Io(format!(
                "internal: the embedded store has no partitions, so no inbox for {op:?}"
            ));
            return Box::pin(std::future::ready(Err(refused)));
        }
        let (done, answer) = oneshot::channel();
        let sent = match self.jobs.lock() {
            Ok(jobs) => jobs
                .as_ref()
                .is_some_and(|tx| tx.send(Job::Ops { ops, done }).is_ok()),
            Err(_) => false,
        };
        Box::pin(async move {
            if !sent {
                return Err(StoreError::Closed);
            }
            answer.await.unwrap_or(Err(StoreError::Closed))
        })
    }

    fn read_payloads(
        &self,
        queue: QueueId,
        seqs: &[Seq],
    ) -> Result<Vec<Option<Payload>>, StoreError> {
        let mut found = Vec::with_capacity(seqs.len());
        let mut on_disk = Vec::new();
        {
            let overlay = self
                .overlay
                .lock()
                .map_err(|_| StoreError::Io("the overlay lock is poisoned".into()))?;
            for (at, &seq) in seqs.iter().enumerate() {
                found.push(match overlay.find((queue, seq)) {
                    Found::Payload(payload) => Some(payload),
                    Found::Gone => None,
                    Found::NotHere => {
                        on_disk.push(at);
                        None
                    }
                });
            }
        }
        if !on_disk.is_empty() {
            let wanted: Vec<Seq> = on_disk.iter().map(|&at| seqs[at]).collect();
            let read = crate::bodies::read_payloads(&self.db, &self.files, queue, &wanted)?;
            for (at, payload) in on_disk.into_iter().zip(read) {
                found[at] = payload;
            }
        }
        Ok(found)
    }
}

/// The operations of a partition's inbox (veil_core::inbox), which the embedded store never takes.
fn is_partitions_op(op: &StoreOp) -> bool {
    matches!(
        op,
        StoreOp::SendToInbox { .. }
            | StoreOp::AcceptInbound { .. }
            | StoreOp::ForwardInbound { .. }
    )
}
