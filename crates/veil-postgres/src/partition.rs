//! Partitions (docs/decisions/0011-partitioned-ownership.md): a cluster's queues are spread over a fixed
//! number of partitions, each owned by one node at a time under its own lease (`partition_lease`). A queue's
//! partition is a stable hash of its namespace and name, so every node finds a queue's owner without asking
//! anyone, and the catalog (`veil_queue.partition`) records it for the partition's store to load.
//!
//! How many partitions a cluster has is fixed once, by the first node that needs it ([`establish`]): changing
//! it would move queues between partitions, which nothing here does.

use tokio_postgres::{Client, GenericClient};
pub use veil_core::partition::{partition_of, Partition};
use veil_core::{MoveTaskRecord, QueueKey, StoreError};

use crate::connect::db_error;
use crate::limits::PARTITIONS_MAX;
use crate::store::sql::{decode, get};

/// The first queue id partition `partition` hands out: partitions' id ranges never meet (2^40 ids each).
pub fn first_queue_id(partition: Partition) -> i64 {
    i64::from(partition) << 40
}

/// Which of a cluster's databases one is (docs/cluster.md "Shards"): shard `index` of `count` holds the
/// partitions p with p mod `count` = `index` (their queues, leases and inboxes). Shard 0 is the one `store`
/// names, the cluster's home: its secret, its member nodes and the clock every engine decides visibility on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shard {
    pub index: u32,
    pub count: u32,
}

impl Shard {
    /// The only database of a cluster without shards.
    pub const ALONE: Shard = Shard { index: 0, count: 1 };

    /// The shard `partition` lives on, of `count`.
    pub fn of(partition: Partition, count: u32) -> u32 {
        partition % count.max(1)
    }

    pub fn holds(&self, partition: Partition) -> bool {
        Self::of(partition, self.count) == self.index
    }
}

/// Fixes the cluster's partition count at `wanted` on shard `shard` unless it is fixed there already, and
/// returns the count in force (which an operator's later setting does not change). Fixing it creates the
/// lease rows of the shard's partitions and places every existing queue and move task in its partition, in
/// one transaction; nodes starting together take turns under a table lock, so one of them fixes it and the
/// others read it. A shard other than the home is fixed with the home's count, after it. A database fixed
/// as another shard, or of a cluster with another number of shards, is refused: the shards of a cluster are
/// fixed when it is created, as its partitions are.
pub async fn establish(client: &mut Client, wanted: u32, shard: Shard) -> Result<u32, StoreError> {
    if wanted == 0 || wanted > PARTITIONS_MAX {
        return Err(StoreError::Incompatible(format!(
            "a cluster has 1 to {PARTITIONS_MAX} partitions, not {wanted}"
        )));
    }
    let txn = client.transaction().await.map_err(db_error)?;
    txn.batch_execute("LOCK TABLE veil_partition IN EXCLUSIVE MODE")
        .await
        .map_err(db_error)?;
    if let Some(count) = count(&txn).await? {
        let fixed = Shard {
            index: meta(&txn, "shard").await?.unwrap_or(0) as u32,
            count: meta(&txn, "shards").await?.unwrap_or(1) as u32,
        };
        txn.commit().await.map_err(db_error)?;
        if fixed != shard || (shard.index > 0 && count != wanted) {
            return Err(StoreError::Incompatible(format!(
                "this database is shard {} of {} of a cluster of {count} partitions, configured as shard {} of \
                 {}: a cluster's shards are fixed when it is created, in the order `store` and \
                 [[postgres.shards]] list them",
                fixed.index, fixed.count, shard.index, shard.count
            )));
        }
        return Ok(count);
    }
    let held = txn
        .query_opt(
            "SELECT node FROM veil_lease WHERE id = 1 AND expires_at >= clock_timestamp()",
            &[],
        )
        .await
        .map_err(db_error)?;
    if let Some(row) = held {
        let node: String = get(&row, 0)?;
        return Err(StoreError::Unavailable(format!(
            "node {node} of an older Veil holds the single leader lease; partitions start once it stops"
        )));
    }
    if shard.count > 1 {
        let queues: i64 = get(
            &txn.query_one("SELECT count(*) FROM veil_queue", &[])
                .await
                .map_err(db_error)?,
            0,
        )?;
        if queues > 0 {
            return Err(StoreError::Incompatible(format!(
                "shard {} holds {queues} queues of a store that had no shards: shards are set when a cluster \
                 is created, on empty databases",
                shard.index
            )));
        }
    }
    let next = meta(&txn, "next_queue_id").await?.unwrap_or(0);
    txn.execute(
        "INSERT INTO veil_partition (partition, next_queue_id)
         SELECT p, CASE WHEN p = 0 THEN $2 ELSE p::bigint << 40 END FROM generate_series(0, $1 - 1) AS p
          WHERE p % $3 = $4",
        &[
            &(wanted as i32),
            &next,
            &(shard.count as i32),
            &(shard.index as i32),
        ],
    )
    .await
    .map_err(db_error)?;
    place_queues(&txn, wanted).await?;
    place_move_tasks(&txn, wanted).await?;
    txn.execute(
        "INSERT INTO veil_store_meta (name, value)
         VALUES ('partitions', $1), ('shard', $2), ('shards', $3)",
        &[
            &i64::from(wanted),
            &i64::from(shard.index),
            &i64::from(shard.count),
        ],
    )
    .await
    .map_err(db_error)?;
    txn.commit().await.map_err(db_error)?;
    tracing::info!(
        partitions = wanted,
        shard = shard.index,
        shards = shard.count,
        "fixed the cluster's partition count"
    );
    Ok(wanted)
}

/// A number of `veil_store_meta`, if written.
async fn meta(client: &impl GenericClient, name: &str) -> Result<Option<i64>, StoreError> {
    client
        .query_opt(
            "SELECT value FROM veil_store_meta WHERE name = $1",
            &[&name],
        )
        .await
        .map_err(db_error)?
        .map(|row| get(&row, 0))
        .transpose()
}

/// Writes every queue's partition into the catalog.
async fn place_queues(txn: &tokio_postgres::Transaction<'_>, count: u32) -> Result<(), StoreError> {
    let (mut ids, mut partitions) = (Vec::<i64>::new(), Vec::<i32>::new());
    for row in txn
        .query("SELECT id, namespace, name FROM veil_queue", &[])
        .await
        .map_err(db_error)?
    {
        let key = QueueKey {
            namespace: get(&row, 1)?,
            name: get(&row, 2)?,
        };
        ids.push(get(&row, 0)?);
        partitions.push(partition_of(&key, count) as i32);
    }
    place(txn, "veil_queue", "id", &ids, &partitions).await
}

/// Writes `partitions[i]` into the row of `table` whose `key` is `keys[i]`, in one statement.
async fn place(
    txn: &tokio_postgres::Transaction<'_>,
    table: &str,
    key: &str,
    keys: &[i64],
    partitions: &[i32],
) -> Result<(), StoreError> {
    let sql = format!(
        "UPDATE {table} SET partition = placed.partition
           FROM unnest($1::bigint[], $2::integer[]) AS placed (key, partition)
          WHERE {table}.{key} = placed.key"
    );
    txn.execute(&sql, &[&keys, &partitions])
        .await
        .map_err(db_error)?;
    Ok(())
}

/// Writes every move task's partition: its source queue's.
async fn place_move_tasks(
    txn: &tokio_postgres::Transaction<'_>,
    count: u32,
) -> Result<(), StoreError> {
    let (mut numbers, mut partitions) = (Vec::<i64>::new(), Vec::<i32>::new());
    for row in txn
        .query("SELECT number, record FROM veil_move_task", &[])
        .await
        .map_err(db_error)?
    {
        let record: MoveTaskRecord = decode(get(&row, 1)?, "a move task")?;
        numbers.push(get(&row, 0)?);
        partitions.push(partition_of(&record.source_key, count) as i32);
    }
    place(txn, "veil_move_task", "number", &numbers, &partitions).await
}

/// The cluster's partition count, if fixed.
pub async fn count(client: &impl GenericClient) -> Result<Option<u32>, StoreError> {
    meta(client, "partitions")
        .await?
        .map(|count| {
            u32::try_from(count)
                .map_err(|_| StoreError::Corrupt(format!("the partition count {count}")))
        })
        .transpose()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_partition_lives_on_exactly_one_shard() {
        for count in 1..=4 {
            for partition in 0..16 {
                let holders = (0..count)
                    .filter(|&index| Shard { index, count }.holds(partition))
                    .count();
                assert_eq!(holders, 1, "partition {partition} of {count} shards");
            }
        }
        assert!(Shard::ALONE.holds(7));
    }

    #[test]
    fn partitions_hand_out_ids_that_never_meet() {
        assert_eq!(first_queue_id(0), 0);
        assert_eq!(first_queue_id(1), 1 << 40);
        assert!(first_queue_id(PARTITIONS_MAX - 1) < i64::MAX >> 1);
    }
}
