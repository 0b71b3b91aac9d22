//! Each RPC is counted once in `veil_requests_total{protocol="kubemq"}` with KubeMQ's code rule (`OK`, or
//! `Error` for an in-band error), and AckAllQueueMessages and delete-channel write one audit line each on
//! `veil::audit`. The service is called directly, without a socket.

use std::sync::Arc;

use tokio::sync::watch;
use tonic::Request;
use veil_telemetry::capture;
use veil_telemetry::{Code, Protocol, Telemetry};

use super::KubemqService;
use crate::limits;
use crate::pb;
use crate::pb::kubemq_server::Kubemq;

fn service(telemetry: &Telemetry) -> KubemqService {
    let (_stop, stopped) = watch::channel(false);
    KubemqService::new(
        super::test_engine(),
        crate::Settings::default(),
        stopped,
        telemetry.clone(),
    )
}

fn message(channel: &str) -> pb::QueueMessage {
    pb::QueueMessage {
        client_id: "client-a".into(),
        channel: channel.into(),
        body: b"hello".to_vec().into(),
        ..Default::default()
    }
}

fn count(telemetry: &Telemetry, operation: &'static str, code: Code) -> u64 {
    telemetry.request_count(Protocol::Kubemq, operation, code)
}

#[tokio::test]
async fn a_send_counts_ok_and_an_in_band_error_counts_error() {
    let telemetry = Telemetry::default();
    let service = service(&telemetry);
    let sent = service
        .send_queue_message(Request::new(message("orders")))
        .await
        .expect("answers")
        .into_inner();
    assert!(!sent.is_error, "{}", sent.error);
    let refused = service
        .send_queue_message(Request::new(message("")))
        .await
        .expect("answers in-band")
        .into_inner();
    assert!(refused.is_error);
    assert_eq!(count(&telemetry, "SendQueueMessage", Code::Ok), 1);
    assert_eq!(
        count(&telemetry, "SendQueueMessage", Code::Error("Error")),
        1
    );
    let text = telemetry.encode_text().expect("encodes");
    assert!(
        text.contains(
            r#"veil_requests_total{protocol="kubemq",operation="SendQueueMessage",code="OK"} 1"#
        ),
        "{text}"
    );
}

#[tokio::test]
async fn ack_all_is_audited_with_its_channel_and_client_id() {
    let telemetry = Telemetry::default();
    let service = service(&telemetry);
    service
        .send_queue_message(Request::new(message("orders")))
        .await
        .expect("answers");
    let (captured, _guard) = capture::capture();
    let request = pb::AckAllQueueMessagesRequest {
        request_id: "r1".into(),
        client_id: "client-a".into(),
        channel: "orders".into(),
        wait_time_seconds: 0,
    };
    let response = service
        .ack_all_queue_messages(Request::new(request))
        .await
        .expect("answers")
        .into_inner();
    assert_eq!(response.affected_messages, 1);
    assert_eq!(count(&telemetry, "AckAllQueueMessages", Code::Ok), 1);
    let audit = captured.audit();
    assert_eq!(audit.len(), 1, "{audit:?}");
    let event = &audit[0];
    assert_eq!(event.field("action"), "AckAllQueueMessages");
    assert_eq!(event.field("protocol"), "kubemq");
    assert_eq!(event.field("namespace"), "default");
    assert_eq!(event.field("queue"), "orders");
    assert_eq!(event.field("identity"), "client-a");
    assert_eq!(event.field("outcome"), "ok");
}

#[tokio::test]
async fn deleting_a_channel_is_audited_and_creating_one_is_not() {
    let telemetry = Telemetry::default();
    let service = service(&telemetry);
    let (captured, _guard) = capture::capture();
    for metadata in ["create-channel", "delete-channel"] {
        let request = pb::Request {
            client_id: "client-a".into(),
            channel: limits::CLUSTER_REQUESTS_CHANNEL.into(),
            metadata: metadata.into(),
            tags: [("channel".to_string(), "orders".to_string())].into(),
            ..Default::default()
        };
        let response = service
            .send_request(Request::new(request))
            .await
            .expect("answers")
            .into_inner();
        assert!(response.executed, "{metadata}: {}", response.error);
    }
    assert_eq!(count(&telemetry, "SendRequest", Code::Ok), 2);
    let audit = captured.audit();
    let actions: Vec<(&str, &str, &str)> = audit
        .iter()
        .map(|e| (e.field("action"), e.field("queue"), e.field("outcome")))
        .collect();
    assert_eq!(actions, [("DeleteChannel", "orders", "ok")]);
}

#[tokio::test]
async fn a_rejected_token_is_audited_and_counted_as_unauthenticated_under_its_rpc() {
    let telemetry = Telemetry::default();
    let service = service(&telemetry);
    let (captured, _guard) = capture::capture();
    let mut request = Request::new(message("orders"));
    let refusal = crate::auth::TOKEN_NOT_SUPPLIED.to_string();
    request
        .extensions_mut()
        .insert(crate::Verdict(Err(refusal.clone())));
    let status = service
        .send_queue_message(request)
        .await
        .expect_err("refused");
    assert_eq!(status.code(), tonic::Code::Unauthenticated);
    assert_eq!(status.message(), refusal);
    let code = Code::Error("Unauthenticated");
    assert_eq!(count(&telemetry, "SendQueueMessage", code), 1);
    let audit = captured.audit();
    assert_eq!(audit.len(), 1, "{audit:?}");
    assert_eq!(audit[0].field("action"), "Authenticate");
    assert_eq!(audit[0].field("outcome"), "Unauthenticated");
}

#[tokio::test]
async fn a_send_the_policy_refuses_is_an_rpc_error_audited_with_the_client_id() {
    let telemetry = Telemetry::default();
    let service = service(&telemetry);
    let (captured, _guard) = capture::capture();
    let policy = crate::auth::Policy::from_json(
        r#"[{"ClientID":"client-a","Channel":"^orders$","Queues":true,"Read":true}]"#,
    )
    .expect("policy");
    let auth = crate::AuthConfig {
        policy: Some(Arc::new(policy)),
        ..crate::AuthConfig::default()
    };
    let mut request = Request::new(message("orders"));
    request
        .extensions_mut()
        .insert(crate::Verdict(auth.authenticate(None, 0)));
    let status = service
        .send_queue_message(request)
        .await
        .expect_err("refused");
    assert_eq!(status.code(), tonic::Code::Unknown);
    assert_eq!(status.message(), crate::auth::ACCESS_DENIED);
    assert_eq!(
        count(&telemetry, "SendQueueMessage", Code::Error("Error")),
        1
    );
    let audit = captured.audit();
    assert_eq!(audit.len(), 1, "{audit:?}");
    assert_eq!(audit[0].field("identity"), "kubemq:client-a");
    assert_eq!(audit[0].field("outcome"), "AccessDenied");
}
