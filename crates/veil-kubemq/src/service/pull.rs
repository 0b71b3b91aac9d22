//! The unary receive RPCs: `ReceiveQueueMessages` (a pull, which settles what it returns, or a peek, which
//! changes nothing) and `AckAllQueueMessages` (purge).
//!
//! A pull answers when `MaxNumberOfMessages` messages are in hand or `WaitTimeSeconds` is over, whichever
//! comes first, as KubeMQ's does; a pull that names no wait waits `DefaultWaitTimeoutSeconds`
//! (docs/semantics.md). A peek looks once and answers at once.

use std::net::SocketAddr;

use veil_core::{Consumer, Permission};

use crate::convert::{self, KubemqError};
use crate::pb;

use super::rpc::{Answer, Call, Denied, Served};
use super::{consumer, Collect, Held, Inner};

/// What a pull or peek found: the messages and the expired ones it removed on the way.
struct Pulled {
    messages: Vec<pb::QueueMessage>,
    expired: u64,
}

impl Inner {
    /// The `ReceiveQueueMessages` RPC: a bad channel name is answered in-band before the policy sees it; a
    /// pull that waits gives its admission slot back while the engine parks it, as an SQS long poll does.
    pub(super) async fn receive_queue_messages(
        &self,
        call: Call<pb::ReceiveQueueMessagesRequest>,
    ) -> Answer<pb::ReceiveQueueMessagesResponse> {
        let client = call.client();
        let request = call.message;
        let permission = if request.is_peak {
            Permission::Peek
        } else {
            Permission::Receive
        };
        let names = convert::validate_client_id(&request.client_id)
            .and_then(|()| convert::validate_channel(&request.channel));
        if let Err(error) = names {
            return Served::new(refusal(&request, &error), true);
        }
        let who = (request.client_id.as_str(), request.channel.as_str());
        let operation = "ReceiveQueueMessages";
        if self
            .authorize(&call.caller, operation, who, permission, &client)
            .is_err()
        {
            return Err(Denied);
        }
        let pull = self.pull_response(request, call.peer);
        let response = veil_http::pipeline::dispatch_parking(&call.admitted, pull).await;
        let failed = response.is_error;
        Served::new(response, failed)
    }

    /// The `AckAllQueueMessages` RPC (a purge, audited), needing `admin` on the channel.
    pub(super) async fn ack_all_queue_messages(
        &self,
        call: Call<pb::AckAllQueueMessagesRequest>,
    ) -> Answer<pb::AckAllQueueMessagesResponse> {
        let client = call.client();
        let request = call.message;
        let (channel, client_id) = (request.channel.clone(), request.client_id.clone());
        let names = convert::validate_client_id_bound(&client_id)
            .and_then(|()| convert::validate_channel(&channel));
        if let Err(error) = names {
            return Served::new(ack_all_refusal(&request, &error), true);
        }
        let who = (client_id.as_str(), channel.as_str());
        if self
            .authorize(
                &call.caller,
                "AckAllQueueMessages",
                who,
                Permission::Admin,
                &client,
            )
            .is_err()
        {
            return Err(Denied);
        }
        let response = self.ack_all(request).await;
        let failed = response.is_error;
        self.audit("AckAllQueueMessages", &channel, &client_id, &client, failed);
        Served::new(response, failed)
    }

    async fn pull_response(
        &self,
        request: pb::ReceiveQueueMessagesRequest,
        peer: Option<SocketAddr>,
    ) -> pb::ReceiveQueueMessagesResponse {
        let pulled = match self.pull_or_peek(&request, peer).await {
            Ok(pulled) => pulled,
            Err(error) => return refusal(&request, &error),
        };
        pb::ReceiveQueueMessagesResponse {
            request_id: request.request_id,
            is_peak: request.is_peak,
            messages_received: i32::try_from(pulled.messages.len()).unwrap_or(i32::MAX),
            messages_expired: i32::try_from(pulled.expired).unwrap_or(i32::MAX),
            messages: pulled.messages,
            ..Default::default()
        }
    }

    /// KubeMQ's checks in its order (client id, channel, max, wait), then the peek or the pull.
    async fn pull_or_peek(
        &self,
        request: &pb::ReceiveQueueMessagesRequest,
        peer: Option<SocketAddr>,
    ) -> Result<Pulled, KubemqError> {
        convert::validate_client_id(&request.client_id)?;
        convert::validate_channel(&request.channel)?;
        let max = self.check_max_items(request.max_number_of_messages)?;
        let wait_s = if request.wait_time_seconds == 0 {
            self.settings.default_wait_timeout_s
        } else {
            request.wait_time_seconds
        };
        let wait_ms = self.check_wait_s(wait_s)?;
        if request.is_peak {
            return self.peek(&request.channel, max).await;
        }
        let consumer = consumer(peer, &request.client_id);
        self.pull(&request.channel, max, wait_ms, consumer).await
    }

    async fn peek(&self, channel: &str, max: usize) -> Result<Pulled, KubemqError> {
        let key = self.ensure(channel).await?;
        let peeked = self.engine.peek(&key, max).await?;
        let messages = peeked
            .iter()
            .map(|m| convert::to_queue_message(m, channel))
            .collect();
        Ok(Pulled {
            messages,
            expired: 0,
        })
    }

    /// ReceiveQueueMessages has no ack of its own: the pull settles what it returns. The messages stay
    /// hidden while the pull collects — the server-side visibility on top of the whole wait, so none lapses
    /// and is received again (counted again, perhaps dead-lettered) before the pull answers — and a pull
    /// whose client goes away before the answer loses nothing: they come back when that visibility lapses.
    async fn pull(
        &self,
        channel: &str,
        max: usize,
        wait_ms: u64,
        consumer: Consumer,
    ) -> Result<Pulled, KubemqError> {
        let collect = Collect {
            max,
            visibility_ms: self.default_visibility_ms().saturating_add(wait_ms),
            since_ms: self.engine.now(),
            wait_ms,
            consumer,
        };
        let polled = self.receive(channel, collect).await?;
        // One ack for the whole pull. A message whose ack failed (its visibility lapsed meanwhile) was not
        // deleted and comes back; only what is acked is returned, so nothing is lost or returned twice.
        let helds: Vec<&Held> = polled.held.iter().collect();
        let acks = self.ack_held(&helds).await;
        let mut messages = Vec::with_capacity(polled.held.len());
        let mut first_error = None;
        for (held, ack) in polled.held.iter().zip(acks) {
            match ack {
                Ok(()) => messages.push(convert::to_queue_message(&held.message, &held.channel)),
                Err(error) => {
                    first_error.get_or_insert(error);
                }
            }
        }
        if let (Some(error), true) = (first_error, messages.is_empty()) {
            return Err(error);
        }
        Ok(Pulled {
            messages,
            expired: polled.expired,
        })
    }

    async fn ack_all(
        &self,
        request: pb::AckAllQueueMessagesRequest,
    ) -> pb::AckAllQueueMessagesResponse {
        match self.purge(&request.channel).await {
            Ok(count) => pb::AckAllQueueMessagesResponse {
                request_id: request.request_id,
                affected_messages: count,
                ..Default::default()
            },
            Err(error) => ack_all_refusal(&request, &error),
        }
    }

    async fn purge(&self, channel: &str) -> Result<u64, KubemqError> {
        convert::validate_channel(channel)?;
        let key = self.ensure(channel).await?;
        Ok(self.engine.purge(&key, None).await?)
    }
}

/// A pull or peek answered with an in-band error.
fn refusal(
    request: &pb::ReceiveQueueMessagesRequest,
    error: &KubemqError,
) -> pb::ReceiveQueueMessagesResponse {
    pb::ReceiveQueueMessagesResponse {
        request_id: request.request_id.clone(),
        is_peak: request.is_peak,
        is_error: true,
        error: error.to_string(),
        ..Default::default()
    }
}

/// An AckAllQueueMessages answered with an in-band error.
fn ack_all_refusal(
    request: &pb::AckAllQueueMessagesRequest,
    error: &KubemqError,
) -> pb::AckAllQueueMessagesResponse {
    pb::AckAllQueueMessagesResponse {
        request_id: request.request_id.clone(),
        is_error: true,
        error: error.to_string(),
        ..Default::default()
    }
}
