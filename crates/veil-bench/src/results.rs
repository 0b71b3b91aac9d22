//! The suite's results file: what `veil-bench suite` writes and `veil-bench report` reads. It sits apart from
//! both so that the report depends on the file's layout alone, never on how the scenarios produce it, and so
//! that a change to this layout is visible in one place (bump [`RESULTS_VERSION`] with it).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Version of the results file layout.
pub const RESULTS_VERSION: u32 = 1;

/// The suite's output file.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct SuiteResults {
    pub version: u32,
    pub started_unix: u64,
    pub command: String,
    pub machine: Machine,
    pub quick: bool,
    pub runs: usize,
    pub scenarios: Vec<ScenarioResult>,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Machine {
    pub cpus: usize,
    pub cpu_model: String,
    pub memory_gib: f64,
    pub kernel: String,
}

/// One scenario on one system: its runs.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ScenarioResult {
    pub scenario: String,
    pub system: String,
    /// How the system stores data (so a figure is never read without its durability).
    pub durability: String,
    pub runs: Vec<ScenarioRun>,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct ScenarioRun {
    pub ok: bool,
    pub error: Option<String>,
    /// Named figures (see `report::METRICS` for units and meaning).
    pub metrics: BTreeMap<String, f64>,
    /// The latency distribution the chart of this scenario draws, `[µs, quantile]`.
    pub cdf_us: Vec<[f64; 2]>,
    /// The full reports behind the figures.
    pub detail: serde_json::Value,
}

/// Scenario names, in suite order: the `scenario` keys of the results file, and the order the report
/// shows them in.
pub const SCENARIOS: &[&str] = &[
    "round-trip",
    "throughput",
    "half-load",
    "ceiling",
    "redelivery",
    "wake-up",
    "scale",
    "fifo",
];
