//! The wake-up scenario: how soon a consumer parked in a long poll on an empty queue gets
//! a message that was just sent. Driven by hand, one message at a time, because the figure needs the send's
//! response time and the receipt time of that one message, with nothing else in the queue.

use std::collections::BTreeMap;
use std::time::Duration;

use tokio::sync::mpsc;

use super::{insert_percentiles, run_queue};
use crate::error::BenchError;
use crate::results::ScenarioRun;
use crate::run::body::{encode_body, new_run_id, BodyId};
use crate::stats::{now_us, Latency};
use crate::target::Target;

/// Scenario 5, Wake-up: a consumer long-polls an empty queue; a producer sends one message once the consumer has been
/// parked for 20 ms; the figure is the time from the send's response to the consumer's receipt (negative
/// when the receipt comes first, which counts as 0 and is reported separately).
pub(super) async fn wake_up<T: Target>(
    target: &T,
    rounds: usize,
) -> Result<ScenarioRun, BenchError> {
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
    let run_id = new_run_id();
    let mut failure = None;
    for seq in 0..rounds {
        // The consumer is about to poll; give it time to park on the empty queue.
        if poll_rx.recv().await.is_none() {
            failure = Some("the consumer stopped".to_owned());
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
        let body = encode_body(
            BodyId {
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
    insert_percentiles(&mut metrics, "wake", &p);
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

// ----- the "many waiters" variant -----

/// `veil-bench many-waiters`: the wake-up figure with N long polls waiting on the same queue (docs/benchmarks.md "Many waiters"): each
/// waiter is a raw HTTP/1.1 keep-alive connection with a ReceiveMessage (WaitTimeSeconds=20) outstanding, so
/// that 10,000 of them cost the client little. Reports per N the wake latency (the send's start → a waiter's
/// receipt of the message), the server CPU per send and the server's RSS per waiting connection; with `--baseline-bin`, the
/// same for another binary in the same invocation, and the ratios.
#[derive(clap::Args, Debug)]
pub struct ManyWaitersArgs {
    /// The veil binary measured.
    #[arg(long, default_value = "target/release/veil")]
    pub veil_bin: std::path::PathBuf,
    /// Another veil binary measured the same way first (e.g. a build of the previous commit).
    #[arg(long)]
    pub baseline_bin: Option<std::path::PathBuf>,
    /// Waiting long polls, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "25,500,2000,10000")]
    pub waiters: Vec<usize>,
    /// Sends (one message each) per waiter count.
    #[arg(long, default_value_t = 40)]
    pub rounds: usize,
    /// Write the figures as JSON to this file too.
    #[arg(long)]
    pub json: Option<std::path::PathBuf>,
}

/// One binary at one waiter count.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ManyWaitersFigure {
    pub bin: String,
    pub waiters: usize,
    pub wake_p50_us: u64,
    pub wake_p99_us: u64,
    /// The send's own answer, from the same start: what of the wake is the send's round trip, not the wake.
    pub send_p50_us: u64,
    /// The waiter's receipt counted from the send's answer (the client's sight of the commit), 0 when the
    /// receipt came first: the wake's own cost, without the commit's fsync every send pays.
    pub after_answer_p50_us: u64,
    pub after_answer_p99_us: u64,
    /// Rounds whose receipt came before the send's own answer.
    pub receipts_before_answer: usize,
    pub server_cpu_us_per_send: f64,
    pub rss_bytes_per_waiter: f64,
    pub rss_idle_bytes: u64,
}

pub async fn many_waiters(args: ManyWaitersArgs) -> Result<std::process::ExitCode, BenchError> {
    raise_fd_limit();
    let mut bins = Vec::new();
    bins.extend(args.baseline_bin.clone());
    bins.push(args.veil_bin.clone());
    let mut figures = Vec::new();
    for bin in &bins {
        for &n in &args.waiters {
            let figure = one_many_waiters(bin, n, args.rounds).await?;
            println!(
                "== {} · {n} waiters: wake p50 {} p99 {} (the send's own answer p50 {}; after that answer p50 {} p99 {}, {} of {} receipts before it) · server CPU {:.0} µs/send · RSS {:.1} KiB per waiting connection (idle RSS {:.1} MiB)",
                figure.bin,
                crate::stats::human_us(figure.wake_p50_us as f64),
                crate::stats::human_us(figure.wake_p99_us as f64),
                crate::stats::human_us(figure.send_p50_us as f64),
                crate::stats::human_us(figure.after_answer_p50_us as f64),
                crate::stats::human_us(figure.after_answer_p99_us as f64),
                figure.receipts_before_answer,
                args.rounds,
                figure.server_cpu_us_per_send,
                figure.rss_bytes_per_waiter / 1024.0,
                figure.rss_idle_bytes as f64 / (1024.0 * 1024.0),
            );
            figures.push(figure);
        }
    }
    if args.baseline_bin.is_some() {
        println!("\n| waiters | wake p50 before → after | wake p99 before → after | CPU/send before → after | RSS/waiter before → after |");
        println!("|---:|---|---|---|---|");
        let (before, after) = figures.split_at(args.waiters.len());
        for (b, a) in before.iter().zip(after) {
            let ratio = |x: f64, y: f64| if x > 0.0 { y / x } else { f64::NAN };
            println!(
                "| {} | {} → {} (×{:.2}) | {} → {} (×{:.2}) | {:.0} → {:.0} µs (×{:.2}) | {:.1} → {:.1} KiB (×{:.2}) |",
                a.waiters,
                crate::stats::human_us(b.wake_p50_us as f64),
                crate::stats::human_us(a.wake_p50_us as f64),
                ratio(b.wake_p50_us as f64, a.wake_p50_us as f64),
                crate::stats::human_us(b.wake_p99_us as f64),
                crate::stats::human_us(a.wake_p99_us as f64),
                ratio(b.wake_p99_us as f64, a.wake_p99_us as f64),
                b.server_cpu_us_per_send,
                a.server_cpu_us_per_send,
                ratio(b.server_cpu_us_per_send, a.server_cpu_us_per_send),
                b.rss_bytes_per_waiter / 1024.0,
                a.rss_bytes_per_waiter / 1024.0,
                ratio(b.rss_bytes_per_waiter, a.rss_bytes_per_waiter),
            );
        }
    }
    if let Some(path) = &args.json {
        crate::write_json(path, &figures, "many-waiters figures")?;
    }
    Ok(std::process::ExitCode::SUCCESS)
}

/// Lifts this process's open-file limit to its hard limit; the Veil it starts inherits it. 10,000 waiters
/// need 10,000 descriptors on each side.
pub fn raise_fd_limit() {
    // SAFETY: getrlimit/setrlimit with a valid pointer to a local struct.
    unsafe {
        let mut limit = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) == 0 && limit.rlim_cur < limit.rlim_max
        {
            limit.rlim_cur = limit.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &limit);
        }
    }
}

async fn one_many_waiters(
    bin: &std::path::Path,
    n: usize,
    rounds: usize,
) -> Result<ManyWaitersFigure, BenchError> {
    use crate::server::{rss_of, Durability, VeilOptions, VeilProcess};
    use crate::targets::sqs::SqsTarget;
    let data = tempfile::tempdir().map_err(BenchError::io("temp dir", "/tmp"))?;
    let veil = VeilProcess::start(&VeilOptions {
        bin: bin.to_owned(),
        data_dir: data.path().join("data"),
        durability: Durability::Durable,
        inflight_max: None,
        ready_timeout: Duration::from_secs(30),
    })
    .await?;
    let sqs = SqsTarget::connect(&veil.endpoint).await?.named("veil");
    let queue = run_queue("waiters");
    sqs.prepare(&queue, 600).await?;
    let url = sqs.queue_url(&queue)?;
    let addr = veil
        .endpoint
        .trim_start_matches("http://")
        .parse::<std::net::SocketAddr>()
        .map_err(|error| BenchError::Usage(format!("endpoint {}: {error}", veil.endpoint)))?;
    // Warm up what every request touches once, so the idle figure holds it.
    sqs.send(&queue, vec![bytes::Bytes::from_static(b"warm")])
        .await?;
    let _ = sqs.receive(&queue, 1, 600, 0).await?;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let rss_idle = rss_of(veil.pid)?;
    let (arrived_tx, mut arrived_rx) = mpsc::unbounded_channel::<u64>();
    let (parked_tx, mut parked_rx) = mpsc::unbounded_channel::<()>();
    let mut waiters = tokio::task::JoinSet::new();
    for i in 0..n {
        let (url, arrived, parked) = (url.clone(), arrived_tx.clone(), parked_tx.clone());
        waiters.spawn(raw_waiter(addr, url, arrived, parked));
        if i % 200 == 199 {
            // Connect in steps: a burst of thousands of SYNs overflows the listen backlog.
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
    for _ in 0..n {
        if tokio::time::timeout(Duration::from_secs(30), parked_rx.recv())
            .await
            .ok()
            .flatten()
            .is_none()
        {
            return Err(BenchError::Usage(format!(
                "{n} waiters: not every connection got its request out within 30 s"
            )));
        }
    }
    // The requests are written; give the server time to read them and park each one.
    tokio::time::sleep(Duration::from_millis(500 + (n as u64) / 10)).await;
    let rss_waiting = rss_of(veil.pid)?;
    let (mut wake, mut send, mut after_answer) = (Latency::new(), Latency::new(), Latency::new());
    let mut receipts_before_answer = 0;
    let cpu_before = crate::cpu::cpu_seconds(veil.pid).unwrap_or(0.0);
    for _ in 0..rounds {
        tokio::time::sleep(Duration::from_millis(20)).await;
        while arrived_rx.try_recv().is_ok() {}
        // From the send's start: with many waiters the receipt often comes before the send's own response,
        // which a figure counted from the response would hide as 0.
        let sent = now_us();
        sqs.send(&queue, vec![bytes::Bytes::from_static(b"wake")])
            .await?;
        let answered = now_us();
        send.record_us(answered.saturating_sub(sent));
        match tokio::time::timeout(Duration::from_secs(10), arrived_rx.recv()).await {
            Ok(Some(at)) => {
                wake.record_us(at.saturating_sub(sent));
                after_answer.record_us(at.saturating_sub(answered));
                receipts_before_answer += usize::from(at < answered);
            }
            _ => {
                return Err(BenchError::Usage(format!(
                    "{n} waiters: a sent message reached no waiter within 10 s"
                )))
            }
        }
    }
    let cpu_after = crate::cpu::cpu_seconds(veil.pid).unwrap_or(0.0);
    waiters.abort_all();
    while waiters.join_next().await.is_some() {}
    veil.stop().await;
    let p = wake.percentiles();
    Ok(ManyWaitersFigure {
        bin: bin.display().to_string(),
        waiters: n,
        wake_p50_us: p.p50,
        wake_p99_us: p.p99,
        send_p50_us: send.percentiles().p50,
        after_answer_p50_us: after_answer.percentiles().p50,
        after_answer_p99_us: after_answer.percentiles().p99,
        receipts_before_answer,
        server_cpu_us_per_send: (cpu_after - cpu_before) * 1e6 / rounds.max(1) as f64,
        rss_bytes_per_waiter: (rss_waiting.saturating_sub(rss_idle)) as f64 / n.max(1) as f64,
        rss_idle_bytes: rss_idle,
    })
}

/// One waiting connection: long-polls over and over on its own keep-alive connection, reporting when its
/// first request is written and the time of every receipt of a message.
async fn raw_waiter(
    addr: std::net::SocketAddr,
    queue_url: std::sync::Arc<str>,
    arrived: mpsc::UnboundedSender<u64>,
    parked: mpsc::UnboundedSender<()>,
) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let Ok(mut stream) = tokio::net::TcpStream::connect(addr).await else {
        return;
    };
    let _ = stream.set_nodelay(true);
    let host = addr.to_string();
    let body = format!(
        r#"{{"QueueUrl":"{queue_url}","WaitTimeSeconds":20,"MaxNumberOfMessages":1,"VisibilityTimeout":600}}"#
    );
    let target = "AmazonSQS.ReceiveMessage";
    let content_type = "application/x-amz-json-1.0";
    let mut buf = Vec::with_capacity(1024);
    let mut first = true;
    loop {
        let signature = crate::targets::sigv4::sign(&host, content_type, target, body.as_bytes());
        let request = format!(
            "POST / HTTP/1.1\r\nhost: {host}\r\ncontent-type: {content_type}\r\nx-amz-target: {target}\r\nx-amz-date: {}\r\nauthorization: {}\r\ncontent-length: {}\r\n\r\n{body}",
            signature.amz_date,
            signature.authorization,
            body.len()
        );
        if stream.write_all(request.as_bytes()).await.is_err() {
            return;
        }
        if std::mem::take(&mut first) {
            let _ = parked.send(());
        }
        // Read one response: the head, then Content-Length bytes of body.
        buf.clear();
        let (head_end, length) = loop {
            let mut chunk = [0u8; 2048];
            match stream.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(read) => buf.extend_from_slice(&chunk[..read]),
            }
            if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
                let length = head
                    .lines()
                    .find_map(|line| line.strip_prefix("content-length:"))
                    .and_then(|v| v.trim().parse::<usize>().ok())
                    .unwrap_or(0);
                break (end + 4, length);
            }
        };
        while buf.len() < head_end + length {
            let mut chunk = [0u8; 2048];
            match stream.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(read) => buf.extend_from_slice(&chunk[..read]),
            }
        }
        let at = now_us();
        if buf[head_end..].windows(12).any(|w| w == b"\"Messages\":[") {
            let _ = arrived.send(at);
        }
    }
}
