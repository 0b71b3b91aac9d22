//! The legacy `StreamQueueMessage`: one active message per stream. `ReceiveMessage` takes one message with
//! the request's `VisibilitySeconds`; `AckMessage`, `RejectMessage` (visible again at once), `ModifyVisibility`
//! (a new deadline, at most 12 h after the receive), `ResendMessage` (re-queue to another channel) and
//! `SendModifiedMessage` (send a replacement, then ack) act on it. A stream that ends releases its message.

use std::net::SocketAddr;
use std::sync::Arc;

use tokio::sync::mpsc;
use tonic::Streaming;
use veil_core::{Millis, Permission};

use super::{consumer, next_or_shutdown, Collect, Held, Inner};
use crate::auth::Caller;
use crate::convert::{self, KubemqError};
use crate::pb;
use crate::pb::StreamRequestType as T;

type Replies = mpsc::Sender<Box<pb::StreamQueueMessagesResponse>>;

fn stream_error(
    request: &pb::StreamQueueMessagesRequest,
    error: KubemqError,
) -> pb::StreamQueueMessagesResponse {
    pb::StreamQueueMessagesResponse {
        request_id: request.request_id.clone(),
        stream_request_type_data: request.stream_request_type_data,
        is_error: true,
        error: error.to_string(),
        ..Default::default()
    }
}

/// Serves one stream, one request at a time, until the client ends it or the server stops.
pub(super) async fn serve(
    inner: Arc<Inner>,
    mut inbound: Streaming<pb::StreamQueueMessagesRequest>,
    (peer, caller): (Option<SocketAddr>, Caller),
    tx: Replies,
) {
    let mut shutdown = inner.shutdown.clone();
    let mut active: Option<Held> = None;
    while let Some(request) = next_or_shutdown(&mut inbound, &mut shutdown).await {
        let trip = inner.pipeline.start();
        let response = match inner.may_stream(&active, &request, &caller, peer) {
            Ok(()) => inner.stream_request(&mut active, &request, peer).await,
            Err(error) => Err(error),
        };
        let response = response.unwrap_or_else(|error| stream_error(&request, error));
        // Counted per request of the stream, not per stream.
        inner.observe(&trip, "StreamQueueMessage", response.is_error);
        if tx.send(Box::new(response)).await.is_err() {
            break;
        }
    }
    if let Some(held) = active.take() {
        // Already lapsed and taken by another receiver: nothing to release.
        let _ = inner.nack(&held).await;
    }
}

impl Inner {
    /// What a legacy stream request needs (docs/security.md "KubeMQ"): `receive` on the channel it names to
    /// receive; `delete` on the active message's channel to settle it; `send` on the target of a resend or
    /// of a modified message as well, and on the modified message's dead-letter channel when it names one.
    fn may_stream(
        &self,
        active: &Option<Held>,
        request: &pb::StreamQueueMessagesRequest,
        caller: &Caller,
        peer: Option<SocketAddr>,
    ) -> Result<(), KubemqError> {
        let client = peer.map(|p| p.ip().to_string()).unwrap_or_default();
        let client_id = request.client_id.as_str();
        let check = |channel: &str, permission| {
            let who = (client_id, channel);
            self.authorize(caller, "StreamQueueMessage", who, permission, &client)
        };
        let kind = T::try_from(request.stream_request_type_data).unwrap_or(T::Unknown);
        // Every name is checked before the policy (or the audit log) sees it.
        if kind == T::ReceiveMessage {
            convert::validate_channel(&request.channel)?;
            return check(&request.channel, Permission::Receive);
        }
        if let Some(held) = active {
            check(&held.channel, Permission::Delete)?;
        }
        match kind {
            T::ResendMessage => {
                super::requeue_target(&request.channel)?;
                check(&request.channel, Permission::Send)
            }
            T::SendModifiedMessage => match &request.modified_message {
                Some(modified) => {
                    convert::validate_names(modified)?;
                    self.may_send(caller, "StreamQueueMessage", modified, &client)
                }
                None => Ok(()),
            },
            _ => Ok(()),
        }
    }

    async fn stream_request(
        &self,
        active: &mut Option<Held>,
        request: &pb::StreamQueueMessagesRequest,
        peer: Option<SocketAddr>,
    ) -> Result<pb::StreamQueueMessagesResponse, KubemqError> {
        let kind = T::try_from(request.stream_request_type_data).unwrap_or(T::Unknown);
        let mut response = pb::StreamQueueMessagesResponse {
            request_id: request.request_id.clone(),
            stream_request_type_data: request.stream_request_type_data,
            ..Default::default()
        };
        match kind {
            T::ReceiveMessage => {
                if active.is_some() {
                    return Err(KubemqError::MessageAlreadyActive);
                }
                let held = self.receive_one(request, peer).await?;
                response.message = Some(convert::to_queue_message(&held.message, &held.channel));
                *active = Some(held);
            }
            T::ModifyVisibility => {
                let held = active.as_ref().ok_or(KubemqError::NoActiveMessage)?;
                self.modify_visibility(held, request.visibility_seconds)
                    .await?;
            }
            T::AckMessage | T::RejectMessage | T::ResendMessage | T::SendModifiedMessage => {
                let held = active.as_ref().ok_or(KubemqError::NoActiveMessage)?;
                self.finish(held, kind, request).await?;
                *active = None;
            }
            T::Unknown => return Err(KubemqError::RequestTypeInvalid),
        }
        Ok(response)
    }

    /// ReceiveMessage: KubeMQ's checks (client id, channel, visibility, wait), then one message or
    /// "no new messages" when the wait ends empty.
    async fn receive_one(
        &self,
        request: &pb::StreamQueueMessagesRequest,
        peer: Option<SocketAddr>,
    ) -> Result<Held, KubemqError> {
        convert::validate_client_id(&request.client_id)?;
        convert::validate_channel(&request.channel)?;
        let visibility_ms = self.check_visibility_s(request.visibility_seconds)?;
        let collect = Collect {
            max: 1,
            visibility_ms,
            since_ms: self.engine.now(),
            wait_ms: self.check_wait_s(request.wait_time_seconds)?,
            consumer: consumer(peer, &request.client_id),
        };
        let mut held = self.receive(&request.channel, collect).await?.held;
        held.pop().ok_or(KubemqError::NoNewMessages)
    }

    async fn modify_visibility(&self, held: &Held, seconds: i32) -> Result<(), KubemqError> {
        let visibility_ms = self.check_visibility_s(seconds)?;
        self.set_visibility(held, visibility_ms).await
    }

    /// The requests that settle the active message.
    async fn finish(
        &self,
        held: &Held,
        kind: T,
        request: &pb::StreamQueueMessagesRequest,
    ) -> Result<(), KubemqError> {
        match kind {
            T::AckMessage => self.ack(held).await,
            T::RejectMessage => self.nack(held).await,
            T::ResendMessage => self.requeue(held, &request.channel).await,
            _ => self.send_modified(held, request).await,
        }
    }

    /// SendModifiedMessage: the replacement is sent first, so a failed send leaves the original held; it
    /// arrives marked as re-routed from the original's channel, like a re-queue.
    async fn send_modified(
        &self,
        held: &Held,
        request: &pb::StreamQueueMessagesRequest,
    ) -> Result<(), KubemqError> {
        let modified = request
            .modified_message
            .clone()
            .ok_or(KubemqError::MessageEmpty)?;
        self.try_send(modified, Some(&held.channel)).await?;
        self.ack(held).await
    }

    fn check_visibility_s(&self, seconds: i32) -> Result<Millis, KubemqError> {
        if !(1..=self.settings.max_visibility_s).contains(&seconds) {
            return Err(KubemqError::VisibilityOutOfRange {
                max: self.settings.max_visibility_s,
            });
        }
        Ok(Millis::from(seconds.unsigned_abs()) * 1_000)
    }
}
