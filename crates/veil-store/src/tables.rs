//! redb's tables and how each logged operation changes them. The checkpointer (and start-up recovery) apply
//! the log's operations here; nothing else writes to redb.
//!
//! Tables: `queues` (id → QueueRecord), `counters` (id → Counters), `states` ((queue, seq) → MessageState,
//! small and rewritten by every receive that outlives a checkpoint), `bodies` ((queue, seq) → StoredBody: where
//! in a kept log segment the message's payload is, bodies.rs), `segment_bodies` ((generation, queue, seq), the
//! same locations by segment, so that a segment's survivors are found without a scan), `segments` (generation →
//! total and live body bytes of a kept segment), `redrives` ((queue, seq) → MessageRedrivePolicy, only for
//! messages sent with their own dead-letter rule), `groups` ((queue, seq) → message group, only for messages of
//! FIFO queues), `dedup` ((queue, key) → DedupEntry, a FIFO queue's remembered deduplication ids),
//! `move_tasks` (number → MoveTaskRecord, the message move tasks of docs/semantics.md), `history` ((queue,
//! seq) → DeliveryHistory, only for delivered messages, deleted with them) and `meta` (name → bytes: the
//! format version, the next queue id, and the last log generation applied). Splitting state from payload lets
//! start-up rebuild the engine's index by scanning `states` alone.

use std::path::Path;

use redb::{Database, ReadableTable, ReadableTableMetadata, TableDefinition, WriteTransaction};
// Keyed by log generations: hashed fast (docs/decisions/0014-hashing.md).
use foldhash::{HashMap, HashMapExt};
use veil_core::{
    Counters, DedupEntry, DeliveryHistory, MessageRedrivePolicy, MessageState, MoveTaskRecord,
    MovedFrom, Payload, QueueId, QueueRecord, StoreError, StoreOp,
};

use crate::bodies::{BodyAt, StoredBody};
use crate::codec::{decode, encode};

pub const QUEUES: TableDefinition<u64, &[u8]> = TableDefinition::new("queues");
pub const COUNTERS: TableDefinition<u64, &[u8]> = TableDefinition::new("counters");
pub const STATES: TableDefinition<(u64, u64), &[u8]> = TableDefinition::new("states");
pub const BODIES: TableDefinition<(u64, u64), &[u8]> = TableDefinition::new("bodies");
pub const SEGMENT_BODIES: TableDefinition<(u64, u64, u64), ()> =
    TableDefinition::new("segment_bodies");
pub const SEGMENTS: TableDefinition<u64, (u64, u64)> = TableDefinition::new("segments");
pub const REDRIVES: TableDefinition<(u64, u64), &[u8]> = TableDefinition::new("redrives");
pub const GROUPS: TableDefinition<(u64, u64), &str> = TableDefinition::new("groups");
pub const DEDUP: TableDefinition<(u64, &str), &[u8]> = TableDefinition::new("dedup");
pub const MOVE_TASKS: TableDefinition<u64, &[u8]> = TableDefinition::new("move_tasks");
pub const HISTORY: TableDefinition<(u64, u64), &[u8]> = TableDefinition::new("history");
pub const META: TableDefinition<&str, &[u8]> = TableDefinition::new("meta");
pub const NEXT_QUEUE_ID: &str = "next_queue_id";
/// The newest log generation whose operations redb holds: start-up replays only newer segments, so a crash
/// between a checkpoint's commit and the removal of its segment applies nothing twice.
pub const WAL_APPLIED_KEY: &str = "wal_applied";
/// Bytes the stored messages' rows take (their `bodies` entries plus an estimate of their other rows): with
/// the file's size, tells start-up whether compacting pays.
pub const ROW_BYTES_KEY: &str = "row_bytes";
/// The part of [`ROW_BYTES_KEY`] a stored message counts beyond its `bodies` entry: two 16-byte keys, its
/// `segment_bodies` key and a state of about 30 bytes.
const MESSAGE_OTHER_ROWS_BYTES: usize = 88;
/// The layout of the records in this file. A data directory written with another layout is refused with a
/// clear error rather than misread. 2: message states carry their body length, messages may have a redrive.
/// 4: payloads carry a message group and deduplication id; FIFO groups and deduplication ids are stored.
/// 5: changes are logged first (wal-*.log segments) and checkpointed into this file.
/// 6: queue settings carry `delivery_history` (postcard has no field defaults, so a format-5 queue record
/// would not decode), and delivered messages have a `history` entry.
/// 7: bodies stay in the log segments that wrote them; `bodies`, `segment_bodies` and `segments` replace
/// `payloads` (docs/decisions/0013-bodies-written-once.md).
/// 8: a queue's counters carry `purges` and `moves_out` (docs/semantics.md §9, "Totals").
const FORMAT_VERSION_KEY: &str = "format_version";
pub const FORMAT_VERSION: u32 = 8;

macro_rules! redb_err {
    ($context:expr) => {
        |e| StoreError::Io(format!("{}: {e}", $context))
    };
}
pub(crate) use redb_err;

/// Creates every table once so that readers never meet a missing one, and checks the format version.
pub fn prepare(db: &Database, path: &Path) -> Result<(), StoreError> {
    let mut txn = db
        .begin_write()
        .map_err(redb_err!("starting the first transaction"))?;
    txn.set_two_phase_commit(true); // as a checkpoint's (checkpoint.rs)
    {
        let tables = Tables::open(&txn)?;
        let mut meta = tables.meta;
        check_format_version(&mut meta, path)?;
    }
    txn.commit().map_err(redb_err!("creating tables"))
}

/// The newest log generation applied to redb (0: none).
pub fn wal_applied(db: &Database) -> Result<u64, StoreError> {
    read_meta_u64(db, WAL_APPLIED_KEY)
}

pub fn read_meta_u64(db: &Database, key: &str) -> Result<u64, StoreError> {
    use redb::ReadableDatabase;
    let txn = db.begin_read().map_err(redb_err!("starting a read"))?;
    let meta = txn.open_table(META).map_err(redb_err!("opening meta"))?;
    match meta.get(key).map_err(redb_err!("reading meta"))? {
        Some(guard) => {
            let bytes: [u8; 8] = guard
                .value()
                .try_into()
                .map_err(|_| StoreError::Corrupt(format!("meta {key} is not 8 bytes")))?;
            Ok(u64::from_be_bytes(bytes))
        }
        None => Ok(0),
    }
}

/// Stamps a new file with [`FORMAT_VERSION`]; refuses a file with another version, or with data but no
/// version (written before versions were recorded).
fn check_format_version(
    meta: &mut redb::Table<&'static str, &'static [u8]>,
    path: &Path,
) -> Result<(), StoreError> {
    let stored = meta
        .get(FORMAT_VERSION_KEY)
        .map_err(redb_err!("reading the format version"))?
        .map(|guard| guard.value().to_vec());
    match stored {
        Some(bytes) if bytes == FORMAT_VERSION.to_be_bytes() => Ok(()),
        Some(bytes) => Err(StoreError::Incompatible(format!(
            "{} has storage format {:?}; this Veil reads format {FORMAT_VERSION}",
            path.display(),
            bytes
        ))),
        None if meta
            .get(NEXT_QUEUE_ID)
            .map_err(redb_err!("reading meta"))?
            .is_some() =>
        {
            Err(StoreError::Incompatible(format!(
                "{} was written by a development build of Veil before storage format {FORMAT_VERSION}; \
                 move it away to start afresh",
                path.display()
            )))
        }
        None => {
            meta.insert(FORMAT_VERSION_KEY, FORMAT_VERSION.to_be_bytes().as_slice())
                .map_err(redb_err!("writing the format version"))?;
            Ok(())
        }
    }
}

/// Every table of one write transaction, opened once per group commit rather than once per operation.
pub struct Tables<'txn> {
    queues: redb::Table<'txn, u64, &'static [u8]>,
    counters: redb::Table<'txn, u64, &'static [u8]>,
    states: redb::Table<'txn, (u64, u64), &'static [u8]>,
    bodies: redb::Table<'txn, (u64, u64), &'static [u8]>,
    segment_bodies: redb::Table<'txn, (u64, u64, u64), ()>,
    segments: redb::Table<'txn, u64, (u64, u64)>,
    redrives: redb::Table<'txn, (u64, u64), &'static [u8]>,
    groups: redb::Table<'txn, (u64, u64), &'static str>,
    dedup: redb::Table<'txn, (u64, &'static str), &'static [u8]>,
    move_tasks: redb::Table<'txn, u64, &'static [u8]>,
    history: redb::Table<'txn, (u64, u64), &'static [u8]>,
    meta: redb::Table<'txn, &'static str, &'static [u8]>,
    /// How the bytes of stored message rows changed in this transaction; [`Tables::finish`] adds it to
    /// `meta.row_bytes`, which start-up reads to see whether the file is mostly free (cheaply: redb's own
    /// statistics walk every page).
    row_bytes_delta: i64,
    /// How each segment's live body bytes changed in this transaction; [`Tables::finish`] applies it.
    live_delta: HashMap<u64, i64>,
    /// The body bytes each segment checkpointed in this transaction logged; [`Tables::finish`] records them.
    logged_totals: HashMap<u64, u64>,
}

/// What a transaction left of the segments it touched.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Settled {
    /// Segments checkpointed now that hold bodies: kept, renamed `body-`.
    pub kept: Vec<u64>,
    /// Segments that hold no body any more: their files can go once the transaction is committed.
    pub removable: Vec<u64>,
}

impl<'txn> Tables<'txn> {
    pub fn open(txn: &'txn WriteTransaction) -> Result<Self, StoreError> {
        Ok(Self {
            queues: txn
                .open_table(QUEUES)
                .map_err(redb_err!("opening queues"))?,
            counters: txn
                .open_table(COUNTERS)
                .map_err(redb_err!("opening counters"))?,
            states: txn
                .open_table(STATES)
                .map_err(redb_err!("opening states"))?,
            bodies: txn
                .open_table(BODIES)
                .map_err(redb_err!("opening bodies"))?,
            segment_bodies: txn
                .open_table(SEGMENT_BODIES)
                .map_err(redb_err!("opening segment_bodies"))?,
            segments: txn
                .open_table(SEGMENTS)
                .map_err(redb_err!("opening segments"))?,
            redrives: txn
                .open_table(REDRIVES)
                .map_err(redb_err!("opening redrives"))?,
            groups: txn
                .open_table(GROUPS)
                .map_err(redb_err!("opening groups"))?,
            dedup: txn.open_table(DEDUP).map_err(redb_err!("opening dedup"))?,
            move_tasks: txn
                .open_table(MOVE_TASKS)
                .map_err(redb_err!("opening move_tasks"))?,
            history: txn
                .open_table(HISTORY)
                .map_err(redb_err!("opening history"))?,
            meta: txn.open_table(META).map_err(redb_err!("opening meta"))?,
            row_bytes_delta: 0,
            live_delta: HashMap::new(),
            logged_totals: HashMap::new(),
        })
    }

    /// Notes that segment `generation` is being checkpointed and logged `bytes` of bodies (counted as
    /// [`crate::bodies::counted_bytes`] counts them).
    pub fn note_logged(&mut self, generation: u64, bytes: u64) {
        *self.logged_totals.entry(generation).or_insert(0) += bytes;
    }

    /// Records what this transaction did to the stored row bytes and to each segment's live bytes, and says
    /// which segments are kept and which hold nothing any more. Call once, before committing.
    pub fn finish(&mut self) -> Result<Settled, StoreError> {
        self.finish_row_bytes()?;
        let mut settled = Settled::default();
        let mut touched: Vec<u64> = self.live_delta.keys().copied().collect();
        touched.extend(
            self.logged_totals
                .keys()
                .filter(|g| !self.live_delta.contains_key(g)),
        );
        touched.sort_unstable();
        for generation in touched {
            let newly_logged = self.logged_totals.get(&generation).copied();
            let (total, live) = match self
                .segments
                .get(generation)
                .map_err(redb_err!("reading a segment"))?
            {
                Some(guard) => guard.value(),
                None => (0, 0),
            };
            let total = total + newly_logged.unwrap_or(0);
            let delta = self.live_delta.get(&generation).copied().unwrap_or(0);
            let live = live.saturating_add_signed(delta);
            // The index is the truth about which bodies a segment still holds: a file goes only when no
            // stored body points into it, whatever the counters say.
            if self.holds_bodies(generation)? {
                self.segments
                    .insert(generation, (total.max(live), live))
                    .map_err(redb_err!("writing a segment"))?;
                if newly_logged.is_some() {
                    settled.kept.push(generation);
                }
            } else {
                self.segments
                    .remove(generation)
                    .map_err(redb_err!("removing a segment"))?;
                settled.removable.push(generation);
            }
        }
        self.live_delta.clear();
        self.logged_totals.clear();
        Ok(settled)
    }

    fn holds_bodies(&self, generation: u64) -> Result<bool, StoreError> {
        Ok(self
            .segment_bodies
            .range((generation, 0, 0)..=(generation, u64::MAX, u64::MAX))
            .map_err(redb_err!("reading segment_bodies"))?
            .next()
            .is_some())
    }

    fn finish_row_bytes(&mut self) -> Result<(), StoreError> {
        if self.row_bytes_delta == 0 {
            return Ok(());
        }
        let stored = match self
            .meta
            .get(ROW_BYTES_KEY)
            .map_err(redb_err!("reading meta"))?
        {
            Some(guard) => u64::from_be_bytes(guard.value().try_into().map_err(|_| {
                StoreError::Corrupt(format!("meta {ROW_BYTES_KEY} is not 8 bytes"))
            })?),
            None => 0,
        };
        let updated = stored.saturating_add_signed(self.row_bytes_delta);
        self.meta
            .insert(ROW_BYTES_KEY, updated.to_be_bytes().as_slice())
            .map_err(redb_err!("writing meta"))?;
        self.row_bytes_delta = 0;
        Ok(())
    }

    /// Stores `body` as the payload of `key`: its entry, its index rows and its segments' live bytes.
    pub fn put_body(&mut self, key: (u64, u64), body: &StoredBody) -> Result<(), StoreError> {
        let encoded = encode(body)?;
        let replaced = self
            .bodies
            .insert(key, encoded.as_slice())
            .map_err(redb_err!("writing a stored body"))?
            .map(|old| old.value().to_vec());
        if let Some(old_bytes) = replaced {
            let old: StoredBody = decode(&old_bytes, "a stored body")?;
            self.unaccount(key, &old, old_bytes.len())?;
        }
        for (at, bytes) in body.parts() {
            self.segment_bodies
                .insert((at.generation, key.0, key.1), ())
                .map_err(redb_err!("indexing a stored body"))?;
            *self.live_delta.entry(at.generation).or_insert(0) += i64::from(bytes);
        }
        self.row_bytes_delta += (encoded.len() + MESSAGE_OTHER_ROWS_BYTES) as i64;
        Ok(())
    }

    /// Removes the stored body of `key`, handing it back.
    pub fn take_body(&mut self, key: (u64, u64)) -> Result<Option<StoredBody>, StoreError> {
        let Some(bytes) = self
            .bodies
            .remove(key)
            .map_err(redb_err!("removing a stored body"))?
            .map(|g| g.value().to_vec())
        else {
            return Ok(None);
        };
        let body: StoredBody = decode(&bytes, "a stored body")?;
        self.unaccount(key, &body, bytes.len())?;
        Ok(Some(body))
    }

    /// The stored body of `key`, left in place.
    pub fn body(&self, key: (u64, u64)) -> Result<Option<StoredBody>, StoreError> {
        match self
            .bodies
            .get(key)
            .map_err(redb_err!("reading a stored body"))?
        {
            Some(guard) => decode(guard.value(), "a stored body").map(Some),
            None => Ok(None),
        }
    }

    /// Takes a removed body's index rows and live bytes off its segments.
    fn unaccount(
        &mut self,
        key: (u64, u64),
        body: &StoredBody,
        encoded_len: usize,
    ) -> Result<(), StoreError> {
        for (at, bytes) in body.parts() {
            self.segment_bodies
                .remove((at.generation, key.0, key.1))
                .map_err(redb_err!("unindexing a stored body"))?;
            *self.live_delta.entry(at.generation).or_insert(0) -= i64::from(bytes);
        }
        self.row_bytes_delta -= (encoded_len + MESSAGE_OTHER_ROWS_BYTES) as i64;
        Ok(())
    }

    /// Points `key` at its relocated copy if its stored body is still `from`; otherwise a later operation
    /// changed or removed it since the relocation read it, and that operation's result stands.
    pub fn relocate(
        &mut self,
        key: (u64, u64),
        from: &StoredBody,
        at: BodyAt,
        bytes: u32,
    ) -> Result<(), StoreError> {
        if self.body(key)?.as_ref() != Some(from) {
            return Ok(());
        }
        self.put_body(
            key,
            &StoredBody {
                at,
                bytes,
                replaced: None,
                moved_from: None,
            },
        )
    }

    pub fn remove_messages(&mut self, queue: QueueId) -> Result<(), StoreError> {
        let range = (queue, 0u64)..=(queue, u64::MAX);
        self.states
            .retain_in(range.clone(), |_, _| false)
            .map_err(redb_err!("removing states"))?;
        self.remove_bodies(queue)?;
        self.redrives
            .retain_in(range.clone(), |_, _| false)
            .map_err(redb_err!("removing redrives"))?;
        self.groups
            .retain_in(range.clone(), |_, _| false)
            .map_err(redb_err!("removing groups"))?;
        self.history
            .retain_in(range, |_, _| false)
            .map_err(redb_err!("removing histories"))?;
        Ok(())
    }

    /// Removes every stored body of `queue`, a bounded batch at a time so that a purge of millions holds no
    /// list of them all.
    fn remove_bodies(&mut self, queue: QueueId) -> Result<(), StoreError> {
        const BATCH: usize = 4096;
        loop {
            let keys: Vec<(u64, u64)> = self
                .bodies
                .range((queue, 0u64)..=(queue, u64::MAX))
                .map_err(redb_err!("listing stored bodies"))?
                .take(BATCH)
                .map(|entry| entry.map(|(key, _)| key.value()))
                .collect::<Result<_, _>>()
                .map_err(redb_err!("listing stored bodies"))?;
            if keys.is_empty() {
                return Ok(());
            }
            for key in keys {
                self.take_body(key)?;
            }
        }
    }

    /// A history is kept only for a stored message, so that none outlives its message (a move whose payload
    /// was already gone leaves nothing to describe).
    fn put_history(
        &mut self,
        key: (u64, u64),
        history: &DeliveryHistory,
    ) -> Result<(), StoreError> {
        if self
            .states
            .get(key)
            .map_err(redb_err!("reading a state"))?
            .is_none()
        {
            return Ok(());
        }
        self.history
            .insert(key, encode(history)?.as_slice())
            .map_err(redb_err!("writing a history"))?;
        Ok(())
    }

    /// Only delivered messages have a history; while none has, a delete needs no lookup.
    fn remove_history(&mut self, key: (u64, u64)) -> Result<(), StoreError> {
        if !self
            .history
            .is_empty()
            .map_err(redb_err!("checking histories"))?
        {
            self.history
                .remove(key)
                .map_err(redb_err!("deleting a history"))?;
        }
        Ok(())
    }

    fn put_group(&mut self, key: (u64, u64), group: &str) -> Result<(), StoreError> {
        self.groups
            .insert(key, group)
            .map_err(redb_err!("writing a group"))?;
        Ok(())
    }

    /// Only FIFO messages have a group; while no FIFO queue holds messages, a delete needs no lookup.
    fn remove_group(&mut self, key: (u64, u64)) -> Result<(), StoreError> {
        if !self
            .groups
            .is_empty()
            .map_err(redb_err!("checking groups"))?
        {
            self.groups
                .remove(key)
                .map_err(redb_err!("deleting a group"))?;
        }
        Ok(())
    }

    fn put_dedup(
        &mut self,
        queue: QueueId,
        key: &str,
        entry: &DedupEntry,
    ) -> Result<(), StoreError> {
        self.dedup
            .insert((queue, key), encode(entry)?.as_slice())
            .map_err(redb_err!("writing a deduplication id"))?;
        Ok(())
    }

    fn delete_dedup(&mut self, queue: QueueId, key: &str) -> Result<(), StoreError> {
        self.dedup
            .remove((queue, key))
            .map_err(redb_err!("deleting a deduplication id"))?;
        Ok(())
    }

    fn put_redrive(
        &mut self,
        key: (u64, u64),
        policy: &MessageRedrivePolicy,
    ) -> Result<(), StoreError> {
        self.redrives
            .insert(key, encode(policy)?.as_slice())
            .map_err(redb_err!("writing a redrive"))?;
        Ok(())
    }

    /// Most messages have no redrive; an empty table answers without a lookup.
    fn remove_redrive(&mut self, key: (u64, u64)) -> Result<(), StoreError> {
        if !self
            .redrives
            .is_empty()
            .map_err(redb_err!("checking redrives"))?
        {
            self.redrives
                .remove(key)
                .map_err(redb_err!("deleting a redrive"))?;
        }
        Ok(())
    }

    fn put_state(&mut self, key: (u64, u64), state: &MessageState) -> Result<(), StoreError> {
        self.states
            .insert(key, encode(state)?.as_slice())
            .map_err(redb_err!("writing a state"))?;
        Ok(())
    }

    /// Applies one logged operation as it was logged.
    pub fn apply(&mut self, op: &StoreOp) -> Result<(), StoreError> {
        match op {
            StoreOp::PutQueue(record) => self.put_queue(record),
            StoreOp::DeleteQueue(queue) => self.delete_queue(*queue),
            StoreOp::PutCounters { queue, counters } => self.put_counters(*queue, counters),
            StoreOp::PutState { queue, seq, state } => self.put_state((*queue, *seq), state),
            StoreOp::DeleteMessage { queue, seq } => self.delete_message((*queue, *seq)),
            StoreOp::PurgeQueue(queue) => self.remove_messages(*queue),
            // Their bodies are in the log: the checkpoint, which knows where, applies them
            // (checkpoint.rs).
            StoreOp::PutMessage(_) | StoreOp::MoveMessage(_) | StoreOp::ReplaceBody { .. } => Err(
                StoreError::Corrupt(format!("internal: {op:?} applied without its log location")),
            ),
            StoreOp::PutNextQueueId(next) => self.put_next_queue_id(*next),
            StoreOp::PutDedup { queue, key, entry } => self.put_dedup(*queue, key, entry),
            StoreOp::DeleteDedup { queue, key } => self.delete_dedup(*queue, key),
            StoreOp::PutMoveTask(record) => self.put_move_task(record),
            StoreOp::DeleteMoveTask { number } => self.delete_move_task(*number),
            StoreOp::PutHistory {
                queue,
                seq,
                history,
            } => self.put_history((*queue, *seq), history),
            // Refused by `RedbStore::submit` before they reach the log (the embedded store has no partitions).
            StoreOp::SendToInbox(_) | StoreOp::AcceptInbound(_) | StoreOp::ForwardInbound(_) => {
                Err(StoreError::Corrupt(
                    "the log holds an operation of a cluster partition's inbox".into(),
                ))
            }
        }
    }

    /// Records that redb now holds every operation of log segments up to `generation`.
    pub fn put_wal_applied(&mut self, generation: u64) -> Result<(), StoreError> {
        self.meta
            .insert(WAL_APPLIED_KEY, generation.to_be_bytes().as_slice())
            .map_err(redb_err!("writing meta"))?;
        Ok(())
    }

    fn put_queue(&mut self, record: &QueueRecord) -> Result<(), StoreError> {
        self.queues
            .insert(record.id, encode(record)?.as_slice())
            .map_err(redb_err!("writing a queue"))?;
        Ok(())
    }

    fn delete_queue(&mut self, queue: QueueId) -> Result<(), StoreError> {
        self.queues
            .remove(queue)
            .map_err(redb_err!("deleting a queue"))?;
        self.counters
            .remove(queue)
            .map_err(redb_err!("deleting counters"))?;
        self.dedup
            .retain_in((queue, "")..(queue + 1, ""), |_, _| false)
            .map_err(redb_err!("removing deduplication ids"))?;
        self.remove_messages(queue)
    }

    fn put_counters(&mut self, queue: QueueId, counters: &Counters) -> Result<(), StoreError> {
        self.counters
            .insert(queue, encode(counters)?.as_slice())
            .map_err(redb_err!("writing counters"))?;
        Ok(())
    }

    pub fn put_message(
        &mut self,
        key: (u64, u64),
        body: &StoredBody,
        state: &MessageState,
        (redrive, fifo_group): (Option<&MessageRedrivePolicy>, Option<&str>),
    ) -> Result<(), StoreError> {
        self.put_body(key, body)?;
        self.put_state(key, state)?;
        if let Some(policy) = redrive {
            self.put_redrive(key, policy)?;
        }
        if let Some(group) = fifo_group {
            self.put_group(key, group)?;
        }
        Ok(())
    }

    fn delete_message(&mut self, key: (u64, u64)) -> Result<(), StoreError> {
        self.states
            .remove(key)
            .map_err(redb_err!("deleting a state"))?;
        self.take_body(key)?;
        self.remove_redrive(key)?;
        self.remove_group(key)?;
        self.remove_history(key)
    }

    /// Removes a message (state, redrive, group, history, body), handing back its stored body. A moved
    /// message's history is written anew at its new key by the operation after the move.
    pub fn take_message(&mut self, key: (u64, u64)) -> Result<Option<StoredBody>, StoreError> {
        self.states
            .remove(key)
            .map_err(redb_err!("deleting a moved state"))?;
        self.remove_redrive(key)?;
        self.remove_group(key)?;
        self.remove_history(key)?;
        self.take_body(key)
    }

    /// Points a stored message's body at a `ReplaceBody` logged at `at`.
    pub fn replace_body(
        &mut self,
        key: (u64, u64),
        at: BodyAt,
        bytes: u32,
    ) -> Result<(), StoreError> {
        if let Some(mut body) = self.body(key)? {
            body.replaced = Some((at, bytes));
            self.put_body(key, &body)?;
        }
        Ok(())
    }

    fn put_move_task(&mut self, record: &MoveTaskRecord) -> Result<(), StoreError> {
        self.move_tasks
            .insert(record.number, encode(record)?.as_slice())
            .map_err(redb_err!("writing a move task"))?;
        Ok(())
    }

    fn delete_move_task(&mut self, number: u64) -> Result<(), StoreError> {
        self.move_tasks
            .remove(number)
            .map_err(redb_err!("deleting a move task"))?;
        Ok(())
    }

    fn put_next_queue_id(&mut self, next: QueueId) -> Result<(), StoreError> {
        self.meta
            .insert(NEXT_QUEUE_ID, next.to_be_bytes().as_slice())
            .map_err(redb_err!("writing meta"))?;
        Ok(())
    }
}

/// A payload as it arrives at its new queue.
pub fn moved(mut payload: Payload, moved_from: MovedFrom) -> Payload {
    payload.moved_from = Some(moved_from);
    payload
}
