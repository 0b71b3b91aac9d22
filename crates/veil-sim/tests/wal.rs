//! `--store wal`: the engine over the real log, checkpointer and recovery on a simulated disk
//! (docs/reliability.md, "Deterministic simulation"). CI runs 200 seeds of it through the binary
//! (scripts/test); these check that a slice really exercises what the mode is for, that a seed replays, and
//! keep the store bug it found.

use veil_sim::{generate, report, run, run_pinned, run_seeds, Options, Pinned, StoreMode};

const STEPS: usize = veil_sim::limits::STEPS_DEFAULT;

fn wal() -> Options {
    Options {
        store: StoreMode::Wal,
        ..Options::default()
    }
}

/// Runs a kept seed with `options`, first checking that it still generates the run it was kept for
/// (`pin.rs`): a changed generator fails here instead of passing without exercising what it was kept for.
fn passes(seed: u64, digest: &'static str, requests: u64, options: Options) {
    let pinned = Pinned {
        seed,
        steps: STEPS,
        digest,
        requests,
    };
    let result = run_pinned(&pinned, options).unwrap_or_else(|why| panic!("{why}"));
    if let Some(violation) = result.violation {
        panic!("{}", report(seed, STEPS, violation, options));
    }
}

#[test]
fn a_wal_slice_crashes_fails_checkpoints_and_recovers_across_segments() {
    veil_sim::quiet_panics();
    let summary = run_seeds(0, 8, STEPS, 2, wal());
    drop(std::panic::take_hook());
    if let Some((seed, violation)) = summary.failures.into_iter().next() {
        panic!("{}", report(seed, STEPS, violation, wal()));
    }
    let s = summary.stats;
    let d = s.disk;
    assert!(
        s.crashes > 0 && d.recoveries > 0 && d.recoveries_interrupted > 0,
        "{s:?}"
    );
    assert!(d.recoveries_across_segments > 0 && d.checkpoints > 0 && d.segments > d.recoveries);
    assert!(d.eio > 0 && d.enospc > 0 && s.errors > 0 && s.acknowledged > 0);
    // Durability is judged after recoveries, against what the recovered store holds.
    assert!(s.durability_checks >= d.recoveries, "{s:?}");
    assert_eq!(
        d.idle_timeouts, 0,
        "the checkpointer was not waited for: a seed may not replay"
    );
}

#[test]
fn a_wal_seed_replays_the_same_run() {
    let traced = Options {
        trace: true,
        ..wal()
    };
    for seed in [10, 33] {
        let scenario = generate(seed, STEPS);
        let first = run(&scenario, traced);
        let second = run(&scenario, traced);
        assert_eq!(
            first.trace, second.trace,
            "seed {seed} ran differently twice"
        );
        assert_eq!(
            format!("{:?}", first.stats),
            format!("{:?}", second.stats),
            "seed {seed}"
        );
    }
}

/// Found by `--store wal --log-flips`: a bit flipped while recovery reads the newest log segment (the disk's
/// bytes are right, the read was not) fails that record's checksum, and recovery takes it for a torn tail:
/// it drops the record and every acknowledged record after it, checkpoints the rest and removes the
/// segment, so acknowledged changes are lost for good. Here an acknowledged receive's visibility is lost
/// and the message was delivered again inside its window. veil-store now reads a segment that ends in a tear
/// or corruption twice, and takes a damaged record with a valid one after it for corruption, never a tear
/// (docs/decisions/0004-write-ahead-log.md, "Recovery").
#[test]
fn seed_33_with_log_flips_recovery_keeps_acknowledged_records_after_a_flipped_read() {
    let options = Options {
        log_flips: true,
        ..wal()
    };
    passes(33, "8dec7cbf21ffb813", 189, options);
}

/// Found by the first long run: a bit flipped in a read of the redb file is not detected by veil-store (redb
/// checks page checksums at open only). Read inside a checkpoint's transaction and written back, the flip
/// reaches the disk with a valid checksum: here the applied log generation reads 0 and start-up refuses
/// the store as "older than its log" (it passes without read flips).
#[test]
#[ignore = "veil-store bug: a flipped redb read is not detected and a checkpoint can write it back"]
fn seed_1887_a_flipped_redb_read_does_not_corrupt_the_store() {
    passes(1887, "7a32511fa7c4ef44", 198, wal());
}

/// Found by the first long run: a bit flipped in a read of the redb file makes a length out of range and the
/// engine panics reading it (`range end index 1050168 out of range for slice of length 4096`) instead of
/// getting an error (it passes without read flips).
#[test]
#[ignore = "veil-store bug: a flipped redb read panics instead of failing with corruption"]
fn seed_51112_a_flipped_redb_read_is_an_error_not_a_panic() {
    passes(51_112, "bbb519f5d2659130", 193, wal());
}

/// Found by the long run without read flips (the checker's mistake): a change or update grants its window
/// in the queue its receipt names. The model took the queue of the message's last window, and a long poll
/// answered after a re-queue left that one in the message's old FIFO queue, where it then held the group's
/// next message back.
#[test]
fn seed_55030_a_change_or_update_holds_the_message_in_the_queue_its_receipt_names() {
    let options = Options {
        no_read_flips: true,
        ..wal()
    };
    passes(55_030, "22c968c19426b7a2", 213, options);
}
