//! Pinning what a regression seed exercised. A seed names a run only through the operation generator: change
//! the generator (a new operation kind, another weight, one more random draw) and seed 21 becomes another run,
//! and its regression test passes without exercising what it was kept for. So each kept seed is pinned to the
//! digest of the scenario it generates and to the number of requests its run made; a mismatch fails loudly
//! and says to re-pin (after checking that the seed, or a new one, still exercises the situation).

use sha2::{Digest, Sha256};

use crate::ops::{generate, Scenario};
use crate::run::{run, Options, RunResult};

/// What a kept seed exercised when it was pinned.
#[derive(Clone, Copy, Debug)]
pub struct Pinned {
    pub seed: u64,
    pub steps: usize,
    /// [`digest`] of the scenario the seed generated.
    pub digest: &'static str,
    /// Requests its run made (operations that found nothing to act on make none).
    pub requests: u64,
}

/// The first 16 hex digits of the SHA-256 of the scenario (its setup and every operation with its fields):
/// any change to what the generator draws changes it.
pub fn digest(scenario: &Scenario) -> String {
    let text = format!(
        "{:?}|{:?}|{:?}",
        scenario.seed, scenario.setup, scenario.ops
    );
    let hash = Sha256::digest(text.as_bytes());
    hex::encode(&hash[..8])
}

/// Runs a pinned seed after checking that it is still the run it was pinned for. `Err` says what changed and
/// how to re-pin; `Ok` is the run's result, for the caller to judge.
pub fn run_pinned(pinned: &Pinned, options: Options) -> Result<RunResult, String> {
    let scenario = generate(pinned.seed, pinned.steps);
    let found = digest(&scenario);
    if found != pinned.digest {
        return Err(format!(
            "seed {} ({} steps) no longer generates the run it was pinned for: its scenario digest is {found}, \
             pinned {}. The operation generator changed, so this test would pass without exercising what it \
             was kept for. Check that the seed (or another one) still exercises it, then re-pin with \
             `cargo run -p veil-sim -- --seed {} --steps {} --pin`",
            pinned.seed, pinned.steps, pinned.digest, pinned.seed, pinned.steps
        ));
    }
    let result = run(&scenario, options);
    if result.stats.requests != pinned.requests {
        return Err(format!(
            "seed {} ({} steps) made {} requests, pinned {}: the run is no longer the one pinned (the \
             simulator's executor or the engine changed what the operations do). Check that the seed still \
             exercises what it was kept for, then re-pin with `cargo run -p veil-sim -- --seed {} --steps {} --pin`",
            pinned.seed, pinned.steps, result.stats.requests, pinned.requests, pinned.seed, pinned.steps
        ));
    }
    Ok(result)
}

/// One digest for the scenarios of seeds `start .. start + count`: the CI slice's pin.
pub fn digest_of_seeds(start: u64, count: u64, steps: usize) -> String {
    let mut hash = Sha256::new();
    for seed in start..start + count {
        hash.update(digest(&generate(seed, steps)).as_bytes());
    }
    hex::encode(&hash.finalize()[..8])
}
