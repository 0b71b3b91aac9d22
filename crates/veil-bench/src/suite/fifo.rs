//! The FIFO scenario: what ordering costs on the same Veil, as the throughput workload on a
//! standard queue, a FIFO queue of many groups and one of a single hot group. Veil only; it is compared with
//! Veil's own standard queue, round by round, rather than with the peers.

use super::{from_report, run_queue, Collected, Plan};
use crate::error::BenchError;
use crate::results::ScenarioRun;
use crate::run::{self, Workload};
use crate::target::Target;
use crate::targets::sqs::SqsTarget;

/// The FIFO drain's limit: a hot group delivers one batch at a time, so its backlog drains far slower than a
/// standard queue's.
const FIFO_DRAIN_TIMEOUT_S: f64 = 300.0;

/// The queues the FIFO scenario compares, in the order each round runs them.
#[derive(Clone, Copy, Debug, PartialEq)]
enum QueueShape {
    Standard,
    /// A FIFO queue whose messages go round-robin to this many groups.
    Fifo(u32),
}

impl QueueShape {
    fn system(self) -> String {
        match self {
            QueueShape::Standard => "veil".into(),
            QueueShape::Fifo(1) => "veil fifo, 1 group".into(),
            QueueShape::Fifo(groups) => format!("veil fifo, {groups} groups"),
        }
    }

    fn queue(self) -> String {
        match self {
            QueueShape::Standard => run_queue("std"),
            QueueShape::Fifo(groups) => format!("{}.fifo", run_queue(&format!("fifo{groups}"))),
        }
    }
}

/// Scenario 7, FIFO: the throughput workload (batches of 10, 1 KiB, `clients` producers and as many consumers,
/// deletes on) with a fixed number of messages per run, on a queue of the given shape. A fixed count rather than
/// a duration, so that every queue drains the same backlog: a hot group delivers one batch at a time.
async fn fifo_throughput(
    target: &SqsTarget,
    plan: &Plan,
    shape: QueueShape,
) -> Result<ScenarioRun, BenchError> {
    let workload = Workload {
        producers: plan.clients,
        consumers: plan.clients,
        batch: 10,
        duration_s: None,
        messages: Some(plan.fifo_messages),
        drain_timeout_s: FIFO_DRAIN_TIMEOUT_S,
        ..Workload::baseline(shape.queue())
    };
    match shape {
        QueueShape::Standard => {
            target
                .prepare(&workload.queue, workload.visibility_s)
                .await?
        }
        QueueShape::Fifo(groups) => {
            target
                .prepare_fifo(&workload.queue, workload.visibility_s, groups)
                .await?
        }
    }
    let report = run::run(target, workload).await;
    print!("{}", report.summary());
    let cdf = report.cdf_us.receive.clone();
    Ok(from_report(report, cdf))
}

/// Adds a FIFO run's figures relative to the standard queue's run of the same round (paired ratios: both ran
/// seconds apart on the same Veil, so most of the machine's drift cancels out).
fn add_paired_ratios(run: &mut ScenarioRun, standard: Option<&ScenarioRun>) {
    let Some(standard) = standard.filter(|standard| standard.ok) else {
        return;
    };
    for (key, ratio) in [
        ("msgs_per_s", "received_ratio"),
        ("sent_per_s", "sent_ratio"),
        ("receive_p99_us", "receive_p99_ratio"),
    ] {
        if let (Some(value), Some(base)) = (run.metrics.get(key), standard.metrics.get(key)) {
            if *base > 0.0 {
                let value = value / base;
                run.metrics.insert(ratio.into(), value);
            }
        }
    }
}

/// The FIFO scenario: `runs` rounds, each running the standard queue, the many-group FIFO queue and the
/// one-group FIFO queue in turn on the same Veil.
pub(super) async fn fifo_rounds(
    target: &SqsTarget,
    plan: &Plan,
    collected: &mut Collected,
    runs: usize,
) {
    let mut shapes = vec![
        QueueShape::Standard,
        QueueShape::Fifo(plan.fifo_groups),
        QueueShape::Fifo(1),
    ];
    shapes.dedup();
    for run in 1..=runs {
        let mut standard: Option<ScenarioRun> = None;
        for &shape in &shapes {
            let system = shape.system();
            println!(
                "-- fifo · {system} · run {run}/{runs} ({} messages)",
                plan.fifo_messages
            );
            let mut outcome = fifo_throughput(target, plan, shape).await;
            if let Ok(result) = &mut outcome {
                if shape == QueueShape::Standard {
                    standard = Some(result.clone());
                }
                add_paired_ratios(result, standard.as_ref());
            }
            collected.add("fifo", &system, outcome);
        }
    }
}
