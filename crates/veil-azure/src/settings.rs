//! The Azure front-end's settings (README.md "Configuration", docs/security.md "Azure Queue Storage"): the
//! `[azure]` table of `veil serve`'s config file with its accounts, Entra ID table and role assignments, and the
//! checks that refuse what the endpoint could not honour. `veil serve` only merges the sources (flags >
//! environment > file) into this type; the rules live here.

use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::path::PathBuf;

use serde::Deserialize;

use crate::entra::{EntraConfig, EntraMode, Role, RoleAssignment};
use crate::limits::MAX_DEQUEUE_COUNT_MAX;
use crate::AzureAccount;

/// Where the Azure endpoint listens unless told otherwise (Azurite's queue port).
pub const LISTEN_DEFAULT: SocketAddr =
    SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::LOCALHOST, 10001));

/// Whether the Azure endpoint verifies Shared Key and SAS signatures.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, Default)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[serde(rename_all = "lowercase")]
pub enum AuthMode {
    /// Verify every request (Azure's behaviour).
    #[default]
    On,
    /// Accept any request, signed or not: for local development only.
    Off,
}

/// How the Azure endpoint treats Entra ID bearer tokens (docs/security.md, "Azure Queue Storage"), as the
/// settings name it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, Default)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[serde(rename_all = "lowercase")]
pub enum EntraSetting {
    /// Refuse bearer tokens.
    #[default]
    Off,
    /// Accept any well-formed, unexpired token as a Contributor (local development only).
    Dev,
    /// Verify tokens against the JWKS file, issuers and audiences.
    Verify,
}

/// An Azure storage account of the config file (`[[azure.accounts]]`).
#[derive(Deserialize, Debug, Clone, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct AccountSection {
    pub name: String,
    /// The account key, base64 (as in a connection string's AccountKey).
    pub key: String,
    /// Engine namespace of the account's queues; by default `devstoreaccount1` shares Veil's default
    /// namespace and any other account has `azure:<name>`.
    pub namespace: Option<String>,
}

/// The `[azure.entra]` table.
#[derive(Deserialize, Debug, Default, Clone, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct EntraSection {
    pub mode: Option<EntraSetting>,
    pub jwks_file: Option<PathBuf>,
    #[serde(default)]
    pub issuers: Vec<String>,
    #[serde(default)]
    pub audiences: Vec<String>,
    pub tenant: Option<String>,
}

/// One `[[azure.role_assignments]]`: a principal (object id or application id) holds a storage queue data
/// role on the queues matching `queues` of the accounts matching `account` (both `*` by default).
#[derive(Deserialize, Debug, Clone, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct RoleAssignmentSection {
    pub principal: String,
    pub role: String,
    pub account: Option<String>,
    pub queues: Option<String>,
}

/// The Azure endpoint's settings: the `[azure]` table.
#[derive(Deserialize, Debug, Clone, PartialEq, Eq)]
#[serde(default, deny_unknown_fields)]
pub struct AzureSettings {
    pub listen: SocketAddr,
    pub auth: AuthMode,
    /// Poison policy of queues created through Azure; 0 = none.
    pub max_dequeue_count: u32,
    /// Accounts besides `devstoreaccount1`, which the front-end adds unless listed here.
    pub accounts: Vec<AccountSection>,
    pub entra: EntraSection,
    pub role_assignments: Vec<RoleAssignmentSection>,
    /// The listener's own certificate, over the shared one (`veil serve` loads it).
    pub tls_cert: Option<PathBuf>,
    pub tls_key: Option<PathBuf>,
}

impl Default for AzureSettings {
    fn default() -> Self {
        Self {
            listen: LISTEN_DEFAULT,
            auth: AuthMode::default(),
            max_dequeue_count: 0,
            accounts: Vec::new(),
            entra: EntraSection::default(),
            role_assignments: Vec::new(),
            tls_cert: None,
            tls_key: None,
        }
    }
}

/// An Azure setting the endpoint cannot honour.
#[derive(Debug, thiserror::Error)]
pub enum SettingsError {
    /// Worded as the config file's own read error: the JWKS file is part of the configuration.
    #[error("cannot read config file {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("azure entra jwks_file {path}: {message}")]
    Jwks { path: PathBuf, message: String },
    #[error("azure entra mode verify needs [azure.entra] jwks_file")]
    VerifyWithoutJwks,
    #[error("azure role_assignments: unknown role {role:?} (one of {known})")]
    UnknownRole { role: String, known: String },
    #[error("the key of Azure account {name:?} is not base64")]
    AccountKey { name: String },
    #[error("azure max_dequeue_count must be 0 (off) or at most {MAX_DEQUEUE_COUNT_MAX}")]
    MaxDequeueCount,
    #[error("Azure account name {name:?} must be 3 to 24 lower-case letters and digits")]
    AccountName { name: String },
}

impl AzureSettings {
    /// Refuses a JWKS file that cannot be read or parsed (or its absence in verify mode), unknown roles,
    /// account keys that are not base64, a poison threshold above the engine's and illegal account names,
    /// in that order.
    pub fn validate(&self) -> Result<(), SettingsError> {
        self.entra()?;
        let accounts = self.accounts()?;
        if self.max_dequeue_count > MAX_DEQUEUE_COUNT_MAX {
            return Err(SettingsError::MaxDequeueCount);
        }
        accounts
            .iter()
            .try_for_each(|account| check_account_name(&account.name))
    }

    /// The bearer-token settings: the mode, the JWKS file read and parsed, the role names checked.
    pub fn entra(&self) -> Result<EntraConfig, SettingsError> {
        let file = &self.entra;
        let mode = match file.mode.unwrap_or_default() {
            EntraSetting::Off => EntraMode::Off,
            EntraSetting::Dev => EntraMode::Dev,
            EntraSetting::Verify => EntraMode::Verify,
        };
        let keys = match &file.jwks_file {
            Some(path) => {
                let text = std::fs::read_to_string(path).map_err(|source| SettingsError::Read {
                    path: path.clone(),
                    source,
                })?;
                EntraConfig::parse_jwks(&text).map_err(|message| SettingsError::Jwks {
                    path: path.clone(),
                    message,
                })?
            }
            None if mode == EntraMode::Verify => return Err(SettingsError::VerifyWithoutJwks),
            None => Vec::new(),
        };
        let role_assignments = self
            .role_assignments
            .iter()
            .map(role_assignment)
            .collect::<Result<Vec<_>, _>>()?;
        Ok(EntraConfig {
            mode,
            keys,
            issuers: file.issuers.clone(),
            audiences: file.audiences.clone(),
            tenant: file.tenant.clone(),
            role_assignments,
        })
    }

    /// The accounts of the `[azure]` table with their keys decoded.
    pub fn accounts(&self) -> Result<Vec<AzureAccount>, SettingsError> {
        self.accounts
            .iter()
            .map(|account| {
                let key = crate::auth::decode_key(&account.key).ok_or_else(|| {
                    SettingsError::AccountKey {
                        name: account.name.clone(),
                    }
                })?;
                Ok(AzureAccount {
                    name: account.name.clone(),
                    key,
                    namespace: account.namespace.clone(),
                })
            })
            .collect()
    }
}

fn role_assignment(section: &RoleAssignmentSection) -> Result<RoleAssignment, SettingsError> {
    let role = Role::parse(&section.role).ok_or_else(|| SettingsError::UnknownRole {
        role: section.role.clone(),
        known: Role::ALL.map(Role::name).join(", "),
    })?;
    let pattern = |given: &Option<String>| {
        veil_core::Pattern::new(given.clone().unwrap_or_else(|| "*".into()))
    };
    Ok(RoleAssignment {
        principal: section.principal.clone(),
        role,
        account: pattern(&section.account),
        queues: pattern(&section.queues),
    })
}

/// Azure account names: 3-24 lower-case letters and digits.
fn check_account_name(name: &str) -> Result<(), SettingsError> {
    let legal = (3..=24).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit());
    if legal {
        Ok(())
    } else {
        Err(SettingsError::AccountName { name: name.into() })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_account(name: &str, key: &str) -> AzureSettings {
        AzureSettings {
            accounts: vec![AccountSection {
                name: name.into(),
                key: key.into(),
                namespace: None,
            }],
            ..AzureSettings::default()
        }
    }

    #[test]
    fn the_defaults_are_valid_and_listen_where_azurite_does() {
        let settings = AzureSettings::default();
        settings.validate().unwrap();
        assert_eq!(settings.listen.to_string(), "127.0.0.1:10001");
        assert_eq!(settings.entra().unwrap().mode, EntraMode::Off);
    }

    #[test]
    fn an_account_key_must_be_base64_and_its_name_3_to_24_lower_case_letters_and_digits() {
        with_account("prodlike", "c2VjcmV0").validate().unwrap();
        let key = with_account("acct", "not base64!").validate().unwrap_err();
        assert!(matches!(key, SettingsError::AccountKey { .. }), "{key}");
        assert!(key.to_string().contains("is not base64"), "{key}");
        for bad in ["ab", "UPPER", "has-dash", "abcdefghijklmnopqrstuvwxy"] {
            let name = with_account(bad, "c2VjcmV0").validate().unwrap_err();
            assert!(
                matches!(name, SettingsError::AccountName { .. }),
                "{bad}: {name}"
            );
        }
    }

    #[test]
    fn a_poison_threshold_above_the_maximum_is_refused() {
        let at = AzureSettings {
            max_dequeue_count: MAX_DEQUEUE_COUNT_MAX,
            ..AzureSettings::default()
        };
        at.validate().unwrap();
        let over = AzureSettings {
            max_dequeue_count: MAX_DEQUEUE_COUNT_MAX + 1,
            ..AzureSettings::default()
        };
        assert!(matches!(
            over.validate(),
            Err(SettingsError::MaxDequeueCount)
        ));
    }

    #[test]
    fn verify_mode_needs_a_jwks_file_and_roles_must_be_known() {
        let verify = AzureSettings {
            entra: EntraSection {
                mode: Some(EntraSetting::Verify),
                ..EntraSection::default()
            },
            ..AzureSettings::default()
        };
        assert!(matches!(
            verify.validate(),
            Err(SettingsError::VerifyWithoutJwks)
        ));
        let owner = AzureSettings {
            role_assignments: vec![RoleAssignmentSection {
                principal: "x".into(),
                role: "Owner".into(),
                account: None,
                queues: None,
            }],
            ..AzureSettings::default()
        };
        let error = owner.validate().unwrap_err();
        assert!(
            error.to_string().contains("unknown role \"Owner\""),
            "{error}"
        );
    }

    #[test]
    fn a_missing_jwks_file_is_a_read_error_naming_it() {
        let missing = AzureSettings {
            entra: EntraSection {
                jwks_file: Some("/nonexistent/jwks.json".into()),
                ..EntraSection::default()
            },
            ..AzureSettings::default()
        };
        let error = missing.validate().unwrap_err();
        assert!(matches!(error, SettingsError::Read { .. }), "{error}");
        assert!(
            error.to_string().contains("/nonexistent/jwks.json"),
            "{error}"
        );
    }
}
