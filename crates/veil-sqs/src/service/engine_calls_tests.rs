//! How many engine calls an SQS operation makes: each is one RPC when the queue lives on another node of a
//! cluster. The router runs over a `Dispatch::Remote` whose transport counts the calls and runs them on an
//! engine, as the owner would (no sockets).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use serde_json::json;
use veil_core::dispatch::{Answer, Call, Remote, Transport};
use veil_core::{Dispatch, Engine, ReceiptKey};

use super::test_support::{self, json_call};
use super::{router, SqsConfig};

const URL: &str = "http://localhost:9324/000000000000/q";

/// Runs every call on `engine` and counts them.
struct Counting {
    engine: Arc<Engine>,
    calls: Arc<AtomicUsize>,
}

impl Transport for Counting {
    fn call(&self, call: Call) -> Answer {
        self.calls.fetch_add(1, Ordering::SeqCst);
        let engine = self.engine.clone();
        Box::pin(async move { Ok(engine.execute(call).await) })
    }
}

async fn counted() -> (axum::Router, Arc<AtomicUsize>) {
    let (engine, clock) = test_support::engine();
    let calls = Arc::new(AtomicUsize::new(0));
    let transport = Counting {
        engine,
        calls: calls.clone(),
    };
    let remote = Remote::new(
        Box::new(transport),
        Arc::new(clock),
        ReceiptKey::new([7; 32]),
    );
    let app = router(Dispatch::Remote(Arc::new(remote)), SqsConfig::default());
    let (status, _, answer) = json_call(
        &app,
        "CreateQueue",
        &json!({ "QueueName": "q", "Attributes": { "MaximumMessageSize": "1024" } }),
    )
    .await;
    assert!(status.is_success(), "{answer}");
    calls.store(0, Ordering::SeqCst);
    (app, calls)
}

#[tokio::test]
async fn a_send_message_is_one_engine_call_its_size_rule_inside() {
    let (app, calls) = counted().await;
    let (status, _, _) = json_call(
        &app,
        "SendMessage",
        &json!({ "QueueUrl": URL, "MessageBody": "one" }),
    )
    .await;
    assert!(status.is_success());
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    // Over the queue's limit: still one call, and AWS's answer.
    let body = "x".repeat(1_025);
    let (status, error, answer) = json_call(
        &app,
        "SendMessage",
        &json!({ "QueueUrl": URL, "MessageBody": body }),
    )
    .await;
    assert_eq!(status.as_u16(), 400);
    assert_eq!(
        error.as_deref(),
        Some("InvalidParameterValue;Sender"),
        "{answer}"
    );
    assert_eq!(
        answer["message"],
        "One or more parameters are invalid. Reason: Message must be shorter than 1024 bytes."
    );
    assert_eq!(calls.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn a_send_message_batch_is_one_engine_call_and_an_oversized_entry_fails_alone() {
    let (app, calls) = counted().await;
    let entries = json!([
        { "Id": "small", "MessageBody": "fits" },
        { "Id": "large", "MessageBody": "x".repeat(1_025) },
    ]);
    let (status, _, answer) = json_call(
        &app,
        "SendMessageBatch",
        &json!({ "QueueUrl": URL, "Entries": entries }),
    )
    .await;
    assert!(status.is_success(), "{answer}");
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    assert_eq!(answer["Successful"][0]["Id"], "small");
    assert_eq!(answer["Failed"][0]["Id"], "large");
    assert_eq!(
        answer["Failed"][0]["Message"],
        "One or more parameters cannot be validated. Reason: Message must be shorter than 1024 bytes."
    );
}
