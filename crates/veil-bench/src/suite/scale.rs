//! The scale scenario: what a large queue costs Veil compared with a small one (per
//! operation, in memory per stored message, and in restart time). Veil only, since it starts and restarts the
//! server itself with the data in place.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Mutex;

use super::Plan;
use crate::error::BenchError;
use crate::results::ScenarioRun;
use crate::run::{self, RunReport, Workload};
use crate::server::{Durability, VeilOptions, VeilProcess};
use crate::target::Target;
use crate::targets::sqs::SqsTarget;

/// Body size of every message the scenario sends: a typical queue message, so that disk space per body byte
/// means something (with tiny bodies the fixed per-message record would dominate it).
const SCALE_BODY_BYTES: usize = 1024;

/// Bytes the files of `dir` occupy on disk (allocated blocks, so sparse or preallocated space counts as it is).
fn disk_bytes(dir: &Path) -> Result<u64, BenchError> {
    use std::os::unix::fs::MetadataExt;
    let entries = std::fs::read_dir(dir).map_err(BenchError::io("listing", dir.to_path_buf()))?;
    let mut total = 0;
    for entry in entries {
        let entry = entry.map_err(BenchError::io("listing", dir.to_path_buf()))?;
        let metadata = entry
            .metadata()
            .map_err(BenchError::io("reading metadata", entry.path()))?;
        total += metadata.blocks() * 512;
    }
    Ok(total)
}

/// Fills `queue` with `count` messages (8 senders, batches of 10, small bodies) and returns messages/s.
async fn preload(target: &SqsTarget, queue: &str, count: u64) -> Result<f64, BenchError> {
    let workload = Workload {
        producers: 8,
        consumers: 0,
        batch: 10,
        body_size: SCALE_BODY_BYTES,
        duration_s: None,
        messages: Some(count),
        drain: false,
        ..Workload::baseline(queue.to_owned())
    };
    let report = run::run(target, workload).await;
    if report.counts.sent != count {
        return Err(BenchError::Scenario {
            scenario: "scale",
            system: "veil".into(),
            message: format!(
                "preload acknowledged {} of {count} messages ({})",
                report.counts.sent,
                report.errors.first.as_deref().unwrap_or("no error")
            ),
        });
    }
    Ok(report.throughput.sent_per_s)
}

/// Hides `count` messages of `queue` for an hour (8 receivers, batches of 10, no deletes).
async fn hide(target: &SqsTarget, queue: &str, count: u64) -> Result<(), BenchError> {
    let hidden = Arc::new(Mutex::new(0u64));
    let mut tasks: Vec<tokio::task::JoinHandle<Result<(), crate::target::TargetError>>> =
        Vec::new();
    for _ in 0..8 {
        let (target, queue, hidden) = (target.clone(), queue.to_owned(), hidden.clone());
        tasks.push(tokio::spawn(async move {
            loop {
                let want = {
                    let mut hidden = hidden.lock().await;
                    let want = (count - *hidden).min(10);
                    *hidden += want;
                    want
                };
                if want == 0 {
                    return Ok(());
                }
                let got = target.receive(&queue, want as usize, 3600, 0).await?.len() as u64;
                if got < want {
                    *hidden.lock().await -= want - got;
                    if got == 0 {
                        return Ok(());
                    }
                }
            }
        }));
    }
    for task in tasks {
        match task.await {
            Ok(result) => result.map_err(BenchError::from)?,
            Err(error) => {
                return Err(BenchError::Scenario {
                    scenario: "scale",
                    system: "veil".into(),
                    message: format!("a hiding task failed: {error}"),
                })
            }
        }
    }
    Ok(())
}

/// Per-operation cost: a closed loop of one producer and one consumer (unbatched, deletes on) for
/// `seconds`, without drain (the consumer takes the oldest visible messages, i.e. preloaded ones).
async fn op_cost(target: &SqsTarget, queue: &str, seconds: f64) -> RunReport {
    let workload = Workload {
        body_size: SCALE_BODY_BYTES,
        duration_s: Some(seconds),
        wait_s: 1,
        drain: false,
        ..Workload::baseline(queue.to_owned())
    };
    run::run(target, workload).await
}

/// One Veil loaded for the scale scenario: preloaded with a relaxed server (setup speed only), restarted
/// durable (restart time measured with the data in place), then the per-op cost measured durable.
struct Loaded {
    veil: VeilProcess,
    target: SqsTarget,
    preload_per_s: f64,
    rss_empty: u64,
    rss_loaded_live: u64,
    rss_after_restart: u64,
    restart: Duration,
    /// The data directory's disk usage after the restart: everything checkpointed, the log empty.
    disk_loaded: u64,
    /// How this Veil was started, to start it once more over the same data.
    options: VeilOptions,
    _dir: tempfile::TempDir,
}

async fn load_veil(
    bin: &Path,
    queue: &str,
    messages: u64,
    hidden: u64,
) -> Result<Loaded, BenchError> {
    let dir =
        tempfile::tempdir().map_err(BenchError::io("creating a temp dir", std::env::temp_dir()))?;
    let inflight = u32::try_from(hidden.saturating_mul(2).max(120_000)).unwrap_or(u32::MAX);
    let mut options = VeilOptions {
        bin: bin.to_path_buf(),
        data_dir: dir.path().join("data"),
        durability: Durability::Relaxed,
        inflight_max: Some(inflight),
        ready_timeout: Duration::from_secs(30),
    };
    let veil = VeilProcess::start(&options).await?;
    let target = SqsTarget::connect(&veil.endpoint).await?.named("veil");
    target.prepare(queue, 30).await?;
    let rss_empty = veil.rss_bytes()?;
    let preload_per_s = preload(&target, queue, messages).await?;
    hide(&target, queue, hidden).await?;
    let rss_loaded_live = veil.rss_bytes()?;
    veil.stop().await;
    options.durability = Durability::Durable;
    options.ready_timeout = Duration::from_secs(600);
    let veil = VeilProcess::start(&options).await?;
    let restart = veil.startup;
    let rss_after_restart = veil.rss_bytes()?;
    let disk_loaded = disk_bytes(&options.data_dir)?;
    let target = SqsTarget::connect(&veil.endpoint).await?.named("veil");
    target.prepare(queue, 30).await?;
    Ok(Loaded {
        veil,
        target,
        preload_per_s,
        rss_empty,
        rss_loaded_live,
        rss_after_restart,
        restart,
        disk_loaded,
        options,
        _dir: dir,
    })
}

/// Scenario 6, Scale: a large queue (`scale_messages`, `scale_hidden` of them hidden) against a small one
/// (`scale_small`, a proportional share hidden): per-op cost, memory per stored message, restart time.
pub(super) async fn scale(bin: &Path, plan: &Plan) -> Result<ScenarioRun, BenchError> {
    let measure_s = (plan.duration_s / 2.0).max(1.0);
    let small_hidden = plan.scale_small * plan.scale_hidden / plan.scale_messages.max(1);
    let small = load_veil(bin, "scale-small", plan.scale_small, small_hidden).await?;
    let small_report = op_cost(&small.target, "scale-small", measure_s).await;
    small.veil.stop().await;
    let big = load_veil(bin, "scale-big", plan.scale_messages, plan.scale_hidden).await?;
    let big_report = op_cost(&big.target, "scale-big", measure_s).await;
    let rss_end = big.veil.rss_bytes()?;
    // Space comes back once the messages are gone: purge, stop (the final checkpoint), start once more (start-up
    // compacts a mostly free store file), stop, measure.
    big.target
        .purge("scale-big")
        .await
        .map_err(|e| BenchError::Scenario {
            scenario: "scale",
            system: "veil".into(),
            message: format!("purging the large queue: {e}"),
        })?;
    big.veil.stop().await;
    VeilProcess::start(&big.options).await?.stop().await;
    let disk_after_purge = disk_bytes(&big.options.data_dir)?;

    let mut metrics = BTreeMap::new();
    let stored = plan.scale_messages as f64;
    metrics.insert("stored".into(), stored);
    metrics.insert("hidden".into(), plan.scale_hidden as f64);
    metrics.insert("preload_per_s".into(), big.preload_per_s);
    metrics.insert("restart_s".into(), big.restart.as_secs_f64());
    metrics.insert("restart_small_s".into(), small.restart.as_secs_f64());
    let per_msg = |rss: u64| (rss as f64 - big.rss_empty as f64) / stored;
    metrics.insert("rss_empty_mib".into(), big.rss_empty as f64 / 1048576.0);
    metrics.insert(
        "rss_per_msg_live_bytes".into(),
        per_msg(big.rss_loaded_live),
    );
    metrics.insert(
        "rss_per_msg_restarted_bytes".into(),
        per_msg(big.rss_after_restart),
    );
    metrics.insert("rss_per_msg_end_bytes".into(), per_msg(rss_end));
    let bodies = stored * SCALE_BODY_BYTES as f64;
    metrics.insert("body_bytes".into(), SCALE_BODY_BYTES as f64);
    metrics.insert("disk_mib".into(), big.disk_loaded as f64 / 1048576.0);
    metrics.insert("disk_per_body_byte".into(), big.disk_loaded as f64 / bodies);
    metrics.insert(
        "disk_after_purge_mib".into(),
        disk_after_purge as f64 / 1048576.0,
    );
    for (op, small_p, big_p) in [
        (
            "send",
            small_report.latency_us.send,
            big_report.latency_us.send,
        ),
        (
            "receive",
            small_report.latency_us.receive,
            big_report.latency_us.receive,
        ),
        (
            "delete",
            small_report.latency_us.delete,
            big_report.latency_us.delete,
        ),
    ] {
        metrics.insert(format!("{op}_p50_small_us"), small_p.p50 as f64);
        metrics.insert(format!("{op}_p50_large_us"), big_p.p50 as f64);
        if small_p.p50 > 0 {
            metrics.insert(format!("{op}_ratio"), big_p.p50 as f64 / small_p.p50 as f64);
        }
    }
    metrics.insert("ops_per_s_small".into(), small_report.throughput.sent_per_s);
    metrics.insert("ops_per_s_large".into(), big_report.throughput.sent_per_s);
    println!(
        "== veil · scale: {} stored / {} hidden vs {} stored: restart {:.2} s, RSS/message {:.0} B live, {:.0} B after \
         restart; disk {:.2}× the bodies, {:.1} MiB after a purge and a restart; p50 send {}→{} µs, receive {}→{} µs, delete {}→{} µs",
        plan.scale_messages,
        plan.scale_hidden,
        plan.scale_small,
        big.restart.as_secs_f64(),
        per_msg(big.rss_loaded_live),
        per_msg(big.rss_after_restart),
        big.disk_loaded as f64 / bodies,
        disk_after_purge as f64 / 1048576.0,
        small_report.latency_us.send.p50,
        big_report.latency_us.send.p50,
        small_report.latency_us.receive.p50,
        big_report.latency_us.receive.p50,
        small_report.latency_us.delete.p50,
        big_report.latency_us.delete.p50,
    );
    let errors = small_report.errors.send
        + small_report.errors.receive
        + small_report.errors.delete
        + big_report.errors.send
        + big_report.errors.receive
        + big_report.errors.delete;
    Ok(ScenarioRun {
        ok: errors == 0,
        error: (errors > 0).then(|| {
            format!(
                "{errors} failed requests (first: {})",
                big_report
                    .errors
                    .first
                    .clone()
                    .or(small_report.errors.first.clone())
                    .unwrap_or_default()
            )
        }),
        metrics,
        cdf_us: big_report.cdf_us.receive.clone(),
        detail: serde_json::json!({ "small": small_report, "large": big_report }),
    })
}
