//! The store's metrics handle. veil-store's writer thread reports each group commit here and the
//! checkpointer each checkpoint; the handle only holds prometheus-client metrics (atomics and one short mutex
//! per histogram), so the writer pays a few tens of nanoseconds per commit (docs/decisions/0005-metrics.md), not
//! per operation, and the store needs to know neither the registry nor any protocol.

use std::sync::atomic::AtomicU64;
use std::time::Duration;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

use crate::latency_histogram;

/// Upper bounds of `veil_store_ops_per_commit`: 1, 2, 4, ... 8192 (a group is capped by the store's
/// `GROUP_OPS_MAX`; larger groups land in `+Inf`).
const OPS_BUCKETS: u16 = 14;

/// What the store reports. Clone it into `StoreOptions`; `Default` is a detached handle (tests, tools).
#[derive(Clone, Debug)]
pub struct StoreMetrics {
    commit_duration: Histogram,
    ops_per_commit: Histogram,
    fsyncs: Counter,
    written_bytes: Counter,
    relocated_bytes: Counter,
    checkpoints: Counter,
    failures: Counter,
    reopens: Counter,
    recovery_seconds: Gauge<f64, AtomicU64>,
}

impl Default for StoreMetrics {
    fn default() -> Self {
        Self {
            commit_duration: latency_histogram(),
            ops_per_commit: Histogram::new(exponential_buckets(1.0, 2.0, OPS_BUCKETS)),
            fsyncs: Counter::default(),
            written_bytes: Counter::default(),
            relocated_bytes: Counter::default(),
            checkpoints: Counter::default(),
            failures: Counter::default(),
            reopens: Counter::default(),
            recovery_seconds: Gauge::default(),
        }
    }
}

impl StoreMetrics {
    pub(crate) fn register(&self, registry: &mut Registry) {
        registry.register(
            "veil_store_commit_duration_seconds",
            "Time of one group commit: the log append and, when durable, its fdatasync",
            self.commit_duration.clone(),
        );
        registry.register(
            "veil_store_ops_per_commit",
            "Store operations made durable by one group commit",
            self.ops_per_commit.clone(),
        );
        registry.register(
            "veil_store_fsyncs",
            "fdatasync calls on the write-ahead log",
            self.fsyncs.clone(),
        );
        registry.register(
            "veil_store_written_bytes",
            "Bytes appended to the write-ahead log",
            self.written_bytes.clone(),
        );
        registry.register(
            "veil_store_relocated_bytes",
            "Bytes of surviving message bodies copied forward out of mostly dead log segments, so that their \
             files could be removed (with veil_store_written_bytes: the log's write amplification)",
            self.relocated_bytes.clone(),
        );
        registry.register(
            "veil_store_checkpoints",
            "Closed log segments applied to redb (including the one at shutdown)",
            self.checkpoints.clone(),
        );
        registry.register(
            "veil_store_failures",
            "Times the store stopped taking writes after a failed log write, sync or checkpoint (a full or \
             failing disk); reads go on, and the server reopens the store once the data directory takes \
             writes again",
            self.failures.clone(),
        );
        registry.register(
            "veil_store_reopens",
            "Times the server reopened the store from disk after a failure",
            self.reopens.clone(),
        );
        registry.register(
            "veil_store_recovery_duration_seconds",
            "Time the last start-up took to open the store: recovery of the log and compaction",
            self.recovery_seconds.clone(),
        );
    }

    /// One group commit of `ops` operations, `bytes` appended, synced or not (relaxed durability), taking
    /// `elapsed` for append and sync.
    pub fn commit(&self, ops: usize, bytes: usize, synced: bool, elapsed: Duration) {
        self.commit_duration.observe(elapsed.as_secs_f64());
        self.ops_per_commit.observe(ops as f64);
        self.written_bytes
            .inc_by(u64::try_from(bytes).unwrap_or(u64::MAX));
        if synced {
            self.fsyncs.inc();
        }
    }

    /// One relocation record of `bytes` appended: survivors of a mostly dead segment copied forward.
    pub fn relocated(&self, bytes: usize) {
        self.relocated_bytes
            .inc_by(u64::try_from(bytes).unwrap_or(u64::MAX));
    }

    /// Bytes relocated so far (tests, benchmarks).
    pub fn relocated_bytes(&self) -> u64 {
        self.relocated_bytes.get()
    }

    /// One checkpoint applied to redb.
    pub fn checkpointed(&self) {
        self.checkpoints.inc();
    }

    /// The store stopped taking writes.
    pub fn failed(&self) {
        self.failures.inc();
    }

    /// The server reopened a failed store.
    pub fn reopened(&self) {
        self.reopens.inc();
    }

    /// Failures so far (tests).
    pub fn failures(&self) -> u64 {
        self.failures.get()
    }

    /// How long opening the store took.
    pub fn recovered(&self, elapsed: Duration) {
        self.recovery_seconds.set(elapsed.as_secs_f64());
    }

    /// fdatasync calls so far (tests).
    pub fn fsyncs(&self) -> u64 {
        self.fsyncs.get()
    }

    /// Bytes appended to the log so far (tests).
    pub fn written_bytes(&self) -> u64 {
        self.written_bytes.get()
    }

    /// Checkpoints so far (tests).
    pub fn checkpoints(&self) -> u64 {
        self.checkpoints.get()
    }
}
