//! The load generator: producers send uniquely numbered, timestamped bodies; consumers receive (and
//! optionally delete) them; at the end every acknowledged send is accounted for. A message that was
//! acknowledged and never received, even after a drain phase, is reported as MISSING.
//!
//! This module holds the tasks and their coordination (pacing, lockstep, the drain); what a run does
//! ([`workload`]), what its bodies carry ([`body`]), how its messages are counted ([`accounting`]) and what
//! it reports ([`report`]) each live in their own file.

pub mod accounting;
pub mod body;
pub mod report;
pub mod workload;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::watch;

use self::accounting::{account, Received};
use self::body::{decode_body, encode_body, new_run_id, BodyId};
pub use self::report::RunReport;
use self::report::{Cdfs, Errors, Latencies, Throughput};
pub use self::workload::Workload;
use crate::stats::{now_us, Latency};
use crate::target::Target;

/// The longest a lockstep producer waits for its message to come back.
const LOCKSTEP_TIMEOUT: Duration = Duration::from_secs(5);
/// Pause after a failed request, so that a dead server is not spun against.
const ERROR_BACKOFF: Duration = Duration::from_millis(20);

/// State shared by the tasks of one run.
struct Shared {
    run: u32,
    produce_until: Option<Instant>,
    budget: Option<AtomicU64>,
    producing_done: AtomicBool,
    acked_total: AtomicU64,
    received: Received,
    /// Messages of this run received (and, when deleting, deleted): what a lockstep producer waits for.
    settled: AtomicU64,
    settled_changed: tokio::sync::Notify,
    /// Signalled by lockstep producers after each acknowledged send.
    acked_changed: tokio::sync::Notify,
}

impl Shared {
    /// Takes up to `want` messages from the count budget (all of them in duration mode); 0 means stop.
    fn take(&self, want: u64) -> u64 {
        if self
            .produce_until
            .is_some_and(|until| Instant::now() >= until)
        {
            return 0;
        }
        match &self.budget {
            None => want,
            Some(budget) => {
                let mut taken = 0;
                let _ = budget.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |left| {
                    taken = left.min(want);
                    Some(left - taken)
                });
                taken
            }
        }
    }

    /// The drain's success condition: producers are done and as many distinct messages came back as were
    /// acknowledged.
    fn all_received(&self) -> bool {
        self.producing_done.load(Ordering::Acquire)
            && self.received.unique() >= self.acked_total.load(Ordering::Relaxed)
    }
}

#[derive(Default)]
struct ProducerOutcome {
    acked: Vec<u64>,
    failed_messages: u64,
    requests: u64,
    errors: u64,
    send: Latency,
    first_error: Option<String>,
}

#[derive(Default)]
struct ConsumerOutcome {
    receive: Latency,
    delete: Latency,
    end_to_end: Latency,
    foreign: u64,
    deleted: u64,
    receive_requests: u64,
    empty_receives: u64,
    delete_requests: u64,
    receive_errors: u64,
    delete_errors: u64,
    max_hold_us: u64,
    last_first_delivery: Option<Instant>,
    last_delete: Option<Instant>,
    cancelled_in_flight: bool,
    first_error: Option<String>,
}

async fn produce<T: Target>(
    target: T,
    workload: Arc<Workload>,
    shared: Arc<Shared>,
    producer: u16,
) -> ProducerOutcome {
    let mut out = ProducerOutcome::default();
    let batch = workload.batch as u64;
    let queue = workload.queue_of(usize::from(producer));
    // Open-loop pacing: this producer's share of the rate, one batch per interval.
    let interval = workload
        .rate
        .filter(|rate| *rate > 0.0)
        .map(|rate| Duration::from_secs_f64(batch as f64 * workload.producers as f64 / rate));
    let mut next_send = Instant::now();
    let mut seq = 0u64;
    loop {
        let count = shared.take(batch);
        if count == 0 {
            break;
        }
        if let Some(interval) = interval {
            tokio::time::sleep_until(next_send.into()).await;
            next_send += interval;
        }
        let sent_us = now_us();
        let bodies = (0..count)
            .map(|i| {
                let id = BodyId {
                    run: shared.run,
                    producer,
                    seq: seq + i,
                    sent_us,
                };
                encode_body(id, workload.body_size)
            })
            .collect();
        let started = Instant::now();
        out.requests += 1;
        match target.send(&queue, bodies).await {
            Ok(()) => {
                out.send.record_since(started);
                out.acked.extend(seq..seq + count);
                let acked = shared.acked_total.fetch_add(count, Ordering::Relaxed) + count;
                if workload.lockstep {
                    shared.acked_changed.notify_waiters();
                    wait_settled(&shared, acked).await;
                }
            }
            Err(error) => {
                out.errors += 1;
                out.failed_messages += count;
                out.first_error.get_or_insert_with(|| error.to_string());
                tokio::time::sleep(ERROR_BACKOFF).await;
            }
        }
        seq += count;
    }
    out
}

async fn consume<T: Target>(
    target: T,
    workload: Arc<Workload>,
    shared: Arc<Shared>,
    mut finished: watch::Receiver<bool>,
    drain_until: Arc<Mutex<Option<Instant>>>,
    consumer: usize,
) -> ConsumerOutcome {
    let mut out = ConsumerOutcome::default();
    let queue = workload.queue_of(consumer);
    let mut empty_in_drain = 0u32;
    loop {
        if *finished.borrow() {
            break;
        }
        let draining = shared.producing_done.load(Ordering::Acquire);
        if draining {
            let until = *drain_until.lock().unwrap_or_else(|p| p.into_inner());
            let out_of_time = until.is_none_or(|until| Instant::now() >= until);
            // Two empty long polls in a row after the producers stopped: the queue has nothing visible.
            if !workload.drain || out_of_time || shared.all_received() || empty_in_drain >= 2 {
                break;
            }
        }
        if workload.lockstep && !draining && !wait_acked(&shared).await {
            continue;
        }
        let wait_s = if draining {
            workload.wait_s.max(1)
        } else {
            workload.wait_s
        };
        let started = Instant::now();
        out.receive_requests += 1;
        let received = tokio::select! {
            received = target.receive(&queue, workload.batch, workload.visibility_s, wait_s) => received,
            _ = finished.changed() => {
                out.cancelled_in_flight = true;
                break;
            }
        };
        let deliveries = match received {
            Ok(deliveries) => deliveries,
            Err(error) => {
                out.receive_errors += 1;
                out.first_error.get_or_insert_with(|| error.to_string());
                tokio::time::sleep(ERROR_BACKOFF).await;
                continue;
            }
        };
        out.receive.record_since(started);
        let received_at = Instant::now();
        if deliveries.is_empty() {
            out.empty_receives += 1;
            if draining {
                empty_in_drain += 1;
            }
            if workload.empty_backoff_ms > 0 {
                tokio::time::sleep(Duration::from_millis(workload.empty_backoff_ms)).await;
            }
            continue;
        }
        empty_in_drain = 0;
        let arrived_us = now_us();
        let mut handles = Vec::with_capacity(deliveries.len());
        let mut firsts = 0u64;
        for delivery in deliveries {
            match decode_body(&delivery.body) {
                Some(id) if id.run == shared.run => {
                    if shared.received.record(&id) == 0 {
                        firsts += 1;
                        out.end_to_end
                            .record_us(arrived_us.saturating_sub(id.sent_us));
                        out.last_first_delivery = Some(received_at);
                    }
                }
                _ => out.foreign += 1,
            }
            handles.push(delivery.handle);
        }
        if workload.delete {
            let count = handles.len() as u64;
            let started = Instant::now();
            out.delete_requests += 1;
            match target.delete(&queue, handles).await {
                Ok(()) => {
                    out.delete.record_since(started);
                    out.deleted += count;
                    out.last_delete = Some(Instant::now());
                    let hold = u64::try_from(received_at.elapsed().as_micros()).unwrap_or(u64::MAX);
                    out.max_hold_us = out.max_hold_us.max(hold);
                }
                Err(error) => {
                    out.delete_errors += 1;
                    out.first_error.get_or_insert_with(|| error.to_string());
                }
            }
        }
        if firsts > 0 {
            shared.settled.fetch_add(firsts, Ordering::Release);
            shared.settled_changed.notify_waiters();
        }
    }
    out
}

/// Waits until `target` messages are settled; gives up after [`LOCKSTEP_TIMEOUT`] so that a lost message
/// shows up as MISSING in the accounting instead of hanging the run.
async fn wait_settled(shared: &Shared, target: u64) {
    let deadline = Instant::now() + LOCKSTEP_TIMEOUT;
    loop {
        let notified = shared.settled_changed.notified();
        if shared.settled.load(Ordering::Acquire) >= target || Instant::now() >= deadline {
            return;
        }
        let _ = tokio::time::timeout_at(deadline.into(), notified).await;
    }
}

/// A lockstep consumer's wait for something to receive: true once more was acknowledged than settled,
/// false after a short while (so the caller re-checks whether the producers are done).
async fn wait_acked(shared: &Shared) -> bool {
    let notified = shared.acked_changed.notified();
    if shared.acked_total.load(Ordering::Relaxed) > shared.settled.load(Ordering::Acquire) {
        return true;
    }
    let _ = tokio::time::timeout(Duration::from_millis(50), notified).await;
    shared.acked_total.load(Ordering::Relaxed) > shared.settled.load(Ordering::Acquire)
}

/// Runs `workload` against an already prepared queue of `target` and accounts for every message.
pub async fn run<T: Target>(target: &T, workload: Workload) -> RunReport {
    let workload = Arc::new(workload);
    let run = new_run_id();
    let start = Instant::now();
    let shared = Arc::new(Shared {
        run,
        produce_until: workload
            .duration_s
            .map(|s| start + Duration::from_secs_f64(s)),
        budget: workload.messages.map(AtomicU64::new),
        producing_done: AtomicBool::new(false),
        acked_total: AtomicU64::new(0),
        received: Received::new(),
        settled: AtomicU64::new(0),
        settled_changed: tokio::sync::Notify::new(),
        acked_changed: tokio::sync::Notify::new(),
    });
    let (finish, finished) = watch::channel(false);
    let drain_until = Arc::new(Mutex::new(None));

    let producers: Vec<_> = (0..workload.producers)
        .map(|p| {
            tokio::spawn(produce(
                target.clone(),
                workload.clone(),
                shared.clone(),
                p as u16,
            ))
        })
        .collect();
    let consumers: Vec<_> = (0..workload.consumers)
        .map(|c| {
            tokio::spawn(consume(
                target.clone(),
                workload.clone(),
                shared.clone(),
                finished.clone(),
                drain_until.clone(),
                c,
            ))
        })
        .collect();

    let mut notes = Vec::new();
    let mut produced = Vec::with_capacity(producers.len());
    for handle in producers {
        match handle.await {
            Ok(outcome) => produced.push(outcome),
            Err(error) => {
                notes.push(format!("a producer task failed: {error}"));
                produced.push(ProducerOutcome::default());
            }
        }
    }
    let produce_s = start.elapsed().as_secs_f64();
    *drain_until.lock().unwrap_or_else(|p| p.into_inner()) =
        Some(Instant::now() + Duration::from_secs_f64(workload.drain_timeout_s));
    shared.producing_done.store(true, Ordering::Release);

    // Watch the drain: stop consumers parked in long polls as soon as everything came back, or at the
    // timeout (or at once when the run does not drain).
    let watcher = {
        let shared = shared.clone();
        let workload = workload.clone();
        tokio::spawn(async move {
            let deadline = Instant::now() + Duration::from_secs_f64(workload.drain_timeout_s);
            loop {
                if !workload.drain || shared.all_received() || Instant::now() >= deadline {
                    let _ = finish.send(true);
                    return Instant::now() >= deadline && workload.drain && !shared.all_received();
                }
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
        })
    };
    let mut consumed = Vec::with_capacity(consumers.len());
    for handle in consumers {
        match handle.await {
            Ok(outcome) => consumed.push(outcome),
            Err(error) => notes.push(format!("a consumer task failed: {error}")),
        }
    }
    let drain_timed_out = watcher.await.unwrap_or(false);
    let elapsed_s = start.elapsed().as_secs_f64();

    // Merge.
    let mut send = Latency::new();
    let mut errors = Errors::default();
    let mut send_requests = 0;
    let mut send_failed = 0;
    let mut acked = Vec::with_capacity(produced.len());
    for outcome in produced {
        send.merge(&outcome.send);
        errors.send += outcome.errors;
        send_requests += outcome.requests;
        send_failed += outcome.failed_messages;
        if errors.first.is_none() {
            errors.first = outcome.first_error;
        }
        acked.push(outcome.acked);
    }
    let (mut receive, mut delete, mut end_to_end) =
        (Latency::new(), Latency::new(), Latency::new());
    let mut last_first_delivery = None::<Instant>;
    let mut last_delete = None::<Instant>;
    let (mut foreign, mut deleted, mut receive_requests, mut empty_receives, mut delete_requests) =
        (0, 0, 0, 0, 0);
    let mut max_hold_us = 0;
    let mut cancelled = false;
    for outcome in &consumed {
        receive.merge(&outcome.receive);
        delete.merge(&outcome.delete);
        end_to_end.merge(&outcome.end_to_end);
        foreign += outcome.foreign;
        deleted += outcome.deleted;
        receive_requests += outcome.receive_requests;
        empty_receives += outcome.empty_receives;
        delete_requests += outcome.delete_requests;
        errors.receive += outcome.receive_errors;
        errors.delete += outcome.delete_errors;
        max_hold_us = max_hold_us.max(outcome.max_hold_us);
        cancelled |= outcome.cancelled_in_flight;
        last_first_delivery = last_first_delivery.max(outcome.last_first_delivery);
        last_delete = last_delete.max(outcome.last_delete);
        if errors.first.is_none() {
            errors.first.clone_from(&outcome.first_error);
        }
    }
    let received = shared.received.take_all();

    // A repeat delivery is only a duplicate when nothing explains it: every delete succeeded, each within the
    // visibility timeout of its receive.
    let visibility_us = u64::from(workload.visibility_s) * 1_000_000;
    let redelivery_expected = !workload.delete || errors.delete > 0 || max_hold_us >= visibility_us;
    let drained = workload.drain && workload.consumers > 0;
    let mut counts = account(&acked, &received, drained, redelivery_expected);
    counts.send_failed = send_failed;
    counts.deleted = deleted;
    counts.foreign = foreign;
    counts.send_requests = send_requests;
    counts.receive_requests = receive_requests;
    counts.empty_receives = empty_receives;
    counts.delete_requests = delete_requests;
    if workload.delete && redelivery_expected && counts.redeliveries > 0 {
        notes.push(format!(
            "{} repeat deliveries counted as redeliveries, not duplicates: {}",
            counts.redeliveries,
            if errors.delete > 0 {
                "some deletes failed"
            } else {
                "a delete came after the visibility timeout"
            }
        ));
    }
    if cancelled && counts.missing.unwrap_or(0) > 0 {
        notes.push("a receive was cancelled in flight at the end of the drain".into());
    }
    if drain_timed_out {
        notes.push(format!(
            "the drain timed out after {} s",
            workload.drain_timeout_s
        ));
    }

    let per_s = |count: u64, seconds: f64| {
        if seconds > 0.0 {
            count as f64 / seconds
        } else {
            0.0
        }
    };
    let since_start =
        |at: Option<Instant>| at.map_or(0.0, |at| at.duration_since(start).as_secs_f64());
    let throughput = Throughput {
        send_requests_per_s: per_s(send_requests - errors.send, produce_s),
        sent_per_s: per_s(counts.sent, produce_s),
        received_per_s: per_s(counts.received, since_start(last_first_delivery)),
        deleted_per_s: per_s(deleted, since_start(last_delete)),
    };
    let target_name = target.name().to_owned();
    RunReport {
        target: target_name,
        run_id: format!("{run:08x}"),
        workload: (*workload).clone(),
        produce_s,
        elapsed_s,
        drained,
        drain_timed_out,
        counts,
        throughput,
        latency_us: Latencies {
            send: send.percentiles(),
            receive: receive.percentiles(),
            delete: delete.percentiles(),
            end_to_end: end_to_end.percentiles(),
        },
        cdf_us: Cdfs {
            end_to_end: end_to_end.cdf(),
            receive: receive.cdf(),
            send: send.cdf(),
        },
        errors,
        max_hold_us,
        notes,
    }
}
