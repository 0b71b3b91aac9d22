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
