//! Executes a [`Scenario`] against a real [`Engine`] over a [`FaultStore`] and a [`ManualClock`], polling every
//! client's request itself (no runtime, no threads, no real time), and checks after every step what the
//! acknowledged outcomes allow (docs/reliability.md, "Deterministic simulation"):
//!
//! - an acknowledged change is durable when it is acknowledged, and nothing acknowledged is lost later;
//! - an acknowledged delete is final, a deduplicated or refused send is never stored, nothing appears that
//!   nobody sent, and no send is stored twice;
//! - no delivery inside a visibility window that an acknowledged receive or change granted;
//! - FIFO: order within a group, no two of a group in flight, and a repeated send inside the deduplication
//!   interval answered as the first;
//! - after the store fail-stops, no request that changes anything is answered with success;
//! - the engine's own index invariants, and its statistics equal a recount of the store whenever the store
//!   is idle;
//! - at the end, with faults healed and every timeout passed, every message that must exist is delivered.
//!
//! The model is built from acknowledged outcomes only. A request not answered (lost in a crash) or answered
//! with an error is *in doubt*: from the moment it started, each message it names may or may not have been
//! changed, so the checks it could affect are relaxed for those messages — never tightened.
//!
//! The run is split by job: `driver` polls requests and injects faults, `requests` turns each generated
//! operation into an engine request, `model` is what the acknowledged answers allow, `judges` checks each
//! answer against it, `checks` compares the store with it after every step, and `liveness` is the final drain.

mod checks;
mod driver;
mod judges;
mod liveness;
mod model;
mod requests;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use veil_core::{Clock, Engine, ManualClock, Millis, QueueKey, ReceiptRule, DEFAULT_NAMESPACE};

use crate::backend::Backend;
use crate::limits::*;
use crate::ops::*;
use crate::store::{FaultStore, StoreMode};
use crate::wal::{DiskStats, WalStore};
use driver::InFlight;
use model::{Client, Msg};

/// A broken invariant: what, where, and at which step.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    /// A short stable name; the shrinker keeps a failure of the same kind.
    pub kind: &'static str,
    pub detail: String,
    /// Index of the operation after which it was seen (`ops.len()` for the final liveness check).
    pub step: usize,
}

impl std::fmt::Display for Violation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "[{}] at step {}: {}", self.kind, self.step, self.detail)
    }
}

/// What a run did, summed over seeds by the runner.
#[derive(Clone, Copy, Debug, Default)]
pub struct RunStats {
    pub steps: u64,
    pub requests: u64,
    pub acknowledged: u64,
    pub errors: u64,
    /// Requests whose answer a crash lost.
    pub in_doubt: u64,
    pub deliveries: u64,
    pub flushes: u64,
    /// Commits that stayed pending across at least one other step (slow commits).
    pub slow_commits: u64,
    pub commit_failures: u64,
    pub crashes: u64,
    /// Pending commits lost in crashes.
    pub lost_commits: u64,
    pub clock_jumps: u64,
    pub restarts: u64,
    pub drained: u64,
    /// Times the engine's statistics were compared with a recount of the store.
    pub recounts: u64,
    /// Times the store's durable part was compared with the model (every step over the fault store; after
    /// every recovery over the simulated disk).
    pub durability_checks: u64,
    /// Engine start-ups that refused what they read as corrupt under read bit flips (then retried).
    pub flips_detected: u64,
    /// What the simulated disk did (`--store wal`).
    pub disk: DiskStats,
}

impl RunStats {
    pub fn add(&mut self, other: &RunStats) {
        self.steps += other.steps;
        self.requests += other.requests;
        self.acknowledged += other.acknowledged;
        self.errors += other.errors;
        self.in_doubt += other.in_doubt;
        self.deliveries += other.deliveries;
        self.flushes += other.flushes;
        self.slow_commits += other.slow_commits;
        self.commit_failures += other.commit_failures;
        self.crashes += other.crashes;
        self.lost_commits += other.lost_commits;
        self.clock_jumps += other.clock_jumps;
        self.restarts += other.restarts;
        self.drained += other.drained;
        self.recounts += other.recounts;
        self.durability_checks += other.durability_checks;
        self.flips_detected += other.flips_detected;
        self.disk.add(&other.disk);
    }
}

pub struct RunResult {
    pub stats: RunStats,
    pub violation: Option<Violation>,
    /// Each operation and what came of it; filled only when asked for (replaying a minimal failure).
    pub trace: Vec<String>,
}

/// How to run: the store's honesty, and an optional engine bug to inject (checker tests).
#[derive(Clone, Copy, Debug)]
pub struct Options {
    pub store: StoreMode,
    pub trace: bool,
    /// `StoreMode::Wal`: reads of the log flip bits too (`WalStore::new`).
    pub log_flips: bool,
    /// `StoreMode::Wal`: no read bit flips at all (crashes and EIO/ENOSPC only).
    pub no_read_flips: bool,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            store: StoreMode::Honest,
            trace: false,
            log_flips: false,
            no_read_flips: false,
        }
    }
}

/// Runs one scenario to its end (or its first violation). An engine panic (a failed state assertion) is a
/// violation too.
pub fn run(scenario: &Scenario, options: Options) -> RunResult {
    let mut sim = match Sim::new(scenario, options) {
        Ok(sim) => sim,
        Err(why) => {
            return RunResult {
                stats: RunStats::default(),
                violation: Some(Violation {
                    kind: "start failed",
                    detail: why,
                    step: 0,
                }),
                trace: Vec::new(),
            }
        }
    };
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| sim.run_all().err()));
    let violation = match outcome {
        Ok(violation) => violation,
        Err(panic) => {
            let message = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "a panic without a message".into());
            // The step it happened in, and the trace up to it, are still the simulator's.
            Some(sim.violation("engine panicked", message))
        }
    };
    sim.stats.disk = sim.store.disk_stats().unwrap_or_default();
    RunResult {
        stats: sim.stats,
        violation,
        trace: std::mem::take(&mut sim.trace),
    }
}

fn key(queue: usize) -> QueueKey {
    QueueKey::new(DEFAULT_NAMESPACE, QUEUE_NAMES[queue])
}

fn body(tag: u64) -> String {
    format!("m{tag}")
}

/// The tag a body names ("m12", or "m12u" once Azure's update replaced it).
fn tag_of(body: &[u8]) -> Option<u64> {
    let text = std::str::from_utf8(body).ok()?;
    text.strip_prefix('m')?.trim_end_matches('u').parse().ok()
}

/// The receipt rule of a protocol for a queue (docs/semantics.md §2): SQS's comes from its front-end, which
/// decides by the queue's name.
fn receipt_rule(protocol: Protocol, queue: usize) -> ReceiptRule {
    match protocol {
        Protocol::Sqs => veil_sqs::fifo::receipt_rule(QUEUE_NAMES[queue]),
        Protocol::Azure | Protocol::KubeMq => ReceiptRule::Current,
    }
}

/// The receipt a protocol hands its client for a delivery.
fn wire_receipt(protocol: Protocol, message_id: &[u8; 16], engine_receipt: &str) -> String {
    match protocol {
        Protocol::Azure => veil_azure::pop_receipt::encode(message_id, engine_receipt),
        Protocol::Sqs | Protocol::KubeMq => engine_receipt.to_owned(),
    }
}

struct Sim<'a> {
    scenario: &'a Scenario,
    options: Options,
    clock: ManualClock,
    store: Box<dyn Backend>,
    engine: Arc<Engine>,
    inflight: Vec<InFlight>,
    clients: Vec<Client>,
    msgs: BTreeMap<u64, Msg>,
    next_tag: u64,
    tick: u64,
    step: usize,
    stats: RunStats,
    trace: Vec<String>,
    /// Message ids of acknowledged sends, to tell a duplicate's answer from another message's.
    by_id: HashMap<[u8; 16], u64>,
    /// The latest start tick of a receive with each attempt id: a retry with the same id started while an
    /// earlier one was unanswered may give that one's messages a new visibility (SQS resets it on a retry).
    attempt_started: HashMap<String, u64>,
}

impl<'a> Sim<'a> {
    /// A run at its start: the store empty (an empty simulated disk for `StoreMode::Wal`), the engine on it.
    fn new(scenario: &'a Scenario, options: Options) -> Result<Self, String> {
        let clock = ManualClock::new(CLOCK_START_MS);
        let store: Box<dyn Backend> = match options.store {
            StoreMode::Wal => Box::new(WalStore::new(
                scenario.seed,
                options.log_flips,
                !options.no_read_flips,
            )?),
            mode => Box::new(Arc::new(FaultStore::new(mode))),
        };
        let engine = driver::open(store.as_ref(), &clock)
            .map_err(|e| format!("the engine did not open on an empty store: {e}"))?;
        let engine = Arc::new(engine);
        Ok(Self {
            scenario,
            options,
            clock,
            store,
            engine,
            inflight: Vec::new(),
            clients: (0..=CLIENTS).map(|_| Client::default()).collect(),
            msgs: BTreeMap::new(),
            next_tag: 0,
            tick: 0,
            step: 0,
            stats: RunStats::default(),
            trace: Vec::new(),
            by_id: HashMap::new(),
            attempt_started: HashMap::new(),
        })
    }

    fn violation(&self, kind: &'static str, detail: String) -> Violation {
        Violation {
            kind,
            detail,
            step: self.step,
        }
    }

    fn note(&mut self, line: impl FnOnce() -> String) {
        if self.options.trace {
            self.trace.push(format!("      {}", line()));
        }
    }

    fn run_all(&mut self) -> Result<(), Violation> {
        self.setup()?;
        for (step, op) in self.scenario.ops.iter().enumerate() {
            self.step = step;
            if self.options.trace {
                self.trace
                    .push(format!("{step:>4} t+{:>9} ms  {op}", self.elapsed()));
            }
            self.execute(op)?;
            self.poll_all()?;
            self.restart_if_the_power_went()?;
            self.check_step()?;
            self.stats.steps += 1;
        }
        self.step = self.scenario.ops.len();
        if self.options.trace {
            self.trace.push(format!(
                "{:>4} heal faults, pass every timeout and drain every queue",
                self.step
            ));
        }
        self.liveness()
    }

    fn elapsed(&self) -> Millis {
        self.clock.now() - CLOCK_START_MS
    }
}
