//! `veil-sim`: runs many seeds of the deterministic simulation (docs/reliability.md). On a failure it prints
//! the failing seed and a minimal trace, and exits with status 1.

use clap::Parser;
use veil_sim::limits::STEPS_DEFAULT;
use veil_sim::{digest, generate, quiet_panics, report, run, run_seeds, Options, StoreMode};

#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum StoreArg {
    Fault,
    Wal,
}

#[derive(Parser)]
#[command(about = "Deterministic simulation of Veil's engine over a fault-injecting store")]
struct Args {
    /// How many seeds to run.
    #[arg(long, default_value_t = 1_000)]
    seeds: u64,
    /// The first seed.
    #[arg(long, default_value_t = 0)]
    start: u64,
    /// Replay one seed (with its trace when it fails) instead of a range.
    #[arg(long)]
    seed: Option<u64>,
    /// Operations per seed.
    #[arg(long, default_value_t = STEPS_DEFAULT)]
    steps: usize,
    /// Threads over seeds (each seed runs on one thread); default: the machine's cores.
    #[arg(long)]
    threads: Option<usize>,
    /// Print the trace of a passing `--seed` too.
    #[arg(long)]
    trace: bool,
    /// The store under the engine: `fault`, a fault-injecting store whose durable part is checked after every
    /// step, or `wal`, veil-store's real log, checkpointer and recovery on a simulated disk that crashes,
    /// tears writes, fails with EIO/ENOSPC and flips bits.
    #[arg(long, value_enum, default_value_t = StoreArg::Fault)]
    store: StoreArg,
    /// `--store wal`: reads of the log flip bits too, not only reads of the redb file. Finds a known bug
    /// (docs/reliability.md, "Deterministic simulation"): a flipped bit in the newest log segment is taken for
    /// a torn tail and the acknowledged records from it on are dropped.
    #[arg(long)]
    log_flips: bool,
    /// `--store wal`: no read bit flips (they find veil-store's unchecked redb reads, docs/reliability.md);
    /// crashes, EIO and ENOSPC only.
    #[arg(long)]
    no_read_flips: bool,
    /// Print what pins `--seed` as a kept regression seed (its scenario digest and request count) and exit.
    #[arg(long, requires = "seed")]
    pin: bool,
}

fn main() {
    let args = Args::parse();
    quiet_panics();
    let options = Options {
        store: match args.store {
            StoreArg::Fault => StoreMode::Honest,
            StoreArg::Wal => StoreMode::Wal,
        },
        log_flips: args.log_flips,
        no_read_flips: args.no_read_flips,
        ..Options::default()
    };
    if let (Some(seed), true) = (args.seed, args.pin) {
        let scenario = generate(seed, args.steps);
        let requests = run(&scenario, options).stats.requests;
        println!(
            "seed {seed}, {} steps: digest \"{}\", requests {requests}",
            args.steps,
            digest(&scenario)
        );
        return;
    }
    if let Some(seed) = args.seed {
        let result = run(
            &generate(seed, args.steps),
            Options {
                trace: args.trace,
                ..options
            },
        );
        match result.violation {
            Some(violation) => {
                print!("{}", report(seed, args.steps, violation, options));
                std::process::exit(1);
            }
            None => {
                for line in &result.trace {
                    println!("  {line}");
                }
                println!("seed {seed}: ok ({:?})", result.stats);
                return;
            }
        }
    }
    let threads = args.threads.unwrap_or_else(|| {
        std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get)
    });
    let summary = run_seeds(args.start, args.seeds, args.steps, threads, options);
    let s = summary.stats;
    println!(
        "seeds {}..{}: {} run, {} steps each, {} threads, {:.1} s",
        args.start,
        args.start + args.seeds,
        summary.seeds,
        args.steps,
        threads,
        summary.elapsed.as_secs_f64()
    );
    println!(
        "  steps {}, requests {} (acknowledged {}, errors {}, in doubt {}), deliveries {}, drained {}, statistics recounts {}",
        s.steps, s.requests, s.acknowledged, s.errors, s.in_doubt, s.deliveries, s.drained, s.recounts
    );
    println!(
        "  faults: flushes {}, slow commits {}, commit failures {}, crashes {} (commits lost {}), clock jumps {}, restarts {}",
        s.flushes, s.slow_commits, s.commit_failures, s.crashes, s.lost_commits, s.clock_jumps, s.restarts
    );
    if args.store == StoreArg::Wal {
        let d = s.disk;
        println!(
            "  disk: power losses {} (recoveries {}, {} across segments, {} interrupted, {} failed by a fault), durability checks {}, segments {}, checkpoints {}",
            s.crashes, d.recoveries, d.recoveries_across_segments, d.recoveries_interrupted, d.recoveries_failed, s.durability_checks, d.segments, d.checkpoints
        );
        println!(
            "  disk faults: EIO {}, ENOSPC {}, injected {}, bit-flip seeds {} (corruption detected at recovery {}, at engine start {}), checkpoint waits given up {}",
            d.eio, d.enospc, d.faults_injected, d.flip_seeds, d.corruption_detected, s.flips_detected, d.idle_timeouts
        );
        let mut per_seed = summary.per_seed_ms;
        per_seed.sort_unstable_by(f64::total_cmp);
        if let (Some(median), Some(max)) = (per_seed.get(per_seed.len() / 2), per_seed.last()) {
            println!("  per seed: median {median:.1} ms, max {max:.1} ms");
        }
    }
    match summary.failures.into_iter().next() {
        None => println!("  all seeds passed"),
        Some((seed, violation)) => {
            print!("{}", report(seed, args.steps, violation, options));
            std::process::exit(1);
        }
    }
}
