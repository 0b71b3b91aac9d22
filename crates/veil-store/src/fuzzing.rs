//! The store's decoders of bytes read from disk, exposed for the fuzz targets (fuzz/, docs/reliability.md
//! "Fuzzing") and nothing else: not an API, hidden from the docs, no behaviour of its own.

use serde::de::DeserializeOwned;
use serde::Serialize;
use veil_core::{StoreError, StoreOp};

pub use crate::bodies::{Relocated, StoredBody};
pub use crate::wal::SegmentContents;

/// The 8 bytes every log segment starts with.
pub const SEGMENT_MAGIC: &[u8; 8] = crate::wal::MAGIC;

/// Reads a whole log segment from its bytes, as recovery does (records up to a torn tail).
pub fn parse_segment(bytes: &[u8]) -> Result<SegmentContents, StoreError> {
    crate::wal::parse_segment(bytes)
}

/// Appends one log record for `ops`, as the writer does.
pub fn encode_record(ops: &[StoreOp], buf: &mut Vec<u8>) -> Result<(), StoreError> {
    crate::wal::encode_record(ops, buf)
}

/// Appends one relocation record for `entries`, as the writer does when it reclaims a segment.
pub fn encode_relocation(entries: &[Relocated], buf: &mut Vec<u8>) -> Result<(), StoreError> {
    crate::wal::encode_relocation(entries, buf)
}

/// Decodes a redb value (a queue record, counters, a state, a payload...), as the store's loads do.
pub fn decode_value<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, StoreError> {
    crate::codec::decode(bytes, "a fuzzed value")
}

/// Encodes a redb value, as the store's writes do.
pub fn encode_value<T: Serialize>(value: &T) -> Result<Vec<u8>, StoreError> {
    crate::codec::encode(value)
}
