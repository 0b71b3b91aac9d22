//! `/metrics`: the Prometheus text format (0.0.4). Two parts, one response:
//! - the registry the server built (request, store and process metrics, through `prometheus-client`);
//! - every queue's counts, totals and delivery histogram, read from one `Engine::overview` per scrape, so a
//!   deleted queue's series simply stop and the engine does no metrics work between scrapes.
//!
//! The per-queue part is written here rather than through `prometheus-client`'s encoder: at 10,000 queues it
//! is 100,000 lines, and the crate's general encoder (label sets through several trait layers per line) took
//! ~100 ms for them where writing each queue's pre-escaped label block once takes a few
//! (docs/benchmarks.md, "Metrics").

use std::fmt::Write;

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use veil_core::limits::{DELIVERY_RECEIVE_COUNT_BUCKETS, ENGINE_LOCK_BUCKETS_NS};
use veil_core::{DurationCounts, LockTimes, QueueOverview};

use crate::AdminState;

pub(crate) fn routes() -> Router<AdminState> {
    Router::new().route("/metrics", get(metrics))
}

async fn metrics(State(state): State<AdminState>) -> Response {
    let engine = state.engine.read().clone();
    // Without them (the store opening, a cluster's owner unreachable) the server's own metrics still answer.
    let queues = match engine {
        Some(engine) => engine.overview().await.ok(),
        None => None,
    };
    let mut text = String::with_capacity(4096 + queues.as_ref().map_or(0, |q| q.len() * 1536));
    if prometheus_client::encoding::prometheus_text::encode(&mut text, &state.registry).is_err() {
        return (StatusCode::INTERNAL_SERVER_ERROR, "cannot encode metrics\n").into_response();
    }
    if let Some(queues) = queues {
        encode_queues(&queues, &mut text);
    }
    encode_lock_times(LockTimes::process(), &mut text);
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        text,
    )
        .into_response()
}

type Value = fn(&QueueOverview) -> u64;

/// The per-queue running totals: (name, help, value). Counters: they survive restarts with the queue.
/// The queue's totals (docs/semantics.md §9, "Totals"): sent = stored + deleted + purged + expired +
/// dead-lettered + moved out.
const TOTALS: [(&str, &str, Value); 8] = [
    (
        "veil_messages_sent_total",
        "Messages that entered the queue: sent by a client, or moved here (dead letters, redrives, re-queues).",
        |q| q.stats.counters.sends,
    ),
    (
        "veil_messages_received_total",
        "Deliveries made by receives (a message received three times counts three).",
        |q| q.stats.counters.deliveries,
    ),
    (
        "veil_messages_deleted_total",
        "Messages deleted one by one (acknowledged), by a consumer or an operator.",
        |q| q.stats.counters.deletes,
    ),
    (
        "veil_messages_purged_total",
        "Messages removed by a purge (PurgeQueue, Clear Messages, AckAllQueueMessages, the admin API).",
        |q| q.stats.counters.purges,
    ),
    (
        "veil_messages_redelivered_total",
        "Deliveries that ended with the message visible again, unsettled (timeout ended, visibility 0, nack).",
        |q| q.stats.counters.redeliveries,
    ),
    (
        "veil_messages_dead_lettered_total",
        "Messages moved to a dead-letter (poison) queue or dropped by their own dead-letter rule.",
        |q| q.stats.counters.dead_letter_moves + q.stats.counters.dead_letter_drops,
    ),
    (
        "veil_messages_moved_total",
        "Messages moved to another queue by a redrive (move task) or a re-queue.",
        |q| q.stats.counters.moves_out,
    ),
    (
        "veil_messages_expired_total",
        "Messages removed because their time to live passed.",
        |q| q.stats.counters.expiries,
    ),
];

const HISTOGRAM: &str = "veil_queue_delivery_receive_count";
/// The `le` label of each bucket of `DELIVERY_RECEIVE_COUNT_BUCKETS`, then of the last one.
const BUCKET_LABELS: [&str; DELIVERY_RECEIVE_COUNT_BUCKETS.len() + 1] = [
    ",le=\"1\"",
    ",le=\"2\"",
    ",le=\"5\"",
    ",le=\"10\"",
    ",le=\"+Inf\"",
];

/// Appends every per-queue family to `out`.
pub(crate) fn encode_queues(queues: &[QueueOverview], out: &mut String) {
    let labels: Vec<String> = queues.iter().map(label_block).collect();
    let rows = || queues.iter().zip(&labels);
    family(
        out,
        "veil_queue_messages",
        "gauge",
        "Stored messages by state: visible (receivable now), inflight (hidden by a receive), delayed (not yet \
         visible, never received).",
    );
    for (queue, labels) in rows() {
        let stats = &queue.stats;
        for (state, count) in [
            (",state=\"visible\"", stats.visible),
            (",state=\"inflight\"", stats.hidden),
            (",state=\"delayed\"", stats.delayed),
        ] {
            sample(out, "veil_queue_messages", labels, state, count);
        }
    }
    family(
        out,
        "veil_queue_bytes",
        "gauge",
        "Sum of the stored messages' body sizes, in bytes.",
    );
    for (queue, labels) in rows() {
        sample(
            out,
            "veil_queue_bytes",
            labels,
            "",
            queue.stats.stored_bytes,
        );
    }
    family(
        out,
        "veil_queue_oldest_message_age_seconds",
        "gauge",
        "Age of the oldest stored message in any state; 0 when the queue is empty.",
    );
    for (queue, labels) in rows() {
        let ms = queue.stats.oldest_age_ms;
        let _ = writeln!(
            out,
            "veil_queue_oldest_message_age_seconds{{{labels}}} {}.{:03}",
            ms / 1000,
            ms % 1000
        );
    }
    family(
        out,
        "veil_queue_long_polls_waiting",
        "gauge",
        "Receives waiting in a long poll for a message of the queue.",
    );
    for (queue, labels) in rows() {
        sample(
            out,
            "veil_queue_long_polls_waiting",
            labels,
            "",
            queue.long_polls_waiting,
        );
    }
    for (name, help, value) in TOTALS {
        family(out, name, "counter", help);
        for (queue, labels) in rows() {
            sample(out, name, labels, "", value(queue));
        }
    }
    encode_receive_counts(out, queues, &labels);
}

/// `veil_queue_delivery_receive_count`: each delivery observed with the receive count it gave its message,
/// so `le="1"` counts first deliveries and the buckets above it redeliveries (the 2nd, up to the 5th, ...).
/// A queue's histogram appears with its first delivery, as a client library's labelled histogram does: idle
/// queues would otherwise cost seven series each.
fn encode_receive_counts(out: &mut String, queues: &[QueueOverview], labels: &[String]) {
    family(
        out,
        HISTOGRAM,
        "histogram",
        "Deliveries by the receive count they gave their message (1 = first delivery), since the process \
         started.",
    );
    debug_assert_eq!(
        DELIVERY_RECEIVE_COUNT_BUCKETS,
        [1, 2, 5, 10],
        "BUCKET_LABELS follow the buckets"
    );
    for (queue, labels) in queues.iter().zip(labels) {
        if queue.stats.counters.deliveries == 0 {
            continue;
        }
        let counts = &queue.deliveries_by_receive_count;
        let mut cumulative = 0;
        for (i, count) in counts.iter().enumerate() {
            cumulative += count;
            let le = BUCKET_LABELS[i];
            sample(
                out,
                "veil_queue_delivery_receive_count_bucket",
                labels,
                le,
                cumulative,
            );
        }
        let sum = queue.deliveries_receive_count_sum;
        sample(
            out,
            "veil_queue_delivery_receive_count_sum",
            labels,
            "",
            sum,
        );
        sample(
            out,
            "veil_queue_delivery_receive_count_count",
            labels,
            "",
            cumulative,
        );
    }
}

/// The engine locks' waits and holds in this process (ADR 0012), as two histograms in seconds.
fn encode_lock_times(times: &LockTimes, out: &mut String) {
    for (name, help, counts) in [
        (
            "veil_engine_lock_wait_seconds",
            "How long operations waited for an engine lock, since the process started.",
            times.wait.counts(),
        ),
        (
            "veil_engine_lock_hold_seconds",
            "How long operations held an engine lock (ADR 0012: the lock's share of each second bounds an \
             engine's rate), since the process started.",
            times.hold.counts(),
        ),
    ] {
        family(out, name, "histogram", help);
        encode_duration_histogram(out, name, &counts);
    }
}

fn encode_duration_histogram(out: &mut String, name: &str, counts: &DurationCounts) {
    let mut cumulative = 0;
    for (i, count) in counts.buckets.iter().enumerate() {
        cumulative += count;
        let bound = match ENGINE_LOCK_BUCKETS_NS.get(i) {
            Some(ns) => format!("{}", *ns as f64 / 1e9),
            None => "+Inf".to_owned(),
        };
        let _ = writeln!(out, "{name}_bucket{{le=\"{bound}\"}} {cumulative}");
    }
    let _ = writeln!(out, "{name}_sum {}", counts.sum_ns as f64 / 1e9);
    let _ = writeln!(out, "{name}_count {cumulative}");
}

/// One sample line: `name{labels[,extra]} value`. Written with `push_str` and a hand-rolled integer
/// conversion because this runs for every line of every queue: through `write!` it cost twice as much.
fn sample(out: &mut String, name: &str, labels: &str, extra: &str, value: u64) {
    out.push_str(name);
    out.push('{');
    out.push_str(labels);
    out.push_str(extra);
    out.push_str("} ");
    push_u64(out, value);
    out.push('\n');
}

fn push_u64(out: &mut String, mut value: u64) {
    let mut digits = [0u8; 20];
    let mut at = digits.len();
    loop {
        at -= 1;
        digits[at] = b'0' + (value % 10) as u8;
        value /= 10;
        if value == 0 {
            break;
        }
    }
    // Only ASCII digits were written.
    out.push_str(std::str::from_utf8(&digits[at..]).unwrap_or("0"));
}

fn family(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
}

/// `namespace="…",queue="…",protocol_created="…"`, escaped once per queue.
fn label_block(queue: &QueueOverview) -> String {
    let mut block = String::with_capacity(64 + queue.key.name.len());
    for (i, (name, value)) in [
        ("namespace", queue.key.namespace.as_str()),
        ("queue", queue.key.name.as_str()),
        (
            "protocol_created",
            queue.created_by.as_deref().unwrap_or("unknown"),
        ),
    ]
    .into_iter()
    .enumerate()
    {
        if i > 0 {
            block.push(',');
        }
        block.push_str(name);
        block.push_str("=\"");
        escape_label_value(value, &mut block);
        block.push('"');
    }
    block
}

/// The text format's escapes for a label value: backslash, double quote and line feed.
fn escape_label_value(value: &str, out: &mut String) {
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use veil_core::{QueueKey, QueueStats};

    fn queue(name: &str) -> QueueOverview {
        QueueOverview {
            key: QueueKey::new("default", name),
            fifo: false,
            created_by: Some("sqs".into()),
            stats: QueueStats::default(),
            deliveries_by_receive_count: [0; DELIVERY_RECEIVE_COUNT_BUCKETS.len() + 1],
            deliveries_receive_count_sum: 0,
            long_polls_waiting: 0,
        }
    }

    #[test]
    fn lock_histograms_are_cumulative_in_seconds_with_an_infinite_bucket() {
        let mut buckets = vec![0; ENGINE_LOCK_BUCKETS_NS.len() + 1];
        buckets[0] = 2;
        buckets[2] = 1;
        buckets[ENGINE_LOCK_BUCKETS_NS.len()] = 1;
        let counts = DurationCounts {
            buckets,
            sum_ns: 1_500_000_000,
        };
        let mut out = String::new();
        encode_duration_histogram(&mut out, "x", &counts);
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines[0], "x_bucket{le=\"0.000001\"} 2");
        assert_eq!(lines[1], "x_bucket{le=\"0.000002\"} 2");
        assert_eq!(lines[2], "x_bucket{le=\"0.000005\"} 3");
        assert_eq!(
            lines[ENGINE_LOCK_BUCKETS_NS.len()],
            "x_bucket{le=\"+Inf\"} 4"
        );
        assert_eq!(lines[ENGINE_LOCK_BUCKETS_NS.len() + 1], "x_sum 1.5");
        assert_eq!(lines[ENGINE_LOCK_BUCKETS_NS.len() + 2], "x_count 4");
    }

    #[test]
    fn label_values_are_escaped_as_the_text_format_requires() {
        let text = label_block(&queue("a\"b\\c\nd"));
        assert_eq!(
            text,
            r#"namespace="default",queue="a\"b\\c\nd",protocol_created="sqs""#
        );
    }

    #[test]
    fn histogram_buckets_are_cumulative_and_idle_queues_have_none() {
        let mut busy = queue("busy");
        busy.stats.counters.deliveries = 6;
        busy.deliveries_by_receive_count = [3, 2, 1, 0, 0];
        busy.deliveries_receive_count_sum = 3 + 4 + 3;
        let mut out = String::new();
        encode_queues(&[busy, queue("idle")], &mut out);
        let lines: Vec<&str> = out.lines().filter(|l| l.starts_with(HISTOGRAM)).collect();
        let l = r#"namespace="default",queue="busy",protocol_created="sqs""#;
        assert_eq!(
            lines,
            [
                format!("{HISTOGRAM}_bucket{{{l},le=\"1\"}} 3"),
                format!("{HISTOGRAM}_bucket{{{l},le=\"2\"}} 5"),
                format!("{HISTOGRAM}_bucket{{{l},le=\"5\"}} 6"),
                format!("{HISTOGRAM}_bucket{{{l},le=\"10\"}} 6"),
                format!("{HISTOGRAM}_bucket{{{l},le=\"+Inf\"}} 6"),
                format!("{HISTOGRAM}_sum{{{l}}} 10"),
                format!("{HISTOGRAM}_count{{{l}}} 6"),
            ]
        );
    }

    #[test]
    fn every_family_has_help_and_type_once_and_counters_end_in_total() {
        let mut out = String::new();
        encode_queues(&[queue("a"), queue("b")], &mut out);
        let types: Vec<&str> = out.lines().filter(|l| l.starts_with("# TYPE")).collect();
        assert_eq!(types.len(), 13);
        for line in types.iter().filter(|l| l.ends_with(" counter")) {
            assert!(
                line.split(' ')
                    .nth(2)
                    .is_some_and(|n| n.ends_with("_total")),
                "{line}"
            );
        }
        assert_eq!(
            out.lines()
                .filter(|l| l.starts_with("veil_queue_messages{"))
                .count(),
            6
        );
    }
}
