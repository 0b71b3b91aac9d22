//! What a send needs beyond its own channel, and what reaches the policy at all (docs/security.md "KubeMQ"):
//! a message naming a dead-letter channel (`MaxReceiveQueue`) needs `send` there too, since the engine will
//! write the message into it, and a channel name KubeMQ's rules refuse is answered in-band before the policy
//! or the audit log sees it. The service is called directly, without a socket.

use std::sync::Arc;

use tokio::sync::watch;
use tonic::Request;
use veil_core::QueueKey;
use veil_telemetry::capture;
use veil_telemetry::Telemetry;

use super::KubemqService;
use crate::pb;
use crate::pb::kubemq_server::Kubemq;

/// `client-a` may write `orders` only.
const WRITES_ORDERS: &str =
    r#"[{"ClientID":"^client-a$","Channel":"^orders$","Queues":true,"Read":true,"Write":true}]"#;

fn service() -> (KubemqService, Arc<veil_core::Engine>) {
    let (_stop, stopped) = watch::channel(false);
    let engine = super::test_engine();
    let service = KubemqService::new(
        engine.clone(),
        crate::Settings::default(),
        stopped,
        Telemetry::default(),
    );
    (service, engine)
}

/// A request as the interceptor leaves it for a caller under `policy` (no token configured).
fn as_caller<T>(message: T, policy: &str) -> Request<T> {
    let auth = crate::AuthConfig {
        policy: Some(Arc::new(
            crate::auth::Policy::from_json(policy).expect("policy"),
        )),
        ..crate::AuthConfig::default()
    };
    let mut request = Request::new(message);
    request
        .extensions_mut()
        .insert(crate::Verdict(auth.authenticate(None, 0)));
    request
}

fn message(channel: &str, dead_letter: &str) -> pb::QueueMessage {
    pb::QueueMessage {
        client_id: "client-a".into(),
        channel: channel.into(),
        body: b"hello".to_vec().into(),
        policy: Some(pb::QueueMessagePolicy {
            max_receive_count: 1,
            max_receive_queue: dead_letter.into(),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn exists(engine: &veil_core::Engine, channel: &str) -> bool {
    engine.queue_exists(&QueueKey::new(veil_core::DEFAULT_NAMESPACE, channel))
}

#[tokio::test]
async fn a_send_naming_a_dead_letter_channel_the_caller_may_not_write_is_refused() {
    let (service, engine) = service();
    let (captured, _guard) = capture::capture();
    let request = as_caller(message("orders", "secrets"), WRITES_ORDERS);
    let status = service
        .send_queue_message(request)
        .await
        .expect_err("refused");
    assert_eq!(status.code(), tonic::Code::Unknown);
    assert_eq!(status.message(), crate::auth::ACCESS_DENIED);
    assert!(!exists(&engine, "orders"), "nothing was sent");
    let audit = captured.audit();
    assert_eq!(audit.len(), 1, "{audit:?}");
    assert_eq!(audit[0].field("queue"), "secrets");
    assert_eq!(audit[0].field("outcome"), "AccessDenied");
}

#[tokio::test]
async fn a_send_naming_a_dead_letter_channel_the_caller_may_write_goes_through() {
    let policy =
        r#"[{"ClientID":"^client-a$","Channel":"^orders(-dead)?$","Queues":true,"Write":true}]"#;
    let (service, engine) = service();
    let request = as_caller(message("orders", "orders-dead"), policy);
    let result = service
        .send_queue_message(request)
        .await
        .expect("allowed")
        .into_inner();
    assert!(!result.is_error, "{}", result.error);
    assert!(exists(&engine, "orders"));
}

#[tokio::test]
async fn a_batch_with_one_message_naming_a_forbidden_dead_letter_channel_fails_whole() {
    let (service, engine) = service();
    let batch = pb::QueueMessagesBatchRequest {
        batch_id: "b".into(),
        messages: vec![message("orders", ""), message("orders", "secrets")],
    };
    let status = service
        .send_queue_messages_batch(as_caller(batch, WRITES_ORDERS))
        .await
        .expect_err("refused");
    assert_eq!(status.message(), crate::auth::ACCESS_DENIED);
    assert!(!exists(&engine, "orders"), "nothing of the batch was sent");
}

#[tokio::test]
async fn a_bad_channel_name_is_answered_in_band_before_the_policy_sees_it() {
    let (service, engine) = service();
    let (captured, _guard) = capture::capture();
    let huge = "a".repeat(3 * 1024 * 1024);
    for (channel, dead_letter) in [(huge.as_str(), ""), ("orders", huge.as_str()), ("../x", "")] {
        let request = as_caller(message(channel, dead_letter), WRITES_ORDERS);
        let result = service
            .send_queue_message(request)
            .await
            .expect("in-band")
            .into_inner();
        assert!(result.is_error);
        assert_eq!(
            result.error,
            crate::convert::KubemqError::QueueNameInvalid.to_string()
        );
    }
    assert!(
        captured.audit().is_empty(),
        "no audit line names a bad channel"
    );
    assert!(engine
        .list_queues(veil_core::DEFAULT_NAMESPACE, "")
        .is_empty());
}

#[tokio::test]
async fn every_place_a_channel_name_enters_refuses_a_bad_one_and_creates_nothing() {
    let (service, engine) = service();
    let bad = format!("{}\u{202e}", "a".repeat(8));
    let pull = pb::ReceiveQueueMessagesRequest {
        client_id: "client-a".into(),
        channel: bad.clone(),
        max_number_of_messages: 1,
        ..Default::default()
    };
    let pulled = service
        .receive_queue_messages(Request::new(pull.clone()))
        .await
        .expect("in-band")
        .into_inner();
    assert!(pulled.is_error, "pull");
    let peek = pb::ReceiveQueueMessagesRequest {
        is_peak: true,
        ..pull
    };
    let peeked = service
        .receive_queue_messages(Request::new(peek))
        .await
        .expect("in-band")
        .into_inner();
    assert!(peeked.is_error, "peek");
    let ack_all = pb::AckAllQueueMessagesRequest {
        client_id: "client-a".into(),
        channel: bad.clone(),
        ..Default::default()
    };
    let purged = service
        .ack_all_queue_messages(Request::new(ack_all))
        .await
        .expect("in-band")
        .into_inner();
    assert!(purged.is_error, "ack all");
    for query in ["create-channel", "delete-channel"] {
        let request = pb::Request {
            client_id: "client-a".into(),
            channel: crate::limits::CLUSTER_REQUESTS_CHANNEL.into(),
            metadata: query.into(),
            tags: [("channel".to_string(), bad.clone())].into(),
            ..Default::default()
        };
        let response = service
            .send_request(Request::new(request))
            .await
            .expect("in-band")
            .into_inner();
        assert_eq!(
            response.error,
            crate::convert::KubemqError::QueueNameInvalid.to_string(),
            "{query}"
        );
    }
    assert!(engine
        .list_queues(veil_core::DEFAULT_NAMESPACE, "")
        .is_empty());
}
