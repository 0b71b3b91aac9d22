//! The tonic service. The `Kubemq` impl ([`rpc`]) only runs veil-http's request pipeline and dispatches: each
//! RPC's handler lives in the file of its resource (`send`, `pull`, `downstream`, `stream`, `channels`), and
//! every handler decodes through [`crate::convert`], calls the engine and answers in-band (`IsError` /
//! `Error`) as KubeMQ does. What they share is here: [`Inner`], the request context (engine, settings,
//! shutdown signal, subscriber counts), and the few engine steps every handler uses (create on first use,
//! receive, ack, nack, re-queue).
//!
//! Downstream transactions and legacy stream messages hold the engine's receipts; the engine's visibility
//! deadline is the server-side visibility timeout, so a consumer that hangs loses its messages to the next
//! poll, and a closed stream releases them at once (visibility 0).
//!
//! Authentication runs in `lib.rs`'s interceptor, which leaves its verdict in the request's extensions; each
//! RPC but Ping refuses an unauthenticated request (`rpc.rs`'s identify step) and each handler checks the channel
//! each request names against the caller's rights ([`Inner::authorize`], docs/security.md "KubeMQ").

mod channels;
mod downstream;
mod pull;
mod rpc;
mod send;
mod stream;
mod subscribers;

use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;

use futures_core::Stream;
use tokio::sync::{mpsc, watch};
use tokio_stream::wrappers::ReceiverStream;
use tokio_stream::StreamExt;
use tonic::{Request, Response, Status, Streaming};
use veil_core::{
    Consumer, CreateOutcome, Dispatch, Message, Millis, Permission, QueueConfig, QueueKey,
    ReceiptRule, ReceiveOptions, VisibilityChange, DEFAULT_NAMESPACE,
};
use veil_http::{Admission, Pipeline, Trip, Who};

use veil_telemetry::audit;
use veil_telemetry::{Code, Protocol, Telemetry};

use crate::auth::Caller;
use crate::convert::{self, KubemqError, Settings};
use crate::limits;
use crate::pb;
use subscribers::{Subscribers, Subscription};

type Reply<T> = Pin<Box<dyn Stream<Item = Result<T, Status>> + Send + 'static>>;

/// Responses a stream may have queued before the client reads them; a slow reader then holds back its own
/// stream's task only.
const STREAM_BUFFER: usize = 64;

#[cfg(test)]
use rpc::SERVER_BUSY;

pub struct KubemqService {
    inner: Arc<Inner>,
}

/// What every handler works with.
struct Inner {
    engine: Dispatch,
    settings: Settings,
    /// Turns true when the server stops: stream loops stop reading and answer `CloseByServer`.
    shutdown: watch::Receiver<bool>,
    started_at_s: i64,
    /// Ping's uptime is shown on the wire only, so it may come from the process's monotonic clock.
    started: std::time::Instant,
    /// Receives waiting on each channel (QueuesInfo's `Subscribers`); its lock is held only to count a
    /// receive in or out, never across an await.
    subscribers: Subscribers,
    /// The request pipeline (veil-http's): where each RPC, and each request of a stream, is audited and
    /// counted (`veil_requests_total{protocol="kubemq"}`).
    pipeline: Pipeline,
    /// The listener's admission limit (veil-http's, shared by its unary RPCs): a slot is held for the RPC's
    /// life, given back when a pull parks; streams are bounded by connections and the request rate instead.
    admission: Admission,
}

impl KubemqService {
    pub fn new(
        engine: impl Into<Dispatch>,
        settings: Settings,
        shutdown: watch::Receiver<bool>,
        telemetry: Telemetry,
    ) -> Self {
        Self::with_admission(
            engine,
            settings,
            shutdown,
            telemetry,
            Admission::unlimited(),
        )
    }

    /// A service whose unary RPCs enter `admission` first (the listener's limit, [`crate::serve`]).
    pub fn with_admission(
        engine: impl Into<Dispatch>,
        settings: Settings,
        shutdown: watch::Receiver<bool>,
        telemetry: Telemetry,
        admission: Admission,
    ) -> Self {
        let engine: Dispatch = engine.into();
        let started_at_s = i64::try_from(engine.now() / 1_000).unwrap_or(0);
        Self {
            inner: Arc::new(Inner {
                engine,
                settings,
                shutdown,
                started_at_s,
                started: std::time::Instant::now(),
                subscribers: Subscribers::default(),
                pipeline: Pipeline::new(Protocol::Kubemq, telemetry),
                admission,
            }),
        }
    }
}

/// KubeMQ channels live in Veil's default namespace, shared with the SQS default account.
pub(super) fn key(channel: &str) -> QueueKey {
    QueueKey::new(DEFAULT_NAMESPACE, channel)
}

/// What one collecting receive got: the messages, and how many expired ones it skipped (KubeMQ's
/// MessagesExpired).
struct Polled {
    held: Vec<Held>,
    expired: u64,
}

impl Polled {
    /// Adds a delivery. A message whose visibility lapsed while the receive was still collecting (a visibility
    /// no longer than the wait) is delivered again by a later engine receive of the same collect: it replaces
    /// its earlier delivery, whose receipt is stale now, so an answer never holds one message twice.
    fn hold(&mut self, delivery: Held) {
        match self
            .held
            .iter_mut()
            .find(|held| held.message.seq == delivery.message.seq)
        {
            Some(earlier) => *earlier = delivery,
            None => self.held.push(delivery),
        }
    }
}

/// A message received by a pull, a downstream transaction or a legacy stream, with the receipt that
/// settles it.
struct Held {
    channel: String,
    message: Message,
    receipt: String,
}

/// How a receive collects: KubeMQ answers a pull when `max` messages are in hand or the wait is over,
/// whichever comes first — not at the first message (docs/semantics.md; see [`Inner::receive`]).
struct Collect {
    max: usize,
    visibility_ms: Millis,
    /// The engine time the wait counts from: when the request was read, so Veil's own work before the collect
    /// (authorization, creating the channel) is part of the wait, not added to it.
    since_ms: Millis,
    wait_ms: Millis,
    /// Who receives, for the engine's delivery history.
    consumer: Consumer,
}

/// A ClientID as an audit line names it: itself when it is within Veil's bound, else a fixed word, so that no
/// request can write megabytes into the log (every path refuses such an id; this holds if one forgets).
fn logged_client_id(client_id: &str) -> &str {
    match convert::validate_client_id_bound(client_id) {
        Ok(()) => client_id,
        Err(_) => "<refused client id>",
    }
}

/// A KubeMQ client as the delivery history names it: its address and its ClientID.
fn consumer(peer: Option<SocketAddr>, client_id: &str) -> Consumer {
    Consumer::new(
        veil_core::Protocol::Kubemq,
        peer,
        Some(client_id.to_owned()),
    )
}

impl Inner {
    /// Counts one RPC, or one request of a stream, with KubeMQ's code rule: `OK`, or `Error` for an error
    /// answered in-band (`IsError` / `Error` set, gRPC status OK).
    fn observe(&self, trip: &Trip<'_>, operation: &'static str, failed: bool) {
        let code = if failed {
            Code::Error("Error")
        } else {
            Code::Ok
        };
        trip.observe(operation, code);
    }

    /// Writes the audit line of a destructive operation on `channel` (AckAllQueueMessages, delete-channel).
    /// KubeMQ's in-band errors are texts, not codes, so a failure's outcome is `Error`, as in the metrics.
    fn audit(&self, action: &str, channel: &str, client_id: &str, peer: &str, failed: bool) {
        let who = Who {
            namespace: DEFAULT_NAMESPACE,
            queue: channel,
            identity: logged_client_id(client_id),
            client: peer,
        };
        self.pipeline
            .audit(action, who, if failed { "Error" } else { audit::OK });
    }

    /// Whether the request's `client_id` may have `permission` on `channel`; a refusal is audited under
    /// `operation` with the identity `kubemq:<client id>` (docs/security.md "KubeMQ").
    fn authorize(
        &self,
        caller: &Caller,
        operation: &str,
        (client_id, channel): (&str, &str),
        permission: Permission,
        peer: &str,
    ) -> Result<(), KubemqError> {
        // Before the policy or the audit log sees it: a ClientID past Veil's bound is refused as itself.
        convert::validate_client_id_bound(client_id)?;
        if caller.allows(client_id, channel, permission) {
            return Ok(());
        }
        let who = Who {
            namespace: DEFAULT_NAMESPACE,
            queue: channel,
            identity: &format!("kubemq:{}", logged_client_id(client_id)),
            client: peer,
        };
        self.pipeline.audit(operation, who, "AccessDenied");
        Err(KubemqError::AccessDenied)
    }

    /// Whether the caller may send `message`: `send` on its channel and, when it names one, on its dead-letter
    /// channel (`MaxReceiveQueue`) too, since the engine will write the message there (docs/security.md
    /// "KubeMQ"). The rule is judged now, at the send, as AWS judges an SQS redrive policy when it is set: a
    /// right withdrawn later does not stop the move. The names must have passed [`convert::validate_names`].
    fn may_send(
        &self,
        caller: &Caller,
        operation: &str,
        message: &pb::QueueMessage,
        peer: &str,
    ) -> Result<(), KubemqError> {
        let client_id = message.client_id.as_str();
        let send = |channel: &str| {
            self.authorize(
                caller,
                operation,
                (client_id, channel),
                Permission::Send,
                peer,
            )
        };
        send(&message.channel)?;
        match convert::dead_letter_channel(message) {
            Some(dead_letter) => send(dead_letter),
            None => Ok(()),
        }
    }

    /// KubeMQ creates a channel on first use; Veil creates the queue with KubeMQ's settings.
    async fn ensure(&self, channel: &str) -> Result<QueueKey, KubemqError> {
        let key = key(channel);
        if self.engine.queue_exists(&key).await? {
            return Ok(key);
        }
        let config = QueueConfig {
            visibility_timeout_ms: self.default_visibility_ms(),
            retention_ms: None,
            message_size_bytes_max: limits::MESSAGE_SIZE_BYTES_MAX,
            inflight_max: self.settings.max_inflight,
            protocol_settings: [(veil_core::CREATED_BY_SETTING.into(), "kubemq".into())].into(),
            ..QueueConfig::default()
        };
        // A concurrent first use may create it first; either outcome is the channel we want.
        match self.engine.create_queue(key.clone(), config).await? {
            CreateOutcome::Created(_) | CreateOutcome::Existing(_) => Ok(key),
        }
    }

    /// Receives until `collect.max` messages are held or the wait is over (an empty engine receive means the
    /// wait ended, or the engine is shutting down). Per-message dead-lettering happens inside each engine
    /// receive, atomically; what comes back is deliverable. Counts as a subscriber of the channel while it
    /// waits. The wait's deadline is read from the engine's clock, so tests drive it with a manual clock.
    ///
    /// Dropping the future between engine receives leaves what it held hidden until its visibility lapses,
    /// so callers that can be cancelled use [`Inner::receive_until`].
    async fn receive(&self, channel: &str, collect: Collect) -> Result<Polled, KubemqError> {
        let never = std::future::pending::<()>();
        self.receive_until(channel, collect, never).await
    }

    /// [`Inner::receive`] that also stops collecting when `cancelled` completes, keeping what it holds.
    async fn receive_until(
        &self,
        channel: &str,
        collect: Collect,
        cancelled: impl std::future::Future<Output = ()>,
    ) -> Result<Polled, KubemqError> {
        let key = self.ensure(channel).await?;
        let _subscribed = Subscription::new(&self.subscribers, channel);
        let deadline = collect.since_ms.saturating_add(collect.wait_ms);
        let mut polled = Polled {
            held: Vec::new(),
            expired: 0,
        };
        tokio::pin!(cancelled);
        while polled.held.len() < collect.max {
            let options = ReceiveOptions {
                dead_letter: veil_core::DeadLetterTiming::OnRelease,
                max_messages: collect.max - polled.held.len(),
                visibility_ms: Some(collect.visibility_ms),
                wait_ms: Some(deadline.saturating_sub(self.engine.now())),
                attempt_id: None,
                consumer: Some(collect.consumer.clone()),
            };
            let received = tokio::select! {
                received = self.engine.receive_detailed(&key, options) => received,
                () = &mut cancelled => break,
            };
            let received = match received {
                Ok(received) => received,
                // What is already held is answered (e.g. the in-flight limit reached mid-collect), not lost to
                // its visibility timeout.
                Err(_) if !polled.held.is_empty() => break,
                Err(error) => return Err(error.into()),
            };
            polled.expired += received.expired;
            if received.messages.is_empty() {
                break;
            }
            for message in received.messages {
                let Some(receipt) = message.receipt.clone() else {
                    continue;
                };
                polled.hold(Held {
                    channel: channel.to_string(),
                    message,
                    receipt,
                });
            }
        }
        Ok(polled)
    }

    async fn ack(&self, held: &Held) -> Result<(), KubemqError> {
        self.engine
            .delete(&key(&held.channel), &held.receipt, ReceiptRule::Current)
            .await?;
        Ok(())
    }

    async fn set_visibility(&self, held: &Held, visibility_ms: Millis) -> Result<(), KubemqError> {
        self.engine
            .change_visibility(
                &key(&held.channel),
                &held.receipt,
                visibility_change(visibility_ms),
            )
            .await?;
        Ok(())
    }

    /// Nack: the message is visible again at once, its receive count kept for the next delivery.
    async fn nack(&self, held: &Held) -> Result<(), KubemqError> {
        self.set_visibility(held, 0).await
    }

    /// Acks several held messages with one engine call per channel — one lock and one commit for the lot,
    /// not one per message. Returns each message's own result, in the order given.
    async fn ack_held(&self, helds: &[&Held]) -> Vec<Result<(), KubemqError>> {
        self.release_held(helds, Release::Ack).await
    }

    /// Nacks several held messages with one engine call per channel (see [`Inner::ack_held`]).
    async fn nack_held(&self, helds: &[&Held]) -> Vec<Result<(), KubemqError>> {
        self.release_held(helds, Release::Nack).await
    }

    async fn release_held(&self, helds: &[&Held], how: Release) -> Vec<Result<(), KubemqError>> {
        let mut results = vec![Ok(()); helds.len()];
        for (channel, positions) in by_channel(helds) {
            let receipts: Vec<&str> = positions
                .iter()
                .map(|&i| helds[i].receipt.as_str())
                .collect();
            let channel = key(channel);
            let outcomes = match how {
                Release::Ack => {
                    let rule = ReceiptRule::Current;
                    let outcomes = self.engine.delete_batch(&channel, &receipts, rule).await;
                    outcomes.map(|o| o.into_iter().map(|r| r.map(drop)).collect())
                }
                Release::Nack => {
                    let entries: Vec<(&str, VisibilityChange)> = receipts
                        .iter()
                        .map(|&r| (r, visibility_change(0)))
                        .collect();
                    let outcomes = self
                        .engine
                        .change_visibility_batch(&channel, &entries)
                        .await;
                    outcomes.map(|o| o.into_iter().map(|r| r.map(drop)).collect())
                }
            };
            settle_results(&mut results, &positions, outcomes);
        }
        results
    }

    /// Re-queue: the held message moves to `channel` as a fresh message, in one engine step.
    async fn requeue(&self, held: &Held, channel: &str) -> Result<(), KubemqError> {
        let mut results = self.requeue_held(&[held], channel).await;
        results.pop().unwrap_or(Ok(()))
    }

    /// Re-queues several held messages to `channel` with one engine call per source channel (see
    /// [`Inner::ack_held`]); each message moves atomically and has its own result, in the order given.
    async fn requeue_held(&self, helds: &[&Held], channel: &str) -> Vec<Result<(), KubemqError>> {
        if helds.is_empty() {
            return Vec::new(); // nothing to move, so no target channel to create
        }
        let target = match requeue_target(channel) {
            Ok(()) => self.ensure(channel).await,
            Err(error) => Err(error),
        };
        let target = match target {
            Ok(target) => target,
            Err(error) => return vec![Err(error); helds.len()],
        };
        let mut results = vec![Ok(()); helds.len()];
        for (source, positions) in by_channel(helds) {
            let receipts: Vec<&str> = positions
                .iter()
                .map(|&i| helds[i].receipt.as_str())
                .collect();
            let outcomes = self
                .engine
                .move_messages(&key(source), &receipts, &target)
                .await;
            settle_results(&mut results, &positions, outcomes);
        }
        results
    }

    fn check_wait_s(&self, wait_s: i32) -> Result<Millis, KubemqError> {
        if !(0..=self.settings.max_wait_timeout_s).contains(&wait_s) {
            return Err(KubemqError::WaitOutOfRange {
                max_s: self.settings.max_wait_timeout_s,
            });
        }
        Ok(Millis::from(wait_s.unsigned_abs()) * 1_000)
    }

    fn check_max_items(&self, max: i32) -> Result<usize, KubemqError> {
        if !(1..=self.settings.max_number_of_messages).contains(&max) {
            return Err(KubemqError::MaxItemsOutOfRange {
                max: self.settings.max_number_of_messages,
            });
        }
        Ok(max.unsigned_abs() as usize)
    }

    fn default_visibility_ms(&self) -> Millis {
        Millis::from(self.settings.default_visibility_s.max(0).unsigned_abs()) * 1_000
    }
}

/// Reads requests until the client ends the stream or the server shuts down.
async fn next_or_shutdown<T>(
    inbound: &mut Streaming<T>,
    shutdown: &mut watch::Receiver<bool>,
) -> Option<T> {
    if *shutdown.borrow() {
        return None;
    }
    tokio::select! {
        item = inbound.next() => item.and_then(Result::ok),
        _ = shutdown.wait_for(|stop| *stop) => None,
    }
}

/// Answers a bidirectional stream: `serve` runs on its own task with the request stream and the sender of the
/// reply stream, which the RPC returns at once. Replies travel boxed: tokio allocates a channel's slots 32 at a
/// time, and 32 unboxed replies (with room for a `Status`) made 5.6 KiB per open stream, idle or not.
fn spawn_stream<Req, Resp, Fut>(
    inner: &Arc<Inner>,
    request: Request<Streaming<Req>>,
    caller: Caller,
    serve: impl FnOnce(
        Arc<Inner>,
        Streaming<Req>,
        (Option<SocketAddr>, Caller),
        mpsc::Sender<Box<Resp>>,
    ) -> Fut,
) -> Response<Reply<Resp>>
where
    Resp: Send + 'static,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let (tx, rx) = mpsc::channel(STREAM_BUFFER);
    let peer = crate::peer_addr(&request);
    tokio::spawn(serve(
        inner.clone(),
        request.into_inner(),
        (peer, caller),
        tx,
    ));
    Response::new(Box::pin(ReceiverStream::new(rx).map(unboxed)))
}

/// A boxed reply (boxed in the channel, see [`spawn_stream`]) as tonic's stream item, whose error type
/// (`Status`, 176 bytes) is tonic's to choose.
#[allow(clippy::result_large_err, clippy::boxed_local)]
fn unboxed<Resp>(reply: Box<Resp>) -> Result<Resp, Status> {
    Ok(*reply)
}

#[cfg(test)]
mod telemetry_tests;

/// An engine on memory and a manual clock, for the tests that call the service directly.
#[cfg(test)]
fn test_engine() -> Arc<veil_core::Engine> {
    let clock = veil_core::ManualClock::new(1_700_000_000_000);
    let engine = veil_core::Engine::open(
        Arc::new(veil_core::memory_store::MemoryStore::new()),
        Arc::new(clock),
        veil_core::ReceiptKey::new([7; 32]),
    )
    .expect("engine opens");
    Arc::new(engine)
}

#[cfg(test)]
mod admission_tests;

#[cfg(test)]
mod authorization_tests;

/// The caller's address for the audit log, "" when tonic does not know it (a test calling the service).
fn peer_of<T>(request: &Request<T>) -> String {
    crate::peer_addr(request)
        .map(|addr| addr.ip().to_string())
        .unwrap_or_default()
}

/// How a batch of held messages is let go: deleted, or made visible again at once.
#[derive(Clone, Copy)]
enum Release {
    Ack,
    Nack,
}

/// A KubeMQ visibility change of a held message: the current receipt only, within the 12 h total.
fn visibility_change(visibility_ms: Millis) -> VisibilityChange {
    VisibilityChange {
        receipts: ReceiptRule::Current,
        visibility_ms,
        since_receive_ms_max: Some(limits::VISIBILITY_TOTAL_MS_MAX),
        not_past_expiry: false,
    }
}

/// A re-queue's target channel must be a valid name (docs/semantics.md §KubeMQ); a bad one is the re-queue's
/// own error.
fn requeue_target(channel: &str) -> Result<(), KubemqError> {
    convert::validate_channel(channel).map_err(|_| KubemqError::RequeueChannelInvalid)
}

/// The positions of `helds` grouped by channel, each group in the order given.
fn by_channel<'a>(helds: &[&'a Held]) -> std::collections::BTreeMap<&'a str, Vec<usize>> {
    let mut groups: std::collections::BTreeMap<&str, Vec<usize>> =
        std::collections::BTreeMap::new();
    for (position, held) in helds.iter().enumerate() {
        groups
            .entry(held.channel.as_str())
            .or_default()
            .push(position);
    }
    groups
}

/// Spreads one batch call's outcome over the positions it covered: its per-message results, or the call's
/// own error (the queue gone, the store failing) for each of them.
fn settle_results(
    results: &mut [Result<(), KubemqError>],
    positions: &[usize],
    outcome: Result<Vec<Result<(), veil_core::EngineError>>, veil_core::EngineError>,
) {
    match outcome {
        Ok(each) => {
            for (&position, result) in positions.iter().zip(each) {
                results[position] = result.map_err(KubemqError::from);
            }
        }
        Err(error) => {
            let error = KubemqError::from(error);
            for &position in positions {
                results[position] = Err(error.clone());
            }
        }
    }
}
