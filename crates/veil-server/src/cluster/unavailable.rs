//! The unavailable servers of a cluster node: one per protocol, on loopback, where the doors send
//! connections while no node can serve (the database is down, no leader yet, the leader unreachable). They
//! answer every request at once with the protocol's "service unavailable" — SQS `ServiceUnavailable` (503),
//! Azure 503 `ServerBusy`, gRPC `UNAVAILABLE`, the admin API 503 — which the SDKs retry, and they close the
//! connection after the answer, so that the retry comes through the door again and finds the leader once
//! there is one. `/healthz` stays 200 (the node itself is alive); `/readyz` is 503.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use crate::config::Settings;
use crate::{bind, ServeError, TlsConfigs};

/// gRPC's status code UNAVAILABLE.
const GRPC_UNAVAILABLE: &str = "14";
const MESSAGE: &str =
    "no Veil node can serve right now (the database is unreachable or a new leader is \
                       loading); retry";

/// Where each unavailable server listens.
#[derive(Clone, Copy, Debug)]
pub struct UnavailableAddrs {
    pub sqs: SocketAddr,
    pub azure: SocketAddr,
    pub kubemq: SocketAddr,
    pub admin: SocketAddr,
}

pub struct Unavailable {
    addrs: UnavailableAddrs,
    stop: oneshot::Sender<()>,
    served: JoinHandle<()>,
}

impl Unavailable {
    pub fn addrs(&self) -> UnavailableAddrs {
        self.addrs
    }

    pub async fn stop(self) {
        let _ = self.stop.send(());
        let _ = self.served.await;
    }
}

/// Starts the four servers, each with its listener's TLS (the doors relay bytes, so the client's handshake
/// is with them).
pub async fn start(tls: &TlsConfigs, settings: &Settings) -> Result<Unavailable, ServeError> {
    let loopback = SocketAddr::from(([127, 0, 0, 1], 0));
    let sqs = Router::new()
        .fallback(|headers: HeaderMap| async move { closing(veil_sqs::unavailable(&headers)) });
    let azure = Router::new().fallback(|headers: HeaderMap| async move {
        // Azure's 503 (`ServerBusy`, "unable to receive requests"), the same answer as its throttling.
        closing(veil_azure::throttled(&headers))
    });
    let kubemq = Router::new().fallback(|| async { grpc_unavailable() });
    let admin = Router::new()
        .route("/healthz", get(|| async { "ok\n" }))
        .route(
            "/readyz",
            get(|| async {
                closing((StatusCode::SERVICE_UNAVAILABLE, "no leader\n").into_response())
            }),
        )
        .fallback(|| async {
            closing(
                (
                    StatusCode::SERVICE_UNAVAILABLE,
                    axum::Json(serde_json::json!({
                        "error": {"code": "Unavailable", "message": MESSAGE}
                    })),
                )
                    .into_response(),
            )
        });
    let limits = &settings.listeners;
    let servers = [
        ("sqs-unavailable", sqs, tls.sqs.clone(), &limits.sqs),
        ("azure-unavailable", azure, tls.azure.clone(), &limits.azure),
        (
            "kubemq-unavailable",
            kubemq,
            tls.kubemq.clone(),
            &limits.kubemq,
        ),
        ("admin-unavailable", admin, tls.admin.clone(), &limits.admin),
    ];
    let (stop, stopped) = oneshot::channel::<()>();
    let (stop_all, _) = tokio::sync::watch::channel(false);
    let mut addrs = Vec::new();
    let mut tasks = Vec::new();
    for (name, router, tls, listener) in servers {
        let tcp = bind(loopback).await?;
        addrs.push(tcp.local_addr().map_err(|source| ServeError::Listen {
            addr: loopback,
            source,
        })?);
        let listener = veil_http::Listener {
            name,
            tcp,
            tls,
            limits: listener.limits.clone(),
            throttled: Arc::new(|_: &HeaderMap| StatusCode::SERVICE_UNAVAILABLE.into_response()),
        };
        let mut stopping = stop_all.subscribe();
        tasks.push(tokio::spawn(veil_http::serve(
            listener,
            router,
            async move {
                let _ = stopping.wait_for(|stop| *stop).await;
            },
        )));
    }
    let served = tokio::spawn(async move {
        let _ = stopped.await;
        stop_all.send_replace(true);
        for task in tasks {
            let _ = task.await;
        }
    });
    Ok(Unavailable {
        addrs: UnavailableAddrs {
            sqs: addrs[0],
            azure: addrs[1],
            kubemq: addrs[2],
            admin: addrs[3],
        },
        stop,
        served,
    })
}

/// HTTP/1: `Connection: close`, so the client's retry opens a new connection through the door.
fn closing(mut response: Response) -> Response {
    response
        .headers_mut()
        .insert(header::CONNECTION, HeaderValue::from_static("close"));
    response
}

/// A trailers-only gRPC answer: status UNAVAILABLE in the headers, no body.
fn grpc_unavailable() -> Response {
    let mut response = StatusCode::OK.into_response();
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/grpc"),
    );
    headers.insert("grpc-status", HeaderValue::from_static(GRPC_UNAVAILABLE));
    headers.insert(
        "grpc-message",
        HeaderValue::from_static("no Veil node can serve right now; retry"),
    );
    response
}
