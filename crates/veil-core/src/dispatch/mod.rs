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

    /// Runs `call` where it belongs, the one path of every operation: on this process's engine when it owns
    /// the call's queue ([`Engine::execute`], which checks the serving gate first, whoever asks), at the
    /// owner over the transport otherwise; a call without a queue at every owner, merged. A long poll sent
    /// away gives this node's admission slot back first (`park`), as a local one does when it parks.
    pub async fn run(&self, call: Call) -> EngineResult<Reply> {
        let target = match call.queue() {
            Some(key) => self.target(key),
            None => return self.gathered(call).await,
        };
        match target {
            Target::Here(engine) => Ok(engine.execute(call).await),
            Target::There(remote) => {
                if call.parks() {
                    crate::park::parking();
                }
                remote.transport.call(call).await
            }
        }
    }

    /// Every owner's replies to a call without a queue, merged (this process's engine's, when `Local`).
    async fn gathered(&self, call: Call) -> EngineResult<Reply> {
        match self {
            Self::Local(engine) => Ok(engine.execute(call).await),
            Self::Remote(remote) => remote.transport.gather(call).await,
        }
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

    pub async fn receive(
        &self,
        key: &QueueKey,
        options: ReceiveOptions,
    ) -> EngineResult<Vec<Message>> {
        Ok(self.receive_detailed(key, options).await?.messages)
    }

    /// Applies `change` to a queue's settings; nothing is stored if it fails. The edit runs here on the
    /// settings as read and is written only if they did not change meanwhile (retried up to
    /// `SETTINGS_EDIT_ATTEMPTS_MAX` times), the same way whether the owner is this node or another, so
    /// protocol rules about settings stay in the protocol crates and run before anything is stored.
    pub async fn update_queue_config<F>(
        &self,
        key: &QueueKey,
        mut change: F,
    ) -> EngineResult<QueueInfo>
    where
        F: FnMut(&mut QueueConfig) -> EngineResult<()>,
    {
        for _ in 0..SETTINGS_EDIT_ATTEMPTS_MAX {
            let expected = self.queue_info(key).await?.config;
            let mut config = expected.clone();
            change(&mut config)?;
            if let Some(info) = self.replace_config(key, expected, config).await? {
                return Ok(info);
            }
        }
        Err(EngineError::Store(StoreError::Unavailable(
            "the queue's settings kept changing under the edit; retry it".into(),
        )))
    }

    /// The queues whose redrive policy names `key`, sorted; `key` must exist (its owner says so). Every
    /// owner answers for its own queues.
    pub async fn dead_letter_sources(&self, key: &QueueKey) -> EngineResult<Vec<QueueKey>> {
        if !self.queue_exists(key).await? {
            // The owner's own answer for a missing queue.
            let call = Call::DeadLetterSources { key: key.clone() };
            return expect_reply!(self.run(call).await, Reply::Keys);
        }
        let call = Call::DeadLetterSourcesAmong { key: key.clone() };
        expect_reply!(self.run(call).await, Reply::Keys)
    }
}

/// The typed operations of [`Dispatch`], one row each: the signature, the [`Call`] it makes, and the
/// [`Reply`] variant it expects (`reply`: carries the operation's own result; `value`: a plain value).
/// Every one runs through [`Dispatch::run`]; nothing is written per operation but its row.
macro_rules! operations {
    ($(
        $(#[$meta:meta])*
        fn $name:ident(&self $(, $arg:ident: $ty:ty)* $(,)?) -> $out:ty = $call:expr => $kind:ident $variant:path;
    )*) => {
        impl Dispatch {
            $(
                $(#[$meta])*
                #[allow(unreachable_patterns)] // `Done` replies: `expect_reply!`'s own `Done` arm
                pub async fn $name(&self $(, $arg: $ty)*) -> $out {
                    operations!(@expect $kind, self.run($call).await, $variant)
                }
            )*
        }
    };
    (@expect reply, $answer:expr, $variant:path) => { expect_reply!($answer, $variant) };
    (@expect value, $answer:expr, $variant:path) => { expect_value!($answer, $variant) };
}

operations! {
    fn create_queue(&self, key: QueueKey, config: QueueConfig) -> EngineResult<CreateOutcome> =
        Call::CreateQueue { key, config } => reply Reply::Created;
    fn delete_queue(&self, key: &QueueKey) -> EngineResult<()> =
        Call::DeleteQueue { key: key.clone() } => reply Reply::Done;
    fn deleted_at(&self, key: &QueueKey) -> EngineResult<Option<Millis>> =
        Call::DeletedAt { key: key.clone() } => value Reply::DeletedAt;
    fn queue_info(&self, key: &QueueKey) -> EngineResult<QueueInfo> =
        Call::QueueInfo { key: key.clone() } => reply Reply::QueueInfo;
    fn queue_exists(&self, key: &QueueKey) -> EngineResult<bool> =
        Call::QueueExists { key: key.clone() } => value Reply::Exists;
    /// Every owner's queues of `namespace` whose name starts with `prefix`, in key order.
    fn list_queues(&self, namespace: &str, prefix: &str) -> EngineResult<Vec<QueueInfo>> =
        Call::ListQueues { namespace: namespace.to_owned(), prefix: prefix.to_owned() } => value Reply::Queues;
    /// Stores `config` if the queue's settings are still `expected`; `None` (nothing stored) if not.
    fn replace_config(&self, key: &QueueKey, expected: QueueConfig, config: QueueConfig)
        -> EngineResult<Option<QueueInfo>> =
        Call::ReplaceConfig { key: key.clone(), expected: Box::new(expected), config: Box::new(config) }
        => reply Reply::Replaced;
    fn purge(&self, key: &QueueKey, interval_ms_min: Option<Millis>) -> EngineResult<u64> =
        Call::Purge { key: key.clone(), interval_ms_min } => reply Reply::Purged;
    fn last_purge_at(&self, key: &QueueKey) -> EngineResult<Option<Millis>> =
        Call::LastPurgeAt { key: key.clone() } => reply Reply::LastPurgeAt;
    fn stats(&self, key: &QueueKey) -> EngineResult<QueueStats> =
        Call::Stats { key: key.clone() } => reply Reply::Stats;
    fn send(&self, key: &QueueKey, messages: Vec<NewMessage>) -> EngineResult<Vec<SentMessage>> =
        Call::Send { key: key.clone(), messages } => reply Reply::Sent;
    fn send_each(&self, key: &QueueKey, messages: Vec<NewMessage>)
        -> EngineResult<Vec<EngineResult<SentMessage>>> =
        Call::SendEach { key: key.clone(), messages } => reply Reply::SentEach;
    /// A receive; away from the owner, a long poll waits there (see [`Dispatch::run`]).
    fn receive_detailed(&self, key: &QueueKey, options: ReceiveOptions) -> EngineResult<Received> =
        Call::Receive { key: key.clone(), options } => reply Reply::Received;
    fn peek(&self, key: &QueueKey, max_messages: usize) -> EngineResult<Vec<Message>> =
        Call::Peek { key: key.clone(), max_messages } => reply Reply::Messages;
    fn delete(&self, key: &QueueKey, receipt: &str, rule: ReceiptRule) -> EngineResult<DeleteOutcome> =
        Call::Delete { key: key.clone(), receipt: receipt.to_owned(), rule } => reply Reply::Deleted;
    fn delete_batch(&self, key: &QueueKey, receipts: &[&str], rule: ReceiptRule)
        -> EngineResult<Vec<EngineResult<DeleteOutcome>>> =
        Call::DeleteBatch { key: key.clone(), receipts: owned(receipts), rule } => reply Reply::DeletedEach;
    fn change_visibility(&self, key: &QueueKey, receipt: &str, change: VisibilityChange)
        -> EngineResult<Millis> =
        Call::ChangeVisibility { key: key.clone(), receipt: receipt.to_owned(), change }
        => reply Reply::VisibleAt;
    fn change_visibility_batch(&self, key: &QueueKey, entries: &[(&str, VisibilityChange)])
        -> EngineResult<Vec<EngineResult<Millis>>> =
        Call::ChangeVisibilityBatch {
            key: key.clone(),
            entries: entries.iter().map(|(receipt, change)| ((*receipt).to_owned(), *change)).collect(),
        } => reply Reply::VisibleAtEach;
    fn update(&self, key: &QueueKey, receipt: &str, change: VisibilityChange, new_body: Option<Bytes>)
        -> EngineResult<Updated> =
        Call::Update { key: key.clone(), receipt: receipt.to_owned(), change, new_body } => reply Reply::Updated;
    fn move_message(&self, key: &QueueKey, receipt: &str, target: &QueueKey) -> EngineResult<()> =
        Call::MoveMessage { key: key.clone(), receipt: receipt.to_owned(), target: target.clone() }
        => reply Reply::Done;
    fn move_messages(&self, key: &QueueKey, receipts: &[&str], target: &QueueKey)
        -> EngineResult<Vec<EngineResult<()>>> =
        Call::MoveMessages { key: key.clone(), receipts: owned(receipts), target: target.clone() }
        => reply Reply::MovedEach;
    fn start_move_task(&self, source: &QueueKey, destination: Option<&QueueKey>, rate_per_s_max: Option<u32>)
        -> Result<MoveTaskRecord, MoveTaskError> =
        Call::StartMoveTask { source: source.clone(), destination: destination.cloned(), rate_per_s_max }
        => reply Reply::MoveTask;
    fn move_tasks(&self, source: &QueueKey) -> Result<Vec<MoveTaskRecord>, MoveTaskError> =
        Call::MoveTasks { source: source.clone() } => reply Reply::MoveTasks;
    fn cancel_move_task(&self, source: &QueueKey, id: &MoveTaskId) -> Result<MoveTaskRecord, MoveTaskError> =
        Call::CancelMoveTask { source: source.clone(), id: *id } => reply Reply::MoveTask;
    fn history(&self, key: &QueueKey, message_id: &[u8; 16]) -> EngineResult<Option<MessageHistory>> =
        Call::History { key: key.clone(), message_id: *message_id } => reply Reply::History;
    fn deleted_history(&self, key: &QueueKey, seq: Seq) -> EngineResult<Option<MessageHistory>> =
        Call::DeletedHistory { key: key.clone(), seq } => reply Reply::History;
    /// Every owner's queues, in key order.
    fn overview(&self) -> EngineResult<Vec<QueueOverview>> = Call::Overview => value Reply::Overview;
    fn overview_of(&self, key: &QueueKey) -> EngineResult<QueueOverview> =
        Call::OverviewOf { key: key.clone() } => reply Reply::OverviewOf;
    fn browse(&self, key: &QueueKey, from: Seq, max_messages: usize) -> EngineResult<Vec<Message>> =
        Call::Browse { key: key.clone(), from, max_messages } => reply Reply::Messages;
    fn remove_message(&self, key: &QueueKey, seq: Seq) -> EngineResult<bool> =
        Call::RemoveMessage { key: key.clone(), seq } => reply Reply::Removed;
}

fn owned(receipts: &[&str]) -> Vec<String> {
    receipts
        .iter()
        .map(|receipt| (*receipt).to_owned())
        .collect()
}
