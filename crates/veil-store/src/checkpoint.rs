//! Checkpoints: applying a closed log segment's operations to redb in one transaction, and start-up recovery,
//! which is the same step for the segments a crash left behind.
//!
//! A body is never written here: redb learns where in the log it is (docs/decisions/
//! 0013-bodies-written-once.md), and a segment that holds a surviving body is kept after its checkpoint.
//! Most messages live for less than a segment: sent, received and deleted within seconds. Their operations
//! cancel out, so a checkpoint skips them: a message born (sent or moved in) and gone (deleted, moved away,
//! purged) within the applied operations never reaches the B-tree. Counters, rewritten by nearly every
//! commit, are written once per queue: their last value.
//!
//! After its checkpoint, the checkpointer picks the oldest kept segment that is mostly dead and reads its
//! survivors, for the writer to copy forward as one relocation record (`plan_reclaim`).

// Keyed by engine-assigned ids: hashed fast (docs/decisions/0014-hashing.md).
use foldhash::{HashMap, HashMapExt, HashSet, HashSetExt};
use std::path::Path;

use redb::{Database, ReadableDatabase, ReadableTable};
use veil_core::{QueueId, StoreError, StoreOp};

use crate::bodies::{
    counted_bytes, BodyAt, BodyFiles, BodyReader, Relocated, Relocation, StoredBody,
};
use crate::io::StorageIo;
use crate::limits::{RECLAIM_LIVE_PERCENT_MAX, RELOCATION_BYTES_MAX};
use crate::overlay::{locate, Key, RecordStart, Window};
use crate::tables::{redb_err, Settled, Tables, BODIES, SEGMENTS, SEGMENT_BODIES};
use crate::wal;

/// Applies a closed window (in log order) to redb and records its generation as applied, in one durable
/// transaction. Says which segments are now kept for their bodies and which hold none any more.
pub fn checkpoint(db: &Database, window: &Window) -> Result<Settled, StoreError> {
    let logged = Logged {
        ops: &window.ops,
        records: &window.records,
        relocations: &window.relocations,
        generations: &[window.generation],
    };
    apply_in_transaction(db, &logged, window.generation)
}

/// What a checkpoint applies: operations with the records they came in, relocations, and the segments
/// they were logged in.
struct Logged<'a> {
    ops: &'a [StoreOp],
    records: &'a [RecordStart],
    relocations: &'a [Relocation],
    generations: &'a [u64],
}

fn apply_in_transaction(
    db: &Database,
    logged: &Logged<'_>,
    applied: u64,
) -> Result<Settled, StoreError> {
    let mut txn = db
        .begin_write()
        .map_err(redb_err!("starting a checkpoint"))?;
    // Two fsyncs instead of one, once per segment: a primary commit slot that later fails its checksums is
    // then reported as corruption rather than silently replaced by the previous commit, whose log segments
    // may already be gone.
    txn.set_two_phase_commit(true);
    let settled = {
        let mut tables = Tables::open(&txn)?;
        for &generation in logged.generations {
            tables.note_logged(generation, 0);
        }
        apply_logged(&mut tables, logged)?;
        tables.put_wal_applied(applied)?;
        tables.finish()?
    };
    txn.commit().map_err(redb_err!("committing a checkpoint"))?;
    Ok(settled)
}

fn db_path(dir: &Path) -> std::path::PathBuf {
    dir.join(crate::redb_store::DATABASE_FILE)
}

/// What recovery found.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Recovered {
    /// The segment generation to write next.
    pub next_generation: u64,
    /// Records replayed from the log.
    pub records: usize,
    /// Bytes cut from the newest segment's torn tail.
    pub torn_bytes: u64,
}

/// Replays the log segments newer than redb's last checkpoint into redb, then keeps the segments that hold
/// stored bodies (renamed `body-`) and removes the rest. A torn tail is allowed only in the newest segment: an
/// older one was complete and synced before the next began, so damage there is corruption and start-up stops
/// rather than skip acknowledged changes. A kept segment redb counts on that is missing is corruption too.
pub fn recover(db: &Database, io: &dyn StorageIo, dir: &Path) -> Result<Recovered, StoreError> {
    let applied = crate::tables::wal_applied(db)?;
    let segments = wal::list_segments(io, dir)?;
    let newest = segments.last().map_or(0, |(generation, _)| *generation);
    let mut recovered = Recovered {
        next_generation: applied.max(newest) + 1,
        ..Recovered::default()
    };
    // A segment leaves the log (removed, or kept as a body segment) only once redb holds its checkpoint, and
    // the first segment after a checkpoint's is the next generation: redb knowing less means its file went
    // back to an older commit (a damaged header or commit slot), and the changes of the segments that left
    // would be lost in silence.
    if let Some((first, path)) = segments.iter().find(|(g, _)| *g > applied) {
        if applied.saturating_add(1) < *first {
            return Err(StoreError::Corrupt(format!(
                "{} records log generation {applied} as applied, but the log starts at {}: the store \
                 file is older than its log (restore the data directory from a backup)",
                db_path(dir).display(),
                path.display()
            )));
        }
    }
    let mut ops = Vec::new();
    let mut records = Vec::new();
    let mut relocations = Vec::new();
    let mut generations = Vec::new();
    let mut ends = HashMap::new();
    for (generation, path) in segments.iter().filter(|(g, _)| *g > applied) {
        let contents = wal::read_segment(io, path)?;
        if contents.torn_bytes > 0 && *generation != newest {
            return Err(StoreError::Corrupt(format!(
                "{} ends in {} damaged bytes but is not the newest log segment",
                path.display(),
                contents.torn_bytes
            )));
        }
        recovered.torn_bytes += contents.torn_bytes;
        recovered.records += contents.record_count();
        generations.push(*generation);
        ends.insert(*generation, contents.end);
        for (record, offset) in contents.records.into_iter().zip(contents.offsets) {
            records.push(RecordStart {
                first_op: ops.len(),
                generation: *generation,
                offset,
            });
            ops.extend(record);
        }
        relocations.extend(
            contents
                .relocations
                .into_iter()
                .map(|(offset, entries)| Relocation {
                    generation: *generation,
                    offset,
                    entries,
                }),
        );
    }
    // Recorded even when the segments held no records, so that the check above holds at the next start.
    if newest > applied {
        let logged = Logged {
            ops: &ops,
            records: &records,
            relocations: &relocations,
            generations: &generations,
        };
        apply_in_transaction(db, &logged, newest)?;
    }
    if recovered.torn_bytes > 0 {
        tracing::warn!(
            bytes = recovered.torn_bytes,
            "cut a torn tail from the log: a write that was never acknowledged"
        );
    }
    settle_at_start(db, io, dir, &ends)?;
    Ok(recovered)
}

/// Leaves the data directory as redb describes it: every segment holding stored bodies renamed `body-`,
/// every other segment removed (checkpointed before a crash, or emptied by a relocation), and no stored body
/// pointing into a missing file. `ends` are where the replayed segments' last records end.
fn settle_at_start(
    db: &Database,
    io: &dyn StorageIo,
    dir: &Path,
    ends: &HashMap<u64, u64>,
) -> Result<(), StoreError> {
    let kept = kept_segments(db)?;
    for (generation, path) in wal::list_segments(io, dir)? {
        if kept.contains(&generation) {
            keep_segment(io, dir, generation, ends.get(&generation).copied())?;
        } else {
            remove(io, &path)?;
        }
    }
    let bodies = wal::list_body_segments(io, dir)?;
    for (generation, path) in &bodies {
        if !kept.contains(generation) {
            remove(io, path)?;
        }
    }
    let present: HashSet<u64> = bodies.iter().map(|(g, _)| *g).collect();
    let missing: Vec<String> = kept
        .iter()
        .filter(|g| !present.contains(g))
        .map(|g| wal::body_segment_path(dir, *g).display().to_string())
        .collect();
    if !missing.is_empty() {
        return Err(StoreError::Corrupt(format!(
            "{} holds stored message bodies in {} but the file is missing (restore the data directory \
             from a backup)",
            db_path(dir).display(),
            missing.join(", ")
        )));
    }
    wal::sync_dir(io, dir)
}

fn remove(io: &dyn StorageIo, path: &Path) -> Result<(), StoreError> {
    io.remove_file(path)
        .map_err(|e| StoreError::Io(format!("removing {}: {e}", path.display())))
}

/// The generations redb keeps segments for.
fn kept_segments(db: &Database) -> Result<HashSet<u64>, StoreError> {
    let txn = db.begin_read().map_err(redb_err!("starting a read"))?;
    let segments = txn
        .open_table(SEGMENTS)
        .map_err(redb_err!("opening segments"))?;
    let mut kept = HashSet::new();
    for entry in segments.iter().map_err(redb_err!("listing segments"))? {
        let (generation, _) = entry.map_err(redb_err!("reading a segment"))?;
        kept.insert(generation.value());
    }
    Ok(kept)
}

/// After a checkpoint's commit: removes the segments that hold no body any more and renames the ones it
/// kept to `body-`. Neither needs a directory sync: a crash that undoes either leaves a name that start-up
/// settles the same way from redb's tables. The checkpointed segment's own `wal-` file goes last, so that its
/// disappearance means the checkpointer has touched the disk for the last time in this checkpoint (veil-sim
/// waits for that to keep a seed's disk calls in one order).
pub fn settle(
    io: &dyn StorageIo,
    dir: &Path,
    files: &BodyFiles,
    settled: &Settled,
    (checkpointed, end): (u64, u64),
) -> Result<(), StoreError> {
    let last = |g: &&u64| **g == checkpointed;
    let removable = settled.removable.iter().filter(|g| !last(g));
    let kept = settled.kept.iter().filter(|g| !last(g));
    // Kept before: renamed `body-` by the checkpoint that kept it.
    for &generation in removable {
        let path = wal::body_segment_path(dir, generation);
        remove_segment(io, files, generation, &path)?;
    }
    for &generation in kept {
        keep_segment(io, dir, generation, None)?;
    }
    if settled.kept.contains(&checkpointed) {
        keep_segment(io, dir, checkpointed, Some(end))
    } else {
        let path = wal::segment_path(dir, checkpointed);
        remove_segment(io, files, checkpointed, &path)
    }
}

/// Renames a kept segment `body-`, first cutting it at `end`, its last record's end when known: a segment
/// closed early (by a shutdown or `checkpoint_now`) would otherwise keep all of its preallocated space.
fn keep_segment(
    io: &dyn StorageIo,
    dir: &Path,
    generation: u64,
    end: Option<u64>,
) -> Result<(), StoreError> {
    let (log, body) = (
        wal::segment_path(dir, generation),
        wal::body_segment_path(dir, generation),
    );
    if let Some(end) = end.filter(|&end| end > 0) {
        io.open(&log, false)
            .and_then(|file| file.set_len(end))
            .map_err(|e| StoreError::Io(format!("cutting {} at byte {end}: {e}", log.display())))?;
    }
    io.rename(&log, &body).map_err(|e| {
        StoreError::Io(format!(
            "renaming {} to {}: {e}",
            log.display(),
            body.display()
        ))
    })
}

/// Removes a segment's file. Each call names the one file it means, so that no call fails by design: veil-sim
/// takes any failed call of the checkpointer for the end of its checkpoint.
fn remove_segment(
    io: &dyn StorageIo,
    files: &BodyFiles,
    generation: u64,
    path: &Path,
) -> Result<(), StoreError> {
    files.forget(generation);
    remove(io, path)
}

/// The survivors of the oldest kept segment whose live bytes fell below `RECLAIM_LIVE_PERCENT_MAX` of what
/// it logged, read for the writer to copy forward (up to `RELOCATION_BYTES_MAX` of them at a time). A damaged
/// record is reported and the reclaim skipped: the bodies stay where they are, and their own reads report the
/// damage. A failed read is an I/O error like any other of the checkpoint's.
pub fn plan_reclaim(
    db: &Database,
    files: &BodyFiles,
) -> Result<Option<Vec<Relocated>>, StoreError> {
    match try_plan_reclaim(db, files) {
        Err(StoreError::Corrupt(why)) => {
            tracing::error!(%why, "a segment to reclaim holds a damaged record; it is kept as it is");
            Ok(None)
        }
        other => other,
    }
}

fn try_plan_reclaim(
    db: &Database,
    files: &BodyFiles,
) -> Result<Option<Vec<Relocated>>, StoreError> {
    let txn = db.begin_read().map_err(redb_err!("starting a read"))?;
    let segments = txn
        .open_table(SEGMENTS)
        .map_err(redb_err!("opening segments"))?;
    let mut candidate = None;
    for entry in segments.iter().map_err(redb_err!("listing segments"))? {
        let (generation, counts) = entry.map_err(redb_err!("reading a segment"))?;
        let (total, live) = counts.value();
        if live.saturating_mul(100) < total.saturating_mul(RECLAIM_LIVE_PERCENT_MAX) {
            candidate = Some(generation.value());
            break;
        }
    }
    let Some(generation) = candidate else {
        return Ok(None);
    };
    let index = txn
        .open_table(SEGMENT_BODIES)
        .map_err(redb_err!("opening segment_bodies"))?;
    let bodies = txn
        .open_table(BODIES)
        .map_err(redb_err!("opening bodies"))?;
    let mut reader = BodyReader::new(files);
    let mut entries = Vec::new();
    let mut bytes = 0u64;
    let range = (generation, 0, 0)..=(generation, u64::MAX, u64::MAX);
    for entry in index
        .range(range)
        .map_err(redb_err!("reading segment_bodies"))?
    {
        let (key, _) = entry.map_err(redb_err!("reading segment_bodies"))?;
        let (_, queue, seq) = key.value();
        let Some(stored) = bodies
            .get((queue, seq))
            .map_err(redb_err!("reading a stored body"))?
        else {
            continue;
        };
        let from: StoredBody = crate::codec::decode(stored.value(), "a stored body")?;
        let payload = reader.payload(&from)?;
        bytes += u64::from(counted_bytes(&payload));
        entries.push(Relocated {
            queue,
            seq,
            from,
            payload,
        });
        if bytes >= RELOCATION_BYTES_MAX {
            break;
        }
    }
    Ok((!entries.is_empty()).then_some(entries))
}

/// Applies `ops` in order, skipping what cancels out within them (see the module comment), then the
/// relocations. A body is never copied here: redb learns where in the log it is.
fn apply_logged(tables: &mut Tables, logged: &Logged<'_>) -> Result<(), StoreError> {
    let ops = logged.ops;
    let short_lived = short_lived(ops);
    let last_counters = last_counters(ops);
    // Bodies of short-lived messages between their birth and their end, for a move or a body replacement
    // that starts from them; never written to redb.
    let mut parked: HashMap<Key, StoredBody> = HashMap::new();
    for (index, op) in ops.iter().enumerate() {
        match op {
            StoreOp::PutMessage(put) => {
                let key = (put.queue, put.seq);
                let at = locate(logged.records, index);
                let bytes = counted_bytes(&put.payload);
                tables.note_logged(at.generation, u64::from(bytes));
                let body = StoredBody {
                    at,
                    bytes,
                    replaced: None,
                    moved_from: None,
                };
                if short_lived.contains(&key) {
                    parked.insert(key, body);
                } else {
                    let extras = (put.redrive.as_ref(), put.fifo_group.as_deref());
                    tables.put_message(key, &body, &put.state, extras)?;
                }
            }
            StoreOp::PutState { queue, seq, .. } | StoreOp::PutHistory { queue, seq, .. }
                if short_lived.contains(&(*queue, *seq)) => {}
            StoreOp::DeleteMessage { queue, seq } if short_lived.contains(&(*queue, *seq)) => {
                parked.remove(&(*queue, *seq));
            }
            StoreOp::ReplaceBody {
                queue, seq, body, ..
            } => {
                let key = (*queue, *seq);
                let at = locate(logged.records, index);
                let bytes = replaced_bytes(body);
                tables.note_logged(at.generation, u64::from(bytes));
                if short_lived.contains(&key) {
                    if let Some(stored) = parked.get_mut(&key) {
                        stored.replaced = Some((at, bytes));
                    }
                } else {
                    tables.replace_body(key, at, bytes)?;
                }
            }
            StoreOp::MoveMessage(move_op) => {
                let body = if short_lived.contains(&move_op.from) {
                    parked.remove(&move_op.from)
                } else {
                    tables.take_message(move_op.from)?
                };
                // A message whose body is already gone leaves nothing at `to`.
                let Some(mut body) = body else {
                    continue;
                };
                body.moved_from = Some(move_op.moved_from.clone());
                if short_lived.contains(&move_op.to) {
                    parked.insert(move_op.to, body);
                } else {
                    let extras = (move_op.redrive.as_ref(), move_op.fifo_group.as_deref());
                    tables.put_message(move_op.to, &body, &move_op.state, extras)?;
                }
            }
            StoreOp::PurgeQueue(queue) | StoreOp::DeleteQueue(queue) => {
                parked.retain(|key, _| key.0 != *queue);
                tables.apply(op)?;
            }
            StoreOp::PutCounters { queue, .. } if last_counters.get(queue) != Some(&index) => {}
            _ => tables.apply(op)?,
        }
    }
    for relocation in logged.relocations {
        for (index, entry) in relocation.entries.iter().enumerate() {
            let at = BodyAt {
                generation: relocation.generation,
                offset: relocation.offset,
                index: u32::try_from(index).unwrap_or(u32::MAX),
            };
            let bytes = counted_bytes(&entry.payload);
            tables.note_logged(at.generation, u64::from(bytes));
            tables.relocate((entry.queue, entry.seq), &entry.from, at, bytes)?;
        }
    }
    Ok(())
}

/// What a replaced body counts, as [`counted_bytes`] counts a message's.
fn replaced_bytes(body: &bytes::Bytes) -> u32 {
    u32::try_from(body.len() + 32).unwrap_or(u32::MAX)
}

/// The messages both born and gone within `ops`.
fn short_lived(ops: &[StoreOp]) -> HashSet<Key> {
    let mut born: HashSet<Key> = HashSet::with_capacity(ops.len());
    let mut short_lived = HashSet::new();
    let mut end = |key: Key, born: &mut HashSet<Key>| {
        if born.remove(&key) {
            short_lived.insert(key);
        }
    };
    for op in ops {
        match op {
            StoreOp::PutMessage(put) => {
                born.insert((put.queue, put.seq));
            }
            StoreOp::DeleteMessage { queue, seq } => end((*queue, *seq), &mut born),
            StoreOp::MoveMessage(move_op) => {
                end(move_op.from, &mut born);
                born.insert(move_op.to);
            }
            StoreOp::PurgeQueue(queue) | StoreOp::DeleteQueue(queue) => {
                let ended: Vec<Key> = born.iter().filter(|k| k.0 == *queue).copied().collect();
                for key in ended {
                    end(key, &mut born);
                }
            }
            _ => {}
        }
    }
    short_lived
}

/// Each queue's last counters write: the earlier ones are overwritten within the same transaction anyway.
fn last_counters(ops: &[StoreOp]) -> HashMap<QueueId, usize> {
    ops.iter()
        .enumerate()
        .filter_map(|(index, op)| match op {
            StoreOp::PutCounters { queue, .. } => Some((*queue, index)),
            _ => None,
        })
        .collect()
}
