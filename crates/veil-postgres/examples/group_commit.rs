//! How many commits per second PgStore makes with 1 and with N concurrent submitters, and how many
//! submissions each group commit (one transaction) carries. Each submission is what a one-message send
//! writes: the message and its queue's counters. Run against a test server (scripts/pg-test-server):
//!
//! `VEIL_TEST_POSTGRES_URL=postgres://postgres@127.0.0.1:PORT/postgres cargo run --release -p veil-postgres
//!  --example group_commit [seconds per run, default 5] [submitters..., default 1 16]`

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use veil_core::*;
use veil_postgres::testing::test_options;
use veil_postgres::PgStore;

fn send(queue: QueueId, seq: Seq) -> Vec<StoreOp> {
    vec![
        StoreOp::PutMessage(Box::new(veil_core::store::PutMessage {
            queue,
            seq,
            payload: Payload {
                message_id: [1; 16],
                body: Bytes::from_static(&[b'x'; 256]),
                body_md5: [2; 16],
                attributes: Attributes::new(),
                sent_at: 1,
                sender_id: "bench".into(),
                moved_from: None,
                group: None,
                dedup_id: None,
            },
            state: MessageState {
                sent_at: 1,
                visible_at: 1,
                expires_at: NEVER,
                first_received_at: 0,
                receive_count: 0,
                generation: 0,
                body_bytes: 256,
                dead_letter_on_release: false,
            },
            redrive: None,
            fifo_group: None,
        })),
        StoreOp::put_counters(
            queue,
            Counters {
                sends: seq,
                ..Counters::default()
            },
        ),
    ]
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let mut args = std::env::args().skip(1);
    let seconds: u64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(5);
    let mut counts: Vec<u64> = args.filter_map(|a| a.parse().ok()).collect();
    if counts.is_empty() {
        counts = vec![1, 16];
    }
    let Some(options) = test_options("group_commit_bench") else {
        return;
    };
    let store =
        Arc::new(PgStore::open(options, veil_postgres::Scope::Whole).expect("the store opens"));
    store
        .submit(vec![StoreOp::PutQueue(Box::new(QueueRecord {
            id: 1,
            key: QueueKey::new(DEFAULT_NAMESPACE, "bench"),
            config: QueueConfig::default(),
            created_at: 0,
            modified_at: 0,
            seq_reserved: 0,
        }))])
        .await
        .expect("the queue is written");
    let next_seq = Arc::new(AtomicU64::new(0));
    for submitters in counts {
        let transactions_before = store.transactions();
        let commits = Arc::new(AtomicU64::new(0));
        let deadline = Instant::now() + Duration::from_secs(seconds);
        let started = Instant::now();
        let tasks: Vec<_> = (0..submitters)
            .map(|_| {
                let (store, commits, next_seq) = (store.clone(), commits.clone(), next_seq.clone());
                tokio::spawn(async move {
                    while Instant::now() < deadline {
                        let seq = next_seq.fetch_add(1, Ordering::Relaxed);
                        store.submit(send(1, seq)).await.expect("committed");
                        commits.fetch_add(1, Ordering::Relaxed);
                    }
                })
            })
            .collect();
        for task in tasks {
            task.await.expect("submitter");
        }
        let elapsed = started.elapsed().as_secs_f64();
        let commits = commits.load(Ordering::Relaxed);
        let transactions = store.transactions() - transactions_before;
        let per_transaction = commits as f64 / transactions.max(1) as f64;
        println!(
            "{submitters:>3} submitters: {:>8.0} commits/s, {:>7.0} transactions/s, {:.1} submissions per \
             transaction ({:.1} rows written: a message each, the queue's counters once)",
            commits as f64 / elapsed,
            transactions as f64 / elapsed,
            per_transaction,
            per_transaction + 1.0,
        );
    }
    store.close();
}
