//! veil-kubemq: KubeMQ's queues protocol over gRPC. `proto/kubemq.proto` is Veil's own description of the
//! wire (package `kubemq`, service `kubemq`, KubeMQ's message names and field numbers), compiled at build time
//! without a system protoc; [`convert`] is the pure layer (wire ↔ engine, KubeMQ's validation and in-band
//! error texts); [`service`] is the thin tonic service over the engine; [`serve`] runs it with optional token
//! authentication, optional TLS, the listener limits of veil-http (connections, TLS handshake timeout, a
//! per-connection request-rate limit answered with `RESOURCE_EXHAUSTED`) and a graceful stop that tells open
//! downstreams `CloseByServer`.

pub mod convert;
pub mod limits;
pub mod service;

use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use tokio::sync::watch;
use tonic::{Request, Status};
use veil_core::Engine;
use veil_http::{Conn, ConnectionInfo, Limits};
use veil_telemetry::audit::{self, AuditEvent};
use veil_telemetry::{Code, Protocol, Telemetry};

pub use convert::Settings;

/// The generated protocol types and the server trait.
#[allow(clippy::all, missing_docs)]
pub mod pb {
    tonic::include_proto!("kubemq");
}

/// How the KubeMQ endpoint runs.
#[derive(Clone, Debug, Default)]
pub struct KubemqConfig {
    pub settings: Settings,
    /// When non-empty, gRPC metadata `authorization` must equal one of these (no "Bearer" prefix).
    pub auth_tokens: Vec<String>,
    /// Where each RPC is counted (`veil_requests_total{protocol="kubemq"}`); detached by default.
    pub telemetry: Telemetry,
    /// With a configuration the endpoint serves TLS only (ALPN h2).
    pub tls: Option<Arc<rustls::ServerConfig>>,
    /// Connections, TLS handshake timeout, header list size and the per-connection request rate.
    pub limits: Limits,
}

/// The caller's address: from the connection Veil accepted, else from tonic (a test's own server).
pub fn peer_addr<T>(request: &Request<T>) -> Option<SocketAddr> {
    request
        .extensions()
        .get::<ConnectionInfo>()
        .map(|info| info.peer)
        .or_else(|| request.remote_addr())
}

/// A connection accepted by veil-http, as tonic's server takes it: its connect info, which tonic puts in
/// every request's extensions, is veil-http's [`ConnectionInfo`] (peer, TLS, rate limit).
struct GrpcConn(Conn);

impl tonic::transport::server::Connected for GrpcConn {
    type ConnectInfo = ConnectionInfo;

    fn connect_info(&self) -> ConnectionInfo {
        self.0.info().clone()
    }
}

impl tokio::io::AsyncRead for GrpcConn {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().0).poll_read(cx, buf)
    }
}

impl tokio::io::AsyncWrite for GrpcConn {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().0).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().0).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().0).poll_shutdown(cx)
    }
}

/// The per-connection request-rate limit: an RPC over it fails with `RESOURCE_EXHAUSTED`, gRPC's throttling
/// status (docs/security.md "Limits against abuse").
#[allow(clippy::result_large_err)]
fn admit(request: &Request<()>) -> Result<(), Status> {
    match request.extensions().get::<ConnectionInfo>() {
        Some(info) if !info.admit() => Err(Status::resource_exhausted(
            "request rate limit of the connection exceeded",
        )),
        _ => Ok(()),
    }
}

/// Checks the `authorization` metadata against the configured tokens; a missing or wrong token is
/// `Unauthenticated`, which the SDKs raise as their authentication error.
pub fn check_token(tokens: &[String], presented: Option<&str>) -> Result<(), &'static str> {
    if tokens.is_empty() {
        return Ok(());
    }
    match presented {
        None => Err("missing authorization token"),
        Some(token) if tokens.iter().any(|t| t == token) => Ok(()),
        Some(_) => Err("invalid authorization token"),
    }
}

/// tonic's interceptor signature fixes the error type to `Status`, however large. A rejected token is
/// audited and counted; tonic's interceptor does not see the RPC's path, so its operation is `Unknown` and
/// its code the gRPC status, `Unauthenticated`.
#[allow(clippy::result_large_err)]
fn authenticate(
    tokens: &[String],
    telemetry: &Telemetry,
    request: Request<()>,
) -> Result<Request<()>, Status> {
    let presented = request
        .metadata()
        .get("authorization")
        .and_then(|v| v.to_str().ok());
    if let Err(reason) = check_token(tokens, presented) {
        let started = std::time::Instant::now();
        let client = request
            .remote_addr()
            .map(|addr| addr.ip().to_string())
            .unwrap_or_default();
        audit::record(&AuditEvent {
            action: "Authenticate",
            protocol: Protocol::Kubemq,
            namespace: "",
            queue: "",
            identity: "",
            client: &client,
            outcome: "Unauthenticated",
        });
        let code = Code::Error("Unauthenticated");
        telemetry.observe_request(Protocol::Kubemq, "Unknown", code, started.elapsed());
        return Err(Status::unauthenticated(reason));
    }
    Ok(request)
}

/// Serves the KubeMQ endpoint on `listener` until `shutdown` turns true; open streams then end (downstreams
/// with `CloseByServer`, their unacked messages released) and the server drains.
#[allow(clippy::result_large_err)] // the interceptor closure: see `authenticate`
pub async fn serve(
    engine: Arc<Engine>,
    config: KubemqConfig,
    listener: tokio::net::TcpListener,
    shutdown: watch::Receiver<bool>,
) -> Result<(), tonic::transport::Error> {
    let tokens = Arc::new(config.auth_tokens);
    let limits = config.limits;
    let telemetry = config.telemetry;
    let service =
        service::KubemqService::new(engine, config.settings, shutdown.clone(), telemetry.clone());
    let interceptor = move |request: Request<()>| {
        admit(&request)?;
        authenticate(&tokens, &telemetry, request)
    };
    let mut stopped = shutdown;
    tonic::transport::Server::builder()
        .http2_max_header_list_size(u32::try_from(limits.max_header_bytes).unwrap_or(u32::MAX))
        .http2_keepalive_interval(Some(std::time::Duration::from_millis(
            veil_http::limits::HTTP2_KEEPALIVE_INTERVAL_MS,
        )))
        .add_service(pb::kubemq_server::KubemqServer::with_interceptor(
            service,
            interceptor,
        ))
        .serve_with_incoming_shutdown(
            // veil-http's accept loop: connection limit, TCP_NODELAY (tonic sets it only on listeners it binds
            // itself), the TLS handshake under its timeout. Dropping the stream on stop ends the loop.
            tokio_stream::StreamExt::map(
                tokio_stream::wrappers::ReceiverStream::new(veil_http::accept(
                    "kubemq", listener, config.tls, limits,
                )),
                |conn| Ok::<_, std::io::Error>(GrpcConn(conn)),
            ),
            async move {
                let _ = stopped.wait_for(|stop| *stop).await;
            },
        )
        .await
}

/// The address the endpoint listens on by default.
pub fn listen_default() -> SocketAddr {
    limits::LISTEN_DEFAULT
        .parse()
        .unwrap_or(SocketAddr::from(([127, 0, 0, 1], 50_000)))
}

#[cfg(test)]
mod tests {
    use super::{authenticate, check_token};
    use tonic::Request;
    use veil_telemetry::{capture, Code, Protocol, Telemetry};

    #[test]
    fn a_rejected_token_is_audited_and_counted_as_unauthenticated() {
        let telemetry = Telemetry::default();
        let tokens = vec!["t1".to_string()];
        let (captured, _guard) = capture::capture();
        let mut request = Request::new(());
        request
            .metadata_mut()
            .insert("authorization", "wrong".parse().expect("ascii"));
        let refused = authenticate(&tokens, &telemetry, request);
        assert_eq!(
            refused.map(drop).map_err(|s| s.code()),
            Err(tonic::Code::Unauthenticated)
        );
        let mut accepted = Request::new(());
        accepted
            .metadata_mut()
            .insert("authorization", "t1".parse().expect("ascii"));
        assert!(authenticate(&tokens, &telemetry, accepted).is_ok());
        let code = Code::Error("Unauthenticated");
        assert_eq!(
            telemetry.request_count(Protocol::Kubemq, "Unknown", code),
            1
        );
        let audit = captured.audit();
        assert_eq!(audit.len(), 1, "only the rejection is audited: {audit:?}");
        assert_eq!(audit[0].field("action"), "Authenticate");
        assert_eq!(audit[0].field("outcome"), "Unauthenticated");
    }

    #[test]
    fn without_tokens_every_request_is_accepted() {
        assert_eq!(check_token(&[], None), Ok(()));
    }

    #[test]
    fn with_tokens_the_authorization_metadata_must_be_one_of_them_verbatim() {
        let tokens = vec!["t1".to_string(), "t2".to_string()];
        assert_eq!(check_token(&tokens, Some("t2")), Ok(()));
        assert!(check_token(&tokens, None).is_err());
        assert!(
            check_token(&tokens, Some("Bearer t2")).is_err(),
            "no Bearer prefix"
        );
        assert!(check_token(&tokens, Some("t3")).is_err());
    }
}
