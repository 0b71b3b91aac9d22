//! Authentication and authorization through the router, on the engine's manual clock: the skew is measured
//! against the engine's time, not the machine's, and a credential's grants decide what it may do.

use axum::body::Body;
use axum::http::{HeaderMap, HeaderValue, Request, StatusCode};
use sha2::{Digest, Sha256};
use veil_core::GrantSpec;

use super::test_support::{engine, send, START_MS};
use super::{router, SqsAuth, SqsConfig, SqsCredential};
use crate::sigv4::{self, Carrier, Claim, SignedRequest};

const CREDENTIAL_TIME: &str = "20231114T221320Z"; // START_MS (1_700_000_000_000) in ISO-8601 basic format

fn credential(key: &str, grants: Option<Vec<GrantSpec>>) -> SqsCredential {
    SqsCredential {
        access_key: key.into(),
        secret_key: "secret".into(),
        account_id: "000000000000".into(),
        session_token: None,
        grants,
    }
}

/// A JSON-protocol request for `action`, signed by `key` at `CREDENTIAL_TIME`.
fn signed(key: &str, action: &str, body: &str) -> Request<Body> {
    let mut headers = HeaderMap::new();
    headers.insert("host", HeaderValue::from_static("localhost:9324"));
    headers.insert("x-amz-date", HeaderValue::from_static(CREDENTIAL_TIME));
    headers.insert(
        "x-amz-target",
        HeaderValue::from_str(&format!("AmazonSQS.{action}")).unwrap(),
    );
    let claim = Claim {
        access_key: key.into(),
        scope_date: CREDENTIAL_TIME[..8].into(),
        region: "us-east-1".into(),
        service: "sqs".into(),
        signed_headers: vec!["host".into(), "x-amz-date".into(), "x-amz-target".into()],
        signature: String::new(),
        timestamp: CREDENTIAL_TIME.into(),
        security_token: None,
        carrier: Carrier::Header,
    };
    let request = SignedRequest {
        method: "POST",
        path: "/",
        query: None,
        headers: &headers,
        body: body.as_bytes(),
    };
    let signature = sigv4::signature_of(
        &request,
        &claim,
        "secret",
        &hex::encode(Sha256::digest(body.as_bytes())),
    );
    let mut builder = Request::post("/");
    for (name, value) in &headers {
        builder = builder.header(name, value);
    }
    builder
        .header(
            "authorization",
            format!(
                "AWS4-HMAC-SHA256 Credential={key}/{}/us-east-1/sqs/aws4_request, SignedHeaders=host;x-amz-date;x-amz-target, Signature={signature}",
                &CREDENTIAL_TIME[..8]
            ),
        )
        .body(Body::from(body.to_string()))
        .unwrap()
}

fn code(headers: &HeaderMap) -> String {
    headers
        .get("x-amzn-query-error")
        .map(|value| value.to_str().unwrap().to_string())
        .unwrap_or_default()
}

#[tokio::test]
async fn the_skew_is_measured_on_the_engines_clock() {
    let (engine, clock) = engine();
    let config = SqsConfig {
        auth: SqsAuth {
            enabled: true,
            credentials: vec![credential("AKID", None)],
        },
        ..SqsConfig::default()
    };
    let app = router(engine, config);
    assert_eq!(START_MS, 1_700_000_000_000);
    let (status, _, _) = send(&app, signed("AKID", "ListQueues", "{}")).await;
    assert_eq!(status, StatusCode::OK);
    clock.advance_ms(16 * 60 * 1_000);
    let (status, headers, _) = send(&app, signed("AKID", "ListQueues", "{}")).await;
    assert_eq!(
        (status, code(&headers).as_str()),
        (StatusCode::FORBIDDEN, "SignatureDoesNotMatch;Sender")
    );
}

#[tokio::test]
async fn grants_decide_each_action_and_the_listing() {
    let (engine, _clock) = engine();
    let sender = GrantSpec {
        namespace: None,
        queues: "orders-*".into(),
        permissions: vec!["send".into()],
    };
    let config = SqsConfig {
        auth: SqsAuth {
            enabled: true,
            credentials: vec![
                credential("OWNER", None),
                credential("SENDER", Some(vec![sender])),
            ],
        },
        ..SqsConfig::default()
    };
    let app = router(engine, config);
    for name in ["orders-1", "invoices"] {
        let body = format!(r#"{{"QueueName":"{name}"}}"#);
        let (status, _, _) = send(&app, signed("OWNER", "CreateQueue", &body)).await;
        assert_eq!(status, StatusCode::OK);
    }
    let send_to = |queue: &str| {
        format!(r#"{{"QueueUrl":"http://localhost:9324/000000000000/{queue}","MessageBody":"x"}}"#)
    };
    let (status, _, _) = send(&app, signed("SENDER", "SendMessage", &send_to("orders-1"))).await;
    assert_eq!(status, StatusCode::OK);
    let (status, headers, _) =
        send(&app, signed("SENDER", "SendMessage", &send_to("invoices"))).await;
    assert_eq!(
        (status, code(&headers).as_str()),
        (StatusCode::FORBIDDEN, "AccessDenied;Sender")
    );
    let (_, _, body) = send(&app, signed("SENDER", "ListQueues", "{}")).await;
    let listed: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(
        listed["QueueUrls"],
        serde_json::json!(["http://localhost:9324/000000000000/orders-1"])
    );
}
