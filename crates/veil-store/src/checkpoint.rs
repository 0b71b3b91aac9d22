//! Checkpoints: applying a closed log segment's operations to redb in one transaction, and start-up recovery,
//! which is the same step for the segments a crash left behind.
//!
//! Most messages live for less than a segment: sent, received and deleted within seconds. Their operations
//! cancel out, so a checkpoint skips them: a message born (sent or moved in) and gone (deleted, moved away,
//! purged) within the applied operations never reaches the B-tree, and its body is written exactly once, to
//! the log. Counters, rewritten by nearly every commit, are written once per queue: their last value.

use std::borrow::Cow;
// Keyed by engine-assigned ids: hashed fast (docs/decisions/0014-hashing.md).
use foldhash::{HashMap, HashMapExt, HashSet, HashSetExt};
use std::path::Path;

use redb::Database;
use veil_core::store::MoveMessage;
use veil_core::{Payload, QueueId, StoreError, StoreOp};

use crate::io::StorageIo;
use crate::overlay::Key;
use crate::tables::{moved, redb_err, Tables};
use crate::wal;

/// Applies `ops` (in log order) to redb and records `generation` as applied, in one durable transaction.
pub fn checkpoint(db: &Database, ops: &[StoreOp], generation: u64) -> Result<(), StoreError> {
    let mut txn = db
        .begin_write()
        .map_err(redb_err!("starting a checkpoint"))?;
    // Two fsyncs instead of one, once per segment: a primary commit slot that later fails its checksums is
    // then reported as corruption rather than silently replaced by the previous commit, whose log segments
    // may already be gone.
    txn.set_two_phase_commit(true);
    {
        let mut tables = Tables::open(&txn)?;
        apply_logged(&mut tables, ops)?;
        tables.put_wal_applied(generation)?;
        tables.finish()?;
    }
    txn.commit().map_err(redb_err!("committing a checkpoint"))
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

/// Replays the log segments newer than redb's last checkpoint into redb, then removes every segment. A torn
/// tail is allowed only in the newest segment: an older one was complete and synced before the next began,
/// so damage there is corruption and start-up stops rather than skip acknowledged changes.
pub fn recover(db: &Database, io: &dyn StorageIo, dir: &Path) -> Result<Recovered, StoreError> {
    let applied = crate::tables::wal_applied(db)?;
    let segments = wal::list_segments(io, dir)?;
    let newest = segments.last().map_or(0, |(generation, _)| *generation);
    let mut ops = Vec::new();
    let mut recovered = Recovered {
        next_generation: applied.max(newest) + 1,
        ..Recovered::default()
    };
    // A segment is removed only once redb holds its checkpoint, so every generation before the oldest
    // segment on disk is applied. redb knowing less means its file went back to an older commit (a damaged
    // header or commit slot): the changes of the removed segments would be lost in silence.
    if let Some((oldest, path)) = segments.first() {
        if applied.saturating_add(1) < *oldest {
            return Err(StoreError::Corrupt(format!(
                "{} records log generation {applied} as applied, but the log starts at {}: the store \
                 file is older than its log (restore the data directory from a backup)",
                db_path(dir).display(),
                path.display()
            )));
        }
    }
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
        recovered.records += contents.records.len();
        ops.extend(contents.records.into_iter().flatten());
    }
    // Recorded even when the segments held no records, so that the check above holds at the next start.
    if newest > applied {
        checkpoint(db, &ops, newest)?;
    }
    if recovered.torn_bytes > 0 {
        tracing::warn!(
            bytes = recovered.torn_bytes,
            "cut a torn tail from the log: a write that was never acknowledged"
        );
    }
    for (_, path) in &segments {
        io.remove_file(path)
            .map_err(|e| StoreError::Io(format!("removing {}: {e}", path.display())))?;
    }
    Ok(recovered)
}

/// Applies `ops` in order, skipping what cancels out within them (see the module comment).
pub fn apply_logged(tables: &mut Tables, ops: &[StoreOp]) -> Result<(), StoreError> {
    let short_lived = short_lived(ops);
    let last_counters = last_counters(ops);
    // Payloads of short-lived messages between their birth and their end, for a move or a body replacement
    // that starts from them; never written to redb.
    let mut parked: HashMap<Key, Cow<'_, Payload>> = HashMap::new();
    for (index, op) in ops.iter().enumerate() {
        match op {
            StoreOp::PutMessage(put) if short_lived.contains(&(put.queue, put.seq)) => {
                parked.insert((put.queue, put.seq), Cow::Borrowed(&put.payload));
            }
            StoreOp::PutState { queue, seq, .. } | StoreOp::PutHistory { queue, seq, .. }
                if short_lived.contains(&(*queue, *seq)) => {}
            StoreOp::DeleteMessage { queue, seq } if short_lived.contains(&(*queue, *seq)) => {
                parked.remove(&(*queue, *seq));
            }
            StoreOp::ReplaceBody {
                queue,
                seq,
                body,
                body_md5,
            } if short_lived.contains(&(*queue, *seq)) => {
                if let Some(payload) = parked.get_mut(&(*queue, *seq)) {
                    let payload = payload.to_mut();
                    payload.body = body.clone();
                    payload.body_md5 = *body_md5;
                }
            }
            StoreOp::MoveMessage(move_op)
                if short_lived.contains(&move_op.from) || short_lived.contains(&move_op.to) =>
            {
                let MoveMessage {
                    from,
                    to,
                    state,
                    moved_from,
                    redrive,
                    fifo_group,
                } = &**move_op;
                let payload = if short_lived.contains(from) {
                    parked.remove(from).map(Cow::into_owned)
                } else {
                    tables.take_message(*from)?
                };
                let Some(payload) = payload.map(|p| moved(p, moved_from.clone())) else {
                    continue;
                };
                if short_lived.contains(to) {
                    parked.insert(*to, Cow::Owned(payload));
                } else {
                    tables.put_message(
                        *to,
                        &payload,
                        state,
                        (redrive.as_ref(), fifo_group.as_deref()),
                    )?;
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
    Ok(())
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
