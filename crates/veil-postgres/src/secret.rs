//! The cluster's shared secret: 32 random bytes made by the first node that needs them and read by every
//! other, so a receipt issued by one leader is accepted by the next, Azure user-delegation keys survive a
//! change of leader, and forwarded connections can prove they come from a node of this cluster.

use tokio_postgres::{Client, GenericClient};
use veil_core::StoreError;

use crate::connect::db_error;

pub const SECRET_BYTES: usize = 32;

/// The secret, made from `random` if no node made it before (the first writer wins a race).
pub async fn load_or_create(
    client: &Client,
    random: impl FnOnce() -> [u8; SECRET_BYTES],
) -> Result<[u8; SECRET_BYTES], StoreError> {
    let candidate = random();
    client
        .execute(
            "INSERT INTO veil_meta (key, value) VALUES ('secret', $1) ON CONFLICT (key) DO NOTHING",
            &[&candidate.as_slice()],
        )
        .await
        .map_err(db_error)?;
    load(client)
        .await?
        .ok_or_else(|| StoreError::Corrupt("the shared secret vanished after it was made".into()))
}

/// The secret, if a node made it (`None`: no cluster has run on this database and schema).
pub async fn load(client: &impl GenericClient) -> Result<Option<[u8; SECRET_BYTES]>, StoreError> {
    let Some(row) = client
        .query_opt("SELECT value FROM veil_meta WHERE key = 'secret'", &[])
        .await
        .map_err(db_error)?
    else {
        return Ok(None);
    };
    let value: Vec<u8> = row.get(0);
    value.as_slice().try_into().map(Some).map_err(|_| {
        StoreError::Corrupt(format!(
            "the shared secret holds {} bytes, expected {SECRET_BYTES}",
            value.len()
        ))
    })
}
