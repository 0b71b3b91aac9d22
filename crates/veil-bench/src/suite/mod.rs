//! `veil-bench suite`: the scenarios of docs/benchmarks.md against a Veil the suite starts itself (durable, and a
//! labelled relaxed Veil beside it on request), the in-process no-op server, and the peers given with
//! `--peer`. Every scenario runs `--runs` times; the results go to one JSON file (its layout is
//! [`crate::results`]) that `veil-bench report` turns into tables and charts.
//!
//! This module holds the arguments and the runner that decides which scenario runs against which system and
//! in what order; each scenario lives in its own file, so that adding one does not mean reading the others.

mod ceiling;
mod fifo;
mod half_load;
mod redelivery;
mod round_trip;
mod scale;
mod throughput;
mod wake_up;

pub use wake_up::{many_waiters, raise_fd_limit, ManyWaitersArgs};

use std::collections::BTreeMap;
use std::future::Future;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::error::BenchError;
use crate::kind::TargetKind;
use crate::results::{
    Machine, ScenarioResult, ScenarioRun, SuiteResults, RESULTS_VERSION, SCENARIOS,
};
use crate::run::{self, RunReport};
use crate::server::{Durability, VeilOptions, VeilProcess};
use crate::stats::{median, Percentiles};
use crate::target::Target;
use crate::targets::azure::AzureTarget;
use crate::targets::kubemq::KubemqTarget;
use crate::targets::sqs::SqsTarget;
use crate::with_target;

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
    /// redis=redis://127.0.0.1:6379, nats=nats://127.0.0.1:4222, rabbitmq=amqp://127.0.0.1:5672/%2f,
    /// azurite=http://127.0.0.1:10001/devstoreaccount1 (and azurite-inmemory=… for one started with
    /// --inMemoryPersistence), kubemq=http://127.0.0.1:50000,
    /// pg-skip-locked=postgres://postgres@127.0.0.1:5432/postgres (a plain SQL queue driven directly), and
    /// sqs=… and azure=… for other SQS and Azure Queue endpoints (an SQS endpoint may be a comma-separated
    /// list: the clients are spread over it round-robin). Peers run the round-trip, throughput, half-load, redelivery and wake-up scenarios.
    #[arg(long = "peer", value_name = "NAME=ENDPOINT")]
    peers: Vec<String>,
    /// The PID of a peer's server process, NAME=PID, repeatable (NAME as in --peer): the throughput scenario
    /// then reports that process's CPU time per message, as it does for the Veil it starts itself. Without
    /// it the peer's figure is absent ("–" in the report).
    #[arg(long = "peer-pid", value_name = "NAME=PID")]
    peer_pids: Vec<String>,
    /// Also run the peer scenarios through these front-ends of the durable Veil (comma-separated: azure,
    /// kubemq), reported as "veil (azure)" and "veil (kubemq)": the same engine behind another protocol.
    #[arg(long, value_delimiter = ',', value_enum)]
    front_ends: Vec<FrontEnd>,
    /// Shrink every scenario to seconds and small counts (for development; figures are not meaningful).
    #[arg(long)]
    quick: bool,
    /// Only these scenarios (comma-separated): round-trip, throughput, half-load, ceiling, redelivery,
    /// wake-up, scale, fifo.
    #[arg(long, value_delimiter = ',')]
    only: Vec<String>,
    /// Messages preloaded by the scale scenario (1,000,000 by default; docs/benchmarks.md also records 10,000,000).
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

/// Veil's front-ends other than SQS that the suite can drive.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum FrontEnd {
    Azure,
    Kubemq,
}

impl FrontEnd {
    fn system(self) -> &'static str {
        match self {
            FrontEnd::Azure => "veil (azure)",
            FrontEnd::Kubemq => "veil (kubemq)",
        }
    }
}

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
        "veil (azure)" | "veil (kubemq)" => {
            "durable: fsync before every reply (group commit)".into()
        }
        "rabbitmq" => "quorum queue: Raft log fsynced before each publisher confirm".into(),
        "azurite" => "on disk (LokiJS metadata + extent files), never fsynced".into(),
        "azurite-inmemory" => "in memory (--inMemoryPersistence): nothing persisted".into(),
        "noop" => "none: answers without storing".into(),
        "pg-skip-locked" => {
            "PostgreSQL, synchronous_commit on: WAL flushed before each commit returns".into()
        }
        "moto" => "in memory: nothing persisted".into(),
        "redis" => "AOF, appendfsync always (as bench/run starts it)".into(),
        "nats" => "JetStream file storage, written before the ack, fsync every 2 min (nats-server 2.9 default)".into(),
        other => format!("{other}: as started"),
    }
}

/// A fresh queue name for one run of `scenario` (also used by `veil-bench overload`).
pub fn run_queue_name(scenario: &str) -> String {
    run_queue(scenario)
}

fn run_queue(scenario: &str) -> String {
    format!("vb-{scenario}-{:08x}", run::body::new_run_id())
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
            insert_percentiles(&mut m, name, p);
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
    /// Announces run `run` of `runs` of `scenario` on `system`, then awaits `outcome` and adds it.
    async fn run(
        &mut self,
        scenario: &str,
        system: &str,
        (run, runs): (usize, usize),
        outcome: impl Future<Output = Result<ScenarioRun, BenchError>>,
    ) {
        println!("-- {scenario} · {system} · run {run}/{runs}");
        self.add(scenario, system, outcome.await);
    }

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

/// `--peer-pid NAME=PID` values, keyed by the peer's system name. Each NAME must be one of the `--peer`s and
/// each PID a process whose CPU time is readable now, so that a typo fails the suite before it runs rather
/// than leaving a column empty after it.
fn parse_peer_pids(
    values: &[String],
    peers: &[(TargetKind, String)],
) -> Result<BTreeMap<&'static str, u32>, BenchError> {
    let mut pids = BTreeMap::new();
    for value in values {
        let usage = |why: &str| BenchError::Usage(format!("--peer-pid {value:?}: {why}"));
        let (name, pid) = value
            .split_once('=')
            .ok_or_else(|| usage("expected NAME=PID"))?;
        let kind = peers
            .iter()
            .map(|(kind, _)| *kind)
            .find(|kind| kind.name() == name)
            .ok_or_else(|| usage("NAME is not one of the --peer names"))?;
        let pid: u32 = pid
            .parse()
            .ok()
            .filter(|pid| *pid > 0)
            .ok_or_else(|| usage("PID is not a process id"))?;
        crate::cpu::cpu_seconds(pid).map_err(|error| {
            usage(&format!(
                "cannot read the CPU time of that process: {error}"
            ))
        })?;
        pids.insert(kind.name(), pid);
    }
    Ok(pids)
}

/// Records `p` as the metrics `{name}_p50_us`, `{name}_p99_us` and `{name}_max_us`.
fn insert_percentiles(metrics: &mut BTreeMap<String, f64>, name: &str, p: &Percentiles) {
    metrics.insert(format!("{name}_p50_us"), p.p50 as f64);
    metrics.insert(format!("{name}_p99_us"), p.p99 as f64);
    metrics.insert(format!("{name}_max_us"), p.max as f64);
}

/// Runs the scenarios that apply to any target (round trip through wake-up) against one system, whose server
/// process is `server_pid` when the suite knows it (for the throughput scenario's CPU per message).
async fn common_scenarios<T: Target>(
    target: &T,
    system: &str,
    server_pid: Option<u32>,
    plan: &Plan,
    wanted: &dyn Fn(&str) -> bool,
    collected: &mut Collected,
    runs: usize,
) {
    for run in 1..=runs {
        if wanted("round-trip") {
            collected
                .run(
                    "round-trip",
                    system,
                    (run, runs),
                    round_trip::round_trip(target, plan),
                )
                .await;
        }
        if wanted("throughput") {
            collected
                .run(
                    "throughput",
                    system,
                    (run, runs),
                    throughput::throughput(target, plan, None, server_pid),
                )
                .await;
        }
    }
    // Half load comes after every throughput run, since its rate is half of their median.
    if wanted("half-load") {
        let rate = half_load::offered_rate(collected, system);
        for run in 1..=runs {
            println!("-- half-load ({rate:.0} msgs/s offered) · {system} · run {run}/{runs}");
            collected.add(
                "half-load",
                system,
                half_load::half_load(target, plan, rate).await,
            );
        }
    }
    for run in 1..=runs {
        if wanted("redelivery") {
            collected
                .run(
                    "redelivery",
                    system,
                    (run, runs),
                    redelivery::redelivery(target, plan.redelivery_messages),
                )
                .await;
        }
        if wanted("wake-up") {
            collected
                .run(
                    "wake-up",
                    system,
                    (run, runs),
                    wake_up::wake_up(target, plan.wakeups),
                )
                .await;
        }
    }
}

/// Runs the peer scenarios through one of Veil's other front-ends (the Veil `veil` is already serving it).
async fn front_end_scenarios(
    front_end: FrontEnd,
    veil: &VeilProcess,
    veil_pid: Option<u32>,
    plan: &Plan,
    wanted: &dyn Fn(&str) -> bool,
    collected: &mut Collected,
    runs: usize,
) {
    let system = front_end.system();
    println!("== {system}");
    let peer_wanted = |name: &str| PEER_SCENARIOS.contains(&name) && wanted(name);
    let outcome: Result<(), BenchError> = async {
        match front_end {
            FrontEnd::Azure => {
                let target = AzureTarget::connect(&veil.azure_endpoint)
                    .await?
                    .named("veil-azure");
                common_scenarios(
                    &target,
                    system,
                    veil_pid,
                    plan,
                    &peer_wanted,
                    collected,
                    runs,
                )
                .await;
            }
            FrontEnd::Kubemq => {
                let target = KubemqTarget::connect(&veil.kubemq_endpoint).await?;
                common_scenarios(
                    &target,
                    system,
                    veil_pid,
                    plan,
                    &peer_wanted,
                    collected,
                    runs,
                )
                .await;
            }
        }
        Ok(())
    }
    .await;
    if let Err(error) = outcome {
        eprintln!("veil-bench: {system}: {error}");
        collected.add("round-trip", system, Err(error));
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
                    "--peer {peer:?}: NAME must be moto, redis, nats, rabbitmq, azurite, \
                     azurite-inmemory, kubemq, pg-skip-locked, sqs or azure"
                ))
            })?;
        peers.push((kind, endpoint.to_owned()));
    }
    let peer_pids = parse_peer_pids(&args.peer_pids, &peers)?;
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
        common_scenarios(
            &target,
            system,
            Some(veil.pid).filter(|pid| *pid > 0),
            &plan,
            &wanted,
            &mut collected,
            runs,
        )
        .await;
        if durability == Durability::Durable {
            let veil_pid = Some(veil.pid).filter(|pid| *pid > 0);
            for front_end in &args.front_ends {
                front_end_scenarios(
                    *front_end,
                    &veil,
                    veil_pid,
                    &plan,
                    &wanted,
                    &mut collected,
                    runs,
                )
                .await;
            }
        }
        if wanted("fifo") && durability == Durability::Durable {
            fifo::fifo_rounds(&target, &plan, &mut collected, runs).await;
        }
        if wanted("ceiling") {
            ceiling::ceiling_rounds(&target, system, durability, &plan, &mut collected, runs)
                .await?;
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
            collected.add("scale", "veil", scale::scale(&args.veil_bin, &plan).await);
        }
    }
    for (kind, endpoint) in &peers {
        println!("== peer {kind} at {endpoint}");
        let system = kind.name();
        let peer_wanted = |name: &str| PEER_SCENARIOS.contains(&name) && wanted(name);
        let outcome: Result<(), BenchError> = with_target!(*kind, endpoint, |target| {
            common_scenarios(
                &target,
                system,
                peer_pids.get(system).copied(),
                &plan,
                &peer_wanted,
                &mut collected,
                runs,
            )
            .await;
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
    crate::write_json(&path, &results, "results")?;
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peer_pids_must_name_a_peer_and_a_readable_process() {
        let peers = vec![(TargetKind::Redis, "redis://127.0.0.1:6390".to_owned())];
        let own = std::process::id();
        let parsed = parse_peer_pids(&[format!("redis={own}")], &peers).unwrap();
        assert_eq!(parsed.get("redis"), Some(&own));
        for bad in [
            format!("nats={own}"),
            "redis".to_owned(),
            "redis=0".to_owned(),
            "redis=abc".to_owned(),
            format!("redis={}", u32::MAX),
        ] {
            assert!(
                parse_peer_pids(std::slice::from_ref(&bad), &peers).is_err(),
                "{bad}"
            );
        }
        assert!(parse_peer_pids(&[], &peers).unwrap().is_empty());
    }
}
