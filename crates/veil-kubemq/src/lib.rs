//! veil-kubemq: KubeMQ's queues protocol over gRPC. `proto/kubemq.proto` is Veil's own description of the
//! wire (package `kubemq`, service `kubemq`, KubeMQ's message names and field numbers), compiled at build time
//! without a system protoc; [`convert`] is the pure layer (wire ↔ engine, KubeMQ's validation and in-band
//! error texts); [`auth`] is KubeMQ's authentication (static tokens, JWT) and authorization policy;
//! [`service`] is the thin tonic service over the engine, which checks each request's channel; [`serve`]
//! runs it with optional TLS, the listener limits of veil-http (connections, TLS handshake timeout, a
//! per-connection request-rate limit answered with `RESOURCE_EXHAUSTED`) and a graceful stop that tells
//! open downstreams `CloseByServer`.

pub mod auth;
mod codec;
pub mod convert;
pub mod limits;
pub mod service;
pub mod settings;

use std::net::SocketAddr;
use std::sync::Arc;

use tokio::sync::watch;
use tonic::{Request, Status};
use veil_core::Dispatch;
use veil_http::{ConnectionInfo, Limits};
use veil_telemetry::Telemetry;

pub use auth::{AuthConfig, Caller};
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
    /// Static tokens, JWT verification and KubeMQ's authorization policy ([`auth`]); all off by default.
    pub auth: AuthConfig,
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

/// What authentication found for one request, carried to the handler in the request's extensions: the
/// handler refuses it (with its operation's name in the metrics and the audit log), except Ping, which
/// needs no token in KubeMQ.
#[derive(Clone, Debug)]
pub(crate) struct Verdict(pub(crate) Result<Caller, String>);

/// tonic's interceptor signature fixes the error type to `Status`, however large. The interceptor does not
/// know the RPC, so it only records the verdict (see [`Verdict`]). `now` is the engine's clock, on which a
/// JWT's lifetime is judged.
#[allow(clippy::result_large_err)]
fn authenticate(
    auth: &AuthConfig,
    mut request: Request<()>,
    now: veil_core::Millis,
) -> Result<Request<()>, Status> {
    let presented = request
        .metadata()
        .get("authorization")
        .and_then(|v| v.to_str().ok());
    let verdict = Verdict(auth.authenticate(presented, now));
    request.extensions_mut().insert(verdict);
    Ok(request)
}

/// Serves the KubeMQ endpoint on `listener` until `shutdown` turns true; open streams then end (downstreams
/// with `CloseByServer`, their unacked messages released) and the server drains.
#[allow(clippy::result_large_err)] // the interceptor closure: see `authenticate`
pub async fn serve(
    engine: impl Into<Dispatch>,
    config: KubemqConfig,
    listener: tokio::net::TcpListener,
    shutdown: watch::Receiver<bool>,
) -> Result<(), tonic::transport::Error> {
    let auth = Arc::new(config.auth);
    let limits = config.limits;
    let engine: Dispatch = engine.into();
    let clock = engine.clone();
    let service = service::KubemqService::with_admission(
        engine,
        config.settings,
        shutdown.clone(),
        config.telemetry,
        veil_http::Admission::new(&limits),
    );
    let interceptor = move |request: Request<()>| {
        admit(&request)?;
        authenticate(&auth, request, clock.now())
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
            veil_http::grpc::incoming("kubemq", listener, config.tls, limits),
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
    use super::{authenticate, AuthConfig, Verdict};
    use crate::auth::{StaticToken, TOKEN_NOT_SUPPLIED};
    use tonic::Request;

    fn verdict(auth: &AuthConfig, token: Option<&str>) -> Result<(), String> {
        let mut request = Request::new(());
        if let Some(token) = token {
            request
                .metadata_mut()
                .insert("authorization", token.parse().expect("ascii"));
        }
        let request = authenticate(auth, request, 0).expect("the interceptor never refuses");
        let Verdict(verdict) = request.extensions().get::<Verdict>().cloned().expect("set");
        verdict.map(drop)
    }

    #[test]
    fn without_tokens_every_request_is_accepted() {
        assert_eq!(verdict(&AuthConfig::default(), None), Ok(()));
    }

    #[test]
    fn with_tokens_the_authorization_metadata_must_be_one_of_them_verbatim() {
        let auth = AuthConfig {
            static_tokens: vec![
                StaticToken::unrestricted("t1"),
                StaticToken::unrestricted("t2"),
            ],
            ..AuthConfig::default()
        };
        assert_eq!(verdict(&auth, Some("t2")), Ok(()));
        assert_eq!(verdict(&auth, None), Err(TOKEN_NOT_SUPPLIED.to_string()));
        assert!(
            verdict(&auth, Some("Bearer t2")).is_err(),
            "no Bearer prefix"
        );
        assert!(verdict(&auth, Some("t3")).is_err());
    }
}
