//! Integration tests through KubeMQ's own Rust client (`kubemq` on crates.io) as a second real client: its
//! high-level client, and for the legacy StreamQueueMessage RPC (which that client does not wrap) the gRPC
//! client the crate generated from KubeMQ's own proto. Raw downstream requests and QueuesInfo use a tonic
//! client generated from Veil's proto. The service runs in-process on 127.0.0.1 over the real redb store: starting the `veil`
//! binary would need it built by another package first, which `cargo test` does not guarantee.
//!
//! Where a visibility or wait rule is the point, the engine runs on a `ManualClock`: time moves only when the
//! test advances it, so a frozen clock proves that an answer came from the rule under test and not from a
//! deadline passing on a slow machine.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use kubemq::prelude::*;
use kubemq::AckAllQueueMessagesRequest;
use tokio::sync::{mpsc, watch};
use tokio_stream::wrappers::ReceiverStream;
use tokio_stream::StreamExt;
use veil_core::{Clock, Engine, ManualClock, QueueKey, QueueStats, ReceiptKey, SystemClock};
use veil_kubemq::convert::KubemqError;
use veil_kubemq::pb;
use veil_store::{RedbStore, StoreOptions};

struct Veil {
    addr: SocketAddr,
    engine: Arc<Engine>,
    /// Kept to count commits: settling a batch must take one, not one per message.
    store: Arc<RedbStore>,
    /// The server's request metrics.
    telemetry: veil_telemetry::Telemetry,
    stop: watch::Sender<bool>,
    served: tokio::task::JoinHandle<std::result::Result<(), tonic::transport::Error>>,
    _dir: tempfile::TempDir,
}

/// Where a manual clock starts: any time after 2020, so that wire times look like Unix nanoseconds.
const MANUAL_START_MS: u64 = 1_700_000_000_000;

/// How long a test lets a frozen clock prove that nothing answers. Nothing but the rule under test could make
/// an answer come, so this bounds only how long the test waits to see that it does not.
const QUIET: Duration = Duration::from_millis(300);

impl Veil {
    async fn start(settings: veil_kubemq::Settings) -> Veil {
        Self::start_on(settings, Arc::new(SystemClock)).await
    }

    /// A server whose engine reads `clock`'s time.
    async fn manual() -> (Veil, ManualClock) {
        let clock = ManualClock::new(MANUAL_START_MS);
        let veil = Self::start_on(Default::default(), Arc::new(clock.clone())).await;
        (veil, clock)
    }

    async fn start_on(settings: veil_kubemq::Settings, clock: Arc<dyn Clock>) -> Veil {
        let dir = tempfile::tempdir().expect("temp dir");
        let store = Arc::new(RedbStore::open(dir.path(), StoreOptions::default()).expect("store"));
        let engine = Arc::new(
            Engine::open(
                store.clone(),
                clock,
                ReceiptKey::new([7; veil_core::receipt::SECRET_BYTES]),
            )
            .expect("engine"),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        let (stop, stopped) = watch::channel(false);
        let telemetry = veil_telemetry::Telemetry::default();
        let config = veil_kubemq::KubemqConfig {
            settings,
            auth: veil_kubemq::AuthConfig::default(),
            telemetry: telemetry.clone(),
            ..veil_kubemq::KubemqConfig::default()
        };
        let served = tokio::spawn(veil_kubemq::serve(
            engine.clone(),
            config,
            listener,
            stopped,
        ));
        Veil {
            addr,
            engine,
            store,
            telemetry,
            stop,
            served,
            _dir: dir,
        }
    }

    async fn client(&self, id: &str) -> KubemqClient {
        KubemqClient::builder()
            .host("127.0.0.1")
            .port(self.addr.port())
            .client_id(id)
            .build()
            .await
            .expect("kubemq client connects")
    }

    fn stats(&self, channel: &str) -> QueueStats {
        self.engine.stats(&channel_key(channel)).expect("stats")
    }

    /// Waits (in real time, bounded) until the channel's stats satisfy `done`: for settlements the clients
    /// send without waiting for an answer. The bound is no rule of the server's; it only ends a failing test.
    async fn until(&self, channel: &str, what: &str, done: impl Fn(&QueueStats) -> bool) {
        let started = Instant::now();
        let key = channel_key(channel);
        // A channel that a re-queue creates is not there yet: not done.
        while !self.engine.stats(&key).is_ok_and(|stats| done(&stats)) {
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "{channel}: never {what}: {:?}",
                self.engine.stats(&key)
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Waits (in real time, bounded like [`Veil::until`]) until `count` receives are parked in a long poll on
    /// the channel.
    async fn until_long_polls(&self, channel: &str, count: u64) {
        let started = Instant::now();
        let key = channel_key(channel);
        let waiting = || self.engine.overview_of(&key).map(|o| o.long_polls_waiting);
        while !waiting().is_ok_and(|n| n >= count) {
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "{channel}: never {count} long polls parked: {:?}",
                waiting()
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    async fn stop(self) {
        self.stop.send_replace(true);
        let served = tokio::time::timeout(Duration::from_secs(10), self.served).await;
        assert!(
            matches!(served, Ok(Ok(Ok(())))),
            "the server drains and stops: {served:?}"
        );
    }
}

fn channel_key(channel: &str) -> QueueKey {
    QueueKey::new(veil_core::DEFAULT_NAMESPACE, channel)
}

/// (visible, hidden) of a channel.
fn counts(stats: &QueueStats) -> (u64, u64) {
    (stats.visible, stats.hidden)
}

fn message(channel: &str, body: &str) -> QueueMessage {
    QueueMessageBuilder::new()
        .channel(channel)
        .body(body.as_bytes().to_vec())
        .build()
}

/// Sends one message with body `body` to `channel`; the send must succeed.
async fn send(client: &KubemqClient, channel: &str, body: &str) {
    client
        .send_queue_message(message(channel, body))
        .await
        .expect("send");
}

fn poll(channel: &str, max_items: i32, wait_timeout_seconds: i32) -> PollRequest {
    PollRequest {
        channel: channel.to_string(),
        max_items,
        wait_timeout_seconds,
        auto_ack: false,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sent_message_is_polled_with_sequence_and_receive_count_then_acked() {
    let veil = Veil::start(Default::default()).await;
    let client = veil.client("rust-a").await;
    let sent = client
        .send_queue_message(
            QueueMessageBuilder::new()
                .channel("rs.orders")
                .body(b"hello".to_vec())
                .metadata("m")
                .build(),
        )
        .await
        .expect("send");
    assert!(!sent.is_error, "{}", sent.error);
    assert!(sent.sent_at > 1_600_000_000_000_000_000, "Unix nanoseconds");
    let mut receiver = client
        .new_queue_downstream_receiver()
        .await
        .expect("downstream");
    let response = receiver.poll(poll("rs.orders", 10, 2)).await.expect("poll");
    assert!(!response.is_error, "{}", response.error);
    assert_eq!(response.messages.len(), 1);
    let got = &response.messages[0];
    assert_eq!(got.message.body, b"hello");
    assert_eq!(got.message.metadata, "m");
    assert_eq!(got.message.id, sent.message_id);
    let attributes = got.message.attributes.clone().expect("attributes");
    assert_eq!(attributes.sequence, 1);
    assert_eq!(attributes.receive_count, 1);
    got.ack().await.expect("ack");
    // Deleted, not merely hidden (it would stay hidden for the 60 s server-side visibility anyway).
    veil.until("rs.orders", "empty", |s| counts(s) == (0, 0))
        .await;
    assert_eq!(veil.stats("rs.orders").stored_bytes, 0);
    // A downstream is counted per request of the stream, not once per stream.
    let count = |operation| {
        let code = veil_telemetry::Code::Ok;
        veil.telemetry
            .request_count(veil_telemetry::Protocol::Kubemq, operation, code)
    };
    assert_eq!(count("SendQueueMessage"), 1);
    assert_eq!(count("QueuesDownstream.Get"), 1);
    receiver.close().await.expect("close");
    veil.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nacked_message_comes_back_with_a_higher_receive_count() {
    let veil = Veil::start(Default::default()).await;
    let client = veil.client("rust-b").await;
    send(&client, "rs.nack", "again").await;
    let mut receiver = client
        .new_queue_downstream_receiver()
        .await
        .expect("downstream");
    let first = receiver.poll(poll("rs.nack", 1, 2)).await.expect("poll");
    first.messages[0].nack().await.expect("nack");
    let second = receiver.poll(poll("rs.nack", 1, 2)).await.expect("poll");
    assert_eq!(second.messages.len(), 1);
    let count = second.messages[0]
        .message
        .attributes
        .as_ref()
        .map(|a| a.receive_count);
    assert_eq!(count, Some(2));
    second.ack_all().await.expect("ack all");
    receiver.close().await.expect("close");
    veil.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pull_settles_peek_does_not_and_ack_all_purges() {
    let veil = Veil::start(Default::default()).await;
    let client = veil.client("rust-c").await;
    for body in ["a", "b", "c"] {
        send(&client, "rs.pull", body).await;
    }
    let peeked = client
        .receive_queue_messages("rs.pull", 10, 1, true)
        .await
        .expect("peek");
    assert_eq!(peeked.len(), 3);
    let pulled = client
        .receive_queue_messages("rs.pull", 1, 1, false)
        .await
        .expect("pull");
    assert_eq!(pulled.len(), 1);
    assert_eq!(pulled[0].body, b"a");
    let request = AckAllQueueMessagesRequest {
        request_id: "r1".into(),
        client_id: "rust-c".into(),
        channel: "rs.pull".into(),
        wait_time_seconds: 1,
    };
    let purged = client
        .ack_all_queue_messages(&request)
        .await
        .expect("ack all");
    assert_eq!(
        purged.affected_messages, 2,
        "the pulled message was settled by the pull"
    );
    veil.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_nack_that_uses_up_max_receive_count_moves_the_message_at_once() {
    let veil = Veil::start(Default::default()).await;
    let client = veil.client("rust-d").await;
    let poison = QueueMessageBuilder::new()
        .channel("rs.work")
        .body(b"poison".to_vec())
        .max_receive_count(1)
        .max_receive_queue("rs.dead")
        .build();
    client.send_queue_message(poison).await.expect("send");
    let mut receiver = client
        .new_queue_downstream_receiver()
        .await
        .expect("downstream");
    let first = receiver.poll(poll("rs.work", 1, 2)).await.expect("poll");
    first.messages[0].nack().await.expect("nack");
    // Nobody receives from rs.work again: the nack itself moved it (KubeMQ dead-letters on release).
    veil.until("rs.dead", "given the dead letter", |s| counts(s) == (1, 0))
        .await;
    assert_eq!(counts(&veil.stats("rs.work")), (0, 0));
    let dead = receiver.poll(poll("rs.dead", 1, 2)).await.expect("poll");
    assert_eq!(dead.messages.len(), 1);
    let attributes = dead.messages[0]
        .message
        .attributes
        .clone()
        .expect("attributes");
    assert!(attributes.re_routed);
    assert_eq!(attributes.re_routed_from_queue, "rs.work");
    assert_eq!(attributes.receive_count, 1, "a fresh message in rs.dead");
    dead.ack_all().await.expect("ack");
    receiver.close().await.expect("close");
    veil.stop().await;
}

// ----- StreamQueueMessage through the kubemq crate's gRPC client -----
//
// The crate's high-level client has no legacy StreamQueueMessage, but the crate ships KubeMQ's own generated
// gRPC client (`kubemq::proto`, from KubeMQ's kubemq.proto): a second, independent encoding of the wire that
// Veil's proto must agree with.

use kubemq::proto::kubemq as kubemq_pb;

struct LegacyStream {
    requests: mpsc::Sender<kubemq_pb::StreamQueueMessagesRequest>,
    responses: tonic::Streaming<kubemq_pb::StreamQueueMessagesResponse>,
}

impl LegacyStream {
    async fn open(addr: SocketAddr) -> LegacyStream {
        let mut client = kubemq_pb::kubemq_client::KubemqClient::connect(format!("http://{addr}"))
            .await
            .expect("connect");
        let (requests, rx) = mpsc::channel(8);
        let responses = client
            .stream_queue_message(ReceiverStream::new(rx))
            .await
            .expect("stream")
            .into_inner();
        LegacyStream {
            requests,
            responses,
        }
    }

    async fn call(
        &mut self,
        kind: kubemq_pb::StreamRequestType,
        visibility_seconds: i32,
    ) -> kubemq_pb::StreamQueueMessagesResponse {
        let request = kubemq_pb::StreamQueueMessagesRequest {
            request_id: uuid::Uuid::new_v4().to_string(),
            client_id: "legacy".into(),
            stream_request_type_data: kind as i32,
            channel: "rs.legacy".into(),
            visibility_seconds,
            wait_time_seconds: 2,
            ..Default::default()
        };
        self.requests.send(request).await.expect("send request");
        self.responses
            .next()
            .await
            .expect("a response")
            .expect("not a status")
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn modify_visibility_extends_the_deadline_of_a_stream_message() {
    let (veil, clock) = Veil::manual().await;
    let client = veil.client("rust-e").await;
    send(&client, "rs.legacy", "long work").await;
    let mut stream = LegacyStream::open(veil.addr).await;
    let received = stream
        .call(kubemq_pb::StreamRequestType::ReceiveMessage, 1)
        .await;
    assert!(!received.is_error, "{}", received.error);
    assert_eq!(
        received.message.map(|m| m.body),
        Some(b"long work".to_vec())
    );
    let modified = stream
        .call(kubemq_pb::StreamRequestType::ModifyVisibility, 3)
        .await;
    assert!(!modified.is_error, "{}", modified.error);
    // Past the original 1 s deadline the message is still hidden: the deadline was reset to 3 s ...
    clock.advance(Duration::from_millis(2_900));
    assert_eq!(counts(&veil.stats("rs.legacy")), (0, 1));
    // ... and it is 3 s, not forever.
    clock.advance(Duration::from_millis(200));
    assert_eq!(counts(&veil.stats("rs.legacy")), (1, 0));
    veil.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unacked_stream_message_is_redelivered_after_its_visibility() {
    let (veil, clock) = Veil::manual().await;
    let client = veil.client("rust-f").await;
    send(&client, "rs.legacy", "slow").await;
    let mut stream = LegacyStream::open(veil.addr).await;
    let received = stream
        .call(kubemq_pb::StreamRequestType::ReceiveMessage, 1)
        .await;
    assert!(!received.is_error, "{}", received.error);
    let mut receiver = client
        .new_queue_downstream_receiver()
        .await
        .expect("downstream");
    let again = tokio::spawn(async move {
        let polled = receiver.poll(poll("rs.legacy", 1, 30)).await;
        (receiver, polled)
    });
    // Parked before the visibility lapses: a poll that started after the advance would find the message
    // visible and never wait for it.
    veil.until_long_polls("rs.legacy", 1).await;
    assert!(
        !again.is_finished(),
        "hidden until its 1 s visibility passes"
    );
    clock.advance(Duration::from_secs(1));
    let (receiver, again) = again.await.expect("join");
    let again = again.expect("poll");
    assert_eq!(again.messages.len(), 1, "redelivered once the 1 s passed");
    // The stream's message is no longer its to settle.
    let late = stream
        .call(kubemq_pb::StreamRequestType::AckMessage, 0)
        .await;
    assert!(late.is_error);
    assert_eq!(late.error, KubemqError::NotHeld.to_string());
    again.ack_all().await.expect("ack");
    receiver.close().await.expect("close");
    veil.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_tells_open_downstreams_close_by_server_and_releases_their_messages() {
    let veil = Veil::start(Default::default()).await;
    let client = veil.client("rust-g").await;
    send(&client, "rs.shutdown", "in flight").await;
    let (requests, mut responses) = raw_downstream(veil.addr).await;
    requests
        .send(pb::QueuesDownstreamRequest {
            request_id: "get-1".into(),
            client_id: "raw".into(),
            request_type_data: pb::QueuesDownstreamRequestType::Get as i32,
            channel: "rs.shutdown".into(),
            max_items: 1,
            wait_timeout: 2_000,
            ..Default::default()
        })
        .await
        .expect("send get");
    let got = responses
        .next()
        .await
        .expect("a response")
        .expect("not a status");
    assert_eq!(got.ref_request_id, "get-1");
    assert_eq!(got.messages.len(), 1);
    assert_eq!(got.active_offsets, vec![1]);
    let engine = veil.engine.clone();
    let key = veil_core::QueueKey::new(veil_core::DEFAULT_NAMESPACE, "rs.shutdown");
    assert_eq!(engine.stats(&key).expect("stats").hidden, 1);
    veil.stop.send_replace(true);
    let closing = responses
        .next()
        .await
        .expect("a response")
        .expect("not a status");
    assert_eq!(
        closing.request_type_data,
        pb::QueuesDownstreamRequestType::CloseByServer as i32
    );
    assert_eq!(
        engine.stats(&key).expect("stats").visible,
        1,
        "the unacked message is released at once"
    );
    drop(requests);
    veil.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_poll_does_not_hold_back_the_acks_behind_it_on_the_same_stream() {
    // The clock stands still: the long poll cannot end while the test waits for the ack.
    let (veil, _clock) = Veil::manual().await;
    let client = veil.client("rust-h").await;
    send(&client, "rs.busy", "work").await;
    let (requests, mut responses) = raw_downstream(veil.addr).await;
    requests
        .send(get("get-1", "rs.busy", 1, 2_000))
        .await
        .expect("send get");
    let first = next(&mut responses).await;
    assert_eq!(first.messages.len(), 1);
    requests
        .send(get("get-2", "rs.idle", 1, 3_000))
        .await
        .expect("send get");
    requests
        .send(settle(
            "ack-1",
            pb::QueuesDownstreamRequestType::AckAll,
            &first.transaction_id,
            vec![],
        ))
        .await
        .expect("send ack");
    veil.until("rs.busy", "acked", |s| counts(s) == (0, 0))
        .await;
    drop(requests);
    drop(responses);
    veil.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn active_offsets_shrink_as_messages_settle_and_the_transaction_completes() {
    let veil = Veil::start(Default::default()).await;
    let client = veil.client("rust-i").await;
    for body in ["a", "b"] {
        send(&client, "rs.tx", body).await;
    }
    let (requests, mut responses) = raw_downstream(veil.addr).await;
    let request = |id: &str, kind: pb::QueuesDownstreamRequestType, tx: &str, range: Vec<i64>| {
        pb::QueuesDownstreamRequest {
            request_id: id.into(),
            client_id: "raw".into(),
            request_type_data: kind as i32,
            channel: "rs.tx".into(),
            max_items: 2,
            wait_timeout: 1_000,
            ref_transaction_id: tx.into(),
            sequence_range: range,
            ..Default::default()
        }
    };
    use pb::QueuesDownstreamRequestType as T;
    requests
        .send(request("get", T::Get, "", vec![]))
        .await
        .expect("send");
    let got = responses
        .next()
        .await
        .expect("a response")
        .expect("not a status");
    assert_eq!(got.active_offsets, vec![1, 2]);
    let tx = got.transaction_id.clone();
    requests
        .send(request("ack-1", T::AckRange, &tx, vec![1]))
        .await
        .expect("send");
    requests
        .send(request("offsets", T::ActiveOffsets, &tx, vec![]))
        .await
        .expect("send");
    let offsets = responses
        .next()
        .await
        .expect("a response")
        .expect("not a status");
    assert_eq!(
        offsets.ref_request_id, "offsets",
        "the ack itself got no reply"
    );
    assert_eq!(offsets.active_offsets, vec![2]);
    assert!(!offsets.transaction_complete);
    requests
        .send(request("ack-9", T::AckRange, &tx, vec![9]))
        .await
        .expect("send");
    let unknown = responses
        .next()
        .await
        .expect("a response")
        .expect("not a status");
    assert!(
        unknown.is_error,
        "a sequence outside the transaction is an in-band error"
    );
    requests
        .send(request("nack-2", T::NAckRange, &tx, vec![2]))
        .await
        .expect("send");
    requests
        .send(request("status", T::TransactionStatus, &tx, vec![]))
        .await
        .expect("send");
    let status = responses
        .next()
        .await
        .expect("a response")
        .expect("not a status");
    assert_eq!(status.ref_request_id, "status");
    assert!(status.transaction_complete);
    let key = veil_core::QueueKey::new(veil_core::DEFAULT_NAMESPACE, "rs.tx");
    let stats = veil.engine.stats(&key).expect("stats");
    assert_eq!(
        (stats.visible, stats.hidden),
        (1, 0),
        "one acked, one nacked back"
    );
    drop(requests);
    drop(responses);
    veil.stop().await;
}

// ----- QueuesInfo and MessagesExpired through Veil's own generated client -----

async fn raw_client(
    addr: SocketAddr,
) -> pb::kubemq_client::KubemqClient<tonic::transport::Channel> {
    pb::kubemq_client::KubemqClient::connect(format!("http://{addr}"))
        .await
        .expect("connect")
}

/// A QueuesDownstream stream opened with Veil's generated client: where requests go, what comes back.
async fn raw_downstream(
    addr: SocketAddr,
) -> (
    mpsc::Sender<pb::QueuesDownstreamRequest>,
    tonic::Streaming<pb::QueuesDownstreamResponse>,
) {
    let (requests, rx) = mpsc::channel(8);
    let responses = raw_client(addr)
        .await
        .queues_downstream(ReceiverStream::new(rx))
        .await
        .expect("stream")
        .into_inner();
    (requests, responses)
}

fn get(
    id: &str,
    channel: &str,
    max_items: i32,
    wait_timeout_ms: i32,
) -> pb::QueuesDownstreamRequest {
    pb::QueuesDownstreamRequest {
        request_id: id.into(),
        client_id: "raw".into(),
        request_type_data: pb::QueuesDownstreamRequestType::Get as i32,
        channel: channel.into(),
        max_items,
        wait_timeout: wait_timeout_ms,
        ..Default::default()
    }
}

fn settle(
    id: &str,
    kind: pb::QueuesDownstreamRequestType,
    transaction: &str,
    range: Vec<i64>,
) -> pb::QueuesDownstreamRequest {
    pb::QueuesDownstreamRequest {
        request_id: id.into(),
        client_id: "raw".into(),
        request_type_data: kind as i32,
        ref_transaction_id: transaction.into(),
        sequence_range: range,
        ..Default::default()
    }
}

async fn next(
    responses: &mut tonic::Streaming<pb::QueuesDownstreamResponse>,
) -> pb::QueuesDownstreamResponse {
    responses
        .next()
        .await
        .expect("a response")
        .expect("not a status")
}

/// Nothing arrives on `responses` while the test waits [`QUIET`].
async fn silent(responses: &mut tonic::Streaming<pb::QueuesDownstreamResponse>, why: &str) {
    let early = tokio::time::timeout(QUIET, responses.next()).await;
    assert!(early.is_err(), "{why}: {early:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queues_info_reports_messages_bytes_sequences_counts_and_waiting_receivers() {
    let (veil, clock) = Veil::manual().await;
    let client = veil.client("rust-info").await;
    for body in ["a", "bb", "ccc"] {
        send(&client, "rs.info.work", body).await;
    }
    let mut receiver = client
        .new_queue_downstream_receiver()
        .await
        .expect("downstream");
    let got = receiver
        .poll(poll("rs.info.work", 1, 2))
        .await
        .expect("poll");
    assert_eq!(got.messages.len(), 1, "one message held, unacked");

    // A receiver waiting on an empty channel is its subscriber while it waits.
    let mut waiting = raw_client(veil.addr).await;
    let idle = tokio::spawn(async move {
        waiting
            .receive_queue_messages(pb::ReceiveQueueMessagesRequest {
                client_id: "waiter".into(),
                channel: "rs.info.idle".into(),
                max_number_of_messages: 1,
                wait_time_seconds: 2,
                ..Default::default()
            })
            .await
    });
    let mut info_client = raw_client(veil.addr).await;
    let started = Instant::now();
    let response = loop {
        let response = info_client
            .queues_info(pb::QueuesInfoRequest {
                request_id: "r-1".into(),
                queue_name: "rs.info".into(),
            })
            .await
            .expect("queues info")
            .into_inner();
        let info = response.info.as_ref().expect("info");
        if info
            .queues
            .iter()
            .any(|q| q.name == "rs.info.idle" && q.subscribers > 0)
        {
            break response;
        }
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "the pull never waited"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    assert_eq!(response.ref_request_id, "r-1");
    let info = response.info.expect("info");
    let work = info
        .queues
        .iter()
        .find(|q| q.name == "rs.info.work")
        .expect("the work channel is listed");
    assert_eq!(work.messages, 3, "the held message is still stored");
    assert_eq!(work.bytes, 6);
    assert_eq!((work.first_sequence, work.last_sequence), (1, 3));
    assert_eq!((work.sent, work.delivered, work.waiting), (3, 1, 2));
    let idle_info = info
        .queues
        .iter()
        .find(|q| q.name == "rs.info.idle")
        .expect("the idle channel is listed");
    assert_eq!(idle_info.subscribers, 1);
    assert_eq!(work.subscribers, 0);
    assert_eq!(
        info.total_queue, 2,
        "the filter keeps only matching channels"
    );
    assert_eq!((info.sent, info.delivered, info.waiting), (3, 1, 2));

    // The clock stood still, so the pull was still waiting above; its 2 s end now.
    clock.advance(Duration::from_secs(2));
    idle.await.expect("join").expect("pull answers");
    let after = info_client
        .queues_info(pb::QueuesInfoRequest {
            request_id: "r-2".into(),
            queue_name: "rs.info.idle".into(),
        })
        .await
        .expect("queues info")
        .into_inner()
        .info
        .expect("info");
    assert_eq!(after.queues[0].subscribers, 0, "the pull ended");
    receiver.close().await.expect("close");
    veil.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pull_counts_the_expired_messages_it_skipped() {
    let (veil, clock) = Veil::manual().await;
    let mut client = raw_client(veil.addr).await;
    for (body, expiration_seconds) in [("short", 1), ("long", 0)] {
        let sent = client
            .send_queue_message(pb::QueueMessage {
                client_id: "rust-exp".into(),
                channel: "rs.expiring".into(),
                body: body.as_bytes().to_vec().into(),
                policy: Some(pb::QueueMessagePolicy {
                    expiration_seconds,
                    ..Default::default()
                }),
                ..Default::default()
            })
            .await
            .expect("send")
            .into_inner();
        assert!(!sent.is_error, "{}", sent.error);
    }
    clock.advance(Duration::from_millis(1_001));
    let pulled = client
        .receive_queue_messages(pb::ReceiveQueueMessagesRequest {
            client_id: "rust-exp".into(),
            channel: "rs.expiring".into(),
            max_number_of_messages: 1,
            wait_time_seconds: 1,
            ..Default::default()
        })
        .await
        .expect("pull")
        .into_inner();
    assert!(!pulled.is_error, "{}", pulled.error);
    assert_eq!(pulled.messages_received, 1);
    assert_eq!(pulled.messages[0].body, b"long".as_slice());
    assert_eq!(pulled.messages_expired, 1);
    veil.stop().await;
}

// ----- when a Get or a pull answers: at max items or at the wait's end, whichever comes first -----

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_get_short_of_max_items_answers_when_its_wait_less_the_answer_lead_ends() {
    let (veil, clock) = Veil::manual().await;
    let client = veil.client("rust-wait").await;
    send(&client, "rs.wait", "one").await;
    let (requests, mut responses) = raw_downstream(veil.addr).await;
    requests
        .send(get("get-1", "rs.wait", 3, 5_000))
        .await
        .expect("send get");
    // The Get's wait counts from when it holds the message: before that, an advance would not be inside it.
    veil.until("rs.wait", "held by the Get", |s| counts(s) == (0, 1))
        .await;
    silent(&mut responses, "one of three held, the wait not over").await;
    // 5 s less the 250 ms lead (docs/semantics.md §KubeMQ): the answer is on its way before the SDK, which
    // counts 5.5 s from its send, gives up.
    clock.advance(Duration::from_millis(4_700));
    silent(&mut responses, "50 ms to go").await;
    clock.advance(Duration::from_millis(50));
    let got = next(&mut responses).await;
    assert_eq!(got.ref_request_id, "get-1");
    assert_eq!(got.messages.len(), 1);
    assert_eq!(got.active_offsets, vec![1]);
    drop(requests);
    veil.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_get_answers_as_soon_as_it_holds_max_items() {
    let (veil, _clock) = Veil::manual().await;
    let client = veil.client("rust-max").await;
    send(&client, "rs.max", "a").await;
    let (requests, mut responses) = raw_downstream(veil.addr).await;
    requests
        .send(get("get-1", "rs.max", 2, 5_000))
        .await
        .expect("send get");
    // Collecting before the second send: a Get that started after it would find both at once.
    veil.until("rs.max", "held by the Get", |s| counts(s) == (0, 1))
        .await;
    silent(&mut responses, "one of two held").await;
    send(&client, "rs.max", "b").await;
    // The clock never moved: only reaching max items can answer.
    let got = next(&mut responses).await;
    let bodies: Vec<&[u8]> = got.messages.iter().map(|m| m.body.as_ref()).collect();
    assert_eq!(bodies, [b"a".as_slice(), b"b".as_slice()]);
    assert_eq!(got.active_offsets, vec![1, 2]);
    drop(requests);
    veil.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_that_ends_while_its_get_collects_releases_what_the_get_held() {
    let (veil, _clock) = Veil::manual().await;
    let client = veil.client("rust-end").await;
    send(&client, "rs.end", "held").await;
    let (requests, mut responses) = raw_downstream(veil.addr).await;
    requests
        .send(get("get-1", "rs.end", 3, 60_000))
        .await
        .expect("send get");
    veil.until("rs.end", "held while the Get collects", |s| {
        counts(s) == (0, 1)
    })
    .await;
    silent(&mut responses, "collecting").await;
    drop(requests);
    veil.until("rs.end", "released", |s| counts(s) == (1, 0))
        .await;
    drop(responses);
    veil.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_get_that_finishes_after_its_stream_requests_ended_answers_an_error_not_messages() {
    // The order under test: the stream's request side ends (the client half-closes, so no ack can follow),
    // then the Get collecting on it finishes. Its messages go back to the queue, and the client is told so
    // rather than handed messages it could never settle.
    let (veil, _clock) = Veil::manual().await;
    let client = veil.client("rust-half").await;
    send(&client, "rs.half", "held").await;
    let (requests, mut responses) = raw_downstream(veil.addr).await;
    requests
        .send(get("get-1", "rs.half", 3, 60_000))
        .await
        .expect("send get");
    veil.until("rs.half", "held by the Get", |s| counts(s) == (0, 1))
        .await;
    drop(requests);
    let got = next(&mut responses).await;
    assert_eq!(got.ref_request_id, "get-1");
    assert!(got.is_error, "{got:?}");
    assert_eq!(got.error, KubemqError::StreamEnded.to_string());
    assert!(got.messages.is_empty(), "{:?}", got.messages);
    veil.until("rs.half", "released", |s| counts(s) == (1, 0))
        .await;
    veil.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ack_sent_right_after_a_get_answers_at_its_wait_end_settles_the_message() {
    // The order of the README's snippet: a Get short of its items answers when its wait (less the lead) is
    // over, and the ack follows on the same stream. The transaction is recorded before the answer is sent, so
    // the ack always finds it.
    let (veil, clock) = Veil::manual().await;
    let client = veil.client("rust-late").await;
    send(&client, "rs.late", "ack me").await;
    let (requests, mut responses) = raw_downstream(veil.addr).await;
    requests
        .send(get("get-1", "rs.late", 10, 5_000))
        .await
        .expect("send get");
    veil.until("rs.late", "held by the Get", |s| counts(s) == (0, 1))
        .await;
    clock.advance(Duration::from_millis(4_750));
    let got = next(&mut responses).await;
    assert_eq!(got.messages.len(), 1);
    let sequence = got.messages[0]
        .attributes
        .as_ref()
        .map_or(0, |a| a.sequence);
    requests
        .send(settle(
            "ack-1",
            pb::QueuesDownstreamRequestType::AckRange,
            &got.transaction_id,
            vec![i64::try_from(sequence).expect("small")],
        ))
        .await
        .expect("send ack");
    veil.until("rs.late", "acked", |s| counts(s) == (0, 0))
        .await;
    silent(&mut responses, "an ack answers only when it fails").await;
    drop(requests);
    veil.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pull_collects_until_max_then_settles_all_it_returns() {
    let (veil, _clock) = Veil::manual().await;
    let client = veil.client("rust-pull").await;
    send(&client, "rs.collect", "a").await;
    let mut puller = raw_client(veil.addr).await;
    let pull = tokio::spawn(async move {
        puller
            .receive_queue_messages(pb::ReceiveQueueMessagesRequest {
                client_id: "rust-pull".into(),
                channel: "rs.collect".into(),
                max_number_of_messages: 2,
                wait_time_seconds: 5,
                ..Default::default()
            })
            .await
    });
    // Collecting before the second send: a pull that started after it would find both at once.
    veil.until("rs.collect", "held by the pull", |s| s.hidden == 1)
        .await;
    assert!(!pull.is_finished(), "one of two held, the clock frozen");
    send(&client, "rs.collect", "b").await;
    let pulled = pull.await.expect("join").expect("pull").into_inner();
    assert!(!pulled.is_error, "{}", pulled.error);
    assert_eq!(pulled.messages_received, 2);
    let stats = veil.stats("rs.collect");
    assert_eq!((counts(&stats), stats.stored_bytes), ((0, 0), 0), "settled");
    veil.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pull_settles_all_it_returns_with_one_commit() {
    let (veil, _clock) = Veil::manual().await;
    let client = veil.client("rust-pull").await;
    for body in ["a", "b", "c", "d", "e", "f", "g", "h"] {
        send(&client, "rs.batch", body).await;
    }
    let commits_before = veil.store.commit_count();
    let mut puller = raw_client(veil.addr).await;
    let pulled = puller
        .receive_queue_messages(pb::ReceiveQueueMessagesRequest {
            client_id: "rust-pull".into(),
            channel: "rs.batch".into(),
            max_number_of_messages: 8,
            wait_time_seconds: 0,
            ..Default::default()
        })
        .await
        .expect("pull")
        .into_inner();
    assert!(!pulled.is_error, "{}", pulled.error);
    assert_eq!(pulled.messages_received, 8);
    let commits = veil.store.commit_count() - commits_before;
    assert!(
        commits <= 2,
        "the receive and one ack of all eight, not one per message: {commits}"
    );
    assert_eq!(counts(&veil.stats("rs.batch")), (0, 0), "settled");
    veil.stop().await;
}

/// The kubemq crate's `queues_stream_requeue` example: three re-queues sent without waiting for an answer,
/// then one pull of up to 10 with a 5 s wait finds all three.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pull_that_waits_finds_every_message_re_queued_before_it() {
    let (veil, clock) = Veil::manual().await;
    let client = veil.client("rust-requeue").await;
    for i in 0..3 {
        send(&client, "rs.requeue.source", &format!("m{i}")).await;
    }
    let mut receiver = client
        .new_queue_downstream_receiver()
        .await
        .expect("downstream");
    let polled = receiver
        .poll(poll("rs.requeue.source", 3, 5))
        .await
        .expect("poll");
    assert_eq!(polled.messages.len(), 3);
    for m in &polled.messages {
        m.re_queue("rs.requeue.target").await.expect("re-queue");
    }
    let puller = veil.client("rust-requeue-pull").await;
    let pull = tokio::spawn(async move {
        puller
            .receive_queue_messages("rs.requeue.target", 10, 5, false)
            .await
    });
    // Each re-queue arrives while the pull collects; the frozen clock keeps its wait open until all have.
    veil.until("rs.requeue.target", "given all three", |s| {
        s.counters.sends == 3 && s.visible == 0
    })
    .await;
    clock.advance(Duration::from_secs(5));
    let pulled = pull.await.expect("join").expect("pull");
    let mut bodies: Vec<Vec<u8>> = pulled.into_iter().map(|m| m.body).collect();
    bodies.sort();
    assert_eq!(bodies, [b"m0".to_vec(), b"m1".to_vec(), b"m2".to_vec()]);
    receiver.close().await.expect("close");
    veil.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ping_reports_kubemq_2_4_0_with_veils_version_as_build_metadata() {
    let veil = Veil::start(Default::default()).await;
    let client = veil.client("rust-ping").await;
    let info = client.ping().await.expect("ping");
    assert_eq!(
        info.version,
        format!("2.4.0+veil.{}", env!("CARGO_PKG_VERSION"))
    );
    assert_eq!(info.host, "veil");
    veil.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_get_that_reaches_the_in_flight_limit_while_collecting_answers_with_what_it_holds() {
    let clock = ManualClock::new(MANUAL_START_MS);
    let settings = veil_kubemq::Settings {
        max_inflight: 2,
        ..Default::default()
    };
    let veil = Veil::start_on(settings, Arc::new(clock.clone())).await;
    let client = veil.client("rust-limit").await;
    for body in ["a", "b", "c"] {
        send(&client, "rs.limit", body).await;
    }
    let (requests, mut responses) = raw_downstream(veil.addr).await;
    requests
        .send(get("get-1", "rs.limit", 3, 5_000))
        .await
        .expect("send get");
    // The clock never moves: the answer comes from the limit, and carries the two messages held.
    let got = next(&mut responses).await;
    assert!(!got.is_error, "{}", got.error);
    assert_eq!(got.active_offsets, vec![1, 2]);
    assert_eq!(counts(&veil.stats("rs.limit")), (1, 2));
    drop(requests);
    veil.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_poll_that_outlives_the_visibility_answers_each_message_once() {
    let clock = ManualClock::new(MANUAL_START_MS);
    let settings = veil_kubemq::Settings {
        default_visibility_s: 1,
        ..Default::default()
    };
    let veil = Veil::start_on(settings, Arc::new(clock.clone())).await;
    let client = veil.client("rust-once").await;
    send(&client, "rs.once", "only one").await;
    let (requests, mut responses) = raw_downstream(veil.addr).await;
    requests
        .send(get("get-1", "rs.once", 5, 5_000))
        .await
        .expect("send get");
    // The poll holds the message and keeps collecting; its 1 s visibility lapses during the 5 s wait, so
    // the same collect receives it again.
    veil.until("rs.once", "hidden by the poll", |s| s.hidden == 1)
        .await;
    clock.advance(Duration::from_secs(1));
    veil.until("rs.once", "received a second time", |s| {
        s.hidden == 1 && s.visible == 0
    })
    .await;
    silent(&mut responses, "the poll still collects").await;
    clock.advance(Duration::from_secs(4));
    let got = next(&mut responses).await;
    assert_eq!(got.ref_request_id, "get-1");
    assert_eq!(got.messages.len(), 1, "answered once: {:?}", got.messages);
    assert_eq!(got.messages[0].body.as_ref(), b"only one");
    // Received at 0 s, at 1 s and, its second visibility lapsed too, once more when the wait ended at 5 s.
    assert_eq!(
        got.messages[0].attributes.as_ref().map(|a| a.receive_count),
        Some(3)
    );
    // The answer carries the newest delivery, so its transaction can settle it.
    requests
        .send(settle(
            "ack-1",
            pb::QueuesDownstreamRequestType::AckAll,
            &got.transaction_id,
            vec![],
        ))
        .await
        .expect("send ack");
    veil.until("rs.once", "acked", |s| s.hidden == 0 && s.visible == 0)
        .await;
    drop(requests);
    veil.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pull_longer_than_the_visibility_receives_each_message_once() {
    let clock = ManualClock::new(MANUAL_START_MS);
    let settings = veil_kubemq::Settings {
        default_visibility_s: 1,
        ..Default::default()
    };
    let veil = Veil::start_on(settings, Arc::new(clock.clone())).await;
    let client = veil.client("rust-pull").await;
    send(&client, "rs.long-pull", "once").await;
    let mut raw = raw_client(veil.addr).await;
    let pull = tokio::spawn(async move {
        raw.receive_queue_messages(pb::ReceiveQueueMessagesRequest {
            request_id: "pull-1".into(),
            client_id: "raw".into(),
            channel: "rs.long-pull".into(),
            max_number_of_messages: 5,
            wait_time_seconds: 5,
            is_peak: false,
        })
        .await
    });
    veil.until("rs.long-pull", "held by the pull", |s| s.hidden == 1)
        .await;
    // Past the 1 s visibility but inside the wait: the pull still holds the message.
    clock.advance(Duration::from_secs(2));
    tokio::time::sleep(QUIET).await;
    assert_eq!(veil.stats("rs.long-pull").hidden, 1, "still hidden");
    clock.advance(Duration::from_secs(3));
    let pulled = pull
        .await
        .expect("join")
        .expect("pull answers")
        .into_inner();
    assert!(!pulled.is_error, "{}", pulled.error);
    assert_eq!(pulled.messages.len(), 1);
    assert_eq!(
        pulled.messages[0]
            .attributes
            .as_ref()
            .map(|a| a.receive_count),
        Some(1),
        "received once, not again when the visibility lapsed mid-pull"
    );
    assert_eq!(
        counts(&veil.stats("rs.long-pull")),
        (0, 0),
        "the pull acked it"
    );
    veil.stop().await;
}
