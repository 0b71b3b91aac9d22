//! PgStore against a real PostgreSQL (skipped without `VEIL_TEST_POSTGRES_URL`; ./scripts/test starts one):
//! every operation means what it means in veil-core's memory store, concurrent submissions share a
//! transaction, barriers order the writer lanes, one failed lane fails them all, acknowledged commits survive a crash, a deposed leader cannot write, and an unreachable or
//! newer database is refused at open.

use std::collections::BTreeMap;
use std::time::Duration;

use bytes::Bytes;
use veil_core::memory_store::MemoryStore;
use veil_core::*;
use veil_postgres::testing::test_options;
use veil_postgres::{connect, PgOptions, PgStore};

fn queue(id: QueueId, name: &str, fifo: bool) -> QueueRecord {
    QueueRecord {
        id,
        key: QueueKey::new(DEFAULT_NAMESPACE, name),
        config: QueueConfig {
            fifo: fifo.then(FifoConfig::default),
            ..QueueConfig::default()
        },
        created_at: 1_000,
        modified_at: 2_000,
        seq_reserved: 64,
    }
}

fn state(receive_count: u32) -> MessageState {
    MessageState {
        sent_at: 1_000,
        visible_at: 5_000 + u64::from(receive_count),
        expires_at: NEVER,
        first_received_at: 0,
        receive_count,
        generation: receive_count,
        body_bytes: 5,
        dead_letter_on_release: receive_count % 2 == 1,
    }
}

fn payload(n: u8, group: Option<&str>) -> Payload {
    let mut attributes = Attributes::new();
    attributes.insert(
        "a".into(),
        AttributeValue {
            data_type: "Binary".into(),
            value: AttributeData::Binary(Bytes::from_static(&[1, 2, 3])),
        },
    );
    Payload {
        message_id: [n; 16],
        body: Bytes::from(format!("body{n}")),
        body_md5: [n + 1; 16],
        attributes,
        sent_at: 1_000 + u64::from(n),
        sender_id: format!("sender{n}"),
        moved_from: None,
        group: group.map(str::to_owned),
        dedup_id: group.map(|_| format!("dedup{n}")),
    }
}

fn put(queue: QueueId, seq: Seq, n: u8, group: Option<&str>, redrive: bool) -> StoreOp {
    StoreOp::PutMessage(Box::new(veil_core::store::PutMessage {
        queue,
        seq,
        payload: payload(n, group),
        state: state(0),
        redrive: redrive.then(|| MessageRedrivePolicy {
            max_receive_count: 3,
            dead_letter_queue: Some(QueueKey::new(DEFAULT_NAMESPACE, "dlq")),
        }),
        fifo_group: group.map(str::to_owned),
    }))
}

fn history(n: u8) -> DeliveryHistory {
    DeliveryHistory {
        message_id: Some([n; 16]),
        deliveries: Vec::new(),
    }
}

fn task(number: u64, moved: u64) -> MoveTaskRecord {
    MoveTaskRecord {
        number,
        id: [9; 16],
        source: 2,
        source_key: QueueKey::new(DEFAULT_NAMESPACE, "dlq"),
        destination: None,
        rate_per_s_max: Some(10),
        started_at: 3_000,
        seq_end: 10,
        to_move: 4,
        moved,
        status: MoveTaskStatus::Running,
        failure: None,
    }
}

/// Every kind of operation, in the shapes the engine makes them (moves, replaced bodies, purges, a deleted
/// queue with messages, dedup ids and histories, move tasks written and deleted).
fn every_op() -> Vec<Vec<StoreOp>> {
    let moved_from = MovedFrom {
        queue: QueueKey::new(DEFAULT_NAMESPACE, "orders"),
        reason: MoveReason::DeadLetter,
    };
    vec![
        vec![
            StoreOp::PutNextQueueId(5),
            StoreOp::PutQueue(Box::new(queue(1, "orders", false))),
            StoreOp::PutQueue(Box::new(queue(2, "dlq", false))),
            StoreOp::PutQueue(Box::new(queue(3, "fifo.fifo", true))),
            StoreOp::PutQueue(Box::new(queue(4, "doomed", true))),
        ],
        vec![
            put(1, 0, 10, None, false),
            put(1, 1, 11, None, true),
            put(1, 2, 12, None, false),
            put(1, 3, 13, None, true),
            put(3, 0, 30, Some("g1"), false),
            put(3, 1, 31, Some("g2"), false),
            put(4, 0, 40, Some("g"), false),
            // Overwritten by the next: a group writes each queue's counters once.
            StoreOp::put_counters(
                1,
                Counters {
                    sends: 1,
                    ..Counters::default()
                },
            ),
            StoreOp::put_counters(
                1,
                Counters {
                    sends: 4,
                    deliveries: 2,
                    redeliveries: 1,
                    deletes: 7,
                    expiries: 8,
                    dead_letter_moves: 9,
                    dead_letter_drops: 10,
                    purges: 11,
                    moves_out: 12,
                },
            ),
            StoreOp::PutDedup {
                queue: 3,
                key: "dedup30".into(),
                entry: DedupEntry {
                    sent_at: 1_030,
                    message_id: [30; 16],
                    seq: 0,
                },
            },
            StoreOp::PutDedup {
                queue: 3,
                key: "gone".into(),
                entry: DedupEntry {
                    sent_at: 1,
                    message_id: [1; 16],
                    seq: 7,
                },
            },
            StoreOp::PutDedup {
                queue: 4,
                key: "dedup40".into(),
                entry: DedupEntry {
                    sent_at: 1_040,
                    message_id: [40; 16],
                    seq: 0,
                },
            },
        ],
        vec![
            StoreOp::PutState {
                queue: 1,
                seq: 0,
                state: state(1),
            },
            StoreOp::PutHistory {
                queue: 1,
                seq: 0,
                history: history(10),
            },
            StoreOp::PutHistory {
                queue: 1,
                seq: 1,
                history: history(11),
            },
            StoreOp::PutHistory {
                queue: 4,
                seq: 0,
                history: history(40),
            },
            // No message: no history (as in veil-store).
            StoreOp::PutHistory {
                queue: 1,
                seq: 99,
                history: history(99),
            },
            StoreOp::ReplaceBody {
                queue: 1,
                seq: 2,
                body: Bytes::from_static(b"replaced"),
                body_md5: [7; 16],
            },
            StoreOp::MoveMessage(Box::new(veil_core::store::MoveMessage {
                from: (1, 1),
                to: (2, 0),
                state: state(0),
                moved_from: moved_from.clone(),
                redrive: None,
                fifo_group: None,
            })),
            StoreOp::PutHistory {
                queue: 2,
                seq: 0,
                history: history(12),
            },
            // Its payload is gone: nothing arrives.
            StoreOp::MoveMessage(Box::new(veil_core::store::MoveMessage {
                from: (1, 50),
                to: (2, 1),
                state: state(0),
                moved_from: moved_from.clone(),
                redrive: None,
                fifo_group: None,
            })),
            StoreOp::MoveMessage(Box::new(veil_core::store::MoveMessage {
                from: (1, 3),
                to: (3, 2),
                state: state(2),
                moved_from: MovedFrom {
                    queue: QueueKey::new(DEFAULT_NAMESPACE, "orders"),
                    reason: MoveReason::Requeue,
                },
                redrive: Some(MessageRedrivePolicy {
                    max_receive_count: 1,
                    dead_letter_queue: None,
                }),
                fifo_group: Some("g3".into()),
            })),
            StoreOp::PutMoveTask(Box::new(task(1, 0))),
            StoreOp::PutMoveTask(Box::new(task(2, 0))),
        ],
        vec![
            StoreOp::PutMoveTask(Box::new(task(1, 3))),
            StoreOp::DeleteMoveTask { number: 2 },
            StoreOp::DeleteDedup {
                queue: 3,
                key: "gone".into(),
            },
            StoreOp::DeleteMessage { queue: 1, seq: 0 },
            StoreOp::DeleteQueue(4),
            StoreOp::PutQueue(Box::new(QueueRecord {
                modified_at: 9_000,
                ..queue(2, "dlq", false)
            })),
        ],
        vec![],
        vec![put(1, 4, 14, None, false), put(1, 5, 15, None, false)],
        vec![StoreOp::PurgeQueue(1), put(1, 6, 16, None, false)],
    ]
}

/// Everything a store gives back: what start-up loads, and every loaded message's payload.
#[derive(Debug, PartialEq)]
struct Dump {
    next_queue_id: QueueId,
    queues: Vec<(QueueRecord, Counters)>,
    messages: Vec<(QueueId, Seq, MessageState, Option<Payload>)>,
    redrives: Vec<(QueueId, Seq, MessageRedrivePolicy)>,
    groups: Vec<(QueueId, Seq, String)>,
    dedup: BTreeMap<(QueueId, String), DedupEntry>,
    move_tasks: Vec<MoveTaskRecord>,
    histories: Vec<(QueueId, Seq, DeliveryHistory)>,
}

fn dump(store: &dyn Store) -> Dump {
    let snapshot = store.load_queues().unwrap();
    let mut messages = Vec::new();
    store
        .load_messages(&mut |q, s, state| messages.push((q, s, state, None)))
        .unwrap();
    for message in &mut messages {
        message.3 = store
            .read_payloads(message.0, &[message.1])
            .unwrap()
            .remove(0);
    }
    let mut redrives = Vec::new();
    store
        .load_redrives(&mut |q, s, p| redrives.push((q, s, p)))
        .unwrap();
    let mut groups = Vec::new();
    store
        .load_groups(&mut |q, s, g| groups.push((q, s, g)))
        .unwrap();
    let mut dedup = BTreeMap::new();
    store
        .load_dedup(&mut |q, k, e| {
            dedup.insert((q, k), e);
        })
        .unwrap();
    let mut histories = Vec::new();
    store
        .load_history(&mut |q, s, h| histories.push((q, s, h)))
        .unwrap();
    Dump {
        next_queue_id: snapshot.next_queue_id,
        queues: snapshot.queues,
        messages,
        redrives,
        groups,
        dedup,
        move_tasks: store.load_move_tasks().unwrap(),
        histories,
    }
}

fn open(options: &PgOptions) -> PgStore {
    PgStore::open(options.clone(), veil_postgres::Scope::Whole).expect("the store opens")
}

#[tokio::test]
async fn every_operation_round_trips_as_in_the_memory_store() {
    let Some(options) = test_options("round_trips") else {
        return;
    };
    let store = open(&options);
    let memory = MemoryStore::new();
    for ops in every_op() {
        memory.submit(ops.clone()).await.unwrap();
        store.submit(ops).await.unwrap();
    }
    let expected = dump(&memory);
    assert_eq!(dump(&store), expected, "read back by the same store");
    // Payloads the moves and replacements made, spelled out.
    let moved = store.read_payloads(2, &[0, 1]).unwrap();
    assert_eq!(
        moved[0].as_ref().unwrap().dead_letter_source(),
        Some(&QueueKey::new(DEFAULT_NAMESPACE, "orders"))
    );
    assert!(
        moved[1].is_none(),
        "a move of a gone message leaves nothing"
    );
    store.close();
    let reopened = open(&options);
    assert_eq!(dump(&reopened), expected, "read back after a reopen");
    assert_eq!(reopened.stored_counts().unwrap(), (5, 1));
}

/// A database an older Veil wrote (schema V2: a message's state, body and FIFO group in one row, delivery
/// histories in a table of their own) keeps every queue, message, history, deduplication id and move task
/// when this binary's migrations (V3 splits states from bodies, V4 the fence) run over it at start-up.
#[tokio::test]
async fn a_database_written_under_schema_v2_keeps_everything_across_the_upgrade() {
    let (Some(current), Some(old)) = (test_options("upgrade_src"), test_options("upgrade_v2"))
    else {
        return;
    };
    // The data, written by this binary (the stored encodings of states, payloads and histories did not change
    // across V3; only where they live did).
    let store = open(&current);
    for ops in every_op() {
        store.submit(ops).await.unwrap();
    }
    let mut expected = dump(&store);
    store.close();
    // Schema V9 added the purge and move-out totals; an older Veil had none, so they read back as 0.
    for (_, counters) in &mut expected.queues {
        (counters.purges, counters.moves_out) = (0, 0);
    }
    // The same data as an older Veil stored it, under schema V2.
    let mut client = connect(&old).await.unwrap();
    veil_postgres::migrations::run_until(&mut client, 2)
        .await
        .unwrap();
    let src = veil_postgres::connect::quote_ident(&current.schema);
    client
        .batch_execute(&format!(
            "INSERT INTO veil_queue SELECT id, namespace, name, record, sends, deliveries, redeliveries,
                  deletes, expiries, dead_letter_moves, dead_letter_drops FROM {src}.veil_queue;
             INSERT INTO veil_store_meta SELECT * FROM {src}.veil_store_meta;
             INSERT INTO veil_dedup SELECT * FROM {src}.veil_dedup;
             INSERT INTO veil_move_task SELECT number, record FROM {src}.veil_move_task;
             INSERT INTO veil_message (queue, seq, message_id, sent_at, state, redrive, fifo_group, moved_from,
                                       attrs, body_md5, body)
                  SELECT s.queue, s.seq, b.message_id, b.sent_at, s.state, s.redrive, s.fifo_group,
                         b.moved_from, b.attrs, b.body_md5, b.body
                    FROM {src}.veil_state s JOIN {src}.veil_body b USING (queue, seq);
             INSERT INTO veil_history SELECT queue, seq, history FROM {src}.veil_state
                  WHERE history IS NOT NULL;"
        ))
        .await
        .unwrap();
    let copied = client
        .query_one(
            "SELECT (SELECT count(*) FROM veil_message), (SELECT count(*) FROM veil_history)",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(
        (copied.get::<_, i64>(0), copied.get::<_, i64>(1)),
        (5, 1),
        "the V2 tables hold the data"
    );
    drop(client);
    let upgraded = open(&old);
    assert_eq!(dump(&upgraded), expected);
    assert_eq!(upgraded.stored_counts().unwrap(), (5, 1));
}

#[tokio::test]
async fn a_reopened_engine_over_the_same_store_reads_the_database_afresh() {
    let Some(options) = test_options("reload") else {
        return;
    };
    let store = open(&options);
    store.load_queues().unwrap();
    store
        .submit(vec![StoreOp::PutQueue(Box::new(queue(1, "orders", false)))])
        .await
        .unwrap();
    assert_eq!(store.load_queues().unwrap().queues.len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_submissions_share_transactions() {
    let Some(options) = test_options("group_commit") else {
        return;
    };
    let store = std::sync::Arc::new(open(&options));
    store
        .submit(vec![StoreOp::PutQueue(Box::new(queue(1, "orders", false)))])
        .await
        .unwrap();
    let before = store.transactions();
    const SUBMISSIONS: u64 = 200;
    // All submitted before any is awaited, as the engine's concurrent callers do.
    let commits: Vec<_> = (0..SUBMISSIONS)
        .map(|seq| store.submit(vec![put(1, seq, 1, None, false)]))
        .collect();
    for commit in commits {
        commit.await.unwrap();
    }
    let transactions = store.transactions() - before;
    assert!(
        transactions * 4 <= SUBMISSIONS,
        "{SUBMISSIONS} submissions took {transactions} transactions"
    );
    assert_eq!(store.stored_counts().unwrap().0, SUBMISSIONS);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_barrier_commits_after_every_lane_and_before_what_follows_it() {
    let Some(mut options) = test_options("lanes_barrier") else {
        return;
    };
    options.writers = 4;
    let store = open(&options);
    let queues: Vec<_> = (1..=4)
        .map(|id| StoreOp::PutQueue(Box::new(queue(id, &format!("q{id}"), false))))
        .collect();
    store.submit(queues).await.unwrap();
    const EACH: u64 = 100;
    // Queues 1 to 4 are on four lanes; nothing is awaited until the end, as with concurrent callers.
    let mut commits: Vec<_> = (0..EACH)
        .flat_map(|seq| (1..=4).map(move |id| (id, seq)))
        .map(|(id, seq)| store.submit(vec![put(id, seq, 1, None, false)]))
        .collect();
    commits.push(store.submit(vec![StoreOp::PurgeQueue(3)]));
    commits.extend((EACH..EACH + 10).map(|seq| store.submit(vec![put(3, seq, 1, None, false)])));
    for commit in commits {
        commit.await.unwrap();
    }
    assert_eq!(
        store.stored_counts().unwrap().0,
        3 * EACH + 10,
        "the purge removed all of queue 3's earlier messages and none of its later ones"
    );
}

#[tokio::test]
async fn a_failed_lane_fails_every_lane() {
    let Some(mut options) = test_options("lanes_failure") else {
        return;
    };
    options.writers = 4;
    drop(open(&options));
    let store = PgStore::open(options.clone(), veil_postgres::Scope::Leader { epoch: 0 })
        .expect("opens under epoch 0");
    let queues: Vec<_> = (1..=2)
        .map(|id| StoreOp::PutQueue(Box::new(queue(id, &format!("q{id}"), false))))
        .collect();
    store.submit(queues).await.unwrap();
    let other = connect(&options).await.unwrap();
    other
        .batch_execute("UPDATE veil_lease SET epoch = epoch + 1 WHERE id = 1")
        .await
        .unwrap();
    assert!(store.submit(vec![put(1, 0, 1, None, false)]).await.is_err());
    // Queue 2 is on another lane, whose connection never met the fence: the store's failure refuses it.
    match store.submit(vec![put(2, 0, 1, None, false)]).await {
        Err(StoreError::Unavailable(message)) => {
            assert!(message.contains("accepts no more writes"), "{message}")
        }
        other => panic!("expected Unavailable, got {other:?}"),
    }
}

#[tokio::test]
async fn an_acknowledged_commit_survives_a_crash() {
    let Some(options) = test_options("crash") else {
        return;
    };
    let store = open(&options);
    store
        .submit(vec![
            StoreOp::PutQueue(Box::new(queue(1, "orders", false))),
            put(1, 0, 1, None, false),
        ])
        .await
        .unwrap();
    drop(store); // no close: what a killed process leaves
    let reopened = open(&options);
    let dump = dump(&reopened);
    assert_eq!(dump.queues.len(), 1);
    assert_eq!(dump.messages.len(), 1);
    assert_eq!(dump.messages[0].3, Some(payload(1, None)));
}

#[tokio::test]
async fn a_deposed_leader_cannot_write() {
    let Some(options) = test_options("fencing") else {
        return;
    };
    // The migrations make the lease row (epoch 0).
    drop(open(&options));
    let store = PgStore::open(options.clone(), veil_postgres::Scope::Leader { epoch: 0 })
        .expect("opens under epoch 0");
    let failed = store.failed();
    store
        .submit(vec![StoreOp::PutQueue(Box::new(queue(1, "orders", false)))])
        .await
        .expect("the leader writes");
    assert!(!*failed.borrow());
    let other = connect(&options).await.unwrap();
    other
        .batch_execute("UPDATE veil_lease SET epoch = epoch + 1 WHERE id = 1")
        .await
        .unwrap();
    let refused = store
        .submit(vec![StoreOp::PutQueue(Box::new(queue(2, "dlq", false)))])
        .await;
    match refused {
        Err(StoreError::Unavailable(message)) => {
            assert!(message.contains("leader lease"), "{message}")
        }
        other => panic!("expected Unavailable, got {other:?}"),
    }
    assert!(*failed.borrow(), "failed() turns true");
    assert!(matches!(
        store.submit(vec![]).await,
        Err(StoreError::Unavailable(_))
    ));
    assert!(matches!(
        store
            .submit(vec![StoreOp::PutQueue(Box::new(queue(3, "x", false)))])
            .await,
        Err(StoreError::Unavailable(_))
    ));
    let row = other
        .query_one("SELECT count(*) FROM veil_queue", &[])
        .await
        .unwrap();
    assert_eq!(
        row.get::<_, i64>(0),
        1,
        "nothing after the epoch bump was written"
    );
}

#[tokio::test]
async fn an_unreachable_database_fails_open_quickly() {
    let Some(options) = test_options("unreachable") else {
        return;
    };
    let port = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    // Long timeouts: "quickly" is the refused connection's own answer, not one of the store's timeouts (which
    // would say "timed out"), so no wall-clock bound is needed.
    let options = PgOptions {
        url: format!("postgres://postgres@127.0.0.1:{port}/postgres"),
        connect_timeout: Duration::from_secs(30),
        statement_timeout: Duration::from_secs(30),
        ..options
    };
    match PgStore::open(options, veil_postgres::Scope::Whole) {
        Err(StoreError::Unavailable(why)) => {
            assert!(!why.contains("timed out"), "waited for a timeout: {why}")
        }
        other => panic!("not unavailable: {:?}", other.err()),
    }
}

#[tokio::test]
async fn a_schema_migrated_by_a_newer_veil_is_refused() {
    let Some(options) = test_options("newer_schema") else {
        return;
    };
    drop(open(&options));
    let client = connect(&options).await.unwrap();
    client
        .batch_execute(
            "INSERT INTO veil_schema_history (version, name, applied_on, checksum) \
             VALUES (99, 'from_the_future', '2030-01-01T00:00:00Z', '0')",
        )
        .await
        .unwrap();
    let result = PgStore::open(options, veil_postgres::Scope::Whole);
    assert!(
        matches!(result, Err(StoreError::Incompatible(_))),
        "{:?}",
        result.err()
    );
}

#[tokio::test]
async fn reads_after_a_failure_answer_within_the_call_timeout() {
    let Some(options) = test_options("read_after_failure") else {
        return;
    };
    drop(open(&options));
    let store = PgStore::open(options.clone(), veil_postgres::Scope::Leader { epoch: 0 }).unwrap();
    store
        .submit(vec![
            StoreOp::PutQueue(Box::new(queue(1, "orders", false))),
            put(1, 0, 1, None, false),
        ])
        .await
        .unwrap();
    let other = connect(&options).await.unwrap();
    other
        .batch_execute("UPDATE veil_lease SET epoch = epoch + 1 WHERE id = 1")
        .await
        .unwrap();
    assert!(store.submit(vec![put(1, 1, 2, None, false)]).await.is_err());
    // The readers have connections of their own, which the writer's failure leaves open: the read answers with
    // what was committed. A reader that did not answer within the call timeout (and its margin) would make
    // `read_payloads` return `Unavailable`, so the answer itself shows it came within the timeout.
    let payloads = store
        .read_payloads(1, &[0, 1])
        .expect("a read after the writer failed answers");
    assert_eq!(payloads, vec![Some(payload(1, None)), None]);
}

/// The lease row's locks: a write's fence (FOR KEY SHARE) never delays the holder's renewal or release — with
/// several writer connections some fence is nearly always in flight, and a renewal that waited for them
/// starved — while a takeover waits for every fence in flight, and a fence after it fails.
#[tokio::test]
async fn a_renewal_never_waits_for_a_fence_and_a_takeover_always_does() {
    let Some(options) = test_options("fence_locks") else {
        return;
    };
    use veil_postgres::lease::{self, LeaderAddrs};
    drop(open(&options));
    // The holder and the taker give up a lock wait after 500 ms; the writer's session outlives the test.
    let short = options.clone().guarded_below(Duration::from_millis(1_000));
    let holder = connect(&short).await.unwrap();
    let taker = connect(&short).await.unwrap();
    let writer = connect(&options.clone().guarded_below(Duration::from_secs(60)))
        .await
        .unwrap();
    let addrs = LeaderAddrs::default();
    let term = Duration::from_secs(30);
    let lease = lease::try_acquire(&holder, "holder", &addrs, term)
        .await
        .unwrap()
        .expect("a lapsed lease is taken");
    writer
        .batch_execute(&format!("BEGIN; SELECT veil_fence({})", lease.epoch))
        .await
        .expect("the holder's fence passes");
    assert!(
        lease::renew(&holder, &lease, term).await.unwrap(),
        "renewed while a fenced write is in flight"
    );
    lease::release(&holder, &lease).await.unwrap();
    match lease::try_acquire(&taker, "taker", &addrs, term).await {
        Err(StoreError::Unavailable(message)) => {
            assert!(message.contains("lock timeout"), "{message}")
        }
        other => panic!("a takeover did not wait for the fence in flight: {other:?}"),
    }
    writer.batch_execute("COMMIT").await.unwrap();
    let taken = lease::try_acquire(&taker, "taker", &addrs, term)
        .await
        .unwrap()
        .expect("taken once the write committed");
    assert!(taken.epoch > lease.epoch);
    let fenced = writer
        .batch_execute(&format!("SELECT veil_fence({})", lease.epoch))
        .await
        .expect_err("the old epoch's fence fails");
    assert_eq!(fenced.code().map(|code| code.code()), Some("VL001"));
}

/// A node frozen inside a write transaction (SIGSTOP, a lost host) holds the lease row FOR KEY SHARE, which
/// a takeover (FOR UPDATE) waits for: the server
/// must end its session within the session guard, so that a new holder's epoch bump is not stalled for the
/// ~2 h of the kernel's keepalive.
#[tokio::test]
async fn a_session_frozen_inside_a_transaction_does_not_stall_a_lease_takeover() {
    let Some(options) = test_options("frozen_session") else {
        return;
    };
    let options = options.guarded_below(Duration::from_millis(1_000));
    drop(open(&options));
    let frozen = connect(&options).await.unwrap();
    frozen
        .batch_execute("BEGIN; SELECT veil_fence(0)")
        .await
        .expect("the fence passes under epoch 0");
    // The frozen node sends nothing more. A taker waits no longer than the session guard for its lock
    // (whichever timeout ends it first: the frozen session's idle timeout or the taker's lock timeout).
    let taker = connect(&options).await.unwrap();
    let mut took = false;
    let addrs = veil_postgres::lease::LeaderAddrs::default();
    for _attempt in 0..10 {
        match veil_postgres::lease::try_acquire(&taker, "taker", &addrs, Duration::from_secs(5))
            .await
        {
            Ok(taken) => {
                took = taken.is_some();
                break;
            }
            // The taker's lock timeout ended this attempt (SQLSTATE 55P03); the next one may find the row free.
            Err(StoreError::Unavailable(message)) if message.contains("lock timeout") => {}
            Err(error) => panic!("{error}"),
        }
    }
    assert!(took, "the lease row stayed locked by the frozen session");
    let ended = frozen.batch_execute("SELECT 1").await;
    assert!(ended.is_err(), "the frozen session was ended by the server");
}
