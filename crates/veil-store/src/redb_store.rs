//! The redb implementation of the store port, with group commit.
//!
//! Tables: `queues` (id → QueueRecord), `counters` (id → Counters), `states` ((queue, seq) → MessageState,
//! small and rewritten by every receive), `payloads` ((queue, seq) → Payload, written once by a send) and
//! `redrives` ((queue, seq) → MessageRedrivePolicy, only for messages sent with their own dead-letter rule),
//! `groups` ((queue, seq) → message group, only for messages of FIFO queues), `dedup` ((queue, key) →
//! DedupEntry, a FIFO queue's remembered deduplication ids), `move_tasks` (number → MoveTaskRecord, the
//! message move tasks of docs/semantics.md) and `meta` (name → bytes, including the format
//! version). Splitting state from payload keeps a receive's write small and lets start-up rebuild
//! the engine's index by scanning `states` alone.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::thread::JoinHandle;

use redb::{
    Database, ReadableDatabase, ReadableTable, ReadableTableMetadata, TableDefinition,
    WriteTransaction,
};
use std::sync::Mutex;
use tokio::sync::oneshot;
use veil_core::store::{Commit, Snapshot};
use veil_core::{
    Counters, DedupEntry, MessageRedrivePolicy, MessageState, MoveTaskRecord, MovedFrom, Payload,
    QueueId, QueueRecord, Seq, Store, StoreError, StoreOp,
};

use crate::codec::{decode, encode};

const QUEUES: TableDefinition<u64, &[u8]> = TableDefinition::new("queues");
const COUNTERS: TableDefinition<u64, &[u8]> = TableDefinition::new("counters");
const STATES: TableDefinition<(u64, u64), &[u8]> = TableDefinition::new("states");
const PAYLOADS: TableDefinition<(u64, u64), &[u8]> = TableDefinition::new("payloads");
const REDRIVES: TableDefinition<(u64, u64), &[u8]> = TableDefinition::new("redrives");
const GROUPS: TableDefinition<(u64, u64), &str> = TableDefinition::new("groups");
const DEDUP: TableDefinition<(u64, &str), &[u8]> = TableDefinition::new("dedup");
const MOVE_TASKS: TableDefinition<u64, &[u8]> = TableDefinition::new("move_tasks");
const META: TableDefinition<&str, &[u8]> = TableDefinition::new("meta");
const NEXT_QUEUE_ID: &str = "next_queue_id";
/// The layout of the records in this file. A data directory written with another layout is refused with a
/// clear error rather than misread. 2: message states carry their body length, messages may have a redrive.
/// 4: payloads carry a message group and deduplication id; FIFO groups and deduplication ids are stored.
const FORMAT_VERSION_KEY: &str = "format_version";
const FORMAT_VERSION: u32 = 4;
const DATABASE_FILE: &str = "veil.redb";
/// Most operations one group commit applies; the rest wait for the next commit so that latency stays bounded.
const GROUP_OPS_MAX: usize = 50_000;

/// Whether a commit waits for fsync.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Durability {
    /// fsync before any success is returned (the default; docs/semantics.md §5).
    #[default]
    Durable,
    /// No fsync: a crash may lose acknowledged changes. Opt-in, for throughput experiments only.
    Relaxed,
}

/// redb's page cache when the configuration names none. Bounded so that resident memory does not grow with
/// the data (redb's own default is 1 GiB); message bodies are read from the OS page cache beyond it.
pub const CACHE_BYTES_DEFAULT: usize = 64 * 1024 * 1024;

#[derive(Clone, Debug)]
pub struct StoreOptions {
    pub durability: Durability,
    pub cache_bytes: usize,
}

impl Default for StoreOptions {
    fn default() -> Self {
        Self {
            durability: Durability::default(),
            cache_bytes: CACHE_BYTES_DEFAULT,
        }
    }
}

struct Job {
    ops: Vec<StoreOp>,
    done: oneshot::Sender<Result<(), StoreError>>,
}

/// The durable store. Submissions go to a single writer thread through a channel.
pub struct RedbStore {
    db: Arc<Database>,
    /// To the writer thread; `None` once closed. Behind a mutex only so that `close` can take it; sends are
    /// made under the engine's lock, so this one is never contended.
    jobs: Mutex<Option<mpsc::Sender<Job>>>,
    /// Joined by `close` so that the last commit finishes before the process exits.
    writer: Mutex<Option<JoinHandle<()>>>,
    path: PathBuf,
    /// Transactions committed so far; shared with the writer thread (group-commit tests and metrics read it).
    commits: Arc<AtomicU64>,
}

macro_rules! redb_err {
    ($context:expr) => {
        |e| StoreError::Io(format!("{}: {e}", $context))
    };
}

impl RedbStore {
    /// Opens (or creates) the store in `dir`.
    pub fn open(dir: &Path, options: StoreOptions) -> Result<Self, StoreError> {
        std::fs::create_dir_all(dir).map_err(|e| {
            StoreError::Io(format!("creating data directory {}: {e}", dir.display()))
        })?;
        let path = dir.join(DATABASE_FILE);
        let db =
            Database::create(&path).map_err(redb_err!(format!("opening {}", path.display())))?;
        // Create every table once so that readers never meet a missing one.
        let txn = db
            .begin_write()
            .map_err(redb_err!("starting the first transaction"))?;
        {
            txn.open_table(QUEUES)
                .map_err(redb_err!("opening table queues"))?;
            txn.open_table(COUNTERS)
                .map_err(redb_err!("opening table counters"))?;
            txn.open_table(STATES)
                .map_err(redb_err!("opening table states"))?;
            txn.open_table(PAYLOADS)
                .map_err(redb_err!("opening table payloads"))?;
            txn.open_table(REDRIVES)
                .map_err(redb_err!("opening table redrives"))?;
            txn.open_table(GROUPS)
                .map_err(redb_err!("opening table groups"))?;
            txn.open_table(DEDUP)
                .map_err(redb_err!("opening table dedup"))?;
            txn.open_table(MOVE_TASKS)
                .map_err(redb_err!("opening table move_tasks"))?;
            let mut meta = txn
                .open_table(META)
                .map_err(redb_err!("opening table meta"))?;
            check_format_version(&mut meta, &path)?;
        }
        txn.commit().map_err(redb_err!("creating tables"))?;
        let db = Arc::new(db);
        let (tx, rx) = mpsc::channel();
        let writer_db = db.clone();
        let durability = options.durability;
        let commits = Arc::new(AtomicU64::new(0));
        let writer_commits = commits.clone();
        let writer = std::thread::Builder::new()
            .name("veil-store-writer".into())
            .spawn(move || write_loop(&writer_db, &rx, durability, &writer_commits))
            .map_err(|e| StoreError::Io(format!("starting the writer thread: {e}")))?;
        Ok(Self {
            db,
            jobs: Mutex::new(Some(tx)),
            writer: Mutex::new(Some(writer)),
            path,
            commits,
        })
    }

    /// How many transactions the writer has committed (each one fsync in durable mode).
    pub fn commit_count(&self) -> u64 {
        self.commits.load(Ordering::Relaxed)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Stops accepting submissions, waits for the writer to commit what it has, and returns.
    pub fn close(&self) {
        self.jobs.lock().map(|mut jobs| jobs.take()).ok();
        let handle = self.writer.lock().ok().and_then(|mut w| w.take());
        if let Some(handle) = handle {
            if handle.join().is_err() {
                tracing::error!("the store writer thread panicked");
            }
        }
    }
}

impl Drop for RedbStore {
    fn drop(&mut self) {
        self.close();
    }
}

/// The writer: takes every job that is waiting, applies them in order in one transaction, commits once, then
/// answers them all. While it commits, new jobs queue up and form the next group.
fn write_loop(
    db: &Database,
    jobs: &mpsc::Receiver<Job>,
    durability: Durability,
    commits: &AtomicU64,
) {
    let mut failed: Option<String> = None;
    while let Ok(first) = jobs.recv() {
        let mut group = vec![first];
        let mut ops_in_group = group[0].ops.len();
        while ops_in_group < GROUP_OPS_MAX {
            match jobs.try_recv() {
                Ok(job) => {
                    ops_in_group += job.ops.len();
                    group.push(job);
                }
                Err(_) => break,
            }
        }
        let result = if let Some(reason) = &failed {
            Err(StoreError::Io(format!(
                "the store failed earlier and accepts no more writes: {reason}"
            )))
        } else if ops_in_group == 0 {
            Ok(()) // only barriers: everything before them is already committed
        } else {
            let committed = commit_group(db, &mut group, durability);
            commits.fetch_add(1, Ordering::Relaxed);
            committed
        };
        if let Err(error) = &result {
            // The engine's memory now holds changes the disk does not: refuse every later write so that no
            // success is ever returned for a change that is not durable.
            tracing::error!(%error, "store commit failed; the store is now read-only");
            failed.get_or_insert_with(|| error.to_string());
        }
        for job in group {
            let answer = match &result {
                Ok(()) => Ok(()),
                Err(e) => Err(StoreError::Io(e.to_string())),
            };
            let _receiver_gone_is_fine = job.done.send(answer);
        }
    }
}

fn commit_group(
    db: &Database,
    group: &mut [Job],
    durability: Durability,
) -> Result<(), StoreError> {
    let mut txn = db
        .begin_write()
        .map_err(redb_err!("starting a write transaction"))?;
    if durability == Durability::Relaxed {
        txn.set_durability(redb::Durability::None)
            .map_err(redb_err!("setting durability"))?;
    }
    {
        let mut tables = Tables::open(&txn)?;
        for job in group.iter_mut() {
            for op in std::mem::take(&mut job.ops) {
                tables.apply(op)?;
            }
        }
    }
    txn.commit().map_err(redb_err!("committing"))
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
struct Tables<'txn> {
    queues: redb::Table<'txn, u64, &'static [u8]>,
    counters: redb::Table<'txn, u64, &'static [u8]>,
    states: redb::Table<'txn, (u64, u64), &'static [u8]>,
    payloads: redb::Table<'txn, (u64, u64), &'static [u8]>,
    redrives: redb::Table<'txn, (u64, u64), &'static [u8]>,
    groups: redb::Table<'txn, (u64, u64), &'static str>,
    dedup: redb::Table<'txn, (u64, &'static str), &'static [u8]>,
    move_tasks: redb::Table<'txn, u64, &'static [u8]>,
    meta: redb::Table<'txn, &'static str, &'static [u8]>,
}

impl<'txn> Tables<'txn> {
    fn open(txn: &'txn WriteTransaction) -> Result<Self, StoreError> {
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
            meta: txn.open_table(META).map_err(redb_err!("opening meta"))?,
        })
    }

    fn remove_messages(&mut self, queue: QueueId) -> Result<(), StoreError> {
        let range = (queue, 0u64)..=(queue, u64::MAX);
        self.states
            .retain_in(range.clone(), |_, _| false)
            .map_err(redb_err!("removing states"))?;
        self.payloads
            .retain_in(range.clone(), |_, _| false)
            .map_err(redb_err!("removing payloads"))?;
        self.redrives
            .retain_in(range.clone(), |_, _| false)
            .map_err(redb_err!("removing redrives"))?;
        self.groups
            .retain_in(range, |_, _| false)
            .map_err(redb_err!("removing groups"))?;
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
        self.payloads
            .insert(key, encode(payload)?.as_slice())
            .map_err(redb_err!("writing a payload"))?;
        Ok(())
    }

    fn take_payload(&mut self, key: (u64, u64)) -> Result<Option<Payload>, StoreError> {
        let bytes = self
            .payloads
            .remove(key)
            .map_err(redb_err!("removing a payload"))?
            .map(|g| g.value().to_vec());
        bytes.map(|b| decode(&b, "a payload")).transpose()
    }

    fn apply(&mut self, op: StoreOp) -> Result<(), StoreError> {
        match op {
            StoreOp::PutQueue(record) => self.put_queue(&record),
            StoreOp::DeleteQueue(queue) => self.delete_queue(queue),
            StoreOp::PutCounters { queue, counters } => self.put_counters(queue, &counters),
            StoreOp::PutMessage {
                queue,
                seq,
                payload,
                state,
                redrive,
                fifo_group,
            } => self.put_message(
                (queue, seq),
                &payload,
                &state,
                (redrive.as_ref(), fifo_group.as_deref()),
            ),
            StoreOp::PutState { queue, seq, state } => self.put_state((queue, seq), &state),
            StoreOp::DeleteMessage { queue, seq } => self.delete_message((queue, seq)),
            StoreOp::PurgeQueue(queue) => self.remove_messages(queue),
            StoreOp::MoveMessage {
                from,
                to,
                state,
                moved_from,
                redrive,
                fifo_group,
            } => self.move_message(
                (from, to),
                &state,
                moved_from,
                (redrive.as_ref(), fifo_group.as_deref()),
            ),
            StoreOp::ReplaceBody {
                queue,
                seq,
                body,
                body_md5,
            } => self.replace_body((queue, seq), body, body_md5),
            StoreOp::PutNextQueueId(next) => self.put_next_queue_id(next),
            StoreOp::PutDedup { queue, key, entry } => self.put_dedup(queue, &key, &entry),
            StoreOp::DeleteDedup { queue, key } => self.delete_dedup(queue, &key),
            StoreOp::PutMoveTask(record) => self.put_move_task(&record),
            StoreOp::DeleteMoveTask { number } => self.delete_move_task(number),
        }
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

    fn put_message(
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
        self.payloads
            .remove(key)
            .map_err(redb_err!("deleting a payload"))?;
        self.remove_redrive(key)?;
        self.remove_group(key)
    }

    /// A message whose payload is already gone leaves nothing at `to`.
    fn move_message(
        &mut self,
        (from, to): ((u64, u64), (u64, u64)),
        state: &MessageState,
        moved_from: MovedFrom,
        extras: (Option<&MessageRedrivePolicy>, Option<&str>),
    ) -> Result<(), StoreError> {
        self.states
            .remove(from)
            .map_err(redb_err!("deleting a moved state"))?;
        self.remove_redrive(from)?;
        self.remove_group(from)?;
        if let Some(mut payload) = self.take_payload(from)? {
            payload.moved_from = Some(moved_from);
            self.put_message(to, &payload, state, extras)?;
        }
        Ok(())
    }

    fn replace_body(
        &mut self,
        key: (u64, u64),
        body: bytes::Bytes,
        body_md5: [u8; 16],
    ) -> Result<(), StoreError> {
        if let Some(mut payload) = self.take_payload(key)? {
            payload.body = body;
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

impl Store for RedbStore {
    fn load_queues(&self) -> Result<Snapshot, StoreError> {
        let txn = self.db.begin_read().map_err(redb_err!("starting a read"))?;
        let meta = txn.open_table(META).map_err(redb_err!("opening meta"))?;
        let next_queue_id = match meta.get(NEXT_QUEUE_ID).map_err(redb_err!("reading meta"))? {
            Some(guard) => {
                let bytes: [u8; 8] = guard
                    .value()
                    .try_into()
                    .map_err(|_| StoreError::Corrupt("next_queue_id is not 8 bytes".into()))?;
                u64::from_be_bytes(bytes)
            }
            None => 1,
        };
        let queues_table = txn
            .open_table(QUEUES)
            .map_err(redb_err!("opening queues"))?;
        let counters_table = txn
            .open_table(COUNTERS)
            .map_err(redb_err!("opening counters"))?;
        let mut queues = Vec::new();
        for entry in queues_table.iter().map_err(redb_err!("listing queues"))? {
            let (id, value) = entry.map_err(redb_err!("reading a queue"))?;
            let record: QueueRecord = decode(value.value(), "a queue record")?;
            let counters: Counters = match counters_table
                .get(id.value())
                .map_err(redb_err!("reading counters"))?
            {
                Some(guard) => decode(guard.value(), "queue counters")?,
                None => Counters::default(),
            };
            queues.push((record, counters));
        }
        Ok(Snapshot {
            next_queue_id,
            queues,
        })
    }

    fn load_messages(
        &self,
        each: &mut dyn FnMut(QueueId, Seq, MessageState),
    ) -> Result<(), StoreError> {
        let txn = self.db.begin_read().map_err(redb_err!("starting a read"))?;
        let states = txn
            .open_table(STATES)
            .map_err(redb_err!("opening states"))?;
        for entry in states.iter().map_err(redb_err!("scanning states"))? {
            let (key, value) = entry.map_err(redb_err!("reading a state"))?;
            let (queue, seq) = key.value();
            each(queue, seq, decode(value.value(), "a message state")?);
        }
        Ok(())
    }

    fn load_redrives(
        &self,
        each: &mut dyn FnMut(QueueId, Seq, MessageRedrivePolicy),
    ) -> Result<(), StoreError> {
        let txn = self.db.begin_read().map_err(redb_err!("starting a read"))?;
        let redrives = txn
            .open_table(REDRIVES)
            .map_err(redb_err!("opening redrives"))?;
        for entry in redrives.iter().map_err(redb_err!("scanning redrives"))? {
            let (key, value) = entry.map_err(redb_err!("reading a redrive"))?;
            let (queue, seq) = key.value();
            each(queue, seq, decode(value.value(), "a message redrive")?);
        }
        Ok(())
    }

    fn load_groups(&self, each: &mut dyn FnMut(QueueId, Seq, String)) -> Result<(), StoreError> {
        let txn = self.db.begin_read().map_err(redb_err!("starting a read"))?;
        let groups = txn
            .open_table(GROUPS)
            .map_err(redb_err!("opening groups"))?;
        for entry in groups.iter().map_err(redb_err!("scanning groups"))? {
            let (key, value) = entry.map_err(redb_err!("reading a group"))?;
            let (queue, seq) = key.value();
            each(queue, seq, value.value().to_owned());
        }
        Ok(())
    }

    fn load_dedup(
        &self,
        each: &mut dyn FnMut(QueueId, String, DedupEntry),
    ) -> Result<(), StoreError> {
        let txn = self.db.begin_read().map_err(redb_err!("starting a read"))?;
        let dedup = txn.open_table(DEDUP).map_err(redb_err!("opening dedup"))?;
        for entry in dedup.iter().map_err(redb_err!("scanning dedup"))? {
            let (key, value) = entry.map_err(redb_err!("reading a deduplication id"))?;
            let (queue, id) = key.value();
            each(
                queue,
                id.to_owned(),
                decode(value.value(), "a deduplication id")?,
            );
        }
        Ok(())
    }

    fn load_move_tasks(&self) -> Result<Vec<MoveTaskRecord>, StoreError> {
        let txn = self.db.begin_read().map_err(redb_err!("starting a read"))?;
        let tasks = txn
            .open_table(MOVE_TASKS)
            .map_err(redb_err!("opening move_tasks"))?;
        let mut records = Vec::new();
        for entry in tasks.iter().map_err(redb_err!("scanning move_tasks"))? {
            let (_, value) = entry.map_err(redb_err!("reading a move task"))?;
            records.push(decode(value.value(), "a move task")?);
        }
        Ok(records)
    }

    fn submit(&self, ops: Vec<StoreOp>) -> Commit {
        let (done, answer) = oneshot::channel();
        let sent = match self.jobs.lock() {
            Ok(jobs) => jobs
                .as_ref()
                .is_some_and(|tx| tx.send(Job { ops, done }).is_ok()),
            Err(_) => false,
        };
        Box::pin(async move {
            if !sent {
                return Err(StoreError::Closed);
            }
            answer.await.unwrap_or(Err(StoreError::Closed))
        })
    }

    fn read_payloads(
        &self,
        queue: QueueId,
        seqs: &[Seq],
    ) -> Result<Vec<Option<Payload>>, StoreError> {
        let txn = self.db.begin_read().map_err(redb_err!("starting a read"))?;
        let payloads = txn
            .open_table(PAYLOADS)
            .map_err(redb_err!("opening payloads"))?;
        seqs.iter()
            .map(|&seq| {
                match payloads
                    .get((queue, seq))
                    .map_err(redb_err!("reading a payload"))?
                {
                    Some(guard) => decode(guard.value(), "a payload").map(Some),
                    None => Ok(None),
                }
            })
            .collect()
    }
}
