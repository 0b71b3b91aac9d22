//! A [`Store`] whose durability the simulator decides. Submissions queue up as *pending* and their [`Commit`]
//! futures stay unresolved until the simulator flushes them (in order, as a group commit does), fails them
//! (the store then fail-stops like veil-store's writer: every later submission fails too), or crashes (the
//! pending ones are lost, except a prefix the "disk" happened to keep). What is durable is a veil-core
//! [`MemoryStore`], which applies operations exactly as the engine's tests expect a store to; start-up reads
//! only from it, so a re-opened engine sees what the store really holds.

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use parking_lot::Mutex;
use veil_core::history::DeliveryHistory;
use veil_core::memory_store::MemoryStore;
use veil_core::move_task::MoveTaskRecord;
use veil_core::store::{Commit, Snapshot};
use veil_core::{
    DedupEntry, MessageRedrivePolicy, MessageState, Payload, QueueId, Seq, Store, StoreError,
    StoreOp,
};

/// How the store keeps its promise; anything but `Honest` is a deliberately broken store that the simulator
/// must catch (tests/checker_fails.rs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StoreMode {
    Honest,
    /// Resolves every commit at once while the write is still pending (lost on a crash).
    AcksBeforeDurable,
    /// Not this store: veil-store's real log, checkpointer and recovery on a simulated disk (`wal.rs`).
    Wal,
}

/// Where a commit's answer is left for its future.
type Slot = Arc<Mutex<Option<Result<(), String>>>>;

struct Submission {
    ops: Vec<StoreOp>,
    slot: Slot,
}

#[derive(Default)]
struct Pending {
    queue: VecDeque<Submission>,
    /// Set by a failed commit; cleared only by a crash (a restart of the process).
    failed: bool,
}

pub struct FaultStore {
    durable: MemoryStore,
    pending: Mutex<Pending>,
    mode: StoreMode,
}

impl FaultStore {
    pub fn new(mode: StoreMode) -> Self {
        Self {
            durable: MemoryStore::new(),
            pending: Mutex::new(Pending::default()),
            mode,
        }
    }

    /// The durable part, which the checker reads (through the `Store` trait) to see what a crash would keep.
    pub fn durable(&self) -> &MemoryStore {
        &self.durable
    }

    pub fn pending_count(&self) -> usize {
        self.pending.lock().queue.len()
    }

    pub fn failed(&self) -> bool {
        self.pending.lock().failed
    }

    /// Makes the oldest `count` pending submissions durable, in order, and resolves their commits.
    pub fn flush(&self, count: usize) -> usize {
        let mut pending = self.pending.lock();
        let mut flushed = 0;
        while flushed < count {
            let Some(submission) = pending.queue.pop_front() else {
                break;
            };
            self.apply(submission.ops);
            *submission.slot.lock() = Some(Ok(()));
            flushed += 1;
        }
        flushed
    }

    /// The oldest pending submission's write fails. `reached_disk`: the write got to the disk before the error
    /// was reported (a torn fsync), so a restart will find it. Every later pending submission fails without
    /// being written, and so will every later one until a crash: the store fail-stops.
    pub fn fail(&self, reached_disk: bool) -> usize {
        let mut pending = self.pending.lock();
        pending.failed = true;
        let mut failed = 0;
        while let Some(submission) = pending.queue.pop_front() {
            if failed == 0 && reached_disk {
                self.apply(submission.ops);
            }
            *submission.slot.lock() = Some(Err("injected write failure".into()));
            failed += 1;
        }
        failed
    }

    /// The process dies: the oldest `kept` pending submissions happen to be on disk, the rest are lost, and no
    /// commit resolves. The store is usable again (a restart clears a fail-stop).
    pub fn crash(&self, kept: usize) -> usize {
        let mut pending = self.pending.lock();
        let mut lost = 0;
        let mut index = 0;
        while let Some(submission) = pending.queue.pop_front() {
            if index < kept {
                self.apply(submission.ops);
            } else {
                lost += 1;
            }
            index += 1;
        }
        pending.failed = false;
        lost
    }

    fn apply(&self, ops: Vec<StoreOp>) {
        // The memory store applies at once; its commit is already resolved.
        drop(self.durable.submit(ops));
    }
}

/// A commit that resolves when the simulator writes an answer in its slot.
struct SlotCommit(Slot);

impl Future for SlotCommit {
    type Output = Result<(), StoreError>;

    fn poll(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<Self::Output> {
        // No waker is registered: the simulator polls every pending operation after every step.
        match self.0.lock().take() {
            Some(Ok(())) => Poll::Ready(Ok(())),
            Some(Err(message)) => Poll::Ready(Err(StoreError::Io(message))),
            None => Poll::Pending,
        }
    }
}

impl Store for FaultStore {
    fn load_queues(&self) -> Result<Snapshot, StoreError> {
        self.durable.load_queues()
    }

    fn load_messages(
        &self,
        each: &mut dyn FnMut(QueueId, Seq, MessageState),
    ) -> Result<(), StoreError> {
        self.durable.load_messages(each)
    }

    fn load_redrives(
        &self,
        each: &mut dyn FnMut(QueueId, Seq, MessageRedrivePolicy),
    ) -> Result<(), StoreError> {
        self.durable.load_redrives(each)
    }

    fn load_groups(&self, each: &mut dyn FnMut(QueueId, Seq, String)) -> Result<(), StoreError> {
        self.durable.load_groups(each)
    }

    fn load_dedup(
        &self,
        each: &mut dyn FnMut(QueueId, String, DedupEntry),
    ) -> Result<(), StoreError> {
        self.durable.load_dedup(each)
    }

    fn load_move_tasks(&self) -> Result<Vec<MoveTaskRecord>, StoreError> {
        self.durable.load_move_tasks()
    }

    fn load_history(
        &self,
        each: &mut dyn FnMut(QueueId, Seq, DeliveryHistory),
    ) -> Result<(), StoreError> {
        self.durable.load_history(each)
    }

    fn submit(&self, ops: Vec<StoreOp>) -> Commit {
        let mut pending = self.pending.lock();
        if pending.failed {
            return Box::pin(std::future::ready(Err(StoreError::Io(
                "the store failed earlier and accepts no more writes".into(),
            ))));
        }
        let slot: Slot = Arc::new(Mutex::new(None));
        if self.mode == StoreMode::AcksBeforeDurable {
            *slot.lock() = Some(Ok(()));
        }
        pending.queue.push_back(Submission {
            ops,
            slot: slot.clone(),
        });
        Box::pin(SlotCommit(slot))
    }

    fn read_payloads(
        &self,
        queue: QueueId,
        seqs: &[Seq],
    ) -> Result<Vec<Option<Payload>>, StoreError> {
        self.durable.read_payloads(queue, seqs)
    }
}
