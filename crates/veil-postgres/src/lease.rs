//! The leader lease (docs/decisions/0007-scale-out.md). One row says which node runs the engine, under which
//! epoch and until when; its expiry is on the database's clock, so nodes' clocks never decide who leads. A
//! node takes the lease only when it has lapsed (or is its own), bumping the epoch; the holder renews it well
//! inside its term. The epoch fences a deposed leader: `PgStore` checks it inside every write transaction
//! (`veil_fence`, FOR KEY SHARE), and a takeover locks the row FOR UPDATE, waiting for those checks in flight.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio_postgres::Client;
use veil_core::StoreError;

use crate::connect::db_error;

/// Where the leader takes the other nodes' engine calls: its internal RPC service (`host:port`,
/// crates/veil-cluster). A row written by an older build, which named relay listeners instead, reads as no
/// address: its followers answer "unavailable" until a node of this build leads.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaderAddrs {
    #[serde(default)]
    pub rpc: String,
}

/// A lease this node holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Lease {
    pub node: String,
    /// Bumped by every change of holder; writes under an older epoch are refused.
    pub epoch: i64,
}

/// Who leads now, as another node sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaseHolder {
    pub node: String,
    pub epoch: i64,
    pub addrs: LeaderAddrs,
}

/// Takes the lease for `ttl` if it has lapsed or is `node`'s already; `None` while another node holds it.
pub async fn try_acquire(
    client: &Client,
    node: &str,
    addrs: &LeaderAddrs,
    ttl: Duration,
) -> Result<Option<Lease>, StoreError> {
    let addrs = serde_json::to_value(addrs)
        .map_err(|error| StoreError::Corrupt(format!("leader addresses: {error}")))?;
    let row = client
        .query_opt(
            // FOR UPDATE first: the writers' fences lock the row FOR KEY SHARE, which a plain UPDATE does not
            // wait for (so that renewals never do); a change of epoch must wait for every fenced write in
            // flight (migrations/V4).
            "WITH locked AS (SELECT id FROM veil_lease WHERE id = 1 FOR UPDATE)
             UPDATE veil_lease
                SET node = $1, epoch = epoch + 1, addrs = $2,
                    expires_at = clock_timestamp() + make_interval(secs => $3::float8 / 1000)
               FROM locked
              WHERE veil_lease.id = locked.id AND (expires_at < clock_timestamp() OR node = $1)
          RETURNING epoch",
            &[&node, &addrs, &(ttl.as_millis() as f64)],
        )
        .await
        .map_err(db_error)?;
    Ok(row.map(|row| Lease {
        node: node.to_owned(),
        epoch: row.get(0),
    }))
}

/// Extends the lease by `ttl` from now; `false` when it is no longer this node's (another took it after it
/// lapsed). Never waits for the writers' fences (they lock the row FOR KEY SHARE).
pub async fn renew(client: &Client, lease: &Lease, ttl: Duration) -> Result<bool, StoreError> {
    let updated = client
        .execute(
            "UPDATE veil_lease
                SET expires_at = clock_timestamp() + make_interval(secs => $3::float8 / 1000)
              WHERE id = 1 AND node = $1 AND epoch = $2",
            &[&lease.node, &lease.epoch, &(ttl.as_millis() as f64)],
        )
        .await
        .map_err(db_error)?;
    Ok(updated == 1)
}

/// Gives the lease up at once (a clean stop), so another node need not wait for it to lapse.
pub async fn release(client: &Client, lease: &Lease) -> Result<(), StoreError> {
    client
        .execute(
            "UPDATE veil_lease SET expires_at = '-infinity' WHERE id = 1 AND node = $1 AND epoch = $2",
            &[&lease.node, &lease.epoch],
        )
        .await
        .map_err(db_error)?;
    Ok(())
}

/// The node leading now, if its lease has not lapsed.
pub async fn holder(client: &Client) -> Result<Option<LeaseHolder>, StoreError> {
    let row = client
        .query_opt(
            "SELECT node, epoch, addrs FROM veil_lease WHERE id = 1 AND expires_at >= clock_timestamp()",
            &[],
        )
        .await
        .map_err(db_error)?;
    row.map(|row| {
        let addrs: serde_json::Value = row.get(2);
        Ok(LeaseHolder {
            node: row.get(0),
            epoch: row.get(1),
            addrs: serde_json::from_value(addrs)
                .map_err(|error| StoreError::Corrupt(format!("leader addresses: {error}")))?,
        })
    })
    .transpose()
}
