//! One writer for all the partitions a node owns on a database (docs/decisions/0011-partitioned-ownership.md,
//! "One writer per node"). With a writer per partition, a node owning P partitions split its load into P
//! streams of group commits, each P times smaller, and PostgreSQL paid per transaction (docs/benchmarks.md
//! "Partitions"). A [`SharedWriter`] takes the submissions of every partition store opened over it and commits
//! whatever is waiting, of any partition, in one transaction: BEGIN, each partition's fencing check, each
//! partition's planned statements, COMMIT, pipelined in one round trip as a store's own writer does.
//!
//! Each partition keeps its own failure: a transaction that fails its fencing check is repeated without the
//! partitions whose epoch moved on (they fail, as their own writer would have failed them), so a partition
//! taken over by another node does not fail the others; any other failure (the database down, a timeout)
//! fails every partition in the transaction, since what it did is unknown. A partition's submissions keep
//! their order: they all go to one lane (its partition number modulo the lanes), which commits in order.
//!
//! The partition's store keeps its own connection for start-up loads and counts, run once its submissions
//! before them have committed (`dispatch`), and its own readers.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};
use tokio::time::timeout;
use tokio_postgres::{Client, Statement};
use veil_core::{StoreError, StoreOp};

use super::io::{self, Done, Failed, Job, Shared, Writer};
use super::plan::{self, Batch};
use super::sql::{self, Prepared};
use super::{batch, Scope};
use crate::connect::{db_error, unavailable, PgOptions};
use crate::limits::{GROUP_BYTES_MAX, GROUP_OPS_MAX};

/// Every partition of a group fenced in one statement (migrations/V8__fence_partitions.sql).
const FENCE_PARTITIONS: &str = "SELECT veil_fence_partitions($1, $2)";

/// One submission of one partition's store, on its way to the shared writer.
pub(super) struct Unit {
    scope: Scope,
    ops: Vec<StoreOp>,
    /// The submitter's answer.
    done: Done,
    /// Tells the store's dispatcher the unit is settled (committed or failed), so that a load waits for it.
    settled: oneshot::Sender<()>,
    /// The store's failure, which a failed unit sets and a failed store's units are refused with.
    shared: Shared,
}

impl Unit {
    fn answer(self, result: &Result<(), StoreError>) {
        let _submitter_gone = self
            .done
            .send(result.as_ref().map(|_| ()).map_err(io::copy));
        let _dispatcher_gone = self.settled.send(());
    }
}

/// A node's writer for one database, shared by the partition stores opened over it
/// (`PgStore::open_shared`). Lanes run on a thread of their own; they end once every store and this handle
/// let go of them.
pub struct SharedWriter {
    /// One channel per lane (per writer connection).
    lanes: Vec<mpsc::UnboundedSender<Unit>>,
}

impl SharedWriter {
    /// Starts `options.writers` lanes on a thread with a runtime of its own; each connects when it first has
    /// work, and again after a failure.
    pub fn start(options: PgOptions) -> Result<Self, StoreError> {
        let count = options.writers.max(1);
        let (lanes, receivers): (Vec<_>, Vec<_>) =
            (0..count).map(|_| mpsc::unbounded_channel()).unzip();
        io::on_own_runtime(
            "veil-pg-writer",
            |error| tracing::error!(%error, "cannot start the shared writer"),
            move || async move {
                let running: Vec<_> = receivers
                    .into_iter()
                    .map(|units| tokio::spawn(lane(options.clone(), units)))
                    .collect();
                for lane in running {
                    if lane.await.is_err() {
                        tracing::error!("a shared PostgreSQL writer lane panicked");
                    }
                }
            },
        )?;
        Ok(Self { lanes })
    }

    /// The lane a partition's submissions go to.
    pub(super) fn lane(&self, scope: Scope) -> mpsc::UnboundedSender<Unit> {
        let index = scope.partition() as usize % self.lanes.len();
        self.lanes[index].clone()
    }
}

/// A partition store's jobs, when its writes go to a shared writer's `lane`: submissions are handed on at
/// once (so that they group with every other partition's); a load, a count, a flush or the close waits until
/// every submission before it settled, then runs on the store's own connection (`home`).
pub(super) async fn dispatch(
    mut jobs: mpsc::UnboundedReceiver<Job>,
    mut home: Writer,
    lane: mpsc::UnboundedSender<Unit>,
    scope: Scope,
    shared: Shared,
) {
    let mut unsettled: Vec<oneshot::Receiver<()>> = Vec::new();
    while let Some(job) = jobs.recv().await {
        match job {
            Job::Ops { ops, done } => {
                unsettled.retain_mut(|settled| {
                    matches!(settled.try_recv(), Err(oneshot::error::TryRecvError::Empty))
                });
                let (settled, settling) = oneshot::channel();
                let unit = Unit {
                    scope,
                    ops,
                    done,
                    settled,
                    shared: shared.clone(),
                };
                if let Err(refused) = lane.send(unit) {
                    refused.0.answer(&Err(StoreError::Closed));
                } else {
                    unsettled.push(settling);
                }
            }
            other => {
                for settling in unsettled.drain(..) {
                    let _lane_gone = settling.await;
                }
                match other {
                    Job::Load { done } => {
                        let _caller_gone = done.send(home.load().await);
                    }
                    Job::Counts { done } => {
                        let _caller_gone = done.send(home.counts().await);
                    }
                    Job::Flush { done } => {
                        let _caller_gone = done.send(());
                    }
                    Job::Close { done } => {
                        home.close();
                        let _caller_gone = done.send(());
                        return;
                    }
                    Job::Ops { .. } => unreachable!("handled above"),
                }
            }
        }
    }
}

/// One lane: its connection, and the units waiting for it, committed group by group.
async fn lane(options: PgOptions, mut units: mpsc::UnboundedReceiver<Unit>) {
    let mut connection: Option<(Client, LaneStatements)> = None;
    while let Some(first) = units.recv().await {
        let mut ops_in_group = first.ops.len();
        let mut bytes_in_group = io::ops_bytes(&first.ops);
        let mut group = vec![first];
        while ops_in_group < GROUP_OPS_MAX && bytes_in_group < GROUP_BYTES_MAX {
            match units.try_recv() {
                Ok(unit) => {
                    ops_in_group += unit.ops.len();
                    bytes_in_group += io::ops_bytes(&unit.ops);
                    group.push(unit);
                }
                Err(_) => break,
            }
        }
        commit(&options, &mut connection, group).await;
    }
}

/// Commits `group`: refuses the units of stores that failed before, then commits the rest in one
/// transaction, repeated without the partitions whose fencing check failed.
async fn commit(
    options: &PgOptions,
    connection: &mut Option<(Client, LaneStatements)>,
    group: Vec<Unit>,
) {
    let mut live = Vec::with_capacity(group.len());
    for unit in group {
        match unit.shared.refusal() {
            Some(refusal) => unit.answer(&Err(refusal)),
            None => live.push(unit),
        }
    }
    while !live.is_empty() {
        if connection
            .as_ref()
            .is_none_or(|(client, _)| client.is_closed())
        {
            match open(options).await {
                Ok(opened) => *connection = Some(opened),
                Err(error) => return fail_all(live, &error),
            }
        }
        let Some((client, lane)) = connection.as_ref() else {
            return fail_all(live, &StoreError::Closed);
        };
        let (statements, unbuildable) = statements(lane, &live);
        if !unbuildable.is_empty() {
            live = fail_where(live, &unbuildable);
            continue;
        }
        match io::pipelined(client, &statements, options.call_timeout()).await {
            Ok(()) => {
                let mut counted: Vec<Scope> = Vec::new();
                for unit in live {
                    if !counted.contains(&unit.scope) {
                        unit.shared.transactions.fetch_add(1, Ordering::Relaxed);
                        counted.push(unit.scope);
                    }
                    unit.answer(&Ok(()));
                }
                return;
            }
            Err(Failed::Fenced(error)) => {
                let moved = match moved_on(client, &live, options.call_timeout()).await {
                    Ok(moved) if !moved.is_empty() => moved,
                    // The check failed, yet every epoch is as the stores hold it: fail them all.
                    Ok(_) => return fail_all(live, &error),
                    Err(check) => {
                        *connection = None;
                        return fail_all(live, &check);
                    }
                };
                let fenced: BTreeMap<Scope, StoreError> = moved
                    .into_iter()
                    .map(|scope| (scope, io::copy(&error)))
                    .collect();
                live = fail_where(live, &fenced);
            }
            Err(Failed::Other(error)) => {
                *connection = None;
                return fail_all(live, &error);
            }
        }
    }
}

/// A lane's connection and its statements (the same for every partition; each unit's scope is its own).
/// A lane's prepared statements: the store's (scoped per partition as it writes) and the fencing check of
/// several partitions at once (migrations/V8__fence_partitions.sql).
struct LaneStatements {
    prepared: Prepared,
    fence: Statement,
}

async fn open(options: &PgOptions) -> Result<(Client, LaneStatements), StoreError> {
    let client = io::writer_session(options).await?;
    let any_partition = Scope::Partition {
        partition: 0,
        count: 1,
        epoch: 0,
    };
    let prepared = timeout(
        options.call_timeout(),
        Prepared::new(&client, any_partition),
    )
    .await
    .map_err(|_| unavailable("preparing the store's statements timed out"))??;
    let fence = timeout(options.call_timeout(), client.prepare(FENCE_PARTITIONS))
        .await
        .map_err(|_| unavailable("preparing the store's statements timed out"))?
        .map_err(db_error)?;
    Ok((client, LaneStatements { prepared, fence }))
}

/// The transaction's statements: one fencing check for every partition in the group, then the partitions'
/// batches written as one (their keys never meet), then what each partition writes alone (queues created or
/// deleted, moves, move tasks) in its own order. A partition whose operations cannot be written (a queue of
/// another partition) is named instead, with why.
fn statements(
    lane: &LaneStatements,
    live: &[Unit],
) -> (Vec<(Statement, sql::Params)>, BTreeMap<Scope, StoreError>) {
    let mut scopes: Vec<Scope> = Vec::new();
    for unit in live {
        if !scopes.contains(&unit.scope) {
            scopes.push(unit.scope);
        }
    }
    let (mut merged, mut merged_scopes) = (Batch::default(), Vec::new());
    let (mut alone, mut fenced) = (Vec::new(), (Vec::<i32>::new(), Vec::<i64>::new()));
    let mut unbuildable = BTreeMap::new();
    for scope in scopes {
        let Scope::Partition {
            partition, epoch, ..
        } = scope
        else {
            unbuildable.insert(
                scope,
                StoreError::Io("a shared writer writes partitions only".into()),
            );
            continue;
        };
        let ops: Vec<StoreOp> = live
            .iter()
            .filter(|unit| unit.scope == scope)
            .flat_map(|unit| unit.ops.iter().cloned())
            .collect();
        if ops.is_empty() {
            continue; // only barriers: nothing to write, nothing to fence
        }
        let mut steps = plan::plan(ops);
        if let [plan::Step::Batch(_)] = steps.as_slice() {
            if let Some(plan::Step::Batch(batch)) = steps.pop() {
                merged.merge(batch);
                merged_scopes.push(scope);
            }
        } else {
            let scoped = lane.prepared.for_scope(scope);
            match steps_statements(&scoped, steps) {
                Ok(mut written) => alone.append(&mut written),
                Err(error) => {
                    unbuildable.insert(scope, error);
                    continue;
                }
            }
        }
        fenced.0.push(partition as i32);
        fenced.1.push(epoch);
    }
    let mut statements: Vec<(Statement, sql::Params)> = Vec::new();
    if !fenced.0.is_empty() {
        statements.push((
            lane.fence.clone(),
            vec![Box::new(fenced.0), Box::new(fenced.1)],
        ));
    }
    if !merged.is_empty() {
        match batch::statements(&lane.prepared.batch, merged) {
            Ok(mut written) => statements.append(&mut written),
            Err(error) => {
                for scope in merged_scopes {
                    unbuildable.insert(scope, io::copy(&error));
                }
            }
        }
    }
    statements.append(&mut alone);
    (statements, unbuildable)
}

/// The statements of one partition's planned steps, in order.
fn steps_statements(
    prepared: &Prepared,
    steps: Vec<plan::Step>,
) -> Result<Vec<(Statement, sql::Params)>, StoreError> {
    let mut statements = Vec::new();
    for step in steps {
        match step {
            plan::Step::Batch(batch) => {
                statements.extend(batch::statements(&prepared.batch, batch)?)
            }
            plan::Step::One(op) => statements.push(sql::statement(prepared, *op)?),
        }
    }
    Ok(statements)
}

/// The scopes among `live` whose partition's epoch is no longer theirs.
async fn moved_on(
    client: &Client,
    live: &[Unit],
    bound: Duration,
) -> Result<Vec<Scope>, StoreError> {
    let mut scopes: Vec<Scope> = live.iter().map(|unit| unit.scope).collect();
    scopes.sort();
    scopes.dedup();
    let partitions: Vec<i32> = scopes
        .iter()
        .map(|scope| scope.partition() as i32)
        .collect();
    let rows = timeout(
        bound,
        client.query(
            "SELECT partition, epoch FROM veil_partition WHERE partition = ANY($1)",
            &[&partitions],
        ),
    )
    .await
    .map_err(|_| unavailable("checking the partitions' epochs timed out"))?
    .map_err(db_error)?;
    let mut epochs = BTreeMap::new();
    for row in &rows {
        epochs.insert(sql::get::<i32>(row, 0)?, sql::get::<i64>(row, 1)?);
    }
    Ok(scopes
        .into_iter()
        .filter(|scope| match scope {
            Scope::Partition {
                partition, epoch, ..
            } => epochs.get(&(*partition as i32)) != Some(epoch),
            Scope::Whole | Scope::Leader { .. } => false,
        })
        .collect())
}

/// Fails the units of the stores in `failing` (each store with its own error) and returns the others.
fn fail_where(live: Vec<Unit>, failing: &BTreeMap<Scope, StoreError>) -> Vec<Unit> {
    let mut kept = Vec::with_capacity(live.len());
    for unit in live {
        match failing.get(&unit.scope) {
            Some(error) => {
                unit.shared.fail(error);
                unit.answer(&Err(io::copy(error)));
            }
            None => kept.push(unit),
        }
    }
    kept
}

fn fail_all(live: Vec<Unit>, error: &StoreError) {
    for unit in live {
        unit.shared.fail(error);
        unit.answer(&Err(io::copy(error)));
    }
}
