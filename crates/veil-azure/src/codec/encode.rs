//! Encoding: typed outputs and [`AzureError`]s into status, headers and XML bodies, in the element order and
//! date format (RFC 1123) Azure clients parse. Every output has its own small writer.

use std::borrow::Cow;

use super::decode::META_PREFIX;
use super::xml::{self, XmlWriter};
use super::HttpReply;
use crate::api::*;
use crate::error::AzureError;
use crate::time::{rfc1123, write_rfc1123};

const XML: &str = "application/xml";

fn xml_reply(status: u16, body: String) -> HttpReply {
    HttpReply::new(status, body.into_bytes()).with_header("content-type", XML)
}

/// Encodes a successful answer.
pub fn encode_output(output: &Output) -> HttpReply {
    match output {
        Output::Empty { status } => HttpReply::new(*status, Vec::new()),
        Output::QueueList(list) => xml_reply(200, write_queue_list(list)),
        Output::Xml(document) => xml_reply(200, document.clone()),
        Output::ServiceStats { last_sync_time } => xml_reply(200, write_stats(*last_sync_time)),
        Output::Metadata {
            metadata,
            approximate_count,
        } => metadata_reply(metadata, *approximate_count),
        Output::Acl(identifiers) => xml_reply(200, write_signed_identifiers(identifiers)),
        Output::Messages { status, messages } => xml_reply(*status, write_messages(messages)),
        Output::Updated {
            pop_receipt,
            time_next_visible,
        } => HttpReply::new(204, Vec::new())
            .with_header("x-ms-popreceipt", pop_receipt.clone())
            .with_header("x-ms-time-next-visible", rfc1123(*time_next_visible)),
        Output::UserDelegationKey(key) => xml_reply(200, write_user_delegation_key(key)),
        Output::Preflight {
            allow_origin,
            allow_methods,
            allow_headers,
            max_age_s,
        } => preflight_reply(allow_origin, allow_methods, allow_headers, *max_age_s),
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
    let mut reply = xml_reply(error.code.status(), xml.finish())
        .with_header("x-ms-error-code", error.code.as_str());
    for (name, value) in &error.headers {
        reply = reply.with_header(*name, value.clone());
    }
    reply
}

fn write_user_delegation_key(key: &UserDelegationKey) -> String {
    let mut out = xml::writer();
    out.open("UserDelegationKey");
    out.leaf("SignedOid", &key.signed_oid);
    out.leaf("SignedTid", &key.signed_tid);
    out.leaf("SignedStart", &key.signed_start);
    out.leaf("SignedExpiry", &key.signed_expiry);
    out.leaf("SignedService", &key.signed_service);
    out.leaf("SignedVersion", &key.signed_version);
    if let Some(tid) = &key.signed_delegated_user_tid {
        out.leaf("SignedDelegatedUserTid", tid);
    }
    out.leaf("Value", &key.value);
    out.close("UserDelegationKey");
    out.finish()
}

fn write_stats(last_sync_time: veil_core::Millis) -> String {
    let mut xml = xml::writer();
    xml.open("StorageServiceStats").open("GeoReplication");
    xml.leaf("Status", "live");
    xml.leaf("LastSyncTime", &rfc1123(last_sync_time));
    xml.close("GeoReplication").close("StorageServiceStats");
    xml.finish()
}

fn metadata_reply(metadata: &Metadata, approximate_count: u64) -> HttpReply {
    let mut headers: Vec<(Cow<'static, str>, String)> = metadata
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

fn preflight_reply(origin: &str, methods: &str, headers: &str, max_age_s: u64) -> HttpReply {
    let mut reply = HttpReply::new(200, Vec::new())
        .with_header("access-control-allow-origin", origin)
        .with_header("access-control-allow-methods", methods)
        .with_header("access-control-max-age", max_age_s.to_string());
    if !headers.is_empty() {
        reply = reply.with_header("access-control-allow-headers", headers);
    }
    if origin != "*" {
        reply = reply.with_header("access-control-allow-credentials", "true");
    }
    reply
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
    // The fixed elements and dates of a message take about 300 bytes; its text and receipt vary.
    let size: usize = messages
        .iter()
        .map(|m| {
            300 + m.message_id.len()
                + m.pop_receipt.as_ref().map_or(0, String::len)
                + m.text
                    .as_ref()
                    .map_or(0, |text| text.len() + text.len() / 8)
        })
        .sum();
    let mut xml = xml::writer_with_capacity(64 + size);
    xml.open("QueueMessagesList");
    for m in messages {
        write_message(&mut xml, m);
    }
    xml.close("QueueMessagesList");
    xml.finish()
}

fn write_message(xml: &mut XmlWriter, m: &QueueMessage) {
    xml.open("QueueMessage");
    xml.leaf("MessageId", &m.message_id);
    // Dates need no escaping, so they are written straight into the document.
    xml.leaf_unescaped("InsertionTime", |out| write_rfc1123(out, m.insertion_time));
    xml.leaf_unescaped("ExpirationTime", |out| {
        write_rfc1123(out, m.expiration_time)
    });
    if let Some(receipt) = &m.pop_receipt {
        xml.leaf("PopReceipt", receipt);
    }
    if let Some(at) = m.time_next_visible {
        xml.leaf_unescaped("TimeNextVisible", |out| write_rfc1123(out, at));
    }
    if let Some(count) = m.dequeue_count {
        xml.leaf_int("DequeueCount", count);
    }
    if let Some(text) = &m.text {
        // A body sent through another protocol may not be UTF-8, or may hold characters XML 1.0 cannot carry
        // (a KubeMQ body is any bytes): each byte that is not UTF-8 and each such character is shown as U+FFFD
        // (the writer's rule, veil-xml), so the answer stays well-formed (docs/semantics.md §7). A UTF-8 body
        // XML can carry is borrowed as it is.
        xml.leaf("MessageText", &String::from_utf8_lossy(text));
    }
    xml.close("QueueMessage");
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
    write_queues(&mut xml, &list.queues);
    match &list.next_marker {
        Some(marker) => xml.leaf("NextMarker", marker),
        None => xml.empty("NextMarker"),
    };
    xml.close("EnumerationResults");
    xml.finish()
}

fn write_queues(xml: &mut XmlWriter, queues: &[QueueItem]) {
    if queues.is_empty() {
        xml.empty("Queues");
        return;
    }
    xml.open("Queues");
    for queue in queues {
        xml.open("Queue");
        xml.leaf("Name", &queue.name);
        if let Some(metadata) = &queue.metadata {
            write_metadata(xml, metadata);
        }
        xml.close("Queue");
    }
    xml.close("Queues");
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
