//! The engine's operations as data: one [`Call`] per operation a front-end makes, and its [`Reply`]. A node
//! that does not own a queue sends the call to the node that does, which runs it with
//! [`Engine::execute`] — the same method a local call runs, so every rule is decided once, by the owner.
//! Serializable (postcard on the cluster's internal RPC); the codec tests in `dispatch/tests.rs` pin a
//! round trip of each.

use bytes::Bytes;
use serde::{Deserialize, Serialize};

use crate::clock::Millis;
use crate::engine::{Engine, QueueOverview};
use crate::error::EngineResult;
use crate::history::MessageHistory;
use crate::model::*;
use crate::move_task::{MoveTaskError, MoveTaskId, MoveTaskRecord};

/// One engine operation, with everything it needs.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Call {
    CreateQueue {
        key: QueueKey,
        config: QueueConfig,
    },
    DeleteQueue {
        key: QueueKey,
    },
    DeletedAt {
        key: QueueKey,
    },
    QueueInfo {
        key: QueueKey,
    },
    QueueExists {
        key: QueueKey,
    },
    ListQueues {
        namespace: String,
        prefix: String,
    },
    /// A settings edit made by the caller: applied only if the queue's settings are still `expected`
    /// ([`Reply::Replaced`] is `None` otherwise), so an edit computed on another node is never applied over
    /// one that came between.
    ReplaceConfig {
        key: QueueKey,
        expected: Box<QueueConfig>,
        config: Box<QueueConfig>,
    },
    DeadLetterSources {
        key: QueueKey,
    },
    Purge {
        key: QueueKey,
        interval_ms_min: Option<Millis>,
    },
    LastPurgeAt {
        key: QueueKey,
    },
    Stats {
        key: QueueKey,
    },
    Send {
        key: QueueKey,
        messages: Vec<NewMessage>,
    },
    SendEach {
        key: QueueKey,
        messages: Vec<NewMessage>,
    },
    Receive {
        key: QueueKey,
        options: ReceiveOptions,
    },
    Peek {
        key: QueueKey,
        max_messages: usize,
    },
    Delete {
        key: QueueKey,
        receipt: String,
        rule: ReceiptRule,
    },
    DeleteBatch {
        key: QueueKey,
        receipts: Vec<String>,
        rule: ReceiptRule,
    },
    ChangeVisibility {
        key: QueueKey,
        receipt: String,
        change: VisibilityChange,
    },
    ChangeVisibilityBatch {
        key: QueueKey,
        entries: Vec<(String, VisibilityChange)>,
    },
    Update {
        key: QueueKey,
        receipt: String,
        change: VisibilityChange,
        new_body: Option<Bytes>,
    },
    MoveMessage {
        key: QueueKey,
        receipt: String,
        target: QueueKey,
    },
    MoveMessages {
        key: QueueKey,
        receipts: Vec<String>,
        target: QueueKey,
    },
    StartMoveTask {
        source: QueueKey,
        destination: Option<QueueKey>,
        rate_per_s_max: Option<u32>,
    },
    MoveTasks {
        source: QueueKey,
    },
    CancelMoveTask {
        source: QueueKey,
        id: MoveTaskId,
    },
    History {
        key: QueueKey,
        message_id: [u8; 16],
    },
    DeletedHistory {
        key: QueueKey,
        seq: Seq,
    },
    Overview,
    OverviewOf {
        key: QueueKey,
    },
    Browse {
        key: QueueKey,
        from: Seq,
        max_messages: usize,
    },
    RemoveMessage {
        key: QueueKey,
        seq: Seq,
    },
    /// The queues among this engine's whose redrive policy names `key`, without asking whether `key` is one
    /// of its own: a partitioned cluster gathers these from every owner (`DeadLetterSources` asks the
    /// queue's own owner, which checks it exists).
    DeadLetterSourcesAmong {
        key: QueueKey,
    },
}

/// Several owners' replies to one call without a queue ([`Call::queue`] is `None`) as one reply: their
/// queues together, in key order, each once. A refusal among them (an owner that could not answer) is the
/// answer: a list of part of the queues would look like a whole one.
pub fn merge(call: &Call, replies: Vec<Reply>) -> Reply {
    let mut merged = match call {
        Call::ListQueues { .. } => Reply::Queues(Vec::new()),
        Call::Overview => Reply::Overview(Vec::new()),
        _ => Reply::Keys(Ok(Vec::new())),
    };
    for reply in replies {
        merged = match (merged, reply) {
            (Reply::Queues(mut all), Reply::Queues(more)) => {
                all.extend(more);
                Reply::Queues(all)
            }
            (Reply::Overview(mut all), Reply::Overview(more)) => {
                all.extend(more);
                Reply::Overview(all)
            }
            (Reply::Keys(Ok(mut all)), Reply::Keys(Ok(more))) => {
                all.extend(more);
                Reply::Keys(Ok(all))
            }
            // A refusal, or a reply of another kind, which the caller reports as a mismatch.
            (_, other) => return other,
        };
    }
    match &mut merged {
        Reply::Queues(queues) => {
            queues.sort_by(|a, b| a.key.cmp(&b.key));
            queues.dedup_by(|a, b| a.key == b.key);
        }
        Reply::Overview(queues) => {
            queues.sort_by(|a, b| a.key.cmp(&b.key));
            queues.dedup_by(|a, b| a.key == b.key);
        }
        Reply::Keys(Ok(keys)) => {
            keys.sort();
            keys.dedup();
        }
        _ => {}
    }
    merged
}

impl Call {
    /// Whether this call may wait at the owner (a receive's long poll): sent to another node, it gives the
    /// caller's admission slot back first.
    pub fn parks(&self) -> bool {
        matches!(self, Call::Receive { options, .. } if options.wait_ms != Some(0))
    }

    /// The queue whose owner runs this call; `None` for calls each owner answers for its own queues, which a
    /// partitioned cluster gathers from every owner.
    pub fn queue(&self) -> Option<&QueueKey> {
        match self {
            Call::ListQueues { .. } | Call::Overview | Call::DeadLetterSourcesAmong { .. } => None,
            Call::CreateQueue { key, .. }
            | Call::DeleteQueue { key }
            | Call::DeletedAt { key }
            | Call::QueueInfo { key }
            | Call::QueueExists { key }
            | Call::ReplaceConfig { key, .. }
            | Call::DeadLetterSources { key }
            | Call::Purge { key, .. }
            | Call::LastPurgeAt { key }
            | Call::Stats { key }
            | Call::Send { key, .. }
            | Call::SendEach { key, .. }
            | Call::Receive { key, .. }
            | Call::Peek { key, .. }
            | Call::Delete { key, .. }
            | Call::DeleteBatch { key, .. }
            | Call::ChangeVisibility { key, .. }
            | Call::ChangeVisibilityBatch { key, .. }
            | Call::Update { key, .. }
            | Call::MoveMessage { key, .. }
            | Call::MoveMessages { key, .. }
            | Call::History { key, .. }
            | Call::DeletedHistory { key, .. }
            | Call::OverviewOf { key }
            | Call::Browse { key, .. }
            | Call::RemoveMessage { key, .. } => Some(key),
            Call::StartMoveTask { source, .. }
            | Call::MoveTasks { source }
            | Call::CancelMoveTask { source, .. } => Some(source),
        }
    }
}

/// What a [`Call`] returned; each carries its operation's own result, errors included.
#[derive(Debug, Serialize, Deserialize)]
pub enum Reply {
    Created(EngineResult<CreateOutcome>),
    Done(EngineResult<()>),
    DeletedAt(Option<Millis>),
    QueueInfo(EngineResult<QueueInfo>),
    Exists(bool),
    Queues(Vec<QueueInfo>),
    /// `None`: the settings had changed since the caller read them; nothing was stored.
    Replaced(EngineResult<Option<QueueInfo>>),
    Keys(EngineResult<Vec<QueueKey>>),
    Purged(EngineResult<u64>),
    LastPurgeAt(EngineResult<Option<Millis>>),
    Stats(EngineResult<QueueStats>),
    Sent(EngineResult<Vec<SentMessage>>),
    SentEach(EngineResult<Vec<EngineResult<SentMessage>>>),
    Received(EngineResult<Received>),
    Messages(EngineResult<Vec<Message>>),
    Deleted(EngineResult<DeleteOutcome>),
    DeletedEach(EngineResult<Vec<EngineResult<DeleteOutcome>>>),
    VisibleAt(EngineResult<Millis>),
    VisibleAtEach(EngineResult<Vec<EngineResult<Millis>>>),
    Updated(EngineResult<Updated>),
    MovedEach(EngineResult<Vec<EngineResult<()>>>),
    MoveTask(Result<MoveTaskRecord, MoveTaskError>),
    MoveTasks(Result<Vec<MoveTaskRecord>, MoveTaskError>),
    History(EngineResult<Option<MessageHistory>>),
    Overview(Vec<QueueOverview>),
    OverviewOf(EngineResult<QueueOverview>),
    Removed(EngineResult<bool>),
}

impl Engine {
    /// Runs `call` as the owner of its queue: the serving gate first (a node whose lease lapsed answers
    /// nothing from memory, whoever asks), then the operation, exactly as a local front-end would call it.
    pub async fn execute(&self, call: Call) -> Reply {
        if let Err(error) = self.serving() {
            return Reply::refusal(&call, error);
        }
        match call {
            Call::CreateQueue { key, config } => {
                Reply::Created(self.create_queue(key, config).await)
            }
            Call::DeleteQueue { key } => Reply::Done(self.delete_queue(&key).await),
            Call::DeletedAt { key } => Reply::DeletedAt(self.deleted_at(&key)),
            Call::QueueInfo { key } => Reply::QueueInfo(self.queue_info(&key)),
            Call::QueueExists { key } => Reply::Exists(self.queue_exists(&key)),
            Call::ListQueues { namespace, prefix } => {
                Reply::Queues(self.list_queues(&namespace, &prefix))
            }
            Call::ReplaceConfig {
                key,
                expected,
                config,
            } => Reply::Replaced(self.replace_config(&key, *expected, *config).await),
            Call::DeadLetterSources { key } => Reply::Keys(self.dead_letter_sources(&key)),
            Call::DeadLetterSourcesAmong { key } => {
                Reply::Keys(Ok(self.dead_letter_sources_among(&key)))
            }
            Call::Purge {
                key,
                interval_ms_min,
            } => Reply::Purged(self.purge(&key, interval_ms_min).await),
            Call::LastPurgeAt { key } => Reply::LastPurgeAt(self.last_purge_at(&key)),
            Call::Stats { key } => Reply::Stats(self.stats(&key)),
            Call::Send { key, messages } => Reply::Sent(self.send(&key, messages).await),
            Call::SendEach { key, messages } => {
                Reply::SentEach(self.send_each(&key, messages).await)
            }
            Call::Receive { key, options } => {
                Reply::Received(self.receive_detailed(&key, options).await)
            }
            Call::Peek { key, max_messages } => {
                Reply::Messages(self.peek(&key, max_messages).await)
            }
            Call::Delete { key, receipt, rule } => {
                Reply::Deleted(self.delete(&key, &receipt, rule).await)
            }
            Call::DeleteBatch {
                key,
                receipts,
                rule,
            } => {
                let receipts: Vec<&str> = receipts.iter().map(String::as_str).collect();
                Reply::DeletedEach(self.delete_batch(&key, &receipts, rule).await)
            }
            Call::ChangeVisibility {
                key,
                receipt,
                change,
            } => Reply::VisibleAt(self.change_visibility(&key, &receipt, change).await),
            Call::ChangeVisibilityBatch { key, entries } => {
                let entries: Vec<(&str, VisibilityChange)> = entries
                    .iter()
                    .map(|(receipt, change)| (receipt.as_str(), *change))
                    .collect();
                Reply::VisibleAtEach(self.change_visibility_batch(&key, &entries).await)
            }
            Call::Update {
                key,
                receipt,
                change,
                new_body,
            } => Reply::Updated(self.update(&key, &receipt, change, new_body).await),
            Call::MoveMessage {
                key,
                receipt,
                target,
            } => Reply::Done(self.move_message(&key, &receipt, &target).await),
            Call::MoveMessages {
                key,
                receipts,
                target,
            } => {
                let receipts: Vec<&str> = receipts.iter().map(String::as_str).collect();
                Reply::MovedEach(self.move_messages(&key, &receipts, &target).await)
            }
            Call::StartMoveTask {
                source,
                destination,
                rate_per_s_max,
            } => Reply::MoveTask(
                self.start_move_task(&source, destination.as_ref(), rate_per_s_max)
                    .await,
            ),
            Call::MoveTasks { source } => Reply::MoveTasks(self.move_tasks(&source)),
            Call::CancelMoveTask { source, id } => {
                Reply::MoveTask(self.cancel_move_task(&source, &id).await)
            }
            Call::History { key, message_id } => Reply::History(self.history(&key, &message_id)),
            Call::DeletedHistory { key, seq } => Reply::History(self.deleted_history(&key, seq)),
            Call::Overview => Reply::Overview(self.overview()),
            Call::OverviewOf { key } => Reply::OverviewOf(self.overview_of(&key)),
            Call::Browse {
                key,
                from,
                max_messages,
            } => Reply::Messages(self.browse(&key, from, max_messages).await),
            Call::RemoveMessage { key, seq } => {
                Reply::Removed(self.remove_message(&key, seq).await)
            }
        }
    }

    /// Applies `config` if the queue's settings are still `expected`; `Ok(None)` (nothing stored) if not.
    async fn replace_config(
        &self,
        key: &QueueKey,
        expected: QueueConfig,
        config: QueueConfig,
    ) -> EngineResult<Option<QueueInfo>> {
        let moved = std::sync::atomic::AtomicBool::new(false);
        let replaced = self
            .update_queue_config(key, |current| {
                if *current != expected {
                    moved.store(true, std::sync::atomic::Ordering::Relaxed);
                    return Err(crate::EngineError::InvalidArgument(
                        "the queue's settings changed since they were read".into(),
                    ));
                }
                *current = config;
                Ok(())
            })
            .await;
        match replaced {
            Ok(info) => Ok(Some(info)),
            Err(_) if moved.load(std::sync::atomic::Ordering::Relaxed) => Ok(None),
            Err(error) => Err(error),
        }
    }
}

impl Reply {
    /// The reply of `call`'s kind carrying `error`; for the few operations that cannot fail on their owner
    /// (a listing, an existence check) the error has no place in the reply, so it is answered as
    /// [`Reply::Done`] with the error, which the caller's facade reports as the call's failure.
    pub fn refusal(call: &Call, error: crate::EngineError) -> Reply {
        match call {
            Call::CreateQueue { .. } => Reply::Created(Err(error)),
            Call::QueueInfo { .. } => Reply::QueueInfo(Err(error)),
            Call::ReplaceConfig { .. } => Reply::Replaced(Err(error)),
            Call::DeadLetterSources { .. } | Call::DeadLetterSourcesAmong { .. } => {
                Reply::Keys(Err(error))
            }
            Call::Purge { .. } => Reply::Purged(Err(error)),
            Call::LastPurgeAt { .. } => Reply::LastPurgeAt(Err(error)),
            Call::Stats { .. } => Reply::Stats(Err(error)),
            Call::Send { .. } => Reply::Sent(Err(error)),
            Call::SendEach { .. } => Reply::SentEach(Err(error)),
            Call::Receive { .. } => Reply::Received(Err(error)),
            Call::Peek { .. } | Call::Browse { .. } => Reply::Messages(Err(error)),
            Call::Delete { .. } => Reply::Deleted(Err(error)),
            Call::DeleteBatch { .. } => Reply::DeletedEach(Err(error)),
            Call::ChangeVisibility { .. } => Reply::VisibleAt(Err(error)),
            Call::ChangeVisibilityBatch { .. } => Reply::VisibleAtEach(Err(error)),
            Call::Update { .. } => Reply::Updated(Err(error)),
            Call::MoveMessages { .. } => Reply::MovedEach(Err(error)),
            Call::StartMoveTask { .. } | Call::CancelMoveTask { .. } => {
                Reply::MoveTask(Err(MoveTaskError::Engine(error)))
            }
            Call::MoveTasks { .. } => Reply::MoveTasks(Err(MoveTaskError::Engine(error))),
            Call::History { .. } | Call::DeletedHistory { .. } => Reply::History(Err(error)),
            Call::OverviewOf { .. } => Reply::OverviewOf(Err(error)),
            Call::RemoveMessage { .. } => Reply::Removed(Err(error)),
            Call::DeleteQueue { .. }
            | Call::MoveMessage { .. }
            | Call::DeletedAt { .. }
            | Call::QueueExists { .. }
            | Call::ListQueues { .. }
            | Call::Overview => Reply::Done(Err(error)),
        }
    }
}
