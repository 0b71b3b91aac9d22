//! The throughput scenario: how many messages a system moves end to end when producers and consumers push as
//! hard as they can with batches. The same workload with a send rate is the half-load scenario
//! ([`super::half_load`]), which is why the rate is a parameter here rather than a second copy of it.

use super::{from_report, run_queue, Plan};
use crate::error::BenchError;
use crate::results::ScenarioRun;
use crate::run::{self, Workload};
use crate::target::Target;

/// Scenario 2, Throughput: batches of 10, 1 KiB bodies, `clients` producers and as many consumers, deletes on.
/// With a `rate` (the half-load scenario) consumers short-poll (1 ms pause after an empty receive), so that
/// receive latency is the request's service time, not time parked in a long poll.
pub(super) async fn throughput<T: Target>(
    target: &T,
    plan: &Plan,
    rate: Option<f64>,
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
    let report = run::run(target, workload).await;
    print!("{}", report.summary());
    let cdf = if rate.is_some() {
        report.cdf_us.receive.clone()
    } else {
        report.cdf_us.end_to_end.clone()
    };
    let mut run = from_report(report, cdf);
    if let Some(rate) = rate {
        run.metrics.insert("offered_per_s".into(), rate);
    }
    Ok(run)
}
