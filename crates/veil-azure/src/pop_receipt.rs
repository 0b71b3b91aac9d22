//! Azure pop receipts. Delete and Update name the message twice — by id in the path and by pop receipt in the
//! query — and Azure answers 404 MessageNotFound when the two do not belong together. The engine's receipt
//! names a message by its position, not its id, so a pop receipt is the message id (16 bytes, base64url)
//! followed by the engine receipt: the id check is a comparison of bytes, with no store read, and the engine
//! receipt keeps its own authentication (docs/semantics.md §6). Both parts are URL-safe, so the receipt survives query
//! strings without any escaping.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;

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
    let mut out = URL_SAFE_NO_PAD.encode(message_id);
    out.push_str(engine_receipt);
    out
}

/// `None` when the text cannot be a pop receipt Veil issued (Azure: 400 InvalidQueryParameterValue,
/// "Invalid pop receipt format"). A well-formed receipt may still be stale or forged; the engine decides.
pub fn decode(text: &str) -> Option<PopReceipt> {
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
        assert_eq!(decode(&id), None, "an id with no engine receipt");
        assert_eq!(decode(&format!("{id}abc+/=")), None, "not URL-safe");
    }
}
