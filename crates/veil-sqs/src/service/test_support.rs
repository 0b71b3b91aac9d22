//! Setup shared by the service tests: an engine over an in-memory store and a manual clock, the router over
//! it, and whole requests through it in either protocol (no sockets, no sleeping).

use std::sync::Arc;

use axum::body::Body;
use axum::http::{request, HeaderMap, Request, StatusCode};
use axum::Router;
use http_body_util::BodyExt;
use tower::ServiceExt;
use veil_core::memory_store::MemoryStore;
use veil_core::{Engine, ManualClock, ReceiptKey};

use super::{router, SqsConfig};

pub(crate) const START_MS: u64 = 1_700_000_000_000;

/// An engine over an empty in-memory store, and its manual clock at `START_MS`.
pub(crate) fn engine() -> (Arc<Engine>, ManualClock) {
    let clock = ManualClock::new(START_MS);
    let engine = Engine::open(
        Arc::new(MemoryStore::new()),
        Arc::new(clock.clone()),
        ReceiptKey::new([7; 32]),
    )
    .expect("engine opens over an empty store");
    (Arc::new(engine), clock)
}

/// The router over `engine` with the default configuration.
pub(crate) fn app(engine: &Arc<Engine>) -> Router {
    router(engine.clone(), SqsConfig::default())
}

/// A JSON-protocol request for `action`, without its body; `content_type` adds the JSON content type.
pub(crate) fn json_request(action: &str, content_type: bool) -> request::Builder {
    let request = Request::post("/")
        .header("host", "localhost:9324")
        .header("x-amz-target", format!("AmazonSQS.{action}"));
    if content_type {
        request.header("content-type", "application/x-amz-json-1.0")
    } else {
        request
    }
}

/// Sends `request` through `app`: the status, the headers and the body bytes.
pub(crate) async fn send(app: &Router, request: Request<Body>) -> (StatusCode, HeaderMap, Vec<u8>) {
    let response = app.clone().oneshot(request).await.unwrap();
    let status = response.status();
    let headers = response.headers().clone();
    let body = response.into_body().collect().await.unwrap().to_bytes();
    (status, headers, body.to_vec())
}

/// A JSON request for `action` with the JSON content type: the status, the Query error code
/// (`x-amzn-query-error`) if any, and the parsed body.
pub(crate) async fn json_call(
    app: &Router,
    action: &str,
    body: &serde_json::Value,
) -> (StatusCode, Option<String>, serde_json::Value) {
    let request = json_request(action, true)
        .body(Body::from(body.to_string()))
        .unwrap();
    let (status, headers, bytes) = send(app, request).await;
    let query_error = headers
        .get("x-amzn-query-error")
        .map(|value| value.to_str().unwrap().to_string());
    (status, query_error, serde_json::from_slice(&bytes).unwrap())
}

/// A Query request to `path`: the status and the XML text.
pub(crate) async fn query_call(app: &Router, path: &str, form: &str) -> (StatusCode, String) {
    let request = Request::post(path)
        .header("host", "localhost:9324")
        .header("content-type", "application/x-www-form-urlencoded")
        .body(Body::from(form.to_string()))
        .unwrap();
    let (status, _, body) = send(app, request).await;
    (status, String::from_utf8(body).unwrap())
}
