//! Queue tags (TagQueue, CreateQueue's `tags`, UntagQueue's keys). AWS's rules (the SQS developer guide's
//! tag quotas and the tagging pattern `^([\p{L}\p{Z}\p{N}_.:/=+\-@]*)$` AWS reports for tag values): keys of
//! 1-128 characters, values of 0-256, those characters only, no `aws:` key prefix, at most 50 per queue. The
//! wording of the count and length errors is moto's (AWS's is not recorded anywhere we could find).

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::{refusal, ErrorCode};

    fn invalid(message: &str) -> (ErrorCode, String) {
        (ErrorCode::InvalidParameterValue, message.to_string())
    }

    #[test]
    fn tags_follow_awss_rules() {
        let one =
            |key: &str, value: &str| given(&BTreeMap::from([(key.to_string(), value.to_string())]));
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
            keys(&[]).unwrap_err().message,
            "Tag keys must be between 1 and 128 characters in length."
        );
        assert_eq!(
            too_many("orders").message,
            "Too many tags added for queue orders."
        );
    }
}
