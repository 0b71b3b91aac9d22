//! Shards against a real PostgreSQL (skipped without `VEIL_TEST_POSTGRES_URL`; ./scripts/test starts one):
//! two schemas of the test server stand for two databases. Each shard holds the lease rows of its partitions
//! only and refuses to be used as another shard; a move waiting on one shard for a partition of the other is
//! brought home once, also when the copy runs again after a crash between the two databases' commits, and
//! never by an owner whose lease moved on.

use std::time::Duration;

use tokio_postgres::Client;
use veil_core::StoreError;
use veil_postgres::import;
use veil_postgres::limits::IMPORT_BYTES_MAX;
use veil_postgres::partition::{self, Shard};
use veil_postgres::partition_lease::{self, PartitionLease};
use veil_postgres::testing::test_options;
use veil_postgres::{connect, LeaderAddrs, PgOptions};

const PARTITIONS: u32 = 4;
const TERM: Duration = Duration::from_secs(30);

/// Two shards, fixed, and a client of each.
async fn two_shards(test: &str) -> Option<[(PgOptions, Client); 2]> {
    let home = test_options(&format!("{test}_home"))?;
    let other = test_options(&format!("{test}_other"))?;
    let mut shards = Vec::new();
    for (index, options) in [home, other].into_iter().enumerate() {
        let mut client = connect(&options).await.expect("connects");
        veil_postgres::migrations::run(&mut client, 0)
            .await
            .expect("migrates");
        let shard = Shard {
            index: index as u32,
            count: 2,
        };
        assert_eq!(
            partition::establish(&mut client, PARTITIONS, shard)
                .await
                .unwrap(),
            PARTITIONS
        );
        shards.push((options, client));
    }
    shards.try_into().ok()
}

async fn partitions_on(client: &Client) -> Vec<i32> {
    client
        .query(
            "SELECT partition FROM veil_partition ORDER BY partition",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|row| row.get(0))
        .collect()
}

async fn count(client: &Client, table: &str) -> i64 {
    client
        .query_one(&format!("SELECT count(*) FROM {table}"), &[])
        .await
        .unwrap()
        .get(0)
}

/// An inbox entry for `partition`, as a move out of one of the shard's partitions leaves it.
async fn waiting_entry(client: &Client, partition: i32, body: &[u8]) -> i64 {
    client
        .query_one(
            "INSERT INTO veil_inbox (partition, entry, message_id, sent_at, moved_from, attrs, body_md5, body)
             VALUES ($1, '\\x01', '\\x02', 5, NULL, '\\x03', '\\x04', $2) RETURNING id",
            &[&partition, &body],
        )
        .await
        .unwrap()
        .get(0)
}

async fn take(client: &Client, partition: u32, node: &str) -> PartitionLease {
    let addrs = LeaderAddrs { rpc: node.into() };
    partition_lease::try_acquire(client, partition, node, &addrs, TERM)
        .await
        .unwrap()
        .expect("the partition is free")
}

#[tokio::test]
async fn each_shard_holds_its_own_partitions_and_refuses_another_place() {
    let Some([(_, mut home), (_, mut other)]) = two_shards("shards_hold").await else {
        return;
    };
    assert_eq!(partitions_on(&home).await, [0, 2]);
    assert_eq!(partitions_on(&other).await, [1, 3]);
    let swapped = partition::establish(&mut other, PARTITIONS, Shard { index: 0, count: 2 }).await;
    assert!(
        matches!(swapped, Err(StoreError::Incompatible(ref m)) if m.contains("shard 1 of 2")),
        "{swapped:?}"
    );
    let regrown = partition::establish(&mut home, PARTITIONS, Shard { index: 0, count: 3 }).await;
    assert!(
        matches!(regrown, Err(StoreError::Incompatible(_))),
        "{regrown:?}"
    );
    let alone = partition::establish(&mut home, PARTITIONS, Shard::ALONE).await;
    assert!(
        matches!(alone, Err(StoreError::Incompatible(_))),
        "{alone:?}"
    );
}

#[tokio::test]
async fn an_import_stops_at_its_byte_bound_but_takes_at_least_one_entry() {
    let Some([(_, origin), _]) = two_shards("shards_import_bytes").await else {
        return;
    };
    for _ in 0..3 {
        waiting_entry(&origin, 1, &[7; 10]).await;
    }
    let taken = |bytes_max| {
        let origin = &origin;
        async move {
            import::waiting(origin, 0, &[1], bytes_max)
                .await
                .unwrap()
                .len()
        }
    };
    assert_eq!(
        taken(15).await,
        2,
        "the entry that crosses the bound is the last taken"
    );
    assert_eq!(
        taken(1).await,
        1,
        "one entry even when it alone passes the bound"
    );
    assert_eq!(taken(IMPORT_BYTES_MAX).await, 3);
}

#[tokio::test]
async fn a_move_between_shards_is_brought_home_once_even_when_the_copy_runs_again() {
    let Some([(_, origin), (_, mut home)]) = two_shards("shards_import").await else {
        return;
    };
    // Partition 1 lives on the second shard; its entry waits on the first.
    let lease = take(&home, 1, "a").await;
    let id = waiting_entry(&origin, 1, b"moved").await;
    waiting_entry(&origin, 2, b"not for partition 1").await;
    let waiting = import::waiting(&origin, 0, &[1], IMPORT_BYTES_MAX)
        .await
        .unwrap();
    assert_eq!(waiting.len(), 1);
    assert_eq!(
        import::bring_home(&origin, &mut home, lease, &waiting)
            .await
            .unwrap(),
        1
    );
    let arrived = home
        .query_one("SELECT partition, body FROM veil_inbox", &[])
        .await
        .unwrap();
    assert_eq!(
        (arrived.get::<_, i32>(0), arrived.get::<_, Vec<u8>>(1)),
        (1, b"moved".to_vec())
    );
    assert_eq!(count(&origin, "veil_inbox WHERE partition = 1").await, 0);
    assert_eq!(
        count(&home, "veil_inbox_imported").await,
        0,
        "marks go once the originals did"
    );

    // As after a crash between the copy's commit and the original's delete: the original and its mark back.
    origin
        .execute(
            "INSERT INTO veil_inbox
               (id, partition, entry, message_id, sent_at, moved_from, attrs, body_md5, body)
             OVERRIDING SYSTEM VALUE VALUES ($1, 1, '\\x01', '\\x02', 5, NULL, '\\x03', '\\x04', 'moved')",
            &[&id],
        )
        .await
        .unwrap();
    home.execute(
        "INSERT INTO veil_inbox_imported (origin_shard, origin_id) VALUES (0, $1)",
        &[&id],
    )
    .await
    .unwrap();
    let again = import::waiting(&origin, 0, &[1], IMPORT_BYTES_MAX)
        .await
        .unwrap();
    assert_eq!(
        import::bring_home(&origin, &mut home, lease, &again)
            .await
            .unwrap(),
        0
    );
    assert_eq!(count(&home, "veil_inbox").await, 1, "copied once");
    assert_eq!(count(&origin, "veil_inbox WHERE partition = 1").await, 0);
    assert_eq!(count(&home, "veil_inbox_imported").await, 0);

    // An owner whose lease moved on copies nothing.
    waiting_entry(&origin, 1, b"later").await;
    partition_lease::release(&home, "a", lease).await.unwrap();
    let next = take(&home, 1, "b").await;
    assert!(next.epoch > lease.epoch);
    let stale = import::waiting(&origin, 0, &[1], IMPORT_BYTES_MAX)
        .await
        .unwrap();
    let refused = import::bring_home(&origin, &mut home, lease, &stale).await;
    assert!(
        refused.is_err(),
        "the old owner's copy is fenced: {refused:?}"
    );
    assert_eq!(count(&home, "veil_inbox").await, 1);
    assert_eq!(
        count(&origin, "veil_inbox WHERE partition = 1").await,
        1,
        "still waiting"
    );
    assert_eq!(
        import::bring_home(&origin, &mut home, next, &stale)
            .await
            .unwrap(),
        1
    );
}
