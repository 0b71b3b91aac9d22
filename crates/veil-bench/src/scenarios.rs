//! `veil-bench suite`: the scenarios of issue 3 §2 against a Veil the suite starts itself (durable, and a
//! labelled relaxed Veil beside it on request), the in-process no-op server, and the peers given with
//! `--peer`. Every scenario runs `--runs` times; the results go to one JSON file that `veil-bench report`
//! turns into tables and charts. The FIFO scenario is Veil's own: standard and FIFO queues of the same Veil,
//! interleaved round by round, compared as ratios within each round.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use tokio::sync::{mpsc, Mutex};

use crate::error::BenchError;
use crate::kind::TargetKind;
use crate::noop::NoopServer;
use crate::run::{self, RunReport, Workload};
use crate::server::{Durability, VeilOptions, VeilProcess};
use crate::stats::{median, now_us, Latency};
use crate::target::Target;
use crate::targets::sqs::SqsTarget;
use crate::with_target;

/// Version of the results file layout.
pub const RESULTS_VERSION: u32 = 1;

#[derive(clap::Args, Debug)]
pub struct SuiteArgs {
    /// The veil binary; the suite starts it on a free loopback port with a temp data dir.
    #[arg(long, default_value = "target/release/veil")]
    veil_bin: PathBuf,
    /// Directory the results JSON is written to (suite-<unix time>.json).
    #[arg(long, default_value = "bench/results")]
    out: PathBuf,
    /// Runs of each scenario (the report shows their median and min–max).
    #[arg(long, default_value_t = 3)]
    runs: usize,
    /// Also run every Veil scenario against a Veil with --durability relaxed (no fsync), labelled
    /// "veil (relaxed)", beside the durable one.
    #[arg(long)]
    relaxed: bool,
    /// A peer to compare with, NAME=ENDPOINT, repeatable: moto=http://127.0.0.1:5000,
    /// redis=redis://127.0.0.1:6379, nats=nats://127.0.0.1:4222 (also sqs=… for another SQS endpoint).
    /// Peers run the round-trip, throughput, half-load, redelivery and wake-up scenarios.
    #[arg(long = "peer", value_name = "NAME=ENDPOINT")]
    peers: Vec<String>,
    /// Shrink every scenario to seconds and small counts (for development; figures are not meaningful).
    #[arg(long)]
    quick: bool,
    /// Only these scenarios (comma-separated): round-trip, throughput, half-load, ceiling, redelivery,
    /// wake-up, scale, fifo.
    #[arg(long, value_delimiter = ',')]
    only: Vec<String>,
    /// Messages preloaded by the scale scenario (1,000,000; issue 3 also asks for 10,000,000).
    #[arg(long, default_value_t = 1_000_000)]
    scale_messages: u64,
    /// Of those, messages the scale scenario hides (receives with a one-hour visibility timeout).
    #[arg(long, default_value_t = 200_000)]
    scale_hidden: u64,
    /// Messages of the scale scenario's small baseline queue.
    #[arg(long, default_value_t = 10_000)]
    scale_small: u64,
    /// Seconds of each timed scenario (round trip, throughput, half load, ceiling); default 10 (2 with
    /// --quick).
    #[arg(long)]
    duration: Option<f64>,
    /// Concurrent producers in the throughput scenario (the same number of consumers).
    #[arg(long, default_value_t = 4)]
    clients: usize,
    /// Concurrent unbatched senders in the ceiling scenario (the same against Veil and the no-op server).
    #[arg(long, default_value_t = 32)]
    ceiling_concurrency: usize,
    /// Message groups of the FIFO scenario's many-group queue (its other FIFO queue has one hot group).
    #[arg(long, default_value_t = 64)]
    fifo_groups: u32,
    /// Messages each FIFO-scenario run sends (and drains) per queue; default 100,000 (5,000 with --quick).
    #[arg(long)]
    fifo_messages: Option<u64>,
}

/// The suite's output file.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct SuiteResults {
    pub version: u32,
    pub started_unix: u64,
    pub command: String,
    pub machine: Machine,
    pub quick: bool,
    pub runs: usize,
    pub scenarios: Vec<ScenarioResult>,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Machine {
    pub cpus: usize,
    pub cpu_model: String,
    pub memory_gib: f64,
    pub kernel: String,
}

/// One scenario on one system: its runs.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ScenarioResult {
    pub scenario: String,
    pub system: String,
    /// How the system stores data (so a figure is never read without its durability).
    pub durability: String,
    pub runs: Vec<ScenarioRun>,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct ScenarioRun {
    pub ok: bool,
    pub error: Option<String>,
    /// Named figures (see `report::METRICS` for units and meaning).
    pub metrics: BTreeMap<String, f64>,
    /// The latency distribution the chart of this scenario draws, `[µs, quantile]`.
    pub cdf_us: Vec<[f64; 2]>,
    /// The full reports behind the figures.
    pub detail: serde_json::Value,
}

/// Scenario names, in suite order.
pub const SCENARIOS: &[&str] = &[
    "round-trip",
    "throughput",
    "half-load",
    "ceiling",
    "redelivery",
    "wake-up",
    "scale",
    "fifo",
];
/// The scenarios peers run (the others are about Veil itself).
const PEER_SCENARIOS: &[&str] = &[
    "round-trip",
    "throughput",
    "half-load",
    "redelivery",
    "wake-up",
];

/// Sizes of a suite invocation, full or `--quick`.
struct Plan {
    duration_s: f64,
    clients: usize,
    ceiling_concurrency: usize,
    redelivery_messages: usize,
    wakeups: usize,
    scale_messages: u64,
    scale_hidden: u64,
    scale_small: u64,
    fifo_groups: u32,
    fifo_messages: u64,
}

fn durability_note(system: &str) -> String {
    match system {
        "veil" => "durable: fsync before every reply (group commit)".into(),
        fifo if fifo.starts_with("veil fifo") => {
            "durable: fsync before every reply (group commit)".into()
        }
        "veil (relaxed)" => "relaxed: no fsync (a crash may lose acknowledged changes)".into(),
        "noop" => "none: answers without storing".into(),
        "moto" => "in memory: nothing persisted".into(),
        "redis" => "AOF, appendfsync always (as bench/run starts it)".into(),
        "nats" => "JetStream file storage, written before the ack, fsync every 2 min (nats-server 2.9 default)".into(),
        other => format!("{other}: as started"),
    }
}

fn run_queue(scenario: &str) -> String {
    format!("vb-{scenario}-{:08x}", run::new_run_id())
}

/// Metrics every run-based scenario reports.
fn run_metrics(report: &RunReport) -> BTreeMap<String, f64> {
    let l = &report.latency_us;
    let c = &report.counts;
    let mut m = BTreeMap::new();
    m.insert("msgs_per_s".into(), report.throughput.received_per_s);
    m.insert("sent_per_s".into(), report.throughput.sent_per_s);
    m.insert(
        "send_req_per_s".into(),
        report.throughput.send_requests_per_s,
    );
    for (name, p) in [
        ("send", &l.send),
        ("receive", &l.receive),
        ("delete", &l.delete),
        ("e2e", &l.end_to_end),
    ] {
        if p.count > 0 {
            m.insert(format!("{name}_p50_us"), p.p50 as f64);
            m.insert(format!("{name}_p99_us"), p.p99 as f64);
            m.insert(format!("{name}_max_us"), p.max as f64);
        }
    }
    m.insert("sent".into(), c.sent as f64);
    m.insert("received".into(), c.received as f64);
    m.insert("duplicates".into(), c.duplicates as f64);
    if let Some(missing) = c.missing {
        m.insert("missing".into(), missing as f64);
    }
    m.insert(
        "errors".into(),
        (report.errors.send + report.errors.receive + report.errors.delete) as f64,
    );
    m
}

fn from_report(report: RunReport, cdf: Vec<[f64; 2]>) -> ScenarioRun {
    let lost = report.lost_messages() || report.counts.duplicates > 0;
    ScenarioRun {
        ok: !lost,
        error: lost.then(|| {
            format!(
                "MISSING {} / duplicates {}",
                report.counts.missing.unwrap_or(0),
                report.counts.duplicates
            )
        }),
        metrics: run_metrics(&report),
        cdf_us: cdf,
        detail: serde_json::to_value(&report).unwrap_or(serde_json::Value::Null),
    }
}

/// Scenario 1, Round trip: one producer, one consumer, unbatched, lockstep (each message sent, then received, then
/// deleted before the next is sent), so each latency is the service time of an unloaded system.
async fn round_trip<T: Target>(target: &T, plan: &Plan) -> Result<ScenarioRun, BenchError> {
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

/// Scenario 2, Throughput: batches of 10, 1 KiB bodies, `clients` producers and as many consumers, deletes on.
/// With a `rate` (the half-load scenario) consumers short-poll (1 ms pause after an empty receive), so that
/// receive latency is the request's service time, not time parked in a long poll.
async fn throughput<T: Target>(
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

/// Scenario 3, Ceiling: unbatched SendMessage from `ceiling_concurrency` senders for the duration; requests/s.
async fn ceiling<T: Target>(target: &T, plan: &Plan) -> Result<ScenarioRun, BenchError> {
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

/// Scenario 4, Redelivery lateness: hide `n` messages with a 1 s visibility timeout (never deleting them on that
/// first receive), then a long-polling consumer measures how late each comes back after its deadline. The
/// deadline is taken as the first receive's request start + 1 s, so lateness is never understated (it
/// includes up to one request's latency). First receives are paced evenly over [`FIRST_RECEIVE_SPAN`] so that
/// the deadlines spread out and the figure is the timer's precision, not a burst's queueing.
async fn redelivery<T: Target>(target: &T, n: usize) -> Result<ScenarioRun, BenchError> {
    const VISIBILITY_S: u32 = 1;
    let queue = run_queue("redeliver");
    target.prepare(&queue, VISIBILITY_S).await?;
    let run_id = run::new_run_id();
    for chunk_start in (0..n).step_by(10) {
        let bodies = (chunk_start..(chunk_start + 10).min(n))
            .map(|seq| {
                run::encode_body(
                    run::BodyId {
                        run: run_id,
                        producer: 0,
                        seq: seq as u64,
                        sent_us: now_us(),
                    },
                    128,
                )
            })
            .collect();
        target.send(&queue, bodies).await?;
    }
    let mut tracker = Redeliveries::new(run_id, n, VISIBILITY_S);
    let started = Instant::now();
    let give_up = Duration::from_secs(30);
    // Phase 1: first receives, paced on a fixed schedule that ends well before the first deadline (so the
    // long-polling consumer is already waiting when messages come due). Any redelivery seen here counts too.
    let interval = FIRST_RECEIVE_SPAN / (n.div_ceil(10).max(1) as u32);
    let mut next = Instant::now();
    while tracker.first_receives < n && started.elapsed() < give_up {
        tokio::time::sleep_until(next.into()).await;
        next += interval;
        let request_start_us = now_us();
        let deliveries = target.receive(&queue, 10, VISIBILITY_S, 0).await?;
        let settle = tracker.note(deliveries, request_start_us, now_us());
        settle_in_background(target, &queue, settle);
    }
    // Phase 2: a long-polling consumer; the redeliveries it takes are hidden for 30 s (so they do not bounce
    // again) and deleted off the critical path.
    while tracker.redelivered < tracker.first_receives && started.elapsed() < give_up {
        let request_start_us = now_us();
        let deliveries = target.receive(&queue, 10, 30, 5).await?;
        let settle = tracker.note(deliveries, request_start_us, now_us());
        settle_in_background(target, &queue, settle);
    }
    let (lateness, redelivered_count, foreign) =
        (tracker.lateness, tracker.redelivered, tracker.foreign);
    let p = lateness.percentiles();
    println!(
        "== {} · redelivery lateness of {n} messages (1 s visibility): {}  redelivered {redelivered_count}/{n}",
        target.name(),
        p.line()
    );
    let mut metrics = BTreeMap::new();
    metrics.insert("late_p50_us".into(), p.p50 as f64);
    metrics.insert("late_p99_us".into(), p.p99 as f64);
    metrics.insert("late_max_us".into(), p.max as f64);
    metrics.insert("messages".into(), n as f64);
    metrics.insert("redelivered".into(), redelivered_count as f64);
    metrics.insert("foreign".into(), foreign as f64);
    let complete = redelivered_count == n;
    Ok(ScenarioRun {
        ok: complete,
        error: (!complete).then(|| {
            format!("only {redelivered_count} of {n} messages were redelivered within 30 s")
        }),
        metrics,
        cdf_us: lateness.cdf(),
        detail: serde_json::json!({ "lateness_us": p }),
    })
}

/// What the redelivery scenario knows about each of its messages.
struct Redeliveries {
    run_id: u32,
    visibility_us: u64,
    /// Per sequence number: the deadline of its first receive (µs), once received.
    deadline_us: Vec<Option<u64>>,
    seen_again: Vec<bool>,
    first_receives: usize,
    redelivered: usize,
    foreign: u64,
    lateness: Latency,
}

impl Redeliveries {
    fn new(run_id: u32, n: usize, visibility_s: u32) -> Self {
        Self {
            run_id,
            visibility_us: u64::from(visibility_s) * 1_000_000,
            deadline_us: vec![None; n],
            seen_again: vec![false; n],
            first_receives: 0,
            redelivered: 0,
            foreign: 0,
            lateness: Latency::new(),
        }
    }

    /// Notes a receive's deliveries; returns the handles to delete (every redelivery, once measured).
    fn note(
        &mut self,
        deliveries: Vec<crate::target::Delivery>,
        request_start_us: u64,
        arrived_us: u64,
    ) -> Vec<String> {
        let mut settle = Vec::new();
        for delivery in deliveries {
            let seq = match run::decode_body(&delivery.body) {
                Some(id) if id.run == self.run_id && (id.seq as usize) < self.deadline_us.len() => {
                    id.seq as usize
                }
                _ => {
                    self.foreign += 1;
                    continue;
                }
            };
            match self.deadline_us[seq] {
                None => {
                    self.deadline_us[seq] = Some(request_start_us + self.visibility_us);
                    self.first_receives += 1;
                }
                Some(deadline) => {
                    if !self.seen_again[seq] {
                        self.seen_again[seq] = true;
                        self.redelivered += 1;
                        self.lateness.record_us(arrived_us.saturating_sub(deadline));
                    }
                    settle.push(delivery.handle);
                }
            }
        }
        settle
    }
}

fn settle_in_background<T: Target>(target: &T, queue: &str, handles: Vec<String>) {
    if handles.is_empty() {
        return;
    }
    let (target, queue) = (target.clone(), queue.to_owned());
    tokio::spawn(async move { target.delete(&queue, handles).await });
}

/// The redelivery scenario's first receives are spread over this span, shorter than the 1 s visibility
/// timeout so that they are all done before the first message comes due.
const FIRST_RECEIVE_SPAN: Duration = Duration::from_millis(600);

/// Scenario 5, Wake-up: a consumer long-polls an empty queue; a producer sends one message once the consumer has been
/// parked for 20 ms; the figure is the time from the send's response to the consumer's receipt (negative
/// when the receipt comes first, which counts as 0 and is reported separately).
async fn wake_up<T: Target>(target: &T, rounds: usize) -> Result<ScenarioRun, BenchError> {
    let queue = run_queue("wake");
    target.prepare(&queue, 30).await?;
    let (arrived_tx, mut arrived_rx) = mpsc::channel::<Result<u64, String>>(1);
    let (poll_tx, mut poll_rx) = mpsc::channel::<()>(1);
    let consumer = {
        let target = target.clone();
        let queue = queue.clone();
        tokio::spawn(async move {
            for _ in 0..rounds {
                loop {
                    let _ = poll_tx.send(()).await;
                    match target.receive(&queue, 1, 30, 20).await {
                        Ok(deliveries) if deliveries.is_empty() => continue,
                        Ok(deliveries) => {
                            let at = now_us();
                            let _ = arrived_tx.send(Ok(at)).await;
                            let handles = deliveries.into_iter().map(|d| d.handle).collect();
                            let _ = target.delete(&queue, handles).await;
                            break;
                        }
                        Err(error) => {
                            let _ = arrived_tx.send(Err(error.to_string())).await;
                            return;
                        }
                    }
                }
            }
        })
    };
    let mut wake = Latency::new();
    let mut early = 0u64;
    let run_id = run::new_run_id();
    let mut failure = None;
    for seq in 0..rounds {
        // The consumer is about to poll; give it time to park on the empty queue.
        if poll_rx.recv().await.is_none() {
            failure = Some("the consumer stopped".to_owned());
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
        let body = run::encode_body(
            run::BodyId {
                run: run_id,
                producer: 0,
                seq: seq as u64,
                sent_us: now_us(),
            },
            128,
        );
        target.send(&queue, vec![body]).await?;
        let acked_us = now_us();
        match tokio::time::timeout(Duration::from_secs(25), arrived_rx.recv()).await {
            Ok(Some(Ok(arrived_us))) => {
                if arrived_us < acked_us {
                    early += 1;
                }
                wake.record_us(arrived_us.saturating_sub(acked_us));
            }
            Ok(Some(Err(error))) => {
                failure = Some(error);
                break;
            }
            Ok(None) | Err(_) => {
                failure = Some(format!("message {seq} was not received within 25 s"));
                break;
            }
        }
    }
    consumer.abort();
    let p = wake.percentiles();
    println!(
        "== {} · wake-up over {rounds} rounds: {}  (receipt before the send's response: {early})",
        target.name(),
        p.line()
    );
    let mut metrics = BTreeMap::new();
    metrics.insert("wake_p50_us".into(), p.p50 as f64);
    metrics.insert("wake_p99_us".into(), p.p99 as f64);
    metrics.insert("wake_max_us".into(), p.max as f64);
    metrics.insert("rounds".into(), p.count as f64);
    metrics.insert("before_ack".into(), early as f64);
    Ok(ScenarioRun {
        ok: failure.is_none(),
        error: failure,
        metrics,
        cdf_us: wake.cdf(),
        detail: serde_json::json!({ "wake_us": p }),
    })
}

/// Fills `queue` with `count` messages (8 senders, batches of 10, small bodies) and returns messages/s.
async fn preload(target: &SqsTarget, queue: &str, count: u64) -> Result<f64, BenchError> {
    let workload = Workload {
        producers: 8,
        consumers: 0,
        batch: 10,
        body_size: 100,
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
        body_size: 100,
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
        _dir: dir,
    })
}

/// Scenario 6, Scale: a large queue (`scale_messages`, `scale_hidden` of them hidden) against a small one
/// (`scale_small`, a proportional share hidden): per-op cost, memory per stored message, restart time.
async fn scale(bin: &Path, plan: &Plan) -> Result<ScenarioRun, BenchError> {
    let measure_s = (plan.duration_s / 2.0).max(1.0);
    let small_hidden = plan.scale_small * plan.scale_hidden / plan.scale_messages.max(1);
    let small = load_veil(bin, "scale-small", plan.scale_small, small_hidden).await?;
    let small_report = op_cost(&small.target, "scale-small", measure_s).await;
    small.veil.stop().await;
    let big = load_veil(bin, "scale-big", plan.scale_messages, plan.scale_hidden).await?;
    let big_report = op_cost(&big.target, "scale-big", measure_s).await;
    let rss_end = big.veil.rss_bytes()?;
    big.veil.stop().await;

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
         restart; p50 send {}→{} µs, receive {}→{} µs, delete {}→{} µs",
        plan.scale_messages,
        plan.scale_hidden,
        plan.scale_small,
        big.restart.as_secs_f64(),
        per_msg(big.rss_loaded_live),
        per_msg(big.rss_after_restart),
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
async fn fifo_rounds(target: &SqsTarget, plan: &Plan, collected: &mut Collected, runs: usize) {
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

fn machine() -> Machine {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let cpu_model = cpuinfo
        .lines()
        .find(|line| line.starts_with("model name"))
        .and_then(|line| line.split(':').nth(1))
        .map(|model| model.trim().to_owned())
        .unwrap_or_default();
    let memory_gib = std::fs::read_to_string("/proc/meminfo")
        .unwrap_or_default()
        .lines()
        .find(|line| line.starts_with("MemTotal:"))
        .and_then(|line| line.split_whitespace().nth(1)?.parse::<f64>().ok())
        .map_or(0.0, |kib| kib / 1048576.0);
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .unwrap_or_default()
        .trim()
        .to_owned();
    Machine {
        cpus: std::thread::available_parallelism().map_or(0, |n| n.get()),
        cpu_model,
        memory_gib,
        kernel,
    }
}

/// The results gathered so far, keyed by (scenario, system) in insertion order.
#[derive(Default)]
struct Collected {
    results: Vec<ScenarioResult>,
}

impl Collected {
    fn add(&mut self, scenario: &str, system: &str, outcome: Result<ScenarioRun, BenchError>) {
        let run = outcome.unwrap_or_else(|error| {
            eprintln!("veil-bench: scenario {scenario} on {system} failed: {error}");
            ScenarioRun {
                ok: false,
                error: Some(error.to_string()),
                ..ScenarioRun::default()
            }
        });
        if let Some(result) = self
            .results
            .iter_mut()
            .find(|r| r.scenario == scenario && r.system == system)
        {
            result.runs.push(run);
        } else {
            self.results.push(ScenarioResult {
                scenario: scenario.to_owned(),
                system: system.to_owned(),
                durability: durability_note(system),
                runs: vec![run],
            });
        }
    }

    /// The median of `metric` over the successful runs of (scenario, system).
    fn median(&self, scenario: &str, system: &str, metric: &str) -> Option<f64> {
        let result = self
            .results
            .iter()
            .find(|r| r.scenario == scenario && r.system == system)?;
        let values: Vec<f64> = result
            .runs
            .iter()
            .filter(|run| run.ok)
            .filter_map(|run| run.metrics.get(metric).copied())
            .collect();
        median(&values)
    }
}

/// Runs the scenarios that apply to any target (round trip through wake-up) against one system.
async fn common_scenarios<T: Target>(
    target: &T,
    system: &str,
    plan: &Plan,
    wanted: &dyn Fn(&str) -> bool,
    collected: &mut Collected,
    runs: usize,
) {
    for run in 1..=runs {
        if wanted("round-trip") {
            println!("-- round-trip · {system} · run {run}/{runs}");
            collected.add("round-trip", system, round_trip(target, plan).await);
        }
        if wanted("throughput") {
            println!("-- throughput · {system} · run {run}/{runs}");
            collected.add("throughput", system, throughput(target, plan, None).await);
        }
    }
    // Half load: half of this system's median throughput, measured above (or a modest default).
    if wanted("half-load") {
        let rate = collected
            .median("throughput", system, "msgs_per_s")
            .map_or(1_000.0, |max| (max / 2.0).max(10.0));
        for run in 1..=runs {
            println!("-- half-load ({rate:.0} msgs/s offered) · {system} · run {run}/{runs}");
            collected.add(
                "half-load",
                system,
                throughput(target, plan, Some(rate)).await,
            );
        }
    }
    for run in 1..=runs {
        if wanted("redelivery") {
            println!("-- redelivery · {system} · run {run}/{runs}");
            collected.add(
                "redelivery",
                system,
                redelivery(target, plan.redelivery_messages).await,
            );
        }
        if wanted("wake-up") {
            println!("-- wake-up · {system} · run {run}/{runs}");
            collected.add("wake-up", system, wake_up(target, plan.wakeups).await);
        }
    }
}

pub async fn suite(args: SuiteArgs) -> Result<ExitCode, BenchError> {
    for name in &args.only {
        if !SCENARIOS.contains(&name.as_str()) {
            return Err(BenchError::Usage(format!(
                "unknown scenario {name:?} (known: {})",
                SCENARIOS.join(", ")
            )));
        }
    }
    let mut peers = Vec::new();
    for peer in &args.peers {
        let (name, endpoint) = peer
            .split_once('=')
            .ok_or_else(|| BenchError::Usage(format!("--peer {peer:?}: expected NAME=ENDPOINT")))?;
        let kind = TargetKind::parse(name)
            .filter(|kind| !matches!(kind, TargetKind::Veil | TargetKind::Noop))
            .ok_or_else(|| {
                BenchError::Usage(format!(
                    "--peer {peer:?}: NAME must be moto, redis, nats or sqs"
                ))
            })?;
        peers.push((kind, endpoint.to_owned()));
    }
    if !args.veil_bin.exists() {
        return Err(BenchError::Usage(format!(
            "--veil-bin {}: no such file (cargo build --release --bin veil)",
            args.veil_bin.display()
        )));
    }
    let runs = args.runs.max(1);
    let plan = Plan {
        duration_s: args.duration.unwrap_or(if args.quick { 2.0 } else { 10.0 }),
        clients: args.clients.max(1),
        ceiling_concurrency: args.ceiling_concurrency.max(1),
        redelivery_messages: if args.quick { 100 } else { 1_000 },
        wakeups: if args.quick { 30 } else { 200 },
        scale_messages: if args.quick {
            20_000
        } else {
            args.scale_messages
        },
        scale_hidden: if args.quick { 4_000 } else { args.scale_hidden },
        scale_small: if args.quick { 1_000 } else { args.scale_small },
        fifo_groups: args.fifo_groups.max(1),
        fifo_messages: args
            .fifo_messages
            .unwrap_or(if args.quick { 5_000 } else { 100_000 })
            .max(1),
    };
    let only = args.only.clone();
    let wanted = move |name: &str| only.is_empty() || only.iter().any(|o| o == name);
    let started_unix = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    std::fs::create_dir_all(&args.out)
        .map_err(BenchError::io("creating the results directory", &args.out))?;
    let mut collected = Collected::default();

    // Veil, durable (and relaxed beside it when asked), then the no-op ceiling, then the peers.
    let mut durabilities = vec![Durability::Durable];
    if args.relaxed {
        durabilities.push(Durability::Relaxed);
    }
    for durability in durabilities {
        let system = match durability {
            Durability::Durable => "veil",
            Durability::Relaxed => "veil (relaxed)",
        };
        let dir = tempfile::tempdir()
            .map_err(BenchError::io("creating a temp dir", std::env::temp_dir()))?;
        let veil = VeilProcess::start(&VeilOptions {
            bin: args.veil_bin.clone(),
            data_dir: dir.path().join("data"),
            durability,
            inflight_max: None,
            ready_timeout: Duration::from_secs(30),
        })
        .await?;
        println!(
            "== {system}: pid {} on {} (started in {:?})",
            veil.pid, veil.endpoint, veil.startup
        );
        let target =
            SqsTarget::connect(&veil.endpoint)
                .await?
                .named(if durability == Durability::Durable {
                    "veil"
                } else {
                    "veil-relaxed"
                });
        common_scenarios(&target, system, &plan, &wanted, &mut collected, runs).await;
        if wanted("fifo") && durability == Durability::Durable {
            fifo_rounds(&target, &plan, &mut collected, runs).await;
        }
        if wanted("ceiling") {
            let noop = NoopServer::start(std::net::SocketAddr::from(([127, 0, 0, 1], 0)), 2)?;
            let noop_target = SqsTarget::connect(&noop.endpoint()).await?.named("noop");
            for run in 1..=runs {
                println!("-- ceiling · {system} · run {run}/{runs}");
                collected.add("ceiling", system, ceiling(&target, &plan).await);
                if durability == Durability::Durable {
                    println!("-- ceiling · noop · run {run}/{runs}");
                    collected.add("ceiling", "noop", ceiling(&noop_target, &plan).await);
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
        }
        veil.stop().await;
        drop(dir);
    }
    if wanted("scale") {
        for run in 1..=runs {
            println!(
                "-- scale · veil · run {run}/{runs} ({} messages, {} hidden, baseline {})",
                plan.scale_messages, plan.scale_hidden, plan.scale_small
            );
            collected.add("scale", "veil", scale(&args.veil_bin, &plan).await);
        }
    }
    for (kind, endpoint) in &peers {
        println!("== peer {kind} at {endpoint}");
        let system = kind.name();
        let peer_wanted = |name: &str| PEER_SCENARIOS.contains(&name) && wanted(name);
        let outcome: Result<(), BenchError> = with_target!(*kind, endpoint, |target| {
            common_scenarios(&target, system, &plan, &peer_wanted, &mut collected, runs).await;
            Ok(())
        });
        if let Err(error) = outcome {
            eprintln!("veil-bench: peer {system} at {endpoint}: {error}");
            collected.add("round-trip", system, Err(error));
        }
    }

    let results = SuiteResults {
        version: RESULTS_VERSION,
        started_unix,
        command: std::env::args().collect::<Vec<_>>().join(" "),
        machine: machine(),
        quick: args.quick,
        runs,
        scenarios: collected.results,
    };
    let path = args.out.join(format!("suite-{started_unix}.json"));
    let text = serde_json::to_string_pretty(&results).map_err(|source| BenchError::Json {
        context: "encoding results",
        path: path.clone(),
        source,
    })?;
    std::fs::write(&path, text + "\n").map_err(BenchError::io("writing results", &path))?;
    println!();
    print!("{}", crate::report::text_summary(&results));
    println!("results: {}", path.display());
    // Lost or duplicated messages fail the suite when Veil shows them; a peer's are findings about that peer
    // (printed above and kept in the results), not a reason to withhold the report.
    let broken = |_: &&ScenarioResult, r: &&ScenarioRun| {
        r.metrics.get("missing").is_some_and(|m| *m > 0.0)
            || r.metrics.get("duplicates").is_some_and(|d| *d > 0.0)
    };
    let runs = || {
        results
            .scenarios
            .iter()
            .flat_map(|s| s.runs.iter().map(move |r| (s, r)))
    };
    let veil_lost = runs()
        .filter(|(s, r)| s.system.starts_with("veil") && broken(s, r))
        .count();
    let peer_lost = runs()
        .filter(|(s, r)| !s.system.starts_with("veil") && broken(s, r))
        .count();
    if peer_lost > 0 {
        println!("note: {peer_lost} peer run(s) lost or duplicated messages: see MISSING / DUPLICATES above");
    }
    if veil_lost > 0 {
        println!("!!! {veil_lost} Veil run(s) lost or duplicated messages: see MISSING / DUPLICATES above !!!");
        return Ok(ExitCode::from(3));
    }
    Ok(ExitCode::SUCCESS)
}
