//! Who is asking, and may they (docs/security.md, "SQS"). Authentication verifies the request's SigV4
//! signature ([`crate::sigv4`]) against the configured credentials and turns the access key into an account
//! and an [`Access`]; authorization maps each action onto its one [`Permission`] and checks it before the
//! handler runs. A caller of another account than the queue's is let in by the queue's `Policy`
//! ([`crate::policy`]) when its grants do not cover the queue.
//!
//! With authentication off every request is admitted with unrestricted access, as before this existed.

use std::collections::HashMap;

use axum::http::request::Parts;
use subtle::ConstantTimeEq;
use veil_core::access::AccessConfigError;
use veil_core::{Access, Grant, GrantSpec, Permission, QueueKey};

use super::{move_tasks, RequestContext, Service};
use crate::api::{Action, QueueTarget};
use crate::attributes::POLICY_SETTING;
use crate::error::{ErrorCode, SqsError, SqsResult};
use crate::namespace::{self, AccountRegion, NamespaceMap};
use crate::policy::{self, Decision, PolicyRequest};
use crate::sigv4::{self, SigV4Error, SignedRequest, UnsignedPart};

/// How the SQS endpoint authenticates.
#[derive(Clone, Debug, Default)]
pub struct SqsAuth {
    /// Verify SigV4 and check permissions. Off: anyone may do anything (the library's default; `veil serve`
    /// turns it on unless told otherwise).
    pub enabled: bool,
    pub credentials: Vec<SqsCredential>,
}

/// One access key and what it may do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SqsCredential {
    pub access_key: String,
    pub secret_key: String,
    /// 12 digits.
    pub account_id: String,
    /// Temporary credentials: requests must carry this `X-Amz-Security-Token`.
    pub session_token: Option<String>,
    /// `None`: the account's owner, every permission on every namespace of the account. `Some`: exactly
    /// these, each grant's namespace defaulting to the account's namespace in the request's region.
    pub grants: Option<Vec<GrantSpec>>,
}

/// A credential of the config file that cannot be used.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CredentialError {
    #[error("sqs credential {access_key:?}: account_id must be 12 digits, got {account_id:?}")]
    Account {
        access_key: String,
        account_id: String,
    },
    #[error("sqs credential {access_key:?}: access_key and secret_key must not be empty")]
    Empty { access_key: String },
    #[error("sqs credential {access_key:?} is listed twice")]
    Duplicate { access_key: String },
    #[error("sqs credential {access_key:?}: {source}")]
    Grant {
        access_key: String,
        source: AccessConfigError,
    },
}

impl SqsCredential {
    pub fn validate(&self) -> Result<(), CredentialError> {
        if self.access_key.is_empty() || self.secret_key.is_empty() {
            return Err(CredentialError::Empty {
                access_key: self.access_key.clone(),
            });
        }
        if self.account_id.len() != crate::limits::ACCOUNT_ID_DIGITS
            || !self.account_id.bytes().all(|b| b.is_ascii_digit())
        {
            return Err(CredentialError::Account {
                access_key: self.access_key.clone(),
                account_id: self.account_id.clone(),
            });
        }
        for spec in self.grants.iter().flatten() {
            spec.to_grant("").map_err(|source| CredentialError::Grant {
                access_key: self.access_key.clone(),
                source,
            })?;
        }
        Ok(())
    }

    /// What the credential may do when it signs for `region`.
    fn access(&self, names: &NamespaceMap, region: &str) -> Access {
        let own = names.namespace(&AccountRegion {
            account: self.account_id.clone(),
            region: region.to_string(),
        });
        let grants = match &self.grants {
            // Owner: the account in every region, and the shared default namespace when it is the default
            // account (whose default-region queues live there).
            None => {
                let mut grants = vec![Grant::owner_of(namespace::account_namespaces(
                    &self.account_id,
                ))];
                if self.account_id == names.default_account {
                    grants.push(Grant::owner_of(veil_core::DEFAULT_NAMESPACE));
                }
                grants
            }
            // Validated when the configuration was read; a grant that no longer parses gives nothing.
            Some(specs) => specs
                .iter()
                .filter_map(|spec| spec.to_grant(&own).ok())
                .collect(),
        };
        Access {
            identity: format!("sqs:{}", self.access_key),
            grants,
        }
    }

    /// How AWS names the caller in an AccessDenied: the account's root for an owner, else a user.
    fn principal_arn(&self) -> String {
        match self.grants {
            None => format!("arn:aws:iam::{}:root", self.account_id),
            Some(_) => format!("arn:aws:iam::{}:user/{}", self.account_id, self.access_key),
        }
    }
}

/// The credentials by access key.
pub(super) type CredentialMap = HashMap<String, SqsCredential>;

pub(super) fn credential_map(auth: &SqsAuth) -> CredentialMap {
    auth.credentials
        .iter()
        .map(|credential| (credential.access_key.clone(), credential.clone()))
        .collect()
}

/// Who sent a request.
pub(super) struct Caller {
    /// The SigV4 access key, when the request carries one.
    pub access_key: Option<String>,
    /// The region of the credential scope, else the configured default region.
    pub region: String,
    /// The credential's account; `None` with authentication off (the request path or the default decides).
    pub account: Option<String>,
    pub access: Access,
    /// How AccessDenied names the caller.
    pub principal_arn: String,
}

fn sigv4_error(error: SigV4Error) -> SqsError {
    match error {
        SigV4Error::Missing => SqsError::new(
            ErrorCode::MissingAuthenticationToken,
            "Request is missing Authentication Token",
        ),
        SigV4Error::Incomplete(message) => SqsError::new(ErrorCode::IncompleteSignature, message),
        SigV4Error::Mismatch(message) => SqsError::new(ErrorCode::SignatureDoesNotMatch, message),
        SigV4Error::Expired => SqsError::new(ErrorCode::RequestExpired, "Request has expired."),
        // S3's answer to a presigned request with headers it does not sign (AccessDenied, "There were headers
        // present in the request which were not signed"); SQS has none of its own. The body's is worded alike.
        SigV4Error::Unsigned(UnsignedPart::Target) => SqsError::new(
            ErrorCode::AccessDenied,
            "There were headers present in the request which were not signed: x-amz-target",
        ),
        SigV4Error::Unsigned(UnsignedPart::Body) => SqsError::new(
            ErrorCode::AccessDenied,
            "There was a body present in the request which was not signed: a presigned request's \
             parameters are those of its URL",
        ),
    }
}

fn invalid_token() -> SqsError {
    SqsError::new(
        ErrorCode::InvalidClientTokenId,
        "The security token included in the request is invalid.",
    )
}

impl Service {
    /// Verifies the request's signature and names the caller; with authentication off, reads only the
    /// credential scope (the access key and the region, which selects the namespace).
    pub(super) fn authenticate(&self, parts: &Parts, body: &[u8]) -> SqsResult<Caller> {
        if !self.config.auth.enabled {
            let credential = veil_http::header_str(&parts.headers, "authorization")
                .and_then(namespace::parse_authorization);
            let (access_key, region) = match credential {
                Some(credential) => (Some(credential.access_key), credential.region),
                None => (None, self.config.default_region.clone()),
            };
            let identity = format!("sqs:{}", access_key.as_deref().unwrap_or("anonymous"));
            return Ok(Caller {
                access_key,
                region,
                account: None,
                access: Access::unrestricted(identity),
                principal_arn: String::new(),
            });
        }
        let request = SignedRequest {
            method: parts.method.as_str(),
            path: parts.uri.path(),
            query: parts.uri.query(),
            headers: &parts.headers,
            body,
        };
        let claim = sigv4::parse(&request).map_err(sigv4_error)?;
        let credential = self
            .credentials
            .get(&claim.access_key)
            .ok_or_else(invalid_token)?;
        let token_ok = match (&credential.session_token, &claim.security_token) {
            (None, None) => true,
            (Some(expected), Some(given)) => {
                bool::from(expected.as_bytes().ct_eq(given.as_bytes()))
            }
            _ => false,
        };
        if !token_ok {
            return Err(invalid_token());
        }
        sigv4::verify(
            &request,
            &claim,
            &credential.secret_key,
            &self.signing_keys,
            self.engine.now(),
        )
        .map_err(sigv4_error)?;
        Ok(Caller {
            access: credential.access(&self.names, &claim.region),
            principal_arn: credential.principal_arn(),
            access_key: Some(claim.access_key),
            region: claim.region,
            account: Some(credential.account_id.clone()),
        })
    }

    /// Checks the one permission `action` needs on its queue (docs/security.md's table) before the handler
    /// runs. A queue that cannot be told (a malformed URL or ARN) is left to the handler, which reports it.
    /// ListQueues needs no check here: it shows only the queues the caller sees.
    pub(super) async fn authorize(
        &self,
        context: &RequestContext,
        action: &Action,
    ) -> SqsResult<()> {
        let Some((name, permission)) = required(action) else {
            return Ok(());
        };
        let key = match action {
            Action::CreateQueue(input) => Some(QueueKey::new(
                self.namespace(context, &context.account),
                input.queue_name.clone(),
            )),
            Action::StartMessageMoveTask(input) => self.names.key_from_arn(&input.source_arn),
            Action::ListMessageMoveTasks(input) => self.names.key_from_arn(&input.source_arn),
            Action::CancelMessageMoveTask(input) => {
                move_tasks::source_of_handle(&input.task_handle)
                    .and_then(|arn| self.names.key_from_arn(&arn))
            }
            Action::GetQueueUrl(input) => {
                let account = input
                    .queue_owner_account_id
                    .as_deref()
                    .unwrap_or(&context.account);
                Some(QueueKey::new(
                    self.namespace(context, account),
                    input.queue_name.clone(),
                ))
            }
            other => target_of(other).and_then(|target| self.queue_key(context, target).ok()),
        };
        let Some(key) = key else {
            return Ok(());
        };
        self.authorize_on(context, &key, name, permission).await
    }

    /// Whether the caller may send to `key`, decided exactly as for a SendMessage to it: the one check behind
    /// SendMessage, a redrive policy's dead-letter target and a move task's destinations (docs/security.md,
    /// "SQS").
    pub(super) async fn authorize_send(
        &self,
        context: &RequestContext,
        key: &QueueKey,
    ) -> SqsResult<()> {
        self.authorize_on(context, key, "SendMessage", Permission::Send)
            .await
    }

    /// Checks `permission` (IAM action `name`) on `key`: the caller's grants, else — another account's queue and
    /// an action SQS lets a policy grant — the queue's `Policy`. Whether the queue exists plays no part beyond
    /// that (a missing queue has no policy), so a refusal says nothing of its existence.
    async fn authorize_on(
        &self,
        context: &RequestContext,
        key: &QueueKey,
        name: &'static str,
        permission: Permission,
    ) -> SqsResult<()> {
        if context.access.allows(key, permission) {
            return Ok(());
        }
        // Boxed: the rare path reads the queue's policy from the engine, and its state must not sit in every
        // request's future (`the_future_of_a_waiting_request_stays_small`).
        Box::pin(self.authorize_by_policy(context, key, name)).await
    }

    /// [`Self::authorize_on`] once the caller's grants said no: another account's queue may let the caller in
    /// by its `Policy`; otherwise AWS's refusal, worded by whose policy could have allowed it.
    async fn authorize_by_policy(
        &self,
        context: &RequestContext,
        key: &QueueKey,
        name: &'static str,
    ) -> SqsResult<()> {
        let owner = self
            .names
            .account_region(&key.namespace, &context.region)
            .account;
        let arn = self.arn(context, key);
        let caller_account = context.caller_account.as_deref().unwrap_or_default();
        // Another account's queue: its policy may let the caller in, for the actions SQS lets policies grant.
        let decision = if owner != caller_account && cross_account(name) {
            self.engine
                .queue_info(key)
                .await
                .ok()
                .and_then(|info| info.config.protocol_settings.get(POLICY_SETTING).cloned())
                .map_or(Decision::NotApplicable, |document| {
                    policy::evaluate(
                        &document,
                        &PolicyRequest {
                            account: caller_account,
                            principal_arn: &context.principal_arn,
                            action: name,
                            resource: &arn,
                            source_arn: None,
                            source_account: None,
                        },
                    )
                })
        } else {
            Decision::NotApplicable
        };
        let reason = match decision {
            Decision::Allow => return Ok(()),
            Decision::Deny => "with an explicit deny in a resource-based policy".to_string(),
            Decision::NotApplicable if owner == caller_account => {
                format!("because no identity-based policy allows the sqs:{name} action")
            }
            Decision::NotApplicable => {
                format!("because no resource-based policy allows the sqs:{name} action")
            }
        };
        Err(SqsError::new(
            ErrorCode::AccessDenied,
            format!(
                "User: {} is not authorized to perform: sqs:{name} on resource: {arn} {reason}",
                context.principal_arn
            ),
        ))
    }
}

/// The IAM action name (without `sqs:`) and the permission each action needs; batches are their single
/// action, as in IAM. `None`: ListQueues, which filters instead.
fn required(action: &Action) -> Option<(&'static str, Permission)> {
    use Permission::*;
    Some(match action {
        Action::CreateQueue(_) => ("CreateQueue", Admin),
        Action::DeleteQueue(_) => ("DeleteQueue", Admin),
        Action::PurgeQueue(_) => ("PurgeQueue", Admin),
        Action::SetQueueAttributes(_) => ("SetQueueAttributes", Admin),
        Action::TagQueue(_) => ("TagQueue", Admin),
        Action::UntagQueue(_) => ("UntagQueue", Admin),
        Action::AddPermission(_) => ("AddPermission", Admin),
        Action::RemovePermission(_) => ("RemovePermission", Admin),
        Action::StartMessageMoveTask(_) => ("StartMessageMoveTask", Admin),
        Action::ListMessageMoveTasks(_) => ("ListMessageMoveTasks", Admin),
        Action::CancelMessageMoveTask(_) => ("CancelMessageMoveTask", Admin),
        Action::GetQueueUrl(_) => ("GetQueueUrl", Peek),
        Action::GetQueueAttributes(_) => ("GetQueueAttributes", Peek),
        Action::ListQueueTags(_) => ("ListQueueTags", Peek),
        Action::ListDeadLetterSourceQueues(_) => ("ListDeadLetterSourceQueues", Peek),
        Action::SendMessage(_) | Action::SendMessageBatch(_) => ("SendMessage", Send),
        Action::ReceiveMessage(_) => ("ReceiveMessage", Receive),
        Action::DeleteMessage(_) | Action::DeleteMessageBatch(_) => ("DeleteMessage", Delete),
        Action::ChangeMessageVisibility(_) | Action::ChangeMessageVisibilityBatch(_) => {
            ("ChangeMessageVisibility", Delete)
        }
        Action::ListQueues(_) => return None,
    })
}

/// The actions a queue policy may grant another account (SQS's AddPermission reference); the others are the
/// owner's alone ("Cross-account permissions don't apply to this action").
fn cross_account(action: &str) -> bool {
    matches!(
        action,
        "ChangeMessageVisibility"
            | "DeleteMessage"
            | "GetQueueAttributes"
            | "GetQueueUrl"
            | "ListDeadLetterSourceQueues"
            | "PurgeQueue"
            | "ReceiveMessage"
            | "SendMessage"
    )
}

/// The queue URL an action names, for the actions that name one.
fn target_of(action: &Action) -> Option<&QueueTarget> {
    Some(match action {
        Action::DeleteQueue(target)
        | Action::PurgeQueue(target)
        | Action::ListQueueTags(target) => target,
        Action::GetQueueAttributes(input) => &input.target,
        Action::SetQueueAttributes(input) => &input.target,
        Action::SendMessage(input) => &input.target,
        Action::SendMessageBatch(input) => &input.target,
        Action::ReceiveMessage(input) => &input.target,
        Action::DeleteMessage(input) => &input.target,
        Action::DeleteMessageBatch(input) => &input.target,
        Action::ChangeMessageVisibility(input) => &input.target,
        Action::ChangeMessageVisibilityBatch(input) => &input.target,
        Action::TagQueue(input) => &input.target,
        Action::UntagQueue(input) => &input.target,
        Action::ListDeadLetterSourceQueues(input) => &input.target,
        Action::AddPermission(input) => &input.target,
        Action::RemovePermission(input) => &input.target,
        _ => return None,
    })
}
