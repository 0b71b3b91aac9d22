//! veil-telemetry: what Veil reports about itself. The protocol front-ends and the store report through this
//! crate and nothing else knows Prometheus (ARCHITECTURE.md, veil-telemetry):
//!
//! - [`Telemetry`]: request metrics, one observation per protocol operation —
//!   `veil_requests_total{protocol,operation,code}` and `veil_request_duration_seconds{protocol,operation}` —
//!   plus the store's [`StoreMetrics`]; [`Telemetry::register`] puts all of them into the registry the admin
//!   endpoint serves.
//! - [`StoreMetrics`]: the handle veil-store's writer thread updates (commit duration, operations per commit,
//!   fsyncs, bytes written, checkpoints, recovery time), so the store stays free of protocols and of the
//!   registry.
//! - [`audit`]: one structured event per destructive or security-relevant operation, on the tracing target
//!   `veil::audit`.
//! - [`listeners`]: the process-wide `veil_listener_accept_errors_total{listener}` and
//!   `veil_listener_failures_total{listener}` that every listener's accept loop and its supervisor report.
//! - [`cluster_rpc`]: a cluster node's `veil_cluster_token_generation` and `veil_cluster_rpc_refused_total`.
//! - [`ProcessCollector`]: the standard `process_*` metrics and `veil_build_info`, read at each scrape.
//!
//! Label values are bounded: `protocol` is [`Protocol`], `operation` a `&'static str` from the protocol's own
//! operation enum, `code` a [`Code`] built from the protocol's own error enum or HTTP status. Never a queue
//! name or anything else a client chooses. The choice of prometheus-client is docs/decisions/0005-metrics.md.

pub mod audit;
#[cfg(any(test, feature = "capture"))]
pub mod capture;
mod cluster;
mod listener;
mod process;
mod store;

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use prometheus_client::encoding::{
    EncodeLabel, EncodeLabelSet, EncodeLabelValue, LabelSetEncoder, LabelValueEncoder,
};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

pub use audit::AuditEvent;
pub use cluster::{cluster_rpc, ClusterRpcMetrics};
pub use listener::{listeners, ListenerMetrics};
pub use process::{read_process, BuildInfo, ProcessCollector, ProcessReading};
pub use store::StoreMetrics;

/// Upper bounds (seconds) of the latency histograms: 50 µs (an in-memory operation answered on loopback) to
/// 10 s (a long poll); anything longer lands in `+Inf`. Roughly 1-2.5-5 per decade, so a quantile estimate is
/// within a factor of about two.
pub const LATENCY_BUCKETS_S: [f64; 17] = [
    0.000_05, 0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
    1.0, 2.5, 5.0, 10.0,
];

/// The protocol a request came in by: the `protocol` label and the audit log's `protocol` field. It is the
/// engine's own type (the delivery history names it too), so there is one list of protocols.
pub use veil_core::Protocol;

/// A request's result, the `code` label. Each protocol uses its own (ARCHITECTURE.md, veil-telemetry):
///
/// - SQS: `OK`, or the AWS error code — botocore's error shape name (`QueueDoesNotExist`,
///   `InvalidParameterValueException`), the same for the JSON and the Query protocol.
/// - Azure: the HTTP status of the answer (`200`, `201`, `204`, `404`, `403`, ...), success or not.
/// - KubeMQ: `OK`, or the gRPC status code name of a failed RPC (`Unauthenticated`, a rejected token, whose
///   operation is `Unknown`: tonic's interceptor does not see the RPC); an error KubeMQ answers in-band
///   (`IsError` / `Error`, gRPC status OK) is `Error`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Code {
    /// `OK`.
    Ok,
    /// A name from the protocol's own error enum.
    Error(&'static str),
    /// An HTTP status.
    Status(u16),
}

impl EncodeLabelValue for Code {
    fn encode(&self, encoder: &mut LabelValueEncoder) -> Result<(), fmt::Error> {
        match self {
            Self::Ok => EncodeLabelValue::encode(&"OK", encoder),
            Self::Error(name) => EncodeLabelValue::encode(name, encoder),
            Self::Status(status) => EncodeLabelValue::encode(status, encoder),
        }
    }
}

/// The labels of `veil_requests_total`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct RequestLabels {
    protocol: Protocol,
    operation: &'static str,
    code: Code,
}

impl EncodeLabelSet for RequestLabels {
    fn encode(&self, encoder: &mut LabelSetEncoder) -> Result<(), fmt::Error> {
        ("protocol", self.protocol.as_str()).encode(encoder.encode_label())?;
        ("operation", self.operation).encode(encoder.encode_label())?;
        ("code", self.code).encode(encoder.encode_label())
    }
}

/// The labels of `veil_request_duration_seconds`: without `code`, so a histogram's buckets are not multiplied
/// by every error an operation can have.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct OperationLabels {
    protocol: Protocol,
    operation: &'static str,
}

impl EncodeLabelSet for OperationLabels {
    fn encode(&self, encoder: &mut LabelSetEncoder) -> Result<(), fmt::Error> {
        ("protocol", self.protocol.as_str()).encode(encoder.encode_label())?;
        ("operation", self.operation).encode(encoder.encode_label())
    }
}

/// A latency histogram with [`LATENCY_BUCKETS_S`]; a plain `fn` so that `Family` can hold it.
pub(crate) fn latency_histogram() -> Histogram {
    Histogram::new(LATENCY_BUCKETS_S)
}

type DurationFamily = Family<OperationLabels, Histogram, fn() -> Histogram>;

#[derive(Debug)]
struct Inner {
    requests: Family<RequestLabels, Counter>,
    durations: DurationFamily,
    store: StoreMetrics,
}

impl Default for Inner {
    fn default() -> Self {
        Self {
            requests: Family::default(),
            durations: Family::new_with_constructor(latency_histogram),
            store: StoreMetrics::default(),
        }
    }
}

/// Veil's metrics. Cheap to clone (one `Arc`): the server makes one and hands clones to every front-end and,
/// through [`Telemetry::store`], to the store. `Default` is a detached instance: it counts, and nobody need
/// ever scrape it (tests, tools).
#[derive(Clone, Debug, Default)]
pub struct Telemetry {
    inner: Arc<Inner>,
}

/// Failures of this crate.
#[derive(Debug, thiserror::Error)]
pub enum TelemetryError {
    #[error("encoding the metrics failed")]
    Encode(#[from] fmt::Error),
}

impl Telemetry {
    /// Registers every metric of this crate into `registry` (the one the admin endpoint encodes). Registering
    /// into several registries is allowed: they share the same counters.
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "veil_requests",
            "Requests served, by protocol, operation and result code (SQS: OK or the AWS error code; Azure: the HTTP status; KubeMQ: OK, the gRPC code or Error for an in-band error)",
            self.inner.requests.clone(),
        );
        registry.register(
            "veil_request_duration_seconds",
            "Time from the request's arrival to its answer being encoded (a KubeMQ stream: per request), by protocol and operation",
            self.inner.durations.clone(),
        );
        self.inner.store.register(registry);
        listener::listeners().register(registry);
        cluster::cluster_rpc().register(registry);
    }

    /// Counts one request of `operation` with its result `code` and records how long it took.
    pub fn observe_request(
        &self,
        protocol: Protocol,
        operation: &'static str,
        code: Code,
        elapsed: Duration,
    ) {
        self.count_refused(protocol, operation, code);
        self.inner
            .durations
            .get_or_create(&OperationLabels {
                protocol,
                operation,
            })
            .observe(elapsed.as_secs_f64());
    }

    /// Counts one request in `veil_requests_total` only: alone, for a request refused before any work (over
    /// a connection's rate or a listener's admission limit), which has no service time for the duration
    /// histogram; [`Telemetry::observe_request`] adds the time of the others.
    pub fn count_refused(&self, protocol: Protocol, operation: &'static str, code: Code) {
        self.inner
            .requests
            .get_or_create(&RequestLabels {
                protocol,
                operation,
                code,
            })
            .inc();
    }

    /// How many requests were counted with these labels (tests and diagnostics; scrapes read the registry).
    pub fn request_count(&self, protocol: Protocol, operation: &'static str, code: Code) -> u64 {
        let labels = RequestLabels {
            protocol,
            operation,
            code,
        };
        self.inner.requests.get(&labels).map_or(0, |c| c.get())
    }

    /// The store's handle, for `StoreOptions`; it reports into this instance's registrations.
    pub fn store(&self) -> StoreMetrics {
        self.inner.store.clone()
    }

    /// Everything this instance holds in the OpenMetrics text format, through a registry of its own (tests,
    /// and a server without the admin endpoint).
    pub fn encode_text(&self) -> Result<String, TelemetryError> {
        let mut registry = Registry::default();
        self.register(&mut registry);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry)?;
        Ok(text)
    }
}

#[cfg(test)]
mod tests;
