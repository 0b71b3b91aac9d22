//! User delegation keys, pure. Get User Delegation Key answers a key for the bearer token's principal and a
//! window of at most seven days; its value is an HMAC of the key's own fields under the server's secret, so
//! Veil stores nothing and recomputes the same value when a user delegation SAS names the key — after a
//! restart too, since the secret lives in the data directory. The secret is first bound to the Entra mode and
//! trust the key was issued under ([`bound_secret`]), so a restart under other rules (dev mode's unverified
//! tokens, then verify mode) invalidates the keys (docs/security.md, "Azure Queue Storage").

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use hmac::{Hmac, Mac};
use sha2::Sha256;
use veil_core::Millis;

use crate::api::UserDelegationKey;
use crate::auth::SignedKey;
use crate::entra::{EntraConfig, EntraMode};
use crate::error::{AzureError, AzureResult, ErrorCode};
use crate::limits;
use crate::time::{iso8601, parse_iso8601};

/// Separates this use of the server's secret from every other.
const KEY_LABEL: &str = "veil azure user delegation key v1";
/// Separates the binding of the secret to the Entra trust from every other use of the server's secret.
const BINDING_LABEL: &str = "veil azure user delegation trust v1";

/// Feeds `parts` to `mac`, each length-prefixed, so no two different lists hash the same bytes.
fn update_parts<'a>(mac: &mut Hmac<Sha256>, parts: impl IntoIterator<Item = &'a str>) {
    for part in parts {
        mac.update(&(part.len() as u64).to_be_bytes());
        mac.update(part.as_bytes());
    }
}

/// What a key's principal was proven with: the mode, and in verify mode the issuers and signing keys (JWKS)
/// tokens were checked against, each list sorted so its order in the config does not matter.
fn trust(entra: &EntraConfig) -> Vec<String> {
    let mode = match entra.mode {
        EntraMode::Off => "off",
        EntraMode::Dev => "dev",
        EntraMode::Verify => "verify",
    };
    let mut parts = vec![mode.to_string()];
    if entra.mode == EntraMode::Verify {
        let mut issuers = entra.issuers.clone();
        issuers.sort();
        // A JWK serializes to the same text for the same key; the count separates issuers from keys.
        let mut keys: Vec<String> = entra
            .keys
            .iter()
            .map(|jwk| serde_json::to_string(jwk).unwrap_or_default())
            .collect();
        keys.sort();
        parts.push(issuers.len().to_string());
        parts.extend(issuers);
        parts.extend(keys);
    }
    parts
}

/// The secret user delegation keys are derived from: the server's secret bound to the Entra mode, issuers
/// and JWKS they are issued under. A key minted in dev mode with a forged token — or under another JWKS or
/// issuer list — then has another value under the rules in force, and its SAS fails its signature check.
pub fn bound_secret(secret: &[u8], entra: &EntraConfig) -> Vec<u8> {
    let mut mac =
        <Hmac<Sha256> as Mac>::new_from_slice(secret).expect("HMAC accepts any key length");
    let trust = trust(entra);
    update_parts(
        &mut mac,
        std::iter::once(BINDING_LABEL).chain(trust.iter().map(String::as_str)),
    );
    mac.finalize().into_bytes().to_vec()
}

/// The key's raw value: HMAC-SHA256 under `secret` (a [`bound_secret`]) of the account and every field the
/// key is issued with.
pub fn key_value(secret: &[u8], account: &str, key: &SignedKey) -> Vec<u8> {
    let mut mac =
        <Hmac<Sha256> as Mac>::new_from_slice(secret).expect("HMAC accepts any key length");
    update_parts(
        &mut mac,
        [
            KEY_LABEL,
            account,
            &key.oid,
            &key.tid,
            &key.start,
            &key.expiry,
            &key.service,
            &key.version,
            key.delegated_user_tid.as_deref().unwrap_or(""),
        ],
    );
    mac.finalize().into_bytes().to_vec()
}

/// ISO 8601 UTC to the second (`2026-11-30T22:00:00Z`), as Azure writes the key's times.
fn iso8601_seconds(ms: Millis) -> String {
    let full = iso8601(ms);
    format!("{}Z", &full[..full.len().min(19)])
}

fn invalid_time(name: &str, value: &str, reason: &str) -> AzureError {
    // Azure answers the default message and names the offending value as both the node's name and its
    // value; Veil says why in its log.
    tracing::debug!(node = name, value, reason, "user delegation key refused");
    AzureError::new(ErrorCode::InvalidXmlNodeValue)
        .detail("XmlNodeName", value)
        .detail("XmlNodeValue", value)
}

/// What a key is issued for.
pub struct KeyRequest<'a> {
    pub account: &'a str,
    pub oid: &'a str,
    pub tid: &'a str,
    pub start: Option<&'a str>,
    pub expiry: &'a str,
    pub delegated_user_tid: Option<&'a str>,
    /// The request's `x-ms-version`, which the key carries as its signed version.
    pub version: &'a str,
    pub now: Millis,
}

/// Issues a key: the expiry must follow the start and lie within seven days of now.
pub fn issue(secret: &[u8], request: &KeyRequest<'_>) -> AzureResult<UserDelegationKey> {
    let start_ms = match request.start {
        Some(start) => parse_iso8601(start)
            .ok_or_else(|| invalid_time("Start", start, "not an ISO 8601 UTC time"))?,
        None => request.now,
    };
    let expiry_ms = parse_iso8601(request.expiry)
        .ok_or_else(|| invalid_time("Expiry", request.expiry, "not an ISO 8601 UTC time"))?;
    if expiry_ms <= start_ms || expiry_ms <= request.now {
        return Err(invalid_time(
            "Expiry",
            request.expiry,
            "the expiry must be later than the start and than now",
        ));
    }
    if expiry_ms > request.now + limits::USER_DELEGATION_KEY_LIFETIME_MS_MAX {
        return Err(invalid_time(
            "Expiry",
            request.expiry,
            "a user delegation key is valid at most seven days from now",
        ));
    }
    let key = SignedKey {
        oid: request.oid.to_string(),
        tid: request.tid.to_string(),
        start: iso8601_seconds(start_ms),
        expiry: iso8601_seconds(expiry_ms),
        service: limits::USER_DELEGATION_SERVICE.to_string(),
        version: request.version.to_string(),
        delegated_user_tid: request.delegated_user_tid.map(str::to_string),
    };
    let value = STANDARD.encode(key_value(secret, request.account, &key));
    Ok(UserDelegationKey {
        signed_oid: key.oid,
        signed_tid: key.tid,
        signed_start: key.start,
        signed_expiry: key.expiry,
        signed_service: key.service,
        signed_version: key.version,
        signed_delegated_user_tid: key.delegated_user_tid,
        value,
    })
}

/// Checks the key a user delegation SAS names before its signature is: issued for the queue service and
/// valid now. Returns the key's value to verify the signature with.
pub fn verify_key(
    secret: &[u8],
    account: &str,
    key: &SignedKey,
    now: Millis,
) -> AzureResult<Vec<u8>> {
    if !key.service.contains(limits::USER_DELEGATION_SERVICE) {
        return Err(AzureError::new(ErrorCode::AuthorizationServiceMismatch));
    }
    let start = parse_iso8601(&key.start).ok_or_else(|| {
        AzureError::authentication(format!(
            "Signature fields not well formed: skt={} is not an ISO 8601 UTC time.",
            key.start
        ))
    })?;
    let expiry = parse_iso8601(&key.expiry).ok_or_else(|| {
        AzureError::authentication(format!(
            "Signature fields not well formed: ske={} is not an ISO 8601 UTC time.",
            key.expiry
        ))
    })?;
    if now < start || now >= expiry {
        return Err(AzureError::authentication(
            "The user delegation key of the signature is not valid at the current time.",
        ));
    }
    Ok(key_value(secret, account, key))
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: Millis = 1_780_000_000_000;

    fn request(expiry: &str) -> KeyRequest<'_> {
        KeyRequest {
            account: "devstoreaccount1",
            oid: "oid-1",
            tid: "tid-1",
            start: None,
            expiry,
            delegated_user_tid: None,
            version: "2026-04-06",
            now: NOW,
        }
    }

    fn signed(key: &UserDelegationKey) -> SignedKey {
        SignedKey {
            oid: key.signed_oid.clone(),
            tid: key.signed_tid.clone(),
            start: key.signed_start.clone(),
            expiry: key.signed_expiry.clone(),
            service: key.signed_service.clone(),
            version: key.signed_version.clone(),
            delegated_user_tid: key.signed_delegated_user_tid.clone(),
        }
    }

    #[test]
    fn a_key_is_recomputed_from_its_fields_and_the_secret_alone() {
        let expiry = iso8601_seconds(NOW + 3_600_000);
        let key = issue(b"secret", &request(&expiry)).unwrap();
        let value = verify_key(b"secret", "devstoreaccount1", &signed(&key), NOW + 1).unwrap();
        assert_eq!(STANDARD.encode(value), key.value);
        let other = verify_key(b"other", "devstoreaccount1", &signed(&key), NOW + 1).unwrap();
        assert_ne!(STANDARD.encode(other), key.value);
        let mut changed = signed(&key);
        changed.oid = "oid-2".into();
        let changed = verify_key(b"secret", "devstoreaccount1", &changed, NOW + 1).unwrap();
        assert_ne!(STANDARD.encode(changed), key.value);
    }

    #[test]
    fn a_key_lives_at_most_seven_days_and_is_refused_outside_its_window() {
        let too_long = iso8601_seconds(NOW + limits::USER_DELEGATION_KEY_LIFETIME_MS_MAX + 60_000);
        assert_eq!(
            issue(b"s", &request(&too_long)).unwrap_err().code,
            ErrorCode::InvalidXmlNodeValue
        );
        let past = iso8601_seconds(NOW - 60_000);
        assert!(issue(b"s", &request(&past)).is_err());
        let expiry = iso8601_seconds(NOW + 60_000);
        let key = issue(b"s", &request(&expiry)).unwrap();
        let error = verify_key(b"s", "devstoreaccount1", &signed(&key), NOW + 61_000).unwrap_err();
        assert_eq!(error.code, ErrorCode::AuthenticationFailed);
    }

    fn entra(mode: EntraMode, issuers: &[&str], jwks: &str) -> EntraConfig {
        EntraConfig {
            mode,
            keys: EntraConfig::parse_jwks(jwks).unwrap(),
            issuers: issuers.iter().map(|s| s.to_string()).collect(),
            ..EntraConfig::default()
        }
    }

    const JWKS_A: &str = r#"{"keys": [{"kty": "RSA", "kid": "a", "n": "sXch", "e": "AQAB"}]}"#;
    const JWKS_B: &str = r#"{"keys": [{"kty": "RSA", "kid": "b", "n": "oaGh", "e": "AQAB"}]}"#;

    #[test]
    fn a_key_issued_in_dev_mode_does_not_verify_in_verify_mode() {
        let dev = bound_secret(
            b"data dir secret",
            &entra(EntraMode::Dev, &[], "{\"keys\": []}"),
        );
        let expiry = iso8601_seconds(NOW + 3_600_000);
        let key = issue(&dev, &request(&expiry)).unwrap();
        let verify = entra(EntraMode::Verify, &["https://sts.windows.net/t/"], JWKS_A);
        let verify = bound_secret(b"data dir secret", &verify);
        let value = verify_key(&verify, "devstoreaccount1", &signed(&key), NOW + 1).unwrap();
        assert_ne!(STANDARD.encode(value), key.value);
        let off = bound_secret(b"data dir secret", &EntraConfig::default());
        let value = verify_key(&off, "devstoreaccount1", &signed(&key), NOW + 1).unwrap();
        assert_ne!(STANDARD.encode(value), key.value);
    }

    #[test]
    fn a_key_is_bound_to_the_jwks_and_issuers_of_verify_mode_but_not_their_order() {
        let issuers = [
            "https://sts.windows.net/t/",
            "https://login.microsoftonline.com/t/v2.0",
        ];
        let reversed = [issuers[1], issuers[0]];
        let bound =
            |issuers: &[&str], jwks| bound_secret(b"s", &entra(EntraMode::Verify, issuers, jwks));
        assert_eq!(
            bound(&issuers, JWKS_A),
            bound(&reversed, JWKS_A),
            "a restart, same trust"
        );
        assert_ne!(
            bound(&issuers, JWKS_A),
            bound(&issuers, JWKS_B),
            "another JWKS"
        );
        assert_ne!(
            bound(&issuers, JWKS_A),
            bound(&issuers[..1], JWKS_A),
            "other issuers"
        );
        assert_ne!(
            bound(&issuers, JWKS_A),
            bound_secret(b"s", &entra(EntraMode::Dev, &issuers, JWKS_A))
        );
    }
}
