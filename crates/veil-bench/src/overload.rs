//! `veil-bench overload` (docs/reliability.md "Load and overload"): measures the capacity of a Veil it starts
//! (SendMessage, closed loop), offers `--factor` times that open loop — requests are scheduled whether or not
//! earlier ones were answered, and wait in the client for one of `--connections` keep-alive connections — then
//! half the capacity to see it recover. Per phase: latency percentiles of the answered requests (from their
//! schedule), how many were answered, throttled (the protocol's throttling error; its latency from the send),
//! sent but not answered within the timeout, never sent (no client connection came free within the timeout),
//! or failed otherwise; the server's RSS over time.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::{Arc, Mutex as StdMutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use serde::Serialize;

use crate::error::BenchError;
use crate::server::{rss_of, Durability, VeilOptions, VeilProcess};
use crate::stats::{human_us, Latency};
use crate::target::Target;
use crate::targets::sqs::SqsTarget;

#[derive(clap::Args, Debug)]
pub struct OverloadArgs {
    /// The veil binary to start (its limits come from the environment, e.g. VEIL_MAX_REQUESTS_IN_FLIGHT).
    #[arg(long, default_value = "target/release/veil")]
    veil_bin: PathBuf,
    /// Connections of the closed-loop capacity measurement (the default admission limit: the concurrency
    /// Veil works at under overload).
    #[arg(long, default_value_t = 512)]
    capacity_connections: usize,
    #[arg(long, default_value_t = 5.0)]
    capacity_seconds: f64,
    /// Offered load of the overload phase, in multiples of the measured capacity.
    #[arg(long, default_value_t = 3.0)]
    factor: f64,
    #[arg(long, default_value_t = 15.0)]
    overload_seconds: f64,
    /// The recovery phase offers half the capacity for this long.
    #[arg(long, default_value_t = 10.0)]
    recovery_seconds: f64,
    /// A request without an answer after this long counts as timed out (and is abandoned).
    #[arg(long, default_value_t = 5_000)]
    timeout_ms: u64,
    /// Keep-alive connections of the open-loop phases, opened before them; a scheduled request waits in the
    /// client for a free one (and that wait counts in its latency and against its timeout).
    #[arg(long, default_value_t = 1_024)]
    connections: usize,
    /// Write the figures as JSON to this file too.
    #[arg(long)]
    json: Option<PathBuf>,
}

#[derive(Default, Serialize)]
struct Counts {
    offered: u64,
    answered: u64,
    throttled: u64,
    /// Sent, and no answer within the timeout (counted from the send): the server let it hang.
    timed_out: u64,
    /// Never sent: no client connection came free within the timeout, because the server answered (or
    /// refused) too slowly to keep up with the offered rate.
    unsent: u64,
    other_errors: u64,
}

#[derive(Serialize)]
struct Phase {
    name: &'static str,
    offered_per_s: f64,
    seconds: f64,
    counts: Counts,
    answered_per_s: f64,
    latency_p50_us: u64,
    latency_p99_us: u64,
    latency_max_us: u64,
    throttled_p99_us: u64,
    first_other_error: Option<String>,
}

#[derive(Serialize)]
struct Report {
    capacity_per_s: f64,
    phases: Vec<Phase>,
    /// (seconds since start, phase, server RSS in bytes)
    rss: Vec<(f64, &'static str, u64)>,
}

/// What one request ended as.
enum Outcome {
    Answered(u64),
    Throttled(u64),
    TimedOut,
    Unsent,
    Other(String),
}

async fn one_send(sqs: &SqsTarget, queue: &str, timeout: Duration) -> Outcome {
    let started = Instant::now();
    let body = vec![Bytes::from_static(
        b"overload-0123456789abcdef0123456789abcdef",
    )];
    match tokio::time::timeout(timeout, sqs.send(queue, body)).await {
        Ok(Ok(())) => Outcome::Answered(started.elapsed().as_micros() as u64),
        Ok(Err(error)) => {
            let text = error.to_string();
            if text.contains("RequestThrottled") {
                Outcome::Throttled(started.elapsed().as_micros() as u64)
            } else if text.contains("no reply within") {
                Outcome::TimedOut
            } else {
                Outcome::Other(text)
            }
        }
        Err(_) => Outcome::TimedOut,
    }
}

#[derive(Default)]
struct Tally {
    counts: Counts,
    latency: Latency,
    throttled: Latency,
    first_other: Option<String>,
}

impl Tally {
    fn add(&mut self, outcome: Outcome) {
        match outcome {
            Outcome::Answered(us) => {
                self.counts.answered += 1;
                self.latency.record_us(us);
            }
            Outcome::Throttled(us) => {
                self.counts.throttled += 1;
                self.throttled.record_us(us);
            }
            Outcome::TimedOut => self.counts.timed_out += 1,
            Outcome::Unsent => self.counts.unsent += 1,
            Outcome::Other(text) => {
                self.counts.other_errors += 1;
                self.first_other.get_or_insert(text);
            }
        }
    }

    fn phase(self, name: &'static str, offered_per_s: f64, seconds: f64) -> Phase {
        let p = self.latency.percentiles();
        let t = self.throttled.percentiles();
        Phase {
            name,
            offered_per_s,
            seconds,
            answered_per_s: self.counts.answered as f64 / seconds,
            counts: self.counts,
            latency_p50_us: p.p50,
            latency_p99_us: p.p99,
            latency_max_us: p.max,
            throttled_p99_us: t.p99,
            first_other_error: self.first_other,
        }
    }
}

pub async fn overload(args: OverloadArgs) -> Result<ExitCode, BenchError> {
    crate::suite::raise_fd_limit();
    let data = tempfile::tempdir().map_err(BenchError::io("temp dir", "/tmp"))?;
    let veil = VeilProcess::start(&VeilOptions {
        bin: args.veil_bin.clone(),
        data_dir: data.path().join("data"),
        durability: Durability::Durable,
        inflight_max: None,
        ready_timeout: Duration::from_secs(30),
    })
    .await?;
    let sqs = SqsTarget::connect(&veil.endpoint).await?.named("veil");
    let queue = crate::suite::run_queue_name("overload");
    sqs.prepare(&queue, 30).await?;
    let timeout = Duration::from_millis(args.timeout_ms);
    let started = Instant::now();
    let rss = Arc::new(StdMutex::new(Vec::new()));
    let phase_name = Arc::new(StdMutex::new("capacity"));
    let sampler = {
        let (rss, phase_name, pid) = (rss.clone(), phase_name.clone(), veil.pid);
        tokio::spawn(async move {
            loop {
                if let Ok(bytes) = rss_of(pid) {
                    let phase = *phase_name
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner);
                    rss.lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner)
                        .push((started.elapsed().as_secs_f64(), phase, bytes));
                }
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        })
    };

    // Capacity: closed loop.
    let tally = Arc::new(StdMutex::new(Tally::default()));
    let until = Instant::now() + Duration::from_secs_f64(args.capacity_seconds);
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..args.capacity_connections {
        let (sqs, queue, tally) = (sqs.clone(), queue.clone(), tally.clone());
        tasks.spawn(async move {
            while Instant::now() < until {
                let outcome = one_send(&sqs, &queue, timeout).await;
                let mut tally = tally
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                tally.counts.offered += 1;
                tally.add(outcome);
            }
        });
    }
    while tasks.join_next().await.is_some() {}
    let tally = std::mem::take(
        &mut *tally
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner),
    );
    let capacity = tally.counts.answered as f64 / args.capacity_seconds;
    let mut phases = vec![tally.phase("capacity", f64::NAN, args.capacity_seconds)];
    println!(
        "capacity (closed loop, {} connections): {capacity:.0} sends/s",
        args.capacity_connections
    );

    // Open the connections of the open-loop phases now, so that connection set-up is not what they measure.
    let connections = Arc::new(tokio::sync::Semaphore::new(args.connections));
    let mut warm = tokio::task::JoinSet::new();
    for _ in 0..args.connections {
        let sqs = sqs.clone();
        warm.spawn(async move { sqs.ping().await });
    }
    while warm.join_next().await.is_some() {}
    for (name, rate, seconds) in [
        ("overload", capacity * args.factor, args.overload_seconds),
        ("recovery", capacity * 0.5, args.recovery_seconds),
    ] {
        *phase_name
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = name;
        let phase = open_loop(&sqs, &queue, rate, seconds, timeout, &connections).await;
        phases.push(phase.phase(name, rate, seconds));
    }
    *phase_name
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner) = "after";
    tokio::time::sleep(Duration::from_secs(1)).await;
    sampler.abort();
    veil.stop().await;

    for p in &phases {
        println!(
            "== {:9} offered {:>7.0}/s for {:>4.0} s: answered {:>7} ({:.0}/s) p50 {} p99 {} max {} · throttled {} (p99 {} from the send) · timed out {} · unsent {} · other errors {}{}",
            p.name,
            if p.offered_per_s.is_nan() { 0.0 } else { p.offered_per_s },
            p.seconds,
            p.counts.answered,
            p.answered_per_s,
            human_us(p.latency_p50_us as f64),
            human_us(p.latency_p99_us as f64),
            human_us(p.latency_max_us as f64),
            p.counts.throttled,
            human_us(p.throttled_p99_us as f64),
            p.counts.timed_out,
            p.counts.unsent,
            p.counts.other_errors,
            p.first_other_error
                .as_deref()
                .map(|e| format!(" (first: {e})"))
                .unwrap_or_default(),
        );
    }
    let rss = std::mem::take(
        &mut *rss
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner),
    );
    let mib = |b: u64| b as f64 / (1024.0 * 1024.0);
    for phase in ["capacity", "overload", "recovery", "after"] {
        let of: Vec<u64> = rss.iter().filter(|s| s.1 == phase).map(|s| s.2).collect();
        if let (Some(first), Some(max), Some(last)) = (of.first(), of.iter().max(), of.last()) {
            println!(
                "   server RSS during {phase:9}: first {:.1} MiB, max {:.1} MiB, last {:.1} MiB",
                mib(*first),
                mib(*max),
                mib(*last)
            );
        }
    }
    let report = Report {
        capacity_per_s: capacity,
        phases,
        rss,
    };
    if let Some(path) = &args.json {
        crate::write_json(path, &report, "overload figures")?;
    }
    Ok(ExitCode::SUCCESS)
}

/// Offers `rate` sends a second for `seconds`, each on schedule, over at most `connections` requests at once
/// (the client's keep-alive connections, opened beforehand); a request waits in the client for a free
/// connection, and its latency and timeout count from its scheduled time, as an open-loop client sees them.
/// Waits for the last to end.
async fn open_loop(
    sqs: &SqsTarget,
    queue: &str,
    rate: f64,
    seconds: f64,
    timeout: Duration,
    connections: &Arc<tokio::sync::Semaphore>,
) -> Tally {
    let tally = Arc::new(StdMutex::new(Tally::default()));
    let started = Instant::now();
    let mut issued = 0u64;
    let mut tasks = tokio::task::JoinSet::new();
    let mut tick = tokio::time::interval(Duration::from_millis(1));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    loop {
        tick.tick().await;
        let elapsed = started.elapsed().as_secs_f64();
        if elapsed >= seconds {
            break;
        }
        let due = (elapsed * rate) as u64;
        while issued < due {
            issued += 1;
            let (sqs, queue, tally, connections) = (
                sqs.clone(),
                queue.to_owned(),
                tally.clone(),
                connections.clone(),
            );
            let scheduled = Instant::now();
            tasks.spawn(async move {
                let outcome = match tokio::time::timeout(timeout, connections.acquire_owned()).await
                {
                    // The timeout counts from the send: a request abandoned for its wait in the client would
                    // close its connection mid-request, and the reconnects would then be what is measured.
                    Ok(Ok(_connection)) => {
                        // An answer's latency counts from its schedule; a refusal's stays one_send's, from
                        // the send: how fast the server refuses.
                        match one_send(&sqs, &queue, timeout).await {
                            Outcome::Answered(_) => {
                                Outcome::Answered(scheduled.elapsed().as_micros() as u64)
                            }
                            other => other,
                        }
                    }
                    _ => Outcome::Unsent,
                };
                let mut tally = tally
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                tally.counts.offered += 1;
                tally.add(outcome);
            });
        }
        while tasks.try_join_next().is_some() {}
    }
    while tasks.join_next().await.is_some() {}
    let mut guard = tally
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    std::mem::take(&mut *guard)
}
