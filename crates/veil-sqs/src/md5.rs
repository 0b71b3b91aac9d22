//! The digests SQS clients check: `MD5OfMessageBody` (hex MD5 of the body bytes) and `MD5OfMessageAttributes`
//! (hex MD5 of the SDK-defined encoding of the attributes). A wrong digest makes the SDKs reject the response,
//! so both follow the SDK algorithm byte for byte.

use md5::{Digest, Md5};
use veil_core::{AttributeData, Attributes};

pub use crate::digest_hex::hex;

/// Transport type byte of string-valued attributes (`String`, `Number` and their custom variants).
const TRANSPORT_STRING: u8 = 1;
/// Transport type byte of binary attributes.
const TRANSPORT_BINARY: u8 = 2;

/// Hex MD5 of the body bytes.
pub fn md5_of_body(body: &[u8]) -> String {
    hex(&Md5::digest(body))
}

fn update_length_prefixed(hasher: &mut Md5, bytes: &[u8]) {
    // Attribute parts are bounded far below 4 GiB by the message size limit.
    let length = u32::try_from(bytes.len()).unwrap_or(u32::MAX);
    hasher.update(length.to_be_bytes());
    hasher.update(bytes);
}

/// The SDK algorithm: for each attribute in name order, the length-prefixed name, the length-prefixed data
/// type, one transport byte (1 string, 2 binary) and the length-prefixed value; MD5 of it all, in hex.
/// `None` when there are no attributes (SQS then omits the field).
pub fn md5_of_attributes(attributes: &Attributes) -> Option<String> {
    if attributes.is_empty() {
        return None;
    }
    let mut hasher = Md5::new();
    // `Attributes` is a BTreeMap: iteration is already in name order.
    for (name, value) in attributes {
        update_length_prefixed(&mut hasher, name.as_bytes());
        update_length_prefixed(&mut hasher, value.data_type.as_bytes());
        match &value.value {
            AttributeData::String(text) => {
                hasher.update([TRANSPORT_STRING]);
                update_length_prefixed(&mut hasher, text.as_bytes());
            }
            AttributeData::Binary(bytes) => {
                hasher.update([TRANSPORT_BINARY]);
                update_length_prefixed(&mut hasher, bytes);
            }
        }
    }
    Some(hex(&hasher.finalize()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use veil_core::AttributeValue;

    fn attribute(data_type: &str, value: AttributeData) -> AttributeValue {
        AttributeValue {
            data_type: data_type.to_string(),
            value,
        }
    }

    #[test]
    fn body_digest_is_hex_md5_of_the_bytes() {
        assert_eq!(md5_of_body(b""), "d41d8cd98f00b204e9800998ecf8427e");
        assert_eq!(md5_of_body(b"hello"), "5d41402abc4b2a76b9719d911017c592");
    }

    #[test]
    fn no_attributes_have_no_digest() {
        assert_eq!(md5_of_attributes(&Attributes::new()), None);
    }

    /// Vectors computed with an independent Python implementation of the SDK algorithm (struct.pack('>I')).
    #[test]
    fn attribute_digest_matches_the_sdk_algorithm() {
        let mut attributes = Attributes::new();
        attributes.insert(
            "city".into(),
            attribute("String", AttributeData::String("Any City".into())),
        );
        assert_eq!(
            md5_of_attributes(&attributes).as_deref(),
            Some("a6ffb68ea212e1f864e24e589a1bda87")
        );
        attributes.insert(
            "blob".into(),
            attribute("Binary", AttributeData::Binary(vec![0, 1, 2].into())),
        );
        attributes.insert(
            "count".into(),
            attribute("Number.int", AttributeData::String("42".into())),
        );
        assert_eq!(
            md5_of_attributes(&attributes).as_deref(),
            Some("ed9a460688bab3dd1fcf74a084319b5b")
        );
    }
}
