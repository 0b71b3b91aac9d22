//! `PgStore`: veil-core's `Store` over PostgreSQL. (Being written; see the crate docs.)

use veil_core::StoreError;

use crate::connect::PgOptions;

/// The PostgreSQL store. (Contract; the implementation lands with its tests.)
pub struct PgStore {
    _options: PgOptions,
}

impl PgStore {
    /// Connects (on the store's own I/O thread and runtime), applies the migrations, and reads what the
    /// engine loads at start-up. With `fence_epoch`, every write transaction first checks that the lease's
    /// epoch is still this one and fails with `StoreError::Unavailable` (and refuses all later writes) when
    /// it is not. Blocks the calling thread.
    pub fn open(options: PgOptions, fence_epoch: Option<i64>) -> Result<Self, StoreError> {
        let _ = fence_epoch;
        Err(StoreError::Unavailable(format!(
            "not implemented yet ({})",
            options.schema
        )))
    }

    /// Becomes `true` once a write failed: from then on every submission fails, and the engine over this
    /// store must be dropped and rebuilt from the database.
    pub fn failed(&self) -> tokio::sync::watch::Receiver<bool> {
        tokio::sync::watch::channel(true).1
    }

    /// Finishes the writes in flight and closes the connections.
    pub fn close(&self) {}
}

/// Stub until the implementation lands: every call fails.
impl veil_core::Store for PgStore {
    fn load_queues(&self) -> Result<veil_core::store::Snapshot, StoreError> {
        Err(StoreError::Closed)
    }
    fn load_messages(
        &self,
        _each: &mut dyn FnMut(veil_core::QueueId, veil_core::Seq, veil_core::MessageState),
    ) -> Result<(), StoreError> {
        Err(StoreError::Closed)
    }
    fn load_redrives(
        &self,
        _each: &mut dyn FnMut(veil_core::QueueId, veil_core::Seq, veil_core::MessageRedrivePolicy),
    ) -> Result<(), StoreError> {
        Err(StoreError::Closed)
    }
    fn load_groups(
        &self,
        _each: &mut dyn FnMut(veil_core::QueueId, veil_core::Seq, String),
    ) -> Result<(), StoreError> {
        Err(StoreError::Closed)
    }
    fn load_dedup(
        &self,
        _each: &mut dyn FnMut(veil_core::QueueId, String, veil_core::DedupEntry),
    ) -> Result<(), StoreError> {
        Err(StoreError::Closed)
    }
    fn load_move_tasks(&self) -> Result<Vec<veil_core::MoveTaskRecord>, StoreError> {
        Err(StoreError::Closed)
    }
    fn load_history(
        &self,
        _each: &mut dyn FnMut(veil_core::QueueId, veil_core::Seq, veil_core::DeliveryHistory),
    ) -> Result<(), StoreError> {
        Err(StoreError::Closed)
    }
    fn submit(&self, _ops: Vec<veil_core::StoreOp>) -> veil_core::store::Commit {
        Box::pin(async { Err(StoreError::Closed) })
    }
    fn read_payloads(
        &self,
        _queue: veil_core::QueueId,
        _seqs: &[veil_core::Seq],
    ) -> Result<Vec<Option<veil_core::Payload>>, StoreError> {
        Err(StoreError::Closed)
    }
}
