//! The load generator: producers send uniquely numbered, timestamped bodies; consumers receive (and
//! optionally delete) them; at the end every acknowledged send is accounted for. A message that was
//! acknowledged and never received, even after a drain phase, is reported as MISSING.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use serde::{Deserialize, Serialize};
use tokio::sync::watch;

use crate::stats::{now_us, Latency, Percentiles};
use crate::target::Target;

/// The body prefix: `vb1:` + run (8 hex) + `:` + producer (4 hex) + `:` + sequence (12 hex) + `:` + send
/// time in µs (14 hex), then padding. ASCII, because SQS bodies are Unicode text.
const BODY_MAGIC: &str = "vb1:";
pub const BODY_HEADER_LEN: usize = 4 + 8 + 1 + 4 + 1 + 12 + 1 + 14;
/// Shards of the received-message table, so consumers rarely contend on one lock.
const SHARDS: usize = 16;
/// The longest a lockstep producer waits for its message to come back.
const LOCKSTEP_TIMEOUT: Duration = Duration::from_secs(5);
/// Pause after a failed request, so that a dead server is not spun against.
const ERROR_BACKOFF: Duration = Duration::from_millis(20);

/// What a run does. Serialised into the results as the run's configuration.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Workload {
    pub queue: String,
    pub producers: usize,
    pub consumers: usize,
    /// Messages per send request and the most per receive request (1–10).
    pub batch: usize,
    /// Body size in bytes (at least the 45-byte header that carries id and send time).
    pub body_size: usize,
    /// Stop producing after this long (seconds)…
    pub duration_s: Option<f64>,
    /// …or after this many messages in total.
    pub messages: Option<u64>,
    /// Total send rate limit in messages/s across producers (open loop); `None` sends as fast as acks come.
    pub rate: Option<f64>,
    pub visibility_s: u32,
    pub delete: bool,
    /// Long-poll wait of each receive (0 = short poll).
    pub wait_s: u32,
    /// After producers stop, consumers go on until every acknowledged message was received, the queue is
    /// empty, or this many seconds pass; with `drain` off they stop with the producers.
    pub drain: bool,
    pub drain_timeout_s: f64,
    /// Each producer waits until everything it sent was received (and deleted, when deleting) before it
    /// sends again: latency without queueing, for the round-trip scenario.
    #[serde(default)]
    pub lockstep: bool,
    /// Pause after an empty receive, in ms: with short polls (`wait_s` 0) it keeps idle consumers from
    /// spinning, so receive latency can be measured as service time at a given load.
    #[serde(default)]
    pub empty_backoff_ms: u64,
}

impl Workload {
    /// The baseline every preset varies: one producer and one consumer, unbatched 1 KiB messages for 10 s,
    /// 30 s visibility, 1 s long polls, deletes on, draining for up to 30 s.
    pub fn baseline(queue: impl Into<String>) -> Self {
        Self {
            queue: queue.into(),
            producers: 1,
            consumers: 1,
            batch: 1,
            body_size: 1024,
            duration_s: Some(10.0),
            messages: None,
            rate: None,
            visibility_s: 30,
            delete: true,
            wait_s: 1,
            drain: true,
            drain_timeout_s: 30.0,
            lockstep: false,
            empty_backoff_ms: 0,
        }
    }

    /// A validated copy (batch clamped to 1–10, body at least the header).
    pub fn checked(mut self) -> Result<Self, String> {
        if !(1..=10).contains(&self.batch) {
            return Err(format!("batch must be 1–10, not {}", self.batch));
        }
        if self.producers == 0 && self.consumers == 0 {
            return Err("need at least one producer or consumer".into());
        }
        if self.producers > 0xffff {
            return Err("at most 65535 producers".into());
        }
        if self.duration_s.is_none() && self.messages.is_none() && self.producers > 0 {
            return Err("give a duration or a message count".into());
        }
        self.body_size = self.body_size.max(BODY_HEADER_LEN);
        Ok(self)
    }
}

/// The identity and send time a body carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BodyId {
    pub run: u32,
    pub producer: u16,
    pub seq: u64,
    pub sent_us: u64,
}

impl BodyId {
    /// The key of the received-message table: producer in the top 16 bits, sequence below.
    fn key(&self) -> u64 {
        (u64::from(self.producer) << 48) | (self.seq & 0xffff_ffff_ffff)
    }
}

/// Encodes `id` padded with `.` to `size` bytes (never shorter than the header).
pub fn encode_body(id: BodyId, size: usize) -> Bytes {
    let mut body = format!(
        "{BODY_MAGIC}{:08x}:{:04x}:{:012x}:{:014x}",
        id.run,
        id.producer,
        id.seq & 0xffff_ffff_ffff,
        id.sent_us & 0xff_ffff_ffff_ffff
    );
    if body.len() < size {
        body.extend(std::iter::repeat_n('.', size - body.len()));
    }
    Bytes::from(body)
}

/// Decodes a body written by [`encode_body`]; `None` for anything else (counted as foreign).
pub fn decode_body(body: &[u8]) -> Option<BodyId> {
    let header = body.get(..BODY_HEADER_LEN)?;
    let header = std::str::from_utf8(header).ok()?;
    let rest = header.strip_prefix(BODY_MAGIC)?;
    let mut fields = rest.split(':');
    let run = fields.next().filter(|f| f.len() == 8)?;
    let producer = fields.next().filter(|f| f.len() == 4)?;
    let seq = fields.next().filter(|f| f.len() == 12)?;
    let sent = fields.next().filter(|f| f.len() == 14)?;
    Some(BodyId {
        run: u32::from_str_radix(run, 16).ok()?,
        producer: u16::from_str_radix(producer, 16).ok()?,
        seq: u64::from_str_radix(seq, 16).ok()?,
        sent_us: u64::from_str_radix(sent, 16).ok()?,
    })
}

/// The final tally of a run.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Counts {
    /// Messages whose send was acknowledged.
    pub sent: u64,
    /// Messages in send requests that failed (the server may or may not have stored them).
    pub send_failed: u64,
    /// Distinct messages of this run received at least once.
    pub received: u64,
    /// Of those, messages whose send had failed (stored despite the error).
    pub received_unacknowledged: u64,
    /// Deliveries of this run's messages, counting every repeat.
    pub deliveries: u64,
    /// Messages whose delete was acknowledged.
    pub deleted: u64,
    /// Repeat deliveries when none was expected (deletes on, every delete succeeded within the visibility
    /// timeout): a broken at-least-once-with-visibility guarantee.
    pub duplicates: u64,
    /// Repeat deliveries that the configuration explains (no deletes, a short visibility timeout, failed or
    /// late deletes).
    pub redeliveries: u64,
    /// Acknowledged sends never received; `None` when the run did not drain (so it cannot tell).
    pub missing: Option<u64>,
    /// Received bodies that were not this run's (another run's leftovers, or not veil-bench's).
    pub foreign: u64,
    pub send_requests: u64,
    pub receive_requests: u64,
    pub empty_receives: u64,
    pub delete_requests: u64,
}

/// Counts derived from what was acknowledged and what was received, separated from the I/O so it is tested
/// on its own.
pub fn account(
    acked: &[Vec<u64>],
    received: &HashMap<u64, u32>,
    drained: bool,
    redelivery_expected: bool,
) -> Counts {
    let mut counts = Counts::default();
    let mut acked_received = 0u64;
    for (producer, seqs) in acked.iter().enumerate() {
        counts.sent += seqs.len() as u64;
        for &seq in seqs {
            let key = ((producer as u64) << 48) | (seq & 0xffff_ffff_ffff);
            if received.contains_key(&key) {
                acked_received += 1;
            }
        }
    }
    counts.received = received.len() as u64;
    counts.received_unacknowledged = counts.received - acked_received;
    counts.deliveries = received.values().map(|&n| u64::from(n)).sum();
    let repeats = counts.deliveries - counts.received;
    if redelivery_expected {
        counts.redeliveries = repeats;
    } else {
        counts.duplicates = repeats;
    }
    counts.missing = drained.then_some(counts.sent - acked_received);
    counts
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Throughput {
    pub send_requests_per_s: f64,
    /// Acknowledged messages per second of the producing phase.
    pub sent_per_s: f64,
    /// Distinct messages received per second, from the start to the last first delivery: end to end.
    pub received_per_s: f64,
    pub deleted_per_s: f64,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Latencies {
    pub send: Percentiles,
    pub receive: Percentiles,
    pub delete: Percentiles,
    /// Send request start → receipt of the first delivery.
    pub end_to_end: Percentiles,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Cdfs {
    pub end_to_end: Vec<[f64; 2]>,
    pub receive: Vec<[f64; 2]>,
    pub send: Vec<[f64; 2]>,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Errors {
    pub send: u64,
    pub receive: u64,
    pub delete: u64,
    pub first: Option<String>,
}

/// Everything a run produces: the JSON document of `veil-bench run`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct RunReport {
    pub target: String,
    pub run_id: String,
    pub workload: Workload,
    /// Start → producers done.
    pub produce_s: f64,
    /// Start → consumers done (including the drain).
    pub elapsed_s: f64,
    pub drained: bool,
    /// Whether the drain ended because its timeout ran out.
    pub drain_timed_out: bool,
    pub counts: Counts,
    pub throughput: Throughput,
    pub latency_us: Latencies,
    pub cdf_us: Cdfs,
    pub errors: Errors,
    /// The longest time a consumer held a message between receiving it and its delete being acknowledged.
    pub max_hold_us: u64,
    pub notes: Vec<String>,
}

impl RunReport {
    /// True when an acknowledged message was never received.
    pub fn lost_messages(&self) -> bool {
        self.counts.missing.is_some_and(|missing| missing > 0)
    }

    /// Human summary: a few aligned lines, with a MISSING line that cannot be overlooked when messages are lost.
    pub fn summary(&self) -> String {
        let w = &self.workload;
        let c = &self.counts;
        let t = &self.throughput;
        let l = &self.latency_us;
        let mut out = String::new();
        out.push_str(&format!(
            "== {} · queue {} · {} producers, {} consumers, batch {}, body {} B, visibility {} s, wait {} s, delete {}\n",
            self.target, w.queue, w.producers, w.consumers, w.batch, w.body_size, w.visibility_s, w.wait_s,
            if w.delete { "on" } else { "off" }
        ));
        out.push_str(&format!(
            "   sent {} (failed {})  received {}  deleted {}  duplicates {}  redeliveries {}  missing {}  foreign {}\n",
            c.sent,
            c.send_failed,
            c.received,
            c.deleted,
            c.duplicates,
            c.redeliveries,
            c.missing.map_or("not checked".into(), |m| m.to_string()),
            c.foreign
        ));
        out.push_str(&format!(
            "   throughput: sent {:.0}/s ({:.0} req/s)  received {:.0}/s  deleted {:.0}/s  over {:.2} s (produce {:.2} s)\n",
            t.sent_per_s, t.send_requests_per_s, t.received_per_s, t.deleted_per_s, self.elapsed_s, self.produce_s
        ));
        out.push_str(&format!("   send        {}\n", l.send.line()));
        out.push_str(&format!("   receive     {}\n", l.receive.line()));
        out.push_str(&format!("   delete      {}\n", l.delete.line()));
        out.push_str(&format!("   end-to-end  {}\n", l.end_to_end.line()));
        if self.errors.send + self.errors.receive + self.errors.delete > 0 {
            out.push_str(&format!(
                "   errors: send {}  receive {}  delete {}  first: {}\n",
                self.errors.send,
                self.errors.receive,
                self.errors.delete,
                self.errors.first.as_deref().unwrap_or("-")
            ));
        }
        for note in &self.notes {
            out.push_str(&format!("   note: {note}\n"));
        }
        if let Some(missing) = c.missing.filter(|&m| m > 0) {
            out.push_str(&format!(
                "!!! MISSING: {missing} acknowledged message(s) were never received (target {}, queue {}) !!!\n",
                self.target, w.queue
            ));
        }
        if c.duplicates > 0 {
            out.push_str(&format!(
                "!!! DUPLICATES: {} message(s) delivered again although they were deleted in time !!!\n",
                c.duplicates
            ));
        }
        out
    }
}

/// State shared by the tasks of one run.
struct Shared {
    run: u32,
    produce_until: Option<Instant>,
    budget: Option<AtomicU64>,
    producing_done: AtomicBool,
    acked_total: AtomicU64,
    unique_received: AtomicU64,
    received: Vec<Mutex<HashMap<u64, u32>>>,
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

    /// Notes one delivery; returns how many times the message had been delivered before.
    fn record_delivery(&self, id: &BodyId) -> u32 {
        let key = id.key();
        let shard = &self.received[(key as usize ^ (key >> 48) as usize) % SHARDS];
        let mut map = shard
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let count = map.entry(key).or_insert(0);
        let before = *count;
        *count += 1;
        if before == 0 {
            self.unique_received.fetch_add(1, Ordering::Relaxed);
        }
        before
    }

    /// The drain's success condition: producers are done and as many distinct messages came back as were
    /// acknowledged.
    fn all_received(&self) -> bool {
        self.producing_done.load(Ordering::Acquire)
            && self.unique_received.load(Ordering::Relaxed)
                >= self.acked_total.load(Ordering::Relaxed)
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
        match target.send(&workload.queue, bodies).await {
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
) -> ConsumerOutcome {
    let mut out = ConsumerOutcome::default();
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
            received = target.receive(&workload.queue, workload.batch, workload.visibility_s, wait_s) => received,
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
                    if shared.record_delivery(&id) == 0 {
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
            match target.delete(&workload.queue, handles).await {
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

/// A random-enough run id: distinguishes this run's bodies from leftovers of earlier runs in the same queue.
pub fn new_run_id() -> u32 {
    let uuid = uuid::Uuid::new_v4();
    let bytes = uuid.as_bytes();
    u32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]])
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
        unique_received: AtomicU64::new(0),
        received: (0..SHARDS).map(|_| Mutex::new(HashMap::new())).collect(),
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
        .map(|_| {
            tokio::spawn(consume(
                target.clone(),
                workload.clone(),
                shared.clone(),
                finished.clone(),
                drain_until.clone(),
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
    let mut received = HashMap::new();
    for shard in &shared.received {
        let mut map = shard.lock().unwrap_or_else(|p| p.into_inner());
        received.extend(map.drain());
    }

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

#[cfg(test)]
mod tests {
    use super::*;

    fn id(producer: u16, seq: u64) -> BodyId {
        BodyId {
            run: 0xdead_beef,
            producer,
            seq,
            sent_us: 123_456_789,
        }
    }

    #[test]
    fn body_round_trips_and_is_padded() {
        let body = encode_body(id(7, 42), 1024);
        assert_eq!(body.len(), 1024);
        assert!(body.is_ascii());
        assert_eq!(decode_body(&body), Some(id(7, 42)));
    }

    #[test]
    fn body_is_never_shorter_than_its_header() {
        let body = encode_body(id(65_535, (1 << 48) - 1), 1);
        assert_eq!(body.len(), BODY_HEADER_LEN);
        assert_eq!(
            decode_body(&body).map(|id| (id.producer, id.seq)),
            Some((65_535, (1 << 48) - 1))
        );
    }

    #[test]
    fn foreign_bodies_do_not_decode() {
        assert_eq!(decode_body(b"hello"), None);
        assert_eq!(decode_body(&[b'x'; 100]), None);
        let mut body = encode_body(id(1, 1), 64).to_vec();
        body[6] = b'z'; // not hex
        assert_eq!(decode_body(&body), None);
    }

    fn key(producer: u64, seq: u64) -> u64 {
        (producer << 48) | seq
    }

    #[test]
    fn accounting_finds_missing_and_duplicates() {
        let acked = vec![vec![0, 1, 2], vec![0, 1]];
        // producer 0 seq 1 never arrives; producer 1 seq 0 arrives twice; producer 1 seq 5 was never acked.
        let received = HashMap::from([
            (key(0, 0), 1),
            (key(0, 2), 1),
            (key(1, 0), 2),
            (key(1, 1), 1),
            (key(1, 5), 1),
        ]);
        let counts = account(&acked, &received, true, false);
        assert_eq!(counts.sent, 5);
        assert_eq!(counts.received, 5);
        assert_eq!(counts.received_unacknowledged, 1);
        assert_eq!(counts.deliveries, 6);
        assert_eq!(counts.duplicates, 1);
        assert_eq!(counts.redeliveries, 0);
        assert_eq!(counts.missing, Some(1));
    }

    #[test]
    fn expected_repeats_are_redeliveries_and_undrained_runs_do_not_claim_missing() {
        let acked = vec![vec![0, 1]];
        let received = HashMap::from([(key(0, 0), 3)]);
        let counts = account(&acked, &received, false, true);
        assert_eq!(counts.duplicates, 0);
        assert_eq!(counts.redeliveries, 2);
        assert_eq!(counts.missing, None);
    }

    #[test]
    fn clean_run_has_nothing_missing() {
        let acked = vec![vec![0, 1], vec![0]];
        let received = HashMap::from([(key(0, 0), 1), (key(0, 1), 1), (key(1, 0), 1)]);
        let counts = account(&acked, &received, true, false);
        assert_eq!(
            (counts.missing, counts.duplicates, counts.received),
            (Some(0), 0, 3)
        );
    }

    #[test]
    fn workload_validation() {
        let base = Workload {
            batch: 10,
            body_size: 10,
            duration_s: Some(1.0),
            drain_timeout_s: 5.0,
            ..Workload::baseline("q")
        };
        assert_eq!(
            base.clone().checked().map(|w| w.body_size),
            Ok(BODY_HEADER_LEN)
        );
        assert!(Workload {
            batch: 11,
            ..base.clone()
        }
        .checked()
        .is_err());
        assert!(Workload {
            duration_s: None,
            ..base
        }
        .checked()
        .is_err());
    }
}
