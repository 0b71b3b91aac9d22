//! The internal RPC over real sockets: a node following another runs every call at the owner, a long poll
//! waits there, and a call without the cluster's token, or to a node that does not own the queues, is
//! refused as unavailable.

use std::io::{Read, Write};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::watch;
use veil_cluster::routing::Routing;
use veil_cluster::tls::{ClusterTls, TlsFiles, NODE_NAME};
use veil_cluster::token::Tokens;
use veil_core::dispatch::Remote;
use veil_core::memory_store::MemoryStore;
use veil_core::*;

const SECRET: [u8; 32] = [9; 32];

struct Node {
    routing: Routing,
    /// What the node sends and accepts; a rotation sets it.
    tokens: Tokens,
    dispatch: Dispatch,
    addr: String,
    _stop: watch::Sender<bool>,
}

async fn node(secret: [u8; 32]) -> Node {
    node_with(secret, None).await
}

/// A node whose internal RPC is TLS with `tls` (its CA bundle and certificate), or plaintext.
async fn node_with(secret: [u8; 32], tls: Option<Arc<ClusterTls>>) -> Node {
    let client = tls
        .as_ref()
        .map(|tls| tls.client_config().expect("a client configuration"));
    let server = tls
        .as_ref()
        .map(|tls| tls.server_config().expect("a server configuration"));
    let tokens = Tokens::new(&secret);
    let routing = Routing::new(tokens.clone(), client);
    let (listener, addr) = veil_cluster::server::bind("127.0.0.1".parse().expect("an address"))
        .await
        .expect("a port");
    let (stop, stopped) = watch::channel(false);
    tokio::spawn(veil_cluster::server::serve(
        listener,
        server,
        routing.clone(),
        tokens.clone(),
        stopped,
    ));
    let dispatch = Dispatch::Remote(Arc::new(Remote::new(
        Box::new(routing.clone()),
        Arc::new(SystemClock),
        ReceiptKey::new(secret),
    )));
    Node {
        routing,
        tokens,
        dispatch,
        addr: addr.to_string(),
        _stop: stop,
    }
}

fn engine() -> Arc<Engine> {
    Arc::new(
        Engine::open(
            Arc::new(MemoryStore::new()),
            Arc::new(SystemClock),
            ReceiptKey::new(SECRET),
        )
        .expect("the engine opens"),
    )
}

fn key() -> QueueKey {
    QueueKey::new("ns", "q")
}

fn unavailable<T: std::fmt::Debug>(result: &EngineResult<T>) -> bool {
    matches!(result, Err(EngineError::Store(StoreError::Unavailable(_))))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_runs_every_call_at_the_owner() {
    let owner = node(SECRET).await;
    let follower = node(SECRET).await;
    let engine = engine();
    owner.routing.own(0, engine.clone());
    follower.routing.follow(0, &owner.addr);
    follower
        .dispatch
        .create_queue(key(), QueueConfig::default())
        .await
        .expect("created at the owner");
    let sent = follower
        .dispatch
        .send(&key(), vec![NewMessage::new("across")])
        .await
        .expect("sent");
    assert_eq!(engine.message_count(&key()).expect("count"), 1);
    let received = follower
        .dispatch
        .receive(
            &key(),
            ReceiveOptions {
                wait_ms: Some(0),
                ..ReceiveOptions::new(1)
            },
        )
        .await
        .expect("received");
    assert_eq!(received[0].payload.message_id, sent[0].message_id);
    let receipt = received[0].receipt.clone().expect("a receipt");
    owner
        .dispatch
        .delete(&key(), &receipt, ReceiptRule::AnyIssued)
        .await
        .expect("a receipt from the follower deletes at the owner");
    assert_eq!(engine.message_count(&key()).expect("count"), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_poll_through_a_follower_wakes_when_the_owner_gets_a_message() {
    let owner = node(SECRET).await;
    let follower = node(SECRET).await;
    let engine = engine();
    owner.routing.own(0, engine.clone());
    follower.routing.follow(0, &owner.addr);
    engine
        .create_queue(key(), QueueConfig::default())
        .await
        .expect("created");
    const WAIT_MS: u64 = 10_000;
    let polling = {
        let dispatch = follower.dispatch.clone();
        tokio::spawn(async move {
            let options = ReceiveOptions {
                wait_ms: Some(WAIT_MS),
                ..ReceiveOptions::new(1)
            };
            dispatch.receive(&key(), options).await
        })
    };
    // The poll has crossed to the owner and parked there.
    while engine
        .overview_of(&key())
        .expect("the queue")
        .long_polls_waiting
        == 0
    {
        assert!(!polling.is_finished(), "the poll ended before it parked");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let sent_at = Instant::now();
    engine
        .send(&key(), vec![NewMessage::new("wake")])
        .await
        .expect("sent");
    let received = polling.await.expect("the poll ran").expect("received");
    assert_eq!(received.len(), 1);
    assert_eq!(received[0].payload.body, "wake");
    assert!(
        sent_at.elapsed() < Duration::from_millis(WAIT_MS),
        "the poll answered when its wait ran out, not when the message came"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_without_the_clusters_secret_is_refused() {
    let owner = node(SECRET).await;
    let stranger = node([1; 32]).await;
    owner.routing.own(0, engine());
    stranger.routing.follow(0, &owner.addr);
    let created = stranger
        .dispatch
        .create_queue(key(), QueueConfig::default())
        .await;
    assert!(unavailable(&created), "{created:?}");
    assert!(!owner
        .dispatch
        .queue_exists(&key())
        .await
        .expect("asked locally"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rotated_key_is_accepted_before_it_is_sent_and_the_retired_one_is_refused() {
    const NEW: [u8; 32] = [42; 32];
    let owner = node(SECRET).await;
    let caller = node(SECRET).await;
    owner.routing.own(0, engine());
    caller.routing.follow(0, &owner.addr);
    owner
        .dispatch
        .create_queue(key(), QueueConfig::default())
        .await
        .expect("created where it lives");
    let both = [(0, &SECRET[..]), (1, &NEW[..])];
    // Announced everywhere, then sent by the caller first: the owner takes either.
    owner.tokens.set((0, &SECRET), both);
    caller.tokens.set((1, &NEW), both);
    let sent = caller
        .dispatch
        .send(&key(), vec![NewMessage::new("new key")])
        .await;
    assert!(sent.is_ok(), "the new key during the rotation: {sent:?}");
    // A caller that has not switched yet still gets through until the old key is retired.
    caller.tokens.set((0, &SECRET), both);
    let sent = caller
        .dispatch
        .send(&key(), vec![NewMessage::new("old key")])
        .await;
    assert!(sent.is_ok(), "the old key during the rotation: {sent:?}");
    owner.tokens.set((1, &NEW), [(1, &NEW[..])]);
    let sent = caller
        .dispatch
        .send(&key(), vec![NewMessage::new("retired")])
        .await;
    assert!(
        unavailable(&sent),
        "the retired key opened the port: {sent:?}"
    );
    caller.tokens.set((1, &NEW), [(1, &NEW[..])]);
    let sent = caller
        .dispatch
        .send(&key(), vec![NewMessage::new("after")])
        .await;
    assert!(sent.is_ok(), "the new key after the rotation: {sent:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_that_does_not_own_the_queues_answers_unavailable_and_never_forwards() {
    let former = node(SECRET).await;
    let follower = node(SECRET).await;
    let elsewhere = node(SECRET).await;
    // `former` believes another node owns the queues; asked directly, it must not pass the call on.
    former.routing.follow(0, &elsewhere.addr);
    elsewhere.routing.own(0, engine());
    follower.routing.follow(0, &former.addr);
    let listed = follower.dispatch.list_queues("ns", "").await;
    assert!(unavailable(&listed), "{listed:?}");
    let nobody = node(SECRET).await;
    let sent = nobody
        .dispatch
        .send(&key(), vec![NewMessage::new("x")])
        .await;
    assert!(unavailable(&sent), "no route at all: {sent:?}");
}

/// A queue name of namespace `ns` in `partition` of `count`.
fn in_partition(partition: u32, count: u32, n: usize) -> QueueKey {
    (0..)
        .map(|i| QueueKey::new("ns", format!("q{i}")))
        .filter(|key| veil_core::partition::partition_of(key, count) == partition)
        .nth(n)
        .expect("some name in every partition")
}

/// Two nodes over four partitions: `a` owns 0 and 1, `b` owns 2 and 3, each partition with its own engine.
async fn two_owners() -> (Node, Node) {
    let (a, b) = (node(SECRET).await, node(SECRET).await);
    for routing in [&a.routing, &b.routing] {
        routing.set_count(4);
    }
    for partition in 0..4 {
        let (owner, other) = if partition < 2 { (&a, &b) } else { (&b, &a) };
        owner.routing.own(partition, engine());
        other.routing.follow(partition, &owner.addr);
    }
    (a, b)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_call_runs_at_its_queues_partition_owner_and_lists_gather_every_owner() {
    let (a, b) = two_owners().await;
    let keys: Vec<QueueKey> = (0..4).map(|p| in_partition(p, 4, 0)).collect();
    for (n, key) in keys.iter().enumerate() {
        // Every other queue created through the node that does not own it.
        let entry = if n % 2 == 0 { &a } else { &b };
        entry
            .dispatch
            .create_queue(key.clone(), QueueConfig::default())
            .await
            .expect("created at its owner");
    }
    for (partition, key) in keys.iter().enumerate() {
        let owner = if partition < 2 { &a } else { &b };
        let engine = owner
            .routing
            .engine(partition as u32)
            .expect("the owner's engine");
        assert!(
            engine.queue_exists(key),
            "{key:?} lives at its partition's owner"
        );
        b.dispatch
            .send(key, vec![NewMessage::new("x")])
            .await
            .expect("sent through b");
        assert_eq!(engine.stats(key).unwrap().visible, 1);
    }
    let mut expected = keys.clone();
    expected.sort();
    for entry in [&a, &b] {
        let listed: Vec<QueueKey> = entry
            .dispatch
            .list_queues("ns", "")
            .await
            .expect("every owner answers")
            .into_iter()
            .map(|info| info.key)
            .collect();
        assert_eq!(
            listed, expected,
            "one list, every partition's queues, in order"
        );
        let overview = entry
            .dispatch
            .overview()
            .await
            .expect("every owner answers");
        assert_eq!(overview.len(), 4);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_list_fails_rather_than_answer_for_part_of_the_queues() {
    let (a, b) = two_owners().await;
    b.routing.nobody(3);
    let listed = a.dispatch.list_queues("ns", "").await;
    assert!(
        unavailable(&listed),
        "b no longer owns partition 3, which a still routes to it: {listed:?}"
    );
    a.routing.nobody(3);
    let listed = a.dispatch.list_queues("ns", "").await;
    assert!(unavailable(&listed), "partition 3 has no owner: {listed:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_follows_its_partition_to_the_next_owner_instead_of_failing() {
    let (former, next, entry) = (node(SECRET).await, node(SECRET).await, node(SECRET).await);
    let engine = engine();
    former.routing.own(0, engine.clone());
    entry.routing.follow(0, &former.addr);
    entry.routing.set_reachable(true);
    entry
        .dispatch
        .create_queue(key(), QueueConfig::default())
        .await
        .expect("created at the first owner");
    // The partition moves: its owner lets go, and the entry node learns of the next one a little later.
    former.routing.nobody(0);
    let (routing, addr, moved) = (entry.routing.clone(), next.addr.clone(), engine.clone());
    let next_routing = next.routing.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(300)).await;
        next_routing.own(0, moved);
        routing.follow(0, &addr);
    });
    entry
        .dispatch
        .send(&key(), vec![NewMessage::new("across the move")])
        .await
        .expect("the call waits for the next owner rather than failing");
    assert_eq!(engine.stats(&key()).unwrap().visible, 1);
    // With the database out of reach nothing is on its way: a call fails at once.
    next.routing.nobody(0);
    entry.routing.set_reachable(false);
    let started = std::time::Instant::now();
    let sent = entry
        .dispatch
        .send(&key(), vec![NewMessage::new("x")])
        .await;
    assert!(unavailable(&sent), "{sent:?}");
    // A call that waited for a next owner would wait its whole bound, there being none.
    assert!(
        started.elapsed() < Duration::from_millis(veil_cluster::limits::REROUTE_WAIT_MS_MAX),
        "the call waited {:?} for an owner with the database out of reach",
        started.elapsed()
    );
}

/// HTTP/2's connection preface and an empty SETTINGS frame: what a client sends before anything else.
const PREFACE_AND_SETTINGS: &[u8] =
    b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00";

/// Reads `stream` until the server closes it; how long that took.
fn closed_within(mut stream: std::net::TcpStream, bound: Duration) -> Option<Duration> {
    let started = Instant::now();
    stream
        .set_read_timeout(Some(bound))
        .expect("a read timeout");
    let mut buf = [0u8; 1024];
    loop {
        match stream.read(&mut buf) {
            Ok(0) => return Some(started.elapsed()),
            Ok(_) => {}
            Err(error) if error.kind() == std::io::ErrorKind::ConnectionReset => {
                return Some(started.elapsed())
            }
            Err(_) => return None,
        }
        if started.elapsed() > bound {
            return None;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_that_stops_answering_the_ping_is_closed_within_the_keepalive_timeout() {
    let owner = node(SECRET).await;
    let addr = owner.addr.clone();
    let bound = Duration::from_millis(
        veil_cluster::limits::KEEPALIVE_INTERVAL_MS
            + veil_cluster::limits::KEEPALIVE_TIMEOUT_MS
            + 2_000,
    );
    let closed = tokio::task::spawn_blocking(move || {
        let mut stream = std::net::TcpStream::connect(&addr).expect("connect");
        // A client that speaks HTTP/2 and then goes silent, as a peer whose host vanished (half-open).
        stream.write_all(PREFACE_AND_SETTINGS).expect("preface");
        closed_within(stream, bound)
    })
    .await
    .expect("the reader");
    assert!(
        closed.is_some(),
        "a silent HTTP/2 connection stayed open past {bound:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_that_sends_nothing_is_closed_at_the_first_bytes_deadline() {
    let owner = node(SECRET).await;
    let addr = owner.addr.clone();
    let bound = Duration::from_millis(veil_cluster::limits::FIRST_BYTES_MS_MAX + 2_000);
    let closed = tokio::task::spawn_blocking(move || {
        let stream = std::net::TcpStream::connect(&addr).expect("connect");
        closed_within(stream, bound)
    })
    .await
    .expect("the reader");
    let closed = closed.expect("a silent connection stayed open");
    assert!(
        closed
            >= Duration::from_millis(veil_cluster::limits::FIRST_BYTES_MS_MAX)
                - Duration::from_millis(100)
    );
}

/// A cluster's CA: its certificate and key.
struct Ca {
    cert: rcgen::Certificate,
    key: rcgen::KeyPair,
}

fn ca() -> Ca {
    use rcgen::{BasicConstraints, CertificateParams, IsCa, KeyPair};
    let mut params = CertificateParams::new(Vec::<String>::new()).expect("ca params");
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let key = KeyPair::generate().expect("ca key");
    let cert = params.self_signed(&key).expect("ca");
    Ca { cert, key }
}

/// A node's TLS with a certificate `ca` signed for `name`, its files written into `dir`.
fn cluster_tls(dir: &std::path::Path, ca: &Ca, name: &str) -> Arc<ClusterTls> {
    use rcgen::{CertificateParams, ExtendedKeyUsagePurpose, KeyPair};
    let mut leaf = CertificateParams::new(vec![name.to_owned()]).expect("leaf params");
    leaf.extended_key_usages = vec![
        ExtendedKeyUsagePurpose::ServerAuth,
        ExtendedKeyUsagePurpose::ClientAuth,
    ];
    let leaf_key = KeyPair::generate().expect("leaf key");
    let leaf = leaf.signed_by(&leaf_key, &ca.cert, &ca.key).expect("leaf");
    std::fs::create_dir_all(dir).expect("dir");
    let files = TlsFiles {
        ca: dir.join("ca.pem"),
        cert: veil_http::CertFiles {
            cert: dir.join("cert.pem"),
            key: dir.join("key.pem"),
        },
    };
    std::fs::write(&files.ca, ca.cert.pem()).expect("write");
    std::fs::write(&files.cert.cert, leaf.pem()).expect("write");
    std::fs::write(&files.cert.key, leaf_key.serialize_pem()).expect("write");
    ClusterTls::load(&files).expect("the node's TLS loads")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_tls_a_node_of_the_clusters_ca_is_served_and_one_of_another_ca_or_name_is_not() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cluster_ca = ca();
    let ours = cluster_tls(&dir.path().join("ours"), &cluster_ca, NODE_NAME);
    let owner = node_with(SECRET, Some(ours.clone())).await;
    owner.routing.own(0, engine());
    let follower = node_with(SECRET, Some(ours)).await;
    follower.routing.follow(0, &owner.addr);
    follower
        .dispatch
        .create_queue(key(), QueueConfig::default())
        .await
        .expect("created at the owner over TLS");
    for (who, tls) in [
        (
            "another CA",
            cluster_tls(&dir.path().join("foreign"), &ca(), NODE_NAME),
        ),
        (
            "the cluster's CA but another name",
            cluster_tls(&dir.path().join("named"), &cluster_ca, "not-a-node"),
        ),
    ] {
        let stranger = node_with(SECRET, Some(tls)).await;
        stranger.routing.follow(0, &owner.addr);
        let listed = stranger.dispatch.queue_exists(&key()).await;
        assert!(unavailable(&listed), "a node with {who}: {listed:?}");
    }
    // A plaintext node, token and all, is refused too.
    let plain = node(SECRET).await;
    plain.routing.follow(0, &owner.addr);
    let listed = plain.dispatch.queue_exists(&key()).await;
    assert!(unavailable(&listed), "a plaintext node: {listed:?}");
}
