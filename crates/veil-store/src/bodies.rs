//! Bodies written once (docs/decisions/0013-bodies-written-once.md): a message's payload stays in the log
//! record that first wrote it, and redb keeps only where that is ([`StoredBody`], in the `bodies` table).
//! This module knows those locations, the records that copy survivors out of a mostly dead segment
//! ([`Relocated`]), and how a payload is read back from a kept segment ([`BodyFiles`]).

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

// Keyed by engine-assigned ids and generations: hashed fast (docs/decisions/0014-hashing.md).
use foldhash::{HashMap, HashMapExt};
use redb::{Database, ReadableDatabase};
use serde::{Deserialize, Serialize};
use veil_core::{MovedFrom, Payload, QueueId, Seq, StoreError, StoreOp};

use crate::codec::decode;
use crate::io::{StorageFile, StorageIo};
use crate::limits::BODY_FILES_OPEN_MAX;
use crate::overlay::Key;
use crate::wal::{self, Record};

/// Where a body was logged: the segment, the byte offset of its record, and the index of the operation (a
/// `PutMessage` or `ReplaceBody`) or of the relocated entry inside that record.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct BodyAt {
    pub generation: u64,
    pub offset: u64,
    pub index: u32,
}

/// What redb keeps of a checkpointed message's payload (format 7's `bodies` table): its location, and what
/// later operations changed without rewriting it. Each location counts `bytes` towards its segment's live
/// bytes, which decide when the segment is reclaimed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoredBody {
    /// The `PutMessage` (or the relocated entry) holding the payload.
    pub at: BodyAt,
    pub bytes: u32,
    /// A later `ReplaceBody` (Azure's UpdateMessage) whose body and MD5 replace the payload's.
    pub replaced: Option<(BodyAt, u32)>,
    /// Set by a move: where the message came from (the payload at `at` predates the move).
    pub moved_from: Option<MovedFrom>,
}

impl StoredBody {
    /// The locations this body occupies, with the bytes each counts.
    pub fn parts(&self) -> impl Iterator<Item = (BodyAt, u32)> {
        std::iter::once((self.at, self.bytes)).chain(self.replaced)
    }
}

/// One survivor copied out of a reclaimed segment: its whole current payload, and the stored body it was
/// copied from. The relocation's checkpoint points the message here only if its stored body is still
/// `from`: a message deleted, moved or updated meanwhile keeps what the later operation gave it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Relocated {
    pub queue: QueueId,
    pub seq: Seq,
    pub from: StoredBody,
    pub payload: Payload,
}

/// A relocation record and where it was logged.
#[derive(Clone, Debug)]
pub struct Relocation {
    pub generation: u64,
    pub offset: u64,
    pub entries: Vec<Relocated>,
}

/// The bytes a payload counts towards its segment's live and total bytes: its body and the fields that grow
/// with the message, plus a fixed share for the record's other fields. An estimate, the same for the live and
/// the total side, so that the reclaim threshold compares like with like.
pub fn counted_bytes(payload: &Payload) -> u32 {
    let variable = payload.body.len()
        + payload.sender_id.len()
        + payload.group.as_ref().map_or(0, String::len)
        + payload.dedup_id.as_ref().map_or(0, String::len)
        + payload
            .attributes
            .iter()
            .map(|(name, value)| name.len() + value.data_type.len() + attribute_bytes(&value.value))
            .sum::<usize>();
    u32::try_from(variable + RECORD_FIELDS_BYTES).unwrap_or(u32::MAX)
}

fn attribute_bytes(data: &veil_core::AttributeData) -> usize {
    match data {
        veil_core::AttributeData::String(text) => text.len(),
        veil_core::AttributeData::Binary(bytes) => bytes.len(),
    }
}

/// The fixed part of [`counted_bytes`]: ids, MD5, times and lengths of one logged message.
const RECORD_FIELDS_BYTES: usize = 64;

type OpenFiles = HashMap<u64, Arc<dyn StorageFile>>;

/// The kept segments' files, opened once and shared by every reader. A file removed after its last body
/// moved away stays readable through a handle taken before (the reader then finds the new location in a
/// later look-up).
#[derive(Debug)]
pub struct BodyFiles {
    io: Arc<dyn StorageIo>,
    dir: PathBuf,
    /// Open handles by generation; a lock held only to look up or insert, never across I/O.
    open: Mutex<OpenFiles>,
}

impl BodyFiles {
    pub fn new(io: Arc<dyn StorageIo>, dir: PathBuf) -> Self {
        Self {
            io,
            dir,
            open: Mutex::new(HashMap::new()),
        }
    }

    /// The handle of a kept segment: `body-<generation>.log`, or its `wal-` name while the checkpoint that
    /// kept it has not renamed it yet.
    pub fn file(&self, generation: u64) -> Result<Arc<dyn StorageFile>, StoreError> {
        if let Some(file) = self.lock()?.get(&generation) {
            return Ok(file.clone());
        }
        let body = wal::body_segment_path(&self.dir, generation);
        let log = wal::segment_path(&self.dir, generation);
        let file = self
            .io
            .open(&body, false)
            .or_else(|_| self.io.open(&log, false))
            .or_else(|_| self.io.open(&body, false))
            .map_err(|e| {
                let why = format!(
                    "{} holds stored message bodies but cannot be opened: {e}",
                    body.display()
                );
                if e.kind() == std::io::ErrorKind::NotFound {
                    StoreError::Corrupt(why)
                } else {
                    StoreError::Io(why)
                }
            })?;
        let file: Arc<dyn StorageFile> = Arc::from(file);
        self.insert(generation, file.clone())?;
        Ok(file)
    }

    fn insert(&self, generation: u64, file: Arc<dyn StorageFile>) -> Result<(), StoreError> {
        let mut open = self.lock()?;
        if open.len() >= BODY_FILES_OPEN_MAX {
            // Any one: a reader holding it keeps its own reference, and the next read of it opens it again.
            if let Some(&evicted) = open.keys().next() {
                open.remove(&evicted);
            }
        }
        open.insert(generation, file);
        Ok(())
    }

    /// Opens a segment the checkpoint just kept, still under its `wal-` name, before readers are sent to it.
    pub fn open_log(&self, generation: u64) -> Result<(), StoreError> {
        let log = wal::segment_path(&self.dir, generation);
        let file = self
            .io
            .open(&log, false)
            .map_err(|e| StoreError::Io(format!("opening {}: {e}", log.display())))?;
        self.insert(generation, Arc::from(file))
    }

    /// Drops the handle of a segment being removed.
    pub fn forget(&self, generation: u64) {
        if let Ok(mut open) = self.lock() {
            open.remove(&generation);
        }
    }

    fn lock(&self) -> Result<std::sync::MutexGuard<'_, OpenFiles>, StoreError> {
        self.open
            .lock()
            .map_err(|_| StoreError::Io("the body files' lock is poisoned".into()))
    }

    /// Reads one record of a kept segment, naming the file in an error.
    fn record(&self, generation: u64, offset: u64) -> Result<Record, StoreError> {
        let file = self.file(generation)?;
        wal::read_record_at(file.as_ref(), offset).map_err(|e| {
            let path = wal::body_segment_path(&self.dir, generation);
            match e {
                StoreError::Corrupt(why) => StoreError::Corrupt(format!(
                    "{}: {why}: the messages whose bodies it holds cannot be read (restore the data \
                     directory from a backup)",
                    path.display()
                )),
                StoreError::Io(why) => StoreError::Io(format!("{}: {why}", path.display())),
                other => other,
            }
        })
    }
}

/// Reads payloads from their kept segments, decoding each record once however many of its bodies are asked.
pub struct BodyReader<'a> {
    files: &'a BodyFiles,
    records: HashMap<(u64, u64), Record>,
}

impl<'a> BodyReader<'a> {
    pub fn new(files: &'a BodyFiles) -> Self {
        Self {
            files,
            records: HashMap::new(),
        }
    }

    /// The payload a stored body describes.
    pub fn payload(&mut self, stored: &StoredBody) -> Result<Payload, StoreError> {
        let mut payload = match self.logged(stored.at)? {
            Logged::Put(payload) => payload,
            Logged::Body(..) => return Err(misplaced(stored.at, "a message")),
        };
        if let Some(moved_from) = &stored.moved_from {
            payload.moved_from = Some(moved_from.clone());
        }
        if let Some((at, _)) = stored.replaced {
            match self.logged(at)? {
                Logged::Body(body, body_md5) => {
                    payload.body = body;
                    payload.body_md5 = body_md5;
                }
                Logged::Put(_) => return Err(misplaced(at, "a body replacement")),
            }
        }
        Ok(payload)
    }

    fn logged(&mut self, at: BodyAt) -> Result<Logged, StoreError> {
        let key = (at.generation, at.offset);
        if !self.records.contains_key(&key) {
            let record = self.files.record(at.generation, at.offset)?;
            self.records.insert(key, record);
        }
        let index = at.index as usize;
        match self.records.get(&key) {
            Some(Record::Ops(ops)) => match ops.get(index) {
                Some(StoreOp::PutMessage(put)) => Ok(Logged::Put(put.payload.clone())),
                Some(StoreOp::ReplaceBody { body, body_md5, .. }) => {
                    Ok(Logged::Body(body.clone(), *body_md5))
                }
                _ => Err(misplaced(at, "a body")),
            },
            Some(Record::Relocation(entries)) => match entries.get(index) {
                Some(entry) => Ok(Logged::Put(entry.payload.clone())),
                None => Err(misplaced(at, "a relocated body")),
            },
            None => Err(misplaced(at, "a record")),
        }
    }
}

enum Logged {
    Put(Payload),
    Body(bytes::Bytes, [u8; 16]),
}

fn misplaced(at: BodyAt, what: &str) -> StoreError {
    StoreError::Corrupt(format!(
        "the stored location of {what} (log generation {}, byte {}, entry {}) holds none",
        at.generation, at.offset, at.index
    ))
}

/// How many times a read retries a look-up whose segment vanished under it: the segment's last bodies were
/// relocated and it was removed between the read of their locations and the read of the file.
const VANISHED_RETRIES_MAX: usize = 3;

/// Payloads as redb and the kept segments hold them (after the last checkpoint).
pub fn read_payloads(
    db: &Database,
    files: &BodyFiles,
    queue: QueueId,
    seqs: &[Seq],
) -> Result<Vec<Option<Payload>>, StoreError> {
    let mut attempt = 0;
    loop {
        match read_payloads_once(db, files, queue, seqs) {
            Err(StoreError::Corrupt(_))
                if attempt < VANISHED_RETRIES_MAX && moved(db, files, queue, seqs) =>
            {
                attempt += 1;
            }
            other => return other,
        }
    }
}

/// Whether a failed read might succeed again: a location now points into a segment with no open handle, as
/// after a relocation moved the message out of the file the read failed on. A file that is really missing
/// also answers yes; the retries are bounded (`VANISHED_RETRIES_MAX`) and then its error stands.
fn moved(db: &Database, files: &BodyFiles, queue: QueueId, seqs: &[Seq]) -> bool {
    let Ok(stored) = stored_bodies(db, queue, seqs) else {
        return false;
    };
    stored.iter().flatten().any(|body| {
        body.parts().any(|(at, _)| {
            files
                .lock()
                .is_ok_and(|open| !open.contains_key(&at.generation))
        })
    })
}

fn read_payloads_once(
    db: &Database,
    files: &BodyFiles,
    queue: QueueId,
    seqs: &[Seq],
) -> Result<Vec<Option<Payload>>, StoreError> {
    let stored = stored_bodies(db, queue, seqs)?;
    let mut reader = BodyReader::new(files);
    stored
        .iter()
        .map(|body| body.as_ref().map(|b| reader.payload(b)).transpose())
        .collect()
}

fn stored_bodies(
    db: &Database,
    queue: QueueId,
    seqs: &[Seq],
) -> Result<Vec<Option<StoredBody>>, StoreError> {
    let txn = db
        .begin_read()
        .map_err(|e| StoreError::Io(format!("starting a read: {e}")))?;
    let bodies = txn
        .open_table(crate::tables::BODIES)
        .map_err(|e| StoreError::Io(format!("opening bodies: {e}")))?;
    seqs.iter()
        .map(|&seq| {
            match bodies
                .get((queue, seq))
                .map_err(|e| StoreError::Io(format!("reading a stored body: {e}")))?
            {
                Some(guard) => decode(guard.value(), "a stored body").map(Some),
                None => Ok(None),
            }
        })
        .collect()
}

/// A payload as redb and the kept segments hold it.
pub fn read_payload(
    db: &Database,
    files: &BodyFiles,
    key: Key,
) -> Result<Option<Payload>, StoreError> {
    Ok(read_payloads(db, files, key.0, &[key.1])?.pop().flatten())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::io::FsIo;
    use crate::limits::BODY_FILES_OPEN_MAX;

    #[test]
    fn body_files_hold_at_most_their_limit_open_and_reopen_an_evicted_one() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let segments = BODY_FILES_OPEN_MAX as u64 + 20;
        for generation in 1..=segments {
            let mut bytes = wal::MAGIC.to_vec();
            wal::encode_record(&[StoreOp::PutNextQueueId(generation)], &mut bytes)
                .expect("encodes");
            std::fs::write(wal::body_segment_path(dir.path(), generation), bytes).expect("writes");
        }
        let files = BodyFiles::new(Arc::new(FsIo), dir.path().to_path_buf());
        for round in 0..2 {
            for generation in 1..=segments {
                let record = files
                    .record(generation, wal::MAGIC.len() as u64)
                    .expect("reads");
                assert_eq!(
                    record,
                    Record::Ops(vec![StoreOp::PutNextQueueId(generation)]),
                    "round {round}"
                );
                let open = files.lock().expect("not poisoned").len();
                assert!(open <= BODY_FILES_OPEN_MAX, "{open} files open");
            }
        }
    }
}
