//! The simulation's CI slice: a few hundred seeds, run by `cargo test --workspace --release` (scripts/test).
//! The long run (10,000 seeds) is `cargo run --release -p veil-sim -- --seeds 10000` (docs/reliability.md).

use veil_sim::{generate, report, run, run_seeds, Options};

/// Seeds CI runs; about 10 s on the shared 2-core machine.
const CI_SEEDS: u64 = 300;
const CI_STEPS: usize = veil_sim::limits::STEPS_DEFAULT;

#[test]
fn every_invariant_holds_for_the_ci_seeds() {
    veil_sim::quiet_panics();
    let summary = run_seeds(0, CI_SEEDS, CI_STEPS, 2, Options::default());
    if let Some((seed, violation)) = summary.failures.into_iter().next() {
        panic!("{}", report(seed, CI_STEPS, violation, Options::default()));
    }
    assert_eq!(summary.seeds, CI_SEEDS);
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
