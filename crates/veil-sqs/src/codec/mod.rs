//! The pure codec: HTTP request parts in, typed [`SqsRequest`] out; typed outputs and errors in, status,
//! headers and body out. No I/O, so every wire rule is testable on bytes.

mod fields;
pub mod json;
mod json_out;
mod params;
pub mod query;

#[cfg(test)]
mod tests;

#[cfg(test)]
mod fifo_tests;

#[cfg(test)]
mod query_tests;

#[cfg(test)]
mod json_out_tests;

use crate::api::{Action, ActionName, Output, Protocol, SqsRequest};
use crate::error::{ErrorCode, SqsError};

/// The parts of an HTTP request the codec reads.
#[derive(Clone, Copy, Debug)]
pub struct HttpRequestParts<'a> {
    pub method: &'a str,
    /// The raw query string (without `?`), if any.
    pub query: Option<&'a str>,
    /// The `X-Amz-Target` header, which selects the JSON protocol.
    pub target: Option<&'a str>,
    pub body: &'a [u8],
}

pub use veil_http::HttpReply;

/// JSON when `X-Amz-Target` is present, Query otherwise.
pub fn protocol_of(target: Option<&str>) -> Protocol {
    if target.is_some() {
        Protocol::Json
    } else {
        Protocol::Query
    }
}

/// Decodes a request. The error, if any, is to be answered in the returned protocol.
pub fn decode(parts: &HttpRequestParts<'_>) -> (Protocol, Result<SqsRequest, SqsError>) {
    let protocol = protocol_of(parts.target);
    let action: Result<Action, SqsError> = match parts.target {
        Some(target) => match parts.query {
            // An SDK's JSON request has no query string, so this costs nothing on the common path.
            Some(text) => {
                let named = query::parse_form(text.as_bytes());
                one_action(target_action(target), &named)
                    .and_then(|()| json::decode(target, parts.body))
            }
            None => json::decode(target, parts.body),
        },
        None => {
            // Query parameters may come in the query string (GET, and some POSTs) and in a form body.
            let mut pairs = parts
                .query
                .map(|text| query::parse_form(text.as_bytes()))
                .unwrap_or_default();
            if parts.method.eq_ignore_ascii_case("POST") {
                pairs.extend(query::parse_form(parts.body));
            }
            one_action(None, &pairs).and_then(|()| query::decode(&pairs))
        }
    };
    (
        protocol,
        action.map(|action| SqsRequest { protocol, action }),
    )
}

/// The action an `X-Amz-Target` names: what follows its last `.` (`AmazonSQS.SendMessage`).
pub(crate) fn target_action(target: &str) -> Option<&str> {
    target.rsplit('.').next()
}

/// A request may name its action in more than one place — `X-Amz-Target`, the query string's `Action`, a form
/// body's `Action` — only if every place names the same one. Otherwise which one counts would depend on where
/// Veil looks first, and a header or body added to a presigned URL could turn its signed `Action` into another
/// (docs/security.md, "SQS"): such a request is `InvalidAction`.
fn one_action(target: Option<&str>, pairs: &[query::FormPair<'_>]) -> Result<(), SqsError> {
    let mut named = target.into_iter().chain(
        pairs
            .iter()
            .filter(|(key, _)| key == "Action")
            .map(|(_, value)| value.as_ref()),
    );
    let Some(first) = named.next() else {
        return Ok(());
    };
    if named.all(|other| other == first) {
        Ok(())
    } else {
        Err(SqsError::new(ErrorCode::InvalidAction, ACTION_NAMED_TWICE))
    }
}

/// AWS's description of `InvalidAction` (the common errors of its Query APIs).
pub const ACTION_NAMED_TWICE: &str =
    "The action or operation requested is invalid. Verify that the action is typed correctly.";

/// Encodes a successful answer.
pub fn encode_output(
    protocol: Protocol,
    action: ActionName,
    output: &Output,
    request_id: &str,
) -> HttpReply {
    match protocol {
        Protocol::Json => match json::encode_output(action, output) {
            Ok(body) => json::reply(body, request_id),
            // No answer of ours fails to serialize; should one, the client hears of it instead of a panic.
            Err(error) => json::encode_error(
                &SqsError::new(ErrorCode::InternalError, error.to_string()),
                request_id,
            ),
        },
        Protocol::Query => query::encode_output(action, output, request_id),
    }
}

/// Encodes an error answer.
pub fn encode_error(protocol: Protocol, error: &SqsError, request_id: &str) -> HttpReply {
    match protocol {
        Protocol::Json => json::encode_error(error, request_id),
        Protocol::Query => query::encode_error(error, request_id),
    }
}
