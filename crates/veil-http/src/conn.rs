//! Accepting connections, shared by every listener (the HTTP ones through [`crate::serve`], KubeMQ's gRPC
//! one through its own tonic server): at most `max_connections` open at once, TCP_NODELAY, and the TLS
//! handshake in a task of its own under a timeout, so a client that connects and stalls holds neither the
//! accept loop nor a worker (docs/security.md "Limits against abuse").

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
use tokio_rustls::server::TlsStream;
use tokio_rustls::TlsAcceptor;

use crate::limits::{Limits, ACCEPT_ERROR_PAUSE_MS, ACCEPT_QUEUE};
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
    _slot: OwnedSemaphorePermit,
}

impl Conn {
    pub fn info(&self) -> &ConnectionInfo {
        &self.info
    }

    /// Which HTTP the client speaks, decided without consuming a byte: TLS by its ALPN, plain TCP by peeking
    /// at the first bytes for HTTP/2's connection preface. Waits for the client's first bytes on plain TCP.
    ///
    /// Why not let hyper-util's auto builder read the preface: it reads up to 24 bytes and replays them to
    /// hyper, whose first read then returns only those, and the second grows its 8 KiB read buffer to 16 KiB
    /// for the rest of the head; every HTTP/1 connection kept that doubled buffer.
    pub async fn http_version(&self) -> HttpVersion {
        match &self.stream {
            Stream::Tls(stream) => match stream.get_ref().1.alpn_protocol() {
                Some(b"h2") => HttpVersion::Http2,
                Some(_) => HttpVersion::Http1,
                None => HttpVersion::Unknown,
            },
            Stream::Plain(stream) => {
                let mut first = [0u8; HTTP2_PREFACE.len()];
                match stream.peek(&mut first).await {
                    // hyper's own read sees the same error or end and closes the connection.
                    Err(_) | Ok(0) => HttpVersion::Http1,
                    Ok(n) => version_of(&first[..n]),
                }
            }
        }
    }
}

/// What a connection speaks, as far as [`Conn::http_version`] can tell.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HttpVersion {
    Http1,
    Http2,
    /// TLS without ALPN, or the bytes so far are a part of HTTP/2's preface: the serve loop lets hyper-util
    /// read until it knows.
    Unknown,
}

/// The first bytes of every HTTP/2 connection (RFC 9113, section 3.4).
const HTTP2_PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// The version the first `bytes` a client sent (at least one) show.
fn version_of(bytes: &[u8]) -> HttpVersion {
    if !HTTP2_PREFACE.starts_with(bytes) {
        HttpVersion::Http1
    } else if bytes.len() == HTTP2_PREFACE.len() {
        HttpVersion::Http2
    } else {
        HttpVersion::Unknown
    }
}

impl AsyncRead for Conn {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match &mut self.get_mut().stream {
            Stream::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
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
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(error) => {
                    tracing::warn!(listener = name, %error, "accept failed");
                    tokio::time::sleep(Duration::from_millis(ACCEPT_ERROR_PAUSE_MS)).await;
                    continue;
                }
            },
            () = ready.closed() => return,
        };
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            // Dropping the stream closes it: the client sees the connection end before any answer.
            tracing::warn!(listener = name, %peer, max = limits.max_connections, "connection refused: too many connections");
            continue;
        };
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
                    _slot: slot,
                };
                if ready.send(conn).await.is_err() {
                    return;
                }
            }
            Some(acceptor) => {
                let handshake = acceptor.accept(stream);
                let timeout = limits.tls_handshake_timeout;
                let ready = ready.clone();
                tokio::spawn(async move {
                    match tokio::time::timeout(timeout, handshake).await {
                        Ok(Ok(stream)) => {
                            let conn = Conn {
                                stream: Stream::Tls(Box::new(stream)),
                                info,
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_bytes_tell_http2_only_by_its_whole_preface() {
        assert_eq!(version_of(b"POST / HTTP/1.1\r\n"), HttpVersion::Http1);
        assert_eq!(version_of(b"G"), HttpVersion::Http1);
        assert_eq!(version_of(b"PRIZE"), HttpVersion::Http1);
        assert_eq!(version_of(HTTP2_PREFACE), HttpVersion::Http2);
        assert_eq!(version_of(b"PRI * HTTP/2.0"), HttpVersion::Unknown);
        assert_eq!(version_of(b"P"), HttpVersion::Unknown);
    }
}
