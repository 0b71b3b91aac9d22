//! The two candidate engines behind one small `Store` trait: Veil's layout of a
//! `payloads` table (key -> 1 KiB body, written once) and a `state` table
//! (key -> 40-byte mutable record), with every group of ops committed as one
//! transaction / write batch and made durable with one fsync.

use std::path::Path;

use redb::{ReadableDatabase, ReadableTable};

use crate::workload::{key, state, Bodies, Kind, Op};

/// Error type of the benchmark.
pub type Error = Box<dyn std::error::Error + Send + Sync>;
/// Result type of the benchmark.
pub type Result<T> = std::result::Result<T, Error>;

/// Which engine (and configuration) to run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EngineKind {
    /// redb, default durability (`Durability::Immediate`, one fdatasync per commit).
    Redb,
    /// fjall, default keyspace options, journal `PersistMode::SyncAll` per batch.
    Fjall,
    /// fjall with key-value separation (blob files) on `payloads`.
    FjallKv,
}

impl EngineKind {
    /// Parses an engine name from the command line.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "redb" => Some(Self::Redb),
            "fjall" => Some(Self::Fjall),
            "fjall-kv" => Some(Self::FjallKv),
            _ => None,
        }
    }

    /// The name used on the command line and in the report.
    pub fn name(self) -> &'static str {
        match self {
            Self::Redb => "redb",
            Self::Fjall => "fjall",
            Self::FjallKv => "fjall-kv",
        }
    }

    /// Opens (creating if needed) a store of this kind in `dir`.
    pub fn open(self, dir: &Path, cache_bytes: u64) -> Result<Box<dyn Store>> {
        Ok(match self {
            Self::Redb => Box::new(RedbStore::open(dir, cache_bytes)?),
            Self::Fjall => Box::new(FjallStore::open(dir, cache_bytes, false)?),
            Self::FjallKv => Box::new(FjallStore::open(dir, cache_bytes, true)?),
        })
    }
}

/// What the benchmark needs from a storage engine.
pub trait Store {
    /// Applies `ops` in one transaction / write batch and returns once it is
    /// durable (one fsync). Returns the payload bytes read by receives.
    fn apply_group(&mut self, ops: &[Op], bodies: &mut Bodies) -> Result<u64>;

    /// Reads the payloads of `keys` (one read transaction where the engine
    /// has them), returning the bytes read.
    fn read_payloads(&self, keys: &[[u8; 16]]) -> Result<u64>;

    /// Iterates the whole `state` table, returning the number of entries.
    fn scan_state(&self) -> Result<u64>;
}

const PAYLOADS: redb::TableDefinition<&[u8], &[u8]> = redb::TableDefinition::new("payloads");
const STATE: redb::TableDefinition<&[u8], &[u8]> = redb::TableDefinition::new("state");

/// redb: one file, one write transaction per group, `Durability::Immediate`.
pub struct RedbStore {
    db: redb::Database,
}

impl RedbStore {
    fn open(dir: &Path, cache_bytes: u64) -> Result<Self> {
        std::fs::create_dir_all(dir)?;
        let db = redb::Builder::new()
            .set_cache_size(usize::try_from(cache_bytes)?)
            .create(dir.join("veil.redb"))?;
        // Create both tables so that readers find them.
        let txn = db.begin_write()?;
        txn.open_table(PAYLOADS)?;
        txn.open_table(STATE)?;
        txn.commit()?;
        Ok(Self { db })
    }
}

impl Store for RedbStore {
    fn apply_group(&mut self, ops: &[Op], bodies: &mut Bodies) -> Result<u64> {
        let mut read = 0u64;
        // Default durability is Immediate: commit() returns after fdatasync.
        let txn = self.db.begin_write()?;
        {
            let mut payloads = txn.open_table(PAYLOADS)?;
            let mut states = txn.open_table(STATE)?;
            for op in ops {
                for seq in op.seqs() {
                    let k = key(op.queue, seq);
                    match op.kind {
                        Kind::Send => {
                            payloads.insert(&k[..], bodies.body(&k))?;
                            states.insert(&k[..], &state(seq, 0)[..])?;
                        }
                        Kind::Receive => {
                            let body = payloads.get(&k[..])?.ok_or("receive: missing payload")?;
                            read += body.value().len() as u64;
                            drop(body);
                            states.insert(&k[..], &state(seq, 1)[..])?;
                        }
                        Kind::Delete => {
                            payloads.remove(&k[..])?;
                            states.remove(&k[..])?;
                        }
                    }
                }
            }
        }
        txn.commit()?;
        Ok(read)
    }

    fn read_payloads(&self, keys: &[[u8; 16]]) -> Result<u64> {
        let txn = self.db.begin_read()?;
        let payloads = txn.open_table(PAYLOADS)?;
        let mut read = 0u64;
        for k in keys {
            let body = payloads.get(&k[..])?.ok_or("read: missing payload")?;
            read += body.value().len() as u64;
        }
        Ok(read)
    }

    fn scan_state(&self) -> Result<u64> {
        let txn = self.db.begin_read()?;
        let states = txn.open_table(STATE)?;
        let mut n = 0u64;
        for entry in states.iter()? {
            let (k, v) = entry?;
            // Touch key and value as an index rebuild would.
            n += u64::from(k.value().len() == 16 && v.value().len() == crate::workload::STATE_LEN);
        }
        Ok(n)
    }
}

/// fjall: one database, two keyspaces, one write batch per group committed
/// with `PersistMode::SyncAll` (journal written and fsync'd before return).
pub struct FjallStore {
    db: fjall::Database,
    payloads: fjall::Keyspace,
    states: fjall::Keyspace,
}

impl FjallStore {
    fn open(dir: &Path, cache_bytes: u64, kv_separation: bool) -> Result<Self> {
        let db = fjall::Database::builder(dir)
            .cache_size(cache_bytes)
            .open()?;
        let payloads = db.keyspace("payloads", || {
            let opts = fjall::KeyspaceCreateOptions::default();
            if kv_separation {
                opts.with_kv_separation(Some(fjall::KvSeparationOptions::default()))
            } else {
                opts
            }
        })?;
        let states = db.keyspace("state", fjall::KeyspaceCreateOptions::default)?;
        Ok(Self {
            db,
            payloads,
            states,
        })
    }
}

impl Store for FjallStore {
    fn apply_group(&mut self, ops: &[Op], bodies: &mut Bodies) -> Result<u64> {
        let mut read = 0u64;
        let mut batch = self
            .db
            .batch()
            .durability(Some(fjall::PersistMode::SyncAll));
        for op in ops {
            for seq in op.seqs() {
                let k = key(op.queue, seq);
                match op.kind {
                    Kind::Send => {
                        batch.insert(&self.payloads, &k[..], bodies.body(&k));
                        batch.insert(&self.states, &k[..], &state(seq, 0)[..]);
                    }
                    Kind::Receive => {
                        // The send was committed in an earlier group (see workload::LAG).
                        let body = self.payloads.get(k)?.ok_or("receive: missing payload")?;
                        read += body.len() as u64;
                        batch.insert(&self.states, &k[..], &state(seq, 1)[..]);
                    }
                    Kind::Delete => {
                        batch.remove(&self.payloads, &k[..]);
                        batch.remove(&self.states, &k[..]);
                    }
                }
            }
        }
        // Writes the batch to the journal and fsyncs it before applying it to memtables.
        batch.commit()?;
        Ok(read)
    }

    fn read_payloads(&self, keys: &[[u8; 16]]) -> Result<u64> {
        let mut read = 0u64;
        for k in keys {
            let body = self.payloads.get(k)?.ok_or("read: missing payload")?;
            read += body.len() as u64;
        }
        Ok(read)
    }

    fn scan_state(&self) -> Result<u64> {
        let mut n = 0u64;
        for guard in self.states.iter() {
            let (k, v) = guard.into_inner()?;
            n += u64::from(k.len() == 16 && v.len() == crate::workload::STATE_LEN);
        }
        Ok(n)
    }
}
