//! `SqsTarget`: the Amazon SQS JSON 1.0 protocol over veil-bench's own HTTP client (hyper 1 with hyper-util's
//! pooled keep-alive client), used for Veil, for moto and for the no-op server. It is deliberately not the AWS
//! SDK: the SDK's signing, retries and deserialisation would make the client the bottleneck. A queue prepared
//! with [`SqsTarget::prepare_fifo`] is a FIFO queue: each sent message gets a group (round-robin over the
//! queue's groups) and a deduplication id taken from veil-bench's body header, so that every message is unique.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::header::{HeaderValue, AUTHORIZATION, CONTENT_TYPE, HOST};
use hyper::{Method, Request, Uri};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use serde::{Deserialize, Serialize};

use super::sigv4;
use crate::run::body::decode_body;
use crate::target::{Delivery, Target, TargetError, TargetResult};

const CONTENT_TYPE_VALUE: &str = "application/x-amz-json-1.0";
/// Time allowed beyond a request's long-poll wait before it counts as failed (a hung server must not hang
/// the benchmark).
const REQUEST_SLACK: Duration = Duration::from_secs(10);

type HttpClient = Client<HttpConnector, Full<Bytes>>;

/// An SQS endpoint, or several serving the same queues (the nodes of a Veil cluster). Clones share the
/// connection pool and the queue-URL cache; with several endpoints each clone — each producer or consumer
/// task of a run — sends all its requests to the next endpoint round-robin, so the clients are spread evenly
/// over the nodes as behind a load balancer that balances connections.
pub struct SqsTarget {
    client: HttpClient,
    endpoints: Arc<[Endpoint]>,
    /// Which of `endpoints` this clone talks to.
    index: usize,
    /// The round-robin counter the clones take their endpoint from.
    next: Arc<AtomicUsize>,
    name: &'static str,
    /// Queue name → QueueUrl (and FIFO groups), filled by `prepare` and `prepare_fifo` (CreateQueue).
    urls: Arc<RwLock<HashMap<String, PreparedQueue>>>,
}

/// One SQS endpoint: where requests go and the Host header they carry (which SigV4 signs).
struct Endpoint {
    uri: Uri,
    host: HeaderValue,
}

impl Clone for SqsTarget {
    fn clone(&self) -> Self {
        Self {
            client: self.client.clone(),
            endpoints: Arc::clone(&self.endpoints),
            index: self.next.fetch_add(1, Ordering::Relaxed) % self.endpoints.len(),
            next: Arc::clone(&self.next),
            name: self.name,
            urls: Arc::clone(&self.urls),
        }
    }
}

/// Parses one `http://HOST:PORT` endpoint.
fn parse_endpoint(endpoint: &str) -> TargetResult<Endpoint> {
    let uri: Uri = endpoint
        .parse()
        .map_err(|error| fail("sqs", format!("bad endpoint {endpoint:?}: {error}")))?;
    let authority = uri
        .authority()
        .ok_or_else(|| fail("sqs", format!("endpoint {endpoint:?} has no host:port")))?
        .clone();
    if uri.scheme_str() != Some("http") {
        return Err(fail(
            "sqs",
            format!("endpoint {endpoint:?}: only http:// is supported"),
        ));
    }
    let host = HeaderValue::from_str(authority.as_str())
        .map_err(|error| fail("sqs", format!("bad host in {endpoint:?}: {error}")))?;
    let uri = Uri::builder()
        .scheme("http")
        .authority(authority)
        .path_and_query("/")
        .build()
        .map_err(|error| fail("sqs", format!("bad endpoint {endpoint:?}: {error}")))?;
    Ok(Endpoint { uri, host })
}

/// A queue `prepare` created: its URL and, for a FIFO queue, how sends pick their groups.
#[derive(Clone)]
struct PreparedQueue {
    url: Arc<str>,
    fifo: Option<Arc<FifoGroups>>,
}

/// The groups of a FIFO queue: messages go to them round-robin, in the order producers take them.
struct FifoGroups {
    groups: u64,
    next: AtomicU64,
}

impl FifoGroups {
    /// MessageGroupId and MessageDeduplicationId of the next `count` bodies. The deduplication id is the
    /// body's run, producer and sequence number (unique per message, the same for a retried send); a body
    /// that is not veil-bench's gets the group counter instead.
    fn ids(&self, bodies: &[Bytes]) -> Vec<FifoIds> {
        let first = self.next.fetch_add(bodies.len() as u64, Ordering::Relaxed);
        bodies
            .iter()
            .zip(first..)
            .map(|(body, n)| FifoIds {
                group: format!("g{}", n % self.groups),
                dedup: decode_body(body).map_or_else(
                    || format!("n{n}"),
                    |id| format!("{:08x}-{:04x}-{:x}", id.run, id.producer, id.seq),
                ),
            })
            .collect()
    }
}

struct FifoIds {
    group: String,
    dedup: String,
}

#[derive(Serialize)]
#[serde(rename_all = "PascalCase")]
struct CreateQueue<'a> {
    queue_name: &'a str,
    attributes: HashMap<&'static str, String>,
}

#[derive(Serialize)]
#[serde(rename_all = "PascalCase")]
struct SendMessage<'a> {
    queue_url: &'a str,
    message_body: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    message_group_id: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    message_deduplication_id: Option<&'a str>,
}

#[derive(Serialize)]
#[serde(rename_all = "PascalCase")]
struct SendMessageBatch<'a> {
    queue_url: &'a str,
    entries: Vec<SendEntry<'a>>,
}

#[derive(Serialize)]
#[serde(rename_all = "PascalCase")]
struct SendEntry<'a> {
    id: String,
    message_body: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    message_group_id: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    message_deduplication_id: Option<&'a str>,
}

#[derive(Serialize)]
#[serde(rename_all = "PascalCase")]
struct ReceiveMessage<'a> {
    queue_url: &'a str,
    max_number_of_messages: usize,
    visibility_timeout: u32,
    wait_time_seconds: u32,
}

#[derive(Serialize)]
#[serde(rename_all = "PascalCase")]
struct DeleteMessage<'a> {
    queue_url: &'a str,
    receipt_handle: &'a str,
}

#[derive(Serialize)]
#[serde(rename_all = "PascalCase")]
struct DeleteMessageBatch<'a> {
    queue_url: &'a str,
    entries: Vec<DeleteEntry<'a>>,
}

#[derive(Serialize)]
#[serde(rename_all = "PascalCase")]
struct DeleteEntry<'a> {
    id: String,
    receipt_handle: &'a str,
}

#[derive(Serialize)]
#[serde(rename_all = "PascalCase")]
struct QueueOnly<'a> {
    queue_url: &'a str,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct QueueUrlReply {
    queue_url: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct SendReply {
    #[allow(dead_code)] // parsed so that a reply without it is an error
    message_id: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct BatchReply {
    #[serde(default)]
    successful: Vec<serde_json::Value>,
    #[serde(default)]
    failed: Vec<BatchFailure>,
}

#[derive(Deserialize, Debug)]
#[serde(rename_all = "PascalCase")]
struct BatchFailure {
    #[serde(default)]
    id: String,
    #[serde(default)]
    code: String,
    #[serde(default)]
    message: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct ReceiveReply {
    #[serde(default)]
    messages: Vec<ReceivedMessage>,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct ReceivedMessage {
    body: String,
    receipt_handle: String,
}

#[derive(Deserialize)]
struct ErrorReply {
    #[serde(rename = "__type", default)]
    kind: String,
    #[serde(default, alias = "Message")]
    message: String,
}

impl SqsTarget {
    /// A client for the SQS endpoint at `endpoint` (e.g. `http://127.0.0.1:9324`), or for several given as a
    /// comma-separated list (`http://127.0.0.1:9324,http://127.0.0.1:9334`; see [`SqsTarget`]). Nothing is
    /// sent until the first request; connections are opened on demand and kept alive in the pool.
    pub async fn connect(endpoint: &str) -> TargetResult<Self> {
        let endpoints = endpoint
            .split(',')
            .map(|one| parse_endpoint(one.trim()))
            .collect::<TargetResult<Vec<_>>>()?;
        let mut connector = HttpConnector::new();
        // Small request/response pairs: Nagle's algorithm would add tens of milliseconds to each.
        connector.set_nodelay(true);
        let client = Client::builder(TokioExecutor::new())
            .pool_idle_timeout(Duration::from_secs(90))
            .pool_max_idle_per_host(usize::MAX)
            .build(connector);
        Ok(Self {
            client,
            endpoints: endpoints.into(),
            index: 0,
            next: Arc::new(AtomicUsize::new(1)),
            name: "sqs",
            urls: Arc::new(RwLock::new(HashMap::new())),
        })
    }

    /// The same client reporting under another name ("veil", "moto", "noop").
    pub fn named(mut self, name: &'static str) -> Self {
        self.name = name;
        self
    }

    /// One request that proves the server answers (ListQueues); used to time start-up.
    pub async fn ping(&self) -> TargetResult<()> {
        self.call("ListQueues", b"{}".to_vec(), Duration::from_secs(5))
            .await
            .map(|_| ())
    }

    fn prepared(&self, queue: &str) -> TargetResult<PreparedQueue> {
        let urls = self
            .urls
            .read()
            .map_err(|_| fail(self.name, "queue-URL cache poisoned".into()))?;
        urls.get(queue)
            .cloned()
            .ok_or_else(|| fail(self.name, format!("queue {queue:?} was not prepared")))
    }

    pub(crate) fn queue_url(&self, queue: &str) -> TargetResult<Arc<str>> {
        self.prepared(queue).map(|prepared| prepared.url)
    }

    /// CreateQueue (idempotent) with `attributes`; remembers the URL (and the FIFO groups) for later requests.
    async fn create(
        &self,
        queue: &str,
        attributes: HashMap<&'static str, String>,
        fifo: Option<Arc<FifoGroups>>,
    ) -> TargetResult<()> {
        let request = CreateQueue {
            queue_name: queue,
            attributes,
        };
        let body = self
            .call("CreateQueue", to_json(self.name, &request)?, REQUEST_SLACK)
            .await?;
        let reply: QueueUrlReply = self.parse("CreateQueue", &body)?;
        let prepared = PreparedQueue {
            url: Arc::from(reply.queue_url),
            fifo,
        };
        self.urls
            .write()
            .map_err(|_| fail(self.name, "queue-URL cache poisoned".into()))?
            .insert(queue.to_owned(), prepared);
        Ok(())
    }

    /// Creates the FIFO queue `queue` (its name must end in `.fifo`) with `groups` message groups: later sends
    /// spread their messages over the groups round-robin, each with a unique deduplication id.
    pub async fn prepare_fifo(
        &self,
        queue: &str,
        visibility_s: u32,
        groups: u32,
    ) -> TargetResult<()> {
        if groups == 0 {
            return Err(fail(
                self.name,
                format!("FIFO queue {queue:?} needs at least one group"),
            ));
        }
        let attributes = HashMap::from([
            ("VisibilityTimeout", visibility_s.to_string()),
            ("FifoQueue", "true".to_owned()),
        ]);
        let fifo = FifoGroups {
            groups: u64::from(groups),
            next: AtomicU64::new(0),
        };
        self.create(queue, attributes, Some(Arc::new(fifo))).await
    }

    /// POSTs one action and returns the reply body of a 200, or the SQS error as a [`TargetError`].
    async fn call(&self, action: &str, body: Vec<u8>, timeout: Duration) -> TargetResult<Bytes> {
        let target = format!("AmazonSQS.{action}");
        let endpoint = &self.endpoints[self.index];
        // Signed as an SDK signs (Veil verifies SigV4 unless started with `--sqs-auth off`).
        let signature = sigv4::sign(
            endpoint.host.to_str().unwrap_or_default(),
            CONTENT_TYPE_VALUE,
            &target,
            &body,
        );
        let request = Request::builder()
            .method(Method::POST)
            .uri(endpoint.uri.clone())
            .header(HOST, endpoint.host.clone())
            .header("x-amz-target", target)
            .header(CONTENT_TYPE, CONTENT_TYPE_VALUE)
            .header("x-amz-date", signature.amz_date)
            .header(AUTHORIZATION, signature.authorization)
            .body(Full::new(Bytes::from(body)))
            .map_err(|error| {
                fail(
                    self.name,
                    format!("{action}: building the request: {error}"),
                )
            })?;
        let exchange = async {
            let response = self
                .client
                .request(request)
                .await
                .map_err(|error| fail(self.name, format!("{action}: {error}")))?;
            let status = response.status();
            let body = response
                .into_body()
                .collect()
                .await
                .map_err(|error| fail(self.name, format!("{action}: reading the reply: {error}")))?
                .to_bytes();
            Ok::<_, TargetError>((status, body))
        };
        let (status, body) = tokio::time::timeout(timeout, exchange)
            .await
            .map_err(|_| fail(self.name, format!("{action}: no reply within {timeout:?}")))??;
        if status.is_success() {
            return Ok(body);
        }
        let detail = match serde_json::from_slice::<ErrorReply>(&body) {
            Ok(error) => format!("{} {}", error.kind, error.message),
            Err(_) => String::from_utf8_lossy(&body[..body.len().min(200)]).into_owned(),
        };
        Err(fail(
            self.name,
            format!("{action}: HTTP {status}: {detail}"),
        ))
    }

    fn parse<T: for<'de> Deserialize<'de>>(&self, action: &str, body: &[u8]) -> TargetResult<T> {
        serde_json::from_slice(body)
            .map_err(|error| fail(self.name, format!("{action}: malformed reply: {error}")))
    }
}

fn fail(target: &'static str, message: String) -> TargetError {
    TargetError::Failed { target, message }
}

fn to_json<T: Serialize>(target: &'static str, value: &T) -> TargetResult<Vec<u8>> {
    serde_json::to_vec(value).map_err(|error| fail(target, format!("encoding a request: {error}")))
}

/// Bodies travel as JSON strings: veil-bench's bodies are ASCII, but anything else must be valid UTF-8.
fn as_str<'a>(target: &'static str, body: &'a Bytes) -> TargetResult<&'a str> {
    std::str::from_utf8(body).map_err(|_| fail(target, "message body is not UTF-8".into()))
}

fn check_batch(
    target: &'static str,
    action: &str,
    reply: BatchReply,
    expected: usize,
) -> TargetResult<()> {
    if let Some(first) = reply.failed.first() {
        return Err(fail(
            target,
            format!(
                "{action}: {} of {expected} entries failed (first: id {} {} {})",
                reply.failed.len(),
                first.id,
                first.code,
                first.message
            ),
        ));
    }
    if reply.successful.len() != expected {
        return Err(fail(
            target,
            format!(
                "{action}: {} successful entries for {expected} sent",
                reply.successful.len()
            ),
        ));
    }
    Ok(())
}

impl Target for SqsTarget {
    fn name(&self) -> &'static str {
        self.name
    }

    /// CreateQueue (idempotent) with the run's visibility timeout as the queue default; the suite uses a fresh
    /// queue name per run, so nothing needs purging (and SQS allows one purge per queue per minute).
    async fn prepare(&self, queue: &str, visibility_s: u32) -> TargetResult<()> {
        let attributes = HashMap::from([("VisibilityTimeout", visibility_s.to_string())]);
        self.create(queue, attributes, None).await
    }

    async fn send(&self, queue: &str, bodies: Vec<Bytes>) -> TargetResult<()> {
        let PreparedQueue { url, fifo } = self.prepared(queue)?;
        let ids = fifo.map(|fifo| fifo.ids(&bodies)).unwrap_or_default();
        let group = |index: usize| ids.get(index).map(|ids| ids.group.as_str());
        let dedup = |index: usize| ids.get(index).map(|ids| ids.dedup.as_str());
        match bodies.len() {
            0 => Ok(()),
            1 => {
                let request = SendMessage {
                    queue_url: &url,
                    message_body: as_str(self.name, &bodies[0])?,
                    message_group_id: group(0),
                    message_deduplication_id: dedup(0),
                };
                let body = self
                    .call("SendMessage", to_json(self.name, &request)?, REQUEST_SLACK)
                    .await?;
                let _: SendReply = self.parse("SendMessage", &body)?;
                Ok(())
            }
            count => {
                let entries = bodies
                    .iter()
                    .enumerate()
                    .map(|(index, body)| {
                        Ok(SendEntry {
                            id: index.to_string(),
                            message_body: as_str(self.name, body)?,
                            message_group_id: group(index),
                            message_deduplication_id: dedup(index),
                        })
                    })
                    .collect::<TargetResult<Vec<_>>>()?;
                let request = SendMessageBatch {
                    queue_url: &url,
                    entries,
                };
                let body = self
                    .call(
                        "SendMessageBatch",
                        to_json(self.name, &request)?,
                        REQUEST_SLACK,
                    )
                    .await?;
                let reply: BatchReply = self.parse("SendMessageBatch", &body)?;
                check_batch(self.name, "SendMessageBatch", reply, count)
            }
        }
    }

    async fn receive(
        &self,
        queue: &str,
        max: usize,
        visibility_s: u32,
        wait_s: u32,
    ) -> TargetResult<Vec<Delivery>> {
        let url = self.queue_url(queue)?;
        let request = ReceiveMessage {
            queue_url: &url,
            max_number_of_messages: max.clamp(1, 10),
            visibility_timeout: visibility_s,
            wait_time_seconds: wait_s,
        };
        let timeout = Duration::from_secs(u64::from(wait_s)) + REQUEST_SLACK;
        let body = self
            .call("ReceiveMessage", to_json(self.name, &request)?, timeout)
            .await?;
        let reply: ReceiveReply = self.parse("ReceiveMessage", &body)?;
        Ok(reply
            .messages
            .into_iter()
            .map(|message| Delivery {
                body: Bytes::from(message.body),
                handle: message.receipt_handle,
            })
            .collect())
    }

    async fn delete(&self, queue: &str, handles: Vec<String>) -> TargetResult<()> {
        let url = self.queue_url(queue)?;
        match handles.len() {
            0 => Ok(()),
            1 => {
                let request = DeleteMessage {
                    queue_url: &url,
                    receipt_handle: &handles[0],
                };
                self.call(
                    "DeleteMessage",
                    to_json(self.name, &request)?,
                    REQUEST_SLACK,
                )
                .await
                .map(|_| ())
            }
            count => {
                let entries = handles
                    .iter()
                    .enumerate()
                    .map(|(index, handle)| DeleteEntry {
                        id: index.to_string(),
                        receipt_handle: handle,
                    })
                    .collect();
                let request = DeleteMessageBatch {
                    queue_url: &url,
                    entries,
                };
                let body = self
                    .call(
                        "DeleteMessageBatch",
                        to_json(self.name, &request)?,
                        REQUEST_SLACK,
                    )
                    .await?;
                let reply: BatchReply = self.parse("DeleteMessageBatch", &body)?;
                check_batch(self.name, "DeleteMessageBatch", reply, count)
            }
        }
    }
}

impl SqsTarget {
    /// PurgeQueue: empties a prepared queue (not used by the suite, which uses fresh queues; kept for `run
    /// --purge` against a long-lived endpoint).
    pub async fn purge(&self, queue: &str) -> TargetResult<()> {
        let url = self.queue_url(queue)?;
        let request = QueueOnly { queue_url: &url };
        self.call("PurgeQueue", to_json(self.name, &request)?, REQUEST_SLACK)
            .await
            .map(|_| ())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::run::body::{encode_body, BodyId};

    #[tokio::test]
    async fn clones_spread_round_robin_over_the_endpoints() {
        let target =
            SqsTarget::connect("http://127.0.0.1:1, http://127.0.0.1:2,http://127.0.0.1:3")
                .await
                .unwrap();
        let hosts: Vec<String> = std::iter::once(target.clone())
            .chain((0..4).map(|_| target.clone()))
            .map(|t| t.endpoints[t.index].host.to_str().unwrap().to_owned())
            .collect();
        assert_eq!(
            hosts,
            [
                "127.0.0.1:2",
                "127.0.0.1:3",
                "127.0.0.1:1",
                "127.0.0.1:2",
                "127.0.0.1:3"
            ]
        );
        assert_eq!(
            target.endpoints[target.index].host.to_str().unwrap(),
            "127.0.0.1:1"
        );
        assert!(SqsTarget::connect("http://127.0.0.1:1,https://x:2")
            .await
            .is_err());
    }

    #[test]
    fn fifo_sends_go_round_robin_with_unique_deduplication_ids() {
        let groups = FifoGroups {
            groups: 3,
            next: AtomicU64::new(0),
        };
        let body = |seq| {
            encode_body(
                BodyId {
                    run: 0xabcd_0123,
                    producer: 2,
                    seq,
                    sent_us: 1,
                },
                64,
            )
        };
        let first = groups.ids(&[body(0), body(1)]);
        let second = groups.ids(&[body(2), body(3), Bytes::from_static(b"not ours")]);
        let all: Vec<(&str, &str)> = first
            .iter()
            .chain(&second)
            .map(|ids| (ids.group.as_str(), ids.dedup.as_str()))
            .collect();
        assert_eq!(
            all,
            [
                ("g0", "abcd0123-0002-0"),
                ("g1", "abcd0123-0002-1"),
                ("g2", "abcd0123-0002-2"),
                ("g0", "abcd0123-0002-3"),
                ("g1", "n4"),
            ]
        );
    }
}
