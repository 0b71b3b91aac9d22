//! The serve loop of the HTTP listeners (SQS, Azure, admin): hyper's HTTP/1 and HTTP/2 server over the
//! connections of [`crate::conn::accept`], with the header and body limits and timeouts, the per-connection
//! request-rate limit and the listener's admission limit answered by the protocol's own throttling response,
//! and a graceful stop (stop accepting, finish the requests in flight).

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::http::{HeaderMap, Request};
use axum::response::Response;
use axum::Router;
use bytes::Bytes;
use http_body::{Body as HttpBody, Frame, SizeHint};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use rustls::ServerConfig;
use tokio::net::TcpListener;
use tokio::time::Sleep;
use tower_service::Service;

use crate::admission::Admission;
use crate::conn::{accept, ConnectionInfo, HttpVersion};
use crate::limits::{Limits, HTTP2_KEEPALIVE_INTERVAL_MS, THROTTLED_BODY_DRAIN_BYTES};

/// The answer to a request over its connection's rate limit or its listener's admission limit, in the
/// protocol's own words (SQS `RequestThrottled`, Azure `ServerBusy`); it sees the request's headers to pick
/// the protocol's dialect.
pub type Throttled = Arc<dyn Fn(&HeaderMap) -> Response + Send + Sync>;

/// One HTTP listener.
pub struct Listener {
    /// Labels the listener's log lines.
    pub name: &'static str,
    pub tcp: TcpListener,
    /// With a configuration the listener serves TLS only.
    pub tls: Option<Arc<ServerConfig>>,
    pub limits: Limits,
    pub throttled: Throttled,
}

/// Serves `router` on `listener` until `shutdown` resolves, then stops accepting and waits for the requests
/// in flight. Requests carry `ConnectInfo<SocketAddr>` and [`ConnectionInfo`] in their extensions.
pub async fn serve(listener: Listener, router: Router, shutdown: impl Future<Output = ()>) {
    let Listener {
        name,
        tcp,
        tls,
        limits,
        throttled,
    } = listener;
    let builders = Arc::new(Builders::new(&limits));
    let body_timeout = limits.body_read_timeout;
    let admission = Admission::new(&limits);
    let mut connections = accept(name, tcp, tls, limits);
    let graceful = GracefulShutdown::new();
    // Dropped when the server stops, which ends the connections still waiting for their first bytes.
    let stopping = tokio::sync::watch::Sender::new(());
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let conn = tokio::select! {
            conn = connections.recv() => match conn {
                Some(conn) => conn,
                None => break,
            },
            () = &mut shutdown => break,
        };
        let info = conn.info().clone();
        let service = RequestService {
            router: router.clone(),
            info,
            throttled: throttled.clone(),
            body_timeout,
            admission: admission.clone(),
        };
        let builders = builders.clone();
        let watcher = graceful.watcher();
        let mut stopping = stopping.subscribe();
        tokio::spawn(async move {
            // Until its first bytes a connection is not hyper's, so the graceful stop cannot reach it: it
            // ends here when the server stops, or when no bytes came by the connection's first-bytes deadline.
            let version = tokio::select! {
                version = conn.http_version() => match version {
                    Some(version) => version,
                    None => {
                        tracing::debug!(listener = name, "connection closed: no request within the header read timeout");
                        return;
                    }
                },
                _ = stopping.changed() => return,
            };
            let builder = builders.of(version);
            let connection = builder.serve_connection(TokioIo::new(conn), service);
            if let Err(error) = watcher.watch(connection).await {
                tracing::debug!(listener = name, %error, "connection ended with an error");
            }
        });
    }
    // Stop accepting: the accept loop ends with the receiver.
    drop(connections);
    drop(stopping);
    graceful.shutdown().await;
}

/// hyper-util's connection builders, configured alike: one per HTTP version, for a connection whose version
/// [`crate::conn::Conn::http_version`] told.
struct Builders {
    http1: auto::Builder<TokioExecutor>,
    http2: auto::Builder<TokioExecutor>,
}

impl Builders {
    fn new(limits: &Limits) -> Self {
        Self {
            http1: Self::configured(limits).http1_only(),
            http2: Self::configured(limits).http2_only(),
        }
    }

    fn configured(limits: &Limits) -> auto::Builder<TokioExecutor> {
        let mut builder = auto::Builder::new(TokioExecutor::new());
        builder
            .http1()
            .timer(TokioTimer::new())
            .header_read_timeout(limits.header_read_timeout)
            .max_buf_size(limits.max_header_bytes)
            .max_headers(limits.max_headers);
        builder
            .http2()
            .timer(TokioTimer::new())
            .max_header_list_size(u32::try_from(limits.max_header_bytes).unwrap_or(u32::MAX))
            .keep_alive_interval(Duration::from_millis(HTTP2_KEEPALIVE_INTERVAL_MS));
        builder
    }

    fn of(&self, version: HttpVersion) -> &auto::Builder<TokioExecutor> {
        match version {
            HttpVersion::Http1 => &self.http1,
            HttpVersion::Http2 => &self.http2,
        }
    }
}

/// hyper's service of one connection: admits the request past the rate limit and the admission limit, tags
/// it with the connection and its admission slot, bounds its body's pauses and hands it to the router.
#[derive(Clone)]
struct RequestService {
    router: Router,
    info: ConnectionInfo,
    throttled: Throttled,
    body_timeout: Duration,
    admission: Admission,
}

impl hyper::service::Service<Request<Incoming>> for RequestService {
    type Response = Response;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Response, Infallible>> + Send>>;

    fn call(&self, request: Request<Incoming>) -> Self::Future {
        if !self.info.admit() {
            return Box::pin(refuse(request, self.throttled.clone(), self.body_timeout));
        }
        let (throttled, body_timeout) = (self.throttled.clone(), self.body_timeout);
        let admission = self.admission.clone();
        let info = self.info.clone();
        let mut router = self.router.clone();
        Box::pin(async move {
            let Some(admitted) = admission.enter().await else {
                tracing::debug!(peer = %info.peer, "request refused: admission limit");
                return refuse(request, throttled, body_timeout).await;
            };
            let mut request = request.map(|body| Body::new(TimedBody::new(body, body_timeout)));
            request.extensions_mut().insert(ConnectInfo(info.peer));
            request.extensions_mut().insert(info);
            request.extensions_mut().insert(admitted.clone());
            // A Router is always ready: no poll_ready needed before call.
            let response = router.call(request).await;
            drop(admitted); // the slot is held until the answer is ready
            response
        })
    }
}

/// The protocol's throttling answer to `request`. A small body is read and dropped first: hyper closes a
/// connection whose request body was left unread, and a client would then get a fresh connection (and
/// bucket) just by being throttled.
async fn refuse(
    request: Request<Incoming>,
    throttled: Throttled,
    timeout: Duration,
) -> Result<Response, Infallible> {
    let (parts, body) = request.into_parts();
    let drained = http_body_util::BodyExt::collect(http_body_util::Limited::new(
        body,
        THROTTLED_BODY_DRAIN_BYTES,
    ));
    let _ = tokio::time::timeout(timeout, drained).await;
    Ok(throttled(&parts.headers))
}

/// The client paused sending a request body longer than the body read timeout.
#[derive(Debug, thiserror::Error)]
#[error("the request body stalled longer than the body read timeout")]
pub struct BodyTimeout;

/// A request body that fails when no piece of it arrives for `timeout` while it is being read.
struct TimedBody {
    inner: Incoming,
    timeout: Duration,
    /// Running while the reader waits for the next piece.
    waiting: Option<Pin<Box<Sleep>>>,
}

impl TimedBody {
    fn new(inner: Incoming, timeout: Duration) -> Self {
        Self {
            inner,
            timeout,
            waiting: None,
        }
    }
}

impl HttpBody for TimedBody {
    type Data = Bytes;
    type Error = Box<dyn std::error::Error + Send + Sync>;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let this = self.get_mut();
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(frame) => {
                this.waiting = None;
                Poll::Ready(frame.map(|frame| frame.map_err(Into::into)))
            }
            Poll::Pending => {
                let timeout = this.timeout;
                let waiting = this
                    .waiting
                    .get_or_insert_with(|| Box::pin(tokio::time::sleep(timeout)));
                match waiting.as_mut().poll(cx) {
                    Poll::Ready(()) => Poll::Ready(Some(Err(Box::new(BodyTimeout)))),
                    Poll::Pending => Poll::Pending,
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
