//! The AWS JSON 1.0 protocol: the request body is a JSON object of the action's parameters; answers are JSON
//! objects named as in botocore's model, and errors carry `__type` plus the `x-amzn-query-error` header.

use super::fields::{decode_object, Fields, Shaped};
use super::json_out::{size_hint, write_received, Answer, ErrorBody};
use super::params::{decode_action, Params};
use super::HttpReply;
use crate::api::*;
use crate::error::{ErrorCode, SqsError, SqsResult};

pub(crate) const CONTENT_TYPE: &str = "application/x-amz-json-1.0";
/// The `X-Amz-Target` prefix of every SQS action.
pub(crate) const TARGET_PREFIX: &str = "AmazonSQS.";

/// Decodes a JSON protocol request from its `X-Amz-Target` and body.
pub fn decode(target: &str, body: &[u8]) -> SqsResult<Action> {
    let name = target
        .strip_prefix(TARGET_PREFIX)
        .and_then(ActionName::parse)
        .ok_or_else(|| {
            SqsError::new(
                ErrorCode::UnknownOperation,
                format!("The operation {target} is not known to this service."),
            )
        })?;
    let fields = if body.iter().all(u8::is_ascii_whitespace) {
        // SDKs may send no body at all for actions without required parameters.
        Fields::default()
    } else {
        // Straight into the typed members, strings borrowed from the body; the whole body is parsed (and its
        // syntax errors reported) before its shape is judged, as when it was first read into a `Value`.
        let mut deserializer = serde_json::Deserializer::from_slice(body);
        let parsed = decode_object(&mut deserializer)
            .and_then(|object| deserializer.end().map(|()| object))
            .map_err(|error| {
                SqsError::new(
                    ErrorCode::Serialization,
                    format!("The request body is not valid JSON: {error}"),
                )
            })?;
        match parsed {
            Shaped::Fits(fields) => fields,
            Shaped::Null | Shaped::Misfit => {
                return Err(SqsError::new(
                    ErrorCode::Serialization,
                    "The request body must be a JSON object.",
                ))
            }
        }
    };
    decode_action(name, &Params::new(&fields))
}

/// The JSON body of a successful answer, written by serde straight into a buffer sized for it (`json_out.rs`).
/// It fails only if serde cannot write a shape, which none of ours is.
pub fn encode_output(action: ActionName, output: &Output) -> serde_json::Result<Vec<u8>> {
    let mut body = Vec::with_capacity(size_hint(output));
    match output {
        Output::ReceiveMessage(messages) if !messages.is_empty() => {
            write_received(&mut body, messages)?;
        }
        _ => serde_json::to_writer(&mut body, &Answer { action, output })?,
    }
    Ok(body)
}

pub(crate) fn reply(body: Vec<u8>, request_id: &str) -> HttpReply {
    HttpReply::new(200, body)
        .with_header("content-type", CONTENT_TYPE)
        .with_header("x-amzn-RequestId", request_id)
}

/// An error answer: `__type` + `message`, and the Query code in `x-amzn-query-error` for SDKs that map it.
pub fn encode_error(error: &SqsError, request_id: &str) -> HttpReply {
    let body = ErrorBody {
        type_name: error.code.json_type(),
        message: error.message_in(Protocol::Json),
    };
    // Two strings cannot fail to serialize; were it ever to, the status and headers still tell the error.
    let body = serde_json::to_vec(&body).unwrap_or_default();
    let reply = HttpReply::new(error.code.status(), body)
        .with_header("content-type", CONTENT_TYPE)
        .with_header("x-amzn-RequestId", request_id);
    if error.code.has_query_code() {
        let code = format!("{};{}", error.code.query_code(), error.code.fault());
        reply.with_header("x-amzn-query-error", code)
    } else {
        reply
    }
}
