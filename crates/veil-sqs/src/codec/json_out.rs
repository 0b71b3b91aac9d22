//! The JSON answers as typed shapes that serde writes straight into the response body, every string borrowed
//! from the [`Output`], instead of being copied into a `serde_json::Value` first and serialized from there.
//!
//! The bytes are the ones that `Value` wrote: every object's members come in byte order of their names (what
//! `serde_json::Map`, a `BTreeMap` without the `preserve_order` feature, gave), which is why each struct's
//! fields are declared alphabetically by wire name and the name/value lists are sorted before writing.

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;
use serde::ser::{Serialize, SerializeMap, Serializer};
use serde::Serialize as DeriveSerialize;
use veil_core::{AttributeData, AttributeValue, Attributes};

use crate::api::*;

/// The body of a successful answer (no member at all is `{}`).
pub(super) struct Answer<'a> {
    pub action: ActionName,
    pub output: &'a Output,
}

impl Serialize for Answer<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self.output {
            Output::Empty => serializer.serialize_map(Some(0))?.end(),
            Output::QueueUrl(url) => one_member(serializer, "QueueUrl", url),
            Output::QueueUrls { urls, next_token } => QueueUrls {
                action: self.action,
                urls,
                next_token: next_token.as_deref(),
            }
            .serialize(serializer),
            // No attribute to show (none asked for, or none the queue has a value for): AWS sends no
            // `Attributes` member at all (moto's AWS-verified `test_get_queue_attributes`).
            Output::QueueAttributes(attributes) if attributes.is_empty() => {
                serializer.serialize_map(Some(0))?.end()
            }
            Output::QueueAttributes(attributes) => {
                one_member(serializer, "Attributes", &SortedPairs(attributes))
            }
            Output::Tags(tags) if tags.is_empty() => serializer.serialize_map(Some(0))?.end(),
            Output::Tags(tags) => one_member(serializer, "Tags", tags),
            Output::SendMessage(sent) => Sent::of(sent, false).serialize(serializer),
            Output::SendMessageBatch { successful, failed } => SendBatch {
                failed: Failures(failed),
                successful: SentEntries(successful),
            }
            .serialize(serializer),
            Output::ReceiveMessage(messages) if messages.is_empty() => {
                serializer.serialize_map(Some(0))?.end()
            }
            Output::ReceiveMessage(messages) => {
                one_member(serializer, "Messages", &Messages(messages))
            }
            Output::BatchIds { successful, failed } => IdBatch {
                failed: Failures(failed),
                successful: IdEntries(successful),
            }
            .serialize(serializer),
            Output::TaskHandle(handle) => one_member(serializer, "TaskHandle", handle),
            // `Results` is there even when empty (moto's ListMessageMoveTasks tests read it unconditionally).
            Output::MoveTasks(tasks) => one_member(serializer, "Results", &MoveTasks(tasks)),
            Output::MessagesMoved(moved) => {
                one_member(serializer, "ApproximateNumberOfMessagesMoved", moved)
            }
        }
    }
}

/// An error's body: `__type` and `message`.
#[derive(DeriveSerialize)]
pub(super) struct ErrorBody<'a> {
    #[serde(rename = "__type")]
    pub type_name: &'a str,
    pub message: &'a str,
}

/// An object of one member.
fn one_member<S: Serializer, V: Serialize + ?Sized>(
    serializer: S,
    name: &str,
    value: &V,
) -> Result<S::Ok, S::Error> {
    let mut map = serializer.serialize_map(Some(1))?;
    map.serialize_entry(name, value)?;
    map.end()
}

/// ListQueues' and ListDeadLetterSourceQueues' answer.
struct QueueUrls<'a> {
    action: ActionName,
    urls: &'a [String],
    next_token: Option<&'a str>,
}

impl Serialize for QueueUrls<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let dead_letter_sources = self.action == ActionName::ListDeadLetterSourceQueues;
        let mut map = serializer.serialize_map(None)?;
        // `NextToken` sorts before either spelling of the list.
        if let Some(token) = self.next_token {
            map.serialize_entry("NextToken", token)?;
        }
        // botocore spells this member differently per action; AWS omits an empty ListQueues list but
        // ListDeadLetterSourceQueues requires the member.
        if dead_letter_sources {
            map.serialize_entry("queueUrls", self.urls)?;
        } else if !self.urls.is_empty() {
            map.serialize_entry("QueueUrls", self.urls)?;
        }
        map.end()
    }
}

/// Name/value pairs (queue or system attributes) as one object: by name, a repeated name keeping its last
/// value, as inserting them into a `serde_json::Map` did.
struct SortedPairs<'a>(&'a [(String, String)]);

impl Serialize for SortedPairs<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut pairs: Vec<&(String, String)> = self.0.iter().collect();
        // Stable, so that of equal names the last one sent stays last.
        pairs.sort_by(|a, b| a.0.cmp(&b.0));
        let mut map = serializer.serialize_map(None)?;
        for (index, (name, value)) in pairs.iter().map(|pair| (&pair.0, &pair.1)).enumerate() {
            let repeated_later = pairs.get(index + 1).is_some_and(|next| &next.0 == name);
            if !repeated_later {
                map.serialize_entry(name, value)?;
            }
        }
        map.end()
    }
}

/// SendMessage's answer, and a SendMessageBatch success (which has the entry's `Id`).
#[derive(DeriveSerialize)]
struct Sent<'a> {
    #[serde(rename = "Id", skip_serializing_if = "Option::is_none")]
    id: Option<&'a str>,
    #[serde(
        rename = "MD5OfMessageAttributes",
        skip_serializing_if = "Option::is_none"
    )]
    md5_of_message_attributes: Option<&'a str>,
    #[serde(rename = "MD5OfMessageBody")]
    md5_of_message_body: &'a str,
    #[serde(
        rename = "MD5OfMessageSystemAttributes",
        skip_serializing_if = "Option::is_none"
    )]
    md5_of_message_system_attributes: Option<&'a str>,
    #[serde(rename = "MessageId")]
    message_id: &'a str,
    #[serde(rename = "SequenceNumber", skip_serializing_if = "Option::is_none")]
    sequence_number: Option<&'a str>,
}

impl<'a> Sent<'a> {
    fn of(sent: &'a SentMessageResult, with_id: bool) -> Self {
        Self {
            id: with_id.then_some(sent.id.as_str()),
            md5_of_message_attributes: sent.md5_of_message_attributes.as_deref(),
            md5_of_message_body: &sent.md5_of_message_body,
            md5_of_message_system_attributes: sent.md5_of_message_system_attributes.as_deref(),
            message_id: &sent.message_id,
            sequence_number: sent.sequence_number.as_deref(),
        }
    }
}

struct SentEntries<'a>(&'a [SentMessageResult]);

impl Serialize for SentEntries<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(self.0.iter().map(|sent| Sent::of(sent, true)))
    }
}

#[derive(DeriveSerialize)]
struct SendBatch<'a> {
    #[serde(rename = "Failed")]
    failed: Failures<'a>,
    #[serde(rename = "Successful")]
    successful: SentEntries<'a>,
}

/// DeleteMessageBatch's and ChangeMessageVisibilityBatch's answer.
#[derive(DeriveSerialize)]
struct IdBatch<'a> {
    #[serde(rename = "Failed")]
    failed: Failures<'a>,
    #[serde(rename = "Successful")]
    successful: IdEntries<'a>,
}

#[derive(DeriveSerialize)]
struct IdEntry<'a> {
    #[serde(rename = "Id")]
    id: &'a str,
}

struct IdEntries<'a>(&'a [String]);

impl Serialize for IdEntries<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(self.0.iter().map(|id| IdEntry { id }))
    }
}

#[derive(DeriveSerialize)]
struct Failure<'a> {
    #[serde(rename = "Code")]
    code: &'a str,
    #[serde(rename = "Id")]
    id: &'a str,
    #[serde(rename = "Message")]
    message: &'a str,
    #[serde(rename = "SenderFault")]
    sender_fault: bool,
}

struct Failures<'a>(&'a [BatchFailure]);

impl Serialize for Failures<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(self.0.iter().map(|failure| Failure {
            code: &failure.code,
            id: &failure.id,
            message: &failure.message,
            sender_fault: failure.sender_fault,
        }))
    }
}

struct Messages<'a>(&'a [ReceivedMessage]);

impl Serialize for Messages<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(self.0.iter().map(Received::of))
    }
}

/// One delivered message: system attributes only when some were asked for and shown, and the message
/// attributes exactly when they have a digest.
#[derive(DeriveSerialize)]
struct Received<'a> {
    #[serde(rename = "Attributes", skip_serializing_if = "Option::is_none")]
    attributes: Option<SortedPairs<'a>>,
    #[serde(rename = "Body")]
    body: &'a str,
    #[serde(rename = "MD5OfBody")]
    md5_of_body: &'a str,
    #[serde(
        rename = "MD5OfMessageAttributes",
        skip_serializing_if = "Option::is_none"
    )]
    md5_of_message_attributes: Option<&'a str>,
    #[serde(rename = "MessageAttributes", skip_serializing_if = "Option::is_none")]
    message_attributes: Option<MessageAttributes<'a>>,
    #[serde(rename = "MessageId")]
    message_id: &'a str,
    #[serde(rename = "ReceiptHandle")]
    receipt_handle: &'a str,
}

impl<'a> Received<'a> {
    fn of(message: &'a ReceivedMessage) -> Self {
        let md5_of_message_attributes = message.md5_of_message_attributes.as_deref();
        Self {
            attributes: (!message.attributes.is_empty())
                .then_some(SortedPairs(&message.attributes)),
            body: &message.body,
            md5_of_body: &message.md5_of_body,
            md5_of_message_attributes,
            message_attributes: md5_of_message_attributes
                .map(|_| MessageAttributes(&message.message_attributes)),
            message_id: &message.message_id,
            receipt_handle: &message.receipt_handle,
        }
    }
}

/// Message attributes by name (a `BTreeMap`, so already in order).
struct MessageAttributes<'a>(&'a Attributes);

impl Serialize for MessageAttributes<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_map(
            self.0
                .iter()
                .map(|(name, value)| (name, MessageAttribute(value))),
        )
    }
}

/// One attribute's value: `BinaryValue` (base64) or `StringValue`, around `DataType` in name order.
struct MessageAttribute<'a>(&'a AttributeValue);

impl Serialize for MessageAttribute<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let attribute = self.0;
        let mut map = serializer.serialize_map(Some(2))?;
        match &attribute.value {
            AttributeData::Binary(bytes) => {
                map.serialize_entry("BinaryValue", &BASE64.encode(bytes))?;
                map.serialize_entry("DataType", &attribute.data_type)?;
            }
            AttributeData::String(text) => {
                map.serialize_entry("DataType", &attribute.data_type)?;
                map.serialize_entry("StringValue", text)?;
            }
        }
        map.end()
    }
}

struct MoveTasks<'a>(&'a [MoveTaskEntry]);

impl Serialize for MoveTasks<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(self.0.iter().map(MoveTask::of))
    }
}

/// One ListMessageMoveTasks entry; the optional members only when they apply.
#[derive(DeriveSerialize)]
struct MoveTask<'a> {
    #[serde(rename = "ApproximateNumberOfMessagesMoved")]
    approximate_number_of_messages_moved: u64,
    #[serde(rename = "ApproximateNumberOfMessagesToMove")]
    approximate_number_of_messages_to_move: u64,
    #[serde(rename = "DestinationArn", skip_serializing_if = "Option::is_none")]
    destination_arn: Option<&'a str>,
    #[serde(rename = "FailureReason", skip_serializing_if = "Option::is_none")]
    failure_reason: Option<&'a str>,
    #[serde(
        rename = "MaxNumberOfMessagesPerSecond",
        skip_serializing_if = "Option::is_none"
    )]
    max_number_of_messages_per_second: Option<u32>,
    #[serde(rename = "SourceArn")]
    source_arn: &'a str,
    #[serde(rename = "StartedTimestamp")]
    started_timestamp: u64,
    #[serde(rename = "Status")]
    status: &'a str,
    #[serde(rename = "TaskHandle", skip_serializing_if = "Option::is_none")]
    task_handle: Option<&'a str>,
}

impl<'a> MoveTask<'a> {
    fn of(task: &'a MoveTaskEntry) -> Self {
        Self {
            approximate_number_of_messages_moved: task.approximate_number_of_messages_moved,
            approximate_number_of_messages_to_move: task.approximate_number_of_messages_to_move,
            destination_arn: task.destination_arn.as_deref(),
            failure_reason: task.failure_reason,
            max_number_of_messages_per_second: task.max_number_of_messages_per_second,
            source_arn: &task.source_arn,
            started_timestamp: task.started_timestamp,
            status: task.status,
            task_handle: task.task_handle.as_deref(),
        }
    }
}

/// A first guess at the body's size, so that the common answers are written without the buffer growing: the
/// fixed members of each entry plus the parts whose length varies most (bodies, receipt handles, texts).
pub(super) fn size_hint(output: &Output) -> usize {
    const MEMBERS: usize = 192;
    match output {
        Output::SendMessageBatch { successful, failed } => {
            16 + successful.len() * MEMBERS + failures_size(failed)
        }
        Output::ReceiveMessage(messages) => {
            16 + messages
                .iter()
                .map(|message| {
                    MEMBERS
                        + message.body.len()
                        + message.receipt_handle.len()
                        + 64 * message.attributes.len()
                })
                .sum::<usize>()
        }
        Output::BatchIds { successful, failed } => {
            32 + successful.iter().map(|id| id.len() + 12).sum::<usize>() + failures_size(failed)
        }
        _ => MEMBERS,
    }
}

fn failures_size(failed: &[BatchFailure]) -> usize {
    failed
        .iter()
        .map(|failure| 64 + failure.id.len() + failure.code.len() + failure.message.len())
        .sum()
}
