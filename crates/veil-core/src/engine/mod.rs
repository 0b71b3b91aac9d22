//! The engine: the only place that decides visibility. It applies every operation of docs/semantics.md §2 to the in-memory
//! index under one lock, hands the resulting [`StoreOp`]s to the store in the same order, and answers only once
//! the store says they are durable. Long polls wait on a per-queue `Notify` and on a timer set to the queue's
//! next pending deadline; they never poll.
//!
//! Each operation lives in the file of its kind (ARCHITECTURE.md, veil-core): `queues` (create, settings,
//! purge, sweep), `send`, `receive` (long polls, FIFO attempts, peek), `settle` (delete, visibility, Azure's
//! update), `moves` (dead letters and re-queues), `inbox` (moves arriving from other partitions), `history`,
//! `admin` (operators) and `move_tasks`. This file holds what they share: the lock, the state and `on_queue`,
//! the skeleton they run through.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use foldhash::HashMapExt;

use crate::clock::{Clock, Millis};
use crate::error::{EngineError, EngineResult};
use crate::inbox::Placement;
use crate::index::QueueIndex;
use crate::model::*;
use crate::receipt::ReceiptKey;
use crate::store::{Commit, Store, StoreOp};

mod admin;
mod history;
mod inbox;
mod lock;
mod move_tasks;
mod moves;
mod queues;
mod receive;
mod send;
mod settle;

pub(crate) use receive::HandOff;

pub use admin::{QueueOverview, CREATED_BY_SETTING};
pub use lock::{DurationCounts, LockTimes};

/// Every queue's index by its id.
type QueueMap = foldhash::HashMap<QueueId, QueueIndex>;

struct State {
    /// Keyed by ids the engine assigns, so hashed fast (docs/decisions/0014-hashing.md).
    queues: QueueMap,
    /// Sorted so that listing is ordered by namespace, then name.
    by_key: BTreeMap<QueueKey, QueueId>,
    next_queue_id: QueueId,
    /// When each recently deleted queue was deleted (SQS's QueueDeletedRecently); not persisted.
    deleted_at: HashMap<QueueKey, Millis>,
    /// Message move tasks (docs/semantics.md §8), under the same lock as the queues.
    move_tasks: move_tasks::MoveTasks,
}

impl State {
    fn queue_id(&self, key: &QueueKey) -> EngineResult<QueueId> {
        self.by_key
            .get(key)
            .copied()
            .ok_or_else(|| EngineError::QueueNotFound(key.clone()))
    }
}

/// The queue engine. Cheap to share behind an `Arc`.
pub struct Engine {
    /// One lock over every queue: an operation touching two queues (a dead-letter move) stays atomic, and the
    /// order in which changes reach the store is the order in which they were applied. Critical sections are
    /// in-memory only; the wait for durability happens after the lock is released. Timed (lock.rs): its waits
    /// and holds are in `/metrics`.
    state: lock::TimedMutex<State>,
    store: Arc<dyn Store>,
    clock: Arc<dyn Clock>,
    receipts: ReceiptKey,
    /// Set by `shutdown`: long polls return what they have at once instead of holding a graceful shutdown.
    closing: tokio::sync::watch::Sender<bool>,
    /// Whether this engine may still answer ([`Engine::serving`]); set once by a cluster leader, whose right to
    /// answer from memory ends with its lease. Unset: always.
    gate: std::sync::OnceLock<ServingGate>,
    /// The partition this engine's queues belong to, when it holds one partition of a cluster: moves to a queue
    /// of another partition go through that partition's inbox (crate::inbox). `None`: every queue is here.
    placement: Option<Placement>,
}

/// Says whether an engine may still answer requests (see [`Engine::gate_serving`]).
pub type ServingGate = Box<dyn Fn() -> bool + Send + Sync>;

/// What a gated engine's requests are answered with once its gate closed.
pub const NOT_SERVING: &str =
    "this node's lease on the queues has lapsed; another node serves them now";

impl Engine {
    /// Rebuilds the in-memory index from the store.
    pub fn open(
        store: Arc<dyn Store>,
        clock: Arc<dyn Clock>,
        receipts: ReceiptKey,
    ) -> EngineResult<Self> {
        let snapshot = store.load_queues()?;
        let now = clock.now();
        let mut queues = QueueMap::new();
        let mut by_key = BTreeMap::new();
        for (record, counters) in snapshot.queues {
            by_key.insert(record.key.clone(), record.id);
            queues.insert(record.id, QueueIndex::new(record, counters));
        }
        Self::restore_messages(store.as_ref(), &mut queues, now)?;
        Self::restore_redrives(store.as_ref(), &mut queues)?;
        // A history whose message is gone is diagnostic data left over, not a reason to refuse start-up: it is
        // skipped (the store deletes a history with its message, so there should be none).
        store.load_history(&mut |queue, seq, history| {
            if let Some(index) = queues
                .get_mut(&queue)
                .filter(|index| index.get(seq).is_some())
            {
                index.history.restore(seq, history);
            }
        })?;
        let max_id = queues.keys().copied().max().unwrap_or(0);
        let state = State {
            queues,
            by_key,
            next_queue_id: snapshot.next_queue_id.max(max_id + 1),
            deleted_at: HashMap::new(),
            move_tasks: move_tasks::MoveTasks::load(store.as_ref(), now)?,
        };
        Ok(Self {
            state: lock::TimedMutex::new(state, clock.clone()),
            store,
            clock,
            receipts,
            closing: tokio::sync::watch::Sender::new(false),
            gate: std::sync::OnceLock::new(),
            placement: None,
        })
    }

    /// Makes this engine one partition's: moves to queues of other partitions go to their inboxes, and
    /// [`Engine::drain_inbox`] accepts what other partitions sent here.
    pub fn placed(mut self, placement: Placement) -> Self {
        self.placement = Some(placement);
        self
    }

    /// Makes [`Engine::serving`] ask `gate` from now on. A cluster leader's engine answers from memory only
    /// while its lease is surely held: a leader paused past its lease (SIGSTOP, a frozen VM) must not answer a
    /// request that reaches it over a connection it kept once it resumes, since another node may have changed
    /// the queues meanwhile (its writes fail the fencing check anyway; this covers what it would read). A
    /// second gate is ignored.
    pub fn gate_serving(&self, gate: ServingGate) {
        let _already_gated = self.gate.set(gate);
    }

    /// `Ok` while this engine may answer; the front-ends ask it for every request, after admission, and answer
    /// its error as any other store unavailability (503, gRPC `UNAVAILABLE`), which clients retry elsewhere.
    pub fn serving(&self) -> EngineResult<()> {
        match self.gate.get() {
            Some(open) if !open() => Err(EngineError::Store(crate::StoreError::Unavailable(
                NOT_SERVING.into(),
            ))),
            _ => Ok(()),
        }
    }

    /// Puts every stored message back into its queue's index, with its FIFO group, and the deduplication ids
    /// each FIFO queue remembered. A message of no queue means a corrupt store.
    fn restore_messages(store: &dyn Store, queues: &mut QueueMap, now: Millis) -> EngineResult<()> {
        // Groups first: a FIFO message joins its group as it is inserted, in seq order.
        let mut groups: foldhash::HashMap<(QueueId, Seq), String> = foldhash::HashMap::new();
        store.load_groups(&mut |queue, seq, group| {
            groups.insert((queue, seq), group);
        })?;
        let mut orphans = 0u64;
        store.load_messages(&mut |queue, seq, state| match queues.get_mut(&queue) {
            Some(index) => {
                let group = groups.remove(&(queue, seq));
                index.insert(seq, state, group.as_deref(), now);
            }
            None => orphans += 1,
        })?;
        Self::restore_dedup(store, queues)?;
        if orphans > 0 {
            return Err(crate::store::StoreError::Corrupt(format!(
                "{orphans} messages belong to no queue"
            ))
            .into());
        }
        Ok(())
    }

    /// Gives messages back their own redrive rules. A rule of no stored message means a corrupt store.
    fn restore_redrives(store: &dyn Store, queues: &mut QueueMap) -> EngineResult<()> {
        let mut stray_redrives = 0u64;
        store.load_redrives(&mut |queue, seq, policy| match queues
            .get_mut(&queue)
            .filter(|index| index.get(seq).is_some())
        {
            Some(index) => index.set_redrive(seq, policy),
            None => stray_redrives += 1,
        })?;
        if stray_redrives > 0 {
            return Err(crate::store::StoreError::Corrupt(format!(
                "{stray_redrives} message redrive policies belong to no message"
            ))
            .into());
        }
        Ok(())
    }

    /// Gives each FIFO queue back the deduplication ids it remembered before the restart.
    fn restore_dedup(store: &dyn Store, queues: &mut QueueMap) -> EngineResult<()> {
        store.load_dedup(&mut |queue, key, entry| {
            if let Some(fifo) = queues.get_mut(&queue).and_then(|q| q.fifo.as_mut()) {
                fifo.dedup.remember(key, entry);
            }
        })?;
        for fifo in queues.values_mut().filter_map(|q| q.fifo.as_mut()) {
            fifo.dedup.restored();
        }
        Ok(())
    }

    /// Ends every long poll now (they answer with no messages) and every later one at once, so that a
    /// graceful shutdown does not wait for receive wait times.
    pub fn shutdown(&self) {
        self.closing.send_replace(true);
    }

    pub fn now(&self) -> Millis {
        self.clock.now()
    }

    fn info(index: &QueueIndex, now: Millis) -> QueueInfo {
        QueueInfo {
            id: index.id(),
            key: index.record.key.clone(),
            config: index.record.config.clone(),
            created_at: index.record.created_at,
            modified_at: index.record.modified_at,
            stats: index.stats(now),
        }
    }

    /// Brings one queue up to `now`, queueing the store changes that expiry caused. Returns how many
    /// messages expired.
    fn advance(index: &mut QueueIndex, now: Millis, ops: &mut Vec<StoreOp>) -> u64 {
        let advanced = index.advance(now, ops);
        if advanced.counters_changed {
            ops.push(StoreOp::put_counters(index.id(), index.counters));
        }
        advanced.expired
    }

    /// Submits `ops` (while the caller still holds the lock, preserving order) unless there are none.
    fn submit(&self, ops: Vec<StoreOp>) -> Option<Commit> {
        (!ops.is_empty()).then(|| self.store.submit(ops))
    }

    async fn durable(commit: Option<Commit>) -> EngineResult<()> {
        if let Some(commit) = commit {
            commit.await?;
        }
        Ok(())
    }

    /// The skeleton every operation on one queue shares: take the lock, find the queue, bring it up to `now`
    /// (due messages, expiry, dead letters released), run `op`, move what `op` released, and submit the store
    /// changes while still holding the lock (ADR 0002), so that the store sees them in the order memory did.
    /// The caller awaits the returned commit after the lock is gone.
    fn on_queue<R>(
        &self,
        key: &QueueKey,
        now: Millis,
        op: impl FnOnce(&mut Locked<'_>) -> R,
    ) -> EngineResult<(R, Option<Commit>)> {
        let mut guard = self.state.lock();
        let id = guard.queue_id(key)?;
        let mut locked = self.brought_up_to(&mut guard, id, now, Vec::new());
        let result = op(&mut locked);
        self.release_dead_letters(&mut locked);
        // What the operation made deliverable (or its dead-letter moves, in their targets) wakes as many
        // waiters, still under the lock.
        locked.index().waiters.wake();
        Ok((result, self.submit(locked.ops)))
    }

    /// One queue under the lock, brought up to `now`: due messages promoted, expired ones removed, released
    /// dead letters moved. Its changes are appended to `ops`.
    fn brought_up_to<'a>(
        &self,
        state: &'a mut State,
        id: QueueId,
        now: Millis,
        mut ops: Vec<StoreOp>,
    ) -> Locked<'a> {
        let index = state.queues.get_mut(&id).expect("by_key and queues agree");
        let expired = Self::advance(index, now, &mut ops);
        let mut locked = Locked {
            state,
            id,
            now,
            ops,
            expired,
        };
        self.release_dead_letters(&mut locked);
        locked
    }

    /// Checks every queue's index bookkeeping (tests).
    pub fn check_invariants(&self) {
        let now = self.clock.now();
        let state = self.state.lock();
        assert_eq!(state.by_key.len(), state.queues.len());
        for index in state.queues.values() {
            index.check_invariants(now);
        }
    }

    /// Number of messages the index holds for a queue (tests, statistics).
    pub fn message_count(&self, key: &QueueKey) -> EngineResult<usize> {
        let state = self.state.lock();
        let id = state.queue_id(key)?;
        Ok(state.queues[&id].len())
    }
}

/// One queue under the engine lock, with the store changes its operation has made so far.
struct Locked<'a> {
    state: &'a mut State,
    id: QueueId,
    now: Millis,
    /// Submitted in this order when the operation ends, still under the lock.
    ops: Vec<StoreOp>,
    /// Messages found expired when the queue was brought up to `now`.
    expired: u64,
}

impl Locked<'_> {
    /// The queue's index and the change list, borrowed together.
    fn parts(&mut self) -> (&mut QueueIndex, &mut Vec<StoreOp>) {
        let index = self
            .state
            .queues
            .get_mut(&self.id)
            .expect("by_key and queues agree");
        (index, &mut self.ops)
    }

    fn index(&mut self) -> &mut QueueIndex {
        self.parts().0
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, Ordering};

    use super::*;
    use crate::clock::ManualClock;
    use crate::memory_store::MemoryStore;

    #[test]
    fn a_gated_engine_stops_serving_when_its_gate_closes() {
        let engine = Engine::open(
            Arc::new(MemoryStore::new()),
            Arc::new(ManualClock::new(1_000)),
            ReceiptKey::new([7; 32]),
        )
        .expect("opens");
        assert!(engine.serving().is_ok(), "an ungated engine serves");
        let open = Arc::new(AtomicBool::new(true));
        let gate = open.clone();
        engine.gate_serving(Box::new(move || gate.load(Ordering::SeqCst)));
        assert!(engine.serving().is_ok());
        open.store(false, Ordering::SeqCst);
        match engine.serving() {
            Err(EngineError::Store(crate::StoreError::Unavailable(message))) => {
                assert_eq!(message, NOT_SERVING)
            }
            other => panic!("expected unavailable, got {other:?}"),
        }
    }
}
