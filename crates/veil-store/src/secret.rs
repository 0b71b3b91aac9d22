//! The receipt secret: 32 random bytes in `<data dir>/receipt.key`, created on first start and read on every
//! later one, so receipts stay valid across restarts and cannot be forged by anyone without the file.

use std::fs;
use std::io::Write;
use std::path::Path;

use veil_core::receipt::SECRET_BYTES;
use veil_core::StoreError;

const SECRET_FILE: &str = "receipt.key";

/// Reads the secret, or creates it (durably: the file and its directory entry are synced) if absent.
/// `random` supplies the bytes of a new secret.
pub fn load_or_create_secret(
    dir: &Path,
    random: impl FnOnce() -> [u8; SECRET_BYTES],
) -> Result<[u8; SECRET_BYTES], StoreError> {
    let path = dir.join(SECRET_FILE);
    match fs::read(&path) {
        Ok(bytes) => bytes.as_slice().try_into().map_err(|_| {
            StoreError::Corrupt(format!(
                "{} holds {} bytes, expected {SECRET_BYTES}",
                path.display(),
                bytes.len()
            ))
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let secret = random();
            let temp = dir.join(format!("{SECRET_FILE}.tmp"));
            let io = |e: std::io::Error| StoreError::Io(format!("writing {}: {e}", path.display()));
            crate::private::make_private(dir)?;
            let mut file = crate::private::private_file_options()
                .write(true)
                .create(true)
                .truncate(true)
                .open(&temp)
                .map_err(io)?;
            crate::private::set_file_private(&file).map_err(io)?;
            file.write_all(&secret).map_err(io)?;
            file.sync_all().map_err(io)?;
            fs::rename(&temp, &path).map_err(io)?;
            fs::File::open(dir).and_then(|d| d.sync_all()).map_err(io)?;
            Ok(secret)
        }
        Err(e) => Err(StoreError::Io(format!("reading {}: {e}", path.display()))),
    }
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
    fn truncated_secret_is_reported_not_replaced() {
        let dir = tempfile::tempdir().unwrap();
        fs::write(dir.path().join(SECRET_FILE), b"short").unwrap();
        assert!(matches!(
            load_or_create_secret(dir.path(), || [1; SECRET_BYTES]),
            Err(StoreError::Corrupt(_))
        ));
    }
}
