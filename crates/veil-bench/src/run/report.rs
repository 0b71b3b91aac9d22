//! What a run produces: the JSON document of `veil-bench run` (also the `detail` of every run-based suite
//! scenario) and its human summary, whose MISSING and DUPLICATES lines are meant to be impossible to overlook.

use serde::{Deserialize, Serialize};

use super::accounting::Counts;
use super::workload::Workload;
use crate::stats::Percentiles;

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
