//! The KubeMQ front-end's settings (README.md "Configuration", docs/security.md "KubeMQ", docs/semantics.md
//! §KubeMQ): the `[kubemq]` table of `veil serve`'s config file — the listener, the accepted tokens, KubeMQ's
//! JWT and authorization policy and KubeMQ's server settings, each defaulting to KubeMQ's value — and the
//! checks that refuse what the endpoint could not honour. `veil serve` only merges the sources (flags >
//! environment > file) into this type; the rules live here.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use serde::Deserialize;

use crate::auth::{AuthConfigError, JwtVerifier, Policy, RuleSpec, StaticToken};
use crate::{AuthConfig, Settings};

/// A static KubeMQ token with grants (`[[kubemq.tokens]]`).
#[derive(Deserialize, Debug, Clone, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct TokenSection {
    pub token: String,
    #[serde(default)]
    pub grants: Vec<veil_core::access::GrantSpec>,
}

/// The KubeMQ endpoint's settings: the `[kubemq]` table. The JWT and policy keys are named after KubeMQ's own
/// `authentication.jwtConfig` (`key`, `filePath`, `signatureType`) and `authorization` (`policyData`,
/// `filePath`) settings.
#[derive(Deserialize, Debug, Clone, PartialEq, Eq)]
#[serde(default, deny_unknown_fields)]
pub struct KubemqSettings {
    pub listen: SocketAddr,
    /// Unrestricted static tokens. None of these, no JWT key and no `tokens`: no authentication.
    pub auth_tokens: Vec<String>,
    /// The JWT verification key inline: the HS* secret (KubeMQ's `jwtConfig.key`).
    pub auth_jwt_key: Option<String>,
    /// A file with the JWT verification key: the HS* secret or the RS*/ES* public key PEM (`jwtConfig.filePath`).
    pub auth_jwt_key_file: Option<PathBuf>,
    /// HS256, HS384, HS512, RS256, RS384, RS512, ES256 or ES384 (`jwtConfig.signatureType`).
    pub auth_jwt_signature_type: Option<String>,
    /// The authorization policy inline: KubeMQ's JSON array of rules (`authorization.policyData`).
    pub auth_policy: Option<String>,
    /// A file with the authorization policy, KubeMQ's JSON (`authorization.filePath`).
    pub auth_policy_file: Option<PathBuf>,
    /// The policy's rules written in TOML (`[[kubemq.rules]] client_id, channel, queues, read, write`).
    pub rules: Vec<RuleSpec>,
    /// Static tokens limited to some grants; `auth_tokens` are unrestricted.
    pub tokens: Vec<TokenSection>,
    pub default_visibility_seconds: i32,
    pub max_visibility_seconds: i32,
    pub default_wait_timeout_seconds: i32,
    pub max_wait_timeout_seconds: i32,
    pub max_number_of_messages: i32,
    pub max_expiration_seconds: i32,
    pub max_delay_seconds: i32,
    pub max_receive_count: i32,
    pub max_inflight: u32,
    /// The listener's own certificate, over the shared one (`veil serve` loads it).
    pub tls_cert: Option<PathBuf>,
    pub tls_key: Option<PathBuf>,
}

impl Default for KubemqSettings {
    fn default() -> Self {
        let kubemq = Settings::default();
        Self {
            listen: crate::listen_default(),
            auth_tokens: Vec::new(),
            auth_jwt_key: None,
            auth_jwt_key_file: None,
            auth_jwt_signature_type: None,
            auth_policy: None,
            auth_policy_file: None,
            rules: Vec::new(),
            tokens: Vec::new(),
            default_visibility_seconds: kubemq.default_visibility_s,
            max_visibility_seconds: kubemq.max_visibility_s,
            default_wait_timeout_seconds: kubemq.default_wait_timeout_s,
            max_wait_timeout_seconds: kubemq.max_wait_timeout_s,
            max_number_of_messages: kubemq.max_number_of_messages,
            max_expiration_seconds: kubemq.max_expiration_s,
            max_delay_seconds: kubemq.max_delay_s,
            max_receive_count: kubemq.max_receive_count,
            max_inflight: kubemq.max_inflight,
            tls_cert: None,
            tls_key: None,
        }
    }
}

/// A KubeMQ setting the endpoint cannot honour.
#[derive(Debug, thiserror::Error)]
pub enum SettingsError {
    /// Worded as the config file's own read error: the key and policy files are part of the configuration.
    #[error("cannot read config file {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(transparent)]
    Auth(#[from] AuthConfigError),
    #[error("kubemq auth_jwt_signature_type is missing (HS256, RS256, ES256, ...)")]
    SignatureTypeMissing,
    #[error("kubemq auth_jwt_signature_type needs auth_jwt_key or auth_jwt_key_file")]
    KeyMissing,
    #[error(
        "kubemq default_visibility_seconds must be 1..=max_visibility_seconds (<= {engine_visibility_s_max})"
    )]
    Visibility { engine_visibility_s_max: i32 },
    #[error(
        "kubemq limits out of range (max_number_of_messages 1..={engine_messages_max}, \
         max_wait_timeout_seconds 0..={engine_wait_s_max}, max_receive_count and max_inflight >= 1)"
    )]
    Limits {
        engine_messages_max: i32,
        engine_wait_s_max: i32,
    },
}

impl KubemqSettings {
    /// Refuses KubeMQ's server settings beyond what the engine accepts, then key and policy files that
    /// cannot be read or parsed and a JWT key without its signature type (or the reverse).
    pub fn validate(&self) -> Result<(), SettingsError> {
        self.queue_settings()?;
        self.auth()?;
        Ok(())
    }

    /// Whether any caller must authenticate (for the start-up log).
    pub fn authenticates(&self) -> bool {
        !self.auth_tokens.is_empty()
            || !self.tokens.is_empty()
            || self.auth_jwt_signature_type.is_some()
    }

    /// Whether an authorization policy is configured (for the start-up log).
    pub fn has_policy(&self) -> bool {
        self.auth_policy.is_some() || self.auth_policy_file.is_some() || !self.rules.is_empty()
    }

    /// KubeMQ's server settings: the visibility default within 1 ..= max visibility, and the maxima within
    /// what the engine accepts.
    pub fn queue_settings(&self) -> Result<Settings, SettingsError> {
        let settings = Settings {
            max_number_of_messages: self.max_number_of_messages,
            max_wait_timeout_s: self.max_wait_timeout_seconds,
            max_expiration_s: self.max_expiration_seconds,
            max_delay_s: self.max_delay_seconds,
            max_receive_count: self.max_receive_count,
            max_visibility_s: self.max_visibility_seconds,
            default_visibility_s: self.default_visibility_seconds,
            default_wait_timeout_s: self.default_wait_timeout_seconds,
            max_inflight: self.max_inflight,
        };
        let engine_visibility_s_max = (veil_core::limits::VISIBILITY_TIMEOUT_MS_MAX / 1_000) as i32;
        if !(1..=engine_visibility_s_max).contains(&settings.max_visibility_s)
            || !(1..=settings.max_visibility_s).contains(&settings.default_visibility_s)
        {
            return Err(SettingsError::Visibility {
                engine_visibility_s_max,
            });
        }
        let engine_messages_max = veil_core::limits::RECEIVE_MESSAGES_MAX as i32;
        let engine_wait_s_max = (veil_core::limits::RECEIVE_WAIT_MS_MAX / 1_000) as i32;
        if !(1..=engine_messages_max).contains(&settings.max_number_of_messages)
            || !(0..=engine_wait_s_max).contains(&settings.max_wait_timeout_s)
            || settings.max_expiration_s < 0
            || settings.max_delay_s < 0
            || settings.max_receive_count < 1
            || settings.max_inflight == 0
        {
            return Err(SettingsError::Limits {
                engine_messages_max,
                engine_wait_s_max,
            });
        }
        Ok(settings)
    }

    /// The endpoint's authentication and authorization, reading the key and policy files.
    pub fn auth(&self) -> Result<AuthConfig, SettingsError> {
        let mut static_tokens: Vec<StaticToken> = self
            .auth_tokens
            .iter()
            .map(StaticToken::unrestricted)
            .collect();
        for token in &self.tokens {
            static_tokens.push(StaticToken::with_grants(&token.token, &token.grants)?);
        }
        Ok(AuthConfig {
            static_tokens,
            jwt: self.jwt()?.map(Arc::new),
            policy: self.policy()?.map(Arc::new),
        })
    }

    fn jwt(&self) -> Result<Option<JwtVerifier>, SettingsError> {
        let key = match (&self.auth_jwt_key, &self.auth_jwt_key_file) {
            (Some(key), _) => Some(key.as_bytes().to_vec()),
            (None, Some(path)) => Some(read(path)?),
            (None, None) => None,
        };
        match (key, &self.auth_jwt_signature_type) {
            (Some(key), Some(signature)) => Ok(Some(JwtVerifier::new(signature, &key)?)),
            (None, None) => Ok(None),
            (Some(_), None) => Err(SettingsError::SignatureTypeMissing),
            (None, Some(_)) => Err(SettingsError::KeyMissing),
        }
    }

    fn policy(&self) -> Result<Option<Policy>, SettingsError> {
        let policy = match (&self.auth_policy, &self.auth_policy_file) {
            (Some(text), _) => Some(Policy::from_json(text)?),
            (None, Some(path)) => {
                let text = String::from_utf8_lossy(&read(path)?).into_owned();
                Some(Policy::from_json(&text)?)
            }
            (None, None) if !self.rules.is_empty() => Some(Policy::from_specs(&self.rules)?),
            (None, None) => None,
        };
        Ok(policy)
    }
}

fn read(path: &PathBuf) -> Result<Vec<u8>, SettingsError> {
    std::fs::read(path).map_err(|source| SettingsError::Read {
        path: path.clone(),
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_defaults_are_kubemqs_and_need_no_authentication() {
        let settings = KubemqSettings::default();
        settings.validate().unwrap();
        assert_eq!(settings.queue_settings().unwrap(), Settings::default());
        assert_eq!(settings.listen.to_string(), crate::limits::LISTEN_DEFAULT);
        assert!(!settings.authenticates() && !settings.has_policy());
    }

    #[test]
    fn a_visibility_default_above_the_maximum_is_refused() {
        let settings = KubemqSettings {
            default_visibility_seconds: 50_000,
            ..KubemqSettings::default()
        };
        let error = settings.validate().unwrap_err();
        assert!(matches!(error, SettingsError::Visibility { .. }), "{error}");
        assert!(
            error.to_string().contains("default_visibility_seconds"),
            "{error}"
        );
    }

    #[test]
    fn limits_beyond_the_engines_are_refused() {
        let cases = [
            KubemqSettings {
                max_number_of_messages: 0,
                ..KubemqSettings::default()
            },
            KubemqSettings {
                max_wait_timeout_seconds: -1,
                ..KubemqSettings::default()
            },
            KubemqSettings {
                max_receive_count: 0,
                ..KubemqSettings::default()
            },
            KubemqSettings {
                max_inflight: 0,
                ..KubemqSettings::default()
            },
        ];
        for settings in cases {
            assert!(
                matches!(settings.validate(), Err(SettingsError::Limits { .. })),
                "{settings:?}"
            );
        }
    }

    #[test]
    fn a_jwt_key_needs_its_signature_type_and_the_reverse() {
        let key_only = KubemqSettings {
            auth_jwt_key: Some("s".into()),
            ..KubemqSettings::default()
        };
        assert!(matches!(
            key_only.validate(),
            Err(SettingsError::SignatureTypeMissing)
        ));
        let type_only = KubemqSettings {
            auth_jwt_signature_type: Some("HS256".into()),
            ..KubemqSettings::default()
        };
        assert!(matches!(
            type_only.validate(),
            Err(SettingsError::KeyMissing)
        ));
        let both = KubemqSettings {
            auth_jwt_key: Some("s".into()),
            auth_jwt_signature_type: Some("HS256".into()),
            ..KubemqSettings::default()
        };
        assert!(both.auth().unwrap().jwt.is_some());
        assert!(both.authenticates());
    }

    #[test]
    fn rules_become_the_policy_and_tokens_with_grants_are_static_tokens() {
        let settings = KubemqSettings {
            auth_tokens: vec!["t1".into()],
            rules: vec![RuleSpec {
                clientid: "a".into(),
                channel: "b".into(),
                queues: true,
                write: true,
                ..RuleSpec::default()
            }],
            tokens: vec![TokenSection {
                token: "t2".into(),
                grants: Vec::new(),
            }],
            ..KubemqSettings::default()
        };
        let auth = settings.auth().unwrap();
        assert!(auth.policy.is_some() && settings.has_policy());
        assert_eq!(auth.static_tokens.len(), 2);
    }

    #[test]
    fn a_missing_key_file_is_a_read_error_naming_it() {
        let settings = KubemqSettings {
            auth_jwt_key_file: Some("/nonexistent/key.pem".into()),
            auth_jwt_signature_type: Some("RS256".into()),
            ..KubemqSettings::default()
        };
        let error = settings.validate().unwrap_err();
        assert!(matches!(error, SettingsError::Read { .. }), "{error}");
        assert!(
            error.to_string().contains("/nonexistent/key.pem"),
            "{error}"
        );
    }
}
