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
