//! The half load scenario: receive latency at a load the system sustains comfortably, so
//! that the figure is service time rather than the queueing of a saturated server. "Half" is relative to the
//! same system's own measured throughput, so every system is compared at the same relative load.

use super::throughput::throughput;
use super::{Collected, Plan};
use crate::error::BenchError;
use crate::results::ScenarioRun;
use crate::target::Target;

/// The offered rate: half of this system's median throughput, measured earlier in the same invocation (or a
/// modest default when the throughput scenario did not run or failed).
pub(super) fn offered_rate(collected: &Collected, system: &str) -> f64 {
    collected
        .median("throughput", system, "msgs_per_s")
        .map_or(1_000.0, |max| (max / 2.0).max(10.0))
}

/// One half-load run: the throughput workload, rate-limited to `rate`.
pub(super) async fn half_load<T: Target>(
    target: &T,
    plan: &Plan,
    rate: f64,
) -> Result<ScenarioRun, BenchError> {
    throughput(target, plan, Some(rate), None).await
}
