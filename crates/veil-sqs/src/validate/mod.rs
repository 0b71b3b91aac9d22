//! SQS's input rules: queue names, batch entry ids, body characters, numeric ranges and message sizes here;
//! message attributes in message_attributes.rs, queue tags in tags.rs. Each answers with the error code and
//! wording SQS uses; limits come from this crate's `limits`.

mod message_attributes;
pub mod tags;

use crate::error::{ErrorCode, SqsError, SqsResult};
use crate::fifo;
use crate::limits;

pub(crate) use self::message_attributes::attribute_errors;
pub use self::message_attributes::{
    attribute_size, message_attribute_selected, message_attributes, system_attributes, TRACE_HEADER,
};

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
        && name.chars().count() <= limits::QUEUE_NAME_CHARS_MAX;
    if valid {
        return Ok(());
    }
    let max = limits::QUEUE_NAME_CHARS_MAX;
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
    if (1..=limits::FIFO_ID_CHARS_MAX).contains(&length)
        && value.chars().all(|c| c.is_ascii_graphic())
    {
        return Ok(());
    }
    Err(SqsError::invalid_value(
        parameter,
        value,
        &format!(
            "{parameter} can only include alphanumeric and punctuation characters. 1 to {} in length.",
            limits::FIFO_ID_CHARS_MAX
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
    if count > limits::BATCH_ENTRIES_MAX {
        return Err(SqsError::new(
            ErrorCode::TooManyEntriesInBatchRequest,
            format!(
                "Maximum number of entries per request are {}. You have sent {count}.",
                limits::BATCH_ENTRIES_MAX
            ),
        ));
    }
    // At most BATCH_ENTRIES_MAX short ids: comparing each with those before it costs less than hashing them.
    let mut seen: [&str; limits::BATCH_ENTRIES_MAX] = [""; limits::BATCH_ENTRIES_MAX];
    for (position, id) in ids.enumerate() {
        let length = id.chars().count();
        if length == 0 || length > limits::BATCH_ENTRY_ID_CHARS_MAX || !id.chars().all(is_name_char)
        {
            return Err(SqsError::new(
                ErrorCode::InvalidBatchEntryId,
                format!(
                    "A batch entry id can only contain alphanumeric characters, hyphens and underscores. \
                     It can be at most {} letters long.",
                    limits::BATCH_ENTRY_ID_CHARS_MAX
                ),
            ));
        }
        if seen[..position].contains(&id) {
            return Err(SqsError::new(
                ErrorCode::BatchEntryIdsNotDistinct,
                format!("Id {id} repeated."),
            ));
        }
        seen[position] = id;
    }
    Ok(())
}

/// Characters SQS accepts in bodies and string attribute values: XML 1.0's (#x9 #xA #xD #x20–#xD7FF
/// #xE000–#xFFFD #x10000–#x10FFFF), the rule the Query protocol's answers and Azure's share (veil-xml).
pub use veil_xml::is_xml_char as is_allowed_char;

pub fn message_contents(text: &str) -> SqsResult<()> {
    if veil_xml::is_xml_text(text) {
        Ok(())
    } else {
        Err(SqsError::new(
            ErrorCode::InvalidMessageContents,
            "Invalid characters found. Valid characters are #x9 | #xA | #xD | #x20 to #xD7FF | #xE000 to \
             #xFFFD | #x10000 to #x10FFFF",
        ))
    }
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
}
