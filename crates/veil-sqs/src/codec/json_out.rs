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
            // Written by `write_received`, not through serde (`json::encode_output`).
            Output::ReceiveMessage(_) => Err(serde::ser::Error::custom(
                "ReceiveMessage's messages are written by write_received",
            )),
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

/// ReceiveMessage's answer with messages, written directly rather than through serde: `{"Messages":[...]}`,
/// each message's members in byte order of their names like every other answer (system attributes only when
/// some were asked for and shown, the message attributes exactly when they have a digest). The body is the
/// largest string of any answer, and serde_json escapes a string one byte at a time (~8 instructions a byte,
/// docs/benchmarks.md "Instructions per message"); [`write_string`] skips plain runs eight bytes at a time and
/// escapes exactly as serde_json does, so the bytes are the same (`json_out_tests.rs` pins them).
pub(super) fn write_received(
    out: &mut Vec<u8>,
    messages: &[ReceivedMessage],
) -> serde_json::Result<()> {
    out.extend_from_slice(b"{\"Messages\":[");
    for (index, message) in messages.iter().enumerate() {
        if index > 0 {
            out.push(b',');
        }
        let mut object = Object::open(out);
        if !message.attributes.is_empty() {
            object.value("Attributes", &SortedPairs(&message.attributes))?;
        }
        object.string("Body", &message.body);
        object.string("MD5OfBody", &message.md5_of_body);
        if let Some(digest) = &message.md5_of_message_attributes {
            object.string("MD5OfMessageAttributes", digest);
            object.value(
                "MessageAttributes",
                &MessageAttributes(&message.message_attributes),
            )?;
        }
        object.string("MessageId", &message.message_id);
        object.string("ReceiptHandle", &message.receipt_handle);
        object.close();
    }
    out.extend_from_slice(b"]}");
    Ok(())
}

/// A JSON object being written member by member, in the order given; the commas are its business.
struct Object<'a> {
    out: &'a mut Vec<u8>,
    empty: bool,
}

impl<'a> Object<'a> {
    fn open(out: &'a mut Vec<u8>) -> Self {
        out.push(b'{');
        Self { out, empty: true }
    }

    fn name(&mut self, name: &str) {
        if !std::mem::take(&mut self.empty) {
            self.out.push(b',');
        }
        write_string(self.out, name);
        self.out.push(b':');
    }

    /// A string member, escaped by [`write_string`].
    fn string(&mut self, name: &str, value: &str) {
        self.name(name);
        write_string(self.out, value);
    }

    /// A member whose value serde writes (the small attribute maps).
    fn value(&mut self, name: &str, value: &impl Serialize) -> serde_json::Result<()> {
        self.name(name);
        serde_json::to_writer(&mut *self.out, value)
    }

    fn close(self) {
        self.out.push(b'}');
    }
}

/// A JSON string as serde_json writes it: `"` and `\` escaped with a backslash, the control characters below
/// U+0020 as `\b \t \n \f \r` or `\u00xx` (lowercase hex), everything else (U+007F and all non-ASCII
/// included) as it is.
pub(super) fn write_string(out: &mut Vec<u8>, text: &str) {
    let bytes = text.as_bytes();
    out.reserve(bytes.len() + 2);
    out.push(b'"');
    let (mut plain_from, mut at) = (0, 0);
    while at < bytes.len() {
        // Sixteen bytes per step while they are plain (a body's bulk), then eight, then one.
        if let Some(block) = bytes.get(at..at + 16) {
            let (low, high) = block.split_at(8);
            if escape_mask(word(low)) | escape_mask(word(high)) == 0 {
                at += 16;
                continue;
            }
        }
        if let Some(eight) = bytes.get(at..at + 8) {
            if escape_mask(word(eight)) == 0 {
                at += 8;
                continue;
            }
        }
        let byte = bytes[at];
        if needs_escape(byte) {
            out.extend_from_slice(&bytes[plain_from..at]);
            write_escape(out, byte);
            plain_from = at + 1;
        }
        at += 1;
    }
    out.extend_from_slice(&bytes[plain_from..]);
    out.push(b'"');
}

/// Eight bytes as one word; `eight` is always eight bytes long (a slice of `at..at + 8`).
fn word(eight: &[u8]) -> u64 {
    let mut bytes = [0u8; 8];
    bytes.copy_from_slice(eight);
    u64::from_le_bytes(bytes)
}

fn needs_escape(byte: u8) -> bool {
    byte < 0x20 || byte == b'"' || byte == b'\\'
}

/// Non-zero when any of the eight bytes may need escaping: for every word that has such a byte (the bit
/// tricks below never miss one), and rarely for one that has none, which the byte check then passes. The
/// high-bit mask is applied once, to the three tests together.
fn escape_mask(word: u64) -> u64 {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGHS: u64 = 0x8080_8080_8080_8080;
    let below_space = word.wrapping_sub(ONES * 0x20) & !word;
    let equal = |b: u8| {
        let x = word ^ (ONES * u64::from(b));
        x.wrapping_sub(ONES) & !x
    };
    (below_space | equal(b'"') | equal(b'\\')) & HIGHS
}

fn write_escape(out: &mut Vec<u8>, byte: u8) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    match byte {
        b'"' => out.extend_from_slice(b"\\\""),
        b'\\' => out.extend_from_slice(b"\\\\"),
        0x08 => out.extend_from_slice(b"\\b"),
        0x09 => out.extend_from_slice(b"\\t"),
        0x0A => out.extend_from_slice(b"\\n"),
        0x0C => out.extend_from_slice(b"\\f"),
        0x0D => out.extend_from_slice(b"\\r"),
        _ => out.extend_from_slice(&[
            b'\\',
            b'u',
            b'0',
            b'0',
            HEX[usize::from(byte >> 4)],
            HEX[usize::from(byte & 0xF)],
        ]),
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
