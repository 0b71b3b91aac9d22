//! Channel administration and server information: Ping, channel create / list / delete (which the SDKs send
//! as `SendRequest` queries to KubeMQ's internal requests channel) and QueuesInfo.

use veil_core::{EngineError, Permission, DEFAULT_NAMESPACE};

use super::rpc::{Answer, Call, Served};
use super::{key, Inner};
use crate::auth::Caller;
use crate::convert::{self, KubemqError};
use crate::limits;
use crate::pb;

/// Ping names the KubeMQ release whose protocol Veil serves, with Veil's own version as semver build
/// metadata: SDKs compare the leading `x.y.z` with the server range they were tested against (the Python
/// SDK 4.x warns below 2.4.0), and build metadata takes no part in that comparison.
pub(super) fn ping(inner: &Inner) -> pb::PingResult {
    pb::PingResult {
        host: limits::PING_HOST.to_string(),
        version: ping_version(),
        server_start_time: inner.started_at_s,
        server_up_time_seconds: i64::try_from(inner.started.elapsed().as_secs())
            .unwrap_or(i64::MAX),
    }
}

/// `<KubeMQ protocol version>+veil.<Veil's version>`.
pub fn ping_version() -> String {
    format!(
        "{}+veil.{}",
        limits::KUBEMQ_PROTOCOL_VERSION,
        env!("CARGO_PKG_VERSION")
    )
}

/// The channel-management queries the SDKs send, by the request's Metadata.
enum ChannelRequest {
    Create,
    Delete,
    List,
}

impl ChannelRequest {
    fn parse(metadata: &str) -> Result<Self, KubemqError> {
        match metadata {
            "create-channel" => Ok(Self::Create),
            "delete-channel" => Ok(Self::Delete),
            "list-channels" => Ok(Self::List),
            _ => Err(KubemqError::RequestTypeInvalid),
        }
    }
}

/// The channel a `delete-channel` query names (the audit log's queue); `None` for any other request, and for
/// a name KubeMQ's rules refuse (that query deletes nothing, and its name stays out of the log).
pub(super) fn deleted_channel(request: &pb::Request) -> Option<&str> {
    let deletes = request.channel == limits::CLUSTER_REQUESTS_CHANNEL
        && matches!(
            ChannelRequest::parse(&request.metadata),
            Ok(ChannelRequest::Delete)
        );
    let channel = request.tags.get("channel").map_or("", String::as_str);
    (deletes && convert::validate_channel(channel).is_ok()).then_some(channel)
}

impl Inner {
    /// The `SendRequest` RPC: a channel query, answered in-band; a `delete-channel` is audited.
    pub(super) async fn send_request(&self, call: Call<pb::Request>) -> Answer<pb::Response> {
        let client = call.client();
        let deleted = deleted_channel(&call.message).map(str::to_string);
        let client_id = call.message.client_id.clone();
        let response = self
            .answer_request(call.message, &call.caller, &client)
            .await;
        let failed = !response.error.is_empty();
        if let Some(channel) = deleted {
            self.audit("DeleteChannel", &channel, &client_id, &client, failed);
        }
        Served::new(response, failed)
    }

    /// The `QueuesInfo` RPC.
    pub(super) async fn queues_info(
        &self,
        call: Call<pb::QueuesInfoRequest>,
    ) -> Answer<pb::QueuesInfoResponse> {
        let (info, failed) = self.visible_queues_info(call.message, &call.caller).await;
        Served::new(info, failed)
    }

    async fn answer_request(
        &self,
        request: pb::Request,
        caller: &Caller,
        peer: &str,
    ) -> pb::Response {
        let mut response = pb::Response {
            client_id: request.client_id.clone(),
            request_id: request.request_id.clone(),
            timestamp: convert::nanos(self.engine.now()),
            ..Default::default()
        };
        match self.channel_request(&request, caller, peer).await {
            Ok(body) => {
                response.executed = true;
                response.body = body.into();
            }
            Err(error) => response.error = error.to_string(),
        }
        response
    }

    /// Runs one channel query; the reply body is the channel list for `list-channels`, empty otherwise.
    /// Creating and deleting need `admin` on the channel; a listing shows what the caller may touch at all
    /// (docs/security.md "KubeMQ"). A refusal is in-band, like every error of these queries.
    async fn channel_request(
        &self,
        request: &pb::Request,
        caller: &Caller,
        peer: &str,
    ) -> Result<Vec<u8>, KubemqError> {
        if request.channel != limits::CLUSTER_REQUESTS_CHANNEL {
            return Err(KubemqError::NoResponder);
        }
        convert::validate_client_id_bound(&request.client_id)?;
        let tag = |name: &str| request.tags.get(name).map(String::as_str).unwrap_or("");
        let channel = tag("channel");
        let kind = ChannelRequest::parse(&request.metadata)?;
        let who = (request.client_id.as_str(), channel);
        match kind {
            ChannelRequest::Create => {
                convert::validate_channel(channel)?;
                self.authorize(caller, "CreateChannel", who, Permission::Admin, peer)?;
                self.ensure(channel).await?;
                Ok(Vec::new())
            }
            ChannelRequest::Delete => {
                // Refused before the policy or the audit log sees the name; a channel of such a name left by an
                // older Veil is deleted through the admin endpoint.
                convert::validate_channel(channel)?;
                self.authorize(caller, "DeleteChannel", who, Permission::Admin, peer)?;
                self.delete_channel(channel).await
            }
            ChannelRequest::List => {
                let mut queues = self.engine.list_queues(DEFAULT_NAMESPACE, "").await?;
                queues.retain(|q| caller.sees(&request.client_id, &q.key.name));
                Ok(convert::channel_list_json(&queues, tag("channel_search")))
            }
        }
    }

    async fn delete_channel(&self, channel: &str) -> Result<Vec<u8>, KubemqError> {
        match self.engine.delete_queue(&key(channel)).await {
            // Deleting a channel that is not there is no error in KubeMQ.
            Ok(()) | Err(EngineError::QueueNotFound(_)) => Ok(Vec::new()),
            Err(error) => Err(error.into()),
        }
    }

    /// QueuesInfo lists only the channels the caller may touch. Its request names no ClientID, so the policy
    /// is asked for the token's bound client id, or the empty one. Its reply has no error field: when the
    /// queues cannot be listed (a cluster's owner unreachable), it lists none and counts as failed.
    async fn visible_queues_info(
        &self,
        request: pb::QueuesInfoRequest,
        caller: &Caller,
    ) -> (pb::QueuesInfoResponse, bool) {
        let listed = self.engine.list_queues(DEFAULT_NAMESPACE, "").await;
        let failed = listed.is_err();
        let mut queues = listed.unwrap_or_else(|error| {
            tracing::warn!(%error, "kubemq QueuesInfo could not list the queues");
            Vec::new()
        });
        let client_id = caller.bound_client_id().unwrap_or("");
        queues.retain(|q| caller.sees(client_id, &q.key.name));
        let info = {
            let subscribers = self.subscribers.lock();
            convert::queues_info(&queues, &request.queue_name, &subscribers)
        };
        let response = pb::QueuesInfoResponse {
            ref_request_id: request.request_id,
            info: Some(info),
        };
        (response, failed)
    }
}
