//! Queue administration: create, delete, settings, listing, purge and the periodic sweep.

use super::{Engine, State};
use crate::clock::Millis;
use crate::error::{EngineError, EngineResult};
use crate::index::QueueIndex;
use crate::model::*;
use crate::store::StoreOp;

impl Engine {
    pub async fn create_queue(
        &self,
        key: QueueKey,
        config: QueueConfig,
    ) -> EngineResult<CreateOutcome> {
        // A name no store could hold is this request's refusal, never the store's failure (crate::ident).
        crate::ident::check_key(&key)?;
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
                self.submit(vec![StoreOp::PutQueue(Box::new(index.record.clone()))]),
            )
        };
        Self::durable(commit).await?;
        Ok(info)
    }

    /// Queues whose redrive policy names `key` as their dead-letter queue.
    pub fn dead_letter_sources(&self, key: &QueueKey) -> EngineResult<Vec<QueueKey>> {
        self.state.lock().queue_id(key)?;
        Ok(self.dead_letter_sources_among(key))
    }

    /// The queues of this engine whose redrive policy names `key`, sorted, whether or not `key` is one of
    /// them (a partitioned cluster asks every owner).
    pub fn dead_letter_sources_among(&self, key: &QueueKey) -> Vec<QueueKey> {
        let state = self.state.lock();
        state
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
            .collect()
    }

    /// Deletes every message of the queue. Returns how many there were. With `interval_ms_min`, refuses (with
    /// `PurgeTooSoon`) when the previous purge was less than that long ago; the check and the purge are atomic.
    pub async fn purge(
        &self,
        key: &QueueKey,
        interval_ms_min: Option<Millis>,
    ) -> EngineResult<u64> {
        let now = self.clock.now();
        // Brought up to now first, so that a message whose time to live passed counts as expired, not purged.
        let (count, commit) = self.on_queue(key, now, |locked| {
            let (index, ops) = locked.parts();
            if let (Some(interval_ms), Some(last)) = (interval_ms_min, index.last_purge_at) {
                if now.saturating_sub(last) < interval_ms {
                    return Err(EngineError::PurgeTooSoon {
                        last_purge_at: last,
                        interval_ms,
                    });
                }
            }
            let count = index.clear();
            index.counters.purges += count;
            index.last_purge_at = Some(now);
            ops.push(StoreOp::PurgeQueue(index.id()));
            ops.push(StoreOp::put_counters(index.id(), index.counters));
            Ok(count)
        })?;
        Self::durable(commit).await?;
        count
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

    /// Adds a new queue to the index and queues its store changes.
    pub(super) fn insert_queue(
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
        ops.push(StoreOp::PutQueue(Box::new(record.clone())));
        state.by_key.insert(key, id);
        state
            .queues
            .insert(id, QueueIndex::new(record, Counters::default()));
        id
    }
}
