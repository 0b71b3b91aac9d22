//! The checker can fail: against a deliberately broken store the simulator reports a violation, with the seed
//! that reproduces it and a minimal trace.

use veil_sim::{generate, report, run_seeds, shrink, Options, StoreMode};

/// A store that answers a commit before the write is durable (and loses it in a crash) breaks "an
/// acknowledged change is durable" on the first acknowledged send of nearly every seed.
#[test]
fn a_store_that_acknowledges_before_durability_is_caught_with_its_seed() {
    veil_sim::quiet_panics();
    let broken = Options {
        store: StoreMode::AcksBeforeDurable,
        ..Options::default()
    };
    let summary = run_seeds(0, 50, 100, 1, broken);
    let (seed, violation) = summary
        .failures
        .into_iter()
        .next()
        .expect("the simulator reports the broken store");
    assert!(
        violation.kind.contains("not durable") || violation.kind.contains("lost"),
        "seed {seed}: {violation}"
    );
    // The failure shrinks to a handful of operations and reproduces from its seed.
    let shrunk = shrink(&generate(seed, 100), broken, violation.clone());
    assert!(shrunk.scenario.ops.len() <= 5, "{:?}", shrunk.scenario.ops);
    let text = report(seed, 100, violation, broken);
    assert!(text.contains(&format!("--seed {seed}")), "{text}");
}
