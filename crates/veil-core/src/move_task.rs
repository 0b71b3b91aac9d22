//! Message move tasks (docs/semantics.md §8): a durable task that moves the messages a queue held when the
//! task started — back to the queue each was dead-lettered from, or to one named destination — at most a
//! given number per second, one message per atomic engine step. This file holds what the engine's callers
//! see: the task as stored and listed, its status, why it failed, and the errors of its three operations. The
//! engine side is `engine/move_tasks.rs`; protocols render these their own way (SQS's StartMessageMoveTask,
//! ListMessageMoveTasks and CancelMessageMoveTask).

use serde::{Deserialize, Serialize};

use crate::clock::Millis;
use crate::error::EngineError;
use crate::model::{QueueId, QueueKey, Seq};

/// A task's name as protocols show it (SQS puts it in the task handle): random, never reused.
pub type MoveTaskId = [u8; 16];

/// Where a task is in its life. A cancel takes effect at once (each move is one atomic step, so nothing is
/// half done), so no task is ever seen between running and cancelled.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum MoveTaskStatus {
    /// Moving; the only status in which a task can be cancelled and in which its source can start no other.
    Running,
    /// No message the task has to move is visible in its source any more.
    Completed,
    Cancelled,
    /// Stopped on a message it could not move; `MoveTaskRecord::failure` says why.
    Failed,
}

impl MoveTaskStatus {
    pub fn is_running(self) -> bool {
        self == Self::Running
    }
}

/// Why a task failed. The messages moved before stay moved; the one it stopped on stays in the source.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum MoveTaskFailure {
    /// The queue a message was to go to does not exist (any more): the task's destination, or the queue the
    /// message was dead-lettered from (SQS: `AWS.SimpleQueueService.NonExistentQueue`).
    TargetQueueMissing,
    /// The task names no destination and a message records no queue it was dead-lettered from, e.g. one sent
    /// to the dead-letter queue directly (SQS: `CouldNotDetermineMessageSource`).
    OriginUnknown,
}

/// A task as the store keeps it and `Engine::move_tasks` lists it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MoveTaskRecord {
    /// Start order across the whole engine, never reused; the store's key.
    pub number: u64,
    pub id: MoveTaskId,
    pub source: QueueId,
    pub source_key: QueueKey,
    /// `None`: each message goes back to the queue it was dead-lettered from.
    /// The destination's id is [`DESTINATION_ELSEWHERE`] when it belongs to another partition, whose inbox
    /// the moved messages go to.
    pub destination: Option<(QueueId, QueueKey)>,
    /// `None`: as fast as the engine's per-step cap allows.
    pub rate_per_s_max: Option<u32>,
    pub started_at: Millis,
    /// The task moves only messages below this sequence number: those the source held when it started.
    pub seq_end: Seq,
    /// Visible and hidden messages of the source when the task started.
    pub to_move: u64,
    pub moved: u64,
    pub status: MoveTaskStatus,
    /// Set exactly when `status` is `Failed`.
    pub failure: Option<MoveTaskFailure>,
}

/// Why a move-task operation was refused.
#[derive(Debug, thiserror::Error, Serialize, Deserialize)]
pub enum MoveTaskError {
    #[error("the task's source queue does not exist")]
    SourceNotFound,
    #[error("the task's destination queue does not exist")]
    DestinationNotFound,
    #[error("a task cannot move messages into the queue they are in")]
    DestinationIsSource,
    #[error("a rate of 0 messages per second would never move anything")]
    RateZero,
    #[error("the source queue already has a running task")]
    AlreadyRunning,
    #[error("the source queue has no such task")]
    TaskNotFound,
    #[error("the task is no longer running")]
    NotRunning,
    /// The store failed (the change was not made durable).
    #[error(transparent)]
    Engine(#[from] EngineError),
}

/// The id a task records for a destination of another partition: ids are a partition's own, so the task knows
/// that queue by its key alone (crate::inbox). No partition hands out this id (partition ids start at
/// `p << 40`).
pub const DESTINATION_ELSEWHERE: QueueId = QueueId::MAX;
