//! The simulation's CI slice: a few hundred seeds, run by `cargo test --workspace --release` (scripts/test).
//! The long run (10,000 seeds) is `cargo run --release -p veil-sim -- --seeds 10000` (docs/reliability.md).

use veil_sim::{digest_of_seeds, generate, report, run, run_seeds, Options};

/// Seeds CI runs; about 10 s on the shared 2-core machine.
const CI_SEEDS: u64 = 300;
const CI_STEPS: usize = veil_sim::limits::STEPS_DEFAULT;
/// What the CI slice exercised when it was pinned (`pin.rs`): the digest of its scenarios and the requests
/// its runs made. A change to the operation generator or to what operations do fails here, loudly.
const CI_DIGEST: &str = "23c4d60ca045b1c3";
const CI_REQUESTS: u64 = 54_412;

#[test]
fn every_invariant_holds_for_the_ci_seeds() {
    veil_sim::quiet_panics();
    let summary = run_seeds(0, CI_SEEDS, CI_STEPS, 2, Options::default());
    // The default hook again, so that a failed assertion below prints its message.
    drop(std::panic::take_hook());
    if let Some((seed, violation)) = summary.failures.into_iter().next() {
        panic!("{}", report(seed, CI_STEPS, violation, Options::default()));
    }
    assert_eq!(summary.seeds, CI_SEEDS);
    let found = digest_of_seeds(0, CI_SEEDS, CI_STEPS);
    assert!(
        found == CI_DIGEST && summary.stats.requests == CI_REQUESTS,
        "the CI slice is no longer the one pinned: scenarios digest {found} (pinned {CI_DIGEST}), requests {} \
         (pinned {CI_REQUESTS}). The operation generator or the executor changed; check that the slice still \
         exercises every fault (the assertions below), then re-pin CI_DIGEST and CI_REQUESTS",
        summary.stats.requests
    );
    // The faults really happen: a slice without crashes or failed commits would prove little.
    let s = summary.stats;
    assert!(s.crashes > 0 && s.commit_failures > 0 && s.slow_commits > 0 && s.clock_jumps > 0);
    assert!(s.in_doubt > 0 && s.deliveries > 0 && s.drained > 0);
}

#[test]
fn a_seed_replays_the_same_run() {
    for seed in [3, 41, 977] {
        let scenario = generate(seed, CI_STEPS);
        assert_eq!(scenario.ops, generate(seed, CI_STEPS).ops, "seed {seed}");
        let traced = Options {
            trace: true,
            ..Options::default()
        };
        let first = run(&scenario, traced);
        let second = run(&scenario, traced);
        assert!(!first.trace.is_empty());
        assert_eq!(
            first.trace, second.trace,
            "seed {seed} ran differently twice"
        );
    }
}
