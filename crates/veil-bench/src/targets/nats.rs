//! The NATS JetStream peer: the durable work queue a user builds on NATS (docs/benchmarks.md).
//!
//! Mapping: a queue is a stream (`retention: WorkQueue`, file storage) on the subject `veil-bench.<queue>`
//! with one durable pull consumer (explicit acks, `ack_wait` = the visibility timeout, no limit on
//! unacknowledged messages, as SQS has no small in-flight cap);
//! - send = publish to the subject and await the PubAck (a batch publishes all, then awaits all acks);
//! - receive = one pull request for up to `max` messages with `no_wait` and `expires` = the wait, which
//!   nats-server (2.9 and later) answers as soon as *any* message is there, like an SQS long poll;
//! - delete = acknowledge each delivery through its reply subject (the handle).
//!
//! Durability: the Debian nats-server 2.9.10 that `bench/run` starts writes each message to the stream's
//! block file before its PubAck (it survives a crash of the server process) but fsyncs only every
//! 2 minutes (`SyncInterval` is fixed at 2 min for streams in 2.9; the `sync_interval` option, including
//! `always`, exists only from 2.10 and 2.9.10 rejects it as an unknown field). An OS crash or power loss can
//! therefore lose acknowledged messages; Veil and Redis (`appendfsync always`) fsync before answering.

use std::collections::HashMap;
use std::future::IntoFuture;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use async_nats::jetstream::consumer::pull::{self, Batch};
use async_nats::jetstream::consumer::{AckPolicy, PullConsumer};
use async_nats::jetstream::stream::{self, RetentionPolicy, StorageType};
use async_nats::jetstream::{self, Context};
use async_nats::Client;
use bytes::Bytes;
use futures_util::future::try_join_all;
use futures_util::StreamExt;
use tokio::sync::OnceCell;

use crate::target::{Delivery, Target, TargetError, TargetResult};

const NAME: &str = "nats";
/// The durable pull consumer every consumer task of a queue pulls from.
const CONSUMER: &str = "veil-bench";
/// The acknowledgement nats-server understands on a delivery's reply subject.
const ACK: &[u8] = b"+ACK";
/// A receive that came back empty with less than this left of its wait returns empty rather than wait again.
const MIN_RETRY_WAIT: Duration = Duration::from_millis(10);

fn failed(message: String) -> TargetError {
    TargetError::Failed {
        target: NAME,
        message,
    }
}

/// A JetStream stream name must not contain `.`, `*`, `>`, path separators or whitespace; queue names from
/// the scenarios are plain, but map anything else to `_` rather than fail deep inside a run.
fn stream_name(queue: &str) -> String {
    queue
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

fn subject(queue: &str) -> String {
    format!("veil-bench.{}", stream_name(queue))
}

/// One connection and what it has looked up.
struct Conn {
    client: Client,
    js: Context,
    /// Pull-consumer handles by queue, so a receive is one pull request, not a lookup and a pull.
    consumers: Mutex<HashMap<String, PullConsumer>>,
}

/// A NATS JetStream target. Each clone (each producer or consumer task) opens its own connection on first
/// use, so the tasks do not serialize on one socket's writer, as the HTTP targets use a connection each.
pub struct NatsTarget {
    endpoint: String,
    conn: OnceCell<Conn>,
}

impl Clone for NatsTarget {
    fn clone(&self) -> Self {
        Self {
            endpoint: self.endpoint.clone(),
            conn: OnceCell::new(),
        }
    }
}

impl NatsTarget {
    /// Connects to `endpoint` (`nats://127.0.0.1:4222`) and checks that JetStream is enabled there.
    pub async fn connect(endpoint: &str) -> TargetResult<Self> {
        let target = Self {
            endpoint: endpoint.to_owned(),
            conn: OnceCell::new(),
        };
        let conn = target.conn().await?;
        // A raw request rather than `query_account()`: async-nats 0.51 cannot parse nats-server 2.9's reply.
        // Without JetStream nobody answers this subject and the request fails with "no responders".
        conn.client
            .request("$JS.API.INFO", Bytes::new())
            .await
            .map_err(|e| {
                failed(format!(
                    "JetStream info at {endpoint} (is the server started with -js?): {e}"
                ))
            })?;
        Ok(target)
    }

    async fn conn(&self) -> TargetResult<&Conn> {
        self.conn
            .get_or_try_init(|| async {
                let client = async_nats::connect(&self.endpoint)
                    .await
                    .map_err(|e| failed(format!("connect {}: {e}", self.endpoint)))?;
                let js = jetstream::new(client.clone());
                Ok(Conn {
                    client,
                    js,
                    consumers: Mutex::new(HashMap::new()),
                })
            })
            .await
    }

    async fn consumer(&self, conn: &Conn, queue: &str) -> TargetResult<PullConsumer> {
        if let Some(consumer) = lock(&conn.consumers).get(queue) {
            return Ok(consumer.clone());
        }
        let stream = stream_name(queue);
        let consumer: PullConsumer = conn
            .js
            .get_consumer_from_stream(CONSUMER, &stream)
            .await
            .map_err(|e| failed(format!("consumer {CONSUMER} of stream {stream}: {e}")))?;
        lock(&conn.consumers).insert(queue.to_owned(), consumer.clone());
        Ok(consumer)
    }
}

/// Reads a pull request's deliveries to its end; each delivery's reply subject is the handle that acks it.
async fn collect(queue: &str, mut batch: Batch) -> TargetResult<Vec<Delivery>> {
    let mut out = Vec::new();
    while let Some(message) = batch.next().await {
        let message =
            message.map_err(|e| failed(format!("pull from {}: {e}", stream_name(queue))))?;
        let handle = message
            .reply
            .as_ref()
            .ok_or_else(|| {
                failed(format!(
                    "a delivery from {} has no reply subject",
                    stream_name(queue)
                ))
            })?
            .to_string();
        out.push(Delivery {
            body: message.payload.clone(),
            handle,
        });
    }
    Ok(out)
}

/// A poisoned lock only means another task panicked while inserting a cache entry; the map is still valid.
fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The consumer's configuration: explicit acks, redelivery after the visibility timeout, no in-flight cap.
fn consumer_config(visibility_s: u32) -> pull::Config {
    pull::Config {
        durable_name: Some(CONSUMER.to_owned()),
        ack_policy: AckPolicy::Explicit,
        ack_wait: Duration::from_secs(u64::from(visibility_s.max(1))),
        // nats-server defaults to 1,000 unacknowledged messages per consumer; -1 lifts that cap, as SQS has
        // none that a benchmark reaches.
        max_ack_pending: -1,
        ..Default::default()
    }
}

fn stream_config(queue: &str) -> stream::Config {
    stream::Config {
        name: stream_name(queue),
        subjects: vec![subject(queue)],
        retention: RetentionPolicy::WorkQueue,
        storage: StorageType::File,
        ..Default::default()
    }
}

impl Target for NatsTarget {
    fn name(&self) -> &'static str {
        NAME
    }

    async fn prepare(&self, queue: &str, visibility_s: u32) -> TargetResult<()> {
        let conn = self.conn().await?;
        let name = stream_name(queue);
        // Recreate rather than purge: the consumer's ack_wait must match this run's visibility timeout.
        if conn.js.get_stream(&name).await.is_ok() {
            conn.js
                .delete_stream(&name)
                .await
                .map_err(|e| failed(format!("delete stream {name}: {e}")))?;
        }
        let stream = conn
            .js
            .create_stream(stream_config(queue))
            .await
            .map_err(|e| failed(format!("create stream {name}: {e}")))?;
        let consumer: PullConsumer = stream
            .create_consumer(consumer_config(visibility_s))
            .await
            .map_err(|e| failed(format!("create consumer {CONSUMER} on {name}: {e}")))?;
        lock(&conn.consumers).insert(queue.to_owned(), consumer);
        Ok(())
    }

    async fn send(&self, queue: &str, bodies: Vec<Bytes>) -> TargetResult<()> {
        let conn = self.conn().await?;
        let subject = subject(queue);
        let mut acks = Vec::with_capacity(bodies.len());
        for body in bodies {
            let ack = conn
                .js
                .publish(subject.clone(), body)
                .await
                .map_err(|e| failed(format!("publish to {subject}: {e}")))?;
            acks.push(ack.into_future());
        }
        try_join_all(acks)
            .await
            .map_err(|e| failed(format!("PubAck from {subject}: {e}")))?;
        Ok(())
    }

    /// The visibility timeout is the consumer's `ack_wait`, fixed by `prepare`; a per-receive value cannot
    /// be passed to JetStream, so `_visibility_s` is not used here.
    async fn receive(
        &self,
        queue: &str,
        max: usize,
        _visibility_s: u32,
        wait_s: u32,
    ) -> TargetResult<Vec<Delivery>> {
        let conn = self.conn().await?;
        let consumer = self.consumer(conn, queue).await?;
        let wait = Duration::from_secs(u64::from(wait_s));
        let started = Instant::now();
        // Without `expires` the no-wait request answers at once (404 when empty); with it, nats-server holds
        // the request up to `expires` and answers as soon as it has delivered anything. The server accepts any
        // positive expiry and async-nats 0.51 imposes no minimum (it only adds 5 s of client-side slack).
        let mut fetch = consumer.fetch().max_messages(max.max(1));
        if !wait.is_zero() {
            fetch = fetch.expires(wait);
        }
        let batch = fetch.messages().await.map_err(|e| {
            failed(format!(
                "pull from {CONSUMER} of {}: {e}",
                stream_name(queue)
            ))
        })?;
        let out = collect(queue, batch).await?;
        let remaining = wait.saturating_sub(started.elapsed());
        if !out.is_empty() || remaining < MIN_RETRY_WAIT {
            return Ok(out);
        }
        // An empty answer before the wait is over is nats-server's "408 Requests Pending": other consumers'
        // waiting requests already ask for more than is pending, so a no-wait request is refused at once.
        // Returning it empty would make the caller spin; wait in line instead, for one message, which the
        // server hands over as soon as it arrives (a waiting request for more would wait until it was full).
        let batch = consumer
            .batch()
            .max_messages(1)
            .expires(remaining)
            .messages()
            .await
            .map_err(|e| {
                failed(format!(
                    "pull from {CONSUMER} of {}: {e}",
                    stream_name(queue)
                ))
            })?;
        collect(queue, batch).await
    }

    /// Acknowledges each delivery with a request to its reply subject and awaits the server's answer (what
    /// async-nats calls a double ack): delete then means "the server has settled it", as the other targets'
    /// delete does, instead of "the ack is in our socket buffer" (the plain `ack()` most users call). The
    /// requests share the client's one response inbox and go out together, so a batch costs one round trip.
    async fn delete(&self, _queue: &str, handles: Vec<String>) -> TargetResult<()> {
        let conn = self.conn().await?;
        let acks = handles.into_iter().map(|reply| {
            let client = conn.client.clone();
            async move {
                client
                    .request(reply.clone(), Bytes::from_static(ACK))
                    .await
                    .map_err(|e| failed(format!("ack {reply}: {e}")))
            }
        });
        try_join_all(acks).await?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stream_names_are_valid() {
        assert_eq!(stream_name("bench-throughput_1"), "bench-throughput_1");
        assert_eq!(stream_name("a.b c*>/"), "a_b_c___");
        assert_eq!(subject("a.b"), "veil-bench.a_b");
    }

    #[test]
    fn the_consumer_redelivers_after_the_visibility_timeout() {
        let config = consumer_config(30);
        assert_eq!(config.ack_wait, Duration::from_secs(30));
        assert_eq!(config.ack_policy, AckPolicy::Explicit);
        assert_eq!(config.durable_name.as_deref(), Some(CONSUMER));
        // A zero visibility timeout would mean the server's default ack_wait (30 s), not "at once".
        assert_eq!(consumer_config(0).ack_wait, Duration::from_secs(1));
        let stream = stream_config("q");
        assert_eq!(stream.retention, RetentionPolicy::WorkQueue);
        assert_eq!(stream.storage, StorageType::File);
    }

    /// Against a live server (`bench/run` exercises this target for real):
    /// `VEIL_BENCH_NATS=nats://127.0.0.1:4232 cargo test -p veil-bench -- --ignored nats`.
    #[tokio::test]
    #[ignore = "needs a running nats-server -js; set VEIL_BENCH_NATS"]
    async fn nats_round_trip_and_redelivery() {
        let endpoint =
            std::env::var("VEIL_BENCH_NATS").unwrap_or_else(|_| "nats://127.0.0.1:4232".into());
        let target = NatsTarget::connect(&endpoint).await.expect("connect");
        crate::target::check_round_trip_and_redelivery(target).await;
    }
}
