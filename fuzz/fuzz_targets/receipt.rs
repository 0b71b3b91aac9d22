//! veil-core's receipt decoder (`ReceiptKey::decode`: SQS receipt handles, the engine part of Azure pop
//! receipts, KubeMQ transaction tokens) on arbitrary text, and its encoder on arbitrary fields.
//!
//! Beyond "no panic": a receipt is canonical — any text that decodes re-encodes to exactly that text (no two
//! spellings of one receipt, so a receipt cannot be replayed under another name); arbitrary fields encode and
//! decode back to themselves; a receipt of another secret, or any one-character change of a valid receipt,
//! is refused.
#![no_main]

use libfuzzer_sys::fuzz_target;
use veil_core::receipt::Receipt;
use veil_core::ReceiptKey;

fuzz_target!(|data: &[u8]| {
    let key = ReceiptKey::new([7; 32]);
    if let Ok(text) = std::str::from_utf8(data) {
        if let Some(receipt) = key.decode(text) {
            assert_eq!(key.encode(&receipt), text, "a receipt has two spellings");
        }
    }
    if data.len() < 28 {
        return;
    }
    let field = |at: usize| u64::from_be_bytes(data[at..at + 8].try_into().expect("8 bytes"));
    let receipt = Receipt {
        queue: field(0),
        seq: field(8),
        generation: u32::from_be_bytes(data[16..20].try_into().expect("4 bytes")),
        issued_at: field(20),
    };
    let text = key.encode(&receipt);
    assert_eq!(
        key.decode(&text),
        Some(receipt),
        "a receipt does not round-trip"
    );
    assert_eq!(
        ReceiptKey::new([8; 32]).decode(&text),
        None,
        "another secret's receipt is accepted"
    );
    // One character changed, wherever the fuzzer says: a different receipt text is never accepted as this one
    // (it may only be refused, since the MAC covers every field).
    let at = data.get(28).map_or(0, |&b| usize::from(b) % text.len());
    let mut changed = text.clone().into_bytes();
    changed[at] = if changed[at] == b'A' { b'B' } else { b'A' };
    let changed = String::from_utf8(changed).expect("ASCII");
    assert_eq!(key.decode(&changed), None, "a changed receipt is accepted");
});
