//! The executor: each request is a future the simulator polls itself, in operation order, with no runtime,
//! threads or real time, so that a seed replays the same run. Here are the requests in flight, their polling,
//! the setup of the queues, and crashes and restarts.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

use veil_core::{
    Clock, DeleteOutcome, Engine, EngineResult, ManualClock, Message, Millis, MoveTaskError,
    MoveTaskRecord, QueueConfig, ReceiptKey, RedrivePolicy, SentMessage, Updated,
};

use super::model::Held;
use super::{key, Sim, Violation};
use crate::backend::Backend;
use crate::limits::*;
use crate::ops::*;

pub(super) enum Outcome {
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
pub(super) enum Request {
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
    /// `queue`: where the receipt says the message is, which is where the window it grants holds it.
    Change {
        tag: u64,
        queue: usize,
        receipt: String,
    },
    Update {
        client: u8,
        tag: u64,
        queue: usize,
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

impl Outcome {
    /// Whether the answer is a success that changed something (a receive that got nothing changed nothing).
    pub(super) fn succeeded(&self) -> bool {
        match self {
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
        }
    }
}

pub(super) type Pending = Pin<Box<dyn Future<Output = Outcome>>>;

pub(super) struct InFlight {
    pub(super) step: usize,
    pub(super) tick: u64,
    pub(super) started_at: Millis,
    /// The store had fail-stopped when it started: no success may come back.
    pub(super) store_failed: bool,
    pub(super) request: Request,
    pub(super) future: Pending,
    pub(super) polls: u32,
}

fn receipts() -> ReceiptKey {
    ReceiptKey::new([7; veil_core::receipt::SECRET_BYTES])
}

pub(super) fn open(store: &dyn Backend, clock: &ManualClock) -> EngineResult<Engine> {
    Engine::open(store.engine_store(), Arc::new(clock.clone()), receipts())
}

impl Sim<'_> {
    pub(super) fn setup(&mut self) -> Result<(), Violation> {
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
    pub(super) fn settle<T>(&mut self, mut future: Pin<Box<dyn Future<Output = T> + '_>>) -> T {
        let mut cx = Context::from_waker(Waker::noop());
        loop {
            if let Poll::Ready(value) = future.as_mut().poll(&mut cx) {
                return value;
            }
            self.store.flush(usize::MAX);
        }
    }

    pub(super) fn start(&mut self, request: Request, future: Pending) -> Result<(), Violation> {
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
    pub(super) fn poll_one(&mut self, index: usize) -> Result<(), Violation> {
        let mut cx = Context::from_waker(Waker::noop());
        let flight = &mut self.inflight[index];
        flight.polls += 1;
        let mut polled = flight.future.as_mut().poll(&mut cx);
        // The real store answers from its own thread: once it has, the request can go on in this step.
        if polled.is_pending() && self.store.settle() {
            let flight = &mut self.inflight[index];
            flight.polls += 1;
            polled = flight.future.as_mut().poll(&mut cx);
        }
        if let Poll::Ready(outcome) = polled {
            let flight = self.inflight.remove(index);
            if flight.step != self.step && flight.polls > 2 {
                self.stats.slow_commits += 1;
            }
            self.judge(flight, outcome)?;
        }
        Ok(())
    }

    pub(super) fn poll_all(&mut self) -> Result<(), Violation> {
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

    /// The held receipt `pick` of `client`, if it holds any, decoded.
    pub(super) fn held(&self, client: u8, pick: u16) -> Result<Option<Held>, Violation> {
        let held = &self.clients[usize::from(client)].held;
        if held.is_empty() {
            return Ok(None);
        }
        self.decoded(&held[usize::from(pick) % held.len()])
            .map(Some)
    }

    /// A held receipt with the engine's receipt in it, taken out of its protocol's form the way the front-end
    /// does: an Azure pop receipt must decode and name the message the request names.
    pub(super) fn decoded(&self, held: &Held) -> Result<Held, Violation> {
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

    /// A crash the scenario asks for: now, or (on the simulated disk) at a later write or sync, after which
    /// [`Sim::restart_if_the_power_went`] restarts.
    pub(super) fn crash(&mut self, kept: usize) -> Result<(), Violation> {
        match self.store.crash(kept) {
            Some(lost) => self.restart(lost),
            None => Ok(()),
        }
    }

    pub(super) fn restart_if_the_power_went(&mut self) -> Result<(), Violation> {
        if self.store.power_went() {
            self.note(|| "the power went".into());
            self.restart(0)?;
        }
        Ok(())
    }

    /// The process died, losing `lost` pending commits: clients lose their answers, the store recovers from
    /// what the disk kept, and the engine starts from it.
    fn restart(&mut self, lost: usize) -> Result<(), Violation> {
        self.stats.crashes += 1;
        self.stats.restarts += 1;
        let doubtful = self.inflight.len() as u64;
        self.stats.in_doubt += doubtful;
        // Clients lose their connections: every unanswered request is in doubt.
        self.inflight.clear();
        for client in &mut self.clients {
            client.attempt = None;
        }
        self.stats.lost_commits += lost as u64;
        self.note(|| format!("{doubtful} requests in doubt"));
        if let Err(why) = self.store.recover() {
            return Err(self.violation("recovery failed", why));
        }
        self.reopen()
    }

    pub(super) fn reopen(&mut self) -> Result<(), Violation> {
        let mut opened = open(self.store.as_ref(), &self.clock);
        // A flipped bit the loaders read (and refused as corrupt) was in the read, not on the disk; but redb
        // keeps the page it read in its cache, so only a new store reads it again (docs/reliability.md,
        // "Deterministic simulation": redb checks page checksums only at open).
        for _ in 0..RECOVERY_ATTEMPTS_MAX {
            if opened.is_ok() || !self.store.reads_flip() {
                break;
            }
            self.stats.flips_detected += 1;
            if let Err(why) = self.store.recover() {
                return Err(self.violation("recovery failed", why));
            }
            opened = open(self.store.as_ref(), &self.clock);
        }
        match opened {
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
}
