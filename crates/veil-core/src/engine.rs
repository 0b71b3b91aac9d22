//! The engine: the only place that decides visibility. It applies every operation of docs/semantics.md §2 to the in-memory
//! index under one lock, hands the resulting [`StoreOp`]s to the store in the same order, and answers only once
//! the store says they are durable. Long polls wait on a per-queue `Notify` and on a timer set to the queue's
//! next pending deadline; they never poll.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use parking_lot::Mutex;

use crate::clock::{Clock, Millis};
use crate::error::{EngineError, EngineResult};
use crate::history::{Consumer, DeliveryEnding, DeliveryHistory, DeliveryRecord, MessageHistory};
use crate::index::QueueIndex;
use crate::limits;
use crate::model::*;
use crate::receipt::{Receipt, ReceiptKey};
use crate::store::{Commit, Store, StoreOp};

mod admin;
mod move_tasks;

pub use admin::{QueueOverview, CREATED_BY_SETTING};

/// Most dead-letter moves one receive performs before it returns; the next receive continues.
const DEAD_LETTER_MOVES_PER_RECEIVE_MAX: usize = 1_000;

struct State {
    queues: HashMap<QueueId, QueueIndex>,
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
    /// in-memory only; the wait for durability happens after the lock is released.
    state: Mutex<State>,
    store: Arc<dyn Store>,
    clock: Arc<dyn Clock>,
    receipts: ReceiptKey,
    /// Set by `shutdown`: long polls return what they have at once instead of holding a graceful shutdown.
    closing: tokio::sync::watch::Sender<bool>,
}

impl Engine {
    /// Rebuilds the in-memory index from the store.
    pub fn open(
        store: Arc<dyn Store>,
        clock: Arc<dyn Clock>,
        receipts: ReceiptKey,
    ) -> EngineResult<Self> {
        let snapshot = store.load_queues()?;
        let now = clock.now();
        let mut queues = HashMap::new();
        let mut by_key = BTreeMap::new();
        for (record, counters) in snapshot.queues {
            by_key.insert(record.key.clone(), record.id);
            queues.insert(record.id, QueueIndex::new(record, counters));
        }
        // Groups first: a FIFO message joins its group as it is inserted, in seq order.
        let mut groups: HashMap<(QueueId, Seq), String> = HashMap::new();
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
        Self::restore_dedup(store.as_ref(), &mut queues)?;
        if orphans > 0 {
            return Err(crate::store::StoreError::Corrupt(format!(
                "{orphans} messages belong to no queue"
            ))
            .into());
        }
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
            state: Mutex::new(state),
            store,
            clock,
            receipts,
            closing: tokio::sync::watch::Sender::new(false),
        })
    }

    /// Gives each FIFO queue back the deduplication ids it remembered before the restart.
    fn restore_dedup(
        store: &dyn Store,
        queues: &mut HashMap<QueueId, QueueIndex>,
    ) -> EngineResult<()> {
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
            ops.push(StoreOp::PutCounters {
                queue: index.id(),
                counters: index.counters,
            });
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

    /// Moves the messages released with their receives used up under an `OnRelease` rule (KubeMQ), so that a
    /// consumer of the dead-letter queue sees them at once. One whose target is gone stays visible; the next
    /// receive applies the rule again.
    fn release_dead_letters(&self, locked: &mut Locked<'_>) {
        let released = locked.index().take_released();
        if released.is_empty() {
            return; // the common case, twice per operation: no look-up beyond the index
        }
        let (id, now) = (locked.id, locked.now);
        let queue_dead_letter = Self::queue_dead_letter(locked.state, id);
        let index = locked.index();
        let mut moves = Vec::new();
        for seq in released {
            let Some(current) = index.get(seq).filter(|s| s.visible_at <= now) else {
                continue; // deleted, or received again, since it was released
            };
            if let Some(route) = Self::dead_letter_route(index, seq, current, queue_dead_letter) {
                let group = index.group_of(seq).map(str::to_owned);
                let history = index.history.take(seq);
                index.remove(seq);
                moves.push(DeadLetter {
                    seq,
                    state: current,
                    route,
                    history,
                    group,
                });
            }
        }
        if moves.is_empty() {
            return;
        }
        self.dead_letter(locked.state, id, moves, now, &mut locked.ops);
        let counters = locked.index().counters;
        locked.ops.push(StoreOp::PutCounters {
            queue: id,
            counters,
        });
    }

    /// The target and threshold of a queue's redrive policy, if its dead-letter queue exists and is another.
    fn queue_dead_letter(state: &State, id: QueueId) -> Option<(QueueId, u32)> {
        let policy = state.queues[&id].record.config.redrive_policy.as_ref()?;
        let target = state.by_key.get(&policy.dead_letter_queue).copied()?;
        (target != id).then_some((target, policy.max_receive_count))
    }

    // ----- queue administration -----

    pub async fn create_queue(
        &self,
        key: QueueKey,
        config: QueueConfig,
    ) -> EngineResult<CreateOutcome> {
        let now = self.clock.now();
        let (outcome, commit) = {
            let mut state = self.state.lock();
            if let Some(&id) = state.by_key.get(&key) {
                let index = &state.queues[&id];
                return Ok(CreateOutcome::Existing(Self::info(index, now)));
            }
            let mut ops = Vec::with_capacity(2);
            let id = Self::insert_queue(&mut state, key, config, now, &mut ops);
            let info = Self::info(&state.queues[&id], now);
            (CreateOutcome::Created(info), self.submit(ops))
        };
        Self::durable(commit).await?;
        Ok(outcome)
    }

    pub async fn delete_queue(&self, key: &QueueKey) -> EngineResult<()> {
        let now = self.clock.now();
        let commit = {
            let mut state = self.state.lock();
            let id = state.queue_id(key)?;
            state.by_key.remove(key);
            if let Some(mut index) = state.queues.remove(&id) {
                // Every waiter re-checks and ends with QueueDoesNotExist.
                index.waiters.wake_all();
            }
            state.deleted_at.insert(key.clone(), now);
            self.submit(vec![StoreOp::DeleteQueue(id)])
        };
        Self::durable(commit).await
    }

    /// When `key` was last deleted, if this process saw it.
    pub fn deleted_at(&self, key: &QueueKey) -> Option<Millis> {
        self.state.lock().deleted_at.get(key).copied()
    }

    pub fn queue_info(&self, key: &QueueKey) -> EngineResult<QueueInfo> {
        let now = self.clock.now();
        let (info, commit) = self.on_queue(key, now, |locked| Self::info(locked.index(), now))?;
        // Expiry removals need no wait: they are not a success returned to anyone.
        drop(commit);
        Ok(info)
    }

    /// Whether the queue exists. A cheap check for request paths that must report a missing queue before
    /// anything else, without copying the queue's settings as `queue_info` does.
    pub fn queue_exists(&self, key: &QueueKey) -> bool {
        self.state.lock().by_key.contains_key(key)
    }

    /// The queue's message size limit, for front-ends that must refuse an oversized entry of a batch on its
    /// own before sending the rest (the engine's own check refuses a whole send).
    pub fn message_size_limit(&self, key: &QueueKey) -> EngineResult<u32> {
        let state = self.state.lock();
        let id = state.queue_id(key)?;
        Ok(state.queues[&id].record.config.message_size_bytes_max)
    }

    /// Queues of a namespace whose name starts with `prefix`, ordered by name.
    pub fn list_queues(&self, namespace: &str, prefix: &str) -> Vec<QueueInfo> {
        let now = self.clock.now();
        let state = self.state.lock();
        state
            .by_key
            .iter()
            .filter(|(key, _)| key.namespace == namespace && key.name.starts_with(prefix))
            .map(|(_, id)| Self::info(&state.queues[id], now))
            .collect()
    }

    /// Applies `change` to a queue's settings; nothing is stored if it fails.
    pub async fn update_queue_config<F>(&self, key: &QueueKey, change: F) -> EngineResult<QueueInfo>
    where
        F: FnOnce(&mut QueueConfig) -> EngineResult<()>,
    {
        let now = self.clock.now();
        let (info, commit) = {
            let mut state = self.state.lock();
            let id = state.queue_id(key)?;
            let index = state.queues.get_mut(&id).expect("by_key and queues agree");
            let mut config = index.record.config.clone();
            change(&mut config)?;
            if config.fifo.is_some() != index.fifo.is_some() {
                // The index keeps a FIFO queue's groups from its first message on; it cannot start or stop.
                return Err(EngineError::InvalidArgument(
                    "a queue's FIFO setting cannot change after it is created".into(),
                ));
            }
            index.record.config = config;
            index.record.modified_at = now;
            let info = Self::info(index, now);
            (
                info,
                self.submit(vec![StoreOp::PutQueue(index.record.clone())]),
            )
        };
        Self::durable(commit).await?;
        Ok(info)
    }

    /// Queues whose redrive policy names `key` as their dead-letter queue.
    pub fn dead_letter_sources(&self, key: &QueueKey) -> EngineResult<Vec<QueueKey>> {
        let state = self.state.lock();
        state.queue_id(key)?;
        Ok(state
            .queues
            .values()
            .filter(|q| {
                q.record
                    .config
                    .redrive_policy
                    .as_ref()
                    .is_some_and(|p| &p.dead_letter_queue == key)
            })
            .map(|q| q.record.key.clone())
            .collect::<std::collections::BTreeSet<_>>()
            .into_iter()
            .collect())
    }

    /// Deletes every message of the queue. Returns how many there were. With `interval_ms_min`, refuses (with
    /// `PurgeTooSoon`) when the previous purge was less than that long ago; the check and the purge are atomic.
    pub async fn purge(
        &self,
        key: &QueueKey,
        interval_ms_min: Option<Millis>,
    ) -> EngineResult<u64> {
        let now = self.clock.now();
        let (count, commit) = {
            let mut state = self.state.lock();
            let id = state.queue_id(key)?;
            let index = state.queues.get_mut(&id).expect("by_key and queues agree");
            if let (Some(interval_ms), Some(last)) = (interval_ms_min, index.last_purge_at) {
                if now.saturating_sub(last) < interval_ms {
                    return Err(EngineError::PurgeTooSoon {
                        last_purge_at: last,
                        interval_ms,
                    });
                }
            }
            let count = index.clear();
            index.last_purge_at = Some(now);
            (count, self.submit(vec![StoreOp::PurgeQueue(id)]))
        };
        Self::durable(commit).await?;
        Ok(count)
    }

    /// When the queue was last purged by this process.
    pub fn last_purge_at(&self, key: &QueueKey) -> EngineResult<Option<Millis>> {
        let state = self.state.lock();
        let id = state.queue_id(key)?;
        Ok(state.queues[&id].last_purge_at)
    }

    pub fn stats(&self, key: &QueueKey) -> EngineResult<QueueStats> {
        self.queue_info(key).map(|info| info.stats)
    }

    /// Brings every queue up to now: promotes due messages and removes expired ones. The server calls this
    /// periodically so that expired messages leave the store even on queues nobody reads.
    pub fn sweep(&self) {
        let now = self.clock.now();
        let mut guard = self.state.lock();
        // In id order, not the map's (random) order: a dead-letter move made while bringing one queue up can
        // land in a queue visited before or after it, so the order decides what this sweep leaves behind, and
        // the same history must give the same state (the simulator replays runs by seed; veil-sim).
        let mut ids: Vec<QueueId> = guard.queues.keys().copied().collect();
        ids.sort_unstable();
        let mut ops = Vec::new();
        for id in ids {
            let mut locked = self.brought_up_to(&mut guard, id, now, ops);
            // Messages whose deadline passed wake as many waiters.
            locked.index().waiters.wake();
            ops = locked.ops;
        }
        drop(self.submit(ops));
    }

    // ----- messages -----

    pub async fn send(
        &self,
        key: &QueueKey,
        messages: Vec<NewMessage>,
    ) -> EngineResult<Vec<SentMessage>> {
        let now = self.clock.now();
        if messages
            .iter()
            .any(|m| m.redrive.as_ref().is_some_and(|p| p.max_receive_count == 0))
        {
            return Err(receive_count_zero());
        }
        // Digests and ids are computed before taking the lock: they need no shared state. The body's SHA-256
        // only for a queue that deduplicates by content (a standard queue's grouped sends need none).
        let by_content = messages
            .iter()
            .any(|m| m.group.is_some() && m.dedup_id.is_none())
            && self.dedups_by_content(key);
        let prepared: Vec<Prepared> = messages
            .iter()
            .map(|m| Prepared::of(m, by_content))
            .collect();
        let (sent, commit) = self.on_queue(key, now, |locked| {
            Self::store_messages(locked, messages, prepared)
        })?;
        Self::durable(commit).await?;
        sent
    }

    /// Sends several messages to one queue, each judged on its own: a message the queue refuses (too large, a
    /// FIFO queue's missing group or deduplication id, a max receive count of 0) gets its own error while the
    /// others are stored — all of them under one lock and with one commit. The outer error is the queue's (or
    /// the store's). KubeMQ's batch send and upstream stream.
    pub async fn send_each(
        &self,
        key: &QueueKey,
        messages: Vec<NewMessage>,
    ) -> EngineResult<Vec<EngineResult<SentMessage>>> {
        let now = self.clock.now();
        let by_content = messages
            .iter()
            .any(|m| m.group.is_some() && m.dedup_id.is_none())
            && self.dedups_by_content(key);
        let prepared: Vec<Prepared> = messages
            .iter()
            .map(|m| Prepared::of(m, by_content))
            .collect();
        let (results, commit) = self.on_queue(key, now, |locked| {
            let config = &locked.index().record.config;
            let (size_max, fifo) = (config.message_size_bytes_max, config.fifo);
            let mut results: Vec<Option<EngineResult<SentMessage>>> = Vec::new();
            let (mut accepted, mut accepted_prepared) = (Vec::new(), Vec::new());
            for (message, prepared) in messages.into_iter().zip(prepared) {
                match check_one_send(&message, size_max, fifo.as_ref()) {
                    Ok(()) => {
                        accepted.push(message);
                        accepted_prepared.push(prepared);
                        results.push(None);
                    }
                    Err(error) => results.push(Some(Err(error))),
                }
            }
            if accepted.is_empty() {
                return Ok(results.into_iter().flatten().collect());
            }
            let mut sent = Self::store_messages(locked, accepted, accepted_prepared)?.into_iter();
            Ok(results
                .into_iter()
                .filter_map(|result| result.or_else(|| sent.next().map(Ok)))
                .collect())
        })?;
        Self::durable(commit).await?;
        results
    }

    /// Whether the queue is FIFO with content-based deduplication (a brief look under the lock).
    fn dedups_by_content(&self, key: &QueueKey) -> bool {
        let state = self.state.lock();
        let config = state
            .by_key
            .get(key)
            .map(|id| &state.queues[id].record.config);
        config
            .and_then(|c| c.fifo)
            .is_some_and(|f| f.content_based_dedup)
    }

    /// Adds new messages to a locked queue: the part of `send` that needs the lock.
    fn store_messages(
        locked: &mut Locked<'_>,
        messages: Vec<NewMessage>,
        prepared: Vec<Prepared>,
    ) -> EngineResult<Vec<SentMessage>> {
        let (id, now) = (locked.id, locked.now);
        let (index, ops) = locked.parts();
        let config = &index.record.config;
        if let Some(too_large) = messages
            .iter()
            .find(|m| m.size_bytes() > config.message_size_bytes_max as usize)
        {
            return Err(EngineError::MessageTooLarge {
                size_bytes: too_large.size_bytes(),
                max_bytes: config.message_size_bytes_max,
            });
        }
        let fifo = config.fifo;
        if let Some(fifo) = fifo {
            check_fifo_sends(&fifo, &messages)?;
        }
        let (delay_ms, retention_ms) = (config.delay_ms, config.retention_ms);
        ops.reserve(messages.len() + 2);
        let mut sent = Vec::with_capacity(messages.len());
        let mut wake = false;
        for (message, prepared) in messages.into_iter().zip(prepared) {
            let Prepared {
                body_md5: digest,
                message_id,
                ..
            } = prepared;
            // The hash is missing only if content-based deduplication was switched on since `send` looked.
            let by_content = || {
                prepared
                    .body_sha256
                    .or_else(|| Some(sha256_hex(&message.body)))
            };
            let dedup_id = fifo.and_then(|_| message.dedup_id.clone().or_else(by_content));
            let dedup_key = fifo.zip(dedup_id.as_deref()).map(|(fifo, dedup_id)| {
                let by_group = fifo.dedup_scope == DedupScope::Group;
                crate::fifo::dedup_key(message.group.as_deref().filter(|_| by_group), dedup_id)
            });
            if let Some(original) = fifo.zip(dedup_key.as_deref()).and_then(|(config, key)| {
                let remembered = &index.fifo.as_ref()?.dedup;
                remembered.get(key, now, config.dedup_interval_ms)
            }) {
                sent.push(SentMessage {
                    message_id: original.message_id,
                    body_md5: digest,
                    queue: id,
                    seq: original.seq,
                    sent_at: original.sent_at,
                    visible_at: now,
                    expires_at: NEVER,
                    duplicate: true,
                });
                continue;
            }
            let seq = index.alloc_seq(ops);
            let message_state = new_state(&message, now, delay_ms, retention_ms);
            let (visible_at, expires_at) = (message_state.visible_at, message_state.expires_at);
            let payload = Payload {
                message_id,
                body: message.body,
                body_md5: digest,
                attributes: message.attributes,
                sent_at: now,
                sender_id: message.sender_id,
                moved_from: message.moved_from,
                group: message.group,
                dedup_id,
            };
            let fifo_group = fifo.map(|_| payload.group.clone().unwrap_or_default());
            wake |= index.insert(seq, message_state, fifo_group.as_deref(), now);
            if let (Some(key), Some(fifo)) = (dedup_key, index.fifo.as_mut()) {
                let entry = DedupEntry {
                    sent_at: now,
                    message_id,
                    seq,
                };
                fifo.dedup.remember(key.clone(), entry);
                ops.push(StoreOp::PutDedup {
                    queue: id,
                    key,
                    entry,
                });
            }
            if let Some(policy) = &message.redrive {
                index.set_redrive(seq, policy.clone());
            }
            sent.push(SentMessage {
                message_id: payload.message_id,
                body_md5: payload.body_md5,
                queue: id,
                seq,
                sent_at: now,
                visible_at,
                expires_at,
                duplicate: false,
            });
            ops.push(StoreOp::PutMessage {
                queue: id,
                seq,
                payload,
                state: message_state,
                redrive: message.redrive,
                fifo_group,
            });
            index.counters.sends += 1;
        }
        ops.push(StoreOp::PutCounters {
            queue: id,
            counters: index.counters,
        });
        if wake {
            index.waiters.rearm();
        }
        Ok(sent)
    }

    /// Receives up to `max_messages`, waiting up to `wait_ms` for the first one (long polling).
    pub async fn receive(
        &self,
        key: &QueueKey,
        options: ReceiveOptions,
    ) -> EngineResult<Vec<Message>> {
        Ok(self.receive_detailed(key, options).await?.messages)
    }

    /// `receive`, also reporting how many expired messages it found (and removed) on the way.
    pub async fn receive_detailed(
        &self,
        key: &QueueKey,
        options: ReceiveOptions,
    ) -> EngineResult<Received> {
        let max_messages = options.max_messages.clamp(1, limits::RECEIVE_MESSAGES_MAX);
        let started = self.clock.now();
        // Known after the first attempt, which reads the queue's default wait under the same lock.
        let mut deadline = None;
        let mut closing = self.closing.subscribe();
        let mut expired = 0;
        loop {
            let now = self.clock.now();
            let attempt = self.receive_now(key, max_messages, &options, now)?;
            expired += attempt.expired;
            let wait_ms = options.wait_ms.unwrap_or(attempt.queue_wait_ms);
            let deadline = *deadline.get_or_insert_with(|| {
                started.saturating_add(wait_ms.min(limits::RECEIVE_WAIT_MS_MAX))
            });
            if !attempt.delivered.is_empty() {
                Self::durable(attempt.commit).await?;
                let wants_ids = attempt.delivered.iter().any(|d| d.wants_id);
                let messages = self.with_payloads(attempt.queue, attempt.delivered)?;
                if wants_ids {
                    self.learn_ids(attempt.queue, &messages);
                }
                return Ok(Received { messages, expired });
            }
            // Nothing delivered: what was submitted (expiry, dead-letter moves) is no success to wait for.
            drop(attempt.commit);
            if attempt.dead_letters_left {
                continue; // the per-receive move cap stopped this attempt, not an empty queue
            }
            if now >= deadline || *closing.borrow_and_update() {
                return Ok(Received {
                    messages: Vec::new(),
                    expired,
                });
            }
            let wake_at = attempt.next_due.map_or(deadline, |due| due.min(deadline));
            // Registered under the lock the attempt held, so no send after it goes unnoticed.
            let notified = attempt
                .notified
                .expect("an empty attempt registers for wake-ups");
            crate::park::parking();
            tokio::select! {
                _ = notified => {}
                _ = self.clock.sleep_until(wake_at) => {}
                _ = closing.changed() => {}
            }
        }
    }

    fn receive_now(
        &self,
        key: &QueueKey,
        max_messages: usize,
        options: &ReceiveOptions,
        now: Millis,
    ) -> EngineResult<ReceiveAttempt> {
        let (attempt, commit) =
            self.on_queue(key, now, |locked| -> EngineResult<ReceiveAttempt> {
                let mut attempt = self.deliver(locked, max_messages, options)?;
                let index = locked.index();
                attempt.queue_wait_ms = index.record.config.receive_wait_ms;
                if attempt.delivered.is_empty() {
                    // Before the lock is let go: every send and nack wakes under it (src/waiters.rs).
                    attempt.notified = Some(index.waiters.register());
                }
                Ok(attempt)
            })?;
        let mut attempt = attempt?;
        attempt.commit = commit;
        Ok(attempt)
    }

    /// The part of a receive that needs the lock: hands out up to `max_messages` visible messages of the
    /// locked queue with new receipts, and moves those that have been received too often instead.
    fn deliver(
        &self,
        locked: &mut Locked<'_>,
        max_messages: usize,
        options: &ReceiveOptions,
    ) -> EngineResult<ReceiveAttempt> {
        let (id, now, expired) = (locked.id, locked.now, locked.expired);
        let queue_dead_letter = Self::queue_dead_letter(locked.state, id);
        let (index, ops) = locked.parts();
        let grant = Grant::of(options, &index.record.config);
        let inflight_max = u64::from(index.record.config.inflight_max);
        let fifo = index.fifo.is_some();
        if index.hidden() >= inflight_max && !fifo {
            return Err(EngineError::OverLimit {
                inflight: index.hidden(),
                limit: index.record.config.inflight_max,
            });
        }
        let attempt_id = options.attempt_id.as_deref().filter(|_| fifo);
        if let Some(repeated) =
            attempt_id.and_then(|id| self.repeat_attempt(index, id, grant, now, ops))
        {
            return Ok(ReceiveAttempt {
                queue: id,
                delivered: repeated,
                next_due: None,
                expired,
                dead_letters_left: false,
                queue_wait_ms: 0,
                notified: None,
                commit: None,
            });
        }
        let mut run = Run {
            delivered: Vec::new(),
            moves: Vec::new(),
            dead_letters_left: false,
            max_messages,
            inflight_max,
        };
        let mut cursor = None;
        while run.wants_more(index) {
            let Some(entry) = index.next_ready(cursor) else {
                break;
            };
            cursor = Some(entry);
            if index.fifo.as_ref().is_some_and(|f| f.blocked(entry.1)) {
                continue; // a FIFO group with a message in flight delivers nothing
            }
            self.deliver_from(
                index,
                entry.1,
                &mut run,
                (grant, queue_dead_letter, now),
                ops,
            );
        }
        let Run {
            delivered,
            moves,
            dead_letters_left,
            ..
        } = run;
        if let (Some(attempt_id), false) = (attempt_id, delivered.is_empty()) {
            Self::remember_attempt(index, attempt_id, &delivered, now);
        }
        let counters_changed = !delivered.is_empty() || !moves.is_empty();
        let next_due = index.next_pending_due();
        self.dead_letter(locked.state, id, moves, now, &mut locked.ops);
        if counters_changed {
            let counters = locked.index().counters;
            locked.ops.push(StoreOp::PutCounters {
                queue: id,
                counters,
            });
        }
        Ok(ReceiveAttempt {
            queue: id,
            delivered,
            next_due,
            expired,
            dead_letters_left,
            queue_wait_ms: 0,
            notified: None,
            commit: None,
        })
    }

    /// Delivers the visible message `seq` and, in a FIFO queue, the visible messages after it in its group
    /// (one receive may take several of a group, in order), moving those received too often instead.
    fn deliver_from(
        &self,
        index: &mut QueueIndex,
        first: Seq,
        run: &mut Run,
        (grant, queue_dead_letter, now): (Grant<'_>, Option<(QueueId, u32)>, Millis),
        ops: &mut Vec<StoreOp>,
    ) {
        let mut next = Some(first);
        while let Some(seq) = next.filter(|_| run.wants_more(index)) {
            next = index.fifo.as_ref().and_then(|f| f.next_in_group(seq));
            let Some(current) = index.get(seq).filter(|s| s.visible_at <= now) else {
                break; // gone, or not visible: the rest of the group waits behind it
            };
            if run.delivered.iter().any(|d| d.seq == seq) {
                break; // delivered with visibility 0 and still visible
            }
            if let Some(route) = Self::dead_letter_route(index, seq, current, queue_dead_letter) {
                if run.moves.len() >= DEAD_LETTER_MOVES_PER_RECEIVE_MAX {
                    run.dead_letters_left = true;
                    break;
                }
                let group = index.group_of(seq).map(str::to_owned);
                let history = index.history.take(seq);
                index.remove(seq);
                run.moves.push(DeadLetter {
                    seq,
                    state: current,
                    route,
                    history,
                    group,
                });
                continue;
            }
            let delivery = self.hand_out(index, seq, current, grant, now, ops);
            run.delivered.push(delivery);
        }
    }

    /// A retried FIFO receive (same attempt id, within its time) gets what the first one delivered, with the
    /// same receipts and a fresh visibility, while every one of those messages is still in flight under that
    /// delivery; otherwise `None` and the receive delivers anew.
    fn repeat_attempt(
        &self,
        index: &mut QueueIndex,
        attempt_id: &str,
        grant: Grant<'_>,
        now: Millis,
        ops: &mut Vec<StoreOp>,
    ) -> Option<Vec<Delivery>> {
        let attempt = index.fifo.as_mut()?.attempts.get(attempt_id, now)?;
        let unchanged = attempt.deliveries.iter().all(|&(seq, generation, _)| {
            index
                .get(seq)
                .is_some_and(|s| s.generation == generation && s.visible_at > now)
        });
        if !unchanged {
            return None;
        }
        let visible_at = now.saturating_add(grant.visibility_ms);
        let mut repeated = Vec::with_capacity(attempt.deliveries.len());
        for (seq, _, receipt) in attempt.deliveries {
            let current = index.get(seq).expect("checked above");
            let state = MessageState {
                visible_at,
                ..current
            };
            index.replace(seq, state, now);
            ops.push(StoreOp::PutState {
                queue: index.id(),
                seq,
                state,
            });
            repeated.push(Delivery {
                seq,
                state,
                receipt: Some(receipt),
                redrive: index.redrive(seq).cloned(),
                wants_id: false,
            });
        }
        Some(repeated)
    }

    fn remember_attempt(
        index: &mut QueueIndex,
        attempt_id: &str,
        delivered: &[Delivery],
        now: Millis,
    ) {
        let Some(fifo) = index.fifo.as_mut() else {
            return;
        };
        let deliveries = delivered
            .iter()
            .filter_map(|d| Some((d.seq, d.state.generation, d.receipt.clone()?)))
            .collect();
        fifo.attempts.remember(
            attempt_id.to_owned(),
            crate::fifo::Attempt {
                at: now,
                deliveries,
            },
        );
    }

    /// Delivers one visible message: its count, first-receive time, deadline and generation change, and it gets
    /// a new receipt that makes every older one stale.
    fn hand_out(
        &self,
        index: &mut QueueIndex,
        seq: Seq,
        current: MessageState,
        grant: Grant<'_>,
        now: Millis,
        ops: &mut Vec<StoreOp>,
    ) -> Delivery {
        let next = MessageState {
            visible_at: now.saturating_add(grant.visibility_ms),
            first_received_at: if current.first_received_at == 0 {
                now
            } else {
                current.first_received_at
            },
            receive_count: current.receive_count + 1,
            generation: current.generation + 1,
            dead_letter_on_release: grant.dead_letter == DeadLetterTiming::OnRelease,
            ..current
        };
        assert!(
            next.receive_count > current.receive_count,
            "receive count only grows"
        );
        index.replace(seq, next, now);
        index.counters.deliveries += 1;
        index.count_delivery(next.receive_count);
        ops.push(StoreOp::PutState {
            queue: index.id(),
            seq,
            state: next,
        });
        let wants_id = Self::record_delivery(index, seq, (current, next), grant, now, ops);
        let receipt = self.receipts.encode(&Receipt {
            queue: index.id(),
            seq,
            generation: next.generation,
            issued_at: now,
        });
        Delivery {
            seq,
            state: next,
            receipt: Some(receipt),
            redrive: index.redrive(seq).cloned(),
            wants_id,
        }
    }

    /// Adds a delivery to the message's history, written in the same submission as its state (no commit of
    /// its own). Returns whether the history still wants its message id. Nothing for a queue with history off.
    fn record_delivery(
        index: &mut QueueIndex,
        seq: Seq,
        (previous, next): (MessageState, MessageState),
        grant: Grant<'_>,
        now: Millis,
        ops: &mut Vec<StoreOp>,
    ) -> bool {
        if !index.record.config.delivery_history {
            return false;
        }
        let record = DeliveryRecord {
            received_at: now,
            receive_count: next.receive_count,
            generation: next.generation,
            consumer: grant.consumer.cloned(),
            visibility_ms: grant.visibility_ms,
            visibility_changes: 0,
            last_visibility_change: None,
            ended: None,
        };
        let queue = index.id();
        let (history, wants_id) = index.history.delivered(seq, previous, record);
        ops.push(StoreOp::PutHistory {
            queue,
            seq,
            history: history.clone(),
        });
        wants_id
    }

    /// Where a message that is about to be delivered goes instead, if it has been received too often. The
    /// message's own policy, when it has one, takes precedence over the queue's.
    fn dead_letter_route(
        index: &QueueIndex,
        seq: Seq,
        current: MessageState,
        queue_dead_letter: Option<(QueueId, u32)>,
    ) -> Option<DeadLetterRoute> {
        if let Some(policy) = index.redrive(seq) {
            return (current.receive_count >= policy.max_receive_count).then(|| {
                match &policy.dead_letter_queue {
                    Some(key) => DeadLetterRoute::MessagePolicy(key.clone()),
                    None => DeadLetterRoute::Drop,
                }
            });
        }
        let (target, max_receive_count) = queue_dead_letter?;
        (current.receive_count >= max_receive_count).then_some(DeadLetterRoute::QueuePolicy(target))
    }

    /// Applies the dead-letter moves and drops of one receive, already taken out of the source's index, in
    /// the same critical section. A queue-policy move keeps the message's receive count and send time (docs/semantics.md
    /// §3; expiry counted from the send by the dead-letter queue's retention); a message-policy move arrives
    /// as a fresh message (KubeMQ: count reset, policy cleared, expiry kept).
    fn dead_letter(
        &self,
        state: &mut State,
        source: QueueId,
        moves: Vec<DeadLetter>,
        now: Millis,
        ops: &mut Vec<StoreOp>,
    ) {
        if moves.is_empty() {
            return;
        }
        let source_key = state.queues[&source].record.key.clone();
        let mut woken = Vec::new();
        for DeadLetter {
            seq,
            state: moved,
            route,
            history,
            group,
        } in moves
        {
            let (target, arrived) = match route {
                DeadLetterRoute::Drop => {
                    let index = state.queues.get_mut(&source).expect("source is locked");
                    index.counters.dead_letter_drops += 1;
                    ops.push(StoreOp::DeleteMessage { queue: source, seq });
                    continue;
                }
                DeadLetterRoute::QueuePolicy(target) => {
                    let retention_ms = state.queues[&target].record.config.retention_ms;
                    let expires_at =
                        retention_ms.map_or(NEVER, |ms| moved.sent_at.saturating_add(ms));
                    let arrived = MessageState {
                        visible_at: now,
                        expires_at,
                        dead_letter_on_release: false,
                        ..moved
                    };
                    (target, arrived)
                }
                DeadLetterRoute::MessagePolicy(key) => {
                    let target = self.dead_letter_queue(state, source, key, now, ops);
                    (target, fresh_arrival(moved, now))
                }
            };
            let history = history.map(|history| {
                let to = state.queues[&target].record.key.clone();
                crate::history::ended_by_move(history, DeliveryEnding::DeadLettered { to }, now)
            });
            let index = state.queues.get_mut(&source).expect("source is locked");
            index.counters.dead_letter_moves += 1;
            let arrival = Arrival {
                from: (source, seq),
                target,
                state: arrived,
                moved_from: MovedFrom {
                    queue: source_key.clone(),
                    reason: MoveReason::DeadLetter,
                },
                redrive: None,
                group,
                history,
            };
            let earliest = Self::arrive(state, arrival, now, ops);
            match woken.iter_mut().find(|(t, _)| *t == target) {
                Some((_, rearm)) => *rearm |= earliest,
                None => woken.push((target, earliest)),
            }
        }
        for (target, rearm) in woken {
            let waiters = &mut state
                .queues
                .get_mut(&target)
                .expect("resolved above")
                .waiters;
            if rearm {
                waiters.rearm();
            }
            waiters.wake();
        }
    }

    /// Puts a message already taken out of its source index into `target` under a new seq, and queues the
    /// store move. Returns the wake-up hint of the insert.
    fn arrive(state: &mut State, arrival: Arrival, now: Millis, ops: &mut Vec<StoreOp>) -> bool {
        let target = state
            .queues
            .get_mut(&arrival.target)
            .expect("move target resolved under the same lock");
        let to_seq = target.alloc_seq(ops);
        // A FIFO target orders the message in its group (the empty group if it came from a queue without).
        let fifo_group = target
            .fifo
            .is_some()
            .then(|| arrival.group.unwrap_or_default());
        let wake = target.insert(to_seq, arrival.state, fifo_group.as_deref(), now);
        if let Some(policy) = &arrival.redrive {
            target.set_redrive(to_seq, policy.clone());
        }
        ops.push(StoreOp::MoveMessage {
            from: arrival.from,
            to: (arrival.target, to_seq),
            state: arrival.state,
            moved_from: arrival.moved_from,
            redrive: arrival.redrive,
            fifo_group,
        });
        // After the move, which deleted the history at `from` in the store.
        if let Some(history) = arrival
            .history
            .filter(|_| target.record.config.delivery_history)
        {
            ops.push(StoreOp::PutHistory {
                queue: arrival.target,
                seq: to_seq,
                history: history.clone(),
            });
            target.history.arrived(to_seq, history);
        }
        wake
    }

    /// Moves a message the caller holds (its current receipt) to `target` in one atomic, durable step, as a
    /// fresh visible message there: same id, body, attributes and own redrive rule; receive count reset; its
    /// expiry kept. Counted as a delete at the source and a send at the target. KubeMQ's re-queue.
    pub async fn move_message(
        &self,
        key: &QueueKey,
        receipt: &str,
        target: &QueueKey,
    ) -> EngineResult<()> {
        let mut results = self.move_messages(key, &[receipt], target).await?;
        results.pop().expect("one result per receipt")
    }

    /// [`Engine::move_message`] for several held messages of one queue: one lock and one commit for the lot.
    /// The outer error is the queues' (either missing) or the store's; each receipt has its own result.
    pub async fn move_messages(
        &self,
        key: &QueueKey,
        receipts: &[&str],
        target: &QueueKey,
    ) -> EngineResult<Vec<EngineResult<()>>> {
        let now = self.clock.now();
        let (results, commit) = self.on_queue(key, now, |locked| {
            let target_id = locked.state.queue_id(target)?;
            let mut wake = false;
            let results: Vec<EngineResult<()>> = receipts
                .iter()
                .map(|receipt| {
                    wake |= self.move_held(locked, key, receipt, target_id)?;
                    Ok(())
                })
                .collect();
            if results.iter().any(Result::is_ok) {
                let id = locked.id;
                let source_counters = locked.index().counters;
                let target_index = locked.state.queues.get_mut(&target_id).expect("locked");
                if wake {
                    target_index.waiters.rearm();
                }
                target_index.waiters.wake();
                let target_counters = target_index.counters;
                locked.ops.push(StoreOp::PutCounters {
                    queue: id,
                    counters: source_counters,
                });
                locked.ops.push(StoreOp::PutCounters {
                    queue: target_id,
                    counters: target_counters,
                });
            }
            Ok(results)
        })?;
        Self::durable(commit).await?;
        results
    }

    /// One message of a [`Engine::move_messages`] batch, under the lock: taken out of the locked queue and
    /// arrived at `target_id`, both counted. Returns the wake-up hint of the arrival.
    fn move_held(
        &self,
        locked: &mut Locked<'_>,
        key: &QueueKey,
        receipt: &str,
        target_id: QueueId,
    ) -> EngineResult<bool> {
        let (id, now, index) = (locked.id, locked.now, locked.index());
        let Held {
            seq,
            state: moved,
            redrive,
            group,
            history,
        } = self.take_held(index, receipt)?;
        index.counters.deletes += 1;
        let history = history.map(|history| {
            let to = locked.state.queues[&target_id].record.key.clone();
            crate::history::ended_by_move(history, DeliveryEnding::Moved { to }, now)
        });
        let arrival = Arrival {
            from: (id, seq),
            target: target_id,
            state: fresh_arrival(moved, now),
            moved_from: MovedFrom {
                queue: key.clone(),
                reason: MoveReason::Requeue,
            },
            redrive,
            group,
            history,
        };
        let wake = Self::arrive(locked.state, arrival, now, &mut locked.ops);
        let target_index = locked.state.queues.get_mut(&target_id).expect("locked");
        target_index.counters.sends += 1;
        Ok(wake)
    }

    /// Takes a held message out of the index if `receipt` is its current one, with what travels with it.
    fn take_held(&self, index: &mut QueueIndex, receipt: &str) -> EngineResult<Held> {
        let receipt = self.decode_receipt(index.id(), receipt)?;
        Self::current(index, &receipt)?;
        let redrive = index.redrive(receipt.seq).cloned();
        // Read before the removal, which takes the message out of its group.
        let group = index.group_of(receipt.seq).map(str::to_owned);
        let history = index.history.take(receipt.seq);
        let state = index
            .remove(receipt.seq)
            .expect("current() found the message");
        Ok(Held {
            seq: receipt.seq,
            state,
            redrive,
            group,
            history,
        })
    }

    /// The id of a message policy's dead-letter queue; one that no longer exists is created with the source
    /// queue's settings (less its own dead-letter, tags and metadata), as KubeMQ creates channels on use.
    fn dead_letter_queue(
        &self,
        state: &mut State,
        source: QueueId,
        key: QueueKey,
        now: Millis,
        ops: &mut Vec<StoreOp>,
    ) -> QueueId {
        if let Some(&id) = state.by_key.get(&key) {
            return id;
        }
        let config = QueueConfig {
            redrive_policy: None,
            tags: Default::default(),
            metadata: Default::default(),
            protocol_settings: Default::default(),
            ..state.queues[&source].record.config.clone()
        };
        Self::insert_queue(state, key, config, now, ops)
    }

    /// Adds a new queue to the index and queues its store changes.
    fn insert_queue(
        state: &mut State,
        key: QueueKey,
        config: QueueConfig,
        now: Millis,
        ops: &mut Vec<StoreOp>,
    ) -> QueueId {
        let id = state.next_queue_id;
        state.next_queue_id += 1;
        let record = QueueRecord {
            id,
            key: key.clone(),
            config,
            created_at: now,
            modified_at: now,
            seq_reserved: 0,
        };
        ops.push(StoreOp::PutNextQueueId(state.next_queue_id));
        ops.push(StoreOp::PutQueue(record.clone()));
        state.by_key.insert(key, id);
        state
            .queues
            .insert(id, QueueIndex::new(record, Counters::default()));
        id
    }

    fn with_payloads(
        &self,
        queue: QueueId,
        delivered: Vec<Delivery>,
    ) -> EngineResult<Vec<Message>> {
        let seqs: Vec<Seq> = delivered.iter().map(|d| d.seq).collect();
        let payloads = self.store.read_payloads(queue, &seqs)?;
        Ok(delivered
            .into_iter()
            .zip(payloads)
            // A payload can be missing only if the message was deleted (or purged) since it was delivered.
            .filter_map(|(delivery, payload)| {
                payload.map(|payload| Message {
                    seq: delivery.seq,
                    payload,
                    state: delivery.state,
                    receipt: delivery.receipt,
                    redrive: delivery.redrive,
                })
            })
            .collect())
    }

    /// Returns up to `max_messages` visible messages without changing anything.
    pub async fn peek(&self, key: &QueueKey, max_messages: usize) -> EngineResult<Vec<Message>> {
        let max_messages = max_messages.clamp(1, limits::RECEIVE_MESSAGES_MAX);
        self.inspect(key, |index, now| {
            index
                .peek_order(now, max_messages)
                .into_iter()
                .filter_map(|seq| Some((seq, index.get(seq)?)))
                .collect()
        })
        .await
    }

    /// The messages `pick` chooses from a queue brought up to now, with their payloads, changing nothing: no
    /// receipt, no receive count (peek and an operator's browse).
    async fn inspect(
        &self,
        key: &QueueKey,
        pick: impl FnOnce(&QueueIndex, Millis) -> Vec<(Seq, MessageState)>,
    ) -> EngineResult<Vec<Message>> {
        let now = self.clock.now();
        let ((queue, seen), commit) = self.on_queue(key, now, |locked| {
            let index = locked.index();
            let seen = pick(index, now)
                .into_iter()
                .map(|(seq, state)| Delivery {
                    seq,
                    state,
                    receipt: None,
                    redrive: index.redrive(seq).cloned(),
                    wants_id: false,
                })
                .collect();
            (locked.id, seen)
        })?;
        // A barrier: what we saw may include sends not yet durable; answer only once they are. Every such send
        // was submitted before we took the lock, so a barrier submitted now resolves after them.
        let barrier = commit.unwrap_or_else(|| self.store.submit(Vec::new()));
        barrier.await?;
        self.with_payloads(queue, seen)
    }

    /// The receipt of a message's send (generation 0): current until the message's first receive, so a
    /// protocol whose put returns a receipt (Azure) can update or delete the message with it. Issued on request
    /// because most sends never need one.
    pub fn receipt_of_send(&self, sent: &SentMessage) -> String {
        self.receipts.encode(&Receipt {
            queue: sent.queue,
            seq: sent.seq,
            generation: 0,
            issued_at: sent.sent_at,
        })
    }

    fn decode_receipt(&self, queue: QueueId, receipt: &str) -> EngineResult<Receipt> {
        match self.receipts.decode(receipt) {
            Some(decoded) if decoded.queue == queue => Ok(decoded),
            Some(_) => Err(EngineError::ReceiptOfAnotherQueue),
            None => Err(EngineError::ReceiptInvalid),
        }
    }

    /// Settles a message.
    pub async fn delete(
        &self,
        key: &QueueKey,
        receipt: &str,
        rule: ReceiptRule,
    ) -> EngineResult<DeleteOutcome> {
        let mut outcomes = self.delete_batch(key, &[receipt], rule).await?;
        outcomes.pop().expect("one outcome per receipt")
    }

    /// Settles several messages of one queue with one commit. The outer error is the queue's (or the
    /// store's); each receipt has its own outcome.
    pub async fn delete_batch(
        &self,
        key: &QueueKey,
        receipts: &[&str],
        rule: ReceiptRule,
    ) -> EngineResult<Vec<EngineResult<DeleteOutcome>>> {
        let now = self.clock.now();
        let (outcomes, commit) = self.on_queue(key, now, |locked| {
            let (index, ops) = locked.parts();
            let deletes_before = index.counters.deletes;
            let outcomes: Vec<_> = receipts
                .iter()
                .map(|receipt| self.delete_locked(index, receipt, rule, now, ops))
                .collect();
            if index.counters.deletes != deletes_before {
                ops.push(StoreOp::PutCounters {
                    queue: index.id(),
                    counters: index.counters,
                });
            }
            outcomes
        })?;
        Self::durable(commit).await?;
        Ok(outcomes)
    }

    fn delete_locked(
        &self,
        index: &mut QueueIndex,
        receipt: &str,
        rule: ReceiptRule,
        now: Millis,
        ops: &mut Vec<StoreOp>,
    ) -> EngineResult<DeleteOutcome> {
        let receipt = self.decode_receipt(index.id(), receipt)?;
        let Some(current) = index.get(receipt.seq) else {
            return match rule {
                ReceiptRule::AnyIssued | ReceiptRule::Unexpired => Ok(DeleteOutcome::AlreadyGone),
                ReceiptRule::Current => Err(EngineError::MessageNotAvailable),
            };
        };
        if receipt.generation > current.generation {
            return Err(EngineError::ReceiptInvalid);
        }
        let superseded = receipt.generation != current.generation;
        match rule {
            ReceiptRule::AnyIssued => {}
            ReceiptRule::Current if superseded => return Err(EngineError::MessageNotAvailable),
            ReceiptRule::Current => {}
            ReceiptRule::Unexpired if superseded || current.visible_at <= now => {
                return Err(EngineError::ReceiptExpired)
            }
            ReceiptRule::Unexpired => {}
        }
        // Before the removal, which would forget it: kept in memory a while (the store deletes it).
        index.history.deleted(receipt.seq, now);
        index.remove(receipt.seq);
        index.counters.deletes += 1;
        ops.push(StoreOp::DeleteMessage {
            queue: index.id(),
            seq: receipt.seq,
        });
        Ok(DeleteOutcome::Deleted)
    }

    /// Moves a message's deadline to `now + change.visibility_ms`. Needs the current receipt (any protocol).
    /// Returns the new deadline.
    pub async fn change_visibility(
        &self,
        key: &QueueKey,
        receipt: &str,
        change: VisibilityChange,
    ) -> EngineResult<Millis> {
        let mut results = self
            .change_visibility_batch(key, &[(receipt, change)])
            .await?;
        results.pop().expect("one result per entry")
    }

    /// Several visibility changes on one queue with one commit; each entry has its own result.
    pub async fn change_visibility_batch(
        &self,
        key: &QueueKey,
        entries: &[(&str, VisibilityChange)],
    ) -> EngineResult<Vec<EngineResult<Millis>>> {
        let now = self.clock.now();
        let (results, commit) = self.on_queue(key, now, |locked| {
            let (index, ops) = locked.parts();
            entries
                .iter()
                .map(|(receipt, change)| {
                    self.reschedule_locked(index, receipt, change, None, now, ops)
                        .map(|(at, _)| at)
                })
                .collect()
        })?;
        Self::durable(commit).await?;
        Ok(results)
    }

    /// Azure's update: like change-visibility, optionally replacing the body, and issuing a new receipt.
    pub async fn update(
        &self,
        key: &QueueKey,
        receipt: &str,
        change: VisibilityChange,
        new_body: Option<bytes::Bytes>,
    ) -> EngineResult<Updated> {
        let now = self.clock.now();
        let (result, commit) = self.on_queue(key, now, |locked| {
            let (index, ops) = locked.parts();
            self.reschedule_locked(index, receipt, &change, Some(new_body), now, ops)
        })?;
        Self::durable(commit).await?;
        let (visible_at, receipt) = result?;
        Ok(Updated {
            receipt: receipt.expect("update issues a receipt"),
            visible_at,
        })
    }

    /// Applies one visibility change under the lock. `update` is `None` for a plain change and `Some(body)`
    /// for Azure's update, which also issues a new receipt and may replace the body.
    fn reschedule_locked(
        &self,
        index: &mut QueueIndex,
        receipt: &str,
        change: &VisibilityChange,
        update: Option<Option<bytes::Bytes>>,
        now: Millis,
        ops: &mut Vec<StoreOp>,
    ) -> EngineResult<(Millis, Option<String>)> {
        let id = index.id();
        let receipt = self.decode_receipt(id, receipt)?;
        let current = Self::check_reschedule(index, &receipt, change, now)?;
        if update.is_some() {
            // An update issues a new receipt, so it needs the current one whatever the rule says.
            Self::current(index, &receipt)?;
        }
        let visible_at = now.saturating_add(change.visibility_ms);
        let mut next = MessageState {
            visible_at,
            ..current
        };
        let mut new_receipt = None;
        if let Some(new_body) = update {
            if let Some(body) = new_body {
                let max_bytes = index.record.config.message_size_bytes_max;
                if body.len() > max_bytes as usize {
                    return Err(EngineError::MessageTooLarge {
                        size_bytes: body.len(),
                        max_bytes,
                    });
                }
                let body_md5 = body_md5(&body);
                next.body_bytes = body_bytes(&body);
                ops.push(StoreOp::ReplaceBody {
                    queue: id,
                    seq: receipt.seq,
                    body,
                    body_md5,
                });
            }
            next.generation += 1;
            let issued = Receipt {
                queue: id,
                seq: receipt.seq,
                generation: next.generation,
                issued_at: now,
            };
            new_receipt = Some(self.receipts.encode(&issued));
        }
        if index.replace(receipt.seq, next, now) {
            index.waiters.rearm();
        }
        ops.push(StoreOp::PutState {
            queue: id,
            seq: receipt.seq,
            state: next,
        });
        let changed = index.history.visibility_changed(
            receipt.seq,
            change.visibility_ms,
            next.generation,
            now,
        );
        if let Some(history) = changed {
            ops.push(StoreOp::PutHistory {
                queue: id,
                seq: receipt.seq,
                history: history.clone(),
            });
        }
        Ok((visible_at, new_receipt))
    }

    /// The message's state if `receipt` is its current one (issued by its latest receive or update).
    fn current(index: &QueueIndex, receipt: &Receipt) -> EngineResult<MessageState> {
        let current = Self::issued(index, receipt)?;
        if receipt.generation != current.generation {
            return Err(EngineError::MessageNotAvailable);
        }
        Ok(current)
    }

    /// The message's state if `receipt` is any receipt issued for it (this delivery's or an earlier one's).
    fn issued(index: &QueueIndex, receipt: &Receipt) -> EngineResult<MessageState> {
        let current = index
            .get(receipt.seq)
            .ok_or(EngineError::MessageNotAvailable)?;
        if receipt.generation > current.generation {
            return Err(EngineError::ReceiptInvalid);
        }
        Ok(current)
    }

    fn check_reschedule(
        index: &QueueIndex,
        receipt: &Receipt,
        change: &VisibilityChange,
        now: Millis,
    ) -> EngineResult<MessageState> {
        let current = match change.receipts {
            ReceiptRule::Current => Self::current(index, receipt)?,
            ReceiptRule::AnyIssued => Self::issued(index, receipt)?,
            // A FIFO message whose visibility lapsed is no longer the holder's to change.
            ReceiptRule::Unexpired => Some(Self::current(index, receipt)?)
                .filter(|current| current.visible_at > now)
                .ok_or(EngineError::MessageNotAvailable)?,
        };
        if change.visibility_ms > limits::VISIBILITY_TIMEOUT_MS_MAX {
            return Err(EngineError::InvalidArgument(format!(
                "visibility of {} ms exceeds the engine's maximum of {} ms",
                change.visibility_ms,
                limits::VISIBILITY_TIMEOUT_MS_MAX
            )));
        }
        let visible_at = now.saturating_add(change.visibility_ms);
        if let Some(max_ms) = change.since_receive_ms_max {
            let requested_ms = visible_at.saturating_sub(receipt.issued_at);
            if requested_ms > max_ms {
                return Err(EngineError::VisibilityPastLimit {
                    requested_ms,
                    max_ms,
                });
            }
        }
        if change.not_past_expiry && current.expires_at != NEVER && visible_at > current.expires_at
        {
            return Err(EngineError::VisibilityPastExpiry);
        }
        Ok(current)
    }

    /// Tells the histories of just-delivered messages their ids, read with the payloads after the lock: one
    /// more short critical section, only for a receive that delivered a message whose history did not know
    /// its id (mostly a first delivery).
    fn learn_ids(&self, queue: QueueId, messages: &[Message]) {
        let mut state = self.state.lock();
        if let Some(index) = state.queues.get_mut(&queue) {
            let ids = messages.iter().map(|m| (m.seq, m.payload.message_id));
            index.history.learn_ids(ids);
        }
    }

    /// The delivery history of the message `message_id` of queue `key` (issue 12): its last deliveries, when,
    /// through which protocol, to whom, with what visibility and how each ended; an open one is rendered as of
    /// now (in flight, or lapsed at its deadline). `None` when no delivery of such a message is known: never
    /// delivered, delivered while the queue's history was off, gone (expired, purged), or deleted longer ago
    /// than the last [`limits::DELETED_HISTORIES_KEPT`] deletes of the queue or before a restart (the record
    /// of deleted messages is kept in memory only).
    ///
    /// A history that knows its message id is found with one hash probe. One restored after a restart before
    /// it learned its id is matched by reading payloads outside the lock, in batches of
    /// [`limits::HISTORY_LOOKUP_PAYLOADS_PER_READ_MAX`]; what is learned is kept, so each is read once.
    pub fn history(
        &self,
        key: &QueueKey,
        message_id: &[u8; 16],
    ) -> EngineResult<Option<MessageHistory>> {
        let now = self.clock.now();
        let mut after = None;
        loop {
            let (queue, unknown) = {
                let state = self.state.lock();
                let id = state.queue_id(key)?;
                let index = &state.queues[&id];
                if let Some(found) = Self::render_history(index, message_id, now) {
                    return Ok(Some(found));
                }
                let unknown = index
                    .history
                    .without_id(after, limits::HISTORY_LOOKUP_PAYLOADS_PER_READ_MAX);
                (id, unknown)
            };
            let Some(&last) = unknown.last() else {
                return Ok(None);
            };
            after = Some(last);
            let payloads = self.store.read_payloads(queue, &unknown)?;
            let ids = unknown
                .iter()
                .zip(payloads)
                .filter_map(|(seq, payload)| Some((*seq, payload?.message_id)));
            let mut state = self.state.lock();
            match state.queues.get_mut(&queue) {
                Some(index) if index.record.key == *key => index.history.learn_ids(ids),
                // Deleted (and perhaps created again) while the payloads were read.
                _ => return Err(EngineError::QueueNotFound(key.clone())),
            }
        }
    }

    /// The rendered history of `message_id` if the queue's histories know that id.
    fn render_history(
        index: &QueueIndex,
        message_id: &[u8; 16],
        now: Millis,
    ) -> Option<MessageHistory> {
        let (seq, history, deleted) = index.history.find(message_id)?;
        let state = if deleted { None } else { index.get(seq) };
        Some(MessageHistory::render(
            index.record.key.clone(),
            (seq, *message_id),
            history,
            state,
            now,
        ))
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

/// What one receive grants each message it delivers.
#[derive(Clone, Copy)]
struct Grant<'a> {
    visibility_ms: Millis,
    dead_letter: DeadLetterTiming,
    /// Who receives, for the delivery history.
    consumer: Option<&'a Consumer>,
}

impl<'a> Grant<'a> {
    /// The receive's own visibility, else the queue's, within the engine's range.
    fn of(options: &'a ReceiveOptions, config: &QueueConfig) -> Self {
        Self {
            visibility_ms: options
                .visibility_ms
                .unwrap_or(config.visibility_timeout_ms)
                .min(limits::VISIBILITY_TIMEOUT_MS_MAX),
            dead_letter: options.dead_letter,
            consumer: options.consumer.as_ref(),
        }
    }
}

/// One message a receive or peek hands out, before its payload is read.
struct Delivery {
    seq: Seq,
    state: MessageState,
    /// `None` for a peek.
    receipt: Option<String>,
    redrive: Option<MessageRedrivePolicy>,
    /// This delivery's history does not know its message id yet: the receive tells it once it read the
    /// payload.
    wants_id: bool,
}

struct ReceiveAttempt {
    queue: QueueId,
    delivered: Vec<Delivery>,
    next_due: Option<Millis>,
    /// Messages found expired by this attempt.
    expired: u64,
    /// The per-receive cap on dead-letter moves left messages that are due to move.
    dead_letters_left: bool,
    /// The queue's default receive wait, for a receive that names none.
    queue_wait_ms: Millis,
    /// An attempt that delivered nothing registers for the queue's wake-ups before the lock is let go.
    notified: Option<crate::waiters::Waiting>,
    commit: Option<Commit>,
}

/// Where a message received too often goes.
enum DeadLetterRoute {
    /// The queue's redrive policy names this queue.
    QueuePolicy(QueueId),
    /// The message's own policy names this queue (it may have to be created).
    MessagePolicy(QueueKey),
    /// The message's own policy names no queue.
    Drop,
}

/// A message on its way into another queue (a dead-letter move or a re-queue).
struct Arrival {
    from: (QueueId, Seq),
    target: QueueId,
    state: MessageState,
    /// Recorded in the payload: where the message came from, and why.
    moved_from: MovedFrom,
    /// The message's own rule, kept by a re-queue.
    redrive: Option<MessageRedrivePolicy>,
    /// Its group in the FIFO queue it leaves, kept in a FIFO target.
    group: Option<String>,
    /// Its delivery history, last delivery already ended by the move; kept if the target records history.
    history: Option<DeliveryHistory>,
}

/// The state of a message being sent: its delay and time to live, else the queue's.
fn new_state(
    message: &NewMessage,
    now: Millis,
    queue_delay_ms: Millis,
    queue_retention_ms: Option<Millis>,
) -> MessageState {
    let expires_at = match message.ttl {
        Some(Ttl::Never) => NEVER,
        Some(Ttl::After(ms)) => now.saturating_add(ms),
        None => queue_retention_ms.map_or(NEVER, |ms| now.saturating_add(ms)),
    };
    MessageState {
        sent_at: now,
        visible_at: now.saturating_add(message.delay_ms.unwrap_or(queue_delay_ms)),
        expires_at,
        first_received_at: 0,
        receive_count: 0,
        generation: 0,
        body_bytes: body_bytes(&message.body),
        dead_letter_on_release: false,
    }
}

/// A moved message's state when it arrives as a fresh one: visible now, never received, its expiry kept.
fn fresh_arrival(moved: MessageState, now: Millis) -> MessageState {
    MessageState {
        visible_at: now,
        first_received_at: 0,
        receive_count: 0,
        dead_letter_on_release: false,
        ..moved
    }
}

struct DeadLetter {
    seq: Seq,
    state: MessageState,
    route: DeadLetterRoute,
    /// Travels with the message (same id) and is written anew in the target.
    history: Option<DeliveryHistory>,
    /// Its group in a FIFO source: a dead-letter move keeps the group (docs/semantics.md §4).
    group: Option<String>,
}

/// A held message taken out of its queue to move elsewhere: its state, own rule and FIFO group.
struct Held {
    seq: Seq,
    state: MessageState,
    redrive: Option<MessageRedrivePolicy>,
    group: Option<String>,
    history: Option<DeliveryHistory>,
}

/// What one receive has delivered and moved so far, and when it stops.
struct Run {
    delivered: Vec<Delivery>,
    moves: Vec<DeadLetter>,
    /// The per-receive cap on dead-letter moves stopped it.
    dead_letters_left: bool,
    max_messages: usize,
    inflight_max: u64,
}

impl Run {
    fn wants_more(&self, index: &QueueIndex) -> bool {
        self.delivered.len() < self.max_messages
            && index.hidden() < self.inflight_max
            && !self.dead_letters_left
    }
}

/// What a send computes for each message before it takes the lock.
struct Prepared {
    body_md5: [u8; 16],
    message_id: [u8; 16],
    /// The body's SHA-256 in hex, for a message a FIFO queue may deduplicate by content (one with a group
    /// and no deduplication id).
    body_sha256: Option<String>,
}

impl Prepared {
    /// `by_content`: the queue deduplicates by content, so a message without an id needs its body's hash.
    fn of(message: &NewMessage, by_content: bool) -> Self {
        let by_content = by_content && message.dedup_id.is_none();
        Self {
            body_md5: body_md5(&message.body),
            message_id: uuid::Uuid::new_v4().into_bytes(),
            body_sha256: by_content.then(|| sha256_hex(&message.body)),
        }
    }
}

fn sha256_hex(body: &[u8]) -> String {
    use sha2::{Digest, Sha256};
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let digest = Sha256::digest(body);
    let mut hex = String::with_capacity(digest.len() * 2);
    for byte in digest {
        hex.push(char::from(HEX[usize::from(byte >> 4)]));
        hex.push(char::from(HEX[usize::from(byte & 0x0f)]));
    }
    hex
}

/// A message rule whose max receive count is 0 would dead-letter the message before its first delivery.
fn receive_count_zero() -> EngineError {
    EngineError::InvalidArgument("a message's max receive count must be at least 1".into())
}

/// What `send` refuses a whole call for, judged for one message of a `send_each`.
fn check_one_send(
    message: &NewMessage,
    size_bytes_max: u32,
    fifo: Option<&FifoConfig>,
) -> EngineResult<()> {
    if message
        .redrive
        .as_ref()
        .is_some_and(|p| p.max_receive_count == 0)
    {
        return Err(receive_count_zero());
    }
    if message.size_bytes() > size_bytes_max as usize {
        return Err(EngineError::MessageTooLarge {
            size_bytes: message.size_bytes(),
            max_bytes: size_bytes_max,
        });
    }
    match fifo {
        Some(fifo) => check_fifo_sends(fifo, std::slice::from_ref(message)),
        None => Ok(()),
    }
}

/// A FIFO queue refuses a send (all of it) with a message that names no group, or no deduplication id
/// while the queue does not deduplicate by content.
fn check_fifo_sends(fifo: &FifoConfig, messages: &[NewMessage]) -> EngineResult<()> {
    for message in messages {
        if message.group.is_none() {
            return Err(EngineError::GroupRequired);
        }
        if message.dedup_id.is_none() && !fifo.content_based_dedup {
            return Err(EngineError::DedupIdRequired);
        }
    }
    Ok(())
}

/// A body's length as a message state records it; bodies are far below 4 GiB (the size limits say so).
fn body_bytes(body: &[u8]) -> u32 {
    u32::try_from(body.len()).unwrap_or(u32::MAX)
}
