//! The typed JSON answers (`json_out.rs`) against the encoder they replaced, kept here as the reference: for
//! every kind of answer, with each optional member present and absent, the bytes must be the same, since the
//! SDKs digest what they read.

use bytes::Bytes;
use serde_json::{json, Map, Value};
use veil_core::{AttributeData, AttributeValue, Attributes};

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;

use super::json;
use crate::api::*;

// ----- the reference: the `serde_json::Value` encoder as it was -----

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
fn reference_output(action: ActionName, output: &Output) -> Value {
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

// ----- the comparison -----

fn assert_same_bytes(action: ActionName, output: &Output) {
    let typed = json::encode_output(action, output).unwrap();
    let reference = reference_output(action, output).to_string();
    assert_eq!(String::from_utf8(typed).unwrap(), reference, "{action:?}");
}

fn sent(id: &str, optional: bool) -> SentMessageResult {
    let some = |text: &str| optional.then(|| text.to_string());
    SentMessageResult {
        id: id.into(),
        message_id: format!("m-{id}"),
        md5_of_message_body: "0cc175b9c0f1b6a831c399e269772661".into(),
        md5_of_message_attributes: some("attributes-md5"),
        md5_of_message_system_attributes: some("system-md5"),
        sequence_number: some("10000000000000000007"),
    }
}

fn failure(id: &str) -> BatchFailure {
    BatchFailure {
        id: id.into(),
        sender_fault: id.len().is_multiple_of(2),
        code: "ReceiptHandleIsInvalid".into(),
        message: "The input receipt handle \"a<b\" is not valid.\u{7f}\u{1}é".into(),
    }
}

fn message_attributes() -> Attributes {
    let mut attributes = Attributes::new();
    for (name, data_type, value) in [
        (
            "zeta",
            "String",
            AttributeData::String("A&B \"q\" \\ \r\n\t".into()),
        ),
        ("alpha", "Number.int", AttributeData::String("12".into())),
        (
            "bin",
            "Binary.raw",
            AttributeData::Binary(Bytes::from_static(&[0, 159, 255])),
        ),
    ] {
        attributes.insert(
            name.into(),
            AttributeValue {
                data_type: data_type.into(),
                value,
            },
        );
    }
    attributes
}

fn received(id: &str, full: bool) -> ReceivedMessage {
    let pairs = |names: &[&str]| {
        names
            .iter()
            .map(|n| (n.to_string(), format!("{n}-v")))
            .collect()
    };
    ReceivedMessage {
        message_id: format!("id-{id}"),
        receipt_handle: format!("rh/{id}+=="),
        md5_of_body: "md5".into(),
        body: "<x>\r\n \u{2028} \"é\" \u{1F600} \\ \u{1} \t\u{7f} a body longer than a word".into(),
        attributes: if full {
            pairs(&[
                "SentTimestamp",
                "ApproximateReceiveCount",
                "SenderId",
                "MessageGroupId",
            ])
        } else {
            Vec::new()
        },
        message_attributes: if full {
            message_attributes()
        } else {
            Attributes::new()
        },
        md5_of_message_attributes: full.then(|| "amd5".to_string()),
    }
}

#[test]
fn message_answers_are_byte_for_byte_the_values_they_replaced() {
    for optional in [false, true] {
        assert_same_bytes(
            ActionName::SendMessage,
            &Output::SendMessage(sent("", optional)),
        );
    }
    let batch = Output::SendMessageBatch {
        successful: vec![sent("a", true), sent("b", false)],
        failed: vec![failure("c"), failure("dd")],
    };
    assert_same_bytes(ActionName::SendMessageBatch, &batch);
    let empty_batch = Output::SendMessageBatch {
        successful: Vec::new(),
        failed: Vec::new(),
    };
    assert_same_bytes(ActionName::SendMessageBatch, &empty_batch);
    let messages = vec![received("1", true), received("2", false)];
    assert_same_bytes(
        ActionName::ReceiveMessage,
        &Output::ReceiveMessage(messages),
    );
    assert_same_bytes(
        ActionName::ReceiveMessage,
        &Output::ReceiveMessage(Vec::new()),
    );
    for action in [
        ActionName::DeleteMessageBatch,
        ActionName::ChangeMessageVisibilityBatch,
    ] {
        let ids = Output::BatchIds {
            successful: vec!["a".into(), "b\"c".into()],
            failed: vec![failure("x")],
        };
        assert_same_bytes(action, &ids);
    }
    for action in [
        ActionName::DeleteMessage,
        ActionName::ChangeMessageVisibility,
    ] {
        assert_same_bytes(action, &Output::Empty);
    }
}

#[test]
fn a_repeated_attribute_name_keeps_its_last_value_as_before() {
    let mut message = received("1", false);
    message.attributes = vec![
        ("B".into(), "1".into()),
        ("A".into(), "2".into()),
        ("B".into(), "3".into()),
    ];
    assert_same_bytes(
        ActionName::ReceiveMessage,
        &Output::ReceiveMessage(vec![message]),
    );
}

#[test]
fn queue_answers_are_byte_for_byte_the_values_they_replaced() {
    assert_same_bytes(
        ActionName::CreateQueue,
        &Output::QueueUrl("http://h/1/q".into()),
    );
    for action in [
        ActionName::ListQueues,
        ActionName::ListDeadLetterSourceQueues,
    ] {
        for (urls, next_token) in [
            (Vec::new(), None),
            (
                vec!["u1".to_string(), "u2".to_string()],
                Some("t".to_string()),
            ),
        ] {
            assert_same_bytes(action, &Output::QueueUrls { urls, next_token });
        }
    }
    let attributes = vec![
        ("VisibilityTimeout".to_string(), "30".to_string()),
        ("ApproximateNumberOfMessages".to_string(), "0".to_string()),
        (
            "QueueArn".to_string(),
            "arn:aws:sqs:us-east-1:1:q".to_string(),
        ),
    ];
    assert_same_bytes(
        ActionName::GetQueueAttributes,
        &Output::QueueAttributes(attributes),
    );
    assert_same_bytes(
        ActionName::GetQueueAttributes,
        &Output::QueueAttributes(Vec::new()),
    );
    let tags = [("b", "2"), ("a", "1")]
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .into();
    assert_same_bytes(ActionName::ListQueueTags, &Output::Tags(tags));
    assert_same_bytes(ActionName::ListQueueTags, &Output::Tags(Default::default()));
}

#[test]
fn move_task_answers_are_byte_for_byte_the_values_they_replaced() {
    assert_same_bytes(
        ActionName::StartMessageMoveTask,
        &Output::TaskHandle("h".into()),
    );
    assert_same_bytes(ActionName::CancelMessageMoveTask, &Output::MessagesMoved(7));
    let task = |full: bool| MoveTaskEntry {
        task_handle: full.then(|| "handle".to_string()),
        status: if full { "RUNNING" } else { "FAILED" },
        source_arn: "arn:aws:sqs:us-east-1:1:dlq".into(),
        destination_arn: full.then(|| "arn:aws:sqs:us-east-1:1:q".to_string()),
        max_number_of_messages_per_second: full.then_some(50),
        approximate_number_of_messages_moved: 3,
        approximate_number_of_messages_to_move: 10,
        failure_reason: (!full).then_some("AWS.SimpleQueueService.NonExistentQueue"),
        started_timestamp: 1_700_000_000_000,
    };
    assert_same_bytes(
        ActionName::ListMessageMoveTasks,
        &Output::MoveTasks(vec![task(true), task(false)]),
    );
    assert_same_bytes(
        ActionName::ListMessageMoveTasks,
        &Output::MoveTasks(Vec::new()),
    );
}

#[test]
fn error_bodies_are_byte_for_byte_the_values_they_replaced() {
    let error = crate::error::SqsError::queue_does_not_exist();
    let reply = json::encode_error(&error, "r");
    let reference = json!({
        "__type": error.code.json_type(),
        "message": error.message_in(Protocol::Json),
    });
    assert_eq!(
        String::from_utf8(reply.body).unwrap(),
        reference.to_string()
    );
}

#[test]
fn a_string_is_escaped_exactly_as_serde_json_escapes_it() {
    let mut texts: Vec<String> = Vec::new();
    // Every ASCII byte and a few non-ASCII characters, alone and at each offset of an eight-byte word.
    let specials = (0u8..0x80)
        .map(char::from)
        .chain(['é', '\u{2028}', '\u{FFFD}', '\u{1F600}']);
    for c in specials {
        texts.push(c.to_string());
        for offset in 0..17 {
            texts.push(format!(
                "{}{c}{}",
                "a".repeat(offset),
                "b".repeat(17 - offset)
            ));
        }
    }
    texts.push(String::new());
    texts.push("plain text longer than one word, with nothing to escape at all".into());
    texts.push("\"\\\"\\\u{1}\u{1f}\n\r\t\u{8}\u{c}\u{7f}".repeat(5));
    for text in texts {
        let mut ours = Vec::new();
        super::json_out::write_string(&mut ours, &text);
        let theirs = serde_json::to_vec(&text).expect("a string serializes");
        assert_eq!(
            String::from_utf8_lossy(&ours),
            String::from_utf8_lossy(&theirs),
            "{text:?}"
        );
    }
}
