//! Accepting connections, shared by every listener (the HTTP ones through [`crate::serve`], KubeMQ's gRPC
//! one through its own tonic server): at most `max_connections` open at once, TCP_NODELAY, and the TLS
//! handshake in a task of its own under a timeout, so a client that connects and stalls holds neither the
//! accept loop nor a worker, and a deadline for the client's first bytes, so that one which connects and
//! sends nothing does not hold a connection slot for ever (docs/security.md "Limits against abuse"). The loop
//! never ends on an accept error: out of descriptors (EMFILE, ENFILE) it backs off, counts the failure in
//! `veil_listener_accept_errors_total{listener}` and accepts again once descriptors are free (docs/security.md
//! "Every listener's accept loop").

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use rustls::ServerConfig;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, OwnedSemaphorePermit, Semaphore};
use tokio::time::Sleep;
use tokio_rustls::server::TlsStream;
use tokio_rustls::TlsAcceptor;

use crate::limits::{
    Limits, ACCEPT_ERROR_PAUSE_MS_MAX, ACCEPT_ERROR_PAUSE_MS_MIN, ACCEPT_QUEUE, PREFACE_REPEEK_MS,
};
use crate::rate::TokenBucket;

/// What a request knows of the connection it came over; the HTTP listeners insert it into every request's
/// extensions (besides axum's `ConnectInfo<SocketAddr>`), the gRPC listener as tonic's connect info.
#[derive(Clone, Debug)]
pub struct ConnectionInfo {
    pub peer: SocketAddr,
    /// Whether the connection is TLS (an Azure SAS with `spr=https` needs it).
    pub tls: bool,
    bucket: Option<Arc<Mutex<TokenBucket>>>,
}

impl ConnectionInfo {
    pub fn new(peer: SocketAddr, tls: bool, limits: &Limits) -> Self {
        Self {
            peer,
            tls,
            bucket: limits
                .rate
                .map(|rate| Arc::new(Mutex::new(TokenBucket::new(rate)))),
        }
    }

    /// Whether the connection's request-rate limit admits one more request now (always, without a limit).
    pub fn admit(&self) -> bool {
        match &self.bucket {
            None => true,
            Some(bucket) => bucket.lock().take_at(Instant::now()),
        }
    }
}

/// The bytes of a connection: plain TCP or TLS over it.
#[derive(Debug)]
enum Stream {
    Plain(TcpStream),
    Tls(Box<TlsStream<TcpStream>>),
}

/// An accepted (and, with TLS, handshaken) connection. It holds one of its listener's connection slots until
/// it is dropped.
#[derive(Debug)]
pub struct Conn {
    stream: Stream,
    info: ConnectionInfo,
    /// Until the client's first bytes are read: when the connection fails if none came (the header read
    /// timeout, from accept or the TLS handshake). Neither HTTP/2 (hyper's or tonic's, waiting for the
    /// preface) nor the version peek has a timer of its own; hyper's HTTP/1 header timer comes later.
    first_bytes_due: Option<Pin<Box<Sleep>>>,
    /// With the listener's idle timeout: when the connection fails if the peer sends nothing more, pushed
    /// back by every read that brought bytes.
    idle: Option<Idle>,
    _slot: OwnedSemaphorePermit,
}

/// A connection's idle deadline.
#[derive(Debug)]
struct Idle {
    timeout: Duration,
    due: Pin<Box<Sleep>>,
}

impl Idle {
    fn of(limits: &Limits) -> Option<Self> {
        limits.idle_timeout.map(|timeout| Self {
            timeout,
            due: Box::pin(tokio::time::sleep(timeout)),
        })
    }
}

impl Conn {
    pub fn info(&self) -> &ConnectionInfo {
        &self.info
    }

    /// Which HTTP the client speaks, decided without consuming a byte: TLS by its ALPN (HTTP/2 over TLS is
    /// negotiated as `h2`, RFC 9113 section 3.2; without it a client speaks HTTP/1.1), plain TCP by peeking
    /// at the first bytes for HTTP/2's connection preface. On plain TCP it waits for the client's first
    /// bytes, and for more of them while they are only a part of the preface: `None` when they did not come
    /// by the first-bytes deadline, and the connection is to be closed.
    ///
    /// Why not let hyper-util's auto builder read the preface: it reads up to 24 bytes and replays them to
    /// hyper, whose first read then returns only those, and the second grows its 8 KiB read buffer to 16 KiB
    /// for the rest of the head; every HTTP/1 connection kept that doubled buffer.
    pub async fn http_version(&self) -> Option<HttpVersion> {
        let stream = match &self.stream {
            Stream::Tls(stream) => {
                return Some(match stream.get_ref().1.alpn_protocol() {
                    Some(b"h2") => HttpVersion::Http2,
                    _ => HttpVersion::Http1,
                });
            }
            Stream::Plain(stream) => stream,
        };
        let peek = async {
            let mut first = [0u8; HTTP2_PREFACE.len()];
            loop {
                match stream.peek(&mut first).await {
                    // hyper's own read sees the same error or end and closes the connection.
                    Err(_) | Ok(0) => return HttpVersion::Http1,
                    Ok(n) => {
                        if let Some(version) = version_of(&first[..n]) {
                            return version;
                        }
                    }
                }
                // A part of the preface, which a peek would return again at once: wait for the rest. Rare
                // (HTTP/2 clients send the preface in one write; an HTTP/1 method differs by its second byte).
                tokio::time::sleep(Duration::from_millis(PREFACE_REPEEK_MS)).await;
            }
        };
        match &self.first_bytes_due {
            Some(due) => tokio::time::timeout_at(due.deadline(), peek).await.ok(),
            None => Some(peek.await),
        }
    }
}

/// What a connection speaks, as [`Conn::http_version`] tells it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HttpVersion {
    Http1,
    Http2,
}

/// The first bytes of every HTTP/2 connection (RFC 9113, section 3.4).
const HTTP2_PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// The version the first `bytes` a client sent (at least one) show; `None` while they are only a part of
/// HTTP/2's preface.
fn version_of(bytes: &[u8]) -> Option<HttpVersion> {
    if !HTTP2_PREFACE.starts_with(bytes) {
        Some(HttpVersion::Http1)
    } else if bytes.len() == HTTP2_PREFACE.len() {
        Some(HttpVersion::Http2)
    } else {
        None
    }
}

impl AsyncRead for Conn {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let filled = buf.filled().len();
        let read = match &mut this.stream {
            Stream::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        };
        if let Some(due) = &mut this.first_bytes_due {
            match read {
                Poll::Ready(Ok(())) if buf.filled().len() > filled => this.first_bytes_due = None,
                Poll::Pending if due.as_mut().poll(cx).is_ready() => {
                    return Poll::Ready(Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        "no request within the header read timeout",
                    )));
                }
                _ => {}
            }
        }
        if let Some(idle) = &mut this.idle {
            match read {
                Poll::Ready(Ok(())) if buf.filled().len() > filled => {
                    let next = tokio::time::Instant::now() + idle.timeout;
                    idle.due.as_mut().reset(next);
                }
                Poll::Pending if idle.due.as_mut().poll(cx).is_ready() => {
                    return Poll::Ready(Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        "the peer sent nothing within the idle timeout",
                    )));
                }
                _ => {}
            }
        }
        read
    }
}

impl AsyncWrite for Conn {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match &mut self.get_mut().stream {
            Stream::Plain(s) => Pin::new(s).poll_write(cx, buf),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match &mut self.get_mut().stream {
            Stream::Plain(s) => Pin::new(s).poll_write_vectored(cx, bufs),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match &self.stream {
            Stream::Plain(s) => s.is_write_vectored(),
            Stream::Tls(s) => s.is_write_vectored(),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match &mut self.get_mut().stream {
            Stream::Plain(s) => Pin::new(s).poll_flush(cx),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match &mut self.get_mut().stream {
            Stream::Plain(s) => Pin::new(s).poll_shutdown(cx),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }
}

/// Accepts connections on `listener` and hands them over, handshaken, through the returned receiver. The
/// accept loop ends when the receiver is dropped (the server stopped); `name` labels its log lines.
pub fn accept(
    name: &'static str,
    listener: TcpListener,
    tls: Option<Arc<ServerConfig>>,
    limits: Limits,
) -> mpsc::Receiver<Conn> {
    let (ready, accepted) = mpsc::channel(ACCEPT_QUEUE);
    tokio::spawn(accept_loop(
        name,
        listener,
        tls.map(TlsAcceptor::from),
        limits,
        ready,
    ));
    accepted
}

async fn accept_loop(
    name: &'static str,
    listener: TcpListener,
    tls: Option<TlsAcceptor>,
    limits: Limits,
    ready: mpsc::Sender<Conn>,
) {
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    let metrics = veil_telemetry::listeners();
    metrics.declare(name);
    let mut backoff = Backoff::default();
    // Whether the last connection was refused at the cap: a flood of refusals logs once, then is counted.
    let mut at_cap = false;
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => {
                    if let Some(failed) = backoff.succeeded() {
                        tracing::warn!(listener = name, failed, "accepting connections again");
                    }
                    accepted
                }
                Err(error) => {
                    metrics.accept_failed(name);
                    let pause = backoff.failed();
                    // The first failure of a run is the news; the rest are counted, and the recovery logged.
                    if backoff.failures() == 1 {
                        tracing::error!(listener = name, %error, "accept failed (out of file descriptors?); backing off and retrying until it succeeds");
                    } else {
                        tracing::debug!(listener = name, %error, pause_ms = pause.as_millis() as u64, "accept failed again");
                    }
                    tokio::select! {
                        () = tokio::time::sleep(pause) => continue,
                        () = ready.closed() => return,
                    }
                }
            },
            () = ready.closed() => return,
        };
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            // Dropping the stream closes it: the client sees the connection end before any answer.
            metrics.connection_refused(name);
            if !at_cap {
                at_cap = true;
                tracing::warn!(listener = name, %peer, max = limits.max_connections, "connection refused: too many connections (further refusals are counted in veil_listener_refused_connections_total until one is accepted)");
            }
            continue;
        };
        if std::mem::take(&mut at_cap) {
            tracing::warn!(
                listener = name,
                "accepting connections again below the connection cap"
            );
        }
        if let Err(error) = stream.set_nodelay(true) {
            // Responses go out as soon as written: without it a response spanning segments waits on the
            // client's delayed ACK.
            tracing::warn!(listener = name, %error, "cannot set TCP_NODELAY on a connection");
        }
        let info = ConnectionInfo::new(peer, tls.is_some(), &limits);
        match &tls {
            None => {
                let conn = Conn {
                    stream: Stream::Plain(stream),
                    info,
                    first_bytes_due: Some(Box::pin(tokio::time::sleep(limits.header_read_timeout))),
                    idle: Idle::of(&limits),
                    _slot: slot,
                };
                if ready.send(conn).await.is_err() {
                    return;
                }
            }
            Some(acceptor) => {
                let handshake = acceptor.accept(stream);
                let timeout = limits.tls_handshake_timeout;
                let first_bytes_timeout = limits.header_read_timeout;
                let idle = Idle::of(&limits);
                let ready = ready.clone();
                tokio::spawn(async move {
                    match tokio::time::timeout(timeout, handshake).await {
                        Ok(Ok(stream)) => {
                            let conn = Conn {
                                stream: Stream::Tls(Box::new(stream)),
                                info,
                                first_bytes_due: Some(Box::pin(tokio::time::sleep(
                                    first_bytes_timeout,
                                ))),
                                idle,
                                _slot: slot,
                            };
                            // An error means the server stopped: the connection just closes.
                            let _ = ready.send(conn).await;
                        }
                        Ok(Err(error)) => {
                            tracing::debug!(listener = name, %peer, %error, "TLS handshake failed")
                        }
                        Err(_) => {
                            tracing::debug!(listener = name, %peer, "TLS handshake timed out")
                        }
                    }
                });
            }
        }
    }
}

/// The pauses of an accept loop whose accepts fail: doubling from `ACCEPT_ERROR_PAUSE_MS_MIN` to
/// `ACCEPT_ERROR_PAUSE_MS_MAX` while they fail in a row, from the start again after one succeeds.
#[derive(Debug, Default)]
struct Backoff {
    /// Failures in a row.
    failures: u32,
}

impl Backoff {
    /// One more failure: the pause before the next accept.
    fn failed(&mut self) -> Duration {
        self.failures = self.failures.saturating_add(1);
        let doublings = (self.failures - 1).min(u64::BITS - 1);
        let pause_ms = ACCEPT_ERROR_PAUSE_MS_MIN
            .saturating_mul(1u64 << doublings)
            .min(ACCEPT_ERROR_PAUSE_MS_MAX);
        Duration::from_millis(pause_ms)
    }

    /// An accept succeeded: the failures before it (if any), and the next failure pauses the least again.
    fn succeeded(&mut self) -> Option<u32> {
        let failed = std::mem::take(&mut self.failures);
        (failed > 0).then_some(failed)
    }

    fn failures(&self) -> u32 {
        self.failures
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accept_failures_in_a_row_double_the_pause_up_to_the_cap_and_a_success_starts_over() {
        let mut backoff = Backoff::default();
        let pauses: Vec<u64> = (0..10)
            .map(|_| backoff.failed().as_millis() as u64)
            .collect();
        assert_eq!(pauses[0], ACCEPT_ERROR_PAUSE_MS_MIN);
        assert_eq!(pauses[1], 2 * ACCEPT_ERROR_PAUSE_MS_MIN);
        assert!(pauses.windows(2).all(|pair| pair[1] >= pair[0]));
        assert_eq!(
            *pauses.last().expect("ten pauses"),
            ACCEPT_ERROR_PAUSE_MS_MAX
        );
        for _ in 0..1_000 {
            assert_eq!(
                backoff.failed(),
                Duration::from_millis(ACCEPT_ERROR_PAUSE_MS_MAX)
            );
        }
        assert_eq!(backoff.succeeded(), Some(1_010));
        assert_eq!(backoff.succeeded(), None);
        assert_eq!(
            backoff.failed(),
            Duration::from_millis(ACCEPT_ERROR_PAUSE_MS_MIN)
        );
    }

    #[test]
    fn the_first_bytes_tell_http2_only_by_its_whole_preface() {
        assert_eq!(version_of(b"POST / HTTP/1.1\r\n"), Some(HttpVersion::Http1));
        assert_eq!(version_of(b"G"), Some(HttpVersion::Http1));
        assert_eq!(version_of(b"PRIZE"), Some(HttpVersion::Http1));
        assert_eq!(version_of(HTTP2_PREFACE), Some(HttpVersion::Http2));
        assert_eq!(version_of(b"PRI * HTTP/2.0"), None);
        assert_eq!(version_of(b"P"), None);
    }

    const FIRST_BYTES_TIMEOUT: Duration = Duration::from_secs(30);

    /// A connection accepted by [`accept`] from a client (a blocking std socket: it connects and writes at
    /// once, whatever tokio's paused clock does) that sends `sent` and then nothing.
    async fn accepted_after(sent: &[u8]) -> (Conn, std::net::TcpStream) {
        accepted_with(
            Limits {
                header_read_timeout: FIRST_BYTES_TIMEOUT,
                ..Limits::default()
            },
            sent,
        )
        .await
    }

    async fn accepted_with(limits: Limits, sent: &[u8]) -> (Conn, std::net::TcpStream) {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let address = listener.local_addr().expect("address");
        let mut accepted = accept("test", listener, None, limits);
        let mut client = std::net::TcpStream::connect(address).expect("connect");
        std::io::Write::write_all(&mut client, sent).expect("write");
        let conn = accepted.recv().await.expect("accepted");
        (conn, client)
    }

    async fn read_some(conn: &mut Conn) -> io::Result<usize> {
        let mut bytes = [0u8; 64];
        let mut buf = ReadBuf::new(&mut bytes);
        std::future::poll_fn(|cx| Pin::new(&mut *conn).poll_read(cx, &mut buf)).await?;
        Ok(buf.filled().len())
    }

    #[tokio::test(start_paused = true)]
    async fn a_connection_that_sends_nothing_fails_its_first_read_at_the_header_read_timeout() {
        let (mut conn, _client) = accepted_after(b"").await;
        let started = tokio::time::Instant::now();
        let error = read_some(&mut conn).await.expect_err("no bytes ever came");
        assert_eq!(error.kind(), io::ErrorKind::TimedOut);
        assert!(started.elapsed() >= FIRST_BYTES_TIMEOUT);
    }

    #[tokio::test(start_paused = true)]
    async fn once_the_first_bytes_are_read_the_connection_has_no_deadline() {
        let (mut conn, _client) = accepted_after(b"G").await;
        assert_eq!(read_some(&mut conn).await.expect("the byte sent"), 1);
        let idle = tokio::time::timeout(FIRST_BYTES_TIMEOUT * 4, read_some(&mut conn)).await;
        assert!(idle.is_err(), "an idle connection's read failed: {idle:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn the_version_of_a_silent_or_half_preface_connection_is_never_told() {
        let (silent, _client) = accepted_after(b"").await;
        assert_eq!(silent.http_version().await, None);
        let (half, _client) = accepted_after(&HTTP2_PREFACE[..10]).await;
        assert_eq!(half.http_version().await, None);
        let (whole, _client) = accepted_after(HTTP2_PREFACE).await;
        assert_eq!(whole.http_version().await, Some(HttpVersion::Http2));
    }

    #[tokio::test(start_paused = true)]
    async fn with_an_idle_timeout_a_peer_silent_that_long_fails_its_read_and_one_that_talks_does_not(
    ) {
        const IDLE: Duration = Duration::from_secs(5);
        let limits = Limits {
            header_read_timeout: FIRST_BYTES_TIMEOUT,
            idle_timeout: Some(IDLE),
            ..Limits::default()
        };
        let (mut conn, mut client) = accepted_with(limits, b"G").await;
        assert_eq!(read_some(&mut conn).await.expect("the byte sent"), 1);
        // Talking more often than the idle timeout keeps the connection.
        for _ in 0..4 {
            tokio::time::sleep(IDLE / 2).await;
            std::io::Write::write_all(&mut client, b"x").expect("write");
            assert_eq!(read_some(&mut conn).await.expect("the byte sent"), 1);
        }
        let started = tokio::time::Instant::now();
        let error = read_some(&mut conn)
            .await
            .expect_err("silent past the idle timeout");
        assert_eq!(error.kind(), io::ErrorKind::TimedOut);
        assert!(started.elapsed() >= IDLE && started.elapsed() < FIRST_BYTES_TIMEOUT);
    }
}
