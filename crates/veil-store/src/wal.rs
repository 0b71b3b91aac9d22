//! The write-ahead log's files: where each commit is first made durable, by one sequential append and one
//! fdatasync (docs/decisions/0004-write-ahead-log.md).
//!
//! The log is a series of segment files `wal-<generation>.log` in the data directory, generations counting up
//! from 1. A segment is an 8-byte magic (`VEILWAL1`) followed by records, one per submission:
//!
//! ```text
//! length: u32 little-endian   bytes of `ops` (never 0); the top bit set marks a relocation record
//! crc:    u32 little-endian   CRC-32 (IEEE) of `ops`
//! ops:    postcard-encoded Vec<StoreOp>, or for a relocation record Vec<Relocated> (bodies.rs)
//! ```
//!
//! A segment outlives its checkpoint while it holds the body of a stored message (docs/decisions/
//! 0013-bodies-written-once.md): the checkpoint renames it `body-<generation>.log` and redb points into it.
//! `wal-` files are the log proper (what start-up replays); `body-` files are only ever read at a record's
//! offset, and removed once no message's body is in them.
//!
//! A segment's space is allocated when it is created (`posix_fallocate`, reading as zeros), so that a record
//! overwrites allocated blocks and the file's size does not change with each append: the sync of a commit
//! then has less file-system metadata to write (measured in docs/decisions/0004-write-ahead-log.md). Zeros
//! after the last record are that unused space.
//!
//! A crash can leave the last segment with a torn tail: a partial header, a partial body, or bytes whose CRC
//! does not match. Reading stops at the first such record and reports how many bytes it cut; only the newest
//! segment may have one, since a segment is complete and synced before the next one starts. A tear is only
//! ever the end of what was written: a damaged record with a valid record anywhere after it is corruption,
//! and reading fails rather than drop the acknowledged records that follow.

use std::path::{Path, PathBuf};

use veil_core::{StoreError, StoreOp};

use crate::bodies::Relocated;
use crate::io::{StorageFile, StorageIo};
use crate::limits::WAL_RECORD_BYTES_MAX;

pub(crate) const MAGIC: &[u8; 8] = b"VEILWAL1";
pub(crate) const HEADER_BYTES: usize = 8;
/// The bit of a record's length word that marks a relocation record: lengths stay below
/// `WAL_RECORD_BYTES_MAX` (2^28), so the top bits are free, and a format-6 record never has it. A relocation
/// record's checksum also covers [`RELOCATION_CRC_PREFIX`], so that a flipped flag fails the checksum like
/// any other damage.
const RELOCATION_FLAG: u32 = 1 << 31;
const RELOCATION_CRC_PREFIX: &[u8] = b"relocation";

/// A record's checksum: CRC-32 of its body, with the relocation prefix in front for a relocation record.
fn record_crc(body: &[u8], relocation: bool) -> u32 {
    let mut hasher = crc32fast::Hasher::new();
    if relocation {
        hasher.update(RELOCATION_CRC_PREFIX);
    }
    hasher.update(body);
    hasher.finalize()
}
/// The smallest unit a disk writes whole (a 512-byte sector): a part of an unsynced append that never reached
/// the disk is at least one sector of zeros, which is how recovery tells such a hole from a flipped bit.
const LOST_SECTOR_BYTES: usize = 512;

/// The file of one segment.
pub fn segment_path(dir: &Path, generation: u64) -> PathBuf {
    dir.join(format!("wal-{generation:020}.log"))
}

/// The file of a checkpointed segment kept for the bodies it holds.
pub fn body_segment_path(dir: &Path, generation: u64) -> PathBuf {
    dir.join(format!("body-{generation:020}.log"))
}

/// Every segment of the log in `dir` (`wal-` files), oldest first.
pub fn list_segments(io: &dyn StorageIo, dir: &Path) -> Result<Vec<(u64, PathBuf)>, StoreError> {
    list_files(io, dir, "wal-")
}

/// Every kept body segment in `dir` (`body-` files), oldest first.
pub fn list_body_segments(
    io: &dyn StorageIo,
    dir: &Path,
) -> Result<Vec<(u64, PathBuf)>, StoreError> {
    list_files(io, dir, "body-")
}

fn list_files(
    io: &dyn StorageIo,
    dir: &Path,
    prefix: &str,
) -> Result<Vec<(u64, PathBuf)>, StoreError> {
    let names = io
        .list_dir(dir)
        .map_err(|e| StoreError::Io(format!("listing {}: {e}", dir.display())))?;
    let mut segments = Vec::new();
    for name in names {
        let generation = name
            .strip_prefix(prefix)
            .and_then(|n| n.strip_suffix(".log"))
            .and_then(|digits| digits.parse::<u64>().ok());
        if let Some(generation) = generation {
            segments.push((generation, dir.join(name)));
        }
    }
    segments.sort_unstable_by_key(|(generation, _)| *generation);
    Ok(segments)
}

/// Appends one record for `ops` to `buf`.
pub fn encode_record(ops: &[StoreOp], buf: &mut Vec<u8>) -> Result<(), StoreError> {
    encode_any(ops, 0, buf)
}

/// Appends one relocation record (survivors copied out of a reclaimed segment) to `buf`.
pub fn encode_relocation(entries: &[Relocated], buf: &mut Vec<u8>) -> Result<(), StoreError> {
    encode_any(entries, RELOCATION_FLAG, buf)
}

fn encode_any<T: serde::Serialize + ?Sized>(
    value: &T,
    flag: u32,
    buf: &mut Vec<u8>,
) -> Result<(), StoreError> {
    let start = buf.len();
    buf.extend_from_slice(&[0; HEADER_BYTES]);
    let encoded = postcard::to_extend(value, std::mem::take(buf))
        .map_err(|e| StoreError::Corrupt(format!("cannot encode a log record: {e}")))?;
    *buf = encoded;
    let body = &buf[start + HEADER_BYTES..];
    let length = u32::try_from(body.len())
        .ok()
        .filter(|&length| length <= WAL_RECORD_BYTES_MAX)
        .ok_or_else(|| {
            StoreError::Io(format!(
                "a submission of {} bytes is larger than a log record may be",
                body.len()
            ))
        })?;
    let crc = record_crc(body, flag != 0);
    buf[start..start + 4].copy_from_slice(&(length | flag).to_le_bytes());
    buf[start + 4..start + HEADER_BYTES].copy_from_slice(&crc.to_le_bytes());
    Ok(())
}

/// One record's contents.
#[derive(Debug, Clone, PartialEq)]
pub enum Record {
    Ops(Vec<StoreOp>),
    Relocation(Vec<Relocated>),
}

/// Decodes a record body whose kind its header's flag gave.
fn decode_record(body: &[u8], relocation: bool) -> Result<Record, postcard::Error> {
    if relocation {
        postcard::from_bytes(body).map(Record::Relocation)
    } else {
        postcard::from_bytes(body).map(Record::Ops)
    }
}

/// Reads the record at `offset` of a kept segment, checking its checksum: how a body is read back once its
/// message was checkpointed. A record that fails its checksum or does not decode is corruption.
pub fn read_record_at(file: &dyn StorageFile, offset: u64) -> Result<Record, StoreError> {
    let mut header = [0u8; HEADER_BYTES];
    file.read_at(&mut header, offset)
        .map_err(|e| StoreError::Io(format!("reading the log record at byte {offset}: {e}")))?;
    let word = u32::from_le_bytes([header[0], header[1], header[2], header[3]]);
    let crc = u32::from_le_bytes([header[4], header[5], header[6], header[7]]);
    let length = word & !RELOCATION_FLAG;
    if length == 0 || length > WAL_RECORD_BYTES_MAX {
        return Err(StoreError::Corrupt(format!(
            "the log record at byte {offset} declares {length} bytes"
        )));
    }
    let mut body = vec![0u8; length as usize];
    file.read_at(&mut body, offset + HEADER_BYTES as u64)
        .map_err(|e| StoreError::Io(format!("reading the log record at byte {offset}: {e}")))?;
    let relocation = word & RELOCATION_FLAG != 0;
    if record_crc(&body, relocation) != crc {
        return Err(StoreError::Corrupt(format!(
            "the log record at byte {offset} fails its checksum"
        )));
    }
    decode_record(&body, relocation).map_err(|e| {
        StoreError::Corrupt(format!(
            "the log record at byte {offset} does not decode: {e}"
        ))
    })
}

/// The segment being appended to.
pub struct Segment {
    file: Box<dyn StorageFile>,
    pub generation: u64,
    /// Bytes in the file, magic included: the writer rotates on it.
    pub bytes: u64,
}

impl Segment {
    /// Creates the segment file with `allocate_bytes` allocated and makes its existence durable (the file, its
    /// size and its directory entry), so that a record synced into it later is found after a crash.
    pub fn create(
        storage: &dyn StorageIo,
        dir: &Path,
        generation: u64,
        allocate_bytes: u64,
    ) -> Result<Self, StoreError> {
        let path = segment_path(dir, generation);
        let io = |e: std::io::Error| StoreError::Io(format!("creating {}: {e}", path.display()));
        let file = storage.create_new(&path).map_err(io)?;
        file.write_at(MAGIC, 0).map_err(io)?;
        file.allocate(allocate_bytes).map_err(io)?;
        file.sync_all().map_err(io)?;
        sync_dir(storage, dir)?;
        Ok(Self {
            file,
            generation,
            bytes: MAGIC.len() as u64,
        })
    }

    /// Appends whole records after the last one (one write, so the kernel sees one sequential extent).
    pub fn append(&mut self, records: &[u8]) -> Result<(), StoreError> {
        self.file
            .write_at(records, self.bytes)
            .map_err(|e| StoreError::Io(format!("appending to the log: {e}")))?;
        self.bytes += records.len() as u64;
        Ok(())
    }

    /// Writes `bytes` after the last record without counting them as appended: a torn write that a fault
    /// plan injects (`faults.rs`).
    pub fn write_torn(&self, bytes: &[u8]) -> Result<(), StoreError> {
        self.file
            .write_at(bytes, self.bytes)
            .map_err(|e| StoreError::Io(format!("appending to the log: {e}")))
    }

    /// Makes every appended record durable: fdatasync, the only sync of a group commit.
    pub fn sync(&self) -> Result<(), StoreError> {
        self.file
            .sync_data()
            .map_err(|e| StoreError::Io(format!("syncing the log: {e}")))
    }
}

/// Makes a created or removed directory entry durable.
pub fn sync_dir(io: &dyn StorageIo, dir: &Path) -> Result<(), StoreError> {
    io.sync_dir(dir)
        .map_err(|e| StoreError::Io(format!("syncing directory {}: {e}", dir.display())))
}

/// What one segment holds.
#[derive(Debug, Default)]
pub struct SegmentContents {
    /// Each record's operations, in the order they were logged.
    pub records: Vec<Vec<StoreOp>>,
    /// The byte offset of each of `records` in the segment: where a body logged in it is found again.
    pub offsets: Vec<u64>,
    /// The relocation records, with their offsets, in the order they were logged.
    pub relocations: Vec<(u64, Vec<Relocated>)>,
    /// Bytes after the last whole record up to the last non-zero byte: a torn tail, or 0. Zeros beyond are
    /// allocated space never written.
    pub torn_bytes: u64,
    /// Where the last whole record ends (the magic's end when there is none).
    pub end: u64,
}

/// Reads a segment, stopping at a torn tail. A record whose checksum matches but whose contents do not
/// decode, or a damaged record with a valid one after it, is corruption, not a tear, and is an error.
///
/// A read that ends in a tear or corruption is made once more before it is believed: a bit flipped in the
/// read, not on the disk, is neither (docs/decisions/0004-write-ahead-log.md, "Recovery"). Every record
/// either read returns passed its checksum, so the read with more records is the truer one; a read that
/// finds corruption stops recovery unless the other read verifies to its end.
pub fn read_segment(io: &dyn StorageIo, path: &Path) -> Result<SegmentContents, StoreError> {
    let first = read_and_parse(io, path)?;
    if matches!(&first, Ok(contents) if contents.torn_bytes == 0) {
        return first;
    }
    let second = read_and_parse(io, path)?;
    match (first, second) {
        (Ok(a), Ok(b)) if (a.record_count(), b.torn_bytes) > (b.record_count(), a.torn_bytes) => {
            Ok(a)
        }
        (Ok(_), Ok(b)) => Ok(b),
        (Err(_), Ok(b)) if b.torn_bytes == 0 => Ok(b),
        (Ok(a), Err(_)) if a.torn_bytes == 0 => Ok(a),
        (Err(why), _) | (_, Err(why)) => Err(why),
    }
}

impl SegmentContents {
    /// Records of both kinds.
    pub fn record_count(&self) -> usize {
        self.records.len() + self.relocations.len()
    }
}

/// One read of a segment: the outer error is the read's (I/O), the inner one what the bytes read say.
fn read_and_parse(
    io: &dyn StorageIo,
    path: &Path,
) -> Result<Result<SegmentContents, StoreError>, StoreError> {
    let bytes = io
        .read(path)
        .map_err(|e| StoreError::Io(format!("reading {}: {e}", path.display())))?;
    Ok(parse_segment(&bytes).map_err(|e| match e {
        StoreError::Corrupt(why) => StoreError::Corrupt(format!("{}: {why}", path.display())),
        other => other,
    }))
}

pub(crate) fn parse_segment(bytes: &[u8]) -> Result<SegmentContents, StoreError> {
    if bytes.len() < MAGIC.len() {
        // Created but its magic never reached the disk: nothing was ever acknowledged from it.
        return Ok(SegmentContents {
            torn_bytes: bytes.len() as u64,
            ..SegmentContents::default()
        });
    }
    if let Some(magic_bytes) = unfinished_creation(bytes) {
        return Ok(SegmentContents {
            torn_bytes: magic_bytes as u64,
            ..SegmentContents::default()
        });
    }
    if &bytes[..MAGIC.len()] != MAGIC {
        return Err(StoreError::Corrupt("not a Veil log segment".into()));
    }
    let mut contents = SegmentContents {
        end: MAGIC.len() as u64,
        ..SegmentContents::default()
    };
    let mut at = MAGIC.len();
    while at < bytes.len() {
        let Some((body, relocation)) = whole_record(&bytes[at..]) else {
            if let Some(next) =
                valid_record_after(bytes, at).filter(|&next| !lost_sector(bytes, at, next))
            {
                return Err(StoreError::Corrupt(format!(
                    "the log record at byte {at} is damaged but a valid record follows at byte {next}: \
                     a torn tail is only ever the end of what was written"
                )));
            }
            let written = bytes
                .iter()
                .rposition(|&b| b != 0)
                .map_or(0, |last| last + 1);
            contents.torn_bytes = written.saturating_sub(at) as u64;
            break;
        };
        let record = decode_record(body, relocation).map_err(|e| {
            StoreError::Corrupt(format!("the log record at byte {at} does not decode: {e}"))
        })?;
        match record {
            Record::Ops(ops) => {
                contents.records.push(ops);
                contents.offsets.push(at as u64);
            }
            Record::Relocation(entries) => contents.relocations.push((at as u64, entries)),
        }
        at += HEADER_BYTES + body.len();
        contents.end = at as u64;
    }
    Ok(contents)
}

/// How many bytes of the magic a segment whose creation never finished holds: its allocation reached the disk
/// but its magic did not, or only in part (a crash before the creation's sync, which only the simulated disk's
/// crash-point test had reached: start-up refused the zeros as "not a Veil log segment"). No record can
/// follow, since records are appended only after the creation is synced, so the rest is all zeros; anything
/// else is corruption.
fn unfinished_creation(bytes: &[u8]) -> Option<usize> {
    let (head, rest) = bytes.split_at(MAGIC.len());
    let written = head.iter().zip(MAGIC).take_while(|(b, m)| b == m).count();
    let unfinished = written < MAGIC.len()
        && head[written..].iter().all(|&b| b == 0)
        && rest.iter().all(|&b| b == 0);
    unfinished.then_some(written)
}

/// Where the first valid record after the damaged one at `damaged` starts, if any: a record whose length,
/// checksum and contents verify. Every later byte is tried, since the damage may be in the length itself;
/// the contents are decoded before the checksum is computed, so that garbage (which rarely decodes) costs
/// a few bytes a position rather than a checksum over its declared length. Only recovery calls this.
fn valid_record_after(bytes: &[u8], damaged: usize) -> Option<usize> {
    (damaged + 1..bytes.len()).find(|&at| {
        let rest = &bytes[at..];
        let Some((length, relocation)) = declared_length(rest) else {
            return false;
        };
        let Some(body) = rest.get(HEADER_BYTES..HEADER_BYTES + length) else {
            return false;
        };
        let decodes = if relocation {
            matches!(postcard::take_from_bytes::<Vec<Relocated>>(body), Ok((_, rest)) if rest.is_empty())
        } else {
            matches!(postcard::take_from_bytes::<Vec<StoreOp>>(body), Ok((_, rest)) if rest.is_empty())
        };
        decodes && whole_record(rest).is_some()
    })
}

/// Whether the bytes from the damaged record at `damaged` up to the valid one at `next` hold a whole sector
/// of zeros: a part of the last, unsynced append that never reached the disk while a later part did (a disk
/// may write an unsynced append's pages in any order; the segment's unwritten space reads as zeros). The
/// records after such a hole were in that same unsynced append, so none was acknowledged and the hole is a
/// tear, cut as one. A flipped bit never zeroes a sector, so damage without one stays corruption.
fn lost_sector(bytes: &[u8], damaged: usize, next: usize) -> bool {
    let first = damaged.div_ceil(LOST_SECTOR_BYTES) * LOST_SECTOR_BYTES;
    (first..next)
        .step_by(LOST_SECTOR_BYTES)
        .take_while(|start| start + LOST_SECTOR_BYTES <= next)
        .any(|start| {
            bytes[start..start + LOST_SECTOR_BYTES]
                .iter()
                .all(|&b| b == 0)
        })
}

/// The body length a record header at the start of `rest` declares, if it is one a record may have, and
/// whether it is a relocation record.
fn declared_length(rest: &[u8]) -> Option<(usize, bool)> {
    let word = u32::from_le_bytes(rest.get(..4)?.try_into().ok()?);
    let length = word & !RELOCATION_FLAG;
    (length != 0 && length <= WAL_RECORD_BYTES_MAX)
        .then_some((length as usize, word & RELOCATION_FLAG != 0))
}

/// The body of the record at the start of `rest`, if the record is whole and its checksum matches, and
/// whether it is a relocation record.
fn whole_record(rest: &[u8]) -> Option<(&[u8], bool)> {
    let header = rest.get(..HEADER_BYTES)?;
    let (length, relocation) = declared_length(header)?;
    let crc = u32::from_le_bytes(header[4..].try_into().ok()?);
    let body = rest.get(HEADER_BYTES..HEADER_BYTES + length)?;
    (record_crc(body, relocation) == crc).then_some((body, relocation))
}

#[cfg(test)]
mod tests {
    use super::*;
    use veil_core::{Counters, DedupEntry};

    fn sample_records() -> Vec<Vec<StoreOp>> {
        vec![
            vec![StoreOp::PutNextQueueId(7)],
            vec![
                StoreOp::put_counters(3, Counters::default()),
                StoreOp::DeleteMessage { queue: 3, seq: 9 },
            ],
            vec![StoreOp::PutDedup {
                queue: 3,
                key: "order-1".into(),
                entry: DedupEntry {
                    sent_at: 10,
                    message_id: [5; 16],
                    seq: 4,
                },
            }],
        ]
    }

    fn segment_of(records: &[Vec<StoreOp>]) -> (Vec<u8>, Vec<usize>) {
        let mut bytes = MAGIC.to_vec();
        let mut ends = Vec::new();
        for ops in records {
            encode_record(ops, &mut bytes).expect("encodes");
            ends.push(bytes.len());
        }
        (bytes, ends)
    }

    #[test]
    fn records_read_back_in_the_order_they_were_appended() {
        let records = sample_records();
        let (bytes, _) = segment_of(&records);
        let contents = parse_segment(&bytes).expect("parses");
        assert_eq!(contents.records, records);
        assert_eq!(contents.torn_bytes, 0);
    }

    #[test]
    fn a_segment_cut_at_any_byte_keeps_exactly_the_whole_records_before_the_cut() {
        let records = sample_records();
        let (bytes, ends) = segment_of(&records);
        for cut in 0..=bytes.len() {
            let contents = parse_segment(&bytes[..cut]).expect("a cut is a tear, not corruption");
            let whole = ends.iter().filter(|&&end| end <= cut).count();
            assert_eq!(contents.records, records[..whole], "cut at byte {cut}");
            let kept = match whole {
                0 if cut < MAGIC.len() => 0,
                0 => MAGIC.len(),
                _ => ends[whole - 1],
            };
            let written = bytes[..cut]
                .iter()
                .rposition(|&b| b != 0)
                .map_or(0, |i| i + 1);
            assert_eq!(
                contents.torn_bytes,
                written.saturating_sub(kept) as u64,
                "cut at byte {cut}"
            );
        }
    }

    #[test]
    fn a_flipped_bit_in_the_last_record_cuts_it_and_keeps_the_rest() {
        let records = sample_records();
        let (bytes, ends) = segment_of(&records);
        for at in ends[1]..ends[2] {
            let mut damaged = bytes.clone();
            damaged[at] ^= 0x10;
            let contents = parse_segment(&damaged).expect("parses");
            assert_eq!(contents.records, records[..2], "bit flipped at byte {at}");
            assert_eq!(contents.torn_bytes, (ends[2] - ends[1]) as u64);
        }
    }

    #[test]
    fn a_damaged_record_with_a_valid_record_after_it_is_corruption_not_a_torn_tail() {
        let records = sample_records();
        let (mut bytes, ends) = segment_of(&records);
        bytes.extend_from_slice(&[0; 4096]);
        for at in ends[0]..ends[1] {
            for bit in [0x01, 0x10, 0x80] {
                let mut damaged = bytes.clone();
                damaged[at] ^= bit;
                let error = parse_segment(&damaged).expect_err("acknowledged records follow");
                let StoreError::Corrupt(why) = error else {
                    panic!("byte {at}: {error}");
                };
                let named = format!("record at byte {} is damaged", ends[0]);
                assert!(why.contains(&named), "byte {at}: {why}");
            }
        }
    }

    #[test]
    fn a_lost_sector_of_the_unsynced_append_with_whole_records_after_it_is_a_torn_tail() {
        let big: Vec<Vec<StoreOp>> = (0..6u8)
            .map(|i| {
                vec![StoreOp::PutDedup {
                    queue: 3,
                    key: format!("{i}").repeat(700),
                    entry: DedupEntry {
                        sent_at: 10,
                        message_id: [5; 16],
                        seq: u64::from(i),
                    },
                }]
            })
            .collect();
        let (mut bytes, ends) = segment_of(&big);
        bytes.extend_from_slice(&[0; 4096]);
        // The disk wrote the append's later pages but not the sector holding part of the third record.
        let hole = ends[1].div_ceil(LOST_SECTOR_BYTES) * LOST_SECTOR_BYTES;
        assert!(
            hole + LOST_SECTOR_BYTES < ends[2],
            "the hole lies inside the third record"
        );
        bytes[hole..hole + LOST_SECTOR_BYTES].fill(0);
        let contents = parse_segment(&bytes).expect("a hole in the unsynced append is a tear");
        assert_eq!(contents.records, big[..2]);
        assert!(contents.torn_bytes > 0);
    }

    #[test]
    fn garbage_after_a_damaged_last_record_is_still_a_torn_tail() {
        let records = sample_records();
        let (mut bytes, ends) = segment_of(&records);
        bytes[ends[1] + 9] ^= 0x10;
        let garbage: Vec<u8> = (0..2048u32)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
            .collect();
        bytes.extend_from_slice(&garbage);
        bytes.extend_from_slice(&[0; 4096]);
        let contents = parse_segment(&bytes).expect("nothing valid follows: a tear");
        assert_eq!(contents.records, records[..2]);
    }

    #[test]
    fn zeros_after_the_last_record_are_unused_space_not_a_tear() {
        let records = sample_records();
        let (mut bytes, _) = segment_of(&records);
        bytes.extend_from_slice(&[0; 4096]);
        let contents = parse_segment(&bytes).expect("parses");
        assert_eq!(contents.records, records);
        assert_eq!(contents.torn_bytes, 0);
    }

    #[test]
    fn a_torn_record_in_allocated_space_is_cut_up_to_its_last_written_byte() {
        let records = sample_records();
        let (bytes, ends) = segment_of(&records);
        let mut torn = bytes[..ends[2] - 2].to_vec();
        torn.extend_from_slice(&[0; 4096]);
        let contents = parse_segment(&torn).expect("parses");
        assert_eq!(contents.records, records[..2]);
        let written = torn.iter().rposition(|&b| b != 0).expect("data") + 1;
        assert_eq!(contents.torn_bytes, (written - ends[1]) as u64);
    }

    #[test]
    fn a_segment_whose_allocation_reached_the_disk_but_not_its_magic_is_empty_not_corrupt() {
        for magic_bytes in 0..MAGIC.len() {
            let mut bytes = vec![0; 4096];
            bytes[..magic_bytes].copy_from_slice(&MAGIC[..magic_bytes]);
            let contents = parse_segment(&bytes).expect("a creation cut short, not corruption");
            assert!(contents.records.is_empty());
            assert_eq!(contents.torn_bytes, magic_bytes as u64);
        }
    }

    #[test]
    fn a_segment_without_its_magic_but_with_bytes_after_it_is_refused() {
        let records = sample_records();
        let (mut bytes, _) = segment_of(&records);
        bytes[..MAGIC.len()].fill(0);
        let error = parse_segment(&bytes).expect_err("records after a missing magic");
        assert!(matches!(error, StoreError::Corrupt(_)), "{error}");
    }

    #[test]
    fn a_file_that_is_not_a_segment_is_refused() {
        let error = parse_segment(b"NOTAWAL!rest").expect_err("refused");
        assert!(matches!(error, StoreError::Corrupt(_)), "{error}");
    }
}
