//! redb's tables and how each logged operation changes them. The checkpointer (and start-up recovery) apply
//! the log's operations here; nothing else writes to redb.
//!
//! Tables: `queues` (id → QueueRecord), `counters` (id → Counters), `states` ((queue, seq) → MessageState,
//! small and rewritten by every receive that outlives a checkpoint), `payloads` ((queue, seq) → Payload) and
//! `redrives` ((queue, seq) → MessageRedrivePolicy, only for messages sent with their own dead-letter rule),
//! `groups` ((queue, seq) → message group, only for messages of FIFO queues), `dedup` ((queue, key) →
//! DedupEntry, a FIFO queue's remembered deduplication ids), `move_tasks` (number → MoveTaskRecord, the
//! message move tasks of docs/semantics.md), `history` ((queue, seq) → DeliveryHistory, only for delivered
//! messages, deleted with them) and `meta` (name → bytes: the format version, the next queue id,
//! and the last log generation applied). Splitting state from payload lets start-up rebuild the engine's
//! index by scanning `states` alone.

use std::path::Path;

use redb::{Database, ReadableTable, ReadableTableMetadata, TableDefinition, WriteTransaction};
use veil_core::{
    Counters, DedupEntry, DeliveryHistory, MessageRedrivePolicy, MessageState, MoveTaskRecord,
    MovedFrom, Payload, QueueId, QueueRecord, StoreError, StoreOp,
};

use crate::codec::{decode, encode};

pub const QUEUES: TableDefinition<u64, &[u8]> = TableDefinition::new("queues");
pub const COUNTERS: TableDefinition<u64, &[u8]> = TableDefinition::new("counters");
pub const STATES: TableDefinition<(u64, u64), &[u8]> = TableDefinition::new("states");
pub const PAYLOADS: TableDefinition<(u64, u64), &[u8]> = TableDefinition::new("payloads");
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
/// Bytes of all payload records in `payloads`: with the file's size, tells start-up whether compacting pays.
pub const PAYLOAD_BYTES_KEY: &str = "payload_bytes";
/// The layout of the records in this file. A data directory written with another layout is refused with a
/// clear error rather than misread. 2: message states carry their body length, messages may have a redrive.
/// 4: payloads carry a message group and deduplication id; FIFO groups and deduplication ids are stored.
/// 5: changes are logged first (wal-*.log segments) and checkpointed into this file.
/// 6: queue settings carry `delivery_history` (postcard has no field defaults, so a format-5 queue record
/// would not decode), and delivered messages have a `history` entry.
const FORMAT_VERSION_KEY: &str = "format_version";
pub const FORMAT_VERSION: u32 = 6;

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
    payloads: redb::Table<'txn, (u64, u64), &'static [u8]>,
    redrives: redb::Table<'txn, (u64, u64), &'static [u8]>,
    groups: redb::Table<'txn, (u64, u64), &'static str>,
    dedup: redb::Table<'txn, (u64, &'static str), &'static [u8]>,
    move_tasks: redb::Table<'txn, u64, &'static [u8]>,
    history: redb::Table<'txn, (u64, u64), &'static [u8]>,
    meta: redb::Table<'txn, &'static str, &'static [u8]>,
    /// How the bytes of stored payload records changed in this transaction; [`Tables::finish`] adds it to
    /// `meta.payload_bytes`, which start-up reads to see whether the file is mostly free (cheaply: redb's own
    /// statistics walk every page).
    payload_bytes_delta: i64,
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
            payloads: txn
                .open_table(PAYLOADS)
                .map_err(redb_err!("opening payloads"))?,
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
            payload_bytes_delta: 0,
        })
    }

    /// Records what this transaction did to the stored payload bytes. Call once, before committing.
    pub fn finish(&mut self) -> Result<(), StoreError> {
        if self.payload_bytes_delta == 0 {
            return Ok(());
        }
        let stored = match self
            .meta
            .get(PAYLOAD_BYTES_KEY)
            .map_err(redb_err!("reading meta"))?
        {
            Some(guard) => u64::from_be_bytes(guard.value().try_into().map_err(|_| {
                StoreError::Corrupt(format!("meta {PAYLOAD_BYTES_KEY} is not 8 bytes"))
            })?),
            None => 0,
        };
        let updated = stored.saturating_add_signed(self.payload_bytes_delta);
        self.meta
            .insert(PAYLOAD_BYTES_KEY, updated.to_be_bytes().as_slice())
            .map_err(redb_err!("writing meta"))?;
        self.payload_bytes_delta = 0;
        Ok(())
    }

    fn count_payload_bytes(&mut self, added: usize, removed: usize) {
        self.payload_bytes_delta += added as i64 - removed as i64;
    }

    pub fn remove_messages(&mut self, queue: QueueId) -> Result<(), StoreError> {
        let range = (queue, 0u64)..=(queue, u64::MAX);
        self.states
            .retain_in(range.clone(), |_, _| false)
            .map_err(redb_err!("removing states"))?;
        let mut removed = 0;
        self.payloads
            .retain_in(range.clone(), |_, payload| {
                removed += payload.len();
                false
            })
            .map_err(redb_err!("removing payloads"))?;
        self.count_payload_bytes(0, removed);
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

    fn put_payload(&mut self, key: (u64, u64), payload: &Payload) -> Result<(), StoreError> {
        let encoded = encode(payload)?;
        let replaced = self
            .payloads
            .insert(key, encoded.as_slice())
            .map_err(redb_err!("writing a payload"))?
            .map_or(0, |old| old.value().len());
        self.count_payload_bytes(encoded.len(), replaced);
        Ok(())
    }

    fn take_payload(&mut self, key: (u64, u64)) -> Result<Option<Payload>, StoreError> {
        let bytes = self
            .payloads
            .remove(key)
            .map_err(redb_err!("removing a payload"))?
            .map(|g| g.value().to_vec());
        self.count_payload_bytes(0, bytes.as_ref().map_or(0, Vec::len));
        bytes.map(|b| decode(&b, "a payload")).transpose()
    }

    /// Applies one logged operation as it was logged.
    pub fn apply(&mut self, op: &StoreOp) -> Result<(), StoreError> {
        match op {
            StoreOp::PutQueue(record) => self.put_queue(record),
            StoreOp::DeleteQueue(queue) => self.delete_queue(*queue),
            StoreOp::PutCounters { queue, counters } => self.put_counters(*queue, counters),
            StoreOp::PutMessage(put) => self.put_message(
                (put.queue, put.seq),
                &put.payload,
                &put.state,
                (put.redrive.as_ref(), put.fifo_group.as_deref()),
            ),
            StoreOp::PutState { queue, seq, state } => self.put_state((*queue, *seq), state),
            StoreOp::DeleteMessage { queue, seq } => self.delete_message((*queue, *seq)),
            StoreOp::PurgeQueue(queue) => self.remove_messages(*queue),
            StoreOp::MoveMessage(move_op) => {
                // A message whose payload is already gone leaves nothing at `to`.
                if let Some(payload) = self.take_message(move_op.from)? {
                    let payload = moved(payload, move_op.moved_from.clone());
                    self.put_message(
                        move_op.to,
                        &payload,
                        &move_op.state,
                        (move_op.redrive.as_ref(), move_op.fifo_group.as_deref()),
                    )?;
                }
                Ok(())
            }
            StoreOp::ReplaceBody {
                queue,
                seq,
                body,
                body_md5,
            } => self.replace_body((*queue, *seq), body, *body_md5),
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
        payload: &Payload,
        state: &MessageState,
        (redrive, fifo_group): (Option<&MessageRedrivePolicy>, Option<&str>),
    ) -> Result<(), StoreError> {
        self.put_payload(key, payload)?;
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
        let removed = self
            .payloads
            .remove(key)
            .map_err(redb_err!("deleting a payload"))?
            .map_or(0, |old| old.value().len());
        self.count_payload_bytes(0, removed);
        self.remove_redrive(key)?;
        self.remove_group(key)?;
        self.remove_history(key)
    }

    /// Removes a message (state, redrive, group, history, payload), handing back its payload. A moved
    /// message's history is written anew at its new key by the operation after the move.
    pub fn take_message(&mut self, key: (u64, u64)) -> Result<Option<Payload>, StoreError> {
        self.states
            .remove(key)
            .map_err(redb_err!("deleting a moved state"))?;
        self.remove_redrive(key)?;
        self.remove_group(key)?;
        self.remove_history(key)?;
        self.take_payload(key)
    }

    fn replace_body(
        &mut self,
        key: (u64, u64),
        body: &bytes::Bytes,
        body_md5: [u8; 16],
    ) -> Result<(), StoreError> {
        if let Some(mut payload) = self.take_payload(key)? {
            payload.body = body.clone();
            payload.body_md5 = body_md5;
            self.put_payload(key, &payload)?;
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
