//! The SQS front-end's settings (README.md "Configuration", docs/security.md "SQS"): the `[sqs]` table of
//! `veil serve`'s config file, the account id and advertised URL that `veil serve` hands over from its
//! top-level keys, and the checks that refuse what the endpoint could not honour. `veil serve` only merges the
//! sources (flags > environment > file) into this type; the rules live here.

use serde::Deserialize;
use veil_core::GrantSpec;

use crate::limits::{ACCOUNT_ID_DIGITS, DEFAULT_ACCOUNT_ID};
use crate::{CredentialError, SqsAuth, SqsCredential};

/// The development credential every SQS emulator accepts (docs/security.md, "SQS").
pub const DEV_ACCESS_KEY: &str = "test";
pub const DEV_SECRET_KEY: &str = "test";

/// Whether the SQS endpoint verifies SigV4 signatures and checks permissions (docs/security.md, "SQS").
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, Default)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[serde(rename_all = "lowercase")]
pub enum AuthMode {
    /// Verify every request against the configured credentials (AWS's behaviour).
    #[default]
    On,
    /// Accept any request, signed or not, with every permission: for local development only.
    Off,
}

/// An SQS credential of the config file (`[[sqs.credentials]]`).
#[derive(Deserialize, Debug, Clone, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct CredentialSection {
    pub access_key: String,
    pub secret_key: String,
    pub account_id: String,
    pub session_token: Option<String>,
    /// Absent: the account's owner (every permission on the account's queues).
    pub grants: Option<Vec<GrantSpec>>,
}

/// The SQS endpoint's settings: the `[sqs]` table, and the two top-level keys `veil serve` sets.
#[derive(Deserialize, Debug, Clone, PartialEq, Eq)]
#[serde(default, deny_unknown_fields)]
pub struct SqsSettings {
    pub auth: AuthMode,
    /// The development credential `test`/`test` → the default account; on unless set to false.
    pub dev_credential: bool,
    pub credentials: Vec<CredentialSection>,
    /// Used in queue URLs and ARNs when a request names none (the top-level key `sqs_account_id`).
    #[serde(skip)]
    pub account_id: String,
    /// `http(s)://host[:port]` that queue URLs start with, whatever Host a request names (the top-level key
    /// `sqs_advertised_url`); `None`: the listener's scheme and the request's Host.
    #[serde(skip)]
    pub advertised_url: Option<String>,
}

impl Default for SqsSettings {
    fn default() -> Self {
        Self {
            auth: AuthMode::default(),
            dev_credential: true,
            credentials: Vec::new(),
            account_id: DEFAULT_ACCOUNT_ID.into(),
            advertised_url: None,
        }
    }
}

/// An SQS setting the endpoint cannot honour.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SettingsError {
    #[error(transparent)]
    Credential(#[from] CredentialError),
    #[error(
        "sqs_advertised_url must be http://host[:port] or https://host[:port] without a path, got {0:?}"
    )]
    AdvertisedUrl(String),
    #[error("sqs_account_id must be 12 digits, got {0:?}")]
    AccountId(String),
}

impl SqsSettings {
    /// Refuses credentials that cannot be used, an advertised URL that is not a scheme and an authority, and
    /// an account id that is not 12 digits, in that order.
    pub fn validate(&self) -> Result<(), SettingsError> {
        self.credentials()?;
        self.advertised_origin()?;
        let digits = self.account_id.len() == ACCOUNT_ID_DIGITS
            && self.account_id.bytes().all(|b| b.is_ascii_digit());
        if !digits {
            return Err(SettingsError::AccountId(self.account_id.clone()));
        }
        Ok(())
    }

    /// The endpoint's authentication: on or off, with the credentials in force.
    pub fn auth(&self) -> Result<SqsAuth, SettingsError> {
        Ok(SqsAuth {
            enabled: self.auth == AuthMode::On,
            credentials: self.credentials()?,
        })
    }

    /// The `[[sqs.credentials]]`, each checked, and the development credential `test`/`test` → the default
    /// account unless `dev_credential = false` or a listed credential uses the key `test`.
    pub fn credentials(&self) -> Result<Vec<SqsCredential>, SettingsError> {
        let mut credentials: Vec<SqsCredential> = self
            .credentials
            .iter()
            .map(|c| SqsCredential {
                access_key: c.access_key.clone(),
                secret_key: c.secret_key.clone(),
                account_id: c.account_id.clone(),
                session_token: c.session_token.clone(),
                grants: c.grants.clone(),
            })
            .collect();
        let listed = credentials.iter().any(|c| c.access_key == DEV_ACCESS_KEY);
        if self.dev_credential && !listed {
            credentials.push(SqsCredential {
                access_key: DEV_ACCESS_KEY.into(),
                secret_key: DEV_SECRET_KEY.into(),
                account_id: self.account_id.clone(),
                session_token: None,
                grants: None,
            });
        }
        let mut seen = std::collections::HashSet::new();
        for credential in &credentials {
            if !seen.insert(credential.access_key.as_str()) {
                return Err(CredentialError::Duplicate {
                    access_key: credential.access_key.clone(),
                }
                .into());
            }
            credential.validate()?;
        }
        Ok(credentials)
    }

    /// The advertised URL as `http(s)://host[:port]`, without a path: queue URLs append
    /// `/<account>/<queue>` to it.
    pub fn advertised_origin(&self) -> Result<Option<String>, SettingsError> {
        self.advertised_url.as_deref().map(origin).transpose()
    }
}

fn origin(given: &str) -> Result<String, SettingsError> {
    let refused = || SettingsError::AdvertisedUrl(given.to_string());
    let uri: axum::http::Uri = given.parse().map_err(|_| refused())?;
    let scheme = uri
        .scheme_str()
        .filter(|scheme| matches!(*scheme, "http" | "https"))
        .ok_or_else(refused)?;
    let authority = uri
        .authority()
        .filter(|authority| !authority.host().is_empty() && !authority.as_str().contains('@'))
        .ok_or_else(refused)?;
    if uri.path() != "/" || uri.query().is_some() {
        return Err(refused());
    }
    Ok(format!("{scheme}://{authority}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_url(url: &str) -> SqsSettings {
        SqsSettings {
            advertised_url: Some(url.into()),
            ..SqsSettings::default()
        }
    }

    #[test]
    fn an_advertised_sqs_url_is_a_scheme_and_an_authority() {
        let origin = |url: &str| with_url(url).advertised_origin().unwrap();
        assert_eq!(
            origin("http://veil:9324/").as_deref(),
            Some("http://veil:9324")
        );
        assert_eq!(
            origin("https://[::1]:9324").as_deref(),
            Some("https://[::1]:9324")
        );
        for bad in [
            "veil:9324",
            "ftp://veil",
            "http://",
            "http://veil/queues",
            "http://veil?x=1",
            "http://user@veil",
        ] {
            assert_eq!(
                with_url(bad).validate(),
                Err(SettingsError::AdvertisedUrl(bad.into())),
                "{bad} accepted"
            );
        }
    }

    #[test]
    fn the_defaults_are_valid_with_the_dev_credential_on_the_default_account() {
        let settings = SqsSettings::default();
        settings.validate().unwrap();
        let auth = settings.auth().unwrap();
        assert!(auth.enabled);
        assert_eq!(auth.credentials.len(), 1);
        assert_eq!(auth.credentials[0].access_key, DEV_ACCESS_KEY);
        assert_eq!(auth.credentials[0].account_id, DEFAULT_ACCOUNT_ID);
    }

    #[test]
    fn an_account_id_must_be_12_digits() {
        for bad in ["12", "00000000000a", "0000000000000"] {
            let settings = SqsSettings {
                account_id: bad.into(),
                dev_credential: false,
                ..SqsSettings::default()
            };
            let error = settings.validate().unwrap_err();
            assert_eq!(error, SettingsError::AccountId(bad.into()));
            assert!(error.to_string().contains("12 digits"), "{error}");
        }
    }

    #[test]
    fn a_credential_listed_twice_is_refused_and_a_listed_test_key_replaces_the_dev_one() {
        let credential = |secret: &str| CredentialSection {
            access_key: DEV_ACCESS_KEY.into(),
            secret_key: secret.into(),
            account_id: "111111111111".into(),
            session_token: None,
            grants: None,
        };
        let one = SqsSettings {
            credentials: vec![credential("s")],
            ..SqsSettings::default()
        };
        let credentials = one.credentials().unwrap();
        assert_eq!(credentials.len(), 1, "the listed `test` key stands alone");
        assert_eq!(credentials[0].account_id, "111111111111");
        let twice = SqsSettings {
            credentials: vec![credential("s"), credential("t")],
            ..SqsSettings::default()
        };
        let error = twice.validate().unwrap_err();
        assert!(error.to_string().contains("listed twice"), "{error}");
    }

    #[test]
    fn the_dev_credential_can_be_turned_off() {
        let settings: SqsSettings = toml_like_off().expect("the table parses");
        assert_eq!(settings.auth, AuthMode::Off);
        assert!(settings.credentials().unwrap().is_empty());
    }

    /// `[sqs] auth = "off", dev_credential = false` as serde reads it (the crate has no TOML parser; JSON has
    /// the same shape).
    fn toml_like_off() -> Result<SqsSettings, serde_json::Error> {
        serde_json::from_str(r#"{"auth": "off", "dev_credential": false}"#)
    }

    #[test]
    fn unknown_keys_of_the_sqs_table_are_refused() {
        let error = serde_json::from_str::<SqsSettings>(r#"{"account_id": "111111111111"}"#)
            .unwrap_err()
            .to_string();
        assert!(error.contains("unknown field `account_id`"), "{error}");
    }
}
