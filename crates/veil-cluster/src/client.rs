//! A connection to another node's internal service. Connects lazily and reconnects by itself (tonic's
//! channel); every failure to get an answer — the node unreachable, gone, or past the call's bound — is the
//! protocols' "service unavailable", and says nothing about whether the call took effect at the owner, as
//! for any request whose answer was lost.

use std::sync::Arc;
use std::time::Duration;

use rustls::ClientConfig;
use tonic::transport::{Channel, Endpoint};
use veil_core::dispatch::{Call, Reply};
use veil_core::EngineResult;

use crate::pb::engine_client::EngineClient;
use crate::pb::Frame;
use crate::tls::Connector;
use crate::token::{self, Tokens};
use crate::{limits, unavailable};

/// Why a call to another node got no reply.
#[derive(Debug)]
pub enum CallError {
    /// The node does not own the call's partition (any more): it ran nothing, so the call may go to the
    /// partition's next owner.
    NotOwner,
    /// No answer: the node unreachable, gone, or past the call's bound. Whether the call took effect there
    /// is unknown.
    Failed(veil_core::EngineError),
}

/// Another node's engine service.
#[derive(Clone)]
pub struct Peer {
    /// `host:port`, as the owner's lease row publishes it.
    addr: String,
    client: EngineClient<Channel>,
    /// Read at each call: a rotation changes the token sent without reconnecting.
    tokens: Tokens,
}

impl Peer {
    /// A peer at `addr` (`host:port`); nothing is connected until the first call. With `tls`, every
    /// connection is TLS with this node's certificate, and the peer must present a node's
    /// (crate::tls); the token then travels only inside it.
    pub fn new(addr: &str, tokens: &Tokens, tls: Option<&Arc<ClientConfig>>) -> EngineResult<Self> {
        // The scheme stays http: tonic's own TLS is not used; the connector below does the handshake.
        let endpoint = Endpoint::from_shared(format!("http://{addr}"))
            .map_err(|error| unavailable(format!("the owner's address {addr:?}: {error}")))?
            .connect_timeout(Duration::from_millis(limits::CONNECT_MS_MAX))
            .tcp_nodelay(true)
            .http2_keep_alive_interval(Duration::from_millis(limits::KEEPALIVE_INTERVAL_MS))
            .keep_alive_timeout(Duration::from_millis(limits::KEEPALIVE_TIMEOUT_MS))
            .keep_alive_while_idle(true);
        let channel = match tls {
            Some(config) => endpoint.connect_with_connector_lazy(Connector::new(config.clone())),
            None => endpoint.connect_lazy(),
        };
        let client = EngineClient::new(channel)
            .max_decoding_message_size(limits::FRAME_BYTES_MAX)
            .max_encoding_message_size(limits::FRAME_BYTES_MAX);
        Ok(Self {
            addr: addr.to_owned(),
            client,
            tokens: tokens.clone(),
        })
    }

    pub fn addr(&self) -> &str {
        &self.addr
    }

    /// Runs `call` at the peer; a call without a queue for its `partitions` (empty otherwise).
    pub async fn call(&self, call: &Call, partitions: Vec<u32>) -> Result<Reply, CallError> {
        let call_wait_ms = wait_ms(call);
        let body = postcard::to_allocvec(call).map_err(|error| {
            CallError::Failed(unavailable(format!("cannot encode the call: {error}")))
        })?;
        let mut request = tonic::Request::new(Frame { body, partitions });
        request.set_timeout(bound_of(call_wait_ms));
        request
            .metadata_mut()
            .insert(token::HEADER, self.tokens.header());
        let mut client = self.client.clone();
        let frame = client.call(request).await.map_err(|status| {
            if status.code() == tonic::Code::FailedPrecondition {
                return CallError::NotOwner;
            }
            CallError::Failed(unavailable(format!(
                "the node that owns the queue ({}) did not answer: {}",
                self.addr,
                status.message()
            )))
        })?;
        postcard::from_bytes(&frame.into_inner().body).map_err(|error| {
            CallError::Failed(unavailable(format!(
                "the owner's reply does not decode: {error}"
            )))
        })
    }
}

/// How long `call` may wait at the owner by its own request: a receive's long poll (the queue's default wait
/// when it names none, at most the engine's limit), nothing for any other call.
fn wait_ms(call: &Call) -> u64 {
    match call {
        Call::Receive { options, .. } => options
            .wait_ms
            .unwrap_or(veil_core::limits::RECEIVE_WAIT_MS_MAX)
            .min(veil_core::limits::RECEIVE_WAIT_MS_MAX),
        _ => 0,
    }
}

/// The bound of a call that may wait `wait_ms` at the owner.
fn bound_of(wait_ms: u64) -> Duration {
    Duration::from_millis(wait_ms.saturating_add(limits::CALL_BEYOND_WAIT_MS_MAX))
}

#[cfg(test)]
mod tests {
    use super::*;
    use veil_core::{QueueKey, ReceiveOptions};

    fn receive(wait_ms: Option<u64>) -> Call {
        Call::Receive {
            key: QueueKey::new("ns", "q"),
            options: ReceiveOptions {
                wait_ms,
                ..ReceiveOptions::new(1)
            },
        }
    }

    #[test]
    fn a_long_poll_across_nodes_is_bounded_by_its_own_wait_not_by_a_fixed_call_time() {
        let hour_ms = veil_core::limits::RECEIVE_WAIT_MS_MAX;
        let beyond = Duration::from_millis(limits::CALL_BEYOND_WAIT_MS_MAX);
        assert_eq!(
            bound_of(wait_ms(&receive(Some(hour_ms)))),
            Duration::from_millis(hour_ms) + beyond
        );
        assert_eq!(bound_of(wait_ms(&receive(Some(0)))), beyond);
        assert_eq!(
            bound_of(wait_ms(&receive(None))),
            Duration::from_millis(hour_ms) + beyond,
            "without a wait of its own a receive may wait as long as its queue's default"
        );
        let list = Call::ListQueues {
            namespace: "ns".into(),
            prefix: String::new(),
        };
        assert_eq!(bound_of(wait_ms(&list)), beyond);
    }
}
