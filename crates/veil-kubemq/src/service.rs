//! The tonic service: each RPC decodes through [`crate::convert`], calls the engine and answers in-band
//! (`IsError` / `Error`) as KubeMQ does. Downstream transactions and legacy stream messages hold the engine's
//! receipts; the engine's visibility deadline is the server-side visibility timeout, so a consumer that hangs
//! loses its messages to the next poll, and a closed stream releases them at once (visibility 0).

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::pin::Pin;
use std::sync::Arc;

use futures_core::Stream;
use tokio::sync::{mpsc, watch};
use tokio_stream::wrappers::ReceiverStream;
use tokio_stream::StreamExt;
use tonic::{Request, Response, Status, Streaming};
use veil_core::{
    CreateOutcome, Engine, EngineError, Message, Millis, QueueConfig, QueueKey, ReceiptRule,
    ReceiveOptions, VisibilityChange, DEFAULT_NAMESPACE,
};

use crate::convert::{self, KubemqError, Settings};
use crate::limits;
use crate::pb;
use crate::pb::kubemq_server::Kubemq;

type Reply<T> = Pin<Box<dyn Stream<Item = Result<T, Status>> + Send + 'static>>;

/// Responses a stream may have queued before the client reads them.
const STREAM_BUFFER: usize = 64;

pub struct KubemqService {
    inner: Arc<Inner>,
}

struct Inner {
    engine: Arc<Engine>,
    settings: Settings,
    shutdown: watch::Receiver<bool>,
    started_at_s: i64,
    started: std::time::Instant,
    /// Held only to count a receive in or out; never across an await.
    subscribers: Subscribers,
}

impl KubemqService {
    pub fn new(engine: Arc<Engine>, settings: Settings, shutdown: watch::Receiver<bool>) -> Self {
        let started_at_s = i64::try_from(engine.now() / 1_000).unwrap_or(0);
        Self {
            inner: Arc::new(Inner {
                engine,
                settings,
                shutdown,
                started_at_s,
                started: std::time::Instant::now(),
                subscribers: Subscribers::default(),
            }),
        }
    }
}

fn key(channel: &str) -> QueueKey {
    QueueKey::new(DEFAULT_NAMESPACE, channel)
}

/// What one receive got: the messages, and how many expired ones it skipped (KubeMQ's MessagesExpired).
struct Polled {
    held: Vec<Held>,
    expired: u64,
}

/// Receivers waiting on each channel right now: QueuesInfo's `Subscribers`.
type Subscribers = parking_lot::Mutex<HashMap<String, u64>>;

/// One waiting receiver, counted while it lives.
struct Subscription<'a> {
    subscribers: &'a Subscribers,
    channel: &'a str,
}

impl<'a> Subscription<'a> {
    fn new(subscribers: &'a Subscribers, channel: &'a str) -> Self {
        let mut counts = subscribers.lock();
        match counts.get_mut(channel) {
            Some(count) => *count += 1,
            None => {
                counts.insert(channel.to_string(), 1);
            }
        }
        Self {
            subscribers,
            channel,
        }
    }
}

impl Drop for Subscription<'_> {
    fn drop(&mut self) {
        let mut counts = self.subscribers.lock();
        if let Some(count) = counts.get_mut(self.channel) {
            *count -= 1;
            if *count == 0 {
                counts.remove(self.channel);
            }
        }
    }
}

/// A message received by a downstream transaction or a legacy stream, with the receipt that settles it.
struct Held {
    channel: String,
    message: Message,
    receipt: String,
}

impl Inner {
    /// KubeMQ creates a channel on first use; Veil creates the queue with KubeMQ's settings.
    async fn ensure(&self, channel: &str) -> Result<QueueKey, KubemqError> {
        let key = key(channel);
        if self.engine.queue_exists(&key) {
            return Ok(key);
        }
        let config = QueueConfig {
            visibility_timeout_ms: Millis::from(self.settings.default_visibility_s.max(0) as u32)
                * 1_000,
            retention_ms: None,
            message_size_bytes_max: limits::MESSAGE_SIZE_BYTES_MAX,
            inflight_max: self.settings.max_inflight,
            ..QueueConfig::default()
        };
        // A concurrent first use may create it first; either outcome is the channel we want.
        match self.engine.create_queue(key.clone(), config).await? {
            CreateOutcome::Created(_) | CreateOutcome::Existing(_) => Ok(key),
        }
    }

    async fn send_one(&self, message: pb::QueueMessage) -> pb::SendQueueMessageResult {
        let (client_message_id, channel) = (message.message_id.clone(), message.channel.clone());
        match self.try_send(message).await {
            Ok(result) => result,
            Err(error) => convert::send_error(&error, &client_message_id, &channel),
        }
    }

    async fn try_send(
        &self,
        message: pb::QueueMessage,
    ) -> Result<pb::SendQueueMessageResult, KubemqError> {
        convert::validate_message(&message, &self.settings)?;
        let (client_message_id, channel) = (message.message_id.clone(), message.channel.clone());
        let key = self.ensure(&channel).await?;
        let sent = self
            .engine
            .send(&key, vec![convert::to_new_message(message)])
            .await?;
        let sent = sent
            .first()
            .ok_or_else(|| KubemqError::Internal("send returned nothing".into()))?;
        Ok(convert::send_result(sent, &client_message_id, &channel))
    }

    /// Receives with the given visibility. Per-message dead-lettering happens inside the engine's receive,
    /// atomically; what comes back is deliverable. Counts as a subscriber of the channel while it waits.
    async fn receive(
        &self,
        channel: &str,
        max: usize,
        visibility_ms: Millis,
        wait_ms: Millis,
    ) -> Result<Polled, KubemqError> {
        let key = self.ensure(channel).await?;
        let _subscribed = Subscription::new(&self.subscribers, channel);
        let received = self
            .engine
            .receive_detailed(
                &key,
                ReceiveOptions {
                    max_messages: max,
                    visibility_ms: Some(visibility_ms),
                    wait_ms: Some(wait_ms),
                },
            )
            .await?;
        let held = received
            .messages
            .into_iter()
            .filter_map(|message| {
                let receipt = message.receipt.clone()?;
                Some(Held {
                    channel: channel.to_string(),
                    message,
                    receipt,
                })
            })
            .collect();
        Ok(Polled {
            held,
            expired: received.expired,
        })
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
                VisibilityChange {
                    visibility_ms,
                    since_receive_ms_max: Some(limits::VISIBILITY_TOTAL_MS_MAX),
                    not_past_expiry: false,
                },
            )
            .await?;
        Ok(())
    }

    /// Re-queue: the held message moves to `channel` as a fresh message, in one engine step.
    async fn requeue(&self, held: &Held, channel: &str) -> Result<(), KubemqError> {
        convert::validate_channel(channel).map_err(|_| KubemqError::RequeueChannelInvalid)?;
        let target = self.ensure(channel).await?;
        self.engine
            .move_message(&key(&held.channel), &held.receipt, &target)
            .await?;
        Ok(())
    }

    fn check_wait_s(&self, wait_s: i32) -> Result<Millis, KubemqError> {
        if !(0..=self.settings.max_wait_timeout_s).contains(&wait_s) {
            return Err(KubemqError::WaitOutOfRange {
                max_s: self.settings.max_wait_timeout_s,
            });
        }
        Ok(Millis::from(wait_s as u32) * 1_000)
    }

    fn check_max_items(&self, max: i32) -> Result<usize, KubemqError> {
        if !(1..=self.settings.max_number_of_messages).contains(&max) {
            return Err(KubemqError::MaxItemsOutOfRange {
                max: self.settings.max_number_of_messages,
            });
        }
        Ok(max as usize)
    }

    fn default_visibility_ms(&self) -> Millis {
        Millis::from(self.settings.default_visibility_s.max(0) as u32) * 1_000
    }
}

// ----- QueuesDownstream -----

struct Transaction {
    /// Unsettled messages by wire sequence.
    active: BTreeMap<u64, Held>,
}

#[derive(Default)]
struct Downstream {
    open: HashMap<String, Transaction>,
    completed: VecDeque<String>,
    /// The stream ended: a Get that finishes now releases what it received instead of opening a transaction.
    closed: bool,
}

impl Downstream {
    fn complete_if_done(&mut self, id: &str) {
        if self.open.get(id).is_some_and(|t| t.active.is_empty()) {
            self.open.remove(id);
            self.completed.push_back(id.to_string());
            while self.completed.len() > limits::COMPLETED_TRANSACTIONS_KEPT {
                self.completed.pop_front();
            }
        }
    }
}

fn downstream_error(
    request: &pb::QueuesDownstreamRequest,
    error: KubemqError,
) -> pb::QueuesDownstreamResponse {
    pb::QueuesDownstreamResponse {
        transaction_id: request.ref_transaction_id.clone(),
        ref_request_id: request.request_id.clone(),
        request_type_data: request.request_type_data,
        is_error: true,
        error: error.to_string(),
        ..Default::default()
    }
}

impl Inner {
    /// A Get runs beside the stream's other requests (a long poll must not hold back the acks of earlier
    /// transactions) and takes the stream's state only to record its transaction.
    async fn downstream_get(
        &self,
        state: &tokio::sync::Mutex<Downstream>,
        mut cancel: watch::Receiver<bool>,
        request: &pb::QueuesDownstreamRequest,
    ) -> Result<pb::QueuesDownstreamResponse, KubemqError> {
        if request.client_id.is_empty() {
            return Err(KubemqError::ClientIdMissing);
        }
        convert::validate_channel(&request.channel)?;
        let max = self.check_max_items(request.max_items)?;
        if request.wait_timeout < 0
            || request.wait_timeout > self.settings.max_wait_timeout_s.saturating_mul(1_000)
        {
            return Err(KubemqError::WaitOutOfRange {
                max_s: self.settings.max_wait_timeout_s,
            });
        }
        let wait_ms = Millis::from(request.wait_timeout as u32);
        let received = self.receive(&request.channel, max, self.default_visibility_ms(), wait_ms);
        let held = tokio::select! {
            polled = received => polled?.held,
            _ = cancel.wait_for(|stop| *stop) => Vec::new(),
        };
        let transaction_id = uuid::Uuid::new_v4().to_string();
        let messages: Vec<pb::QueueMessage> = held
            .iter()
            .map(|h| convert::to_queue_message(&h.message, &h.channel))
            .collect();
        let mut response = pb::QueuesDownstreamResponse {
            transaction_id: transaction_id.clone(),
            ref_request_id: request.request_id.clone(),
            request_type_data: request.request_type_data,
            messages,
            ..Default::default()
        };
        if request.auto_ack {
            for h in &held {
                self.ack(h).await?;
            }
            response.transaction_complete = true;
            return Ok(response);
        }
        response.active_offsets = held
            .iter()
            .map(|h| i64::try_from(convert::wire_sequence(h.message.seq)).unwrap_or(i64::MAX))
            .collect();
        if held.is_empty() {
            response.transaction_complete = true;
            return Ok(response);
        }
        let mut state = state.lock().await;
        if state.closed {
            for h in &held {
                let _ = self.set_visibility(h, 0).await;
            }
            return Ok(response);
        }
        let active = held
            .into_iter()
            .map(|h| (convert::wire_sequence(h.message.seq), h))
            .collect();
        state.open.insert(transaction_id, Transaction { active });
        Ok(response)
    }

    /// Settles `sequences` (all active ones when `None`) of a transaction with `action`.
    async fn downstream_settle(
        &self,
        state: &mut Downstream,
        request: &pb::QueuesDownstreamRequest,
        all: bool,
        action: Settle<'_>,
    ) -> Result<(), KubemqError> {
        let id = request.ref_transaction_id.clone();
        let transaction = state
            .open
            .get_mut(&id)
            .ok_or_else(|| KubemqError::TransactionNotFound(id.clone()))?;
        let sequences: Vec<u64> = if all {
            transaction.active.keys().copied().collect()
        } else {
            let mut wanted = Vec::new();
            for &sequence in &request.sequence_range {
                let sequence = u64::try_from(sequence).unwrap_or(0);
                if !transaction.active.contains_key(&sequence) {
                    return Err(KubemqError::SequenceNotActive(sequence));
                }
                wanted.push(sequence);
            }
            wanted
        };
        let mut first_error = None;
        for sequence in sequences {
            let Some(held) = transaction.active.remove(&sequence) else {
                continue;
            };
            let outcome = match action {
                Settle::Ack => self.ack(&held).await,
                Settle::Nack => self.set_visibility(&held, 0).await,
                Settle::Requeue(channel) => self.requeue(&held, channel).await,
            };
            if let Err(error) = outcome {
                first_error.get_or_insert(error);
            }
        }
        state.complete_if_done(&id);
        first_error.map_or(Ok(()), Err)
    }

    /// Returns every unsettled message of the stream's transactions to the queue at once.
    async fn release_all(&self, state: &mut Downstream) {
        for (_, transaction) in state.open.drain() {
            for held in transaction.active.values() {
                // A message whose deadline already passed may be held elsewhere now: nothing to release.
                let _ = self.set_visibility(held, 0).await;
            }
        }
    }

    async fn downstream_request(
        &self,
        state: &mut Downstream,
        request: pb::QueuesDownstreamRequest,
    ) -> Option<pb::QueuesDownstreamResponse> {
        use pb::QueuesDownstreamRequestType as T;
        let kind = T::try_from(request.request_type_data).unwrap_or(T::PollRequestTypeUnknown);
        let requeue_channel = request.re_queue_channel.clone();
        let outcome = match kind {
            T::AckAll => {
                self.downstream_settle(state, &request, true, Settle::Ack)
                    .await
            }
            T::AckRange => {
                self.downstream_settle(state, &request, false, Settle::Ack)
                    .await
            }
            T::NAckAll => {
                self.downstream_settle(state, &request, true, Settle::Nack)
                    .await
            }
            T::NAckRange => {
                self.downstream_settle(state, &request, false, Settle::Nack)
                    .await
            }
            T::ReQueueAll => {
                self.downstream_settle(state, &request, true, Settle::Requeue(&requeue_channel))
                    .await
            }
            T::ReQueueRange => {
                self.downstream_settle(state, &request, false, Settle::Requeue(&requeue_channel))
                    .await
            }
            T::ActiveOffsets | T::TransactionStatus => {
                let id = &request.ref_transaction_id;
                let (offsets, complete) = match state.open.get(id) {
                    Some(t) => (
                        t.active
                            .keys()
                            .map(|&s| i64::try_from(s).unwrap_or(i64::MAX))
                            .collect(),
                        false,
                    ),
                    None if state.completed.contains(id) => (Vec::new(), true),
                    None => {
                        return Some(downstream_error(
                            &request,
                            KubemqError::TransactionNotFound(id.clone()),
                        ))
                    }
                };
                return Some(pb::QueuesDownstreamResponse {
                    transaction_id: id.clone(),
                    ref_request_id: request.request_id.clone(),
                    request_type_data: request.request_type_data,
                    active_offsets: offsets,
                    transaction_complete: complete,
                    ..Default::default()
                });
            }
            T::CloseByClient => {
                self.release_all(state).await;
                Ok(())
            }
            // Gets are dispatched by the stream loop, concurrently; CloseByServer is the server's to send.
            T::Get | T::PollRequestTypeUnknown | T::CloseByServer => {
                Err(KubemqError::RequestTypeInvalid)
            }
        };
        // Acks, nacks, re-queues and closes are answered only when they fail.
        outcome.err().map(|error| downstream_error(&request, error))
    }
}

#[derive(Clone, Copy)]
enum Settle<'a> {
    Ack,
    Nack,
    Requeue(&'a str),
}

// ----- StreamQueueMessage (legacy): one active message per stream -----

fn stream_error(
    request: &pb::StreamQueueMessagesRequest,
    error: KubemqError,
) -> pb::StreamQueueMessagesResponse {
    pb::StreamQueueMessagesResponse {
        request_id: request.request_id.clone(),
        stream_request_type_data: request.stream_request_type_data,
        is_error: true,
        error: error.to_string(),
        ..Default::default()
    }
}

impl Inner {
    async fn stream_request(
        &self,
        active: &mut Option<Held>,
        request: &pb::StreamQueueMessagesRequest,
    ) -> Result<pb::StreamQueueMessagesResponse, KubemqError> {
        use pb::StreamRequestType as T;
        let kind = T::try_from(request.stream_request_type_data).unwrap_or(T::Unknown);
        let mut response = pb::StreamQueueMessagesResponse {
            request_id: request.request_id.clone(),
            stream_request_type_data: request.stream_request_type_data,
            ..Default::default()
        };
        match kind {
            T::ReceiveMessage => {
                if active.is_some() {
                    return Err(KubemqError::MessageAlreadyActive);
                }
                if request.client_id.is_empty() {
                    return Err(KubemqError::ClientIdMissing);
                }
                convert::validate_channel(&request.channel)?;
                if !(1..=self.settings.max_visibility_s).contains(&request.visibility_seconds) {
                    return Err(KubemqError::VisibilityOutOfRange {
                        max: self.settings.max_visibility_s,
                    });
                }
                let wait_ms = self.check_wait_s(request.wait_time_seconds)?;
                let visibility_ms = Millis::from(request.visibility_seconds as u32) * 1_000;
                let mut held = self
                    .receive(&request.channel, 1, visibility_ms, wait_ms)
                    .await?
                    .held;
                let held = held.pop().ok_or(KubemqError::NoNewMessages)?;
                response.message = Some(convert::to_queue_message(&held.message, &held.channel));
                *active = Some(held);
            }
            T::AckMessage
            | T::RejectMessage
            | T::ModifyVisibility
            | T::ResendMessage
            | T::SendModifiedMessage => {
                let held = active.as_ref().ok_or(KubemqError::NoActiveMessage)?;
                match kind {
                    T::AckMessage => self.ack(held).await?,
                    T::RejectMessage => self.set_visibility(held, 0).await?,
                    T::ModifyVisibility => {
                        if !(1..=self.settings.max_visibility_s)
                            .contains(&request.visibility_seconds)
                        {
                            return Err(KubemqError::VisibilityOutOfRange {
                                max: self.settings.max_visibility_s,
                            });
                        }
                        self.set_visibility(
                            held,
                            Millis::from(request.visibility_seconds as u32) * 1_000,
                        )
                        .await?;
                        return Ok(response);
                    }
                    T::ResendMessage => self.requeue(held, &request.channel).await?,
                    _ => {
                        let modified = request
                            .modified_message
                            .clone()
                            .ok_or(KubemqError::MessageEmpty)?;
                        let result = self.try_send(modified).await?;
                        if result.is_error {
                            return Err(KubemqError::Internal(result.error));
                        }
                        self.ack(held).await?;
                    }
                }
                *active = None;
            }
            T::Unknown => return Err(KubemqError::RequestTypeInvalid),
        }
        Ok(response)
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

#[tonic::async_trait]
impl Kubemq for KubemqService {
    async fn ping(&self, _request: Request<pb::Empty>) -> Result<Response<pb::PingResult>, Status> {
        Ok(Response::new(pb::PingResult {
            host: "veil".to_string(),
            version: env!("CARGO_PKG_VERSION").to_string(),
            server_start_time: self.inner.started_at_s,
            server_up_time_seconds: i64::try_from(self.inner.started.elapsed().as_secs())
                .unwrap_or(i64::MAX),
        }))
    }

    async fn send_request(
        &self,
        request: Request<pb::Request>,
    ) -> Result<Response<pb::Response>, Status> {
        let request = request.into_inner();
        let mut response = pb::Response {
            client_id: request.client_id.clone(),
            request_id: request.request_id.clone(),
            timestamp: convert::nanos(self.inner.engine.now()),
            ..Default::default()
        };
        if request.channel != limits::CLUSTER_REQUESTS_CHANNEL {
            response.error = "Error 404: no responder for this channel".to_string();
            return Ok(Response::new(response));
        }
        let channel = request.tags.get("channel").cloned().unwrap_or_default();
        let outcome: Result<(), KubemqError> = match request.metadata.as_str() {
            "create-channel" => match convert::validate_channel(&channel) {
                Ok(()) => self.inner.ensure(&channel).await.map(|_| ()),
                Err(error) => Err(error),
            },
            "delete-channel" => match self.inner.engine.delete_queue(&key(&channel)).await {
                Ok(()) | Err(EngineError::QueueNotFound(_)) => Ok(()),
                Err(error) => Err(error.into()),
            },
            "list-channels" => {
                let search = request
                    .tags
                    .get("channel_search")
                    .map(String::as_str)
                    .unwrap_or("");
                let queues = self.inner.engine.list_queues(DEFAULT_NAMESPACE, "");
                response.body = convert::channel_list_json(&queues, search);
                Ok(())
            }
            _ => Err(KubemqError::RequestTypeInvalid),
        };
        match outcome {
            Ok(()) => response.executed = true,
            Err(error) => response.error = error.to_string(),
        }
        Ok(Response::new(response))
    }

    async fn queues_info(
        &self,
        request: Request<pb::QueuesInfoRequest>,
    ) -> Result<Response<pb::QueuesInfoResponse>, Status> {
        let request = request.into_inner();
        let queues = self.inner.engine.list_queues(DEFAULT_NAMESPACE, "");
        let info = {
            let subscribers = self.inner.subscribers.lock();
            convert::queues_info(&queues, &request.queue_name, &subscribers)
        };
        Ok(Response::new(pb::QueuesInfoResponse {
            ref_request_id: request.request_id,
            info: Some(info),
        }))
    }

    async fn send_queue_message(
        &self,
        request: Request<pb::QueueMessage>,
    ) -> Result<Response<pb::SendQueueMessageResult>, Status> {
        Ok(Response::new(
            self.inner.send_one(request.into_inner()).await,
        ))
    }

    async fn send_queue_messages_batch(
        &self,
        request: Request<pb::QueueMessagesBatchRequest>,
    ) -> Result<Response<pb::QueueMessagesBatchResponse>, Status> {
        let batch = request.into_inner();
        let mut results = Vec::with_capacity(batch.messages.len());
        for message in batch.messages {
            results.push(self.inner.send_one(message).await);
        }
        Ok(Response::new(pb::QueueMessagesBatchResponse {
            batch_id: batch.batch_id,
            have_errors: results.iter().any(|r| r.is_error),
            results,
        }))
    }

    async fn receive_queue_messages(
        &self,
        request: Request<pb::ReceiveQueueMessagesRequest>,
    ) -> Result<Response<pb::ReceiveQueueMessagesResponse>, Status> {
        let request = request.into_inner();
        let inner = &self.inner;
        let outcome: Result<(Vec<pb::QueueMessage>, u64), KubemqError> = async {
            if request.client_id.is_empty() {
                return Err(KubemqError::ClientIdMissing);
            }
            convert::validate_channel(&request.channel)?;
            let max = inner.check_max_items(request.max_number_of_messages)?;
            // KubeMQ waits DefaultWaitTimeoutSeconds when a pull names no wait.
            let wait_s = if request.wait_time_seconds == 0 {
                inner.settings.default_wait_timeout_s
            } else {
                request.wait_time_seconds
            };
            let wait_ms = inner.check_wait_s(wait_s)?;
            if request.is_peak {
                let key = inner.ensure(&request.channel).await?;
                let peeked = inner.engine.peek(&key, max).await?;
                let messages = peeked
                    .iter()
                    .map(|m| convert::to_queue_message(m, &request.channel))
                    .collect();
                return Ok((messages, 0));
            }
            // A pull settles what it returns at once (KubeMQ's ReceiveQueueMessages has no ack).
            let polled = inner
                .receive(
                    &request.channel,
                    max,
                    inner.default_visibility_ms(),
                    wait_ms,
                )
                .await?;
            let mut messages = Vec::with_capacity(polled.held.len());
            for h in &polled.held {
                inner.ack(h).await?;
                messages.push(convert::to_queue_message(&h.message, &h.channel));
            }
            Ok((messages, polled.expired))
        }
        .await;
        let mut response = pb::ReceiveQueueMessagesResponse {
            request_id: request.request_id.clone(),
            is_peak: request.is_peak,
            ..Default::default()
        };
        match outcome {
            Ok((messages, expired)) => {
                response.messages_received = i32::try_from(messages.len()).unwrap_or(i32::MAX);
                response.messages_expired = i32::try_from(expired).unwrap_or(i32::MAX);
                response.messages = messages;
            }
            Err(error) => {
                response.is_error = true;
                response.error = error.to_string();
            }
        }
        Ok(Response::new(response))
    }

    async fn ack_all_queue_messages(
        &self,
        request: Request<pb::AckAllQueueMessagesRequest>,
    ) -> Result<Response<pb::AckAllQueueMessagesResponse>, Status> {
        let request = request.into_inner();
        let outcome: Result<u64, KubemqError> = async {
            convert::validate_channel(&request.channel)?;
            let key = self.inner.ensure(&request.channel).await?;
            Ok(self.inner.engine.purge(&key, None).await?)
        }
        .await;
        let mut response = pb::AckAllQueueMessagesResponse {
            request_id: request.request_id,
            ..Default::default()
        };
        match outcome {
            Ok(count) => response.affected_messages = count,
            Err(error) => {
                response.is_error = true;
                response.error = error.to_string();
            }
        }
        Ok(Response::new(response))
    }

    type StreamQueueMessageStream = Reply<pb::StreamQueueMessagesResponse>;

    async fn stream_queue_message(
        &self,
        request: Request<Streaming<pb::StreamQueueMessagesRequest>>,
    ) -> Result<Response<Self::StreamQueueMessageStream>, Status> {
        let mut inbound = request.into_inner();
        let inner = self.inner.clone();
        let (tx, rx) = mpsc::channel(STREAM_BUFFER);
        tokio::spawn(async move {
            let mut shutdown = inner.shutdown.clone();
            let mut active: Option<Held> = None;
            while let Some(request) = next_or_shutdown(&mut inbound, &mut shutdown).await {
                let response = inner
                    .stream_request(&mut active, &request)
                    .await
                    .unwrap_or_else(|error| stream_error(&request, error));
                if tx.send(Ok(response)).await.is_err() {
                    break;
                }
            }
            if let Some(held) = active.take() {
                let _ = inner.set_visibility(&held, 0).await;
            }
        });
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }

    type QueuesDownstreamStream = Reply<pb::QueuesDownstreamResponse>;

    async fn queues_downstream(
        &self,
        request: Request<Streaming<pb::QueuesDownstreamRequest>>,
    ) -> Result<Response<Self::QueuesDownstreamStream>, Status> {
        let mut inbound = request.into_inner();
        let inner = self.inner.clone();
        let (tx, rx) = mpsc::channel(STREAM_BUFFER);
        tokio::spawn(async move {
            let mut shutdown = inner.shutdown.clone();
            let state = Arc::new(tokio::sync::Mutex::new(Downstream::default()));
            let (cancel, cancelled) = watch::channel(false);
            let mut gets = tokio::task::JoinSet::new();
            while let Some(request) = next_or_shutdown(&mut inbound, &mut shutdown).await {
                if request.request_type_data == pb::QueuesDownstreamRequestType::Get as i32 {
                    let (inner, state, tx) = (inner.clone(), state.clone(), tx.clone());
                    let cancelled = cancelled.clone();
                    gets.spawn(async move {
                        let response = inner
                            .downstream_get(&state, cancelled, &request)
                            .await
                            .unwrap_or_else(|e| downstream_error(&request, e));
                        let _ = tx.send(Ok(response)).await;
                    });
                    continue;
                }
                let response = {
                    let mut state = state.lock().await;
                    inner.downstream_request(&mut state, request).await
                };
                if let Some(response) = response {
                    if tx.send(Ok(response)).await.is_err() {
                        break;
                    }
                }
            }
            // The stream is over: release every unsettled message, and make Gets still polling give up and
            // release what they got rather than open a transaction nobody can settle.
            {
                let mut state = state.lock().await;
                state.closed = true;
                inner.release_all(&mut state).await;
            }
            cancel.send_replace(true);
            while gets.join_next().await.is_some() {}
            if *shutdown.borrow() {
                let _ = tx
                    .send(Ok(pb::QueuesDownstreamResponse {
                        request_type_data: pb::QueuesDownstreamRequestType::CloseByServer as i32,
                        ..Default::default()
                    }))
                    .await;
            }
        });
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }

    type QueuesUpstreamStream = Reply<pb::QueuesUpstreamResponse>;

    async fn queues_upstream(
        &self,
        request: Request<Streaming<pb::QueuesUpstreamRequest>>,
    ) -> Result<Response<Self::QueuesUpstreamStream>, Status> {
        let mut inbound = request.into_inner();
        let inner = self.inner.clone();
        let (tx, rx) = mpsc::channel(STREAM_BUFFER);
        tokio::spawn(async move {
            let mut shutdown = inner.shutdown.clone();
            while let Some(request) = next_or_shutdown(&mut inbound, &mut shutdown).await {
                let mut results = Vec::with_capacity(request.messages.len());
                for message in request.messages {
                    results.push(inner.send_one(message).await);
                }
                let response = pb::QueuesUpstreamResponse {
                    ref_request_id: request.request_id,
                    results,
                    ..Default::default()
                };
                if tx.send(Ok(response)).await.is_err() {
                    break;
                }
            }
        });
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }
}
