//! Microsoft Entra ID (OAuth) bearer tokens, pure: a JWT verified against the keys of a JWKS document and the
//! issuers and audiences of the config, its lifetime checked against the server's clock with Entra ID's skew,
//! and the storage data roles of the principal — from the config's role assignments (what Azure keeps as RBAC
//! role assignments) and from the token's own `roles` claim — turned into Veil's permissions
//! (docs/security.md, "Azure Queue Storage").

use std::collections::HashSet;

use jsonwebtoken::jwk::{Jwk, JwkSet};
use jsonwebtoken::{decode, decode_header, Algorithm, DecodingKey, Validation};
use serde::Deserialize;
use veil_core::access::{Access, Grant, Pattern, Permission, Permissions};
use veil_core::Millis;

use crate::limits;

/// How bearer tokens are treated.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum EntraMode {
    /// Bearer tokens are refused (401 InvalidAuthenticationInfo): no key to verify them with.
    #[default]
    Off,
    /// Any well-formed, unexpired JWT is accepted without checking its signature, issuer or audience, and
    /// its principal is a Storage Queue Data Contributor everywhere (Azurite's `--oauth basic`). For local
    /// development only.
    Dev,
    /// Signature, issuer, audience and lifetime are verified; roles come from the role assignments and the
    /// token's `roles` claim.
    Verify,
}

/// The four Azure storage data roles of the queue service.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    Contributor,
    Reader,
    MessageSender,
    MessageProcessor,
}

impl Role {
    pub const ALL: [Role; 4] = [
        Role::Contributor,
        Role::Reader,
        Role::MessageSender,
        Role::MessageProcessor,
    ];

    /// The built-in role's name, as Azure spells it.
    pub fn name(self) -> &'static str {
        match self {
            Role::Contributor => "Storage Queue Data Contributor",
            Role::Reader => "Storage Queue Data Reader",
            Role::MessageSender => "Storage Queue Data Message Sender",
            Role::MessageProcessor => "Storage Queue Data Message Processor",
        }
    }

    /// A role by its name (case-insensitive, as Azure's role names are compared).
    pub fn parse(name: &str) -> Option<Role> {
        Role::ALL
            .into_iter()
            .find(|role| role.name().eq_ignore_ascii_case(name.trim()))
    }

    /// What the role allows (docs/security.md): Contributor everything, Reader peeks (and reads metadata and
    /// listings), Message Sender adds, Message Processor takes, settles and peeks.
    pub fn permissions(self) -> Permissions {
        match self {
            Role::Contributor => Permissions::ALL,
            Role::Reader => Permissions::of(&[Permission::Peek]),
            Role::MessageSender => Permissions::of(&[Permission::Send]),
            Role::MessageProcessor => {
                Permissions::of(&[Permission::Receive, Permission::Delete, Permission::Peek])
            }
        }
    }
}

/// One role assignment of the config: a principal (the token's `oid`, or its `appid` / `azp`) holds a role on
/// the queues of the accounts that match.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RoleAssignment {
    pub principal: String,
    pub role: Role,
    pub account: Pattern,
    pub queues: Pattern,
}

/// The bearer-token settings.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EntraConfig {
    pub mode: EntraMode,
    /// The signing keys (Verify mode), from a JWKS document.
    pub keys: Vec<Jwk>,
    /// Accepted `iss` values; empty accepts any issuer.
    pub issuers: Vec<String>,
    /// Accepted `aud` values; empty accepts Azure Storage's own ([`default_audiences`]).
    pub audiences: Vec<String>,
    /// The tenant named in `WWW-Authenticate` (`common` when unset).
    pub tenant: Option<String>,
    pub role_assignments: Vec<RoleAssignment>,
}

impl EntraConfig {
    /// Reads a JWKS document (`{"keys": [...]}`).
    pub fn parse_jwks(text: &str) -> Result<Vec<Jwk>, String> {
        serde_json::from_str::<JwkSet>(text)
            .map(|set| set.keys)
            .map_err(|e| format!("not a JWKS document: {e}"))
    }
}

/// A verified token's principal.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Principal {
    /// The object id (`oid`, else `sub`): whom role assignments and user delegation keys name.
    pub oid: String,
    pub tid: String,
    /// The client application (`appid` in v1 tokens, `azp` in v2).
    pub app_id: Option<String>,
    /// Storage data roles the token's `roles` claim names.
    pub token_roles: Vec<Role>,
    /// Verified in development mode (no signature checked): a Contributor everywhere.
    pub dev: bool,
}

impl Principal {
    pub fn identity(&self) -> String {
        format!("azure-oid:{}", self.oid)
    }
}

/// The claims Veil reads; `aud` and `iss` are checked by the JWT library.
#[derive(Debug, Deserialize)]
struct Claims {
    oid: Option<String>,
    sub: Option<String>,
    tid: Option<String>,
    appid: Option<String>,
    azp: Option<String>,
    #[serde(default)]
    roles: Vec<String>,
    exp: Option<i64>,
    nbf: Option<i64>,
}

/// Why a token was refused: Azure's `AuthenticationErrorDetail` of a 401 InvalidAuthenticationInfo.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TokenRefused(pub String);

fn refused(detail: impl Into<String>) -> TokenRefused {
    TokenRefused(detail.into())
}

/// The algorithms a storage token may be signed with (Entra ID signs with RS256; the rest are accepted for
/// other issuers a JWKS may describe). HMAC algorithms are never accepted: a JWKS holds public keys.
const ALGORITHMS: [Algorithm; 8] = [
    Algorithm::RS256,
    Algorithm::RS384,
    Algorithm::RS512,
    Algorithm::PS256,
    Algorithm::PS384,
    Algorithm::PS512,
    Algorithm::ES256,
    Algorithm::ES384,
];

/// Azure Storage's application id: the `aud` of a storage token issued in Entra ID's v2 format (Azurite
/// accepts it beside the resource URI).
const STORAGE_APPLICATION_ID: &str = "e406a681-f3d4-42a8-90b6-c2b029497af1";

/// The audiences a token for `account`'s queues carries when the config names none: Azure Storage's own —
/// the storage resource and the account's queue endpoint, each with and without a trailing slash, and the
/// storage application id. A token issued for another application (`api://some-other-app`) is never one
/// of them, whatever roles it claims (docs/security.md, "Azure Queue Storage").
pub fn default_audiences(account: &str) -> Vec<String> {
    let endpoint = format!("https://{account}.queue.core.windows.net");
    vec![
        limits::STORAGE_RESOURCE_ID.to_string(),
        format!("{}/", limits::STORAGE_RESOURCE_ID),
        format!("{endpoint}/"),
        endpoint,
        STORAGE_APPLICATION_ID.to_string(),
    ]
}

/// Verifies `token`, presented to `account`, at `now` as the config's mode says.
pub fn verify_token(
    config: &EntraConfig,
    token: &str,
    account: &str,
    now: Millis,
) -> Result<Principal, TokenRefused> {
    let header = decode_header(token).map_err(|e| refused(format!("Token is malformed: {e}.")))?;
    let claims = match config.mode {
        EntraMode::Off => {
            return Err(refused(
                "Bearer tokens are not accepted: Veil's [azure.entra] mode is off.",
            ))
        }
        EntraMode::Dev => {
            let mut validation = Validation::new(header.alg);
            validation.insecure_disable_signature_validation();
            relax(&mut validation);
            decode::<Claims>(token, &DecodingKey::from_secret(&[]), &validation)
                .map_err(|e| refused(format!("Token is malformed: {e}.")))?
                .claims
        }
        EntraMode::Verify => verified_claims(config, token, header, account)?,
    };
    check_lifetime(&claims, now)?;
    let oid = claims
        .oid
        .or(claims.sub)
        .ok_or_else(|| refused("Token has neither an oid nor a sub claim."))?;
    Ok(Principal {
        oid,
        tid: claims.tid.unwrap_or_default(),
        app_id: claims.appid.or(claims.azp),
        token_roles: claims.roles.iter().filter_map(|r| Role::parse(r)).collect(),
        dev: config.mode == EntraMode::Dev,
    })
}

/// Lifetime is checked against the engine's clock (not the library's); issuer and audience by the caller
/// (verify mode only).
fn relax(validation: &mut Validation) {
    validation.validate_exp = false;
    validation.validate_nbf = false;
    validation.validate_aud = false;
    validation.required_spec_claims = HashSet::new();
}

fn verified_claims(
    config: &EntraConfig,
    token: &str,
    header: jsonwebtoken::Header,
    account: &str,
) -> Result<Claims, TokenRefused> {
    if !ALGORITHMS.contains(&header.alg) {
        return Err(refused(format!(
            "Signature validation failed. The algorithm {:?} is not accepted.",
            header.alg
        )));
    }
    let candidates: Vec<_> = config
        .keys
        .iter()
        .filter(|jwk| match (&header.kid, &jwk.common.key_id) {
            (Some(kid), Some(key_id)) => kid == key_id,
            _ => true,
        })
        .collect();
    if candidates.is_empty() {
        return Err(refused(format!(
            "Signature validation failed. Unable to match key: kid: '{}'.",
            header.kid.as_deref().unwrap_or("")
        )));
    }
    let mut validation = Validation::new(header.alg);
    relax(&mut validation);
    // The library skips the issuer and audience checks of a token that lacks the claim: they must be there.
    validation.required_spec_claims = HashSet::from(["aud".to_string()]);
    if !config.issuers.is_empty() {
        validation.set_issuer(&config.issuers);
        validation.required_spec_claims.insert("iss".to_string());
    }
    // Never skipped: without an audience check a token any application obtained from the same issuer —
    // for its own API, with its own app roles — would open the account.
    if config.audiences.is_empty() {
        validation.set_audience(&default_audiences(account));
    } else {
        validation.set_audience(&config.audiences);
    }
    validation.validate_aud = true;
    let mut last = refused("Signature validation failed.");
    for jwk in candidates {
        let Ok(key) = DecodingKey::from_jwk(jwk) else {
            continue;
        };
        match decode::<Claims>(token, &key, &validation) {
            Ok(data) => return Ok(data.claims),
            Err(e) => {
                use jsonwebtoken::errors::ErrorKind as K;
                last = match e.kind() {
                    K::InvalidIssuer => refused("Issuer validation failed. Issuer did not match."),
                    K::InvalidAudience => {
                        refused("Audience validation failed. Audience did not match.")
                    }
                    K::MissingRequiredClaim(claim) => {
                        refused(format!("Token lacks the required claim {claim}."))
                    }
                    K::InvalidSignature | K::InvalidAlgorithm | K::InvalidKeyFormat => {
                        refused("Signature validation failed. Signature is invalid.")
                    }
                    other => refused(format!("Token is malformed: {other:?}.")),
                };
                // Issuer and audience do not depend on the key: no other key can fix them.
                if !matches!(
                    e.kind(),
                    K::InvalidSignature | K::InvalidAlgorithm | K::InvalidKeyFormat
                ) {
                    return Err(last);
                }
            }
        }
    }
    Err(last)
}

fn check_lifetime(claims: &Claims, now: Millis) -> Result<(), TokenRefused> {
    let now_s = i64::try_from(now / 1000).unwrap_or(i64::MAX);
    let skew_s = i64::try_from(limits::TOKEN_CLOCK_SKEW_MS / 1000).unwrap_or(0);
    let Some(exp) = claims.exp else {
        return Err(refused(
            "Lifetime validation failed. The token is missing an Expiration Time.",
        ));
    };
    if now_s > exp.saturating_add(skew_s) {
        return Err(refused("Lifetime validation failed. The token is expired."));
    }
    if claims
        .nbf
        .is_some_and(|nbf| now_s < nbf.saturating_sub(skew_s))
    {
        return Err(refused(
            "Lifetime validation failed. The token is not yet valid.",
        ));
    }
    Ok(())
}

/// What `principal` may do on the queues of `account` (whose engine namespace is `namespace`): a Contributor
/// everywhere in development mode; else one grant per matching role assignment plus one per storage role
/// the token's `roles` claim names (those cover every queue of the account).
pub fn access(
    config: &EntraConfig,
    principal: &Principal,
    account: &str,
    namespace: &str,
) -> Access {
    let identity = principal.identity();
    if principal.dev {
        return Access {
            identity,
            grants: vec![Grant::owner_of(namespace)],
        };
    }
    let names_principal =
        |name: &str| name == principal.oid || principal.app_id.as_deref() == Some(name);
    let mut grants: Vec<Grant> = config
        .role_assignments
        .iter()
        .filter(|a| names_principal(&a.principal) && a.account.matches(account))
        .map(|a| Grant {
            namespace: Pattern::new(namespace),
            queues: a.queues.clone(),
            permissions: a.role.permissions(),
        })
        .collect();
    grants.extend(principal.token_roles.iter().map(|role| Grant {
        namespace: Pattern::new(namespace),
        queues: Pattern::any(),
        permissions: role.permissions(),
    }));
    Access { identity, grants }
}

#[cfg(test)]
mod tests {
    use super::*;
    use jsonwebtoken::{encode, EncodingKey, Header};
    use serde_json::json;

    /// A P-256 test key (PKCS#8) and its public half as a JWK.
    const TEST_KEY_PEM: &str = "-----BEGIN PRIVATE KEY-----
MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQgGu8m+VUk7NYLBi6g
j8tZiCu5C2ZaYNxWcTccsmN8W9ihRANCAAStVlVJRhfQ9bV3X+wCQZVDqIuvUYFW
ZQWZ0ydKPM7bsxexb3KrGehTDqY0uSRxfqwNm3BJ6GWiy5JxKmwFFaWq
-----END PRIVATE KEY-----
";
    const TEST_JWKS: &str = r#"{"keys": [{"kty": "EC", "crv": "P-256", "kid": "k1", "use": "sig",
        "x": "rVZVSUYX0PW1d1_sAkGVQ6iLr1GBVmUFmdMnSjzO27M",
        "y": "F7FvcqsZ6FMOpjS5JHF-rA2bcEnoZaLLknEqbAUVpao"}]}"#;
    const NOW_MS: Millis = 1_780_000_000_000;
    const ISSUER: &str = "https://sts.windows.net/tenant/";

    fn verify_config(audiences: &[&str], issuers: &[&str]) -> EntraConfig {
        EntraConfig {
            mode: EntraMode::Verify,
            keys: EntraConfig::parse_jwks(TEST_JWKS).unwrap(),
            issuers: issuers.iter().map(|s| s.to_string()).collect(),
            audiences: audiences.iter().map(|s| s.to_string()).collect(),
            ..EntraConfig::default()
        }
    }

    /// A signed token with `claims` plus an oid, a Contributor role and an hour to live.
    fn signed(mut claims: serde_json::Value) -> String {
        let exp = NOW_MS / 1000 + 3600;
        claims["oid"] = json!("principal");
        claims["exp"] = json!(exp);
        claims["roles"] = json!(["Storage Queue Data Contributor"]);
        let mut header = Header::new(Algorithm::ES256);
        header.kid = Some("k1".into());
        let key = EncodingKey::from_ec_pem(TEST_KEY_PEM.as_bytes()).unwrap();
        encode(&header, &claims, &key).unwrap()
    }

    fn verify(config: &EntraConfig, claims: serde_json::Value) -> Result<Principal, TokenRefused> {
        verify_token(config, &signed(claims), "devstoreaccount1", NOW_MS)
    }

    #[test]
    fn without_configured_audiences_a_token_for_another_application_is_refused() {
        let config = verify_config(&[], &[]);
        let refused = verify(&config, json!({"aud": "api://some-other-app"})).unwrap_err();
        assert_eq!(
            refused.0,
            "Audience validation failed. Audience did not match."
        );
    }

    #[test]
    fn without_configured_audiences_azure_storages_own_audiences_are_accepted() {
        let config = verify_config(&[], &[]);
        for aud in [
            "https://storage.azure.com",
            "https://storage.azure.com/",
            "https://devstoreaccount1.queue.core.windows.net",
            "https://devstoreaccount1.queue.core.windows.net/",
            "e406a681-f3d4-42a8-90b6-c2b029497af1",
        ] {
            let principal = verify(&config, json!({ "aud": aud })).unwrap();
            assert_eq!(principal.oid, "principal", "{aud}");
        }
        // Another account's endpoint is not this account's audience.
        let other = json!({"aud": "https://otheraccount.queue.core.windows.net"});
        assert!(verify(&config, other).is_err());
    }

    #[test]
    fn configured_audiences_replace_the_defaults() {
        let config = verify_config(&["api://veil"], &[]);
        verify(&config, json!({"aud": "api://veil"})).unwrap();
        assert!(verify(&config, json!({"aud": "https://storage.azure.com"})).is_err());
    }

    #[test]
    fn a_token_without_an_audience_is_refused_and_without_an_issuer_when_issuers_are_configured() {
        let config = verify_config(&[], &[]);
        let refused = verify(&config, json!({})).unwrap_err();
        assert_eq!(refused.0, "Token lacks the required claim aud.");
        let config = verify_config(&[], &[ISSUER]);
        let no_issuer = json!({"aud": "https://storage.azure.com"});
        let refused = verify(&config, no_issuer).unwrap_err();
        assert_eq!(refused.0, "Token lacks the required claim iss.");
        verify(
            &config,
            json!({"aud": "https://storage.azure.com", "iss": ISSUER}),
        )
        .unwrap();
    }
}
