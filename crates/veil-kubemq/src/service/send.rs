//! Sending: the unary send, the batch and the upstream stream. Each message is validated with KubeMQ's rules
//! and judged on its own, so one bad message in a batch is its own in-band error and the others go through,
//! as in KubeMQ; a batch's messages of one channel are stored in one engine call.

use std::collections::BTreeMap;
use std::sync::Arc;

use tokio::sync::mpsc;
use tonic::Streaming;

use veil_core::{MoveReason, MovedFrom};

use super::rpc::{Answer, Call, Denied, Served};
use super::{next_or_shutdown, Inner};
use crate::auth::Caller;
use crate::convert::{self, KubemqError};
use crate::pb;

impl Inner {
    /// The `SendQueueMessage` RPC. A bad name is answered in-band before the policy or the audit log sees it.
    pub(super) async fn send_queue_message(
        &self,
        call: Call<pb::QueueMessage>,
    ) -> Answer<pb::SendQueueMessageResult> {
        let client = call.client();
        let message = call.message;
        if let Err(error) = convert::validate_names(&message) {
            let result = convert::send_error(&error, &message.message_id, &message.channel);
            return Served::new(result, true);
        }
        if self
            .may_send(&call.caller, "SendQueueMessage", &message, &client)
            .is_err()
        {
            return Err(Denied);
        }
        let result = self.send_one(message).await;
        let failed = result.is_error;
        Served::new(result, failed)
    }

    /// The `SendQueueMessagesBatch` RPC. KubeMQ authorizes every message of a batch first; one refusal fails
    /// the whole call. A message with a bad name is not asked about: it fails on its own, in-band, when the
    /// batch is validated.
    pub(super) async fn send_queue_messages_batch(
        &self,
        call: Call<pb::QueueMessagesBatchRequest>,
    ) -> Answer<pb::QueueMessagesBatchResponse> {
        let client = call.client();
        for message in &call.message.messages {
            let named = convert::validate_names(message).is_ok();
            if named
                && self
                    .may_send(&call.caller, "SendQueueMessagesBatch", message, &client)
                    .is_err()
            {
                return Err(Denied);
            }
        }
        let response = self.send_batch(call.message).await;
        let failed = response.have_errors;
        Served::new(response, failed)
    }

    async fn send_one(&self, message: pb::QueueMessage) -> pb::SendQueueMessageResult {
        let (client_message_id, channel) = (message.message_id.clone(), message.channel.clone());
        match self.try_send(message, None).await {
            Ok(result) => result,
            Err(error) => convert::send_error(&error, &client_message_id, &channel),
        }
    }

    /// Sends `message`; with `rerouted_from`, it is delivered marked as re-routed from that channel.
    pub(super) async fn try_send(
        &self,
        message: pb::QueueMessage,
        rerouted_from: Option<&str>,
    ) -> Result<pb::SendQueueMessageResult, KubemqError> {
        convert::validate_message(&message, &self.settings)?;
        let (client_message_id, channel) = (message.message_id.clone(), message.channel.clone());
        let key = self.ensure(&channel).await?;
        let mut new = convert::to_new_message(message);
        new.moved_from = rerouted_from.map(|source| MovedFrom {
            queue: super::key(source),
            reason: MoveReason::Requeue,
        });
        let sent = self.engine.send(&key, vec![new]).await?;
        let sent = sent
            .first()
            .ok_or_else(|| KubemqError::Internal("send returned nothing".into()))?;
        Ok(convert::send_result(sent, &client_message_id, &channel))
    }

    async fn send_batch(
        &self,
        batch: pb::QueueMessagesBatchRequest,
    ) -> pb::QueueMessagesBatchResponse {
        let results = self.send_each(batch.messages, |_| Ok(())).await;
        pb::QueueMessagesBatchResponse {
            batch_id: batch.batch_id,
            have_errors: results.iter().any(|r| r.is_error),
            results,
        }
    }

    /// Sends a batch with one engine call per channel — one lock and one commit for each channel's messages,
    /// not one per message — while each message keeps its own result, in request order. `allowed` is the
    /// caller's right to send each message; a refused one is its own in-band error.
    async fn send_each(
        &self,
        messages: Vec<pb::QueueMessage>,
        allowed: impl Fn(&pb::QueueMessage) -> Result<(), KubemqError>,
    ) -> Vec<pb::SendQueueMessageResult> {
        let mut results: Vec<Option<pb::SendQueueMessageResult>> = vec![None; messages.len()];
        let mut by_channel: BTreeMap<String, Vec<(usize, pb::QueueMessage)>> = BTreeMap::new();
        for (position, message) in messages.into_iter().enumerate() {
            let checked = allowed(&message)
                .and_then(|()| convert::validate_message(&message, &self.settings));
            match checked {
                Ok(()) => by_channel
                    .entry(message.channel.clone())
                    .or_default()
                    .push((position, message)),
                Err(error) => {
                    results[position] = Some(convert::send_error(
                        &error,
                        &message.message_id,
                        &message.channel,
                    ));
                }
            }
        }
        for (channel, batch) in by_channel {
            for (position, result) in self.send_to_channel(&channel, batch).await {
                results[position] = Some(result);
            }
        }
        results.into_iter().flatten().collect()
    }

    /// Sends validated messages of one channel in one engine call; returns each one's result by position.
    async fn send_to_channel(
        &self,
        channel: &str,
        batch: Vec<(usize, pb::QueueMessage)>,
    ) -> Vec<(usize, pb::SendQueueMessageResult)> {
        let ids: Vec<(usize, String)> = batch
            .iter()
            .map(|(position, message)| (*position, message.message_id.clone()))
            .collect();
        let outcome = match self.ensure(channel).await {
            Ok(key) => {
                let messages = batch
                    .into_iter()
                    .map(|(_, message)| convert::to_new_message(message))
                    .collect();
                self.engine
                    .send_each(&key, messages)
                    .await
                    .map_err(KubemqError::from)
            }
            Err(error) => Err(error),
        };
        match outcome {
            Ok(sent) => ids
                .into_iter()
                .zip(sent)
                .map(|((position, id), sent)| {
                    let result = match sent {
                        Ok(sent) => convert::send_result(&sent, &id, channel),
                        Err(error) => convert::send_error(&error.into(), &id, channel),
                    };
                    (position, result)
                })
                .collect(),
            Err(error) => ids
                .into_iter()
                .map(|(position, id)| (position, convert::send_error(&error, &id, channel)))
                .collect(),
        }
    }
}

/// The upstream stream: one answer per request, with one result per message, in request order. A message
/// to a channel (or naming a dead-letter channel) the caller may not write is refused in-band, on its own
/// (docs/security.md "KubeMQ").
pub(super) async fn serve_upstream(
    inner: Arc<Inner>,
    mut inbound: Streaming<pb::QueuesUpstreamRequest>,
    (peer, caller): (Option<std::net::SocketAddr>, Caller),
    tx: mpsc::Sender<Box<pb::QueuesUpstreamResponse>>,
) {
    let mut shutdown = inner.shutdown.clone();
    let client = peer.map(|p| p.ip().to_string()).unwrap_or_default();
    while let Some(request) = next_or_shutdown(&mut inbound, &mut shutdown).await {
        let trip = inner.pipeline.start();
        // Names first, so that a bad one is its own in-band error before the policy sees it.
        let allowed = |message: &pb::QueueMessage| {
            convert::validate_names(message)?;
            inner.may_send(&caller, "QueuesUpstream", message, &client)
        };
        let response = pb::QueuesUpstreamResponse {
            ref_request_id: request.request_id,
            results: inner.send_each(request.messages, allowed).await,
            ..Default::default()
        };
        // Counted per request of the stream, not per stream.
        let failed = response.results.iter().any(|r| r.is_error);
        inner.observe(&trip, "QueuesUpstream", failed);
        if tx.send(Box::new(response)).await.is_err() {
            break;
        }
    }
}
