//! The [`Kubemq`] impl: each RPC runs veil-http's request pipeline (ARCHITECTURE.md, "The request pipeline")
//! and hands its request to one handler in the file of its resource. A unary RPC goes through
//! [`KubemqService::unary`] — identify (the interceptor's verdict), admit, the handler (decode, authorize,
//! dispatch, audit), observe — so no RPC repeats that preamble; a stream is identified here and then counts
//! each of its requests itself.

use std::future::Future;
use std::net::SocketAddr;

use tonic::{Request, Response, Status, Streaming};
use veil_http::{Admitted, Trip, Who};
use veil_telemetry::Code;

use super::{channels, downstream, send, spawn_stream, stream, Inner, KubemqService, Reply};
use crate::auth::{Caller, ACCESS_DENIED};
use crate::pb;
use crate::pb::kubemq_server::Kubemq;

/// The text of an RPC refused by the admission limit.
pub(crate) const SERVER_BUSY: &str =
    "the server is busy: too many requests in flight; retry with back-off";

/// A unary RPC's request once its caller is identified and the RPC admitted: what its handler needs.
pub(super) struct Call<T> {
    pub(super) message: T,
    pub(super) caller: Caller,
    /// The peer's address, when tonic knows it (the delivery history's consumer).
    pub(super) peer: Option<SocketAddr>,
    /// The RPC's admission slot, held until it answers; a pull gives it back while it parks.
    pub(super) admitted: Admitted,
}

impl<T> Call<T> {
    /// The peer's address as the audit log names it, "" when tonic does not know it.
    pub(super) fn client(&self) -> String {
        self.peer
            .map(|addr| addr.ip().to_string())
            .unwrap_or_default()
    }
}

/// A unary handler's answer: its reply, and whether that reply is an in-band error (`IsError` / `Error`).
pub(super) struct Served<R> {
    pub(super) reply: R,
    pub(super) failed: bool,
}

/// The policy refused the RPC: KubeMQ returns that error as the RPC's own, which gRPC carries as `UNKNOWN`
/// with KubeMQ's text (docs/security.md "KubeMQ").
pub(super) struct Denied;

/// What a unary handler returns.
pub(super) type Answer<R> = Result<Served<R>, Denied>;

impl<R> Served<R> {
    pub(super) fn new(reply: R, failed: bool) -> Answer<R> {
        Ok(Self { reply, failed })
    }
}

impl KubemqService {
    /// One unary RPC through the pipeline: identify, admit, `handler`, observe. The handler gets the inner
    /// service by reference and the request by value; generic, so nothing is boxed per RPC beyond tonic's own.
    #[allow(clippy::result_large_err)] // tonic's Status
    async fn unary<'a, T, R, Fut>(
        &'a self,
        operation: &'static str,
        request: Request<T>,
        handler: impl FnOnce(&'a Inner, Call<T>) -> Fut,
    ) -> Result<Response<R>, Status>
    where
        Fut: Future<Output = Answer<R>> + 'a,
    {
        let trip = self.inner.pipeline.start();
        let caller = self.identify(&trip, &request, operation)?;
        let admitted = self.admit(&trip, operation).await?;
        self.serving(&trip, operation)?;
        let call = Call {
            peer: crate::peer_addr(&request),
            message: request.into_inner(),
            caller,
            admitted,
        };
        match handler(&self.inner, call).await {
            Ok(Served { reply, failed }) => {
                self.inner.observe(&trip, operation, failed);
                Ok(Response::new(reply))
            }
            Err(Denied) => {
                self.inner.observe(&trip, operation, true);
                Err(Status::unknown(ACCESS_DENIED))
            }
        }
    }

    /// **identify**: the caller the interceptor's authentication found for `request`, or its refusal: gRPC
    /// `UNAUTHENTICATED` with KubeMQ's text, audited and counted under `operation`. A request that met no
    /// interceptor (a test calling the service directly) is unrestricted.
    #[allow(clippy::result_large_err)] // tonic's Status
    fn identify<T>(
        &self,
        trip: &Trip<'_>,
        request: &Request<T>,
        operation: &'static str,
    ) -> Result<Caller, Status> {
        match request.extensions().get::<crate::Verdict>() {
            None => Ok(Caller::default()),
            Some(crate::Verdict(Ok(caller))) => Ok(caller.clone()),
            Some(crate::Verdict(Err(reason))) => {
                let client = super::peer_of(request);
                let who = Who {
                    client: &client,
                    ..Who::default()
                };
                let code = Code::Error("Unauthenticated");
                trip.unidentified(operation, who, "Unauthenticated", code);
                Err(Status::unauthenticated(reason.clone()))
            }
        }
    }

    /// **admit**: a slot of the listener's admission limit for a unary RPC, held until the RPC answers;
    /// beyond the limit (after the admission wait) the RPC fails at once with gRPC `RESOURCE_EXHAUSTED`,
    /// counted under `operation` — the status KubeMQ's SDKs treat as retryable, as for the per-connection
    /// request rate.
    #[allow(clippy::result_large_err)] // tonic's Status
    async fn admit(&self, trip: &Trip<'_>, operation: &'static str) -> Result<Admitted, Status> {
        trip.admit(&self.inner.admission).await.map_err(|_| {
            trip.observe(operation, Code::Error("ResourceExhausted"));
            Status::resource_exhausted(SERVER_BUSY)
        })
    }

    /// Whether this node's engine may answer (`Engine::serving`: a cluster node past its lease may not):
    /// otherwise gRPC `UNAVAILABLE`, which clients retry, counted under `operation`.
    #[allow(clippy::result_large_err)] // tonic's Status
    fn serving(&self, trip: &Trip<'_>, operation: &'static str) -> Result<(), Status> {
        self.inner.engine.serving().map_err(|error| {
            trip.observe(operation, Code::Error("Unavailable"));
            Status::unavailable(error.to_string())
        })
    }

    /// A stream's caller, or its refusal as for a unary RPC (and, like one, none while this node may not
    /// serve); each request of the stream is counted on its
    /// own afterwards (streams are bounded by connections and the request rate, not by admission).
    #[allow(clippy::result_large_err)] // tonic's Status
    fn stream_caller<T>(
        &self,
        request: &Request<T>,
        operation: &'static str,
    ) -> Result<Caller, Status> {
        let trip = self.inner.pipeline.start();
        let caller = self.identify(&trip, request, operation)?;
        self.serving(&trip, operation)?;
        Ok(caller)
    }
}

#[tonic::async_trait]
impl Kubemq for KubemqService {
    async fn ping(&self, _request: Request<pb::Empty>) -> Result<Response<pb::PingResult>, Status> {
        // KubeMQ's Ping needs no token and takes no slot: it only reports the server's identity.
        let trip = self.inner.pipeline.start();
        let result = channels::ping(&self.inner);
        self.inner.observe(&trip, "Ping", false);
        Ok(Response::new(result))
    }

    async fn send_request(
        &self,
        request: Request<pb::Request>,
    ) -> Result<Response<pb::Response>, Status> {
        self.unary("SendRequest", request, Inner::send_request)
            .await
    }

    async fn queues_info(
        &self,
        request: Request<pb::QueuesInfoRequest>,
    ) -> Result<Response<pb::QueuesInfoResponse>, Status> {
        self.unary("QueuesInfo", request, Inner::queues_info).await
    }

    async fn send_queue_message(
        &self,
        request: Request<pb::QueueMessage>,
    ) -> Result<Response<pb::SendQueueMessageResult>, Status> {
        self.unary("SendQueueMessage", request, Inner::send_queue_message)
            .await
    }

    async fn send_queue_messages_batch(
        &self,
        request: Request<pb::QueueMessagesBatchRequest>,
    ) -> Result<Response<pb::QueueMessagesBatchResponse>, Status> {
        self.unary(
            "SendQueueMessagesBatch",
            request,
            Inner::send_queue_messages_batch,
        )
        .await
    }

    async fn receive_queue_messages(
        &self,
        request: Request<pb::ReceiveQueueMessagesRequest>,
    ) -> Result<Response<pb::ReceiveQueueMessagesResponse>, Status> {
        self.unary(
            "ReceiveQueueMessages",
            request,
            Inner::receive_queue_messages,
        )
        .await
    }

    async fn ack_all_queue_messages(
        &self,
        request: Request<pb::AckAllQueueMessagesRequest>,
    ) -> Result<Response<pb::AckAllQueueMessagesResponse>, Status> {
        self.unary(
            "AckAllQueueMessages",
            request,
            Inner::ack_all_queue_messages,
        )
        .await
    }

    type StreamQueueMessageStream = Reply<pb::StreamQueueMessagesResponse>;

    async fn stream_queue_message(
        &self,
        request: Request<Streaming<pb::StreamQueueMessagesRequest>>,
    ) -> Result<Response<Self::StreamQueueMessageStream>, Status> {
        let caller = self.stream_caller(&request, "StreamQueueMessage")?;
        Ok(spawn_stream(&self.inner, request, caller, stream::serve))
    }

    type QueuesDownstreamStream = Reply<pb::QueuesDownstreamResponse>;

    async fn queues_downstream(
        &self,
        request: Request<Streaming<pb::QueuesDownstreamRequest>>,
    ) -> Result<Response<Self::QueuesDownstreamStream>, Status> {
        let caller = self.stream_caller(&request, "QueuesDownstream")?;
        Ok(spawn_stream(
            &self.inner,
            request,
            caller,
            downstream::serve,
        ))
    }

    type QueuesUpstreamStream = Reply<pb::QueuesUpstreamResponse>;

    async fn queues_upstream(
        &self,
        request: Request<Streaming<pb::QueuesUpstreamRequest>>,
    ) -> Result<Response<Self::QueuesUpstreamStream>, Status> {
        let caller = self.stream_caller(&request, "QueuesUpstream")?;
        Ok(spawn_stream(
            &self.inner,
            request,
            caller,
            send::serve_upstream,
        ))
    }
}
