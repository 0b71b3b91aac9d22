//! What one group commit costs on the real file system (docs/decisions/0010-storage-io.md): submits small
//! commits one after another (each its own group: one append, and in durable mode one fdatasync) and prints
//! the median wall time and the median CPU time (all threads, from getrusage: steadier than wall time on a
//! shared machine) per commit over several rounds, relaxed (no fsync: the store's own CPU cost per commit,
//! where a dispatch through the I/O trait would show) and durable. It uses only `RedbStore::open`, so the same
//! file builds against the store before and after a change, for an A/B.
//!
//! `cargo run --release -p veil-store --example commit_cost -- [commits per round, default 20000] [rounds, default 7]`

use std::time::Instant;

use veil_core::{DedupEntry, Store, StoreOp};
use veil_store::{Durability, RedbStore, StoreOptions};

/// CPU time of the whole process (every thread) so far, in microseconds.
fn cpu_us() -> f64 {
    let mut usage = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: getrusage fills the zeroed struct it is given; RUSAGE_SELF always exists.
    let usage = unsafe {
        libc::getrusage(libc::RUSAGE_SELF, usage.as_mut_ptr());
        usage.assume_init()
    };
    let us = |t: libc::timeval| t.tv_sec as f64 * 1e6 + t.tv_usec as f64;
    us(usage.ru_utime) + us(usage.ru_stime)
}

/// Wall and CPU microseconds per commit of one round.
fn round_us_per_commit(durability: Durability, commits: u64) -> (f64, f64) {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let options = StoreOptions {
        durability,
        ..StoreOptions::default()
    };
    let store = RedbStore::open(dir.path(), options).expect("opens");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime");
    let started = Instant::now();
    let cpu_started = cpu_us();
    runtime.block_on(async {
        for n in 0..commits {
            let op = StoreOp::PutDedup {
                queue: 1,
                key: format!("commit-{n:08}"),
                entry: DedupEntry {
                    sent_at: n,
                    message_id: [7; 16],
                    seq: n,
                },
            };
            store.submit(vec![op]).await.expect("commits");
        }
    });
    let elapsed = started.elapsed();
    let cpu = cpu_us() - cpu_started;
    store.close();
    (
        elapsed.as_secs_f64() * 1e6 / commits as f64,
        cpu / commits as f64,
    )
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

fn main() {
    let mut args = std::env::args().skip(1);
    let commits: u64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(20_000);
    let rounds: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(7);
    for (name, durability, commits) in [
        ("relaxed", Durability::Relaxed, commits),
        ("durable", Durability::Durable, commits / 10),
    ] {
        let (wall, cpu): (Vec<f64>, Vec<f64>) = (0..rounds)
            .map(|_| round_us_per_commit(durability, commits))
            .unzip();
        println!(
            "{name}: {commits} commits x {rounds} rounds, medians per commit: wall {:.2} us, cpu {:.2} us",
            median(wall),
            median(cpu),
        );
    }
}
