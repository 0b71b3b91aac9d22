//! The receipt secret: 32 random bytes in `<data dir>/receipt.key`, created on first start and read on every
//! later one, so receipts stay valid across restarts and cannot be forged by anyone without the file.

use std::path::Path;

use veil_core::receipt::SECRET_BYTES;
use veil_core::StoreError;

use crate::io::{FsIo, StorageIo};

const SECRET_FILE: &str = "receipt.key";

/// Reads the secret, or creates it (durably: the file and its directory entry are synced) if absent.
/// `random` supplies the bytes of a new secret.
pub fn load_or_create_secret(
    dir: &Path,
    random: impl FnOnce() -> [u8; SECRET_BYTES],
) -> Result<[u8; SECRET_BYTES], StoreError> {
    load_or_create_secret_on(&FsIo, dir, random)
}

/// [`load_or_create_secret`] on any storage (a simulated disk in tests).
pub fn load_or_create_secret_on(
    io: &dyn StorageIo,
    dir: &Path,
    random: impl FnOnce() -> [u8; SECRET_BYTES],
) -> Result<[u8; SECRET_BYTES], StoreError> {
    let path = dir.join(SECRET_FILE);
    match io.read(&path) {
        Ok(bytes) => bytes.as_slice().try_into().map_err(|_| {
            StoreError::Corrupt(format!(
                "{} holds {} bytes, expected {SECRET_BYTES}",
                path.display(),
                bytes.len()
            ))
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            create_secret(io, dir, &path, random())
        }
        Err(e) => Err(StoreError::Io(format!("reading {}: {e}", path.display()))),
    }
}

/// Writes the secret beside its final name, syncs it, renames it into place and syncs the directory: a crash
/// leaves either no secret or the whole one, never a short file.
fn create_secret(
    io: &dyn StorageIo,
    dir: &Path,
    path: &Path,
    secret: [u8; SECRET_BYTES],
) -> Result<[u8; SECRET_BYTES], StoreError> {
    let temp = dir.join(format!("{SECRET_FILE}.tmp"));
    let failed = |e: std::io::Error| StoreError::Io(format!("writing {}: {e}", path.display()));
    io.prepare_dir(dir).map_err(failed)?;
    // What a crash during an earlier creation left behind.
    match io.remove_file(&temp) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(failed(e)),
        _ => {}
    }
    let file = io.create_new(&temp).map_err(failed)?;
    file.write_at(&secret, 0).map_err(failed)?;
    file.sync_all().map_err(failed)?;
    io.rename(&temp, path).map_err(failed)?;
    io.sync_dir(dir).map_err(failed)?;
    Ok(secret)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secret_is_created_once_and_then_kept() {
        let dir = tempfile::tempdir().unwrap();
        let first = load_or_create_secret(dir.path(), || [7; SECRET_BYTES]).unwrap();
        let second = load_or_create_secret(dir.path(), || [8; SECRET_BYTES]).unwrap();
        assert_eq!(first, [7; SECRET_BYTES]);
        assert_eq!(second, first, "a restart must read the same secret");
    }

    #[test]
    fn a_crash_before_the_secret_is_durable_leaves_the_whole_secret_or_none_never_a_short_one() {
        for seed in 0..50 {
            let disk = crate::SimDisk::new(seed);
            let dir = Path::new("/sim");
            // The power goes at the directory sync that would make the rename durable.
            disk.inject(crate::SimFault::nth(
                crate::IoOp::Sync,
                2,
                crate::Effect::Crash,
            ));
            load_or_create_secret_on(&disk, dir, || [7; SECRET_BYTES]).expect_err("crashed");
            disk.heal();
            let secret = load_or_create_secret_on(&disk, dir, || [8; SECRET_BYTES])
                .unwrap_or_else(|e| panic!("seed {seed}: {e}"));
            assert!(
                secret == [7; SECRET_BYTES] || secret == [8; SECRET_BYTES],
                "seed {seed}"
            );
            let again = load_or_create_secret_on(&disk, dir, || [9; SECRET_BYTES]).expect("reads");
            assert_eq!(again, secret, "seed {seed}");
        }
    }

    #[test]
    fn a_secret_created_on_the_simulated_disk_is_read_back() {
        let disk = crate::SimDisk::new(1);
        let dir = Path::new("/sim");
        let secret = load_or_create_secret_on(&disk, dir, || [8; SECRET_BYTES]).expect("creates");
        let again = load_or_create_secret_on(&disk, dir, || [9; SECRET_BYTES]).expect("reads");
        assert_eq!(again, secret);
    }

    #[test]
    fn truncated_secret_is_reported_not_replaced() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(SECRET_FILE), b"short").unwrap();
        assert!(matches!(
            load_or_create_secret(dir.path(), || [1; SECRET_BYTES]),
            Err(StoreError::Corrupt(_))
        ));
    }
}
