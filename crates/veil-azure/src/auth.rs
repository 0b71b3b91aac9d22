//! Authentication, pure: Shared Key (`Authorization: SharedKey <account>:<signature>`) and shared access
//! signatures (account SAS and queue SAS), verified with HMAC-SHA256 over exactly the strings Azure defines
//! (docs/semantics.md §Azure), and the permissions each SAS grants per operation. The service supplies the
//! account key, the clock's `now` and, for a queue SAS naming a stored access policy, the queue's ACL.

use std::cmp::Ordering;
use std::net::IpAddr;

use axum::http::HeaderMap;
use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use hmac::{Hmac, Mac};
use sha2::Sha256;
use subtle::ConstantTimeEq;
use veil_core::Millis;

use crate::api::{OperationKind, SignedIdentifier};
use crate::codec::query::Query;
use crate::error::{AzureError, AzureResult, ErrorCode};
use crate::time::{parse_iso8601, rfc1123};

/// The standard headers of the Shared Key string-to-sign, in order (Range last).
const SIGNED_HEADERS: [&str; 11] = [
    "content-encoding",
    "content-language",
    "content-length",
    "content-md5",
    "content-type",
    "date",
    "if-modified-since",
    "if-match",
    "if-none-match",
    "if-unmodified-since",
    "range",
];

/// The first service version whose account SAS signs the encryption scope (`ses`) line.
const ACCOUNT_SAS_ENCRYPTION_SCOPE_SINCE: &str = "2020-12-06";

/// What a request presents to prove who it is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Credentials {
    /// `SharedKey` or `SharedKeyLite <account>:<signature>`.
    SharedKey {
        scheme: KeyScheme,
        account: String,
        signature: String,
    },
    Sas(Box<Sas>),
    /// `Bearer <token>`: an Entra ID (OAuth) access token, verified by [`crate::entra`].
    Bearer(String),
    Anonymous,
}

/// The two account-key schemes of the `Authorization` header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeyScheme {
    SharedKey,
    SharedKeyLite,
}

/// The fields of a shared access signature, as the query carries them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Sas {
    pub version: String,
    pub services: Option<String>,
    pub resource_types: Option<String>,
    pub permissions: Option<String>,
    pub start: Option<String>,
    pub expiry: Option<String>,
    pub ip: Option<String>,
    pub protocol: Option<String>,
    pub identifier: Option<String>,
    pub encryption_scope: Option<String>,
    /// The user delegation key's fields (`skoid`, `sktid`, `skt`, `ske`, `sks`, `skv`, `skdutid`) and the
    /// delegated user (`sduoid`): present only in a user delegation SAS.
    pub key: Option<SignedKey>,
    pub delegated_user_oid: Option<String>,
    pub signature: String,
}

/// The user delegation key a user delegation SAS names: the fields Get User Delegation Key answered.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SignedKey {
    pub oid: String,
    pub tid: String,
    pub start: String,
    pub expiry: String,
    pub service: String,
    pub version: String,
    pub delegated_user_tid: Option<String>,
}

impl Sas {
    /// An account SAS names the services it covers; a queue (service) SAS does not.
    pub fn is_account_sas(&self) -> bool {
        self.services.is_some()
    }

    /// A user delegation SAS is signed with a user delegation key, which it names (`skoid`…).
    pub fn is_user_delegation(&self) -> bool {
        self.key.is_some()
    }
}

/// The request parts that Shared Key signs.
#[derive(Clone, Copy, Debug)]
pub struct SignedRequest<'a> {
    pub method: &'a str,
    /// The raw path, as sent.
    pub path: &'a str,
    pub query: Option<&'a str>,
    pub headers: &'a HeaderMap,
}

/// Reads the credentials of a request: an `Authorization` header wins over a SAS in the query.
pub fn credentials(headers: &HeaderMap, query: &Query) -> AzureResult<Credentials> {
    if let Some(value) = headers.get("authorization") {
        let value = value
            .to_str()
            .map_err(|_| AzureError::authentication("The Authorization header is not ASCII."))?;
        let value = value.trim();
        if let Some(token) = value.strip_prefix("Bearer ") {
            return Ok(Credentials::Bearer(token.trim().to_string()));
        }
        let (scheme, rest) = if let Some(rest) = value.strip_prefix("SharedKeyLite ") {
            (KeyScheme::SharedKeyLite, rest)
        } else if let Some(rest) = value.strip_prefix("SharedKey ") {
            (KeyScheme::SharedKey, rest)
        } else {
            return Err(AzureError::authentication(format!(
                "Authorization scheme of '{value}' is not supported; Veil verifies SharedKey, SharedKeyLite, Bearer and SAS."
            )));
        };
        let Some((account, signature)) = rest.trim().split_once(':') else {
            return Err(AzureError::authentication(
                "The Authorization header must be 'SharedKey <account>:<signature>'.",
            ));
        };
        return Ok(Credentials::SharedKey {
            scheme,
            account: account.to_string(),
            signature: signature.to_string(),
        });
    }
    let Some(signature) = query.get("sig") else {
        return Ok(Credentials::Anonymous);
    };
    let field = |name: &str| query.get(name).map(str::to_string);
    let version = field("sv").ok_or_else(|| {
        AzureError::authentication("Signature fields not well formed: sv is required.")
    })?;
    let key = match field("skoid") {
        None => None,
        Some(oid) => {
            let required = |name: &str| {
                field(name).ok_or_else(|| {
                    AzureError::authentication(format!(
                        "Signature fields not well formed: {name} is required in a user delegation SAS."
                    ))
                })
            };
            Some(SignedKey {
                oid,
                tid: required("sktid")?,
                start: required("skt")?,
                expiry: required("ske")?,
                service: required("sks")?,
                version: required("skv")?,
                delegated_user_tid: field("skdutid"),
            })
        }
    };
    Ok(Credentials::Sas(Box::new(Sas {
        version,
        services: field("ss"),
        resource_types: field("srt"),
        permissions: field("sp"),
        start: field("st"),
        expiry: field("se"),
        ip: field("sip"),
        protocol: field("spr"),
        identifier: field("si"),
        encryption_scope: field("ses"),
        key,
        delegated_user_oid: field("sduoid"),
        signature: signature.to_string(),
    })))
}

pub fn sign(key: &[u8], string_to_sign: &str) -> String {
    let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(key).expect("HMAC accepts any key length");
    mac.update(string_to_sign.as_bytes());
    STANDARD.encode(mac.finalize().into_bytes())
}

/// Equality that takes the same time wherever the first difference is, so a signature does not leak through
/// timing (`subtle` answers unequal at once only for a length, which is public).
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    bool::from(a.ct_eq(b))
}

/// How the canonicalized `x-ms-*` headers are ordered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HeaderOrder {
    /// Azure's service order (a culture-aware comparison in which hyphens weigh less than any letter or
    /// digit, and `_` sorts before digits), which the Python SDK emulates.
    Service,
    /// Plain byte order, which other clients use; the two differ only for unusual header names.
    Ordinal,
}

/// Weight of a character of a lower-case header name at the first comparison level; hyphens are skipped.
fn primary_weight(b: u8) -> u16 {
    match b {
        b'_' => 1,
        b'0'..=b'9' => 10 + u16::from(b - b'0'),
        b'a'..=b'z' => 30 + u16::from(b - b'a'),
        other => 100 + u16::from(other),
    }
}

fn service_order(a: &str, b: &str) -> Ordering {
    let key = |s: &str| -> Vec<u16> {
        s.bytes()
            .filter(|b| *b != b'-')
            .map(primary_weight)
            .collect()
    };
    key(a).cmp(&key(b)).then_with(|| a.cmp(b))
}

/// The value of a header as signed: every value of the name, trimmed, joined by commas.
fn header_value(request: &SignedRequest<'_>, name: &str) -> String {
    request
        .headers
        .get_all(name)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .map(str::trim)
        .collect::<Vec<_>>()
        .join(",")
}

/// The canonicalized `x-ms-*` headers: `name:value\n` each, lower-case names in `order`.
fn canonicalized_headers(request: &SignedRequest<'_>, order: HeaderOrder) -> String {
    let mut ms_headers: Vec<(String, String)> = request
        .headers
        .keys()
        .map(|name| name.as_str().to_ascii_lowercase())
        .filter(|name| name.starts_with("x-ms-"))
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .map(|name| {
            let value = header_value(request, &name);
            (name, value)
        })
        .collect();
    match order {
        HeaderOrder::Service => ms_headers.sort_by(|a, b| service_order(&a.0, &b.0)),
        HeaderOrder::Ordinal => ms_headers.sort_by(|a, b| a.0.cmp(&b.0)),
    }
    ms_headers
        .into_iter()
        .map(|(name, value)| format!("{name}:{value}\n"))
        .collect()
}

/// The Shared Key string-to-sign of a request (docs/semantics.md §Azure, "Authentication").
pub fn string_to_sign(request: &SignedRequest<'_>, account: &str, order: HeaderOrder) -> String {
    let mut out = String::new();
    out.push_str(&request.method.to_ascii_uppercase());
    out.push('\n');
    for name in SIGNED_HEADERS {
        let value = header_value(request, name);
        // Since version 2015-02-21 a zero Content-Length is signed as empty.
        if !(name == "content-length" && value == "0") {
            out.push_str(&value);
        }
        out.push('\n');
    }
    out.push_str(&canonicalized_headers(request, order));
    out.push('/');
    out.push_str(account);
    out.push_str(request.path);
    let query = Query::parse(request.query);
    let mut params: std::collections::BTreeMap<&str, Vec<&str>> = std::collections::BTreeMap::new();
    for (name, value) in query.pairs() {
        params
            .entry(name.as_str())
            .or_default()
            .push(value.as_str());
    }
    for (name, mut values) in params {
        values.sort_unstable();
        out.push('\n');
        out.push_str(name);
        out.push(':');
        out.push_str(&values.join(","));
    }
    out
}

/// The Shared Key Lite string-to-sign of a Queue request (Azure's "Authorize with Shared Key", Shared Key
/// Lite for the Blob and Queue services, version 2009-09-19 and later): the verb, Content-MD5,
/// Content-Type and Date lines, the canonicalized `x-ms-*` headers, then the resource — `/<account><path>`
/// (the account doubled in path style, as for Shared Key) and `?comp=<value>` when the query has `comp`,
/// no other parameter.
pub fn lite_string_to_sign(
    request: &SignedRequest<'_>,
    account: &str,
    order: HeaderOrder,
) -> String {
    let mut out = format!(
        "{}\n{}\n{}\n{}\n",
        request.method.to_ascii_uppercase(),
        header_value(request, "content-md5"),
        header_value(request, "content-type"),
        header_value(request, "date"),
    );
    out.push_str(&canonicalized_headers(request, order));
    out.push('/');
    out.push_str(account);
    out.push_str(request.path);
    if let Some(comp) = Query::parse(request.query).get("comp") {
        out.push_str("?comp=");
        out.push_str(comp);
    }
    out
}

/// Verifies a Shared Key or Shared Key Lite signature (`scheme` picks the string to sign); 403
/// AuthenticationFailed with the string Veil signed when it differs.
pub fn verify_shared_key(
    request: &SignedRequest<'_>,
    account: &str,
    key: &[u8],
    signature: &str,
    scheme: KeyScheme,
) -> AzureResult<()> {
    verify_key_signature(key, signature, |order| match scheme {
        KeyScheme::SharedKey => string_to_sign(request, account, order),
        KeyScheme::SharedKeyLite => lite_string_to_sign(request, account, order),
    })
}

/// Accepts `signature` if it signs the string of either header order.
fn verify_key_signature(
    key: &[u8],
    signature: &str,
    string_to_sign: impl Fn(HeaderOrder) -> String,
) -> AzureResult<()> {
    let service = string_to_sign(HeaderOrder::Service);
    if constant_time_eq(sign(key, &service).as_bytes(), signature.as_bytes()) {
        return Ok(());
    }
    let ordinal = string_to_sign(HeaderOrder::Ordinal);
    if ordinal != service && constant_time_eq(sign(key, &ordinal).as_bytes(), signature.as_bytes())
    {
        return Ok(());
    }
    Err(AzureError::authentication(format!(
        "The MAC signature found in the HTTP request '{signature}' is not the same as any computed signature. Server used following string to sign: '{service}'."
    )))
}

fn line(value: &Option<String>) -> &str {
    value.as_deref().unwrap_or("")
}

/// The string-to-sign of an account SAS.
pub fn account_sas_string_to_sign(account: &str, sas: &Sas) -> String {
    let mut out = format!(
        "{account}\n{}\n{}\n{}\n{}\n{}\n{}\n{}\n{}\n",
        line(&sas.permissions),
        line(&sas.services),
        line(&sas.resource_types),
        line(&sas.start),
        line(&sas.expiry),
        line(&sas.ip),
        line(&sas.protocol),
        sas.version
    );
    if sas.version.as_str() >= ACCOUNT_SAS_ENCRYPTION_SCOPE_SINCE {
        out.push_str(line(&sas.encryption_scope));
        out.push('\n');
    }
    out
}

/// The string-to-sign of a queue (service) SAS for `queue`.
pub fn queue_sas_string_to_sign(account: &str, queue: &str, sas: &Sas) -> String {
    format!(
        "{}\n{}\n{}\n/queue/{account}/{queue}\n{}\n{}\n{}\n{}",
        line(&sas.permissions),
        line(&sas.start),
        line(&sas.expiry),
        line(&sas.identifier),
        line(&sas.ip),
        line(&sas.protocol),
        sas.version
    )
}

/// The string-to-sign of a user delegation SAS for `queue` (Azure's "Create a user delegation SAS", as the
/// queue service signs it from version 2025-07-05): the service SAS lines with the key's fields and the
/// delegated user in place of the stored access policy.
pub fn user_delegation_sas_string_to_sign(
    account: &str,
    queue: &str,
    sas: &Sas,
    key: &SignedKey,
) -> String {
    format!(
        "{}\n{}\n{}\n/queue/{account}/{queue}\n{}\n{}\n{}\n{}\n{}\n{}\n{}\n{}\n{}\n{}\n{}",
        line(&sas.permissions),
        line(&sas.start),
        line(&sas.expiry),
        key.oid,
        key.tid,
        key.start,
        key.expiry,
        key.service,
        key.version,
        line(&key.delegated_user_tid),
        line(&sas.delegated_user_oid),
        line(&sas.ip),
        line(&sas.protocol),
        sas.version
    )
}

/// What an operation needs from a SAS: the account SAS resource type (`s` service, `c` container = queue,
/// `o` object = message), the account SAS permissions any one of which suffices, and the queue SAS
/// permissions (`None`: a queue SAS cannot do it).
struct Need {
    resource_type: char,
    account: &'static str,
    queue: Option<&'static str>,
}

fn need(kind: OperationKind) -> Need {
    use OperationKind as K;
    let n = |resource_type, account, queue| Need {
        resource_type,
        account,
        queue,
    };
    match kind {
        K::ListQueues => n('s', "l", None),
        K::GetServiceProperties | K::GetServiceStats => n('s', "r", None),
        // Only a bearer token may ask for a user delegation key; the service refuses a SAS before this.
        K::GetUserDelegationKey => n('s', "", None),
        K::SetServiceProperties => n('s', "w", None),
        K::Preflight => n('s', "rwdlacup", Some("raup")),
        K::CreateQueue => n('c', "cw", None),
        K::DeleteQueue => n('c', "d", None),
        K::GetMetadata => n('c', "r", Some("r")),
        K::SetMetadata => n('c', "w", None),
        K::GetAcl => n('c', "r", None),
        K::SetAcl => n('c', "w", None),
        K::PutMessage => n('o', "a", Some("a")),
        K::GetMessages => n('o', "p", Some("p")),
        K::PeekMessages => n('o', "r", Some("r")),
        K::DeleteMessage => n('o', "pd", Some("p")),
        K::ClearMessages => n('o', "d", None),
        K::UpdateMessage => n('o', "u", Some("u")),
    }
}

fn time_field(name: &str, value: &str) -> AzureResult<Millis> {
    parse_iso8601(value).ok_or_else(|| {
        AzureError::authentication(format!(
            "Signature fields not well formed: {name}={value} is not an ISO 8601 UTC time."
        ))
    })
}

/// What a SAS is checked against, all known before any parameter of the request is read.
#[derive(Clone, Copy, Debug)]
pub struct SasScope<'a> {
    pub account: &'a str,
    /// The queue segment of the request's path (a queue SAS signs its queue's name).
    pub queue: Option<&'a str>,
    pub now: Millis,
    /// The peer's address, checked against the SAS's `sip` (unknown: a SAS with `sip` is refused).
    pub peer: Option<IpAddr>,
    /// The stored access policy the SAS's `si` names, looked up by the caller in the queue's ACL.
    pub policy: Option<&'a SignedIdentifier>,
    /// Whether the request came over TLS: a SAS with `spr=https` is refused over plain HTTP.
    pub https: bool,
}

/// A SAS whose signature, time window and protocol were verified: what it allows, checked per operation
/// by [`SasGrant::authorize`] once the request's operation is named.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SasGrant {
    account_sas: bool,
    services: String,
    resource_types: String,
    permissions: String,
}

/// Verifies a SAS's signature first (so a forged SAS learns nothing else), then its time window (a stored
/// access policy supplies what the SAS leaves out) and protocol.
pub fn verify_sas(sas: &Sas, key: &[u8], scope: &SasScope<'_>) -> AzureResult<SasGrant> {
    let expected = if let Some(signed_key) = &sas.key {
        let Some(queue) = scope.queue else {
            return Err(AzureError::authentication(
                "A user delegation SAS authorizes operations on its queue only.",
            ));
        };
        user_delegation_sas_string_to_sign(scope.account, queue, sas, signed_key)
    } else if sas.is_account_sas() {
        account_sas_string_to_sign(scope.account, sas)
    } else {
        let Some(queue) = scope.queue else {
            return Err(AzureError::authentication(
                "A queue SAS authorizes operations on its queue only.",
            ));
        };
        queue_sas_string_to_sign(scope.account, queue, sas)
    };
    if !constant_time_eq(sign(key, &expected).as_bytes(), sas.signature.as_bytes()) {
        return Err(AzureError::authentication(format!(
            "Signature did not match. String to sign used was {expected}"
        )));
    }
    let terms = match scope.policy {
        Some(policy) => policy_terms(sas, policy)?,
        None => AccessTerms {
            start: sas.start.clone(),
            expiry: sas.expiry.clone(),
            permissions: sas.permissions.clone(),
        },
    };
    check_time_window(terms.start.as_deref(), terms.expiry.as_deref(), scope.now)?;
    if let Some(allowed) = &sas.ip {
        check_source_ip(allowed, scope.peer)?;
    }
    check_protocol(sas.protocol.as_deref(), scope.https)?;
    Ok(SasGrant {
        account_sas: sas.is_account_sas(),
        services: line(&sas.services).to_string(),
        resource_types: line(&sas.resource_types).to_string(),
        permissions: terms.permissions.unwrap_or_default(),
    })
}

/// The access policy a SAS is held to: its start, expiry and permissions.
struct AccessTerms {
    start: Option<String>,
    expiry: Option<String>,
    permissions: Option<String>,
}

/// The terms of a SAS that names a stored access policy (`si`). Each of start, expiry and permissions comes
/// from the SAS or from the policy, never both: a SAS carrying its own `se` would otherwise outlive the
/// policy's expiry being moved to the past, which is how a stored policy revokes its signatures. Azure's
/// answers, in its order: 403 AuthenticationFailed with these details (docs/security.md, "Azure Queue
/// Storage", says why not the 400 one page of Azure's documentation names).
fn policy_terms(sas: &Sas, policy: &SignedIdentifier) -> AzureResult<AccessTerms> {
    if sas.expiry.is_none() && policy.expiry.is_none() {
        return Err(AzureError::authentication(
            "Signed expiry must be specified in signature or SAS identifier",
        ));
    }
    if sas.permissions.is_none() && policy.permission.is_none() {
        return Err(AzureError::authentication(
            "Signed permission must be specified in signature or SAS identifier",
        ));
    }
    let both = |own: &Option<String>, stored: &Option<String>| own.is_some() && stored.is_some();
    if both(&sas.start, &policy.start)
        || both(&sas.expiry, &policy.expiry)
        || both(&sas.permissions, &policy.permission)
    {
        return Err(AzureError::authentication(
            "Access policy fields can be associated with signature or SAS identifier but not both",
        ));
    }
    Ok(AccessTerms {
        start: sas.start.clone().or_else(|| policy.start.clone()),
        expiry: sas.expiry.clone().or_else(|| policy.expiry.clone()),
        permissions: sas
            .permissions
            .clone()
            .or_else(|| policy.permission.clone()),
    })
}

/// `spr`: `https` or `https,http`. A SAS that allows only https is refused over plain HTTP (403
/// AuthorizationProtocolMismatch); one that names neither protocol is not well formed.
fn check_protocol(protocol: Option<&str>, https: bool) -> AzureResult<()> {
    let Some(protocol) = protocol else {
        return Ok(());
    };
    let allowed: Vec<&str> = protocol.split(',').map(str::trim).collect();
    if allowed.iter().any(|p| *p != "http" && *p != "https") {
        return Err(AzureError::authentication(format!(
            "Signature fields not well formed: spr={protocol} must be https or https,http."
        )));
    }
    let over = if https { "https" } else { "http" };
    if allowed.contains(&over) {
        Ok(())
    } else {
        Err(AzureError::new(ErrorCode::AuthorizationProtocolMismatch))
    }
}

/// Azure's detail for a SAS used outside its window: `Signature not valid in the specified time frame:
/// Start [<RFC 1123>] - Expiry [<RFC 1123>] - Current [<RFC 1123>]` (a SAS without a start shows none).
fn check_time_window(start: Option<&str>, expiry: Option<&str>, now: Millis) -> AzureResult<()> {
    let Some(expiry) = expiry else {
        return Err(AzureError::authentication(
            "Signature fields not well formed: an expiry time (se) is required.",
        ));
    };
    let expiry_ms = time_field("se", expiry)?;
    let start_ms = start.map(|s| time_field("st", s)).transpose()?;
    if now < expiry_ms && start_ms.is_none_or(|s| now >= s) {
        return Ok(());
    }
    let start = start_ms
        .map(|s| format!("Start [{}] - ", rfc1123(s)))
        .unwrap_or_default();
    Err(AzureError::authentication(format!(
        "Signature not valid in the specified time frame: {start}Expiry [{}] - Current [{}]",
        rfc1123(expiry_ms),
        rfc1123(now)
    )))
}

/// `sip`: one address or an inclusive range `<low>-<high>`; the peer must fall in it (an IPv4 peer seen as
/// an IPv4-mapped IPv6 address counts as IPv4). Azure's 403 AuthorizationSourceIPMismatch otherwise (its
/// "SAS Error Codes" table: "This request is not authorized to perform this operation using this source IP
/// {SourceIP}.").
fn check_source_ip(allowed: &str, peer: Option<IpAddr>) -> AzureResult<()> {
    let parse = |text: &str| {
        text.trim().parse::<IpAddr>().map_err(|_| {
            AzureError::authentication(format!(
                "Signature fields not well formed: sip={allowed} is not an IP address or range."
            ))
        })
    };
    let (low, high) = match allowed.split_once('-') {
        Some((low, high)) => (parse(low)?, parse(high)?),
        None => (parse(allowed)?, parse(allowed)?),
    };
    let inside = peer.map(|p| p.to_canonical()).is_some_and(|peer| {
        let comparable = peer.is_ipv4() == low.is_ipv4() && peer.is_ipv4() == high.is_ipv4();
        comparable && low <= peer && peer <= high
    });
    if inside {
        return Ok(());
    }
    let shown = peer.map_or_else(|| "unknown".to_string(), |p| p.to_canonical().to_string());
    Err(AzureError::with_message(
        ErrorCode::AuthorizationSourceIPMismatch,
        format!(
            "This request is not authorized to perform this operation using this source IP {shown}."
        ),
    ))
}

impl SasGrant {
    /// Whether the SAS allows `kind`: the queue service and the resource type (account SAS), then one of
    /// the permissions the operation needs.
    pub fn authorize(&self, kind: OperationKind) -> AzureResult<()> {
        let need = need(kind);
        let allowed = if self.account_sas {
            if !self.services.contains('q') {
                return Err(AzureError::new(ErrorCode::AuthorizationServiceMismatch));
            }
            if !self.resource_types.contains(need.resource_type) {
                return Err(AzureError::new(
                    ErrorCode::AuthorizationResourceTypeMismatch,
                ));
            }
            need.account
        } else {
            need.queue.unwrap_or("")
        };
        if self.permissions.chars().any(|p| allowed.contains(p)) {
            Ok(())
        } else {
            Err(AzureError::new(ErrorCode::AuthorizationPermissionMismatch))
        }
    }

    /// Whether the SAS allows `kind` on a queue other than the one the request names (the poison queue a
    /// policy names): an account SAS by its rules; a queue SAS and a user delegation SAS sign their one
    /// queue's name and allow nothing on another.
    pub fn authorize_elsewhere(&self, kind: OperationKind) -> AzureResult<()> {
        if !self.account_sas {
            return Err(AzureError::new(ErrorCode::AuthorizationPermissionMismatch));
        }
        self.authorize(kind)
    }
}

/// Decodes an account key (base64); `None` when it is not base64.
pub fn decode_key(key: &str) -> Option<Vec<u8>> {
    STANDARD.decode(key.trim()).ok()
}
