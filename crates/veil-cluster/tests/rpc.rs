//! The internal RPC over real sockets: a node following another runs every call at the owner, a long poll
//! waits there, and a call without the cluster's token, or to a node that does not own the queues, is
//! refused as unavailable.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use veil_cluster::routing::Routing;
use veil_cluster::token::Token;
use veil_core::dispatch::Remote;
use veil_core::memory_store::MemoryStore;
use veil_core::*;

const SECRET: [u8; 32] = [9; 32];

struct Node {
    routing: Routing,
    dispatch: Dispatch,
    addr: String,
    _stop: watch::Sender<bool>,
}

async fn node(secret: [u8; 32]) -> Node {
    let routing = Routing::new(Token::of(&secret));
    let (listener, addr) = veil_cluster::server::bind("127.0.0.1".parse().expect("an address"))
        .await
        .expect("a port");
    let (stop, stopped) = watch::channel(false);
    tokio::spawn(veil_cluster::server::serve(
        listener,
        routing.clone(),
        Token::of(&secret),
        stopped,
    ));
    let dispatch = Dispatch::Remote(Arc::new(Remote::new(
        Box::new(routing.clone()),
        Arc::new(SystemClock),
        ReceiptKey::new(secret),
    )));
    Node {
        routing,
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
    owner.routing.lead(engine.clone());
    follower.routing.follow(&owner.addr);
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
    owner.routing.lead(engine.clone());
    follower.routing.follow(&owner.addr);
    engine
        .create_queue(key(), QueueConfig::default())
        .await
        .expect("created");
    let polling = {
        let dispatch = follower.dispatch.clone();
        tokio::spawn(async move {
            let options = ReceiveOptions {
                wait_ms: Some(10_000),
                ..ReceiveOptions::new(1)
            };
            dispatch.receive(&key(), options).await
        })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    let started = std::time::Instant::now();
    engine
        .send(&key(), vec![NewMessage::new("wake")])
        .await
        .expect("sent");
    let received = polling.await.expect("the poll ran").expect("received");
    assert_eq!(received.len(), 1);
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "the poll waited {:?} after the send",
        started.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_without_the_clusters_secret_is_refused() {
    let owner = node(SECRET).await;
    let stranger = node([1; 32]).await;
    owner.routing.lead(engine());
    stranger.routing.follow(&owner.addr);
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
async fn a_node_that_does_not_own_the_queues_answers_unavailable_and_never_forwards() {
    let former = node(SECRET).await;
    let follower = node(SECRET).await;
    let elsewhere = node(SECRET).await;
    // `former` believes another node owns the queues; asked directly, it must not pass the call on.
    former.routing.follow(&elsewhere.addr);
    elsewhere.routing.lead(engine());
    follower.routing.follow(&former.addr);
    let listed = follower.dispatch.list_queues("ns", "").await;
    assert!(unavailable(&listed), "{listed:?}");
    let nobody = node(SECRET).await;
    let sent = nobody
        .dispatch
        .send(&key(), vec![NewMessage::new("x")])
        .await;
    assert!(unavailable(&sent), "no route at all: {sent:?}");
}
