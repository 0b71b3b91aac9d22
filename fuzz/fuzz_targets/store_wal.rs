//! The write-ahead log's reader (`veil_store::fuzzing::parse_segment`, what recovery runs on every segment
//! after a crash: the magic, then `length | crc | postcard Vec<StoreOp>` records, or relocation records of
//! `Vec<Relocated>` flagged in the length, up to a torn tail) on
//! arbitrary bytes, with the magic in front half of the time so the records are reached.
//!
//! Beyond "no panic": whatever a segment yields re-encodes (`encode_record`, the writer's encoder) into a
//! segment that reads back to the same records with no torn tail; the torn tail never counts more bytes than
//! the segment has; a segment cut anywhere reads as a prefix of its records (a crash mid-append loses only the
//! record being written, never an earlier one).
#![no_main]

use libfuzzer_sys::fuzz_target;
use veil_store::fuzzing::{encode_record, encode_relocation, parse_segment, SEGMENT_MAGIC};

fuzz_target!(|data: &[u8]| {
    let Some((&switch, rest)) = data.split_first() else {
        return;
    };
    let bytes = if switch & 1 == 1 {
        [SEGMENT_MAGIC.as_slice(), rest].concat()
    } else {
        rest.to_vec()
    };
    let Ok(contents) = parse_segment(&bytes) else {
        return;
    };
    assert!(contents.torn_bytes <= bytes.len() as u64);

    let mut rewritten = SEGMENT_MAGIC.to_vec();
    for ops in &contents.records {
        encode_record(ops, &mut rewritten).expect("decoded operations encode");
    }
    for (_, entries) in &contents.relocations {
        encode_relocation(entries, &mut rewritten).expect("decoded relocations encode");
    }
    let again = parse_segment(&rewritten).expect("a rewritten segment reads");
    assert_eq!(again.records, contents.records, "records do not round-trip");
    let entries = |c: &veil_store::fuzzing::SegmentContents| -> Vec<_> {
        c.relocations.iter().map(|(_, e)| e.clone()).collect()
    };
    assert_eq!(entries(&again), entries(&contents), "relocations do not round-trip");
    assert_eq!(again.torn_bytes, 0);

    // A crash cut the rewritten segment at some byte: what is left reads as a prefix of the records.
    let cut = usize::from(switch >> 1) * rewritten.len() / 128;
    if let Ok(prefix) = parse_segment(&rewritten[..cut.min(rewritten.len())]) {
        assert!(prefix.records.len() <= contents.records.len());
        assert_eq!(prefix.records[..], contents.records[..prefix.records.len()]);
    } else {
        panic!("a cut segment is reported corrupt rather than torn");
    }
});
