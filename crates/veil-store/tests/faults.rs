//! The store under injected disk faults (docs/reliability.md "Storage faults"): a log append that fails with
//! EIO, one that writes only a prefix (torn), a failed fdatasync, a checkpoint that fails before or after its
//! redb commit. After each, the failed submission and every later one get an error (never success), the store
//! says it failed, and a reopen after a drop without close (no final checkpoint) holds every acknowledged
//! change and nothing submitted after the fault.

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::Arc;

use veil_core::{
    Engine, EngineError, ManualClock, NewMessage, QueueConfig, QueueKey, ReceiptKey,
    ReceiveOptions, StoreError, DEFAULT_NAMESPACE,
};
use veil_store::{Fault, FaultPlan, RedbStore, StoreOptions};

const START_MS: u64 = 1_700_000_000_000;
/// Small segments, so that a few sends rotate the log and start checkpoints.
const SEGMENT_BYTES: u64 = 8 * 1024;
/// Each body is this large: about four fit a segment.
const BODY_BYTES: usize = 2 * 1024;
/// Sends a test makes at most; every fault strikes well before.
const SENDS_MAX: usize = 60;
/// Sends made after the first failure, each of which must fail too.
const SENDS_AFTER_FAILURE: usize = 5;

fn orders() -> QueueKey {
    QueueKey::new(DEFAULT_NAMESPACE, "orders")
}

fn options(faults: Option<Arc<FaultPlan>>) -> StoreOptions {
    StoreOptions {
        wal_segment_bytes_max: SEGMENT_BYTES,
        faults,
        ..StoreOptions::default()
    }
}

fn engine_on(store: Arc<RedbStore>) -> Engine {
    Engine::open(
        store,
        Arc::new(ManualClock::new(START_MS)),
        ReceiptKey::new([3; 32]),
    )
    .expect("engine opens")
}

fn body(i: usize) -> String {
    format!("{i:06}-{}", "x".repeat(BODY_BYTES))
}

/// Every body in the queue after reopening `dir`, read by receiving them all (the clock stands still, so none
/// comes back).
async fn bodies_after_reopening(dir: &Path) -> BTreeSet<String> {
    let store = Arc::new(RedbStore::open(dir, options(None)).expect("reopens"));
    let engine = engine_on(store.clone());
    let mut bodies = BTreeSet::new();
    loop {
        let mut receive = ReceiveOptions::new(10);
        receive.wait_ms = Some(0);
        receive.visibility_ms = Some(3_600_000);
        let got = engine.receive(&orders(), receive).await.expect("receives");
        if got.is_empty() {
            break;
        }
        for message in got {
            assert!(
                bodies.insert(String::from_utf8_lossy(&message.payload.body).into_owned()),
                "a message was delivered twice"
            );
        }
    }
    drop(engine);
    store.close();
    bodies
}

/// What a run under one fault did.
struct Run {
    acknowledged: BTreeSet<String>,
    /// The body of the first send that failed.
    first_failed: String,
}

/// Creates the queue, then sends one message at a time (one submission, one log append each) until a send
/// fails; checks that the store then reports its failure and refuses every later send; then drops the store
/// without closing it (no final checkpoint), as a crash would leave it.
async fn run_until_the_fault(dir: &Path, plan: &Arc<FaultPlan>) -> Run {
    let store = Arc::new(RedbStore::open(dir, options(Some(plan.clone()))).expect("opens"));
    let engine = engine_on(store.clone());
    engine
        .create_queue(orders(), QueueConfig::default())
        .await
        .expect("creates the queue");
    let failed = store.failed();
    let mut acknowledged = BTreeSet::new();
    let mut first_failed = None;
    for i in 0..SENDS_MAX {
        let sent = engine.send(&orders(), vec![NewMessage::new(body(i))]).await;
        match sent {
            Ok(_) => {
                assert!(first_failed.is_none(), "send {i} succeeded after a failure");
                acknowledged.insert(body(i));
            }
            Err(EngineError::Store(StoreError::Io(_))) => {
                if first_failed.is_none() {
                    first_failed = Some(i);
                }
            }
            Err(other) => panic!("send {i} failed with {other}, not a store I/O error"),
        }
        if let Some(first) = first_failed {
            if i >= first + SENDS_AFTER_FAILURE {
                break;
            }
        }
        if plan.injected() > 0 && first_failed.is_none() {
            // A checkpoint's failure is learnt at the next rotation; this asks for it now.
            if let Err(error) = store.checkpoint_now() {
                assert!(matches!(error, StoreError::Io(_)), "{error}");
                first_failed = Some(i + 1);
            }
        }
    }
    assert_eq!(plan.injected(), 1, "the fault struck once");
    let first = first_failed.expect("a send failed after the fault");
    assert!(*failed.borrow(), "the store reports that it failed");
    assert!(
        matches!(store.checkpoint_now(), Err(StoreError::Io(_))),
        "a failed store refuses checkpoints too"
    );
    // Reads still work on the failed store: the queue and its counts are in memory.
    assert!(engine.stats(&orders()).is_ok());
    store.abandon();
    drop(engine);
    Run {
        acknowledged,
        first_failed: body(first),
    }
}

/// Runs until the fault, reopens, and checks that exactly the acknowledged sends are there — and, when
/// `failed_may_return`, possibly the send that failed first (its record reached the kernel before the error).
async fn check(fault: Fault, nth: u64, failed_may_return: bool) -> Run {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let plan = Arc::new(FaultPlan::new(fault, nth));
    let run = run_until_the_fault(dir.path(), &plan).await;
    let reopened = bodies_after_reopening(dir.path()).await;
    let lost: Vec<_> = run.acknowledged.difference(&reopened).collect();
    assert!(
        lost.is_empty(),
        "{fault:?}: acknowledged sends lost: {}",
        lost.len()
    );
    let unknown: Vec<_> = reopened
        .difference(&run.acknowledged)
        .filter(|b| !(failed_may_return && **b == run.first_failed))
        .collect();
    assert!(
        unknown.is_empty(),
        "{fault:?}: sends that failed after the fault came back: {}",
        unknown.len()
    );
    // Reopening once more finds them all, now in flight: the recovery itself lost nothing.
    let store = Arc::new(RedbStore::open(dir.path(), options(None)).expect("reopens"));
    let stats = engine_on(store.clone())
        .stats(&orders())
        .expect("the queue");
    assert_eq!((stats.visible, stats.hidden), (0, reopened.len() as u64));
    store.close();
    run
}

#[tokio::test]
async fn a_log_write_that_fails_with_eio_fails_its_send_and_every_later_one_and_loses_nothing_acknowledged(
) {
    // Append 1 is the queue's creation; 7 is the sixth send.
    let run = check(Fault::WriteEio, 7, false).await;
    assert_eq!(run.acknowledged.len(), 5);
}

#[tokio::test]
async fn a_torn_log_write_is_cut_at_the_next_start_and_loses_nothing_acknowledged() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let plan = Arc::new(FaultPlan::new(Fault::WriteTorn, 7));
    let run = run_until_the_fault(dir.path(), &plan).await;
    let store = RedbStore::open(dir.path(), options(None)).expect("reopens");
    assert!(
        store.recovered().torn_bytes > 0,
        "the torn half record was found and cut"
    );
    drop(store);
    assert_eq!(bodies_after_reopening(dir.path()).await, run.acknowledged);
    check(Fault::WriteTorn, 3, false).await;
}

#[tokio::test]
async fn a_failed_log_sync_fails_its_send_and_every_later_one_and_loses_nothing_acknowledged() {
    // The record reached the kernel before its fdatasync failed, so the failed send may come back after a
    // restart (a 500 is an unknown outcome to the client); nothing after it does.
    let run = check(Fault::SyncEio, 4, true).await;
    assert_eq!(run.acknowledged.len(), 2);
}

#[tokio::test]
async fn a_checkpoint_that_fails_stops_the_store_from_writing_and_loses_nothing_acknowledged() {
    for nth in [1, 2] {
        let run = check(Fault::CheckpointEio, nth, false).await;
        assert!(!run.acknowledged.is_empty());
    }
}

#[tokio::test]
async fn a_crash_in_the_middle_of_a_checkpoint_loses_nothing_acknowledged() {
    // redb holds the checkpoint but its log segment is still there: start-up must skip the segment, not apply
    // it twice (a message would come back).
    for nth in [1, 3] {
        check(Fault::CheckpointAfterCommit, nth, false).await;
    }
}

#[tokio::test]
async fn probing_a_healthy_data_directory_succeeds_and_leaves_nothing_behind() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    veil_store::probe_writable(dir.path(), SEGMENT_BYTES)
        .expect("a healthy directory takes writes");
    assert_eq!(std::fs::read_dir(dir.path()).expect("lists").count(), 0);
    let error =
        veil_store::probe_writable(dir.path(), u64::MAX / 4).expect_err("no disk is that large");
    assert!(error.to_string().contains("bytes free"), "{error}");
}
