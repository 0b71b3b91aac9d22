//! `PgStore`: veil-core's `Store` over PostgreSQL (tables in migrations/, V1 to V3). Every operation means
//! what it means in veil-store and veil-core's memory store; `plan` coalesces a group's operations into
//! batches, `batch` writes a batch as multi-row statements, `sql` holds the rest of the statements, `io` the
//! I/O thread with its group-committing writers and its readers, `lanes` which writer takes which submission.
//!
//! Start-up state (everything but bodies) is read in one consistent transaction when the store opens and
//! handed to the engine's `load_*` calls, each taking its part. A part asked for again, or asked for after a
//! write, is read afresh (through the writer, so it includes every submission before it): an engine opened
//! again over the same store sees the database as it is.

mod batch;
mod io;
mod lanes;
mod plan;
mod shared;
pub(crate) mod sql;

pub use shared::SharedWriter;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc as std_mpsc;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use parking_lot::Mutex;
use std::future::Future;
use std::pin::Pin;
use tokio::sync::{mpsc, oneshot, watch};

use veil_core::store::{Commit, InboxRead, PayloadRead, Snapshot};
use veil_core::{
    DedupEntry, DeliveryHistory, MessageRedrivePolicy, MessageState, MoveTaskRecord, Payload,
    QueueId, Seq, Store, StoreError, StoreOp,
};

use crate::connect::{unavailable, PgOptions};
use crate::limits::{ANSWER_MARGIN_MS, LOAD_TIMEOUT_MS};
use crate::partition::Partition;
use io::{Job, ReadJob, Reply};
use sql::Loaded;

/// Which queues a store holds and how its writes are fenced.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Scope {
    /// Every queue, unfenced: one process owns the database (tests, tools).
    Whole,
    /// Every queue, fenced by the single leader lease's epoch (docs/decisions/0007-scale-out.md).
    Leader { epoch: i64 },
    /// One partition's queues and move tasks, fenced by that partition's lease epoch
    /// (docs/decisions/0011-partitioned-ownership.md). Queue ids come from the partition's own range.
    Partition {
        partition: Partition,
        /// The cluster's partition count: every queue this store writes must hash to `partition`.
        count: u32,
        epoch: i64,
    },
}

impl Scope {
    /// The partition written into the catalog rows (queues, move tasks): 0 outside partitions, where every
    /// queue counts as partition 0 until the cluster's partition count is fixed (`partition::establish`).
    pub fn partition(self) -> Partition {
        match self {
            Self::Partition { partition, .. } => partition,
            Self::Whole | Self::Leader { .. } => 0,
        }
    }
}

/// The PostgreSQL store.
pub struct PgStore {
    jobs: mpsc::UnboundedSender<Job>,
    reads: mpsc::UnboundedSender<ReadJob>,
    failed: watch::Receiver<bool>,
    /// What start-up reads, each part until its `load_*` call takes it.
    loaded: Mutex<Loaded>,
    /// Set by every non-empty submission: the parts still held are older than the database.
    written: AtomicBool,
    call_timeout: Duration,
    thread: Mutex<Option<JoinHandle<()>>>,
    transactions: Arc<AtomicU64>,
    /// Which queues it holds: a partition's store reads that partition's inbox.
    scope: Scope,
}

impl PgStore {
    /// Connects (on the store's own I/O thread and runtime), applies the migrations, and reads what the
    /// engine loads at start-up: the queues of `scope`. Under a lease, every write transaction first checks
    /// that the lease's epoch is still the scope's and fails with `StoreError::Unavailable` (and refuses all
    /// later writes) when it is not. Blocks the calling thread.
    pub fn open(options: PgOptions, scope: Scope) -> Result<Self, StoreError> {
        Self::start(options, scope, None)
    }

    /// As [`PgStore::open`], but its writes are committed by `writer`, together with those of every other
    /// partition store opened over it (store/shared.rs); the store's own connections only load and read.
    pub fn open_shared(
        options: PgOptions,
        scope: Scope,
        writer: &SharedWriter,
    ) -> Result<Self, StoreError> {
        Self::start(options, scope, Some(writer.lane(scope)))
    }

    fn start(
        options: PgOptions,
        scope: Scope,
        lane: Option<mpsc::UnboundedSender<shared::Unit>>,
    ) -> Result<Self, StoreError> {
        let call_timeout = options.call_timeout();
        let started = io::start(options, scope, lane)?;
        Ok(Self {
            jobs: started.jobs,
            reads: started.reads,
            failed: started.failed,
            loaded: Mutex::new(started.loaded),
            written: AtomicBool::new(false),
            call_timeout,
            thread: Mutex::new(Some(started.thread)),
            transactions: started.transactions,
            scope,
        })
    }

    /// Becomes `true` once a write failed: from then on every submission fails, and the engine over this
    /// store must be dropped and rebuilt from the database.
    pub fn failed(&self) -> watch::Receiver<bool> {
        self.failed.clone()
    }

    /// Finishes the writes in flight and closes the connections.
    pub fn close(&self) {
        let (done, finished) = std_mpsc::channel();
        if self.jobs.send(Job::Close { done }).is_ok() {
            let _thread_gone = finished.recv();
        }
        if let Some(thread) = self.thread.lock().take() {
            if thread.join().is_err() {
                tracing::error!("the PostgreSQL store thread panicked");
            }
        }
    }

    /// Write transactions committed so far: with the submissions made, how well group commit groups.
    pub fn transactions(&self) -> u64 {
        self.transactions.load(Ordering::Relaxed)
    }

    /// Stored messages and delivery histories, counted by the database after every submission made before
    /// (tests compare them with the engine's view; an operator's check).
    pub fn stored_counts(&self) -> Result<(u64, u64), StoreError> {
        let (done, answer) = std_mpsc::channel();
        self.jobs
            .send(Job::Counts { done })
            .map_err(|_| StoreError::Closed)?;
        self.answer(answer)
    }

    /// Sends `job` to a reader; the future resolves with its answer.
    fn read_later<T: Send + 'static>(
        &self,
        job: ReadJob,
        answer: oneshot::Receiver<Result<T, StoreError>>,
    ) -> Pin<Box<dyn Future<Output = Result<T, StoreError>> + Send>> {
        if self.reads.send(job).is_err() {
            return Box::pin(std::future::ready(Err(StoreError::Closed)));
        }
        // The reader bounds its own work by the call timeout; the margin only covers a reader that never
        // got to the job.
        let bound = self.call_timeout + Duration::from_millis(ANSWER_MARGIN_MS);
        Box::pin(async move {
            match tokio::time::timeout(bound, answer).await {
                Ok(answered) => answered.unwrap_or(Err(StoreError::Closed)),
                Err(_) => Err(unavailable("PostgreSQL did not answer in time")),
            }
        })
    }

    /// Sends `job` to a reader and waits for its answer.
    fn read<T>(
        &self,
        job: ReadJob,
        answer: std_mpsc::Receiver<Result<T, StoreError>>,
    ) -> Result<T, StoreError> {
        self.reads.send(job).map_err(|_| StoreError::Closed)?;
        self.answer(answer)
    }

    /// Waits for the I/O thread's answer a little longer than its own bound on the call.
    fn answer<T>(
        &self,
        answer: std_mpsc::Receiver<Result<T, StoreError>>,
    ) -> Result<T, StoreError> {
        match answer.recv_timeout(self.call_timeout + Duration::from_millis(ANSWER_MARGIN_MS)) {
            Ok(result) => result,
            Err(std_mpsc::RecvTimeoutError::Timeout) => {
                Err(unavailable("PostgreSQL did not answer in time"))
            }
            Err(std_mpsc::RecvTimeoutError::Disconnected) => Err(StoreError::Closed),
        }
    }

    /// Takes one part of the start-up state, reading everything afresh first when that part was taken
    /// already or writes happened since it was read.
    fn take<T>(&self, mut part: impl FnMut(&mut Loaded) -> Option<T>) -> Result<T, StoreError> {
        let mut loaded = self.loaded.lock();
        if self.written.swap(false, Ordering::SeqCst) {
            *loaded = self.reload()?;
        }
        if let Some(taken) = part(&mut loaded) {
            return Ok(taken);
        }
        *loaded = self.reload()?;
        part(&mut loaded).ok_or_else(|| StoreError::Io("a fresh load lacks a part".into()))
    }

    /// Everything start-up reads, read by the writer after everything submitted before.
    fn reload(&self) -> Result<Loaded, StoreError> {
        let (done, answer) = std_mpsc::channel();
        self.jobs
            .send(Job::Load { done })
            .map_err(|_| StoreError::Closed)?;
        let bound = Duration::from_millis(LOAD_TIMEOUT_MS) + self.call_timeout * 2;
        match answer.recv_timeout(bound) {
            Ok(result) => result,
            Err(std_mpsc::RecvTimeoutError::Timeout) => {
                Err(unavailable("loading from PostgreSQL timed out"))
            }
            Err(std_mpsc::RecvTimeoutError::Disconnected) => Err(StoreError::Closed),
        }
    }
}

impl Store for PgStore {
    fn load_queues(&self) -> Result<Snapshot, StoreError> {
        let mut next_queue_id = 0;
        let queues = self.take(|loaded| {
            next_queue_id = loaded.next_queue_id;
            loaded.queues.take()
        })?;
        Ok(Snapshot {
            next_queue_id,
            queues,
        })
    }

    fn load_messages(
        &self,
        each: &mut dyn FnMut(QueueId, Seq, MessageState),
    ) -> Result<(), StoreError> {
        for (queue, seq, state) in self.take(|loaded| loaded.messages.take())? {
            each(queue, seq, state);
        }
        Ok(())
    }

    fn load_redrives(
        &self,
        each: &mut dyn FnMut(QueueId, Seq, MessageRedrivePolicy),
    ) -> Result<(), StoreError> {
        for (queue, seq, policy) in self.take(|loaded| loaded.redrives.take())? {
            each(queue, seq, policy);
        }
        Ok(())
    }

    fn load_groups(&self, each: &mut dyn FnMut(QueueId, Seq, String)) -> Result<(), StoreError> {
        for (queue, seq, group) in self.take(|loaded| loaded.groups.take())? {
            each(queue, seq, group);
        }
        Ok(())
    }

    fn load_dedup(
        &self,
        each: &mut dyn FnMut(QueueId, String, DedupEntry),
    ) -> Result<(), StoreError> {
        for (queue, key, entry) in self.take(|loaded| loaded.dedup.take())? {
            each(queue, key, entry);
        }
        Ok(())
    }

    fn load_move_tasks(&self) -> Result<Vec<MoveTaskRecord>, StoreError> {
        self.take(|loaded| loaded.move_tasks.take())
    }

    fn load_history(
        &self,
        each: &mut dyn FnMut(QueueId, Seq, DeliveryHistory),
    ) -> Result<(), StoreError> {
        for (queue, seq, history) in self.take(|loaded| loaded.histories.take())? {
            each(queue, seq, history);
        }
        Ok(())
    }

    fn submit(&self, ops: Vec<StoreOp>) -> Commit {
        if !ops.is_empty() {
            self.written.store(true, Ordering::SeqCst);
        }
        let (done, answer) = oneshot::channel();
        if self.jobs.send(Job::Ops { ops, done }).is_err() {
            return Box::pin(std::future::ready(Err(StoreError::Closed)));
        }
        Box::pin(async move { answer.await.unwrap_or(Err(StoreError::Closed)) })
    }

    fn read_payloads(
        &self,
        queue: QueueId,
        seqs: &[Seq],
    ) -> Result<Vec<Option<Payload>>, StoreError> {
        if seqs.is_empty() {
            return Ok(Vec::new());
        }
        let (done, answer) = std_mpsc::channel();
        self.read(
            ReadJob::Payloads {
                queue,
                seqs: seqs.to_vec(),
                done: Reply::Blocking(done),
            },
            answer,
        )
    }

    fn read_payloads_later(&self, queue: QueueId, seqs: Vec<Seq>) -> PayloadRead {
        if seqs.is_empty() {
            return Box::pin(std::future::ready(Ok(Vec::new())));
        }
        let (done, answer) = oneshot::channel();
        let job = ReadJob::Payloads {
            queue,
            seqs,
            done: Reply::Later(done),
        };
        self.read_later(job, answer)
    }

    fn read_inbox_later(&self, limit: usize) -> InboxRead {
        let Scope::Partition { partition, .. } = self.scope else {
            return Box::pin(std::future::ready(Ok(Vec::new()))); // one store for every queue: no inbox
        };
        let (done, answer) = oneshot::channel();
        let job = ReadJob::Inbox {
            partition: partition as i32,
            limit: i64::try_from(limit).unwrap_or(i64::MAX),
            done: Reply::Later(done),
        };
        self.read_later(job, answer)
    }
}
