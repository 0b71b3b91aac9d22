//! The throughput scenario: how many messages a system moves end to end when producers and consumers push as
//! hard as they can with batches. The same workload with a send rate is the half-load scenario
//! ([`super::half_load`]), which is why the rate is a parameter here rather than a second copy of it.
//!
//! When the suite knows the server's PID (the Veil it started, or a peer given with `--peer-pid`), a run also
//! records the server's CPU time over the run (`cpu_s`) and that time per message received (`cpu_us_per_msg`).

use super::{from_report, run_queue, Plan};
use crate::cpu;
use crate::error::BenchError;
use crate::results::ScenarioRun;
use crate::run::{self, Workload};
use crate::target::Target;

/// Scenario 2, Throughput: batches of 10, 1 KiB bodies, `clients` producers and as many consumers, deletes on.
/// With a `rate` (the half-load scenario) consumers short-poll (1 ms pause after an empty receive), so that
/// receive latency is the request's service time, not time parked in a long poll. `server_pid` is the process
/// whose CPU time the run measures, if known.
pub(super) async fn throughput<T: Target>(
    target: &T,
    plan: &Plan,
    rate: Option<f64>,
    server_pid: Option<u32>,
) -> Result<ScenarioRun, BenchError> {
    let workload = Workload {
        producers: plan.clients,
        consumers: plan.clients,
        batch: 10,
        duration_s: Some(plan.duration_s),
        rate,
        wait_s: if rate.is_some() { 0 } else { 1 },
        empty_backoff_ms: if rate.is_some() { 1 } else { 0 },
        ..Workload::baseline(run_queue(if rate.is_some() { "half" } else { "tp" }))
    };
    target
        .prepare(&workload.queue, workload.visibility_s)
        .await?;
    let cpu_before = server_pid.and_then(|pid| server_cpu(pid, "before"));
    let report = run::run(target, workload).await;
    let cpu_after = server_pid.and_then(|pid| server_cpu(pid, "after"));
    print!("{}", report.summary());
    let received = report.counts.received;
    let cdf = if rate.is_some() {
        report.cdf_us.receive.clone()
    } else {
        report.cdf_us.end_to_end.clone()
    };
    let mut run = from_report(report, cdf);
    if let Some(rate) = rate {
        run.metrics.insert("offered_per_s".into(), rate);
    }
    if let (Some(before), Some(after)) = (cpu_before, cpu_after) {
        let cpu_s = after - before;
        run.metrics.insert("cpu_s".into(), cpu_s);
        if cpu_s <= 0.0 && received > 0 {
            eprintln!(
                "veil-bench: the server pid used no CPU while it moved {received} messages: is it the server \
                 process itself, not a wrapper or a shell?"
            );
        }
        if received > 0 {
            let per_msg = cpu_s * 1e6 / received as f64;
            run.metrics.insert("cpu_us_per_msg".into(), per_msg);
            println!("   server CPU: {cpu_s:.2} s user+sys, {per_msg:.1} µs per message received");
        }
    }
    Ok(run)
}

/// The server's CPU seconds so far; a failure (the process has gone, or is not ours to read) is printed and
/// leaves the run without the figure rather than failing it.
fn server_cpu(pid: u32, when: &str) -> Option<f64> {
    cpu::cpu_seconds(pid)
        .map_err(|error| {
            eprintln!("veil-bench: server CPU time {when} the run (pid {pid}): {error}")
        })
        .ok()
}
