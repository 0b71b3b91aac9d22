//! The dispatch facade over a loopback transport that puts every call and reply through postcard, as the
//! cluster's internal RPC does: a remote call is the owner's call, errors included.

use std::sync::Arc;

use super::*;
use crate::clock::ManualClock;
use crate::memory_store::MemoryStore;

const SECRET: [u8; 32] = [7; 32];

/// Encodes each call, runs it on the owner's engine, and decodes its reply: what crosses the wire.
struct Loopback {
    owner: Arc<Engine>,
}

impl Transport for Loopback {
    fn call(&self, call: Call) -> Answer {
        let owner = self.owner.clone();
        Box::pin(async move {
            let bytes = postcard::to_allocvec(&call).expect("a call encodes");
            let call: Call = postcard::from_bytes(&bytes).expect("a call decodes");
            let reply = owner.execute(call).await;
            let bytes = postcard::to_allocvec(&reply).expect("a reply encodes");
            Ok(postcard::from_bytes(&bytes).expect("a reply decodes"))
        })
    }
}

fn owner() -> (Arc<Engine>, ManualClock) {
    let clock = ManualClock::new(1_700_000_000_000);
    let engine = Engine::open(
        Arc::new(MemoryStore::new()),
        Arc::new(clock.clone()),
        ReceiptKey::new(SECRET),
    )
    .expect("the engine opens");
    (Arc::new(engine), clock)
}

/// An owner with the queue `q`, and a node that reaches it remotely.
async fn owner_of_q() -> (Arc<Engine>, ManualClock, Dispatch) {
    let (engine, clock) = owner();
    engine
        .create_queue(key("q"), QueueConfig::default())
        .await
        .expect("created");
    let remote = remote(&engine, &clock);
    (engine, clock, remote)
}

fn remote(owner: &Arc<Engine>, clock: &ManualClock) -> Dispatch {
    Dispatch::Remote(Arc::new(Remote::new(
        Box::new(Loopback {
            owner: owner.clone(),
        }),
        Arc::new(clock.clone()),
        ReceiptKey::new(SECRET),
    )))
}

fn key(name: &str) -> QueueKey {
    QueueKey::new("ns", name)
}

fn immediately(max_messages: usize) -> ReceiveOptions {
    ReceiveOptions {
        wait_ms: Some(0),
        ..ReceiveOptions::new(max_messages)
    }
}

#[tokio::test]
async fn a_message_sent_through_a_remote_node_is_the_owners_message() {
    let (engine, clock) = owner();
    let remote = remote(&engine, &clock);
    remote
        .create_queue(key("q"), QueueConfig::default())
        .await
        .expect("created at the owner");
    let sent = remote
        .send(&key("q"), vec![NewMessage::new("hello")])
        .await
        .expect("sent");
    let local = Dispatch::Local(engine.clone());
    let received = local
        .receive(&key("q"), immediately(10))
        .await
        .expect("received");
    assert_eq!(received.len(), 1);
    assert_eq!(received[0].payload.body.as_ref(), b"hello");
    assert_eq!(received[0].payload.message_id, sent[0].message_id);
    assert_eq!(
        remote.receipt_of_send(&sent[0]),
        engine.receipt_of_send(&sent[0]),
        "every node holds the cluster's receipt key"
    );
}

#[tokio::test]
async fn a_receipt_from_a_remote_receive_settles_the_message_at_the_owner() {
    let (engine, _clock, remote) = owner_of_q().await;
    remote
        .send(&key("q"), vec![NewMessage::new("a"), NewMessage::new("b")])
        .await
        .expect("sent");
    let received = remote
        .receive(&key("q"), immediately(10))
        .await
        .expect("received");
    let receipts: Vec<&str> = received
        .iter()
        .map(|message| {
            message
                .receipt
                .as_deref()
                .expect("a receive gives receipts")
        })
        .collect();
    let deleted = remote
        .delete_batch(&key("q"), &receipts, ReceiptRule::AnyIssued)
        .await
        .expect("deleted");
    assert!(deleted
        .iter()
        .all(|one| matches!(one, Ok(DeleteOutcome::Deleted))));
    assert_eq!(engine.stats(&key("q")).expect("stats").visible, 0);
    assert_eq!(engine.message_count(&key("q")).expect("count"), 0);
}

#[tokio::test]
async fn the_owners_errors_reach_the_caller_as_they_were() {
    let (engine, clock) = owner();
    let remote = remote(&engine, &clock);
    let missing = remote.receive(&key("missing"), immediately(1)).await;
    assert!(
        matches!(missing, Err(EngineError::QueueNotFound(ref queue)) if *queue == key("missing")),
        "{missing:?}"
    );
    let task = remote.move_tasks(&key("missing")).await;
    assert!(
        matches!(task, Err(MoveTaskError::SourceNotFound)),
        "{task:?}"
    );
}

#[tokio::test]
async fn an_owner_past_its_term_answers_every_remote_call_as_unavailable() {
    let (engine, _clock, remote) = owner_of_q().await;
    engine.gate_serving(Box::new(|| false));
    let sent = remote.send(&key("q"), vec![NewMessage::new("late")]).await;
    assert!(
        matches!(sent, Err(EngineError::Store(StoreError::Unavailable(_)))),
        "{sent:?}"
    );
    let listed = remote.list_queues("ns", "").await;
    assert!(
        matches!(listed, Err(EngineError::Store(StoreError::Unavailable(_)))),
        "a call whose reply has no error of its own still fails: {listed:?}"
    );
    assert_eq!(engine.message_count(&key("q")).expect("count"), 0);
}

#[tokio::test]
async fn a_settings_edit_made_away_from_the_owner_is_not_applied_over_one_that_came_between() {
    let (engine, _clock, _remote) = owner_of_q().await;
    let read = engine.queue_info(&key("q")).expect("info").config;
    let mut theirs = read.clone();
    theirs.visibility_timeout_ms = 5_000;
    engine
        .update_queue_config(&key("q"), |config| {
            config.visibility_timeout_ms = 7_000;
            Ok(())
        })
        .await
        .expect("an edit came between");
    let replaced = engine
        .execute(Call::ReplaceConfig {
            key: key("q"),
            expected: Box::new(read),
            config: Box::new(theirs),
        })
        .await;
    assert!(
        matches!(replaced, Reply::Replaced(Ok(None))),
        "{replaced:?}"
    );
    assert_eq!(
        engine
            .queue_info(&key("q"))
            .expect("info")
            .config
            .visibility_timeout_ms,
        7_000
    );
}

#[tokio::test]
async fn a_settings_edit_through_a_remote_node_runs_the_callers_rule_and_lands_at_the_owner() {
    let (engine, _clock, remote) = owner_of_q().await;
    let edited = remote
        .update_queue_config(&key("q"), |config| {
            config.visibility_timeout_ms = 9_000;
            Ok(())
        })
        .await
        .expect("edited");
    assert_eq!(edited.config.visibility_timeout_ms, 9_000);
    assert_eq!(
        engine
            .queue_info(&key("q"))
            .expect("info")
            .config
            .visibility_timeout_ms,
        9_000
    );
    let refused = remote
        .update_queue_config(&key("q"), |_| {
            Err(EngineError::InvalidArgument("the caller's own rule".into()))
        })
        .await;
    assert!(
        matches!(refused, Err(EngineError::InvalidArgument(_))),
        "{refused:?}"
    );
}

#[test]
fn every_call_survives_the_wire() {
    let change = VisibilityChange {
        visibility_ms: 30_000,
        since_receive_ms_max: Some(43_200_000),
        not_past_expiry: true,
        receipts: ReceiptRule::Current,
    };
    let calls = [
        Call::CreateQueue {
            key: key("q"),
            config: QueueConfig::default(),
        },
        Call::Send {
            key: key("q"),
            messages: vec![NewMessage {
                group: Some("g".into()),
                dedup_id: Some("d".into()),
                delay_ms: Some(5),
                ..NewMessage::new(vec![0_u8, 1, 2, 255])
            }],
        },
        Call::Receive {
            key: key("q"),
            options: ReceiveOptions {
                attempt_id: Some("attempt".into()),
                ..immediately(3)
            },
        },
        Call::ChangeVisibilityBatch {
            key: key("q"),
            entries: vec![("receipt".into(), change)],
        },
        Call::Update {
            key: key("q"),
            receipt: "r".into(),
            change,
            new_body: Some(Bytes::from_static(b"new")),
        },
        Call::ListQueues {
            namespace: "ns".into(),
            prefix: "p".into(),
        },
        Call::Overview,
    ];
    for call in calls {
        let bytes = postcard::to_allocvec(&call).expect("encodes");
        let decoded: Call = postcard::from_bytes(&bytes).expect("decodes");
        assert_eq!(decoded, call);
    }
}

#[tokio::test]
async fn an_engine_past_its_term_answers_no_operation_from_memory_whoever_calls_it() {
    let (engine, _clock, _remote) = owner_of_q().await;
    engine.gate_serving(Box::new(|| false));
    let local = Dispatch::Local(engine.clone());
    let overview = local.overview().await;
    assert!(
        matches!(
            overview,
            Err(EngineError::Store(StoreError::Unavailable(_)))
        ),
        "the admin API's overview: {overview:?}"
    );
    let received = local.receive(&key("q"), immediately(1)).await;
    assert!(
        matches!(
            received,
            Err(EngineError::Store(StoreError::Unavailable(_)))
        ),
        "a receive of an open stream: {received:?}"
    );
}
