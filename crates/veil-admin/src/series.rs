//! The last hour of every queue's visible / in-flight / delayed counts, sampled every
//! `limits::SERIES_INTERVAL_S` and kept in memory only, for the console's per-queue charts.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use parking_lot::Mutex;
use serde::Serialize;
use utoipa::ToSchema;
use veil_core::{Dispatch, Millis, QueueKey, QueueOverview};

use crate::limits;

/// One sample of one queue.
#[derive(Clone, Copy, Debug, Serialize, serde::Deserialize, ToSchema)]
pub struct Sample {
    /// Milliseconds since the Unix epoch.
    pub at_ms: u64,
    pub visible: u64,
    pub inflight: u64,
    pub delayed: u64,
}

/// Samples per queue, oldest first. Shared by the sampler task (writer) and the API (readers); a plain mutex
/// because both hold it for a copy of a few hundred numbers at most.
#[derive(Clone, Default)]
pub struct Series {
    samples: Arc<Mutex<HashMap<QueueKey, VecDeque<Sample>>>>,
}

impl Series {
    /// Takes one sample of every queue, as `overview` shows them at `at_ms`; queues that no longer exist are
    /// forgotten.
    pub fn sample(&self, at_ms: Millis, overview: Vec<QueueOverview>) {
        let mut samples = self.samples.lock();
        samples.retain(|key, _| overview.binary_search_by(|q| q.key.cmp(key)).is_ok());
        for queue in overview {
            let kept = samples.entry(queue.key).or_default();
            if kept.len() == limits::SERIES_SAMPLES_MAX {
                kept.pop_front();
            }
            kept.push_back(Sample {
                at_ms,
                visible: queue.stats.visible,
                inflight: queue.stats.hidden,
                delayed: queue.stats.delayed,
            });
        }
    }

    pub fn of(&self, key: &QueueKey) -> Vec<Sample> {
        self.samples
            .lock()
            .get(key)
            .map(|kept| kept.iter().copied().collect())
            .unwrap_or_default()
    }

    /// Samples every `limits::SERIES_INTERVAL_S` until the task is aborted.
    /// A sample that cannot be taken (a cluster's owner unreachable) is skipped.
    pub fn spawn_sampler(&self, engine: impl Into<Dispatch>) -> tokio::task::JoinHandle<()> {
        let engine: Dispatch = engine.into();
        let series = self.clone();
        tokio::spawn(async move {
            let period = std::time::Duration::from_secs(limits::SERIES_INTERVAL_S);
            let mut tick = tokio::time::interval(period);
            loop {
                tick.tick().await;
                let at_ms = engine.now();
                match engine.overview().await {
                    Ok(overview) => series.sample(at_ms, overview),
                    Err(error) => tracing::debug!(%error, "no series sample this time"),
                }
            }
        })
    }
}
