//! One permission model under every protocol (docs/security.md): whatever proves who a caller is — an SQS
//! access key, an Azure account key, SAS or bearer token, a KubeMQ token, the admin token — each front-end turns
//! into an [`Access`]: the identity and the [`Grant`]s it holds. A grant names queues by pattern and gives some
//! of the five engine-level [`Permission`]s. Front-ends map each of their operations onto one permission and
//! ask [`Access::check`] before calling the engine; the protocol's own refusal (SQS `AccessDenied`, Azure 403
//! `AuthorizationPermissionMismatch`, KubeMQ's unauthorized error) is theirs to render.
//!
//! Pure data and matching: no I/O, no clock, no protocol.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::model::QueueKey;

/// What an operation needs. Every protocol operation maps onto exactly one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Permission {
    /// Add messages (SQS SendMessage, Azure Put Message, KubeMQ send).
    Send,
    /// Take messages for processing, hiding them (SQS ReceiveMessage, Azure Get Messages, KubeMQ receive).
    Receive,
    /// Settle a delivery: delete / ack, change its visibility, update it, reject or re-queue it.
    Delete,
    /// Look without changing anything: peek, browse, queue attributes and metadata, listing.
    Peek,
    /// Manage queues: create, delete, purge, settings, tags, ACLs and policies, move tasks.
    Admin,
}

impl Permission {
    pub const ALL: [Permission; 5] = [
        Permission::Send,
        Permission::Receive,
        Permission::Delete,
        Permission::Peek,
        Permission::Admin,
    ];

    const fn bit(self) -> u8 {
        match self {
            Permission::Send => 1,
            Permission::Receive => 2,
            Permission::Delete => 4,
            Permission::Peek => 8,
            Permission::Admin => 16,
        }
    }

    pub const fn name(self) -> &'static str {
        match self {
            Permission::Send => "send",
            Permission::Receive => "receive",
            Permission::Delete => "delete",
            Permission::Peek => "peek",
            Permission::Admin => "admin",
        }
    }

    pub fn parse(name: &str) -> Option<Permission> {
        Permission::ALL.into_iter().find(|p| p.name() == name)
    }
}

impl fmt::Display for Permission {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A set of permissions.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Permissions(u8);

impl Permissions {
    pub const NONE: Permissions = Permissions(0);
    pub const ALL: Permissions = Permissions(31);

    pub const fn of(permissions: &[Permission]) -> Permissions {
        let mut bits = 0;
        let mut i = 0;
        while i < permissions.len() {
            bits |= permissions[i].bit();
            i += 1;
        }
        Permissions(bits)
    }

    pub const fn contains(self, permission: Permission) -> bool {
        self.0 & permission.bit() != 0
    }

    pub const fn union(self, other: Permissions) -> Permissions {
        Permissions(self.0 | other.0)
    }

    pub const fn intersection(self, other: Permissions) -> Permissions {
        Permissions(self.0 & other.0)
    }

    pub const fn is_empty(self) -> bool {
        self.0 == 0
    }

    pub fn iter(self) -> impl Iterator<Item = Permission> {
        Permission::ALL
            .into_iter()
            .filter(move |p| self.contains(*p))
    }

    /// Parses names as a config file writes them (`["send", "receive"]`; `"*"` is all of them).
    pub fn parse<S: AsRef<str>>(names: &[S]) -> Result<Permissions, AccessConfigError> {
        let mut set = Permissions::NONE;
        for name in names {
            let name = name.as_ref();
            if name == "*" {
                set = Permissions::ALL;
                continue;
            }
            let permission = Permission::parse(name)
                .ok_or_else(|| AccessConfigError::UnknownPermission(name.to_string()))?;
            set = set.union(Permissions::of(&[permission]));
        }
        Ok(set)
    }
}

impl fmt::Display for Permissions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<&str> = self.iter().map(Permission::name).collect();
        f.write_str(&names.join(","))
    }
}

/// A glob over names: `*` matches any run of characters (also none), every other character itself. Queue
/// names in every protocol exclude `*`, so a pattern without one names exactly one queue.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Pattern(String);

impl Pattern {
    pub fn new(pattern: impl Into<String>) -> Pattern {
        Pattern(pattern.into())
    }

    pub fn any() -> Pattern {
        Pattern("*".to_string())
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    pub fn matches(&self, name: &str) -> bool {
        glob_matches(self.0.as_bytes(), name.as_bytes())
    }
}

/// Iterative glob matching with one backtrack point (the last `*`): linear in practice, never exponential.
fn glob_matches(pattern: &[u8], name: &[u8]) -> bool {
    let (mut p, mut n) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while n < name.len() {
        if p < pattern.len() && pattern[p] == b'*' {
            star = Some((p, n));
            p += 1;
        } else if p < pattern.len() && pattern[p] == name[n] {
            p += 1;
            n += 1;
        } else if let Some((star_p, star_n)) = star {
            p = star_p + 1;
            n = star_n + 1;
            star = Some((star_p, star_n + 1));
        } else {
            return false;
        }
    }
    pattern[p..].iter().all(|b| *b == b'*')
}

/// Some permissions on the queues whose namespace and name match.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Grant {
    pub namespace: Pattern,
    pub queues: Pattern,
    pub permissions: Permissions,
}

impl Grant {
    /// Every permission on every queue of one namespace: what an account's owner holds.
    pub fn owner_of(namespace: impl Into<String>) -> Grant {
        Grant {
            namespace: Pattern::new(namespace),
            queues: Pattern::any(),
            permissions: Permissions::ALL,
        }
    }

    pub fn covers(&self, key: &QueueKey) -> bool {
        self.namespace.matches(&key.namespace) && self.queues.matches(&key.name)
    }
}

/// Who a caller is and what it may do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Access {
    /// How the caller is named in refusals, the audit log and the delivery history: `sqs:<access key>`,
    /// `azure:<account>`, `azure-sas:<account>`, `azure-oid:<object id>`, `kubemq:<client id>`, `admin`.
    pub identity: String,
    pub grants: Vec<Grant>,
}

impl Access {
    /// Everything everywhere: authentication turned off, or the admin token.
    pub fn unrestricted(identity: impl Into<String>) -> Access {
        Access {
            identity: identity.into(),
            grants: vec![Grant {
                namespace: Pattern::any(),
                queues: Pattern::any(),
                permissions: Permissions::ALL,
            }],
        }
    }

    /// The permissions held on one queue: the union of every grant that covers it.
    pub fn permissions_on(&self, key: &QueueKey) -> Permissions {
        self.grants
            .iter()
            .filter(|grant| grant.covers(key))
            .fold(Permissions::NONE, |set, grant| set.union(grant.permissions))
    }

    pub fn allows(&self, key: &QueueKey, permission: Permission) -> bool {
        self.permissions_on(key).contains(permission)
    }

    /// `Ok` when allowed, else the refusal with everything a protocol's error message names.
    pub fn check(&self, key: &QueueKey, permission: Permission) -> Result<(), AccessDenied> {
        if self.allows(key, permission) {
            Ok(())
        } else {
            Err(AccessDenied {
                identity: self.identity.clone(),
                permission,
                queue: key.clone(),
            })
        }
    }

    /// Whether the caller may see that a queue exists at all (listing): any permission on it.
    pub fn sees(&self, key: &QueueKey) -> bool {
        !self.permissions_on(key).is_empty()
    }
}

/// A grant as a config file writes it, under any identity (`grants = [{ queues = "orders-*", permissions =
/// ["send"] }]`). `namespace` defaults to the identity's own (an SQS account's, an Azure account's).
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GrantSpec {
    pub namespace: Option<String>,
    #[serde(default = "any_queue")]
    pub queues: String,
    pub permissions: Vec<String>,
}

fn any_queue() -> String {
    "*".to_string()
}

impl GrantSpec {
    pub fn to_grant(&self, own_namespace: &str) -> Result<Grant, AccessConfigError> {
        Ok(Grant {
            namespace: Pattern::new(self.namespace.as_deref().unwrap_or(own_namespace)),
            queues: Pattern::new(self.queues.clone()),
            permissions: Permissions::parse(&self.permissions)?,
        })
    }
}

/// A refused operation.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{identity} lacks the {permission} permission on queue {namespace}/{name}", namespace = queue.namespace, name = queue.name)]
pub struct AccessDenied {
    pub identity: String,
    pub permission: Permission,
    pub queue: QueueKey,
}

/// A grant in a config file that cannot be understood.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AccessConfigError {
    #[error("unknown permission {0:?} (expected send, receive, delete, peek, admin or *)")]
    UnknownPermission(String),
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(namespace: &str, name: &str) -> QueueKey {
        QueueKey::new(namespace, name)
    }

    #[test]
    fn glob_star_matches_any_run_and_nothing_else_is_special() {
        let p = Pattern::new("orders-*");
        assert!(p.matches("orders-"));
        assert!(p.matches("orders-eu"));
        assert!(!p.matches("order-eu"));
        assert!(Pattern::new("*-dlq").matches("a-b-dlq"));
        assert!(Pattern::new("a*b*c").matches("aXbYbZc"));
        assert!(!Pattern::new("a*b*c").matches("aXbYbZ"));
        assert!(Pattern::new("exact").matches("exact"));
        assert!(!Pattern::new("exact").matches("exactly"));
        assert!(Pattern::any().matches(""));
        assert!(!Pattern::new("a.c").matches("abc"));
    }

    #[test]
    fn permissions_are_the_union_of_covering_grants() {
        let access = Access {
            identity: "t".into(),
            grants: vec![
                Grant {
                    namespace: Pattern::any(),
                    queues: Pattern::new("orders-*"),
                    permissions: Permissions::of(&[Permission::Send]),
                },
                Grant {
                    namespace: Pattern::new("default"),
                    queues: Pattern::new("orders-eu"),
                    permissions: Permissions::of(&[Permission::Receive, Permission::Delete]),
                },
            ],
        };
        assert_eq!(
            access.permissions_on(&key("default", "orders-eu")),
            Permissions::of(&[Permission::Send, Permission::Receive, Permission::Delete])
        );
        assert!(access.allows(&key("other", "orders-eu"), Permission::Send));
        assert!(!access.allows(&key("other", "orders-eu"), Permission::Receive));
        assert!(!access.sees(&key("default", "invoices")));
        let denied = access
            .check(&key("default", "invoices"), Permission::Peek)
            .unwrap_err();
        assert_eq!(
            denied.to_string(),
            "t lacks the peek permission on queue default/invoices"
        );
    }

    #[test]
    fn owner_holds_everything_in_its_namespace_only() {
        let access = Access {
            identity: "o".into(),
            grants: vec![Grant::owner_of("ns")],
        };
        for permission in Permission::ALL {
            assert!(access.allows(&key("ns", "q"), permission));
            assert!(!access.allows(&key("ns2", "q"), permission));
        }
    }

    #[test]
    fn permission_names_parse_and_unknown_ones_are_refused() {
        assert_eq!(Permissions::parse(&["*"]), Ok(Permissions::ALL));
        assert_eq!(
            Permissions::parse(&["send", "peek"]),
            Ok(Permissions::of(&[Permission::Send, Permission::Peek]))
        );
        assert_eq!(
            Permissions::parse(&["write"]),
            Err(AccessConfigError::UnknownPermission("write".into()))
        );
        assert_eq!(
            Permissions::of(&[Permission::Peek, Permission::Send]).to_string(),
            "send,peek"
        );
    }
}
