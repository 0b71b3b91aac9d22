//! `QueuesDownstream`: transactions on one bidirectional stream. A `Get` is a collecting engine receive with
//! the server-side visibility timeout (`DefaultVisibilitySeconds`) and opens a transaction that holds the
//! receipts by wire sequence; ack = delete with the current receipt, nack / close / stream end = visibility
//! 0, re-queue = the engine's `move_message`.
//!
//! Requests other than `Get` are applied one at a time in the order they arrive, each finished (durable)
//! before the next is read, so a settlement sent before a later request has taken effect when that request
//! runs — as in KubeMQ, whose stream handler also works through its requests in order. A `Get` runs beside
//! them: a long poll must not hold back the acks of earlier transactions.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::Arc;

use tokio::sync::{mpsc, watch, Mutex};
use tonic::Streaming;
use veil_core::{Millis, Permission};

use super::{consumer, next_or_shutdown, Collect, Held, Inner};
use crate::auth::Caller;
use crate::convert::{self, KubemqError};
use crate::limits;
use crate::pb;
use crate::pb::QueuesDownstreamRequestType as T;

type Replies = mpsc::Sender<Box<pb::QueuesDownstreamResponse>>;

struct Transaction {
    /// Unsettled messages by wire sequence.
    active: BTreeMap<u64, Held>,
}

/// One stream's transactions.
#[derive(Default)]
struct Downstream {
    open: HashMap<String, Transaction>,
    /// Recently completed transaction ids, so that TransactionStatus can still answer "complete"; bounded
    /// by `limits::COMPLETED_TRANSACTIONS_KEPT`.
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

/// The stream's state is shared by the request loop and the Gets running beside it. An async mutex, because
/// settling awaits the engine while holding it: that is what keeps settlements in arrival order.
type Shared = Arc<Mutex<Downstream>>;

/// How a settle request treats its messages.
#[derive(Clone, Copy)]
enum Settle<'a> {
    Ack,
    Nack,
    Requeue(&'a str),
}

/// Which messages of a transaction a settle request names.
#[derive(Clone, Copy)]
enum Which {
    All,
    Range,
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

/// The `operation` label of one downstream request: the RPC and the request type, from the protocol's own
/// enum (never what the client sent when it is not one of them).
fn downstream_operation(request_type: i32) -> &'static str {
    match T::try_from(request_type).unwrap_or(T::PollRequestTypeUnknown) {
        T::Get => "QueuesDownstream.Get",
        T::AckAll => "QueuesDownstream.AckAll",
        T::AckRange => "QueuesDownstream.AckRange",
        T::NAckAll => "QueuesDownstream.NAckAll",
        T::NAckRange => "QueuesDownstream.NAckRange",
        T::ReQueueAll => "QueuesDownstream.ReQueueAll",
        T::ReQueueRange => "QueuesDownstream.ReQueueRange",
        T::ActiveOffsets => "QueuesDownstream.ActiveOffsets",
        T::TransactionStatus => "QueuesDownstream.TransactionStatus",
        T::CloseByClient => "QueuesDownstream.CloseByClient",
        T::CloseByServer | T::PollRequestTypeUnknown => "QueuesDownstream.Unknown",
    }
}

/// Serves one stream until the client ends it or the server stops; then releases every unsettled message,
/// makes Gets still polling give up (releasing what they got) and, on a server stop, says `CloseByServer`.
pub(super) async fn serve(
    inner: Arc<Inner>,
    mut inbound: Streaming<pb::QueuesDownstreamRequest>,
    (peer, caller): (Option<SocketAddr>, Caller),
    tx: Replies,
) {
    let mut shutdown = inner.shutdown.clone();
    let state: Shared = Arc::default();
    let caller = Arc::new(caller);
    // Turns true when the stream is over, so that Gets still collecting stop.
    let (cancel, cancelled) = watch::channel(false);
    let mut gets = tokio::task::JoinSet::new();
    while let Some(request) = next_or_shutdown(&mut inbound, &mut shutdown).await {
        if request.request_type_data == T::Get as i32 {
            // The wait counts from here (see `Collect::since_ms`).
            let arrived_ms = inner.engine.now();
            let (inner, state, tx) = (inner.clone(), state.clone(), tx.clone());
            let get = spawned_get(
                inner,
                state,
                cancelled.clone(),
                (request, peer, caller.clone(), arrived_ms),
                tx,
            );
            gets.spawn(get);
            continue;
        }
        let trip = inner.pipeline.start();
        let operation = downstream_operation(request.request_type_data);
        let response = inner
            .request(&mut *state.lock().await, request, (&caller, peer))
            .await;
        // Counted per request of the stream (a settlement answers only when it fails).
        inner.observe(&trip, operation, response.is_some());
        let Some(response) = response else { continue };
        if tx.send(Box::new(response)).await.is_err() {
            break;
        }
    }
    {
        let mut state = state.lock().await;
        state.closed = true;
        inner.release_all(&mut state).await;
    }
    cancel.send_replace(true);
    while gets.join_next().await.is_some() {}
    if *shutdown.borrow() {
        let closing = pb::QueuesDownstreamResponse {
            request_type_data: T::CloseByServer as i32,
            ..Default::default()
        };
        let _ = tx.send(Box::new(closing)).await;
    }
}

async fn spawned_get(
    inner: Arc<Inner>,
    state: Shared,
    cancelled: watch::Receiver<bool>,
    (request, peer, caller, arrived_ms): (
        pb::QueuesDownstreamRequest,
        Option<SocketAddr>,
        Arc<Caller>,
        Millis,
    ),
    tx: Replies,
) {
    let trip = inner.pipeline.start();
    let client = peer.map(|p| p.ip().to_string()).unwrap_or_default();
    let who = (request.client_id.as_str(), request.channel.as_str());
    let operation = "QueuesDownstream.Get";
    // The name first: a bad one never reaches the policy or the audit log.
    let allowed = convert::validate_channel(&request.channel)
        .and_then(|()| inner.authorize(&caller, operation, who, Permission::Receive, &client));
    let response = match allowed {
        Ok(()) => {
            inner
                .get(&state, cancelled, &request, (peer, arrived_ms))
                .await
        }
        Err(error) => Err(error),
    };
    let response = response.unwrap_or_else(|error| downstream_error(&request, error));
    inner.observe(&trip, "QueuesDownstream.Get", response.is_error);
    // The client may be gone; its messages were then released by the stream's end.
    let _ = tx.send(Box::new(response)).await;
}

impl Inner {
    /// KubeMQ's Get rules: a client id, a valid channel, 1..=max items, a wait in milliseconds. KubeMQ also
    /// raises a wait under one second to one second; Veil does not, and answers a Get that is short of its
    /// items a little before its wait ends ([`answer_after_ms`]): the SDKs give up on a Get `WaitTimeout` +
    /// 0.5 s after *sending* it (the Python SDK 4.x), so an answer that comes later — the Get having reached
    /// Veil late on a loaded client — is dropped by the SDK, and the messages it carried stay in a
    /// transaction nobody settles until the stream ends (docs/semantics.md §KubeMQ).
    fn check_get(
        &self,
        request: &pb::QueuesDownstreamRequest,
        (peer, arrived_ms): (Option<SocketAddr>, Millis),
    ) -> Result<Collect, KubemqError> {
        convert::validate_client_id(&request.client_id)?;
        convert::validate_channel(&request.channel)?;
        let max = self.check_max_items(request.max_items)?;
        let max_wait_ms = i64::from(self.settings.max_wait_timeout_s) * 1_000;
        if request.wait_timeout < 0 || i64::from(request.wait_timeout) > max_wait_ms {
            return Err(KubemqError::WaitOutOfRange {
                max_s: self.settings.max_wait_timeout_s,
            });
        }
        Ok(Collect {
            max,
            visibility_ms: self.default_visibility_ms(),
            since_ms: arrived_ms,
            wait_ms: answer_after_ms(Millis::from(request.wait_timeout.unsigned_abs())),
            consumer: consumer(peer, &request.client_id),
        })
    }

    /// A Get collects, then takes the stream's state only to record its transaction.
    async fn get(
        &self,
        state: &Mutex<Downstream>,
        mut cancelled: watch::Receiver<bool>,
        request: &pb::QueuesDownstreamRequest,
        arrival: (Option<SocketAddr>, Millis),
    ) -> Result<pb::QueuesDownstreamResponse, KubemqError> {
        let collect = self.check_get(request, arrival)?;
        let stream_over = async {
            let _ = cancelled.wait_for(|over| *over).await;
        };
        let held = self
            .receive_until(&request.channel, collect, stream_over)
            .await?
            .held;
        let mut response = pb::QueuesDownstreamResponse {
            transaction_id: uuid::Uuid::new_v4().to_string(),
            ref_request_id: request.request_id.clone(),
            request_type_data: request.request_type_data,
            messages: held
                .iter()
                .map(|h| convert::to_queue_message(&h.message, &h.channel))
                .collect(),
            ..Default::default()
        };
        if request.auto_ack {
            let helds: Vec<&Held> = held.iter().collect();
            if let Some(error) = self
                .ack_held(&helds)
                .await
                .into_iter()
                .find_map(Result::err)
            {
                return Err(error);
            }
            response.transaction_complete = true;
            return Ok(response);
        }
        self.open_transaction(state, &mut response, held).await?;
        Ok(response)
    }

    /// Records the transaction of a Get that returned `held`. If the stream's requests have ended meanwhile,
    /// no ack can follow: the messages go back to the queue and the Get answers an error instead of messages
    /// its client could never settle.
    async fn open_transaction(
        &self,
        state: &Mutex<Downstream>,
        response: &mut pb::QueuesDownstreamResponse,
        held: Vec<Held>,
    ) -> Result<(), KubemqError> {
        response.active_offsets = held
            .iter()
            .map(|h| i64::try_from(convert::wire_sequence(h.message.seq)).unwrap_or(i64::MAX))
            .collect();
        if held.is_empty() {
            response.transaction_complete = true;
            return Ok(());
        }
        let mut state = state.lock().await;
        if state.closed {
            // Already settled elsewhere or lapsed: nothing to release, so the results do not matter.
            let _ = self.nack_held(&held.iter().collect::<Vec<_>>()).await;
            return Err(KubemqError::StreamEnded);
        }
        let active = held
            .into_iter()
            .map(|h| (convert::wire_sequence(h.message.seq), h))
            .collect();
        state
            .open
            .insert(response.transaction_id.clone(), Transaction { active });
        Ok(())
    }

    /// One non-Get request. Acks, nacks, re-queues and closes are answered only when they fail.
    async fn request(
        &self,
        state: &mut Downstream,
        request: pb::QueuesDownstreamRequest,
        (caller, peer): (&Caller, Option<SocketAddr>),
    ) -> Option<pb::QueuesDownstreamResponse> {
        let kind = T::try_from(request.request_type_data).unwrap_or(T::PollRequestTypeUnknown);
        if let Some((which, action)) = settlement(kind, &request.re_queue_channel) {
            let client = peer.map(|p| p.ip().to_string()).unwrap_or_default();
            let operation = downstream_operation(request.request_type_data);
            let outcome =
                match self.may_settle(state, &request, action, (caller, operation, &client)) {
                    Ok(()) => self.settle(state, &request, which, action).await,
                    Err(error) => Err(error),
                };
            return outcome.err().map(|error| downstream_error(&request, error));
        }
        let outcome = match kind {
            T::ActiveOffsets | T::TransactionStatus => return Some(status(state, &request)),
            T::CloseByClient => {
                self.release_all(state).await;
                Ok(())
            }
            // Gets are dispatched by the stream loop, concurrently; CloseByServer is the server's to send;
            // settlements were handled above.
            _ => Err(KubemqError::RequestTypeInvalid),
        };
        outcome.err().map(|error| downstream_error(&request, error))
    }

    /// A settlement needs `delete` on the transaction's channel, and a re-queue also `send` on its target
    /// (docs/security.md "KubeMQ"). An unknown transaction is left for [`Inner::settle`] to report.
    fn may_settle(
        &self,
        state: &Downstream,
        request: &pb::QueuesDownstreamRequest,
        action: Settle<'_>,
        (caller, operation, client): (&Caller, &str, &str),
    ) -> Result<(), KubemqError> {
        let client_id = request.client_id.as_str();
        let channel = state
            .open
            .get(&request.ref_transaction_id)
            .and_then(|t| t.active.values().next())
            .map(|held| held.channel.as_str());
        if let Some(channel) = channel {
            let who = (client_id, channel);
            self.authorize(caller, operation, who, Permission::Delete, client)?;
        }
        if let Settle::Requeue(target) = action {
            super::requeue_target(target)?;
            self.authorize(
                caller,
                operation,
                (client_id, target),
                Permission::Send,
                client,
            )?;
        }
        Ok(())
    }

    /// Settles the messages of a transaction that `which` names with `action`. A range naming a sequence
    /// that is not active settles nothing.
    async fn settle(
        &self,
        state: &mut Downstream,
        request: &pb::QueuesDownstreamRequest,
        which: Which,
        action: Settle<'_>,
    ) -> Result<(), KubemqError> {
        let id = request.ref_transaction_id.as_str();
        let transaction = state
            .open
            .get_mut(id)
            .ok_or_else(|| KubemqError::TransactionNotFound(id.to_string()))?;
        let sequences = named_sequences(transaction, request, which)?;
        let settled: Vec<Held> = sequences
            .into_iter()
            .filter_map(|sequence| transaction.active.remove(&sequence))
            .collect();
        let outcome = self
            .apply_all(&settled.iter().collect::<Vec<_>>(), action)
            .await;
        state.complete_if_done(id);
        outcome
    }

    /// Settles `helds` with `action`: one engine call per channel, whether acks, nacks or re-queues (each
    /// re-queued message still moves atomically). Returns the first error; every message is still settled or
    /// tried.
    async fn apply_all(&self, helds: &[&Held], action: Settle<'_>) -> Result<(), KubemqError> {
        let results = match action {
            Settle::Ack => self.ack_held(helds).await,
            Settle::Nack => self.nack_held(helds).await,
            Settle::Requeue(channel) => self.requeue_held(helds, channel).await,
        };
        results
            .into_iter()
            .find_map(Result::err)
            .map_or(Ok(()), Err)
    }

    /// Returns every unsettled message of the stream's transactions to the queue at once.
    async fn release_all(&self, state: &mut Downstream) {
        let helds: Vec<Held> = state
            .open
            .drain()
            .flat_map(|(_, transaction)| transaction.active.into_values())
            .collect();
        // A message whose deadline already passed may be held elsewhere now: nothing to release.
        let _ = self.nack_held(&helds.iter().collect::<Vec<_>>()).await;
    }
}

/// How long a Get short of its items collects: its wait, less [`limits::GET_ANSWER_LEAD_MS_MAX`] (at most a
/// quarter of the wait), so that the answer reaches an SDK that counts `WaitTimeout` + 0.5 s from its send
/// even when the Get reached Veil late (see [`Inner::check_get`]).
fn answer_after_ms(wait_ms: Millis) -> Millis {
    wait_ms - (wait_ms / 4).min(limits::GET_ANSWER_LEAD_MS_MAX)
}

/// The wire sequences a settle request names, each checked to be active in the transaction.
fn named_sequences(
    transaction: &Transaction,
    request: &pb::QueuesDownstreamRequest,
    which: Which,
) -> Result<Vec<u64>, KubemqError> {
    if let Which::All = which {
        return Ok(transaction.active.keys().copied().collect());
    }
    request
        .sequence_range
        .iter()
        .map(|&sequence| {
            let sequence = u64::try_from(sequence).unwrap_or(0);
            if transaction.active.contains_key(&sequence) {
                Ok(sequence)
            } else {
                Err(KubemqError::SequenceNotActive(sequence))
            }
        })
        .collect()
}

/// ActiveOffsets / TransactionStatus: the transaction's unsettled sequences, or complete once all settled.
fn status(
    state: &Downstream,
    request: &pb::QueuesDownstreamRequest,
) -> pb::QueuesDownstreamResponse {
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
            return downstream_error(request, KubemqError::TransactionNotFound(id.clone()));
        }
    };
    pb::QueuesDownstreamResponse {
        transaction_id: id.clone(),
        ref_request_id: request.request_id.clone(),
        request_type_data: request.request_type_data,
        active_offsets: offsets,
        transaction_complete: complete,
        ..Default::default()
    }
}

/// What a settlement request settles and how: ack, nack or re-queue, of a whole transaction or a range of it.
/// `None` for the requests that are not settlements.
fn settlement(kind: T, requeue_channel: &str) -> Option<(Which, Settle<'_>)> {
    Some(match kind {
        T::AckAll => (Which::All, Settle::Ack),
        T::AckRange => (Which::Range, Settle::Ack),
        T::NAckAll => (Which::All, Settle::Nack),
        T::NAckRange => (Which::Range, Settle::Nack),
        T::ReQueueAll => (Which::All, Settle::Requeue(requeue_channel)),
        T::ReQueueRange => (Which::Range, Settle::Requeue(requeue_channel)),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::answer_after_ms;

    #[test]
    fn a_get_answers_its_wait_less_a_lead_of_at_most_250_ms_and_a_quarter_of_the_wait() {
        assert_eq!(answer_after_ms(0), 0);
        assert_eq!(answer_after_ms(400), 300);
        assert_eq!(answer_after_ms(1_000), 750);
        assert_eq!(answer_after_ms(5_000), 4_750);
        assert_eq!(answer_after_ms(3_600_000), 3_599_750);
    }
}
