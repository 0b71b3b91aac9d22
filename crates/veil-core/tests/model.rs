//! Randomised test of the engine against a simple reference model: random sequences of sends, receives, peeks,
//! deletes, visibility changes, clock advances and restarts over three queues, with the model predicting
//! exactly which messages each receive returns and what every queue's statistics say after each step. Checks
//! the invariants of docs/semantics.md §1–3 and §5: never delivered while hidden, nothing acknowledged lost, deleted never
//! redelivered, receive counts only grow, counts and stored bytes add up, and dead letters go where their rule
//! says (a message's own rule before its queue's). proptest prints the shrunk failing sequence and records its
//! seed in `model.proptest-regressions`; `PROPTEST_CASES` sets the count.
//!
//! The queues: `q0` (default settings) and `q1` (keeps messages forever; its redrive policy moves messages to
//! `q0` after [`QUEUE_POLICY_MAX_RECEIVE_COUNT`] receives) exist from the start. `q2` exists only once a
//! message's own rule moved a message there, which creates it with the source queue's settings; until then
//! every operation on it fails with `QueueNotFound`.

mod common;

use common::*;
use proptest::prelude::*;
use veil_core::*;

const QUEUES: usize = 3;
/// The queue that a message's own rule creates on its first move there.
const LAZY_QUEUE: usize = 2;
/// `q1`'s redrive policy: into `q0` once a message was received this often.
const QUEUE_POLICY_MAX_RECEIVE_COUNT: u32 = 2;

/// One message of a send.
#[derive(Clone, Debug)]
struct Outgoing {
    /// Extra body bytes, so that stored bytes depend on which messages are stored.
    pad: usize,
    /// The message's own dead-letter rule: (max receive count, dead-letter queue or `None` to drop).
    redrive: Option<(u32, Option<usize>)>,
}

#[derive(Clone, Debug)]
enum Op {
    Send {
        queue: usize,
        messages: Vec<Outgoing>,
        delay_s: u64,
        ttl_s: Option<u64>,
    },
    Receive {
        queue: usize,
        max: usize,
        visibility_s: u64,
    },
    Peek {
        queue: usize,
        max: usize,
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
}

fn queue() -> impl Strategy<Value = usize> {
    prop_oneof![5 => Just(0usize), 3 => Just(1), 1 => Just(LAZY_QUEUE)]
}

fn outgoing() -> impl Strategy<Value = Outgoing> {
    // The target is q1, the lazily created q2, q0, or none (drop); for a message sent to that same queue the
    // move goes back into it.
    let target = prop_oneof![
        2 => Just(None),
        2 => Just(Some(1usize)),
        2 => Just(Some(LAZY_QUEUE)),
        1 => Just(Some(0)),
    ];
    let redrive = prop_oneof![1 => Just(None), 1 => (1u32..=3, target).prop_map(Some)];
    (0usize..24, redrive).prop_map(|(pad, redrive)| Outgoing { pad, redrive })
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (queue(), prop::collection::vec(outgoing(), 1..4), prop_oneof![3 => Just(0u64), 1 => 1u64..4], prop_oneof![2 => Just(None), 1 => (4u64..12).prop_map(Some)])
            .prop_map(|(queue, messages, delay_s, ttl_s)| Op::Send { queue, messages, delay_s, ttl_s }),
        4 => (queue(), 1usize..5, prop_oneof![1 => Just(0u64), 2 => 1u64..6]).prop_map(|(queue, max, visibility_s)| Op::Receive { queue, max, visibility_s }),
        1 => (queue(), 1usize..5).prop_map(|(queue, max)| Op::Peek { queue, max }),
        2 => any::<usize>().prop_map(|receipt| Op::Delete { receipt }),
        2 => (any::<usize>(), 0u64..6).prop_map(|(receipt, seconds)| Op::ChangeVisibility { receipt, seconds }),
        3 => (0u64..4_000).prop_map(|ms| Op::Advance { ms }),
        1 => Just(Op::Restart),
    ]
}

/// What became of a model message. Only `Stored` ones are in the engine.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fate {
    Stored,
    Deleted,
    Expired,
    /// Moved to a dead-letter queue, where it is a new model message.
    MovedOut,
    /// Dropped by its own rule, which named no dead-letter queue.
    Dropped,
}

/// A message as stored in one queue. A dead-letter move ends it (`MovedOut`) and starts a new one in the target.
struct ModelMessage {
    queue: usize,
    body: String,
    message_id: [u8; 16],
    seq: Seq,
    sent_at: Millis,
    visible_at: Millis,
    expires_at: Millis,
    first_received_at: Millis,
    receive_count: u32,
    generation: u32,
    redrive: Option<MessageRedrivePolicy>,
    dead_letter_source: Option<QueueKey>,
    /// Hidden with its deadline ahead: the engine counts a redelivery when the deadline passes.
    awaiting_redelivery: bool,
    fate: Fate,
}

impl ModelMessage {
    /// Not stored (any more), or expired by `now`: the engine must behave as if the message were gone.
    fn gone(&self, now: Millis) -> bool {
        self.fate != Fate::Stored || self.expires_at <= now
    }

    fn state(&self) -> MessageState {
        MessageState {
            sent_at: self.sent_at,
            visible_at: self.visible_at,
            expires_at: self.expires_at,
            first_received_at: self.first_received_at,
            receive_count: self.receive_count,
            generation: self.generation,
            body_bytes: self.body.len() as u32,
            dead_letter_on_release: false,
        }
    }
}

struct IssuedReceipt {
    queue: usize,
    message: usize,
    generation: u32,
    text: String,
}

struct ModelQueue {
    exists: bool,
    retention_ms: Option<Millis>,
    /// The queue's redrive policy: (dead-letter queue, max receive count).
    redrive_policy: Option<(usize, u32)>,
    counters: Counters,
    /// The highest seq the queue handed out: seqs increase and are never reused, across restarts too.
    last_seq: Option<Seq>,
}

/// Where a receive sends a message instead of delivering it.
#[derive(Clone, Copy, Debug)]
enum Route {
    /// The message's own rule: arrives fresh (count reset, rule cleared, its expiry kept).
    Fresh(usize),
    /// The queue's redrive policy: keeps its count and send time, expiry by the target's retention.
    KeepCount(usize),
    Drop,
}

struct Model {
    keys: Vec<QueueKey>,
    queues: Vec<ModelQueue>,
    messages: Vec<ModelMessage>,
    receipts: Vec<IssuedReceipt>,
    bodies: usize,
}

impl Model {
    fn new() -> Self {
        let queue = |exists, retention_ms, redrive_policy| ModelQueue {
            exists,
            retention_ms,
            redrive_policy,
            counters: Counters::default(),
            last_seq: None,
        };
        Self {
            keys: (0..QUEUES)
                .map(|q| QueueKey::new(DEFAULT_NAMESPACE, format!("q{q}")))
                .collect(),
            queues: vec![
                queue(true, Some(limits::RETENTION_MS_DEFAULT), None),
                queue(true, None, Some((0, QUEUE_POLICY_MAX_RECEIVE_COUNT))),
                queue(false, None, None),
            ],
            messages: Vec::new(),
            receipts: Vec::new(),
            bodies: 0,
        }
    }

    fn index_of(&self, key: &QueueKey) -> usize {
        self.keys
            .iter()
            .position(|k| k == key)
            .expect("a queue of the test")
    }

    fn body(&self, n: usize, pad: usize) -> String {
        format!("m{n}:{}", "x".repeat(pad))
    }

    fn policy(&self, redrive: Option<(u32, Option<usize>)>) -> Option<MessageRedrivePolicy> {
        redrive.map(|(max_receive_count, target)| MessageRedrivePolicy {
            max_receive_count,
            dead_letter_queue: target.map(|q| self.keys[q].clone()),
        })
    }

    /// The visible messages of a queue in delivery order.
    fn ready(&self, queue: usize, now: Millis) -> Vec<usize> {
        let mut ready: Vec<usize> = (0..self.messages.len())
            .filter(|&i| {
                let m = &self.messages[i];
                m.queue == queue && !m.gone(now) && m.visible_at <= now
            })
            .collect();
        ready.sort_by_key(|&i| (self.messages[i].visible_at, self.messages[i].seq));
        ready
    }

    /// The dead-letter rule for a message about to be delivered: its own rule, else its queue's.
    fn route(&self, m: &ModelMessage) -> Option<Route> {
        if let Some(policy) = &m.redrive {
            return (m.receive_count >= policy.max_receive_count).then(|| {
                match &policy.dead_letter_queue {
                    Some(key) => Route::Fresh(self.index_of(key)),
                    None => Route::Drop,
                }
            });
        }
        let (target, max_receive_count) = self.queues[m.queue].redrive_policy?;
        (target != m.queue && self.queues[target].exists && m.receive_count >= max_receive_count)
            .then_some(Route::KeepCount(target))
    }

    /// What a receive of up to `max` does: the messages it delivers, and those it moves or drops on the way.
    fn plan_receive(
        &self,
        queue: usize,
        now: Millis,
        max: usize,
    ) -> (Vec<usize>, Vec<(usize, Route)>) {
        let (mut delivered, mut dead) = (Vec::new(), Vec::new());
        for i in self.ready(queue, now) {
            if delivered.len() >= max {
                break;
            }
            match self.route(&self.messages[i]) {
                Some(route) => dead.push((i, route)),
                None => delivered.push(i),
            }
        }
        (delivered, dead)
    }

    /// Applies one dead-letter move or drop. Returns the target and the new model message of a move (its seq
    /// not yet known).
    fn dead_letter(&mut self, i: usize, route: Route, now: Millis) -> Option<(usize, usize)> {
        let source = self.messages[i].queue;
        let (target, fresh) = match route {
            Route::Drop => {
                self.messages[i].fate = Fate::Dropped;
                self.queues[source].counters.dead_letter_drops += 1;
                return None;
            }
            Route::Fresh(target) => (target, true),
            Route::KeepCount(target) => (target, false),
        };
        if !self.queues[target].exists {
            // Created with the source's settings, less its redrive policy.
            self.queues[target].exists = true;
            self.queues[target].retention_ms = self.queues[source].retention_ms;
            self.queues[target].redrive_policy = None;
        }
        self.queues[source].counters.dead_letter_moves += 1;
        self.queues[target].counters.sends += 1; // an arrival is the target's send
        let old = &mut self.messages[i];
        old.fate = Fate::MovedOut;
        let expires_at = if fresh {
            old.expires_at
        } else {
            self.queues[target]
                .retention_ms
                .map_or(NEVER, |ms| old.sent_at + ms)
        };
        let moved = ModelMessage {
            queue: target,
            body: old.body.clone(),
            message_id: old.message_id,
            seq: Seq::MAX,
            sent_at: old.sent_at,
            visible_at: now,
            expires_at,
            first_received_at: if fresh { 0 } else { old.first_received_at },
            receive_count: if fresh { 0 } else { old.receive_count },
            generation: old.generation,
            redrive: None,
            dead_letter_source: Some(self.keys[source].clone()),
            awaiting_redelivery: false,
            fate: Fate::Stored,
        };
        self.messages.push(moved);
        Some((target, self.messages.len() - 1))
    }

    /// What the engine's catch-up at `now` does: hidden messages whose deadline passed are redelivered (and
    /// counted), then expired ones are removed (and counted).
    fn settle(&mut self, now: Millis) {
        for m in &mut self.messages {
            if m.fate != Fate::Stored {
                continue;
            }
            let counters = &mut self.queues[m.queue].counters;
            if m.awaiting_redelivery && m.visible_at <= now {
                m.awaiting_redelivery = false;
                counters.redeliveries += 1;
            }
            if m.expires_at <= now {
                m.fate = Fate::Expired;
                counters.expiries += 1;
            }
        }
    }

    fn stats(&self, queue: usize, now: Millis) -> QueueStats {
        let stored: Vec<&ModelMessage> = self
            .messages
            .iter()
            .filter(|m| m.queue == queue && !m.gone(now))
            .collect();
        let (mut visible, mut hidden, mut delayed) = (0, 0, 0);
        for m in &stored {
            if m.visible_at <= now {
                visible += 1;
            } else if m.receive_count > 0 {
                hidden += 1;
            } else {
                delayed += 1;
            }
        }
        let oldest = stored.iter().min_by_key(|m| m.seq);
        let newest = stored.iter().max_by_key(|m| m.seq);
        QueueStats {
            visible,
            hidden,
            delayed,
            oldest_age_ms: oldest.map_or(0, |m| now.saturating_sub(m.sent_at)),
            stored_bytes: stored.iter().map(|m| m.body.len() as u64).sum(),
            seq_range: oldest.zip(newest).map(|(o, n)| (o.seq, n.seq)),
            counters: self.queues[queue].counters,
        }
    }

    /// Records a seq the engine handed out for `queue`, checking that it is higher than every earlier one.
    fn record_seq(&mut self, queue: usize, seq: Seq) {
        let last = &mut self.queues[queue].last_seq;
        assert!(
            last.is_none_or(|last| seq > last),
            "seq {seq} of {} is not above the earlier {last:?}",
            self.keys[queue]
        );
        *last = Some(seq);
    }
}

/// Everything a delivered or peeked message shows, against the model.
fn assert_message(message: &Message, m: &ModelMessage, what: &str) {
    assert_eq!(body(message), m.body, "{what}");
    assert_eq!(message.seq, m.seq, "{what}: seq of {}", m.body);
    assert_eq!(message.state, m.state(), "{what}: state of {}", m.body);
    assert_eq!(message.redrive, m.redrive, "{what}: own rule of {}", m.body);
    assert_eq!(
        message.payload.message_id, m.message_id,
        "{what}: id of {}",
        m.body
    );
    assert_eq!(
        message.payload.sent_at, m.sent_at,
        "{what}: sent_at of {}",
        m.body
    );
    assert_eq!(
        message.payload.dead_letter_source().cloned(),
        m.dead_letter_source,
        "{what}: dead-letter source of {}",
        m.body
    );
}

fn assert_queue_not_found<T: std::fmt::Debug>(result: EngineResult<T>, key: &QueueKey) {
    assert!(
        matches!(&result, Err(EngineError::QueueNotFound(k)) if k == key),
        "{key} does not exist yet: {result:?}"
    );
}

/// One model-checked receive. Returns the delivered bodies and how many messages it moved or dropped.
async fn receive<S: Store>(
    h: &Harness<S>,
    model: &mut Model,
    queue: usize,
    max: usize,
    visibility_s: u64,
) -> (Vec<String>, usize) {
    let now = h.clock.now();
    let key = model.keys[queue].clone();
    let options = ReceiveOptions {
        dead_letter: veil_core::DeadLetterTiming::OnReceive,
        max_messages: max,
        visibility_ms: Some(visibility_s * 1_000),
        wait_ms: Some(0),
        attempt_id: None,
        consumer: None,
    };
    let result = h.engine.receive_detailed(&key, options).await;
    if !model.queues[queue].exists {
        assert_queue_not_found(result, &key);
        return (Vec::new(), 0);
    }
    let received = result.unwrap();
    assert_eq!(
        received.expired, 0,
        "the previous step's statistics already removed what expired by {now}"
    );
    let got = received.messages;
    let (expected, dead) = model.plan_receive(queue, now, max);
    let got_bodies: Vec<String> = got.iter().map(|m| body(m).to_owned()).collect();
    let expected_bodies: Vec<&str> = expected
        .iter()
        .map(|&i| model.messages[i].body.as_str())
        .collect();
    assert_eq!(
        got_bodies, expected_bodies,
        "receive from {key} at {now} returned the wrong messages"
    );
    for (message, &i) in got.iter().zip(&expected) {
        let m = &mut model.messages[i];
        assert!(
            message.state.receive_count > m.receive_count,
            "receive count only grows"
        );
        m.receive_count += 1;
        m.generation += 1;
        m.visible_at = now + visibility_s * 1_000;
        m.awaiting_redelivery = visibility_s > 0;
        if visibility_s == 0 {
            // A delivery with visibility 0 lapses at once.
            model.queues[queue].counters.redeliveries += 1;
        }
        if m.first_received_at == 0 {
            m.first_received_at = now;
        }
        assert_message(message, m, &format!("receive from {key} at {now}"));
        model.queues[queue].counters.deliveries += 1;
        model.receipts.push(IssuedReceipt {
            queue,
            message: i,
            generation: m.generation,
            text: message.receipt.clone().expect("a receive issues receipts"),
        });
    }
    let dead_count = dead.len();
    let arrived: Vec<(usize, usize)> = dead
        .into_iter()
        .filter_map(|(i, route)| model.dead_letter(i, route, now))
        .collect();
    // The engine chose the moved messages' seqs in their new queues: learn them by message id from a peek.
    let mut targets: Vec<usize> = arrived.iter().map(|&(target, _)| target).collect();
    targets.sort_unstable();
    targets.dedup();
    for target in targets {
        let target_key = model.keys[target].clone();
        let peeked = h
            .engine
            .peek(&target_key, limits::RECEIVE_MESSAGES_MAX)
            .await
            .unwrap();
        for &(_, i) in arrived.iter().filter(|&&(t, _)| t == target) {
            let id = model.messages[i].message_id;
            let message = peeked
                .iter()
                .find(|p| p.payload.message_id == id)
                .unwrap_or_else(|| {
                    panic!(
                        "{} was moved to {target_key} at {now} but is not visible there",
                        model.messages[i].body
                    )
                });
            model.record_seq(target, message.seq);
            model.messages[i].seq = message.seq;
            assert!(message.receipt.is_none());
            assert_message(
                message,
                &model.messages[i],
                &format!("moved from {key} to {target_key} at {now}"),
            );
        }
        peek(h, model, target, limits::RECEIVE_MESSAGES_MAX).await;
    }
    (got_bodies, dead_count)
}

/// One model-checked peek: the visible messages in delivery order, nothing changed.
async fn peek<S: Store>(h: &Harness<S>, model: &Model, queue: usize, max: usize) {
    let now = h.clock.now();
    let key = &model.keys[queue];
    let result = h.engine.peek(key, max).await;
    if !model.queues[queue].exists {
        return assert_queue_not_found(result, key);
    }
    let got = result.unwrap();
    let mut expected = model.ready(queue, now);
    expected.truncate(max);
    let got_bodies: Vec<&str> = got.iter().map(body).collect();
    let expected_bodies: Vec<&str> = expected
        .iter()
        .map(|&i| model.messages[i].body.as_str())
        .collect();
    assert_eq!(
        got_bodies, expected_bodies,
        "peek of {key} at {now} returned the wrong messages"
    );
    for (message, &i) in got.iter().zip(&expected) {
        assert!(message.receipt.is_none(), "a peek issues no receipt");
        assert_message(
            message,
            &model.messages[i],
            &format!("peek of {key} at {now}"),
        );
    }
}

async fn step<S: Store>(h: &mut Harness<S>, model: &mut Model, op: Op) {
    let now = h.clock.now();
    match op {
        Op::Send {
            queue,
            messages,
            delay_s,
            ttl_s,
        } => {
            let key = model.keys[queue].clone();
            let batch: Vec<NewMessage> = messages
                .iter()
                .enumerate()
                .map(|(n, outgoing)| {
                    let mut m = NewMessage::new(model.body(model.bodies + n, outgoing.pad));
                    m.delay_ms = Some(delay_s * 1_000);
                    m.ttl = ttl_s.map(|s| Ttl::After(s * 1_000));
                    m.redrive = model.policy(outgoing.redrive);
                    m
                })
                .collect();
            let result = h.engine.send(&key, batch.clone()).await;
            if !model.queues[queue].exists {
                return assert_queue_not_found(result, &key);
            }
            let sent = result.unwrap();
            assert_eq!(sent.len(), batch.len());
            model.bodies += batch.len();
            let retention_ms = model.queues[queue].retention_ms;
            let expires_at = match ttl_s {
                Some(s) => now + s * 1_000,
                None => retention_ms.map_or(NEVER, |ms| now + ms),
            };
            for (s, new) in sent.into_iter().zip(batch) {
                assert_eq!(
                    (s.sent_at, s.visible_at, s.expires_at),
                    (now, now + delay_s * 1_000, expires_at),
                    "times of a send to {key}"
                );
                model.record_seq(queue, s.seq);
                model.queues[queue].counters.sends += 1;
                model.messages.push(ModelMessage {
                    queue,
                    body: String::from_utf8(new.body.to_vec()).unwrap(),
                    message_id: s.message_id,
                    seq: s.seq,
                    sent_at: now,
                    visible_at: now + delay_s * 1_000,
                    expires_at,
                    first_received_at: 0,
                    receive_count: 0,
                    generation: 0,
                    redrive: new.redrive,
                    dead_letter_source: None,
                    awaiting_redelivery: false,
                    fate: Fate::Stored,
                });
            }
        }
        Op::Receive {
            queue,
            max,
            visibility_s,
        } => {
            receive(h, model, queue, max, visibility_s).await;
        }
        Op::Peek { queue, max } => peek(h, model, queue, max).await,
        Op::Delete { receipt } => {
            if model.receipts.is_empty() {
                return;
            }
            let r = &model.receipts[receipt % model.receipts.len()];
            let outcome = h
                .engine
                .delete(&model.keys[r.queue], &r.text, ReceiptRule::AnyIssued)
                .await
                .unwrap();
            let m = &mut model.messages[r.message];
            if m.gone(now) {
                assert_eq!(outcome, DeleteOutcome::AlreadyGone);
            } else {
                assert_eq!(outcome, DeleteOutcome::Deleted);
                m.fate = Fate::Deleted;
                model.queues[r.queue].counters.deletes += 1;
            }
        }
        Op::ChangeVisibility { receipt, seconds } => {
            if model.receipts.is_empty() {
                return;
            }
            let r = &model.receipts[receipt % model.receipts.len()];
            let result = h
                .engine
                .change_visibility(&model.keys[r.queue], &r.text, sqs_change(seconds))
                .await;
            let m = &mut model.messages[r.message];
            if m.gone(now) || m.generation != r.generation {
                assert!(
                    matches!(result, Err(EngineError::MessageNotAvailable)),
                    "{result:?}"
                );
            } else {
                assert_eq!(result.unwrap(), now + seconds * 1_000);
                if seconds == 0 && m.awaiting_redelivery {
                    // Given back while in flight: the delivery ends unsettled.
                    model.queues[r.queue].counters.redeliveries += 1;
                }
                m.visible_at = now + seconds * 1_000;
                m.awaiting_redelivery = seconds > 0;
            }
        }
        Op::Advance { ms } => h.clock.advance_ms(ms),
        Op::Restart => h.restart(),
    }
}

/// After every step: each queue exists exactly when the model says, with the model's settings and statistics
/// (counts, stored bytes, seq range, counters).
fn check<S: Store>(h: &Harness<S>, model: &mut Model) {
    h.engine.check_invariants();
    let now = h.clock.now();
    model.settle(now);
    for q in 0..QUEUES {
        let key = &model.keys[q];
        let queue = &model.queues[q];
        assert_eq!(
            h.engine.queue_exists(key),
            queue.exists,
            "whether {key} exists"
        );
        if !queue.exists {
            continue;
        }
        let info = h.engine.queue_info(key).unwrap();
        let redrive_policy =
            queue
                .redrive_policy
                .map(|(target, max_receive_count)| RedrivePolicy {
                    dead_letter_queue: model.keys[target].clone(),
                    max_receive_count,
                });
        assert_eq!(
            (info.config.retention_ms, info.config.redrive_policy),
            (queue.retention_ms, redrive_policy),
            "settings of {key}"
        );
        let expected = model.stats(q, now);
        assert_eq!(info.stats, expected, "statistics of {key} at {now}");
        assert_eq!(
            h.engine.message_count(key).unwrap() as u64,
            expected.visible + expected.hidden + expected.delayed,
            "messages of {key} at {now}"
        );
    }
}

async fn run(ops: Vec<Op>) {
    run_on(
        Harness::over(std::sync::Arc::new(
            veil_core::memory_store::MemoryStore::new(),
        )),
        ops,
    )
    .await;
}

async fn run_on<S: Store>(mut h: Harness<S>, ops: Vec<Op>) {
    let mut model = Model::new();
    h.queue(&model.keys[0].name).await;
    let q1 = QueueConfig {
        retention_ms: None,
        redrive_policy: Some(RedrivePolicy {
            dead_letter_queue: model.keys[0].clone(),
            max_receive_count: QUEUE_POLICY_MAX_RECEIVE_COUNT,
        }),
        ..QueueConfig::default()
    };
    h.queue_with(&model.keys[1].name, q1).await;
    for op in ops {
        step(&mut h, &mut model, op).await;
        check(&h, &mut model);
    }
    // Nothing acknowledged is lost and nothing deleted comes back: once every deadline passed, receiving
    // everything from every queue (following dead-letter moves) yields exactly the stored messages.
    h.advance_s(3_600);
    check(&h, &mut model);
    let mut bodies: Vec<String> = Vec::new();
    loop {
        let mut progress = false;
        for q in 0..QUEUES {
            while model.queues[q].exists {
                let (got, dead) = receive(&h, &mut model, q, 10, 3_600).await;
                check(&h, &mut model);
                if got.is_empty() && dead == 0 {
                    break;
                }
                progress = true;
                bodies.extend(got);
            }
        }
        if !progress {
            break;
        }
    }
    bodies.sort();
    let end = h.clock.now();
    let mut stored: Vec<String> = model
        .messages
        .iter()
        .filter(|m| !m.gone(end))
        .map(|m| m.body.clone())
        .collect();
    stored.sort();
    assert_eq!(bodies, stored);
}

fn replay(ops: Vec<Op>) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(run(ops));
}

fn send_one_with_ttl(queue: usize, ttl_s: u64) -> Op {
    Op::Send {
        queue,
        messages: vec![Outgoing {
            pad: 0,
            redrive: None,
        }],
        delay_s: 0,
        ttl_s: Some(ttl_s),
    }
}

/// The failure proptest once shrank to and saved in `model.proptest-regressions`: a lone send with a 4 s TTL,
/// then the final drain an hour later must find it expired (counted as an expiry, not delivered, gone from the
/// store). The saved seed stopped reproducing this case when `Op` changed shape (a seed is replayed through
/// the current strategy), so the case is spelt out here.
#[test]
fn a_message_whose_ttl_passed_before_the_final_drain_is_expired_not_delivered() {
    replay(vec![send_one_with_ttl(0, 4)]);
}

/// The same on the boundary, in a queue with a retention period (`q0`) and in one that keeps messages forever
/// (`q1`, where only the message's own TTL ends it): visible 1 ms before the TTL, expired at it.
#[test]
fn a_message_ttl_ends_it_exactly_at_its_deadline_in_either_kind_of_queue() {
    for queue in [0, 1] {
        replay(vec![
            send_one_with_ttl(queue, 4),
            Op::Advance { ms: 3_999 },
            Op::Peek { queue, max: 10 },
            Op::Advance { ms: 1 },
            Op::Peek { queue, max: 10 },
        ]);
    }
}

/// 256 cases by default; `PROPTEST_CASES` asks for more (or fewer).
fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(256)
}

/// veil-store's disk store behind a swap, so that a restart can stop it and open it again from its directory
/// while the harness and the engine keep their handle. Restarts alternate between a crash (the log left to
/// replay) and a clean close (everything checkpointed); log segments are tiny, so checkpoints run
/// concurrently with the operations at many points of every sequence.
struct DiskStore {
    dir: tempfile::TempDir,
    /// `None` only between stopping the old store and opening the new one.
    current: std::sync::RwLock<Option<std::sync::Arc<veil_store::RedbStore>>>,
    restarts: std::sync::atomic::AtomicU64,
}

/// Small enough that a few commits fill a segment.
const DISK_SEGMENT_BYTES_MAX: u64 = 2_048;

impl DiskStore {
    fn new() -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        let store = Self::open_in(dir.path());
        Self {
            dir,
            current: std::sync::RwLock::new(Some(store)),
            restarts: Default::default(),
        }
    }

    fn open_in(dir: &std::path::Path) -> std::sync::Arc<veil_store::RedbStore> {
        let options = veil_store::StoreOptions {
            // Fast enough for many cases; a crash here is a stopped process, whose writes the kernel keeps.
            durability: veil_store::Durability::Relaxed,
            wal_segment_bytes_max: DISK_SEGMENT_BYTES_MAX,
            ..veil_store::StoreOptions::default()
        };
        std::sync::Arc::new(veil_store::RedbStore::open(dir, options).expect("store opens"))
    }

    fn restart(&self) {
        let mut current = self.current.write().expect("lock");
        let old = current.take().expect("open");
        if self
            .restarts
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
            .is_multiple_of(2)
        {
            old.abandon();
        } else {
            old.close();
        }
        drop(old);
        *current = Some(Self::open_in(self.dir.path()));
    }

    fn now(&self) -> std::sync::Arc<veil_store::RedbStore> {
        self.current.read().expect("lock").clone().expect("open")
    }
}

impl Store for DiskStore {
    fn load_queues(&self) -> Result<store::Snapshot, StoreError> {
        self.now().load_queues()
    }
    fn load_messages(
        &self,
        each: &mut dyn FnMut(QueueId, Seq, MessageState),
    ) -> Result<(), StoreError> {
        self.now().load_messages(each)
    }
    fn load_redrives(
        &self,
        each: &mut dyn FnMut(QueueId, Seq, MessageRedrivePolicy),
    ) -> Result<(), StoreError> {
        self.now().load_redrives(each)
    }
    fn load_groups(&self, each: &mut dyn FnMut(QueueId, Seq, String)) -> Result<(), StoreError> {
        self.now().load_groups(each)
    }
    fn load_dedup(
        &self,
        each: &mut dyn FnMut(QueueId, String, DedupEntry),
    ) -> Result<(), StoreError> {
        self.now().load_dedup(each)
    }
    fn load_move_tasks(&self) -> Result<Vec<MoveTaskRecord>, StoreError> {
        self.now().load_move_tasks()
    }
    fn load_history(
        &self,
        each: &mut dyn FnMut(QueueId, Seq, DeliveryHistory),
    ) -> Result<(), StoreError> {
        self.now().load_history(each)
    }
    fn submit(&self, ops: Vec<StoreOp>) -> store::Commit {
        self.now().submit(ops)
    }
    fn read_payloads(
        &self,
        queue: QueueId,
        seqs: &[Seq],
    ) -> Result<Vec<Option<Payload>>, StoreError> {
        self.now().read_payloads(queue, seqs)
    }
}

/// 64 cases of the disk-store run by default (each opens and syncs files); `PROPTEST_CASES` sets both.
fn disk_cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(64)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), ..ProptestConfig::default() })]

    #[test]
    fn engine_matches_the_reference_model(ops in prop::collection::vec(op(), 1..80)) {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        runtime.block_on(run(ops));
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: disk_cases(), ..ProptestConfig::default() })]

    /// The same sequences over the disk store (log, checkpoints, recovery), with restarts that crash or close.
    #[test]
    fn engine_over_the_disk_store_matches_the_reference_model(ops in prop::collection::vec(op(), 1..80)) {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let store = std::sync::Arc::new(DiskStore::new());
        let harness = Harness::over(store).on_restart(DiskStore::restart);
        runtime.block_on(run_on(harness, ops));
    }
}

/// 32 cases of the PostgreSQL run by default (each opens a schema and commits to a real server);
/// `PROPTEST_CASES` sets all three.
fn postgres_cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(32)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: postgres_cases(), ..ProptestConfig::default() })]

    /// The same sequences over PgStore, a restart being a reopen (skipped without VEIL_TEST_POSTGRES_URL).
    #[test]
    fn engine_over_the_postgres_store_matches_the_reference_model(ops in prop::collection::vec(op(), 1..80)) {
        let Some(options) = veil_postgres::testing::test_options("model") else {
            return Ok(());
        };
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let harness = Harness::over(std::sync::Arc::new(TestStore::postgres(options)))
            .on_restart(TestStore::reopen);
        runtime.block_on(run_on(harness, ops));
    }
}
