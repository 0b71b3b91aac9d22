//! Randomised test of the engine against a simple reference model: random sequences of sends, receives,
//! deletes, visibility changes, clock advances and restarts, with the model predicting exactly which messages
//! each receive returns. Checks the invariants of SPEC §1–2 and §5: never delivered while hidden, nothing
//! acknowledged lost, deleted never redelivered, receive counts only grow, counts add up. proptest prints the
//! shrunk failing sequence and records its seed under `proptest-regressions/`; `PROPTEST_CASES` sets the count.

mod common;

use common::*;
use proptest::prelude::*;
use veil_core::*;

#[derive(Clone, Debug)]
enum Op {
    Send {
        count: usize,
        delay_s: u64,
        ttl_s: Option<u64>,
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
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (1usize..4, prop_oneof![3 => Just(0u64), 1 => 1u64..4], prop_oneof![2 => Just(None), 1 => (4u64..12).prop_map(Some)])
            .prop_map(|(count, delay_s, ttl_s)| Op::Send { count, delay_s, ttl_s }),
        4 => (1usize..5, 0u64..6).prop_map(|(max, visibility_s)| Op::Receive { max, visibility_s }),
        2 => any::<usize>().prop_map(|receipt| Op::Delete { receipt }),
        2 => (any::<usize>(), 0u64..6).prop_map(|(receipt, seconds)| Op::ChangeVisibility { receipt, seconds }),
        3 => (0u64..4_000).prop_map(|ms| Op::Advance { ms }),
        1 => Just(Op::Restart),
    ]
}

struct ModelMessage {
    body: String,
    seq: Seq,
    visible_at: Millis,
    /// `NEVER` for the queue's 4-day retention, which no run reaches.
    expires_at: Millis,
    receive_count: u32,
    generation: u32,
    deleted: bool,
}

struct IssuedReceipt {
    message: usize,
    generation: u32,
    text: String,
}

#[derive(Default)]
struct Model {
    messages: Vec<ModelMessage>,
    receipts: Vec<IssuedReceipt>,
}

impl ModelMessage {
    /// Deleted, or expired by `now`: the engine must behave as if the message were gone.
    fn gone(&self, now: Millis) -> bool {
        self.deleted || self.expires_at <= now
    }
}

impl Model {
    fn expected_receive(&self, now: Millis, max: usize) -> Vec<usize> {
        let mut visible: Vec<usize> = (0..self.messages.len())
            .filter(|&i| !self.messages[i].gone(now) && self.messages[i].visible_at <= now)
            .collect();
        visible.sort_by_key(|&i| (self.messages[i].visible_at, self.messages[i].seq));
        visible.truncate(max);
        visible
    }

    fn counts(&self, now: Millis) -> (u64, u64, u64) {
        let live = self.messages.iter().filter(|m| !m.gone(now));
        let (mut visible, mut hidden, mut delayed) = (0, 0, 0);
        for m in live {
            if m.visible_at <= now {
                visible += 1;
            } else if m.receive_count > 0 {
                hidden += 1;
            } else {
                delayed += 1;
            }
        }
        (visible, hidden, delayed)
    }
}

async fn run(ops: Vec<Op>) {
    let mut h = Harness::new();
    let q = h.queue("q").await;
    let mut model = Model::default();
    for op in ops {
        let now = h.clock.now();
        match op {
            Op::Send {
                count,
                delay_s,
                ttl_s,
            } => {
                let batch: Vec<_> = (0..count)
                    .map(|i| {
                        let mut m = NewMessage::new(format!("m{}", model.messages.len() + i));
                        m.delay_ms = Some(delay_s * 1_000);
                        m.ttl = ttl_s.map(|s| Ttl::After(s * 1_000));
                        m
                    })
                    .collect();
                let sent = h.engine.send(&q, batch).await.unwrap();
                for s in sent {
                    let body = format!("m{}", model.messages.len());
                    model.messages.push(ModelMessage {
                        body,
                        seq: s.seq,
                        visible_at: now + delay_s * 1_000,
                        expires_at: ttl_s.map_or(NEVER, |s| now + s * 1_000),
                        receive_count: 0,
                        generation: 0,
                        deleted: false,
                    });
                }
            }
            Op::Receive { max, visibility_s } => {
                let expected = model.expected_receive(now, max);
                let got = h.receive(&q, max, Some(visibility_s)).await;
                let got_bodies: Vec<&str> = got.iter().map(body).collect();
                let expected_bodies: Vec<&str> = expected
                    .iter()
                    .map(|&i| model.messages[i].body.as_str())
                    .collect();
                assert_eq!(
                    got_bodies, expected_bodies,
                    "receive at {now} returned the wrong messages"
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
                    assert_eq!(message.state.receive_count, m.receive_count);
                    model.receipts.push(IssuedReceipt {
                        message: i,
                        generation: m.generation,
                        text: message.receipt.clone().unwrap(),
                    });
                }
            }
            Op::Delete { receipt } => {
                if model.receipts.is_empty() {
                    continue;
                }
                let r = &model.receipts[receipt % model.receipts.len()];
                let outcome = h
                    .engine
                    .delete(&q, &r.text, ReceiptRule::AnyIssued)
                    .await
                    .unwrap();
                let m = &mut model.messages[r.message];
                let expected = if m.gone(now) {
                    DeleteOutcome::AlreadyGone
                } else {
                    DeleteOutcome::Deleted
                };
                assert_eq!(outcome, expected);
                m.deleted = true;
            }
            Op::ChangeVisibility { receipt, seconds } => {
                if model.receipts.is_empty() {
                    continue;
                }
                let r = &model.receipts[receipt % model.receipts.len()];
                let result = h
                    .engine
                    .change_visibility(&q, &r.text, sqs_change(seconds))
                    .await;
                let m = &mut model.messages[r.message];
                if m.gone(now) || m.generation != r.generation {
                    assert!(
                        matches!(result, Err(EngineError::MessageNotAvailable)),
                        "{result:?}"
                    );
                } else {
                    assert_eq!(result.unwrap(), now + seconds * 1_000);
                    m.visible_at = now + seconds * 1_000;
                }
            }
            Op::Advance { ms } => h.clock.advance_ms(ms),
            Op::Restart => h.restart(),
        }
        h.engine.check_invariants();
        let stats = h.stats(&q);
        let now = h.clock.now();
        assert_eq!(
            (stats.visible, stats.hidden, stats.delayed),
            model.counts(now),
            "counts add up"
        );
    }
    // Nothing acknowledged is lost and nothing deleted comes back: once every deadline passed, receiving
    // everything yields exactly the live messages.
    h.advance_s(3_600);
    let mut bodies: Vec<String> = Vec::new();
    loop {
        let got = h.receive(&q, 10, Some(3_600)).await;
        if got.is_empty() {
            break;
        }
        bodies.extend(got.iter().map(|m| body(m).to_owned()));
    }
    bodies.sort();
    let end = h.clock.now();
    let mut live: Vec<String> = model
        .messages
        .iter()
        .filter(|m| !m.gone(end))
        .map(|m| m.body.clone())
        .collect();
    live.sort();
    assert_eq!(bodies, live);
}

/// 256 cases by default; `PROPTEST_CASES` asks for more (or fewer).
fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(256)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), ..ProptestConfig::default() })]

    #[test]
    fn engine_matches_the_reference_model(ops in prop::collection::vec(op(), 1..80)) {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        runtime.block_on(run(ops));
    }
}
