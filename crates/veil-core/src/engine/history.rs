//! Looking up a message's delivery history (docs/semantics.md, `Engine::history`).

use super::Engine;
use crate::clock::Millis;
use crate::error::{EngineError, EngineResult};
use crate::history::MessageHistory;
use crate::index::QueueIndex;
use crate::limits;
use crate::model::QueueKey;

impl Engine {
    /// The delivery history of the message `message_id` of queue `key` (docs/semantics.md §9): its last deliveries, when,
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
                let mut state = self.state.lock();
                let id = state.queue_id(key)?;
                let Some(index) = state.queues.get_mut(&id) else {
                    return Err(EngineError::QueueNotFound(key.clone()));
                };
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
    /// The history of the message `seq` of queue `key` if it was deleted recently (kept in memory, the last
    /// [`limits::DELETED_HISTORIES_KEPT`] deletes of the queue; `None` otherwise, and for a message still
    /// stored, which [`Engine::history`] answers by its id).
    pub fn deleted_history(
        &self,
        key: &QueueKey,
        seq: crate::model::Seq,
    ) -> EngineResult<Option<MessageHistory>> {
        let now = self.clock.now();
        let state = self.state.lock();
        let id = state.queue_id(key)?;
        let Some(index) = state.queues.get(&id) else {
            return Err(EngineError::QueueNotFound(key.clone()));
        };
        Ok(index
            .history
            .deleted_by_seq(seq)
            .map(|(history, message_id)| {
                MessageHistory::render(
                    index.record.key.clone(),
                    (seq, message_id),
                    history,
                    None,
                    now,
                )
            }))
    }

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
}
