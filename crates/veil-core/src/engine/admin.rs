//! What operators need from the engine beyond the protocols' own operations (docs/operating.md): an overview
//! of every queue for the metrics scrape and the console, a browse of the stored messages in any state that
//! changes nothing, and the removal of one message by its sequence number. The protocols never call these.

use super::Engine;
use crate::clock::Millis;
use crate::error::EngineResult;
use crate::index::QueueIndex;
use crate::limits;
use crate::model::{Message, QueueKey, QueueStats, Seq};
use crate::store::StoreOp;

/// The `QueueConfig::protocol_settings` key under which a front-end records that it created the queue.
pub const CREATED_BY_SETTING: &str = "veil.created_by";

/// One queue as an operator's overview shows it.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct QueueOverview {
    pub key: QueueKey,
    pub fifo: bool,
    /// The protocol whose create made the queue (`sqs`, `azure`, `kubemq`, `admin`), when one recorded it.
    pub created_by: Option<String>,
    pub stats: QueueStats,
    /// Deliveries counted by the receive count they gave their message, per
    /// `limits::DELIVERY_RECEIVE_COUNT_BUCKETS` plus a last bucket for the rest; since the process started.
    pub deliveries_by_receive_count: [u64; limits::DELIVERY_RECEIVE_COUNT_BUCKETS.len() + 1],
    /// Sum of the receive counts those deliveries gave.
    pub deliveries_receive_count_sum: u64,
    /// Receives parked in a long poll on this queue now (they hold no admission slot: docs/reliability.md
    /// "Load and overload").
    pub long_polls_waiting: u64,
}

impl Engine {
    /// Every queue, ordered by namespace and name, brought up to now (due messages promoted, expired ones
    /// removed, as the sweeper would) so that the counts are exact. One lock for all queues: the work per queue
    /// is a few counters unless deadlines fell due.
    pub fn overview(&self) -> Vec<QueueOverview> {
        let now = self.clock.now();
        let mut guard = self.state.lock();
        let ids: Vec<_> = guard.by_key.values().copied().collect();
        let mut overview = Vec::with_capacity(ids.len());
        let mut ops = Vec::new();
        for id in ids {
            if guard.queues[&id].is_due(now) {
                let mut locked = self.brought_up_to(&mut guard, id, now, ops);
                locked.index().waiters.wake();
                ops = locked.ops;
            }
            overview.push(Self::overview_entry(&guard.queues[&id], now));
        }
        // Expiries found on the way are changes like any other; nobody waits for them.
        drop(self.submit(ops));
        overview
    }

    /// One queue's entry of [`Engine::overview`].
    pub fn overview_of(&self, key: &QueueKey) -> EngineResult<QueueOverview> {
        let now = self.clock.now();
        let mut guard = self.state.lock();
        let id = guard.queue_id(key)?;
        let mut locked = self.brought_up_to(&mut guard, id, now, Vec::new());
        locked.index().waiters.wake();
        let ops = locked.ops;
        let entry = Self::overview_entry(&guard.queues[&id], now);
        drop(self.submit(ops));
        Ok(entry)
    }

    fn overview_entry(index: &QueueIndex, now: Millis) -> QueueOverview {
        let config = &index.record.config;
        QueueOverview {
            key: index.record.key.clone(),
            fifo: config.fifo.is_some(),
            created_by: config.protocol_settings.get(CREATED_BY_SETTING).cloned(),
            stats: index.stats(now),
            deliveries_by_receive_count: index.deliveries_by_receive_count,
            deliveries_receive_count_sum: index.deliveries_receive_count_sum,
            long_polls_waiting: index.waiters.waiting() as u64,
        }
    }

    /// Up to `max_messages` stored messages with a sequence number of at least `from`, in sequence order and
    /// in any state (visible, in flight, delayed), without changing anything: no receipt, no receive count.
    pub async fn browse(
        &self,
        key: &QueueKey,
        from: Seq,
        max_messages: usize,
    ) -> EngineResult<Vec<Message>> {
        let max_messages = max_messages.clamp(1, limits::BROWSE_MESSAGES_MAX);
        self.inspect(key, |index, _| index.states_from(from, max_messages))
            .await
    }

    /// Deletes the message `seq` whatever its state, without a receipt (an operator's delete). Returns whether
    /// it existed. Counted as a delete.
    pub async fn remove_message(&self, key: &QueueKey, seq: Seq) -> EngineResult<bool> {
        let now = self.clock.now();
        let (removed, commit) = self.on_queue(key, now, |locked| {
            let (index, ops) = locked.parts();
            if index.remove(seq).is_none() {
                return false;
            }
            index.counters.deletes += 1;
            ops.push(StoreOp::DeleteMessage {
                queue: index.id(),
                seq,
            });
            ops.push(StoreOp::put_counters(index.id(), index.counters));
            // A FIFO group behind the removed message may now deliver: its new head counts as gained in the
            // index, and the operation's end wakes a waiter for it.
            true
        })?;
        Self::durable(commit).await?;
        Ok(removed)
    }
}
