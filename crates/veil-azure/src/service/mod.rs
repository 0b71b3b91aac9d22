//! The thin HTTP service: one axum handler for every request, which runs veil-http's request pipeline
//! (ARCHITECTURE.md, "The request pipeline"). It locates the account, identifies the caller (Shared Key, SAS
//! or bearer token, unless verification is off; [`auth`]) before any parameter is read, admits the request,
//! names, authorizes and decodes the operation with the codec, resolves the account's namespace
//! (docs/semantics.md §7), calls the engine — which alone decides visibility — audits, and encodes the answer
//! with the headers every Azure response carries (and the CORS headers an account's rules give a browser).
//! The handlers live by resource: [`queues`] (list, create, delete,
//! metadata, ACL and the poison policy), [`messages`] (put, get, peek, update, delete, clear) and
//! [`properties`] (service properties, stats, CORS).

mod auth;
mod messages;
mod properties;
mod queues;

#[cfg(test)]
mod tests;

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;

use axum::body::Body;
use axum::extract::{ConnectInfo, Request, State};
use axum::http::request::Parts;
use axum::response::Response;
use axum::Router;
use bytes::Bytes;
use veil_core::{Access, Dispatch, EngineError, Millis, QueueKey, DEFAULT_NAMESPACE};
use veil_http::pipeline::AUTHENTICATE;
use veil_http::{header_str, into_response, HttpReply, Pipeline, Trip, Who};
use veil_telemetry::audit;
use veil_telemetry::{Code, Protocol, Telemetry};

use crate::api::{Operation, OperationKind};
use crate::auth::SasGrant;
use crate::codec::query::Query;
use crate::codec::{self, HttpRequestParts, Location};
use crate::entra::{EntraConfig, Principal};
use crate::error::{AzureError, AzureResult, ErrorCode};
use crate::limits;
use crate::time::{iso8601, rfc1123};

pub use queues::{ACL_SETTING, META_MAX_DEQUEUE_COUNT, META_POISON_QUEUE};

/// A storage account Veil accepts, with its key (decoded from base64).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AzureAccount {
    pub name: String,
    pub key: Vec<u8>,
    /// The engine namespace of its queues; `None` for the rule of docs/semantics.md §7 (`devstoreaccount1` → the
    /// default namespace, any other account → `azure:<account>`).
    pub namespace: Option<String>,
}

/// The server-wide poison policy of queues created through Azure (off unless configured).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PoisonDefault {
    pub max_dequeue_count: u32,
}

/// The Azure front-end's settings.
#[derive(Clone, Debug)]
pub struct AzureConfig {
    /// Accounts besides `devstoreaccount1`, which is always present with its well-known key unless listed
    /// here with another.
    pub accounts: Vec<AzureAccount>,
    /// Verify Shared Key and SAS (on by default); off accepts any request for local development.
    pub verify_auth: bool,
    pub poison_default: Option<PoisonDefault>,
    /// In-flight limit of queues created through Azure.
    pub inflight_max_default: u32,
    /// Where service properties are kept durably (`<data dir>`); `None` keeps them for the process only.
    pub data_dir: Option<PathBuf>,
    /// Where each request is counted (`veil_requests_total{protocol="azure"}`); detached by default.
    pub telemetry: Telemetry,
    /// Bearer tokens (Entra ID): off unless configured.
    pub entra: EntraConfig,
    /// The server's secret, from which user delegation keys are derived (the data directory's, so keys
    /// survive restarts); `None` draws one for the process.
    pub delegation_secret: Option<Vec<u8>>,
}

impl Default for AzureConfig {
    fn default() -> Self {
        Self {
            accounts: Vec::new(),
            verify_auth: true,
            poison_default: None,
            inflight_max_default: veil_core::limits::INFLIGHT_MESSAGES_DEFAULT,
            data_dir: None,
            telemetry: Telemetry::default(),
            entra: EntraConfig::default(),
            delegation_secret: None,
        }
    }
}

/// The development account with its published key.
pub fn dev_account() -> AzureAccount {
    AzureAccount {
        name: limits::DEV_ACCOUNT_NAME.to_string(),
        key: crate::auth::decode_key(limits::DEV_ACCOUNT_KEY).unwrap_or_default(),
        namespace: None,
    }
}

struct Service {
    engine: Dispatch,
    config: AzureConfig,
    accounts: HashMap<String, AzureAccount>,
    properties: properties::PropertiesStore,
    /// Derives user delegation keys: the data directory's secret bound to the Entra trust in force.
    secret: Vec<u8>,
    /// The request pipeline (veil-http's): where each request is audited and counted.
    pipeline: Pipeline,
}

/// The Azure Queue Storage service: every method and path goes to one handler.
pub fn router(engine: impl Into<Dispatch>, config: AzureConfig) -> Router {
    let mut accounts: HashMap<String, AzureAccount> = HashMap::new();
    accounts.insert(limits::DEV_ACCOUNT_NAME.to_string(), dev_account());
    for account in &config.accounts {
        accounts.insert(account.name.clone(), account.clone());
    }
    let properties = properties::PropertiesStore::open(config.data_dir.as_deref());
    let secret = config.delegation_secret.clone().unwrap_or_else(|| {
        let mut bytes = uuid::Uuid::new_v4().as_bytes().to_vec();
        bytes.extend_from_slice(uuid::Uuid::new_v4().as_bytes());
        bytes
    });
    // Keys verify only under the Entra mode and trust they were issued under.
    let secret = crate::delegation::bound_secret(&secret, &config.entra);
    let pipeline = Pipeline::new(Protocol::Azure, config.telemetry.clone());
    let service = Arc::new(Service {
        engine: engine.into(),
        config,
        accounts,
        properties,
        secret,
        pipeline,
    });
    Router::new().fallback(handle).with_state(service)
}

/// What every handler knows about the request besides its operation.
struct Ctx {
    /// The account without `-secondary`.
    account: String,
    /// The account as the path names it (list answers show it in their endpoint).
    named_account: String,
    namespace: String,
    host: String,
    now: Millis,
    /// The caller's address when the server is served with connect info, for the delivery history.
    peer: Option<SocketAddr>,
    /// What a bearer token or user delegation SAS may do (a listing shows only what it sees); `None` for the
    /// account key, an account-key SAS and verification off, which see the whole account.
    access: Option<Access>,
    /// The SAS the request was authorized with (account-key or user delegation), for what it allows on a
    /// queue besides the path's: the poison queue a policy names.
    sas: Option<SasGrant>,
    /// The bearer token's principal, for Get User Delegation Key.
    principal: Option<Principal>,
    /// The request came over TLS (the listing's endpoint says https).
    https: bool,
    /// The request's `x-ms-version` (Veil's when absent): a user delegation key's signed version.
    version: String,
}

impl Ctx {
    fn key(&self, queue: &str) -> QueueKey {
        QueueKey::new(self.namespace.clone(), queue)
    }

    /// Whether a listing shows `queue`: any permission on it.
    fn sees(&self, queue: &str) -> bool {
        self.access
            .as_ref()
            .is_none_or(|access| access.sees(&self.key(queue)))
    }

    /// Whether the caller may do `kind` on `queue` of the request's namespace — a queue the path does not
    /// name — checked as that operation's own request there would be: a SAS by its rules (a queue or user
    /// delegation SAS is signed for its one queue), a token or user delegation SAS by its principal's roles.
    /// The account key and verification off may do everything.
    fn may(&self, kind: OperationKind, queue: &str) -> AzureResult<()> {
        if let Some(grant) = &self.sas {
            grant.authorize_elsewhere(kind)?;
        }
        if let Some(access) = &self.access {
            auth::check_access(access, kind, &self.namespace, Some(queue))?;
        }
        Ok(())
    }
}

/// One request through veil-http's pipeline (ARCHITECTURE.md, "The request pipeline"): [`Service::serve`]
/// runs the steps; the answer gets the account's CORS headers and those every Azure answer carries, and is
/// observed here, once, with Azure's code rule (the HTTP status, success or not).
async fn handle(State(service): State<Arc<Service>>, request: Request) -> Response {
    let trip = service.pipeline.start();
    let request_id = uuid::Uuid::new_v4().to_string();
    let now = service.engine.now();
    // Present when the listener was made with `into_make_service_with_connect_info` (the binary's is).
    let peer = request
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map(|info| info.0.ip());
    let (parts, body) = request.into_parts();
    // veil-http's listeners say whether the connection is TLS; a request without it came over plain HTTP.
    let https = parts
        .extensions
        .get::<veil_http::ConnectionInfo>()
        .is_some_and(|info| info.tls);
    let location = codec::locate(header_str(&parts.headers, "host"), parts.uri.path());
    let request = Arrived {
        parts: &parts,
        location: &location,
        now,
        peer,
        https,
    };
    let (kind, served) = service.serve(&trip, request, body).await;
    let reply = served.unwrap_or_else(|error| {
        tracing::debug!(%error, method = %parts.method, path = parts.uri.path(), "azure request failed");
        codec::encode_error(&error, &request_id, &iso8601(now))
    });
    // A request whose account cannot be read gets no CORS headers.
    let reply = match &location {
        Ok(location) => service.with_cors(reply, &parts, location.primary_account()),
        Err(_) => reply,
    };
    // A request whose operation cannot be named (no account, an unknown `comp`) is `Unknown`.
    let operation = kind.map_or("Unknown", OperationKind::as_str);
    trip.observe(operation, Code::Status(reply.status));
    into_response(with_common_headers(reply, &parts, &request_id, now))
}

/// What the handler knows of a request before its body is read.
#[derive(Clone, Copy)]
struct Arrived<'a> {
    parts: &'a Parts,
    location: &'a AzureResult<Location>,
    /// The engine's time, which every SAS, token and key lifetime is judged on.
    now: Millis,
    peer: Option<IpAddr>,
    https: bool,
}

/// The answer to a request over its connection's rate limit (docs/security.md "Limits against abuse"): 503
/// `ServerBusy`, Azure's throttling error, which the SDKs retry with back-off. veil-http's serve loop calls
/// it before the request reaches the router, so it sees only the headers. (A request over the admission
/// limit is refused by the handler, after authentication, with the same error.)
pub fn throttled(headers: &axum::http::HeaderMap) -> Response {
    use veil_core::Clock;
    let request_id = uuid::Uuid::new_v4().to_string();
    let now = veil_core::SystemClock.now();
    let error = AzureError::new(ErrorCode::ServerBusy);
    let version = header_str(headers, "x-ms-version").unwrap_or(limits::SERVICE_VERSION_DEFAULT);
    let mut reply = codec::encode_error(&error, &request_id, &iso8601(now))
        .with_header("x-ms-request-id", request_id)
        .with_header("x-ms-version", version)
        .with_header("date", rfc1123(now));
    if let Some(client_id) = header_str(headers, "x-ms-client-request-id") {
        reply = reply.with_header("x-ms-client-request-id", client_id);
    }
    into_response(reply)
}

/// [`throttled`] for veil-http's serve loop, each answer counted in `veil_requests_total` with the code `503`
/// and the operation `Unknown` (a refusal sees only the headers, not the path and query that name it).
pub fn counted_throttled(telemetry: Telemetry) -> veil_http::Throttled {
    Arc::new(move |headers: &axum::http::HeaderMap| {
        telemetry.count_refused(Protocol::Azure, "Unknown", Code::Status(503));
        throttled(headers)
    })
}

/// `x-ms-request-id`, `x-ms-version` (the request's, else Veil's), `Date` and the echoed
/// `x-ms-client-request-id`, on every answer.
fn with_common_headers(
    mut reply: HttpReply,
    parts: &Parts,
    request_id: &str,
    now: Millis,
) -> HttpReply {
    let version =
        header_str(&parts.headers, "x-ms-version").unwrap_or(limits::SERVICE_VERSION_DEFAULT);
    reply = reply
        .with_header("x-ms-request-id", request_id)
        .with_header("x-ms-version", version)
        .with_header("date", rfc1123(now));
    if let Some(client_id) = header_str(&parts.headers, "x-ms-client-request-id") {
        reply = reply.with_header("x-ms-client-request-id", client_id);
    }
    reply
}

impl Service {
    /// Adds the CORS headers the account's rules give an actual request (`Origin` present or not; Azure's
    /// rules decide). A preflight has its own answer; an account without rules gets none.
    fn with_cors(&self, mut reply: HttpReply, parts: &Parts, account: &str) -> HttpReply {
        if parts.method.as_str().eq_ignore_ascii_case("OPTIONS") {
            return reply;
        }
        let rules = self.properties.cors_rules(account);
        if rules.is_empty() {
            return reply;
        }
        let method = parts.method.as_str().to_ascii_uppercase();
        let origin = header_str(&parts.headers, "origin");
        for (name, value) in codec::properties::actual_response_headers(&rules, origin, &method) {
            reply = reply.with_header(name, value);
        }
        reply
    }

    /// The pipeline's steps for one request: read the body, name the operation, then
    /// [`Self::serve_named`]. The operation is named from the method and path alone (no parameter), so it
    /// may come before authentication for the metrics' label; a routing error still answers only after
    /// authentication.
    async fn serve(
        &self,
        trip: &Trip<'_>,
        request: Arrived<'_>,
        body: Body,
    ) -> (Option<OperationKind>, AzureResult<HttpReply>) {
        let body = match axum::body::to_bytes(body, limits::HTTP_BODY_BYTES_MAX).await {
            Ok(body) => body,
            Err(_) => {
                let error = AzureError::new(ErrorCode::RequestBodyTooLarge)
                    .detail("MaxLimit", limits::MESSAGE_TEXT_BYTES_MAX);
                return (None, Err(error));
            }
        };
        let location = match request.location {
            Ok(location) => location,
            Err(error) => return (None, Err(error.clone())),
        };
        let query = Query::parse(request.parts.uri.query());
        let routed = codec::route(request.parts.method.as_str(), location, &query);
        let kind = routed.as_ref().ok().copied();
        let named = (location, &query, routed);
        (kind, self.serve_named(trip, request, named, &body).await)
    }

    /// **identify**, **admit**, **authorize**, decode, then [`Self::run`] the operation.
    async fn serve_named(
        &self,
        trip: &Trip<'_>,
        request: Arrived<'_>,
        (location, query, routed): (&Location, &Query, AzureResult<OperationKind>),
        body: &Bytes,
    ) -> AzureResult<HttpReply> {
        let parts = request.parts;
        let authorized = self.identify(trip, &request, location, query).await?;
        // The slot is taken only now, with the body read and the caller authenticated: a client that cannot
        // authenticate never holds one (docs/security.md "Limits against abuse"). Held until the answer.
        let _admitted = trip
            .admit_http(&parts.extensions)
            .await
            .map_err(|veil_http::AdmissionRefused| AzureError::new(ErrorCode::ServerBusy))?;
        // A cluster node past its lease answers nothing from memory (`Engine::serving`).
        self.engine.serving().map_err(AzureError::from)?;
        let kind = routed?;
        let namespace = self.namespace(location.primary_account());
        let authority = self.authorize(authorized, kind, &namespace, location)?;
        let operation = self.decode(kind, parts, location, query, body)?;
        let ctx = self.context(&request, location, namespace, authority);
        let output = self.run(trip, &ctx, kind, operation).await?;
        Ok(codec::encode_output(&output))
    }

    /// **identify**: who the request's credential proves; a refusal is audited.
    async fn identify(
        &self,
        trip: &Trip<'_>,
        request: &Arrived<'_>,
        location: &Location,
        query: &Query,
    ) -> AzureResult<auth::Authorized> {
        let env = (request.now, request.peer, request.https);
        self.authenticate(request.parts, location, query, env)
            .await
            .inspect_err(|error| {
                let client = request.peer.map(|ip| ip.to_string()).unwrap_or_default();
                let who = Who {
                    queue: location.queue().unwrap_or(""),
                    identity: location.primary_account(),
                    client: &client,
                    ..Who::default()
                };
                trip.audit(AUTHENTICATE, who, error.code.as_str());
            })
    }

    /// What the handlers know about an authorized request besides its operation.
    fn context(
        &self,
        request: &Arrived<'_>,
        location: &Location,
        namespace: String,
        authority: auth::Authority,
    ) -> Ctx {
        let parts = request.parts;
        Ctx {
            account: location.primary_account().to_string(),
            named_account: location.account.clone(),
            namespace,
            host: header_str(&parts.headers, "host")
                .unwrap_or("127.0.0.1")
                .to_string(),
            now: request.now,
            peer: parts
                .extensions
                .get::<ConnectInfo<SocketAddr>>()
                .map(|info| info.0),
            access: authority.access,
            sas: authority.sas,
            principal: authority.principal,
            https: request.https,
            version: header_str(&parts.headers, "x-ms-version")
                .unwrap_or(limits::SERVICE_VERSION_DEFAULT)
                .to_string(),
        }
    }

    /// **dispatch** and **audit** of one decoded operation. Azure has no long poll, so nothing parks and the
    /// slot is held to the answer.
    async fn run(
        &self,
        trip: &Trip<'_>,
        ctx: &Ctx,
        kind: OperationKind,
        operation: Operation,
    ) -> AzureResult<crate::api::Output> {
        let audited = audited_queue(&operation);
        let result = self.execute(ctx, operation).await;
        if let Some(queue) = audited {
            let identity = ctx
                .access
                .as_ref()
                .map_or(ctx.account.as_str(), |a| a.identity.as_str());
            let client = ctx
                .peer
                .map(|addr| addr.ip().to_string())
                .unwrap_or_default();
            let who = Who {
                namespace: &ctx.namespace,
                queue: &queue,
                identity,
                client: &client,
            };
            let outcome = result
                .as_ref()
                .map_or_else(|e| e.code.as_str(), |_| audit::OK);
            trip.audit(kind.as_str(), who, outcome);
        }
        result
    }

    fn decode(
        &self,
        kind: OperationKind,
        parts: &Parts,
        location: &Location,
        query: &Query,
        body: &Bytes,
    ) -> AzureResult<Operation> {
        let request_parts = HttpRequestParts {
            headers: &parts.headers,
            body,
        };
        codec::decode_operation(kind, &request_parts, location, query)
    }

    fn namespace(&self, account: &str) -> String {
        if let Some(ns) = self.accounts.get(account).and_then(|a| a.namespace.clone()) {
            return ns;
        }
        if account == limits::DEV_ACCOUNT_NAME {
            DEFAULT_NAMESPACE.to_string()
        } else {
            format!("azure:{account}")
        }
    }

    /// Get User Delegation Key for the bearer token's principal (the only credential [`Self::authorize`]
    /// lets through).
    fn user_delegation_key(
        &self,
        ctx: &Ctx,
        start: Option<String>,
        expiry: String,
        delegated_user_tid: Option<String>,
    ) -> AzureResult<crate::api::Output> {
        let Some(principal) = &ctx.principal else {
            return Err(AzureError::authentication(
                "Only authentication scheme Bearer is supported for Get User Delegation Key.",
            ));
        };
        let request = crate::delegation::KeyRequest {
            account: &ctx.account,
            oid: &principal.oid,
            tid: &principal.tid,
            start: start.as_deref(),
            expiry: &expiry,
            delegated_user_tid: delegated_user_tid.as_deref(),
            version: &ctx.version,
            now: ctx.now,
        };
        crate::delegation::issue(&self.secret, &request).map(crate::api::Output::UserDelegationKey)
    }

    /// Dispatches an operation to its handler.
    async fn execute(&self, ctx: &Ctx, operation: Operation) -> AzureResult<crate::api::Output> {
        match operation {
            Operation::ListQueues {
                prefix,
                marker,
                max_results,
                include_metadata,
            } => {
                self.list_queues(ctx, prefix, marker, max_results, include_metadata)
                    .await
            }
            Operation::GetServiceProperties => Ok(self.get_service_properties(ctx)),
            Operation::SetServiceProperties { xml } => self.set_service_properties(ctx, &xml),
            Operation::GetServiceStats => Ok(self.service_stats(ctx)),
            Operation::GetUserDelegationKey {
                start,
                expiry,
                delegated_user_tid,
            } => self.user_delegation_key(ctx, start, expiry, delegated_user_tid),
            Operation::Preflight {
                origin,
                method,
                headers,
            } => self.preflight(ctx, origin, method, headers),
            Operation::CreateQueue { queue, metadata } => {
                self.create_queue(ctx, &queue, metadata).await
            }
            Operation::DeleteQueue { queue } => self.delete_queue(ctx, &queue).await,
            Operation::GetMetadata { queue } => self.get_metadata(ctx, &queue).await,
            Operation::SetMetadata { queue, metadata } => {
                self.set_metadata(ctx, &queue, metadata).await
            }
            Operation::GetAcl { queue } => {
                Ok(crate::api::Output::Acl(self.acl(&ctx.key(&queue)).await?))
            }
            Operation::SetAcl { queue, identifiers } => {
                self.set_acl(ctx, &queue, &identifiers).await
            }
            message @ (Operation::PutMessage { .. }
            | Operation::GetMessages { .. }
            | Operation::PeekMessages { .. }
            | Operation::ClearMessages { .. }
            | Operation::DeleteMessage { .. }
            | Operation::UpdateMessage { .. }) => self.execute_message(ctx, message).await,
        }
    }
}

/// Whether `operation` goes to the audit log — it deletes or clears a queue, or changes its metadata (the
/// poison policy lives there), its ACL or the account's service properties — and then the queue it names
/// ("" for the service properties).
fn audited_queue(operation: &Operation) -> Option<String> {
    match operation {
        Operation::DeleteQueue { queue }
        | Operation::ClearMessages { queue }
        | Operation::SetMetadata { queue, .. }
        | Operation::SetAcl { queue, .. } => Some(queue.clone()),
        Operation::SetServiceProperties { .. } => Some(String::new()),
        _ => None,
    }
}

/// Maps the engine's errors that need no request detail.
fn engine_error(error: EngineError) -> AzureError {
    match error {
        EngineError::QueueNotFound(_) => AzureError::new(ErrorCode::QueueNotFound),
        // A well-formed receipt of another queue names a message this queue does not have.
        EngineError::MessageNotAvailable
        | EngineError::ReceiptOfAnotherQueue
        | EngineError::ReceiptExpired => AzureError::new(ErrorCode::MessageNotFound),
        EngineError::ReceiptInvalid => AzureError::new(ErrorCode::InvalidQueryParameterValue)
            .detail("QueryParameterName", "popreceipt")
            .detail("Reason", "Invalid pop receipt format"),
        EngineError::MessageTooLarge { max_bytes, .. } => {
            AzureError::new(ErrorCode::RequestBodyTooLarge).detail("MaxLimit", max_bytes)
        }
        EngineError::OverLimit { .. } => AzureError::new(ErrorCode::ServerBusy),
        EngineError::VisibilityPastExpiry => visibility_past_expiry(),
        // Azure queue names cannot name a FIFO queue (no dots), so the FIFO refusals are not met in practice.
        other @ (EngineError::VisibilityPastLimit { .. }
        | EngineError::InvalidArgument(_)
        | EngineError::GroupRequired
        | EngineError::DedupIdRequired) => {
            AzureError::with_message(ErrorCode::OutOfRangeInput, other.to_string())
        }
        EngineError::PurgeTooSoon { .. } => AzureError::new(ErrorCode::ServerBusy),
        // The store cannot be reached (a cluster's database down; docs/cluster.md): Azure's 503, which SDKs
        // retry.
        EngineError::Store(veil_core::StoreError::Unavailable(_)) => {
            AzureError::new(ErrorCode::ServerBusy)
        }
        EngineError::Store(error) => AzureError::internal(error),
    }
}

fn visibility_past_expiry() -> AzureError {
    AzureError::with_message(
        ErrorCode::OutOfRangeQueryParameterValue,
        "The visibility timeout would make the message visible after it expires.",
    )
    .detail("QueryParameterName", "visibilitytimeout")
}

impl From<EngineError> for AzureError {
    fn from(error: EngineError) -> Self {
        engine_error(error)
    }
}
