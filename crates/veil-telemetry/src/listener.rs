//! What every listener of the process reports about accepting connections (docs/security.md "Every
//! listener's accept loop"): accepts that failed (out of descriptors, most often) and listeners that ended
//! while the process still ran. Process-wide, like the engine lock's times: veil-http's accept loop counts
//! into it without a handle threaded through every front-end, and [`crate::Telemetry::register`] serves it.

use std::fmt;
use std::sync::OnceLock;

use prometheus_client::encoding::{EncodeLabelSet, LabelSetEncoder};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

/// The `listener` label: a listener's fixed name (`sqs`, `azure`, `kubemq`, `admin`, `cluster`).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct ListenerLabel {
    listener: &'static str,
}

impl EncodeLabelSet for ListenerLabel {
    fn encode(&self, encoder: &mut LabelSetEncoder) -> Result<(), fmt::Error> {
        use prometheus_client::encoding::EncodeLabel;
        ("listener", self.listener).encode(encoder.encode_label())
    }
}

/// The process's listener counters.
#[derive(Debug, Default)]
pub struct ListenerMetrics {
    accept_errors: Family<ListenerLabel, Counter>,
    failures: Family<ListenerLabel, Counter>,
    refused: Family<ListenerLabel, Counter>,
}

/// The listener counters of this process.
pub fn listeners() -> &'static ListenerMetrics {
    static METRICS: OnceLock<ListenerMetrics> = OnceLock::new();
    METRICS.get_or_init(ListenerMetrics::default)
}

impl ListenerMetrics {
    pub(crate) fn register(&self, registry: &mut Registry) {
        registry.register(
            "veil_listener_accept_errors",
            "Accepts that failed, by listener (EMFILE/ENFILE: the process is out of file descriptors); the listener backs off and keeps accepting",
            self.accept_errors.clone(),
        );
        registry.register(
            "veil_listener_refused_connections",
            "Connections closed at once because the listener had its maximum open (max_connections), by listener",
            self.refused.clone(),
        );
        registry.register(
            "veil_listener_failures",
            "Listeners that ended while the process was running, by listener; the process restarts the listener or gives up what it serves",
            self.failures.clone(),
        );
    }

    /// Shows `listener` in both families at zero, so that a scrape (and an alert on an increase) sees it
    /// before its first failure.
    pub fn declare(&self, listener: &'static str) {
        let label = ListenerLabel { listener };
        let _ = self.accept_errors.get_or_create(&label);
        let _ = self.failures.get_or_create(&label);
        let _ = self.refused.get_or_create(&label);
    }

    pub fn connection_refused(&self, listener: &'static str) {
        self.refused
            .get_or_create(&ListenerLabel { listener })
            .inc();
    }

    pub fn refused_connections(&self, listener: &'static str) -> u64 {
        self.refused
            .get(&ListenerLabel { listener })
            .map_or(0, |counter| counter.get())
    }

    pub fn accept_failed(&self, listener: &'static str) {
        self.accept_errors
            .get_or_create(&ListenerLabel { listener })
            .inc();
    }

    pub fn listener_failed(&self, listener: &'static str) {
        self.failures
            .get_or_create(&ListenerLabel { listener })
            .inc();
    }

    pub fn accept_errors(&self, listener: &'static str) -> u64 {
        self.accept_errors
            .get(&ListenerLabel { listener })
            .map_or(0, |counter| counter.get())
    }

    pub fn failures(&self, listener: &'static str) -> u64 {
        self.failures
            .get(&ListenerLabel { listener })
            .map_or(0, |counter| counter.get())
    }
}
