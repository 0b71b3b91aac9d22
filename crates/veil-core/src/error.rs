//! The engine's errors. Front-ends map each to their protocol's own code and message.

use crate::clock::Millis;
use crate::model::QueueKey;
use crate::store::StoreError;

#[derive(Debug, thiserror::Error, serde::Serialize, serde::Deserialize)]
pub enum EngineError {
    #[error("queue {0} does not exist")]
    QueueNotFound(QueueKey),
    /// The receipt was not issued by Veil (it fails its authentication), or names no message Veil sent.
    #[error("the receipt is not one Veil issued")]
    ReceiptInvalid,
    /// The receipt is authentic but was issued for a message of another queue (queue ids are never reused).
    #[error("the receipt was issued for another queue")]
    ReceiptOfAnotherQueue,
    /// The receipt is authentic but its message is gone or was received (or updated) again since.
    #[error("the message does not exist or its receipt is no longer current")]
    MessageNotAvailable,
    /// The receipt was the current one, but the visibility it granted has lapsed or a later receive replaced
    /// it (`ReceiptRule::Unexpired`, SQS FIFO queues).
    #[error("the receipt has expired")]
    ReceiptExpired,
    /// A FIFO queue needs every message to name its group.
    #[error("a FIFO queue needs a message group for every message")]
    GroupRequired,
    /// A FIFO queue without content-based deduplication needs a deduplication id for every message.
    #[error("a FIFO queue without content-based deduplication needs a deduplication id for every message")]
    DedupIdRequired,
    #[error("the visibility deadline would be {requested_ms} ms after the receive; at most {max_ms} ms is allowed")]
    VisibilityPastLimit {
        requested_ms: Millis,
        max_ms: Millis,
    },
    #[error("the visibility deadline would pass the message's expiry")]
    VisibilityPastExpiry,
    #[error("the queue already has {inflight} messages in flight (limit {limit})")]
    OverLimit { inflight: u64, limit: u32 },
    #[error("message of {size_bytes} bytes exceeds the queue's limit of {max_bytes} bytes")]
    MessageTooLarge { size_bytes: usize, max_bytes: u32 },
    #[error("the queue was purged at {last_purge_at}; purges must be {interval_ms} ms apart")]
    PurgeTooSoon {
        last_purge_at: Millis,
        interval_ms: Millis,
    },
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    #[error(transparent)]
    Store(#[from] StoreError),
}

pub type EngineResult<T> = Result<T, EngineError>;
