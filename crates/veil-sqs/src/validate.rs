//! SQS's input rules: queue names, batch entry ids, body characters, message attributes and numeric ranges,
//! each answering with the error code and wording SQS uses. Limits come from `crate::limits` and
//! this crate's `limits`.

use std::collections::{BTreeMap, HashSet};

use crate::limits as sqs_limits;
use veil_core::{AttributeData, AttributeValue, Attributes};

use crate::api::MessageAttributeInput;
use crate::error::{ErrorCode, SqsError, SqsResult};
use crate::limits;

fn is_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '-' || c == '_'
}

/// The answer to anything FIFO until FIFO queues exist (a later issue); no half implementation.
pub fn fifo_not_supported() -> SqsError {
    SqsError::new(
        ErrorCode::InvalidParameterValue,
        "FIFO queues are not supported by Veil yet.",
    )
}

/// 1–80 characters of `[A-Za-z0-9_-]`. A `.fifo` name asks for a FIFO queue, which Veil does not offer yet.
pub fn queue_name(name: &str) -> SqsResult<()> {
    if name.ends_with(".fifo") {
        return Err(fifo_not_supported());
    }
    let length = name.chars().count();
    if length == 0 || length > sqs_limits::QUEUE_NAME_CHARS_MAX || !name.chars().all(is_name_char) {
        return Err(SqsError::new(
            ErrorCode::InvalidParameterValue,
            format!(
                "Can only include alphanumeric characters, hyphens, or underscores. 1 to {} in length",
                sqs_limits::QUEUE_NAME_CHARS_MAX
            ),
        ));
    }
    Ok(())
}

/// The request-level rules of every batch: 1–10 entries, valid ids, no id twice.
pub fn batch_entry_ids<'a>(
    entry_kind: &str,
    ids: impl ExactSizeIterator<Item = &'a str>,
) -> SqsResult<()> {
    let count = ids.len();
    if count == 0 {
        return Err(SqsError::new(
            ErrorCode::EmptyBatchRequest,
            format!("There should be at least one {entry_kind} in the request."),
        ));
    }
    if count > sqs_limits::BATCH_ENTRIES_MAX {
        return Err(SqsError::new(
            ErrorCode::TooManyEntriesInBatchRequest,
            format!(
                "Maximum number of entries per request are {}. You have sent {count}.",
                sqs_limits::BATCH_ENTRIES_MAX
            ),
        ));
    }
    let mut seen = HashSet::with_capacity(count);
    for id in ids {
        let length = id.chars().count();
        if length == 0
            || length > sqs_limits::BATCH_ENTRY_ID_CHARS_MAX
            || !id.chars().all(is_name_char)
        {
            return Err(SqsError::new(
                ErrorCode::InvalidBatchEntryId,
                format!(
                    "A batch entry id can only contain alphanumeric characters, hyphens and underscores. \
                     It can be at most {} letters long.",
                    sqs_limits::BATCH_ENTRY_ID_CHARS_MAX
                ),
            ));
        }
        if !seen.insert(id) {
            return Err(SqsError::new(
                ErrorCode::BatchEntryIdsNotDistinct,
                format!("Id {id} repeated."),
            ));
        }
    }
    Ok(())
}

/// Characters SQS accepts in bodies and string attribute values: #x9 #xA #xD #x20–#xD7FF #xE000–#xFFFD
/// #x10000–#x10FFFF (a Rust `char` already excludes surrogates).
pub fn is_allowed_char(c: char) -> bool {
    matches!(c, '\u{9}' | '\u{A}' | '\u{D}' | '\u{20}'..='\u{D7FF}' | '\u{E000}'..='\u{FFFD}' | '\u{10000}'..)
}

pub fn message_contents(text: &str) -> SqsResult<()> {
    if text.chars().all(is_allowed_char) {
        Ok(())
    } else {
        Err(SqsError::new(
            ErrorCode::InvalidMessageContents,
            "Invalid characters found. Valid characters are #x9 | #xA | #xD | #x20 to #xD7FF | #xE000 to \
             #xFFFD | #x10000 to #x10FFFF",
        ))
    }
}

/// An integer parameter within `min..=max`, with AWS's wording when it is not.
pub fn in_range(parameter: &str, value: i64, min: u64, max: u64) -> SqsResult<u64> {
    u64::try_from(value)
        .ok()
        .filter(|v| (min..=max).contains(v))
        .ok_or_else(|| {
            SqsError::invalid_value(
                parameter,
                value,
                &format!("Must be >= {min} and <= {max}, if provided."),
            )
        })
}

fn attribute_name(name: &str) -> SqsResult<()> {
    let invalid = |reason: &str| {
        SqsError::new(
            ErrorCode::InvalidParameterValue,
            format!("Message (user) attribute '{name}' is invalid. Reason: {reason}"),
        )
    };
    if name.is_empty() || name.chars().count() > sqs_limits::MESSAGE_ATTRIBUTE_NAME_CHARS_MAX {
        return Err(invalid(&format!(
            "The name must be 1 to {} characters long.",
            sqs_limits::MESSAGE_ATTRIBUTE_NAME_CHARS_MAX
        )));
    }
    if !name
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
    {
        return Err(invalid(
            "The name can contain only alphanumeric characters, hyphens, underscores and periods.",
        ));
    }
    let lower = name.to_ascii_lowercase();
    if lower.starts_with("aws.") || lower.starts_with("amazon.") {
        return Err(invalid("The prefixes AWS. and Amazon. are reserved."));
    }
    if name.starts_with('.') || name.ends_with('.') || name.contains("..") {
        return Err(invalid(
            "The name must not start or end with a period, nor contain two periods in a row.",
        ));
    }
    Ok(())
}

fn is_number(text: &str) -> bool {
    let unsigned = text.strip_prefix(['-', '+']).unwrap_or(text);
    let (mantissa, exponent) = match unsigned.split_once(['e', 'E']) {
        Some((m, e)) => (m, Some(e)),
        None => (unsigned, None),
    };
    let (whole, fraction) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    let digits = whole.len() + fraction.len();
    let digits_ok = digits > 0
        && digits <= limits::NUMBER_ATTRIBUTE_DIGITS_MAX
        && whole
            .chars()
            .chain(fraction.chars())
            .all(|c| c.is_ascii_digit());
    let exponent_ok = exponent.is_none_or(|e| {
        let e = e.strip_prefix(['-', '+']).unwrap_or(e);
        !e.is_empty() && e.len() <= 3 && e.chars().all(|c| c.is_ascii_digit())
    });
    digits_ok && exponent_ok
}

/// One attribute value: a data type of String, Number or Binary (optionally `.custom`) and the value it needs.
fn attribute_value(name: &str, input: &MessageAttributeInput) -> SqsResult<AttributeValue> {
    let invalid = |reason: String| {
        SqsError::new(
            ErrorCode::InvalidParameterValue,
            format!("Message (user) attribute '{name}' is invalid. Reason: {reason}"),
        )
    };
    let data_type = input
        .data_type
        .as_deref()
        .filter(|t| !t.is_empty())
        .ok_or_else(|| invalid("The message attribute must have a data type.".into()))?;
    let base = data_type
        .split_once('.')
        .map_or(data_type, |(base, _)| base);
    if input.has_list_values {
        return Err(invalid("List values are not supported.".into()));
    }
    let value = match base {
        "String" | "Number" => {
            let text = input
                .string_value
                .as_deref()
                .filter(|t| !t.is_empty())
                .ok_or_else(|| {
                    invalid(format!(
                        "A {data_type} attribute must have a non-empty StringValue."
                    ))
                })?;
            if text.chars().any(|c| !is_allowed_char(c)) {
                return Err(SqsError::new(
                    ErrorCode::InvalidMessageContents,
                    format!("Message (user) attribute '{name}' contains invalid characters."),
                ));
            }
            if base == "Number" && !is_number(text) {
                return Err(invalid(format!("Could not parse {text} as a number.")));
            }
            AttributeData::String(text.to_string())
        }
        "Binary" => {
            let bytes = input
                .binary_value
                .as_ref()
                .filter(|b| !b.is_empty())
                .ok_or_else(|| {
                    invalid(format!(
                        "A {data_type} attribute must have a non-empty BinaryValue."
                    ))
                })?;
            AttributeData::Binary(bytes.clone().into())
        }
        _ => {
            return Err(invalid(format!(
                "The type of the message attribute is incorrect: {data_type}. The type must be String, \
                 Number or Binary, optionally followed by a custom suffix."
            )))
        }
    };
    Ok(AttributeValue {
        data_type: data_type.to_string(),
        value,
    })
}

/// Bytes an attribute counts toward the message size: name, data type and value.
pub fn attribute_size(name: &str, value: &AttributeValue) -> u64 {
    let value_bytes = match &value.value {
        AttributeData::String(text) => text.len(),
        AttributeData::Binary(bytes) => bytes.len(),
    };
    (name.len() + value.data_type.len() + value_bytes) as u64
}

/// Checks and converts a message's user attributes. Returns them and the bytes they count.
pub fn message_attributes(
    inputs: &BTreeMap<String, MessageAttributeInput>,
) -> SqsResult<(Attributes, u64)> {
    if inputs.len() > sqs_limits::MESSAGE_ATTRIBUTES_MAX {
        return Err(SqsError::invalid_parameters(format!(
            "Number of message attributes [{}] exceeds the allowed maximum [{}].",
            inputs.len(),
            sqs_limits::MESSAGE_ATTRIBUTES_MAX
        )));
    }
    let mut attributes = Attributes::new();
    let mut size = 0;
    for (name, input) in inputs {
        attribute_name(name)?;
        let value = attribute_value(name, input)?;
        size += attribute_size(name, &value);
        attributes.insert(name.clone(), value);
    }
    Ok((attributes, size))
}

/// The only system attribute a sender may set is `AWSTraceHeader`, a String.
pub const TRACE_HEADER: &str = "AWSTraceHeader";

/// Checks a message's system attributes; returns the trace header, converted, if given.
pub fn system_attributes(
    inputs: &BTreeMap<String, MessageAttributeInput>,
) -> SqsResult<Option<AttributeValue>> {
    let mut trace_header = None;
    for (name, input) in inputs {
        if name != TRACE_HEADER {
            return Err(SqsError::invalid_parameters(format!(
                "Message system attribute name '{name}' is invalid."
            )));
        }
        let value = attribute_value(name, input)?;
        if value.data_type != "String" {
            return Err(SqsError::invalid_parameters(
                "The message system attribute AWSTraceHeader must have the data type String.",
            ));
        }
        trace_header = Some(value);
    }
    Ok(trace_header)
}

/// The size error SQS gives for a message (body plus attributes) over the queue's MaximumMessageSize.
pub fn message_too_long(max_bytes: u64) -> SqsError {
    SqsError::invalid_parameters(format!("Message must be shorter than {max_bytes} bytes."))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn string_attribute(data_type: &str, value: &str) -> MessageAttributeInput {
        MessageAttributeInput {
            data_type: Some(data_type.into()),
            string_value: Some(value.into()),
            ..Default::default()
        }
    }

    #[test]
    fn queue_names_are_1_to_80_word_characters() {
        assert!(queue_name("orders-2_x").is_ok());
        assert!(queue_name(&"a".repeat(80)).is_ok());
        assert!(queue_name(&"a".repeat(81)).is_err());
        assert!(queue_name("").is_err());
        assert!(queue_name("bad name").is_err());
        assert_eq!(
            queue_name("jobs.fifo").unwrap_err().message,
            "FIFO queues are not supported by Veil yet."
        );
    }

    #[test]
    fn batch_ids_must_be_present_valid_and_distinct() {
        let code = |ids: &[&str]| {
            batch_entry_ids("Entry", ids.iter().copied())
                .err()
                .map(|e| e.code)
        };
        assert_eq!(code(&["a", "b"]), None);
        assert_eq!(code(&[]), Some(ErrorCode::EmptyBatchRequest));
        assert_eq!(
            code(&["a"; 11]),
            Some(ErrorCode::TooManyEntriesInBatchRequest)
        );
        assert_eq!(code(&["a", "a"]), Some(ErrorCode::BatchEntryIdsNotDistinct));
        assert_eq!(code(&["a b"]), Some(ErrorCode::InvalidBatchEntryId));
    }

    #[test]
    fn body_characters_follow_the_xml_set() {
        assert!(message_contents("tab\there\r\n é 😀 \u{FFFD}").is_ok());
        assert_eq!(
            message_contents("nul\u{0}").unwrap_err().code,
            ErrorCode::InvalidMessageContents
        );
        assert!(message_contents("\u{FFFE}").is_err());
    }

    #[test]
    fn attribute_names_reject_reserved_prefixes_and_bad_periods() {
        for bad in ["AWS.x", "amazon.y", ".lead", "trail.", "a..b", "sp ace"] {
            let inputs = BTreeMap::from([(bad.to_string(), string_attribute("String", "v"))]);
            assert!(message_attributes(&inputs).is_err(), "{bad}");
        }
    }

    #[test]
    fn attribute_values_need_a_known_type_and_a_value() {
        let check = |input: MessageAttributeInput| {
            message_attributes(&BTreeMap::from([("a".to_string(), input)]))
        };
        assert!(check(string_attribute("Number.float", "-1.5e3")).is_ok());
        assert!(check(string_attribute("Number", "abc")).is_err());
        assert!(check(string_attribute("String", "")).is_err());
        assert!(check(string_attribute("Text", "x")).is_err());
        let (attributes, size) = check(string_attribute("String.custom", "value")).unwrap();
        assert_eq!(size, 1 + 13 + 5);
        assert_eq!(attributes["a"].data_type, "String.custom");
        let binary = MessageAttributeInput {
            data_type: Some("Binary".into()),
            binary_value: Some(vec![1, 2]),
            ..Default::default()
        };
        assert!(check(binary).is_ok());
    }

    #[test]
    fn at_most_ten_attributes() {
        let inputs: BTreeMap<_, _> = (0..11)
            .map(|i| (format!("a{i}"), string_attribute("String", "v")))
            .collect();
        assert!(message_attributes(&inputs).is_err());
    }
}
