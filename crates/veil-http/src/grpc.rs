//! The connections of [`crate::accept`] as tonic's server takes them: every gRPC listener of the process (the
//! KubeMQ endpoint, a cluster node's internal port) serves over the same accept loop as the HTTP listeners —
//! connection cap, first-bytes and idle deadlines, the TLS handshake under its timeout, back-off on EMFILE —
//! instead of tonic's own, which ends for good on the first accept error (docs/security.md "Every listener's
//! accept loop").

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use rustls::ServerConfig;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpListener;
use tokio_stream::Stream;

use crate::conn::{accept, Conn, ConnectionInfo};
use crate::limits::Limits;

/// `listener`'s connections for `tonic::transport::Server::serve_with_incoming_shutdown`. Dropping the
/// stream (the server stopping) ends the accept loop.
pub fn incoming(
    name: &'static str,
    listener: TcpListener,
    tls: Option<Arc<ServerConfig>>,
    limits: Limits,
) -> impl Stream<Item = std::io::Result<GrpcConn>> {
    tokio_stream::StreamExt::map(
        tokio_stream::wrappers::ReceiverStream::new(accept(name, listener, tls, limits)),
        |conn| Ok(GrpcConn(conn)),
    )
}

/// A connection accepted by veil-http, as tonic's server takes it: its connect info, which tonic puts in
/// every request's extensions, is veil-http's [`ConnectionInfo`] (peer, TLS, rate limit).
pub struct GrpcConn(Conn);

impl tonic::transport::server::Connected for GrpcConn {
    type ConnectInfo = ConnectionInfo;

    fn connect_info(&self) -> ConnectionInfo {
        self.0.info().clone()
    }
}

impl AsyncRead for GrpcConn {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().0).poll_read(cx, buf)
    }
}

impl AsyncWrite for GrpcConn {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().0).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().0).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.0.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().0).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().0).poll_shutdown(cx)
    }
}
