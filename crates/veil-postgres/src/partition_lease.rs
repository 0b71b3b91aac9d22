//! Partition leases (docs/decisions/0011-partitioned-ownership.md): the single leader lease of `lease`, once
//! per partition. Each row of `veil_partition` says which node owns the partition, under which epoch, until
//! when (the database's clock) and where it takes calls; a node takes a partition only when its lease has
//! lapsed (or is its own), bumping the epoch, which fences the previous owner's writes
//! (`veil_fence_partition`). Nodes also keep a row of their own in `veil_node` while they run, so that each
//! can work out its fair share of the partitions.

use std::time::Duration;

use tokio_postgres::Client;
use veil_core::StoreError;

use crate::connect::db_error;
use crate::lease::LeaderAddrs;
use crate::partition::Partition;
use crate::store::sql::get;

/// A partition this node owns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PartitionLease {
    pub partition: Partition,
    /// Bumped by every change of owner; writes under an older epoch are refused.
    pub epoch: i64,
}

/// One partition as every node sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PartitionRow {
    pub partition: Partition,
    /// The owner, or the last owner when the lease has lapsed (`""` before the first).
    pub node: String,
    pub epoch: i64,
    /// Whether the lease is still in its term on the database's clock.
    pub live: bool,
    pub addrs: LeaderAddrs,
}

fn json(addrs: &LeaderAddrs) -> Result<serde_json::Value, StoreError> {
    serde_json::to_value(addrs)
        .map_err(|error| StoreError::Corrupt(format!("node addresses: {error}")))
}

fn ttl_ms(ttl: Duration) -> f64 {
    ttl.as_millis() as f64
}

/// Takes `partition` for `ttl` if its lease has lapsed or is `node`'s already; `None` while another node
/// owns it.
pub async fn try_acquire(
    client: &Client,
    partition: Partition,
    node: &str,
    addrs: &LeaderAddrs,
    ttl: Duration,
) -> Result<Option<PartitionLease>, StoreError> {
    let row = client
        .query_opt(
            // FOR UPDATE first: the writers' fences lock the row FOR KEY SHARE, which a plain UPDATE does not
            // wait for; a change of epoch must wait for every fenced write in flight (migrations/V5).
            "WITH locked AS (SELECT partition FROM veil_partition WHERE partition = $1 FOR UPDATE)
             UPDATE veil_partition
                SET node = $2, epoch = epoch + 1, addrs = $3,
                    expires_at = clock_timestamp() + make_interval(secs => $4::float8 / 1000)
               FROM locked
              WHERE veil_partition.partition = locked.partition
                AND (expires_at < clock_timestamp() OR node = $2)
          RETURNING epoch",
            &[&(partition as i32), &node, &json(addrs)?, &ttl_ms(ttl)],
        )
        .await
        .map_err(db_error)?;
    row.map(|row| {
        Ok(PartitionLease {
            partition,
            epoch: get(&row, 0)?,
        })
    })
    .transpose()
}

/// Extends every lease of `held` by `ttl` from now, in one statement; returns the partitions still this
/// node's (one missing from the answer was taken by another node after its lease lapsed). Never waits for
/// the writers' fences.
pub async fn renew(
    client: &Client,
    node: &str,
    held: &[PartitionLease],
    ttl: Duration,
) -> Result<Vec<Partition>, StoreError> {
    if held.is_empty() {
        return Ok(Vec::new());
    }
    let partitions: Vec<i32> = held.iter().map(|lease| lease.partition as i32).collect();
    let epochs: Vec<i64> = held.iter().map(|lease| lease.epoch).collect();
    let rows = client
        .query(
            "UPDATE veil_partition
                SET expires_at = clock_timestamp() + make_interval(secs => $4::float8 / 1000)
               FROM unnest($2::integer[], $3::bigint[]) AS held (partition, epoch)
              WHERE veil_partition.partition = held.partition AND veil_partition.epoch = held.epoch
                AND veil_partition.node = $1
          RETURNING veil_partition.partition",
            &[&node, &partitions, &epochs, &ttl_ms(ttl)],
        )
        .await
        .map_err(db_error)?;
    rows.iter()
        .map(|row| get::<i32>(row, 0).map(|partition| partition as Partition))
        .collect()
}

/// Gives `lease` up at once (a clean stop, or a surplus handed back), so another node need not wait for it
/// to lapse.
pub async fn release(client: &Client, node: &str, lease: PartitionLease) -> Result<(), StoreError> {
    client
        .execute(
            "UPDATE veil_partition SET expires_at = '-infinity'
              WHERE partition = $1 AND node = $2 AND epoch = $3",
            &[&(lease.partition as i32), &node, &lease.epoch],
        )
        .await
        .map_err(db_error)?;
    Ok(())
}

/// Every partition's lease as it stands now.
pub async fn table(client: &Client) -> Result<Vec<PartitionRow>, StoreError> {
    let rows = client
        .query(
            "SELECT partition, node, epoch, expires_at >= clock_timestamp(), addrs
               FROM veil_partition ORDER BY partition",
            &[],
        )
        .await
        .map_err(db_error)?;
    rows.iter()
        .map(|row| {
            let addrs: serde_json::Value = get(row, 4)?;
            Ok(PartitionRow {
                partition: get::<i32>(row, 0)? as Partition,
                node: get(row, 1)?,
                epoch: get(row, 2)?,
                live: get(row, 3)?,
                addrs: serde_json::from_value(addrs)
                    .map_err(|error| StoreError::Corrupt(format!("node addresses: {error}")))?,
            })
        })
        .collect()
}

/// Says that `node` is alive for `ttl` from now, and returns the nodes alive now (itself included), sorted.
/// Rows of nodes gone for a while are removed on the way.
pub async fn heartbeat(
    client: &Client,
    node: &str,
    addrs: &LeaderAddrs,
    ttl: Duration,
) -> Result<Vec<String>, StoreError> {
    let rows = client
        .query(
            "WITH beat AS (
                INSERT INTO veil_node (node, expires_at, addrs)
                VALUES ($1, clock_timestamp() + make_interval(secs => $3::float8 / 1000), $2)
                ON CONFLICT (node) DO UPDATE SET expires_at = EXCLUDED.expires_at, addrs = EXCLUDED.addrs),
             gone AS (DELETE FROM veil_node WHERE expires_at < clock_timestamp() - interval '1 hour')
             SELECT node FROM veil_node WHERE expires_at >= clock_timestamp() AND node <> $1
             UNION SELECT $1 ORDER BY 1",
            &[&node, &json(addrs)?, &ttl_ms(ttl)],
        )
        .await
        .map_err(db_error)?;
    rows.iter().map(|row| get(row, 0)).collect()
}

/// Says that `node` stops: the others count it out at once.
pub async fn leave(client: &Client, node: &str) -> Result<(), StoreError> {
    client
        .execute("DELETE FROM veil_node WHERE node = $1", &[&node])
        .await
        .map_err(db_error)?;
    Ok(())
}
