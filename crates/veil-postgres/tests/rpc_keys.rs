//! The cluster token's key rotation against a real PostgreSQL (skipped without `VEIL_TEST_POSTGRES_URL`;
//! ./scripts/test starts one): a rotation needs a cluster's secret, schedules the new key on the database's
//! clock, refuses to start while one is under way, and leaves only keys some node may still accept.

use veil_postgres::rpc_keys::{self, KeysInForce, RotateError};
use veil_postgres::testing::test_options;
use veil_postgres::{connect, migrations};

/// A migrated schema of its own on the test server; `None` (skipped) without one.
async fn database(test: &str) -> Option<tokio_postgres::Client> {
    let options = test_options(test)?;
    let mut client = connect(&options).await.expect("connects");
    migrations::run(&mut client, 1_000).await.expect("migrated");
    Some(client)
}

/// [`database`] with the cluster's shared secret made, as the first node makes it.
async fn cluster_database(test: &str) -> Option<tokio_postgres::Client> {
    let client = database(test).await?;
    veil_postgres::secret::load_or_create(&client, || [1; 32])
        .await
        .expect("the cluster's secret");
    Some(client)
}

#[tokio::test]
async fn a_rotation_needs_a_cluster_and_waits_for_the_one_under_way() {
    let Some(mut client) = database("a_rotation_needs_a_cluster").await else {
        return;
    };
    let refused = rpc_keys::rotate(&mut client, 60_000, || [7; 32]).await;
    assert!(
        matches!(refused, Err(RotateError::NoCluster)),
        "{refused:?}"
    );
    let shared = veil_postgres::secret::load_or_create(&client, || [1; 32])
        .await
        .expect("the cluster's secret");

    let first = rpc_keys::rotate(&mut client, 60_000, || [2; 32])
        .await
        .expect("the first rotation");
    assert_eq!(first.generation, 1);
    assert_eq!(first.secret, [2; 32]);
    assert_eq!(first.previous_until_ms - first.sends_from_ms, 60_000);
    let again = rpc_keys::rotate(&mut client, 60_000, || [3; 32]).await;
    assert!(
        matches!(again, Err(RotateError::UnderWay { generation: 1, .. })),
        "{again:?}"
    );

    let rotated = rpc_keys::read(&client).await.expect("read");
    assert_eq!(rotated, vec![first.clone()]);
    let now = KeysInForce::at(first.sends_from_ms - 60_000, shared, &rotated);
    assert_eq!(now.sends.generation, 0, "announced, not sent yet");
    assert_eq!(now.accepted_generations(), vec![0, 1]);
}

#[tokio::test]
async fn a_finished_rotation_lets_the_next_start_and_forgets_keys_nobody_accepts() {
    let Some(mut client) = cluster_database("a_finished_rotation").await else {
        return;
    };
    // A step of 0 finishes at once: what the command refuses, the schedule does not need.
    for generation in 1..=3 {
        let key = rpc_keys::rotate(&mut client, 0, || [generation as u8; 32])
            .await
            .expect("a rotation after the last one finished");
        assert_eq!(key.generation, generation);
    }
    let kept: Vec<u64> = rpc_keys::read(&client)
        .await
        .expect("read")
        .iter()
        .map(|key| key.generation)
        .collect();
    let mut kept = kept;
    kept.sort_unstable();
    assert_eq!(
        kept,
        vec![2, 3],
        "generation 1 can no longer be accepted by anyone"
    );
}

#[tokio::test]
async fn a_damaged_key_row_is_left_out_not_a_failed_read() {
    let Some(mut client) = cluster_database("a_damaged_key_row").await else {
        return;
    };
    let key = rpc_keys::rotate(&mut client, 0, || [2; 32])
        .await
        .expect("rotated");
    client
        .execute(
            "INSERT INTO veil_meta (key, value) VALUES ('rpc_key/7', '\\x0102')",
            &[],
        )
        .await
        .expect("a damaged row");
    let read = rpc_keys::read(&client)
        .await
        .expect("the read still succeeds");
    assert_eq!(read, vec![key]);
}
