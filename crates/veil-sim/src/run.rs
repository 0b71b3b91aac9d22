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

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

use veil_core::{
    Clock, DeadLetterTiming, DeleteOutcome, Engine, EngineResult, ManualClock, Message,
    MessageRedrivePolicy, Millis, MoveTaskError, MoveTaskRecord, NewMessage, QueueConfig, QueueId,
    QueueKey, ReceiptKey, ReceiptRule, ReceiveOptions, RedrivePolicy, SentMessage, Seq, Store,
    Updated, VisibilityChange, DEFAULT_NAMESPACE,
};

use crate::limits::*;
use crate::ops::*;
use crate::store::{FaultStore, StoreMode};

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
}

impl Default for Options {
    fn default() -> Self {
        Self {
            store: StoreMode::Honest,
            trace: false,
        }
    }
}

/// Runs one scenario to its end (or its first violation). An engine panic (a failed state assertion) is a
/// violation too.
pub fn run(scenario: &Scenario, options: Options) -> RunResult {
    let mut sim = Sim::new(scenario, options);
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

/// A receipt a client holds.
#[derive(Clone, Debug)]
struct Held {
    queue: usize,
    tag: u64,
    /// As the protocol hands it to its client: an Azure pop receipt (veil-azure's codec: message id and
    /// engine receipt), the engine's receipt otherwise. `decoded` turns it back into the engine's.
    receipt: String,
    protocol: Protocol,
    message_id: [u8; 16],
}

#[derive(Default)]
struct Client {
    held: VecDeque<Held>,
    /// (tag, group, dedup id) of its last FIFO send, for a retry.
    last_fifo_send: Option<(u64, u8, String)>,
    attempt: Option<String>,
    attempts_made: u64,
}

/// (tag, seq, group) of a message one receive delivered.
type Delivered = (u64, Seq, Option<String>);

/// A visibility window granted by an acknowledged receive or change.
#[derive(Clone, Debug)]
struct Window {
    /// Start tick of the request that granted it: a request naming the message after this may have changed
    /// the window.
    at: u64,
    /// The latest tick at which the grant may have happened (a long poll delivers some time after it
    /// started): only requests that started after this are bound by the window.
    granted_by: u64,
    until: Millis,
    queue: usize,
    receipt: String,
}

/// What the model knows about one sent message (one send attempt: one tag, at most one stored message).
#[derive(Clone, Debug)]
struct Msg {
    origin: usize,
    group: Option<String>,
    /// The tag of the send this one retried (same deduplication id).
    retry_of: Option<u64>,
    send_at: Millis,
    /// Tick at which its send was acknowledged as stored.
    acked_tick: Option<u64>,
    message_id: Option<[u8; 16]>,
    seq_in_origin: Option<Seq>,
    own_redrive: OwnRedrive,
    /// A move by its own rule may have happened, which clears the rule (the queue's policy applies after it).
    own_rule_maybe_cleared: bool,
    /// Queues it may be in (a bit per queue): its origin, plus every move that may have happened.
    locations: u8,
    /// An operation that may remove it for good started at this tick (delete, purge, drop by its rule).
    maybe_gone: Option<u64>,
    /// An acknowledged delete removed it; the delete started at this tick.
    deleted: Option<u64>,
    /// Acknowledged as a duplicate, or refused: never stored.
    never_stored: bool,
    /// Receives that started on a queue it may be in: a bound on its receive count.
    receives_seen: u32,
    /// It may have left its origin queue (a dead-letter move, a re-queue, a move task).
    moved_possible: bool,
    /// The highest receive count an acknowledged delivery showed (counts reset only when a move makes a
    /// fresh message of it).
    receive_count_seen: u32,
    /// The generation of that delivery.
    generation_seen: u32,
    /// Latest start tick of a request that may have changed its visibility.
    touched: u64,
    window: Option<Window>,
}

impl Msg {
    fn may_be_in(&self, queue: usize) -> bool {
        self.locations & (1 << queue) != 0
    }
}

enum Outcome {
    Sent(EngineResult<Vec<SentMessage>>),
    SentEach(EngineResult<Vec<EngineResult<SentMessage>>>),
    Received(EngineResult<Vec<Message>>),
    Changed(EngineResult<Millis>),
    Updated(EngineResult<Updated>),
    Deleted(EngineResult<Vec<EngineResult<DeleteOutcome>>>),
    Moved(EngineResult<()>),
    Purged(EngineResult<u64>),
    TaskStarted(Result<MoveTaskRecord, MoveTaskError>),
    Driven(EngineResult<()>),
}

/// What a request needs to judge its answer.
#[derive(Clone, Debug)]
enum Request {
    Send {
        client: u8,
        queue: usize,
        tags: Vec<u64>,
    },
    Receive {
        client: u8,
        queue: usize,
        visibility_ms: Millis,
        protocol: Protocol,
        /// A long poll: it may receive messages that arrive while it waits.
        waits: bool,
        /// Its SQS FIFO receive request attempt id.
        attempt_id: Option<String>,
    },
    Change {
        tag: u64,
        receipt: String,
    },
    Update {
        client: u8,
        tag: u64,
        old_receipt: String,
    },
    Delete {
        tags: Vec<u64>,
    },
    Move {
        tag: u64,
    },
    Other,
}

type Pending = Pin<Box<dyn Future<Output = Outcome>>>;

struct InFlight {
    step: usize,
    tick: u64,
    started_at: Millis,
    /// The store had fail-stopped when it started: no success may come back.
    store_failed: bool,
    request: Request,
    future: Pending,
    polls: u32,
}

struct Sim<'a> {
    scenario: &'a Scenario,
    options: Options,
    clock: ManualClock,
    store: Arc<FaultStore>,
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

fn receipts() -> ReceiptKey {
    ReceiptKey::new([7; veil_core::receipt::SECRET_BYTES])
}

fn open(store: &Arc<FaultStore>, clock: &ManualClock) -> EngineResult<Engine> {
    let store: Arc<dyn Store> = store.clone();
    Engine::open(store, Arc::new(clock.clone()), receipts())
}

impl<'a> Sim<'a> {
    fn new(scenario: &'a Scenario, options: Options) -> Self {
        let clock = ManualClock::new(CLOCK_START_MS);
        let store = Arc::new(FaultStore::new(options.store));
        let engine = Arc::new(open(&store, &clock).expect("an empty store opens"));
        Self {
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
        }
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

    fn setup(&mut self) -> Result<(), Violation> {
        let setup = &self.scenario.setup;
        for queue in [STANDARD, FIFO, DEAD_LETTERS, FIFO_DEAD_LETTERS, EVENTS] {
            let redrive_policy = match queue {
                STANDARD => Some(RedrivePolicy {
                    dead_letter_queue: key(DEAD_LETTERS),
                    max_receive_count: setup.max_receive_count[0],
                }),
                FIFO if setup.fifo_redrive => Some(RedrivePolicy {
                    dead_letter_queue: key(FIFO_DEAD_LETTERS),
                    max_receive_count: setup.max_receive_count[1],
                }),
                _ => None,
            };
            let fifo = is_fifo(queue).then_some(veil_core::FifoConfig {
                content_based_dedup: false,
                dedup_scope: if setup.dedup_by_group {
                    veil_core::DedupScope::Group
                } else {
                    veil_core::DedupScope::Queue
                },
                dedup_interval_ms: DEDUP_INTERVAL_MS,
            });
            let config = QueueConfig {
                retention_ms: Some(setup.retention_ms[queue]),
                delay_ms: setup.delay_ms[queue],
                redrive_policy,
                fifo,
                ..QueueConfig::default()
            };
            let engine = self.engine.clone();
            let created = self.settle(Box::pin(async move {
                engine.create_queue(key(queue), config).await
            }));
            if let Err(error) = created {
                return Err(self.violation("setup failed", error.to_string()));
            }
        }
        Ok(())
    }

    /// Polls a future to its end, flushing the store while it waits (setup and the final drain: no faults).
    fn settle<T>(&mut self, mut future: Pin<Box<dyn Future<Output = T> + '_>>) -> T {
        let mut cx = Context::from_waker(Waker::noop());
        loop {
            if let Poll::Ready(value) = future.as_mut().poll(&mut cx) {
                return value;
            }
            self.store.flush(usize::MAX);
        }
    }

    fn start(&mut self, request: Request, future: Pending) -> Result<(), Violation> {
        self.stats.requests += 1;
        let flight = InFlight {
            step: self.step,
            tick: self.tick,
            started_at: self.clock.now(),
            store_failed: self.store.failed(),
            request,
            future,
            polls: 0,
        };
        self.inflight.push(flight);
        // The first poll runs the request's critical section now, in operation order.
        let index = self.inflight.len() - 1;
        self.poll_one(index)
    }

    /// Polls one request; an answered one is judged and removed. Returns whether it was answered.
    fn poll_one(&mut self, index: usize) -> Result<(), Violation> {
        let mut cx = Context::from_waker(Waker::noop());
        let flight = &mut self.inflight[index];
        flight.polls += 1;
        if let Poll::Ready(outcome) = flight.future.as_mut().poll(&mut cx) {
            let flight = self.inflight.remove(index);
            if flight.step != self.step && flight.polls > 2 {
                self.stats.slow_commits += 1;
            }
            self.judge(flight, outcome)?;
        }
        Ok(())
    }

    fn poll_all(&mut self) -> Result<(), Violation> {
        let mut index = 0;
        while index < self.inflight.len() {
            let before = self.inflight.len();
            self.poll_one(index)?;
            if self.inflight.len() == before {
                index += 1;
            }
        }
        Ok(())
    }

    fn next_tag(&mut self) -> u64 {
        self.next_tag += 1;
        self.next_tag
    }

    /// The held receipt `pick` of `client`, if it holds any, decoded.
    fn held(&self, client: u8, pick: u16) -> Result<Option<Held>, Violation> {
        let held = &self.clients[usize::from(client)].held;
        if held.is_empty() {
            return Ok(None);
        }
        self.decoded(&held[usize::from(pick) % held.len()])
            .map(Some)
    }

    /// A held receipt with the engine's receipt in it, taken out of its protocol's form the way the front-end
    /// does: an Azure pop receipt must decode and name the message the request names.
    fn decoded(&self, held: &Held) -> Result<Held, Violation> {
        if held.protocol != Protocol::Azure {
            return Ok(held.clone());
        }
        match veil_azure::pop_receipt::decode(&held.receipt) {
            Some(pop) if pop.message_id == held.message_id => Ok(Held {
                receipt: pop.engine_receipt,
                ..held.clone()
            }),
            other => Err(self.violation(
                "pop receipt",
                format!(
                    "the pop receipt of m{} did not decode to its message: {other:?}",
                    held.tag
                ),
            )),
        }
    }

    fn forget_held(&mut self, client: u8, tags: &[u64]) {
        self.clients[usize::from(client)]
            .held
            .retain(|h| !tags.contains(&h.tag));
    }

    fn touch(&mut self, tag: u64) {
        let tick = self.tick;
        if let Some(msg) = self.msgs.get_mut(&tag) {
            msg.touched = tick;
        }
    }

    fn maybe_gone(&mut self, tag: u64) {
        let tick = self.tick;
        if let Some(msg) = self.msgs.get_mut(&tag) {
            msg.touched = tick;
            msg.maybe_gone.get_or_insert(tick);
        }
    }

    fn execute(&mut self, op: &Op) -> Result<(), Violation> {
        self.tick += 1;
        match *op {
            Op::Send {
                client,
                queue,
                count,
                each,
                group,
                delay_ms,
                redrive,
            } => self.send(client, queue, count, each, group, delay_ms, redrive),
            Op::Retry { client } => self.retry(client),
            Op::Receive {
                client,
                queue,
                max,
                visibility_ms,
                wait_ms,
                protocol,
                attempt,
            } => self.receive(
                client,
                queue,
                max,
                visibility_ms,
                wait_ms,
                protocol,
                attempt,
            ),
            Op::ChangeVisibility {
                client,
                pick,
                visibility_ms,
            } => {
                let Some(held) = self.held(client, pick)? else {
                    return Ok(());
                };
                self.touch(held.tag);
                let change = VisibilityChange {
                    visibility_ms,
                    since_receive_ms_max: (held.protocol != Protocol::Azure)
                        .then_some(SINCE_RECEIVE_MS_MAX),
                    not_past_expiry: held.protocol == Protocol::Azure,
                    receipts: receipt_rule(held.protocol, held.queue),
                };
                let engine = self.engine.clone();
                let receipt = held.receipt.clone();
                let future = Box::pin(async move {
                    Outcome::Changed(
                        engine
                            .change_visibility(&key(held.queue), &receipt, change)
                            .await,
                    )
                });
                self.start(
                    Request::Change {
                        tag: held.tag,
                        receipt: held.receipt,
                    },
                    future,
                )
            }
            Op::Update {
                client,
                pick,
                visibility_ms,
            } => {
                let Some(held) = self.held(client, pick)? else {
                    return Ok(());
                };
                self.touch(held.tag);
                let change = VisibilityChange {
                    visibility_ms,
                    since_receive_ms_max: None,
                    not_past_expiry: true,
                    receipts: ReceiptRule::Current,
                };
                let engine = self.engine.clone();
                let receipt = held.receipt.clone();
                let new_body = bytes::Bytes::from(format!("m{}u", held.tag));
                let future = Box::pin(async move {
                    Outcome::Updated(
                        engine
                            .update(&key(held.queue), &receipt, change, Some(new_body))
                            .await,
                    )
                });
                let old_receipt = self.clients[usize::from(client)]
                    .held
                    .iter()
                    .find(|h| h.tag == held.tag)
                    .map(|h| h.receipt.clone())
                    .unwrap_or_default();
                self.start(
                    Request::Update {
                        client,
                        tag: held.tag,
                        old_receipt,
                    },
                    future,
                )
            }
            Op::Delete {
                client,
                pick,
                batch,
            } => {
                let Some(picked) = self.held(client, pick)? else {
                    return Ok(());
                };
                let chosen: Vec<Held> = if batch {
                    let same_queue: Vec<Held> = self.clients[usize::from(client)]
                        .held
                        .iter()
                        .filter(|h| h.queue == picked.queue)
                        .cloned()
                        .collect();
                    same_queue
                        .iter()
                        .map(|h| self.decoded(h))
                        .collect::<Result<_, _>>()?
                } else {
                    vec![picked.clone()]
                };
                let tags: Vec<u64> = chosen.iter().map(|h| h.tag).collect();
                for &tag in &tags {
                    self.maybe_gone(tag);
                }
                self.forget_held(client, &tags);
                let rule = receipt_rule(picked.protocol, picked.queue);
                let engine = self.engine.clone();
                let receipts: Vec<String> = chosen.into_iter().map(|h| h.receipt).collect();
                let future = Box::pin(async move {
                    let refs: Vec<&str> = receipts.iter().map(String::as_str).collect();
                    Outcome::Deleted(engine.delete_batch(&key(picked.queue), &refs, rule).await)
                });
                self.start(Request::Delete { tags }, future)
            }
            Op::Move {
                client,
                pick,
                target,
            } => {
                let Some(held) = self.held(client, pick)? else {
                    return Ok(());
                };
                if held.queue == target {
                    return Ok(());
                }
                self.touch(held.tag);
                if let Some(msg) = self.msgs.get_mut(&held.tag) {
                    msg.moved_possible = true;
                }
                self.add_location(held.tag, target);
                self.forget_held(client, &[held.tag]);
                let engine = self.engine.clone();
                let future = Box::pin(async move {
                    Outcome::Moved(
                        engine
                            .move_message(&key(held.queue), &held.receipt, &key(target))
                            .await,
                    )
                });
                self.start(Request::Move { tag: held.tag }, future)
            }
            Op::Purge { queue } => {
                let tags: Vec<u64> = self
                    .msgs
                    .iter()
                    .filter(|(_, m)| m.may_be_in(queue))
                    .map(|(t, _)| *t)
                    .collect();
                for tag in tags {
                    self.maybe_gone(tag);
                }
                let engine = self.engine.clone();
                let future =
                    Box::pin(async move { Outcome::Purged(engine.purge(&key(queue), None).await) });
                self.start(Request::Other, future)
            }
            Op::StartMoveTask { queue, to_origin } => {
                self.move_task_may_move();
                let engine = self.engine.clone();
                let future = Box::pin(async move {
                    let destination = (!to_origin).then(|| key(EVENTS));
                    Outcome::TaskStarted(
                        engine
                            .start_move_task(&key(queue), destination.as_ref(), None)
                            .await,
                    )
                });
                self.start(Request::Other, future)
            }
            Op::DriveMoveTasks => {
                self.move_task_may_move();
                let engine = self.engine.clone();
                let future =
                    Box::pin(async move { Outcome::Driven(engine.drive_move_tasks().await) });
                self.start(Request::Other, future)
            }
            Op::Sweep => {
                self.engine.sweep();
                Ok(())
            }
            Op::Advance { ms } => {
                self.clock.advance_ms(ms);
                Ok(())
            }
            Op::Jump { ms } => {
                // Forward only: the Clock contract gives no monotonicity guarantee, but every clock Veil runs
                // on (the system clock, the manual one) is read as time that does not go back; a backward
                // step is an operator's error the engine does not claim to survive.
                self.stats.clock_jumps += 1;
                self.clock.advance_ms(ms);
                Ok(())
            }
            Op::Flush { count } => {
                let count = if count == 0 {
                    usize::MAX
                } else {
                    usize::from(count)
                };
                if self.store.flush(count) > 0 {
                    self.stats.flushes += 1;
                }
                self.poll_all()?;
                if count == usize::MAX {
                    self.check_quiescent()?;
                }
                Ok(())
            }
            Op::FailCommit { reached_disk } => {
                if self.store.pending_count() > 0 {
                    self.stats.commit_failures += 1;
                    self.store.fail(reached_disk);
                }
                Ok(())
            }
            Op::Crash { kept } => self.crash(usize::from(kept)),
        }
    }

    /// A move task may move any message of a dead-letter queue back to its source or to `EVENTS`.
    fn move_task_may_move(&mut self) {
        let tags: Vec<(u64, usize)> = self
            .msgs
            .iter()
            .flat_map(|(&tag, m)| {
                let from_dl = m
                    .may_be_in(DEAD_LETTERS)
                    .then_some([(tag, STANDARD), (tag, EVENTS)]);
                let from_fdl = m
                    .may_be_in(FIFO_DEAD_LETTERS)
                    .then_some([(tag, FIFO), (tag, EVENTS)]);
                from_dl.into_iter().chain(from_fdl).flatten()
            })
            .collect();
        for (tag, target) in tags {
            if let Some(msg) = self.msgs.get_mut(&tag) {
                msg.moved_possible = true;
            }
            self.add_location(tag, target);
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn send(
        &mut self,
        client: u8,
        queue: usize,
        count: u8,
        each: bool,
        group: u8,
        delay_ms: Option<Millis>,
        redrive: OwnRedrive,
    ) -> Result<(), Violation> {
        let fifo = is_fifo(queue);
        let mut messages = Vec::new();
        let mut tags = Vec::new();
        for _ in 0..count {
            let tag = self.next_tag();
            let mut message = NewMessage::new(body(tag));
            message.sender_id = format!("client{client}");
            message.delay_ms = delay_ms;
            message.group = fifo.then(|| format!("g{group}"));
            message.dedup_id = fifo.then(|| format!("d{tag}"));
            message.redrive = match redrive {
                OwnRedrive::None => None,
                OwnRedrive::ToQueue(n) => Some(MessageRedrivePolicy {
                    max_receive_count: n,
                    dead_letter_queue: Some(key(OWN_DEAD_LETTERS)),
                }),
                OwnRedrive::Drop(n) => Some(MessageRedrivePolicy {
                    max_receive_count: n,
                    dead_letter_queue: None,
                }),
            };
            if fifo {
                self.clients[usize::from(client)].last_fifo_send =
                    Some((tag, group, format!("d{tag}")));
            }
            self.register(tag, queue, message.group.clone(), None, redrive);
            messages.push(message);
            tags.push(tag);
        }
        let engine = self.engine.clone();
        let future: Pending = if each {
            Box::pin(
                async move { Outcome::SentEach(engine.send_each(&key(queue), messages).await) },
            )
        } else {
            Box::pin(async move { Outcome::Sent(engine.send(&key(queue), messages).await) })
        };
        self.start(
            Request::Send {
                client,
                queue,
                tags,
            },
            future,
        )
    }

    fn register(
        &mut self,
        tag: u64,
        queue: usize,
        group: Option<String>,
        retry_of: Option<u64>,
        own_redrive: OwnRedrive,
    ) {
        let msg = Msg {
            origin: queue,
            group,
            retry_of,
            send_at: self.clock.now(),
            acked_tick: None,
            message_id: None,
            seq_in_origin: None,
            own_redrive,
            own_rule_maybe_cleared: false,
            locations: 1 << queue,
            maybe_gone: None,
            deleted: None,
            never_stored: false,
            receives_seen: 0,
            moved_possible: false,
            receive_count_seen: 0,
            generation_seen: 0,
            touched: 0,
            window: None,
        };
        self.msgs.insert(tag, msg);
        // A long poll already waiting on the queue may receive it (and its dead-letter rule may follow).
        self.waiting_receives_may_reach(tag, queue);
    }

    /// Each long poll waiting on `queue` may receive message `tag`, which just became deliverable there.
    fn waiting_receives_may_reach(&mut self, tag: u64, queue: usize) {
        let waiting = self
            .inflight
            .iter()
            .filter(|f| matches!(f.request, Request::Receive { queue: q, waits: true, .. } if q == queue))
            .count();
        for _ in 0..waiting {
            self.receive_may_reach(tag, queue);
        }
    }

    fn retry(&mut self, client: u8) -> Result<(), Violation> {
        let Some((original, group, dedup_id)) =
            self.clients[usize::from(client)].last_fifo_send.clone()
        else {
            return Ok(());
        };
        let tag = self.next_tag();
        let mut message = NewMessage::new(body(tag));
        message.group = Some(format!("g{group}"));
        message.dedup_id = Some(dedup_id);
        self.register(
            tag,
            FIFO,
            message.group.clone(),
            Some(original),
            OwnRedrive::None,
        );
        let engine = self.engine.clone();
        let future =
            Box::pin(async move { Outcome::Sent(engine.send(&key(FIFO), vec![message]).await) });
        self.start(
            Request::Send {
                client,
                queue: FIFO,
                tags: vec![tag],
            },
            future,
        )
    }

    #[allow(clippy::too_many_arguments)]
    fn receive(
        &mut self,
        client: u8,
        queue: usize,
        max: u8,
        visibility_ms: Millis,
        wait_ms: Millis,
        protocol: Protocol,
        attempt: bool,
    ) -> Result<(), Violation> {
        let tags: Vec<u64> = self
            .msgs
            .iter()
            .filter(|(_, m)| m.may_be_in(queue))
            .map(|(t, _)| *t)
            .collect();
        for tag in tags {
            self.receive_may_reach(tag, queue);
        }
        let client_state = &mut self.clients[usize::from(client)];
        let attempt_id = attempt.then(|| {
            client_state
                .attempt
                .get_or_insert_with(|| {
                    client_state.attempts_made += 1;
                    format!("a{client}-{}", client_state.attempts_made)
                })
                .clone()
        });
        if let Some(id) = &attempt_id {
            self.attempt_started.insert(id.clone(), self.tick);
        }
        let options = ReceiveOptions {
            max_messages: usize::from(max),
            visibility_ms: Some(visibility_ms),
            wait_ms: Some(wait_ms),
            dead_letter: if protocol == Protocol::KubeMq {
                DeadLetterTiming::OnRelease
            } else {
                DeadLetterTiming::OnReceive
            },
            attempt_id: attempt_id.clone(),
            consumer: None,
        };
        let engine = self.engine.clone();
        let future =
            Box::pin(async move { Outcome::Received(engine.receive(&key(queue), options).await) });
        self.start(
            Request::Receive {
                client,
                queue,
                visibility_ms,
                protocol,
                waits: wait_ms > 0,
                attempt_id,
            },
            future,
        )
    }

    /// What a receive of `queue` may do to message `tag` beyond delivering it: count a receive, and once the
    /// count may have reached a dead-letter threshold, move it (the queue's policy or its own) or drop it (its
    /// own policy without a queue).
    fn receive_may_reach(&mut self, tag: u64, queue: usize) {
        let setup = &self.scenario.setup;
        let queue_policy = match queue {
            STANDARD => Some((DEAD_LETTERS, setup.max_receive_count[0])),
            FIFO if setup.fifo_redrive => Some((FIFO_DEAD_LETTERS, setup.max_receive_count[1])),
            _ => None,
        };
        // On a standard queue a KubeMQ receive releases a used-up delivery into the dead-letter queue as soon
        // as it lapses (any later request of the queue, or a sweep, moves it), so the receive that uses up the
        // count already may lead to a move; a FIFO queue's receives (SQS) move only on the next receive.
        let used_up = |seen: u32, n: u32| if is_fifo(queue) { seen > n } else { seen >= n };
        let tick = self.tick;
        let Some(msg) = self.msgs.get_mut(&tag) else {
            return;
        };
        msg.receives_seen += 1;
        let by_own_rule = match msg.own_redrive {
            OwnRedrive::ToQueue(n) if used_up(msg.receives_seen, n) => {
                // A move by its own rule makes a fresh message without the rule: from then on the queue's
                // policy applies to it (a re-queue may take it to a queue that has one).
                msg.own_rule_maybe_cleared = true;
                Some(OWN_DEAD_LETTERS)
            }
            OwnRedrive::Drop(n) if used_up(msg.receives_seen, n) => {
                msg.maybe_gone.get_or_insert(tick);
                None
            }
            _ => None,
        };
        let by_queue_policy = (msg.own_redrive == OwnRedrive::None || msg.own_rule_maybe_cleared)
            .then_some(queue_policy)
            .flatten()
            .filter(|(_, n)| used_up(msg.receives_seen, *n))
            .map(|(target, _)| target);
        for target in [by_own_rule, by_queue_policy].into_iter().flatten() {
            if let Some(msg) = self.msgs.get_mut(&tag) {
                msg.moved_possible = true;
            }
            self.add_location(tag, target);
        }
    }

    /// Message `tag` may now be in `queue` too; a long poll already waiting there may receive it.
    fn add_location(&mut self, tag: u64, queue: usize) {
        let Some(msg) = self.msgs.get_mut(&tag) else {
            return;
        };
        if msg.may_be_in(queue) {
            return;
        }
        msg.locations |= 1 << queue;
        self.waiting_receives_may_reach(tag, queue);
    }

    fn crash(&mut self, kept: usize) -> Result<(), Violation> {
        self.stats.crashes += 1;
        self.stats.restarts += 1;
        let doubtful = self.inflight.len() as u64;
        self.stats.in_doubt += doubtful;
        // Clients lose their connections: every unanswered request is in doubt.
        self.inflight.clear();
        for client in &mut self.clients {
            client.attempt = None;
        }
        self.stats.lost_commits += self.store.crash(kept) as u64;
        self.note(|| format!("{doubtful} requests in doubt"));
        self.reopen()
    }

    fn reopen(&mut self) -> Result<(), Violation> {
        match open(&self.store, &self.clock) {
            Ok(engine) => {
                self.engine = Arc::new(engine);
                Ok(())
            }
            Err(error) => Err(self.violation(
                "restart failed",
                format!("the engine did not open from what the store holds: {error}"),
            )),
        }
    }

    // ----- judging answers -----

    fn judge(&mut self, flight: InFlight, outcome: Outcome) -> Result<(), Violation> {
        let succeeded = match &outcome {
            Outcome::Sent(r) => r.is_ok(),
            Outcome::SentEach(r) => r.as_ref().is_ok_and(|v| v.iter().any(Result::is_ok)),
            Outcome::Received(r) => r.as_ref().is_ok_and(|m| !m.is_empty()),
            Outcome::Changed(r) => r.is_ok(),
            Outcome::Updated(r) => r.is_ok(),
            Outcome::Deleted(r) => r
                .as_ref()
                .is_ok_and(|v| v.iter().any(|o| matches!(o, Ok(DeleteOutcome::Deleted)))),
            Outcome::Moved(r) => r.is_ok(),
            Outcome::Purged(r) => r.is_ok(),
            Outcome::TaskStarted(r) => r.is_ok(),
            Outcome::Driven(_) => false,
        };
        if succeeded {
            self.stats.acknowledged += 1;
            if flight.store_failed {
                return Err(self.violation(
                    "success after the store failed",
                    format!(
                        "{:?} started at step {} after the store fail-stopped, yet was answered with success",
                        flight.request, flight.step
                    ),
                ));
            }
        }
        match outcome {
            Outcome::Sent(Ok(sent)) => self.judge_sent(&flight, sent.into_iter().map(Ok).collect()),
            Outcome::SentEach(Ok(results)) => self.judge_sent(&flight, results),
            Outcome::Received(Ok(messages)) => self.judge_received(&flight, messages),
            Outcome::Changed(Ok(until)) => {
                let Request::Change { tag, receipt } = &flight.request else {
                    unreachable!("a change answers a change")
                };
                self.note(|| format!("-> m{tag} invisible until t+{}", until - CLOCK_START_MS));
                let ticks = (flight.tick, flight.tick);
                self.grant(*tag, ticks, until, receipt.clone(), None);
                Ok(())
            }
            Outcome::Updated(Ok(updated)) => {
                let Request::Update {
                    client,
                    tag,
                    old_receipt,
                } = &flight.request
                else {
                    unreachable!("an update answers an update")
                };
                for held in &mut self.clients[usize::from(*client)].held {
                    if held.receipt == *old_receipt {
                        held.receipt =
                            wire_receipt(held.protocol, &held.message_id, &updated.receipt);
                    }
                }
                self.note(|| format!("-> m{tag} updated, new receipt"));
                let ticks = (flight.tick, flight.tick);
                self.grant(*tag, ticks, updated.visible_at, updated.receipt, None);
                Ok(())
            }
            Outcome::Deleted(Ok(outcomes)) => {
                let Request::Delete { tags } = &flight.request else {
                    unreachable!("a delete answers a delete")
                };
                for (tag, result) in tags.iter().zip(&outcomes) {
                    if let Ok(DeleteOutcome::Deleted) = result {
                        self.note(|| format!("-> m{tag} deleted"));
                        if let Some(msg) = self.msgs.get_mut(tag) {
                            msg.deleted.get_or_insert(flight.tick);
                        }
                        if self.durable_tags().contains_key(tag) {
                            return Err(self.violation(
                                "acknowledged delete not durable",
                                format!("m{tag}'s delete was acknowledged while the store still holds it"),
                            ));
                        }
                    } else {
                        self.note(|| format!("-> m{tag}: {result:?}"));
                    }
                }
                Ok(())
            }
            Outcome::Moved(Ok(())) => {
                let Request::Move { tag } = flight.request else {
                    unreachable!("a move answers a move")
                };
                self.note(|| format!("-> m{tag} moved"));
                self.expect_durable(tag, "acknowledged move not durable")
            }
            Outcome::Sent(Err(e))
            | Outcome::Received(Err(e))
            | Outcome::Changed(Err(e))
            | Outcome::Moved(Err(e))
            | Outcome::Driven(Err(e))
            | Outcome::Purged(Err(e))
            | Outcome::SentEach(Err(e))
            | Outcome::Deleted(Err(e))
            | Outcome::Updated(Err(e)) => {
                self.stats.errors += 1;
                self.note(|| format!("-> error (in doubt): {e}"));
                Ok(())
            }
            Outcome::TaskStarted(Err(e)) => {
                self.stats.errors += 1;
                self.note(|| format!("-> error: {e}"));
                Ok(())
            }
            Outcome::Purged(Ok(n)) => {
                self.note(|| format!("-> purged {n}"));
                Ok(())
            }
            Outcome::TaskStarted(Ok(task)) => {
                self.note(|| format!("-> task {} started, {} to move", task.number, task.to_move));
                Ok(())
            }
            Outcome::Driven(Ok(())) => Ok(()),
        }
    }

    /// Records a visibility window granted by an acknowledged request that started at tick `at` and made
    /// the grant by tick `granted_by`.
    fn grant(
        &mut self,
        tag: u64,
        (at, granted_by): (u64, u64),
        until: Millis,
        receipt: String,
        queue: Option<usize>,
    ) {
        if let Some(msg) = self.msgs.get_mut(&tag) {
            if msg.window.as_ref().is_none_or(|w| w.at < at) {
                let queue = queue
                    .or_else(|| msg.window.as_ref().map(|w| w.queue))
                    .unwrap_or(msg.origin);
                msg.window = Some(Window {
                    at,
                    granted_by,
                    until,
                    queue,
                    receipt,
                });
            }
        }
    }

    fn judge_sent(
        &mut self,
        flight: &InFlight,
        results: Vec<EngineResult<SentMessage>>,
    ) -> Result<(), Violation> {
        let Request::Send {
            client,
            queue,
            tags,
        } = &flight.request
        else {
            unreachable!("a send answers a send")
        };
        let durable = self.durable_tags();
        for (&tag, result) in tags.iter().zip(results) {
            let sent = match result {
                Ok(sent) => sent,
                Err(error) => {
                    // Refused on its own (send_each): never stored.
                    self.note(|| format!("-> m{tag} refused: {error}"));
                    if let Some(msg) = self.msgs.get_mut(&tag) {
                        msg.never_stored = true;
                    }
                    continue;
                }
            };
            let retry_of = self.msgs[&tag].retry_of;
            if let Some(original) = retry_of {
                self.check_dedup(tag, original, flight, &sent)?;
            }
            if sent.duplicate {
                self.note(|| format!("-> m{tag} is a duplicate (not stored)"));
                if let Some(msg) = self.msgs.get_mut(&tag) {
                    msg.never_stored = true;
                }
                continue;
            }
            self.note(|| {
                format!(
                    "-> m{tag} stored as seq {} of {}",
                    sent.seq, QUEUE_NAMES[*queue]
                )
            });
            let tick = self.tick;
            let msg = self.msgs.get_mut(&tag).expect("registered at its send");
            msg.acked_tick = Some(tick);
            msg.message_id = Some(sent.message_id);
            msg.seq_in_origin = Some(sent.seq);
            self.by_id.insert(sent.message_id, tag);
            let gone = msg.maybe_gone.is_some();
            if !durable.contains_key(&tag) && !gone && !self.maybe_expired(tag) {
                return Err(self.violation(
                    "acknowledged send not durable",
                    format!(
                        "client {client}'s send of m{tag} to {} was acknowledged before the store held it",
                        QUEUE_NAMES[*queue]
                    ),
                ));
            }
        }
        Ok(())
    }

    /// A FIFO send repeated with the same deduplication id: inside the interval after an acknowledged first
    /// send it is that send's duplicate; after it, a message of its own.
    fn check_dedup(
        &self,
        tag: u64,
        original: u64,
        flight: &InFlight,
        sent: &SentMessage,
    ) -> Result<(), Violation> {
        let first = &self.msgs[&original];
        let (Some(acked_tick), Some(first_id)) = (first.acked_tick, first.message_id) else {
            return Ok(()); // the first send is in doubt: either answer is right
        };
        if acked_tick > flight.tick {
            return Ok(()); // the retry overtook the first send's answer
        }
        let forgotten_at = first.send_at + DEDUP_INTERVAL_MS;
        if flight.started_at < forgotten_at {
            if !sent.duplicate || sent.message_id != first_id {
                return Err(self.violation(
                    "deduplication",
                    format!(
                        "m{tag} repeats m{original}'s deduplication id {} ms after it, inside the {} ms interval, yet was stored as a new message",
                        flight.started_at - first.send_at,
                        DEDUP_INTERVAL_MS
                    ),
                ));
            }
        } else if sent.duplicate && sent.message_id == first_id {
            return Err(self.violation(
                "deduplication",
                format!(
                    "m{tag} repeats m{original}'s deduplication id {} ms after it, past the {} ms interval, yet was answered as its duplicate",
                    flight.started_at - first.send_at,
                    DEDUP_INTERVAL_MS
                ),
            ));
        }
        Ok(())
    }

    fn judge_received(
        &mut self,
        flight: &InFlight,
        messages: Vec<Message>,
    ) -> Result<(), Violation> {
        let Request::Receive {
            client,
            queue,
            visibility_ms,
            protocol,
            waits,
            ref attempt_id,
        } = flight.request
        else {
            unreachable!("a receive answers a receive")
        };
        // A retry of this receive's attempt that started after it may have reset the visibility of what it
        // delivered, to the retry's visibility: its window binds only until then.
        let retried_at = attempt_id
            .as_ref()
            .and_then(|id| self.attempt_started.get(id).copied())
            .filter(|&started| started > flight.tick);
        // A long poll may have delivered at any poll up to this answer; any other receive delivers in its
        // first poll.
        let granted_by = if waits { self.tick } else { flight.tick };
        if !messages.is_empty() {
            self.clients[usize::from(client)].attempt = None;
        }
        self.stats.deliveries += messages.len() as u64;
        let durable_states = self.durable_states();
        let mut delivered_here: Vec<Delivered> = Vec::new();
        let all_here: Vec<u64> = messages
            .iter()
            .filter_map(|m| tag_of(&m.payload.body))
            .collect();
        for message in &messages {
            let Some(tag) = tag_of(&message.payload.body) else {
                return Err(self.violation(
                    "unknown message delivered",
                    format!("a body nobody sent: {:?}", message.payload.body),
                ));
            };
            let Some(msg) = self.msgs.get(&tag).cloned() else {
                return Err(self.violation(
                    "unknown message delivered",
                    format!("m{tag} was never sent"),
                ));
            };
            let delivered_at = message.state.visible_at.saturating_sub(visibility_ms);
            let receipt = message.receipt.clone().unwrap_or_default();
            self.note(|| {
                format!(
                    "-> m{tag} (seq {}, receive count {}) to client {client}, invisible until t+{}",
                    message.seq,
                    message.state.receive_count,
                    message.state.visible_at - CLOCK_START_MS
                )
            });
            if msg.never_stored {
                return Err(self.violation(
                    "never-stored message delivered",
                    format!("m{tag} was answered as a duplicate or refused, yet was delivered"),
                ));
            }
            if let Some(deleted) = msg.deleted.filter(|&d| d < flight.tick) {
                return Err(self.violation(
                    "delivered after acknowledged delete",
                    format!("m{tag}'s delete (started at tick {deleted}) was acknowledged, yet it was delivered again"),
                ));
            }
            if message.state.receive_count == 0
                || (!msg.moved_possible
                    && message.state.generation > msg.generation_seen
                    && message.state.receive_count < msg.receive_count_seen)
            {
                return Err(self.violation(
                    "receive count went back",
                    format!(
                        "m{tag} was delivered with receive count {} after an acknowledged delivery with {}",
                        message.state.receive_count, msg.receive_count_seen
                    ),
                ));
            }
            if let Some(window) = &msg.window {
                if window.granted_by < flight.tick
                    && msg.touched <= window.at
                    && delivered_at < window.until
                    && window.receipt != receipt
                {
                    return Err(self.violation(
                        "delivered inside a visibility window",
                        format!(
                            "m{tag} was delivered at t+{} to client {client} although an acknowledged request kept it invisible until t+{}",
                            delivered_at - CLOCK_START_MS,
                            window.until - CLOCK_START_MS
                        ),
                    ));
                }
            }
            if is_fifo(queue) {
                self.check_fifo(
                    tag,
                    queue,
                    message,
                    (flight.tick, delivered_at),
                    (&delivered_here, &all_here),
                )?;
            }
            // The delivery is durable: the store holds the message with this generation or a later one, or a
            // later request has already removed or moved it.
            if let Some(queue_id) = self.queue_id(queue) {
                match durable_states.get(&(queue_id, message.seq)) {
                    Some(generation) if *generation < message.state.generation => {
                        return Err(self.violation(
                            "acknowledged receive not durable",
                            format!(
                                "m{tag} was delivered with generation {} while the store holds generation {generation}",
                                message.state.generation
                            ),
                        ));
                    }
                    _ => {}
                }
            }
            delivered_here.push((tag, message.seq, message.payload.group.clone()));
        }
        for message in messages {
            let Some(tag) = tag_of(&message.payload.body) else {
                continue;
            };
            let receipt = message.receipt.unwrap_or_default();
            let wire = wire_receipt(protocol, &message.payload.message_id, &receipt);
            self.grant(
                tag,
                (flight.tick, granted_by),
                message.state.visible_at,
                receipt.clone(),
                Some(queue),
            );
            self.add_location(tag, queue);
            if let Some(msg) = self.msgs.get_mut(&tag) {
                if let Some(retried_at) = retried_at {
                    msg.touched = msg.touched.max(retried_at);
                }
                // Answers may come back in another order than the deliveries happened (a long poll started
                // earlier delivers later); the generation tells which delivery is the later one.
                if message.state.generation > msg.generation_seen {
                    msg.generation_seen = message.state.generation;
                    msg.receive_count_seen = message.state.receive_count;
                }
            }
            let held = &mut self.clients[usize::from(client)].held;
            held.retain(|h| h.tag != tag);
            held.push_back(Held {
                queue,
                tag,
                receipt: wire,
                protocol,
                message_id: message.payload.message_id,
            });
            if held.len() > HELD_RECEIPTS_MAX {
                held.pop_front();
            }
        }
        Ok(())
    }

    /// FIFO: a group delivers in send order, and one message of a group at a time.
    fn check_fifo(
        &self,
        tag: u64,
        queue: usize,
        message: &Message,
        (tick, delivered_at): (u64, Millis),
        (delivered_here, all_here): (&[Delivered], &[u64]),
    ) -> Result<(), Violation> {
        let group = message.payload.group.clone();
        if let Some((earlier, seq, _)) = delivered_here
            .iter()
            .find(|(_, seq, g)| *g == group && *seq > message.seq)
        {
            return Err(self.violation(
                "FIFO order",
                format!(
                    "one receive delivered m{earlier} (seq {seq}) before m{tag} (seq {}) of the same group",
                    message.seq
                ),
            ));
        }
        let msg = &self.msgs[&tag];
        for (&other_tag, other) in &self.msgs {
            if other_tag == tag || other.group != group {
                continue;
            }
            // One receive may take several of a group, in order (a retried attempt gets them all again).
            if all_here.contains(&other_tag) {
                continue;
            }
            // Gone by the time the answer came (a receive answers only what still exists when it reads the
            // payloads, after its commit): then the client never sees it, and nothing was out of order.
            let still_there = other.maybe_gone.is_none() && !self.maybe_expired(other_tag);
            if let Some(window) = &other.window {
                if window.queue == queue
                    && window.granted_by < tick
                    && other.touched <= window.at
                    && delivered_at < window.until
                    && still_there
                {
                    return Err(self.violation(
                        "two of a FIFO group in flight",
                        format!(
                            "m{tag} was delivered while m{other_tag} of its group {group:?} was in flight until t+{}",
                            window.until - CLOCK_START_MS
                        ),
                    ));
                }
            }
            // Order: an earlier message of the group, never moved, still there, holds this one back.
            let earlier = msg.origin == queue
                && other.origin == queue
                && !msg.moved_possible
                && !other.moved_possible
                && other.acked_tick.is_some_and(|t| t < tick)
                && other.seq_in_origin.is_some_and(|s| s < message.seq)
                && still_there;
            if earlier {
                return Err(self.violation(
                    "FIFO order",
                    format!(
                        "m{tag} (seq {}) was delivered while m{other_tag} (seq {:?}), sent before it in group {group:?}, is still in the queue",
                        message.seq, other.seq_in_origin
                    ),
                ));
            }
        }
        Ok(())
    }

    // ----- the store as it really is -----

    fn queue_id(&self, queue: usize) -> Option<QueueId> {
        let snapshot = self.store.durable().load_queues().ok()?;
        snapshot
            .queues
            .iter()
            .find(|(record, _)| record.key == key(queue))
            .map(|(record, _)| record.id)
    }

    /// Every stored message's generation, by (queue, seq).
    fn durable_states(&self) -> HashMap<(QueueId, Seq), u32> {
        let mut states = HashMap::new();
        let _ = self
            .store
            .durable()
            .load_messages(&mut |queue, seq, state| {
                states.insert((queue, seq), state.generation);
            });
        states
    }

    /// Every stored message's tag, with how many times it is stored.
    fn durable_tags(&self) -> BTreeMap<u64, u32> {
        let durable = self.store.durable();
        let mut seqs: BTreeMap<QueueId, Vec<Seq>> = BTreeMap::new();
        let _ =
            durable.load_messages(&mut |queue, seq, _| seqs.entry(queue).or_default().push(seq));
        let mut tags = BTreeMap::new();
        for (queue, seqs) in seqs {
            if let Ok(payloads) = durable.read_payloads(queue, &seqs) {
                for payload in payloads.into_iter().flatten() {
                    // A body that is no tag counts under u64::MAX: the scan reports it.
                    let tag = tag_of(&payload.body).unwrap_or(u64::MAX);
                    *tags.entry(tag).or_insert(0) += 1;
                }
            }
        }
        tags
    }

    /// The message may have expired by `at`: its earliest possible expiry is its send plus the shortest
    /// retention of any queue it may be in (a dead-letter move counts retention from the send too).
    fn maybe_expired_at(&self, tag: u64, at: Millis) -> bool {
        let msg = &self.msgs[&tag];
        let retention = (0..QUEUE_NAMES.len())
            .filter(|&q| msg.may_be_in(q))
            .map(|q| self.scenario.setup.retention_ms[q])
            .min()
            .unwrap_or(0);
        at >= msg.send_at.saturating_add(retention)
    }

    fn maybe_expired(&self, tag: u64) -> bool {
        self.maybe_expired_at(tag, self.clock.now())
    }

    fn expect_durable(&self, tag: u64, kind: &'static str) -> Result<(), Violation> {
        let msg = &self.msgs[&tag];
        if msg.maybe_gone.is_none()
            && !self.maybe_expired(tag)
            && !self.durable_tags().contains_key(&tag)
        {
            return Err(self.violation(kind, format!("m{tag} is not in the store")));
        }
        Ok(())
    }

    // ----- checks after every step -----

    fn check_step(&mut self) -> Result<(), Violation> {
        self.engine.check_invariants();
        let stored = self.durable_tags();
        for (&tag, &count) in &stored {
            let Some(msg) = self.msgs.get(&tag) else {
                return Err(self.violation(
                    "unknown message stored",
                    format!("the store holds a message nobody sent (tag {tag})"),
                ));
            };
            if count > 1 {
                return Err(self.violation(
                    "message stored twice",
                    format!("the store holds m{tag} {count} times"),
                ));
            }
            if msg.never_stored {
                return Err(self.violation(
                    "never-stored message stored",
                    format!(
                        "m{tag} was answered as a duplicate or refused, yet the store holds it"
                    ),
                ));
            }
            if msg.deleted.is_some() {
                return Err(self.violation(
                    "acknowledged delete undone",
                    format!("m{tag}'s delete was acknowledged, yet the store holds it"),
                ));
            }
        }
        for (&tag, msg) in &self.msgs {
            let must_exist = msg.acked_tick.is_some()
                && msg.maybe_gone.is_none()
                && msg.deleted.is_none()
                && !msg.never_stored;
            if must_exist && !stored.contains_key(&tag) && !self.maybe_expired(tag) {
                return Err(self.violation(
                    "acknowledged message lost",
                    format!(
                        "m{tag}, sent to {} and acknowledged, is no longer in the store (nothing that could remove it was asked for)",
                        QUEUE_NAMES[msg.origin]
                    ),
                ));
            }
        }
        Ok(())
    }

    /// With nothing pending in the store, the engine's statistics equal a recount of what the store holds.
    fn check_quiescent(&mut self) -> Result<(), Violation> {
        if self.store.failed() || self.store.pending_count() > 0 {
            return Ok(());
        }
        // Brings every queue up to now so that no statistics call below changes anything. One pass may not
        // be enough: a dead-letter move can land an already expired message in a queue the sweep visited
        // before, and the next look at that queue expires it.
        let keys: Vec<QueueKey> = (0..QUEUE_NAMES.len()).map(key).collect();
        for _ in 0..SETTLE_PASSES_MAX {
            self.engine.sweep();
            for key in &keys {
                let _ = self.engine.stats(key);
            }
            if self.store.pending_count() == 0 {
                break;
            }
            self.store.flush(usize::MAX);
            self.poll_all()?;
        }
        if self.store.pending_count() > 0 {
            return Ok(());
        }
        let now = self.clock.now();
        let snapshot = self
            .store
            .durable()
            .load_queues()
            .map_err(|e| self.violation("store unreadable", e.to_string()))?;
        let mut states: HashMap<QueueId, Vec<(Seq, veil_core::MessageState)>> = HashMap::new();
        let _ = self
            .store
            .durable()
            .load_messages(&mut |queue, seq, state| {
                states.entry(queue).or_default().push((seq, state))
            });
        self.stats.recounts += 1;
        for (record, counters) in &snapshot.queues {
            let stats = match self.engine.stats(&record.key) {
                Ok(stats) => stats,
                Err(error) => {
                    return Err(self.violation(
                        "statistics",
                        format!(
                            "the stored queue {} is unknown to the engine: {error}",
                            record.key
                        ),
                    ))
                }
            };
            let stored = states.remove(&record.id).unwrap_or_default();
            let mut recount = veil_core::QueueStats {
                counters: *counters,
                ..Default::default()
            };
            for (seq, state) in &stored {
                if state.visible_at <= now {
                    recount.visible += 1;
                } else if state.receive_count > 0 {
                    recount.hidden += 1;
                } else {
                    recount.delayed += 1;
                }
                recount.stored_bytes += u64::from(state.body_bytes);
                recount.seq_range = Some(match recount.seq_range {
                    None => (*seq, *seq),
                    Some((first, _)) => (first, *seq),
                });
            }
            // The index's "oldest" is its lowest sequence number's age.
            recount.oldest_age_ms = stored
                .first()
                .map_or(0, |(_, s)| now.saturating_sub(s.sent_at));
            if stats != recount {
                return Err(self.violation(
                    "statistics",
                    format!(
                        "{}: the engine says {stats:?}, a recount of the store says {recount:?}",
                        record.key
                    ),
                ));
            }
        }
        Ok(())
    }

    // ----- the end: heal, pass every timeout, drain -----

    fn liveness(&mut self) -> Result<(), Violation> {
        // Heal: a fail-stopped store needs a restart; otherwise the disk catches up.
        if self.store.failed() {
            self.crash(0)?;
        }
        self.store.flush(usize::MAX);
        self.poll_all()?;
        // Long polls still waiting end at their deadline.
        self.clock
            .advance_ms(VISIBILITY_MS_MAX + DELAY_MS_MAX + RECEIVE_WAIT_MS_MAX + 1_000);
        for _ in 0..SETTLE_PASSES_MAX {
            self.store.flush(usize::MAX);
            self.poll_all()?;
        }
        if !self.inflight.is_empty() {
            return Err(self.violation(
                "stuck request",
                format!(
                    "{} requests never answered with the store healed and every wait passed",
                    self.inflight.len()
                ),
            ));
        }
        // What those last answers made invisible becomes visible again.
        self.clock
            .advance_ms(VISIBILITY_MS_MAX + DELAY_MS_MAX + RECEIVE_WAIT_MS_MAX + 1_000);
        // A restart as well: what is recovered must deliver too.
        self.reopen()?;
        self.stats.restarts += 1;
        self.check_step()?;
        let mut drained: BTreeMap<u64, usize> = BTreeMap::new();
        loop {
            let mut progress = false;
            for queue in 0..QUEUE_NAMES.len() {
                if !self.engine.queue_exists(&key(queue)) {
                    continue;
                }
                for _ in 0..DRAIN_RECEIVES_MAX {
                    let got = self.drain_once(queue, &mut drained)?;
                    if got == 0 {
                        break;
                    }
                    progress = true;
                }
            }
            // Move tasks still running move what they have to (nothing else would).
            let engine = self.engine.clone();
            let _ = self.settle(Box::pin(async move { engine.drive_move_tasks().await }));
            if !progress {
                break;
            }
        }
        let now = self.clock.now();
        for (&tag, msg) in &self.msgs {
            let must_exist = msg.acked_tick.is_some()
                && msg.maybe_gone.is_none()
                && msg.deleted.is_none()
                && !msg.never_stored;
            if must_exist && !drained.contains_key(&tag) && !self.maybe_expired_at(tag, now) {
                return Err(self.violation(
                    "liveness",
                    format!(
                        "m{tag}, sent to {} and acknowledged, was never delivered by the final drain",
                        QUEUE_NAMES[msg.origin]
                    ),
                ));
            }
        }
        self.stats.drained += drained.len() as u64;
        Ok(())
    }

    /// One receive of the drain and the delete of what it got, both through the checked path.
    fn drain_once(
        &mut self,
        queue: usize,
        drained: &mut BTreeMap<u64, usize>,
    ) -> Result<usize, Violation> {
        let client = CLIENTS;
        self.tick += 1;
        self.receive(
            client,
            queue,
            RECEIVE_MAX,
            DRAIN_VISIBILITY_MS,
            0,
            Protocol::Sqs,
            false,
        )?;
        self.store.flush(usize::MAX);
        self.poll_all()?;
        let held: Vec<Held> = self.clients[usize::from(client)].held.drain(..).collect();
        if held.is_empty() {
            return Ok(0);
        }
        for h in &held {
            *drained.entry(h.tag).or_insert(0) += 1;
        }
        let count = held.len();
        let receipts: Vec<String> = held.iter().map(|h| h.receipt.clone()).collect();
        let tags: Vec<u64> = held.iter().map(|h| h.tag).collect();
        self.tick += 1;
        for &tag in &tags {
            self.maybe_gone(tag);
        }
        let engine = self.engine.clone();
        let future = Box::pin(async move {
            let refs: Vec<&str> = receipts.iter().map(String::as_str).collect();
            Outcome::Deleted(
                engine
                    .delete_batch(&key(queue), &refs, ReceiptRule::AnyIssued)
                    .await,
            )
        });
        self.start(Request::Delete { tags }, future)?;
        self.store.flush(usize::MAX);
        self.poll_all()?;
        self.check_step()?;
        Ok(count)
    }
}
