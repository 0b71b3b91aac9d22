//! The schema, versioned: `migrations/V<n>__<name>.sql`, embedded in the binary and applied at start-up in one
//! transaction each. refinery records what it applied in `veil_schema_history`; a database that holds a
//! migration this binary does not know (a newer Veil migrated it) is refused rather than used.

use tokio_postgres::Client;
use veil_core::StoreError;

refinery::embed_migrations!("migrations");

/// The table refinery keeps its history in, inside Veil's schema.
pub const HISTORY_TABLE: &str = "veil_schema_history";

/// Applies the migrations this binary has and the database lacks. Nodes starting together take turns under
/// an advisory lock, so only one applies each migration.
/// `lock_timeout_ms` is the session's own, restored after the wait.
pub async fn run(client: &mut Client, lock_timeout_ms: u128) -> Result<(), StoreError> {
    apply(client, lock_timeout_ms, None).await
}

/// Applies the migrations up to `version` only: the upgrade tests build a database as an older Veil left
/// it, then open it with this one.
pub async fn run_until(client: &mut Client, version: u32) -> Result<(), StoreError> {
    apply(client, 0, Some(version)).await
}

async fn apply(
    client: &mut Client,
    lock_timeout_ms: u128,
    until: Option<u32>,
) -> Result<(), StoreError> {
    client
        // Waiting for another node's migration is not a stuck lock: no lock timeout for this wait.
        .batch_execute("SET lock_timeout = 0; SELECT pg_advisory_lock(7413370001)")
        .await
        .map_err(crate::connect::db_error)?;
    let mut runner = migrations::runner()
        .set_abort_missing(true)
        .set_abort_divergent(true);
    runner.set_migration_table_name(HISTORY_TABLE);
    if let Some(version) = until {
        runner = runner.set_target(refinery::Target::Version(version));
    }
    let applied = runner.run_async(client).await;
    let unlocked = client
        .batch_execute(&format!(
            "SELECT pg_advisory_unlock(7413370001); SET lock_timeout = {lock_timeout_ms}"
        ))
        .await
        .map_err(crate::connect::db_error);
    applied.map_err(|error| {
        StoreError::Incompatible(format!(
            "the database's schema does not match this binary's migrations ({error}); a newer Veil may have \
             migrated it"
        ))
    })?;
    unlocked.map(|_| ())
}
