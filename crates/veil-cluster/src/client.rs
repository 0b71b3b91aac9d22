//! A connection to another node's internal service. Connects lazily and reconnects by itself (tonic's
//! channel); every failure to get an answer — the node unreachable, gone, or past the call's bound — is the
//! protocols' "service unavailable", and says nothing about whether the call took effect at the owner, as
//! for any request whose answer was lost.

use std::time::Duration;

use tonic::metadata::MetadataValue;
use tonic::transport::{Channel, Endpoint};
use veil_core::dispatch::{Call, Reply};
use veil_core::EngineResult;

use crate::pb::engine_client::EngineClient;
use crate::pb::Frame;
use crate::token::{self, Token};
use crate::{limits, unavailable};

/// Another node's engine service.
#[derive(Clone)]
pub struct Peer {
    /// `host:port`, as the owner's lease row publishes it.
    addr: String,
    client: EngineClient<Channel>,
    token: MetadataValue<tonic::metadata::Ascii>,
}

impl Peer {
    /// A peer at `addr` (`host:port`); nothing is connected until the first call.
    pub fn new(addr: &str, token: &Token) -> EngineResult<Self> {
        let endpoint = Endpoint::from_shared(format!("http://{addr}"))
            .map_err(|error| unavailable(format!("the owner's address {addr:?}: {error}")))?
            .connect_timeout(Duration::from_millis(limits::CONNECT_MS_MAX))
            .tcp_nodelay(true)
            .http2_keep_alive_interval(Duration::from_millis(limits::KEEPALIVE_INTERVAL_MS))
            .keep_alive_timeout(Duration::from_millis(limits::KEEPALIVE_TIMEOUT_MS))
            .keep_alive_while_idle(true);
        let client = EngineClient::new(endpoint.connect_lazy())
            .max_decoding_message_size(limits::FRAME_BYTES_MAX)
            .max_encoding_message_size(limits::FRAME_BYTES_MAX);
        let token = token
            .as_str()
            .parse()
            .map_err(|_| unavailable("the cluster token is not a header value"))?;
        Ok(Self {
            addr: addr.to_owned(),
            client,
            token,
        })
    }

    pub fn addr(&self) -> &str {
        &self.addr
    }

    /// Runs `call` at the peer.
    pub async fn call(&self, call: Call) -> EngineResult<Reply> {
        let body = postcard::to_allocvec(&call)
            .map_err(|error| unavailable(format!("cannot encode the call: {error}")))?;
        let mut request = tonic::Request::new(Frame { body });
        request.set_timeout(Duration::from_millis(limits::CALL_MS_MAX));
        request
            .metadata_mut()
            .insert(token::HEADER, self.token.clone());
        let mut client = self.client.clone();
        let frame = client.call(request).await.map_err(|status| {
            unavailable(format!(
                "the node that owns the queues ({}) did not answer: {}",
                self.addr,
                status.message()
            ))
        })?;
        postcard::from_bytes(&frame.into_inner().body)
            .map_err(|error| unavailable(format!("the owner's reply does not decode: {error}")))
    }
}
