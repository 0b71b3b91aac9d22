//! Service tests: whole requests through `router(...).oneshot(...)` over an engine with an in-memory store and
//! a manual clock (no sockets, no sleeping). Each test is named after the rule it checks.

use std::sync::Arc;

use axum::body::Body;
use axum::http::{HeaderMap, Request, StatusCode};
use axum::Router;
use http_body_util::BodyExt;
use tower::ServiceExt;
use veil_core::memory_store::MemoryStore;
use veil_core::{Engine, ManualClock, Permission, ReceiptKey};

use super::*;
use crate::auth::{self, SignedRequest};
use crate::codec::xml::{self, Element};
use crate::entra;
use veil_telemetry::{Code, Protocol};

const START_MS: u64 = 1_700_000_000_000;
const ACCOUNT: &str = "/devstoreaccount1";

struct Harness {
    app: Router,
    clock: ManualClock,
    engine: Arc<Engine>,
}

fn harness_with(config: AzureConfig) -> Harness {
    let clock = ManualClock::new(START_MS);
    let engine = Arc::new(
        Engine::open(
            Arc::new(MemoryStore::new()),
            Arc::new(clock.clone()),
            ReceiptKey::new([7; 32]),
        )
        .expect("engine opens over an empty store"),
    );
    Harness {
        app: router(engine.clone(), config),
        clock,
        engine,
    }
}

/// Verification off: most tests are about queue behaviour, not signatures.
fn harness() -> Harness {
    harness_with(AzureConfig {
        verify_auth: false,
        ..AzureConfig::default()
    })
}

struct Reply {
    status: StatusCode,
    headers: HeaderMap,
    body: String,
}

impl Reply {
    fn xml(&self) -> Element {
        xml::parse(self.body.as_bytes())
            .unwrap_or_else(|e| panic!("not XML ({e:?}): {}", self.body))
    }

    fn header(&self, name: &str) -> &str {
        self.headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
    }

    fn error_code(&self) -> String {
        self.xml()
            .child_text("Code")
            .unwrap_or_default()
            .to_string()
    }

    fn messages(&self) -> Vec<Element> {
        self.xml().children_named("QueueMessage").cloned().collect()
    }
}

fn field<'a>(message: &'a Element, name: &str) -> &'a str {
    message.child_text(name).unwrap_or_default()
}

fn message_body(text: &str) -> String {
    format!("<?xml version='1.0' encoding='utf-8'?><QueueMessage><MessageText>{text}</MessageText></QueueMessage>")
}

impl Harness {
    async fn call(&self, request: Request<Body>) -> Reply {
        let response = self.app.clone().oneshot(request).await.unwrap();
        let status = response.status();
        let headers = response.headers().clone();
        let body = response.into_body().collect().await.unwrap().to_bytes();
        Reply {
            status,
            headers,
            body: String::from_utf8(body.to_vec()).unwrap(),
        }
    }

    async fn send(&self, method: &str, path: &str, body: &str) -> Reply {
        self.send_with(method, path, body, &[]).await
    }

    async fn send_with(
        &self,
        method: &str,
        path: &str,
        body: &str,
        headers: &[(&str, &str)],
    ) -> Reply {
        let mut request = Request::builder()
            .method(method)
            .uri(format!("{ACCOUNT}{path}"))
            .header("host", "127.0.0.1:10001")
            .header("x-ms-version", "2026-04-06");
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        self.call(request.body(Body::from(body.to_string())).unwrap())
            .await
    }

    async fn create(&self, queue: &str) {
        let reply = self.send("PUT", &format!("/{queue}"), "").await;
        assert_eq!(reply.status, StatusCode::CREATED, "{}", reply.body);
    }

    async fn put(&self, queue: &str, text: &str, query: &str) -> Element {
        let reply = self
            .send(
                "POST",
                &format!("/{queue}/messages{query}"),
                &message_body(text),
            )
            .await;
        assert_eq!(reply.status, StatusCode::CREATED, "{}", reply.body);
        reply.messages().remove(0)
    }

    async fn get(&self, queue: &str, query: &str) -> Vec<Element> {
        let reply = self
            .send("GET", &format!("/{queue}/messages{query}"), "")
            .await;
        assert_eq!(reply.status, StatusCode::OK, "{}", reply.body);
        reply.messages()
    }

    async fn peek(&self, queue: &str) -> Vec<Element> {
        self.get(queue, "?peekonly=true&numofmessages=32").await
    }

    async fn delete_message(&self, queue: &str, id: &str, receipt: &str) -> Reply {
        self.send(
            "DELETE",
            &format!("/{queue}/messages/{id}?popreceipt={receipt}"),
            "",
        )
        .await
    }

    async fn update(
        &self,
        queue: &str,
        id: &str,
        receipt: &str,
        visibility_s: u64,
        text: Option<&str>,
    ) -> Reply {
        let body = text.map(message_body).unwrap_or_default();
        self.send(
            "PUT",
            &format!(
                "/{queue}/messages/{id}?popreceipt={receipt}&visibilitytimeout={visibility_s}"
            ),
            &body,
        )
        .await
    }

    /// `x-ms-approximate-messages-count`, which counts hidden and delayed messages too: a delete is checked
    /// with it, not with a get that would not see a hidden message anyway.
    async fn approximate_count(&self, queue: &str) -> String {
        let reply = self
            .send("HEAD", &format!("/{queue}?comp=metadata"), "")
            .await;
        assert_eq!(reply.status, StatusCode::OK, "{}", reply.body);
        reply.header("x-ms-approximate-messages-count").to_string()
    }

    fn advance_s(&self, seconds: u64) {
        self.clock.advance_ms(seconds * 1_000);
    }
}

#[tokio::test]
async fn create_is_201_then_204_with_the_same_metadata_and_409_with_different() {
    let h = harness();
    let color = [("x-ms-meta-color", "blue")];
    assert_eq!(
        h.send_with("PUT", "/orders", "", &color).await.status,
        StatusCode::CREATED
    );
    assert_eq!(
        h.send_with("PUT", "/orders", "", &color).await.status,
        StatusCode::NO_CONTENT
    );
    let reply = h
        .send_with("PUT", "/orders", "", &[("x-ms-meta-color", "red")])
        .await;
    assert_eq!(reply.status, StatusCode::CONFLICT);
    assert_eq!(reply.error_code(), "QueueAlreadyExists");
    assert_eq!(reply.header("x-ms-error-code"), "QueueAlreadyExists");
}

#[tokio::test]
async fn every_response_carries_request_id_version_date_and_the_client_request_id() {
    let h = harness();
    let reply = h
        .send_with(
            "PUT",
            "/orders",
            "",
            &[("x-ms-client-request-id", "abc-123")],
        )
        .await;
    assert!(!reply.header("x-ms-request-id").is_empty());
    assert_eq!(reply.header("x-ms-version"), "2026-04-06");
    assert_eq!(reply.header("date"), "Tue, 14 Nov 2023 22:13:20 GMT");
    assert_eq!(reply.header("x-ms-client-request-id"), "abc-123");
    let missing = h.send("GET", "/nothere?comp=metadata", "").await;
    assert_eq!(missing.status, StatusCode::NOT_FOUND);
    assert_eq!(missing.header("x-ms-error-code"), "QueueNotFound");
    assert!(!missing.header("x-ms-request-id").is_empty());
}

#[tokio::test]
async fn get_hides_a_message_and_peek_does_not() {
    let h = harness();
    h.create("orders").await;
    let put = h.put("orders", "hello &amp; bye", "").await;
    assert!(!field(&put, "PopReceipt").is_empty());
    assert_eq!(field(&put, "TimeNextVisible"), field(&put, "InsertionTime"));
    let peeked = h.peek("orders").await;
    assert_eq!(peeked.len(), 1);
    assert_eq!(field(&peeked[0], "MessageText"), "hello & bye");
    assert_eq!(field(&peeked[0], "DequeueCount"), "0");
    assert!(
        peeked[0].child("PopReceipt").is_none(),
        "peek issues no receipt"
    );
    assert_eq!(h.peek("orders").await.len(), 1, "peek changes nothing");

    let got = h.get("orders", "?visibilitytimeout=10").await;
    assert_eq!(got.len(), 1);
    assert_eq!(field(&got[0], "MessageId"), field(&put, "MessageId"));
    assert_eq!(field(&got[0], "DequeueCount"), "1");
    assert_eq!(
        field(&got[0], "TimeNextVisible"),
        crate::time::rfc1123(START_MS + 10_000)
    );
    assert!(h.peek("orders").await.is_empty(), "hidden from peek");
    assert!(h.get("orders", "").await.is_empty(), "hidden from get");
    h.advance_s(10);
    let again = h.get("orders", "").await;
    assert_eq!(field(&again[0], "DequeueCount"), "2");
}

#[tokio::test]
async fn update_rotates_the_pop_receipt_and_the_old_one_gets_404() {
    let h = harness();
    h.create("orders").await;
    h.put("orders", "v1", "").await;
    let got = h.get("orders", "?visibilitytimeout=30").await.remove(0);
    let (id, first) = (field(&got, "MessageId"), field(&got, "PopReceipt"));
    h.advance_s(5);
    let updated = h.update("orders", id, first, 60, Some("v2")).await;
    assert_eq!(updated.status, StatusCode::NO_CONTENT, "{}", updated.body);
    let second = updated.header("x-ms-popreceipt").to_string();
    assert_ne!(second, first);
    assert_eq!(
        updated.header("x-ms-time-next-visible"),
        crate::time::rfc1123(START_MS + 65_000)
    );

    let stale = h.delete_message("orders", id, first).await;
    assert_eq!(stale.status, StatusCode::NOT_FOUND);
    assert_eq!(stale.error_code(), "MessageNotFound");
    let stale_update = h.update("orders", id, first, 1, None).await;
    assert_eq!(stale_update.status, StatusCode::NOT_FOUND);

    h.advance_s(60);
    assert_eq!(field(&h.peek("orders").await[0], "MessageText"), "v2");
    assert_eq!(
        h.delete_message("orders", id, &second).await.status,
        StatusCode::NO_CONTENT
    );
    assert!(h.peek("orders").await.is_empty());
}

#[tokio::test]
async fn delete_after_the_visibility_lapsed_but_before_a_new_get_succeeds() {
    let h = harness();
    h.create("orders").await;
    h.put("orders", "x", "").await;
    let got = h.get("orders", "?visibilitytimeout=1").await.remove(0);
    h.advance_s(5);
    assert_eq!(h.peek("orders").await.len(), 1, "visible again");
    let reply = h
        .delete_message(
            "orders",
            field(&got, "MessageId"),
            field(&got, "PopReceipt"),
        )
        .await;
    assert_eq!(reply.status, StatusCode::NO_CONTENT, "{}", reply.body);
    assert_eq!(h.approximate_count("orders").await, "0", "deleted");
}

#[tokio::test]
async fn a_receipt_after_a_new_get_is_stale() {
    let h = harness();
    h.create("orders").await;
    h.put("orders", "x", "").await;
    let first = h.get("orders", "?visibilitytimeout=1").await.remove(0);
    h.advance_s(2);
    h.get("orders", "").await;
    let reply = h
        .delete_message(
            "orders",
            field(&first, "MessageId"),
            field(&first, "PopReceipt"),
        )
        .await;
    assert_eq!(reply.status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn the_put_receipt_can_update_and_delete_before_any_get() {
    let h = harness();
    h.create("orders").await;
    let put = h.put("orders", "x", "").await;
    let updated = h
        .update(
            "orders",
            field(&put, "MessageId"),
            field(&put, "PopReceipt"),
            0,
            Some("y"),
        )
        .await;
    assert_eq!(updated.status, StatusCode::NO_CONTENT, "{}", updated.body);
    let reply = h
        .delete_message(
            "orders",
            field(&put, "MessageId"),
            updated.header("x-ms-popreceipt"),
        )
        .await;
    assert_eq!(reply.status, StatusCode::NO_CONTENT);
    assert_eq!(h.approximate_count("orders").await, "0", "deleted");
}

#[tokio::test]
async fn a_receipt_used_with_another_messages_id_is_404() {
    let h = harness();
    h.create("orders").await;
    let a = h.put("orders", "a", "").await;
    let b = h.put("orders", "b", "").await;
    let reply = h
        .delete_message("orders", field(&b, "MessageId"), field(&a, "PopReceipt"))
        .await;
    assert_eq!(reply.status, StatusCode::NOT_FOUND);
    assert_eq!(reply.error_code(), "MessageNotFound");
    assert_eq!(h.peek("orders").await.len(), 2, "neither was deleted");
}

#[tokio::test]
async fn a_pop_receipt_veil_never_issued_is_400_invalid_query_parameter_value() {
    let h = harness();
    h.create("orders").await;
    let put = h.put("orders", "a", "").await;
    let id = field(&put, "MessageId");
    // The right message id, and an engine receipt of the right shape whose MAC Veil never computed.
    let issued = field(&put, "PopReceipt");
    let forged = format!("{}{}", &issued[..issued.len() - 59], "A".repeat(59));
    let reply = h.delete_message("orders", id, &forged).await;
    assert_eq!(reply.status, StatusCode::BAD_REQUEST, "{}", reply.body);
    assert_eq!(reply.error_code(), "InvalidQueryParameterValue");
    assert_eq!(
        reply.xml().child_text("QueryParameterName"),
        Some("popreceipt")
    );
}

#[tokio::test]
async fn update_cannot_push_visibility_past_the_messages_expiry() {
    let h = harness();
    h.create("orders").await;
    h.put("orders", "x", "?messagettl=60").await;
    let got = h.get("orders", "").await.remove(0);
    let reply = h
        .update(
            "orders",
            field(&got, "MessageId"),
            field(&got, "PopReceipt"),
            120,
            None,
        )
        .await;
    assert_eq!(reply.status, StatusCode::BAD_REQUEST);
    assert_eq!(reply.error_code(), "OutOfRangeQueryParameterValue");
}

#[tokio::test]
async fn messagettl_minus_one_never_expires_and_initial_invisibility_delays_the_message() {
    let h = harness();
    h.create("orders").await;
    let forever = h.put("orders", "forever", "?messagettl=-1").await;
    assert_eq!(
        field(&forever, "ExpirationTime"),
        "Fri, 31 Dec 9999 23:59:59 GMT"
    );
    let later = h.put("orders", "later", "?visibilitytimeout=20").await;
    assert_eq!(
        field(&later, "TimeNextVisible"),
        crate::time::rfc1123(START_MS + 20_000)
    );
    let short = h.put("orders", "short", "?messagettl=5").await;
    assert_eq!(
        field(&short, "ExpirationTime"),
        crate::time::rfc1123(START_MS + 5_000)
    );
    let visible: Vec<String> = h
        .peek("orders")
        .await
        .iter()
        .map(|m| field(m, "MessageText").to_string())
        .collect();
    assert_eq!(visible, vec!["forever", "short"]);
    h.advance_s(20);
    let visible: Vec<String> = h
        .peek("orders")
        .await
        .iter()
        .map(|m| field(m, "MessageText").to_string())
        .collect();
    assert_eq!(
        visible,
        vec!["forever", "later"],
        "short expired, later became visible"
    );
}

#[tokio::test]
async fn get_returns_messages_in_time_next_visible_order() {
    let h = harness();
    h.create("orders").await;
    h.put("orders", "late", "?visibilitytimeout=5").await;
    h.put("orders", "early", "?visibilitytimeout=2").await;
    h.put("orders", "now", "").await;
    h.advance_s(10);
    let texts: Vec<String> = h
        .get("orders", "?numofmessages=32")
        .await
        .iter()
        .map(|m| field(m, "MessageText").to_string())
        .collect();
    assert_eq!(texts, vec!["now", "early", "late"]);
}

#[tokio::test]
async fn metadata_replaces_all_and_reports_the_approximate_count_including_hidden() {
    let h = harness();
    h.create("orders").await;
    let set = h
        .send_with(
            "PUT",
            "/orders?comp=metadata",
            "",
            &[("x-ms-meta-a", "1"), ("x-ms-meta-b", "2")],
        )
        .await;
    assert_eq!(set.status, StatusCode::NO_CONTENT);
    h.send_with("PUT", "/orders?comp=metadata", "", &[("x-ms-meta-c", "3")])
        .await;
    h.put("orders", "x", "").await;
    h.put("orders", "y", "?visibilitytimeout=60").await;
    h.get("orders", "").await;
    let reply = h.send("GET", "/orders?comp=metadata", "").await;
    assert_eq!(reply.status, StatusCode::OK);
    assert_eq!(reply.header("x-ms-meta-c"), "3");
    assert!(reply.headers.get("x-ms-meta-a").is_none());
    assert_eq!(reply.header("x-ms-approximate-messages-count"), "2");
}

#[tokio::test]
async fn clear_deletes_every_message_and_delete_queue_removes_it() {
    let h = harness();
    h.create("orders").await;
    h.put("orders", "x", "").await;
    assert_eq!(
        h.send("DELETE", "/orders/messages", "").await.status,
        StatusCode::NO_CONTENT
    );
    assert!(h.peek("orders").await.is_empty());
    assert_eq!(
        h.send("DELETE", "/orders", "").await.status,
        StatusCode::NO_CONTENT
    );
    let reply = h.send("GET", "/orders/messages", "").await;
    assert_eq!(reply.status, StatusCode::NOT_FOUND);
    assert_eq!(reply.error_code(), "QueueNotFound");
}

#[tokio::test]
async fn list_queues_pages_with_markers_and_shows_metadata_on_request() {
    let h = harness();
    for name in ["alpha", "beta", "gamma"] {
        h.send_with("PUT", &format!("/{name}"), "", &[("x-ms-meta-n", name)])
            .await;
    }
    let first = h
        .send("GET", "/?comp=list&maxresults=2&include=metadata", "")
        .await
        .xml();
    let names: Vec<&str> = first
        .child("Queues")
        .unwrap()
        .children_named("Queue")
        .map(|q| q.child_text("Name").unwrap())
        .collect();
    assert_eq!(names, vec!["alpha", "beta"]);
    let marker = first.child_text("NextMarker").unwrap().to_string();
    assert_eq!(marker, "/devstoreaccount1/gamma");
    let second = h
        .send(
            "GET",
            &format!("/?comp=list&maxresults=2&marker={marker}"),
            "",
        )
        .await
        .xml();
    let queue = second.child("Queues").unwrap().child("Queue").unwrap();
    assert_eq!(queue.child_text("Name"), Some("gamma"));
    assert!(queue.child("Metadata").is_none());
    assert_eq!(second.child_text("NextMarker"), Some(""));
    let prefixed = h
        .send("GET", "/?comp=list&prefix=be&include=metadata", "")
        .await
        .xml();
    let queue = prefixed.child("Queues").unwrap().child("Queue").unwrap();
    assert_eq!(
        queue.child("Metadata").unwrap().child_text("n"),
        Some("beta")
    );
}

#[tokio::test]
async fn acl_round_trips_durably_in_the_queue_settings() {
    let h = harness();
    h.create("orders").await;
    let body = "<SignedIdentifiers><SignedIdentifier><Id>readers</Id><AccessPolicy><Expiry>2030-01-01T00:00:00Z</Expiry><Permission>r</Permission></AccessPolicy></SignedIdentifier></SignedIdentifiers>";
    assert_eq!(
        h.send("PUT", "/orders?comp=acl", body).await.status,
        StatusCode::NO_CONTENT
    );
    let acl = h.send("GET", "/orders?comp=acl", "").await.xml();
    let identifier = acl.child("SignedIdentifier").unwrap();
    assert_eq!(identifier.child_text("Id"), Some("readers"));
    assert_eq!(
        identifier
            .child("AccessPolicy")
            .unwrap()
            .child_text("Permission"),
        Some("r")
    );
    let stored = h
        .engine
        .queue_info(&QueueKey::new(DEFAULT_NAMESPACE, "orders"))
        .unwrap();
    assert!(stored.config.protocol_settings[ACL_SETTING].contains("readers"));
}

#[tokio::test]
async fn service_properties_merge_by_section_and_cors_rules_answer_preflight() {
    let h = harness();
    let preflight = |origin: &'static str| {
        Request::builder()
            .method("OPTIONS")
            .uri("/devstoreaccount1/orders/messages")
            .header("host", "127.0.0.1:10001")
            .header("origin", origin)
            .header("access-control-request-method", "GET")
            .body(Body::empty())
            .unwrap()
    };
    let refused = h.call(preflight("https://app.example")).await;
    assert_eq!(refused.status, StatusCode::FORBIDDEN);
    assert_eq!(refused.error_code(), "CorsPreflightFailure");
    let cors = "<?xml version='1.0' encoding='utf-8'?><StorageServiceProperties><Cors><CorsRule><AllowedOrigins>https://app.example</AllowedOrigins><AllowedMethods>GET,PUT</AllowedMethods><AllowedHeaders>x-ms-*</AllowedHeaders><ExposedHeaders>x-ms-*</ExposedHeaders><MaxAgeInSeconds>600</MaxAgeInSeconds></CorsRule></Cors></StorageServiceProperties>";
    let set = h
        .send("PUT", "/?restype=service&comp=properties", cors)
        .await;
    assert_eq!(set.status, StatusCode::ACCEPTED, "{}", set.body);
    let properties = h
        .send("GET", "/?restype=service&comp=properties", "")
        .await
        .xml();
    assert!(
        properties.child("Logging").is_some(),
        "untouched section kept"
    );
    assert!(properties
        .child("Cors")
        .unwrap()
        .child("CorsRule")
        .is_some());
    let allowed = h.call(preflight("https://app.example")).await;
    assert_eq!(allowed.status, StatusCode::OK);
    assert_eq!(
        allowed.header("access-control-allow-origin"),
        "https://app.example"
    );
    assert_eq!(allowed.header("access-control-max-age"), "600");
}

#[tokio::test]
async fn service_stats_answer_on_the_secondary_account() {
    let h = harness();
    let request = Request::get("/devstoreaccount1-secondary/?restype=service&comp=stats")
        .header("host", "127.0.0.1:10001")
        .body(Body::empty())
        .unwrap();
    let reply = h.call(request).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.body);
    assert_eq!(
        reply
            .xml()
            .child("GeoReplication")
            .unwrap()
            .child_text("Status"),
        Some("live")
    );
}

#[tokio::test]
async fn reserved_metadata_sets_a_poison_queue_that_receives_after_the_max_dequeue_count() {
    let h = harness();
    let reply = h
        .send_with(
            "PUT",
            "/jobs",
            "",
            &[("x-ms-meta-veilmaxdequeuecount", "2")],
        )
        .await;
    assert_eq!(reply.status, StatusCode::CREATED, "{}", reply.body);
    h.put("jobs", "poisonous", "").await;
    for _ in 0..2 {
        assert_eq!(h.get("jobs", "?visibilitytimeout=1").await.len(), 1);
        h.advance_s(1);
    }
    assert!(
        h.get("jobs", "").await.is_empty(),
        "the third get moves it aside"
    );
    let poisoned = h.peek("jobs-poison").await;
    assert_eq!(poisoned.len(), 1);
    assert_eq!(field(&poisoned[0], "MessageText"), "poisonous");
    assert_eq!(field(&poisoned[0], "DequeueCount"), "2");
}

#[tokio::test]
async fn reserved_metadata_can_name_the_poison_queue_and_removing_it_removes_the_policy() {
    let h = harness();
    h.create("jobs").await;
    let set = h
        .send_with(
            "PUT",
            "/jobs?comp=metadata",
            "",
            &[
                ("x-ms-meta-veilmaxdequeuecount", "1"),
                ("x-ms-meta-veilpoisonqueue", "jobs-dead"),
            ],
        )
        .await;
    assert_eq!(set.status, StatusCode::NO_CONTENT, "{}", set.body);
    let key = QueueKey::new(DEFAULT_NAMESPACE, "jobs");
    let policy = h
        .engine
        .queue_info(&key)
        .unwrap()
        .config
        .redrive_policy
        .unwrap();
    assert_eq!(policy.dead_letter_queue.name, "jobs-dead");
    assert_eq!(policy.max_receive_count, 1);
    assert!(h
        .engine
        .queue_info(&QueueKey::new(DEFAULT_NAMESPACE, "jobs-dead"))
        .is_ok());
    h.send_with(
        "PUT",
        "/jobs?comp=metadata",
        "",
        &[("x-ms-meta-other", "1")],
    )
    .await;
    assert!(h
        .engine
        .queue_info(&key)
        .unwrap()
        .config
        .redrive_policy
        .is_none());
    let bad = h
        .send_with(
            "PUT",
            "/jobs?comp=metadata",
            "",
            &[("x-ms-meta-veilmaxdequeuecount", "many")],
        )
        .await;
    assert_eq!(bad.status, StatusCode::BAD_REQUEST);
    assert_eq!(bad.error_code(), "InvalidMetadata");
}

#[tokio::test]
async fn the_server_default_poison_policy_applies_to_queues_created_through_azure() {
    let h = harness_with(AzureConfig {
        verify_auth: false,
        poison_default: Some(PoisonDefault {
            max_dequeue_count: 5,
        }),
        ..AzureConfig::default()
    });
    h.create("work").await;
    let policy = h
        .engine
        .queue_info(&QueueKey::new(DEFAULT_NAMESPACE, "work"))
        .unwrap()
        .config
        .redrive_policy
        .unwrap();
    assert_eq!(policy.dead_letter_queue.name, "work-poison");
    assert_eq!(policy.max_receive_count, 5);
    let poison = h
        .engine
        .queue_info(&QueueKey::new(DEFAULT_NAMESPACE, "work-poison"))
        .unwrap();
    assert!(
        poison.config.redrive_policy.is_none(),
        "a poison queue has no poison queue"
    );
    let off = h
        .send_with(
            "PUT",
            "/manual",
            "",
            &[("x-ms-meta-veilmaxdequeuecount", "0")],
        )
        .await;
    assert_eq!(off.status, StatusCode::CREATED);
    assert!(h
        .engine
        .queue_info(&QueueKey::new(DEFAULT_NAMESPACE, "manual"))
        .unwrap()
        .config
        .redrive_policy
        .is_none());
}

#[tokio::test]
async fn other_accounts_are_separate_namespaces() {
    let h = harness();
    h.create("orders").await;
    let request = Request::put("/otheraccount/orders")
        .header("host", "127.0.0.1:10001")
        .body(Body::empty())
        .unwrap();
    assert_eq!(h.call(request).await.status, StatusCode::CREATED);
    assert!(h
        .engine
        .queue_info(&QueueKey::new("azure:otheraccount", "orders"))
        .is_ok());
}

// ----- authentication -----

fn signed_request(method: &str, path_and_query: &str, key: &[u8], body: &str) -> Request<Body> {
    let mut headers = HeaderMap::new();
    headers.insert("x-ms-version", "2026-04-06".parse().unwrap());
    headers.insert(
        "x-ms-date",
        "Tue, 14 Nov 2023 22:13:20 GMT".parse().unwrap(),
    );
    if !body.is_empty() {
        headers.insert("content-type", "application/xml".parse().unwrap());
        headers.insert("content-length", body.len().to_string().parse().unwrap());
    }
    let (path, query) = match path_and_query.split_once('?') {
        Some((p, q)) => (p, Some(q)),
        None => (path_and_query, None),
    };
    let signed = SignedRequest {
        method,
        path,
        query,
        headers: &headers,
    };
    let text = auth::string_to_sign(&signed, "devstoreaccount1", auth::HeaderOrder::Service);
    let authorization = format!("SharedKey devstoreaccount1:{}", auth::sign(key, &text));
    let mut request = Request::builder()
        .method(method)
        .uri(path_and_query)
        .header("host", "127.0.0.1:10001")
        .header("authorization", authorization);
    for (name, value) in &headers {
        request = request.header(name, value);
    }
    request.body(Body::from(body.to_string())).unwrap()
}

#[tokio::test]
async fn shared_key_with_the_account_key_works_and_a_wrong_key_is_403() {
    let h = harness_with(AzureConfig::default());
    let key = auth::decode_key(limits::DEV_ACCOUNT_KEY).unwrap();
    let reply = h
        .call(signed_request("PUT", "/devstoreaccount1/orders", &key, ""))
        .await;
    assert_eq!(reply.status, StatusCode::CREATED, "{}", reply.body);
    let reply = h
        .call(signed_request(
            "POST",
            "/devstoreaccount1/orders/messages?messagettl=-1",
            &key,
            &message_body("x"),
        ))
        .await;
    assert_eq!(reply.status, StatusCode::CREATED, "{}", reply.body);
    let reply = h
        .call(signed_request(
            "GET",
            "/devstoreaccount1/orders/messages?peekonly=true",
            b"wrong key",
            "",
        ))
        .await;
    assert_eq!(reply.status, StatusCode::FORBIDDEN);
    assert_eq!(reply.error_code(), "AuthenticationFailed");
    assert!(reply.xml().child("AuthenticationErrorDetail").is_some());
}

#[tokio::test]
async fn a_request_without_credentials_is_refused_when_verification_is_on() {
    let h = harness_with(AzureConfig::default());
    let reply = h.send("PUT", "/orders", "").await;
    assert_eq!(reply.status, StatusCode::UNAUTHORIZED);
    assert_eq!(reply.error_code(), "NoAuthenticationInformation");
}

#[tokio::test]
async fn a_queue_sas_grants_only_its_permissions() {
    let h = harness_with(AzureConfig::default());
    let key = auth::decode_key(limits::DEV_ACCOUNT_KEY).unwrap();
    h.call(signed_request("PUT", "/devstoreaccount1/orders", &key, ""))
        .await;
    let sas = auth::Sas {
        version: "2026-04-06".into(),
        permissions: Some("a".into()),
        expiry: Some("2030-01-01T00:00:00Z".into()),
        ..auth::Sas::default()
    };
    let signature = auth::sign(
        &key,
        &auth::queue_sas_string_to_sign("devstoreaccount1", "orders", &sas),
    );
    let token = format!(
        "sv=2026-04-06&sp=a&se=2030-01-01T00%3A00%3A00Z&sig={}",
        percent_encoding::utf8_percent_encode(&signature, percent_encoding::NON_ALPHANUMERIC)
    );
    let put = h
        .send(
            "POST",
            &format!("/orders/messages?{token}"),
            &message_body("via sas"),
        )
        .await;
    assert_eq!(put.status, StatusCode::CREATED, "{}", put.body);
    let peek = h
        .send(
            "GET",
            &format!("/orders/messages?peekonly=true&{token}"),
            "",
        )
        .await;
    assert_eq!(peek.status, StatusCode::FORBIDDEN);
    assert_eq!(peek.error_code(), "AuthorizationPermissionMismatch");
}

// ----- authentication order, service properties, CORS, sip, Shared Key Lite -----

fn dev_key() -> Vec<u8> {
    auth::decode_key(limits::DEV_ACCOUNT_KEY).unwrap()
}

fn encode(text: &str) -> String {
    percent_encoding::utf8_percent_encode(text, percent_encoding::NON_ALPHANUMERIC).to_string()
}

/// The query of a queue SAS for `orders`, signed with `key`.
fn queue_sas_query(sas: &auth::Sas, key: &[u8]) -> String {
    let signature = auth::sign(
        key,
        &auth::queue_sas_string_to_sign("devstoreaccount1", "orders", sas),
    );
    let mut query = format!("sv={}", sas.version);
    for (name, value) in [
        ("sp", &sas.permissions),
        ("st", &sas.start),
        ("se", &sas.expiry),
        ("sip", &sas.ip),
    ] {
        if let Some(value) = value {
            query.push_str(&format!("&{name}={}", encode(value)));
        }
    }
    format!("{query}&sig={}", encode(&signature))
}

fn process_sas(expiry: &str) -> auth::Sas {
    auth::Sas {
        version: "2026-04-06".into(),
        permissions: Some("rp".into()),
        expiry: Some(expiry.into()),
        ..auth::Sas::default()
    }
}

/// A harness with verification on and the queue `orders` created with Shared Key.
async fn verifying_harness() -> Harness {
    let h = harness_with(AzureConfig::default());
    let created = h
        .call(signed_request(
            "PUT",
            "/devstoreaccount1/orders",
            &dev_key(),
            "",
        ))
        .await;
    assert_eq!(created.status, StatusCode::CREATED, "{}", created.body);
    h
}

#[tokio::test]
async fn a_forged_sas_is_refused_before_any_parameter_is_read() {
    let h = verifying_harness().await;
    let forged = queue_sas_query(&process_sas("2030-01-01T00:00:00Z"), b"not the key");
    let reply = h
        .send(
            "GET",
            &format!("/orders/messages?numofmessages=99&{forged}"),
            "",
        )
        .await;
    assert_eq!(reply.status, StatusCode::FORBIDDEN, "{}", reply.body);
    assert_eq!(reply.error_code(), "AuthenticationFailed");
    // A genuine SAS with the right permission does reach parameter validation.
    let genuine = queue_sas_query(&process_sas("2030-01-01T00:00:00Z"), &dev_key());
    let reply = h
        .send(
            "GET",
            &format!("/orders/messages?numofmessages=99&{genuine}"),
            "",
        )
        .await;
    assert_eq!(reply.status, StatusCode::BAD_REQUEST, "{}", reply.body);
    assert_eq!(reply.error_code(), "OutOfRangeQueryParameterValue");
}

#[tokio::test]
async fn an_expired_sas_says_so_and_a_bad_signature_says_that() {
    let h = verifying_harness().await;
    // Valid for one minute from the harness's start (2023-11-14T22:13:20Z).
    let sas = process_sas("2023-11-14T22:14:20Z");
    let query = queue_sas_query(&sas, &dev_key());
    let path = format!("/orders/messages?peekonly=true&{query}");
    assert_eq!(h.send("GET", &path, "").await.status, StatusCode::OK);
    h.advance_s(60);
    let expired = h.send("GET", &path, "").await;
    assert_eq!(expired.status, StatusCode::FORBIDDEN);
    assert_eq!(expired.error_code(), "AuthenticationFailed");
    assert_eq!(
        expired.xml().child_text("AuthenticationErrorDetail"),
        Some(
            "Signature not valid in the specified time frame: Expiry [Tue, 14 Nov 2023 22:14:20 GMT] \
             - Current [Tue, 14 Nov 2023 22:14:20 GMT]"
        )
    );
    let forged = queue_sas_query(&process_sas("2030-01-01T00:00:00Z"), b"not the key");
    let bad = h
        .send(
            "GET",
            &format!("/orders/messages?peekonly=true&{forged}"),
            "",
        )
        .await;
    assert_eq!(bad.error_code(), "AuthenticationFailed");
    let detail = bad
        .xml()
        .child_text("AuthenticationErrorDetail")
        .unwrap()
        .to_string();
    assert!(detail.starts_with("Signature did not match."), "{detail}");
}

fn with_peer(mut request: Request<Body>, peer: &str) -> Request<Body> {
    let addr: std::net::SocketAddr = peer.parse().unwrap();
    request
        .extensions_mut()
        .insert(axum::extract::ConnectInfo(addr));
    request
}

#[tokio::test]
async fn a_sas_with_sip_is_honoured_only_from_an_address_in_its_range() {
    let h = verifying_harness().await;
    let sas = auth::Sas {
        ip: Some("10.1.1.10-10.1.1.20".into()),
        ..process_sas("2030-01-01T00:00:00Z")
    };
    let uri = format!(
        "/devstoreaccount1/orders/messages?peekonly=true&{}",
        queue_sas_query(&sas, &dev_key())
    );
    let request = || {
        Request::get(uri.as_str())
            .header("host", "127.0.0.1:10001")
            .body(Body::empty())
            .unwrap()
    };
    let inside = h.call(with_peer(request(), "10.1.1.15:40000")).await;
    assert_eq!(inside.status, StatusCode::OK, "{}", inside.body);
    let mapped = h
        .call(with_peer(request(), "[::ffff:10.1.1.20]:40000"))
        .await;
    assert_eq!(mapped.status, StatusCode::OK, "{}", mapped.body);
    for outside in ["10.1.1.21:40000", "127.0.0.1:40000"] {
        let reply = h.call(with_peer(request(), outside)).await;
        assert_eq!(reply.status, StatusCode::FORBIDDEN, "{outside}");
        assert_eq!(
            reply.error_code(),
            "AuthorizationSourceIPMismatch",
            "{outside}"
        );
    }
    let unknown = h.call(request()).await;
    assert_eq!(unknown.error_code(), "AuthorizationSourceIPMismatch");
}

/// A request signed with Shared Key Lite as Azure defines it for the Queue service.
fn lite_request(method: &str, path_and_query: &str, key: &[u8]) -> Request<Body> {
    let (path, comp) = match path_and_query.split_once('?') {
        Some((path, query)) => (
            path,
            query
                .split('&')
                .find_map(|p| p.strip_prefix("comp="))
                .map(|c| format!("?comp={c}"))
                .unwrap_or_default(),
        ),
        None => (path_and_query, String::new()),
    };
    let date = "Tue, 14 Nov 2023 22:13:20 GMT";
    let text = format!(
        "{method}\n\n\n\nx-ms-date:{date}\nx-ms-version:2026-04-06\n/devstoreaccount1{path}{comp}"
    );
    Request::builder()
        .method(method)
        .uri(path_and_query)
        .header("host", "127.0.0.1:10001")
        .header("x-ms-date", date)
        .header("x-ms-version", "2026-04-06")
        .header(
            "authorization",
            format!("SharedKeyLite devstoreaccount1:{}", auth::sign(key, &text)),
        )
        .body(Body::empty())
        .unwrap()
}

#[tokio::test]
async fn shared_key_lite_with_the_account_key_works_and_a_wrong_key_is_403() {
    let h = verifying_harness().await;
    let ok = h
        .call(lite_request(
            "GET",
            "/devstoreaccount1/orders?comp=metadata",
            &dev_key(),
        ))
        .await;
    assert_eq!(ok.status, StatusCode::OK, "{}", ok.body);
    let wrong = h
        .call(lite_request(
            "GET",
            "/devstoreaccount1/orders?comp=metadata",
            b"wrong key",
        ))
        .await;
    assert_eq!(wrong.status, StatusCode::FORBIDDEN);
    assert_eq!(wrong.error_code(), "AuthenticationFailed");
}

const PROPERTIES: &str = "/?restype=service&comp=properties";

fn retention_document(days: &str) -> String {
    format!(
        "<StorageServiceProperties><HourMetrics><Version>1.0</Version><Enabled>true</Enabled>\
<IncludeAPIs>false</IncludeAPIs><RetentionPolicy><Enabled>true</Enabled>{days}</RetentionPolicy>\
</HourMetrics></StorageServiceProperties>"
    )
}

fn cors_rule(origins: &str, methods: &str) -> String {
    format!(
        "<CorsRule><AllowedOrigins>{origins}</AllowedOrigins><AllowedMethods>{methods}</AllowedMethods>\
<AllowedHeaders>x-ms-*</AllowedHeaders><ExposedHeaders>x-ms-request-id,x-ms-meta-*</ExposedHeaders>\
<MaxAgeInSeconds>60</MaxAgeInSeconds></CorsRule>"
    )
}

fn cors_document(rules: &[String]) -> String {
    format!(
        "<StorageServiceProperties><Cors>{}</Cors></StorageServiceProperties>",
        rules.concat()
    )
}

#[tokio::test]
async fn set_service_properties_refuses_what_azure_refuses_and_keeps_the_old_document() {
    let h = harness();
    let refused = [
        retention_document("<Days>0</Days>"),
        retention_document("<Days>366</Days>"),
        retention_document(""),
        cors_document(&vec![cors_rule("*", "GET"); 6]),
        cors_document(&[cors_rule("*", "FETCH")]),
    ];
    for document in refused {
        let reply = h.send("PUT", PROPERTIES, &document).await;
        assert_eq!(reply.status, StatusCode::BAD_REQUEST, "{document}");
        assert_eq!(reply.error_code(), "InvalidXmlDocument", "{document}");
        assert!(reply.xml().child("Reason").is_some(), "{}", reply.body);
    }
    let stored = h.send("GET", PROPERTIES, "").await.xml();
    assert_eq!(
        stored.child("HourMetrics").unwrap().child_text("Enabled"),
        Some("false"),
        "nothing refused was kept"
    );
    for document in [
        retention_document("<Days>1</Days>"),
        retention_document("<Days>365</Days>"),
        cors_document(&vec![cors_rule("*", "GET"); 5]),
    ] {
        let reply = h.send("PUT", PROPERTIES, &document).await;
        assert_eq!(
            reply.status,
            StatusCode::ACCEPTED,
            "{document}: {}",
            reply.body
        );
    }
}

fn temporary_dir() -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("veil-azure-test-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[tokio::test]
async fn service_properties_survive_a_new_service_over_the_same_data_dir() {
    let dir = temporary_dir();
    let config = || AzureConfig {
        verify_auth: false,
        data_dir: Some(dir.clone()),
        ..AzureConfig::default()
    };
    let first = harness_with(config());
    let document = cors_document(&[cors_rule("https://app.example", "GET,PUT")]);
    let set = first.send("PUT", PROPERTIES, &document).await;
    assert_eq!(set.status, StatusCode::ACCEPTED, "{}", set.body);
    let retention = first
        .send("PUT", PROPERTIES, &retention_document("<Days>7</Days>"))
        .await;
    assert_eq!(retention.status, StatusCode::ACCEPTED);
    let before = first.send("GET", PROPERTIES, "").await.body;
    drop(first);

    let second = harness_with(config());
    let after = second.send("GET", PROPERTIES, "").await;
    assert_eq!(after.body, before);
    let rule = after
        .xml()
        .child("Cors")
        .unwrap()
        .child("CorsRule")
        .cloned()
        .unwrap();
    assert_eq!(
        rule.child_text("AllowedOrigins"),
        Some("https://app.example")
    );
    assert!(
        !dir.join("azure-service-properties.xml.tmp").exists(),
        "the temporary file was renamed"
    );
    std::fs::remove_dir_all(dir).unwrap();
}

fn with_origin(origin: &str) -> [(&'static str, &str); 1] {
    [("origin", origin)]
}

#[tokio::test]
async fn actual_responses_carry_the_cors_headers_of_the_matching_rule() {
    let h = harness();
    h.create("orders").await;
    let peek = "/orders/messages?peekonly=true";
    let none = h
        .send_with("GET", peek, "", &with_origin("https://app.example"))
        .await;
    assert!(
        none.headers.get("access-control-allow-origin").is_none(),
        "no rules: nothing"
    );
    assert!(none.headers.get("vary").is_none());

    let document = cors_document(&[cors_rule("https://app.example", "GET,PUT")]);
    assert_eq!(
        h.send("PUT", PROPERTIES, &document).await.status,
        StatusCode::ACCEPTED
    );
    let allowed = h
        .send_with("GET", peek, "", &with_origin("https://app.example"))
        .await;
    assert_eq!(allowed.status, StatusCode::OK);
    assert_eq!(
        allowed.header("access-control-allow-origin"),
        "https://app.example"
    );
    assert_eq!(allowed.header("access-control-allow-credentials"), "true");
    assert_eq!(
        allowed.header("access-control-expose-headers"),
        "x-ms-request-id,x-ms-meta-*"
    );
    assert_eq!(allowed.header("vary"), "Origin");

    let stranger = h
        .send_with("GET", peek, "", &with_origin("https://evil.example"))
        .await;
    assert_eq!(
        stranger.status,
        StatusCode::OK,
        "CORS does not authorize or refuse"
    );
    assert!(stranger
        .headers
        .get("access-control-allow-origin")
        .is_none());
    assert_eq!(
        stranger.header("vary"),
        "Origin",
        "caches must not reuse it"
    );

    let other_method = h
        .send_with(
            "DELETE",
            "/orders/messages",
            "",
            &with_origin("https://app.example"),
        )
        .await;
    assert_eq!(other_method.status, StatusCode::NO_CONTENT);
    assert!(other_method
        .headers
        .get("access-control-allow-origin")
        .is_none());
    assert!(
        other_method.headers.get("vary").is_none(),
        "Vary only on GET and HEAD"
    );

    let wildcard = cors_document(&[cors_rule("*", "GET")]);
    assert_eq!(
        h.send("PUT", PROPERTIES, &wildcard).await.status,
        StatusCode::ACCEPTED
    );
    let any = h
        .send_with("GET", peek, "", &with_origin("https://any.example"))
        .await;
    assert_eq!(any.header("access-control-allow-origin"), "*");
    assert!(any
        .headers
        .get("access-control-allow-credentials")
        .is_none());
    assert!(any.headers.get("vary").is_none());
}

// ----- telemetry: request metrics (the code is the HTTP status) and the audit log -----

fn harness_counting(telemetry: &veil_telemetry::Telemetry, verify_auth: bool) -> Harness {
    harness_with(AzureConfig {
        verify_auth,
        telemetry: telemetry.clone(),
        ..AzureConfig::default()
    })
}

#[tokio::test]
async fn each_operation_counts_under_its_name_and_http_status() {
    let telemetry = veil_telemetry::Telemetry::default();
    let h = harness_counting(&telemetry, false);
    h.create("orders").await;
    h.put("orders", "x", "").await;
    let missing = h.send("GET", "/nosuch/messages", "").await;
    assert_eq!(missing.status, StatusCode::NOT_FOUND);
    let count = |operation, status| {
        telemetry.request_count(Protocol::Azure, operation, Code::Status(status))
    };
    assert_eq!(count("CreateQueue", 201), 1);
    assert_eq!(count("PutMessage", 201), 1);
    assert_eq!(count("GetMessages", 404), 1);
    let text = telemetry.encode_text().expect("encodes");
    assert!(
        text.contains(
            r#"veil_requests_total{protocol="azure",operation="GetMessages",code="404"} 1"#
        ),
        "{text}"
    );
}

#[tokio::test]
async fn a_rejected_credential_is_counted_under_its_operation_and_audited() {
    let telemetry = veil_telemetry::Telemetry::default();
    let h = harness_counting(&telemetry, true);
    let (captured, _guard) = veil_telemetry::capture::capture();
    let reply = h.send("PUT", "/orders", "").await;
    assert_eq!(reply.status, StatusCode::UNAUTHORIZED);
    assert_eq!(
        telemetry.request_count(Protocol::Azure, "CreateQueue", Code::Status(401)),
        1
    );
    let audit = captured.audit();
    assert_eq!(audit.len(), 1, "{audit:?}");
    assert_eq!(audit[0].field("action"), "Authenticate");
    assert_eq!(audit[0].field("protocol"), "azure");
    assert_eq!(audit[0].field("identity"), "devstoreaccount1");
    assert_eq!(audit[0].field("queue"), "orders");
    assert_eq!(audit[0].field("outcome"), "NoAuthenticationInformation");
}

#[tokio::test]
async fn clear_delete_and_metadata_changes_are_audited() {
    let telemetry = veil_telemetry::Telemetry::default();
    let h = harness_counting(&telemetry, false);
    h.create("orders").await;
    let (captured, _guard) = veil_telemetry::capture::capture();
    h.put("orders", "x", "").await;
    let cleared = h.send("DELETE", "/orders/messages", "").await;
    assert_eq!(cleared.status, StatusCode::NO_CONTENT);
    let metadata = h
        .send_with(
            "PUT",
            "/orders?comp=metadata",
            "",
            &[("x-ms-meta-team", "a")],
        )
        .await;
    assert_eq!(metadata.status, StatusCode::NO_CONTENT);
    let deleted = h.send("DELETE", "/orders", "").await;
    assert_eq!(deleted.status, StatusCode::NO_CONTENT);
    let missing = h.send("DELETE", "/orders", "").await;
    assert_eq!(missing.status, StatusCode::NOT_FOUND);
    let audit = captured.audit();
    let seen: Vec<(&str, &str, &str, &str)> = audit
        .iter()
        .map(|e| {
            (
                e.field("action"),
                e.field("namespace"),
                e.field("queue"),
                e.field("outcome"),
            )
        })
        .collect();
    assert_eq!(
        seen,
        [
            ("ClearMessages", "default", "orders", "ok"),
            ("SetMetadata", "default", "orders", "ok"),
            ("DeleteQueue", "default", "orders", "ok"),
            ("DeleteQueue", "default", "orders", "QueueNotFound"),
        ]
    );
}

/// A token signed with a throwaway HMAC key: development mode never checks the signature.
fn dev_token(oid: &str, exp_s: u64) -> String {
    #[derive(serde::Serialize)]
    struct Claims<'a> {
        oid: &'a str,
        tid: &'a str,
        exp: u64,
    }
    jsonwebtoken::encode(
        &jsonwebtoken::Header::default(),
        &Claims {
            oid,
            tid: "tenant",
            exp: exp_s,
        },
        &jsonwebtoken::EncodingKey::from_secret(b"anything"),
    )
    .unwrap()
}

fn entra_harness(mode: entra::EntraMode) -> Harness {
    harness_with(AzureConfig {
        entra: EntraConfig {
            mode,
            ..EntraConfig::default()
        },
        delegation_secret: Some(b"test secret".to_vec()),
        ..AzureConfig::default()
    })
}

#[tokio::test]
async fn a_bearer_token_is_401_with_www_authenticate_when_entra_is_off() {
    let h = entra_harness(entra::EntraMode::Off);
    let bearer = format!("Bearer {}", dev_token("me", START_MS / 1000 + 3600));
    let reply = h
        .send_with("PUT", "/orders", "", &[("authorization", &bearer)])
        .await;
    assert_eq!(reply.status, StatusCode::UNAUTHORIZED, "{}", reply.body);
    assert_eq!(reply.error_code(), "InvalidAuthenticationInfo");
    assert_eq!(
        reply.header("www-authenticate"),
        "Bearer authorization_uri=https://login.microsoftonline.com/common/oauth2/authorize resource_id=https://storage.azure.com"
    );
}

#[tokio::test]
async fn dev_mode_takes_any_unexpired_token_as_a_contributor_and_refuses_an_expired_one() {
    let h = entra_harness(entra::EntraMode::Dev);
    let bearer = format!("Bearer {}", dev_token("me", START_MS / 1000 + 3600));
    let created = h
        .send_with("PUT", "/orders", "", &[("authorization", &bearer)])
        .await;
    assert_eq!(created.status, StatusCode::CREATED, "{}", created.body);
    // Past Entra ID's five minutes of skew.
    let expired = format!("Bearer {}", dev_token("me", START_MS / 1000 - 301));
    let reply = h
        .send_with("PUT", "/orders", "", &[("authorization", &expired)])
        .await;
    assert_eq!(reply.error_code(), "InvalidAuthenticationInfo");
}

#[tokio::test]
async fn a_bearer_token_needs_service_version_2017_11_09() {
    let h = entra_harness(entra::EntraMode::Dev);
    let bearer = format!("Bearer {}", dev_token("me", START_MS / 1000 + 3600));
    let request = Request::builder()
        .method("PUT")
        .uri(format!("{ACCOUNT}/orders"))
        .header("host", "127.0.0.1:10001")
        .header("x-ms-version", "2017-07-29")
        .header("authorization", bearer)
        .body(Body::empty())
        .unwrap();
    let reply = h.call(request).await;
    assert_eq!(reply.status, StatusCode::FORBIDDEN);
    assert_eq!(reply.error_code(), "AuthenticationFailed");
}

#[test]
fn roles_map_onto_permissions_on_the_queues_their_assignment_covers() {
    use veil_core::Pattern;
    let assign = |principal: &str, role| entra::RoleAssignment {
        principal: principal.into(),
        role,
        account: Pattern::new("devstoreaccount1"),
        queues: Pattern::new("orders-*"),
    };
    let config = EntraConfig {
        mode: entra::EntraMode::Verify,
        role_assignments: vec![
            assign("reader", entra::Role::Reader),
            assign("processor", entra::Role::MessageProcessor),
        ],
        ..EntraConfig::default()
    };
    let principal = |oid: &str, token_roles| Principal {
        oid: oid.into(),
        tid: String::new(),
        app_id: None,
        token_roles,
        dev: false,
    };
    let key = QueueKey::new(DEFAULT_NAMESPACE, "orders-1");
    let other = QueueKey::new(DEFAULT_NAMESPACE, "billing");
    let reader = entra::access(
        &config,
        &principal("reader", vec![]),
        "devstoreaccount1",
        DEFAULT_NAMESPACE,
    );
    assert!(reader.allows(&key, Permission::Peek));
    assert!(!reader.allows(&key, Permission::Send));
    assert!(!reader.sees(&other));
    let processor = entra::access(
        &config,
        &principal("processor", vec![]),
        "devstoreaccount1",
        DEFAULT_NAMESPACE,
    );
    for p in [Permission::Receive, Permission::Delete, Permission::Peek] {
        assert!(processor.allows(&key, p), "{p}");
    }
    assert!(!processor.allows(&key, Permission::Admin));
    let elsewhere = entra::access(
        &config,
        &principal("reader", vec![]),
        "otheraccount",
        "azure:otheraccount",
    );
    assert!(elsewhere.grants.is_empty());
    let claimed = entra::access(
        &config,
        &principal("nobody", vec![entra::Role::MessageSender]),
        "devstoreaccount1",
        DEFAULT_NAMESPACE,
    );
    assert!(claimed.allows(&other, Permission::Send));
    assert!(!claimed.allows(&other, Permission::Peek));
}

/// A user delegation SAS token for `queue`, signed with `value` (base64), the key's fields as issued.
fn delegation_sas(key: &Element, queue: &str, permissions: &str, protocol: Option<&str>) -> String {
    let field = |name: &str| key.child_text(name).unwrap_or_default().to_string();
    let signed_key = auth::SignedKey {
        oid: field("SignedOid"),
        tid: field("SignedTid"),
        start: field("SignedStart"),
        expiry: field("SignedExpiry"),
        service: field("SignedService"),
        version: field("SignedVersion"),
        delegated_user_tid: None,
    };
    let sas = auth::Sas {
        version: "2026-04-06".into(),
        permissions: Some(permissions.into()),
        expiry: Some(signed_key.expiry.clone()),
        protocol: protocol.map(str::to_string),
        key: Some(signed_key.clone()),
        ..auth::Sas::default()
    };
    let value = auth::decode_key(&field("Value")).unwrap();
    let signature = auth::sign(
        &value,
        &auth::user_delegation_sas_string_to_sign("devstoreaccount1", queue, &sas, &signed_key),
    );
    let enc = |v: &str| {
        percent_encoding::utf8_percent_encode(v, percent_encoding::NON_ALPHANUMERIC).to_string()
    };
    let mut token = format!(
        "sv=2026-04-06&sp={permissions}&se={}&skoid={}&sktid={}&skt={}&ske={}&sks={}&skv={}&sig={}",
        enc(&signed_key.expiry),
        enc(&signed_key.oid),
        enc(&signed_key.tid),
        enc(&signed_key.start),
        enc(&signed_key.expiry),
        signed_key.service,
        signed_key.version,
        enc(&signature)
    );
    if let Some(protocol) = protocol {
        token.push_str(&format!("&spr={protocol}"));
    }
    token
}

#[tokio::test]
async fn a_user_delegation_sas_signed_with_an_issued_key_works_and_spr_https_needs_tls() {
    let h = entra_harness(entra::EntraMode::Dev);
    let bearer = format!("Bearer {}", dev_token("me", START_MS / 1000 + 3600));
    let auth_header = [("authorization", bearer.as_str())];
    h.send_with("PUT", "/orders", "", &auth_header).await;
    let key_info = "<KeyInfo><Start>2023-11-14T22:13:20Z</Start><Expiry>2023-11-15T22:13:20Z</Expiry></KeyInfo>";
    let key = h
        .send_with(
            "POST",
            "?restype=service&comp=userdelegationkey",
            key_info,
            &auth_header,
        )
        .await;
    assert_eq!(key.status, StatusCode::OK, "{}", key.body);
    let key = key.xml();
    assert_eq!(key.child_text("SignedOid"), Some("me"));
    let sas = delegation_sas(&key, "orders", "a", None);
    let put = h
        .send(
            "POST",
            &format!("/orders/messages?{sas}"),
            &message_body("delegated"),
        )
        .await;
    assert_eq!(put.status, StatusCode::CREATED, "{}", put.body);
    let peek = h
        .send("GET", &format!("/orders/messages?peekonly=true&{sas}"), "")
        .await;
    assert_eq!(peek.error_code(), "AuthorizationPermissionMismatch");
    let https_only = delegation_sas(&key, "orders", "a", Some("https"));
    let plain = h
        .send(
            "POST",
            &format!("/orders/messages?{https_only}"),
            &message_body("x"),
        )
        .await;
    assert_eq!(plain.error_code(), "AuthorizationProtocolMismatch");
    let mut over_tls = Request::builder()
        .method("POST")
        .uri(format!("{ACCOUNT}/orders/messages?{https_only}"))
        .header("host", "127.0.0.1:10001")
        .header("x-ms-version", "2026-04-06")
        .body(Body::from(message_body("over tls")))
        .unwrap();
    over_tls
        .extensions_mut()
        .insert(veil_http::ConnectionInfo::new(
            "127.0.0.1:1".parse().unwrap(),
            true,
            &veil_http::Limits::default(),
        ));
    assert_eq!(h.call(over_tls).await.status, StatusCode::CREATED);
}

#[tokio::test]
async fn get_user_delegation_key_needs_a_bearer_token() {
    let h = entra_harness(entra::EntraMode::Dev);
    let key = auth::decode_key(limits::DEV_ACCOUNT_KEY).unwrap();
    let reply = h
        .call(signed_request(
            "POST",
            "/devstoreaccount1?restype=service&comp=userdelegationkey",
            &key,
            "<KeyInfo><Expiry>2023-11-15T22:13:20Z</Expiry></KeyInfo>",
        ))
        .await;
    assert_eq!(reply.status, StatusCode::FORBIDDEN, "{}", reply.body);
    assert_eq!(reply.error_code(), "AuthenticationFailed");
}
