//! The Redis streams peer: the queue a user builds on Redis when they want SQS-like semantics (docs/benchmarks.md).
//!
//! Mapping, one stream per queue with one consumer group:
//! - send = `XADD key * b <body>` (a batch is a pipeline of up to 10 XADDs, one round trip);
//! - receive = `XAUTOCLAIM` of entries idle longer than the visibility timeout (that *is* the visibility
//!   timeout: an entry delivered but not acknowledged becomes claimable again after `min-idle-time`; it is
//!   the queue's, set by `prepare`, see [`QueueState`]), then `XREADGROUP ... >` for new entries with
//!   `COUNT` and `BLOCK`;
//! - delete = `XACK` + `XDEL` in one pipeline (acknowledging alone would leave the body in the stream).
//!
//! Durability is the server's: `bench/run` starts redis-server with `appendonly yes` and `appendfsync always`,
//! so every write command is fsynced to the AOF before its reply, as Veil commits before it answers.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use bytes::Bytes;
use redis::aio::MultiplexedConnection;
use redis::streams::{
    StreamAutoClaimOptions, StreamAutoClaimReply, StreamId, StreamReadOptions, StreamReadReply,
};
use redis::{AsyncConnectionConfig, Client, Value};
use tokio::sync::OnceCell;

use crate::target::{Delivery, Target, TargetError, TargetResult};

const NAME: &str = "redis";
/// The one consumer group every consumer of a queue joins.
const GROUP: &str = "veil-bench";
/// The stream field that holds the message body.
const BODY_FIELD: &str = "b";
/// How often a consumer looks for entries whose visibility timeout has passed. `XREADGROUP BLOCK` wakes only
/// for *new* entries, never for pending ones that become idle long enough, so a Redis consumer re-runs its
/// `XAUTOCLAIM` periodically, as a real one would. Doing it before *every* read would add a round trip to
/// each receive; doing it this often (and again at once while it keeps finding full batches) bounds Redis's
/// redelivery lateness by this interval, not by the whole long-poll wait. Note that redis-server ends a
/// `BLOCK` only on its `hz` tick (10/s by default), so a slice can last up to 100 ms longer than asked: with
/// the default `hz 10`, redeliveries come 0–200 ms after their deadline.
const RECLAIM_POLL: Duration = Duration::from_millis(100);
/// At most this many `XAUTOCLAIM` calls per reclaim pass.
const MAX_CLAIM_CALLS: usize = 16;

/// What all clones share about one queue.
#[derive(Default)]
struct QueueState {
    /// Where the queue's `XAUTOCLAIM` scan continues. Always restarting at `0-0` would re-examine the same
    /// freshly claimed entries at the head of the pending list and never reach idle ones behind them.
    cursor: Option<String>,
    /// The visibility timeout `prepare` was given. In Redis it is not a property of a delivery but the
    /// `min-idle-time` of whoever reclaims: a delivery made with a 1 s timeout must not wait for a later
    /// receive's 30 s, so every receive of a queue reclaims with the queue's timeout (as a JetStream
    /// consumer's `ack_wait` is fixed). A receive's own timeout is used only for a queue not prepared here.
    visibility_s: Option<u32>,
}

/// Gives every clone (every producer or consumer task) its own consumer name within the group.
static NEXT_CONSUMER: AtomicU64 = AtomicU64::new(0);

/// A Redis streams target. Each clone opens its own connection on first use: a blocked `XREADGROUP`
/// stalls every later command on the same connection, so a multiplexed connection must not be shared
/// between a long-polling consumer and anyone else.
pub struct RedisTarget {
    client: Client,
    conn: OnceCell<MultiplexedConnection>,
    consumer: String,
    /// When this consumer next runs `XAUTOCLAIM`.
    reclaim_due: Mutex<Instant>,
    /// Per queue: the reclaim scan's cursor and the visibility timeout, shared by all clones.
    queues: Arc<Mutex<HashMap<String, QueueState>>>,
}

impl Clone for RedisTarget {
    fn clone(&self) -> Self {
        Self {
            client: self.client.clone(),
            conn: OnceCell::new(),
            consumer: next_consumer_name(),
            reclaim_due: Mutex::new(Instant::now()),
            queues: Arc::clone(&self.queues),
        }
    }
}

/// A poisoned lock only means another task panicked mid-update of a cursor or a deadline; either value is
/// still usable.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

fn next_consumer_name() -> String {
    format!(
        "c{}-{}",
        std::process::id(),
        NEXT_CONSUMER.fetch_add(1, Ordering::Relaxed)
    )
}

fn failed(message: String) -> TargetError {
    TargetError::Failed {
        target: NAME,
        message,
    }
}

fn stream_key(queue: &str) -> String {
    format!("veil-bench:{queue}")
}

impl RedisTarget {
    /// Connects to `endpoint` (`redis://127.0.0.1:6379`) and checks that the server answers.
    pub async fn connect(endpoint: &str) -> TargetResult<Self> {
        let client = Client::open(endpoint)
            .map_err(|e| failed(format!("invalid endpoint {endpoint}: {e}")))?;
        let target = Self {
            client,
            conn: OnceCell::new(),
            consumer: next_consumer_name(),
            reclaim_due: Mutex::new(Instant::now()),
            queues: Arc::new(Mutex::new(HashMap::new())),
        };
        let mut conn = target.conn().await?;
        let _: Value = redis::cmd("PING")
            .query_async(&mut conn)
            .await
            .map_err(|e| failed(format!("PING {endpoint}: {e}")))?;
        Ok(target)
    }

    /// This clone's connection, opened on first use. No response timeout: a blocking read legitimately
    /// waits for the whole long-poll wait.
    async fn conn(&self) -> TargetResult<MultiplexedConnection> {
        let conn = self
            .conn
            .get_or_try_init(|| async {
                let config = AsyncConnectionConfig::new().set_response_timeout(None);
                self.client
                    .get_multiplexed_async_connection_with_config(&config)
                    .await
                    .map_err(|e| failed(format!("connect: {e}")))
            })
            .await?;
        Ok(conn.clone())
    }

    /// Claims up to `max` entries of `key` idle for at least `visibility_ms`. `XAUTOCLAIM` examines at most
    /// ten times `COUNT` pending entries per call, so one pass continues the queue's scan from where the last
    /// one stopped until it claims something or wraps around the pending list (bounded by
    /// `MAX_CLAIM_CALLS`, so a huge pending list costs a few calls per pass, not one per entry).
    async fn reclaim(
        &self,
        conn: &mut MultiplexedConnection,
        queue: &str,
        key: &str,
        max: usize,
        visibility_ms: u64,
    ) -> TargetResult<Vec<Delivery>> {
        let mut claimed = Vec::new();
        for _ in 0..MAX_CLAIM_CALLS {
            let start = self.cursor(queue);
            let reply: StreamAutoClaimReply = redis::cmd("XAUTOCLAIM")
                .arg(key)
                .arg(GROUP)
                .arg(&self.consumer)
                .arg(visibility_ms)
                .arg(&start)
                .arg(StreamAutoClaimOptions::default().count(max))
                .query_async(conn)
                .await
                .map_err(|e| failed(format!("XAUTOCLAIM {key} from {start}: {e}")))?;
            let wrapped = reply.next_stream_id == "0-0";
            lock(&self.queues)
                .entry(queue.to_owned())
                .or_default()
                .cursor = Some(reply.next_stream_id);
            claimed = reply.claimed;
            if !claimed.is_empty() || wrapped {
                break;
            }
        }
        // A full batch suggests a backlog of expired deliveries: look again on the next receive.
        let now = Instant::now();
        *lock(&self.reclaim_due) = if claimed.len() >= max {
            now
        } else {
            now + RECLAIM_POLL
        };
        claimed.into_iter().map(delivery).collect()
    }

    fn cursor(&self, queue: &str) -> String {
        lock(&self.queues)
            .get(queue)
            .and_then(|q| q.cursor.clone())
            .unwrap_or_else(|| "0-0".to_owned())
    }

    /// The queue's visibility timeout in ms: the one `prepare` was given, else this receive's.
    fn visibility_ms(&self, queue: &str, receive_visibility_s: u32) -> u64 {
        let visibility_s = lock(&self.queues)
            .get(queue)
            .and_then(|q| q.visibility_s)
            .unwrap_or(receive_visibility_s);
        u64::from(visibility_s) * 1000
    }
}

/// Turns a stream entry into a delivery; its id is the handle that `delete` acknowledges.
fn delivery(entry: StreamId) -> TargetResult<Delivery> {
    let body = match entry.map.get(BODY_FIELD) {
        Some(Value::BulkString(bytes)) => Bytes::copy_from_slice(bytes),
        Some(other) => {
            return Err(failed(format!(
                "entry {}: field {BODY_FIELD} is {other:?}",
                entry.id
            )))
        }
        None => {
            return Err(failed(format!(
                "entry {} has no field {BODY_FIELD}",
                entry.id
            )))
        }
    };
    Ok(Delivery {
        body,
        handle: entry.id,
    })
}

/// The `BLOCK` argument for one slice of a wait, up to the next reclaim: at least 1 ms, because `BLOCK 0`
/// means "forever".
fn block_ms(remaining: Duration, until_reclaim: Duration) -> usize {
    remaining.min(until_reclaim).as_millis().max(1) as usize
}

impl Target for RedisTarget {
    fn name(&self) -> &'static str {
        NAME
    }

    async fn prepare(&self, queue: &str, visibility_s: u32) -> TargetResult<()> {
        let key = stream_key(queue);
        let mut conn = self.conn().await?;
        let _: Value = redis::pipe()
            .atomic()
            .del(&key)
            .ignore()
            .cmd("XGROUP")
            .arg("CREATE")
            .arg(&key)
            .arg(GROUP)
            .arg("0")
            .arg("MKSTREAM")
            .ignore()
            .query_async(&mut conn)
            .await
            .map_err(|e| failed(format!("DEL + XGROUP CREATE {key}: {e}")))?;
        lock(&self.queues).insert(
            queue.to_owned(),
            QueueState {
                cursor: None,
                visibility_s: Some(visibility_s),
            },
        );
        Ok(())
    }

    async fn send(&self, queue: &str, bodies: Vec<Bytes>) -> TargetResult<()> {
        let key = stream_key(queue);
        let mut conn = self.conn().await?;
        let mut pipe = redis::pipe();
        for body in &bodies {
            pipe.cmd("XADD")
                .arg(&key)
                .arg("*")
                .arg(BODY_FIELD)
                .arg(body.as_ref());
        }
        let ids: Vec<Option<String>> = pipe
            .query_async(&mut conn)
            .await
            .map_err(|e| failed(format!("XADD x{} to {key}: {e}", bodies.len())))?;
        if ids.len() != bodies.len() || ids.iter().any(Option::is_none) {
            return Err(failed(format!(
                "XADD x{} to {key} answered {ids:?}",
                bodies.len()
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
        let key = stream_key(queue);
        let max = max.max(1);
        let visibility_ms = self.visibility_ms(queue, visibility_s);
        let deadline = Instant::now() + Duration::from_secs(u64::from(wait_s));
        let mut conn = self.conn().await?;
        loop {
            // Redeliveries first, as an SQS queue would hand out a message whose visibility expired.
            let due = *lock(&self.reclaim_due);
            let mut out = if Instant::now() >= due {
                self.reclaim(&mut conn, queue, &key, max, visibility_ms)
                    .await?
            } else {
                Vec::new()
            };
            if !out.is_empty() {
                return Ok(out);
            }
            let now = Instant::now();
            let remaining = deadline.saturating_duration_since(now);
            let until_reclaim = lock(&self.reclaim_due).saturating_duration_since(now);
            let mut options = StreamReadOptions::default()
                .group(GROUP, &self.consumer)
                .count(max);
            if !remaining.is_zero() {
                options = options.block(block_ms(remaining, until_reclaim));
            }
            let reply: Option<StreamReadReply> = redis::cmd("XREADGROUP")
                .arg(&options)
                .arg("STREAMS")
                .arg(&key)
                .arg(">")
                .query_async(&mut conn)
                .await
                .map_err(|e| failed(format!("XREADGROUP {key}: {e}")))?;
            for stream in reply.map(|r| r.keys).unwrap_or_default() {
                for entry in stream.ids {
                    out.push(delivery(entry)?);
                }
            }
            if !out.is_empty() || Instant::now() >= deadline {
                return Ok(out);
            }
        }
    }

    async fn delete(&self, queue: &str, handles: Vec<String>) -> TargetResult<()> {
        if handles.is_empty() {
            return Ok(());
        }
        let key = stream_key(queue);
        let mut conn = self.conn().await?;
        // XACK settles the delivery in the group; XDEL drops the body, as deleting an SQS message does.
        // Fewer settled than asked is not an error: like an SQS receipt of an already deleted message, a
        // stale handle (the entry was reclaimed and deleted by another consumer) settles nothing.
        let _: () = redis::pipe()
            .cmd("XACK")
            .arg(&key)
            .arg(GROUP)
            .arg(&handles)
            .cmd("XDEL")
            .arg(&key)
            .arg(&handles)
            .query_async(&mut conn)
            .await
            .map_err(|e| failed(format!("XACK + XDEL x{} on {key}: {e}", handles.len())))?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn block_never_means_forever() {
        assert_eq!(block_ms(Duration::from_micros(10), RECLAIM_POLL), 1);
        assert_eq!(block_ms(Duration::from_secs(20), Duration::ZERO), 1);
        assert_eq!(block_ms(Duration::from_millis(40), RECLAIM_POLL), 40);
        assert_eq!(block_ms(Duration::from_secs(20), RECLAIM_POLL), 100);
    }

    #[test]
    fn consumer_names_are_unique() {
        let a = next_consumer_name();
        let b = next_consumer_name();
        assert_ne!(a, b);
    }

    #[test]
    fn delivery_takes_the_body_field_and_the_id() {
        let mut map = HashMap::new();
        map.insert(BODY_FIELD.to_owned(), Value::BulkString(b"hello".to_vec()));
        let entry = StreamId {
            id: "1-0".to_owned(),
            map,
            ..Default::default()
        };
        let d = delivery(entry).expect("a body");
        assert_eq!(d.body, Bytes::from_static(b"hello"));
        assert_eq!(d.handle, "1-0");
        assert!(delivery(StreamId {
            id: "2-0".to_owned(),
            ..Default::default()
        })
        .is_err());
    }

    /// Against a live server (`bench/run` exercises this target for real):
    /// `VEIL_BENCH_REDIS=redis://127.0.0.1:6390 cargo test -p veil-bench -- --ignored redis`.
    #[tokio::test]
    #[ignore = "needs a running redis-server; set VEIL_BENCH_REDIS"]
    async fn redis_round_trip_and_redelivery() {
        let endpoint =
            std::env::var("VEIL_BENCH_REDIS").unwrap_or_else(|_| "redis://127.0.0.1:6390".into());
        let target = RedisTarget::connect(&endpoint).await.expect("connect");
        crate::target::check_round_trip_and_redelivery(target).await;
    }
}
