//! Azure pop receipts. Delete and Update name the message twice — by id in the path and by pop receipt in the
//! query — and Azure answers 404 MessageNotFound when the two do not belong together. The engine's receipt
//! names a message by its position, not its id, so a pop receipt is a version mark, then the message id (16
//! bytes, base64url), then the engine receipt: the id check is a comparison of bytes, with no store read, and
//! the engine receipt keeps its own authentication (docs/semantics.md §6). Every part is URL-safe, so the
//! receipt survives query strings without any escaping.
//!
//! The mark is there for the first character: a random id's base64url opens with `-` once in 64, and a
//! value opening with `-` is an option to the az CLI's argument parser (`az storage message update
//! --pop-receipt -GWD…` fails with "expected one argument"). Receipts without the mark (Veil before
//! it) are refused as malformed; their messages come back when their visibility timeout ends.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;

/// Opens every pop receipt: a letter, so no receipt opens with `-`, and a format version.
const MARK: &str = "v1";
/// Length of the base64url form of a 16-byte message id.
const MESSAGE_ID_CHARS: usize = 22;

/// A decoded pop receipt.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PopReceipt {
    pub message_id: [u8; 16],
    /// The engine receipt, passed to the engine as is.
    pub engine_receipt: String,
}

pub fn encode(message_id: &[u8; 16], engine_receipt: &str) -> String {
    let mut out = String::with_capacity(MARK.len() + MESSAGE_ID_CHARS + engine_receipt.len());
    out.push_str(MARK);
    URL_SAFE_NO_PAD.encode_string(message_id, &mut out);
    out.push_str(engine_receipt);
    out
}

/// `None` when the text cannot be a pop receipt Veil issued (Azure: 400 InvalidQueryParameterValue,
/// "Invalid pop receipt format"). A well-formed receipt may still be stale or forged; the engine decides.
pub fn decode(text: &str) -> Option<PopReceipt> {
    let text = text.strip_prefix(MARK)?;
    if text.len() <= MESSAGE_ID_CHARS || !text.is_char_boundary(MESSAGE_ID_CHARS) {
        return None;
    }
    let (id, engine_receipt) = text.split_at(MESSAGE_ID_CHARS);
    let bytes = URL_SAFE_NO_PAD.decode(id).ok()?;
    let message_id: [u8; 16] = bytes.try_into().ok()?;
    if !engine_receipt
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    {
        return None;
    }
    Some(PopReceipt {
        message_id,
        engine_receipt: engine_receipt.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pop_receipt_carries_its_message_id_and_the_engine_receipt() {
        let id = [7u8; 16];
        let text = encode(&id, "ENGINE_receipt-1");
        assert_eq!(
            decode(&text),
            Some(PopReceipt {
                message_id: id,
                engine_receipt: "ENGINE_receipt-1".into()
            })
        );
    }

    #[test]
    fn text_that_cannot_be_a_pop_receipt_is_malformed() {
        assert_eq!(decode(""), None);
        assert_eq!(decode("short"), None);
        assert_eq!(
            decode("AgAAAAMAAAAAAAAAYUMWAIg 1gE="),
            None,
            "an Azure receipt with a space"
        );
        let id = URL_SAFE_NO_PAD.encode([1u8; 16]);
        assert_eq!(
            decode(&format!("{MARK}{id}")),
            None,
            "an id with no engine receipt"
        );
        assert_eq!(decode(&format!("{MARK}{id}abc+/=")), None, "not URL-safe");
        assert_eq!(decode(&format!("{id}abc")), None, "no version mark");
    }

    #[test]
    fn no_pop_receipt_opens_with_a_dash() {
        // 0xF8 encodes to a leading `-` in base64url: the id a CLI argument parser would take for an option.
        let id = [0xF8u8; 16];
        assert!(URL_SAFE_NO_PAD.encode(id).starts_with('-'));
        let text = encode(&id, "-engine");
        assert!(
            text.starts_with(|c: char| c.is_ascii_alphanumeric()),
            "{text}"
        );
        assert_eq!(decode(&text).map(|r| r.message_id), Some(id));
    }
}
