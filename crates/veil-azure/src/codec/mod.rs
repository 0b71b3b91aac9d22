//! The pure codec: HTTP request parts in, the account and a typed [`Operation`] out; typed outputs and errors
//! in, status, headers and XML out. No I/O, so every wire rule is testable on bytes.

pub mod properties;
pub mod query;
pub mod xml;

#[cfg(test)]
mod tests;

use std::net::IpAddr;

use axum::http::HeaderMap;

use crate::api::*;
use crate::error::{AzureError, AzureResult, ErrorCode};
use crate::limits;
use crate::pop_receipt;
use crate::time::rfc1123;
use query::Query;
use xml::{Element, XmlWriter};

/// The parts of an HTTP request the codec reads.
#[derive(Clone, Copy, Debug)]
pub struct HttpRequestParts<'a> {
    pub method: &'a str,
    /// The `Host` header (with any port).
    pub host: Option<&'a str>,
    /// The raw (still percent-encoded) path.
    pub path: &'a str,
    /// The raw query string (without `?`), if any.
    pub query: Option<&'a str>,
    pub headers: &'a HeaderMap,
    pub body: &'a [u8],
}

pub use veil_http::HttpReply;

/// Where a request points: the account and the path segments below it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Location {
    /// The account as the request names it, `-secondary` included.
    pub account: String,
    pub segments: Vec<String>,
}

impl Location {
    /// The account without the `-secondary` suffix of the read-only endpoint.
    pub fn primary_account(&self) -> &str {
        self.account
            .strip_suffix(limits::SECONDARY_SUFFIX)
            .unwrap_or(&self.account)
    }
}

/// Path style (`/<account>/<queue>…`) when the host is an IP address or `localhost` (or absent); otherwise
/// the account is the first label of a dotted host name (`acct.queue.example`).
pub fn locate(host: Option<&str>, path: &str) -> AzureResult<Location> {
    let mut segments: Vec<String> = path
        .split('/')
        .filter(|s| !s.is_empty())
        .map(query::decode_component)
        .collect();
    let host_name = host.map(host_without_port).unwrap_or("");
    let path_style = host_name.is_empty()
        || host_name.eq_ignore_ascii_case("localhost")
        || host_name.parse::<IpAddr>().is_ok()
        || !host_name.contains('.');
    let account = if path_style {
        if segments.is_empty() {
            return Err(AzureError::new(ErrorCode::InvalidUri));
        }
        segments.remove(0)
    } else {
        host_name.split('.').next().unwrap_or_default().to_string()
    };
    Ok(Location { account, segments })
}

fn host_without_port(host: &str) -> &str {
    if let Some(rest) = host.strip_prefix('[') {
        // [::1]:10001
        return rest.split(']').next().unwrap_or(rest);
    }
    match host.rsplit_once(':') {
        Some((name, port)) if port.bytes().all(|b| b.is_ascii_digit()) => name,
        _ => host,
    }
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

const META_PREFIX: &str = "x-ms-meta-";

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
    let doc = xml::parse(body).map_err(|e| {
        AzureError::with_message(
            ErrorCode::InvalidXmlDocument,
            format!(
                "{} ({})",
                ErrorCode::InvalidXmlDocument.default_message(),
                e.0
            ),
        )
    })?;
    let text = match (doc.name.as_str(), doc.child("MessageText")) {
        ("QueueMessage", Some(text)) => text.text.clone(),
        _ => {
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

fn invalid_xml(reason: impl std::fmt::Display) -> AzureError {
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
    let mut identifiers = Vec::new();
    for item in doc.children_named("SignedIdentifier") {
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
        identifiers.push(SignedIdentifier {
            id,
            start: field("Start"),
            expiry: field("Expiry"),
            permission,
        });
    }
    if identifiers.len() > limits::SIGNED_IDENTIFIERS_MAX {
        return Err(invalid_xml(format!(
            "at most {} signed identifiers are allowed",
            limits::SIGNED_IDENTIFIERS_MAX
        )));
    }
    Ok(identifiers)
}

fn header<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

fn unsupported_verb(method: &str) -> AzureError {
    AzureError::new(ErrorCode::UnsupportedHttpVerb).detail("Verb", method)
}

fn preflight(parts: &HttpRequestParts<'_>) -> AzureResult<Operation> {
    let origin = header(parts.headers, "origin");
    let method = header(parts.headers, "access-control-request-method");
    let (Some(origin), Some(method)) = (origin, method) else {
        return Err(AzureError::with_message(
            ErrorCode::CorsPreflightFailure,
            "A CORS preflight request needs the Origin and Access-Control-Request-Method headers.",
        ));
    };
    let headers = header(parts.headers, "access-control-request-headers")
        .unwrap_or_default()
        .split(',')
        .map(|h| h.trim().to_ascii_lowercase())
        .filter(|h| !h.is_empty())
        .collect();
    Ok(Operation::Preflight {
        origin: origin.to_string(),
        method: method.to_ascii_uppercase(),
        headers,
    })
}

/// Decodes the operation of a request whose location is known.
pub fn decode(parts: &HttpRequestParts<'_>, location: &Location) -> AzureResult<Operation> {
    let query = Query::parse(parts.query);
    let method = parts.method.to_ascii_uppercase();
    let comp = query.get("comp");
    let restype = query.get("restype");
    if method == "OPTIONS" {
        return preflight(parts);
    }
    // `timeout` is accepted on every operation; it only bounds the server's time, which Veil never exceeds.
    let _ = int_param(&query, "timeout", 0, i64::MAX)?;
    match location.segments.as_slice() {
        [] => match (method.as_str(), restype, comp) {
            ("GET", _, Some("list")) => {
                let max_results = int_param(&query, "maxresults", 1, i64::MAX)?
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
            ("GET", Some("service"), Some("properties")) => Ok(Operation::GetServiceProperties),
            ("PUT", Some("service"), Some("properties")) => {
                let doc = xml::parse(parts.body).map_err(|e| invalid_xml(e.0))?;
                if doc.name != "StorageServiceProperties" {
                    return Err(invalid_xml(
                        "the root element must be StorageServiceProperties",
                    ));
                }
                Ok(Operation::SetServiceProperties {
                    xml: String::from_utf8_lossy(parts.body).into_owned(),
                })
            }
            ("GET", Some("service"), Some("stats")) => Ok(Operation::GetServiceStats),
            (_, Some("service"), Some("properties" | "stats")) | (_, _, Some("list")) => {
                Err(unsupported_verb(&method))
            }
            _ => Err(AzureError::new(ErrorCode::InvalidQueryParameterValue)
                .detail("QueryParameterName", "comp")
                .detail("QueryParameterValue", comp.unwrap_or_default())
                .detail("Reason", "Unknown service operation.")),
        },
        [queue] => {
            validate_queue_name(queue)?;
            let queue = queue.clone();
            match (method.as_str(), comp) {
                ("PUT", None) => Ok(Operation::CreateQueue {
                    queue,
                    metadata: metadata_from_headers(parts.headers)?,
                }),
                ("DELETE", None) => Ok(Operation::DeleteQueue { queue }),
                ("GET" | "HEAD", Some("metadata")) => Ok(Operation::GetMetadata { queue }),
                ("PUT", Some("metadata")) => Ok(Operation::SetMetadata {
                    queue,
                    metadata: metadata_from_headers(parts.headers)?,
                }),
                ("GET" | "HEAD", Some("acl")) => Ok(Operation::GetAcl { queue }),
                ("PUT", Some("acl")) => Ok(Operation::SetAcl {
                    queue,
                    identifiers: signed_identifiers(parts.body)?,
                }),
                (_, Some(other)) if other != "metadata" && other != "acl" => Err(
                    AzureError::invalid_query("comp", other, "Unknown queue operation."),
                ),
                _ => Err(unsupported_verb(&method)),
            }
        }
        [queue, messages] if messages == "messages" => {
            validate_queue_name(queue)?;
            let queue = queue.clone();
            match method.as_str() {
                "POST" => {
                    let ttl = match int_param(
                        &query,
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
                        &query,
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
                        text: message_text(parts.body)?,
                        visibility_s,
                        ttl,
                    })
                }
                "GET" => {
                    let count = count_param(&query)?;
                    if query
                        .get("peekonly")
                        .is_some_and(|v| v.eq_ignore_ascii_case("true"))
                    {
                        return Ok(Operation::PeekMessages { queue, count });
                    }
                    let visibility_s = int_param(
                        &query,
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
                "DELETE" => Ok(Operation::ClearMessages { queue }),
                _ => Err(unsupported_verb(&method)),
            }
        }
        [queue, messages, message_id] if messages == "messages" => {
            validate_queue_name(queue)?;
            let queue = queue.clone();
            let receipt_text = query
                .get("popreceipt")
                .ok_or_else(|| AzureError::missing_query("popreceipt"))?;
            let pop_receipt = pop_receipt::decode(receipt_text).ok_or_else(|| {
                AzureError::invalid_query("popreceipt", receipt_text, "Invalid pop receipt format")
            })?;
            match method.as_str() {
                "DELETE" => Ok(Operation::DeleteMessage {
                    queue,
                    message_id: message_id.clone(),
                    pop_receipt,
                }),
                "PUT" => {
                    let visibility_s = int_param(
                        &query,
                        "visibilitytimeout",
                        0,
                        limits::VISIBILITY_S_MAX as i64,
                    )?
                    .ok_or_else(|| AzureError::missing_query("visibilitytimeout"))?
                        as u64;
                    let text = if parts.body.iter().all(u8::is_ascii_whitespace) {
                        None
                    } else {
                        Some(message_text(parts.body)?)
                    };
                    Ok(Operation::UpdateMessage {
                        queue,
                        message_id: message_id.clone(),
                        pop_receipt,
                        visibility_s,
                        text,
                    })
                }
                _ => Err(unsupported_verb(&method)),
            }
        }
        _ => Err(AzureError::new(ErrorCode::InvalidUri)),
    }
}

// ----- encoding -----

const XML: &str = "application/xml";

fn xml_reply(status: u16, body: String) -> HttpReply {
    HttpReply {
        status,
        headers: vec![("content-type".into(), XML.into())],
        body: body.into_bytes(),
    }
}

fn write_metadata(xml: &mut XmlWriter, metadata: &Metadata) {
    if metadata.is_empty() {
        xml.empty("Metadata");
        return;
    }
    xml.open("Metadata");
    for (name, value) in metadata {
        xml.leaf(name, value);
    }
    xml.close("Metadata");
}

fn write_messages(messages: &[QueueMessage]) -> String {
    let mut xml = xml::writer();
    xml.open("QueueMessagesList");
    for m in messages {
        xml.open("QueueMessage");
        xml.leaf("MessageId", &m.message_id);
        xml.leaf("InsertionTime", &rfc1123(m.insertion_time));
        xml.leaf("ExpirationTime", &rfc1123(m.expiration_time));
        if let Some(receipt) = &m.pop_receipt {
            xml.leaf("PopReceipt", receipt);
        }
        if let Some(at) = m.time_next_visible {
            xml.leaf("TimeNextVisible", &rfc1123(at));
        }
        if let Some(count) = m.dequeue_count {
            xml.leaf("DequeueCount", &count.to_string());
        }
        if let Some(text) = &m.text {
            xml.leaf("MessageText", text);
        }
        xml.close("QueueMessage");
    }
    xml.close("QueueMessagesList");
    xml.finish()
}

fn write_queue_list(list: &QueueList) -> String {
    let mut xml = xml::writer();
    xml.open_with(
        "EnumerationResults",
        "ServiceEndpoint",
        &list.service_endpoint,
    );
    if let Some(prefix) = &list.prefix {
        xml.leaf("Prefix", prefix);
    }
    if let Some(marker) = &list.marker {
        xml.leaf("Marker", marker);
    }
    if let Some(max) = list.max_results {
        xml.leaf("MaxResults", &max.to_string());
    }
    if list.queues.is_empty() {
        xml.empty("Queues");
    } else {
        xml.open("Queues");
        for queue in &list.queues {
            xml.open("Queue");
            xml.leaf("Name", &queue.name);
            if let Some(metadata) = &queue.metadata {
                write_metadata(&mut xml, metadata);
            }
            xml.close("Queue");
        }
        xml.close("Queues");
    }
    match &list.next_marker {
        Some(marker) => xml.leaf("NextMarker", marker),
        None => xml.empty("NextMarker"),
    };
    xml.close("EnumerationResults");
    xml.finish()
}

/// The `<SignedIdentifiers>` document of a queue ACL (also what Veil stores).
pub fn write_signed_identifiers(identifiers: &[SignedIdentifier]) -> String {
    let mut xml = xml::writer();
    if identifiers.is_empty() {
        xml.empty("SignedIdentifiers");
        return xml.finish();
    }
    xml.open("SignedIdentifiers");
    for identifier in identifiers {
        xml.open("SignedIdentifier");
        xml.leaf("Id", &identifier.id);
        xml.open("AccessPolicy");
        for (name, value) in [
            ("Start", &identifier.start),
            ("Expiry", &identifier.expiry),
            ("Permission", &identifier.permission),
        ] {
            if let Some(value) = value {
                xml.leaf(name, value);
            }
        }
        xml.close("AccessPolicy");
        xml.close("SignedIdentifier");
    }
    xml.close("SignedIdentifiers");
    xml.finish()
}

/// Encodes a successful answer.
pub fn encode_output(output: &Output) -> HttpReply {
    match output {
        Output::Empty { status } => HttpReply {
            status: *status,
            headers: Vec::new(),
            body: Vec::new(),
        },
        Output::QueueList(list) => xml_reply(200, write_queue_list(list)),
        Output::Xml(document) => xml_reply(200, document.clone()),
        Output::ServiceStats { last_sync_time } => {
            let mut xml = xml::writer();
            xml.open("StorageServiceStats").open("GeoReplication");
            xml.leaf("Status", "live");
            xml.leaf("LastSyncTime", &rfc1123(*last_sync_time));
            xml.close("GeoReplication").close("StorageServiceStats");
            xml_reply(200, xml.finish())
        }
        Output::Metadata {
            metadata,
            approximate_count,
        } => {
            let mut headers: Vec<(std::borrow::Cow<'static, str>, String)> = metadata
                .iter()
                .map(|(k, v)| (format!("{META_PREFIX}{k}").into(), v.clone()))
                .collect();
            headers.push((
                "x-ms-approximate-messages-count".into(),
                approximate_count.to_string(),
            ));
            HttpReply {
                status: 200,
                headers,
                body: Vec::new(),
            }
        }
        Output::Acl(identifiers) => xml_reply(200, write_signed_identifiers(identifiers)),
        Output::Messages { status, messages } => xml_reply(*status, write_messages(messages)),
        Output::Updated {
            pop_receipt,
            time_next_visible,
        } => HttpReply {
            status: 204,
            headers: vec![
                ("x-ms-popreceipt".into(), pop_receipt.clone()),
                ("x-ms-time-next-visible".into(), rfc1123(*time_next_visible)),
            ],
            body: Vec::new(),
        },
        Output::Preflight {
            allow_origin,
            allow_methods,
            allow_headers,
            max_age_s,
        } => {
            let mut headers = vec![
                ("access-control-allow-origin".into(), allow_origin.clone()),
                ("access-control-allow-methods".into(), allow_methods.clone()),
                ("access-control-max-age".into(), max_age_s.to_string()),
            ];
            if !allow_headers.is_empty() {
                headers.push(("access-control-allow-headers".into(), allow_headers.clone()));
            }
            if allow_origin != "*" {
                headers.push(("access-control-allow-credentials".into(), "true".into()));
            }
            HttpReply {
                status: 200,
                headers,
                body: Vec::new(),
            }
        }
    }
}

/// Encodes an error: `<Error><Code/><Message/>…details…</Error>` plus `x-ms-error-code`. The message ends
/// with the request id and time, as Azure's do.
pub fn encode_error(error: &AzureError, request_id: &str, now_iso: &str) -> HttpReply {
    let mut xml = xml::writer();
    xml.open("Error");
    xml.leaf("Code", error.code.as_str());
    xml.leaf(
        "Message",
        &format!("{}\nRequestId:{request_id}\nTime:{now_iso}", error.message),
    );
    for (name, value) in &error.details {
        xml.leaf(name, value);
    }
    xml.close("Error");
    let mut reply = xml_reply(error.code.status(), xml.finish());
    reply
        .headers
        .push(("x-ms-error-code".into(), error.code.as_str().into()));
    reply
}

/// The element tree of a stored or default document (used by the service for service properties).
pub fn parse_document(text: &str) -> Option<Element> {
    xml::parse(text.as_bytes()).ok()
}
