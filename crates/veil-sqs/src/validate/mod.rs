//! SQS's input rules: queue names, batch entry ids, body characters, message attributes and numeric ranges,
//! each answering with the error code and wording SQS uses. Limits come from `crate::limits` and
//! this crate's `limits`.

use std::collections::{BTreeMap, HashSet};

use crate::limits as sqs_limits;
use veil_core::{AttributeData, AttributeValue, Attributes};

use crate::api::MessageAttributeInput;
use crate::error::{ErrorCode, SqsError, SqsResult};
use crate::fifo;
use crate::limits;

fn is_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '-' || c == '_'
}

/// A standard queue's name: 1–80 characters of `[A-Za-z0-9_-]`; a FIFO queue's: the same followed by `.fifo`,
/// 80 characters in all. Each kind has AWS's own text: the standard one also answers a `.fifo` name created
/// without `FifoQueue=true` (recorded from AWS in boto/botocore issue 3058), the FIFO one a FIFO queue whose
/// name lacks the suffix (AWS's CreateQueue answer as CloudFormation and the Java SDK relay it, e.g.
/// awslabs/aws-servicebroker issue 197).
pub fn queue_name(name: &str, fifo: bool) -> SqsResult<()> {
    let base = if fifo {
        name.strip_suffix(fifo::NAME_SUFFIX)
    } else {
        Some(name)
    };
    let valid = base.is_some_and(|base| !base.is_empty() && base.chars().all(is_name_char))
        && name.chars().count() <= sqs_limits::QUEUE_NAME_CHARS_MAX;
    if valid {
        return Ok(());
    }
    let max = sqs_limits::QUEUE_NAME_CHARS_MAX;
    Err(SqsError::invalid_parameter_value(if fifo {
        format!(
            "The name of a FIFO queue can only include alphanumeric characters, hyphens, or underscores, \
             must end with .fifo suffix and be 1 to {max} in length."
        )
    } else {
        format!(
            "Can only include alphanumeric characters, hyphens, or underscores. 1 to {max} in length"
        )
    }))
}

/// Whether some queue could have this name (GetQueueUrl's check, which does not say why a name is wrong).
pub fn possible_queue_name(name: &str) -> bool {
    queue_name(name, fifo::is_fifo_name(name)).is_ok()
}

/// `MessageGroupId`, `MessageDeduplicationId` and `ReceiveRequestAttemptId`: 1–128 characters, each a letter,
/// a digit or ASCII punctuation (botocore's model). The text is AWS's for the first two (LocalStack's
/// AWS-recorded `test_message_deduplication_id_invalid` and
/// `test_send_message_to_standard_queue_with_invalid_message_group_id` snapshots, which also show that an
/// empty id is refused, not taken as absent); the attempt id's is worded the same way.
pub fn fifo_id(parameter: &str, value: &str) -> SqsResult<()> {
    let length = value.chars().count();
    if (1..=sqs_limits::FIFO_ID_CHARS_MAX).contains(&length)
        && value.chars().all(|c| c.is_ascii_graphic())
    {
        return Ok(());
    }
    Err(SqsError::invalid_value(
        parameter,
        value,
        &format!(
            "{parameter} can only include alphanumeric and punctuation characters. 1 to {} in length.",
            sqs_limits::FIFO_ID_CHARS_MAX
        ),
    ))
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
    if is_allowed_text(text) {
        Ok(())
    } else {
        Err(SqsError::new(
            ErrorCode::InvalidMessageContents,
            "Invalid characters found. Valid characters are #x9 | #xA | #xD | #x20 to #xD7FF | #xE000 to \
             #xFFFD | #x10000 to #x10FFFF",
        ))
    }
}

/// [`is_allowed_char`] for every character, settled on bytes for almost every body: a `&str` holds no
/// surrogates, so beyond the control characters the only characters refused are U+FFFE and U+FFFF, whose UTF-8
/// begins with 0xEF. Only text with such a byte is decoded (a send's body is checked on every request).
fn is_allowed_text(text: &str) -> bool {
    let bytes = text.as_bytes();
    let controls_allowed = bytes
        .iter()
        .all(|&b| b >= 0x20 || matches!(b, b'\t' | b'\n' | b'\r'));
    controls_allowed && (!bytes.contains(&0xEF) || text.chars().all(is_allowed_char))
}

/// An integer parameter within `min..=max`, with AWS's wording when it is not ([`range_reason`]).
pub fn in_range(parameter: &str, value: i64, min: u64, max: u64) -> SqsResult<u64> {
    u64::try_from(value)
        .ok()
        .filter(|v| (min..=max).contains(v))
        .ok_or_else(|| {
            SqsError::invalid_value(parameter, value, &range_reason(parameter, min, max))
        })
}

/// Why a number is out of range, in AWS's words. SendMessage's DelaySeconds names itself ("Value 54524 for
/// parameter DelaySeconds is invalid. Reason: DelaySeconds must be >= 0 and <= 900.", recorded from AWS in
/// aws-samples/amazon-sqs-dlq-replay-backoff issue 8); ReceiveMessage's parameters end in "if provided"
/// (WaitTimeSeconds, recorded in LocalStack's `test_send_receive_wait_time_seconds` snapshot).
pub fn range_reason(parameter: &str, min: u64, max: u64) -> String {
    match parameter {
        "DelaySeconds" => format!("DelaySeconds must be >= {min} and <= {max}."),
        "MaxNumberOfMessages" => format!("Must be between {min} and {max}, if provided."),
        _ => format!("Must be >= {min} and <= {max}, if provided."),
    }
}

/// The message-attribute errors, in AWS's words where they are recorded (each function says where).
pub(crate) mod attribute_errors {
    use crate::error::SqsError;

    /// A Query `MessageAttribute.N.Value…` without its `Name` (AWS's Query answer, recorded in
    /// aws/aws-sdk-php issue 694 and aws/aws-sdk-go issue 178).
    pub fn empty_name() -> SqsError {
        SqsError::invalid_parameter_value(
            "The request must contain non-empty message attribute name.",
        )
    }

    /// LocalStack's wording for the name's length and characters, kept from AWS's answers; the bound is
    /// AWS's documented 256 characters (LocalStack's AWS-validated test: 257 fails).
    pub fn name_too_long() -> SqsError {
        SqsError::invalid_parameter_value(
            "Message (user) attribute names must be shorter than 256 Bytes",
        )
    }

    pub fn name_characters() -> SqsError {
        SqsError::invalid_parameter_value(
            "Message (user) attributes name can only contain upper and lower score characters, digits, \
             periods, hyphens and underscores. ",
        )
    }

    /// A letter or digit outside AWS's documented ASCII set (the documentation's list, as moto words it).
    pub fn name_not_ascii(name: &str) -> SqsError {
        SqsError::invalid_parameter_value(format!(
            "The message attribute name '{name}' is invalid. Attribute name can contain A-Z, a-z, 0-9, \
             underscore (_), hyphen (-), and period (.) characters."
        ))
    }

    pub fn name_reserved_or_dotted() -> SqsError {
        SqsError::invalid_parameter_value(
            "You can't use message attribute names beginning with 'AWS.' or 'Amazon.'. These strings are \
             reserved for internal use. Additionally, they cannot start or end with '.'.",
        )
    }

    /// Two periods in a row: AWS refuses them (LocalStack's validated test notes it); its wording is not
    /// recorded, so this one is Veil's.
    pub fn name_double_period(name: &str) -> SqsError {
        SqsError::invalid_parameter_value(format!(
            "Message (user) attribute name '{name}' is invalid: it cannot contain two periods in a row."
        ))
    }

    /// AWS's current wording (recorded in grafana/k6-jslib-aws PR 65, 2023).
    pub fn bad_type(name: &str) -> SqsError {
        SqsError::invalid_parameter_value(format!(
            "The type of message (user) attribute '{name}' is invalid. You must use only the following \
             supported type prefixes: Binary, Number, String."
        ))
    }

    pub fn missing_type(name: &str) -> SqsError {
        SqsError::invalid_parameter_value(format!(
            "The message attribute '{name}' must contain non-empty message attribute type."
        ))
    }

    pub fn type_too_long() -> SqsError {
        SqsError::invalid_parameter_value(
            "Message (user) attribute types must be shorter than 256 Bytes",
        )
    }

    /// Recorded from AWS for a String in LocalStack's `test_send_message_with_empty_string_attribute`
    /// snapshot; the other base types follow the same form.
    pub fn empty_value(name: &str, base_type: &str) -> SqsError {
        SqsError::invalid_parameter_value(format!(
            "Message (user) attribute '{name}' must contain a non-empty value of type '{base_type}'."
        ))
    }

    pub fn not_a_number(name: &str, text: &str) -> SqsError {
        SqsError::invalid_parameter_value(format!(
            "Value {text} for parameter MessageAttribute.{name}.Value.StringValue is invalid. Reason: \
             Must be a number of up to 38 significant digits between -10^126 and 10^126 (magnitude at \
             least 10^-128)."
        ))
    }

    pub fn list_values(name: &str) -> SqsError {
        SqsError::invalid_parameter_value(format!(
            "Message (user) attribute '{name}' is invalid. Reason: List values are not supported."
        ))
    }
}

/// AWS's documented characters of a message attribute name (the SQS Developer Guide, "Message attribute
/// components"): A-Z, a-z, 0-9, `_`, `-` and `.`. (AWS has been recorded accepting letters of other scripts,
/// LocalStack's `test_send_message_with_invalid_string_attributes`; Veil follows the documented rule,
/// docs/semantics.md §SQS "Message attributes".)
fn is_attribute_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.')
}

fn attribute_name(name: &str) -> SqsResult<()> {
    if name.is_empty() {
        return Err(attribute_errors::empty_name());
    }
    if name.chars().count() > sqs_limits::MESSAGE_ATTRIBUTE_NAME_CHARS_MAX {
        return Err(attribute_errors::name_too_long());
    }
    if let Some(c) = name.chars().find(|&c| !is_attribute_name_char(c)) {
        // A letter or digit of another script breaks AWS's documented character set (A-Z, a-z, 0-9, `_`, `-`,
        // `.`), named in the documentation's words; other characters keep AWS's recorded answer.
        return Err(if c.is_alphanumeric() {
            attribute_errors::name_not_ascii(name)
        } else {
            attribute_errors::name_characters()
        });
    }
    let lower = name.to_lowercase();
    if lower.starts_with("aws.")
        || lower.starts_with("amazon.")
        || name.starts_with('.')
        || name.ends_with('.')
    {
        return Err(attribute_errors::name_reserved_or_dotted());
    }
    if name.contains("..") {
        return Err(attribute_errors::name_double_period(name));
    }
    Ok(())
}

/// A Number attribute: up to 38 significant digits, an optional sign, fraction and exponent, and a
/// magnitude of 0 or between 10^-128 and 10^126 (AWS's documented Number range).
fn is_number(text: &str) -> bool {
    let unsigned = text.strip_prefix(['-', '+']).unwrap_or(text);
    let (mantissa, exponent) = match unsigned.split_once(['e', 'E']) {
        Some((m, e)) => (m, Some(e)),
        None => (unsigned, None),
    };
    let (whole, fraction) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    let all_digits = |part: &str| part.bytes().all(|b| b.is_ascii_digit());
    if (whole.is_empty() && fraction.is_empty()) || !all_digits(whole) || !all_digits(fraction) {
        return false;
    }
    let exponent: i64 = match exponent {
        None => 0,
        Some(e) => match e.parse::<i64>() {
            Ok(e) if e.unsigned_abs() <= 1_000 => e,
            _ => return false,
        },
    };
    // Positions of the first and last significant digits, counting through `whole` then `fraction`.
    let nonzero = |b: u8| b != b'0';
    let first = whole
        .bytes()
        .position(nonzero)
        .or_else(|| fraction.bytes().position(nonzero).map(|i| whole.len() + i));
    let Some(first) = first else {
        return true; // zero
    };
    let last = fraction
        .bytes()
        .rposition(nonzero)
        .map(|i| whole.len() + i)
        .or_else(|| whole.bytes().rposition(nonzero))
        .unwrap_or(first);
    if last - first + 1 > limits::NUMBER_ATTRIBUTE_DIGITS_MAX {
        return false;
    }
    let digit_at = |i: usize| match whole.as_bytes().get(i) {
        Some(&b) => b,
        None => fraction.as_bytes()[i - whole.len()],
    };
    // The power of ten of the leading significant digit.
    let magnitude = exponent + whole.len() as i64 - 1 - first as i64;
    let exactly_max = magnitude == limits::NUMBER_ATTRIBUTE_EXPONENT_MAX
        && first == last
        && digit_at(first) == b'1';
    magnitude >= limits::NUMBER_ATTRIBUTE_EXPONENT_MIN
        && (magnitude < limits::NUMBER_ATTRIBUTE_EXPONENT_MAX || exactly_max)
}

/// One attribute value: a data type of String, Number or Binary (optionally `.custom`) and the value it needs.
fn attribute_value(name: &str, input: &MessageAttributeInput) -> SqsResult<AttributeValue> {
    let data_type = input
        .data_type
        .as_deref()
        .filter(|t| !t.is_empty())
        .ok_or_else(|| attribute_errors::missing_type(name))?;
    if data_type.chars().count() > limits::MESSAGE_ATTRIBUTE_TYPE_CHARS_MAX {
        return Err(attribute_errors::type_too_long());
    }
    let base = data_type
        .split_once('.')
        .map_or(data_type, |(base, _)| base);
    if input.has_list_values {
        return Err(attribute_errors::list_values(name));
    }
    let value = match base {
        "String" | "Number" => {
            let text = input
                .string_value
                .as_deref()
                .filter(|t| !t.is_empty())
                .ok_or_else(|| attribute_errors::empty_value(name, base))?;
            if text.chars().any(|c| !is_allowed_char(c)) {
                return Err(SqsError::new(
                    ErrorCode::InvalidMessageContents,
                    format!("Message (user) attribute '{name}' contains invalid characters."),
                ));
            }
            if base == "Number" && !is_number(text) {
                return Err(attribute_errors::not_a_number(name, text));
            }
            AttributeData::String(text.to_string())
        }
        "Binary" => {
            let bytes = input
                .binary_value
                .as_ref()
                .filter(|b| !b.is_empty())
                .ok_or_else(|| attribute_errors::empty_value(name, base))?;
            AttributeData::Binary(bytes.clone().into())
        }
        _ => return Err(attribute_errors::bad_type(name)),
    };
    Ok(AttributeValue {
        data_type: data_type.to_string(),
        value,
    })
}

/// Whether a ReceiveMessage `MessageAttributeNames` entry selects the attribute `name`, as AWS does
/// (LocalStack's AWS-recorded `test_receive_message_message_attribute_names_filters` snapshot): `All`, `*`
/// and `.*` select every attribute; `prefix.*` selects every name that starts with `prefix` (`Hel.*`
/// selects `Hello` and `Help.Me`); any other entry selects the attribute of exactly that name. Entries that
/// could never name an attribute (`AWS.`, `..foo`) select nothing and are no error.
pub fn message_attribute_selected(filters: &[String], name: &str) -> bool {
    filters.iter().any(|filter| match filter.as_str() {
        "All" | "*" | ".*" => true,
        filter => match filter.strip_suffix(".*") {
            Some(prefix) => name.starts_with(prefix),
            None => filter == name,
        },
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

/// Queue tags (TagQueue, CreateQueue's `tags`, UntagQueue's keys). AWS's rules (the SQS developer guide's
/// tag quotas and the tagging pattern `^([\p{L}\p{Z}\p{N}_.:/=+\-@]*)$` AWS reports for tag values): keys of
/// 1-128 characters, values of 0-256, those characters only, no `aws:` key prefix, at most 50 per queue. The
/// wording of the count and length errors is moto's (AWS's is not recorded anywhere we could find).
pub mod tags {
    use std::collections::BTreeMap;

    use crate::error::{SqsError, SqsResult};
    use crate::limits;

    fn is_tag_char(c: char) -> bool {
        c.is_alphanumeric() || c.is_whitespace() || "_.:/=+-@".contains(c)
    }

    /// A key (or UntagQueue's list of keys) of the wrong length.
    fn key_length() -> SqsError {
        SqsError::invalid_parameter_value(format!(
            "Tag keys must be between 1 and {} characters in length.",
            limits::TAG_KEY_CHARS_MAX
        ))
    }

    /// A key UntagQueue may name, or TagQueue may set.
    pub fn key(key: &str) -> SqsResult<()> {
        let length = key.chars().count();
        if length == 0 || length > limits::TAG_KEY_CHARS_MAX {
            return Err(key_length());
        }
        if !key.chars().all(is_tag_char) {
            return Err(SqsError::invalid_parameter_value(format!(
                "Tag key {key} is invalid. Tag keys and values may contain only letters, digits, white space \
                 and _ . : / = + - @."
            )));
        }
        if key.to_lowercase().starts_with("aws:") {
            return Err(SqsError::invalid_parameter_value(format!(
                "Tag key {key} is invalid. The aws: prefix is reserved for AWS use."
            )));
        }
        Ok(())
    }

    fn value(key: &str, value: &str) -> SqsResult<()> {
        if value.chars().count() > limits::TAG_VALUE_CHARS_MAX {
            return Err(SqsError::invalid_parameter_value(format!(
                "Tag values must be between 0 and {} characters in length.",
                limits::TAG_VALUE_CHARS_MAX
            )));
        }
        if !value.chars().all(is_tag_char) {
            return Err(SqsError::invalid_parameter_value(format!(
                "Tag value for key {key} is invalid. Tag keys and values may contain only letters, digits, \
                 white space and _ . : / = + - @."
            )));
        }
        Ok(())
    }

    /// Every tag of a TagQueue or CreateQueue, in key order.
    pub fn given(tags: &BTreeMap<String, String>) -> SqsResult<()> {
        for (tag_key, tag_value) in tags {
            key(tag_key)?;
            value(tag_key, tag_value)?;
        }
        Ok(())
    }

    /// UntagQueue's keys: at least one, each a possible key.
    pub fn keys(tag_keys: &[String]) -> SqsResult<()> {
        if tag_keys.is_empty() {
            return Err(key_length());
        }
        tag_keys.iter().try_for_each(|tag_key| key(tag_key))
    }

    /// More than 50 tags on a queue, counting those it has.
    pub fn too_many(queue_name: &str) -> SqsError {
        SqsError::invalid_parameter_value(format!("Too many tags added for queue {queue_name}."))
    }
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

/// The size error SQS gives for a message (body plus attributes) over the queue's MaximumMessageSize
/// (LocalStack's AWS-recorded `test_send_oversized_message` snapshot).
pub fn message_too_long(max_bytes: u64) -> SqsError {
    SqsError::invalid_parameters(format!("Message must be shorter than {max_bytes} bytes."))
}

/// The same, for one entry of a SendMessageBatch: AWS words it "cannot be validated" there (LocalStack's
/// AWS-recorded `test_send_batch_message_size` snapshot).
pub fn batch_entry_too_long(max_bytes: u64) -> SqsError {
    SqsError::invalid_parameter_value(format!(
        "One or more parameters cannot be validated. Reason: Message must be shorter than \
         {max_bytes} bytes."
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::refusal;

    fn invalid(message: &str) -> (ErrorCode, String) {
        (ErrorCode::InvalidParameterValue, message.to_string())
    }

    const RESERVED_NAME: &str = "You can't use message attribute names beginning with 'AWS.' or 'Amazon.'. \
        These strings are reserved for internal use. Additionally, they cannot start or end with '.'.";

    fn string_attribute(data_type: &str, value: &str) -> MessageAttributeInput {
        MessageAttributeInput {
            data_type: Some(data_type.into()),
            string_value: Some(value.into()),
            ..Default::default()
        }
    }

    #[test]
    fn queue_names_are_1_to_80_word_characters() {
        assert!(queue_name("orders-2_x", false).is_ok());
        assert!(queue_name(&"a".repeat(80), false).is_ok());
        for bad in [
            "a".repeat(81),
            String::new(),
            "bad name".into(),
            "jobs.fifo".into(),
        ] {
            assert_eq!(
                refusal(queue_name(&bad, false)),
                invalid(
                    "Can only include alphanumeric characters, hyphens, or underscores. 1 to 80 in length"
                ),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn fifo_queue_names_end_in_dot_fifo_within_80_characters() {
        assert!(queue_name("jobs.fifo", true).is_ok());
        assert!(queue_name(&format!("{}.fifo", "a".repeat(75)), true).is_ok());
        let refused = invalid(
            "The name of a FIFO queue can only include alphanumeric characters, hyphens, or underscores, \
             must end with .fifo suffix and be 1 to 80 in length.",
        );
        for bad in [
            "jobs".to_string(),
            ".fifo".into(),
            format!("{}.fifo", "a".repeat(76)),
            "jo.bs.fifo".into(),
        ] {
            assert_eq!(refusal(queue_name(&bad, true)), refused, "{bad:?}");
        }
        assert!(possible_queue_name("jobs.fifo"));
        assert!(possible_queue_name("jobs"));
        assert!(!possible_queue_name("jo.bs"));
    }

    #[test]
    fn fifo_ids_are_1_to_128_letters_digits_or_punctuation() {
        assert_eq!(
            fifo_id("MessageGroupId", "a-Z_0!\"#$%&'()*+,./:;<=>?@[\\]^`{|}~"),
            Ok(())
        );
        assert_eq!(fifo_id("MessageDeduplicationId", &"a".repeat(128)), Ok(()));
        for bad in [
            String::new(),
            "a".repeat(129),
            "group 123".into(),
            "é".into(),
        ] {
            assert_eq!(
                refusal(fifo_id("MessageDeduplicationId", &bad)),
                invalid(&format!(
                    "Value {bad} for parameter MessageDeduplicationId is invalid. Reason: \
                     MessageDeduplicationId can only include alphanumeric and punctuation characters. 1 \
                     to 128 in length."
                ))
            );
        }
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
        assert_eq!(
            refusal(message_contents("\u{FFFE}")).0,
            ErrorCode::InvalidMessageContents
        );
    }

    #[test]
    fn attribute_names_reject_reserved_prefixes_and_bad_periods() {
        let of = |name: &str| {
            refusal(message_attributes(&BTreeMap::from([(
                name.to_string(),
                string_attribute("String", "v"),
            )])))
        };
        for reserved in ["AWS.x", "amazon.y", ".lead", "trail."] {
            assert_eq!(of(reserved), invalid(RESERVED_NAME), "{reserved}");
        }
        assert_eq!(
            of("a..b"),
            invalid("Message (user) attribute name 'a..b' is invalid: it cannot contain two periods in a row.")
        );
        assert_eq!(
            of("sp ace"),
            invalid(
                "Message (user) attributes name can only contain upper and lower score characters, digits, \
                 periods, hyphens and underscores. "
            )
        );
    }

    #[test]
    fn attribute_values_need_a_known_type_and_a_value() {
        let check = |input: MessageAttributeInput| {
            message_attributes(&BTreeMap::from([("a".to_string(), input)]))
        };
        assert!(check(string_attribute("Number.float", "-1.5e3")).is_ok());
        assert_eq!(
            refusal(check(string_attribute("Number", "abc"))),
            invalid(
                "Value abc for parameter MessageAttribute.a.Value.StringValue is invalid. Reason: Must be a \
                 number of up to 38 significant digits between -10^126 and 10^126 (magnitude at least 10^-128)."
            )
        );
        assert_eq!(
            refusal(check(string_attribute("String", ""))),
            invalid(
                "Message (user) attribute 'a' must contain a non-empty value of type 'String'."
            )
        );
        assert_eq!(
            refusal(check(string_attribute("Text", "x"))),
            invalid(
                "The type of message (user) attribute 'a' is invalid. You must use only the following \
                 supported type prefixes: Binary, Number, String."
            )
        );
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
        assert_eq!(
            refusal(message_attributes(&inputs)),
            invalid(
                "One or more parameters are invalid. Reason: Number of message attributes [11] exceeds the \
                 allowed maximum [10]."
            )
        );
    }

    fn attribute_error(name: &str, input: MessageAttributeInput) -> String {
        message_attributes(&BTreeMap::from([(name.to_string(), input)]))
            .unwrap_err()
            .message
    }

    #[test]
    fn attribute_errors_use_awss_texts() {
        assert_eq!(
            attribute_error("ErrorDetails", string_attribute("String", "")),
            "Message (user) attribute 'ErrorDetails' must contain a non-empty value of type 'String'."
        );
        assert_eq!(
            attribute_error("my-attribute", string_attribute("Text", "x")),
            "The type of message (user) attribute 'my-attribute' is invalid. You must use only the \
             following supported type prefixes: Binary, Number, String."
        );
        assert_eq!(
            attribute_error("AWS.x", string_attribute("String", "v")),
            "You can't use message attribute names beginning with 'AWS.' or 'Amazon.'. These strings \
             are reserved for internal use. Additionally, they cannot start or end with '.'."
        );
        assert_eq!(
            attribute_error("Invalid-§-attr", string_attribute("String", "v")),
            "Message (user) attributes name can only contain upper and lower score characters, digits, \
             periods, hyphens and underscores. "
        );
    }

    #[test]
    fn attribute_names_use_ascii_letters_digits_and_up_to_256_characters() {
        let of = |name: &str| {
            message_attributes(&BTreeMap::from([(
                name.to_string(),
                string_attribute("String", "v"),
            )]))
            .map(|(attributes, _)| attributes.len())
        };
        assert_eq!(of("attr.1_A-z"), Ok(1));
        assert_eq!(
            refusal(of("öther_encodings")),
            invalid(
                "The message attribute name 'öther_encodings' is invalid. Attribute name can contain A-Z, \
                 a-z, 0-9, underscore (_), hyphen (-), and period (.) characters."
            )
        );
        assert_eq!(of(&"L".repeat(256)), Ok(1));
        assert_eq!(
            refusal(of(&"L".repeat(257))),
            invalid("Message (user) attribute names must be shorter than 256 Bytes")
        );
        assert_eq!(refusal(of("aWs.lower")), invalid(RESERVED_NAME));
        assert_eq!(refusal(of("Invalid.")), invalid(RESERVED_NAME));
        let long_type = format!("Number.{}", "L".repeat(256));
        assert_eq!(
            refusal(message_attributes(&BTreeMap::from([(
                "n".to_string(),
                string_attribute(&long_type, "1")
            )]))),
            invalid("Message (user) attribute types must be shorter than 256 Bytes")
        );
    }

    #[test]
    fn numbers_have_38_digits_and_a_magnitude_from_1e_minus_128_to_1e126() {
        for good in [
            "0",
            "-0.0",
            "1e126",
            "1E-128",
            "123.456",
            &"9".repeat(38),
            "1000e-3",
            "0.1e127",
            "00100.e124",
            &format!("{}.{}", "9".repeat(20), "9".repeat(18)),
            &format!("0.000{}000", "9".repeat(38)),
        ] {
            assert!(is_number(good), "{good}");
        }
        for bad in [
            "1.1e126",
            "1e127",
            "1e-129",
            &"9".repeat(39),
            "1e",
            "--1",
            "0x10",
            "",
            ".",
            "0.11e127",
            "10.01e125",
            &format!("{}.{}", "9".repeat(20), "9".repeat(19)),
        ] {
            assert!(!is_number(bad), "{bad}");
        }
    }

    #[test]
    fn ranges_are_worded_as_aws_words_each_parameter() {
        assert_eq!(
            in_range("DelaySeconds", 901, 0, 900).unwrap_err().message,
            "Value 901 for parameter DelaySeconds is invalid. Reason: DelaySeconds must be >= 0 and <= 900."
        );
        assert_eq!(
            in_range("MaxNumberOfMessages", 11, 1, 10).unwrap_err().message,
            "Value 11 for parameter MaxNumberOfMessages is invalid. Reason: Must be between 1 and 10, if \
             provided."
        );
        assert_eq!(
            in_range("WaitTimeSeconds", 21, 0, 20).unwrap_err().message,
            "Value 21 for parameter WaitTimeSeconds is invalid. Reason: Must be >= 0 and <= 20, if provided."
        );
    }

    #[test]
    fn attribute_name_filters_select_as_aws_does() {
        let selected = |filters: &[&str], name: &str| {
            let filters: Vec<String> = filters.iter().map(|f| f.to_string()).collect();
            message_attribute_selected(&filters, name)
        };
        for all in ["All", "*", ".*"] {
            assert!(selected(&[all], "General"));
        }
        assert!(selected(&["Hel.*"], "Hello"));
        assert!(selected(&["Hel.*"], "Help.Me"));
        assert!(!selected(&["Hel.*"], "General"));
        assert!(selected(&["Hello"], "Hello"));
        assert!(!selected(&["Help"], "Help.Me"));
        assert!(!selected(&["AWS.", "..foo"], "General"));
        assert!(!selected(&[], "General"));
    }

    #[test]
    fn tags_follow_awss_rules() {
        let one = |key: &str, value: &str| {
            tags::given(&BTreeMap::from([(key.to_string(), value.to_string())]))
        };
        assert_eq!(one("team", "a b_.:/=+-@é"), Ok(()));
        assert_eq!(one(&"k".repeat(128), &"v".repeat(256)), Ok(()));
        let key_length = invalid("Tag keys must be between 1 and 128 characters in length.");
        assert_eq!(refusal(one(&"k".repeat(129), "v")), key_length);
        assert_eq!(refusal(one("", "v")), key_length);
        assert_eq!(
            refusal(one("k", &"v".repeat(257))),
            invalid("Tag values must be between 0 and 256 characters in length.")
        );
        for reserved in ["aws:owner", "AWS:owner"] {
            assert_eq!(
                refusal(one(reserved, "v")),
                invalid(&format!(
                    "Tag key {reserved} is invalid. The aws: prefix is reserved for AWS use."
                ))
            );
        }
        let characters = "may contain only letters, digits, white space and _ . : / = + - @.";
        assert_eq!(
            refusal(one("semi;colon", "v")),
            invalid(&format!(
                "Tag key semi;colon is invalid. Tag keys and values {characters}"
            ))
        );
        assert_eq!(
            refusal(one("k", "semi;colon")),
            invalid(&format!(
                "Tag value for key k is invalid. Tag keys and values {characters}"
            ))
        );
        assert_eq!(
            tags::keys(&[]).unwrap_err().message,
            "Tag keys must be between 1 and 128 characters in length."
        );
        assert_eq!(
            tags::too_many("orders").message,
            "Too many tags added for queue orders."
        );
    }

    #[test]
    fn the_byte_check_of_message_contents_agrees_with_the_character_rule_for_every_character() {
        for c in (0..=0x10FFFF).filter_map(char::from_u32) {
            for text in [c.to_string(), format!("ab{c}"), format!("{c}\u{E9}x")] {
                assert_eq!(
                    is_allowed_text(&text),
                    text.chars().all(is_allowed_char),
                    "U+{:04X} in {text:?}",
                    c as u32
                );
            }
        }
    }
}
