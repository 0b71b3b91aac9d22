//! The thin HTTP service: one axum handler for every request. It locates the account, authenticates (Shared
//! Key or SAS, unless verification is off) before any parameter is read, names and decodes the operation
//! with the codec, resolves the account's namespace (docs/semantics.md §7), calls the engine — which alone decides
//! visibility — and encodes the answer with the headers every Azure response carries (and the CORS headers
//! an account's rules give a browser). The handlers live by resource: [`queues`] (list, create, delete,
//! metadata, ACL and the poison policy), [`messages`] (put, get, peek, update, delete, clear) and
//! [`properties`] (service properties, stats, CORS).

mod messages;
mod properties;
mod queues;

#[cfg(test)]
mod tests;

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use axum::body::Body;
use axum::extract::{ConnectInfo, Request, State};
use axum::http::request::Parts;
use axum::response::Response;
use axum::Router;
use bytes::Bytes;
use veil_core::{Access, Engine, EngineError, Millis, Permission, QueueKey, DEFAULT_NAMESPACE};
use veil_http::{header_str, into_response, HttpReply};
use veil_telemetry::audit::{self, AuditEvent};
use veil_telemetry::{Code, Protocol, Telemetry};

use crate::api::{Operation, OperationKind, SignedIdentifier};
use crate::auth::{self, Credentials, Sas, SasGrant, SasScope, SignedRequest};
use crate::codec::query::Query;
use crate::codec::{self, HttpRequestParts, Location};
use crate::entra::{self, EntraConfig, Principal};
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
        key: auth::decode_key(limits::DEV_ACCOUNT_KEY).unwrap_or_default(),
        namespace: None,
    }
}

struct Service {
    engine: Arc<Engine>,
    config: AzureConfig,
    accounts: HashMap<String, AzureAccount>,
    properties: properties::PropertiesStore,
    /// Derives user delegation keys: the data directory's secret bound to the Entra trust in force.
    secret: Vec<u8>,
}

/// The Azure Queue Storage service: every method and path goes to one handler.
pub fn router(engine: Arc<Engine>, config: AzureConfig) -> Router {
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
    let service = Arc::new(Service {
        engine,
        config,
        accounts,
        properties,
        secret,
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
            check_access(access, kind, &self.namespace, Some(queue))?;
        }
        Ok(())
    }
}

/// What [`Service::authorize`] found a request may do, kept for its handlers.
struct Authority {
    access: Option<Access>,
    principal: Option<Principal>,
    sas: Option<SasGrant>,
}

/// Who a request was authenticated as.
enum Authorized {
    /// The account key, or verification off: the account's owner.
    Owner,
    /// A SAS signed with the account key: its own per-operation rules.
    Sas(SasGrant),
    /// A bearer token: its principal's roles.
    Token(Principal, Access),
    /// A user delegation SAS: its rules, and its delegating principal's roles.
    DelegatedSas(SasGrant, Access),
}

/// The permission each operation needs (docs/security.md's table); `None` for a preflight (no credentials)
/// and Get User Delegation Key (any verified token).
fn permission(kind: OperationKind) -> Option<Permission> {
    use OperationKind as K;
    match kind {
        K::PutMessage => Some(Permission::Send),
        K::GetMessages => Some(Permission::Receive),
        K::DeleteMessage | K::UpdateMessage => Some(Permission::Delete),
        K::PeekMessages
        | K::GetMetadata
        | K::GetAcl
        | K::ListQueues
        | K::GetServiceProperties
        | K::GetServiceStats => Some(Permission::Peek),
        K::CreateQueue
        | K::DeleteQueue
        | K::SetMetadata
        | K::SetAcl
        | K::ClearMessages
        | K::SetServiceProperties => Some(Permission::Admin),
        K::Preflight | K::GetUserDelegationKey => None,
    }
}

/// Checks a role-based access for `kind`: on the queue the path names, or — for an operation on the
/// account — on any queue of its namespace (a listing then shows only what it sees).
fn check_access(
    access: &Access,
    kind: OperationKind,
    namespace: &str,
    queue: Option<&str>,
) -> AzureResult<()> {
    let Some(needed) = permission(kind) else {
        return Ok(());
    };
    let allowed = match queue {
        Some(queue) => access.allows(&QueueKey::new(namespace, queue), needed),
        None => access
            .grants
            .iter()
            .any(|grant| grant.namespace.matches(namespace) && grant.permissions.contains(needed)),
    };
    if allowed {
        Ok(())
    } else {
        Err(AzureError::new(ErrorCode::AuthorizationPermissionMismatch))
    }
}

async fn handle(State(service): State<Arc<Service>>, request: Request) -> Response {
    let started = Instant::now();
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
    let mut kind = None;
    let served = service.serve(&parts, body, &location, (now, peer, https), &mut kind);
    let reply = match served.await {
        Ok(reply) => reply,
        Err(error) => {
            tracing::debug!(%error, method = %parts.method, path = parts.uri.path(), "azure request failed");
            codec::encode_error(&error, &request_id, &iso8601(now))
        }
    };
    // A request whose account cannot be read gets no CORS headers.
    let reply = match &location {
        Ok(location) => service.with_cors(reply, &parts, location.primary_account()),
        Err(_) => reply,
    };
    // Azure's code rule: the HTTP status, success or not. A request whose operation cannot be named (no
    // account, an unknown `comp`) is `Unknown`.
    service.config.telemetry.observe_request(
        Protocol::Azure,
        kind.map_or("Unknown", OperationKind::as_str),
        Code::Status(reply.status),
        started.elapsed(),
    );
    into_response(with_common_headers(reply, &parts, &request_id, now))
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

    async fn serve(
        &self,
        parts: &Parts,
        body: Body,
        location: &AzureResult<Location>,
        (now, peer, https): (Millis, Option<IpAddr>, bool),
        named: &mut Option<OperationKind>,
    ) -> AzureResult<HttpReply> {
        let body = axum::body::to_bytes(body, limits::HTTP_BODY_BYTES_MAX)
            .await
            .map_err(|_| {
                AzureError::new(ErrorCode::RequestBodyTooLarge)
                    .detail("MaxLimit", limits::MESSAGE_TEXT_BYTES_MAX)
            })?;
        let host = header_str(&parts.headers, "host");
        let location = location.as_ref().map_err(AzureError::clone)?;
        let query = Query::parse(parts.uri.query());
        // Naming the operation reads the method and path alone (no parameter), so it may come before
        // authentication for the metrics' label; a routing error still answers only after authentication.
        let routed = codec::route(parts.method.as_str(), location, &query);
        *named = routed.as_ref().ok().copied();
        let authorized = self
            .authenticate(parts, location, &query, (now, peer, https))
            .inspect_err(|error| {
                let client = peer.map(|ip| ip.to_string()).unwrap_or_default();
                audit::record(&AuditEvent {
                    action: "Authenticate",
                    protocol: Protocol::Azure,
                    namespace: "",
                    queue: location.queue().unwrap_or(""),
                    identity: location.primary_account(),
                    client: &client,
                    outcome: error.code.as_str(),
                });
            })?;
        // The slot is taken only now, with the body read and the caller authenticated: a client that cannot
        // authenticate never holds one (docs/security.md "Limits against abuse"). Held until the answer.
        let _admitted = veil_http::admit(&parts.extensions)
            .await
            .map_err(|veil_http::AdmissionRefused| AzureError::new(ErrorCode::ServerBusy))?;
        let kind = routed?;
        let namespace = self.namespace(location.primary_account());
        let Authority {
            access,
            principal,
            sas,
        } = self.authorize(authorized, kind, &namespace, location)?;
        let operation = self.decode(kind, parts, location, &query, &body)?;
        let identity = access.as_ref().map_or_else(
            || location.primary_account().to_string(),
            |a| a.identity.clone(),
        );
        let ctx = Ctx {
            account: location.primary_account().to_string(),
            named_account: location.account.clone(),
            namespace,
            host: host.unwrap_or("127.0.0.1").to_string(),
            now,
            peer: parts
                .extensions
                .get::<ConnectInfo<SocketAddr>>()
                .map(|info| info.0),
            access,
            sas,
            principal,
            https,
            version: header_str(&parts.headers, "x-ms-version")
                .unwrap_or(limits::SERVICE_VERSION_DEFAULT)
                .to_string(),
        };
        let audited = audited_queue(&operation);
        let result = self.execute(&ctx, operation).await;
        if let Some(queue) = audited {
            let client = peer.map(|ip| ip.to_string()).unwrap_or_default();
            audit::record(&AuditEvent {
                action: kind.as_str(),
                protocol: Protocol::Azure,
                namespace: &ctx.namespace,
                queue: &queue,
                identity: &identity,
                client: &client,
                outcome: result
                    .as_ref()
                    .map_or_else(|e| e.code.as_str(), |_| audit::OK),
            });
        }
        Ok(codec::encode_output(&result?))
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

    /// Checks what an authenticated request may do once its operation is named: a SAS by its own rules, a
    /// token or a user delegation SAS by its principal's roles (docs/security.md). Answers the access that
    /// limits a listing, the token's principal and the SAS, which handlers consult for a second queue.
    fn authorize(
        &self,
        authorized: Authorized,
        kind: OperationKind,
        namespace: &str,
        location: &Location,
    ) -> AzureResult<Authority> {
        if kind == OperationKind::GetUserDelegationKey
            && !matches!(authorized, Authorized::Token(..))
        {
            return Err(AzureError::authentication(
                "Only authentication scheme Bearer is supported for Get User Delegation Key.",
            ));
        }
        let (access, principal, sas) = match authorized {
            Authorized::Owner => (None, None, None),
            Authorized::Sas(grant) => {
                grant.authorize(kind)?;
                (None, None, Some(grant))
            }
            Authorized::Token(principal, access) => {
                check_access(&access, kind, namespace, location.queue())?;
                (Some(access), Some(principal), None)
            }
            Authorized::DelegatedSas(grant, access) => {
                grant.authorize(kind)?;
                check_access(&access, kind, namespace, location.queue())?;
                (Some(access), None, Some(grant))
            }
        };
        Ok(Authority {
            access,
            principal,
            sas,
        })
    }

    /// Azure authenticates before it looks at parameters: a forged request learns nothing from them. A SAS
    /// or a token is checked against the operation once it is named ([`Self::authorize`]); preflight
    /// (`OPTIONS`) and verification off need nothing.
    fn authenticate(
        &self,
        parts: &Parts,
        location: &Location,
        query: &Query,
        (now, peer, https): (Millis, Option<IpAddr>, bool),
    ) -> AzureResult<Authorized> {
        if parts.method.as_str().eq_ignore_ascii_case("OPTIONS") || !self.config.verify_auth {
            return Ok(Authorized::Owner);
        }
        let account = location.primary_account();
        match auth::credentials(&parts.headers, query)? {
            Credentials::SharedKey {
                scheme,
                account: signer,
                signature,
            } => {
                if signer != account {
                    return Err(AzureError::authentication(format!(
                        "The account {signer} of the Authorization header is not the account {account} of the request."
                    )));
                }
                let signed = SignedRequest {
                    method: parts.method.as_str(),
                    path: parts.uri.path(),
                    query: parts.uri.query(),
                    headers: &parts.headers,
                };
                let key = self.key(account)?;
                auth::verify_shared_key(&signed, account, key, &signature, scheme)?;
                Ok(Authorized::Owner)
            }
            Credentials::Sas(sas) => self.verify_sas(&sas, location, (now, peer, https)),
            Credentials::Bearer(token) => self.verify_bearer(parts, &token, account, now, https),
            Credentials::Anonymous => Err(AzureError::new(ErrorCode::NoAuthenticationInformation)),
        }
    }

    /// A bearer token: needs `x-ms-version` 2017-11-09 or later, then a token that verifies (401
    /// InvalidAuthenticationInfo with `WWW-Authenticate` otherwise, as Azure answers).
    fn verify_bearer(
        &self,
        parts: &Parts,
        token: &str,
        account: &str,
        now: Millis,
        _https: bool,
    ) -> AzureResult<Authorized> {
        let version = header_str(&parts.headers, "x-ms-version").unwrap_or("");
        if version < limits::BEARER_VERSION_MIN {
            return Err(AzureError::authentication(
                "Authentication scheme Bearer is not supported in this version.",
            ));
        }
        let principal = entra::verify_token(&self.config.entra, token, account, now).map_err(|refused| {
            let tenant = self
                .config
                .entra
                .tenant
                .as_deref()
                .unwrap_or(limits::ENTRA_TENANT_DEFAULT);
            AzureError::new(ErrorCode::InvalidAuthenticationInfo)
                .detail("AuthenticationErrorDetail", refused.0)
                .header(
                    "www-authenticate",
                    format!(
                        "Bearer authorization_uri=https://login.microsoftonline.com/{tenant}/oauth2/authorize resource_id={}",
                        limits::STORAGE_RESOURCE_ID
                    ),
                )
        })?;
        let access = entra::access(
            &self.config.entra,
            &principal,
            account,
            &self.namespace(account),
        );
        Ok(Authorized::Token(principal, access))
    }

    fn verify_sas(
        &self,
        sas: &Sas,
        location: &Location,
        (now, peer, https): (Millis, Option<IpAddr>, bool),
    ) -> AzureResult<Authorized> {
        let account = location.primary_account();
        if let Some(signed_key) = &sas.key {
            if sas.identifier.is_some() || sas.is_account_sas() {
                return Err(AzureError::authentication(
                    "Signature fields not well formed: a user delegation SAS is a queue SAS without si.",
                ));
            }
            if sas.delegated_user_oid.is_some() {
                return Err(AzureError::authentication(
                    "Veil does not support a user delegation SAS for a delegated user (sduoid).",
                ));
            }
            let key = crate::delegation::verify_key(&self.secret, account, signed_key, now)?;
            let scope = SasScope {
                account,
                queue: location.queue(),
                now,
                peer,
                policy: None,
                https,
            };
            let grant = auth::verify_sas(sas, &key, &scope)?;
            // The SAS can do no more than the principal who delegated it.
            let delegator = Principal {
                oid: signed_key.oid.clone(),
                tid: signed_key.tid.clone(),
                app_id: None,
                token_roles: Vec::new(),
                dev: self.config.entra.mode == entra::EntraMode::Dev,
            };
            let access = entra::access(
                &self.config.entra,
                &delegator,
                account,
                &self.namespace(account),
            );
            return Ok(Authorized::DelegatedSas(grant, access));
        }
        let policy = match (&sas.identifier, location.queue()) {
            (Some(id), Some(queue)) => Some(self.stored_policy(account, queue, id)?),
            (Some(_), None) => {
                return Err(AzureError::authentication(
                    "A stored access policy applies to its queue only.",
                ))
            }
            (None, _) => None,
        };
        let scope = SasScope {
            account,
            queue: location.queue(),
            now,
            peer,
            policy: policy.as_ref(),
            https,
        };
        auth::verify_sas(sas, self.key(account)?, &scope).map(Authorized::Sas)
    }

    fn stored_policy(&self, account: &str, queue: &str, id: &str) -> AzureResult<SignedIdentifier> {
        let key = QueueKey::new(self.namespace(account), queue);
        let identifiers = self.acl(&key).map_err(|_| {
            AzureError::authentication("The stored access policy's queue does not exist.")
        })?;
        identifiers
            .into_iter()
            .find(|identifier| identifier.id == id)
            .ok_or_else(|| {
                AzureError::authentication(format!("The stored access policy {id} does not exist."))
            })
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

    fn key(&self, account: &str) -> AzureResult<&[u8]> {
        self.accounts
            .get(account)
            .map(|a| a.key.as_slice())
            .ok_or_else(|| {
                AzureError::authentication(format!(
                    "The account {account} is not configured in Veil."
                ))
            })
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
            } => Ok(self.list_queues(ctx, prefix, marker, max_results, include_metadata)),
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
            Operation::GetMetadata { queue } => self.get_metadata(ctx, &queue),
            Operation::SetMetadata { queue, metadata } => {
                self.set_metadata(ctx, &queue, metadata).await
            }
            Operation::GetAcl { queue } => Ok(crate::api::Output::Acl(self.acl(&ctx.key(&queue))?)),
            Operation::SetAcl { queue, identifiers } => {
                self.set_acl(ctx, &queue, &identifiers).await
            }
            Operation::PutMessage {
                queue,
                text,
                visibility_s,
                ttl,
            } => self.put_message(ctx, &queue, text, visibility_s, ttl).await,
            Operation::GetMessages {
                queue,
                count,
                visibility_s,
            } => self.get_messages(ctx, &queue, count, visibility_s).await,
            Operation::PeekMessages { queue, count } => {
                self.peek_messages(ctx, &queue, count).await
            }
            Operation::ClearMessages { queue } => self.clear_messages(ctx, &queue).await,
            Operation::DeleteMessage {
                queue,
                message_id,
                pop_receipt,
            } => {
                self.delete_message(ctx, &queue, &message_id, &pop_receipt)
                    .await
            }
            Operation::UpdateMessage {
                queue,
                message_id,
                pop_receipt,
                visibility_s,
                text,
            } => {
                let update = messages::Update {
                    message_id: &message_id,
                    pop_receipt: &pop_receipt,
                    visibility_s,
                    text,
                };
                self.update_message(ctx, &queue, update).await
            }
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
