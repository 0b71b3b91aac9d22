//! The data directory is private to the user Veil runs as (docs/security.md "The data directory"): it holds
//! every message body (the log segments, redb) and the secret that receipts and Azure user-delegation keys
//! are derived from, so another local user who could read it could read messages and forge delegation keys
//! offline. The directory is mode 0700 and every file in it 0600, whatever the process's umask: Veil sets
//! the modes explicitly on what it creates, and tightens what it finds wider at every start, saying so in
//! the log.

use std::fs;
use std::io;
use std::path::Path;

use veil_core::StoreError;

/// The data directory's mode: its owner only.
pub const DIR_MODE: u32 = 0o700;
/// The mode of every file in the data directory: read and write by its owner only.
pub const FILE_MODE: u32 = 0o600;

/// Creates `dir` when missing and makes it and every entry directly in it private (0700 for directories,
/// 0600 for files). What was wider is tightened and logged once, with how many entries changed.
pub fn make_private(dir: &Path) -> Result<(), StoreError> {
    let io_error = |what: &str, path: &Path, e: io::Error| {
        StoreError::Io(format!("{what} {}: {e}", path.display()))
    };
    fs::create_dir_all(dir).map_err(|e| io_error("creating data directory", dir, e))?;
    let mut tightened = Vec::new();
    if tighten(dir, DIR_MODE).map_err(|e| io_error("securing", dir, e))? {
        tightened.push(dir.display().to_string());
    }
    let entries = fs::read_dir(dir).map_err(|e| io_error("listing", dir, e))?;
    for entry in entries {
        let entry = entry.map_err(|e| io_error("listing", dir, e))?;
        let path = entry.path();
        let kind = entry
            .file_type()
            .map_err(|e| io_error("reading", &path, e))?;
        // Links are left alone: their own mode means nothing and their target may be anyone's.
        let mode = if kind.is_dir() {
            DIR_MODE
        } else if kind.is_file() {
            FILE_MODE
        } else {
            continue;
        };
        if tighten(&path, mode).map_err(|e| io_error("securing", &path, e))? {
            tightened.push(path.display().to_string());
        }
    }
    if !tightened.is_empty() {
        tracing::warn!(
            count = tightened.len(),
            paths = %tightened.join(", "),
            "data directory entries were readable by other users: made private (directory 0700, files 0600)"
        );
    }
    Ok(())
}

/// Sets the permission bits of `path` to `mode` when any group or other bit is set (or the owner's differ);
/// returns whether it changed them.
#[cfg(unix)]
fn tighten(path: &Path, mode: u32) -> io::Result<bool> {
    use std::os::unix::fs::PermissionsExt;
    let current = fs::metadata(path)?.permissions().mode() & 0o7777;
    if current == mode {
        return Ok(false);
    }
    fs::set_permissions(path, fs::Permissions::from_mode(mode))?;
    Ok(true)
}

#[cfg(not(unix))]
fn tighten(_path: &Path, _mode: u32) -> io::Result<bool> {
    Ok(false)
}

/// Makes one file Veil created private: for files a library creates with its own mode (redb's database).
pub fn make_file_private(path: &Path) -> Result<(), StoreError> {
    tighten(path, FILE_MODE)
        .map(drop)
        .map_err(|e| StoreError::Io(format!("securing {}: {e}", path.display())))
}

/// Sets an open file's mode to [`FILE_MODE`] (fchmod), so that a umask that stripped even the owner's bits
/// cannot leave it otherwise.
pub fn set_file_private(file: &fs::File) -> io::Result<()> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        file.set_permissions(fs::Permissions::from_mode(FILE_MODE))?;
    }
    #[cfg(not(unix))]
    let _ = file;
    Ok(())
}

/// Options that create a file readable by its owner only, whatever the umask (the umask can only narrow a
/// mode, and 0600 is already the narrowest a file Veil reads back can have).
pub fn private_file_options() -> fs::OpenOptions {
    let mut options = fs::OpenOptions::new();
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, FILE_MODE);
    options
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn mode(path: &Path) -> u32 {
        fs::metadata(path).unwrap().permissions().mode() & 0o7777
    }

    #[test]
    fn a_new_data_directory_is_private() {
        let parent = tempfile::tempdir().unwrap();
        let dir = parent.path().join("data");
        make_private(&dir).unwrap();
        assert_eq!(mode(&dir), DIR_MODE);
    }

    #[test]
    fn a_wider_directory_and_its_files_are_tightened_at_start() {
        let parent = tempfile::tempdir().unwrap();
        let dir = parent.path().join("data");
        fs::create_dir(&dir).unwrap();
        fs::set_permissions(&dir, fs::Permissions::from_mode(0o755)).unwrap();
        let file = dir.join("veil.redb");
        fs::write(&file, b"x").unwrap();
        fs::set_permissions(&file, fs::Permissions::from_mode(0o644)).unwrap();
        let nested = dir.join("sub");
        fs::create_dir(&nested).unwrap();
        fs::set_permissions(&nested, fs::Permissions::from_mode(0o777)).unwrap();
        make_private(&dir).unwrap();
        assert_eq!(mode(&dir), DIR_MODE);
        assert_eq!(mode(&file), FILE_MODE);
        assert_eq!(mode(&nested), DIR_MODE);
    }

    #[test]
    fn a_private_file_is_created_0600_whatever_the_umask() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        private_file_options()
            .write(true)
            .create_new(true)
            .open(&path)
            .unwrap();
        assert_eq!(mode(&path), FILE_MODE);
    }
}
