//! Moves between shards (docs/cluster.md "Shards"; migrations/V7__inbox_import.sql). A message leaving for
//! a partition of another database is written, in its source partition's commit, into the source database's
//! `veil_inbox` under the target partition, as any move between partitions is. The target partition's owner
//! then brings it home: it copies the entries into its own database's inbox (fenced by its lease, with a mark
//! per entry), deletes the originals, and removes the marks. Its engine then accepts them as any inbox entry.
//!
//! The two databases commit apart, so each step is safe to repeat after a crash anywhere between them: a
//! copy skips the entries it finds marked (copied before, original not yet deleted); a delete of an original
//! already deleted does nothing; marks are removed only after their originals are gone, so no original can be
//! copied twice. Only the partition's current owner copies or unmarks (both are fenced), so an owner resumed
//! after losing its lease cannot copy an entry the next owner already brought home.

use tokio_postgres::{Client, GenericClient};
use veil_core::StoreError;

use crate::connect::db_error;
use crate::limits::IMPORT_ENTRIES_MAX;
use crate::partition::Partition;
use crate::partition_lease::PartitionLease;
use crate::store::sql::FENCE_PARTITION;
use crate::store::sql::{self, get};

/// Entries waiting in one database's inbox for partitions another database holds.
pub struct Waiting {
    /// The shard they wait on.
    shard: u32,
    ids: Vec<i64>,
    partitions: Vec<i32>,
    entries: Vec<Vec<u8>>,
    message_ids: Vec<Vec<u8>>,
    sent_ats: Vec<i64>,
    moved_froms: Vec<Option<Vec<u8>>>,
    attrs: Vec<Vec<u8>>,
    body_md5s: Vec<Vec<u8>>,
    bodies: Vec<Vec<u8>>,
}

impl Waiting {
    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }

    pub fn len(&self) -> usize {
        self.ids.len()
    }
}

/// The oldest entries of shard `shard`'s inbox for any of `partitions`: at most [`IMPORT_ENTRIES_MAX`], and
/// no more once their bodies pass `bytes_max` (the first entry is taken whatever its size).
pub async fn waiting(
    origin: &impl GenericClient,
    shard: u32,
    partitions: &[Partition],
    bytes_max: i64,
) -> Result<Waiting, StoreError> {
    let wanted: Vec<i32> = partitions.iter().map(|&p| p as i32).collect();
    let rows = origin
        .query(
            sql::IMPORT_WAITING,
            &[&wanted, &IMPORT_ENTRIES_MAX, &bytes_max],
        )
        .await
        .map_err(db_error)?;
    let mut waiting = Waiting {
        shard,
        ids: Vec::with_capacity(rows.len()),
        partitions: Vec::with_capacity(rows.len()),
        entries: Vec::with_capacity(rows.len()),
        message_ids: Vec::with_capacity(rows.len()),
        sent_ats: Vec::with_capacity(rows.len()),
        moved_froms: Vec::with_capacity(rows.len()),
        attrs: Vec::with_capacity(rows.len()),
        body_md5s: Vec::with_capacity(rows.len()),
        bodies: Vec::with_capacity(rows.len()),
    };
    for row in &rows {
        waiting.ids.push(get(row, 0)?);
        waiting.partitions.push(get(row, 1)?);
        waiting.entries.push(get(row, 2)?);
        waiting.message_ids.push(get(row, 3)?);
        waiting.sent_ats.push(get(row, 4)?);
        waiting.moved_froms.push(get(row, 5)?);
        waiting.attrs.push(get(row, 6)?);
        waiting.body_md5s.push(get(row, 7)?);
        waiting.bodies.push(get(row, 8)?);
    }
    Ok(waiting)
}

/// Brings `waiting` home: copies the entries of `lease`'s partition into `home`'s inbox, deletes the
/// originals on `origin`, and removes the marks. Returns how many entries it copied (those copied before
/// and still marked are not counted again).
pub async fn bring_home(
    origin: &Client,
    home: &mut Client,
    lease: PartitionLease,
    waiting: &Waiting,
) -> Result<usize, StoreError> {
    let mine: Vec<usize> = (0..waiting.len())
        .filter(|&i| waiting.partitions[i] == lease.partition as i32)
        .collect();
    if mine.is_empty() {
        return Ok(0);
    }
    // The bodies are borrowed into the statement's arrays, not copied.
    fn pick<'a>(mine: &[usize], column: &'a [Vec<u8>]) -> Vec<&'a [u8]> {
        mine.iter().map(|&i| column[i].as_slice()).collect()
    }
    let ids: Vec<i64> = mine.iter().map(|&i| waiting.ids[i]).collect();
    let sent_ats: Vec<i64> = mine.iter().map(|&i| waiting.sent_ats[i]).collect();
    let moved_froms: Vec<Option<&[u8]>> = mine
        .iter()
        .map(|&i| waiting.moved_froms[i].as_deref())
        .collect();
    let (entries, message_ids, attrs, body_md5s, bodies) = (
        pick(&mine, &waiting.entries),
        pick(&mine, &waiting.message_ids),
        pick(&mine, &waiting.attrs),
        pick(&mine, &waiting.body_md5s),
        pick(&mine, &waiting.bodies),
    );
    let shard = waiting.shard as i32;
    let partition = lease.partition as i32;
    let txn = home.transaction().await.map_err(db_error)?;
    fence(&txn, lease).await?;
    let copied = txn
        .execute(
            sql::IMPORT_COPY,
            &[
                &shard,
                &partition,
                &ids,
                &entries,
                &message_ids,
                &sent_ats,
                &moved_froms,
                &attrs,
                &body_md5s,
                &bodies,
            ],
        )
        .await
        .map_err(db_error)?;
    txn.commit().await.map_err(db_error)?;
    origin
        .execute(sql::IMPORT_DELETE_ORIGIN, &[&partition, &ids])
        .await
        .map_err(db_error)?;
    let txn = home.transaction().await.map_err(db_error)?;
    fence(&txn, lease).await?;
    txn.execute(sql::IMPORT_FORGET_MARKS, &[&shard, &ids])
        .await
        .map_err(db_error)?;
    txn.commit().await.map_err(db_error)?;
    Ok(copied as usize)
}

/// Fails the transaction unless `lease` still holds its partition (migrations/V5__partitions.sql).
async fn fence(
    txn: &tokio_postgres::Transaction<'_>,
    lease: PartitionLease,
) -> Result<(), StoreError> {
    txn.execute(FENCE_PARTITION, &[&(lease.partition as i32), &lease.epoch])
        .await
        .map_err(db_error)?;
    Ok(())
}
