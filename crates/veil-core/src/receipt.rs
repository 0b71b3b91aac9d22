//! Receipts (SQS receipt handles, Azure pop receipts, KubeMQ transaction tokens): opaque strings that name one
//! delivery of one message and are authenticated with a server secret, so that holding a message id is not
//! enough to delete or extend a message (docs/semantics.md §6), and that stay valid across restarts because the secret is
//! kept in the data directory.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use hmac::{Hmac, Mac};
use sha2::Sha256;
use subtle::ConstantTimeEq;

use crate::clock::Millis;
use crate::model::{QueueId, Seq};

/// Length of the server secret that authenticates receipts.
pub const SECRET_BYTES: usize = 32;
const FIELDS_BYTES: usize = 8 + 8 + 4 + 8;
const MAC_BYTES: usize = 16;

/// The decoded content of a receipt.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Receipt {
    pub queue: QueueId,
    pub seq: Seq,
    /// The message's generation when the receipt was issued; current while it still matches.
    pub generation: u32,
    /// When the delivery happened; the 12 h cap of change-visibility counts from here.
    pub issued_at: Millis,
}

/// Issues and checks receipts with one secret.
#[derive(Clone)]
pub struct ReceiptKey {
    /// HMAC-SHA256 already keyed with the secret: each receipt clones it instead of hashing the key's pads
    /// again (two of the four compressions a receipt costs).
    keyed: Hmac<Sha256>,
}

impl std::fmt::Debug for ReceiptKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ReceiptKey(..)")
    }
}

impl ReceiptKey {
    pub fn new(secret: [u8; SECRET_BYTES]) -> Self {
        let keyed =
            <Hmac<Sha256> as Mac>::new_from_slice(&secret).expect("HMAC accepts any key length");
        Self { keyed }
    }

    fn mac(&self, fields: &[u8]) -> [u8; MAC_BYTES] {
        let mut mac = self.keyed.clone();
        mac.update(fields);
        let full = mac.finalize().into_bytes();
        let mut out = [0u8; MAC_BYTES];
        out.copy_from_slice(&full[..MAC_BYTES]);
        out
    }

    /// The receipt a send returns for its message (Azure's pop receipt of a put): its first generation,
    /// issued when it was sent. One rule for the owner's engine and for a cluster node answering in its stead.
    pub fn of_send(&self, sent: &crate::model::SentMessage) -> String {
        self.encode(&Receipt {
            queue: sent.queue,
            seq: sent.seq,
            generation: 0,
            issued_at: sent.sent_at,
        })
    }

    pub fn encode(&self, receipt: &Receipt) -> String {
        let mut bytes = Vec::with_capacity(FIELDS_BYTES + MAC_BYTES);
        bytes.extend_from_slice(&receipt.queue.to_be_bytes());
        bytes.extend_from_slice(&receipt.seq.to_be_bytes());
        bytes.extend_from_slice(&receipt.generation.to_be_bytes());
        bytes.extend_from_slice(&receipt.issued_at.to_be_bytes());
        let mac = self.mac(&bytes);
        bytes.extend_from_slice(&mac);
        URL_SAFE_NO_PAD.encode(bytes)
    }

    /// `None` for anything Veil did not issue with this secret.
    pub fn decode(&self, text: &str) -> Option<Receipt> {
        let bytes = URL_SAFE_NO_PAD.decode(text.as_bytes()).ok()?;
        if bytes.len() != FIELDS_BYTES + MAC_BYTES {
            return None;
        }
        let (fields, mac) = bytes.split_at(FIELDS_BYTES);
        let expected = self.mac(fields);
        // Constant-time comparison: the MAC must not leak through timing.
        if !bool::from(expected.as_slice().ct_eq(mac)) {
            return None;
        }
        Some(Receipt {
            queue: u64::from_be_bytes(fields[0..8].try_into().ok()?),
            seq: u64::from_be_bytes(fields[8..16].try_into().ok()?),
            generation: u32::from_be_bytes(fields[16..20].try_into().ok()?),
            issued_at: u64::from_be_bytes(fields[20..28].try_into().ok()?),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Receipt {
        Receipt {
            queue: 7,
            seq: 42,
            generation: 3,
            issued_at: 1_700_000_000_000,
        }
    }

    #[test]
    fn receipt_round_trips() {
        let key = ReceiptKey::new([9; SECRET_BYTES]);
        assert_eq!(key.decode(&key.encode(&sample())), Some(sample()));
    }

    #[test]
    fn receipt_from_another_secret_is_rejected() {
        let ours = ReceiptKey::new([1; SECRET_BYTES]);
        let theirs = ReceiptKey::new([2; SECRET_BYTES]);
        assert_eq!(ours.decode(&theirs.encode(&sample())), None);
    }

    #[test]
    fn tampered_receipt_is_rejected() {
        let key = ReceiptKey::new([9; SECRET_BYTES]);
        let text = key.encode(&sample());
        let mut bytes = URL_SAFE_NO_PAD.decode(&text).unwrap();
        bytes[15] ^= 1; // seq 42 -> 43: a guess at a neighbouring message
        assert_eq!(key.decode(&URL_SAFE_NO_PAD.encode(bytes)), None);
        assert_eq!(key.decode("not a receipt"), None);
        assert_eq!(key.decode(""), None);
    }
}
