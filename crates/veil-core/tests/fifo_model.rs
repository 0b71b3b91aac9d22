//! Randomised test of a FIFO queue against a reference model (docs/semantics.md §4): random sends over a few
//! message groups with repeating deduplication ids, receives, deletes and visibility changes with the FIFO
//! receipt rule, clock advances (some past the deduplication interval) and restarts. After every step the
//! model checks:
//! - order: what a receive returns of a group is exactly the group's first stored messages, in send order;
//! - blocking: nothing of a group is returned while a message of it is in flight;
//! - liveness: a receive returns something whenever some group is unblocked with a visible head;
//! - exactly-once deduplication: a send whose id was first used less than the interval ago is a duplicate
//!   answered with the first send's message id, every other send is stored;
//! - the receipt rule (deleted, expired or current, predicted exactly) and the queue's counts;
//! - message move tasks into a second FIFO queue: only visible messages the source held when the task started
//!   move, each exactly once (gone from the source, present once in the destination), and each group arrives in
//!   its send order.
//!
//! proptest prints the shrunk failing sequence and records its seed in `fifo_model.proptest-regressions`;
//! `PROPTEST_CASES` sets the count.

mod common;

use std::collections::HashMap;

use common::*;
use proptest::prelude::*;
use veil_core::*;

const GROUPS: u8 = 3;
const DEDUP_IDS: u8 = 6;

#[derive(Clone, Debug)]
enum Op {
    Send {
        group: u8,
        dedup: u8,
    },
    Receive {
        max: usize,
        visibility_s: u64,
    },
    Delete {
        receipt: usize,
    },
    ChangeVisibility {
        receipt: usize,
        seconds: u64,
    },
    Advance {
        ms: u64,
    },
    Restart,
    /// Starts a move task from the queue into the destination (refused while one runs).
    StartMove,
    /// One step of the running move tasks, as the server's driver takes every 100 ms.
    DriveMoves,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0..GROUPS, 0..DEDUP_IDS).prop_map(|(group, dedup)| Op::Send { group, dedup }),
        4 => (1usize..5, prop_oneof![1 => Just(0u64), 3 => 1u64..6])
            .prop_map(|(max, visibility_s)| Op::Receive { max, visibility_s }),
        3 => any::<usize>().prop_map(|receipt| Op::Delete { receipt }),
        1 => (any::<usize>(), 0u64..6).prop_map(|(receipt, seconds)| Op::ChangeVisibility { receipt, seconds }),
        3 => prop_oneof![8 => 0u64..4_000, 1 => Just(limits::DEDUP_INTERVAL_MS_DEFAULT)].prop_map(|ms| Op::Advance { ms }),
        1 => Just(Op::Restart),
        1 => Just(Op::StartMove),
        2 => Just(Op::DriveMoves),
    ]
}

struct Stored {
    group: String,
    seq: Seq,
    message_id: [u8; 16],
    visible_at: Millis,
    receive_count: u32,
    /// The receipt of the latest receive; the only one the FIFO rule honours.
    current_receipt: Option<String>,
    deleted: bool,
}

#[derive(Default)]
struct Model {
    messages: Vec<Stored>,
    /// Deduplication id → (first send, index of the stored message).
    dedup: HashMap<String, (Millis, usize)>,
    /// Every receipt issued, with the index of its message.
    receipts: Vec<(String, usize)>,
    /// The running move task moves only messages with a seq below this.
    move_seq_end: Option<Seq>,
    /// Message ids moved into the destination, with their seq in the source, in the order they moved.
    moved: Vec<([u8; 16], Seq)>,
}

impl Model {
    fn live(&self) -> impl Iterator<Item = (usize, &Stored)> {
        self.messages.iter().enumerate().filter(|(_, m)| !m.deleted)
    }

    fn in_flight(m: &Stored, now: Millis) -> bool {
        m.receive_count > 0 && m.visible_at > now
    }

    /// The group's live messages in send order.
    fn group(&self, group: &str) -> Vec<usize> {
        let mut members: Vec<_> = self
            .live()
            .filter(|(_, m)| m.group == group)
            .map(|(i, _)| i)
            .collect();
        members.sort_by_key(|&i| self.messages[i].seq);
        members
    }

    fn blocked(&self, group: &str, now: Millis) -> bool {
        self.group(group)
            .iter()
            .any(|&i| Self::in_flight(&self.messages[i], now))
    }

    fn by_seq(&self, seq: Seq) -> usize {
        self.live()
            .find(|(_, m)| m.seq == seq)
            .map(|(i, _)| i)
            .expect("delivered a live message")
    }
}

fn fifo_queue() -> QueueConfig {
    QueueConfig {
        retention_ms: None,
        fifo: Some(FifoConfig::default()),
        ..QueueConfig::default()
    }
}

async fn step(h: &mut Harness, model: &mut Model, key: &QueueKey, op: &Op) {
    let now = h.engine.now();
    match *op {
        Op::Send { group, dedup } => send(h, model, key, group, dedup, now).await,
        Op::Receive { max, visibility_s } => receive(h, model, key, max, visibility_s, now).await,
        Op::Delete { receipt } => {
            let Some((receipt, index)) = pick(&model.receipts, receipt) else {
                return;
            };
            let m = &model.messages[index];
            let outcome = h.engine.delete(key, &receipt, ReceiptRule::Unexpired).await;
            if m.deleted {
                assert_eq!(outcome.unwrap(), DeleteOutcome::AlreadyGone);
            } else if m.current_receipt.as_deref() != Some(&receipt) || m.visible_at <= now {
                assert!(
                    matches!(outcome, Err(EngineError::ReceiptExpired)),
                    "{outcome:?}"
                );
            } else {
                assert_eq!(outcome.unwrap(), DeleteOutcome::Deleted);
                model.messages[index].deleted = true;
            }
        }
        Op::ChangeVisibility { receipt, seconds } => {
            let Some((receipt, index)) = pick(&model.receipts, receipt) else {
                return;
            };
            let change = VisibilityChange {
                receipts: ReceiptRule::Unexpired,
                ..sqs_change(seconds)
            };
            let result = h.engine.change_visibility(key, &receipt, change).await;
            let m = &mut model.messages[index];
            if m.deleted || m.current_receipt.as_deref() != Some(&receipt) || m.visible_at <= now {
                assert!(
                    matches!(result, Err(EngineError::MessageNotAvailable)),
                    "{result:?}"
                );
            } else {
                assert_eq!(result.unwrap(), now + seconds * 1_000);
                m.visible_at = now + seconds * 1_000;
            }
        }
        Op::Advance { ms } => h.clock.advance(std::time::Duration::from_millis(ms)),
        Op::Restart => h.restart(),
        Op::StartMove => start_move(h, model, key).await,
        Op::DriveMoves => drive_moves(h, model, key, now).await,
    }
}

fn destination() -> QueueKey {
    QueueKey::new(DEFAULT_NAMESPACE, "destination.fifo")
}

async fn start_move(h: &Harness, model: &mut Model, key: &QueueKey) {
    let started = h
        .engine
        .start_move_task(key, Some(&destination()), None)
        .await;
    match (started, model.move_seq_end) {
        (Ok(record), None) => {
            let held_end = model.live().map(|(_, m)| m.seq + 1).max().unwrap_or(0);
            assert!(
                record.seq_end >= held_end,
                "the task covers every message sent before it"
            );
            model.move_seq_end = Some(record.seq_end);
        }
        (Err(MoveTaskError::AlreadyRunning), Some(_)) => {}
        (other, running) => panic!("start with a task running = {running:?}: {other:?}"),
    }
}

async fn drive_moves(h: &Harness, model: &mut Model, key: &QueueKey, now: Millis) {
    h.engine.drive_move_tasks().await.unwrap();
    let Some(seq_end) = model.move_seq_end else {
        return;
    };
    let still_visible: Vec<[u8; 16]> = h
        .engine
        .peek(key, limits::RECEIVE_MESSAGES_MAX)
        .await
        .unwrap()
        .iter()
        .map(|m| m.payload.message_id)
        .collect();
    let mut moved_now = Vec::new();
    for (_, m) in model.live() {
        if m.visible_at <= now && !still_visible.contains(&m.message_id) {
            assert!(
                m.seq < seq_end,
                "seq {} arrived after the task started, yet moved",
                m.seq
            );
            moved_now.push((m.message_id, m.seq));
        }
    }
    for &(message_id, _) in &moved_now {
        let index = model
            .messages
            .iter()
            .position(|m| m.message_id == message_id)
            .unwrap();
        model.messages[index].deleted = true;
    }
    model.moved.extend(moved_now);
    let tasks = h.engine.move_tasks(key).unwrap();
    let running = tasks.iter().any(|t| t.status == MoveTaskStatus::Running);
    if !running {
        // A message waiting behind its group's head in flight is not movable (moving it would reorder its
        // group); the task finishes once no group head it has to move is visible.
        let left = model.live().any(|(i, m)| {
            m.visible_at <= now && m.seq < seq_end && model.group(&m.group).first() == Some(&i)
        });
        assert!(
            !left,
            "the task finished with visible messages it had to move"
        );
        model.move_seq_end = None;
    }
    check_destination(h, model).await;
}

/// Every moved message is in the destination exactly once, and each group arrived in its send order.
async fn check_destination(h: &Harness, model: &Model) {
    let arrived = h
        .engine
        .peek(&destination(), limits::RECEIVE_MESSAGES_MAX)
        .await
        .unwrap();
    let mut ids: Vec<[u8; 16]> = arrived.iter().map(|m| m.payload.message_id).collect();
    let mut expected: Vec<[u8; 16]> = model.moved.iter().map(|&(id, _)| id).collect();
    ids.sort();
    expected.sort();
    assert_eq!(ids, expected, "every moved message arrived exactly once");
    for group in (0..GROUPS).map(|g| format!("g{g}")) {
        let source_seqs: Vec<Seq> = arrived
            .iter()
            .filter(|m| m.payload.group.as_deref() == Some(&group))
            .map(|m| {
                model
                    .moved
                    .iter()
                    .find(|(id, _)| *id == m.payload.message_id)
                    .unwrap()
                    .1
            })
            .collect();
        assert!(
            source_seqs.windows(2).all(|w| w[0] < w[1]),
            "{group} arrived out of order: {source_seqs:?}"
        );
    }
}

fn pick(receipts: &[(String, usize)], choice: usize) -> Option<(String, usize)> {
    (!receipts.is_empty()).then(|| receipts[choice % receipts.len()].clone())
}

async fn send(h: &Harness, model: &mut Model, key: &QueueKey, group: u8, dedup: u8, now: Millis) {
    let dedup_id = format!("d{dedup}");
    let message = NewMessage {
        group: Some(format!("g{group}")),
        dedup_id: Some(dedup_id.clone()),
        ..NewMessage::new(format!("g{group}/{dedup_id}@{now}"))
    };
    let sent = h.engine.send(key, vec![message]).await.unwrap().remove(0);
    let remembered = model
        .dedup
        .get(&dedup_id)
        .filter(|(first, _)| now < first + limits::DEDUP_INTERVAL_MS_DEFAULT);
    match remembered {
        Some(&(_, original)) => {
            assert!(
                sent.duplicate,
                "{dedup_id} was first sent less than the interval ago"
            );
            assert_eq!(sent.message_id, model.messages[original].message_id);
        }
        None => {
            assert!(!sent.duplicate, "{dedup_id} is not remembered");
            model.dedup.insert(dedup_id, (now, model.messages.len()));
            model.messages.push(Stored {
                group: format!("g{group}"),
                seq: sent.seq,
                message_id: sent.message_id,
                visible_at: now,
                receive_count: 0,
                current_receipt: None,
                deleted: false,
            });
        }
    }
}

async fn receive(
    h: &Harness,
    model: &mut Model,
    key: &QueueKey,
    max: usize,
    visibility_s: u64,
    now: Millis,
) {
    let options = ReceiveOptions {
        visibility_ms: Some(visibility_s * 1_000),
        wait_ms: Some(0),
        ..ReceiveOptions::new(max)
    };
    let got = h.engine.receive(key, options).await.unwrap();
    assert!(got.len() <= max);
    let groups: Vec<String> = (0..GROUPS).map(|g| format!("g{g}")).collect();
    let deliverable = groups.iter().any(|g| {
        let members = model.group(g);
        !model.blocked(g, now)
            && members
                .first()
                .is_some_and(|&i| model.messages[i].visible_at <= now)
    });
    assert_eq!(
        got.is_empty(),
        !deliverable,
        "a receive returns something exactly when some group can deliver"
    );
    for group in &groups {
        let delivered: Vec<Seq> = got
            .iter()
            .filter(|m| m.payload.group.as_deref() == Some(group))
            .map(|m| m.seq)
            .collect();
        if delivered.is_empty() {
            continue;
        }
        assert!(
            !model.blocked(group, now),
            "{group} delivered while a message of it was in flight"
        );
        let first: Vec<Seq> = model
            .group(group)
            .iter()
            .take(delivered.len())
            .map(|&i| model.messages[i].seq)
            .collect();
        assert_eq!(
            delivered, first,
            "{group} delivers its first messages in send order"
        );
    }
    for message in &got {
        let index = model.by_seq(message.seq);
        let m = &mut model.messages[index];
        assert!(m.visible_at <= now, "delivered while hidden");
        m.receive_count += 1;
        assert_eq!(message.state.receive_count, m.receive_count);
        m.visible_at = now + visibility_s * 1_000;
        let receipt = message.receipt.clone().unwrap();
        m.current_receipt = Some(receipt.clone());
        model.receipts.push((receipt, index));
    }
}

fn check_counts(h: &Harness, model: &Model, key: &QueueKey) {
    h.engine.check_invariants();
    let now = h.engine.now();
    let stats = h.stats(key);
    let hidden = model
        .live()
        .filter(|(_, m)| Model::in_flight(m, now))
        .count() as u64;
    let live = model.live().count() as u64;
    assert_eq!(
        (stats.visible, stats.hidden, stats.delayed),
        (live - hidden, hidden, 0)
    );
}

proptest! {
    #[test]
    fn a_fifo_queue_keeps_group_order_blocking_and_exactly_once_dedup(ops in prop::collection::vec(op(), 1..60)) {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().start_paused(true).build().unwrap();
        runtime.block_on(async {
            let mut h = Harness::new();
            let key = h.queue_with("model.fifo", fifo_queue()).await;
            h.queue_with("destination.fifo", fifo_queue()).await;
            let mut model = Model::default();
            for op in &ops {
                step(&mut h, &mut model, &key, op).await;
                check_counts(&h, &model, &key);
            }
        });
    }
}
