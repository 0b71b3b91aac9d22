//! The simulated disk (`SimDisk`, docs/decisions/0010-storage-io.md) and the real store on it: what the disk
//! keeps and loses at a crash, the faults it injects, and that the store's log, checkpoint and recovery keep
//! every acknowledged change through them (docs/reliability.md "Storage faults").

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use veil_core::{DedupEntry, Store, StoreError, StoreOp};
use veil_store::{CrashPlan, Effect, IoOp, RedbStore, SimDisk, SimFault, StorageIo, StoreOptions};

fn data_dir() -> PathBuf {
    PathBuf::from("/sim/data")
}

/// Segments of a few hundred bytes, so that a few dozen commits rotate the log and run checkpoints.
fn tiny_segments() -> StoreOptions {
    StoreOptions {
        wal_segment_bytes_max: 512,
        cache_bytes: 1024 * 1024,
        ..StoreOptions::default()
    }
}

fn open(disk: &SimDisk) -> Result<RedbStore, StoreError> {
    RedbStore::open_on(Arc::new(disk.process()), &data_dir(), tiny_segments())
}

/// One change the test can find again: a deduplication entry named by its number.
fn change(n: u64) -> StoreOp {
    StoreOp::PutDedup {
        queue: 1,
        key: format!("change-{n:05}"),
        entry: DedupEntry {
            sent_at: n,
            message_id: [7; 16],
            seq: n,
        },
    }
}

/// The numbers of the changes a store holds.
fn changes(store: &RedbStore) -> BTreeSet<u64> {
    let mut found = BTreeSet::new();
    store
        .load_dedup(&mut |_, _, entry| {
            found.insert(entry.seq);
        })
        .expect("loads");
    found
}

async fn submit(store: &RedbStore, n: u64) -> Result<(), StoreError> {
    store.submit(vec![change(n)]).await
}

fn file(name: &str) -> PathBuf {
    data_dir().join(name)
}

fn io(disk: &SimDisk) -> Arc<dyn StorageIo> {
    Arc::new(disk.clone())
}

// ---- the disk ----

#[test]
fn unsynced_writes_are_lost_at_a_crash_and_synced_ones_kept() {
    let disk = SimDisk::new(1);
    let io = io(&disk);
    io.prepare_dir(&data_dir()).expect("dir");
    let f = io.create_new(&file("a")).expect("creates");
    f.write_at(b"durable", 0).expect("writes");
    f.sync_data().expect("syncs");
    io.sync_dir(&data_dir()).expect("dir syncs");
    f.write_at(b"VOLATILE", 7).expect("writes");
    disk.crash_with(CrashPlan::LoseAll);
    assert_eq!(io.read(&file("a")).expect("reads"), b"durable");
}

#[test]
fn a_crash_can_keep_a_torn_prefix_of_the_last_unsynced_write_at_any_byte() {
    let mut cuts = BTreeSet::new();
    for seed in 0..200 {
        let disk = SimDisk::new(seed);
        let io = io(&disk);
        io.prepare_dir(&data_dir()).expect("dir");
        let f = io.create_new(&file("log")).expect("creates");
        f.sync_all().expect("syncs");
        io.sync_dir(&data_dir()).expect("dir syncs");
        f.write_at(b"0123456789", 0).expect("writes");
        disk.crash_with(CrashPlan::TornPrefix);
        let kept = io.read(&file("log")).expect("reads");
        assert_eq!(kept, &b"0123456789"[..kept.len()], "seed {seed}: a prefix");
        cuts.insert(kept.len());
    }
    assert_eq!(
        cuts.len(),
        11,
        "every cut from 0 to 10 bytes happens: {cuts:?}"
    );
}

#[test]
fn a_rename_or_creation_not_followed_by_a_directory_sync_can_be_lost() {
    let disk = SimDisk::new(3);
    let io = io(&disk);
    io.prepare_dir(&data_dir()).expect("dir");
    let f = io.create_new(&file("tmp")).expect("creates");
    f.write_at(b"secret", 0).expect("writes");
    f.sync_all().expect("syncs");
    io.sync_dir(&data_dir()).expect("dir syncs");
    io.rename(&file("tmp"), &file("key")).expect("renames");
    io.create_new(&file("new")).expect("creates");
    disk.crash_with(CrashPlan::LoseAll);
    assert_eq!(
        io.list_dir(&data_dir()).expect("lists"),
        vec!["tmp".to_owned()]
    );
    assert_eq!(io.read(&file("tmp")).expect("reads"), b"secret");
    io.rename(&file("tmp"), &file("key")).expect("renames");
    io.sync_dir(&data_dir()).expect("dir syncs");
    disk.crash_with(CrashPlan::LoseAll);
    assert_eq!(
        io.list_dir(&data_dir()).expect("lists"),
        vec!["key".to_owned()]
    );
}

#[test]
fn a_handle_opened_before_a_crash_fails_after_it() {
    let disk = SimDisk::new(4);
    let io = io(&disk);
    io.prepare_dir(&data_dir()).expect("dir");
    let f = io.create_new(&file("a")).expect("creates");
    io.sync_dir(&data_dir()).expect("dir syncs");
    disk.crash();
    assert!(f.write_at(b"late", 0).is_err());
    assert!(f.sync_data().is_err());
}

#[test]
fn every_call_through_a_process_handle_fails_after_a_crash_so_a_dead_store_cannot_touch_the_disk() {
    let disk = SimDisk::new(4);
    let before: Arc<dyn StorageIo> = Arc::new(disk.process());
    before.prepare_dir(&data_dir()).expect("dir");
    disk.crash();
    assert!(before.create_new(&file("late")).is_err());
    assert!(before.list_dir(&data_dir()).is_err());
    assert!(before.sync_dir(&data_dir()).is_err());
    let after: Arc<dyn StorageIo> = Arc::new(disk.process());
    after
        .create_new(&file("new"))
        .expect("a handle taken after the crash works");
    assert_eq!(disk.names(&data_dir()), vec!["new".to_owned()]);
}

#[test]
fn injected_eio_and_enospc_are_returned_by_the_nth_call() {
    let disk = SimDisk::new(5);
    let io = io(&disk);
    io.prepare_dir(&data_dir()).expect("dir");
    let f = io.create_new(&file("a")).expect("creates");
    disk.inject(SimFault::nth(IoOp::Write, 2, Effect::Enospc));
    disk.inject(SimFault::nth(IoOp::Sync, 1, Effect::Eio));
    disk.inject(SimFault::nth(IoOp::Read, 1, Effect::Eio));
    f.write_at(b"one", 0).expect("the first write passes");
    let full = f.write_at(b"two", 3).expect_err("the second fails");
    assert_eq!(full.raw_os_error(), Some(libc::ENOSPC));
    let sync = f.sync_data().expect_err("the sync fails");
    assert_eq!(sync.raw_os_error(), Some(libc::EIO));
    let mut out = [0; 3];
    let read = f.read_at(&mut out, 0).expect_err("the read fails");
    assert_eq!(read.raw_os_error(), Some(libc::EIO));
    f.read_at(&mut out, 0).expect("the next read passes");
    assert_eq!(&out, b"one");
}

#[test]
fn a_read_with_a_bit_flip_returns_exactly_one_bit_changed_and_the_disk_keeps_the_right_bytes() {
    let disk = SimDisk::new(6);
    let io = io(&disk);
    io.prepare_dir(&data_dir()).expect("dir");
    let f = io.create_new(&file("a")).expect("creates");
    f.write_at(&[0u8; 64], 0).expect("writes");
    disk.inject(SimFault::nth(IoOp::Read, 1, Effect::FlipBit));
    let flipped = io.read(&file("a")).expect("reads");
    let ones: u32 = flipped.iter().map(|b| b.count_ones()).sum();
    assert_eq!(ones, 1, "one bit flipped");
    assert_eq!(io.read(&file("a")).expect("reads"), vec![0; 64]);
}

#[test]
fn the_same_seed_and_calls_give_the_same_disk_after_a_crash() {
    let after_crash = |seed: u64| {
        let disk = SimDisk::new(seed);
        let io = io(&disk);
        io.prepare_dir(&data_dir()).expect("dir");
        for f in 0..8u8 {
            let handle = io.create_new(&file(&format!("f{f}"))).expect("creates");
            handle.write_at(&[f; 100], 0).expect("writes");
            if f % 2 == 0 {
                handle.sync_all().expect("syncs");
            }
            handle.write_at(&[f + 100; 50], 60).expect("writes");
        }
        io.sync_dir(&data_dir()).expect("dir syncs");
        disk.crash();
        let names = disk.names(&data_dir());
        let contents: Vec<Option<Vec<u8>>> =
            names.iter().map(|n| disk.contents(&file(n))).collect();
        (names, contents, disk.stats())
    };
    for seed in 0..20 {
        assert_eq!(after_crash(seed), after_crash(seed), "seed {seed}");
    }
}

// ---- the real store on the disk ----

#[tokio::test]
async fn every_acknowledged_change_survives_crashes_at_random_points_across_segments_and_checkpoints(
) {
    for seed in 0..20 {
        let disk = SimDisk::new(seed);
        let mut acknowledged = BTreeSet::new();
        let mut n = 0;
        for round in 0..4 {
            let store = open(&disk).unwrap_or_else(|e| panic!("seed {seed} round {round}: {e}"));
            let found = changes(&store);
            assert!(
                acknowledged.is_subset(&found),
                "seed {seed} round {round}: lost {:?}",
                acknowledged.difference(&found).collect::<Vec<_>>()
            );
            assert!(
                found.iter().all(|c| *c < n),
                "seed {seed}: a change never submitted"
            );
            acknowledged = found;
            let commits = 20 + (seed * 7 + round * 13) % 40;
            for _ in 0..commits {
                submit(&store, n).await.expect("the healthy disk takes it");
                acknowledged.insert(n);
                n += 1;
            }
            // Submitted but maybe not acknowledged when the power goes.
            let in_flight = store.submit(vec![change(n)]);
            n += 1;
            disk.crash();
            let _either_is_fine = in_flight.await;
            drop(store);
        }
        assert!(disk.stats().crashes == 4);
    }
}

#[tokio::test]
async fn a_torn_log_tail_is_cut_at_recovery_and_the_acknowledged_records_before_it_kept() {
    let mut torn = 0;
    for seed in 0..30 {
        let disk = SimDisk::new(seed);
        let store = open(&disk).expect("opens");
        for n in 0..3 {
            submit(&store, n).await.expect("commits");
        }
        // The next append fails part-way (a prefix of it may reach the file), then the power goes.
        disk.inject(SimFault::nth(IoOp::Write, 1, Effect::Eio).on_files("wal-"));
        submit(&store, 3)
            .await
            .expect_err("a failed append is never acknowledged");
        disk.crash_with(CrashPlan::TornPrefix);
        drop(store);
        disk.heal();
        let store = open(&disk).expect("recovers");
        let found = changes(&store);
        let acknowledged: BTreeSet<u64> = (0..3).collect();
        assert!(acknowledged.is_subset(&found), "seed {seed}: {found:?}");
        assert!(found.iter().all(|&n| n <= 3), "seed {seed}: {found:?}");
        if store.recovered().torn_bytes > 0 {
            torn += 1;
            assert!(
                !found.contains(&3),
                "seed {seed}: a torn record was replayed"
            );
        }
    }
    assert!(torn > 0, "no seed tore the record");
}

#[tokio::test]
async fn an_eio_on_the_log_sync_fails_the_commit_and_the_store_refuses_writes_until_reopened() {
    let disk = SimDisk::new(12);
    let store = open(&disk).expect("opens");
    submit(&store, 0).await.expect("commits");
    disk.inject(SimFault::nth(IoOp::Sync, 1, Effect::Eio).on_files("wal-"));
    let error = submit(&store, 1).await.expect_err("not acknowledged");
    // The errno, not its text: glibc and musl word EIO differently.
    assert!(error.to_string().contains("os error 5"), "{error}");
    submit(&store, 2).await.expect_err("fail-stop: refused");
    assert!(*store.failed().borrow());
    store.close();
    drop(store);
    disk.heal();
    let store = open(&disk).expect("reopens");
    let found = changes(&store);
    assert!(found.contains(&0), "{found:?}");
    assert!(!found.contains(&2), "{found:?}");
    submit(&store, 3).await.expect("takes writes again");
}

#[tokio::test]
async fn an_enospc_on_the_log_append_fails_the_commit() {
    let disk = SimDisk::new(13);
    let store = open(&disk).expect("opens");
    disk.inject(SimFault::nth(IoOp::Write, 1, Effect::Enospc).on_files("wal-"));
    let error = submit(&store, 0).await.expect_err("not acknowledged");
    assert!(error.to_string().contains("os error 28"), "{error}");
}

#[tokio::test]
async fn a_flipped_bit_in_the_redb_file_stops_start_up_with_a_corruption_error() {
    let disk = SimDisk::new(14);
    let store = open(&disk).expect("opens");
    for n in 0..40 {
        submit(&store, n).await.expect("commits");
    }
    store.close();
    drop(store);
    let redb = file("veil.redb");
    let bytes = disk.contents(&redb).expect("the redb file");
    let mut refused = 0;
    // A flip in free space changes nothing; one in a committed page must be refused, never served.
    for offset in (4096..bytes.len()).step_by(4096) {
        let copy = SimDisk::new(15);
        let copy_io = io(&copy);
        copy_io.prepare_dir(&data_dir()).expect("dir");
        let f = copy_io.create_new(&redb).expect("creates");
        f.write_at(&bytes, 0).expect("writes");
        f.sync_all().expect("syncs");
        copy_io.sync_dir(&data_dir()).expect("dir syncs");
        copy.flip_stored_bit(&redb, offset + 100, 3).expect("flips");
        match open(&copy) {
            Err(StoreError::Corrupt(why)) => {
                assert!(why.contains("veil.redb"), "{why}");
                refused += 1;
            }
            Err(other) => panic!("offset {offset}: {other}"),
            Ok(store) => assert_eq!(changes(&store), (0..40).collect(), "offset {offset}"),
        }
    }
    assert!(refused > 0, "no flip landed in a committed page");
}

#[tokio::test]
async fn a_flipped_bit_read_back_from_a_closed_log_segment_is_corruption_not_a_tear() {
    let disk = SimDisk::new(16);
    let store = open(&disk).expect("opens");
    // Fill more than one segment, then stop as a crash would: both segments are left for recovery.
    disk.inject(SimFault::nth(IoOp::Sync, 1, Effect::Eio).on_files(".redb"));
    let mut n = 0;
    while disk
        .names(&data_dir())
        .iter()
        .filter(|f| f.starts_with("wal-"))
        .count()
        < 2
    {
        submit(&store, n).await.expect("commits");
        n += 1;
    }
    submit(&store, n).await.expect("commits");
    store.abandon();
    drop(store);
    disk.heal();
    let segments: Vec<String> = disk
        .names(&data_dir())
        .into_iter()
        .filter(|f| f.starts_with("wal-"))
        .collect();
    assert!(segments.len() >= 2, "{segments:?}");
    disk.flip_stored_bit(&file(&segments[0]), 20, 0)
        .expect("flips");
    match open(&disk) {
        Err(StoreError::Corrupt(why)) => assert!(why.contains(&segments[0]), "{why}"),
        Err(other) => panic!("{other}"),
        Ok(_) => panic!("a damaged older segment must stop start-up"),
    }
}

/// A disk whose one log segment holds `count` acknowledged records that no checkpoint applied, left as a
/// crash would leave it; and the segment's name.
async fn one_segment_left_for_recovery(seed: u64, count: u64) -> (SimDisk, String) {
    let disk = SimDisk::new(seed);
    let store = open(&disk).expect("opens");
    for n in 0..count {
        submit(&store, n).await.expect("commits");
    }
    store.abandon();
    drop(store);
    let segments: Vec<String> = disk
        .names(&data_dir())
        .into_iter()
        .filter(|f| f.starts_with("wal-"))
        .collect();
    assert_eq!(segments.len(), 1, "{segments:?}");
    (disk, segments[0].clone())
}

#[tokio::test]
async fn a_flipped_bit_stored_in_a_record_of_the_newest_segment_with_records_after_it_stops_start_up(
) {
    let (disk, segment) = one_segment_left_for_recovery(19, 4).await;
    // Byte 20 is inside the first record (8 bytes of magic, 8 of header): three acknowledged ones follow.
    disk.flip_stored_bit(&file(&segment), 20, 0).expect("flips");
    match open(&disk) {
        Err(StoreError::Corrupt(why)) => {
            assert!(why.contains(&segment) && why.contains("byte 8"), "{why}");
        }
        Err(other) => panic!("{other}"),
        Ok(store) => panic!(
            "acknowledged records were dropped as a torn tail: {:?}",
            changes(&store)
        ),
    }
    assert!(
        disk.names(&data_dir()).contains(&segment),
        "the damaged segment must be kept for the operator"
    );
}

#[tokio::test]
async fn a_bit_flipped_in_a_read_of_the_newest_segment_is_read_again_and_loses_no_record() {
    for seed in 0..40 {
        let (disk, _) = one_segment_left_for_recovery(seed, 4).await;
        // Only the first read of the segment flips a bit: the second read has the disk's right bytes.
        disk.inject(SimFault::nth(IoOp::Read, 1, Effect::FlipBit).on_files("wal-"));
        let store = open(&disk).unwrap_or_else(|e| panic!("seed {seed}: {e}"));
        assert_eq!(changes(&store), (0..4).collect(), "seed {seed}");
        store.close();
    }
}

#[test]
fn the_store_on_the_disk_and_the_disk_alone_hold_all_of_its_files() {
    let disk = SimDisk::new(17);
    let store = open(&disk).expect("opens");
    store.close();
    let names = disk.names(&data_dir());
    assert!(names.contains(&"veil.redb".to_owned()), "{names:?}");
    assert!(names.iter().any(|n| n.starts_with("wal-")), "{names:?}");
    assert!(
        !Path::new("/sim").exists(),
        "nothing reached the real file system"
    );
}

/// Seeds per run of the crash-point test; `VEIL_SIM_DISK_SEEDS=<n>` runs more, `VEIL_SIM_DISK_SEED=<s>` one.
const CRASH_POINT_SEEDS_DEFAULT: u64 = 60;

fn crash_point_seeds() -> std::ops::Range<u64> {
    let one = std::env::var("VEIL_SIM_DISK_SEED")
        .ok()
        .and_then(|s| s.parse().ok());
    if let Some(seed) = one {
        return seed..seed + 1;
    }
    let seeds = std::env::var("VEIL_SIM_DISK_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(CRASH_POINT_SEEDS_DEFAULT);
    0..seeds
}

/// Opens the store, retrying while the power keeps going during recovery (a crash point may land there).
fn open_after_crashes(disk: &SimDisk, seed: u64) -> RedbStore {
    for _ in 0..10 {
        let crashes = disk.stats().crashes;
        match open(disk) {
            Ok(store) => return store,
            Err(e) if disk.stats().crashes > crashes => drop(e),
            Err(e) => panic!("seed {seed}: recovery failed without a crash: {e}"),
        }
    }
    panic!("seed {seed}: recovery never finished");
}

#[tokio::test]
async fn a_crash_at_any_write_or_sync_of_a_commit_a_checkpoint_or_a_recovery_loses_no_acknowledged_change(
) {
    for seed in crash_point_seeds() {
        let disk = SimDisk::new(seed);
        let mut acknowledged = BTreeSet::new();
        let mut submitted = 0;
        for round in 0..3u64 {
            let store = open_after_crashes(&disk, seed);
            let found = changes(&store);
            assert!(
                acknowledged.is_subset(&found),
                "seed {seed} round {round}: lost {:?}",
                acknowledged.difference(&found).collect::<Vec<_>>()
            );
            assert!(
                found.iter().all(|c| *c < submitted),
                "seed {seed}: a change never submitted"
            );
            acknowledged = found;
            // The power goes at a seeded write or sync from here on: in an append, a segment's creation, a
            // checkpoint's redb commit or a segment's removal.
            let op = if (seed + round) % 2 == 0 {
                IoOp::Write
            } else {
                IoOp::Sync
            };
            let nth = 1 + (seed.wrapping_mul(2_654_435_761) >> 7).wrapping_add(round * 31) % 150;
            disk.inject(SimFault::nth(op, nth, Effect::Crash));
            let crashes = disk.stats().crashes;
            while disk.stats().crashes == crashes && submitted < 10_000 {
                let n = submitted;
                submitted += 1;
                if submit(&store, n).await.is_ok() {
                    acknowledged.insert(n);
                }
            }
            disk.heal();
            drop(store);
        }
    }
}

/// Found by the crash-point test (seed 254): a crash while a segment was being created could keep its
/// allocated length but not its magic, and start-up then refused the zeros as "not a Veil log segment".
#[tokio::test]
async fn a_crash_while_a_segment_is_created_leaves_a_store_that_opens() {
    for seed in 0..40 {
        let disk = SimDisk::new(seed);
        disk.set_crash_plan(CrashPlan::SomeWrites);
        // The first sync of a log file is the new segment's own, before its directory entry is synced.
        disk.inject(SimFault::nth(IoOp::Sync, 1, Effect::Crash).on_files("wal-"));
        assert!(open(&disk).is_err(), "the power went during the open");
        disk.heal();
        let store = open(&disk).unwrap_or_else(|e| panic!("seed {seed}: {e}"));
        submit(&store, 0).await.expect("commits");
    }
}

#[tokio::test]
async fn a_bit_flipped_on_any_read_of_the_redb_file_at_start_up_is_an_error_or_changes_nothing() {
    let disk = SimDisk::new(18);
    let store = open(&disk).expect("opens");
    for n in 0..40 {
        submit(&store, n).await.expect("commits");
    }
    store.close();
    drop(store);
    let (mut refused, mut unchanged) = (0, 0);
    for nth in 1..80 {
        disk.inject(SimFault::nth(IoOp::Read, nth, Effect::FlipBit).on_files(".redb"));
        let opened = open(&disk);
        disk.heal();
        match opened {
            Err(_) => refused += 1,
            Ok(store) => {
                assert_eq!(changes(&store), (0..40).collect(), "flip at read {nth}");
                unchanged += 1;
                store.close();
            }
        }
    }
    assert!(
        refused > 0 && unchanged > 0,
        "refused {refused}, unchanged {unchanged}"
    );
}

/// The server's path after a failed disk (docs/reliability.md "Storage faults"): the store fail-stops on a
/// random EIO or ENOSPC, is closed, and is reopened on the same disk, sometimes after a crash as well.
#[tokio::test]
async fn a_store_reopened_after_random_write_and_sync_errors_keeps_every_acknowledged_change() {
    for seed in crash_point_seeds() {
        let disk = SimDisk::new(seed);
        let mut acknowledged = BTreeSet::new();
        let mut submitted = 0;
        for round in 0..4u64 {
            let store = open_after_crashes(&disk, seed);
            let found = changes(&store);
            assert!(
                acknowledged.is_subset(&found),
                "seed {seed} round {round}: lost {:?}",
                acknowledged.difference(&found).collect::<Vec<_>>()
            );
            assert!(
                found.iter().all(|c| *c < submitted),
                "seed {seed}: a change never submitted"
            );
            acknowledged = found;
            let effect = if (seed + round) % 2 == 0 {
                Effect::Eio
            } else {
                Effect::Enospc
            };
            disk.inject(SimFault::random(IoOp::Write, 20_000, effect));
            disk.inject(SimFault::random(IoOp::Sync, 20_000, Effect::Eio));
            while !*store.failed().borrow() && submitted < 10_000 {
                let n = submitted;
                submitted += 1;
                if submit(&store, n).await.is_ok() {
                    acknowledged.insert(n);
                }
            }
            store.close();
            disk.heal();
            if (seed + round) % 3 == 0 {
                disk.crash();
            }
            drop(store);
        }
    }
}
