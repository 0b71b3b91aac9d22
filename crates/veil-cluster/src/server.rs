//! The internal service: runs each call on this node's engine for the call's partition while it owns it,
//! and refuses it as unavailable otherwise — it never forwards, so a call crosses at most one hop and two
//! nodes with stale views cannot bounce it between them. A call without a queue is answered for the
//! partitions the caller names, all of which this node must own. Every call presents the cluster's token
//! first.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::watch;
use tonic::{Request, Response, Status};
use veil_core::dispatch::Call;

use crate::limits;
use crate::pb::engine_server::{Engine, EngineServer};
use crate::pb::Frame;
use crate::routing::Routing;
use crate::token::{self, Tokens};

/// What a node answers for queues it does not own (its lease moved on, or it never had it).
pub const NOT_OWNER: &str = "this node does not own the queue's partition now; retry";

struct Service {
    routing: Routing,
}

#[tonic::async_trait]
impl Engine for Service {
    async fn call(&self, request: Request<Frame>) -> Result<Response<Frame>, Status> {
        let frame = request.into_inner();
        let call: Call = postcard::from_bytes(&frame.body).map_err(|error| {
            Status::invalid_argument(format!("the call does not decode: {error}"))
        })?;
        // Not the owner: a status of its own, so that the caller knows nothing ran and may try the
        // partition's next owner.
        let reply = match call.queue() {
            None => self
                .routing
                .answer_for(call, &frame.partitions)
                .await
                .ok_or_else(|| Status::failed_precondition(NOT_OWNER))?,
            // An engine that may no longer answer (its lease may have lapsed, its store failed) is as good as
            // gone: the caller waits for the partition's next owner rather than fail at once.
            Some(key) => match self.routing.engine(self.routing.partition_of(key)) {
                Some(engine) if engine.serving().is_ok() => engine.execute(call).await,
                _ => return Err(Status::failed_precondition(NOT_OWNER)),
            },
        };
        let body = postcard::to_allocvec(&reply)
            .map_err(|error| Status::internal(format!("the reply does not encode: {error}")))?;
        Ok(Response::new(Frame {
            body,
            partitions: Vec::new(),
        }))
    }
}

/// The name of the internal port's listener in logs and in the `listener` label of the metrics.
pub const LISTENER: &str = "cluster";

/// The internal port's limits for veil-http's accept loop: a connection cap, a deadline for the first bytes
/// and for the TLS handshake, and an idle timeout (a node's connections ping every second, so a silent one is
/// half-open or not a node's).
pub fn listener_limits() -> veil_http::Limits {
    veil_http::Limits {
        max_connections: limits::CONNECTIONS_MAX,
        header_read_timeout: Duration::from_millis(limits::FIRST_BYTES_MS_MAX),
        tls_handshake_timeout: Duration::from_millis(limits::TLS_HANDSHAKE_MS_MAX),
        idle_timeout: Some(Duration::from_millis(limits::IDLE_MS_MAX)),
        ..veil_http::Limits::default()
    }
}

/// Serves the internal service on `listener` until `shutdown` turns true, over the connections of veil-http's
/// accept loop — the one every listener of the process runs (docs/security.md "Every listener's accept
/// loop"), which never ends on an accept error. Returning before `shutdown` is a fault of the listener, which
/// the caller reports and acts on. With `tls`, the port serves TLS only.
pub async fn serve(
    listener: TcpListener,
    tls: Option<Arc<rustls::ServerConfig>>,
    routing: Routing,
    tokens: Tokens,
    mut shutdown: watch::Receiver<bool>,
) -> Result<(), tonic::transport::Error> {
    if let Ok(addr) = listener.local_addr() {
        tracing::info!(%addr, tls = tls.is_some(), "cluster RPC listening");
    }
    #[allow(clippy::result_large_err)] // tonic's interceptor signature
    let check = move |request: Request<()>| {
        let presented = request
            .metadata()
            .get(token::HEADER)
            .map(|value| value.as_bytes());
        match presented {
            Some(presented) if tokens.admits(presented) => Ok(request),
            _ => {
                veil_telemetry::cluster_rpc().refused_one();
                Err(Status::unauthenticated(
                    "the cluster token is missing or wrong: every node must use the same database",
                ))
            }
        }
    };
    let server = EngineServer::new(Service { routing })
        .max_decoding_message_size(limits::FRAME_BYTES_MAX)
        .max_encoding_message_size(limits::FRAME_BYTES_MAX);
    let service = tonic::service::interceptor::InterceptedService::new(server, check);
    // Dropping the stream when the server stops ends the accept loop.
    let incoming = veil_http::grpc::incoming(LISTENER, listener, tls, listener_limits());
    tonic::transport::Server::builder()
        .http2_keepalive_interval(Some(Duration::from_millis(limits::KEEPALIVE_INTERVAL_MS)))
        .http2_keepalive_timeout(Some(Duration::from_millis(limits::KEEPALIVE_TIMEOUT_MS)))
        .add_service(service)
        .serve_with_incoming_shutdown(incoming, async move {
            let _ = shutdown.wait_for(|stop| *stop).await;
        })
        .await
}

/// The address a listener bound to `bind` with an OS-chosen port.
pub async fn bind(bind: std::net::IpAddr) -> std::io::Result<(TcpListener, SocketAddr)> {
    let listener = TcpListener::bind(SocketAddr::new(bind, 0)).await?;
    let addr = listener.local_addr()?;
    Ok((listener, addr))
}
