//! The store's file I/O behind one trait (docs/decisions/0010-storage-io.md), so that the same log, checkpoint
//! and recovery code runs on the real file system ([`FsIo`]) and on a simulated disk (`sim_disk.rs`) that can
//! lose unsynced writes, tear them, fail and flip bits.
//!
//! The trait covers exactly what the store does to its data directory: create and open files, positioned
//! writes and reads, the two kinds of sync, length changes, rename, remove, listing and syncing the directory.
//! redb's database file goes through the same trait: [`StorageIo::redb_backend`] returns redb's own file
//! backend on the real file system (its locks and syscalls unchanged) and [`IoBackend`], an adapter over a
//! [`StorageFile`], elsewhere.
//!
//! [`FsIo`] makes the same syscalls, at the same points, as the store made before the trait: one `pwrite` and
//! one `fdatasync` per group commit; `posix_fallocate`, `fsync` and a directory `fsync` per new segment.

use std::fmt::Debug;
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::os::unix::io::AsRawFd;
use std::path::Path;

/// One open file of the data directory. Positioned I/O only: the store never relies on a file cursor, and a
/// shared handle (redb reads from many threads) then needs no lock. `len` without `is_empty`, as redb's
/// `StorageBackend` has it: a file's emptiness is never asked.
#[allow(clippy::len_without_is_empty)]
pub trait StorageFile: Debug + Send + Sync {
    /// Writes all of `data` at `offset`, growing the file (with zeros before `offset`) as needed.
    fn write_at(&self, data: &[u8], offset: u64) -> io::Result<()>;
    /// Fills `out` from `offset`; reading past the end is an error (`UnexpectedEof`).
    fn read_at(&self, out: &mut [u8], offset: u64) -> io::Result<()>;
    /// The file's length in bytes.
    fn len(&self) -> io::Result<u64>;
    /// Truncates or extends (with zeros) the file to `len` bytes.
    fn set_len(&self, len: u64) -> io::Result<()>;
    /// Reserves the first `len` bytes so that later writes into them need no allocation; bytes not yet
    /// written read as zeros. Where the file system cannot, it is a no-op.
    fn allocate(&self, len: u64) -> io::Result<()>;
    /// Makes the file's data (and the length needed to read it) durable: fdatasync.
    fn sync_data(&self) -> io::Result<()>;
    /// Makes the file's data and all its metadata durable: fsync. Its directory entry needs
    /// [`StorageIo::sync_dir`].
    fn sync_all(&self) -> io::Result<()>;
}

/// The file operations of one data directory's store. A created, renamed or removed name is durable only after
/// [`StorageIo::sync_dir`] of its directory, as on a real file system.
pub trait StorageIo: Debug + Send + Sync + 'static {
    /// Creates `dir` (and its parents) if missing and makes it private to the store's user where the backend
    /// has permissions (docs/security.md "The data directory").
    fn prepare_dir(&self, dir: &Path) -> io::Result<()>;
    /// Creates a new file, private to its owner, for writing; fails if it exists.
    fn create_new(&self, path: &Path) -> io::Result<Box<dyn StorageFile>>;
    /// Opens a file for reading and writing, creating it (empty) when `create` and it is missing.
    fn open(&self, path: &Path, create: bool) -> io::Result<Box<dyn StorageFile>>;
    /// The whole content of a file.
    fn read(&self, path: &Path) -> io::Result<Vec<u8>>;
    /// The length of a file in bytes.
    fn file_len(&self, path: &Path) -> io::Result<u64>;
    /// Renames `from` to `to`, replacing `to`.
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()>;
    /// Removes a file.
    fn remove_file(&self, path: &Path) -> io::Result<()>;
    /// The names of the entries directly in `dir`.
    fn list_dir(&self, dir: &Path) -> io::Result<Vec<String>>;
    /// Makes the entries of `dir` (creations, renames, removals) durable.
    fn sync_dir(&self, dir: &Path) -> io::Result<()>;
    /// The backend redb keeps its database file `path` on, created when missing. The default adapts
    /// [`StorageIo::open`]; the real file system overrides it with redb's own backend.
    fn redb_backend(&self, path: &Path) -> io::Result<RedbBackend> {
        Ok(RedbBackend::Io(IoBackend::new(self.open(path, true)?)))
    }
}

/// The real file system, with the store's syscalls of before the trait.
#[derive(Clone, Copy, Debug, Default)]
pub struct FsIo;

/// A file of [`FsIo`].
#[derive(Debug)]
struct FsFile(File);

impl StorageFile for FsFile {
    fn write_at(&self, data: &[u8], offset: u64) -> io::Result<()> {
        self.0.write_all_at(data, offset)
    }

    fn read_at(&self, out: &mut [u8], offset: u64) -> io::Result<()> {
        self.0.read_exact_at(out, offset)
    }

    fn len(&self) -> io::Result<u64> {
        Ok(self.0.metadata()?.len())
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        self.0.set_len(len)
    }

    /// A file system without fallocate (some network or overlay file systems) still works: appends into the
    /// file just cost a little more to sync.
    fn allocate(&self, len: u64) -> io::Result<()> {
        let Ok(length) = libc::off_t::try_from(len) else {
            return Ok(());
        };
        // SAFETY: posix_fallocate on a file descriptor this `File` owns and keeps open; no memory is passed.
        match unsafe { libc::posix_fallocate(self.0.as_raw_fd(), 0, length) } {
            0 | libc::EOPNOTSUPP | libc::EINVAL => Ok(()),
            errno => Err(io::Error::from_raw_os_error(errno)),
        }
    }

    fn sync_data(&self) -> io::Result<()> {
        self.0.sync_data()
    }

    fn sync_all(&self) -> io::Result<()> {
        self.0.sync_all()
    }
}

impl StorageIo for FsIo {
    fn prepare_dir(&self, dir: &Path) -> io::Result<()> {
        crate::private::make_private(dir).map_err(io::Error::other)
    }

    fn create_new(&self, path: &Path) -> io::Result<Box<dyn StorageFile>> {
        let file = crate::private::private_file_options()
            .create_new(true)
            .write(true)
            .open(path)?;
        crate::private::set_file_private(&file)?;
        Ok(Box::new(FsFile(file)))
    }

    fn open(&self, path: &Path, create: bool) -> io::Result<Box<dyn StorageFile>> {
        let file = crate::private::private_file_options()
            .read(true)
            .write(true)
            .create(create)
            .truncate(false)
            .open(path)?;
        Ok(Box::new(FsFile(file)))
    }

    fn read(&self, path: &Path) -> io::Result<Vec<u8>> {
        std::fs::read(path)
    }

    fn file_len(&self, path: &Path) -> io::Result<u64> {
        Ok(std::fs::metadata(path)?.len())
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        std::fs::rename(from, to)
    }

    fn remove_file(&self, path: &Path) -> io::Result<()> {
        std::fs::remove_file(path)
    }

    fn list_dir(&self, dir: &Path) -> io::Result<Vec<String>> {
        let mut names = Vec::new();
        for entry in std::fs::read_dir(dir)? {
            // A name that is not UTF-8 is none of the store's files.
            if let Ok(name) = entry?.file_name().into_string() {
                names.push(name);
            }
        }
        Ok(names)
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        File::open(dir)?.sync_all()
    }

    /// redb's own file backend, opened as redb's `Builder::create` opens it, so that its byte-range locks
    /// (one process per store file) and its I/O are unchanged. redb creates the file with the umask's mode,
    /// hence the tightening right after.
    fn redb_backend(&self, path: &Path) -> io::Result<RedbBackend> {
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)?;
        crate::private::make_file_private(path).map_err(io::Error::other)?;
        let backend = redb::backends::FileBackend::new(file).map_err(io::Error::other)?;
        Ok(RedbBackend::File(backend))
    }
}

/// redb's [`redb::StorageBackend`] over a [`StorageFile`]: each of redb's five I/O calls is one call of the
/// trait, so a simulated disk's faults and crashes reach the database file as they reach the log.
#[derive(Debug)]
pub struct IoBackend {
    file: Box<dyn StorageFile>,
}

impl IoBackend {
    pub fn new(file: Box<dyn StorageFile>) -> Self {
        Self { file }
    }
}

impl redb::StorageBackend for IoBackend {
    fn len(&self) -> io::Result<u64> {
        self.file.len()
    }

    fn read(&self, offset: u64, out: &mut [u8]) -> io::Result<()> {
        self.file.read_at(out, offset)
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        self.file.set_len(len)
    }

    fn sync_data(&self) -> io::Result<()> {
        self.file.sync_data()
    }

    fn write(&self, offset: u64, data: &[u8]) -> io::Result<()> {
        self.file.write_at(data, offset)
    }
}

/// The backend of redb's database file: redb's own on the real file system, the adapter elsewhere. An enum
/// rather than a box so that each keeps all of its methods (redb's file backend also implements the locks that
/// keep a second process off an open store).
#[derive(Debug)]
pub enum RedbBackend {
    File(redb::backends::FileBackend),
    Io(IoBackend),
}
