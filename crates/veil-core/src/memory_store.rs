//! A [`Store`] that keeps everything in memory and applies each submission at once. It exists so that engine
//! tests can run without files and can "restart" an engine by opening a new one over the same store; it is
//! not offered to users (they get the durable embedded store).

use std::collections::BTreeMap;

use parking_lot::Mutex;

use crate::history::DeliveryHistory;
use crate::inbox::{Inbound, Outbound};
use crate::model::{
    Counters, DedupEntry, MessageRedrivePolicy, MessageState, MovedFrom, Payload, QueueId,
    QueueRecord, Seq,
};
use crate::move_task::MoveTaskRecord;
use crate::partition::Partition;
use crate::store::{
    AcceptInbound, Commit, ForwardInbound, InboxRead, MoveMessage, PutMessage, SendToInbox,
    Snapshot, Store, StoreError, StoreOp,
};

#[derive(Default)]
struct Inner {
    next_queue_id: QueueId,
    queues: BTreeMap<QueueId, (QueueRecord, Counters)>,
    payloads: BTreeMap<(QueueId, Seq), Payload>,
    states: BTreeMap<(QueueId, Seq), MessageState>,
    redrives: BTreeMap<(QueueId, Seq), MessageRedrivePolicy>,
    groups: BTreeMap<(QueueId, Seq), String>,
    dedup: BTreeMap<(QueueId, String), DedupEntry>,
    move_tasks: BTreeMap<u64, MoveTaskRecord>,
    histories: BTreeMap<(QueueId, Seq), DeliveryHistory>,
    /// Entries sent to this store's partition (crate::inbox), by number, with the payloads they carry.
    inbox: BTreeMap<u64, (Outbound, Payload)>,
    next_inbox_id: u64,
    /// Entries this store sent to other partitions, in order, for a test to deliver (`take_outbox`).
    outbox: Vec<(Partition, Outbound, Payload)>,
}

impl Inner {
    fn remove_queue_messages(&mut self, queue: QueueId) {
        let range = (queue, 0)..=(queue, Seq::MAX);
        let seqs: Vec<_> = self.states.range(range).map(|(k, _)| *k).collect();
        for key in seqs {
            self.states.remove(&key);
            self.payloads.remove(&key);
            self.redrives.remove(&key);
            self.groups.remove(&key);
            self.histories.remove(&key);
        }
    }

    fn apply(&mut self, op: StoreOp) {
        match op {
            StoreOp::PutQueue(record) => self.put_queue(*record),
            StoreOp::DeleteQueue(queue) => {
                self.queues.remove(&queue);
                self.remove_queue_messages(queue);
                self.dedup.retain(|(q, _), _| *q != queue);
            }
            StoreOp::PutCounters { queue, counters } => {
                if let Some(entry) = self.queues.get_mut(&queue) {
                    entry.1 = *counters;
                }
            }
            StoreOp::PutMessage(put) => {
                let PutMessage {
                    queue,
                    seq,
                    payload,
                    state,
                    redrive,
                    fifo_group,
                } = *put;
                self.put_message((queue, seq), payload, state, redrive, fifo_group)
            }
            StoreOp::PutState { queue, seq, state } => {
                self.states.insert((queue, seq), state);
            }
            StoreOp::DeleteMessage { queue, seq } => self.delete_message((queue, seq)),
            StoreOp::PurgeQueue(queue) => self.remove_queue_messages(queue),
            StoreOp::MoveMessage(moved) => {
                let MoveMessage {
                    from,
                    to,
                    state,
                    moved_from,
                    redrive,
                    fifo_group,
                } = *moved;
                self.move_message(from, to, state, moved_from, (redrive, fifo_group))
            }
            StoreOp::ReplaceBody {
                queue,
                seq,
                body,
                body_md5,
            } => {
                if let Some(payload) = self.payloads.get_mut(&(queue, seq)) {
                    payload.body = body;
                    payload.body_md5 = body_md5;
                }
            }
            StoreOp::PutNextQueueId(next) => self.next_queue_id = next,
            StoreOp::PutDedup { queue, key, entry } => {
                self.dedup.insert((queue, key), entry);
            }
            StoreOp::DeleteDedup { queue, key } => {
                self.dedup.remove(&(queue, key));
            }
            StoreOp::PutMoveTask(record) => {
                self.move_tasks.insert(record.number, *record);
            }
            StoreOp::DeleteMoveTask { number } => {
                self.move_tasks.remove(&number);
            }
            StoreOp::PutHistory {
                queue,
                seq,
                history,
            } => {
                // Only a stored message has a history, as in veil-store.
                if self.states.contains_key(&(queue, seq)) {
                    self.histories.insert((queue, seq), history);
                }
            }
            StoreOp::SendToInbox(sent) => {
                let SendToInbox {
                    from,
                    partition,
                    entry,
                } = *sent;
                let payload = self.payloads.remove(&from);
                self.delete_message(from);
                if let Some(payload) = payload {
                    self.outbox.push((partition, entry, payload));
                }
            }
            StoreOp::AcceptInbound(accepted) => {
                let AcceptInbound {
                    id,
                    to,
                    state,
                    moved_from,
                    redrive,
                    fifo_group,
                } = *accepted;
                if let Some((_, mut payload)) = self.inbox.remove(&id) {
                    payload.moved_from = moved_from.or(payload.moved_from);
                    self.put_message(to, payload, state, redrive, fifo_group);
                }
            }
            StoreOp::ForwardInbound(forwarded) => {
                let ForwardInbound { id, to } = *forwarded;
                if let (Some((_, payload)), Some((partition, entry))) = (self.inbox.remove(&id), to)
                {
                    self.outbox.push((partition, entry, payload));
                }
            }
        }
    }

    /// A queue record replaces the old one but keeps its counters, which are written separately.
    fn put_queue(&mut self, record: QueueRecord) {
        let counters = self
            .queues
            .get(&record.id)
            .map(|(_, c)| *c)
            .unwrap_or_default();
        self.queues.insert(record.id, (record, counters));
    }

    fn put_message(
        &mut self,
        key: (QueueId, Seq),
        payload: Payload,
        state: MessageState,
        redrive: Option<MessageRedrivePolicy>,
        fifo_group: Option<String>,
    ) {
        self.payloads.insert(key, payload);
        self.states.insert(key, state);
        if let Some(policy) = redrive {
            self.redrives.insert(key, policy);
        }
        if let Some(group) = fifo_group {
            self.groups.insert(key, group);
        }
    }

    fn delete_message(&mut self, key: (QueueId, Seq)) {
        self.states.remove(&key);
        self.payloads.remove(&key);
        self.redrives.remove(&key);
        self.groups.remove(&key);
        self.histories.remove(&key);
    }

    /// A message whose payload is already gone leaves nothing at `to`.
    fn move_message(
        &mut self,
        from: (QueueId, Seq),
        to: (QueueId, Seq),
        state: MessageState,
        moved_from: MovedFrom,
        (redrive, fifo_group): (Option<MessageRedrivePolicy>, Option<String>),
    ) {
        self.states.remove(&from);
        self.redrives.remove(&from);
        self.groups.remove(&from);
        self.histories.remove(&from);
        if let Some(mut payload) = self.payloads.remove(&from) {
            payload.moved_from = Some(moved_from);
            self.put_message(to, payload, state, redrive, fifo_group);
        }
    }
}

/// An in-memory store for tests.
#[derive(Default)]
pub struct MemoryStore {
    /// Everything, behind one lock; submissions apply in call order.
    inner: Mutex<Inner>,
}

impl MemoryStore {
    pub fn new() -> Self {
        Self::default()
    }

    /// Number of stored messages (tests compare it with the engine's view).
    pub fn message_count(&self) -> usize {
        self.inner.lock().states.len()
    }

    /// Number of stored delivery histories (tests: each belongs to a stored message).
    pub fn history_count(&self) -> usize {
        self.inner.lock().histories.len()
    }

    /// The entries this store sent to other partitions' inboxes since the last call (tests deliver them with
    /// [`MemoryStore::deliver`] to the store of the partition named).
    pub fn take_outbox(&self) -> Vec<(Partition, Outbound, Payload)> {
        std::mem::take(&mut self.inner.lock().outbox)
    }

    /// Puts an entry into this store's inbox, as another partition's commit would.
    pub fn deliver(&self, entry: Outbound, payload: Payload) {
        let mut inner = self.inner.lock();
        inner.next_inbox_id += 1;
        let id = inner.next_inbox_id;
        inner.inbox.insert(id, (entry, payload));
    }

    /// Number of entries waiting in this store's inbox.
    pub fn inbox_count(&self) -> usize {
        self.inner.lock().inbox.len()
    }
}

impl Store for MemoryStore {
    fn load_queues(&self) -> Result<Snapshot, StoreError> {
        let inner = self.inner.lock();
        Ok(Snapshot {
            next_queue_id: inner.next_queue_id,
            queues: inner.queues.values().cloned().collect(),
        })
    }

    fn load_messages(
        &self,
        each: &mut dyn FnMut(QueueId, Seq, MessageState),
    ) -> Result<(), StoreError> {
        let inner = self.inner.lock();
        for (&(queue, seq), state) in &inner.states {
            each(queue, seq, *state);
        }
        Ok(())
    }

    fn load_redrives(
        &self,
        each: &mut dyn FnMut(QueueId, Seq, MessageRedrivePolicy),
    ) -> Result<(), StoreError> {
        let inner = self.inner.lock();
        for (&(queue, seq), policy) in &inner.redrives {
            each(queue, seq, policy.clone());
        }
        Ok(())
    }

    fn load_groups(&self, each: &mut dyn FnMut(QueueId, Seq, String)) -> Result<(), StoreError> {
        let inner = self.inner.lock();
        for (&(queue, seq), group) in &inner.groups {
            each(queue, seq, group.clone());
        }
        Ok(())
    }

    fn load_dedup(
        &self,
        each: &mut dyn FnMut(QueueId, String, DedupEntry),
    ) -> Result<(), StoreError> {
        let inner = self.inner.lock();
        for ((queue, key), entry) in &inner.dedup {
            each(*queue, key.clone(), *entry);
        }
        Ok(())
    }

    fn load_move_tasks(&self) -> Result<Vec<MoveTaskRecord>, StoreError> {
        Ok(self.inner.lock().move_tasks.values().cloned().collect())
    }

    fn load_history(
        &self,
        each: &mut dyn FnMut(QueueId, Seq, DeliveryHistory),
    ) -> Result<(), StoreError> {
        let inner = self.inner.lock();
        for (&(queue, seq), history) in &inner.histories {
            each(queue, seq, history.clone());
        }
        Ok(())
    }

    fn submit(&self, ops: Vec<StoreOp>) -> Commit {
        let mut inner = self.inner.lock();
        for op in ops {
            inner.apply(op);
        }
        Box::pin(std::future::ready(Ok(())))
    }

    fn read_payloads(
        &self,
        queue: QueueId,
        seqs: &[Seq],
    ) -> Result<Vec<Option<Payload>>, StoreError> {
        let inner = self.inner.lock();
        Ok(seqs
            .iter()
            .map(|seq| inner.payloads.get(&(queue, *seq)).cloned())
            .collect())
    }

    fn read_inbox_later(&self, limit: usize) -> InboxRead {
        let inner = self.inner.lock();
        let entries = inner
            .inbox
            .iter()
            .take(limit)
            .map(|(&id, (entry, _))| Inbound {
                id,
                entry: entry.clone(),
            })
            .collect();
        Box::pin(std::future::ready(Ok(entries)))
    }
}
