//! The writer thread and the checkpointer thread.
//!
//! The writer takes every submission that is waiting, appends them to the log as one write, syncs once (group
//! commit), adds their operations to the in-memory overlay so that reads find them, and only then answers
//! them all. While it syncs, new submissions queue up and form the next group. When the log segment is full it
//! starts a new one and hands the closed segment's window to the checkpointer, which applies it to redb in the
//! background and then removes the segment file. At most one checkpoint runs: a writer that fills the next
//! segment before the checkpoint is done waits for it (backpressure that bounds memory and recovery time).
//!
//! A checkpointed segment that still holds stored bodies is kept (docs/decisions/0013-bodies-written-once.md).
//! After each checkpoint the checkpointer reads the survivors of the oldest mostly dead one; the writer appends
//! them as one relocation record before it closes its next segment, so that the checkpoint of that segment
//! moves them and removes the old file.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Instant;

use redb::Database;
use tokio::sync::{oneshot, watch};
use veil_core::{StoreError, StoreOp};
use veil_telemetry::StoreMetrics;

use crate::bodies::{BodyFiles, Relocated, Relocation};
use crate::checkpoint::{checkpoint, plan_reclaim, settle};
use crate::faults::{self, Fault, FaultPlan, Point};
use crate::io::StorageIo;
use crate::limits::{GROUP_OPS_MAX, WAL_SEGMENT_OPS_MAX};
use crate::overlay::{Key, Overlay, Window};
use crate::wal::{self, Segment};
use crate::Durability;

/// Where a submission's result goes.
type Answer = oneshot::Sender<Result<(), StoreError>>;

pub enum Job {
    /// Operations to make durable; answered once they are.
    Ops { ops: Vec<StoreOp>, done: Answer },
    /// Checkpoint everything logged so far; answered once redb holds it. A std channel because the caller
    /// waits synchronously (start-up, tests), possibly on a runtime thread.
    Checkpoint {
        done: mpsc::Sender<Result<(), StoreError>>,
    },
    /// Stop as a crash after the last commit would: no final checkpoint, the log left for start-up to replay.
    Abandon,
}

/// Everything the writer thread owns.
pub struct Writer {
    /// The data directory's files: the log segments this thread creates and the checkpointer removes.
    pub io: Arc<dyn StorageIo>,
    pub dir: PathBuf,
    pub db: Arc<Database>,
    /// Shared with readers (payload lookups) and the checkpointer (which drops a window once redb holds it).
    pub overlay: Arc<Mutex<Overlay>>,
    pub segment: Segment,
    pub durability: Durability,
    /// A segment this large is closed and checkpointed (tests make it small to checkpoint often).
    pub segment_bytes_max: u64,
    pub commits: Arc<AtomicU64>,
    /// Commit duration, operations per commit, syncs, bytes and checkpoints, for the server's metrics.
    pub metrics: StoreMetrics,
    /// Set on the first failed write or checkpoint: the engine's memory then holds changes the disk may not,
    /// so every later write is refused and no success is returned for a change that is not durable.
    pub failed: Option<String>,
    /// Reused for every group's records, so a commit allocates nothing once it has grown.
    pub records: Vec<u8>,
    /// Turns true with `failed`: the server watches it to reopen the store once the disk takes writes again.
    pub failed_watch: watch::Sender<bool>,
    /// Test faults (`faults.rs`); `None` in production.
    pub faults: Option<Arc<FaultPlan>>,
    /// The kept segments' files, shared with readers: the overlay reads a checkpointed body through them.
    pub files: Arc<BodyFiles>,
    /// Survivors of a mostly dead segment that the last checkpoint read, to append before the next rotation.
    pub pending_relocation: Option<Vec<Relocated>>,
    /// Reused for each group's record offsets.
    pub offsets: Vec<u64>,
}

/// A checkpoint's result: what the writer is answered, with the survivors to relocate if a segment is due.
type CheckpointResult = Result<Option<Vec<Relocated>>, StoreError>;

/// The error of an injected fault, worded as the real one would be.
fn injected(doing: &str) -> StoreError {
    StoreError::Io(format!("{doing}: {}", faults::eio()))
}

/// The checkpointer's end of the channels: closed windows in, one result per window out, and emptied windows
/// back for reuse.
struct Checkpointer {
    windows: mpsc::Sender<Arc<Window>>,
    results: mpsc::Receiver<CheckpointResult>,
    spare: mpsc::Receiver<Window>,
    /// A checkpoint was handed over and its result not yet taken.
    running: bool,
    thread: JoinHandle<()>,
}

impl Writer {
    /// Runs until every sender of `jobs` is gone, then checkpoints what is left so that the next start-up
    /// replays nothing.
    pub fn run(mut self, jobs: &mpsc::Receiver<Job>) {
        let mut checkpointer = match self.start_checkpointer() {
            Ok(checkpointer) => checkpointer,
            Err(error) => {
                self.fail(&error);
                return self.refuse_all(jobs);
            }
        };
        let mut waiting: Option<Job> = None;
        let mut abandoned = false;
        loop {
            let first = match waiting.take() {
                Some(job) => job,
                None => match jobs.recv() {
                    Ok(job) => job,
                    Err(_) => break,
                },
            };
            match first {
                Job::Abandon => {
                    abandoned = true;
                    break;
                }
                Job::Checkpoint { done } => {
                    let result = self.checkpoint_everything(&mut checkpointer);
                    let _caller_gone_is_fine = done.send(result);
                }
                Job::Ops { ops, done } => {
                    let mut group = vec![(ops, done)];
                    let mut ops_in_group = group[0].0.len();
                    while ops_in_group < GROUP_OPS_MAX {
                        match jobs.try_recv() {
                            Ok(Job::Ops { ops, done }) => {
                                ops_in_group += ops.len();
                                group.push((ops, done));
                            }
                            Ok(checkpoint) => {
                                waiting = Some(checkpoint);
                                break;
                            }
                            Err(_) => break,
                        }
                    }
                    self.commit_group(group);
                    if self.segment_is_full() {
                        if let Err(error) = self.rotate(&mut checkpointer) {
                            self.fail(&error);
                        }
                    }
                }
            }
        }
        if abandoned {
            // Let a running checkpoint finish, as the disk would have it at a crash after its commit.
            drop(self.wait_for_checkpoint(&mut checkpointer));
        } else if let Err(error) = self.checkpoint_everything(&mut checkpointer) {
            tracing::error!(%error, "the checkpoint at shutdown failed; start-up will replay the log");
        }
        drop(checkpointer.windows);
        if checkpointer.thread.join().is_err() {
            tracing::error!("the store checkpointer thread panicked");
        }
    }

    fn start_checkpointer(&self) -> Result<Checkpointer, StoreError> {
        let (windows, to_apply) = mpsc::channel::<Arc<Window>>();
        let (answer, results) = mpsc::channel();
        let (give_back, spare) = mpsc::channel();
        let db = self.db.clone();
        let overlay = self.overlay.clone();
        let dir = self.dir.clone();
        let io = self.io.clone();
        let metrics = self.metrics.clone();
        let faults = self.faults.clone();
        let files = self.files.clone();
        let thread = std::thread::Builder::new()
            .name("veil-store-checkpoint".into())
            .spawn(move || {
                for window in to_apply {
                    let fault = faults.as_ref().and_then(|f| f.at(Point::Checkpoint));
                    let result = match fault {
                        Some(Fault::CheckpointEio) => Err(injected("committing a checkpoint")),
                        _ => checkpoint(&db, &window),
                    };
                    let result = result.and_then(|settled| {
                        if fault == Some(Fault::CheckpointAfterCommit) {
                            return Err(injected("removing a checkpointed log segment"));
                        }
                        // Opened before the window goes, so that a reader sent to redb finds the file
                        // under either name while it is renamed.
                        for &generation in &settled.kept {
                            files.open_log(generation)?;
                        }
                        if let Ok(mut overlay) = overlay.lock() {
                            overlay.checkpointed();
                        }
                        let plan = plan_reclaim(&db, &files)?;
                        let checkpointed = (window.generation, window.segment_bytes);
                        settle(io.as_ref(), &dir, &files, &settled, checkpointed)?;
                        Ok(plan)
                    });
                    if result.is_ok() {
                        metrics.checkpointed();
                    }
                    if answer.send(result).is_err() {
                        break;
                    }
                    // The overlay let go of it, so this is the last reference: empty it here, off the
                    // writer's path, and give it back.
                    if let Ok(mut emptied) = Arc::try_unwrap(window) {
                        emptied.reuse(0);
                        let _writer_gone_is_fine = give_back.send(emptied);
                    }
                }
            })
            .map_err(|e| StoreError::Io(format!("starting the checkpoint thread: {e}")))?;
        Ok(Checkpointer {
            windows,
            results,
            spare,
            running: false,
            thread,
        })
    }

    fn commit_group(&mut self, group: Vec<(Vec<StoreOp>, Answer)>) {
        let mut answers = Vec::with_capacity(group.len());
        let mut all_ops = Vec::with_capacity(group.len());
        for (ops, done) in group {
            answers.push(done);
            all_ops.push(ops);
        }
        let result = match &self.failed {
            Some(reason) => Err(StoreError::Io(format!(
                "the store failed earlier and accepts no more writes: {reason}"
            ))),
            None => self.log_and_record(all_ops),
        };
        if let Err(error) = &result {
            self.fail(error);
        }
        for done in answers {
            let answer = match &result {
                Ok(()) => Ok(()),
                Err(e) => Err(StoreError::Io(e.to_string())),
            };
            let _receiver_gone_is_fine = done.send(answer);
        }
    }

    /// One append and one sync for the whole group; then the overlay learns the operations, before anyone is
    /// answered, so that a read after a success finds what it wrote.
    fn log_and_record(&mut self, group: Vec<Vec<StoreOp>>) -> Result<(), StoreError> {
        self.records.clear();
        self.offsets.clear();
        for ops in group.iter().filter(|ops| !ops.is_empty()) {
            self.offsets
                .push(self.segment.bytes + self.records.len() as u64);
            wal::encode_record(ops, &mut self.records)?;
        }
        if self.records.is_empty() {
            return Ok(()); // only barriers: everything before them is already durable
        }
        let started = Instant::now();
        match self.faults.as_ref().and_then(|f| f.at(Point::Append)) {
            Some(Fault::WriteEio) => return Err(injected("appending to the log")),
            Some(_) => {
                self.segment
                    .write_torn(&self.records[..self.records.len() / 2])?;
                return Err(injected("appending to the log"));
            }
            None => self.segment.append(&self.records)?,
        }
        let synced = self.durability == Durability::Durable;
        if synced {
            if self
                .faults
                .as_ref()
                .and_then(|f| f.at(Point::Sync))
                .is_some()
            {
                return Err(injected("syncing the log"));
            }
            self.segment.sync()?;
        }
        self.commits.fetch_add(1, Ordering::Relaxed);
        // Once per group, not per operation: a few atomics and one uncontended histogram lock.
        let ops: usize = group.iter().map(Vec::len).sum();
        self.metrics
            .commit(ops, self.records.len(), synced, started.elapsed());
        let (db, files) = (self.db.clone(), self.files.clone());
        let read_disk = move |key: Key| crate::bodies::read_payload(&db, &files, key);
        let mut overlay = self
            .overlay
            .lock()
            .map_err(|_| StoreError::Io("the overlay lock is poisoned".into()))?;
        let records = group.into_iter().filter(|ops| !ops.is_empty());
        for (ops, &offset) in records.zip(&self.offsets) {
            overlay.begin_record(offset);
            for op in ops {
                overlay.record(op, &read_disk)?;
            }
        }
        Ok(())
    }

    /// Appends the survivors a checkpoint read as one relocation record of the open segment, made durable
    /// before the segment's checkpoint can apply it.
    fn append_relocation(&mut self, entries: Vec<Relocated>) -> Result<(), StoreError> {
        self.records.clear();
        wal::encode_relocation(&entries, &mut self.records)?;
        let offset = self.segment.bytes;
        self.segment.append(&self.records)?;
        self.segment.sync()?;
        self.metrics.relocated(self.records.len());
        self.overlay
            .lock()
            .map_err(|_| StoreError::Io("the overlay lock is poisoned".into()))?
            .active
            .relocations
            .push(Relocation {
                generation: self.segment.generation,
                offset,
                entries,
            });
        Ok(())
    }

    fn segment_is_full(&self) -> bool {
        let ops = self.overlay.lock().map_or(0, |o| o.active.ops.len());
        self.segment.bytes >= self.segment_bytes_max || ops >= WAL_SEGMENT_OPS_MAX
    }

    /// Starts the next segment and hands the closed one to the checkpointer, after the previous checkpoint
    /// (if any) has finished.
    fn rotate(&mut self, checkpointer: &mut Checkpointer) -> Result<(), StoreError> {
        // Never on a failed store: its full segment would otherwise be rotated at the next (refused)
        // submission, and a later checkpoint would record a generation past the one whose checkpoint failed,
        // so that start-up skips it (tests/faults.rs found this).
        if let Some(reason) = &self.failed {
            return Err(StoreError::Io(format!(
                "the store failed earlier: {reason}"
            )));
        }
        self.wait_for_checkpoint(checkpointer)?;
        if let Some(entries) = self.pending_relocation.take() {
            self.append_relocation(entries)?;
        }
        // Bodies in the closed segment outlive its checkpoint: they must be on the disk before redb points
        // at them, whatever the commits' durability.
        if self.durability == Durability::Relaxed {
            self.segment.sync()?;
        }
        let next = Segment::create(
            self.io.as_ref(),
            &self.dir,
            self.segment.generation + 1,
            self.segment_bytes_max,
        )?;
        let generation = next.generation;
        let closed_bytes = std::mem::replace(&mut self.segment, next).bytes;
        let mut window = checkpointer
            .spare
            .try_recv()
            .unwrap_or_else(|_| Window::new(generation));
        window.reuse(generation);
        let closed = self
            .overlay
            .lock()
            .map_err(|_| StoreError::Io("the overlay lock is poisoned".into()))?
            .rotate(window, closed_bytes);
        checkpointer
            .windows
            .send(closed)
            .map_err(|_| StoreError::Io("the checkpoint thread has stopped".into()))?;
        checkpointer.running = true;
        Ok(())
    }

    fn wait_for_checkpoint(&mut self, checkpointer: &mut Checkpointer) -> Result<(), StoreError> {
        if !checkpointer.running {
            return Ok(());
        }
        checkpointer.running = false;
        let relocation = checkpointer
            .results
            .recv()
            .map_err(|_| StoreError::Io("the checkpoint thread has stopped".into()))??;
        if relocation.is_some() {
            self.pending_relocation = relocation;
        }
        Ok(())
    }

    /// Makes redb hold everything logged so far (start-up reads, tests, shutdown).
    fn checkpoint_everything(&mut self, checkpointer: &mut Checkpointer) -> Result<(), StoreError> {
        if let Some(reason) = &self.failed {
            return Err(StoreError::Io(format!(
                "the store failed earlier: {reason}"
            )));
        }
        let pending = self.overlay.lock().map_or(0, |o| o.active.ops.len());
        // A failed rotation (the previous checkpoint failed, or the next segment cannot be created) fails the
        // store like any other: a later checkpoint would otherwise record a newer generation as applied and
        // start-up would skip the segment whose checkpoint failed.
        let mut result = if pending > 0 {
            self.rotate(checkpointer)
        } else {
            Ok(())
        };
        if result.is_ok() {
            result = self.wait_for_checkpoint(checkpointer);
        }
        if let Err(error) = &result {
            self.fail(error);
        }
        result
    }

    fn fail(&mut self, error: &StoreError) {
        if self.failed.is_some() {
            return;
        }
        tracing::error!(%error, "store write failed; the store now refuses writes until it is reopened");
        self.failed = Some(error.to_string());
        self.metrics.failed();
        self.failed_watch.send_replace(true);
    }

    fn refuse_all(&self, jobs: &mpsc::Receiver<Job>) {
        let reason = self.failed.clone().unwrap_or_default();
        for job in jobs {
            let refused = Err(StoreError::Io(format!("the store failed: {reason}")));
            match job {
                Job::Ops { done, .. } => drop(done.send(refused)),
                Job::Checkpoint { done } => drop(done.send(refused)),
                Job::Abandon => return,
            }
        }
    }
}
