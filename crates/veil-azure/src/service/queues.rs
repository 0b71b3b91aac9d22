//! Queue handlers: list, create, delete, metadata and ACL, and the poison policy that reserved metadata
//! (`veilmaxdequeuecount`, `veilpoisonqueue`) or the server default sets — the engine's redrive policy. A
//! policy the caller sets makes the engine write into its poison queue, so it needs the caller's right to put
//! messages there (docs/security.md, "Azure Queue Storage").

use veil_core::{
    CreateOutcome, EngineError, QueueConfig, QueueKey, RedrivePolicy, AZURE_METADATA_SETTING_PREFIX,
};

use super::{Ctx, Service};
use crate::api::{Metadata, OperationKind, Output, QueueItem, QueueList, SignedIdentifier};
use crate::codec;
use crate::error::{AzureError, AzureResult, ErrorCode};
use crate::limits;

/// Key of a queue's ACL (its `SignedIdentifiers` document) in `QueueConfig::protocol_settings`.
pub const ACL_SETTING: &str = "azure.acl";
/// Reserved metadata that sets a queue's poison policy (Veil's extension; legal Azure metadata names).
pub const META_MAX_DEQUEUE_COUNT: &str = "veilmaxdequeuecount";
pub const META_POISON_QUEUE: &str = "veilpoisonqueue";
/// The dequeue count of a poison policy set by naming only the poison queue (Azure Functions' default).
const MAX_DEQUEUE_COUNT_FALLBACK: u32 = 5;

/// How a request changes a queue's poison policy.
#[derive(Clone)]
enum PolicyChange {
    Keep,
    /// The server default (`PoisonDefault`), or none: the operator's configuration, not the caller's.
    Default(Option<RedrivePolicy>),
    /// What the caller's reserved metadata names, or none (`veilmaxdequeuecount` 0).
    Set(Option<RedrivePolicy>),
}

/// Gives `config` the request's metadata and the poison policy it implies.
fn apply_metadata(config: &mut QueueConfig, metadata: Metadata, change: PolicyChange) {
    config.set_settings_under(AZURE_METADATA_SETTING_PREFIX, metadata);
    if let PolicyChange::Default(policy) | PolicyChange::Set(policy) = change {
        config.redrive_policy = policy;
    }
}

/// A queue's metadata, kept in its protocol settings.
fn metadata_of(config: &QueueConfig) -> Metadata {
    config.settings_under(AZURE_METADATA_SETTING_PREFIX)
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
    pub(super) async fn list_queues(
        &self,
        ctx: &Ctx,
        prefix: Option<String>,
        marker: Option<String>,
        max_results: Option<usize>,
        include_metadata: bool,
    ) -> AzureResult<Output> {
        // Markers are `/<account>/<first name of the next page>`, like Azure's.
        let after = marker
            .as_deref()
            .map(|m| m.rsplit('/').next().unwrap_or(m).to_string());
        let page = max_results.unwrap_or(limits::LIST_RESULTS_MAX);
        let mut matching = self
            .engine
            .list_queues(&ctx.namespace, prefix.as_deref().unwrap_or(""))
            .await?
            .into_iter()
            // Queues made by other protocols whose names Azure cannot address are not shown.
            .filter(|info| codec::validate_queue_name(&info.key.name).is_ok())
            // A token sees only the queues it holds some permission on (docs/security.md).
            .filter(|info| ctx.sees(&info.key.name))
            .filter(|info| after.as_deref().is_none_or(|a| info.key.name.as_str() >= a));
        let queues: Vec<QueueItem> = matching
            .by_ref()
            .take(page)
            .map(|info| QueueItem {
                name: info.key.name.clone(),
                metadata: include_metadata.then(|| metadata_of(&info.config)),
            })
            .collect();
        let next_marker = matching
            .next()
            .map(|info| format!("/{}/{}", ctx.account, info.key.name));
        Ok(Output::QueueList(QueueList {
            service_endpoint: format!(
                "{}://{}/{}/",
                if ctx.https { "https" } else { "http" },
                ctx.host,
                ctx.named_account
            ),
            prefix,
            marker,
            max_results,
            queues,
            next_marker,
        }))
    }

    pub(super) async fn create_queue(
        &self,
        ctx: &Ctx,
        queue: &str,
        metadata: Metadata,
    ) -> AzureResult<Output> {
        let key = ctx.key(queue);
        let change = self.policy_change(&key, &metadata, None)?;
        // Checked even when the queue exists already: whether it does is known only inside the create.
        let poison = self.poison_queue_to_create(ctx, &change, None).await?;
        let mut config = self.queue_config();
        apply_metadata(&mut config, metadata.clone(), change);
        match self.engine.create_queue(key, config).await? {
            CreateOutcome::Created(_) => {
                self.create_poison_queue(poison).await?;
                Ok(Output::Empty { status: 201 })
            }
            CreateOutcome::Existing(info) if metadata_of(&info.config) == metadata => {
                Ok(Output::Empty { status: 204 })
            }
            CreateOutcome::Existing(_) => Err(AzureError::new(ErrorCode::QueueAlreadyExists)),
        }
    }

    pub(super) async fn delete_queue(&self, ctx: &Ctx, queue: &str) -> AzureResult<Output> {
        // Audited by the dispatcher (`service/mod.rs`), with the outcome.
        self.engine.delete_queue(&ctx.key(queue)).await?;
        Ok(Output::Empty { status: 204 })
    }

    /// Metadata and `x-ms-approximate-messages-count`: visible + hidden + delayed, so the hidden backlog shows.
    pub(super) async fn get_metadata(&self, ctx: &Ctx, queue: &str) -> AzureResult<Output> {
        let info = self.engine.queue_info(&ctx.key(queue)).await?;
        let stats = info.stats;
        Ok(Output::Metadata {
            metadata: metadata_of(&info.config),
            approximate_count: stats.visible + stats.hidden + stats.delayed,
        })
    }

    pub(super) async fn set_metadata(
        &self,
        ctx: &Ctx,
        queue: &str,
        metadata: Metadata,
    ) -> AzureResult<Output> {
        let key = ctx.key(queue);
        let previous = self.engine.queue_info(&key).await?.config;
        let change = self.policy_change(&key, &metadata, Some(&metadata_of(&previous)))?;
        let poison = self
            .poison_queue_to_create(ctx, &change, previous.redrive_policy.as_ref())
            .await?;
        self.engine
            .update_queue_config(&key, |config| {
                apply_metadata(config, metadata.clone(), change.clone());
                Ok(())
            })
            .await?;
        self.create_poison_queue(poison).await?;
        Ok(Output::Empty { status: 204 })
    }

    /// A queue's stored access policies, kept durably in its settings under [`ACL_SETTING`].
    pub(super) async fn acl(&self, key: &QueueKey) -> AzureResult<Vec<SignedIdentifier>> {
        let info = self.engine.queue_info(key).await?;
        match info.config.protocol_settings.get(ACL_SETTING) {
            Some(document) => codec::signed_identifiers(document.as_bytes()),
            None => Ok(Vec::new()),
        }
    }

    pub(super) async fn set_acl(
        &self,
        ctx: &Ctx,
        queue: &str,
        identifiers: &[SignedIdentifier],
    ) -> AzureResult<Output> {
        let document = codec::write_signed_identifiers(identifiers);
        self.engine
            .update_queue_config(&ctx.key(queue), |config| {
                config
                    .protocol_settings
                    .insert(ACL_SETTING.to_string(), document.clone());
                Ok(())
            })
            .await?;
        Ok(Output::Empty { status: 204 })
    }

    /// Settings of a queue created through Azure.
    fn queue_config(&self) -> QueueConfig {
        QueueConfig {
            visibility_timeout_ms: limits::QUEUE_VISIBILITY_MS,
            retention_ms: Some(limits::QUEUE_RETENTION_MS),
            inflight_max: self.config.inflight_max_default,
            protocol_settings: [(veil_core::CREATED_BY_SETTING.into(), "azure".into())].into(),
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
            // Created through Azure, or reserved metadata removed: the server default, if any. Unrelated
            // metadata: a policy set another way (an SQS RedrivePolicy) stays.
            return Ok(if previous.is_none_or(has_reserved) {
                PolicyChange::Default(self.default_policy(key))
            } else {
                PolicyChange::Keep
            });
        }
        let max_receive_count = match &count {
            Some(text) => match parse_max_dequeue_count(text)? {
                Some(n) => n,
                None => return Ok(PolicyChange::Set(None)),
            },
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
            dead_letter_queue: QueueKey::new(key.namespace.clone(), poison_name),
            max_receive_count,
        })))
    }

    /// Authorizes the poison queue of a policy the caller sets and answers the poison queue to create with
    /// the queue, if any. The engine will write into it without asking anyone again (authorization at
    /// policy-set time, as AWS does for a redrive policy), so the caller must be able to put messages there,
    /// as a Put Message of its own would be checked; and to create it — Create Queue's right there — unless
    /// it exists already. A policy restating the one in force was authorized when it was set. The server
    /// default is the operator's: its `<name>-poison` queue is created unchecked.
    async fn poison_queue_to_create(
        &self,
        ctx: &Ctx,
        change: &PolicyChange,
        in_force: Option<&RedrivePolicy>,
    ) -> AzureResult<Option<QueueKey>> {
        let policy = match change {
            PolicyChange::Keep | PolicyChange::Set(None) | PolicyChange::Default(None) => {
                return Ok(None)
            }
            PolicyChange::Default(Some(policy)) => {
                return Ok(Some(policy.dead_letter_queue.clone()))
            }
            PolicyChange::Set(Some(policy)) if in_force == Some(policy) => return Ok(None),
            PolicyChange::Set(Some(policy)) => policy,
        };
        let poison = &policy.dead_letter_queue;
        // Whatever the SAS or role lacks there, Azure's answer for a missing permission.
        let refused = |_: AzureError| AzureError::new(ErrorCode::AuthorizationPermissionMismatch);
        ctx.may(OperationKind::PutMessage, &poison.name)
            .map_err(refused)?;
        if ctx.may(OperationKind::CreateQueue, &poison.name).is_ok() {
            return Ok(Some(poison.clone()));
        }
        match self.engine.queue_info(poison).await {
            Ok(_) => Ok(None),
            Err(EngineError::QueueNotFound(_)) => {
                Err(AzureError::new(ErrorCode::AuthorizationPermissionMismatch))
            }
            Err(other) => Err(other.into()),
        }
    }

    /// Creates the poison queue a policy names, if it does not exist yet.
    async fn create_poison_queue(&self, poison: Option<QueueKey>) -> AzureResult<()> {
        if let Some(poison) = poison {
            self.engine
                .create_queue(poison, self.queue_config())
                .await?;
        }
        Ok(())
    }
}

/// `veilmaxdequeuecount`: `Ok(None)` for 0 (policy off), else a count within the allowed range.
fn parse_max_dequeue_count(text: &str) -> AzureResult<Option<u32>> {
    let n: u32 = text
        .trim()
        .parse()
        .map_err(|_| invalid_reserved(META_MAX_DEQUEUE_COUNT, text, "not a whole number"))?;
    if n == 0 {
        return Ok(None);
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
    Ok(Some(n))
}
