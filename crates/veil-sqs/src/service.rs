//! The thin HTTP service: one axum handler for every request. It decodes with the codec, works out the
//! namespace (SPEC §7), calls the engine — which alone decides visibility — and encodes the answer in the
//! protocol the request used. Each request gets a fresh uuid as its request id.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::limits as sqs_limits;
use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::HeaderMap;
use axum::response::Response;
use axum::Router;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use bytes::Bytes;
use veil_core::limits::SECOND_MS;
use veil_core::{
    AttributeData, AttributeValue, Attributes, CreateOutcome, Engine, EngineError, Message,
    NewMessage, QueueKey, ReceiptRule, ReceiveOptions, RedrivePolicy, VisibilityChange,
};

use crate::api::*;
use crate::attributes::{self, QueueSetting, RedrivePermission};
use crate::codec::{self, HttpRequestParts};
use crate::error::{ErrorCode, SqsError, SqsResult};
use crate::limits;
use crate::md5::{hex, md5_of_attributes, md5_of_body};
use crate::namespace::{self, AccountRegion, NamespaceMap, QueueAddress};
use crate::validate;
use veil_http::{header_str, into_response};

/// Engine attribute key under which the `AWSTraceHeader` system attribute is kept. User attribute names may
/// not start with `AWS.`, so it never collides with one, and it is never shown as a user attribute.
const TRACE_HEADER_KEY: &str = "AWS.SQS.AWSTraceHeader";
/// Engine attribute keys with this prefix belong to SQS itself, not to the user.
const RESERVED_ATTRIBUTE_PREFIX: &str = "AWS.";

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
}

impl Default for SqsConfig {
    fn default() -> Self {
        Self {
            account_id: sqs_limits::DEFAULT_ACCOUNT_ID.to_string(),
            default_region: sqs_limits::DEFAULT_REGION.to_string(),
            inflight_max_default: veil_core::limits::INFLIGHT_MESSAGES_DEFAULT,
        }
    }
}

struct Service {
    engine: Arc<Engine>,
    config: SqsConfig,
    names: NamespaceMap,
}

/// The SQS service: every method and path goes to one handler.
pub fn router(engine: Arc<Engine>, config: SqsConfig) -> Router {
    let names = NamespaceMap {
        default_account: config.account_id.clone(),
        default_region: config.default_region.clone(),
    };
    let service = Arc::new(Service {
        engine,
        config,
        names,
    });
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
    /// Shown as the `SenderId` of sent messages: the access key, else the account.
    sender_id: String,
}

async fn handle(State(service): State<Arc<Service>>, request: Request) -> Response {
    let request_id = uuid::Uuid::new_v4().to_string();
    let (parts, body) = request.into_parts();
    let target = header_str(&parts.headers, "x-amz-target");
    let protocol = codec::protocol_of(target);
    let body = match axum::body::to_bytes(body, limits::HTTP_BODY_BYTES_MAX).await {
        Ok(body) => body,
        Err(error) => {
            let error = SqsError::new(
                ErrorCode::InvalidParameterValue,
                format!("The request body could not be read: {error}"),
            );
            return into_response(codec::encode_error(protocol, &error, &request_id));
        }
    };
    let (protocol, decoded) = codec::decode(&HttpRequestParts {
        method: parts.method.as_str(),
        query: parts.uri.query(),
        target,
        body: &body,
    });
    let context = service.context(&parts.headers, parts.uri.path());
    let reply = match decoded {
        Ok(request) => {
            let action = request.action.name();
            match service.execute(&context, request.action).await {
                Ok(output) => codec::encode_output(protocol, action, &output, &request_id),
                Err(error) => {
                    tracing::debug!(action = action.as_str(), %error, "sqs request failed");
                    codec::encode_error(protocol, &error, &request_id)
                }
            }
        }
        Err(error) => {
            tracing::debug!(%error, "sqs request rejected");
            codec::encode_error(protocol, &error, &request_id)
        }
    };
    into_response(reply)
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
        EngineError::InvalidArgument(reason) => {
            SqsError::new(ErrorCode::InvalidParameterValue, reason)
        }
        EngineError::ReceiptInvalid => SqsError::new(
            ErrorCode::ReceiptHandleIsInvalid,
            "The input receipt handle is not a valid receipt handle.",
        ),
        EngineError::MessageNotAvailable => SqsError::new(
            ErrorCode::InvalidParameterValue,
            "Message does not exist or is not available for visibility timeout change.",
        ),
        EngineError::VisibilityPastLimit { max_ms, .. } => SqsError::new(
            ErrorCode::InvalidParameterValue,
            format!(
                "Total VisibilityTimeout for the message is beyond the limit [{} seconds]",
                max_ms / SECOND_MS
            ),
        ),
        EngineError::VisibilityPastExpiry => SqsError::new(
            ErrorCode::InvalidParameterValue,
            "The visibility timeout would pass the message's expiry.",
        ),
        EngineError::PurgeTooSoon { interval_ms, .. } => SqsError::new(
            ErrorCode::PurgeQueueInProgress,
            format!(
                "Only one PurgeQueue operation is allowed every {} seconds.",
                interval_ms / SECOND_MS
            ),
        ),
        EngineError::Store(error) => SqsError::internal(error),
    }
}

/// Maps the errors of operations on a receipt handle, quoting the handle as SQS does.
fn receipt_error(error: EngineError, handle: &str, visibility: Option<u64>) -> SqsError {
    match error {
        EngineError::ReceiptInvalid => SqsError::receipt_handle_invalid(handle),
        EngineError::MessageNotAvailable => SqsError::invalid_value(
            "ReceiptHandle",
            handle,
            "Message does not exist or is not available for visibility timeout change.",
        ),
        EngineError::VisibilityPastLimit { max_ms, .. } => SqsError::invalid_value(
            "VisibilityTimeout",
            visibility.unwrap_or_default(),
            &format!(
                "Total VisibilityTimeout for the message is beyond the limit [{} seconds]",
                max_ms / SECOND_MS
            ),
        ),
        other => engine_error(other),
    }
}

/// Opaque page tokens: the last name of the previous page, base64url.
fn encode_token(last_name: &str) -> String {
    URL_SAFE_NO_PAD.encode(last_name.as_bytes())
}

fn decode_token(token: &str) -> SqsResult<String> {
    URL_SAFE_NO_PAD
        .decode(token.as_bytes())
        .ok()
        .and_then(|bytes| String::from_utf8(bytes).ok())
        .ok_or_else(|| SqsError::invalid_value("NextToken", token, "Invalid NextToken."))
}

/// One page of names (sorted), starting after `next_token`. Without `max_results` SQS returns up to its
/// maximum and no token.
fn paginate(
    sorted: Vec<QueueKey>,
    max_results: Option<i64>,
    next_token: Option<&str>,
    results_max: usize,
) -> SqsResult<(Vec<QueueKey>, Option<String>)> {
    let page_size = match max_results {
        None => results_max,
        Some(n) => usize::try_from(n)
            .ok()
            .filter(|n| (1..=results_max).contains(n))
            .ok_or_else(|| {
                SqsError::invalid_value(
                    "MaxResults",
                    n,
                    &format!("MaxResults must be an integer between 1 and {results_max}."),
                )
            })?,
    };
    let after = next_token.map(decode_token).transpose()?;
    let mut remaining = sorted
        .into_iter()
        .filter(|key| after.as_ref().is_none_or(|after| key.name > *after));
    let page: Vec<QueueKey> = remaining.by_ref().take(page_size).collect();
    let more = remaining.next().is_some();
    let token = (max_results.is_some() && more)
        .then(|| page.last().map(|key| encode_token(&key.name)))
        .flatten();
    Ok((page, token))
}

/// Whether a ReceiveMessage `MessageAttributeNames` filter selects `name`: `All`, `.*`, the exact name, or
/// `prefix.*` for names under `prefix.`.
fn message_attribute_selected(filters: &[String], name: &str) -> bool {
    filters.iter().any(|filter| {
        filter == "All"
            || filter == ".*"
            || filter == name
            || filter
                .strip_suffix('*')
                .filter(|prefix| prefix.ends_with('.'))
                .is_some_and(|prefix| name.starts_with(prefix))
    })
}

/// A message ready to send, with the digests its answer reports.
struct PreparedMessage {
    message: NewMessage,
    md5_of_attributes: Option<String>,
    md5_of_system_attributes: Option<String>,
}

impl Service {
    fn context(&self, headers: &HeaderMap, path: &str) -> RequestContext {
        let credential =
            header_str(headers, "authorization").and_then(namespace::parse_authorization);
        let path_queue = namespace::parse_queue_path(path);
        let account = path_queue
            .as_ref()
            .and_then(|address| address.account.clone())
            .unwrap_or_else(|| self.config.account_id.clone());
        RequestContext {
            host: header_str(headers, "host")
                .unwrap_or("localhost")
                .to_string(),
            region: credential
                .as_ref()
                .map_or_else(|| self.config.default_region.clone(), |c| c.region.clone()),
            sender_id: credential.map_or_else(|| account.clone(), |c| c.access_key),
            account,
            path_queue,
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
        let account = address
            .account
            .unwrap_or_else(|| self.config.account_id.clone());
        Ok(QueueKey::new(
            self.namespace(context, &account),
            address.name,
        ))
    }

    fn require_queue(&self, key: &QueueKey) -> SqsResult<()> {
        if self.engine.queue_exists(key) {
            Ok(())
        } else {
            Err(SqsError::queue_does_not_exist())
        }
    }

    fn url(&self, context: &RequestContext, key: &QueueKey) -> String {
        self.names.queue_url(key, &context.host, &context.region)
    }

    fn arn(&self, context: &RequestContext, key: &QueueKey) -> String {
        self.names.queue_arn(key, &context.region)
    }

    async fn execute(&self, context: &RequestContext, action: Action) -> SqsResult<Output> {
        match action {
            Action::CreateQueue(input) => self.create_queue(context, input).await,
            Action::DeleteQueue(target) => {
                let key = self.queue_key(context, &target)?;
                self.engine.delete_queue(&key).await.map_err(engine_error)?;
                Ok(Output::Empty)
            }
            Action::GetQueueUrl(input) => {
                validate::queue_name(&input.queue_name)
                    .map_err(|_| SqsError::queue_does_not_exist())?;
                let account = input
                    .queue_owner_account_id
                    .unwrap_or_else(|| context.account.clone());
                let key = QueueKey::new(self.namespace(context, &account), input.queue_name);
                self.require_queue(&key)?;
                Ok(Output::QueueUrl(self.url(context, &key)))
            }
            Action::ListQueues(input) => {
                let namespace = self.namespace(context, &context.account);
                let prefix = input.queue_name_prefix.unwrap_or_default();
                let keys = self
                    .engine
                    .list_queues(&namespace, &prefix)
                    .into_iter()
                    .map(|info| info.key)
                    .collect();
                let (page, next_token) = paginate(
                    keys,
                    input.max_results,
                    input.next_token.as_deref(),
                    sqs_limits::LIST_QUEUES_RESULTS_MAX,
                )?;
                Ok(Output::QueueUrls {
                    urls: page.iter().map(|key| self.url(context, key)).collect(),
                    next_token,
                })
            }
            Action::GetQueueAttributes(input) => self.get_queue_attributes(context, input),
            Action::SetQueueAttributes(input) => self.set_queue_attributes(context, input).await,
            Action::SendMessage(input) => self.send_message(context, input).await,
            Action::SendMessageBatch(input) => self.send_message_batch(context, input).await,
            Action::ReceiveMessage(input) => self.receive_message(context, input).await,
            Action::DeleteMessage(input) => {
                let key = self.queue_key(context, &input.target)?;
                self.engine
                    .delete(&key, &input.receipt_handle, ReceiptRule::AnyIssued)
                    .await
                    .map_err(|e| receipt_error(e, &input.receipt_handle, None))?;
                Ok(Output::Empty)
            }
            Action::DeleteMessageBatch(input) => self.delete_message_batch(context, input).await,
            Action::ChangeMessageVisibility(input) => {
                let key = self.queue_key(context, &input.target)?;
                self.change_visibility(&key, &input.receipt_handle, Some(input.visibility_timeout))
                    .await?;
                Ok(Output::Empty)
            }
            Action::ChangeMessageVisibilityBatch(input) => {
                self.change_visibility_batch(context, input).await
            }
            Action::PurgeQueue(target) => {
                let key = self.queue_key(context, &target)?;
                match self
                    .engine
                    .purge(&key, Some(sqs_limits::PURGE_INTERVAL_MS_MIN))
                    .await
                {
                    Ok(_) => Ok(Output::Empty),
                    Err(EngineError::PurgeTooSoon { .. }) => Err(SqsError::new(
                        ErrorCode::PurgeQueueInProgress,
                        format!(
                            "Only one PurgeQueue operation on {} is allowed every {} seconds.",
                            key.name,
                            sqs_limits::PURGE_INTERVAL_MS_MIN / SECOND_MS
                        ),
                    )),
                    Err(error) => Err(engine_error(error)),
                }
            }
            Action::TagQueue(input) => {
                let key = self.queue_key(context, &input.target)?;
                for (tag_key, value) in &input.tags {
                    validate_tag(tag_key, value)?;
                }
                let tags = input.tags;
                self.engine
                    .update_queue_config(&key, move |config| {
                        config.tags.extend(tags);
                        if config.tags.len() > sqs_limits::TAGS_PER_QUEUE_MAX {
                            return Err(EngineError::InvalidArgument(format!(
                                "Too many tags: a queue can have at most {}.",
                                sqs_limits::TAGS_PER_QUEUE_MAX
                            )));
                        }
                        Ok(())
                    })
                    .await
                    .map_err(engine_error)?;
                Ok(Output::Empty)
            }
            Action::UntagQueue(input) => {
                let key = self.queue_key(context, &input.target)?;
                let tag_keys = input.tag_keys;
                self.engine
                    .update_queue_config(&key, move |config| {
                        for tag_key in &tag_keys {
                            config.tags.remove(tag_key);
                        }
                        Ok(())
                    })
                    .await
                    .map_err(engine_error)?;
                Ok(Output::Empty)
            }
            Action::ListQueueTags(target) => {
                let key = self.queue_key(context, &target)?;
                let info = self.engine.queue_info(&key).map_err(engine_error)?;
                Ok(Output::Tags(info.config.tags))
            }
            Action::ListDeadLetterSourceQueues(input) => {
                let key = self.queue_key(context, &input.target)?;
                let sources = self
                    .engine
                    .dead_letter_sources(&key)
                    .map_err(engine_error)?;
                let (page, next_token) = paginate(
                    sources,
                    input.max_results,
                    input.next_token.as_deref(),
                    limits::LIST_DEAD_LETTER_SOURCES_RESULTS_MAX,
                )?;
                Ok(Output::QueueUrls {
                    urls: page.iter().map(|key| self.url(context, key)).collect(),
                    next_token,
                })
            }
            Action::Unsupported(name) => Err(SqsError::unsupported(name.as_str())),
        }
    }

    /// A redrive policy may name only an existing queue whose RedriveAllowPolicy admits the source.
    fn check_dead_letter_target(
        &self,
        context: &RequestContext,
        source: &QueueKey,
        policy: &RedrivePolicy,
    ) -> SqsResult<()> {
        let shown = || {
            serde_json::json!({
                "deadLetterTargetArn": self.arn(context, &policy.dead_letter_queue),
                "maxReceiveCount": policy.max_receive_count,
            })
            .to_string()
        };
        let target = self
            .engine
            .queue_info(&policy.dead_letter_queue)
            .map_err(|_| {
                SqsError::invalid_value(
                    "RedrivePolicy",
                    shown(),
                    "Dead letter target does not exist.",
                )
            })?;
        let source_arn = self.arn(context, source);
        let permission =
            RedrivePermission::from_stored(attributes::redrive_allow_policy(&target.config));
        if !permission.allows(&source_arn) {
            return Err(SqsError::invalid_value(
                "RedrivePolicy",
                shown(),
                &format!(
                    "Queue {} does not allow {source_arn} to use it as a dead-letter queue (RedriveAllowPolicy).",
                    self.arn(context, &policy.dead_letter_queue)
                ),
            ));
        }
        Ok(())
    }

    fn parse_settings(
        &self,
        context: &RequestContext,
        source: &QueueKey,
        attributes: &BTreeMap<String, String>,
    ) -> SqsResult<Vec<(String, QueueSetting)>> {
        let settings = attributes::parse_settings(attributes, &self.names)?;
        for (_, setting) in &settings {
            if let QueueSetting::RedrivePolicy(Some(policy)) = setting {
                self.check_dead_letter_target(context, source, policy)?;
            }
        }
        Ok(settings)
    }

    async fn create_queue(
        &self,
        context: &RequestContext,
        input: CreateQueueInput,
    ) -> SqsResult<Output> {
        validate::queue_name(&input.queue_name)?;
        for (tag_key, value) in &input.tags {
            validate_tag(tag_key, value)?;
        }
        if input.tags.len() > sqs_limits::TAGS_PER_QUEUE_MAX {
            return Err(SqsError::new(
                ErrorCode::InvalidParameterValue,
                format!(
                    "Too many tags: a queue can have at most {}.",
                    sqs_limits::TAGS_PER_QUEUE_MAX
                ),
            ));
        }
        let key = QueueKey::new(self.namespace(context, &context.account), input.queue_name);
        let settings = self.parse_settings(context, &key, &input.attributes)?;
        let mut config = attributes::default_config(self.config.inflight_max_default);
        for (_, setting) in &settings {
            attributes::apply(&mut config, setting);
        }
        config.tags = input.tags;
        match self
            .engine
            .create_queue(key.clone(), config)
            .await
            .map_err(engine_error)?
        {
            CreateOutcome::Created(_) => {}
            CreateOutcome::Existing(existing) => {
                // Idempotent when every given attribute already has the given value.
                for (name, setting) in &settings {
                    let mut candidate = existing.config.clone();
                    attributes::apply(&mut candidate, setting);
                    if candidate != existing.config {
                        return Err(SqsError::new(
                            ErrorCode::QueueNameExists,
                            format!(
                                "A queue already exists with the same name and a different value for attribute {name}"
                            ),
                        ));
                    }
                }
            }
        }
        Ok(Output::QueueUrl(self.url(context, &key)))
    }

    fn get_queue_attributes(
        &self,
        context: &RequestContext,
        input: GetQueueAttributesInput,
    ) -> SqsResult<Output> {
        let key = self.queue_key(context, &input.target)?;
        let info = self.engine.queue_info(&key).map_err(engine_error)?;
        let mut wanted: Vec<&str> = Vec::new();
        for name in &input.attribute_names {
            if !attributes::is_known_attribute(name) {
                return Err(SqsError::unknown_attribute(name));
            }
            if name == "All" {
                wanted.extend(attributes::ALL_ATTRIBUTES);
            } else {
                wanted.push(name);
            }
        }
        let mut rendered: Vec<(String, String)> = Vec::new();
        for name in wanted {
            if rendered.iter().any(|(seen, _)| seen == name) {
                continue;
            }
            if let Some(value) = attributes::render(name, &info, &self.names, &context.region) {
                rendered.push((name.to_string(), value));
            }
        }
        Ok(Output::QueueAttributes(rendered))
    }

    async fn set_queue_attributes(
        &self,
        context: &RequestContext,
        input: SetQueueAttributesInput,
    ) -> SqsResult<Output> {
        let key = self.queue_key(context, &input.target)?;
        // A missing queue is reported before any attribute problem.
        self.require_queue(&key)?;
        let settings = self.parse_settings(context, &key, &input.attributes)?;
        self.engine
            .update_queue_config(&key, move |config| {
                for (_, setting) in &settings {
                    attributes::apply(config, setting);
                }
                Ok(())
            })
            .await
            .map_err(engine_error)?;
        Ok(Output::Empty)
    }

    /// Checks one message (body, delay, attributes, size against the queue's limit) and builds it.
    fn prepare_message(
        &self,
        context: &RequestContext,
        input: MessageInput,
        size_max_bytes: u64,
    ) -> SqsResult<PreparedMessage> {
        let body = input
            .body
            .filter(|body| !body.is_empty())
            .ok_or_else(|| SqsError::missing("MessageBody"))?;
        validate::message_contents(&body)?;
        let delay_ms = input
            .delay_seconds
            .map(|s| validate::in_range("DelaySeconds", s, 0, sqs_limits::DELAY_S_MAX))
            .transpose()?
            .map(|s| s * SECOND_MS);
        if let Some(id) = &input.deduplication_id {
            return Err(SqsError::invalid_value(
                "MessageDeduplicationId",
                id,
                "The request includes a parameter that is not valid for this queue type.",
            ));
        }
        let (mut attributes, attributes_bytes) =
            validate::message_attributes(&input.message_attributes)?;
        let trace_header = validate::system_attributes(&input.system_attributes)?;
        if body.len() as u64 + attributes_bytes > size_max_bytes {
            return Err(validate::message_too_long(size_max_bytes));
        }
        let md5_of_attributes = md5_of_attributes(&attributes);
        let md5_of_system_attributes = trace_header
            .as_ref()
            .and_then(|value| md5_of_attributes_of(validate::TRACE_HEADER, value.clone()));
        if let Some(value) = trace_header {
            attributes.insert(TRACE_HEADER_KEY.to_string(), value);
        }
        Ok(PreparedMessage {
            md5_of_attributes,
            md5_of_system_attributes,
            message: NewMessage {
                body: Bytes::from(body),
                attributes,
                delay_ms,
                ttl: None,
                sender_id: context.sender_id.clone(),
                redrive: None,
            },
        })
    }

    async fn send_message(
        &self,
        context: &RequestContext,
        input: SendMessageInput,
    ) -> SqsResult<Output> {
        let key = self.queue_key(context, &input.target)?;
        let size_max_bytes = self.engine.message_size_limit(&key).map_err(engine_error)?;
        let prepared = self.prepare_message(context, input.message, u64::from(size_max_bytes))?;
        let sent = self
            .engine
            .send(&key, vec![prepared.message])
            .await
            .map_err(engine_error)?;
        let (message_id, md5_of_message_body) = sent
            .first()
            .map(|sent| {
                let id = uuid::Uuid::from_bytes(sent.message_id).to_string();
                (id, hex(&sent.body_md5))
            })
            .ok_or_else(|| SqsError::internal("the engine returned no sent message"))?;
        Ok(Output::SendMessage(SentMessageResult {
            id: String::new(),
            message_id,
            md5_of_message_body,
            md5_of_message_attributes: prepared.md5_of_attributes,
            md5_of_message_system_attributes: prepared.md5_of_system_attributes,
        }))
    }

    async fn send_message_batch(
        &self,
        context: &RequestContext,
        input: SendMessageBatchInput,
    ) -> SqsResult<Output> {
        validate::batch_entry_ids(
            "SendMessageBatchRequestEntry",
            input.entries.iter().map(|entry| entry.id.as_str()),
        )?;
        let key = self.queue_key(context, &input.target)?;
        let size_max_bytes = u64::from(self.engine.message_size_limit(&key).map_err(engine_error)?);
        let total_bytes: u64 = input
            .entries
            .iter()
            .map(|entry| {
                let body = entry.message.body.as_deref().map_or(0, str::len) as u64;
                let attributes: u64 = entry
                    .message
                    .message_attributes
                    .iter()
                    .map(|(name, value)| {
                        (name.len()
                            + value.data_type.as_deref().map_or(0, str::len)
                            + value.string_value.as_deref().map_or(0, str::len)
                            + value.binary_value.as_ref().map_or(0, Vec::len))
                            as u64
                    })
                    .sum();
                body + attributes
            })
            .sum();
        if total_bytes > limits::BATCH_REQUEST_BYTES_MAX {
            return Err(SqsError::new(
                ErrorCode::BatchRequestTooLong,
                format!(
                    "Batch requests cannot be longer than {} bytes. You have sent {total_bytes} bytes.",
                    limits::BATCH_REQUEST_BYTES_MAX
                ),
            ));
        }
        let mut accepted: Vec<(String, PreparedMessage)> = Vec::new();
        let mut failed = Vec::new();
        for entry in input.entries {
            match self.prepare_message(context, entry.message, size_max_bytes) {
                Ok(prepared) => accepted.push((entry.id, prepared)),
                Err(error) => failed.push(BatchFailure::from_error(&entry.id, &error)),
            }
        }
        let mut successful = Vec::with_capacity(accepted.len());
        if !accepted.is_empty() {
            let (ids, prepared): (Vec<String>, Vec<PreparedMessage>) = accepted.into_iter().unzip();
            let (messages, digests): (Vec<NewMessage>, Vec<_>) = prepared
                .into_iter()
                .map(|p| (p.message, (p.md5_of_attributes, p.md5_of_system_attributes)))
                .unzip();
            let sent = self
                .engine
                .send(&key, messages)
                .await
                .map_err(engine_error)?;
            for ((id, sent), (md5_attributes, md5_system)) in ids.into_iter().zip(sent).zip(digests)
            {
                successful.push(SentMessageResult {
                    id,
                    message_id: uuid::Uuid::from_bytes(sent.message_id).to_string(),
                    md5_of_message_body: hex(&sent.body_md5),
                    md5_of_message_attributes: md5_attributes,
                    md5_of_message_system_attributes: md5_system,
                });
            }
        }
        Ok(Output::SendMessageBatch { successful, failed })
    }

    async fn receive_message(
        &self,
        context: &RequestContext,
        input: ReceiveMessageInput,
    ) -> SqsResult<Output> {
        let max_messages = match input.max_number_of_messages {
            None => 1,
            Some(n) => usize::try_from(n)
                .ok()
                .filter(|n| (1..=sqs_limits::RECEIVE_MESSAGES_MAX as usize).contains(n))
                .ok_or_else(|| {
                    SqsError::invalid_value(
                        "MaxNumberOfMessages",
                        n,
                        &format!(
                            "Must be between 1 and {}, if provided.",
                            sqs_limits::RECEIVE_MESSAGES_MAX
                        ),
                    )
                })?,
        };
        let visibility_ms = input
            .visibility_timeout
            .map(|s| {
                validate::in_range(
                    "VisibilityTimeout",
                    s,
                    0,
                    sqs_limits::VISIBILITY_TIMEOUT_S_MAX,
                )
            })
            .transpose()?
            .map(|s| s * SECOND_MS);
        let wait_s = input
            .wait_time_seconds
            .map(|s| validate::in_range("WaitTimeSeconds", s, 0, sqs_limits::RECEIVE_WAIT_S_MAX))
            .transpose()?;
        let key = self.queue_key(context, &input.target)?;
        let wait_ms = wait_s.map(|s| s * SECOND_MS);
        let messages = self
            .engine
            .receive(
                &key,
                ReceiveOptions {
                    max_messages,
                    visibility_ms,
                    wait_ms,
                },
            )
            .await
            .map_err(engine_error)?;
        Ok(Output::ReceiveMessage(
            messages
                .into_iter()
                .map(|message| self.render_message(context, &input, message))
                .collect(),
        ))
    }

    /// A delivered message as SQS shows it: the body as UTF-8 (a body sent by another protocol that is not
    /// UTF-8 is shown lossily, and its digest is of what is shown so the client's check passes), the
    /// requested system attributes, and the requested user attributes with their digest.
    fn render_message(
        &self,
        context: &RequestContext,
        input: &ReceiveMessageInput,
        message: Message,
    ) -> ReceivedMessage {
        let message_id = message.message_id_string();
        let Message {
            payload,
            state,
            receipt,
            ..
        } = message;
        // The stored digest is of the bytes; a body that is not UTF-8 (sent by another protocol) is shown
        // lossily, and its digest must then be of what is shown for the client's check to pass.
        let (body, md5_of_message_body) = match String::from_utf8_lossy(&payload.body) {
            std::borrow::Cow::Borrowed(text) => (text.to_owned(), hex(&payload.body_md5)),
            std::borrow::Cow::Owned(shown) => {
                let digest = md5_of_body(shown.as_bytes());
                (shown, digest)
            }
        };
        let names = &input.system_attribute_names;
        let wants = |attribute: &str| names.iter().any(|n| n == "All" || n == attribute);
        let mut system = Vec::new();
        if wants("SenderId") {
            system.push(("SenderId".to_string(), payload.sender_id.clone()));
        }
        if wants("SentTimestamp") {
            system.push(("SentTimestamp".to_string(), payload.sent_at.to_string()));
        }
        if wants("ApproximateReceiveCount") {
            system.push((
                "ApproximateReceiveCount".to_string(),
                state.receive_count.to_string(),
            ));
        }
        if wants("ApproximateFirstReceiveTimestamp") {
            system.push((
                "ApproximateFirstReceiveTimestamp".to_string(),
                state.first_received_at.to_string(),
            ));
        }
        if wants("DeadLetterQueueSourceArn") {
            if let Some(source) = &payload.dead_letter_source {
                system.push((
                    "DeadLetterQueueSourceArn".to_string(),
                    self.arn(context, source),
                ));
            }
        }
        if wants(validate::TRACE_HEADER) {
            if let Some(AttributeValue {
                value: AttributeData::String(trace),
                ..
            }) = payload.attributes.get(TRACE_HEADER_KEY)
            {
                system.push((validate::TRACE_HEADER.to_string(), trace.clone()));
            }
        }
        let message_attributes: Attributes = payload
            .attributes
            .into_iter()
            .filter(|(name, _)| !name.starts_with(RESERVED_ATTRIBUTE_PREFIX))
            .filter(|(name, _)| message_attribute_selected(&input.message_attribute_names, name))
            .collect();
        ReceivedMessage {
            message_id,
            receipt_handle: receipt.unwrap_or_default(),
            md5_of_body: md5_of_message_body,
            body,
            attributes: system,
            md5_of_message_attributes: md5_of_attributes(&message_attributes),
            message_attributes,
        }
    }

    async fn delete_message_batch(
        &self,
        context: &RequestContext,
        input: DeleteMessageBatchInput,
    ) -> SqsResult<Output> {
        validate::batch_entry_ids(
            "DeleteMessageBatchRequestEntry",
            input.entries.iter().map(|entry| entry.id.as_str()),
        )?;
        let key = self.queue_key(context, &input.target)?;
        self.require_queue(&key)?;
        let handles: Vec<&str> = input
            .entries
            .iter()
            .map(|entry| entry.receipt_handle.as_str())
            .collect();
        // One engine call, so the whole batch shares one commit.
        let outcomes = self
            .engine
            .delete_batch(&key, &handles, ReceiptRule::AnyIssued)
            .await
            .map_err(engine_error)?;
        let mut successful = Vec::new();
        let mut failed = Vec::new();
        for (entry, outcome) in input.entries.iter().zip(outcomes) {
            match outcome {
                Ok(_) => successful.push(entry.id.clone()),
                Err(error) => failed.push(BatchFailure::from_error(
                    &entry.id,
                    &receipt_error(error, &entry.receipt_handle, None),
                )),
            }
        }
        Ok(Output::BatchIds { successful, failed })
    }

    /// Validates a VisibilityTimeout and turns it into the engine's change (12 h cap from the receive).
    fn visibility_change(visibility_timeout: Option<i64>) -> SqsResult<(u64, VisibilityChange)> {
        let seconds = visibility_timeout.ok_or_else(|| SqsError::missing("VisibilityTimeout"))?;
        let seconds = validate::in_range(
            "VisibilityTimeout",
            seconds,
            0,
            sqs_limits::VISIBILITY_TIMEOUT_S_MAX,
        )?;
        let change = VisibilityChange {
            visibility_ms: seconds * SECOND_MS,
            since_receive_ms_max: Some(sqs_limits::VISIBILITY_TOTAL_MS_MAX),
            not_past_expiry: false,
        };
        Ok((seconds, change))
    }

    async fn change_visibility(
        &self,
        key: &QueueKey,
        handle: &str,
        visibility_timeout: Option<i64>,
    ) -> SqsResult<()> {
        let (seconds, change) = Self::visibility_change(visibility_timeout)?;
        self.engine
            .change_visibility(key, handle, change)
            .await
            .map_err(|e| receipt_error(e, handle, Some(seconds)))?;
        Ok(())
    }

    async fn change_visibility_batch(
        &self,
        context: &RequestContext,
        input: ChangeMessageVisibilityBatchInput,
    ) -> SqsResult<Output> {
        validate::batch_entry_ids(
            "ChangeMessageVisibilityBatchRequestEntry",
            input.entries.iter().map(|entry| entry.id.as_str()),
        )?;
        let key = self.queue_key(context, &input.target)?;
        // A missing queue is reported before any entry's own problem.
        self.require_queue(&key)?;
        let mut failed = Vec::new();
        let mut valid = Vec::new();
        for entry in &input.entries {
            match Self::visibility_change(entry.visibility_timeout) {
                Ok((seconds, change)) => valid.push((entry, seconds, change)),
                Err(error) => failed.push(BatchFailure::from_error(&entry.id, &error)),
            }
        }
        let changes: Vec<(&str, VisibilityChange)> = valid
            .iter()
            .map(|(entry, _, change)| (entry.receipt_handle.as_str(), *change))
            .collect();
        // One engine call, so the whole batch shares one commit.
        let results = self
            .engine
            .change_visibility_batch(&key, &changes)
            .await
            .map_err(engine_error)?;
        let mut successful = Vec::new();
        for ((entry, seconds, _), result) in valid.iter().zip(results) {
            match result {
                Ok(_) => successful.push(entry.id.clone()),
                Err(error) => failed.push(BatchFailure::from_error(
                    &entry.id,
                    &receipt_error(error, &entry.receipt_handle, Some(*seconds)),
                )),
            }
        }
        // Failures are reported in request order, as SQS does.
        let order = |id: &str| input.entries.iter().position(|entry| entry.id == id);
        failed.sort_by_key(|failure| order(&failure.id));
        Ok(Output::BatchIds { successful, failed })
    }
}

/// The digest of a single attribute map entry (used for `MD5OfMessageSystemAttributes`).
fn md5_of_attributes_of(name: &str, value: AttributeValue) -> Option<String> {
    md5_of_attributes(&Attributes::from([(name.to_string(), value)]))
}

fn validate_tag(key: &str, value: &str) -> SqsResult<()> {
    if key.is_empty() || key.chars().count() > limits::TAG_KEY_CHARS_MAX {
        return Err(SqsError::invalid_value(
            "Tag.Key",
            key,
            &format!(
                "Tag keys must be 1 to {} characters long.",
                limits::TAG_KEY_CHARS_MAX
            ),
        ));
    }
    if value.chars().count() > limits::TAG_VALUE_CHARS_MAX {
        return Err(SqsError::invalid_value(
            "Tag.Value",
            value,
            &format!(
                "Tag values must be at most {} characters long.",
                limits::TAG_VALUE_CHARS_MAX
            ),
        ));
    }
    Ok(())
}

#[cfg(test)]
#[path = "service_tests.rs"]
mod tests;
