//! The ceiling scenario: unbatched SendMessage requests/s against Veil and against the
//! no-op server, so that Veil's figure can be read as a share of what loopback HTTP with this client allows on
//! this machine at all.

use super::{from_report, run_queue, Collected, Plan};
use crate::error::BenchError;
use crate::noop::NoopServer;
use crate::results::ScenarioRun;
use crate::run::{self, Workload};
use crate::server::Durability;
use crate::target::Target;
use crate::targets::sqs::SqsTarget;

/// Scenario 3, Ceiling: unbatched SendMessage from `ceiling_concurrency` senders for the duration; requests/s.
pub(super) async fn ceiling<T: Target>(target: &T, plan: &Plan) -> Result<ScenarioRun, BenchError> {
    let workload = Workload {
        producers: plan.ceiling_concurrency,
        consumers: 0,
        body_size: 256,
        duration_s: Some(plan.duration_s),
        drain: false,
        ..Workload::baseline(run_queue("ceil"))
    };
    target
        .prepare(&workload.queue, workload.visibility_s)
        .await?;
    let report = run::run(target, workload).await;
    print!("{}", report.summary());
    let cdf = report.cdf_us.send.clone();
    let mut run = from_report(report, cdf);
    let keep = [
        "send_req_per_s",
        "send_p50_us",
        "send_p99_us",
        "send_max_us",
        "sent",
        "errors",
    ];
    run.metrics.retain(|name, _| keep.contains(&name.as_str()));
    Ok(run)
}

/// The ceiling's `runs` rounds on one Veil, each followed by a no-op round when that Veil is the durable one
/// (so both see the same machine state), then every Veil run's share of the no-op median.
pub(super) async fn ceiling_rounds(
    target: &SqsTarget,
    system: &str,
    durability: Durability,
    plan: &Plan,
    collected: &mut Collected,
    runs: usize,
) -> Result<(), BenchError> {
    let noop = NoopServer::start(std::net::SocketAddr::from(([127, 0, 0, 1], 0)), 2)?;
    let noop_target = SqsTarget::connect(&noop.endpoint()).await?.named("noop");
    for run in 1..=runs {
        collected
            .run("ceiling", system, (run, runs), ceiling(target, plan))
            .await;
        if durability == Durability::Durable {
            collected
                .run("ceiling", "noop", (run, runs), ceiling(&noop_target, plan))
                .await;
        }
    }
    drop(noop);
    if let Some(noop_rate) = collected.median("ceiling", "noop", "send_req_per_s") {
        if let Some(result) = collected
            .results
            .iter_mut()
            .find(|r| r.scenario == "ceiling" && r.system == system)
        {
            for run in &mut result.runs {
                if let Some(rate) = run.metrics.get("send_req_per_s").copied() {
                    run.metrics
                        .insert("pct_of_noop".into(), 100.0 * rate / noop_rate);
                }
            }
        }
    }
    Ok(())
}
