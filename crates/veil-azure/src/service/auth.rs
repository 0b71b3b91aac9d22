//! Who is asking, and may they (docs/security.md, "Azure"): the Azure front-end's **identify** and
//! **authorize** steps of the request pipeline (ARCHITECTURE.md, "The request pipeline"). Identify verifies
//! the request's Shared Key, SAS or bearer token before any parameter is read; authorize checks the named
//! operation against what that credential allows — a SAS by its own rules, a token or a user delegation SAS by
//! its principal's roles in the one permission model (`veil_core::access`).

use std::net::IpAddr;

use axum::http::request::Parts;
use veil_core::{Access, Millis, Permission, QueueKey};
use veil_http::header_str;

use super::Service;
use crate::api::{OperationKind, SignedIdentifier};
use crate::auth::{self, Credentials, Sas, SasGrant, SasScope, SignedRequest};
use crate::codec::query::Query;
use crate::codec::Location;
use crate::entra::{self, Principal};
use crate::error::{AzureError, AzureResult, ErrorCode};
use crate::limits;

/// What [`Service::authorize`] found a request may do, kept for its handlers.
pub(super) struct Authority {
    pub(super) access: Option<Access>,
    pub(super) principal: Option<Principal>,
    pub(super) sas: Option<SasGrant>,
}

/// Who a request was authenticated as.
pub(super) enum Authorized {
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
pub(super) fn check_access(
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

impl Service {
    /// Checks what an authenticated request may do once its operation is named: a SAS by its own rules, a
    /// token or a user delegation SAS by its principal's roles (docs/security.md). Answers the access that
    /// limits a listing, the token's principal and the SAS, which handlers consult for a second queue.
    pub(super) fn authorize(
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
    pub(super) async fn authenticate(
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
            Credentials::Sas(sas) => self.verify_sas(&sas, location, (now, peer, https)).await,
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

    async fn verify_sas(
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
            (Some(id), Some(queue)) => Some(self.stored_policy(account, queue, id).await?),
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

    async fn stored_policy(
        &self,
        account: &str,
        queue: &str,
        id: &str,
    ) -> AzureResult<SignedIdentifier> {
        let key = QueueKey::new(self.namespace(account), queue);
        let identifiers = self.acl(&key).await.map_err(|_| {
            AzureError::authentication("The stored access policy's queue does not exist.")
        })?;
        identifiers
            .into_iter()
            .find(|identifier| identifier.id == id)
            .ok_or_else(|| {
                AzureError::authentication(format!("The stored access policy {id} does not exist."))
            })
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
}
