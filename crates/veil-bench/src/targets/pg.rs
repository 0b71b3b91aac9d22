//! The `pg-skip-locked` peer: a plain SQL queue in PostgreSQL driven directly by the bench, the raw
//! database's ceiling for this workload (docs/benchmarks.md "Scale-out over PostgreSQL"): what a queue on the same PostgreSQL costs when there is
//! no Veil in front of it, in the shape of pgmq, River and Oban.
//!
//! Mapping, one table per queue (`id bigserial primary key, body bytea, visible_at timestamptz,
//! receive_count int`):
//! - send = one `INSERT` (a batch is one multi-row `INSERT … SELECT unnest($1)`: one statement, one
//!   transaction, one commit, as a SendMessageBatch is one request);
//! - receive = `UPDATE q SET visible_at = now() + vt, receive_count = receive_count + 1 WHERE id IN (SELECT id
//!   FROM q WHERE visible_at <= now() ORDER BY id LIMIT n FOR UPDATE SKIP LOCKED) RETURNING …`: the
//!   visibility deadline is the column, so a delivery not deleted in time is visible again by itself;
//! - delete = `DELETE … WHERE (id, receive_count)` of the handles: the handle is `id:receive_count`, so a
//!   stale handle (the message was redelivered since) deletes nothing, as a stale SQS receipt would not.
//!
//! SQL has no long poll: a receive that finds nothing polls again with a 1–32 ms back-off until its wait is
//! over (LISTEN/NOTIFY would wake it sooner at the cost of a notification per send; under the throughput
//! scenario's load the consumers seldom find the queue empty, so polling costs little there).
//!
//! Durability is the server's default: `synchronous_commit = on`, so every commit waits for its WAL to be
//! flushed, as Veil's PgStore does. Only the primary key is indexed: the receive scans the key in order and
//! filters on `visible_at`, and an update of the unindexed `visible_at` can stay a HOT update. Sessions plan
//! keyed lookups only, as Veil's writer sessions do (see `client`).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use bytes::Bytes;
use tokio::sync::OnceCell;
use tokio_postgres::{Client, NoTls, Statement};

use crate::target::{Delivery, Target, TargetError, TargetResult};

const NAME: &str = "pg-skip-locked";
/// First and longest pause between the polls of a receive that found nothing (doubling in between).
const POLL_FIRST: Duration = Duration::from_millis(1);
const POLL_MAX: Duration = Duration::from_millis(32);

/// Gives every clone's connection a distinct `application_name`, so `pg_stat_activity` tells them apart.
static NEXT_CLIENT: AtomicU64 = AtomicU64::new(0);

fn failed(message: String) -> TargetError {
    TargetError::Failed {
        target: NAME,
        message,
    }
}

/// The table of `queue`: its name reduced to `[a-z0-9_]`, prefixed, and quoted. The suite's queue names are
/// `vb-<scenario>-<hex>`, so the reduction keeps them distinct.
fn table(queue: &str) -> String {
    let cleaned: String = queue
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '_'
            }
        })
        .collect();
    format!("\"vbq_{cleaned}\"")
}

/// The handle of a delivery: the row's id and its receive count (which the receive just bumped).
fn handle(id: i64, receive_count: i32) -> String {
    format!("{id}:{receive_count}")
}

fn parse_handle(handle: &str) -> TargetResult<(i64, i32)> {
    let bad = || failed(format!("malformed handle {handle:?}"));
    let (id, count) = handle.split_once(':').ok_or_else(bad)?;
    Ok((
        id.parse().map_err(|_| bad())?,
        count.parse().map_err(|_| bad())?,
    ))
}

/// One queue's statements, prepared on one connection (a prepared statement belongs to its connection).
#[derive(Clone)]
struct Statements {
    send_one: Statement,
    send_many: Statement,
    receive: Statement,
    delete: Statement,
}

/// A PostgreSQL SKIP LOCKED queue. Each clone (each producer or consumer task) opens its own connection on
/// first use: one connection runs one statement at a time, so sharing it would serialise the tasks.
pub struct PgTarget {
    endpoint: Arc<str>,
    client: OnceCell<Client>,
    statements: Mutex<HashMap<String, Statements>>,
}

impl Clone for PgTarget {
    fn clone(&self) -> Self {
        Self {
            endpoint: Arc::clone(&self.endpoint),
            client: OnceCell::new(),
            statements: Mutex::new(HashMap::new()),
        }
    }
}

impl PgTarget {
    /// Connects to `endpoint` (`postgres://user@host:port/db`, or libpq `key=value`) and checks that the
    /// server answers.
    pub async fn connect(endpoint: &str) -> TargetResult<Self> {
        let target = Self {
            endpoint: endpoint.into(),
            client: OnceCell::new(),
            statements: Mutex::new(HashMap::new()),
        };
        target
            .client()
            .await?
            .simple_query("SELECT 1")
            .await
            .map_err(|e| failed(format!("SELECT 1 on {endpoint}: {e}")))?;
        Ok(target)
    }

    /// This clone's connection, opened on first use; its driver task runs until the client is dropped.
    async fn client(&self) -> TargetResult<&Client> {
        self.client
            .get_or_try_init(|| async {
                let mut config: tokio_postgres::Config = self
                    .endpoint
                    .parse()
                    .map_err(|e| failed(format!("bad endpoint {:?}: {e}", self.endpoint)))?;
                config.application_name(format!(
                    "veil-bench-{}",
                    NEXT_CLIENT.fetch_add(1, Ordering::Relaxed)
                ));
                let (client, connection) = config
                    .connect(NoTls)
                    .await
                    .map_err(|e| failed(format!("connect: {e}")))?;
                tokio::spawn(async move {
                    // The connection ends when the client is dropped; an error here also fails the
                    // client's next query, which reports it.
                    let _ = connection.await;
                });
                // Keyed lookups only, as Veil's own writer sessions plan (crates/veil-postgres
                // `sql::WRITER_PLANS`): the statements are prepared while the table is empty, and the generic
                // plan made from that — a sequential scan and a hash join for every delete — grew with the
                // backlog until the consumers could not drain it.
                client
                    .batch_execute(
                        "SET enable_seqscan = off; SET enable_hashjoin = off; SET enable_mergejoin = off",
                    )
                    .await
                    .map_err(|e| failed(format!("session settings: {e}")))?;
                Ok(client)
            })
            .await
    }

    /// The statements of `queue` on this clone's connection, prepared on first use.
    async fn statements(&self, queue: &str) -> TargetResult<Statements> {
        if let Some(prepared) = self
            .statements
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(queue)
        {
            return Ok(prepared.clone());
        }
        let client = self.client().await?;
        let t = table(queue);
        let prepare = |sql: String| async move {
            client
                .prepare(&sql)
                .await
                .map_err(|e| failed(format!("prepare {sql}: {e}")))
        };
        let prepared = Statements {
            send_one: prepare(format!("INSERT INTO {t} (body) VALUES ($1)")).await?,
            send_many: prepare(format!("INSERT INTO {t} (body) SELECT unnest($1::bytea[])"))
                .await?,
            receive: prepare(format!(
                "UPDATE {t} SET visible_at = now() + $2::float8 * interval '1 second', \
                 receive_count = receive_count + 1 \
                 WHERE id IN (SELECT id FROM {t} WHERE visible_at <= now() ORDER BY id \
                 LIMIT $1 FOR UPDATE SKIP LOCKED) \
                 RETURNING id, body, receive_count"
            ))
            .await?,
            delete: prepare(format!(
                "DELETE FROM {t} USING unnest($1::bigint[], $2::int[]) AS d(id, rc) \
                 WHERE {t}.id = d.id AND {t}.receive_count = d.rc"
            ))
            .await?,
        };
        self.statements
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(queue.to_owned(), prepared.clone());
        Ok(prepared)
    }
}

impl Target for PgTarget {
    fn name(&self) -> &'static str {
        NAME
    }

    /// Drops and recreates the queue's table (the visibility timeout is each receive's own, as in SQS).
    async fn prepare(&self, queue: &str, _visibility_s: u32) -> TargetResult<()> {
        let t = table(queue);
        let sql = format!(
            "DROP TABLE IF EXISTS {t}; \
             CREATE TABLE {t} (id bigserial PRIMARY KEY, body bytea NOT NULL, \
             visible_at timestamptz NOT NULL DEFAULT now(), receive_count int NOT NULL DEFAULT 0)"
        );
        self.client()
            .await?
            .batch_execute(&sql)
            .await
            .map_err(|e| failed(format!("creating {t}: {e}")))?;
        self.statements
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(queue);
        Ok(())
    }

    async fn send(&self, queue: &str, bodies: Vec<Bytes>) -> TargetResult<()> {
        let statements = self.statements(queue).await?;
        let client = self.client().await?;
        let inserted = match bodies.as_slice() {
            [] => return Ok(()),
            [body] => client
                .execute(&statements.send_one, &[&body.as_ref()])
                .await
                .map_err(|e| failed(format!("INSERT into {queue}: {e}")))?,
            many => {
                let rows: Vec<&[u8]> = many.iter().map(AsRef::as_ref).collect();
                client
                    .execute(&statements.send_many, &[&rows])
                    .await
                    .map_err(|e| failed(format!("INSERT x{} into {queue}: {e}", many.len())))?
            }
        };
        if inserted as usize != bodies.len() {
            return Err(failed(format!(
                "INSERT x{} into {queue} inserted {inserted}",
                bodies.len()
            )));
        }
        Ok(())
    }

    async fn receive(
        &self,
        queue: &str,
        max: usize,
        visibility_s: u32,
        wait_s: u32,
    ) -> TargetResult<Vec<Delivery>> {
        let statements = self.statements(queue).await?;
        let client = self.client().await?;
        let limit = max.max(1) as i64;
        let visibility = f64::from(visibility_s);
        let deadline = Instant::now() + Duration::from_secs(u64::from(wait_s));
        let mut pause = POLL_FIRST;
        loop {
            let rows = client
                .query(&statements.receive, &[&limit, &visibility])
                .await
                .map_err(|e| failed(format!("receive from {queue}: {e}")))?;
            if !rows.is_empty() {
                return rows
                    .iter()
                    .map(|row| {
                        let id: i64 = row.try_get(0).map_err(|e| failed(e.to_string()))?;
                        let body: Vec<u8> = row.try_get(1).map_err(|e| failed(e.to_string()))?;
                        let count: i32 = row.try_get(2).map_err(|e| failed(e.to_string()))?;
                        Ok(Delivery {
                            body: Bytes::from(body),
                            handle: handle(id, count),
                        })
                    })
                    .collect();
            }
            let now = Instant::now();
            if now >= deadline {
                return Ok(Vec::new());
            }
            tokio::time::sleep(pause.min(deadline - now)).await;
            pause = (pause * 2).min(POLL_MAX);
        }
    }

    async fn delete(&self, queue: &str, handles: Vec<String>) -> TargetResult<()> {
        if handles.is_empty() {
            return Ok(());
        }
        let statements = self.statements(queue).await?;
        let client = self.client().await?;
        let (ids, counts): (Vec<i64>, Vec<i32>) = handles
            .iter()
            .map(|h| parse_handle(h))
            .collect::<TargetResult<Vec<_>>>()?
            .into_iter()
            .unzip();
        // Fewer rows deleted than handles is not an error: a stale handle settles nothing, as in SQS.
        client
            .execute(&statements.delete, &[&ids, &counts])
            .await
            .map_err(|e| failed(format!("DELETE x{} from {queue}: {e}", handles.len())))?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_are_quoted_and_reduced_to_safe_characters() {
        assert_eq!(table("vb-tp-0a1B2c3d"), "\"vbq_vb_tp_0a1b2c3d\"");
        assert_eq!(table("a\"; DROP"), "\"vbq_a___drop\"");
    }

    #[test]
    fn handles_carry_id_and_receive_count() {
        assert_eq!(parse_handle(&handle(42, 3)).unwrap(), (42, 3));
        for bad in ["", "42", "x:1", "1:y", "1:2:3"] {
            assert!(parse_handle(bad).is_err(), "{bad}");
        }
    }

    /// Against a live server: `VEIL_BENCH_PG=postgres://postgres@127.0.0.1:5432/postgres cargo test -p
    /// veil-bench -- --ignored pg`.
    #[tokio::test]
    #[ignore = "needs a running PostgreSQL; set VEIL_BENCH_PG"]
    async fn pg_round_trip_and_redelivery() {
        let endpoint = std::env::var("VEIL_BENCH_PG")
            .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".into());
        let target = PgTarget::connect(&endpoint).await.expect("connect");
        crate::target::check_round_trip_and_redelivery(target).await;
    }
}
