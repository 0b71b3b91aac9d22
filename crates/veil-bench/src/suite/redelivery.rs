//! The redelivery lateness scenario: how late a message whose visibility timeout ran out
//! comes back. It drives the target by hand rather than through `run`, because it must know each message's
//! own deadline, which the load generator does not track.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use super::{insert_percentiles, run_queue};
use crate::error::BenchError;
use crate::results::ScenarioRun;
use crate::run::body::{decode_body, encode_body, new_run_id, BodyId};
use crate::stats::{now_us, Latency};
use crate::target::{Delivery, Target};

/// Scenario 4, Redelivery lateness: hide `n` messages with a 1 s visibility timeout (never deleting them on that
/// first receive), then a long-polling consumer measures how late each comes back after its deadline. The
/// deadline is taken as the first receive's request start + 1 s, so lateness is never understated (it
/// includes up to one request's latency). First receives are paced evenly over [`FIRST_RECEIVE_SPAN`] so that
/// the deadlines spread out and the figure is the timer's precision, not a burst's queueing.
pub(super) async fn redelivery<T: Target>(target: &T, n: usize) -> Result<ScenarioRun, BenchError> {
    const VISIBILITY_S: u32 = 1;
    let queue = run_queue("redeliver");
    target.prepare(&queue, VISIBILITY_S).await?;
    let run_id = new_run_id();
    for chunk_start in (0..n).step_by(10) {
        let bodies = (chunk_start..(chunk_start + 10).min(n))
            .map(|seq| {
                encode_body(
                    BodyId {
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
    insert_percentiles(&mut metrics, "late", &p);
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
        deliveries: Vec<Delivery>,
        request_start_us: u64,
        arrived_us: u64,
    ) -> Vec<String> {
        let mut settle = Vec::new();
        for delivery in deliveries {
            let seq = match decode_body(&delivery.body) {
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
