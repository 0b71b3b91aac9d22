//! The queue actions: create, delete, look up and list queues, read and change their attributes, purge them
//! and list a dead-letter queue's sources. Queue settings travel as SQS attribute strings; `attributes/`
//! parses and renders them, this file applies them through the engine.

use std::collections::BTreeMap;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use veil_core::limits::SECOND_MS;
use veil_core::{CreateOutcome, EngineError, QueueInfo, QueueKey, RedrivePolicy};

use super::{engine_error, tags, RequestContext, Service};
use crate::api::{
    CreateQueueInput, GetQueueAttributesInput, GetQueueUrlInput, ListDeadLetterSourceQueuesInput,
    ListQueuesInput, Output, QueueTarget, SetQueueAttributesInput,
};
use crate::attributes::{self, QueueSetting, RedrivePermission};
use crate::error::{ErrorCode, SqsError, SqsResult};
use crate::fifo;
use crate::limits;
use crate::validate;

impl Service {
    pub(super) async fn create_queue(
        &self,
        context: &RequestContext,
        input: CreateQueueInput,
    ) -> SqsResult<Output> {
        // `FifoQueue=true` (in any case) asks for a FIFO queue, whose name must end in `.fifo`; a standard
        // queue's name may not (docs/semantics.md §SQS, "FIFO queues").
        let fifo = input
            .attributes
            .get("FifoQueue")
            .is_some_and(|value| value.trim().eq_ignore_ascii_case("true"));
        validate::queue_name(&input.queue_name, fifo)?;
        tags::validate_new_queue_tags(&input.queue_name, &input.tags)?;
        let key = QueueKey::new(self.namespace(context, &context.account), input.queue_name);
        let settings = self
            .parse_settings(context, &key, &input.attributes, fifo)
            .await?;
        let mut config = attributes::default_config(self.config.inflight_max_default, fifo);
        for (_, setting) in &settings {
            attributes::apply(&mut config, setting);
        }
        attributes::check_fifo_settings(&config)?;
        tags::set_tags(&mut config, input.tags);
        config
            .protocol_settings
            .insert(veil_core::CREATED_BY_SETTING.into(), "sqs".into());
        match self
            .engine
            .create_queue(key.clone(), config)
            .await
            .map_err(engine_error)?
        {
            CreateOutcome::Created(_) => {}
            CreateOutcome::Existing(existing) => same_settings(&existing, fifo, &settings)?,
        }
        Ok(Output::QueueUrl(self.url(context, &key)))
    }

    pub(super) async fn delete_queue(
        &self,
        context: &RequestContext,
        target: &QueueTarget,
    ) -> SqsResult<Output> {
        let key = self.queue_key(context, target)?;
        self.engine.delete_queue(&key).await.map_err(engine_error)?;
        Ok(Output::Empty)
    }

    pub(super) async fn get_queue_url(
        &self,
        context: &RequestContext,
        input: GetQueueUrlInput,
    ) -> SqsResult<Output> {
        // A name no queue could have is simply not found: SQS does not say why.
        if !validate::possible_queue_name(&input.queue_name) {
            return Err(SqsError::queue_does_not_exist());
        }
        let account = input
            .queue_owner_account_id
            .unwrap_or_else(|| context.account.clone());
        let key = QueueKey::new(self.namespace(context, &account), input.queue_name);
        self.require_queue(&key).await?;
        Ok(Output::QueueUrl(self.url(context, &key)))
    }

    pub(super) async fn list_queues(
        &self,
        context: &RequestContext,
        input: ListQueuesInput,
    ) -> SqsResult<Output> {
        let namespace = self.namespace(context, &context.account);
        let prefix = input.queue_name_prefix.unwrap_or_default();
        let keys = self
            .engine
            .list_queues(&namespace, &prefix)
            .await
            .map_err(engine_error)?
            .into_iter()
            .map(|info| info.key)
            // Queues made by other protocols whose names SQS cannot address are not shown (Azure's rule too).
            .filter(|key| validate::possible_queue_name(&key.name))
            // Only the queues the caller holds some permission on (docs/security.md).
            .filter(|key| context.access.sees(key))
            .collect();
        let (page, next_token) = paginate(
            keys,
            input.max_results,
            input.next_token.as_deref(),
            limits::LIST_QUEUES_RESULTS_MAX,
        )?;
        Ok(Output::QueueUrls {
            urls: page.iter().map(|key| self.url(context, key)).collect(),
            next_token,
        })
    }

    pub(super) async fn get_queue_attributes(
        &self,
        context: &RequestContext,
        input: GetQueueAttributesInput,
    ) -> SqsResult<Output> {
        let key = self.queue_key(context, &input.target)?;
        let info = self.engine.queue_info(&key).await.map_err(engine_error)?;
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

    pub(super) async fn set_queue_attributes(
        &self,
        context: &RequestContext,
        input: SetQueueAttributesInput,
    ) -> SqsResult<Output> {
        let key = self.queue_key(context, &input.target)?;
        // A missing queue is reported before any attribute problem.
        self.require_queue(&key).await?;
        let fifo = fifo::is_fifo_name(&key.name);
        let settings = self
            .parse_settings(context, &key, &input.attributes, fifo)
            .await?;
        // The combination of FIFO settings is checked on the queue as it would become, under the engine's
        // lock, so that two concurrent changes cannot together reach a refused pairing.
        let mut refused = None;
        let updated = self
            .engine
            .update_queue_config(&key, |config| {
                for (_, setting) in &settings {
                    attributes::apply(config, setting);
                }
                attributes::check_fifo_settings(config).map_err(|error| {
                    refused = Some(error);
                    EngineError::InvalidArgument(String::new())
                })
            })
            .await;
        match (updated, refused) {
            (_, Some(error)) => Err(error),
            (Err(error), None) => Err(engine_error(error)),
            (Ok(_), None) => Ok(Output::Empty),
        }
    }

    pub(super) async fn purge_queue(
        &self,
        context: &RequestContext,
        target: &QueueTarget,
    ) -> SqsResult<Output> {
        let key = self.queue_key(context, target)?;
        match self
            .engine
            .purge(&key, Some(limits::PURGE_INTERVAL_MS_MIN))
            .await
        {
            Ok(_) => Ok(Output::Empty),
            // SQS names the queue in this message, which the generic mapping cannot.
            Err(EngineError::PurgeTooSoon { .. }) => Err(SqsError::new(
                ErrorCode::PurgeQueueInProgress,
                format!(
                    "Only one PurgeQueue operation on {} is allowed every {} seconds.",
                    key.name,
                    limits::PURGE_INTERVAL_MS_MIN / SECOND_MS
                ),
            )),
            Err(error) => Err(engine_error(error)),
        }
    }

    pub(super) async fn list_dead_letter_source_queues(
        &self,
        context: &RequestContext,
        input: ListDeadLetterSourceQueuesInput,
    ) -> SqsResult<Output> {
        let key = self.queue_key(context, &input.target)?;
        let sources = self
            .engine
            .dead_letter_sources(&key)
            .await
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

    /// Parses the attributes of a FIFO (`fifo`) or standard queue into settings, checking each redrive
    /// policy's target.
    async fn parse_settings(
        &self,
        context: &RequestContext,
        source: &QueueKey,
        attributes: &BTreeMap<String, String>,
        fifo: bool,
    ) -> SqsResult<Vec<(String, QueueSetting)>> {
        let settings = attributes::parse_settings(attributes, &self.names, fifo)?;
        for (_, setting) in &settings {
            if let QueueSetting::RedrivePolicy(Some(policy)) = setting {
                self.check_dead_letter_target(context, source, policy)
                    .await?;
            }
        }
        Ok(settings)
    }

    /// A redrive policy may name only a queue the caller may send to, that exists, is of the source's type
    /// (FIFO or standard) and whose RedriveAllowPolicy admits the source.
    ///
    /// Dead-lettering sends the source's messages to the target on the caller's behalf, so setting the policy
    /// needs what a SendMessage to the target needs (`authorize_send`: the caller's grants, and another
    /// account's queue's `Policy`). It is checked here, when the policy is set, as AWS checks its permissions:
    /// a permission withdrawn later does not stop messages that are already routed (docs/security.md, "SQS").
    /// A target the caller may not send to is answered as one that does not exist — AWS's answer for a
    /// target it cannot use from the caller's account — so the answer does not tell whether another
    /// account's queue exists.
    async fn check_dead_letter_target(
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
        let does_not_exist = || {
            SqsError::invalid_value(
                "RedrivePolicy",
                shown(),
                "Dead letter target does not exist.",
            )
        };
        if let Err(refusal) = self
            .authorize_send(context, &policy.dead_letter_queue)
            .await
        {
            tracing::debug!(%refusal, "sqs redrive policy names a target the caller may not send to");
            return Err(does_not_exist());
        }
        let target = self
            .engine
            .queue_info(&policy.dead_letter_queue)
            .await
            .map_err(|_| does_not_exist())?;
        // AWS's text ends in two full stops (recorded from AWS in Terraform and CloudFormation failures, e.g.
        // byu-oit/handel issue 253). The source is FIFO by its name (`fifo::is_fifo_name`), the target by its
        // settings.
        if fifo::is_fifo_name(&source.name) != target.config.fifo.is_some() {
            return Err(SqsError::invalid_value(
                "RedrivePolicy",
                shown(),
                "Dead-letter queue must be same type of queue as the source..",
            ));
        }
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
}

/// CreateQueue on an existing queue is idempotent only when the queue is of the asked type (FIFO or standard)
/// and every given attribute already has the given value.
fn same_settings(
    existing: &QueueInfo,
    fifo: bool,
    settings: &[(String, QueueSetting)],
) -> SqsResult<()> {
    if existing.config.fifo.is_some() != fifo {
        return Err(different_value("FifoQueue"));
    }
    for (name, setting) in settings {
        let mut candidate = existing.config.clone();
        attributes::apply(&mut candidate, setting);
        if candidate != existing.config {
            return Err(different_value(name));
        }
    }
    Ok(())
}

fn different_value(attribute: &str) -> SqsError {
    SqsError::new(
        ErrorCode::QueueNameExists,
        format!(
            "A queue already exists with the same name and a different value for attribute {attribute}"
        ),
    )
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
