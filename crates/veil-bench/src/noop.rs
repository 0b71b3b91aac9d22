//! The no-op SQS server: answers every request with a canned SendMessage reply, without parsing or storing
//! anything. Driven with the same client and concurrency as Veil, it measures the ceiling that this machine's
//! loopback HTTP (and the client) allow, so the ceiling scenario can say how close Veil comes to it.

use std::convert::Infallible;
use std::net::SocketAddr;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::header::{HeaderValue, CONTENT_TYPE};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio::sync::oneshot;

/// What every request gets: a well-formed SendMessage reply (the MD5 is that of the empty body; the client
/// does not check it, just as it does not against Veil).
const SEND_REPLY: &str = r#"{"MessageId":"00000000-0000-4000-8000-000000000000","MD5OfMessageBody":"d41d8cd98f00b204e9800998ecf8427e"}"#;

#[derive(Debug, thiserror::Error)]
pub enum NoopError {
    #[error("no-op server: cannot listen on {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("no-op server: cannot start its runtime: {0}")]
    Runtime(std::io::Error),
    #[error("no-op server: the server thread exited before it was listening")]
    Startup,
}

/// Answers one request. CreateQueue is the one exception to the canned reply, so that the same
/// [`crate::targets::sqs::SqsTarget`] can `prepare` against it; the measured requests are all SendMessage.
async fn answer(request: Request<Incoming>) -> Result<Response<Full<Bytes>>, Infallible> {
    let create = request
        .headers()
        .get("x-amz-target")
        .is_some_and(|target| target.as_bytes() == b"AmazonSQS.CreateQueue");
    let host = request
        .headers()
        .get(hyper::header::HOST)
        .and_then(|host| host.to_str().ok())
        .unwrap_or("127.0.0.1")
        .to_owned();
    // Read the whole request, as a real server must, so the comparison is fair and keep-alive stays clean.
    let _ = request.into_body().collect().await;
    let body = if create {
        Bytes::from(format!(
            r#"{{"QueueUrl":"http://{host}/000000000000/noop"}}"#
        ))
    } else {
        Bytes::from_static(SEND_REPLY.as_bytes())
    };
    let mut response = Response::new(Full::new(body));
    response.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static("application/x-amz-json-1.0"),
    );
    Ok(response)
}

/// Accepts connections forever, serving each with HTTP/1.1 keep-alive.
pub async fn serve(listener: TcpListener) {
    loop {
        let (stream, _) = match listener.accept().await {
            Ok(accepted) => accepted,
            // Running out of file descriptors and the like: keep serving the connections we have.
            Err(_) => {
                tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        tokio::spawn(async move {
            let _ = http1::Builder::new()
                .keep_alive(true)
                .serve_connection(TokioIo::new(stream), service_fn(answer))
                .await;
        });
    }
}

/// A no-op server on its own threads (its own runtime), as Veil is in its own process: the load generator's
/// runtime is not shared with the server it measures.
pub struct NoopServer {
    pub addr: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl NoopServer {
    pub fn start(addr: SocketAddr, worker_threads: usize) -> Result<Self, NoopError> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(worker_threads.max(1))
            .thread_name("noop-server")
            .enable_all()
            .build()
            .map_err(NoopError::Runtime)?;
        let std_listener =
            std::net::TcpListener::bind(addr).map_err(|source| NoopError::Bind { addr, source })?;
        let bound = std_listener
            .local_addr()
            .map_err(|source| NoopError::Bind { addr, source })?;
        std_listener
            .set_nonblocking(true)
            .map_err(|source| NoopError::Bind { addr, source })?;
        let (stop, stopped) = oneshot::channel::<()>();
        let (ready, is_ready) = std::sync::mpsc::channel::<Result<(), NoopError>>();
        let thread = std::thread::spawn(move || {
            runtime.block_on(async move {
                let listener = match TcpListener::from_std(std_listener) {
                    Ok(listener) => listener,
                    Err(source) => {
                        let _ = ready.send(Err(NoopError::Bind { addr, source }));
                        return;
                    }
                };
                let _ = ready.send(Ok(()));
                tokio::select! {
                    _ = serve(listener) => {}
                    _ = stopped => {}
                }
            });
            // Dropping the runtime here ends the connection tasks still open.
        });
        is_ready.recv().map_err(|_| NoopError::Startup)??;
        Ok(Self {
            addr: bound,
            stop: Some(stop),
            thread: Some(thread),
        })
    }

    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }
}

impl Drop for NoopServer {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}
