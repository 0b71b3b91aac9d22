//! Partitions (docs/decisions/0011-partitioned-ownership.md): a cluster's queues are spread over a fixed
//! number of partitions, each owned by one node at a time under its own lease (`partition_lease`). A queue's
//! partition is a stable hash of its namespace and name, so every node finds a queue's owner without asking
//! anyone, and the catalog (`veil_queue.partition`) records it for the partition's store to load.
//!
//! How many partitions a cluster has is fixed once, by the first node that needs it ([`establish`]): changing
//! it would move queues between partitions, which nothing here does.

use tokio_postgres::Client;
use veil_core::{MoveTaskRecord, QueueKey, StoreError};

use crate::connect::db_error;
use crate::limits::PARTITIONS_MAX;
use crate::store::sql::decode;

/// A partition's number, `0..count`.
pub type Partition = u32;

/// The partition of the queue `(namespace, name)` among `count`: FNV-1a (64-bit) over the namespace, a zero
/// byte and the name, modulo `count`. Written down here because it must never change: every node of every
/// version must place a queue where the catalog has it.
pub fn partition_of(key: &QueueKey, count: u32) -> Partition {
    const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    let bytes = key
        .namespace
        .as_bytes()
        .iter()
        .chain([0u8].iter())
        .chain(key.name.as_bytes());
    let hash = bytes.fold(OFFSET, |hash, byte| {
        (hash ^ u64::from(*byte)).wrapping_mul(PRIME)
    });
    (hash % u64::from(count.max(1))) as Partition
}

/// The first queue id partition `partition` hands out: partitions' id ranges never meet (2^40 ids each).
pub fn first_queue_id(partition: Partition) -> i64 {
    i64::from(partition) << 40
}

/// Fixes the cluster's partition count at `wanted` unless it is fixed already, and returns the count in
/// force (which an operator's later setting does not change). Fixing it creates the partitions' lease rows
/// and places every existing queue and move task in its partition, in one transaction; nodes starting
/// together take turns under a table lock, so one of them fixes it and the others read it.
pub async fn establish(client: &mut Client, wanted: u32) -> Result<u32, StoreError> {
    if wanted == 0 || wanted > PARTITIONS_MAX {
        return Err(StoreError::Incompatible(format!(
            "a cluster has 1 to {PARTITIONS_MAX} partitions, not {wanted}"
        )));
    }
    let txn = client.transaction().await.map_err(db_error)?;
    txn.batch_execute("LOCK TABLE veil_partition IN EXCLUSIVE MODE")
        .await
        .map_err(db_error)?;
    if let Some(row) = txn
        .query_opt(
            "SELECT value FROM veil_store_meta WHERE name = 'partitions'",
            &[],
        )
        .await
        .map_err(db_error)?
    {
        let count: i64 = row.get(0);
        txn.commit().await.map_err(db_error)?;
        return u32::try_from(count)
            .map_err(|_| StoreError::Corrupt(format!("the partition count {count}")));
    }
    let held = txn
        .query_opt(
            "SELECT node FROM veil_lease WHERE id = 1 AND expires_at >= clock_timestamp()",
            &[],
        )
        .await
        .map_err(db_error)?;
    if let Some(row) = held {
        let node: String = row.get(0);
        return Err(StoreError::Unavailable(format!(
            "node {node} of an older Veil holds the single leader lease; partitions start once it stops"
        )));
    }
    let next: i64 = txn
        .query_opt(
            "SELECT value FROM veil_store_meta WHERE name = 'next_queue_id'",
            &[],
        )
        .await
        .map_err(db_error)?
        .map_or(0, |row| row.get(0));
    txn.execute(
        "INSERT INTO veil_partition (partition, next_queue_id)
         SELECT p, CASE WHEN p = 0 THEN $2 ELSE p::bigint << 40 END FROM generate_series(0, $1 - 1) AS p",
        &[&(wanted as i32), &next],
    )
    .await
    .map_err(db_error)?;
    place_queues(&txn, wanted).await?;
    place_move_tasks(&txn, wanted).await?;
    txn.execute(
        "INSERT INTO veil_store_meta (name, value) VALUES ('partitions', $1)",
        &[&i64::from(wanted)],
    )
    .await
    .map_err(db_error)?;
    txn.commit().await.map_err(db_error)?;
    tracing::info!(partitions = wanted, "fixed the cluster's partition count");
    Ok(wanted)
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
            namespace: row.get(1),
            name: row.get(2),
        };
        ids.push(row.get(0));
        partitions.push(partition_of(&key, count) as i32);
    }
    txn.execute(
        "UPDATE veil_queue SET partition = placed.partition
           FROM unnest($1::bigint[], $2::integer[]) AS placed (id, partition)
          WHERE veil_queue.id = placed.id",
        &[&ids, &partitions],
    )
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
        let record: MoveTaskRecord = decode(row.get(1), "a move task")?;
        numbers.push(row.get(0));
        partitions.push(partition_of(&record.source_key, count) as i32);
    }
    txn.execute(
        "UPDATE veil_move_task SET partition = placed.partition
           FROM unnest($1::bigint[], $2::integer[]) AS placed (number, partition)
          WHERE veil_move_task.number = placed.number",
        &[&numbers, &partitions],
    )
    .await
    .map_err(db_error)?;
    Ok(())
}

/// The cluster's partition count, if fixed.
pub async fn count(client: &Client) -> Result<Option<u32>, StoreError> {
    let row = client
        .query_opt(
            "SELECT value FROM veil_store_meta WHERE name = 'partitions'",
            &[],
        )
        .await
        .map_err(db_error)?;
    row.map(|row| {
        let count: i64 = row.get(0);
        u32::try_from(count)
            .map_err(|_| StoreError::Corrupt(format!("the partition count {count}")))
    })
    .transpose()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(namespace: &str, name: &str) -> QueueKey {
        QueueKey {
            namespace: namespace.into(),
            name: name.into(),
        }
    }

    #[test]
    fn a_queues_partition_never_changes_between_versions() {
        // Pinned values: a change to the hash would move every existing queue away from its data.
        let pinned = [
            (key("000000000000", "orders"), 64),
            (key("devstoreaccount1", "orders"), 64),
            (key("kubemq", "jobs"), 16),
        ];
        let first: Vec<u32> = pinned.iter().map(|(k, n)| partition_of(k, *n)).collect();
        assert_eq!(first, EXPECTED, "the partition hash changed");
    }

    /// FNV-1a computed apart from this code (a Python one-liner) for the pinned keys.
    const EXPECTED: [u32; 3] = [22, 4, 6];

    #[test]
    fn namespace_and_name_do_not_run_together() {
        let count = 1 << 20;
        assert_ne!(
            partition_of(&key("ab", "c"), count),
            partition_of(&key("a", "bc"), count),
            "the separator keeps (ab, c) and (a, bc) apart"
        );
    }

    #[test]
    fn queues_spread_over_the_partitions() {
        let count = 16u32;
        let mut seen = vec![0u32; count as usize];
        for n in 0..1_600 {
            seen[partition_of(&key("000000000000", &format!("queue-{n}")), count) as usize] += 1;
        }
        let (least, most) = (seen.iter().min(), seen.iter().max());
        assert!(
            least >= Some(&60) && most <= Some(&140),
            "1,600 queues over 16 partitions, each 100 ± 40: {seen:?}"
        );
    }

    #[test]
    fn partitions_hand_out_ids_that_never_meet() {
        assert_eq!(first_queue_id(0), 0);
        assert_eq!(first_queue_id(1), 1 << 40);
        assert!(first_queue_id(PARTITIONS_MAX - 1) < i64::MAX >> 1);
    }
}
