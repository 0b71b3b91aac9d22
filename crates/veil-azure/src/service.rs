//! The thin HTTP service: one axum handler for every request. It locates the account, authenticates (Shared
//! Key or SAS, unless verification is off), decodes with the codec, resolves the account's namespace
//! (SPEC §7), calls the engine — which alone decides visibility — and encodes the answer with the headers
//! every Azure response carries.

use std::collections::HashMap;
use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::request::Parts;
use axum::response::Response;
use axum::Router;
use bytes::Bytes;
use parking_lot::Mutex;
use veil_core::limits::SECOND_MS;
use veil_core::{
    CreateOutcome, Engine, EngineError, Message, Millis, NewMessage, QueueConfig, QueueKey,
    ReceiptRule, ReceiveOptions, RedrivePolicy, Ttl, VisibilityChange, DEFAULT_NAMESPACE,
};

use crate::api::*;
use crate::auth::{self, Credentials, SignedRequest};
use crate::codec::properties;
use crate::codec::query::Query;
use crate::codec::xml::Element;
use crate::codec::{self, HttpReply, HttpRequestParts, Location};
use crate::error::{AzureError, AzureResult, ErrorCode};
use crate::limits;
use crate::pop_receipt::{self, PopReceipt};
use crate::time::rfc1123;
use veil_http::{header_str, into_response};

/// Key of a queue's ACL (its `SignedIdentifiers` document) in `QueueConfig::protocol_settings`.
pub const ACL_SETTING: &str = "azure.acl";
/// Reserved metadata that sets a queue's poison policy (Veil's extension; legal Azure metadata names).
pub const META_MAX_DEQUEUE_COUNT: &str = "veilmaxdequeuecount";
pub const META_POISON_QUEUE: &str = "veilpoisonqueue";
/// The dequeue count of a poison policy set by naming only the poison queue (Azure Functions' default).
const MAX_DEQUEUE_COUNT_FALLBACK: u32 = 5;

/// A storage account Veil accepts, with its key (decoded from base64).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AzureAccount {
    pub name: String,
    pub key: Vec<u8>,
    /// The engine namespace of its queues; `None` for the rule of SPEC §7 (`devstoreaccount1` → the
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
}

impl Default for AzureConfig {
    fn default() -> Self {
        Self {
            accounts: Vec::new(),
            verify_auth: true,
            poison_default: None,
            inflight_max_default: veil_core::limits::INFLIGHT_MESSAGES_DEFAULT,
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
    /// Service properties per account. Kept for the life of the process only: they configure logging and
    /// metrics Veil does not produce, and CORS, which a restart resets to "no rules".
    properties: Mutex<HashMap<String, Element>>,
}

/// The Azure Queue Storage service: every method and path goes to one handler.
pub fn router(engine: Arc<Engine>, config: AzureConfig) -> Router {
    let mut accounts: HashMap<String, AzureAccount> = HashMap::new();
    accounts.insert(limits::DEV_ACCOUNT_NAME.to_string(), dev_account());
    for account in &config.accounts {
        accounts.insert(account.name.clone(), account.clone());
    }
    let service = Arc::new(Service {
        engine,
        config,
        accounts,
        properties: Mutex::new(HashMap::new()),
    });
    Router::new().fallback(handle).with_state(service)
}

async fn handle(State(service): State<Arc<Service>>, request: Request) -> Response {
    let request_id = uuid::Uuid::new_v4().to_string();
    let now = service.engine.now();
    let (parts, body) = request.into_parts();
    let mut common = vec![
        ("x-ms-request-id", request_id.clone()),
        (
            "x-ms-version",
            header_str(&parts.headers, "x-ms-version")
                .unwrap_or(limits::SERVICE_VERSION_DEFAULT)
                .to_string(),
        ),
        ("date", rfc1123(now)),
    ];
    if let Some(client_id) = header_str(&parts.headers, "x-ms-client-request-id") {
        common.push(("x-ms-client-request-id", client_id.to_string()));
    }
    let reply = match service.serve(&parts, body, now).await {
        Ok(reply) => reply,
        Err(error) => {
            tracing::debug!(%error, method = %parts.method, path = parts.uri.path(), "azure request failed");
            codec::encode_error(&error, &request_id, &crate::time::iso8601(now))
        }
    };
    let mut reply = reply;
    reply
        .headers
        .extend(common.into_iter().map(|(name, value)| (name.into(), value)));
    into_response(reply)
}

/// Maps the engine's errors that need no request detail.
fn engine_error(error: EngineError) -> AzureError {
    match error {
        EngineError::QueueNotFound(_) => AzureError::new(ErrorCode::QueueNotFound),
        EngineError::MessageNotAvailable => AzureError::new(ErrorCode::MessageNotFound),
        EngineError::ReceiptInvalid => AzureError::new(ErrorCode::InvalidQueryParameterValue)
            .detail("QueryParameterName", "popreceipt")
            .detail("Reason", "Invalid pop receipt format"),
        EngineError::MessageTooLarge { max_bytes, .. } => {
            AzureError::new(ErrorCode::RequestBodyTooLarge).detail("MaxLimit", max_bytes)
        }
        EngineError::OverLimit { .. } => AzureError::new(ErrorCode::ServerBusy),
        EngineError::VisibilityPastExpiry => AzureError::with_message(
            ErrorCode::OutOfRangeQueryParameterValue,
            "The visibility timeout would make the message visible after it expires.",
        )
        .detail("QueryParameterName", "visibilitytimeout"),
        other @ (EngineError::VisibilityPastLimit { .. } | EngineError::InvalidArgument(_)) => {
            AzureError::with_message(ErrorCode::OutOfRangeInput, other.to_string())
        }
        EngineError::PurgeTooSoon { .. } => AzureError::new(ErrorCode::ServerBusy),
        EngineError::Store(error) => AzureError::internal(error),
    }
}

impl From<EngineError> for AzureError {
    fn from(error: EngineError) -> Self {
        engine_error(error)
    }
}

/// How a request changes a queue's poison policy.
enum PolicyChange {
    Keep,
    Set(Option<RedrivePolicy>),
}

fn reserved(metadata: &Metadata, name: &str) -> Option<String> {
    metadata
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.clone())
}

fn has_reserved(metadata: &Metadata) -> bool {
    reserved(metadata, META_MAX_DEQUEUE_COUNT).is_some()
        || reserved(metadata, META_POISON_QUEUE).is_some()
}

fn invalid_reserved(name: &str, value: &str, reason: &str) -> AzureError {
    AzureError::with_message(
        ErrorCode::InvalidMetadata,
        format!("Metadata {name}={value:?} is invalid: {reason}"),
    )
    .detail("MetadataName", name)
}

impl Service {
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

    /// Settings of a queue created through Azure.
    fn queue_config(&self) -> QueueConfig {
        QueueConfig {
            visibility_timeout_ms: limits::QUEUE_VISIBILITY_MS,
            retention_ms: Some(limits::QUEUE_RETENTION_MS),
            inflight_max: self.config.inflight_max_default,
            ..QueueConfig::default()
        }
    }

    /// The poison policy a queue gets when its metadata says nothing: the server default, except for poison
    /// queues themselves (their messages are not moved again) and names too long for a `-poison` sibling.
    fn default_policy(&self, key: &QueueKey) -> Option<RedrivePolicy> {
        let default = self.config.poison_default?;
        if default.max_dequeue_count == 0 || key.name.ends_with(limits::POISON_QUEUE_SUFFIX) {
            return None;
        }
        let poison = format!("{}{}", key.name, limits::POISON_QUEUE_SUFFIX);
        codec::validate_queue_name(&poison).ok()?;
        Some(RedrivePolicy {
            timing: veil_core::DeadLetterTiming::OnReceive,
            dead_letter_queue: QueueKey::new(key.namespace.clone(), poison),
            max_receive_count: default.max_dequeue_count,
        })
    }

    /// The policy the reserved metadata asks for (`veilmaxdequeuecount`, `veilpoisonqueue`).
    fn policy_change(
        &self,
        key: &QueueKey,
        metadata: &Metadata,
        previous: Option<&Metadata>,
    ) -> AzureResult<PolicyChange> {
        let count = reserved(metadata, META_MAX_DEQUEUE_COUNT);
        let poison = reserved(metadata, META_POISON_QUEUE);
        if count.is_none() && poison.is_none() {
            return Ok(match previous {
                // Created through Azure: the server default, if any.
                None => PolicyChange::Set(self.default_policy(key)),
                // Reserved metadata removed: back to the default.
                Some(previous) if has_reserved(previous) => {
                    PolicyChange::Set(self.default_policy(key))
                }
                // Unrelated metadata: a policy set another way (an SQS RedrivePolicy) stays.
                Some(_) => PolicyChange::Keep,
            });
        }
        let max_receive_count = match &count {
            Some(text) => {
                let n: u32 = text.trim().parse().map_err(|_| {
                    invalid_reserved(META_MAX_DEQUEUE_COUNT, text, "not a whole number")
                })?;
                if n == 0 {
                    return Ok(PolicyChange::Set(None));
                }
                if !(limits::MAX_DEQUEUE_COUNT_MIN..=limits::MAX_DEQUEUE_COUNT_MAX).contains(&n) {
                    return Err(invalid_reserved(
                        META_MAX_DEQUEUE_COUNT,
                        text,
                        &format!(
                            "must be 0 (off) or {}..={}",
                            limits::MAX_DEQUEUE_COUNT_MIN,
                            limits::MAX_DEQUEUE_COUNT_MAX
                        ),
                    ));
                }
                n
            }
            None => self
                .config
                .poison_default
                .map(|d| d.max_dequeue_count)
                .filter(|n| *n > 0)
                .unwrap_or(MAX_DEQUEUE_COUNT_FALLBACK),
        };
        let poison_name = poison
            .map(|p| p.trim().to_string())
            .unwrap_or_else(|| format!("{}{}", key.name, limits::POISON_QUEUE_SUFFIX));
        if codec::validate_queue_name(&poison_name).is_err() || poison_name == key.name {
            return Err(invalid_reserved(
                META_POISON_QUEUE,
                &poison_name,
                "not a legal queue name other than the queue's own (names longer than 56 characters need an explicit veilpoisonqueue)",
            ));
        }
        Ok(PolicyChange::Set(Some(RedrivePolicy {
            timing: veil_core::DeadLetterTiming::OnReceive,
            dead_letter_queue: QueueKey::new(key.namespace.clone(), poison_name),
            max_receive_count,
        })))
    }

    /// Creates the poison queue a policy names, if it does not exist yet.
    async fn ensure_poison_queue(&self, policy: &Option<RedrivePolicy>) -> AzureResult<()> {
        if let Some(policy) = policy {
            self.engine
                .create_queue(policy.dead_letter_queue.clone(), self.queue_config())
                .await?;
        }
        Ok(())
    }

    async fn serve(&self, parts: &Parts, body: Body, now: Millis) -> AzureResult<HttpReply> {
        let body = axum::body::to_bytes(body, limits::HTTP_BODY_BYTES_MAX)
            .await
            .map_err(|_| {
                AzureError::new(ErrorCode::RequestBodyTooLarge)
                    .detail("MaxLimit", limits::MESSAGE_TEXT_BYTES_MAX)
            })?;
        let host = header_str(&parts.headers, "host");
        let location = codec::locate(host, parts.uri.path())?;
        let account = location.primary_account().to_string();
        let method = parts.method.as_str();
        let preflight = method.eq_ignore_ascii_case("OPTIONS");
        let query = Query::parse(parts.uri.query());
        // Azure authenticates before it looks at parameters: a forged request learns nothing from them.
        let credentials = if preflight || !self.config.verify_auth {
            None
        } else {
            Some(auth::credentials(&parts.headers, &query)?)
        };
        match &credentials {
            Some(Credentials::SharedKey {
                account: signer,
                signature,
            }) => {
                if *signer != account {
                    return Err(AzureError::authentication(format!(
                        "The account {signer} of the Authorization header is not the account {account} of the request."
                    )));
                }
                let signed = SignedRequest {
                    method,
                    path: parts.uri.path(),
                    query: parts.uri.query(),
                    headers: &parts.headers,
                };
                auth::verify_shared_key(&signed, &account, self.key(&account)?, signature)?;
            }
            Some(Credentials::Anonymous) => {
                return Err(AzureError::new(ErrorCode::NoAuthenticationInformation))
            }
            Some(Credentials::Sas(_)) | None => {}
        }
        let request_parts = HttpRequestParts {
            method,
            host,
            path: parts.uri.path(),
            query: parts.uri.query(),
            headers: &parts.headers,
            body: &body,
        };
        let operation = codec::decode(&request_parts, &location)?;
        if let Some(Credentials::Sas(sas)) = &credentials {
            let policy = match (&sas.identifier, operation.queue()) {
                (Some(id), Some(queue)) => Some(self.stored_policy(&account, queue, id)?),
                (Some(_), None) => {
                    return Err(AzureError::authentication(
                        "A stored access policy applies to its queue only.",
                    ))
                }
                _ => None,
            };
            auth::verify_sas(
                sas,
                &account,
                self.key(&account)?,
                &operation,
                now,
                policy.as_ref(),
            )?;
        }
        let output = self
            .execute(&location, host.unwrap_or("127.0.0.1"), operation, now)
            .await?;
        Ok(codec::encode_output(&output))
    }

    fn acl(&self, key: &QueueKey) -> AzureResult<Vec<SignedIdentifier>> {
        let info = self.engine.queue_info(key)?;
        match info.config.protocol_settings.get(ACL_SETTING) {
            Some(document) => codec::signed_identifiers(document.as_bytes()),
            None => Ok(Vec::new()),
        }
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

    fn properties_of(&self, account: &str) -> Element {
        self.properties
            .lock()
            .get(account)
            .cloned()
            .unwrap_or_else(properties::default_properties)
    }

    async fn execute(
        &self,
        location: &Location,
        host: &str,
        operation: Operation,
        now: Millis,
    ) -> AzureResult<Output> {
        let account = location.primary_account().to_string();
        let namespace = self.namespace(&account);
        let key_of = |queue: &str| QueueKey::new(namespace.clone(), queue);
        let engine = &self.engine;
        match operation {
            Operation::ListQueues {
                prefix,
                marker,
                max_results,
                include_metadata,
            } => {
                // Markers are `/<account>/<first name of the next page>`, like Azure's.
                let after = marker
                    .as_deref()
                    .map(|m| m.rsplit('/').next().unwrap_or(m).to_string());
                let page = max_results.unwrap_or(limits::LIST_RESULTS_MAX);
                let mut matching = engine
                    .list_queues(&namespace, prefix.as_deref().unwrap_or(""))
                    .into_iter()
                    // Queues made by other protocols whose names Azure cannot address are not shown.
                    .filter(|info| codec::validate_queue_name(&info.key.name).is_ok())
                    .filter(|info| after.as_deref().is_none_or(|a| info.key.name.as_str() >= a));
                let queues: Vec<QueueItem> = matching
                    .by_ref()
                    .take(page)
                    .map(|info| QueueItem {
                        name: info.key.name.clone(),
                        metadata: include_metadata.then(|| info.config.metadata.clone()),
                    })
                    .collect();
                let next_marker = matching
                    .next()
                    .map(|info| format!("/{account}/{}", info.key.name));
                Ok(Output::QueueList(QueueList {
                    service_endpoint: format!("http://{host}/{}/", location.account),
                    prefix,
                    marker,
                    max_results,
                    queues,
                    next_marker,
                }))
            }
            Operation::GetServiceProperties => Ok(Output::Xml(properties::to_document(
                &self.properties_of(&account),
            ))),
            Operation::SetServiceProperties { xml } => {
                let update = codec::parse_document(&xml)
                    .ok_or_else(|| AzureError::new(ErrorCode::InvalidXmlDocument))?;
                let mut all = self.properties.lock();
                let current = all
                    .get(&account)
                    .cloned()
                    .unwrap_or_else(properties::default_properties);
                all.insert(account.clone(), properties::merge(&current, &update));
                Ok(Output::Empty { status: 202 })
            }
            // Veil has one copy; its "secondary" is always in sync.
            Operation::GetServiceStats => Ok(Output::ServiceStats {
                last_sync_time: now,
            }),
            Operation::Preflight {
                origin,
                method,
                headers,
            } => {
                let rules = properties::cors_rules(&self.properties_of(&account));
                let rule = properties::matching_rule(&rules, &origin, &method, &headers)
                    .ok_or_else(|| AzureError::new(ErrorCode::CorsPreflightFailure))?;
                let wildcard = rule.allowed_origins.iter().any(|o| o == "*");
                Ok(Output::Preflight {
                    allow_origin: if wildcard { "*".into() } else { origin },
                    allow_methods: method,
                    allow_headers: headers.join(","),
                    max_age_s: rule.max_age_s,
                })
            }
            Operation::CreateQueue { queue, metadata } => {
                let key = key_of(&queue);
                let change = self.policy_change(&key, &metadata, None)?;
                let mut config = self.queue_config();
                config.metadata = metadata.clone();
                if let PolicyChange::Set(policy) = change {
                    config.redrive_policy = policy;
                }
                let policy = config.redrive_policy.clone();
                match engine.create_queue(key, config).await? {
                    CreateOutcome::Created(_) => {
                        self.ensure_poison_queue(&policy).await?;
                        Ok(Output::Empty { status: 201 })
                    }
                    CreateOutcome::Existing(info) if info.config.metadata == metadata => {
                        Ok(Output::Empty { status: 204 })
                    }
                    CreateOutcome::Existing(_) => {
                        Err(AzureError::new(ErrorCode::QueueAlreadyExists))
                    }
                }
            }
            Operation::DeleteQueue { queue } => {
                engine.delete_queue(&key_of(&queue)).await?;
                tracing::info!(target: "veil::audit", protocol = "azure", %account, %queue, "queue deleted");
                Ok(Output::Empty { status: 204 })
            }
            Operation::GetMetadata { queue } => {
                let info = engine.queue_info(&key_of(&queue))?;
                let stats = info.stats;
                Ok(Output::Metadata {
                    metadata: info.config.metadata,
                    approximate_count: stats.visible + stats.hidden + stats.delayed,
                })
            }
            Operation::SetMetadata { queue, metadata } => {
                let key = key_of(&queue);
                let previous = engine.queue_info(&key)?.config.metadata;
                let change = self.policy_change(&key, &metadata, Some(&previous))?;
                let info = engine
                    .update_queue_config(&key, |config| {
                        config.metadata = metadata;
                        if let PolicyChange::Set(policy) = change {
                            config.redrive_policy = policy;
                        }
                        Ok(())
                    })
                    .await?;
                self.ensure_poison_queue(&info.config.redrive_policy)
                    .await?;
                Ok(Output::Empty { status: 204 })
            }
            Operation::GetAcl { queue } => Ok(Output::Acl(self.acl(&key_of(&queue))?)),
            Operation::SetAcl { queue, identifiers } => {
                let document = codec::write_signed_identifiers(&identifiers);
                engine
                    .update_queue_config(&key_of(&queue), |config| {
                        config
                            .protocol_settings
                            .insert(ACL_SETTING.to_string(), document);
                        Ok(())
                    })
                    .await?;
                Ok(Output::Empty { status: 204 })
            }
            Operation::PutMessage {
                queue,
                text,
                visibility_s,
                ttl,
            } => {
                let mut message = NewMessage::new(Bytes::from(text.into_bytes()));
                message.delay_ms = Some(visibility_s * SECOND_MS);
                message.ttl = Some(match ttl {
                    MessageTtl::Seconds(s) => Ttl::After(s.saturating_mul(SECOND_MS)),
                    MessageTtl::Never => Ttl::Never,
                });
                let sent = engine
                    .send(&key_of(&queue), vec![message])
                    .await?
                    .pop()
                    .ok_or_else(|| AzureError::internal("the engine sent no message"))?;
                let receipt = pop_receipt::encode(&sent.message_id, &engine.receipt_of_send(&sent));
                Ok(Output::Messages {
                    status: 201,
                    messages: vec![QueueMessage {
                        message_id: uuid::Uuid::from_bytes(sent.message_id).to_string(),
                        insertion_time: sent.sent_at,
                        expiration_time: sent.expires_at,
                        pop_receipt: Some(receipt),
                        time_next_visible: Some(sent.visible_at),
                        dequeue_count: None,
                        text: None,
                    }],
                })
            }
            Operation::GetMessages {
                queue,
                count,
                visibility_s,
            } => {
                let options = ReceiveOptions {
                    max_messages: count as usize,
                    visibility_ms: Some(visibility_s * SECOND_MS),
                    wait_ms: Some(0),
                };
                let messages = engine.receive(&key_of(&queue), options).await?;
                Ok(Output::Messages {
                    status: 200,
                    messages: messages.into_iter().map(|m| render(m, true)).collect(),
                })
            }
            Operation::PeekMessages { queue, count } => {
                let messages = engine.peek(&key_of(&queue), count as usize).await?;
                Ok(Output::Messages {
                    status: 200,
                    messages: messages.into_iter().map(|m| render(m, false)).collect(),
                })
            }
            Operation::ClearMessages { queue } => {
                let cleared = engine.purge(&key_of(&queue), None).await?;
                tracing::info!(target: "veil::audit", protocol = "azure", %account, %queue, cleared, "queue cleared");
                Ok(Output::Empty { status: 204 })
            }
            Operation::DeleteMessage {
                queue,
                message_id,
                pop_receipt,
            } => {
                check_message_id(&message_id, &pop_receipt)?;
                engine
                    .delete(
                        &key_of(&queue),
                        &pop_receipt.engine_receipt,
                        ReceiptRule::Current,
                    )
                    .await
                    .map_err(|e| receipt_error(e, &pop_receipt))?;
                Ok(Output::Empty { status: 204 })
            }
            Operation::UpdateMessage {
                queue,
                message_id,
                pop_receipt,
                visibility_s,
                text,
            } => {
                check_message_id(&message_id, &pop_receipt)?;
                let change = VisibilityChange {
                    receipts: veil_core::ReceiptRule::Current,
                    visibility_ms: visibility_s * SECOND_MS,
                    since_receive_ms_max: None,
                    not_past_expiry: true,
                };
                let updated = engine
                    .update(
                        &key_of(&queue),
                        &pop_receipt.engine_receipt,
                        change,
                        text.map(|t| Bytes::from(t.into_bytes())),
                    )
                    .await
                    .map_err(|e| match e {
                        EngineError::VisibilityPastExpiry => AzureError::with_message(
                            ErrorCode::OutOfRangeQueryParameterValue,
                            "The visibility timeout would make the message visible after it expires.",
                        )
                        .detail("QueryParameterName", "visibilitytimeout")
                        .detail("QueryParameterValue", visibility_s),
                        other => receipt_error(other, &pop_receipt),
                    })?;
                Ok(Output::Updated {
                    pop_receipt: pop_receipt::encode(&pop_receipt.message_id, &updated.receipt),
                    time_next_visible: updated.visible_at,
                })
            }
        }
    }
}

/// The path's message id must be the one the pop receipt was issued for (Azure: 404 otherwise).
fn check_message_id(message_id: &str, receipt: &PopReceipt) -> AzureResult<()> {
    match uuid::Uuid::parse_str(message_id) {
        Ok(id) if id.as_bytes() == &receipt.message_id => Ok(()),
        _ => Err(AzureError::new(ErrorCode::MessageNotFound)),
    }
}

/// Errors of delete and update: a receipt Veil never issued is malformed (400); a stale one names a message
/// that is gone or was dequeued again (404 MessageNotFound).
fn receipt_error(error: EngineError, receipt: &PopReceipt) -> AzureError {
    match error {
        EngineError::ReceiptInvalid => AzureError::invalid_query(
            "popreceipt",
            &pop_receipt::encode(&receipt.message_id, &receipt.engine_receipt),
            "Invalid pop receipt format",
        ),
        other => engine_error(other),
    }
}

/// A message as Get (with its new pop receipt and time-next-visible) or Peek shows it. Bodies are bytes
/// in the engine; Azure shows them as text.
fn render(message: Message, with_receipt: bool) -> QueueMessage {
    let message_id = message.message_id_string();
    let pop_receipt = if with_receipt {
        message
            .receipt
            .as_deref()
            .map(|r| pop_receipt::encode(&message.payload.message_id, r))
    } else {
        None
    };
    QueueMessage {
        message_id,
        insertion_time: message.payload.sent_at,
        expiration_time: message.state.expires_at,
        pop_receipt,
        time_next_visible: with_receipt.then_some(message.state.visible_at),
        dequeue_count: Some(message.state.receive_count),
        text: Some(String::from_utf8_lossy(&message.payload.body).into_owned()),
    }
}

#[cfg(test)]
#[path = "service_tests.rs"]
mod service_tests;
