//! veil-sim: deterministic simulation of Veil's engine (docs/reliability.md, "Deterministic
//! simulation"). A seed generates a scenario — queue settings and a list of client requests and faults — which
//! runs against the real `veil_core::Engine` over a fault-injecting store (`store`) and a manual clock, with
//! every request polled by the simulator itself: no runtime, no threads, no real time, so a seed replays the
//! same run exactly. `run` checks the invariants after every step; `shrink` reduces a failing run to a minimal
//! one; `run_seeds` spreads many seeds over threads (each seed stays single-threaded).

pub mod backend;
pub mod disk;
pub mod limits;
pub mod ops;
pub mod pin;
pub mod run;
pub mod shrink;
pub mod store;
pub mod wal;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

pub use ops::{generate, Op, Scenario};
pub use pin::{digest, digest_of_seeds, run_pinned, Pinned};
pub use run::{run, Options, RunResult, RunStats, Violation};
pub use shrink::{shrink, Shrunk};
pub use store::{FaultStore, StoreMode};

/// What a batch of seeds did.
pub struct Summary {
    pub seeds: u64,
    pub stats: RunStats,
    /// The failing seeds found (the run stops soon after the first), lowest first.
    pub failures: Vec<(u64, Violation)>,
    pub elapsed: Duration,
    /// Each seed's wall time in milliseconds, in no order.
    pub per_seed_ms: Vec<f64>,
}

/// Runs seeds `start .. start + count` of `steps` operations each on `threads` threads, stopping soon after
/// the first failure.
pub fn run_seeds(
    start: u64,
    count: u64,
    steps: usize,
    threads: usize,
    options: Options,
) -> Summary {
    let began = Instant::now();
    let next = AtomicU64::new(start);
    let stop = AtomicBool::new(false);
    let done = AtomicU64::new(0);
    let total = Mutex::new(RunStats::default());
    let failures = Mutex::new(Vec::new());
    let per_seed_ms = Mutex::new(Vec::new());
    std::thread::scope(|scope| {
        for _ in 0..threads.max(1) {
            scope.spawn(|| {
                let mut mine = RunStats::default();
                let mut times = Vec::new();
                while !stop.load(Ordering::Relaxed) {
                    let seed = next.fetch_add(1, Ordering::Relaxed);
                    if seed >= start + count {
                        break;
                    }
                    let began = Instant::now();
                    let result = run(&generate(seed, steps), options);
                    times.push(began.elapsed().as_secs_f64() * 1e3);
                    mine.add(&result.stats);
                    done.fetch_add(1, Ordering::Relaxed);
                    if let Some(violation) = result.violation {
                        failures
                            .lock()
                            .unwrap_or_else(|e| e.into_inner())
                            .push((seed, violation));
                        stop.store(true, Ordering::Relaxed);
                    }
                }
                total.lock().unwrap_or_else(|e| e.into_inner()).add(&mine);
                per_seed_ms
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .extend(times);
            });
        }
    });
    let mut failures = failures.into_inner().unwrap_or_else(|e| e.into_inner());
    failures.sort_by_key(|(seed, _)| *seed);
    Summary {
        seeds: done.into_inner(),
        stats: total.into_inner().unwrap_or_else(|e| e.into_inner()),
        failures,
        elapsed: began.elapsed(),
        per_seed_ms: per_seed_ms.into_inner().unwrap_or_else(|e| e.into_inner()),
    }
}

/// Engine panics are caught and reported as violations with their seed; the default hook would also print
/// each one, once per shrinking re-run.
pub fn quiet_panics() {
    std::panic::set_hook(Box::new(|_| {}));
}

/// A failing seed's report: the seed, the violation, and the minimal trace that reproduces it.
pub fn report(seed: u64, steps: usize, violation: Violation, options: Options) -> String {
    use std::fmt::Write as _;
    let scenario = generate(seed, steps);
    let shrunk = shrink(&scenario, options, violation.clone());
    let replay = run(
        &shrunk.scenario,
        Options {
            trace: true,
            ..options
        },
    );
    let mut out = String::new();
    let _ = writeln!(out, "FAILED: seed {seed} ({steps} steps): {violation}");
    let _ = writeln!(
        out,
        "minimal run: {} of {} operations (shrunk in {} re-runs); setup {:?}",
        shrunk.scenario.ops.len(),
        scenario.ops.len(),
        shrunk.runs,
        shrunk.scenario.setup
    );
    for line in &replay.trace {
        let _ = writeln!(out, "  {line}");
    }
    let _ = writeln!(
        out,
        "  => {}",
        replay.violation.map_or_else(
            || "(the minimal run passed on replay)".into(),
            |v| v.to_string()
        )
    );
    let store = if options.store == StoreMode::Wal {
        " --store wal"
    } else {
        ""
    };
    let _ = writeln!(
        out,
        "replay: cargo run --release -p veil-sim -- --seed {seed} --steps {steps}{store}"
    );
    out
}
