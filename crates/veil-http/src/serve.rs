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
use axum::http::header::CONNECTION;
use axum::http::{HeaderMap, HeaderValue, Request, StatusCode, Version};
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
use tokio::time::{Instant, Sleep};
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
    let body_timeouts = BodyTimeouts::of(&limits);
    let max_header_bytes = limits.max_header_bytes;
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
                None => {
                    // The accept loop ends only with its receiver; a panic in it is the one other way. The
                    // caller sees `serve` return before its shutdown and reports it.
                    tracing::error!(listener = name, "the listener's accept loop ended while the server runs");
                    break;
                }
            },
            () = &mut shutdown => break,
        };
        let info = conn.info().clone();
        let service = RequestService {
            router: router.clone(),
            info,
            throttled: throttled.clone(),
            body_timeouts,
            admission: admission.clone(),
            max_header_bytes,
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

/// hyper's service of one connection: admits the request past the rate limit, tags it with the connection
/// and the listener's [`Admission`] (which the handler enters once it knows who is asking), bounds its body's
/// pauses and total time, and hands it to the router.
#[derive(Clone)]
struct RequestService {
    router: Router,
    info: ConnectionInfo,
    throttled: Throttled,
    body_timeouts: BodyTimeouts,
    admission: Admission,
    /// The request head's limit: hyper's HTTP/1 read buffer only approximates it (one read may fill the
    /// buffer past its maximum, and a head that parses is taken), so every HTTP/1 head is measured here too;
    /// h2 enforces it on HTTP/2's header list itself (431).
    max_header_bytes: usize,
}

/// How long a request body may take: `pause` between two pieces, `total` from the request's head to its
/// last byte (docs/security.md "Limits against abuse": a trickle of one byte a pause cannot hold a request
/// open for ever).
#[derive(Clone, Copy, Debug)]
struct BodyTimeouts {
    pause: Duration,
    total: Duration,
}

impl BodyTimeouts {
    fn of(limits: &Limits) -> Self {
        Self {
            pause: limits.body_read_timeout,
            total: limits.body_read_total_timeout,
        }
    }
}

impl hyper::service::Service<Request<Incoming>> for RequestService {
    type Response = Response;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Response, Infallible>> + Send>>;

    fn call(&self, request: Request<Incoming>) -> Self::Future {
        if request.version() < Version::HTTP_2 && head_bytes(&request) > self.max_header_bytes {
            return Box::pin(std::future::ready(Ok(header_too_large())));
        }
        if !self.info.admit() {
            return Box::pin(refuse(
                request,
                self.throttled.clone(),
                self.body_timeouts.pause,
            ));
        }
        let body_timeouts = self.body_timeouts;
        let admission = self.admission.clone();
        let info = self.info.clone();
        let mut router = self.router.clone();
        Box::pin(async move {
            let mut request = request.map(|body| Body::new(TimedBody::new(body, body_timeouts)));
            request.extensions_mut().insert(ConnectInfo(info.peer));
            request.extensions_mut().insert(info);
            // Not a slot: the handler takes one once the body is read and the caller authenticated
            // (`Admission::enter`), so a client that cannot authenticate never holds one.
            request.extensions_mut().insert(admission);
            // A Router is always ready: no poll_ready needed before call.
            router.call(request).await
        })
    }
}

/// The bytes an HTTP/1 request head took on the wire: the request line, each header line and the blank line
/// (`max_header_bytes` counts these, docs/security.md "Limits against abuse").
fn head_bytes<B>(request: &Request<B>) -> usize {
    const LINE_END: usize = 2;
    const VERSION: usize = "HTTP/1.1".len();
    let target = request
        .uri()
        .path_and_query()
        .map_or(1, |target| target.as_str().len());
    let line = request.method().as_str().len() + 1 + target + 1 + VERSION + LINE_END;
    let headers: usize = request
        .headers()
        .iter()
        .map(|(name, value)| name.as_str().len() + ": ".len() + value.len() + LINE_END)
        .sum();
    line + headers + LINE_END
}

/// 431 Request Header Fields Too Large, as hyper and h2 answer a head over their own limits; the connection
/// closes, since its body was not read.
fn header_too_large() -> Response {
    let mut response = Response::new(Body::empty());
    *response.status_mut() = StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE;
    response
        .headers_mut()
        .insert(CONNECTION, HeaderValue::from_static("close"));
    response
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

/// The client paused sending a request body longer than the body read timeout, or took longer than the
/// total body timeout to send all of it; which one is said, so a client (and a test) can tell them apart.
#[derive(Debug, thiserror::Error)]
pub enum BodyTimeout {
    #[error("no piece of the request body came for {0} ms (the body read timeout)")]
    Pause(u128),
    #[error(
        "the request body was not complete within {0} ms of its head (the total body timeout)"
    )]
    Total(u128),
}

/// A request body that fails when no piece of it arrives for the pause timeout while it is being read, or
/// when its last piece has not arrived by its deadline.
struct TimedBody {
    inner: Incoming,
    pause: Duration,
    total: Duration,
    /// The total deadline, counted from the request's head.
    deadline: Instant,
    /// Running while the reader waits for the next piece: until the pause timeout or the deadline, whichever
    /// comes first.
    waiting: Option<Pin<Box<Sleep>>>,
}

impl TimedBody {
    fn new(inner: Incoming, timeouts: BodyTimeouts) -> Self {
        Self {
            inner,
            pause: timeouts.pause,
            total: timeouts.total,
            deadline: Instant::now() + timeouts.total,
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
                let wake_at = (Instant::now() + this.pause).min(this.deadline);
                let waiting = this
                    .waiting
                    .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(wake_at)));
                match waiting.as_mut().poll(cx) {
                    Poll::Ready(()) => {
                        let timeout = if Instant::now() >= this.deadline {
                            BodyTimeout::Total(this.total.as_millis())
                        } else {
                            BodyTimeout::Pause(this.pause.as_millis())
                        };
                        Poll::Ready(Some(Err(Box::new(timeout))))
                    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_http1_head_is_measured_as_it_was_sent() {
        let request = Request::builder()
            .method("POST")
            .uri("/?Action=ListQueues")
            .header("host", "127.0.0.1:9324")
            .header("x-long", "a".repeat(100))
            .body(())
            .expect("request");
        let wire = format!(
            "POST /?Action=ListQueues HTTP/1.1\r\nhost: 127.0.0.1:9324\r\nx-long: {}\r\n\r\n",
            "a".repeat(100)
        );
        assert_eq!(head_bytes(&request), wire.len());
    }

    #[test]
    fn a_head_over_the_limit_is_answered_431_and_closes() {
        let response = header_too_large();
        assert_eq!(
            response.status(),
            StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE
        );
        assert_eq!(response.headers()[CONNECTION], "close");
    }
}
