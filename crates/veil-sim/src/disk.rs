//! The simulated disk as one run of the store (one process, from its start to its crash) sees it. Two things
//! veil-store's `SimDisk` leaves to its user:
//!
//! - After a power loss, every call of the store that was running fails, not only those on files it had
//!   open: the dead process must not create or remove a file on the disk its successor recovers from.
//! - The checkpointer runs on its own thread. The simulator waits for it between operations (`is_idle`), so
//!   that the disk sees one thread at a time and a seed replays the same calls, crash points included. A
//!   checkpoint is running while the log has more than one segment (the writer creates the next segment
//!   before handing the closed one over; the checkpointer removes it last) and has not failed.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use veil_store::{SimDisk, StorageFile, StorageIo};

/// The checkpointer's thread, as veil-store's writer names it.
const CHECKPOINT_THREAD: &str = "veil-store-checkpoint";

/// What every process of a run did to the log, counted across crashes.
#[derive(Debug, Default)]
pub struct Counters {
    /// Log segments created.
    pub segments: AtomicU64,
    /// Log segments the checkpointer applied and removed.
    pub checkpoints: AtomicU64,
}

/// One process's view of the disk.
#[derive(Debug)]
pub struct Incarnation {
    counters: Arc<Counters>,
    disk: SimDisk,
    dir: PathBuf,
    /// The disk's crash count when this process started: a higher one means the power went since.
    crashes_at_start: u64,
    /// Set when a call of the checkpointer's thread failed: that checkpoint is over, its segment stays.
    checkpoint_failed: Arc<AtomicBool>,
}

impl Incarnation {
    pub fn new(disk: &SimDisk, dir: &Path, counters: Arc<Counters>) -> Self {
        Self {
            counters,
            disk: disk.clone(),
            dir: dir.to_path_buf(),
            crashes_at_start: disk.stats().crashes,
            checkpoint_failed: Arc::new(AtomicBool::new(false)),
        }
    }

    /// The power went since this process started.
    pub fn dead(&self) -> bool {
        self.disk.stats().crashes != self.crashes_at_start
    }

    /// No checkpoint is running: the log has one segment, the last checkpoint failed, or the process is dead.
    pub fn is_idle(&self) -> bool {
        let segments = self
            .disk
            .names(&self.dir)
            .iter()
            .filter(|name| name.starts_with("wal-"))
            .count();
        segments <= 1 || self.checkpoint_failed.load(Ordering::Relaxed) || self.dead()
    }

    fn alive(&self) -> io::Result<()> {
        if self.dead() {
            return Err(power_lost());
        }
        Ok(())
    }

    fn wrap(&self, file: Box<dyn StorageFile>) -> Box<dyn StorageFile> {
        Box::new(Watched {
            inner: file,
            checkpoint_failed: self.checkpoint_failed.clone(),
        })
    }
}

fn is_segment(path: &Path) -> bool {
    path.file_name()
        .and_then(|n| n.to_str())
        .is_some_and(|n| n.starts_with("wal-"))
}

/// What a call of a process whose disk lost power gets.
fn power_lost() -> io::Error {
    io::Error::from_raw_os_error(libc::EIO)
}

/// Notes a failed call of the checkpointer's thread.
fn note<T>(checkpoint_failed: &AtomicBool, result: io::Result<T>) -> io::Result<T> {
    if result.is_err() && std::thread::current().name() == Some(CHECKPOINT_THREAD) {
        checkpoint_failed.store(true, Ordering::Relaxed);
    }
    result
}

/// A file of one process: the disk's own handle already fails after a crash; this one notes failures.
#[derive(Debug)]
struct Watched {
    inner: Box<dyn StorageFile>,
    checkpoint_failed: Arc<AtomicBool>,
}

impl StorageFile for Watched {
    fn write_at(&self, data: &[u8], offset: u64) -> io::Result<()> {
        note(&self.checkpoint_failed, self.inner.write_at(data, offset))
    }

    fn read_at(&self, out: &mut [u8], offset: u64) -> io::Result<()> {
        note(&self.checkpoint_failed, self.inner.read_at(out, offset))
    }

    fn len(&self) -> io::Result<u64> {
        note(&self.checkpoint_failed, self.inner.len())
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        note(&self.checkpoint_failed, self.inner.set_len(len))
    }

    fn allocate(&self, len: u64) -> io::Result<()> {
        note(&self.checkpoint_failed, self.inner.allocate(len))
    }

    fn sync_data(&self) -> io::Result<()> {
        note(&self.checkpoint_failed, self.inner.sync_data())
    }

    fn sync_all(&self) -> io::Result<()> {
        note(&self.checkpoint_failed, self.inner.sync_all())
    }
}

impl Incarnation {
    fn checked<T>(&self, call: impl FnOnce(&SimDisk) -> io::Result<T>) -> io::Result<T> {
        let result = self.alive().and_then(|()| call(&self.disk));
        note(&self.checkpoint_failed, result)
    }
}

impl StorageIo for Incarnation {
    fn prepare_dir(&self, dir: &Path) -> io::Result<()> {
        self.checked(|disk| disk.prepare_dir(dir))
    }

    fn create_new(&self, path: &Path) -> io::Result<Box<dyn StorageFile>> {
        let file = self.checked(|disk| disk.create_new(path))?;
        if is_segment(path) {
            self.counters.segments.fetch_add(1, Ordering::Relaxed);
        }
        Ok(self.wrap(file))
    }

    fn open(&self, path: &Path, create: bool) -> io::Result<Box<dyn StorageFile>> {
        self.checked(|disk| disk.open(path, create))
            .map(|f| self.wrap(f))
    }

    fn read(&self, path: &Path) -> io::Result<Vec<u8>> {
        self.checked(|disk| disk.read(path))
    }

    fn file_len(&self, path: &Path) -> io::Result<u64> {
        self.checked(|disk| disk.file_len(path))
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        self.checked(|disk| disk.rename(from, to))
    }

    fn remove_file(&self, path: &Path) -> io::Result<()> {
        self.checked(|disk| disk.remove_file(path))?;
        if is_segment(path) && std::thread::current().name() == Some(CHECKPOINT_THREAD) {
            self.counters.checkpoints.fetch_add(1, Ordering::Relaxed);
        }
        Ok(())
    }

    fn list_dir(&self, dir: &Path) -> io::Result<Vec<String>> {
        self.checked(|disk| disk.list_dir(dir))
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        self.checked(|disk| disk.sync_dir(dir))
    }
}
