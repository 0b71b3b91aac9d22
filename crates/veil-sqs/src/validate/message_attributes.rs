//! SQS's message-attribute rules: names, data types and values (String, Number, Binary, optionally `.custom`),
//! the bytes they count toward the message size, ReceiveMessage's name filters, and the one system attribute
//! a sender may set. Each refusal answers with the error code and wording SQS uses.

use std::collections::BTreeMap;

use veil_core::{AttributeData, AttributeValue, Attributes};

use super::is_allowed_char;
use crate::api::MessageAttributeInput;
use crate::error::{ErrorCode, SqsError, SqsResult};
use crate::limits;

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
    if name.chars().count() > limits::MESSAGE_ATTRIBUTE_NAME_CHARS_MAX {
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
    // A custom label is echoed in every answer that carries the attribute (XML among them): a control
    // character would make those answers unreadable to every consumer (docs/security.md "Identifiers").
    if data_type.chars().any(char::is_control) {
        return Err(attribute_errors::bad_type(name));
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
    if inputs.len() > limits::MESSAGE_ATTRIBUTES_MAX {
        return Err(SqsError::invalid_parameters(format!(
            "Number of message attributes [{}] exceeds the allowed maximum [{}].",
            inputs.len(),
            limits::MESSAGE_ATTRIBUTES_MAX
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::refusal;

    fn invalid(message: &str) -> (ErrorCode, String) {
        (ErrorCode::InvalidParameterValue, message.to_string())
    }

    const RESERVED_NAME: &str = "You can't use message attribute names beginning with 'AWS.' or 'Amazon.'. \
        These strings are reserved for internal use. Additionally, they cannot start or end with '.'.";

    #[test]
    fn a_custom_type_label_with_a_control_character_is_refused() {
        for data_type in ["String.\0", "Number.a\u{1}", "Binary.x\n"] {
            let attributes = BTreeMap::from([("a".to_string(), string_attribute(data_type, "1"))]);
            assert!(message_attributes(&attributes).is_err(), "{data_type:?}");
        }
    }

    fn string_attribute(data_type: &str, value: &str) -> MessageAttributeInput {
        MessageAttributeInput {
            data_type: Some(data_type.into()),
            string_value: Some(value.into()),
            ..Default::default()
        }
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
}
