//! What a run does, generated from its seed before anything executes: the queues it sets up and a list of
//! operations (client requests and faults). Operations name things by small indices resolved when they run
//! (`pick` chooses among the receipts a client holds then), so that any sub-list is still a valid run: the
//! shrinker drops operations freely.

use std::fmt;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use veil_core::Millis;

use crate::limits::*;

/// The simulated queues. A FIFO queue's dead-letter queue is FIFO too, as SQS requires.
pub const STANDARD: usize = 0;
pub const FIFO: usize = 1;
pub const DEAD_LETTERS: usize = 2;
pub const FIFO_DEAD_LETTERS: usize = 3;
/// KubeMQ-style: messages carry their own dead-letter rule naming `OWN_DEAD_LETTERS` (or none: dropped).
pub const EVENTS: usize = 4;
/// Not created by the setup: the engine creates it when a message's own rule first moves a message there.
pub const OWN_DEAD_LETTERS: usize = 5;
pub const QUEUE_NAMES: [&str; 6] = [
    "orders",
    "orders.fifo",
    "orders-dlq",
    "orders-dlq.fifo",
    "events",
    "events-dead",
];

pub fn is_fifo(queue: usize) -> bool {
    queue == FIFO || queue == FIFO_DEAD_LETTERS
}

/// The settings each run's queues get, drawn from its seed.
#[derive(Clone, Debug)]
pub struct Setup {
    pub retention_ms: [Millis; 6],
    pub delay_ms: [Millis; 6],
    /// The redrive policies' max receive count of `STANDARD` and `FIFO`.
    pub max_receive_count: [u32; 2],
    /// `FIFO` has a redrive policy (to `FIFO_DEAD_LETTERS`).
    pub fifo_redrive: bool,
    /// `FIFO` deduplicates ids per group rather than per queue.
    pub dedup_by_group: bool,
}

/// Which protocol's rules a receive and the settles of its messages follow.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Protocol {
    Sqs,
    Azure,
    KubeMq,
}

/// A message's own dead-letter rule (KubeMQ's MaxReceiveCount / MaxReceiveQueue).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OwnRedrive {
    None,
    ToQueue(u32),
    Drop(u32),
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Op {
    /// `count` messages in one request (`each`: KubeMQ's batch, judged message by message).
    Send {
        client: u8,
        queue: usize,
        count: u8,
        each: bool,
        group: u8,
        delay_ms: Option<Millis>,
        redrive: OwnRedrive,
    },
    /// Sends the client's last FIFO send again with the same deduplication id (a retry after a timeout).
    Retry {
        client: u8,
    },
    Receive {
        client: u8,
        queue: usize,
        max: u8,
        visibility_ms: Millis,
        wait_ms: Millis,
        protocol: Protocol,
        /// An SQS FIFO receive request attempt id (the client's own, reused until it gets messages).
        attempt: bool,
    },
    ChangeVisibility {
        client: u8,
        pick: u16,
        visibility_ms: Millis,
    },
    /// Azure's update: a new visibility, a new body and a new receipt.
    Update {
        client: u8,
        pick: u16,
        visibility_ms: Millis,
    },
    Delete {
        client: u8,
        pick: u16,
        /// Delete every receipt the client holds for the queue of the picked one, in one batch.
        batch: bool,
    },
    /// Re-queues a held message elsewhere (KubeMQ's re-queue).
    Move {
        client: u8,
        pick: u16,
        target: usize,
    },
    Purge {
        queue: usize,
    },
    /// A message move task out of a dead-letter queue: back to where each came from, or to `EVENTS`.
    StartMoveTask {
        queue: usize,
        to_origin: bool,
    },
    DriveMoveTasks,
    Sweep,
    /// Time passes.
    Advance {
        ms: Millis,
    },
    /// A big forward jump of the clock.
    Jump {
        ms: Millis,
    },
    /// The oldest `count` pending commits become durable (0: all of them).
    Flush {
        count: u8,
    },
    /// The oldest pending commit fails; the store fail-stops until a crash.
    FailCommit {
        reached_disk: bool,
    },
    /// The process dies with `kept` of its pending commits on disk, and restarts.
    Crash {
        kept: u8,
    },
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Op::Send {
                client,
                queue,
                count,
                each,
                group,
                delay_ms,
                redrive,
            } => {
                write!(
                    f,
                    "client {client}: send {count} to {}",
                    QUEUE_NAMES[*queue]
                )?;
                if *each {
                    write!(f, " (each judged alone)")?;
                }
                if is_fifo(*queue) {
                    write!(f, " group g{group}")?;
                }
                if let Some(ms) = delay_ms {
                    write!(f, " delay {ms} ms")?;
                }
                if *redrive != OwnRedrive::None {
                    write!(f, " own rule {redrive:?}")?;
                }
                Ok(())
            }
            Op::Retry { client } => write!(f, "client {client}: retry its last FIFO send"),
            Op::Receive {
                client,
                queue,
                max,
                visibility_ms,
                wait_ms,
                protocol,
                attempt,
            } => {
                write!(
                    f,
                    "client {client}: receive up to {max} from {} ({protocol:?}, visibility {visibility_ms} ms, wait {wait_ms} ms{})",
                    QUEUE_NAMES[*queue],
                    if *attempt { ", attempt id" } else { "" }
                )
            }
            Op::ChangeVisibility {
                client,
                pick,
                visibility_ms,
            } => write!(
                f,
                "client {client}: change visibility of held #{pick} to {visibility_ms} ms"
            ),
            Op::Update {
                client,
                pick,
                visibility_ms,
            } => write!(
                f,
                "client {client}: update held #{pick} (visibility {visibility_ms} ms, new body)"
            ),
            Op::Delete {
                client,
                pick,
                batch,
            } => {
                if *batch {
                    write!(
                        f,
                        "client {client}: delete held #{pick} and its queue-mates in one batch"
                    )
                } else {
                    write!(f, "client {client}: delete held #{pick}")
                }
            }
            Op::Move {
                client,
                pick,
                target,
            } => write!(
                f,
                "client {client}: move held #{pick} to {}",
                QUEUE_NAMES[*target]
            ),
            Op::Purge { queue } => write!(f, "purge {}", QUEUE_NAMES[*queue]),
            Op::StartMoveTask { queue, to_origin } => write!(
                f,
                "start a move task out of {} {}",
                QUEUE_NAMES[*queue],
                if *to_origin {
                    "back to the sources"
                } else {
                    "to events"
                }
            ),
            Op::DriveMoveTasks => write!(f, "drive move tasks"),
            Op::Sweep => write!(f, "sweep"),
            Op::Advance { ms } => write!(f, "clock +{ms} ms"),
            Op::Jump { ms } => write!(f, "clock jumps +{ms} ms"),
            Op::Flush { count: 0 } => write!(f, "store: flush all pending commits"),
            Op::Flush { count } => write!(f, "store: flush the oldest {count} pending commits"),
            Op::FailCommit { reached_disk } => write!(
                f,
                "store: the oldest pending commit fails ({}); the store fail-stops",
                if *reached_disk {
                    "its write reached the disk"
                } else {
                    "nothing written"
                }
            ),
            Op::Crash { kept } => write!(
                f,
                "crash with {kept} pending commits on disk, then restart from the store"
            ),
        }
    }
}

/// A run: its queues' settings and its operations.
#[derive(Clone, Debug)]
pub struct Scenario {
    pub seed: u64,
    pub setup: Setup,
    pub ops: Vec<Op>,
}

/// Generates seed `seed`'s run of `steps` operations. The same seed always gives the same scenario.
pub fn generate(seed: u64, steps: usize) -> Scenario {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut retention_ms = [0; 6];
    for r in &mut retention_ms {
        *r = rng.random_range(RETENTION_MS_MIN..=RETENTION_MS_MAX);
    }
    let mut delay_ms = [0; 6];
    for (queue, d) in delay_ms.iter_mut().enumerate() {
        if queue != OWN_DEAD_LETTERS && rng.random_bool(0.3) {
            *d = rng.random_range(1..=DELAY_MS_MAX);
        }
    }
    let setup = Setup {
        retention_ms,
        delay_ms,
        max_receive_count: [rng.random_range(1..=4), rng.random_range(1..=4)],
        fifo_redrive: rng.random_bool(0.5),
        dedup_by_group: rng.random_bool(0.3),
    };
    // Each seed has its own fault rates, so that some runs are calm and some are storms.
    let fault_weight = rng.random_range(0..=8u32);
    let flush_weight = rng.random_range(4..=30u32);
    let ops = (0..steps)
        .map(|_| op(&mut rng, fault_weight, flush_weight))
        .collect();
    Scenario { seed, setup, ops }
}

fn op(rng: &mut ChaCha8Rng, fault_weight: u32, flush_weight: u32) -> Op {
    let client = rng.random_range(0..CLIENTS);
    let pick = rng.random_range(0..64u16);
    let weights = [
        20,           // send
        3,            // retry
        20,           // receive
        4,            // change visibility
        2,            // update
        10,           // delete
        2,            // move
        1,            // purge
        1,            // start move task
        2,            // drive move tasks
        1,            // sweep
        10,           // advance
        1,            // jump
        flush_weight, // flush
        fault_weight, // fail a commit
        fault_weight, // crash
    ];
    let total: u32 = weights.iter().sum();
    let mut roll = rng.random_range(0..total);
    let mut kind = 0;
    while roll >= weights[kind] {
        roll -= weights[kind];
        kind += 1;
    }
    let visibility_ms = match rng.random_range(0..10) {
        0 => 0,
        1..=6 => rng.random_range(1..=VISIBILITY_MS_MAX),
        _ => rng.random_range(1..=10) * 1_000,
    };
    match kind {
        0 => {
            let queue = [STANDARD, FIFO, EVENTS, DEAD_LETTERS][rng.random_range(0..4)];
            let redrive = if queue == EVENTS {
                match rng.random_range(0..4) {
                    0 => OwnRedrive::ToQueue(rng.random_range(1..=3)),
                    1 => OwnRedrive::Drop(rng.random_range(1..=3)),
                    _ => OwnRedrive::None,
                }
            } else {
                OwnRedrive::None
            };
            Op::Send {
                client,
                queue,
                count: if rng.random_bool(0.7) {
                    1
                } else {
                    rng.random_range(2..=SEND_BATCH_MAX)
                },
                each: rng.random_bool(0.3),
                group: rng.random_range(0..FIFO_GROUPS),
                // SQS refuses a per-message delay on a FIFO queue; standard queues get one sometimes.
                delay_ms: (!is_fifo(queue) && rng.random_bool(0.2))
                    .then(|| rng.random_range(0..=DELAY_MS_MAX)),
                redrive,
            }
        }
        1 => Op::Retry { client },
        2 => {
            let queue = [
                STANDARD,
                FIFO,
                EVENTS,
                DEAD_LETTERS,
                FIFO_DEAD_LETTERS,
                OWN_DEAD_LETTERS,
            ][rng.random_range(0..6)];
            let protocol = if is_fifo(queue) {
                Protocol::Sqs
            } else {
                [Protocol::Sqs, Protocol::Azure, Protocol::KubeMq][rng.random_range(0..3)]
            };
            Op::Receive {
                client,
                queue,
                max: rng.random_range(1..=RECEIVE_MAX),
                visibility_ms,
                wait_ms: if rng.random_bool(0.15) {
                    rng.random_range(1..=RECEIVE_WAIT_MS_MAX)
                } else {
                    0
                },
                protocol,
                attempt: is_fifo(queue) && rng.random_bool(0.3),
            }
        }
        3 => Op::ChangeVisibility {
            client,
            pick,
            visibility_ms,
        },
        4 => Op::Update {
            client,
            pick,
            visibility_ms,
        },
        5 => Op::Delete {
            client,
            pick,
            batch: rng.random_bool(0.2),
        },
        6 => Op::Move {
            client,
            pick,
            target: [STANDARD, EVENTS, DEAD_LETTERS][rng.random_range(0..3)],
        },
        7 => Op::Purge {
            queue: [STANDARD, FIFO, EVENTS, DEAD_LETTERS][rng.random_range(0..4)],
        },
        8 => Op::StartMoveTask {
            queue: [DEAD_LETTERS, FIFO_DEAD_LETTERS][rng.random_range(0..2)],
            to_origin: rng.random_bool(0.7),
        },
        9 => Op::DriveMoveTasks,
        10 => Op::Sweep,
        11 => Op::Advance {
            ms: rng.random_range(1..=SMALL_STEP_MS_MAX),
        },
        12 => Op::Jump {
            ms: rng.random_range(SMALL_STEP_MS_MAX..=JUMP_MS_MAX),
        },
        13 => Op::Flush {
            count: if rng.random_bool(0.5) {
                0
            } else {
                rng.random_range(1..=4)
            },
        },
        14 => Op::FailCommit {
            reached_disk: rng.random_bool(0.5),
        },
        _ => Op::Crash {
            kept: rng.random_range(0..=3),
        },
    }
}
