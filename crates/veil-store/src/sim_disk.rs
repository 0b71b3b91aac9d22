//! A simulated disk for the store's crash and fault tests and the simulator (docs/decisions/0010-storage-io.md):
//! an in-memory [`StorageIo`] that keeps, for every file, what a sync made durable apart from what was only
//! written, and for every directory, which names a directory sync made durable.
//!
//! - [`SimDisk::crash`] is a power loss: each file falls back to its durable content plus what the seeded
//!   [`CrashPlan`] keeps of its unsynced writes (nothing, an in-order prefix whose last write is torn at any
//!   byte, or any subset); each directory keeps its durable names plus a seeded prefix of its unsynced
//!   creations, renames and removals. Files opened before the crash fail from then on, and so does every call
//!   through a [`SimDisk::process`] handle taken before it, so the store that was running cannot touch the disk
//!   the next one recovers from.
//! - [`SimFault`]s make the Nth (or a random) write, sync or read fail with EIO or ENOSPC, or a read return one
//!   flipped bit. A failed write may leave a prefix of its bytes; a failed sync may drop the dirty data, as
//!   Linux does after an fsync error.
//!
//! What it does not model: permissions (`prepare_dir` only creates the directory, durably), files shared by two
//! processes, and the order in which the store's own threads reach the disk (a seed replays the disk's
//! decisions, not the threads' interleaving).

use std::collections::{BTreeMap, HashSet};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use crate::io::{StorageFile, StorageIo};

/// The classes of calls a fault counts and strikes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IoOp {
    /// `write_at`, `set_len`, `allocate`, and the directory changes: creating, renaming, removing a file.
    Write,
    /// `sync_data`, `sync_all`, `sync_dir`.
    Sync,
    /// `read_at`, `read`.
    Read,
}

/// What an injected fault does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Effect {
    /// The call fails with EIO.
    Eio,
    /// The call fails with ENOSPC.
    Enospc,
    /// The read succeeds but one bit of what it returns is flipped (reads only; the stored bytes stay right).
    FlipBit,
    /// The power goes just before the call (a seeded [`CrashPlan`]), which then fails like every later call
    /// on a handle opened before: a crash in the middle of a commit, a checkpoint or a recovery.
    Crash,
}

/// When a fault strikes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum When {
    /// At the Nth matching call (from 1), counted from when the fault was injected; once.
    Nth(u64),
    /// At each matching call with this probability in millionths, drawn from the disk's seed.
    PerMillion(u32),
}

/// One fault: which calls it counts, when it strikes, what it does.
#[derive(Clone, Debug)]
pub struct SimFault {
    pub op: IoOp,
    pub when: When,
    pub effect: Effect,
    /// Only calls on paths whose file name contains this count (e.g. `"wal-"` for the log, `".redb"`).
    pub file_contains: Option<String>,
    calls: u64,
}

impl SimFault {
    pub fn nth(op: IoOp, nth: u64, effect: Effect) -> Self {
        Self::new(op, When::Nth(nth), effect)
    }

    pub fn random(op: IoOp, per_million: u32, effect: Effect) -> Self {
        Self::new(op, When::PerMillion(per_million), effect)
    }

    fn new(op: IoOp, when: When, effect: Effect) -> Self {
        Self {
            op,
            when,
            effect,
            file_contains: None,
            calls: 0,
        }
    }

    /// Restricts the fault to files whose name contains `part`.
    pub fn on_files(mut self, part: &str) -> Self {
        self.file_contains = Some(part.to_owned());
        self
    }
}

/// What a crash keeps of the writes no sync made durable.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum CrashPlan {
    /// Each file and directory draws one of the three below from the seed.
    #[default]
    Seeded,
    /// Nothing unsynced survives.
    LoseAll,
    /// The first unsynced writes survive, in order; the last that does is cut at a random byte.
    TornPrefix,
    /// Any subset of the unsynced writes survives (the disk wrote back some dirty pages, not others).
    SomeWrites,
}

/// Counts of what the disk has done, for reports and for checking that a run exercised what it meant to.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SimStats {
    pub writes: u64,
    pub syncs: u64,
    pub reads: u64,
    pub crashes: u64,
    pub faults_injected: u64,
    /// Unsynced writes that crashes kept (whole or torn).
    pub unsynced_writes_kept: u64,
    /// Unsynced writes that crashes kept torn.
    pub torn_writes_kept: u64,
}

/// A change to a file not yet made durable.
#[derive(Clone, Debug)]
enum FileOp {
    Write { offset: u64, data: Vec<u8> },
    SetLen(u64),
}

impl FileOp {
    fn apply(&self, content: &mut Vec<u8>) {
        match self {
            FileOp::Write { offset, data } => {
                let start = usize::try_from(*offset).unwrap_or(usize::MAX);
                let end = start.saturating_add(data.len());
                if content.len() < end {
                    content.resize(end, 0);
                }
                content[start..end].copy_from_slice(data);
            }
            FileOp::SetLen(len) => content.resize(usize::try_from(*len).unwrap_or(usize::MAX), 0),
        }
    }
}

#[derive(Debug, Default)]
struct Inode {
    durable: Vec<u8>,
    live: Vec<u8>,
    pending: Vec<FileOp>,
}

/// A change to a directory not yet made durable.
#[derive(Clone, Debug)]
enum DirOp {
    Link(String, u64),
    Unlink(String),
    Rename(String, String),
}

impl DirOp {
    fn apply(&self, entries: &mut BTreeMap<String, u64>) {
        match self {
            DirOp::Link(name, inode) => {
                entries.insert(name.clone(), *inode);
            }
            DirOp::Unlink(name) => {
                entries.remove(name);
            }
            DirOp::Rename(from, to) => {
                if let Some(inode) = entries.remove(from) {
                    entries.insert(to.clone(), inode);
                }
            }
        }
    }
}

#[derive(Debug, Default)]
struct Dir {
    durable: BTreeMap<String, u64>,
    live: BTreeMap<String, u64>,
    pending: Vec<DirOp>,
}

/// Even odds, in the millionths [`Rng::chance`] takes: whether a crash keeps each unsynced write of a file under
/// [`CrashPlan::SomeWrites`], and whether a failed sync drops the dirty data.
const EVEN_PER_MILLION: u32 = 500_000;

/// splitmix64: a seed is all it takes to replay the disk's decisions.
#[derive(Debug)]
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..=max`.
    fn up_to(&mut self, max: u64) -> u64 {
        self.next() % max.saturating_add(1).max(1)
    }

    fn chance(&mut self, per_million: u32) -> bool {
        self.next() % 1_000_000 < u64::from(per_million)
    }
}

#[derive(Debug)]
struct Disk {
    /// Faults draw from this one and crashes from the other, so that adding a fault does not change what a
    /// crash keeps.
    fault_rng: Rng,
    crash_rng: Rng,
    /// Bumped by every crash; a handle from an older epoch is dead.
    epoch: u64,
    next_inode: u64,
    /// Ordered, so that a crash draws from its seed for the files in the same order in every run.
    inodes: BTreeMap<u64, Inode>,
    dirs: BTreeMap<PathBuf, Dir>,
    faults: Vec<SimFault>,
    /// What an [`Effect::Crash`] keeps.
    crash_plan: CrashPlan,
    stats: SimStats,
}

/// The simulated disk. A clone is another handle on the same disk: the test keeps one to crash and inspect it,
/// the store is opened on another (`Arc::new(disk.clone())`).
#[derive(Clone, Debug)]
pub struct SimDisk {
    /// One lock for the whole disk: the store's writer, checkpointer and readers call in from their threads,
    /// and a crash must see every file at one instant.
    disk: Arc<Mutex<Disk>>,
    /// Set on a handle from [`SimDisk::process`]: its calls fail once the disk has crashed since.
    process_epoch: Option<u64>,
}

fn lock(disk: &Mutex<Disk>) -> MutexGuard<'_, Disk> {
    // A panic while holding it can only come from a bug in this file; the disk's state is still whole.
    disk.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn not_found(path: &Path) -> io::Error {
    io::Error::new(
        io::ErrorKind::NotFound,
        format!("{}: no such file", path.display()),
    )
}

fn split(path: &Path) -> io::Result<(PathBuf, String)> {
    let parent = path.parent().map(Path::to_path_buf).unwrap_or_default();
    let name = path
        .file_name()
        .and_then(|n| n.to_str())
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "not a file path"))?;
    Ok((parent, name.to_owned()))
}

impl Disk {
    fn dir_mut(&mut self, dir: &Path) -> io::Result<&mut Dir> {
        self.dirs.get_mut(dir).ok_or_else(|| not_found(dir))
    }

    fn lookup(&self, path: &Path) -> io::Result<u64> {
        let (dir, name) = split(path)?;
        self.dirs
            .get(&dir)
            .and_then(|d| d.live.get(&name))
            .copied()
            .ok_or_else(|| not_found(path))
    }

    fn inode(&mut self, inode: u64) -> io::Result<&mut Inode> {
        self.inodes
            .get_mut(&inode)
            .ok_or_else(|| io::Error::other("the file is gone"))
    }

    fn link_new(&mut self, path: &Path) -> io::Result<u64> {
        let (dir, name) = split(path)?;
        let inode = self.next_inode;
        let entries = self.dir_mut(&dir)?;
        if entries.live.contains_key(&name) {
            return Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                format!("{} exists", path.display()),
            ));
        }
        entries.live.insert(name.clone(), inode);
        entries.pending.push(DirOp::Link(name, inode));
        self.next_inode += 1;
        self.inodes.insert(inode, Inode::default());
        Ok(inode)
    }

    /// Counts the call against every matching fault and returns the effect of the first that strikes.
    fn fault(&mut self, op: IoOp, path: &Path) -> Option<Effect> {
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        let mut struck = None;
        for fault in &mut self.faults {
            let matches = fault.op == op
                && fault
                    .file_contains
                    .as_deref()
                    .is_none_or(|part| name.contains(part));
            if !matches {
                continue;
            }
            fault.calls += 1;
            let strikes = match fault.when {
                When::Nth(nth) => fault.calls == nth,
                When::PerMillion(p) => self.fault_rng.chance(p),
            };
            if strikes && struck.is_none() {
                struck = Some(fault.effect);
            }
        }
        if struck.is_some() {
            self.stats.faults_injected += 1;
        }
        if struck == Some(Effect::Crash) {
            self.crash(self.crash_plan);
        }
        struck
    }

    fn crash(&mut self, plan: CrashPlan) {
        self.epoch += 1;
        self.stats.crashes += 1;
        let mut dirs = std::mem::take(&mut self.dirs);
        for dir in dirs.values_mut() {
            let kept = match self.plan_for(plan) {
                CrashPlan::LoseAll => 0,
                _ => self.crash_rng.up_to(dir.pending.len() as u64) as usize,
            };
            let mut entries = std::mem::take(&mut dir.durable);
            for op in dir.pending.drain(..).take(kept) {
                op.apply(&mut entries);
            }
            dir.live = entries.clone();
            dir.durable = entries;
        }
        self.dirs = dirs;
        let reachable: HashSet<u64> = self
            .dirs
            .values()
            .flat_map(|d| d.durable.values().copied())
            .collect();
        self.inodes.retain(|inode, _| reachable.contains(inode));
        let mut inodes = std::mem::take(&mut self.inodes);
        for inode in inodes.values_mut() {
            self.crash_file(inode, plan);
        }
        self.inodes = inodes;
    }

    fn plan_for(&mut self, plan: CrashPlan) -> CrashPlan {
        match plan {
            CrashPlan::Seeded => match self.crash_rng.up_to(2) {
                0 => CrashPlan::LoseAll,
                1 => CrashPlan::TornPrefix,
                _ => CrashPlan::SomeWrites,
            },
            other => other,
        }
    }

    fn crash_file(&mut self, inode: &mut Inode, plan: CrashPlan) {
        let mut content = std::mem::take(&mut inode.durable);
        let pending = std::mem::take(&mut inode.pending);
        match self.plan_for(plan) {
            CrashPlan::TornPrefix => {
                let whole = self.crash_rng.up_to(pending.len() as u64) as usize;
                for op in &pending[..whole] {
                    op.apply(&mut content);
                }
                self.stats.unsynced_writes_kept += whole as u64;
                if let Some(FileOp::Write { offset, data }) = pending.get(whole) {
                    let cut = self.crash_rng.up_to(data.len() as u64) as usize;
                    if cut > 0 {
                        let torn = FileOp::Write {
                            offset: *offset,
                            data: data[..cut].to_vec(),
                        };
                        torn.apply(&mut content);
                        self.stats.unsynced_writes_kept += 1;
                        self.stats.torn_writes_kept += 1;
                    }
                }
            }
            CrashPlan::SomeWrites => {
                for op in &pending {
                    if self.crash_rng.chance(EVEN_PER_MILLION) {
                        op.apply(&mut content);
                        self.stats.unsynced_writes_kept += 1;
                    }
                }
            }
            CrashPlan::LoseAll | CrashPlan::Seeded => {}
        }
        inode.live = content.clone();
        inode.durable = content;
    }
}

/// Counts a directory change as a write; a fault fails it before it changes anything.
fn directory_change(disk: &mut Disk, path: &Path) -> io::Result<()> {
    disk.stats.writes += 1;
    match disk.fault(IoOp::Write, path) {
        None | Some(Effect::FlipBit) => Ok(()),
        Some(effect) => Err(errno(effect)),
    }
}

impl SimDisk {
    /// An empty disk whose crashes and random faults are drawn from `seed`.
    pub fn new(seed: u64) -> Self {
        Self {
            disk: Arc::new(Mutex::new(Disk {
                fault_rng: Rng(seed),
                crash_rng: Rng(seed ^ 0x5EED_C4A5_0000_0001),
                epoch: 0,
                next_inode: 1,
                inodes: BTreeMap::new(),
                dirs: BTreeMap::new(),
                faults: Vec::new(),
                crash_plan: CrashPlan::Seeded,
                stats: SimStats::default(),
            })),
            process_epoch: None,
        }
    }

    /// A handle for one run of the store, from now to the next crash: after a crash every call through it fails,
    /// not only those on files it had open, so that a store that was running when the power went cannot create,
    /// rename or remove a file on the disk its successor recovers from. Open the store on this; keep `self` to
    /// crash and inspect the disk.
    pub fn process(&self) -> SimDisk {
        let epoch = self.lock().epoch;
        SimDisk {
            disk: self.disk.clone(),
            process_epoch: Some(epoch),
        }
    }

    /// The disk, if this handle's process outlived no crash.
    fn alive(&self) -> io::Result<MutexGuard<'_, Disk>> {
        let disk = self.lock();
        match self.process_epoch {
            Some(epoch) if epoch != disk.epoch => Err(crashed()),
            _ => Ok(disk),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Disk> {
        lock(&self.disk)
    }

    fn handle(&self, disk: &Disk, inode: u64, path: &Path) -> Box<dyn StorageFile> {
        Box::new(SimFile {
            disk: self.disk.clone(),
            inode,
            epoch: disk.epoch,
            path: path.to_path_buf(),
        })
    }

    /// Power loss, with a crash plan drawn from the seed for each file and directory.
    pub fn crash(&self) {
        self.crash_with(CrashPlan::Seeded);
    }

    /// Power loss keeping what `plan` says of the unsynced writes. Every handle opened before fails from now on.
    pub fn crash_with(&self, plan: CrashPlan) {
        self.lock().crash(plan);
    }

    /// Sets what the crashes of [`Effect::Crash`] keep (by default a plan drawn from the seed).
    pub fn set_crash_plan(&self, plan: CrashPlan) {
        self.lock().crash_plan = plan;
    }

    /// Adds a fault; it counts calls from now.
    pub fn inject(&self, fault: SimFault) {
        self.lock().faults.push(fault);
    }

    /// Removes every fault (the disk is healthy again).
    pub fn heal(&self) {
        self.lock().faults.clear();
    }

    pub fn stats(&self) -> SimStats {
        self.lock().stats
    }

    /// The names in `dir` as the running system sees them (durable or not).
    pub fn names(&self, dir: &Path) -> Vec<String> {
        self.lock()
            .dirs
            .get(dir)
            .map(|d| d.live.keys().cloned().collect())
            .unwrap_or_default()
    }

    /// A file's content as the running system sees it, without counting a read or striking a fault.
    pub fn contents(&self, path: &Path) -> Option<Vec<u8>> {
        let mut disk = self.lock();
        let inode = disk.lookup(path).ok()?;
        disk.inode(inode).ok().map(|i| i.live.clone())
    }

    /// Bit rot: flips bit `bit` (0..8) of byte `offset` of a file, in what it holds and what it made durable.
    pub fn flip_stored_bit(&self, path: &Path, offset: usize, bit: u8) -> io::Result<()> {
        let mut disk = self.lock();
        let inode = disk.lookup(path)?;
        let inode = disk.inode(inode)?;
        for content in [&mut inode.live, &mut inode.durable] {
            if let Some(byte) = content.get_mut(offset) {
                *byte ^= 1 << (bit % 8);
            }
        }
        Ok(())
    }
}

/// An open file of a [`SimDisk`], dead once the disk crashes.
#[derive(Debug)]
struct SimFile {
    disk: Arc<Mutex<Disk>>,
    inode: u64,
    epoch: u64,
    path: PathBuf,
}

fn errno(effect: Effect) -> io::Error {
    match effect {
        Effect::Enospc => io::Error::from_raw_os_error(libc::ENOSPC),
        Effect::Crash => crashed(),
        Effect::Eio | Effect::FlipBit => io::Error::from_raw_os_error(libc::EIO),
    }
}

fn crashed() -> io::Error {
    io::Error::other("the simulated disk crashed after this file was opened")
}

impl SimFile {
    /// The disk, if this handle outlived no crash.
    fn disk(&self) -> io::Result<MutexGuard<'_, Disk>> {
        let disk = lock(&self.disk);
        if disk.epoch != self.epoch {
            return Err(crashed());
        }
        Ok(disk)
    }

    /// Records a change; a failing write may still leave a prefix of its bytes, as a real one can.
    fn change(&self, op: FileOp) -> io::Result<()> {
        let mut disk = self.disk()?;
        disk.stats.writes += 1;
        let fault = disk.fault(IoOp::Write, &self.path);
        let op = match (fault, op) {
            (None | Some(Effect::FlipBit), op) => op,
            (Some(Effect::Crash), _) => return Err(crashed()),
            (Some(effect), FileOp::Write { offset, data }) => {
                let cut = disk.fault_rng.up_to(data.len() as u64) as usize;
                let partial = FileOp::Write {
                    offset,
                    data: data[..cut].to_vec(),
                };
                let inode = disk.inode(self.inode)?;
                partial.apply(&mut inode.live);
                inode.pending.push(partial);
                return Err(errno(effect));
            }
            (Some(effect), FileOp::SetLen(_)) => return Err(errno(effect)),
        };
        let inode = disk.inode(self.inode)?;
        op.apply(&mut inode.live);
        inode.pending.push(op);
        Ok(())
    }

    fn sync(&self) -> io::Result<()> {
        let mut disk = self.disk()?;
        disk.stats.syncs += 1;
        if let Some(effect) = disk.fault(IoOp::Sync, &self.path) {
            if effect == Effect::Crash {
                return Err(crashed());
            }
            // Linux may drop the dirty pages of a failed fsync: the data is then neither durable nor readable.
            let dropped = disk.fault_rng.chance(EVEN_PER_MILLION);
            let inode = disk.inode(self.inode)?;
            if dropped {
                inode.pending.clear();
                inode.live = inode.durable.clone();
            }
            return Err(errno(effect));
        }
        let inode = disk.inode(self.inode)?;
        for op in inode.pending.drain(..) {
            op.apply(&mut inode.durable);
        }
        Ok(())
    }
}

/// Fills `out` from `content` at `offset`, flipping one seeded bit when the read's fault says so.
fn read_into(
    disk: &mut Disk,
    content_of: u64,
    out: &mut [u8],
    offset: u64,
    path: &Path,
) -> io::Result<()> {
    disk.stats.reads += 1;
    let fault = disk.fault(IoOp::Read, path);
    if let Some(effect @ (Effect::Eio | Effect::Enospc | Effect::Crash)) = fault {
        return Err(errno(effect));
    }
    let content = &disk.inode(content_of)?.live;
    let start = usize::try_from(offset).unwrap_or(usize::MAX);
    let end = start.saturating_add(out.len());
    let Some(bytes) = content.get(start..end) else {
        return Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            format!("{}: read past the end", path.display()),
        ));
    };
    out.copy_from_slice(bytes);
    if fault == Some(Effect::FlipBit) && !out.is_empty() {
        let bit = disk.fault_rng.up_to(out.len() as u64 * 8 - 1);
        out[(bit / 8) as usize] ^= 1 << (bit % 8);
    }
    Ok(())
}

impl StorageFile for SimFile {
    fn write_at(&self, data: &[u8], offset: u64) -> io::Result<()> {
        self.change(FileOp::Write {
            offset,
            data: data.to_vec(),
        })
    }

    fn read_at(&self, out: &mut [u8], offset: u64) -> io::Result<()> {
        let mut disk = self.disk()?;
        read_into(&mut disk, self.inode, out, offset, &self.path)
    }

    fn len(&self) -> io::Result<u64> {
        let mut disk = self.disk()?;
        Ok(disk.inode(self.inode)?.live.len() as u64)
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        self.change(FileOp::SetLen(len))
    }

    fn allocate(&self, len: u64) -> io::Result<()> {
        let current = self.len()?;
        self.change(FileOp::SetLen(current.max(len)))
    }

    fn sync_data(&self) -> io::Result<()> {
        self.sync()
    }

    fn sync_all(&self) -> io::Result<()> {
        self.sync()
    }
}

impl StorageIo for SimDisk {
    fn prepare_dir(&self, dir: &Path) -> io::Result<()> {
        let mut disk = self.alive()?;
        for ancestor in dir.ancestors() {
            disk.dirs.entry(ancestor.to_path_buf()).or_default();
        }
        Ok(())
    }

    fn create_new(&self, path: &Path) -> io::Result<Box<dyn StorageFile>> {
        let mut disk = self.alive()?;
        directory_change(&mut disk, path)?;
        let inode = disk.link_new(path)?;
        Ok(self.handle(&disk, inode, path))
    }

    fn open(&self, path: &Path, create: bool) -> io::Result<Box<dyn StorageFile>> {
        let mut disk = self.alive()?;
        let inode = match disk.lookup(path) {
            Ok(inode) => inode,
            Err(e) if create && e.kind() == io::ErrorKind::NotFound => {
                directory_change(&mut disk, path)?;
                disk.link_new(path)?
            }
            Err(e) => return Err(e),
        };
        Ok(self.handle(&disk, inode, path))
    }

    fn read(&self, path: &Path) -> io::Result<Vec<u8>> {
        let mut disk = self.alive()?;
        let inode = disk.lookup(path)?;
        let mut out = vec![0; disk.inode(inode)?.live.len()];
        read_into(&mut disk, inode, &mut out, 0, path)?;
        Ok(out)
    }

    fn file_len(&self, path: &Path) -> io::Result<u64> {
        let mut disk = self.alive()?;
        let inode = disk.lookup(path)?;
        Ok(disk.inode(inode)?.live.len() as u64)
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        let mut disk = self.alive()?;
        let ((from_dir, from_name), (to_dir, to_name)) = (split(from)?, split(to)?);
        if from_dir != to_dir {
            return Err(io::Error::other(
                "the simulated disk renames within one directory only",
            ));
        }
        disk.lookup(from)?;
        directory_change(&mut disk, to)?;
        let dir = disk.dir_mut(&from_dir)?;
        let op = DirOp::Rename(from_name, to_name);
        op.apply(&mut dir.live);
        dir.pending.push(op);
        Ok(())
    }

    fn remove_file(&self, path: &Path) -> io::Result<()> {
        let mut disk = self.alive()?;
        disk.lookup(path)?;
        directory_change(&mut disk, path)?;
        let (dir, name) = split(path)?;
        let dir = disk.dir_mut(&dir)?;
        let op = DirOp::Unlink(name);
        op.apply(&mut dir.live);
        dir.pending.push(op);
        Ok(())
    }

    fn list_dir(&self, dir: &Path) -> io::Result<Vec<String>> {
        let disk = self.alive()?;
        let entries = disk.dirs.get(dir).ok_or_else(|| not_found(dir))?;
        Ok(entries.live.keys().cloned().collect())
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        let mut disk = self.alive()?;
        disk.stats.syncs += 1;
        if let Some(effect) = disk.fault(IoOp::Sync, dir) {
            return Err(errno(effect));
        }
        let entries = disk.dir_mut(dir)?;
        for op in entries.pending.drain(..) {
            op.apply(&mut entries.durable);
        }
        Ok(())
    }
}
