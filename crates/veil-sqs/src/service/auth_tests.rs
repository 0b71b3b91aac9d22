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

fn credential_of(key: &str, account: &str, grants: Option<Vec<GrantSpec>>) -> SqsCredential {
    SqsCredential {
        account_id: account.into(),
        ..credential(key, grants)
    }
}

fn grant(queues: &str, permissions: &[&str]) -> GrantSpec {
    GrantSpec {
        namespace: None,
        queues: queues.into(),
        permissions: permissions.iter().map(|p| p.to_string()).collect(),
    }
}

/// The router with authentication on and these credentials.
fn app_with(credentials: Vec<SqsCredential>) -> axum::Router {
    let (engine, _clock) = engine();
    let config = SqsConfig {
        auth: SqsAuth {
            enabled: true,
            credentials,
        },
        ..SqsConfig::default()
    };
    router(engine, config)
}

/// A signed JSON call: the status, the SQS code and the message (empty on success).
async fn call(
    app: &axum::Router,
    key: &str,
    action: &str,
    body: serde_json::Value,
) -> (StatusCode, String, String) {
    let (status, headers, bytes) = send(app, signed(key, action, &body.to_string())).await;
    let answer: serde_json::Value = serde_json::from_slice(&bytes).unwrap_or_default();
    let message = answer["message"].as_str().unwrap_or_default().to_string();
    (status, code(&headers), message)
}

const DEFAULT_ACCOUNT: &str = "000000000000";
const OTHER_ACCOUNT: &str = "111111111111";

fn arn_of(account: &str, queue: &str) -> String {
    format!("arn:aws:sqs:us-east-1:{account}:{queue}")
}

fn url_of(account: &str, queue: &str) -> String {
    format!("http://localhost:9324/{account}/{queue}")
}

fn with_redrive(queue: &str, target_arn: &str) -> serde_json::Value {
    let policy = serde_json::json!({"deadLetterTargetArn": target_arn, "maxReceiveCount": 1});
    serde_json::json!({"QueueName": queue, "Attributes": {"RedrivePolicy": policy.to_string()}})
}

fn does_not_exist(target_arn: &str) -> (StatusCode, String, String) {
    (
        StatusCode::BAD_REQUEST,
        "InvalidParameterValue;Sender".into(),
        format!(
            r#"Value {{"deadLetterTargetArn":"{target_arn}","maxReceiveCount":1}} for parameter RedrivePolicy is invalid. Reason: Dead letter target does not exist."#
        ),
    )
}

#[tokio::test]
async fn a_redrive_policy_needs_send_on_its_target() {
    let app = app_with(vec![
        credential("OWNER", None),
        credential(
            "ORDERS",
            Some(vec![grant(
                "orders-*",
                &["send", "receive", "delete", "peek", "admin"],
            )]),
        ),
        credential_of("OTHER", OTHER_ACCOUNT, None),
    ]);
    for name in ["orders-dlq", "secret-dlq"] {
        let created = call(
            &app,
            "OWNER",
            "CreateQueue",
            serde_json::json!({"QueueName": name}),
        )
        .await;
        assert_eq!(created.0, StatusCode::OK, "{created:?}");
    }
    // A credential's grants: a target outside them is answered as one that does not exist, whether it
    // exists or not.
    for target in ["secret-dlq", "nowhere"] {
        let arn = arn_of(DEFAULT_ACCOUNT, target);
        assert_eq!(
            call(
                &app,
                "ORDERS",
                "CreateQueue",
                with_redrive("orders-src", &arn)
            )
            .await,
            does_not_exist(&arn)
        );
    }
    let inside = arn_of(DEFAULT_ACCOUNT, "orders-dlq");
    let created = call(
        &app,
        "ORDERS",
        "CreateQueue",
        with_redrive("orders-src", &inside),
    )
    .await;
    assert_eq!(created.0, StatusCode::OK, "{created:?}");
    let set = serde_json::json!({
        "QueueUrl": url_of(DEFAULT_ACCOUNT, "orders-src"),
        "Attributes": {"RedrivePolicy": serde_json::json!({
            "deadLetterTargetArn": arn_of(DEFAULT_ACCOUNT, "secret-dlq"), "maxReceiveCount": 1}).to_string()},
    });
    assert_eq!(
        call(&app, "ORDERS", "SetQueueAttributes", set).await,
        does_not_exist(&arn_of(DEFAULT_ACCOUNT, "secret-dlq"))
    );

    // Another account: refused alike for a queue that exists and one that does not, until the target's
    // policy lets the caller send to it.
    for target in ["orders-dlq", "ghost"] {
        let arn = arn_of(DEFAULT_ACCOUNT, target);
        assert_eq!(
            call(&app, "OTHER", "CreateQueue", with_redrive("src", &arn)).await,
            does_not_exist(&arn)
        );
    }
    let policy = serde_json::json!({"Version": "2012-10-17", "Statement": [{
        "Effect": "Allow", "Principal": {"AWS": OTHER_ACCOUNT}, "Action": "sqs:SendMessage",
        "Resource": inside}]});
    let allowed = call(
        &app,
        "OWNER",
        "SetQueueAttributes",
        serde_json::json!({"QueueUrl": url_of(DEFAULT_ACCOUNT, "orders-dlq"),
                           "Attributes": {"Policy": policy.to_string()}}),
    )
    .await;
    assert_eq!(allowed.0, StatusCode::OK, "{allowed:?}");
    let created = call(&app, "OTHER", "CreateQueue", with_redrive("src", &inside)).await;
    assert_eq!(created.0, StatusCode::OK, "{created:?}");
}

#[tokio::test]
async fn a_move_task_needs_send_on_where_it_moves_messages() {
    let app = app_with(vec![
        credential("OWNER", None),
        credential(
            "MOVER",
            Some(vec![grant("dlq", &["admin"]), grant("mine", &["send"])]),
        ),
    ]);
    let dlq = arn_of(DEFAULT_ACCOUNT, "dlq");
    for body in [
        serde_json::json!({"QueueName": "dlq"}),
        serde_json::json!({"QueueName": "mine"}),
        serde_json::json!({"QueueName": "theirs"}),
        with_redrive("src", &dlq),
    ] {
        let created = call(&app, "OWNER", "CreateQueue", body).await;
        assert_eq!(created.0, StatusCode::OK, "{created:?}");
    }
    let denied = |queue: &str| {
        (
            StatusCode::FORBIDDEN,
            "AccessDenied;Sender".to_string(),
            format!(
                "User: arn:aws:iam::{DEFAULT_ACCOUNT}:user/MOVER is not authorized to perform: sqs:SendMessage \
                 on resource: {} because no identity-based policy allows the sqs:SendMessage action",
                arn_of(DEFAULT_ACCOUNT, queue)
            ),
        )
    };
    let start = |destination: Option<&str>| {
        let mut body = serde_json::json!({"SourceArn": dlq});
        if let Some(queue) = destination {
            body["DestinationArn"] = arn_of(DEFAULT_ACCOUNT, queue).into();
        }
        call(&app, "MOVER", "StartMessageMoveTask", body)
    };
    // A destination outside the grants is refused alike whether it exists or not.
    assert_eq!(start(Some("theirs")).await, denied("theirs"));
    assert_eq!(start(Some("ghost")).await, denied("ghost"));
    // Without a destination, messages go back to the queues that name this one as their DLQ.
    assert_eq!(start(None).await, denied("src"));
    let started = start(Some("mine")).await;
    assert_eq!(started.0, StatusCode::OK, "{started:?}");
}
