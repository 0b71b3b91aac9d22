//! PgStore when its server stops (`pg_ctl stop -m fast`, as an operator or a crash would): the next commit fails
//! quickly with `StoreError::Unavailable`, `failed()` turns true, later commits fail, and reads answer within
//! the call timeout. The test starts a server of its own (scripts/pg-test-server) to stop it; it runs where the
//! shared test server runs (`VEIL_TEST_POSTGRES_URL` set, so PostgreSQL 15 is installed).
//!
//! "Quickly" is checked without a wall clock: the timeouts are set long, and each failure must be the one the
//! stopped server causes (its shutdown notice, a closed or refused connection), not one of the store's own
//! "timed out" answers, which is all a store that waited for a timeout could give.

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use veil_core::*;
use veil_postgres::testing::test_options;
use veil_postgres::{PgOptions, PgStore};

fn script() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../scripts/pg-test-server")
}

/// A server of this test's own, stopped (if still running) and removed when dropped.
struct OwnServer {
    dir: PathBuf,
}

impl OwnServer {
    fn start() -> (Self, String) {
        let dir = std::env::temp_dir().join(format!("veil-pg-down-{}", std::process::id()));
        let output = Command::new(script())
            .arg("start")
            .arg(&dir)
            .output()
            .expect("scripts/pg-test-server runs");
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
        let url = String::from_utf8_lossy(&output.stdout).trim().to_owned();
        (Self { dir }, url)
    }

    fn stop(&self) {
        let status = Command::new(script())
            .arg("stop")
            .arg(&self.dir)
            .status()
            .expect("scripts/pg-test-server runs");
        assert!(status.success());
    }
}

impl Drop for OwnServer {
    fn drop(&mut self) {
        let _ = Command::new(script()).arg("stop").arg(&self.dir).status();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Timeouts no failure in this test may wait for: it fails on its own, when the server stops.
const TIMEOUT_NEVER_REACHED: Duration = Duration::from_secs(30);

/// Fails the test unless `result` is `Unavailable` for a reason other than one of the store's timeouts.
fn unavailable_without_a_timeout<T>(result: Result<T, StoreError>, what: &str) {
    match result {
        Err(StoreError::Unavailable(why)) => assert!(
            !why.contains("timed out") && !why.contains("in time"),
            "{what} waited for a timeout: {why}"
        ),
        Err(other) => panic!("{what}: not unavailable: {other:?}"),
        Ok(_) => panic!("{what} succeeded with the server stopped"),
    }
}

fn record() -> QueueRecord {
    QueueRecord {
        id: 1,
        key: QueueKey::new(DEFAULT_NAMESPACE, "orders"),
        config: QueueConfig::default(),
        created_at: 0,
        modified_at: 0,
        seq_reserved: 0,
    }
}

#[tokio::test]
async fn a_stopped_server_fails_commits_quickly_as_unavailable() {
    let Some(shared) = test_options("server_down") else {
        return;
    };
    let (server, url) = OwnServer::start();
    let options = PgOptions {
        url,
        connect_timeout: TIMEOUT_NEVER_REACHED,
        statement_timeout: TIMEOUT_NEVER_REACHED,
        ..shared
    };
    let store = PgStore::open(options.clone(), veil_postgres::Scope::Whole).expect("opens");
    let failed = store.failed();
    store
        .submit(vec![StoreOp::PutQueue(Box::new(record()))])
        .await
        .expect("committed while the server runs");
    server.stop();
    let result = store.submit(vec![StoreOp::PutNextQueueId(9)]).await;
    unavailable_without_a_timeout(result, "the commit after the stop");
    assert!(*failed.borrow());
    assert!(matches!(
        store.submit(vec![]).await,
        Err(StoreError::Unavailable(_))
    ));
    unavailable_without_a_timeout(store.read_payloads(1, &[0]), "a read after the stop");
    unavailable_without_a_timeout(
        PgStore::open(options, veil_postgres::Scope::Whole),
        "an open after the stop",
    );
}
