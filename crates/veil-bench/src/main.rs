//! veil-bench: Veil's load generator and benchmark suite (docs/benchmarks.md). `run` drives one workload against one
//! endpoint; `suite` starts Veil itself and runs every scenario against it and the peers; `report` turns the
//! suite's JSON into docs/benchmarks.md tables and PNG charts; `smoke` is CI's few-second check that no message
//! is lost or duplicated; `noop-server` serves the loopback ceiling on its own.

mod cpu;
mod error;
mod kind;
mod noop;
mod overload;
mod report;
mod results;
mod run;
mod scrape;
mod server;
mod stats;
mod suite;
mod target;
mod targets;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};

use crate::error::BenchError;
use crate::kind::TargetKind;
use crate::run::{RunReport, Workload};
use crate::server::{Durability, VeilOptions, VeilProcess};
use crate::target::Target;

#[derive(Parser, Debug)]
#[command(
    name = "veil-bench",
    version,
    about = "Veil's load generator and benchmark suite: the same workloads against Veil and its peers."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Drive one workload against one running endpoint and account for every message.
    Run(RunArgs),
    /// Start Veil (and the no-op server), run every scenario of docs/benchmarks.md against it and the given peers, and
    /// write the results as JSON.
    Suite(suite::SuiteArgs),
    /// Turn the suite's JSON into markdown tables and PNG charts.
    Report(report::ReportArgs),
    /// A few-second run against a freshly started Veil, on a standard queue and then on a FIFO queue of 8
    /// groups; fails unless nothing is missing or duplicated.
    Smoke(SmokeArgs),
    /// The wake-up scenario with many waiting long polls (25 … 10,000 raw keep-alive connections): wake
    /// latency, server CPU per send and server RSS per waiting connection, optionally against a baseline binary.
    ManyWaiters(suite::ManyWaitersArgs),
    /// Overload: measure capacity, offer 3× of it, then half of it; latency, throttled vs timed-out requests,
    /// server RSS over time and recovery.
    Overload(overload::OverloadArgs),
    /// Serve the no-op SQS endpoint (every request gets a canned SendMessage reply) until interrupted.
    NoopServer(NoopArgs),
}

/// The shape of a workload, shared by `run` and `smoke`.
#[derive(Args, Debug, Clone)]
struct WorkloadArgs {
    /// Concurrent producer tasks, each sending one request at a time.
    #[arg(long, default_value_t = 1)]
    producers: usize,
    /// Concurrent consumer tasks, each receiving (and deleting) one request at a time. 0 = send only.
    #[arg(long, default_value_t = 1)]
    consumers: usize,
    /// Messages per send request (SendMessageBatch above 1) and the most per receive request (1–10).
    #[arg(long, default_value_t = 1)]
    batch: usize,
    /// Body size in bytes; bodies carry a 45-byte id + send-time header and are padded to this size.
    #[arg(long, default_value_t = 256)]
    body_size: usize,
    /// Produce for this many seconds (the default, 10, unless --messages is given).
    #[arg(long, conflicts_with = "messages")]
    duration: Option<f64>,
    /// Produce exactly this many messages in total, then stop.
    #[arg(long)]
    messages: Option<u64>,
    /// Limit the total send rate to this many messages/s (open loop); unlimited by default.
    #[arg(long)]
    rate: Option<f64>,
    /// Visibility timeout of each receive, in seconds.
    #[arg(long, default_value_t = 30)]
    visibility: u32,
    /// Do not delete received messages (they come back after the visibility timeout: redeliveries).
    #[arg(long)]
    no_delete: bool,
    /// Long-poll wait of each receive in seconds (0 = short polling).
    #[arg(long, default_value_t = 1)]
    wait: u32,
    /// Spread the run over this many queues (`<queue>-0` …); producers and consumers must each be a
    /// multiple of it.
    #[arg(long, default_value_t = 1)]
    queues: usize,
    /// Stop consumers with the producers instead of draining the queue (missing messages are then not
    /// checked).
    #[arg(long)]
    no_drain: bool,
    /// Longest drain after producers stop, in seconds: consumers go on until every acknowledged message was
    /// received, the queue is empty, or this passes.
    #[arg(long, default_value_t = 30.0)]
    drain_timeout: f64,
    /// Each producer waits for its message to be received (and deleted) before sending the next: latency
    /// without queueing.
    #[arg(long)]
    lockstep: bool,
    /// Pause this many ms after an empty receive (keeps short-polling consumers from spinning).
    #[arg(long, default_value_t = 0)]
    empty_backoff: u64,
}

impl WorkloadArgs {
    fn workload(&self, queue: String) -> Result<Workload, BenchError> {
        Workload {
            queue,
            queues: self.queues,
            producers: self.producers,
            consumers: self.consumers,
            batch: self.batch,
            body_size: self.body_size,
            duration_s: match (self.duration, self.messages) {
                (None, None) => Some(10.0),
                (duration, _) => duration,
            },
            messages: self.messages,
            rate: self.rate,
            visibility_s: self.visibility,
            delete: !self.no_delete,
            wait_s: self.wait,
            drain: !self.no_drain,
            drain_timeout_s: self.drain_timeout,
            lockstep: self.lockstep,
            empty_backoff_ms: self.empty_backoff,
        }
        .checked()
        .map_err(BenchError::Workload)
    }
}

#[derive(Args, Debug)]
struct RunArgs {
    /// The system to drive (decides the client: SQS JSON for veil, moto, sqs and noop).
    #[arg(long, value_enum, default_value_t = TargetKind::Veil)]
    target: TargetKind,
    /// Its endpoint: http://HOST:PORT for SQS (or several, comma-separated, that serve the same queues: the
    /// nodes of a Veil cluster, spread over round-robin by task), redis://… for Redis, nats://… for NATS,
    /// postgres://… for pg-skip-locked (default per target: veil 127.0.0.1:9324, moto 127.0.0.1:5000, redis
    /// 6379, nats 4222, pg-skip-locked postgres://postgres@127.0.0.1:5432/postgres).
    #[arg(long)]
    endpoint: Option<String>,
    /// Queue to use; created if needed. Default: a fresh `bench-<random>` queue.
    #[arg(long)]
    queue: Option<String>,
    /// Empty the queue first with PurgeQueue (SQS targets only; SQS allows one purge per queue a minute).
    #[arg(long)]
    purge: bool,
    #[command(flatten)]
    workload: WorkloadArgs,
    /// Write the JSON report to this file (`-` = stdout, and the human summary goes to stderr instead).
    #[arg(long)]
    json: Option<PathBuf>,
    /// Also GET this URL (a Prometheus endpoint, e.g. http://127.0.0.1:9325/metrics) every
    /// `--scrape-interval-ms` while the run lasts, as a Prometheus server would: what scraping costs.
    #[arg(long)]
    scrape: Option<String>,
    #[arg(long, default_value_t = 100)]
    scrape_interval_ms: u64,
}

#[derive(Args, Debug)]
struct SmokeArgs {
    /// The veil binary to start.
    #[arg(long, default_value = "target/release/veil")]
    veil_bin: PathBuf,
    /// Seconds of producing (the drain comes on top).
    #[arg(long, default_value_t = 2.0)]
    duration: f64,
    /// Write the JSON reports (standard, then FIFO) to this file as well.
    #[arg(long)]
    json: Option<PathBuf>,
}

#[derive(Args, Debug)]
struct NoopArgs {
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:9399")]
    listen: SocketAddr,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("veil-bench: cannot start the async runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    let outcome = runtime.block_on(async {
        match cli.command {
            Command::Run(args) => run_command(args).await,
            Command::Suite(args) => suite::suite(args).await,
            Command::Report(args) => report::report(args).map(|()| ExitCode::SUCCESS),
            Command::Smoke(args) => smoke(args).await,
            Command::NoopServer(args) => noop_server(args).await,
            Command::ManyWaiters(args) => suite::many_waiters(args).await,
            Command::Overload(args) => overload::overload(args).await,
        }
    });
    // Long polls cancelled at the end of a run may still hold connections; do not wait for them.
    runtime.shutdown_timeout(Duration::from_millis(100));
    match outcome {
        Ok(code) => code,
        Err(error) => {
            eprintln!("veil-bench: {error}");
            ExitCode::FAILURE
        }
    }
}

/// Exit status of a finished run: 3 when a message was lost or duplicated.
fn verdict(report: &RunReport) -> ExitCode {
    if report.lost_messages() || report.counts.duplicates > 0 {
        ExitCode::from(3)
    } else {
        ExitCode::SUCCESS
    }
}

/// Writes `value` as pretty JSON (and a newline) to `path`; `what` names the figures in errors.
pub(crate) fn write_json(
    path: &std::path::Path,
    value: &impl serde::Serialize,
    what: &'static str,
) -> Result<(), BenchError> {
    let text = serde_json::to_string_pretty(value).map_err(|source| BenchError::Json {
        context: what,
        path: path.to_owned(),
        source,
    })?;
    std::fs::write(path, text + "\n").map_err(BenchError::io(what, path))
}

async fn run_command(args: RunArgs) -> Result<ExitCode, BenchError> {
    let endpoint = args
        .endpoint
        .clone()
        .unwrap_or_else(|| args.target.default_endpoint().to_owned());
    let queue = args
        .queue
        .clone()
        .unwrap_or_else(|| format!("bench-{:08x}", run::body::new_run_id()));
    let workload = args.workload.workload(queue)?;
    if args.purge {
        if !matches!(
            args.target,
            TargetKind::Veil | TargetKind::Moto | TargetKind::Sqs
        ) {
            return Err(BenchError::Usage(
                "--purge applies to SQS targets only".into(),
            ));
        }
        let sqs = targets::sqs::SqsTarget::connect(&endpoint).await?;
        for queue in workload.queue_names() {
            sqs.prepare(&queue, workload.visibility_s).await?;
            sqs.purge(&queue).await?;
        }
    }
    let scraper = args
        .scrape
        .clone()
        .map(|url| scrape::spawn(url, Duration::from_millis(args.scrape_interval_ms)));
    let report = with_target!(args.target, &endpoint, |target| {
        for queue in workload.queue_names() {
            target.prepare(&queue, workload.visibility_s).await?;
        }
        Ok::<_, BenchError>(run::run(&target, workload).await)
    })?;
    if let Some(scraper) = scraper {
        eprintln!("{}", scraper.finish().await);
    }
    match args.json.as_deref() {
        Some(path) if path.as_os_str() == "-" => {
            eprint!("{}", report.summary());
            let text =
                serde_json::to_string_pretty(&report).map_err(|source| BenchError::Json {
                    context: "encoding results",
                    path: path.to_owned(),
                    source,
                })?;
            println!("{text}");
        }
        Some(path) => {
            print!("{}", report.summary());
            write_json(path, &report, "results")?;
        }
        None => print!("{}", report.summary()),
    }
    Ok(verdict(&report))
}

async fn smoke(args: SmokeArgs) -> Result<ExitCode, BenchError> {
    let dir =
        tempfile::tempdir().map_err(BenchError::io("creating a temp dir", std::env::temp_dir()))?;
    let veil = VeilProcess::start(&VeilOptions {
        bin: args.veil_bin.clone(),
        data_dir: dir.path().join("data"),
        durability: Durability::Durable,
        inflight_max: None,
        ready_timeout: Duration::from_secs(20),
    })
    .await?;
    let workload = Workload {
        producers: 2,
        consumers: 2,
        batch: 5,
        body_size: 512,
        duration_s: Some(args.duration),
        drain_timeout_s: 5.0,
        ..Workload::baseline("smoke")
    }
    .checked()
    .map_err(BenchError::Workload)?;
    let fifo = Workload {
        queue: "smoke.fifo".into(),
        ..workload.clone()
    };
    let result = async {
        let target = targets::sqs::SqsTarget::connect(&veil.endpoint)
            .await?
            .named("veil");
        for queue in workload.queue_names() {
            target.prepare(&queue, workload.visibility_s).await?;
        }
        let standard = run::run(&target, workload).await;
        target
            .prepare_fifo(&fifo.queue, fifo.visibility_s, SMOKE_FIFO_GROUPS)
            .await?;
        let fifo = run::run(&target, fifo).await;
        Ok::<_, BenchError>([standard, fifo])
    }
    .await;
    veil.stop().await;
    let reports = result?;
    let mut failed = false;
    for report in &reports {
        print!("{}", report.summary());
        failed |= !smoke_verdict(report);
    }
    if let Some(path) = &args.json {
        write_json(path, &reports, "results")?;
    }
    Ok(if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

/// Message groups of the smoke's FIFO queue.
const SMOKE_FIFO_GROUPS: u32 = 8;

/// Prints the smoke's verdict on one run: true when something was sent and nothing was missing or duplicated.
fn smoke_verdict(report: &RunReport) -> bool {
    let c = &report.counts;
    let queue = &report.workload.queue;
    if c.missing == Some(0) && c.duplicates == 0 && c.sent > 0 {
        println!(
            "smoke: {queue} ok ({} sent, {} received, {} deleted, 0 missing, 0 duplicates)",
            c.sent, c.received, c.deleted
        );
        true
    } else {
        println!(
            "smoke: {queue} FAILED (sent {}, missing {:?}, duplicates {})",
            c.sent, c.missing, c.duplicates
        );
        false
    }
}

async fn noop_server(args: NoopArgs) -> Result<ExitCode, BenchError> {
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .map_err(|source| noop::NoopError::Bind {
            addr: args.listen,
            source,
        })?;
    println!("no-op SQS server on http://{}", args.listen);
    tokio::select! {
        _ = noop::serve(listener) => {}
        _ = tokio::signal::ctrl_c() => {}
    }
    Ok(ExitCode::SUCCESS)
}
