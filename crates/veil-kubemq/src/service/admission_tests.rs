//! The KubeMQ listener's admission limit (docs/reliability.md "Load and overload"): a unary RPC beyond
//! `max_requests_in_flight` waits at most the admission wait, then fails at once with `RESOURCE_EXHAUSTED`,
//! changing nothing; a pull that waits gives its slot back. The service is called directly, without a socket,
//! on tokio's paused clock (as veil-http's own admission tests): the admission wait is measured exactly, and no
//! bound depends on how busy the machine is.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;
use tonic::{Code, Request};
use veil_http::limits::Limits;
use veil_http::Admission;
use veil_telemetry::Telemetry;

use super::{KubemqService, SERVER_BUSY};
use crate::pb;
use crate::pb::kubemq_server::Kubemq;

const ADMISSION_WAIT_MS: u64 = 50;

/// A service whose listener admits one request at once, and that admission, to hold its slot from outside.
fn service_admitting_one() -> (KubemqService, Admission) {
    let admission = Admission::new(&Limits {
        max_requests_in_flight: 1,
        admission_wait: Duration::from_millis(ADMISSION_WAIT_MS),
        ..Limits::default()
    });
    let (_stop, stopped) = watch::channel(false);
    let service = KubemqService::with_admission(
        super::test_engine(),
        crate::Settings::default(),
        stopped,
        Telemetry::default(),
        admission.clone(),
    );
    (service, admission)
}

fn message(body: &str) -> pb::QueueMessage {
    pb::QueueMessage {
        client_id: "client-a".into(),
        channel: "orders".into(),
        body: body.as_bytes().to_vec().into(),
        ..Default::default()
    }
}

fn pull(wait_time_seconds: i32) -> pb::ReceiveQueueMessagesRequest {
    pb::ReceiveQueueMessagesRequest {
        client_id: "client-b".into(),
        channel: "orders".into(),
        max_number_of_messages: 1,
        wait_time_seconds,
        ..Default::default()
    }
}

#[tokio::test(start_paused = true)]
async fn a_unary_rpc_beyond_the_admission_limit_gets_resource_exhausted_after_the_wait() {
    let (service, admission) = service_admitting_one();
    let held = admission.enter().await.expect("the only slot");

    let started = Instant::now();
    let refused = service
        .send_queue_message(Request::new(message("refused")))
        .await
        .expect_err("no slot within the admission wait");
    assert_eq!(refused.code(), Code::ResourceExhausted);
    assert_eq!(refused.message(), SERVER_BUSY);
    assert_eq!(
        started.elapsed(),
        Duration::from_millis(ADMISSION_WAIT_MS),
        "refused after the admission wait, not before or later"
    );
    let info = service
        .queues_info(Request::new(pb::QueuesInfoRequest::default()))
        .await
        .expect_err("every unary RPC is admitted alike");
    assert_eq!(info.code(), Code::ResourceExhausted);

    held.release();
    let sent = service
        .send_queue_message(Request::new(message("admitted")))
        .await
        .expect("a slot is free again")
        .into_inner();
    assert!(!sent.is_error, "{}", sent.error);
    let pulled = service
        .receive_queue_messages(Request::new(pull(1)))
        .await
        .expect("admitted")
        .into_inner();
    let bodies: Vec<&[u8]> = pulled.messages.iter().map(|m| m.body.as_ref()).collect();
    assert_eq!(
        bodies,
        [b"admitted".as_slice()],
        "the refused send stored nothing"
    );
}

#[tokio::test(start_paused = true)]
async fn a_waiting_pull_gives_its_admission_slot_back() {
    let (service, _admission) = service_admitting_one();
    let service = Arc::new(service);
    let waiting = tokio::spawn({
        let service = service.clone();
        async move {
            service
                .receive_queue_messages(Request::new(pull(5)))
                .await
                .map(|response| response.into_inner())
        }
    });
    // The pull takes the only slot, then parks in the engine and gives it back: QueuesInfo, itself a unary
    // RPC, is admitted and shows the pull waiting on the channel. The pull's own wait is on the engine's manual
    // clock, which never moves here, so the paused tokio clock running on cannot end it.
    let deadline = Instant::now() + Duration::from_secs(2);
    loop {
        match service
            .queues_info(Request::new(pb::QueuesInfoRequest::default()))
            .await
        {
            Ok(info) => {
                let info = info.into_inner().info.expect("info");
                if info
                    .queues
                    .iter()
                    .any(|q| q.name == "orders" && q.subscribers > 0)
                {
                    break;
                }
            }
            Err(status) => assert_eq!(status.code(), Code::ResourceExhausted),
        }
        assert!(
            Instant::now() < deadline,
            "the pull never parked without its slot"
        );
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let sent = service
        .send_queue_message(Request::new(message("for the waiter")))
        .await
        .expect("the parked pull holds no slot")
        .into_inner();
    assert!(!sent.is_error, "{}", sent.error);
    let pulled = waiting
        .await
        .expect("joined")
        .expect("the pull was admitted");
    assert_eq!(pulled.messages.len(), 1, "{}", pulled.error);
    assert_eq!(pulled.messages[0].body.as_ref(), b"for the waiter");
}
