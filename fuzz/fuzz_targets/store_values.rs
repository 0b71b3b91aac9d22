//! The store's value decoder (`veil_store::fuzzing::decode_value`: postcard, as redb holds queue records,
//! counters, message states, payloads, redrive rules, deduplication entries, delivery histories, move
//! tasks, and format 7's stored body locations and relocated survivors) on arbitrary bytes; the first byte picks the record type.
//!
//! Beyond "no panic": decode→encode→decode is the identity on the value — what a load reads is what a
//! checkpoint would write back — and a decode error is the store's `Corrupt`, never another kind.
#![no_main]

use libfuzzer_sys::fuzz_target;
use serde::de::DeserializeOwned;
use serde::Serialize;
use veil_core::{
    Counters, DedupEntry, DeliveryHistory, MessageRedrivePolicy, MessageState, MoveTaskRecord,
    Payload, QueueRecord, StoreError, StoreOp,
};
use veil_store::fuzzing::{decode_value, encode_value, Relocated, StoredBody};

fn round_trip<T: Serialize + DeserializeOwned + PartialEq + std::fmt::Debug>(bytes: &[u8]) {
    match decode_value::<T>(bytes) {
        Ok(value) => {
            let encoded = encode_value(&value).expect("a decoded value encodes");
            let again: T = decode_value(&encoded).expect("an encoded value decodes");
            assert_eq!(again, value, "a value does not round-trip");
        }
        Err(StoreError::Corrupt(_)) => {}
        Err(other) => panic!("a bad value is reported as {other:?}, not Corrupt"),
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&kind, bytes)) = data.split_first() else {
        return;
    };
    match kind % 12 {
        0 => round_trip::<QueueRecord>(bytes),
        1 => round_trip::<Counters>(bytes),
        2 => round_trip::<MessageState>(bytes),
        3 => round_trip::<Payload>(bytes),
        4 => round_trip::<MessageRedrivePolicy>(bytes),
        5 => round_trip::<DedupEntry>(bytes),
        6 => round_trip::<DeliveryHistory>(bytes),
        7 => round_trip::<MoveTaskRecord>(bytes),
        8 => round_trip::<StoreOp>(bytes),
        9 => round_trip::<StoredBody>(bytes),
        10 => round_trip::<Vec<Relocated>>(bytes),
        _ => round_trip::<Vec<StoreOp>>(bytes),
    }
});
