//! How a front-end reaches the engine that owns a queue (docs/cluster.md, "Routing at the engine API"):
//! [`Dispatch::Local`] calls this process's engine; [`Dispatch::Remote`] sends each operation as a [`Call`]
//! to the node that owns the queue, which runs it with [`Engine::execute`] and answers with its [`Reply`].
//! The front-ends hold a `Dispatch` and never learn which: the protocol crates decode, authorize and encode;
//! the owner decides every rule.
//!
//! What a remote node can answer without asking the owner, it answers itself: the time (every node of a
//! cluster reads the database's clock) and the receipt of a send (every node holds the cluster's receipt
//! key). A settings edit is read, applied by the caller's closure and written back only if nothing came
//! between ([`Call::ReplaceConfig`]), so protocol rules about settings stay in the protocol crates.

mod call;
#[cfg(test)]
mod tests;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use bytes::Bytes;

pub use self::call::{merge, Call, Reply};
use crate::clock::{Clock, Millis};
use crate::engine::{Engine, QueueOverview};
use crate::error::{EngineError, EngineResult};
use crate::history::MessageHistory;
use crate::model::*;
use crate::move_task::{MoveTaskError, MoveTaskId, MoveTaskRecord};
use crate::receipt::ReceiptKey;
use crate::store::StoreError;

/// How many times a settings edit made away from the owner is retried when another edit came between.
const SETTINGS_EDIT_ATTEMPTS_MAX: usize = 8;

/// A future a [`Transport`] answers with.
pub type Answer = Pin<Box<dyn Future<Output = EngineResult<Reply>> + Send>>;

/// Carries calls to the node that owns their queue. An `Err` is the transport's own failure (the owner is
/// unreachable, no node owns the queue now), which front-ends answer as their protocol's "service
/// unavailable"; the owner's answers, errors included, come back inside the [`Reply`].
pub trait Transport: Send + Sync + 'static {
    /// Runs `call` at the owner of its queue ([`Call::queue`]).
    fn call(&self, call: Call) -> Answer;

    /// This process's engine for `key` while it owns the queue: calls then run on it directly, as
    /// [`Dispatch::Local`]'s do, without being encoded. `None` sends every call.
    fn local(&self, _key: &QueueKey) -> Option<Arc<Engine>> {
        None
    }

    /// Runs a call without a queue ([`Call::queue`] is `None`) at every owner, each answering for its own
    /// queues, and [`merge`]s their replies; fails when some queues have no owner now, rather than answer
    /// for part of them.
    fn gather(&self, call: Call) -> Answer {
        self.call(call)
    }
}

/// Where one call runs.
enum Target<'a> {
    Here(Arc<Engine>),
    There(&'a Remote),
}

/// The engine a front-end calls: this process's own, or one reached over a [`Transport`].
#[derive(Clone)]
pub enum Dispatch {
    Local(Arc<Engine>),
    Remote(Arc<Remote>),
}

/// Another node's engine, and what this node answers in its stead.
pub struct Remote {
    transport: Box<dyn Transport>,
    /// The cluster's clock: time-based rules still run at the owner; this answers `now` for the front-ends'
    /// own checks (request signatures' skew, timestamps in answers).
    clock: Arc<dyn Clock>,
    /// The cluster's receipt key, shared by every node, so that the receipt of a send is the owner's.
    receipts: ReceiptKey,
}

impl Remote {
    pub fn new(transport: Box<dyn Transport>, clock: Arc<dyn Clock>, receipts: ReceiptKey) -> Self {
        Self {
            transport,
            clock,
            receipts,
        }
    }
}

impl From<Arc<Engine>> for Dispatch {
    fn from(engine: Arc<Engine>) -> Self {
        Self::Local(engine)
    }
}

/// The transport answered a call with a reply of another operation: a bug or a mismatched peer, never the
/// client's fault.
fn mismatched(reply: &Reply) -> EngineError {
    EngineError::Store(StoreError::Corrupt(format!(
        "the owner answered with an unexpected reply: {reply:?}"
    )))
}

/// Unwraps a remote reply of the expected variant, or turns any other into an error of the call's type.
macro_rules! expect_reply {
    ($answer:expr, $variant:path) => {
        match $answer {
            Ok($variant(result)) => result,
            Ok(Reply::Done(Err(error))) => Err(error.into()),
            Ok(other) => Err(mismatched(&other).into()),
            Err(error) => Err(error.into()),
        }
    };
}

/// [`expect_reply!`] for operations whose reply carries no error of its own.
macro_rules! expect_value {
    ($answer:expr, $variant:path) => {
        match $answer {
            Ok($variant(value)) => Ok(value),
            Ok(Reply::Done(Err(error))) => Err(error),
            Ok(other) => Err(mismatched(&other)),
            Err(error) => Err(error),
        }
    };
}

impl Dispatch {
    /// The engine of a `Local` dispatch (a single node's); `None` for a cluster node's, even while it leads.
    pub fn local(&self) -> Option<&Arc<Engine>> {
        match self {
            Self::Local(engine) => Some(engine),
            Self::Remote(_) => None,
        }
    }

    /// Where the operations on `key` run.
    fn target(&self, key: &QueueKey) -> Target<'_> {
        match self {
            Self::Local(engine) => Target::Here(engine.clone()),
            Self::Remote(remote) => match remote.transport.local(key) {
                Some(engine) => Target::Here(engine),
                None => Target::There(remote),
            },
        }
    }

    /// Where an operation on `key` runs, once this node's own engine, if it is that, may still answer: the
    /// gate is checked for every operation (the protocols', the admin API's, an open stream's), not only
    /// where a front-end asks [`Dispatch::serving`].
    fn serving_target(&self, key: &QueueKey) -> EngineResult<Target<'_>> {
        let target = self.target(key);
        if let Target::Here(engine) = &target {
            engine.serving()?;
        }
        Ok(target)
    }

    /// Every owner's replies to a call without a queue, merged (this process's engine's, when `Local`).
    async fn gathered(&self, call: Call) -> EngineResult<Reply> {
        match self {
            Self::Local(engine) => Ok(engine.execute(call).await),
            Self::Remote(remote) => remote.transport.gather(call).await,
        }
    }

    async fn remote(remote: &Remote, call: Call) -> EngineResult<Reply> {
        remote.transport.call(call).await
    }

    /// `Ok` while this node may answer from its engine ([`Engine::serving`]); a remote owner checks its own
    /// gate per call.
    pub fn serving(&self) -> EngineResult<()> {
        match self {
            Self::Local(engine) => engine.serving(),
            Self::Remote(_) => Ok(()),
        }
    }

    pub fn now(&self) -> Millis {
        match self {
            Self::Local(engine) => engine.now(),
            Self::Remote(remote) => remote.clock.now(),
        }
    }

    pub fn receipt_of_send(&self, sent: &SentMessage) -> String {
        match self {
            Self::Local(engine) => engine.receipt_of_send(sent),
            Self::Remote(remote) => remote.receipts.of_send(sent),
        }
    }

    pub async fn create_queue(
        &self,
        key: QueueKey,
        config: QueueConfig,
    ) -> EngineResult<CreateOutcome> {
        match self.serving_target(&key)? {
            Target::Here(engine) => engine.create_queue(key, config).await,
            Target::There(remote) => expect_reply!(
                Self::remote(remote, Call::CreateQueue { key, config }).await,
                Reply::Created
            ),
        }
    }

    #[allow(unreachable_patterns)] // `expect_reply!`'s `Done` arm: `Done` is this call's reply
    pub async fn delete_queue(&self, key: &QueueKey) -> EngineResult<()> {
        match self.serving_target(key)? {
            Target::Here(engine) => engine.delete_queue(key).await,
            Target::There(remote) => {
                let call = Call::DeleteQueue { key: key.clone() };
                expect_reply!(Self::remote(remote, call).await, Reply::Done)
            }
        }
    }

    pub async fn deleted_at(&self, key: &QueueKey) -> EngineResult<Option<Millis>> {
        match self.serving_target(key)? {
            Target::Here(engine) => Ok(engine.deleted_at(key)),
            Target::There(remote) => {
                let call = Call::DeletedAt { key: key.clone() };
                expect_value!(Self::remote(remote, call).await, Reply::DeletedAt)
            }
        }
    }

    pub async fn queue_info(&self, key: &QueueKey) -> EngineResult<QueueInfo> {
        match self.serving_target(key)? {
            Target::Here(engine) => engine.queue_info(key),
            Target::There(remote) => {
                let call = Call::QueueInfo { key: key.clone() };
                expect_reply!(Self::remote(remote, call).await, Reply::QueueInfo)
            }
        }
    }

    pub async fn queue_exists(&self, key: &QueueKey) -> EngineResult<bool> {
        match self.serving_target(key)? {
            Target::Here(engine) => Ok(engine.queue_exists(key)),
            Target::There(remote) => {
                let call = Call::QueueExists { key: key.clone() };
                expect_value!(Self::remote(remote, call).await, Reply::Exists)
            }
        }
    }

    pub async fn message_size_limit(&self, key: &QueueKey) -> EngineResult<u32> {
        match self.serving_target(key)? {
            Target::Here(engine) => engine.message_size_limit(key),
            Target::There(remote) => {
                let call = Call::MessageSizeLimit { key: key.clone() };
                expect_reply!(Self::remote(remote, call).await, Reply::SizeLimit)
            }
        }
    }

    /// Every owner's queues of `namespace` whose name starts with `prefix`, in key order.
    pub async fn list_queues(&self, namespace: &str, prefix: &str) -> EngineResult<Vec<QueueInfo>> {
        if let Self::Local(engine) = self {
            engine.serving()?;
            return Ok(engine.list_queues(namespace, prefix));
        }
        let call = Call::ListQueues {
            namespace: namespace.to_owned(),
            prefix: prefix.to_owned(),
        };
        expect_value!(self.gathered(call).await, Reply::Queues)
    }

    /// Applies `change` to a queue's settings; nothing is stored if it fails. Away from the owner the edit
    /// runs here on the settings as read, and is written only if they did not change meanwhile (retried up
    /// to `SETTINGS_EDIT_ATTEMPTS_MAX` times), which is what the owner's lock gives a local edit.
    pub async fn update_queue_config<F>(
        &self,
        key: &QueueKey,
        mut change: F,
    ) -> EngineResult<QueueInfo>
    where
        F: FnMut(&mut QueueConfig) -> EngineResult<()>,
    {
        let remote = match self.serving_target(key)? {
            Target::Here(engine) => return engine.update_queue_config(key, change).await,
            Target::There(remote) => remote,
        };
        for _ in 0..SETTINGS_EDIT_ATTEMPTS_MAX {
            let expected = self.queue_info(key).await?.config;
            let mut config = expected.clone();
            change(&mut config)?;
            let call = Call::ReplaceConfig {
                key: key.clone(),
                expected: Box::new(expected),
                config: Box::new(config),
            };
            let replaced: EngineResult<Option<QueueInfo>> =
                expect_reply!(Self::remote(remote, call).await, Reply::Replaced);
            if let Some(info) = replaced? {
                return Ok(info);
            }
        }
        Err(EngineError::Store(StoreError::Unavailable(
            "the queue's settings kept changing under the edit; retry it".into(),
        )))
    }

    /// The queues whose redrive policy names `key`, sorted; `key` must exist. A cluster asks every owner.
    pub async fn dead_letter_sources(&self, key: &QueueKey) -> EngineResult<Vec<QueueKey>> {
        if let Self::Local(engine) = self {
            engine.serving()?;
            return engine.dead_letter_sources(key);
        }
        if !self.queue_exists(key).await? {
            // The owner's own answer for a missing queue.
            let call = Call::DeadLetterSources { key: key.clone() };
            return match self.serving_target(key)? {
                Target::Here(engine) => engine.dead_letter_sources(key),
                Target::There(remote) => {
                    expect_reply!(Self::remote(remote, call).await, Reply::Keys)
                }
            };
        }
        let call = Call::DeadLetterSourcesAmong { key: key.clone() };
        expect_reply!(self.gathered(call).await, Reply::Keys)
    }

    pub async fn purge(
        &self,
        key: &QueueKey,
        interval_ms_min: Option<Millis>,
    ) -> EngineResult<u64> {
        match self.serving_target(key)? {
            Target::Here(engine) => engine.purge(key, interval_ms_min).await,
            Target::There(remote) => {
                let call = Call::Purge {
                    key: key.clone(),
                    interval_ms_min,
                };
                expect_reply!(Self::remote(remote, call).await, Reply::Purged)
            }
        }
    }

    pub async fn last_purge_at(&self, key: &QueueKey) -> EngineResult<Option<Millis>> {
        match self.serving_target(key)? {
            Target::Here(engine) => engine.last_purge_at(key),
            Target::There(remote) => {
                let call = Call::LastPurgeAt { key: key.clone() };
                expect_reply!(Self::remote(remote, call).await, Reply::LastPurgeAt)
            }
        }
    }

    pub async fn stats(&self, key: &QueueKey) -> EngineResult<QueueStats> {
        match self.serving_target(key)? {
            Target::Here(engine) => engine.stats(key),
            Target::There(remote) => {
                let call = Call::Stats { key: key.clone() };
                expect_reply!(Self::remote(remote, call).await, Reply::Stats)
            }
        }
    }

    pub async fn send(
        &self,
        key: &QueueKey,
        messages: Vec<NewMessage>,
    ) -> EngineResult<Vec<SentMessage>> {
        match self.serving_target(key)? {
            Target::Here(engine) => engine.send(key, messages).await,
            Target::There(remote) => {
                let call = Call::Send {
                    key: key.clone(),
                    messages,
                };
                expect_reply!(Self::remote(remote, call).await, Reply::Sent)
            }
        }
    }

    pub async fn send_each(
        &self,
        key: &QueueKey,
        messages: Vec<NewMessage>,
    ) -> EngineResult<Vec<EngineResult<SentMessage>>> {
        match self.serving_target(key)? {
            Target::Here(engine) => engine.send_each(key, messages).await,
            Target::There(remote) => {
                let call = Call::SendEach {
                    key: key.clone(),
                    messages,
                };
                expect_reply!(Self::remote(remote, call).await, Reply::SentEach)
            }
        }
    }

    pub async fn receive(
        &self,
        key: &QueueKey,
        options: ReceiveOptions,
    ) -> EngineResult<Vec<Message>> {
        Ok(self.receive_detailed(key, options).await?.messages)
    }

    /// A receive; away from the owner, a long poll waits there, and gives this node's admission slot back
    /// first (`park`), as a local long poll does when it parks.
    pub async fn receive_detailed(
        &self,
        key: &QueueKey,
        options: ReceiveOptions,
    ) -> EngineResult<Received> {
        match self.serving_target(key)? {
            Target::Here(engine) => engine.receive_detailed(key, options).await,
            Target::There(remote) => {
                if options.wait_ms != Some(0) {
                    crate::park::parking();
                }
                let call = Call::Receive {
                    key: key.clone(),
                    options,
                };
                expect_reply!(Self::remote(remote, call).await, Reply::Received)
            }
        }
    }

    pub async fn peek(&self, key: &QueueKey, max_messages: usize) -> EngineResult<Vec<Message>> {
        match self.serving_target(key)? {
            Target::Here(engine) => engine.peek(key, max_messages).await,
            Target::There(remote) => {
                let call = Call::Peek {
                    key: key.clone(),
                    max_messages,
                };
                expect_reply!(Self::remote(remote, call).await, Reply::Messages)
            }
        }
    }

    pub async fn delete(
        &self,
        key: &QueueKey,
        receipt: &str,
        rule: ReceiptRule,
    ) -> EngineResult<DeleteOutcome> {
        match self.serving_target(key)? {
            Target::Here(engine) => engine.delete(key, receipt, rule).await,
            Target::There(remote) => {
                let call = Call::Delete {
                    key: key.clone(),
                    receipt: receipt.to_owned(),
                    rule,
                };
                expect_reply!(Self::remote(remote, call).await, Reply::Deleted)
            }
        }
    }

    pub async fn delete_batch(
        &self,
        key: &QueueKey,
        receipts: &[&str],
        rule: ReceiptRule,
    ) -> EngineResult<Vec<EngineResult<DeleteOutcome>>> {
        match self.serving_target(key)? {
            Target::Here(engine) => engine.delete_batch(key, receipts, rule).await,
            Target::There(remote) => {
                let call = Call::DeleteBatch {
                    key: key.clone(),
                    receipts: owned(receipts),
                    rule,
                };
                expect_reply!(Self::remote(remote, call).await, Reply::DeletedEach)
            }
        }
    }

    pub async fn change_visibility(
        &self,
        key: &QueueKey,
        receipt: &str,
        change: VisibilityChange,
    ) -> EngineResult<Millis> {
        match self.serving_target(key)? {
            Target::Here(engine) => engine.change_visibility(key, receipt, change).await,
            Target::There(remote) => {
                let call = Call::ChangeVisibility {
                    key: key.clone(),
                    receipt: receipt.to_owned(),
                    change,
                };
                expect_reply!(Self::remote(remote, call).await, Reply::VisibleAt)
            }
        }
    }

    pub async fn change_visibility_batch(
        &self,
        key: &QueueKey,
        entries: &[(&str, VisibilityChange)],
    ) -> EngineResult<Vec<EngineResult<Millis>>> {
        match self.serving_target(key)? {
            Target::Here(engine) => engine.change_visibility_batch(key, entries).await,
            Target::There(remote) => {
                let call = Call::ChangeVisibilityBatch {
                    key: key.clone(),
                    entries: entries
                        .iter()
                        .map(|(receipt, change)| ((*receipt).to_owned(), *change))
                        .collect(),
                };
                expect_reply!(Self::remote(remote, call).await, Reply::VisibleAtEach)
            }
        }
    }

    pub async fn update(
        &self,
        key: &QueueKey,
        receipt: &str,
        change: VisibilityChange,
        new_body: Option<Bytes>,
    ) -> EngineResult<Updated> {
        match self.serving_target(key)? {
            Target::Here(engine) => engine.update(key, receipt, change, new_body).await,
            Target::There(remote) => {
                let call = Call::Update {
                    key: key.clone(),
                    receipt: receipt.to_owned(),
                    change,
                    new_body,
                };
                expect_reply!(Self::remote(remote, call).await, Reply::Updated)
            }
        }
    }

    #[allow(unreachable_patterns)] // `expect_reply!`'s `Done` arm: `Done` is this call's reply
    pub async fn move_message(
        &self,
        key: &QueueKey,
        receipt: &str,
        target: &QueueKey,
    ) -> EngineResult<()> {
        match self.serving_target(key)? {
            Target::Here(engine) => engine.move_message(key, receipt, target).await,
            Target::There(remote) => {
                let call = Call::MoveMessage {
                    key: key.clone(),
                    receipt: receipt.to_owned(),
                    target: target.clone(),
                };
                expect_reply!(Self::remote(remote, call).await, Reply::Done)
            }
        }
    }

    pub async fn move_messages(
        &self,
        key: &QueueKey,
        receipts: &[&str],
        target: &QueueKey,
    ) -> EngineResult<Vec<EngineResult<()>>> {
        match self.serving_target(key)? {
            Target::Here(engine) => engine.move_messages(key, receipts, target).await,
            Target::There(remote) => {
                let call = Call::MoveMessages {
                    key: key.clone(),
                    receipts: owned(receipts),
                    target: target.clone(),
                };
                expect_reply!(Self::remote(remote, call).await, Reply::MovedEach)
            }
        }
    }

    pub async fn start_move_task(
        &self,
        source: &QueueKey,
        destination: Option<&QueueKey>,
        rate_per_s_max: Option<u32>,
    ) -> Result<MoveTaskRecord, MoveTaskError> {
        match self.serving_target(source)? {
            Target::Here(engine) => {
                engine
                    .start_move_task(source, destination, rate_per_s_max)
                    .await
            }
            Target::There(remote) => {
                let call = Call::StartMoveTask {
                    source: source.clone(),
                    destination: destination.cloned(),
                    rate_per_s_max,
                };
                expect_reply!(Self::remote(remote, call).await, Reply::MoveTask)
            }
        }
    }

    pub async fn move_tasks(
        &self,
        source: &QueueKey,
    ) -> Result<Vec<MoveTaskRecord>, MoveTaskError> {
        match self.serving_target(source)? {
            Target::Here(engine) => engine.move_tasks(source),
            Target::There(remote) => {
                let call = Call::MoveTasks {
                    source: source.clone(),
                };
                expect_reply!(Self::remote(remote, call).await, Reply::MoveTasks)
            }
        }
    }

    pub async fn cancel_move_task(
        &self,
        source: &QueueKey,
        id: &MoveTaskId,
    ) -> Result<MoveTaskRecord, MoveTaskError> {
        match self.serving_target(source)? {
            Target::Here(engine) => engine.cancel_move_task(source, id).await,
            Target::There(remote) => {
                let call = Call::CancelMoveTask {
                    source: source.clone(),
                    id: *id,
                };
                expect_reply!(Self::remote(remote, call).await, Reply::MoveTask)
            }
        }
    }

    pub async fn history(
        &self,
        key: &QueueKey,
        message_id: &[u8; 16],
    ) -> EngineResult<Option<MessageHistory>> {
        match self.serving_target(key)? {
            Target::Here(engine) => engine.history(key, message_id),
            Target::There(remote) => {
                let call = Call::History {
                    key: key.clone(),
                    message_id: *message_id,
                };
                expect_reply!(Self::remote(remote, call).await, Reply::History)
            }
        }
    }

    pub async fn deleted_history(
        &self,
        key: &QueueKey,
        seq: Seq,
    ) -> EngineResult<Option<MessageHistory>> {
        match self.serving_target(key)? {
            Target::Here(engine) => engine.deleted_history(key, seq),
            Target::There(remote) => {
                let call = Call::DeletedHistory {
                    key: key.clone(),
                    seq,
                };
                expect_reply!(Self::remote(remote, call).await, Reply::History)
            }
        }
    }

    /// Every owner's queues, in key order.
    pub async fn overview(&self) -> EngineResult<Vec<QueueOverview>> {
        if let Self::Local(engine) = self {
            engine.serving()?;
            return Ok(engine.overview());
        }
        expect_value!(self.gathered(Call::Overview).await, Reply::Overview)
    }

    pub async fn overview_of(&self, key: &QueueKey) -> EngineResult<QueueOverview> {
        match self.serving_target(key)? {
            Target::Here(engine) => engine.overview_of(key),
            Target::There(remote) => {
                let call = Call::OverviewOf { key: key.clone() };
                expect_reply!(Self::remote(remote, call).await, Reply::OverviewOf)
            }
        }
    }

    pub async fn browse(
        &self,
        key: &QueueKey,
        from: Seq,
        max_messages: usize,
    ) -> EngineResult<Vec<Message>> {
        match self.serving_target(key)? {
            Target::Here(engine) => engine.browse(key, from, max_messages).await,
            Target::There(remote) => {
                let call = Call::Browse {
                    key: key.clone(),
                    from,
                    max_messages,
                };
                expect_reply!(Self::remote(remote, call).await, Reply::Messages)
            }
        }
    }

    pub async fn remove_message(&self, key: &QueueKey, seq: Seq) -> EngineResult<bool> {
        match self.serving_target(key)? {
            Target::Here(engine) => engine.remove_message(key, seq).await,
            Target::There(remote) => {
                let call = Call::RemoveMessage {
                    key: key.clone(),
                    seq,
                };
                expect_reply!(Self::remote(remote, call).await, Reply::Removed)
            }
        }
    }
}

fn owned(receipts: &[&str]) -> Vec<String> {
    receipts
        .iter()
        .map(|receipt| (*receipt).to_owned())
        .collect()
}
