//! AWS Signature Version 4, verified (docs/security.md, "SQS"). Pure: it reads the request's method, raw path
//! and query, headers and body, and the time the caller passes in; it never reads a clock.
//!
//! Two steps, because the secret is looked up between them: [`parse`] reads what the request claims (the
//! `Authorization` header, or the `X-Amz-*` parameters of a presigned query string) and [`verify`] rebuilds
//! the canonical request by AWS's rules, derives the signing key (`AWS4<secret>` → date → region → service →
//! `aws4_request`), compares the signatures in constant time and checks the time: 15 minutes of clock skew
//! either way for a signed header, the `X-Amz-Expires` window for a presigned URL.
//!
//! The canonical request, as the SDKs build it for every service but S3: the method; the path with its dot
//! segments removed and percent-encoded once more (so an encoded `%2F` is `%252F`); the query's parameters
//! decoded, re-encoded with only unreserved characters left bare, sorted by name then value (a presigned
//! request's own `X-Amz-Signature` left out); each signed header's values, trimmed, inner whitespace collapsed
//! and joined by commas; the signed header names; and the payload hash — the hex SHA-256 of the body, or the
//! value of `x-amz-content-sha256` when the client sent `UNSIGNED-PAYLOAD` there.

use crate::digest_hex::Hex32;
use axum::http::HeaderMap;
use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;
use time::format_description::BorrowedFormatItem;
use time::macros::format_description;
use time::{OffsetDateTime, PrimitiveDateTime};
use veil_core::Millis;

use crate::limits::{
    SIGV4_CLOCK_SKEW_MS_MAX, SIGV4_PRESIGNED_EXPIRES_S_MAX, SIGV4_SIGNED_HEADERS_MAX,
    SIGV4_SIGNING_KEYS_CACHED_MAX,
};

pub const ALGORITHM: &str = "AWS4-HMAC-SHA256";
/// The last part of every credential scope.
const SCOPE_TERMINATOR: &str = "aws4_request";
/// The service name SQS signs with.
pub const SERVICE: &str = "sqs";
pub const UNSIGNED_PAYLOAD: &str = "UNSIGNED-PAYLOAD";

/// The parts of a request the signature covers.
pub struct SignedRequest<'a> {
    pub method: &'a str,
    /// The path as sent, still percent-encoded.
    pub path: &'a str,
    /// The query as sent (without `?`), still percent-encoded.
    pub query: Option<&'a str>,
    pub headers: &'a HeaderMap,
    pub body: &'a [u8],
}

/// How the request carries its signature.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Carrier {
    /// The `Authorization` header.
    Header,
    /// A presigned URL's query string, valid this many seconds after its `X-Amz-Date`.
    Query { expires_s: u64 },
}

/// What a request claims about its signature, before any secret is known.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Claim {
    pub access_key: String,
    /// `YYYYMMDD` of the credential scope.
    pub scope_date: String,
    pub region: String,
    pub service: String,
    /// Lower-case header names, as listed (`SignedHeaders`).
    pub signed_headers: Vec<String>,
    /// Hex, as sent.
    pub signature: String,
    /// `YYYYMMDDTHHMMSSZ`: `X-Amz-Date`, else the `Date` header converted.
    pub timestamp: String,
    /// `X-Amz-Security-Token`, from the header or the query.
    pub security_token: Option<String>,
    pub carrier: Carrier,
}

/// Why a request's signature is refused; the service renders each as AWS's error (docs/security.md).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SigV4Error {
    /// Neither an `Authorization` header nor a presigned query string.
    #[error("missing authentication")]
    Missing,
    /// A signature that cannot be read; the message is AWS's.
    #[error("incomplete signature: {0}")]
    Incomplete(String),
    /// Well formed but wrong: the signature, the scope or the time; the message is AWS's.
    #[error("signature does not match: {0}")]
    Mismatch(String),
    /// A presigned URL past its `X-Amz-Expires`.
    #[error("presigned request expired")]
    Expired,
    /// A request that carries something its signature does not cover and that would change what it asks
    /// for: an unsigned `X-Amz-Target` on any signed request, an unsigned body on a presigned one
    /// (docs/security.md, "SQS").
    #[error("presigned request carries an unsigned {0:?}")]
    Unsigned(UnsignedPart),
}

/// What a presigned request may not add to its signed URL: the action and parameters come from the signed
/// parts alone, so that holding a URL signed for one request does not let anyone make another.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UnsignedPart {
    /// `X-Amz-Target` (it names the action and selects the JSON protocol) left out of `X-Amz-SignedHeaders`.
    Target,
    /// A body under `UNSIGNED-PAYLOAD` (in the Query protocol its form parameters join the URL's; in the JSON
    /// protocol it holds every parameter).
    Body,
}

/// The header that names a JSON-protocol request's action.
const TARGET_HEADER: &str = "x-amz-target";

/// AWS's text for a signature that does not match.
pub const MISMATCH_MESSAGE: &str = "The request signature we calculated does not match the signature you provided. Check your AWS Secret Access Key and signing method. Consult the service documentation for details.";

fn header<'h>(headers: &'h HeaderMap, name: &str) -> Option<&'h str> {
    headers.get(name).and_then(|value| value.to_str().ok())
}

/// Reads the signature a request claims: the `Authorization` header when there is one, else the presigned
/// query string's `X-Amz-*` parameters.
pub fn parse(request: &SignedRequest<'_>) -> Result<Claim, SigV4Error> {
    if let Some(authorization) = header(request.headers, "authorization") {
        return parse_header(authorization, request.headers);
    }
    let params = query_params(request.query.unwrap_or(""));
    if params.iter().any(|(name, _)| name == "X-Amz-Algorithm") {
        return parse_presigned(&params);
    }
    Err(SigV4Error::Missing)
}

fn parse_header(authorization: &str, headers: &HeaderMap) -> Result<Claim, SigV4Error> {
    let Some(rest) = authorization.trim().strip_prefix(ALGORITHM) else {
        return Err(SigV4Error::Incomplete(format!(
            "Unsupported Authorization Type. Authorization={authorization}"
        )));
    };
    let mut credential = None;
    let mut signed_headers = None;
    let mut signature = None;
    for part in rest.split(',') {
        let Some((name, value)) = part.trim().split_once('=') else {
            continue;
        };
        match name.trim() {
            "Credential" => credential = Some(value.trim()),
            "SignedHeaders" => signed_headers = Some(value.trim()),
            "Signature" => signature = Some(value.trim()),
            _ => {}
        }
    }
    let timestamp = match header(headers, "x-amz-date") {
        Some(date) => Some(date.trim().to_string()),
        None => header(headers, "date").and_then(http_date_to_amz),
    };
    // AWS lists every missing part in one message, then quotes the header.
    let mut missing = String::new();
    for (part, present) in [
        ("Credential", credential.is_some()),
        ("Signature", signature.is_some()),
        ("SignedHeaders", signed_headers.is_some()),
    ] {
        if !present {
            missing.push_str(&format!(
                "Authorization header requires '{part}' parameter. "
            ));
        }
    }
    if timestamp.is_none() {
        missing.push_str(
            "Authorization header requires existence of either a 'X-Amz-Date' or a 'Date' header. ",
        );
    }
    if !missing.is_empty() {
        return Err(SigV4Error::Incomplete(format!(
            "{missing}Authorization={authorization}"
        )));
    }
    let (Some(credential), Some(signed_headers), Some(signature), Some(timestamp)) =
        (credential, signed_headers, signature, timestamp)
    else {
        return Err(SigV4Error::Incomplete(format!(
            "Authorization={authorization}"
        )));
    };
    Claim::read(
        credential,
        signed_headers,
        signature,
        timestamp,
        header(headers, "x-amz-security-token"),
        Carrier::Header,
    )
}

fn parse_presigned(params: &[(String, String)]) -> Result<Claim, SigV4Error> {
    let get = |name: &str| {
        params
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, value)| value.as_str())
    };
    let required = |name: &str| {
        get(name).ok_or_else(|| {
            SigV4Error::Incomplete(format!(
                "AWS query-string parameters must include '{name}'. Re-examine the query-string parameters."
            ))
        })
    };
    let algorithm = required("X-Amz-Algorithm")?;
    if algorithm != ALGORITHM {
        return Err(SigV4Error::Incomplete(format!(
            "X-Amz-Algorithm only supports \"{ALGORITHM}\""
        )));
    }
    let credential = required("X-Amz-Credential")?;
    let signature = required("X-Amz-Signature")?;
    let signed_headers = required("X-Amz-SignedHeaders")?;
    let timestamp = required("X-Amz-Date")?;
    let expires = required("X-Amz-Expires")?;
    let expires_s = expires
        .parse::<u64>()
        .ok()
        .filter(|s| *s <= SIGV4_PRESIGNED_EXPIRES_S_MAX)
        .ok_or_else(|| {
            SigV4Error::Incomplete(format!(
                "X-Amz-Expires must be a number of seconds from 0 to {SIGV4_PRESIGNED_EXPIRES_S_MAX}"
            ))
        })?;
    Claim::read(
        credential,
        signed_headers,
        signature,
        timestamp.to_string(),
        get("X-Amz-Security-Token"),
        Carrier::Query { expires_s },
    )
}

impl Claim {
    /// A claim from its fields as either carrier spells them (`Credential=` scope, `SignedHeaders=` list).
    fn read(
        credential: &str,
        signed_headers: &str,
        signature: &str,
        timestamp: String,
        security_token: Option<&str>,
        carrier: Carrier,
    ) -> Result<Claim, SigV4Error> {
        let scope = parse_scope(credential)?;
        Ok(Claim {
            access_key: scope.access_key,
            scope_date: scope.date,
            region: scope.region,
            service: scope.service,
            signed_headers: parse_signed_headers(signed_headers)?,
            signature: signature.to_string(),
            timestamp,
            security_token: security_token.map(str::to_string),
            carrier,
        })
    }
}

/// The parts of `Credential=<access key>/<date>/<region>/<service>/aws4_request`.
struct Scope {
    access_key: String,
    date: String,
    region: String,
    service: String,
}

/// `AKID/20240101/us-east-1/sqs/aws4_request` → (key, date, region, service).
fn parse_scope(credential: &str) -> Result<Scope, SigV4Error> {
    let parts: Vec<&str> = credential.split('/').collect();
    match parts.as_slice() {
        [key, date, region, service, terminator]
            if !key.is_empty() && !region.is_empty() && date.len() == 8 =>
        {
            // The region becomes part of a namespace (a store key): AWS's shape, or the request is refused
            // before anything is stored under it (docs/security.md "Identifiers").
            if !crate::namespace::valid_region(region) {
                return Err(SigV4Error::Mismatch(format!(
                    "Credential should be scoped to a valid region, not '{}'.",
                    region.escape_default()
                )));
            }
            if *terminator != SCOPE_TERMINATOR {
                return Err(SigV4Error::Mismatch(format!(
                    "Credential should be scoped with a valid terminator: '{SCOPE_TERMINATOR}', not '{terminator}'."
                )));
            }
            Ok(Scope {
                access_key: key.to_string(),
                date: date.to_string(),
                region: region.to_string(),
                service: service.to_string(),
            })
        }
        _ => Err(SigV4Error::Incomplete(format!(
            "Credential should be scoped to a valid region, service and date. Credential={credential}"
        ))),
    }
}

fn parse_signed_headers(list: &str) -> Result<Vec<String>, SigV4Error> {
    let names: Vec<String> = list
        .split(';')
        .map(|name| name.trim().to_ascii_lowercase())
        .filter(|name| !name.is_empty())
        .collect();
    if names.is_empty() || names.len() > SIGV4_SIGNED_HEADERS_MAX {
        return Err(SigV4Error::Incomplete(format!(
            "SignedHeaders must list from 1 to {SIGV4_SIGNED_HEADERS_MAX} headers. SignedHeaders={list}"
        )));
    }
    if !names.iter().any(|name| name == "host") {
        return Err(SigV4Error::Incomplete(
            "'Host' or ':authority' must be a 'SignedHeader' in the AWS Authorization.".into(),
        ));
    }
    Ok(names)
}

/// Checks a claim against the secret it names, at `now` (Unix milliseconds, the engine's clock).
/// Signing keys already derived, by secret, date, region and service: a client signs every request of a day
/// with one key, and deriving it is four HMACs. The secret is part of what a key is found by, so a changed
/// secret derives anew. A claim's date and region are cached before its signature is checked, so the cache
/// is bounded ([`SIGV4_SIGNING_KEYS_CACHED_MAX`]) and starts over when full. A hit allocates nothing: keys are
/// found by a hash of the four strings, and the entry's own strings are compared before it is used.
#[derive(Default)]
pub struct SigningKeys {
    /// Locked only to look up or insert; the derivation happens outside.
    keys: std::sync::Mutex<std::collections::HashMap<u64, (KeyScope, [u8; 32])>>,
    hasher: std::collections::hash_map::RandomState,
}

#[derive(PartialEq, Eq)]
struct KeyScope {
    secret: String,
    date: String,
    region: String,
    service: String,
}

impl KeyScope {
    fn is(&self, secret: &str, claim: &Claim) -> bool {
        self.secret == secret
            && self.date == claim.scope_date
            && self.region == claim.region
            && self.service == claim.service
    }
}

impl SigningKeys {
    fn key(&self, secret: &str, claim: &Claim) -> [u8; 32] {
        use std::hash::BuildHasher;
        let found_by = self.hasher.hash_one((
            secret,
            claim.scope_date.as_str(),
            claim.region.as_str(),
            claim.service.as_str(),
        ));
        let cached = self.keys.lock().ok().and_then(|keys| {
            keys.get(&found_by)
                .filter(|(scope, _)| scope.is(secret, claim))
                .map(|(_, key)| *key)
        });
        if let Some(key) = cached {
            return key;
        }
        let key = signing_key(secret, &claim.scope_date, &claim.region, &claim.service);
        let scope = KeyScope {
            secret: secret.to_owned(),
            date: claim.scope_date.clone(),
            region: claim.region.clone(),
            service: claim.service.clone(),
        };
        if let Ok(mut keys) = self.keys.lock() {
            if keys.len() >= SIGV4_SIGNING_KEYS_CACHED_MAX {
                keys.clear();
            }
            keys.insert(found_by, (scope, key));
        }
        key
    }
}

pub fn verify(
    request: &SignedRequest<'_>,
    claim: &Claim,
    secret: &str,
    keys: &SigningKeys,
    now: Millis,
) -> Result<(), SigV4Error> {
    if claim.service != SERVICE {
        return Err(SigV4Error::Mismatch(format!(
            "Credential should be scoped to correct service: '{SERVICE}'. "
        )));
    }
    let signed_at = amz_to_millis(&claim.timestamp).ok_or_else(|| {
        SigV4Error::Incomplete(format!(
            "Date must be in ISO-8601 'basic format'. Got '{}'. See http://en.wikipedia.org/wiki/ISO_8601",
            claim.timestamp
        ))
    })?;
    if !claim.timestamp.starts_with(&claim.scope_date) {
        return Err(SigV4Error::Mismatch(format!(
            "Date in Credential scope does not match YYYYMMDD from ISO-8601 version of date from HTTP: '{}' != '{}', from '{}'.",
            claim.scope_date,
            &claim.timestamp[..8],
            claim.timestamp
        )));
    }
    check_time(claim, signed_at, now)?;
    let given = claim.signature.to_ascii_lowercase();
    let key = keys.key(secret, claim);
    let matches = |payload_hash: &str| {
        signature_with(request, claim, &key, payload_hash)
            .as_str()
            .as_bytes()
            .ct_eq(given.as_bytes())
    };
    let body_hash = Hex32::of(Sha256::digest(request.body).into());
    match claim.carrier {
        Carrier::Header => {
            let payload = match header(request.headers, "x-amz-content-sha256") {
                Some(UNSIGNED_PAYLOAD) => UNSIGNED_PAYLOAD,
                _ => body_hash.as_str(),
            };
            if !bool::from(matches(payload)) {
                return Err(SigV4Error::Mismatch(MISMATCH_MESSAGE.into()));
            }
            // The same rule as a presigned URL's: the action comes from what is signed (every SDK signs
            // X-Amz-Target), so a captured request cannot be replayed as another action.
            target_covered(request, claim)
        }
        // A presigned URL covers the body's hash as most SDKs presign, or `UNSIGNED-PAYLOAD` as the others
        // (botocore's `SigV4QueryAuth`). Both are computed, so the time taken does not tell which matched.
        Carrier::Query { .. } => {
            let body_signed = matches(body_hash.as_str());
            let unsigned = matches(UNSIGNED_PAYLOAD);
            if !bool::from(body_signed | unsigned) {
                return Err(SigV4Error::Mismatch(MISMATCH_MESSAGE.into()));
            }
            presigned_coverage(request, claim, bool::from(body_signed))
        }
    }
}

/// A presigned request's action and parameters come from what its signature covers: its URL, the headers it
/// lists, and its body only when the body's hash was signed. So a presigned URL handed to someone lets them
/// make that one request, not another: an `X-Amz-Target` it does not sign, or a body it does not sign, is
/// refused rather than read (docs/security.md, "SQS").
fn presigned_coverage(
    request: &SignedRequest<'_>,
    claim: &Claim,
    body_signed: bool,
) -> Result<(), SigV4Error> {
    target_covered(request, claim)?;
    if !body_signed && !request.body.is_empty() {
        return Err(SigV4Error::Unsigned(UnsignedPart::Body));
    }
    Ok(())
}

/// An `X-Amz-Target` names the action of a JSON-protocol request: when the request carries one, its
/// signature must cover it.
fn target_covered(request: &SignedRequest<'_>, claim: &Claim) -> Result<(), SigV4Error> {
    let target_signed = claim
        .signed_headers
        .iter()
        .any(|name| name == TARGET_HEADER);
    if request.headers.contains_key(TARGET_HEADER) && !target_signed {
        return Err(SigV4Error::Unsigned(UnsignedPart::Target));
    }
    Ok(())
}

/// AWS's clock rules: a signed header may be 15 minutes off either way; a presigned URL may not be dated in
/// the future beyond the same skew, and is good for `X-Amz-Expires` seconds after its date.
fn check_time(claim: &Claim, signed_at: Millis, now: Millis) -> Result<(), SigV4Error> {
    let skew_minutes = SIGV4_CLOCK_SKEW_MS_MAX / 60_000;
    if signed_at > now.saturating_add(SIGV4_CLOCK_SKEW_MS_MAX) {
        return Err(SigV4Error::Mismatch(format!(
            "Signature not yet current: {} is still later than {} ({} + {skew_minutes} min.)",
            claim.timestamp,
            millis_to_amz(now + SIGV4_CLOCK_SKEW_MS_MAX),
            millis_to_amz(now),
        )));
    }
    match claim.carrier {
        Carrier::Header => {
            if signed_at.saturating_add(SIGV4_CLOCK_SKEW_MS_MAX) < now {
                return Err(SigV4Error::Mismatch(format!(
                    "Signature expired: {} is now earlier than {} ({} - {skew_minutes} min.)",
                    claim.timestamp,
                    millis_to_amz(now - SIGV4_CLOCK_SKEW_MS_MAX),
                    millis_to_amz(now),
                )));
            }
        }
        Carrier::Query { expires_s } => {
            if signed_at.saturating_add(expires_s.saturating_mul(1_000)) < now {
                return Err(SigV4Error::Expired);
            }
        }
    }
    Ok(())
}

/// The signature the claim should carry, hex.
pub fn signature_of(
    request: &SignedRequest<'_>,
    claim: &Claim,
    secret: &str,
    payload_hash: &str,
) -> String {
    let key = signing_key(secret, &claim.scope_date, &claim.region, &claim.service);
    signature_with(request, claim, &key, payload_hash)
        .as_str()
        .to_owned()
}

fn signature_with(
    request: &SignedRequest<'_>,
    claim: &Claim,
    key: &[u8; 32],
    payload_hash: &str,
) -> Hex32 {
    let canonical = canonical_request(request, claim, payload_hash);
    let to_sign = string_to_sign(claim, &canonical);
    Hex32::of(hmac(key, to_sign.as_bytes()))
}

pub fn canonical_request(request: &SignedRequest<'_>, claim: &Claim, payload_hash: &str) -> String {
    let mut out = String::with_capacity(256 + request.path.len());
    out.push_str(request.method);
    out.push('\n');
    out.push_str(&canonical_uri(request.path));
    out.push('\n');
    out.push_str(&canonical_query(
        request.query.unwrap_or(""),
        matches!(claim.carrier, Carrier::Query { .. }),
    ));
    out.push('\n');
    for name in &claim.signed_headers {
        out.push_str(name);
        out.push(':');
        for (i, value) in request.headers.get_all(name.as_str()).iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            push_collapsed(&mut out, &String::from_utf8_lossy(value.as_bytes()));
        }
        out.push('\n');
    }
    out.push('\n');
    out.push_str(&claim.signed_headers.join(";"));
    out.push('\n');
    out.push_str(payload_hash);
    out
}

/// Written piece by piece rather than with `format!`, whose machinery cost more than the pieces (this runs for
/// every request).
fn string_to_sign(claim: &Claim, canonical_request: &str) -> String {
    let hash = Hex32::of(Sha256::digest(canonical_request.as_bytes()).into());
    let pieces = [
        ALGORITHM,
        "\n",
        &claim.timestamp,
        "\n",
        &claim.scope_date,
        "/",
        &claim.region,
        "/",
        &claim.service,
        "/",
        SCOPE_TERMINATOR,
        "\n",
        hash.as_str(),
    ];
    let mut out = String::with_capacity(pieces.iter().map(|piece| piece.len()).sum());
    for piece in pieces {
        out.push_str(piece);
    }
    out
}

pub fn signing_key(secret: &str, date: &str, region: &str, service: &str) -> [u8; 32] {
    let k_date = hmac(format!("AWS4{secret}").as_bytes(), date.as_bytes());
    let k_region = hmac(&k_date, region.as_bytes());
    let k_service = hmac(&k_region, service.as_bytes());
    hmac(&k_service, SCOPE_TERMINATOR.as_bytes())
}

fn hmac(key: &[u8], data: &[u8]) -> [u8; 32] {
    // HMAC takes keys of any length, so `new_from_slice` cannot fail.
    let mut mac = match Hmac::<Sha256>::new_from_slice(key) {
        Ok(mac) => mac,
        Err(_) => return [0; 32],
    };
    mac.update(data);
    mac.finalize().into_bytes().into()
}

/// Appends `value` trimmed, each run of inner whitespace one space: written in place, as this runs for every
/// signed header of every request.
fn push_collapsed(out: &mut String, value: &str) {
    for (i, word) in value.split_whitespace().enumerate() {
        if i > 0 {
            out.push(' ');
        }
        out.push_str(word);
    }
}

/// Percent-encodes every byte but the unreserved ones (`A-Z a-z 0-9 - _ . ~`), and `/` when `keep_slash`.
fn uri_encode(bytes: &[u8], keep_slash: bool) -> String {
    let mut out = String::with_capacity(bytes.len());
    for &b in bytes {
        if b.is_ascii_alphanumeric()
            || matches!(b, b'-' | b'_' | b'.' | b'~')
            || (keep_slash && b == b'/')
        {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// The path with `.` and `..` segments removed (RFC 3986), then encoded once more, as the SDKs sign it for
/// every service but S3. An empty path is `/`.
fn canonical_uri(path: &str) -> String {
    let mut segments: Vec<&str> = Vec::new();
    let trailing = path.ends_with('/') || path.ends_with("/.") || path.ends_with("/..");
    for segment in path.split('/') {
        match segment {
            "" | "." => {}
            ".." => {
                segments.pop();
            }
            other => segments.push(other),
        }
    }
    let mut normalized = String::from("/");
    normalized.push_str(&segments.join("/"));
    if trailing && !segments.is_empty() {
        normalized.push('/');
    }
    uri_encode(normalized.as_bytes(), true)
}

/// A query's parameters, percent-decoded (a `+` stays a `+`: SigV4 clients encode spaces as `%20`).
fn query_params(query: &str) -> Vec<(String, String)> {
    query
        .split('&')
        .filter(|pair| !pair.is_empty())
        .map(|pair| {
            let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
            (percent_decode(name), percent_decode(value))
        })
        .collect()
}

fn percent_decode(text: &str) -> String {
    percent_encoding::percent_decode_str(text)
        .decode_utf8_lossy()
        .into_owned()
}

fn canonical_query(query: &str, presigned: bool) -> String {
    let mut pairs: Vec<(String, String)> = query_params(query)
        .into_iter()
        .filter(|(name, _)| !(presigned && name == "X-Amz-Signature"))
        .map(|(name, value)| {
            (
                uri_encode(name.as_bytes(), false),
                uri_encode(value.as_bytes(), false),
            )
        })
        .collect();
    pairs.sort();
    pairs
        .iter()
        .map(|(name, value)| format!("{name}={value}"))
        .collect::<Vec<_>>()
        .join("&")
}

/// The SigV4 timestamp form, `YYYYMMDDTHHMMSSZ` (always UTC).
const AMZ_DATE: &[BorrowedFormatItem<'static>] =
    format_description!("[year][month][day]T[hour][minute][second]Z");

/// `YYYYMMDDTHHMMSSZ` → Unix milliseconds; `None` for anything else, an impossible date included.
fn amz_to_millis(text: &str) -> Option<Millis> {
    let time = PrimitiveDateTime::parse(text, AMZ_DATE).ok()?.assume_utc();
    u64::try_from(time.unix_timestamp()).ok().map(|s| s * 1_000)
}

/// Unix milliseconds → `YYYYMMDDTHHMMSSZ`.
fn millis_to_amz(millis: Millis) -> String {
    i64::try_from(millis / 1_000)
        .ok()
        .and_then(|seconds| OffsetDateTime::from_unix_timestamp(seconds).ok())
        .and_then(|time| time.format(AMZ_DATE).ok())
        .unwrap_or_default()
}

/// An RFC 7231 `Date` header → `YYYYMMDDTHHMMSSZ`.
fn http_date_to_amz(text: &str) -> Option<String> {
    let time = httpdate::parse_http_date(text.trim()).ok()?;
    let millis = time.duration_since(std::time::UNIX_EPOCH).ok()?.as_millis();
    Some(millis_to_amz(Millis::try_from(millis).ok()?))
}

#[cfg(test)]
mod tests;
