//! veil-core: Veil's engine. Queues, the message lifecycle of docs/semantics.md §1–3 (send, receive with visibility
//! timeouts and long polling, peek, delete, change-visibility, update, dead-lettering, expiry), receipts,
//! limits, errors and statistics. It does no I/O and never reads the system time: persistence is the
//! [`store::Store`] port and time is the [`clock::Clock`] port.

pub mod access;
pub mod clock;
pub mod dispatch;
pub mod engine;
pub mod error;
mod fifo;
pub mod history;
pub mod ident;
pub mod inbox;
mod index;
pub mod limits;
pub mod memory_store;
pub mod model;
pub mod move_task;
pub mod park;
pub mod partition;
pub mod receipt;
mod slab;
pub mod store;
mod waiters;

pub use access::{Access, AccessDenied, Grant, GrantSpec, Pattern, Permission, Permissions};
pub use clock::{Clock, ManualClock, Millis, OffsetClock, SystemClock};
pub use dispatch::Dispatch;
pub use engine::{
    DurationCounts, Engine, LockTimes, QueueOverview, ServingGate, CREATED_BY_SETTING, NOT_SERVING,
};
pub use error::{EngineError, EngineResult};
pub use history::{
    Consumer, DeliveryEnd, DeliveryEnding, DeliveryHistory, DeliveryRecord, MessageHistory,
    Protocol, VisibilityChangeRecord,
};
pub use model::*;
pub use move_task::{MoveTaskError, MoveTaskFailure, MoveTaskId, MoveTaskRecord, MoveTaskStatus};
pub use receipt::ReceiptKey;
pub use store::{Store, StoreError, StoreOp};
