//! The pure codec: HTTP request parts in, the account and a typed [`Operation`] out; typed outputs and errors
//! in, status, headers and XML out. No I/O, so every wire rule is testable on bytes. [`locate`] finds the
//! account and path, [`decode`] names the operation ([`decode::route`], before authorization) and reads its
//! parameters ([`decode::decode_operation`]), [`encode`] writes answers and errors.

pub mod decode;
pub mod encode;
pub mod locate;
pub mod properties;
pub mod query;
pub mod xml;

#[cfg(test)]
mod tests;

use axum::http::HeaderMap;

pub use decode::{
    decode_operation, message_text, metadata_from_headers, route, signed_identifiers,
    validate_metadata_name, validate_queue_name,
};
pub use encode::{encode_error, encode_output, write_signed_identifiers};
pub use locate::{locate, Location};
pub use veil_http::HttpReply;

/// The parts of an HTTP request the codec reads once the operation is named (the method, path and query
/// have been read by [`locate`] and [`route`]).
#[derive(Clone, Copy, Debug)]
pub struct HttpRequestParts<'a> {
    pub headers: &'a HeaderMap,
    pub body: &'a [u8],
}

/// The element tree of a stored or default document (used by the service for service properties).
pub fn parse_document(text: &str) -> Option<xml::Element> {
    xml::parse(text.as_bytes()).ok()
}
