//! The KubeMQ front-end from protobuf bytes to engine calls: each input is a script of requests
//! (`[kind: u8][length: u16 LE][protobuf bytes]`…), each decoded with prost as tonic would and handed to the
//! real service (`KubemqService`, called without a socket) over a fresh in-memory engine on a manual clock:
//! SendQueueMessage, SendQueueMessagesBatch, ReceiveQueueMessages (pull and peek), AckAllQueueMessages,
//! QueuesInfo, SendRequest (the SDKs' channel create/delete/list) and the messages of a QueuesUpstream request
//! (sent one by one as the stream does). A QueuesDownstream request is decoded only: the stream's settlement
//! needs a streaming body this target does not build.
//!
//! Beyond "no panic": every unary RPC answers in band (KubeMQ's `IsError` + text), never with a gRPC status;
//! and a message the service accepted without a delay is there to peek at once, with the body, metadata,
//! client id and tags (less the reserved `kubemq.` ones) it was sent with — the conversion to the engine's
//! `NewMessage` and back (`to_queue_message`) loses nothing.
#![no_main]

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

use libfuzzer_sys::fuzz_target;
use prost::Message as _;
use tokio::sync::watch;
use tonic::Request;
use veil_core::memory_store::MemoryStore;
use veil_core::{Engine, ManualClock, ReceiptKey};
use veil_kubemq::convert::RESERVED_PREFIX;
use veil_kubemq::pb::{self, kubemq_server::Kubemq};
use veil_kubemq::service::KubemqService;
use veil_kubemq::Settings;

/// Requests per input beyond this are ignored (a script is a short session, not a load test).
const REQUESTS_MAX: usize = 16;

fn runtime() -> &'static tokio::runtime::Runtime {
    static RUNTIME: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RUNTIME.get_or_init(|| {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime")
    })
}

fn service() -> KubemqService {
    let engine = Engine::open(
        Arc::new(MemoryStore::new()),
        Arc::new(ManualClock::new(1_764_547_200_000)),
        ReceiptKey::new([7; 32]),
    )
    .expect("engine opens");
    // No waiting: a pull or a stream never outlives its request here (a wait is a timer, not a decoder).
    let settings = Settings {
        max_wait_timeout_s: 0,
        default_wait_timeout_s: 0,
        ..Settings::default()
    };
    let (_stop, stopped) = watch::channel(false);
    KubemqService::new(Arc::new(engine), settings, stopped, Default::default())
}

fn visible_tags(tags: &HashMap<String, String>) -> HashMap<String, String> {
    tags.iter()
        .filter(|(name, _)| !name.starts_with(RESERVED_PREFIX))
        .map(|(name, value)| (name.clone(), value.clone()))
        .collect()
}

/// A message accepted without a delay can be peeked at once, unchanged.
async fn peek_finds(
    service: &KubemqService,
    sent: &pb::QueueMessage,
    result: &pb::SendQueueMessageResult,
) {
    if result.is_error || sent.policy.as_ref().is_some_and(|p| p.delay_seconds != 0) {
        return;
    }
    let max = Settings::default().max_number_of_messages;
    let peeked = service
        .receive_queue_messages(Request::new(pb::ReceiveQueueMessagesRequest {
            client_id: "fuzz-peek".into(),
            channel: sent.channel.clone(),
            max_number_of_messages: max,
            is_peak: true,
            ..Default::default()
        }))
        .await
        .expect("a peek answers in band")
        .into_inner();
    assert!(
        !peeked.is_error,
        "a peek after an accepted send fails: {}",
        peeked.error
    );
    if peeked.messages.len() >= max as usize {
        return; // the channel holds more than one peek shows
    }
    let found = peeked.messages.iter().any(|m| {
        m.message_id == result.message_id
            && m.body == sent.body
            && m.metadata == sent.metadata
            && m.client_id == sent.client_id
            && visible_tags(&m.tags) == visible_tags(&sent.tags)
    });
    assert!(
        found,
        "an accepted message is not peeked unchanged: sent {sent:?}, peeked {peeked:?}"
    );
}

async fn send_one(service: &KubemqService, message: pb::QueueMessage) {
    let result = service
        .send_queue_message(Request::new(message.clone()))
        .await
        .expect("a send answers in band")
        .into_inner();
    peek_finds(service, &message, &result).await;
}

async fn run(script: &[u8]) {
    let service = service();
    let mut rest = script;
    for _ in 0..REQUESTS_MAX {
        let [kind, low, high, tail @ ..] = rest else {
            return;
        };
        let length = usize::from(u16::from_le_bytes([*low, *high])).min(tail.len());
        let (bytes, after) = tail.split_at(length);
        rest = after;
        match kind % 8 {
            0 => {
                if let Ok(message) = pb::QueueMessage::decode(bytes) {
                    send_one(&service, message).await;
                }
            }
            1 => {
                if let Ok(batch) = pb::QueueMessagesBatchRequest::decode(bytes) {
                    let answer = service
                        .send_queue_messages_batch(Request::new(batch.clone()))
                        .await
                        .expect("a batch answers in band")
                        .into_inner();
                    for (message, result) in batch.messages.iter().zip(&answer.results) {
                        peek_finds(&service, message, result).await;
                    }
                }
            }
            2 => {
                if let Ok(request) = pb::ReceiveQueueMessagesRequest::decode(bytes) {
                    service
                        .receive_queue_messages(Request::new(request))
                        .await
                        .expect("a receive answers in band");
                }
            }
            3 => {
                if let Ok(request) = pb::AckAllQueueMessagesRequest::decode(bytes) {
                    service
                        .ack_all_queue_messages(Request::new(request))
                        .await
                        .expect("an ack-all answers in band");
                }
            }
            4 => {
                if let Ok(request) = pb::QueuesInfoRequest::decode(bytes) {
                    service
                        .queues_info(Request::new(request))
                        .await
                        .expect("queues-info answers in band");
                }
            }
            5 => {
                if let Ok(request) = pb::Request::decode(bytes) {
                    service
                        .send_request(Request::new(request))
                        .await
                        .expect("a request answers in band");
                }
            }
            6 => {
                if let Ok(request) = pb::QueuesUpstreamRequest::decode(bytes) {
                    for message in request.messages {
                        send_one(&service, message).await;
                    }
                }
            }
            _ => {
                let _ = pb::QueuesDownstreamRequest::decode(bytes);
            }
        }
    }
}

fuzz_target!(|data: &[u8]| {
    runtime().block_on(run(data));
});
