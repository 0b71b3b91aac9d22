//! The RabbitMQ peer (docs/benchmarks.md): the broker a user reaches for when they want a durable work queue without
//! SQS, driven over AMQP 0.9.1 with semantics as close to Veil's receive / delete as a broker gets.
//!
//! Mapping, one durable quorum queue (`x-queue-type: quorum`) per queue:
//! - send = `basic.publish` of each body to the default exchange on a channel in confirm mode, then await
//!   every publisher confirm: a send succeeds only when the broker has confirmed all of it (a batch
//!   publishes all, then awaits all confirms, one round trip);
//! - receive = take deliveries from this task's `basic.consume` stream (manual acks, `basic.qos` prefetch):
//!   AMQP pushes, so "receive up to N, waiting up to W" waits up to W for the first delivery the broker
//!   pushed and then takes what else arrives within a 5 ms window, up to N;
//! - delete = `basic.ack` of each delivery tag. AMQP acks have no reply, so delete completes when the acks
//!   are written to the connection, as a plain NATS ack would (not a confirmed settlement like SQS's);
//! - the visibility timeout has no broker-side counterpart (an unacked delivery stays with its consumer
//!   until the channel closes), so each consumer returns deliveries it has held longer than the queue's
//!   visibility timeout with `basic.nack` + requeue, checked whenever it receives — what an application that
//!   wants SQS-like redelivery has to do itself.
//!
//! Durability: a quorum queue appends every message to its Raft log and fsyncs that log on a majority of its
//! members (here the one node) before the publisher confirm goes out, so a confirmed message survives a
//! crash of the machine, as Veil's acknowledged send does.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures_util::future::try_join_all;
use futures_util::StreamExt;
use lapin::options::{
    BasicAckOptions, BasicConsumeOptions, BasicNackOptions, BasicPublishOptions, BasicQosOptions,
    ConfirmSelectOptions, QueueDeclareOptions, QueuePurgeOptions,
};
use lapin::types::{AMQPValue, FieldTable};
use lapin::{BasicProperties, Channel, Confirmation, Connection, ConnectionProperties, Consumer};
use tokio::sync::{Mutex, OnceCell};

use crate::target::{Delivery, Target, TargetError, TargetResult};

const NAME: &str = "rabbitmq";
/// Prefetch (`basic.qos`) of a consumer, in multiples of its receive size: room for the batch being held
/// for deletion plus the next one arriving meanwhile, so the broker is not idle during every delete.
const PREFETCH_BATCHES: u16 = 2;
/// How long a receive goes on taking deliveries after the first, up to its maximum.
const GATHER_WINDOW: Duration = Duration::from_millis(5);
/// AMQP delivery mode of a persistent message (quorum queues persist every message anyway).
const PERSISTENT: u8 = 2;

/// Gives each clone's consumer a distinct tag, for the broker's management views.
static NEXT_CONSUMER: AtomicU64 = AtomicU64::new(0);

fn failed(message: String) -> TargetError {
    TargetError::Failed {
        target: NAME,
        message,
    }
}

/// One consumer of one queue, with the deliveries it holds unacknowledged: tag → when it was taken.
struct Subscription {
    queue: String,
    consumer: Consumer,
    held: HashMap<u64, Instant>,
    visibility: Duration,
}

/// One connection with one channel in confirm mode, used for publishing, consuming and acking alike.
struct Conn {
    /// Kept so the connection lives as long as the channel that runs over it.
    _connection: Connection,
    channel: Channel,
}

/// A RabbitMQ target. Each clone (each producer or consumer task) opens its own connection and channel on
/// first use: delivery tags are per channel, so a consumer must ack on the channel that delivered.
pub struct RabbitmqTarget {
    endpoint: String,
    conn: OnceCell<Conn>,
    /// This clone's consumer; one at a time (the workloads drive one queue per task).
    subscription: Mutex<Option<Subscription>>,
    /// The visibility timeout `prepare` set per queue, shared by all clones as the Redis peer's is.
    visibility: std::sync::Arc<std::sync::Mutex<HashMap<String, u32>>>,
}

impl Clone for RabbitmqTarget {
    fn clone(&self) -> Self {
        Self {
            endpoint: self.endpoint.clone(),
            conn: OnceCell::new(),
            subscription: Mutex::new(None),
            visibility: std::sync::Arc::clone(&self.visibility),
        }
    }
}

impl RabbitmqTarget {
    /// Connects to `endpoint` (`amqp://127.0.0.1:5672/%2f`); the first connection proves the broker answers.
    pub async fn connect(endpoint: &str) -> TargetResult<Self> {
        let target = Self {
            endpoint: endpoint.to_owned(),
            conn: OnceCell::new(),
            subscription: Mutex::new(None),
            visibility: Default::default(),
        };
        target.conn().await?;
        Ok(target)
    }

    async fn conn(&self) -> TargetResult<&Conn> {
        self.conn
            .get_or_try_init(|| async {
                let connection =
                    Connection::connect(&self.endpoint, ConnectionProperties::default())
                        .await
                        .map_err(|e| failed(format!("connect {}: {e}", self.endpoint)))?;
                let channel = connection
                    .create_channel()
                    .await
                    .map_err(|e| failed(format!("open a channel: {e}")))?;
                channel
                    .confirm_select(ConfirmSelectOptions::default())
                    .await
                    .map_err(|e| failed(format!("confirm.select: {e}")))?;
                Ok(Conn {
                    _connection: connection,
                    channel,
                })
            })
            .await
    }

    fn queue_visibility(&self, queue: &str, receive_visibility_s: u32) -> Duration {
        let visibility_s = self
            .visibility
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(queue)
            .copied()
            .unwrap_or(receive_visibility_s);
        Duration::from_secs(u64::from(visibility_s))
    }

    /// Starts this clone's consumer on `queue` (replacing one on another queue) with a prefetch of
    /// [`PREFETCH_BATCHES`] receives of `max`.
    async fn subscribe(
        &self,
        slot: &mut Option<Subscription>,
        queue: &str,
        max: usize,
        visibility: Duration,
    ) -> TargetResult<()> {
        if slot.as_ref().is_some_and(|s| s.queue == queue) {
            return Ok(());
        }
        let channel = &self.conn().await?.channel;
        let prefetch = u16::try_from(max)
            .unwrap_or(u16::MAX)
            .saturating_mul(PREFETCH_BATCHES);
        channel
            .basic_qos(prefetch, BasicQosOptions::default())
            .await
            .map_err(|e| failed(format!("basic.qos {prefetch}: {e}")))?;
        let tag = format!(
            "veil-bench-{}-{}",
            std::process::id(),
            NEXT_CONSUMER.fetch_add(1, Ordering::Relaxed)
        );
        let consumer = channel
            .basic_consume(
                queue.into(),
                tag.as_str().into(),
                BasicConsumeOptions::default(),
                FieldTable::default(),
            )
            .await
            .map_err(|e| failed(format!("basic.consume {queue}: {e}")))?;
        *slot = Some(Subscription {
            queue: queue.to_owned(),
            consumer,
            held: HashMap::new(),
            visibility,
        });
        Ok(())
    }
}

/// Requeues the deliveries `subscription` has held past the visibility timeout; returns when the next one
/// falls due, if any is held. Deliveries are taken in tag order, so the expired ones are exactly the held
/// tags up to the newest expired one, and every other tag below it is settled: one `basic.nack` with
/// `multiple` returns them all at once (and not the deliveries prefetched but not yet taken, whose tags
/// are higher).
async fn requeue_expired(
    channel: &Channel,
    subscription: &mut Subscription,
) -> TargetResult<Option<Instant>> {
    let now = Instant::now();
    let visibility = subscription.visibility;
    let newest_expired = subscription
        .held
        .iter()
        .filter(|(_, taken)| now.duration_since(**taken) >= visibility)
        .map(|(tag, _)| *tag)
        .max();
    if let Some(newest) = newest_expired {
        subscription.held.retain(|tag, _| *tag > newest);
        let options = BasicNackOptions {
            multiple: true,
            requeue: true,
        };
        channel
            .basic_nack(newest, options)
            .await
            .map_err(|e| failed(format!("basic.nack up to {newest} (requeue): {e}")))?;
    }
    Ok(subscription
        .held
        .values()
        .min()
        .map(|taken| *taken + visibility))
}

fn delivery(
    subscription: &mut Subscription,
    item: Option<lapin::Result<lapin::message::Delivery>>,
) -> TargetResult<Delivery> {
    let delivery = item
        .ok_or_else(|| failed(format!("consumer of {} was cancelled", subscription.queue)))?
        .map_err(|e| failed(format!("delivery from {}: {e}", subscription.queue)))?;
    subscription
        .held
        .insert(delivery.delivery_tag, Instant::now());
    Ok(Delivery {
        body: Bytes::from(delivery.data),
        handle: delivery.delivery_tag.to_string(),
    })
}

impl Target for RabbitmqTarget {
    fn name(&self) -> &'static str {
        NAME
    }

    /// Declares the durable quorum queue (idempotent) and purges it, so a reused name starts empty.
    async fn prepare(&self, queue: &str, visibility_s: u32) -> TargetResult<()> {
        let channel = &self.conn().await?.channel;
        let mut arguments = FieldTable::default();
        arguments.insert(
            "x-queue-type".into(),
            AMQPValue::LongString("quorum".into()),
        );
        let options = QueueDeclareOptions {
            durable: true,
            ..QueueDeclareOptions::default()
        };
        channel
            .queue_declare(queue.into(), options, arguments)
            .await
            .map_err(|e| failed(format!("queue.declare {queue} (quorum): {e}")))?;
        channel
            .queue_purge(queue.into(), QueuePurgeOptions::default())
            .await
            .map_err(|e| failed(format!("queue.purge {queue}: {e}")))?;
        self.visibility
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(queue.to_owned(), visibility_s);
        Ok(())
    }

    async fn send(&self, queue: &str, bodies: Vec<Bytes>) -> TargetResult<()> {
        let channel = &self.conn().await?.channel;
        let mut confirms = Vec::with_capacity(bodies.len());
        for body in &bodies {
            let confirm = channel
                .basic_publish(
                    "".into(),
                    queue.into(),
                    BasicPublishOptions::default(),
                    body,
                    BasicProperties::default().with_delivery_mode(PERSISTENT),
                )
                .await
                .map_err(|e| failed(format!("basic.publish to {queue}: {e}")))?;
            confirms.push(confirm);
        }
        let outcomes = try_join_all(confirms)
            .await
            .map_err(|e| failed(format!("publisher confirm from {queue}: {e}")))?;
        for outcome in outcomes {
            match outcome {
                Confirmation::Ack(None) => {}
                Confirmation::Ack(Some(_)) => {
                    return Err(failed(format!("{queue}: message returned as unroutable")))
                }
                Confirmation::Nack(_) => {
                    return Err(failed(format!("{queue}: the broker nacked a publish")))
                }
                Confirmation::NotRequested => {
                    return Err(failed(format!("{queue}: publish not in confirm mode")))
                }
            }
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
        let max = max.max(1);
        let deadline = Instant::now() + Duration::from_secs(u64::from(wait_s));
        let visibility = self.queue_visibility(queue, visibility_s);
        let mut slot = self.subscription.lock().await;
        self.subscribe(&mut slot, queue, max, visibility).await?;
        let channel = &self.conn().await?.channel;
        let Some(subscription) = slot.as_mut() else {
            return Err(failed(format!("no consumer on {queue}")));
        };
        let mut out = Vec::new();
        // Wait for the first delivery, waking to requeue held deliveries as they expire.
        loop {
            let next_expiry = requeue_expired(channel, subscription).await?;
            let wake = next_expiry.map_or(deadline, |due| due.min(deadline));
            let next = tokio::time::timeout_at(wake.into(), subscription.consumer.next()).await;
            match next {
                Ok(item) => {
                    out.push(delivery(subscription, item)?);
                    break;
                }
                Err(_) if Instant::now() >= deadline => return Ok(out),
                Err(_) => {}
            }
        }
        // Then what else the broker pushes within a short window: it sends a batch's deliveries one frame
        // each, so they trickle in over some hundreds of microseconds rather than arriving as one. Were the
        // receive cancelled meanwhile, what it took stays held and is requeued at its visibility timeout, as
        // the messages of an SQS receive whose reply was lost come back.
        let gather_until = Instant::now() + GATHER_WINDOW;
        while out.len() < max {
            match tokio::time::timeout_at(gather_until.into(), subscription.consumer.next()).await {
                Ok(item) => out.push(delivery(subscription, item)?),
                Err(_) => break,
            }
        }
        Ok(out)
    }

    async fn delete(&self, _queue: &str, handles: Vec<String>) -> TargetResult<()> {
        let channel = &self.conn().await?.channel;
        let mut slot = self.subscription.lock().await;
        for handle in handles {
            let tag: u64 = handle
                .parse()
                .map_err(|_| failed(format!("delivery tag {handle:?} is not a number")))?;
            // A delivery already requeued as expired is no longer ours: acking its tag again would close
            // the channel (PRECONDITION_FAILED), so it is skipped, as a stale SQS receipt settles nothing.
            let held = slot.as_mut().is_some_and(|s| s.held.remove(&tag).is_some());
            if !held {
                continue;
            }
            channel
                .basic_ack(tag, BasicAckOptions::default())
                .await
                .map_err(|e| failed(format!("basic.ack {tag}: {e}")))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Against a live broker (`bench/run` starts one and exercises this target for real):
    /// `VEIL_BENCH_RABBITMQ=amqp://127.0.0.1:5682/%2f cargo test -p veil-bench -- --ignored rabbitmq`.
    #[tokio::test]
    #[ignore = "needs a running rabbitmq-server; set VEIL_BENCH_RABBITMQ"]
    async fn rabbitmq_round_trip_and_redelivery() {
        let endpoint = std::env::var("VEIL_BENCH_RABBITMQ")
            .unwrap_or_else(|_| "amqp://127.0.0.1:5682/%2f".into());
        let target = RabbitmqTarget::connect(&endpoint).await.expect("connect");
        crate::target::check_round_trip_and_redelivery(target).await;
    }
}
