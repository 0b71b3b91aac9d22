//! `KubemqTarget`: the KubeMQ queues protocol over gRPC, for Veil's KubeMQ front-end, with the
//! client tonic generates from the same proto file the server is built from (`veil_kubemq::pb`).
//!
//! Mapping:
//! - send = one `SendQueueMessagesBatch` of the batch (one round trip; every result must be free of error);
//! - receive = a `Get` on this task's `QueuesDownstream` stream (`AutoAck` off), which opens a transaction
//!   holding what it returned;
//! - delete = `AckAll` of each transaction whose every message is deleted (`AckRange` otherwise), followed on
//!   the same stream by a `TransactionStatus` whose answer is awaited. Settlements are answered only when
//!   they fail, and the server applies a stream's settlements in order, each durable before the next is
//!   read, so the status answer is the proof that the acks before it took effect: delete then means
//!   "settled", as the other targets' delete does.
//!
//! Why not the simpler calls: a `ReceiveQueueMessages` pull settles what it returns, so it is receive *and*
//! delete in one call — a consumer that dies mid-batch loses those messages, and nothing is ever redelivered;
//! `StreamQueueMessage` has receive-then-ack semantics but holds one message per stream. The downstream is
//! the one API with receive-then-delete for a batch, in two round trips per batch.
//!
//! The visibility timeout of a downstream transaction is the server's (`default_visibility_seconds`, 60 s by
//! default), not the request's, so the target also applies the queue's own visibility timeout on the client
//! side, as KubeMQ's SDKs do: a transaction held longer is returned with `NAckAll`, checked whenever the
//! task receives. A pull answers when `MaxItems` messages are in hand or its wait is over, as KubeMQ's does,
//! so an unfilled receive costs its whole wait.

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use bytes::Bytes;
use tokio::sync::{mpsc, oneshot, OnceCell};
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::{Channel, Endpoint};
use veil_kubemq::pb;
use veil_kubemq::pb::kubemq_client::KubemqClient;
use veil_kubemq::pb::QueuesDownstreamRequestType as Kind;

use crate::target::{Delivery, Target, TargetError, TargetResult};

const NAME: &str = "kubemq";
/// Time allowed beyond a request's own wait before it counts as failed.
const REQUEST_SLACK: Duration = Duration::from_secs(10);
/// Requests queued for the downstream's writer before a sender waits.
const DOWNSTREAM_QUEUE_REQUESTS: usize = 64;

/// Gives every clone its own client id (KubeMQ requires one; it names the receiver in the server's views).
static NEXT_CLIENT: AtomicU64 = AtomicU64::new(0);

fn failed(message: String) -> TargetError {
    TargetError::Failed {
        target: NAME,
        message,
    }
}

/// A poisoned lock only means another task panicked mid-update; the map is still usable.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

type Waiters = Arc<Mutex<HashMap<String, oneshot::Sender<pb::QueuesDownstreamResponse>>>>;

/// One `QueuesDownstream` stream: requests go out through `requests`, and a reader task hands each answer
/// to whoever registered its request id.
struct Downstream {
    requests: mpsc::Sender<pb::QueuesDownstreamRequest>,
    waiters: Waiters,
    reader: tokio::task::JoinHandle<()>,
}

impl Drop for Downstream {
    fn drop(&mut self) {
        // Ending the stream makes the server release every transaction still open on it.
        self.reader.abort();
    }
}

/// A transaction this task holds: when its Get answered and the sequences not yet deleted.
struct Transaction {
    taken: Instant,
    sequences: BTreeSet<i64>,
}

struct Conn {
    client: KubemqClient<Channel>,
    downstream: Downstream,
}

/// A KubeMQ endpoint. Each clone (each producer or consumer task) opens its own connection and downstream
/// on first use: transactions belong to the stream that opened them.
pub struct KubemqTarget {
    endpoint: String,
    client_id: String,
    conn: OnceCell<Conn>,
    next_request: AtomicU64,
    held: Mutex<HashMap<String, Transaction>>,
    /// The visibility timeout `prepare` set per queue, shared by all clones.
    visibility: Arc<Mutex<HashMap<String, u32>>>,
}

impl Clone for KubemqTarget {
    fn clone(&self) -> Self {
        Self {
            endpoint: self.endpoint.clone(),
            client_id: next_client_id(),
            conn: OnceCell::new(),
            next_request: AtomicU64::new(0),
            held: Mutex::new(HashMap::new()),
            visibility: Arc::clone(&self.visibility),
        }
    }
}

fn next_client_id() -> String {
    format!(
        "veil-bench-{}-{}",
        std::process::id(),
        NEXT_CLIENT.fetch_add(1, Ordering::Relaxed)
    )
}

/// A delivery's handle: its transaction and its sequence within it.
fn handle(transaction: &str, sequence: i64) -> String {
    format!("{transaction} {sequence}")
}

fn parse_handle(handle: &str) -> Option<(&str, i64)> {
    let (transaction, sequence) = handle.split_once(' ')?;
    Some((transaction, sequence.parse().ok()?))
}

impl KubemqTarget {
    /// Connects to `endpoint` (`http://127.0.0.1:50000`) and pings the server.
    pub async fn connect(endpoint: &str) -> TargetResult<Self> {
        let target = Self {
            endpoint: endpoint.to_owned(),
            client_id: next_client_id(),
            conn: OnceCell::new(),
            next_request: AtomicU64::new(0),
            held: Mutex::new(HashMap::new()),
            visibility: Arc::new(Mutex::new(HashMap::new())),
        };
        let mut client = target.conn().await?.client.clone();
        client
            .ping(pb::Empty {})
            .await
            .map_err(|e| failed(format!("Ping {endpoint}: {e}")))?;
        Ok(target)
    }

    async fn conn(&self) -> TargetResult<&Conn> {
        self.conn
            .get_or_try_init(|| async {
                let channel = Endpoint::from_shared(self.endpoint.clone())
                    .map_err(|e| failed(format!("bad endpoint {}: {e}", self.endpoint)))?
                    .tcp_nodelay(true)
                    .connect()
                    .await
                    .map_err(|e| failed(format!("connect {}: {e}", self.endpoint)))?;
                let mut client = KubemqClient::new(channel);
                let (requests, outbound) = mpsc::channel(DOWNSTREAM_QUEUE_REQUESTS);
                let mut inbound = client
                    .queues_downstream(ReceiverStream::new(outbound))
                    .await
                    .map_err(|e| failed(format!("QueuesDownstream: {e}")))?
                    .into_inner();
                let waiters: Waiters = Arc::default();
                let readers_waiters = Arc::clone(&waiters);
                let reader = tokio::spawn(async move {
                    // Answers nobody waits for (a cancelled receive's Get) are dropped; when the stream
                    // ends, dropping the waiters tells every pending request.
                    while let Ok(Some(response)) = inbound.message().await {
                        let waiter = lock(&readers_waiters).remove(&response.ref_request_id);
                        if let Some(waiter) = waiter {
                            let _ = waiter.send(response);
                        }
                    }
                    lock(&readers_waiters).clear();
                });
                Ok(Conn {
                    client,
                    downstream: Downstream {
                        requests,
                        waiters,
                        reader,
                    },
                })
            })
            .await
    }

    fn request_id(&self) -> String {
        format!("r{}", self.next_request.fetch_add(1, Ordering::Relaxed))
    }

    /// Sends one downstream request; with `answer`, registers for its answer first and returns the receiver.
    async fn downstream(
        &self,
        request: pb::QueuesDownstreamRequest,
        answer: bool,
    ) -> TargetResult<Option<oneshot::Receiver<pb::QueuesDownstreamResponse>>> {
        let downstream = &self.conn().await?.downstream;
        let receiver = answer.then(|| {
            let (sender, receiver) = oneshot::channel();
            lock(&downstream.waiters).insert(request.request_id.clone(), sender);
            receiver
        });
        downstream
            .requests
            .send(request)
            .await
            .map_err(|_| failed("the downstream stream is closed".into()))?;
        Ok(receiver)
    }

    fn settle_request(&self, kind: Kind, transaction: &str) -> pb::QueuesDownstreamRequest {
        pb::QueuesDownstreamRequest {
            request_id: self.request_id(),
            client_id: self.client_id.clone(),
            request_type_data: kind as i32,
            ref_transaction_id: transaction.to_owned(),
            ..Default::default()
        }
    }

    /// Returns the transactions held past their queue's visibility timeout (`NAckAll`, unanswered unless it
    /// fails); returns when the next held one falls due, if any.
    async fn release_expired(&self, visibility: Duration) -> TargetResult<Option<Instant>> {
        let now = Instant::now();
        let expired: Vec<String> = {
            let mut held = lock(&self.held);
            let ids: Vec<String> = held
                .iter()
                .filter(|(_, t)| now.duration_since(t.taken) >= visibility)
                .map(|(id, _)| id.clone())
                .collect();
            for id in &ids {
                held.remove(id);
            }
            ids
        };
        for id in expired {
            self.downstream(self.settle_request(Kind::NAckAll, &id), false)
                .await?;
        }
        Ok(lock(&self.held)
            .values()
            .map(|t| t.taken + visibility)
            .min())
    }

    fn queue_visibility(&self, queue: &str, receive_visibility_s: u32) -> Duration {
        let visibility_s = lock(&self.visibility)
            .get(queue)
            .copied()
            .unwrap_or(receive_visibility_s);
        Duration::from_secs(u64::from(visibility_s.max(1)))
    }
}

impl Target for KubemqTarget {
    fn name(&self) -> &'static str {
        NAME
    }

    /// Purges the channel (`AckAllQueueMessages`), which also creates it, so a reused name starts empty.
    async fn prepare(&self, queue: &str, visibility_s: u32) -> TargetResult<()> {
        let mut client = self.conn().await?.client.clone();
        let reply = client
            .ack_all_queue_messages(pb::AckAllQueueMessagesRequest {
                request_id: self.request_id(),
                client_id: self.client_id.clone(),
                channel: queue.to_owned(),
                wait_time_seconds: 1,
            })
            .await
            .map_err(|e| failed(format!("AckAllQueueMessages {queue}: {e}")))?
            .into_inner();
        if reply.is_error {
            return Err(failed(format!(
                "AckAllQueueMessages {queue}: {}",
                reply.error
            )));
        }
        lock(&self.visibility).insert(queue.to_owned(), visibility_s);
        Ok(())
    }

    async fn send(&self, queue: &str, bodies: Vec<Bytes>) -> TargetResult<()> {
        let mut client = self.conn().await?.client.clone();
        let count = bodies.len();
        let messages = bodies
            .into_iter()
            .map(|body| pb::QueueMessage {
                message_id: uuid::Uuid::new_v4().to_string(),
                client_id: self.client_id.clone(),
                channel: queue.to_owned(),
                body,
                ..Default::default()
            })
            .collect();
        let reply = client
            .send_queue_messages_batch(pb::QueueMessagesBatchRequest {
                batch_id: self.request_id(),
                messages,
            })
            .await
            .map_err(|e| failed(format!("SendQueueMessagesBatch x{count} to {queue}: {e}")))?
            .into_inner();
        if let Some(error) = reply.results.iter().find(|r| r.is_error) {
            return Err(failed(format!(
                "SendQueueMessagesBatch to {queue}: {}",
                error.error
            )));
        }
        if reply.results.len() != count {
            return Err(failed(format!(
                "SendQueueMessagesBatch to {queue}: {} results for {count} messages",
                reply.results.len()
            )));
        }
        Ok(())
    }

    async fn receive(
        &self,
        queue: &str,
        max: usize,
        visibility_s: u32,
        wait_s: u32,
    ) -> TargetResult<Vec<Delivery>> {
        let visibility = self.queue_visibility(queue, visibility_s);
        let wait = Duration::from_secs(u64::from(wait_s));
        let give_up = Instant::now() + wait + REQUEST_SLACK;
        let next_due = self.release_expired(visibility).await?;
        let get = pb::QueuesDownstreamRequest {
            request_id: self.request_id(),
            client_id: self.client_id.clone(),
            request_type_data: Kind::Get as i32,
            channel: queue.to_owned(),
            max_items: i32::try_from(max.max(1)).unwrap_or(i32::MAX),
            wait_timeout: i32::try_from(wait.as_millis()).unwrap_or(i32::MAX),
            auto_ack: false,
            ..Default::default()
        };
        let Some(mut answer) = self.downstream(get, true).await? else {
            return Err(failed("Get: no answer registered".into()));
        };
        // While the Get waits, transactions held from earlier receives may fall due: release them then, so
        // that this very Get can pick their messages up again.
        let mut next_due = next_due;
        let response = loop {
            let wake = next_due.map_or(give_up, |due| due.min(give_up));
            tokio::select! {
                response = &mut answer => {
                    break response.map_err(|_| failed(format!("Get {queue}: the downstream stream ended")))?;
                }
                () = tokio::time::sleep_until(wake.into()) => {
                    if Instant::now() >= give_up {
                        return Err(failed(format!("Get {queue}: no answer within {:?}", wait + REQUEST_SLACK)));
                    }
                    next_due = self.release_expired(visibility).await?;
                }
            }
        };
        if response.is_error {
            return Err(failed(format!("Get {queue}: {}", response.error)));
        }
        let transaction = response.transaction_id;
        let mut sequences = BTreeSet::new();
        let deliveries = response
            .messages
            .into_iter()
            .map(|message| {
                let sequence = message
                    .attributes
                    .as_ref()
                    .map_or(0, |a| i64::try_from(a.sequence).unwrap_or(i64::MAX));
                sequences.insert(sequence);
                Delivery {
                    body: message.body,
                    handle: handle(&transaction, sequence),
                }
            })
            .collect::<Vec<_>>();
        if !deliveries.is_empty() && !response.transaction_complete {
            lock(&self.held).insert(
                transaction,
                Transaction {
                    taken: Instant::now(),
                    sequences,
                },
            );
        }
        Ok(deliveries)
    }

    async fn delete(&self, queue: &str, handles: Vec<String>) -> TargetResult<()> {
        let mut by_transaction: HashMap<String, Vec<i64>> = HashMap::new();
        for handle in &handles {
            let (transaction, sequence) = parse_handle(handle)
                .ok_or_else(|| failed(format!("malformed handle {handle:?}")))?;
            by_transaction
                .entry(transaction.to_owned())
                .or_default()
                .push(sequence);
        }
        // Settle what this task still holds; a transaction already released as expired is no longer
        // ours and settles nothing, as a stale SQS receipt does.
        let mut settles = Vec::new();
        {
            let mut held = lock(&self.held);
            for (id, sequences) in by_transaction {
                let Some(transaction) = held.get_mut(&id) else {
                    continue;
                };
                let named: Vec<i64> = sequences
                    .into_iter()
                    .filter(|s| transaction.sequences.remove(s))
                    .collect();
                let request = if transaction.sequences.is_empty() {
                    held.remove(&id);
                    self.settle_request(Kind::AckAll, &id)
                } else {
                    pb::QueuesDownstreamRequest {
                        sequence_range: named,
                        ..self.settle_request(Kind::AckRange, &id)
                    }
                };
                settles.push(request);
            }
        }
        let Some(last) = settles.last().map(|r| r.ref_transaction_id.clone()) else {
            return Ok(());
        };
        let mut failures = Vec::new();
        for request in settles {
            let id = request.request_id.clone();
            if let Some(answer) = self.downstream(request, true).await? {
                failures.push((id, answer));
            }
        }
        let status = self.settle_request(Kind::TransactionStatus, &last);
        let Some(answer) = self.downstream(status, true).await? else {
            return Err(failed("TransactionStatus: no answer registered".into()));
        };
        let status = tokio::time::timeout(REQUEST_SLACK, answer)
            .await
            .map_err(|_| {
                failed(format!(
                    "ack on {queue}: no status within {REQUEST_SLACK:?}"
                ))
            })?
            .map_err(|_| failed(format!("ack on {queue}: the downstream stream ended")))?;
        // Every settlement was applied before the status was read: any failure has been answered by now.
        let waiters = &self.conn().await?.downstream.waiters;
        for (id, mut answer) in failures {
            lock(waiters).remove(&id);
            if let Ok(response) = answer.try_recv() {
                return Err(failed(format!("ack on {queue}: {}", response.error)));
            }
        }
        if status.is_error {
            return Err(failed(format!(
                "ack on {queue}: TransactionStatus: {}",
                status.error
            )));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handles_carry_the_transaction_and_the_sequence() {
        let h = handle("0b6a-tx", 42);
        assert_eq!(parse_handle(&h), Some(("0b6a-tx", 42)));
        assert_eq!(parse_handle("no-sequence"), None);
        assert_eq!(parse_handle("tx x"), None);
    }

    /// Against a live endpoint (`bench/run` runs it through Veil's KubeMQ front-end):
    /// `VEIL_BENCH_KUBEMQ=http://127.0.0.1:50000 cargo test -p veil-bench -- --ignored kubemq`.
    #[tokio::test]
    #[ignore = "needs Veil's KubeMQ front-end; set VEIL_BENCH_KUBEMQ"]
    async fn kubemq_round_trip_and_redelivery() {
        let endpoint =
            std::env::var("VEIL_BENCH_KUBEMQ").unwrap_or_else(|_| "http://127.0.0.1:50000".into());
        let target = KubemqTarget::connect(&endpoint).await.expect("connect");
        crate::target::check_round_trip_and_redelivery(target).await;
    }
}
