//! The round trip scenario: one request's service time on an unloaded system, the latency a single client
//! sees. Lockstep, so that no figure includes time spent queued behind the client's own earlier messages.

use super::{from_report, run_queue, Plan};
use crate::error::BenchError;
use crate::results::ScenarioRun;
use crate::run::{self, Workload};
use crate::target::Target;

/// Scenario 1, Round trip: one producer, one consumer, unbatched, lockstep (each message sent, then received, then
/// deleted before the next is sent), so each latency is the service time of an unloaded system.
pub(super) async fn round_trip<T: Target>(
    target: &T,
    plan: &Plan,
) -> Result<ScenarioRun, BenchError> {
    let workload = Workload {
        body_size: 256,
        duration_s: Some(plan.duration_s),
        wait_s: 5,
        lockstep: true,
        ..Workload::baseline(run_queue("rt"))
    };
    target
        .prepare(&workload.queue, workload.visibility_s)
        .await?;
    let report = run::run(target, workload).await;
    print!("{}", report.summary());
    let cdf = report.cdf_us.end_to_end.clone();
    Ok(from_report(report, cdf))
}
