//! The thin HTTP service: one axum handler for every request, which runs veil-http's request pipeline
//! (ARCHITECTURE.md, "The request pipeline"). It reads the body, identifies the caller, decodes with the
//! codec, admits the request, works out the namespace (`namespace.rs`; ARCHITECTURE.md, veil-sqs), authorizes
//! and dispatches the action to its handler — which calls the engine, the only place that decides visibility
//! (ARCHITECTURE.md) — audits it, and encodes the answer in the protocol the request used. Each request gets a
//! fresh uuid as its request id.
//!
//! This file holds what every action shares: routing, the request context, the mapping of `EngineError` to
//! `SqsError` and the dispatch. Authentication and authorization live in [`auth`] (docs/security.md, "SQS");
//! the handlers live by resource: [`queues`], [`tags`], [`messages`], [`batch`], [`permissions`] and
//! [`move_tasks`].

mod auth;
pub use auth::{CredentialError, SqsAuth, SqsCredential};
mod batch;
mod messages;
mod move_tasks;
mod permissions;
mod queues;
mod tags;

use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::{ConnectInfo, DefaultBodyLimit, Request, State};
use axum::http::HeaderMap;
use axum::response::Response;
use axum::Router;
use veil_core::limits::SECOND_MS;
use veil_core::Access;
use veil_core::{Consumer, Dispatch, EngineError, QueueKey};

use crate::api::{Action, ActionName, Output, QueueTarget};
use crate::codec::{self, HttpRequestParts};
use crate::error::{ErrorCode, SqsError, SqsResult};
use crate::limits;
use crate::namespace::{self, AccountRegion, NamespaceMap, QueueAddress};
use crate::sender_id::SenderIds;
use crate::validate;
use veil_http::pipeline::AUTHENTICATE;
use veil_http::{header_str, into_response, Pipeline, Trip, Who};
use veil_telemetry::audit;
use veil_telemetry::{Code, Protocol, Telemetry};

/// The SQS front-end's settings.
#[derive(Clone, Debug)]
pub struct SqsConfig {
    /// The account of queue URLs when the request names none; with `default_region` it is Veil's default
    /// namespace.
    pub account_id: String,
    /// The region of requests without a SigV4 `Authorization` header.
    pub default_region: String,
    /// In-flight limit of new queues (SQS OverLimit).
    pub inflight_max_default: u32,
    /// Where each request is counted (`veil_requests_total{protocol="sqs"}`); detached by default.
    pub telemetry: Telemetry,
    /// The scheme of queue URLs: `https` when the listener serves TLS, else `http`.
    pub url_scheme: &'static str,
    /// `scheme://host[:port]` that every queue URL starts with (`sqs_advertised_url`), for clients that reach
    /// the server by another name than the Host they send; `None`: `url_scheme` and the request's Host.
    pub advertised_url: Option<String>,
    /// SigV4 verification and the credentials (docs/security.md, "SQS"); off by default here, on in
    /// `veil serve`.
    pub auth: SqsAuth,
    /// The secret sender ids are derived under (`sender_id.rs`): the server's own, so that they stay the same
    /// across restarts and nodes; `None`: a random one for this process.
    pub sender_id_secret: Option<Vec<u8>>,
}

impl Default for SqsConfig {
    fn default() -> Self {
        Self {
            account_id: limits::DEFAULT_ACCOUNT_ID.to_string(),
            default_region: limits::DEFAULT_REGION.to_string(),
            inflight_max_default: veil_core::limits::INFLIGHT_MESSAGES_DEFAULT,
            telemetry: Telemetry::default(),
            url_scheme: "http",
            advertised_url: None,
            auth: SqsAuth::default(),
            sender_id_secret: None,
        }
    }
}

/// The answer to a request over its connection's rate limit (docs/security.md "Limits against abuse"):
/// `RequestThrottled` in the request's protocol (JSON when it names an `X-Amz-Target`, else Query).
/// veil-http's serve loop calls it before the request reaches the router, so it sees only the headers.
pub fn throttled(headers: &axum::http::HeaderMap) -> Response {
    let protocol = codec::protocol_of(header_str(headers, "x-amz-target"));
    let error = SqsError::new(ErrorCode::RequestThrottled, crate::error::REQUEST_THROTTLED);
    let request_id = uuid::Uuid::new_v4().to_string();
    into_response(codec::encode_error(protocol, &error, &request_id))
}

/// [`throttled`] for veil-http's serve loop, each answer counted in `veil_requests_total` with the code
/// `RequestThrottled` and the action `X-Amz-Target` names (a Query request's action is in its body, which a
/// refusal does not read: `Unknown`).
pub fn counted_throttled(telemetry: Telemetry) -> veil_http::Throttled {
    Arc::new(move |headers: &axum::http::HeaderMap| {
        let operation = operation_of(header_str(headers, "x-amz-target"), None, &[]);
        let code = Code::Error(ErrorCode::RequestThrottled.aws_code());
        telemetry.count_refused(Protocol::Sqs, operation, code);
        throttled(headers)
    })
}

/// The answer of a cluster node while no node can serve (the database is down, or no leader yet;
/// docs/cluster.md): AWS's `ServiceUnavailable` (503) in the request's protocol, which SDKs retry.
pub fn unavailable(headers: &axum::http::HeaderMap) -> Response {
    let protocol = codec::protocol_of(header_str(headers, "x-amz-target"));
    let request_id = uuid::Uuid::new_v4().to_string();
    into_response(codec::encode_error(
        protocol,
        &SqsError::unavailable(),
        &request_id,
    ))
}

/// What every request handler shares; built once by [`router`].
struct Service {
    engine: Dispatch,
    config: SqsConfig,
    /// Derived from `config` once, so that each request does not rebuild it.
    names: NamespaceMap,
    /// `config.auth.credentials` by access key.
    credentials: auth::CredentialMap,
    /// SigV4 signing keys already derived (sigv4.rs).
    signing_keys: crate::sigv4::SigningKeys,
    /// The `SenderId` of each credential's messages.
    sender_ids: SenderIds,
    /// The request pipeline (veil-http's): where each request is audited and counted.
    pipeline: Pipeline,
}

/// The SQS service: every method and path goes to one handler.
pub fn router(engine: impl Into<Dispatch>, config: SqsConfig) -> Router {
    let service = Arc::new(Service::new(engine.into(), config));
    Router::new()
        .fallback(handle)
        .with_state(service)
        .layer(DefaultBodyLimit::max(limits::HTTP_BODY_BYTES_MAX))
}

/// Who is asking and where: everything about a request that is not its action.
struct RequestContext {
    /// The `Host` header, used to render queue URLs.
    host: String,
    region: String,
    /// The account the request path names, else the default account.
    account: String,
    /// The queue the request path names (`/<account>/<queue>`), used when there is no `QueueUrl`.
    path_queue: Option<QueueAddress>,
    /// Shown as the `SenderId` of sent messages: the opaque id of the access key (`sender_id.rs`), else the
    /// account.
    sender_id: String,
    /// Who the audit log names: the access key, else the account.
    identity: String,
    /// Who receives, for the engine's delivery history: the caller's address and access key.
    consumer: Consumer,
    /// What the caller may do (unrestricted with authentication off).
    access: Access,
    /// The credential's account; `None` with authentication off.
    caller_account: Option<String>,
    /// How AccessDenied names the caller.
    principal_arn: String,
}

/// One request through veil-http's pipeline (ARCHITECTURE.md, "The request pipeline"): [`Service::prepare`]
/// reads, identifies, decodes and admits it; here its action is authorized, dispatched (giving the slot back
/// while a long poll parks) and audited, and the answer is encoded in the protocol the request used and
/// observed, once.
///
/// The dispatch is awaited here, not in a nested `async fn`: each async layer keeps its own copy of what is
/// passed to it by value, and a waiting long poll's future is paid for by every waiting connection
/// (`the_future_of_a_waiting_request_stays_small`).
async fn handle(State(service): State<Arc<Service>>, request: Request) -> Response {
    let trip = service.pipeline.start();
    let request_id = uuid::Uuid::new_v4().to_string();
    let (parts, body) = request.into_parts();
    let protocol = codec::protocol_of(header_str(&parts.headers, "x-amz-target"));
    let prepared = service.prepare(&trip, &parts, body).await;
    // The head is a slice of hyper's read buffer: dropped here (the body already is), before a long poll
    // parks, that buffer stays the connection's only one (hyper reuses it for its next read instead of
    // allocating another 8 KiB while the poll waits; docs/reliability.md "What a waiting connection costs").
    drop(parts);
    let (operation, result) = match prepared {
        // Only the action moves (into its handler); the rest stays where `prepare` left it.
        Ok(Prepared {
            ref context,
            ref peer,
            action,
            ref admitted,
        }) => {
            let name = action.name();
            let audited = service.audited(context, &action);
            let result = match service.authorize(context, &action).await {
                Ok(()) => {
                    let dispatch = service.dispatch(context, action);
                    trip.dispatch_parking(admitted, dispatch).await
                }
                Err(error) => Err(error),
            };
            service.audit(&trip, (name, audited), (context, peer), &result);
            (name.as_str(), result.map(|output| (name, output)))
        }
        Err(refused) => refused,
    };
    let reply = match &result {
        Ok((action, output)) => codec::encode_output(protocol, *action, output, &request_id),
        Err(error) => codec::encode_error(protocol, error, &request_id),
    };
    let code = result
        .as_ref()
        .map_or_else(|error| Code::Error(error.code.aws_code()), |_| Code::Ok);
    trip.observe(operation, code);
    into_response(reply)
}

/// A request identified, decoded and admitted: what its dispatch needs.
struct Prepared {
    context: RequestContext,
    /// The caller's address for the audit log, "" when unknown.
    peer: String,
    action: Action,
    /// The request's admission slot, held until it is answered; a long poll gives it back while it parks.
    admitted: veil_http::Admitted,
}

/// A request that ended before its action ran: the operation it is counted under (the one it names,
/// [`operation_of`]) and the error to answer.
type Refused = (&'static str, SqsResult<(ActionName, Output)>);

/// The operation label of a request whose action was not decoded (its body unreadable, a parameter wrong):
/// the action it names, if SQS has one by that name, else `Unknown` — a label never carries what the client
/// wrote, only names from [`ActionName`].
fn operation_of(target: Option<&str>, query: Option<&str>, body: &[u8]) -> &'static str {
    let named = match target {
        Some(target) => codec::target_action(target).and_then(ActionName::parse),
        None => {
            let from_query = query.map(|q| codec::query::parse_form(q.as_bytes()));
            let pairs = from_query
                .into_iter()
                .flatten()
                .chain(codec::query::parse_form(body));
            pairs
                .filter(|(name, _)| name == "Action")
                .find_map(|(_, value)| ActionName::parse(&value))
        }
    };
    named.map_or("Unknown", ActionName::as_str)
}

/// The request's body, up to [`limits::HTTP_BODY_BYTES_MAX`].
async fn read_body(body: axum::body::Body) -> SqsResult<bytes::Bytes> {
    axum::body::to_bytes(body, limits::HTTP_BODY_BYTES_MAX)
        .await
        .map_err(|error| {
            SqsError::new(
                ErrorCode::InvalidParameterValue,
                format!("The request body could not be read: {error}"),
            )
        })
}

/// Maps the engine's errors that need no request detail.
fn engine_error(error: EngineError) -> SqsError {
    match error {
        EngineError::QueueNotFound(_) => SqsError::queue_does_not_exist(),
        EngineError::OverLimit { inflight, limit } => SqsError::new(
            ErrorCode::OverLimit,
            format!("Too many messages in flight ({inflight}; the limit is {limit})."),
        ),
        EngineError::MessageTooLarge { max_bytes, .. } => {
            validate::message_too_long(u64::from(max_bytes))
        }
        EngineError::InvalidArgument(reason) => SqsError::invalid_parameter_value(reason),
        EngineError::ReceiptInvalid => SqsError::new(
            ErrorCode::ReceiptHandleIsInvalid,
            "The input receipt handle is not a valid receipt handle.",
        ),
        EngineError::ReceiptOfAnotherQueue => SqsError::new(
            ErrorCode::ReceiptHandleIsInvalid,
            "The receipt handle is not valid for this queue.",
        ),
        EngineError::MessageNotAvailable => SqsError::new(
            ErrorCode::InvalidParameterValue,
            "Message does not exist or is not available for visibility timeout change.",
        ),
        EngineError::VisibilityPastLimit { max_ms, .. } => {
            SqsError::visibility_past_limit("", max_ms / SECOND_MS)
        }
        EngineError::VisibilityPastExpiry => SqsError::new(
            ErrorCode::InvalidParameterValue,
            "The visibility timeout would pass the message's expiry.",
        ),
        EngineError::ReceiptExpired => SqsError::new(
            ErrorCode::InvalidParameterValue,
            "The receipt handle has expired.",
        ),
        EngineError::GroupRequired => SqsError::new(
            ErrorCode::MissingParameter,
            "The request must contain the parameter MessageGroupId.",
        ),
        EngineError::DedupIdRequired => SqsError::new(
            ErrorCode::InvalidParameterValue,
            "The queue should either have ContentBasedDeduplication enabled or MessageDeduplicationId provided explicitly",
        ),
        EngineError::PurgeTooSoon { interval_ms, .. } => SqsError::new(
            ErrorCode::PurgeQueueInProgress,
            format!(
                "Only one PurgeQueue operation is allowed every {} seconds.",
                interval_ms / SECOND_MS
            ),
        ),
        EngineError::Store(veil_core::StoreError::Unavailable(_)) => SqsError::unavailable(),
        EngineError::Store(error) => SqsError::internal(error),
    }
}

/// Maps the errors of operations on a receipt handle, quoting the handle as SQS does.
fn receipt_error(error: EngineError, handle: &str, visibility: Option<u64>) -> SqsError {
    match error {
        EngineError::ReceiptInvalid => SqsError::receipt_handle_invalid(handle),
        EngineError::ReceiptOfAnotherQueue => SqsError::new(
            ErrorCode::ReceiptHandleIsInvalid,
            format!("The receipt handle \"{handle}\" is not valid for this queue."),
        ),
        EngineError::MessageNotAvailable => SqsError::invalid_value(
            "ReceiptHandle",
            handle,
            "Message does not exist or is not available for visibility timeout change.",
        ),
        EngineError::VisibilityPastLimit { max_ms, .. } => {
            SqsError::visibility_past_limit(visibility.unwrap_or_default(), max_ms / SECOND_MS)
        }
        EngineError::ReceiptExpired => {
            SqsError::invalid_value("ReceiptHandle", handle, "The receipt handle has expired.")
        }
        other => engine_error(other),
    }
}

impl Service {
    fn new(engine: Dispatch, config: SqsConfig) -> Self {
        let names = NamespaceMap {
            default_account: config.account_id.clone(),
            default_region: config.default_region.clone(),
        };
        let credentials = auth::credential_map(&config.auth);
        let pipeline = Pipeline::new(Protocol::Sqs, config.telemetry.clone());
        let secret = config
            .sender_id_secret
            .clone()
            .unwrap_or_else(|| uuid::Uuid::new_v4().as_bytes().to_vec());
        let sender_ids = SenderIds::new(&secret, credentials.keys().map(String::as_str));
        Self {
            engine,
            config,
            names,
            credentials,
            signing_keys: Default::default(),
            sender_ids,
            pipeline,
        }
    }

    /// The pipeline's steps before the action runs: read the body, **identify** the caller, decode,
    /// **admit**. A request that ends here is answered with the error and counted under the operation it
    /// names ([`operation_of`]).
    async fn prepare(
        &self,
        trip: &Trip<'_>,
        parts: &axum::http::request::Parts,
        body: axum::body::Body,
    ) -> Result<Prepared, Refused> {
        // Present when the listener was made with `into_make_service_with_connect_info` (the binary's is).
        let address = parts
            .extensions
            .get::<ConnectInfo<SocketAddr>>()
            .map(|info| info.0);
        let peer = address.map(|a| a.ip().to_string()).unwrap_or_default();
        let target = header_str(&parts.headers, "x-amz-target");
        let body = match read_body(body).await {
            Ok(body) => body,
            Err(error) => return Err((operation_of(target, parts.uri.query(), &[]), Err(error))),
        };
        let refused = |error| (operation_of(target, parts.uri.query(), &body), Err(error));
        let caller = self.identify(trip, parts, &body, &peer).map_err(refused)?;
        let (_, decoded) = codec::decode(&HttpRequestParts {
            method: parts.method.as_str(),
            query: parts.uri.query(),
            target,
            body: &body,
        });
        let context = self.context(caller, &parts.headers, parts.uri.path(), address);
        // The slot is taken only now, with the body read and the caller authenticated: a client that cannot
        // authenticate never holds one (docs/security.md "Limits against abuse").
        let Ok(admitted) = trip.admit_http(&parts.extensions).await else {
            let error = SqsError::new(ErrorCode::RequestThrottled, crate::error::REQUEST_THROTTLED);
            return Err(refused(error));
        };
        // A cluster node past its lease answers nothing from memory (`Engine::serving`).
        self.engine
            .serving()
            .map_err(|error| refused(engine_error(error)))?;
        let request = decoded.map_err(|error| {
            tracing::debug!(%error, "sqs request rejected");
            refused(error)
        })?;
        Ok(Prepared {
            context,
            peer,
            action: request.action,
            admitted,
        })
    }

    /// **identify**: the caller the request's SigV4 signature proves ([`auth`]); a refusal is audited.
    fn identify(
        &self,
        trip: &Trip<'_>,
        parts: &axum::http::request::Parts,
        body: &[u8],
        peer: &str,
    ) -> SqsResult<auth::Caller> {
        self.authenticate(parts, body).inspect_err(|error| {
            let who = Who {
                client: peer,
                ..Who::default()
            };
            trip.audit(AUTHENTICATE, who, error.code.aws_code());
        })
    }

    /// **audit**: the record of an audited action ([`Self::audited`]) with its outcome; a failure is also
    /// logged at debug level.
    fn audit(
        &self,
        trip: &Trip<'_>,
        (name, audited): (ActionName, Option<Option<QueueKey>>),
        (context, peer): (&RequestContext, &str),
        result: &SqsResult<Output>,
    ) {
        if let Some(key) = audited {
            let who = Who {
                namespace: key.as_ref().map_or("", |k| k.namespace.as_str()),
                queue: key.as_ref().map_or("", |k| k.name.as_str()),
                identity: &context.identity,
                client: peer,
            };
            let outcome = result
                .as_ref()
                .map_or_else(|e| e.code.aws_code(), |_| audit::OK);
            trip.audit(name.as_str(), who, outcome);
        }
        if let Err(error) = result {
            tracing::debug!(action = name.as_str(), %error, "sqs request failed");
        }
    }

    /// Whether `action` goes to the audit log (it deletes, purges, changes settings or permissions, or starts
    /// or cancels a move task), and then the queue it is about when that can be told (`None` inside when the
    /// queue URL or ARN is not valid; the action then fails and is audited without a queue).
    fn audited(&self, context: &RequestContext, action: &Action) -> Option<Option<QueueKey>> {
        let target = match action {
            Action::DeleteQueue(target) | Action::PurgeQueue(target) => target,
            Action::SetQueueAttributes(input) => &input.target,
            Action::TagQueue(input) => &input.target,
            Action::UntagQueue(input) => &input.target,
            Action::AddPermission(input) => &input.target,
            Action::RemovePermission(input) => &input.target,
            Action::StartMessageMoveTask(input) => {
                return Some(self.names.key_from_arn(&input.source_arn))
            }
            Action::CancelMessageMoveTask(input) => {
                return Some(
                    move_tasks::source_of_handle(&input.task_handle)
                        .and_then(|arn| self.names.key_from_arn(&arn)),
                )
            }
            _ => return None,
        };
        Some(self.queue_key(context, target).ok())
    }

    fn context(
        &self,
        caller: auth::Caller,
        headers: &HeaderMap,
        path: &str,
        address: Option<std::net::SocketAddr>,
    ) -> RequestContext {
        let path_queue = namespace::parse_queue_path(path);
        // A signed caller acts in its own account; without authentication the path's account, else the
        // default one.
        let account = caller.account.clone().unwrap_or_else(|| {
            path_queue
                .as_ref()
                .and_then(|address| address.account.clone())
                .unwrap_or_else(|| self.config.account_id.clone())
        });
        RequestContext {
            host: header_str(headers, "host")
                .unwrap_or("localhost")
                .to_string(),
            region: caller.region,
            consumer: Consumer::new(veil_core::Protocol::Sqs, address, caller.access_key.clone()),
            sender_id: caller
                .access_key
                .as_deref()
                .map_or_else(|| account.clone(), |key| self.sender_ids.of(key)),
            identity: caller.access_key.unwrap_or_else(|| account.clone()),
            account,
            path_queue,
            access: caller.access,
            caller_account: caller.account,
            principal_arn: caller.principal_arn,
        }
    }

    /// Hands each decoded action to its handler.
    /// Each action's future is boxed: a request's future is as large as its largest action's, and a waiting
    /// long poll keeps its request's future alive, so unboxed every waiting connection would pay for the
    /// largest action (docs/reliability.md "Load and overload").
    async fn dispatch(&self, context: &RequestContext, action: Action) -> SqsResult<Output> {
        match action {
            Action::CreateQueue(input) => Box::pin(self.create_queue(context, input)).await,
            Action::DeleteQueue(target) => Box::pin(self.delete_queue(context, &target)).await,
            Action::GetQueueUrl(input) => Box::pin(self.get_queue_url(context, input)).await,
            Action::ListQueues(input) => Box::pin(self.list_queues(context, input)).await,
            Action::GetQueueAttributes(input) => {
                Box::pin(self.get_queue_attributes(context, input)).await
            }
            Action::SetQueueAttributes(input) => {
                Box::pin(self.set_queue_attributes(context, input)).await
            }
            Action::PurgeQueue(target) => Box::pin(self.purge_queue(context, &target)).await,
            Action::ListDeadLetterSourceQueues(input) => {
                Box::pin(self.list_dead_letter_source_queues(context, input)).await
            }
            Action::TagQueue(input) => Box::pin(self.tag_queue(context, input)).await,
            Action::UntagQueue(input) => Box::pin(self.untag_queue(context, input)).await,
            Action::ListQueueTags(target) => Box::pin(self.list_queue_tags(context, &target)).await,
            Action::SendMessage(input) => Box::pin(self.send_message(context, input)).await,
            Action::ReceiveMessage(input) => Box::pin(self.receive_message(context, input)).await,
            Action::DeleteMessage(input) => Box::pin(self.delete_message(context, input)).await,
            Action::ChangeMessageVisibility(input) => {
                Box::pin(self.change_message_visibility(context, input)).await
            }
            Action::SendMessageBatch(input) => {
                Box::pin(self.send_message_batch(context, input)).await
            }
            Action::DeleteMessageBatch(input) => {
                Box::pin(self.delete_message_batch(context, input)).await
            }
            Action::ChangeMessageVisibilityBatch(input) => {
                Box::pin(self.change_message_visibility_batch(context, input)).await
            }
            Action::AddPermission(input) => Box::pin(self.add_permission(context, input)).await,
            Action::RemovePermission(input) => {
                Box::pin(self.remove_permission(context, input)).await
            }
            Action::StartMessageMoveTask(input) => {
                Box::pin(self.start_message_move_task(context, input)).await
            }
            Action::ListMessageMoveTasks(input) => {
                Box::pin(self.list_message_move_tasks(context, input)).await
            }
            Action::CancelMessageMoveTask(input) => {
                Box::pin(self.cancel_message_move_task(context, input)).await
            }
        }
    }

    fn namespace(&self, context: &RequestContext, account: &str) -> String {
        self.names.namespace(&AccountRegion {
            account: account.to_string(),
            region: context.region.clone(),
        })
    }

    /// The queue a request is about: its `QueueUrl`, else the request path.
    fn queue_key(&self, context: &RequestContext, target: &QueueTarget) -> SqsResult<QueueKey> {
        let address = match &target.queue_url {
            Some(url) => namespace::parse_queue_url(url)?,
            None => context
                .path_queue
                .clone()
                .ok_or_else(|| SqsError::missing("QueueUrl"))?,
        };
        let account = address.account.unwrap_or_else(|| context.account.clone());
        Ok(QueueKey::new(
            self.namespace(context, &account),
            address.name,
        ))
    }

    async fn require_queue(&self, key: &QueueKey) -> SqsResult<()> {
        if self.engine.queue_exists(key).await.map_err(engine_error)? {
            Ok(())
        } else {
            Err(SqsError::queue_does_not_exist())
        }
    }

    fn url(&self, context: &RequestContext, key: &QueueKey) -> String {
        match &self.config.advertised_url {
            Some(origin) => self.names.queue_url(key, origin, &context.region),
            None => self.names.queue_url(
                key,
                format_args!("{}://{}", self.config.url_scheme, context.host),
                &context.region,
            ),
        }
    }

    fn arn(&self, context: &RequestContext, key: &QueueKey) -> String {
        self.names.queue_arn(key, &context.region)
    }
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod engine_calls_tests;

#[cfg(test)]
mod fifo_tests;

#[cfg(test)]
mod test_support;

#[cfg(test)]
mod telemetry_tests;

#[cfg(test)]
mod auth_tests;
