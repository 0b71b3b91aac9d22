//! `/metrics`: the Prometheus text format (0.0.4) of one registry. Per-queue figures are not kept as metric
//! objects: [`QueueCollector`] reads `Engine::overview` at each scrape and encodes it, so a deleted queue's
//! series simply stop, and the engine does no metrics work between scrapes.

use std::sync::{Arc, OnceLock};

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, MetricEncoder, NoLabelSet};
use prometheus_client::metrics::MetricType;
use veil_core::{limits::DELIVERY_RECEIVE_COUNT_BUCKETS, Engine, QueueOverview};

use crate::AdminState;

pub(crate) fn routes() -> Router<AdminState> {
    Router::new().route("/metrics", get(metrics))
}

async fn metrics(State(state): State<AdminState>) -> Response {
    let mut text = String::with_capacity(64 * 1024);
    match prometheus_client::encoding::prometheus_text::encode(&mut text, &state.registry) {
        Ok(()) => (
            [(
                header::CONTENT_TYPE,
                "text/plain; version=0.0.4; charset=utf-8",
            )],
            text,
        )
            .into_response(),
        Err(_) => (StatusCode::INTERNAL_SERVER_ERROR, "cannot encode metrics\n").into_response(),
    }
}

/// Encodes every queue's counts, totals and delivery histogram from one `Engine::overview` per scrape.
pub struct QueueCollector {
    /// The server's engine once it is open; before that the collector encodes nothing.
    engine: Arc<OnceLock<Arc<Engine>>>,
}

impl QueueCollector {
    pub fn new(engine: Arc<OnceLock<Arc<Engine>>>) -> Self {
        Self { engine }
    }
}

impl std::fmt::Debug for QueueCollector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QueueCollector").finish_non_exhaustive()
    }
}

/// The labels every per-queue series carries.
fn queue_labels(queue: &QueueOverview) -> [(&'static str, &str); 3] {
    [
        ("namespace", queue.key.namespace.as_str()),
        ("queue", queue.key.name.as_str()),
        (
            "protocol_created",
            queue.created_by.as_deref().unwrap_or("unknown"),
        ),
    ]
}

type Value = fn(&QueueOverview) -> u64;

/// The per-queue running totals: (name without `_total`, help, value).
const TOTALS: [(&str, &str, Value); 6] = [
    ("veil_messages_sent", "Messages sent to the queue.", |q| {
        q.stats.counters.sends
    }),
    (
        "veil_messages_received",
        "Deliveries made by receives (a message received three times counts three).",
        |q| q.stats.counters.deliveries,
    ),
    (
        "veil_messages_deleted",
        "Messages deleted (acknowledged), by a consumer or an operator.",
        |q| q.stats.counters.deletes,
    ),
    (
        "veil_messages_redelivered",
        "Visibility timeouts that expired and made a received message visible again.",
        |q| q.stats.counters.redeliveries,
    ),
    (
        "veil_messages_dead_lettered",
        "Messages moved to a dead-letter (poison) queue or dropped by their own dead-letter rule.",
        |q| q.stats.counters.dead_letter_moves + q.stats.counters.dead_letter_drops,
    ),
    (
        "veil_messages_expired",
        "Messages removed because their time to live passed.",
        |q| q.stats.counters.expiries,
    ),
];

impl Collector for QueueCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let Some(engine) = self.engine.get() else {
            return Ok(());
        };
        let queues = engine.overview();
        encode_states(&mut encoder, &queues)?;
        encode_gauge(
            &mut encoder,
            &queues,
            "veil_queue_bytes",
            "Sum of the stored messages' body sizes, in bytes.",
            |q| q.stats.stored_bytes as f64,
        )?;
        encode_gauge(
            &mut encoder,
            &queues,
            "veil_queue_oldest_message_age_seconds",
            "Age of the oldest stored message in any state; 0 when the queue is empty.",
            |q| q.stats.oldest_age_ms as f64 / 1000.0,
        )?;
        for (name, help, value) in TOTALS {
            let mut family = encoder.encode_descriptor(name, help, None, MetricType::Counter)?;
            for queue in &queues {
                let labels = queue_labels(queue);
                family
                    .encode_family(&labels)?
                    .encode_counter::<NoLabelSet, u64, u64>(&value(queue), None)?;
            }
        }
        encode_receive_counts(&mut encoder, &queues)
    }
}

fn encode_states(
    encoder: &mut DescriptorEncoder,
    queues: &[QueueOverview],
) -> Result<(), std::fmt::Error> {
    let mut family = encoder.encode_descriptor(
        "veil_queue_messages",
        "Stored messages by state: visible (receivable now), inflight (hidden by a receive), delayed (not \
         yet visible, never received).",
        None,
        MetricType::Gauge,
    )?;
    for queue in queues {
        let [namespace, name, created] = queue_labels(queue);
        for (state, count) in [
            ("visible", queue.stats.visible),
            ("inflight", queue.stats.hidden),
            ("delayed", queue.stats.delayed),
        ] {
            let labels = [namespace, name, created, ("state", state)];
            family
                .encode_family(&labels)?
                .encode_gauge(&(count as i64))?;
        }
    }
    Ok(())
}

fn encode_gauge(
    encoder: &mut DescriptorEncoder,
    queues: &[QueueOverview],
    name: &str,
    help: &str,
    value: fn(&QueueOverview) -> f64,
) -> Result<(), std::fmt::Error> {
    let mut family = encoder.encode_descriptor(name, help, None, MetricType::Gauge)?;
    for queue in queues {
        let labels = queue_labels(queue);
        family.encode_family(&labels)?.encode_gauge(&value(queue))?;
    }
    Ok(())
}

/// `veil_queue_delivery_receive_count`: each delivery observed with the receive count it gave its message,
/// so `le="1"` counts first deliveries and everything above it redeliveries (the 2nd, up to the 5th, ...).
fn encode_receive_counts(
    encoder: &mut DescriptorEncoder,
    queues: &[QueueOverview],
) -> Result<(), std::fmt::Error> {
    let mut family = encoder.encode_descriptor(
        "veil_queue_delivery_receive_count",
        "Deliveries by the receive count they gave their message (1 = first delivery), since the process \
         started.",
        None,
        MetricType::Histogram,
    )?;
    let mut buckets = [(0.0, 0u64); DELIVERY_RECEIVE_COUNT_BUCKETS.len() + 1];
    for queue in queues {
        let counts = &queue.deliveries_by_receive_count;
        for (i, bucket) in buckets.iter_mut().enumerate() {
            let upper = DELIVERY_RECEIVE_COUNT_BUCKETS
                .get(i)
                .map_or(f64::INFINITY, |&le| f64::from(le));
            *bucket = (upper, counts[i]);
        }
        let labels = queue_labels(queue);
        let mut metric: MetricEncoder = family.encode_family(&labels)?;
        metric.encode_histogram::<NoLabelSet>(
            queue.deliveries_receive_count_sum as f64,
            counts.iter().sum(),
            &buckets,
            None,
        )?;
    }
    Ok(())
}
