//! What a run does: the shape of one workload (how many producers and consumers, batch, body size, how long,
//! how fast, whether to delete and drain). It is serialised into every report, so that a figure always
//! travels with the configuration that produced it.

use serde::{Deserialize, Serialize};

use super::body::BODY_HEADER_LEN;

/// What a run does. Serialised into the results as the run's configuration.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Workload {
    pub queue: String,
    /// Queues the run spreads over (`<queue>-0` … when more than one): producer and consumer `i` use queue
    /// `i % queues`, so a cluster that owns queues by partition sees its load spread.
    #[serde(default = "one_queue")]
    pub queues: usize,
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

fn one_queue() -> usize {
    1
}

impl Workload {
    /// The queue of producer or consumer `worker`.
    pub fn queue_of(&self, worker: usize) -> String {
        if self.queues <= 1 {
            self.queue.clone()
        } else {
            format!("{}-{}", self.queue, worker % self.queues)
        }
    }

    /// Every queue of the run.
    pub fn queue_names(&self) -> Vec<String> {
        (0..self.queues.max(1)).map(|i| self.queue_of(i)).collect()
    }

    /// The baseline every preset varies: one producer and one consumer, unbatched 1 KiB messages for 10 s,
    /// 30 s visibility, 1 s long polls, deletes on, draining for up to 30 s.
    pub fn baseline(queue: impl Into<String>) -> Self {
        Self {
            queue: queue.into(),
            queues: 1,
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
        if self.queues == 0
            || !self.producers.is_multiple_of(self.queues)
            || !self.consumers.is_multiple_of(self.queues)
        {
            return Err(format!(
                "producers ({}) and consumers ({}) must each be a multiple of the queues ({}): every queue gets \
                 the same share",
                self.producers, self.consumers, self.queues
            ));
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

#[cfg(test)]
mod tests {
    use super::*;

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
            ..base.clone()
        }
        .checked()
        .is_err());
    }

    #[test]
    fn a_run_over_several_queues_gives_each_the_same_share_of_workers() {
        let spread = Workload {
            queues: 3,
            producers: 6,
            consumers: 3,
            ..Workload::baseline("q")
        };
        assert_eq!(spread.queue_names(), ["q-0", "q-1", "q-2"]);
        assert_eq!(spread.queue_of(4), "q-1");
        assert!(spread.clone().checked().is_ok());
        assert!(Workload {
            producers: 4,
            ..spread
        }
        .checked()
        .is_err());
        assert_eq!(Workload::baseline("q").queue_of(7), "q");
    }
}
