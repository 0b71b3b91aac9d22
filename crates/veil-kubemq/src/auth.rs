//! KubeMQ authentication and authorization, as KubeMQ does them (docs/security.md "KubeMQ").
//!
//! **Authentication** reads the gRPC metadata `authorization` (the token itself, no `Bearer` prefix). It is
//! one of Veil's static tokens (`auth_tokens`, `[[kubemq.tokens]]`), or a JWT that KubeMQ's `jwtConfig` would
//! accept: signed with the configured key (HS256/384/512 with a shared secret, RS*/ES* with a public key PEM),
//! its `exp` and `nbf` checked without leeway, neither required, against the engine's clock (the injected
//! one every front-end judges token lifetimes on, as Azure's Entra tokens are). A missing token is refused
//! with KubeMQ's `Authorization token is not supplied`, a bad one with `Error 421: authentication verification failed, …`,
//! both as gRPC `UNAUTHENTICATED`; Ping needs no token, as in KubeMQ.
//!
//! **Authorization** is KubeMQ's policy: a list of rules `{"ClientID": regex, "Channel": regex, "Queues": true,
//! "Read": bool, "Write": bool, …}`. A request is allowed when one rule with `Queues` matches the request's
//! ClientID and channel (regular-expression *search*, unanchored, as KubeMQ's casbin `regexMatch` does) and
//! grants the action. The operation's engine permission maps onto KubeMQ's action: `send` and `admin` need
//! Write, `receive`, `delete` and `peek` need Read. A JWT that carries a `ClientID` claim binds the token to
//! that client id (Veil's addition: KubeMQ leaves it unchecked). A static token is governed by its own grants
//! (none = unrestricted), not by the policy.

use std::collections::HashSet;
use std::sync::Arc;

use jsonwebtoken::errors::ErrorKind;
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use regex::Regex;
use serde::Deserialize;
use veil_core::access::{Access, GrantSpec};
use veil_core::{Millis, Permission, DEFAULT_NAMESPACE};

/// KubeMQ's refusal of an unauthorized request (`ErrNoAccessResource`).
pub const ACCESS_DENIED: &str = "Error 412: access denied to resource";
/// KubeMQ's refusal of a request without the `authorization` metadata.
pub const TOKEN_NOT_SUPPLIED: &str = "Authorization token is not supplied";
/// KubeMQ's prefix of a token that fails verification (`ErrAuthInvalidAuthToken`), followed by the reason.
pub const VERIFICATION_FAILED: &str = "Error 421: authentication verification failed, ";

/// A configuration that cannot be used; the server refuses to start with it.
#[derive(Debug, thiserror::Error)]
pub enum AuthConfigError {
    #[error("kubemq jwt signature type {0:?} is not one of HS256, HS384, HS512, RS256, RS384, RS512, ES256, ES384")]
    UnknownAlgorithm(String),
    #[error("kubemq jwt key: {0}")]
    BadKey(String),
    #[error("kubemq authorization policy: {0}")]
    BadPolicy(String),
    #[error("kubemq token grants: {0}")]
    BadGrant(String),
}

/// KubeMQ's read / write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    Read,
    Write,
}

impl Action {
    /// The KubeMQ action an engine permission needs (docs/security.md "KubeMQ").
    pub fn of(permission: Permission) -> Action {
        match permission {
            Permission::Send | Permission::Admin => Action::Write,
            Permission::Receive | Permission::Delete | Permission::Peek => Action::Read,
        }
    }
}

/// One rule as KubeMQ's policy file writes it. Go's JSON decoding matches keys case-insensitively, so keys
/// are lower-cased before decoding; `client_id` is accepted too, for the TOML form.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(default)]
pub struct RuleSpec {
    #[serde(alias = "client_id")]
    pub clientid: String,
    pub channel: String,
    pub events: bool,
    pub eventsstore: bool,
    pub queues: bool,
    pub commands: bool,
    pub queries: bool,
    pub read: bool,
    pub write: bool,
}

struct Rule {
    client_id: Regex,
    channel: Regex,
    queues: bool,
    read: bool,
    write: bool,
}

/// KubeMQ's authorization policy: the rules that concern queues.
pub struct Policy {
    rules: Vec<Rule>,
}

impl std::fmt::Debug for Policy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Policy({} rules)", self.rules.len())
    }
}

impl Policy {
    /// A policy file's text: a JSON array of rules, or that array base64-encoded (KubeMQ accepts both).
    pub fn from_json(text: &str) -> Result<Policy, AuthConfigError> {
        use base64::Engine as _;
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(text.trim())
            .ok()
            .and_then(|bytes| String::from_utf8(bytes).ok());
        let text = decoded.as_deref().unwrap_or(text);
        let value: serde_json::Value =
            serde_json::from_str(text).map_err(|e| AuthConfigError::BadPolicy(e.to_string()))?;
        let serde_json::Value::Array(items) = value else {
            return Err(AuthConfigError::BadPolicy(
                "expected a JSON array of rules".into(),
            ));
        };
        let specs = items
            .into_iter()
            .map(|item| {
                let serde_json::Value::Object(fields) = item else {
                    return Err(AuthConfigError::BadPolicy(
                        "each rule must be an object".into(),
                    ));
                };
                let lowered: serde_json::Map<String, serde_json::Value> = fields
                    .into_iter()
                    .map(|(key, value)| (key.to_ascii_lowercase(), value))
                    .collect();
                serde_json::from_value(serde_json::Value::Object(lowered))
                    .map_err(|e| AuthConfigError::BadPolicy(e.to_string()))
            })
            .collect::<Result<Vec<RuleSpec>, _>>()?;
        Policy::from_specs(&specs)
    }

    /// Rules as KubeMQ validates them: non-empty, each with a client id and a channel that compile.
    pub fn from_specs(specs: &[RuleSpec]) -> Result<Policy, AuthConfigError> {
        if specs.is_empty() {
            return Err(AuthConfigError::BadPolicy(
                "empty access control list".into(),
            ));
        }
        let mut rules = Vec::with_capacity(specs.len());
        for (i, spec) in specs.iter().enumerate() {
            let compile = |what: &str, pattern: &str| {
                if pattern.is_empty() {
                    return Err(AuthConfigError::BadPolicy(format!(
                        "rule {i}: {what} regular expression cannot be empty"
                    )));
                }
                Regex::new(pattern).map_err(|e| {
                    AuthConfigError::BadPolicy(format!(
                        "rule {i}: invalid {what} regular expression: {e}"
                    ))
                })
            };
            rules.push(Rule {
                client_id: compile("ClientID", &spec.clientid)?,
                channel: compile("Channel", &spec.channel)?,
                queues: spec.queues,
                read: spec.read,
                write: spec.write,
            });
        }
        Ok(Policy { rules })
    }

    /// Whether some queues rule lets `client_id` do `action` on `channel`.
    pub fn allows(&self, client_id: &str, channel: &str, action: Action) -> bool {
        self.rules.iter().any(|rule| {
            let grants = match action {
                Action::Read => rule.read,
                Action::Write => rule.write,
            };
            rule.queues
                && grants
                && rule.client_id.is_match(client_id)
                && rule.channel.is_match(channel)
        })
    }
}

/// Verifies KubeMQ JWTs with one key and one signature type, as KubeMQ's `jwtConfig` does.
pub struct JwtVerifier {
    key: DecodingKey,
    validation: Validation,
}

impl std::fmt::Debug for JwtVerifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "JwtVerifier({:?})", self.validation.algorithms)
    }
}

/// The claims Veil reads. `exp` and `nbf` are read as `jsonwebtoken` reads them (a number, a fraction
/// rounded; anything else is as if absent) and judged on the caller's clock, not the system's.
#[derive(Deserialize)]
struct Claims {
    #[serde(rename = "ClientID", default)]
    client_id: Option<String>,
    #[serde(default)]
    exp: Option<serde_json::Value>,
    #[serde(default)]
    nbf: Option<serde_json::Value>,
}

/// A time claim as `jsonwebtoken` reads it: a non-negative integer, or a finite fraction rounded.
fn numeric_date(claim: Option<&serde_json::Value>) -> Option<u64> {
    let claim = claim?;
    claim.as_u64().or_else(|| {
        let value = claim.as_f64()?;
        // In range for u64, so the cast below cannot saturate.
        (value.is_finite() && value >= 0.0 && value < u64::MAX as f64).then(|| value.round() as u64)
    })
}

impl JwtVerifier {
    /// `signature_type` as KubeMQ names it (`HS256`…`ES384`); `key` the shared secret for HS*, a public key
    /// PEM for RS* and ES*.
    pub fn new(signature_type: &str, key: &[u8]) -> Result<JwtVerifier, AuthConfigError> {
        let algorithm = match signature_type.to_ascii_uppercase().as_str() {
            "HS256" => Algorithm::HS256,
            "HS384" => Algorithm::HS384,
            "HS512" => Algorithm::HS512,
            "RS256" => Algorithm::RS256,
            "RS384" => Algorithm::RS384,
            "RS512" => Algorithm::RS512,
            "ES256" => Algorithm::ES256,
            "ES384" => Algorithm::ES384,
            _ => return Err(AuthConfigError::UnknownAlgorithm(signature_type.into())),
        };
        let bad = |e: jsonwebtoken::errors::Error| AuthConfigError::BadKey(e.to_string());
        let key = match algorithm {
            Algorithm::HS256 | Algorithm::HS384 | Algorithm::HS512 => {
                if key.is_empty() {
                    return Err(AuthConfigError::BadKey("no verify key provided".into()));
                }
                DecodingKey::from_secret(key)
            }
            Algorithm::RS256 | Algorithm::RS384 | Algorithm::RS512 => {
                DecodingKey::from_rsa_pem(key).map_err(bad)?
            }
            _ => DecodingKey::from_ec_pem(key).map_err(bad)?,
        };
        let mut validation = Validation::new(algorithm);
        // KubeMQ's StandardClaims check exp and nbf when present, require none, and allow no leeway.
        validation.required_spec_claims = HashSet::new();
        // Lifetimes are judged in `verify`, on the engine's clock.
        validation.validate_exp = false;
        validation.validate_nbf = false;
        validation.validate_aud = false;
        Ok(JwtVerifier { key, validation })
    }

    /// The token's bound client id (its `ClientID` claim), or why it is refused, in the words of the JWT
    /// library KubeMQ uses. `now` is the engine's time: expired when `exp` is before it (in whole seconds, no
    /// leeway), not yet valid when `nbf` is after it.
    fn verify(&self, token: &str, now: Millis) -> Result<Option<String>, String> {
        match jsonwebtoken::decode::<Claims>(token, &self.key, &self.validation) {
            Ok(data) => {
                let now_s = now / 1_000;
                if numeric_date(data.claims.exp.as_ref()).is_some_and(|exp| exp < now_s) {
                    return Err("token is expired".into());
                }
                if numeric_date(data.claims.nbf.as_ref()).is_some_and(|nbf| nbf > now_s) {
                    return Err("token is not valid yet".into());
                }
                Ok(data.claims.client_id.filter(|id| !id.is_empty()))
            }
            Err(error) => Err(match error.kind() {
                ErrorKind::ExpiredSignature => "token is expired".into(),
                ErrorKind::ImmatureSignature => "token is not valid yet".into(),
                ErrorKind::InvalidSignature => "signature is invalid".into(),
                ErrorKind::InvalidAlgorithm => "signing method is invalid".into(),
                _ => format!("token is malformed: {error}"),
            }),
        }
    }
}

/// A static token and what it may do.
#[derive(Clone, Debug)]
pub struct StaticToken {
    pub token: String,
    /// `None`: unrestricted. Grants name queues in the default namespace, where KubeMQ channels live.
    pub grants: Option<Access>,
}

impl StaticToken {
    pub fn unrestricted(token: impl Into<String>) -> StaticToken {
        StaticToken {
            token: token.into(),
            grants: None,
        }
    }

    /// A token limited to `grants` (the config's `grants = [{ queues = "orders-*", permissions = [...] }]`).
    pub fn with_grants(
        token: impl Into<String>,
        grants: &[GrantSpec],
    ) -> Result<StaticToken, AuthConfigError> {
        let grants = grants
            .iter()
            .map(|spec| spec.to_grant(DEFAULT_NAMESPACE))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| AuthConfigError::BadGrant(e.to_string()))?;
        Ok(StaticToken {
            token: token.into(),
            grants: Some(Access {
                identity: "kubemq-token".into(),
                grants,
            }),
        })
    }
}

/// Everything the endpoint checks.
#[derive(Clone, Debug, Default)]
pub struct AuthConfig {
    pub static_tokens: Vec<StaticToken>,
    pub jwt: Option<Arc<JwtVerifier>>,
    pub policy: Option<Arc<Policy>>,
}

impl AuthConfig {
    /// Whether a token is required at all.
    pub fn requires_token(&self) -> bool {
        !self.static_tokens.is_empty() || self.jwt.is_some()
    }

    /// The caller a request's `authorization` metadata proves at `now` (the engine's clock), or KubeMQ's
    /// refusal text.
    pub fn authenticate(&self, presented: Option<&str>, now: Millis) -> Result<Caller, String> {
        if !self.requires_token() {
            return Ok(Caller::ruled_by(self.policy.clone(), None));
        }
        let Some(token) = presented else {
            return Err(TOKEN_NOT_SUPPLIED.to_string());
        };
        if let Some(found) = self
            .static_tokens
            .iter()
            .find(|t| constant_time_eq(t.token.as_bytes(), token.as_bytes()))
        {
            return Ok(Caller {
                authority: match &found.grants {
                    None => Authority::Unrestricted,
                    Some(access) => Authority::Grants(access.clone()),
                },
                bound_client_id: None,
            });
        }
        match &self.jwt {
            Some(jwt) => match jwt.verify(token, now) {
                Ok(client_id) => Ok(Caller::ruled_by(self.policy.clone(), client_id)),
                Err(reason) => Err(format!("{VERIFICATION_FAILED}{reason}")),
            },
            None => Err(format!("{VERIFICATION_FAILED}invalid token")),
        }
    }
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    use subtle::ConstantTimeEq;
    a.len() == b.len() && bool::from(a.ct_eq(b))
}

#[derive(Clone, Debug)]
enum Authority {
    Unrestricted,
    Grants(Access),
    /// KubeMQ's policy when one is configured, else anything (KubeMQ with authorization off).
    Policy(Option<Arc<Policy>>),
}

/// Who is calling, as authentication found: carried from the interceptor to the handlers in the request's
/// extensions.
#[derive(Clone, Debug)]
pub struct Caller {
    authority: Authority,
    /// A JWT's `ClientID` claim: the only client id its requests may name.
    bound_client_id: Option<String>,
}

impl Default for Caller {
    /// Authentication off and no policy: anything goes.
    fn default() -> Self {
        Caller {
            authority: Authority::Unrestricted,
            bound_client_id: None,
        }
    }
}

impl Caller {
    fn ruled_by(policy: Option<Arc<Policy>>, bound_client_id: Option<String>) -> Caller {
        Caller {
            authority: Authority::Policy(policy),
            bound_client_id,
        }
    }

    /// Whether the request's `client_id` may have `permission` on `channel`.
    pub fn allows(&self, client_id: &str, channel: &str, permission: Permission) -> bool {
        if self
            .bound_client_id
            .as_deref()
            .is_some_and(|bound| bound != client_id)
        {
            return false;
        }
        match &self.authority {
            Authority::Unrestricted | Authority::Policy(None) => true,
            Authority::Grants(access) => access.allows(&crate::service::key(channel), permission),
            Authority::Policy(Some(policy)) => {
                policy.allows(client_id, channel, Action::of(permission))
            }
        }
    }

    /// The client id a JWT's `ClientID` claim binds the caller to.
    pub fn bound_client_id(&self) -> Option<&str> {
        self.bound_client_id.as_deref()
    }

    /// Whether listings (QueuesInfo, list-channels) show `channel`: any permission on it.
    pub fn sees(&self, client_id: &str, channel: &str) -> bool {
        Permission::ALL
            .into_iter()
            .any(|p| self.allows(client_id, channel, p))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use jsonwebtoken::{encode, EncodingKey, Header};

    fn hs_config(policy: &str) -> AuthConfig {
        AuthConfig {
            static_tokens: vec![StaticToken::unrestricted("static")],
            jwt: Some(Arc::new(JwtVerifier::new("HS256", b"secret").unwrap())),
            policy: Some(Arc::new(Policy::from_json(policy).unwrap())),
        }
    }

    fn token(claims: serde_json::Value, secret: &[u8]) -> String {
        encode(
            &Header::new(Algorithm::HS256),
            &claims,
            &EncodingKey::from_secret(secret),
        )
        .unwrap()
    }

    /// The engine's time the tests judge tokens at: far from the system clock's, so a check on the wrong
    /// clock fails.
    const NOW_S: i64 = 2_000_000_000;
    const NOW_MS: Millis = NOW_S as Millis * 1_000;

    fn now() -> i64 {
        NOW_S
    }

    const WRITE_ORDERS: &str =
        r#"[{"ClientID":"writer","Channel":"orders.*","Queues":true,"Read":false,"Write":true}]"#;

    #[test]
    fn a_write_rule_allows_send_and_admin_on_matching_channels_only() {
        let config = hs_config(WRITE_ORDERS);
        let caller = config
            .authenticate(Some(&token(serde_json::json!({}), b"secret")), NOW_MS)
            .unwrap();
        assert!(caller.allows("writer", "orders.eu", Permission::Send));
        assert!(caller.allows("writer", "orders.eu", Permission::Admin));
        assert!(!caller.allows("writer", "orders.eu", Permission::Receive));
        assert!(!caller.allows("writer", "orders.eu", Permission::Peek));
        assert!(!caller.allows("writer", "invoices", Permission::Send));
        assert!(!caller.allows("other", "orders.eu", Permission::Send));
    }

    #[test]
    fn rules_match_by_unanchored_regex_search_as_kubemq_does() {
        let policy = Policy::from_json(
            r#"[{"clientId":"^sub","channel":"foo.bar","queues":true,"read":true}]"#,
        )
        .unwrap();
        assert!(policy.allows("sub-1", "xfoo.barx", Action::Read));
        assert!(policy.allows("sub-1", "fooXbar", Action::Read));
        assert!(!policy.allows("a-sub", "foo.bar", Action::Read));
        assert!(!policy.allows("sub-1", "foo.bar", Action::Write));
    }

    #[test]
    fn rules_without_queues_grant_nothing_here() {
        let policy = Policy::from_json(
            r#"[{"ClientID":".*","Channel":".*","Events":true,"Read":true,"Write":true}]"#,
        )
        .unwrap();
        assert!(!policy.allows("a", "b", Action::Read));
    }

    #[test]
    fn a_base64_policy_is_accepted_and_bad_policies_are_refused() {
        use base64::Engine as _;
        let encoded = base64::engine::general_purpose::STANDARD.encode(WRITE_ORDERS);
        assert!(Policy::from_json(&encoded).is_ok());
        assert!(Policy::from_json("[]").is_err());
        assert!(Policy::from_json(r#"[{"ClientID":"","Channel":"x"}]"#).is_err());
        assert!(Policy::from_json(r#"[{"ClientID":"(","Channel":"x"}]"#).is_err());
        assert!(Policy::from_json("{}").is_err());
    }

    #[test]
    fn missing_expired_immature_and_forged_tokens_are_refused_with_kubemq_texts() {
        let config = hs_config(WRITE_ORDERS);
        assert_eq!(
            config.authenticate(None, NOW_MS).unwrap_err(),
            TOKEN_NOT_SUPPLIED
        );
        let expired = token(serde_json::json!({"exp": now() - 10}), b"secret");
        assert_eq!(
            config.authenticate(Some(&expired), NOW_MS).unwrap_err(),
            format!("{VERIFICATION_FAILED}token is expired")
        );
        let immature = token(serde_json::json!({"nbf": now() + 100}), b"secret");
        assert_eq!(
            config.authenticate(Some(&immature), NOW_MS).unwrap_err(),
            format!("{VERIFICATION_FAILED}token is not valid yet")
        );
        let forged = token(serde_json::json!({}), b"other");
        assert_eq!(
            config.authenticate(Some(&forged), NOW_MS).unwrap_err(),
            format!("{VERIFICATION_FAILED}signature is invalid")
        );
        assert!(config
            .authenticate(Some("garbage"), NOW_MS)
            .unwrap_err()
            .starts_with(VERIFICATION_FAILED));
        let valid = token(serde_json::json!({"exp": now() + 100}), b"secret");
        assert!(config.authenticate(Some(&valid), NOW_MS).is_ok());
    }

    #[test]
    fn a_client_id_claim_binds_the_token_to_that_client_id() {
        let config = hs_config(
            r#"[{"ClientID":".*","Channel":".*","Queues":true,"Read":true,"Write":true}]"#,
        );
        let bound = token(serde_json::json!({"ClientID": "writer"}), b"secret");
        let caller = config.authenticate(Some(&bound), NOW_MS).unwrap();
        assert!(caller.allows("writer", "q", Permission::Send));
        assert!(!caller.allows("someone-else", "q", Permission::Send));
    }

    #[test]
    fn static_tokens_are_unrestricted_or_limited_to_their_grants() {
        let limited = StaticToken::with_grants(
            "limited",
            &[GrantSpec {
                namespace: None,
                queues: "orders-*".into(),
                permissions: vec!["send".into()],
            }],
        )
        .unwrap();
        let mut config = hs_config(WRITE_ORDERS);
        config.static_tokens.push(limited);
        let open = config.authenticate(Some("static"), NOW_MS).unwrap();
        assert!(open.allows("anyone", "invoices", Permission::Receive));
        let limited = config.authenticate(Some("limited"), NOW_MS).unwrap();
        assert!(limited.allows("anyone", "orders-eu", Permission::Send));
        assert!(!limited.allows("anyone", "orders-eu", Permission::Receive));
        assert!(!limited.allows("anyone", "invoices", Permission::Send));
    }

    #[test]
    fn without_tokens_the_policy_still_applies_to_every_request() {
        let config = AuthConfig {
            policy: Some(Arc::new(Policy::from_json(WRITE_ORDERS).unwrap())),
            ..AuthConfig::default()
        };
        let caller = config.authenticate(None, NOW_MS).unwrap();
        assert!(caller.allows("writer", "orders.eu", Permission::Send));
        assert!(!caller.allows("writer", "orders.eu", Permission::Receive));
        let open = AuthConfig::default().authenticate(None, NOW_MS).unwrap();
        assert!(open.allows("x", "y", Permission::Admin));
    }
}
