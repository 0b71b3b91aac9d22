//! veil-kubemq: KubeMQ's queues protocol over gRPC. `proto/kubemq.proto` is Veil's own description of the
//! wire (package `kubemq`, service `kubemq`, KubeMQ's message names and field numbers), compiled at build time
//! without a system protoc; [`convert`] is the pure layer (wire ↔ engine, KubeMQ's validation and in-band
//! error texts); [`service`] is the thin tonic service over the engine; [`serve`] runs it with optional token
//! authentication and a graceful stop that tells open downstreams `CloseByServer`.

pub mod convert;
pub mod limits;
pub mod service;

use std::net::SocketAddr;
use std::sync::Arc;

use tokio::sync::watch;
use tonic::{Request, Status};
use veil_core::Engine;

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

/// tonic's interceptor signature fixes the error type to `Status`, however large.
#[allow(clippy::result_large_err)]
fn authenticate(tokens: &[String], request: Request<()>) -> Result<Request<()>, Status> {
    let presented = request
        .metadata()
        .get("authorization")
        .and_then(|v| v.to_str().ok());
    check_token(tokens, presented).map_err(Status::unauthenticated)?;
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
    let service = service::KubemqService::new(engine, config.settings, shutdown.clone());
    let interceptor = move |request: Request<()>| authenticate(&tokens, request);
    let mut stopped = shutdown;
    tonic::transport::Server::builder()
        .add_service(pb::kubemq_server::KubemqServer::with_interceptor(
            service,
            interceptor,
        ))
        .serve_with_incoming_shutdown(
            // tonic sets TCP_NODELAY only on listeners it binds itself: without it, a response that spans
            // segments waits on the client's delayed ACK (~40 ms per batch).
            tokio_stream::StreamExt::map(
                tokio_stream::wrappers::TcpListenerStream::new(listener),
                |accepted| {
                    if let Ok(stream) = &accepted {
                        if let Err(error) = stream.set_nodelay(true) {
                            tracing::warn!(%error, "cannot set TCP_NODELAY on a KubeMQ connection");
                        }
                    }
                    accepted
                },
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
    use super::check_token;

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
