//! Every request is counted once in `veil_requests_total{protocol="sqs"}` under its action with SQS's code rule
//! (`OK` or the AWS error code), in both wire protocols; destructive and settings actions write one audit line
//! on `veil::audit`.

use axum::http::StatusCode;
use axum::Router;
use serde_json::json;
use veil_telemetry::capture;
use veil_telemetry::{Code, Protocol, Telemetry};

use super::test_support::{self, json_call, query_call};
use super::{router, SqsConfig};

const URL: &str = "http://localhost:9324/000000000000/q";

fn app_with(telemetry: &Telemetry) -> Router {
    let (engine, _clock) = test_support::engine();
    let config = SqsConfig {
        telemetry: telemetry.clone(),
        ..SqsConfig::default()
    };
    router(engine, config)
}

fn count(telemetry: &Telemetry, operation: &'static str, code: Code) -> u64 {
    telemetry.request_count(Protocol::Sqs, operation, code)
}

#[tokio::test]
async fn a_successful_send_counts_as_send_message_ok() {
    let telemetry = Telemetry::default();
    let app = app_with(&telemetry);
    let (status, _, _) = json_call(&app, "CreateQueue", &json!({ "QueueName": "q" })).await;
    assert_eq!(status, StatusCode::OK);
    let (status, _, _) = json_call(
        &app,
        "SendMessage",
        &json!({ "QueueUrl": URL, "MessageBody": "hi" }),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(count(&telemetry, "SendMessage", Code::Ok), 1);
    assert_eq!(count(&telemetry, "CreateQueue", Code::Ok), 1);
    let text = telemetry.encode_text().expect("encodes");
    assert!(
        text.contains(r#"veil_requests_total{protocol="sqs",operation="SendMessage",code="OK"} 1"#),
        "{text}"
    );
    assert!(text.contains(
        r#"veil_request_duration_seconds_count{protocol="sqs",operation="SendMessage"} 1"#
    ));
}

#[tokio::test]
async fn an_error_counts_under_its_aws_code_in_both_protocols() {
    let telemetry = Telemetry::default();
    let app = app_with(&telemetry);
    let (status, _, _) = json_call(&app, "GetQueueUrl", &json!({ "QueueName": "missing" })).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    let (status, _) = query_call(&app, "/", "Action=GetQueueUrl&QueueName=missing").await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(
        count(&telemetry, "GetQueueUrl", Code::Error("QueueDoesNotExist")),
        2
    );
}

#[tokio::test]
async fn a_request_that_does_not_decode_counts_under_the_action_it_names_or_unknown() {
    let telemetry = Telemetry::default();
    let app = app_with(&telemetry);
    // A QueueUrl that is not a string: the action is named, its input does not decode.
    json_call(&app, "SendMessage", &json!({ "QueueUrl": 12 })).await;
    let (_, _) = query_call(&app, "/", "Action=NoSuchAction").await;
    assert_eq!(
        count(
            &telemetry,
            "SendMessage",
            Code::Error("SerializationException")
        ),
        1
    );
    assert_eq!(
        count(
            &telemetry,
            "Unknown",
            Code::Error("UnknownOperationException")
        ),
        1
    );
}

#[tokio::test]
async fn deleting_a_queue_writes_one_audit_line() {
    let telemetry = Telemetry::default();
    let app = app_with(&telemetry);
    json_call(&app, "CreateQueue", &json!({ "QueueName": "q" })).await;
    let (captured, _guard) = capture::capture();
    json_call(
        &app,
        "SendMessage",
        &json!({ "QueueUrl": URL, "MessageBody": "hi" }),
    )
    .await;
    let (status, _, _) = json_call(&app, "DeleteQueue", &json!({ "QueueUrl": URL })).await;
    assert_eq!(status, StatusCode::OK);
    let audit = captured.audit();
    assert_eq!(audit.len(), 1, "only the delete is audited: {audit:?}");
    let event = &audit[0];
    assert_eq!(event.field("action"), "DeleteQueue");
    assert_eq!(event.field("protocol"), "sqs");
    assert_eq!(event.field("namespace"), "default");
    assert_eq!(event.field("queue"), "q");
    assert_eq!(event.field("identity"), "000000000000");
    assert_eq!(event.field("outcome"), "ok");
}

#[tokio::test]
async fn a_failed_purge_and_a_settings_change_are_audited_with_their_outcome() {
    let telemetry = Telemetry::default();
    let app = app_with(&telemetry);
    let (captured, _guard) = capture::capture();
    json_call(&app, "PurgeQueue", &json!({ "QueueUrl": URL })).await;
    json_call(&app, "CreateQueue", &json!({ "QueueName": "q" })).await;
    let attributes = json!({ "QueueUrl": URL, "Attributes": { "VisibilityTimeout": "60" } });
    json_call(&app, "SetQueueAttributes", &attributes).await;
    let audit = captured.audit();
    let actions: Vec<(&str, &str)> = audit
        .iter()
        .map(|event| (event.field("action"), event.field("outcome")))
        .collect();
    assert_eq!(
        actions,
        [
            ("PurgeQueue", "QueueDoesNotExist"),
            ("SetQueueAttributes", "ok")
        ]
    );
}
