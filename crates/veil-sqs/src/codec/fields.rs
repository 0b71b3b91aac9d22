//! The parameter object as serde decodes it: straight from a JSON body, or (Query protocol) from the object its
//! form fields rebuild. Every member keeps the JSON type it arrived as without judging it, and strings are
//! borrowed from the body where it has no escapes. Which parameters an action reads, and in which order, decides
//! which wrongly typed one the client hears about (`params.rs`), so decoding here fails only on malformed JSON,
//! with serde_json's own words, exactly as parsing the body into a `serde_json::Value` did.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fmt;
use std::marker::PhantomData;

use serde::de::{Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::Number;

/// A scalar parameter (string, number or boolean) as sent.
#[derive(Debug, Default)]
pub(crate) enum Scalar<'a> {
    /// Absent or `null`.
    #[default]
    Null,
    Str(Cow<'a, str>),
    Number(Number),
    Bool(bool),
    /// An array or an object.
    Compound,
}

/// A parameter of a compound JSON type (array or object) as sent.
#[derive(Debug, Default)]
pub(crate) enum Shaped<T> {
    /// Absent or `null`.
    #[default]
    Null,
    Fits(T),
    /// A value of another JSON type.
    Misfit,
}

impl Scalar<'_> {
    /// The text of a string; a member name, which JSON always spells as one, is read through this (borrowed
    /// from the body, unlike serde's `Cow` which always copies).
    fn text(&self) -> &str {
        match self {
            Self::Str(text) => text,
            _ => "",
        }
    }
}

/// A list of strings (or of anything else that is one scalar each).
pub(crate) type ScalarList<'a> = Shaped<Vec<Scalar<'a>>>;
/// A map of strings (`Attributes`, tags).
pub(crate) type ScalarMap<'a> = Shaped<BTreeMap<String, Scalar<'a>>>;
/// Message attributes by name. A `BTreeMap`, as `serde_json::Map` is, so that the first wrong attribute
/// reported is the same one; a repeated name keeps its last value, as there.
pub(crate) type AttributeMap<'a> = Shaped<BTreeMap<String, Shaped<AttributeFields<'a>>>>;

/// The members of every action's parameter object, and of a batch entry (which repeats some of them). Which
/// ones an action reads is `params.rs`'s business; members no action knows are skipped, as SQS ignores them.
#[derive(Debug, Default)]
pub(crate) struct Fields<'a> {
    pub queue_url: Scalar<'a>,
    pub queue_name: Scalar<'a>,
    pub queue_owner_aws_account_id: Scalar<'a>,
    pub queue_name_prefix: Scalar<'a>,
    pub max_results: Scalar<'a>,
    pub next_token: Scalar<'a>,
    pub attributes: ScalarMap<'a>,
    /// CreateQueue's `tags` (lower-case in the model).
    pub create_tags: ScalarMap<'a>,
    /// TagQueue's `Tags`.
    pub tags: ScalarMap<'a>,
    pub tag_keys: ScalarList<'a>,
    pub attribute_names: ScalarList<'a>,
    pub message_system_attribute_names: ScalarList<'a>,
    pub message_attribute_names: ScalarList<'a>,
    pub message_body: Scalar<'a>,
    pub delay_seconds: Scalar<'a>,
    pub message_attributes: AttributeMap<'a>,
    pub message_system_attributes: AttributeMap<'a>,
    pub message_deduplication_id: Scalar<'a>,
    pub message_group_id: Scalar<'a>,
    pub entries: Shaped<Vec<Shaped<Fields<'a>>>>,
    pub id: Scalar<'a>,
    pub receipt_handle: Scalar<'a>,
    pub visibility_timeout: Scalar<'a>,
    pub max_number_of_messages: Scalar<'a>,
    pub wait_time_seconds: Scalar<'a>,
    pub receive_request_attempt_id: Scalar<'a>,
    pub label: Scalar<'a>,
    pub aws_account_ids: ScalarList<'a>,
    pub actions: ScalarList<'a>,
    pub source_arn: Scalar<'a>,
    pub destination_arn: Scalar<'a>,
    pub max_number_of_messages_per_second: Scalar<'a>,
    pub task_handle: Scalar<'a>,
}

/// One message attribute's value object.
#[derive(Debug, Default)]
pub(crate) struct AttributeFields<'a> {
    pub data_type: Scalar<'a>,
    pub string_value: Scalar<'a>,
    pub binary_value: Scalar<'a>,
    /// Only whether they hold anything matters (AWS reserves them), so their items are not kept.
    pub string_list_values: Shaped<Vec<Skip>>,
    pub binary_list_values: Shaped<Vec<Skip>>,
}

impl<'de> Fields<'de> {
    /// Reads the members one by one; a repeated member keeps its last value, as `serde_json::Map` does (serde's
    /// derived decoder would refuse it instead).
    fn read<A: MapAccess<'de>>(mut map: A) -> Result<Self, A::Error> {
        let mut fields = Self::default();
        while let Some(key) = map.next_key::<Scalar<'de>>()? {
            let f = &mut fields;
            match key.text() {
                "QueueUrl" => f.queue_url = map.next_value()?,
                "QueueName" => f.queue_name = map.next_value()?,
                "QueueOwnerAWSAccountId" => f.queue_owner_aws_account_id = map.next_value()?,
                "QueueNamePrefix" => f.queue_name_prefix = map.next_value()?,
                "MaxResults" => f.max_results = map.next_value()?,
                "NextToken" => f.next_token = map.next_value()?,
                "Attributes" => f.attributes = map.next_value()?,
                "tags" => f.create_tags = map.next_value()?,
                "Tags" => f.tags = map.next_value()?,
                "TagKeys" => f.tag_keys = map.next_value()?,
                "AttributeNames" => f.attribute_names = map.next_value()?,
                "MessageSystemAttributeNames" => {
                    f.message_system_attribute_names = map.next_value()?
                }
                "MessageAttributeNames" => f.message_attribute_names = map.next_value()?,
                "MessageBody" => f.message_body = map.next_value()?,
                "DelaySeconds" => f.delay_seconds = map.next_value()?,
                "MessageAttributes" => f.message_attributes = map.next_value()?,
                "MessageSystemAttributes" => f.message_system_attributes = map.next_value()?,
                "MessageDeduplicationId" => f.message_deduplication_id = map.next_value()?,
                "MessageGroupId" => f.message_group_id = map.next_value()?,
                "Entries" => f.entries = map.next_value()?,
                "Id" => f.id = map.next_value()?,
                "ReceiptHandle" => f.receipt_handle = map.next_value()?,
                "VisibilityTimeout" => f.visibility_timeout = map.next_value()?,
                "MaxNumberOfMessages" => f.max_number_of_messages = map.next_value()?,
                "WaitTimeSeconds" => f.wait_time_seconds = map.next_value()?,
                "ReceiveRequestAttemptId" => f.receive_request_attempt_id = map.next_value()?,
                "Label" => f.label = map.next_value()?,
                "AWSAccountIds" => f.aws_account_ids = map.next_value()?,
                "Actions" => f.actions = map.next_value()?,
                "SourceArn" => f.source_arn = map.next_value()?,
                "DestinationArn" => f.destination_arn = map.next_value()?,
                "MaxNumberOfMessagesPerSecond" => {
                    f.max_number_of_messages_per_second = map.next_value()?
                }
                "TaskHandle" => f.task_handle = map.next_value()?,
                _ => {
                    map.next_value::<Skip>()?;
                }
            }
        }
        Ok(fields)
    }
}

impl<'de> AttributeFields<'de> {
    /// As [`Fields::read`]: last value wins, unknown members skipped.
    fn read<A: MapAccess<'de>>(mut map: A) -> Result<Self, A::Error> {
        let mut fields = Self::default();
        while let Some(key) = map.next_key::<Scalar<'de>>()? {
            match key.text() {
                "DataType" => fields.data_type = map.next_value()?,
                "StringValue" => fields.string_value = map.next_value()?,
                "BinaryValue" => fields.binary_value = map.next_value()?,
                "StringListValues" => fields.string_list_values = map.next_value()?,
                "BinaryListValues" => fields.binary_list_values = map.next_value()?,
                _ => {
                    map.next_value::<Skip>()?;
                }
            }
        }
        Ok(fields)
    }
}

/// What a compound shape is built from: an array (`from_seq`) or an object (`from_map`). The other one is a
/// misfit, drained so that the parse goes on (`None`).
pub(crate) trait FromCompound<'de>: Sized {
    fn from_seq<A: SeqAccess<'de>>(seq: A) -> Result<Option<Self>, A::Error> {
        Skip::drain_seq(seq)?;
        Ok(None)
    }

    fn from_map<A: MapAccess<'de>>(map: A) -> Result<Option<Self>, A::Error> {
        Skip::drain_map(map)?;
        Ok(None)
    }
}

impl<'de, T: Deserialize<'de>> FromCompound<'de> for Vec<T> {
    fn from_seq<A: SeqAccess<'de>>(mut seq: A) -> Result<Option<Self>, A::Error> {
        let mut items = Vec::with_capacity(seq.size_hint().unwrap_or(0));
        while let Some(item) = seq.next_element()? {
            items.push(item);
        }
        Ok(Some(items))
    }
}

impl<'de, V: Deserialize<'de>> FromCompound<'de> for BTreeMap<String, V> {
    fn from_map<A: MapAccess<'de>>(mut map: A) -> Result<Option<Self>, A::Error> {
        let mut entries = BTreeMap::new();
        while let Some((key, value)) = map.next_entry()? {
            entries.insert(key, value);
        }
        Ok(Some(entries))
    }
}

impl<'de> FromCompound<'de> for Fields<'de> {
    fn from_map<A: MapAccess<'de>>(map: A) -> Result<Option<Self>, A::Error> {
        Self::read(map).map(Some)
    }
}

impl<'de> FromCompound<'de> for AttributeFields<'de> {
    fn from_map<A: MapAccess<'de>>(map: A) -> Result<Option<Self>, A::Error> {
        Self::read(map).map(Some)
    }
}

impl<'de, T: FromCompound<'de>> Deserialize<'de> for Shaped<T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(ShapedVisitor(PhantomData))
    }
}

struct ShapedVisitor<T>(PhantomData<T>);

impl<T> ShapedVisitor<T> {
    fn shaped<E>(built: Option<T>) -> Result<Shaped<T>, E> {
        Ok(built.map_or(Shaped::Misfit, Shaped::Fits))
    }
}

impl<'de, T: FromCompound<'de>> Visitor<'de> for ShapedVisitor<T> {
    type Value = Shaped<T>;

    fn expecting(&self, formatter: &mut fmt::Formatter) -> fmt::Result {
        formatter.write_str("any JSON value")
    }

    fn visit_unit<E>(self) -> Result<Self::Value, E> {
        Ok(Shaped::Null)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Self::Value, A::Error> {
        Self::shaped(T::from_seq(seq)?)
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
        Self::shaped(T::from_map(map)?)
    }

    fn visit_bool<E>(self, _: bool) -> Result<Self::Value, E> {
        Ok(Shaped::Misfit)
    }

    fn visit_i64<E>(self, _: i64) -> Result<Self::Value, E> {
        Ok(Shaped::Misfit)
    }

    fn visit_u64<E>(self, _: u64) -> Result<Self::Value, E> {
        Ok(Shaped::Misfit)
    }

    fn visit_f64<E>(self, _: f64) -> Result<Self::Value, E> {
        Ok(Shaped::Misfit)
    }

    fn visit_str<E>(self, _: &str) -> Result<Self::Value, E> {
        Ok(Shaped::Misfit)
    }
}

impl<'de> Deserialize<'de> for Scalar<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(ScalarVisitor)
    }
}

struct ScalarVisitor;

impl<'de> Visitor<'de> for ScalarVisitor {
    type Value = Scalar<'de>;

    fn expecting(&self, formatter: &mut fmt::Formatter) -> fmt::Result {
        formatter.write_str("any JSON value")
    }

    fn visit_unit<E>(self) -> Result<Self::Value, E> {
        Ok(Scalar::Null)
    }

    fn visit_bool<E>(self, flag: bool) -> Result<Self::Value, E> {
        Ok(Scalar::Bool(flag))
    }

    fn visit_i64<E>(self, number: i64) -> Result<Self::Value, E> {
        Ok(Scalar::Number(number.into()))
    }

    fn visit_u64<E>(self, number: u64) -> Result<Self::Value, E> {
        Ok(Scalar::Number(number.into()))
    }

    /// As `serde_json::Value` does: a float without a JSON form counts as `null`.
    fn visit_f64<E>(self, number: f64) -> Result<Self::Value, E> {
        Ok(Number::from_f64(number).map_or(Scalar::Null, Scalar::Number))
    }

    fn visit_borrowed_str<E>(self, text: &'de str) -> Result<Self::Value, E> {
        Ok(Scalar::Str(Cow::Borrowed(text)))
    }

    fn visit_str<E>(self, text: &str) -> Result<Self::Value, E> {
        Ok(Scalar::Str(Cow::Owned(text.to_string())))
    }

    fn visit_string<E>(self, text: String) -> Result<Self::Value, E> {
        Ok(Scalar::Str(Cow::Owned(text)))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Self::Value, A::Error> {
        Skip::drain_seq(seq)?;
        Ok(Scalar::Compound)
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
        Skip::drain_map(map)?;
        Ok(Scalar::Compound)
    }
}

/// Any JSON value, read and dropped (members no action knows, misfits). serde's `IgnoredAny` would let
/// serde_json skip it with its laxer scanner (no UTF-8 check of strings, no nesting limit); reading it like any
/// other value keeps exactly the errors that parsing the body into a `Value` gave.
#[derive(Debug)]
pub(crate) struct Skip;

impl Skip {
    fn drain_seq<'de, A: SeqAccess<'de>>(mut seq: A) -> Result<(), A::Error> {
        while seq.next_element::<Skip>()?.is_some() {}
        Ok(())
    }

    fn drain_map<'de, A: MapAccess<'de>>(mut map: A) -> Result<(), A::Error> {
        while map.next_entry::<Skip, Skip>()?.is_some() {}
        Ok(())
    }
}

impl<'de> Deserialize<'de> for Skip {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(SkipVisitor)
    }
}

struct SkipVisitor;

impl<'de> Visitor<'de> for SkipVisitor {
    type Value = Skip;

    fn expecting(&self, formatter: &mut fmt::Formatter) -> fmt::Result {
        formatter.write_str("any JSON value")
    }

    fn visit_unit<E>(self) -> Result<Skip, E> {
        Ok(Skip)
    }

    fn visit_bool<E>(self, _: bool) -> Result<Skip, E> {
        Ok(Skip)
    }

    fn visit_i64<E>(self, _: i64) -> Result<Skip, E> {
        Ok(Skip)
    }

    fn visit_u64<E>(self, _: u64) -> Result<Skip, E> {
        Ok(Skip)
    }

    fn visit_f64<E>(self, _: f64) -> Result<Skip, E> {
        Ok(Skip)
    }

    fn visit_str<E>(self, _: &str) -> Result<Skip, E> {
        Ok(Skip)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Skip, A::Error> {
        Skip::drain_seq(seq).map(|()| Skip)
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Skip, A::Error> {
        Skip::drain_map(map).map(|()| Skip)
    }
}

/// Decodes the parameter object from any serde source (a JSON body or a rebuilt Query object): `Misfit` when it
/// is not an object.
pub(crate) fn decode_object<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Shaped<Fields<'de>>, D::Error> {
    Shaped::deserialize(deserializer)
}
