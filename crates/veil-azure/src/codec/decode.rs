//! Request decoding in two steps. [`route`] names the operation from the method, the path and the `restype`
//! / `comp` / `peekonly` switches alone — enough to authorize it — and [`decode_operation`] then reads and
//! validates its parameters (query, headers, body) against Azure's limits (`limits.rs`) into a typed
//! [`Operation`]. The service authenticates between the two, so a request that is not allowed never learns
//! anything from a parameter error.

use axum::http::HeaderMap;

use super::locate::Location;
use super::properties;

use super::query::Query;
use super::xml;
use super::HttpRequestParts;
use crate::api::*;
use crate::error::{AzureError, AzureResult, ErrorCode};
use crate::limits;
use crate::pop_receipt::{self, PopReceipt};

fn unsupported_verb(method: &str) -> AzureError {
    AzureError::new(ErrorCode::UnsupportedHttpVerb).detail("Verb", method)
}

/// Which operation a request asks for, from its method, path segments and the `restype`, `comp` and
/// `peekonly` switches; no parameter value is validated here.
pub fn route(method: &str, location: &Location, query: &Query) -> AzureResult<OperationKind> {
    let method = method.to_ascii_uppercase();
    if method == "OPTIONS" {
        return Ok(OperationKind::Preflight);
    }
    match location.segments.as_slice() {
        [] => service_route(&method, query),
        [_] => queue_route(&method, query),
        [_, messages] if messages == "messages" => messages_route(&method, query),
        [_, messages, _] if messages == "messages" => message_route(&method),
        _ => Err(AzureError::new(ErrorCode::InvalidUri)),
    }
}

fn service_route(method: &str, query: &Query) -> AzureResult<OperationKind> {
    let comp = query.get("comp");
    match (method, query.get("restype"), comp) {
        ("GET", _, Some("list")) => Ok(OperationKind::ListQueues),
        ("GET", Some("service"), Some("properties")) => Ok(OperationKind::GetServiceProperties),
        ("PUT", Some("service"), Some("properties")) => Ok(OperationKind::SetServiceProperties),
        ("GET", Some("service"), Some("stats")) => Ok(OperationKind::GetServiceStats),
        ("POST", Some("service"), Some("userdelegationkey")) => {
            Ok(OperationKind::GetUserDelegationKey)
        }
        (_, Some("service"), Some("properties" | "stats" | "userdelegationkey"))
        | (_, _, Some("list")) => Err(unsupported_verb(method)),
        _ => Err(AzureError::new(ErrorCode::InvalidQueryParameterValue)
            .detail("QueryParameterName", "comp")
            .detail("QueryParameterValue", comp.unwrap_or_default())
            .detail("Reason", "Unknown service operation.")),
    }
}

fn queue_route(method: &str, query: &Query) -> AzureResult<OperationKind> {
    match (method, query.get("comp")) {
        ("PUT", None) => Ok(OperationKind::CreateQueue),
        ("DELETE", None) => Ok(OperationKind::DeleteQueue),
        ("GET" | "HEAD", Some("metadata")) => Ok(OperationKind::GetMetadata),
        ("PUT", Some("metadata")) => Ok(OperationKind::SetMetadata),
        ("GET" | "HEAD", Some("acl")) => Ok(OperationKind::GetAcl),
        ("PUT", Some("acl")) => Ok(OperationKind::SetAcl),
        (_, Some(other)) if other != "metadata" && other != "acl" => Err(
            AzureError::invalid_query("comp", other, "Unknown queue operation."),
        ),
        _ => Err(unsupported_verb(method)),
    }
}

fn messages_route(method: &str, query: &Query) -> AzureResult<OperationKind> {
    match method {
        "POST" => Ok(OperationKind::PutMessage),
        "GET" if peek_only(query) => Ok(OperationKind::PeekMessages),
        "GET" => Ok(OperationKind::GetMessages),
        "DELETE" => Ok(OperationKind::ClearMessages),
        _ => Err(unsupported_verb(method)),
    }
}

fn message_route(method: &str) -> AzureResult<OperationKind> {
    match method {
        "DELETE" => Ok(OperationKind::DeleteMessage),
        "PUT" => Ok(OperationKind::UpdateMessage),
        _ => Err(unsupported_verb(method)),
    }
}

fn peek_only(query: &Query) -> bool {
    query
        .get("peekonly")
        .is_some_and(|v| v.eq_ignore_ascii_case("true"))
}

/// Reads and validates the parameters of an operation [`route`] named.
pub fn decode_operation(
    kind: OperationKind,
    parts: &HttpRequestParts<'_>,
    location: &Location,
    query: &Query,
) -> AzureResult<Operation> {
    use OperationKind as K;
    if kind != K::Preflight {
        // `timeout` is accepted on every operation; it only bounds the server's time, which Veil never
        // exceeds. A preflight carries no parameters.
        let _ = int_param(query, "timeout", 0, i64::MAX)?;
    }
    match kind {
        K::ListQueues => list_queues(query),
        K::GetServiceProperties => Ok(Operation::GetServiceProperties),
        K::SetServiceProperties => set_service_properties(parts.body),
        K::GetServiceStats => Ok(Operation::GetServiceStats),
        K::GetUserDelegationKey => key_info(parts.body),
        K::Preflight => preflight(parts.headers),
        K::CreateQueue
        | K::DeleteQueue
        | K::GetMetadata
        | K::SetMetadata
        | K::GetAcl
        | K::SetAcl => queue_operation(kind, queue_name(location)?, parts),
        K::PutMessage => put_message(queue_name(location)?, query, parts.body),
        K::GetMessages => get_messages(queue_name(location)?, query),
        K::PeekMessages => Ok(Operation::PeekMessages {
            queue: queue_name(location)?,
            count: count_param(query)?,
        }),
        K::ClearMessages => Ok(Operation::ClearMessages {
            queue: queue_name(location)?,
        }),
        K::DeleteMessage | K::UpdateMessage => message_operation(kind, location, query, parts.body),
    }
}

/// The queue segment of the path, checked against Azure's naming rules.
fn queue_name(location: &Location) -> AzureResult<String> {
    let queue = location
        .queue()
        .ok_or_else(|| AzureError::new(ErrorCode::InvalidUri))?;
    validate_queue_name(queue)?;
    Ok(queue.to_string())
}

fn list_queues(query: &Query) -> AzureResult<Operation> {
    let max_results = int_param(query, "maxresults", 1, i64::MAX)?
        .map(|n| (n as usize).min(limits::LIST_RESULTS_MAX));
    let include_metadata = query.get("include").is_some_and(|v| {
        v.split(',')
            .any(|i| i.trim().eq_ignore_ascii_case("metadata"))
    });
    Ok(Operation::ListQueues {
        prefix: query.get("prefix").map(str::to_string),
        marker: query
            .get("marker")
            .filter(|m| !m.is_empty())
            .map(str::to_string),
        max_results,
        include_metadata,
    })
}

fn set_service_properties(body: &[u8]) -> AzureResult<Operation> {
    let doc = xml::parse(body).map_err(|e| invalid_xml(e.0))?;
    if doc.name != "StorageServiceProperties" {
        return Err(invalid_xml(
            "the root element must be StorageServiceProperties",
        ));
    }
    properties::validate(&doc)?;
    Ok(Operation::SetServiceProperties {
        xml: String::from_utf8_lossy(body).into_owned(),
    })
}

/// A `<KeyInfo>` body: `Expiry` required, `Start` and `DelegatedUserTid` optional (the times are checked
/// by the service, which knows the clock).
fn key_info(body: &[u8]) -> AzureResult<Operation> {
    let doc = xml::parse(body).map_err(|e| invalid_xml(e.0))?;
    if doc.name != "KeyInfo" {
        return Err(invalid_xml("the root element must be KeyInfo"));
    }
    let text = |name: &str| {
        doc.child_text(name)
            .map(str::trim)
            .filter(|t| !t.is_empty())
            .map(str::to_string)
    };
    let expiry = text("Expiry").ok_or_else(|| invalid_xml("KeyInfo must hold an Expiry"))?;
    Ok(Operation::GetUserDelegationKey {
        start: text("Start"),
        expiry,
        delegated_user_tid: text("DelegatedUserTid"),
    })
}

fn queue_operation(
    kind: OperationKind,
    queue: String,
    parts: &HttpRequestParts<'_>,
) -> AzureResult<Operation> {
    Ok(match kind {
        OperationKind::CreateQueue => Operation::CreateQueue {
            queue,
            metadata: metadata_from_headers(parts.headers)?,
        },
        OperationKind::DeleteQueue => Operation::DeleteQueue { queue },
        OperationKind::GetMetadata => Operation::GetMetadata { queue },
        OperationKind::SetMetadata => Operation::SetMetadata {
            queue,
            metadata: metadata_from_headers(parts.headers)?,
        },
        OperationKind::GetAcl => Operation::GetAcl { queue },
        _ => Operation::SetAcl {
            queue,
            identifiers: signed_identifiers(parts.body)?,
        },
    })
}

fn put_message(queue: String, query: &Query, body: &[u8]) -> AzureResult<Operation> {
    let ttl = match int_param(
        query,
        "messagettl",
        limits::MESSAGE_TTL_NEVER,
        limits::MESSAGE_TTL_S_MAX,
    )? {
        None => MessageTtl::Seconds(limits::MESSAGE_TTL_S_DEFAULT as u64),
        Some(limits::MESSAGE_TTL_NEVER) => MessageTtl::Never,
        Some(s) if s >= limits::MESSAGE_TTL_S_MIN => MessageTtl::Seconds(s as u64),
        Some(s) => {
            return Err(AzureError::out_of_range(
                "messagettl",
                s,
                limits::MESSAGE_TTL_S_MIN,
                limits::MESSAGE_TTL_S_MAX,
            ))
        }
    };
    let visibility_s = int_param(
        query,
        "visibilitytimeout",
        0,
        limits::VISIBILITY_S_MAX as i64,
    )?
    .unwrap_or(0) as u64;
    if let MessageTtl::Seconds(ttl_s) = ttl {
        // The initial invisibility must end before the message expires.
        if visibility_s >= ttl_s {
            return Err(AzureError::out_of_range(
                "visibilitytimeout",
                visibility_s,
                0,
                (ttl_s - 1).min(limits::VISIBILITY_S_MAX),
            ));
        }
    }
    Ok(Operation::PutMessage {
        queue,
        text: message_text(body)?,
        visibility_s,
        ttl,
    })
}

fn get_messages(queue: String, query: &Query) -> AzureResult<Operation> {
    let count = count_param(query)?;
    let visibility_s = int_param(
        query,
        "visibilitytimeout",
        limits::GET_VISIBILITY_S_MIN as i64,
        limits::VISIBILITY_S_MAX as i64,
    )?
    .map_or(limits::GET_VISIBILITY_S_DEFAULT, |v| v as u64);
    Ok(Operation::GetMessages {
        queue,
        count,
        visibility_s,
    })
}

/// Delete Message and Update Message: the path's message id and a well-formed pop receipt.
fn message_operation(
    kind: OperationKind,
    location: &Location,
    query: &Query,
    body: &[u8],
) -> AzureResult<Operation> {
    let queue = queue_name(location)?;
    let message_id = location.segments.get(2).cloned().unwrap_or_default();
    let pop_receipt = pop_receipt_param(query)?;
    if kind == OperationKind::DeleteMessage {
        return Ok(Operation::DeleteMessage {
            queue,
            message_id,
            pop_receipt,
        });
    }
    let visibility_s = int_param(
        query,
        "visibilitytimeout",
        0,
        limits::VISIBILITY_S_MAX as i64,
    )?
    .ok_or_else(|| AzureError::missing_query("visibilitytimeout"))? as u64;
    let text = if body.iter().all(u8::is_ascii_whitespace) {
        None
    } else {
        Some(message_text(body)?)
    };
    Ok(Operation::UpdateMessage {
        queue,
        message_id,
        pop_receipt,
        visibility_s,
        text,
    })
}

fn pop_receipt_param(query: &Query) -> AzureResult<PopReceipt> {
    let text = query
        .get("popreceipt")
        .ok_or_else(|| AzureError::missing_query("popreceipt"))?;
    pop_receipt::decode(text)
        .ok_or_else(|| AzureError::invalid_query("popreceipt", text, "Invalid pop receipt format"))
}

fn header<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

fn preflight(headers: &HeaderMap) -> AzureResult<Operation> {
    let origin = header(headers, "origin");
    let method = header(headers, "access-control-request-method");
    let (Some(origin), Some(method)) = (origin, method) else {
        return Err(AzureError::with_message(
            ErrorCode::CorsPreflightFailure,
            "A CORS preflight request needs the Origin and Access-Control-Request-Method headers.",
        ));
    };
    let requested = header(headers, "access-control-request-headers")
        .unwrap_or_default()
        .split(',')
        .map(|h| h.trim().to_ascii_lowercase())
        .filter(|h| !h.is_empty())
        .collect();
    Ok(Operation::Preflight {
        origin: origin.to_string(),
        method: method.to_ascii_uppercase(),
        headers: requested,
    })
}

/// Queue names: 3–63 characters (else OutOfRangeInput) of lower-case letters, digits and single hyphens,
/// starting and ending with a letter or digit (else InvalidResourceName).
pub fn validate_queue_name(name: &str) -> AzureResult<()> {
    let chars = name.chars().count();
    if !(limits::QUEUE_NAME_CHARS_MIN..=limits::QUEUE_NAME_CHARS_MAX).contains(&chars) {
        return Err(AzureError::with_message(
            ErrorCode::OutOfRangeInput,
            format!(
                "The specified resource name length is not within the permissible limits ({}..{} characters).",
                limits::QUEUE_NAME_CHARS_MIN,
                limits::QUEUE_NAME_CHARS_MAX
            ),
        ));
    }
    let bytes = name.as_bytes();
    let legal = bytes
        .iter()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-')
        && bytes.first().is_some_and(|b| *b != b'-')
        && bytes.last().is_some_and(|b| *b != b'-')
        && !name.contains("--");
    if legal {
        Ok(())
    } else {
        Err(AzureError::new(ErrorCode::InvalidResourceName))
    }
}

/// Metadata names are C# identifiers (Azure's rule); values are header text.
pub fn validate_metadata_name(name: &str) -> bool {
    let mut bytes = name.bytes();
    bytes
        .next()
        .is_some_and(|b| b.is_ascii_alphabetic() || b == b'_')
        && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

pub const META_PREFIX: &str = "x-ms-meta-";

/// Reads `x-ms-meta-*` headers.
pub fn metadata_from_headers(headers: &HeaderMap) -> AzureResult<Metadata> {
    let mut metadata = Metadata::new();
    let mut total = 0usize;
    for (name, value) in headers {
        let Some(key) = name.as_str().strip_prefix(META_PREFIX) else {
            continue;
        };
        if !validate_metadata_name(key) {
            return Err(AzureError::new(ErrorCode::InvalidMetadata).detail("MetadataName", key));
        }
        let value = value
            .to_str()
            .map_err(|_| AzureError::new(ErrorCode::InvalidMetadata).detail("MetadataName", key))?;
        total += key.len() + value.len();
        metadata.insert(key.to_string(), value.trim().to_string());
    }
    if total > limits::METADATA_BYTES_MAX {
        return Err(AzureError::with_message(
            ErrorCode::InvalidMetadata,
            format!(
                "The metadata is larger than {} bytes.",
                limits::METADATA_BYTES_MAX
            ),
        ));
    }
    Ok(metadata)
}

/// An integer query parameter: malformed → InvalidQueryParameterValue; outside `min..=max` →
/// OutOfRangeQueryParameterValue with its four detail fields.
fn int_param(query: &Query, name: &str, min: i64, max: i64) -> AzureResult<Option<i64>> {
    let Some(text) = query.get(name) else {
        return Ok(None);
    };
    let digits = text.strip_prefix('-').unwrap_or(text);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(AzureError::invalid_query(
            name,
            text,
            "Not a valid integer.",
        ));
    }
    let value = match text.parse::<i64>() {
        Ok(value) => value,
        Err(_) => return Err(AzureError::out_of_range(name, text, min, max)),
    };
    if !(min..=max).contains(&value) {
        return Err(AzureError::out_of_range(name, text, min, max));
    }
    Ok(Some(value))
}

fn count_param(query: &Query) -> AzureResult<u64> {
    let count = int_param(
        query,
        "numofmessages",
        limits::MESSAGES_PER_GET_MIN as i64,
        limits::MESSAGES_PER_GET_MAX as i64,
    )?;
    Ok(count.map_or(limits::MESSAGES_PER_GET_DEFAULT, |c| c as u64))
}

/// The MessageText of a `<QueueMessage>` body, at most 64 KiB after decoding (else 413).
pub fn message_text(body: &[u8]) -> AzureResult<String> {
    let doc = xml::parse(body).map_err(|e| invalid_xml(e.0))?;
    // The text is moved out of the parsed document, not copied: it may be 64 KiB.
    let message_text = (doc.name == "QueueMessage")
        .then_some(doc.children)
        .and_then(|children| children.into_iter().find(|c| c.name == "MessageText"));
    let text = match message_text {
        Some(element) => element.text,
        None => {
            return Err(AzureError::with_message(
                ErrorCode::InvalidXmlDocument,
                "The body must be <QueueMessage><MessageText>…</MessageText></QueueMessage>.",
            ))
        }
    };
    if text.len() > limits::MESSAGE_TEXT_BYTES_MAX {
        return Err(AzureError::new(ErrorCode::RequestBodyTooLarge)
            .detail("MaxLimit", limits::MESSAGE_TEXT_BYTES_MAX));
    }
    Ok(text)
}

pub(crate) fn invalid_xml(reason: impl std::fmt::Display) -> AzureError {
    AzureError::with_message(
        ErrorCode::InvalidXmlDocument,
        format!(
            "{} ({reason})",
            ErrorCode::InvalidXmlDocument.default_message()
        ),
    )
}

/// A `<SignedIdentifiers>` body: at most five policies, ids up to 64 characters, permissions from `raup`.
pub fn signed_identifiers(body: &[u8]) -> AzureResult<Vec<SignedIdentifier>> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(Vec::new());
    }
    let doc = xml::parse(body).map_err(|e| invalid_xml(e.0))?;
    if doc.name != "SignedIdentifiers" {
        return Err(invalid_xml("the root element must be SignedIdentifiers"));
    }
    let identifiers = doc
        .children_named("SignedIdentifier")
        .map(signed_identifier)
        .collect::<AzureResult<Vec<_>>>()?;
    if identifiers.len() > limits::SIGNED_IDENTIFIERS_MAX {
        return Err(invalid_xml(format!(
            "at most {} signed identifiers are allowed",
            limits::SIGNED_IDENTIFIERS_MAX
        )));
    }
    Ok(identifiers)
}

fn signed_identifier(item: &xml::Element) -> AzureResult<SignedIdentifier> {
    let id = item.child_text("Id").unwrap_or_default().to_string();
    if id.is_empty() || id.chars().count() > limits::SIGNED_IDENTIFIER_ID_CHARS_MAX {
        return Err(invalid_xml(
            "a SignedIdentifier Id must have 1 to 64 characters",
        ));
    }
    let policy = item.child("AccessPolicy");
    let field = |name: &str| {
        policy
            .and_then(|p| p.child_text(name))
            .map(str::to_string)
            .filter(|v| !v.is_empty())
    };
    let permission = field("Permission");
    if permission
        .as_deref()
        .is_some_and(|p| !p.chars().all(|c| "raup".contains(c)))
    {
        return Err(
            AzureError::new(ErrorCode::InvalidXmlNodeValue).detail("XmlNodeName", "Permission")
        );
    }
    for time in ["Start", "Expiry"] {
        if let Some(value) = field(time) {
            if crate::time::parse_iso8601(&value).is_none() {
                return Err(AzureError::new(ErrorCode::InvalidXmlNodeValue)
                    .detail("XmlNodeName", time)
                    .detail("XmlNodeValue", value));
            }
        }
    }
    Ok(SignedIdentifier {
        id,
        start: field("Start"),
        expiry: field("Expiry"),
        permission,
    })
}
