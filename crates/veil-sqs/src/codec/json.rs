//! The AWS JSON 1.0 protocol: the request body is a JSON object of the action's parameters; answers are JSON
//! objects named as in botocore's model, and errors carry `__type` plus the `x-amzn-query-error` header.

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;
use serde_json::{json, Map, Value};
use veil_core::{AttributeData, Attributes};

use super::fields::{decode_object, Fields, Shaped};
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

fn message_attributes_json(attributes: &Attributes) -> Value {
    let mut out = Map::new();
    for (name, attribute) in attributes {
        let mut value = Map::new();
        value.insert("DataType".into(), json!(attribute.data_type));
        match &attribute.value {
            AttributeData::String(text) => value.insert("StringValue".into(), json!(text)),
            AttributeData::Binary(bytes) => {
                value.insert("BinaryValue".into(), json!(BASE64.encode(bytes)))
            }
        };
        out.insert(name.clone(), Value::Object(value));
    }
    Value::Object(out)
}

fn sent_json(sent: &SentMessageResult, with_id: bool) -> Value {
    let mut out = Map::new();
    if with_id {
        out.insert("Id".into(), json!(sent.id));
    }
    out.insert("MessageId".into(), json!(sent.message_id));
    out.insert("MD5OfMessageBody".into(), json!(sent.md5_of_message_body));
    if let Some(md5) = &sent.md5_of_message_attributes {
        out.insert("MD5OfMessageAttributes".into(), json!(md5));
    }
    if let Some(md5) = &sent.md5_of_message_system_attributes {
        out.insert("MD5OfMessageSystemAttributes".into(), json!(md5));
    }
    if let Some(sequence_number) = &sent.sequence_number {
        out.insert("SequenceNumber".into(), json!(sequence_number));
    }
    Value::Object(out)
}

fn failures_json(failed: &[BatchFailure]) -> Value {
    Value::Array(
        failed
            .iter()
            .map(|failure| {
                json!({
                    "Id": failure.id,
                    "SenderFault": failure.sender_fault,
                    "Code": failure.code,
                    "Message": failure.message,
                })
            })
            .collect(),
    )
}

/// The JSON body of a successful answer.
pub fn encode_output(action: ActionName, output: &Output) -> Value {
    match output {
        Output::Empty => json!({}),
        Output::QueueUrl(url) => json!({ "QueueUrl": url }),
        Output::QueueUrls { urls, next_token } => {
            queue_urls_json(action, urls, next_token.as_deref())
        }
        // No attribute to show (none asked for, or none the queue has a value for): AWS sends no
        // `Attributes` member at all (moto's AWS-verified `test_get_queue_attributes`).
        Output::QueueAttributes(attributes) if attributes.is_empty() => json!({}),
        Output::QueueAttributes(attributes) => {
            json!({ "Attributes": string_pairs_json(attributes) })
        }
        Output::Tags(tags) => {
            if tags.is_empty() {
                json!({})
            } else {
                json!({ "Tags": tags })
            }
        }
        Output::SendMessage(sent) => sent_json(sent, false),
        Output::SendMessageBatch { successful, failed } => json!({
            "Successful": successful.iter().map(|sent| sent_json(sent, true)).collect::<Vec<_>>(),
            "Failed": failures_json(failed),
        }),
        Output::ReceiveMessage(messages) if messages.is_empty() => json!({}),
        Output::ReceiveMessage(messages) => json!({
            "Messages": messages.iter().map(received_json).collect::<Vec<_>>(),
        }),
        Output::BatchIds { successful, failed } => json!({
            "Successful": successful.iter().map(|id| json!({ "Id": id })).collect::<Vec<_>>(),
            "Failed": failures_json(failed),
        }),
        Output::TaskHandle(handle) => json!({ "TaskHandle": handle }),
        // `Results` is there even when empty (moto's ListMessageMoveTasks tests read it unconditionally).
        Output::MoveTasks(tasks) => json!({
            "Results": tasks.iter().map(move_task_json).collect::<Vec<_>>(),
        }),
        Output::MessagesMoved(moved) => json!({ "ApproximateNumberOfMessagesMoved": moved }),
    }
}

/// One ListMessageMoveTasks entry; the optional members only when they apply.
fn move_task_json(task: &MoveTaskEntry) -> Value {
    let mut out = Map::new();
    if let Some(handle) = &task.task_handle {
        out.insert("TaskHandle".into(), json!(handle));
    }
    out.insert("Status".into(), json!(task.status));
    out.insert("SourceArn".into(), json!(task.source_arn));
    if let Some(arn) = &task.destination_arn {
        out.insert("DestinationArn".into(), json!(arn));
    }
    if let Some(rate) = task.max_number_of_messages_per_second {
        out.insert("MaxNumberOfMessagesPerSecond".into(), json!(rate));
    }
    out.insert(
        "ApproximateNumberOfMessagesMoved".into(),
        json!(task.approximate_number_of_messages_moved),
    );
    out.insert(
        "ApproximateNumberOfMessagesToMove".into(),
        json!(task.approximate_number_of_messages_to_move),
    );
    if let Some(reason) = task.failure_reason {
        out.insert("FailureReason".into(), json!(reason));
    }
    out.insert("StartedTimestamp".into(), json!(task.started_timestamp));
    Value::Object(out)
}

/// ListQueues' and ListDeadLetterSourceQueues' answer.
fn queue_urls_json(action: ActionName, urls: &[String], next_token: Option<&str>) -> Value {
    let mut out = Map::new();
    // botocore spells this member differently per action.
    let key = if action == ActionName::ListDeadLetterSourceQueues {
        "queueUrls"
    } else {
        "QueueUrls"
    };
    // AWS omits an empty ListQueues list but ListDeadLetterSourceQueues requires the member.
    if !urls.is_empty() || action == ActionName::ListDeadLetterSourceQueues {
        out.insert(key.into(), json!(urls));
    }
    if let Some(token) = next_token {
        out.insert("NextToken".into(), json!(token));
    }
    Value::Object(out)
}

/// Name/value pairs (queue or system attributes) as a JSON object.
fn string_pairs_json(pairs: &[(String, String)]) -> Map<String, Value> {
    pairs
        .iter()
        .map(|(name, value)| (name.clone(), json!(value)))
        .collect()
}

fn received_json(message: &ReceivedMessage) -> Value {
    let mut out = Map::new();
    out.insert("MessageId".into(), json!(message.message_id));
    out.insert("ReceiptHandle".into(), json!(message.receipt_handle));
    out.insert("MD5OfBody".into(), json!(message.md5_of_body));
    out.insert("Body".into(), json!(message.body));
    if !message.attributes.is_empty() {
        out.insert(
            "Attributes".into(),
            Value::Object(string_pairs_json(&message.attributes)),
        );
    }
    if let Some(md5) = &message.md5_of_message_attributes {
        out.insert("MD5OfMessageAttributes".into(), json!(md5));
        out.insert(
            "MessageAttributes".into(),
            message_attributes_json(&message.message_attributes),
        );
    }
    Value::Object(out)
}

pub(crate) fn reply(output_body: &Value, request_id: &str) -> HttpReply {
    HttpReply::new(200, output_body.to_string().into_bytes())
        .with_header("content-type", CONTENT_TYPE)
        .with_header("x-amzn-RequestId", request_id)
}

/// An error answer: `__type` + `message`, and the Query code in `x-amzn-query-error` for SDKs that map it.
pub fn encode_error(error: &SqsError, request_id: &str) -> HttpReply {
    let body =
        json!({ "__type": error.code.json_type(), "message": error.message_in(Protocol::Json) });
    let reply = HttpReply::new(error.code.status(), body.to_string().into_bytes())
        .with_header("content-type", CONTENT_TYPE)
        .with_header("x-amzn-RequestId", request_id);
    if error.code.has_query_code() {
        let code = format!("{};{}", error.code.query_code(), error.code.fault());
        reply.with_header("x-amzn-query-error", code)
    } else {
        reply
    }
}
