//! How records are laid out in redb values: postcard, a compact, stable serde format. Keys are redb tuples
//! `(queue id, seq)` so that one queue's messages are contiguous and in send order.

use serde::de::DeserializeOwned;
use serde::Serialize;
use veil_core::StoreError;

pub fn encode<T: Serialize>(value: &T) -> Result<Vec<u8>, StoreError> {
    postcard::to_stdvec(value)
        .map_err(|e| StoreError::Corrupt(format!("cannot encode a record: {e}")))
}

pub fn decode<T: DeserializeOwned>(bytes: &[u8], what: &str) -> Result<T, StoreError> {
    postcard::from_bytes(bytes)
        .map_err(|e| StoreError::Corrupt(format!("cannot decode {what}: {e}")))
}
