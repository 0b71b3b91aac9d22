//! The Query protocol: form-encoded parameters (`Action=SendMessage&QueueUrl=…&MessageAttribute.1.Name=…`) in
//! the body of a POST or in the query string of a GET, and XML answers. Decoding rebuilds, from the flattened
//! field names, the same parameter object the JSON protocol sends — as a light tree of strings borrowed from
//! the form, not a `serde_json::Value` — and serde reads it into the same typed members, so both protocols
//! share one typed decoder.

use std::borrow::Cow;
use std::collections::BTreeMap;

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;
use serde::de::value::{MapDeserializer, SeqDeserializer};
use serde::de::{Deserializer, IntoDeserializer, Visitor};
use veil_core::{AttributeData, Attributes};

use super::fields::{decode_object, Shaped};
use super::json_out::size_hint;
use super::params::{decode_action, Params};
use super::HttpReply;
use crate::api::*;
use crate::error::{ErrorCode, SqsError, SqsResult};
use veil_xml::{Style, XmlWriter};

/// The document shape of AWS's Query answers (upper-case encoding label, `<Detail/>`).
const AWS_XML: Style = Style {
    declaration: "<?xml version=\"1.0\" encoding=\"UTF-8\"?>",
    empty_end: "/>",
};
/// The namespace on the root element of every SQS Query answer.
const SQS_NAMESPACE: &str = "http://queue.amazonaws.com/doc/2012-11-05/";

pub(crate) const CONTENT_TYPE: &str = "text/xml";

/// Flattened lists of strings: `AttributeName.1=All` → `"AttributeNames": ["All"]`.
const STRING_LISTS: &[(&str, &str)] = &[
    ("AttributeName", "AttributeNames"),
    ("MessageAttributeName", "MessageAttributeNames"),
    ("MessageSystemAttributeName", "MessageSystemAttributeNames"),
    ("TagKey", "TagKeys"),
    ("AWSAccountId", "AWSAccountIds"),
    ("ActionName", "Actions"),
];

/// Flattened lists of structures (batch entries): `SendMessageBatchRequestEntry.1.Id=a` → `"Entries": [{"Id": "a"}]`.
const OBJECT_LISTS: &[(&str, &str)] = &[
    ("SendMessageBatchRequestEntry", "Entries"),
    ("DeleteMessageBatchRequestEntry", "Entries"),
    ("ChangeMessageVisibilityBatchRequestEntry", "Entries"),
];

/// How a flattened map's entries are spelled.
struct MapShape {
    prefix: &'static str,
    key_field: &'static str,
    /// `true` when the value is a structure (`MessageAttribute.1.Value.DataType`), `false` for a string.
    structured_value: bool,
}

const MAPS: &[MapShape] = &[
    MapShape {
        prefix: "Attribute",
        key_field: "Name",
        structured_value: false,
    },
    MapShape {
        prefix: "Tag",
        key_field: "Key",
        structured_value: false,
    },
    MapShape {
        prefix: "MessageAttribute",
        key_field: "Name",
        structured_value: true,
    },
    MapShape {
        prefix: "MessageSystemAttribute",
        key_field: "Name",
        structured_value: true,
    },
];

/// The JSON member a flattened map becomes; CreateQueue's tags are lower-case in the model.
fn map_member(prefix: &str, action: ActionName) -> &'static str {
    match prefix {
        "Attribute" => "Attributes",
        "Tag" if action == ActionName::CreateQueue => "tags",
        "Tag" => "Tags",
        "MessageAttribute" => "MessageAttributes",
        _ => "MessageSystemAttributes",
    }
}

fn parse_index(full_key: &str, index: &str) -> SqsResult<u32> {
    index
        .parse::<u32>()
        .ok()
        .filter(|n| *n >= 1)
        .ok_or_else(|| {
            SqsError::new(
                ErrorCode::InvalidParameterValue,
                format!("The parameter {full_key} does not have a valid index."),
            )
        })
}

/// A flattened map entry without its key. A message attribute without its name is answered as SQS's Query
/// endpoint does ("The request must contain non-empty message attribute name.", InvalidParameterValue,
/// recorded in aws/aws-sdk-php issue 694); other maps name the missing field.
fn missing_map_key(shape: &MapShape, index: u32) -> SqsError {
    if shape.structured_value {
        crate::validate::attribute_errors::empty_name()
    } else {
        SqsError::missing(&format!("{}.{index}.{}", shape.prefix, shape.key_field))
    }
}

/// One form field as percent-decoding left it: borrowed from the request unless it had escapes.
pub type FormPair<'a> = (Cow<'a, str>, Cow<'a, str>);

/// Form fields grouped by their index: `Prefix.N.Field=value` → `N → [(Field, value)]`, for each prefix.
type IndexedFields<'a> = BTreeMap<&'static str, BTreeMap<u32, Vec<(&'a str, &'a str)>>>;

/// The parameter object rebuilt from flattened form fields, every string borrowed from them. It is read by the
/// same serde decoder as a JSON body ([`decode_object`]), so both protocols share one typed decoder.
#[derive(Debug)]
enum Node<'a> {
    Str(&'a str),
    List(Vec<Node<'a>>),
    /// Members in the order the decoder should see them; a repeated member's last value wins there, as in a
    /// JSON object.
    Object(Vec<(&'a str, Node<'a>)>),
}

impl<'de> Deserializer<'de> for Node<'de> {
    type Error = serde::de::value::Error;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Self::Error> {
        match self {
            Node::Str(text) => visitor.visit_borrowed_str(text),
            Node::List(items) => visitor.visit_seq(SeqDeserializer::new(items.into_iter())),
            Node::Object(members) => visitor.visit_map(MapDeserializer::new(
                members
                    .into_iter()
                    .map(|(name, value)| (Node::Str(name), value)),
            )),
        }
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf option unit
        unit_struct newtype_struct seq tuple tuple_struct map struct enum identifier ignored_any
    }
}

impl<'de> IntoDeserializer<'de, serde::de::value::Error> for Node<'de> {
    type Deserializer = Self;

    fn into_deserializer(self) -> Self {
        self
    }
}

/// Rebuilds the parameter object from flattened form fields.
fn unflatten<'a>(
    pairs: impl IntoIterator<Item = (&'a str, &'a str)>,
    action: ActionName,
) -> SqsResult<Vec<(&'a str, Node<'a>)>> {
    let mut sorted = Sorted::default();
    for (key, value) in pairs {
        sorted.add(key, value)?;
    }
    sorted.assemble(action)
}

/// Form fields sorted by the shape they rebuild. All are collected before any list or map is assembled
/// because an entry's fields may arrive in any order, interleaved with other entries'.
#[derive(Default)]
struct Sorted<'a> {
    object: Vec<(&'a str, Node<'a>)>,
    string_lists: BTreeMap<&'static str, BTreeMap<u32, &'a str>>,
    object_lists: IndexedFields<'a>,
    maps: IndexedFields<'a>,
}

impl<'a> Sorted<'a> {
    fn add(&mut self, key: &'a str, value: &'a str) -> SqsResult<()> {
        let Some((head, rest)) = key.split_once('.') else {
            // An SDK sends an empty list as its bare name (`AWSAccountId=`, botocore's query serializer), which
            // AddPermission answers differently from no list at all (`params::add_permission`).
            if let Some((_, member)) = STRING_LISTS.iter().find(|(name, _)| *name == key) {
                if value.is_empty() {
                    self.string_lists.entry(member).or_default();
                    return Ok(());
                }
            }
            self.object.push((key, Node::Str(value)));
            return Ok(());
        };
        if let Some((_, member)) = STRING_LISTS.iter().find(|(name, _)| *name == head) {
            let index = parse_index(key, rest)?;
            self.string_lists
                .entry(member)
                .or_default()
                .insert(index, value);
        } else if let Some((_, member)) = OBJECT_LISTS.iter().find(|(name, _)| *name == head) {
            add_indexed(&mut self.object_lists, member, key, rest, value)?;
        } else if let Some(shape) = MAPS.iter().find(|shape| shape.prefix == head) {
            add_indexed(&mut self.maps, shape.prefix, key, rest, value)?;
        }
        // Other dotted parameters name no member; SQS ignores them, and so does the typed decoder.
        Ok(())
    }

    /// The object's members: plain fields first, then the lists and maps, which replace a plain field of the
    /// same name.
    fn assemble(self, action: ActionName) -> SqsResult<Vec<(&'a str, Node<'a>)>> {
        let mut object = self.object;
        for (member, items) in self.string_lists {
            object.push((
                member,
                Node::List(items.into_values().map(Node::Str).collect()),
            ));
        }
        for (member, items) in self.object_lists {
            let entries = items
                .into_values()
                .map(|fields| unflatten(fields, action).map(Node::Object))
                .collect::<SqsResult<Vec<_>>>()?;
            object.push((member, Node::List(entries)));
        }
        for (prefix, entries) in self.maps {
            let Some(shape) = MAPS.iter().find(|shape| shape.prefix == prefix) else {
                continue;
            };
            let map = assemble_map(shape, entries)?;
            object.push((map_member(prefix, action), Node::Object(map)));
        }
        Ok(object)
    }
}

/// Files `Prefix.N.Field=value` (`rest` is `N.Field`) under `prefix`, entry `N`.
fn add_indexed<'a>(
    fields: &mut IndexedFields<'a>,
    prefix: &'static str,
    key: &str,
    rest: &'a str,
    value: &'a str,
) -> SqsResult<()> {
    let (index, field) = rest.split_once('.').unwrap_or((rest, ""));
    let index = parse_index(key, index)?;
    fields
        .entry(prefix)
        .or_default()
        .entry(index)
        .or_default()
        .push((field, value));
    Ok(())
}

/// One flattened map from its entries' fields: each entry's key field names it, and its value is the
/// `Value` field or, for a structured value, the `Value.*` fields.
fn assemble_map<'a>(
    shape: &MapShape,
    entries: BTreeMap<u32, Vec<(&'a str, &'a str)>>,
) -> SqsResult<Vec<(&'a str, Node<'a>)>> {
    let mut map = Vec::with_capacity(entries.len());
    for (index, fields) in entries {
        let key =
            field_value(&fields, shape.key_field).ok_or_else(|| missing_map_key(shape, index))?;
        let value = if shape.structured_value {
            Node::Object(structured_value(&fields))
        } else {
            Node::Str(field_value(&fields, "Value").unwrap_or_default())
        };
        map.push((key, value));
    }
    Ok(map)
}

/// The first value of the field `name`.
fn field_value<'a>(fields: &[(&'a str, &'a str)], name: &str) -> Option<&'a str> {
    fields
        .iter()
        .find(|(field, _)| *field == name)
        .map(|(_, value)| *value)
}

/// `Value.DataType=String`, `Value.StringValue=x` → `{"DataType": "String", "StringValue": "x"}`.
fn structured_value<'a>(fields: &[(&'a str, &'a str)]) -> Vec<(&'a str, Node<'a>)> {
    fields
        .iter()
        .filter_map(|(field, value)| Some((field.strip_prefix("Value.")?, Node::Str(value))))
        .collect()
}

/// Decodes a Query protocol request from its form fields (query string and body together).
pub fn decode(pairs: &[FormPair<'_>]) -> SqsResult<Action> {
    let action_name = pairs
        .iter()
        .find(|(key, _)| key == "Action")
        .map(|(_, value)| value.as_ref())
        .ok_or_else(|| SqsError::missing("Action"))?;
    let name = ActionName::parse(action_name).ok_or_else(|| {
        SqsError::new(
            ErrorCode::InvalidAction,
            format!("The action {action_name} is not valid for this endpoint."),
        )
    })?;
    let members = unflatten(
        pairs
            .iter()
            .map(|(key, value)| (key.as_ref(), value.as_ref())),
        name,
    )?;
    // The rebuilt object holds only strings, lists and objects, so it always decodes; an error here would be
    // Veil's own.
    let fields = match decode_object(Node::Object(members)).map_err(SqsError::internal)? {
        Shaped::Fits(fields) => fields,
        Shaped::Null | Shaped::Misfit => return Err(SqsError::internal("not a parameter object")),
    };
    decode_action(name, &Params::new(&fields))
}

/// Parses `application/x-www-form-urlencoded` text into fields (percent-decoding, `+` as space), borrowing
/// every name and value that has no escapes.
pub fn parse_form(text: &[u8]) -> Vec<FormPair<'_>> {
    form_urlencoded::parse(text).collect()
}

fn write_failures(xml: &mut XmlWriter, failed: &[BatchFailure]) {
    for failure in failed {
        xml.open("BatchResultErrorEntry")
            .leaf("Id", &failure.id)
            .leaf(
                "SenderFault",
                if failure.sender_fault {
                    "true"
                } else {
                    "false"
                },
            )
            .leaf("Code", &failure.code)
            .leaf("Message", &failure.message)
            .close("BatchResultErrorEntry");
    }
}

fn write_sent(xml: &mut XmlWriter, sent: &SentMessageResult, with_id: bool) {
    if with_id {
        xml.leaf("Id", &sent.id);
    }
    xml.leaf("MessageId", &sent.message_id)
        .leaf("MD5OfMessageBody", &sent.md5_of_message_body);
    if let Some(md5) = &sent.md5_of_message_attributes {
        xml.leaf("MD5OfMessageAttributes", md5);
    }
    if let Some(md5) = &sent.md5_of_message_system_attributes {
        xml.leaf("MD5OfMessageSystemAttributes", md5);
    }
    if let Some(sequence_number) = &sent.sequence_number {
        xml.leaf("SequenceNumber", sequence_number);
    }
}

fn write_result(xml: &mut XmlWriter, action: ActionName, output: &Output) {
    match output {
        Output::Empty => {}
        Output::QueueUrl(url) => {
            xml.leaf("QueueUrl", url);
        }
        Output::QueueUrls { urls, next_token } => {
            for url in urls {
                xml.leaf("QueueUrl", url);
            }
            if let Some(token) = next_token {
                xml.leaf("NextToken", token);
            }
        }
        Output::QueueAttributes(attributes) => write_attributes(xml, attributes),
        Output::Tags(tags) => {
            for (key, value) in tags {
                xml.open("Tag")
                    .leaf("Key", key)
                    .leaf("Value", value)
                    .close("Tag");
            }
        }
        Output::SendMessage(sent) => write_sent(xml, sent, false),
        Output::SendMessageBatch { successful, failed } => {
            for sent in successful {
                xml.open("SendMessageBatchResultEntry");
                write_sent(xml, sent, true);
                xml.close("SendMessageBatchResultEntry");
            }
            write_failures(xml, failed);
        }
        Output::ReceiveMessage(messages) => {
            for message in messages {
                write_message(xml, message);
            }
        }
        Output::BatchIds { successful, failed } => write_batch_ids(xml, action, successful, failed),
        Output::TaskHandle(handle) => {
            xml.leaf("TaskHandle", handle);
        }
        Output::MoveTasks(tasks) => {
            for task in tasks {
                write_move_task(xml, task);
            }
        }
        Output::MessagesMoved(moved) => {
            xml.leaf_int("ApproximateNumberOfMessagesMoved", *moved);
        }
    }
}

/// One ListMessageMoveTasks entry, its members in the model's order; the flattened list's entries are named
/// after the entry shape, as in SQS's Query model.
fn write_move_task(xml: &mut XmlWriter, task: &MoveTaskEntry) {
    xml.open("ListMessageMoveTasksResultEntry");
    if let Some(handle) = &task.task_handle {
        xml.leaf("TaskHandle", handle);
    }
    xml.leaf("Status", task.status)
        .leaf("SourceArn", &task.source_arn);
    if let Some(arn) = &task.destination_arn {
        xml.leaf("DestinationArn", arn);
    }
    if let Some(rate) = task.max_number_of_messages_per_second {
        xml.leaf_int("MaxNumberOfMessagesPerSecond", rate);
    }
    xml.leaf_int(
        "ApproximateNumberOfMessagesMoved",
        task.approximate_number_of_messages_moved,
    )
    .leaf_int(
        "ApproximateNumberOfMessagesToMove",
        task.approximate_number_of_messages_to_move,
    );
    if let Some(reason) = task.failure_reason {
        xml.leaf("FailureReason", reason);
    }
    xml.leaf_int("StartedTimestamp", task.started_timestamp)
        .close("ListMessageMoveTasksResultEntry");
}

/// Queue attributes or a message's system attributes: `<Attribute><Name/><Value/></Attribute>` each.
fn write_attributes(xml: &mut XmlWriter, attributes: &[(String, String)]) {
    for (name, value) in attributes {
        xml.open("Attribute")
            .leaf("Name", name)
            .leaf("Value", value)
            .close("Attribute");
    }
}

fn write_message(xml: &mut XmlWriter, message: &ReceivedMessage) {
    xml.open("Message")
        .leaf("MessageId", &message.message_id)
        .leaf("ReceiptHandle", &message.receipt_handle)
        .leaf("MD5OfBody", &message.md5_of_body)
        .leaf("Body", &message.body);
    write_attributes(xml, &message.attributes);
    if let Some(md5) = &message.md5_of_message_attributes {
        xml.leaf("MD5OfMessageAttributes", md5);
        write_message_attributes(xml, &message.message_attributes);
    }
    xml.close("Message");
}

fn write_message_attributes(xml: &mut XmlWriter, attributes: &Attributes) {
    for (name, attribute) in attributes {
        xml.open("MessageAttribute")
            .leaf("Name", name)
            .open("Value");
        match &attribute.value {
            AttributeData::String(text) => xml.leaf("StringValue", text),
            // Base64 needs no escaping, so it is encoded straight into the document.
            AttributeData::Binary(bytes) => {
                xml.leaf_unescaped("BinaryValue", |out| BASE64.encode_string(bytes, out))
            }
        };
        xml.leaf("DataType", &attribute.data_type)
            .close("Value")
            .close("MessageAttribute");
    }
}

/// DeleteMessageBatch's and ChangeMessageVisibilityBatch's result: one entry per succeeded id, then the failures.
fn write_batch_ids(
    xml: &mut XmlWriter,
    action: ActionName,
    successful: &[String],
    failed: &[BatchFailure],
) {
    let entry = if action == ActionName::DeleteMessageBatch {
        "DeleteMessageBatchResultEntry"
    } else {
        "ChangeMessageVisibilityBatchResultEntry"
    };
    for id in successful {
        xml.open(entry).leaf("Id", id).close(entry);
    }
    write_failures(xml, failed);
}

/// The XML document of a successful answer: `<XResponse><XResult>…</XResult><ResponseMetadata>…`.
pub fn encode_output(action: ActionName, output: &Output, request_id: &str) -> HttpReply {
    let response = (action.as_str(), "Response");
    let result = (action.as_str(), "Result");
    // XML spells every member name twice, so half as much again as the JSON answer's guess, plus the envelope.
    let mut xml = XmlWriter::with_capacity(AWS_XML, size_hint(output) * 3 / 2 + 256);
    xml.open_joined_with(response, "xmlns", SQS_NAMESPACE);
    if *output == Output::Empty {
        // Actions without output have no Result element.
    } else {
        xml.open_joined(result);
        write_result(&mut xml, action, output);
        xml.close_joined(result);
    }
    xml.open("ResponseMetadata")
        .leaf("RequestId", request_id)
        .close("ResponseMetadata")
        .close_joined(response);
    HttpReply::new(200, xml.finish().into_bytes())
        .with_header("content-type", CONTENT_TYPE)
        .with_header("x-amzn-RequestId", request_id)
}

/// `<ErrorResponse><Error><Type/><Code/><Message/><Detail/></Error><RequestId/></ErrorResponse>`.
pub fn encode_error(error: &SqsError, request_id: &str) -> HttpReply {
    let mut xml = XmlWriter::new(AWS_XML);
    xml.open_with("ErrorResponse", "xmlns", SQS_NAMESPACE)
        .open("Error")
        .leaf("Type", error.code.fault())
        .leaf("Code", error.code.query_code())
        .leaf("Message", error.message_in(Protocol::Query))
        .empty("Detail")
        .close("Error")
        .leaf("RequestId", request_id)
        .close("ErrorResponse");
    HttpReply::new(error.code.status(), xml.finish().into_bytes())
        .with_header("content-type", CONTENT_TYPE)
        .with_header("x-amzn-RequestId", request_id)
}
