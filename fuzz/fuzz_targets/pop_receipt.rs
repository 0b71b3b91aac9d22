//! Azure's pop-receipt decoder (`veil_azure::pop_receipt::decode`: a version mark, a base64url message id, then the
//! engine receipt) on arbitrary text, and the engine receipt inside it through veil-core's decoder.
//!
//! Beyond "no panic": decode→encode is the identity — a text that decodes re-encodes to exactly that text, so
//! the id check and the engine receipt see the same bytes the client sent; and any (id, receipt) Veil issues
//! decodes back to itself.
#![no_main]

use libfuzzer_sys::fuzz_target;
use veil_azure::pop_receipt;
use veil_core::ReceiptKey;

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        if let Some(decoded) = pop_receipt::decode(text) {
            assert_eq!(
                pop_receipt::encode(&decoded.message_id, &decoded.engine_receipt),
                text,
                "a pop receipt has two spellings"
            );
            let _ = ReceiptKey::new([7; 32]).decode(&decoded.engine_receipt);
        }
    }
    if data.len() >= 16 {
        let id: [u8; 16] = data[..16].try_into().expect("16 bytes");
        // Engine receipts are base64url; any such text must survive the pop receipt unchanged.
        let engine: String = data[16..]
            .iter()
            .map(|&b| {
                const ALPHABET: &[u8] =
                    b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
                char::from(ALPHABET[usize::from(b) % ALPHABET.len()])
            })
            .collect();
        if !engine.is_empty() {
            let text = pop_receipt::encode(&id, &engine);
            let decoded = pop_receipt::decode(&text).expect("an issued pop receipt decodes");
            assert_eq!(
                (decoded.message_id, decoded.engine_receipt.as_str()),
                (id, engine.as_str())
            );
        }
    }
});
