//! The store's I/O thread. It runs a tokio runtime of its own that owns every connection, so that the engine's
//! synchronous calls (start-up loads, payload reads) can block their caller, even a runtime thread, on a std
//! channel without starving the I/O they wait for. On it run:
//!
//! - the writers: `writers` connections, a task each, fed by the lanes' dispatcher (`lanes`). A writer
//!   drains every waiting submission (up to
//!   [`GROUP_OPS_MAX`](crate::limits::GROUP_OPS_MAX) operations or about
//!   [`GROUP_BYTES_MAX`](crate::limits::GROUP_BYTES_MAX) bytes of bodies), coalesces them into a few
//!   multi-row statements (`plan`, `batch`), sends BEGIN, them and COMMIT without waiting for any answer (one
//!   round trip), and answers every submission (group commit). With a fencing epoch the first statement is
//!   the fencing check, which fails the transaction when the lease's epoch is not this node's. The first
//!   failure of any writer fails every later submission: the engine's memory then holds changes the database
//!   may not, so it must be rebuilt from the database.
//!   Start-up loads run on the first writer, behind the submissions before them.
//! - the readers: `pool_size` connections, opened on first use and again after an error, reading payloads.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc as std_mpsc;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, oneshot, watch, Mutex};
use tokio::time::timeout;
use tokio_postgres::types::ToSql;
use tokio_postgres::{Client, Statement};
use veil_core::inbox::Inbound;
use veil_core::{Payload, QueueId, Seq, StoreError, StoreOp};

use super::shared::{self, Unit};
use super::sql::{self, big, Loaded, Prepared};
use super::Scope;
use super::{batch, lanes, plan};
use crate::connect::{connect, db_error, unavailable, PgOptions};
use crate::limits::{GROUP_BYTES_MAX, GROUP_OPS_MAX, LOAD_TIMEOUT_MS, MIGRATION_TIMEOUT_MS};

pub type Answer<T> = std_mpsc::Sender<Result<T, StoreError>>;
/// Where a submission's result goes (resolving its `Commit`).
pub type Done = oneshot::Sender<Result<(), StoreError>>;

/// What the writer does, in the order asked.
pub enum Job {
    /// Operations to make durable (none: a barrier); answered once they are.
    Ops { ops: Vec<StoreOp>, done: Done },
    /// Read what start-up loads, after everything submitted before.
    Load { done: Answer<Loaded> },
    /// Count stored messages and histories after everything submitted before (tests compare them with the
    /// engine's view, which is ahead of any reader while a commit is in flight).
    Counts { done: Answer<(u64, u64)> },
    /// Finish and close the connections; answered once the jobs before are done.
    Close { done: std_mpsc::Sender<()> },
    /// Nothing to do: answered once every job given before is done (the lanes' barriers).
    Flush { done: oneshot::Sender<()> },
}

/// What a reader does.
pub enum ReadJob {
    Payloads {
        queue: QueueId,
        seqs: Vec<Seq>,
        done: Reply<Vec<Option<Payload>>>,
    },
    /// The oldest entries of a partition's inbox.
    Inbox {
        partition: i32,
        limit: i64,
        done: Reply<Vec<Inbound>>,
    },
}

/// Where a read's answer goes: a caller blocked on a std channel (start-up, tests) or a future a receive
/// awaits (`Store::read_payloads_later`).
pub enum Reply<T> {
    Blocking(Answer<T>),
    Later(oneshot::Sender<Result<T, StoreError>>),
}

impl<T> Reply<T> {
    fn send(self, result: Result<T, StoreError>) {
        match self {
            Reply::Blocking(answer) => {
                let _caller_gone = answer.send(result);
            }
            Reply::Later(answer) => {
                let _caller_gone = answer.send(result);
            }
        }
    }
}

/// The running thread's handles, and what it loaded at start-up.
pub struct Started {
    pub jobs: mpsc::UnboundedSender<Job>,
    pub reads: mpsc::UnboundedSender<ReadJob>,
    pub failed: watch::Receiver<bool>,
    pub thread: std::thread::JoinHandle<()>,
    pub loaded: Loaded,
    /// Transactions committed (a group commit is one).
    pub transactions: Arc<AtomicU64>,
}

/// Starts the I/O thread: connects the writer, applies the migrations, prepares the statements and loads; on
/// failure the thread ends and the error is returned.
/// With `lane`, the store's writes go to a node's shared writer (`shared`) and its own connection only loads.
pub fn start(
    options: PgOptions,
    scope: Scope,
    lane: Option<mpsc::UnboundedSender<Unit>>,
) -> Result<Started, StoreError> {
    let (jobs, jobs_rx) = mpsc::unbounded_channel();
    let (reads, reads_rx) = mpsc::unbounded_channel();
    let (failed_tx, failed) = watch::channel(false);
    let (ready, ready_rx) = std_mpsc::channel();
    let transactions = Arc::new(AtomicU64::new(0));
    let counted = transactions.clone();
    let failing = ready.clone();
    let thread = on_own_runtime(
        "veil-postgres",
        move |error| {
            let _opener_gone = failing.send(Err(error));
        },
        move || {
            run(
                options,
                (scope, lane),
                (jobs_rx, reads_rx),
                (failed_tx, counted),
                ready,
            )
        },
    )?;
    let loaded = match ready_rx.recv() {
        Ok(result) => result?,
        Err(_) => {
            return Err(StoreError::Io(
                "the PostgreSQL store thread stopped while opening".into(),
            ))
        }
    };
    Ok(Started {
        jobs,
        reads,
        failed,
        thread,
        loaded,
        transactions,
    })
}

/// Runs the future `work` makes on a thread named `name` with a current-thread runtime of its own; a runtime
/// that cannot start is reported to `failed`.
pub(super) fn on_own_runtime<F>(
    name: &str,
    failed: impl FnOnce(StoreError) + Send + 'static,
    work: impl FnOnce() -> F + Send + 'static,
) -> Result<std::thread::JoinHandle<()>, StoreError>
where
    F: std::future::Future<Output = ()>,
{
    std::thread::Builder::new()
        .name(name.to_owned())
        .spawn(move || {
            match tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                Ok(runtime) => runtime.block_on(work()),
                Err(error) => failed(StoreError::Io(format!("starting a runtime: {error}"))),
            }
        })
        .map_err(|e| StoreError::Io(format!("starting the thread {name}: {e}")))
}

async fn run(
    options: PgOptions,
    (scope, lane): (Scope, Option<mpsc::UnboundedSender<Unit>>),
    (jobs, reads): (
        mpsc::UnboundedReceiver<Job>,
        mpsc::UnboundedReceiver<ReadJob>,
    ),
    (failed, transactions): (watch::Sender<bool>, Arc<AtomicU64>),
    ready: Answer<Loaded>,
) {
    let shared = Shared {
        failure: Arc::new(parking_lot::Mutex::new(None)),
        failed: Arc::new(failed),
        transactions,
    };
    // A store whose writes go to a shared writer keeps one connection of its own, for loads.
    let own_writers = if lane.is_some() {
        1
    } else {
        options.writers.max(1)
    };
    let mut writers = Vec::with_capacity(own_writers);
    for index in 0..own_writers {
        match Writer::open(&options, scope, shared.clone(), index == 0).await {
            Ok(writer) => writers.push(writer),
            Err(error) => {
                let _opener_gone = ready.send(Err(error));
                return;
            }
        }
    }
    let loaded = writers[0].load().await;
    let opened = loaded.is_ok();
    let _opener_gone = ready.send(loaded);
    if !opened {
        return;
    }
    let reads = Arc::new(Mutex::new(reads));
    for _ in 0..options.pool_size.max(1) {
        tokio::spawn(reader(options.clone(), reads.clone()));
    }
    if let Some(lane) = lane {
        if let Some(home) = writers.pop() {
            shared::dispatch(jobs, home, lane, scope, shared).await;
        }
        return;
    }
    let (lanes, running): (Vec<_>, Vec<_>) = writers
        .into_iter()
        .map(|writer| {
            let (lane, lane_jobs) = mpsc::unbounded_channel();
            (lane, tokio::spawn(writer.run(lane_jobs)))
        })
        .unzip();
    lanes::dispatch(jobs, lanes, running).await;
}

/// Why the store stopped writing; every later submission fails with it.
struct Failure {
    unavailable: bool,
    message: String,
}

impl Failure {
    fn error(&self) -> StoreError {
        let message = format!(
            "the PostgreSQL store failed earlier and accepts no more writes: {}",
            self.message
        );
        if self.unavailable {
            StoreError::Unavailable(message)
        } else {
            StoreError::Io(message)
        }
    }
}

/// A copy of `error` for each submission of a failed group.
pub(super) fn copy(error: &StoreError) -> StoreError {
    match error {
        StoreError::Io(m) => StoreError::Io(m.clone()),
        StoreError::Corrupt(m) => StoreError::Corrupt(m.clone()),
        StoreError::Incompatible(m) => StoreError::Incompatible(m.clone()),
        StoreError::Closed => StoreError::Closed,
        StoreError::Unavailable(m) => StoreError::Unavailable(m.clone()),
    }
}

/// What the writers share.
#[derive(Clone)]
pub(super) struct Shared {
    /// The first failure of any writer: every writer refuses later groups with it (lanes.rs says why).
    failure: Arc<parking_lot::Mutex<Option<Failure>>>,
    /// Turned true with the first failure, for whoever watches the store.
    failed: Arc<watch::Sender<bool>>,
    /// Transactions committed by all writers.
    pub(super) transactions: Arc<AtomicU64>,
}

impl Shared {
    /// The error a writer answers with once the store failed.
    pub(super) fn refusal(&self) -> Option<StoreError> {
        self.failure.lock().as_ref().map(Failure::error)
    }

    /// Fails the store with `error`, unless it failed before (the first failure names it).
    pub(super) fn fail(&self, error: &StoreError) {
        let mut failure = self.failure.lock();
        if failure.is_none() {
            tracing::error!(%error, "PostgreSQL store write failed; the store accepts no more writes");
            *failure = Some(Failure {
                unavailable: matches!(error, StoreError::Unavailable(_)),
                message: error.to_string(),
            });
            self.failed.send_replace(true);
        }
    }
}

pub(super) struct Writer {
    /// `None` once failed or closed: the connection is dropped, which rolls back whatever it had begun.
    client: Option<Client>,
    prepared: Prepared,
    call_timeout: Duration,
    shared: Shared,
    /// To connect again when the connection closed while idle (`reconnect_if_closed`).
    options: PgOptions,
}

/// A connection set up to write: its session plans keyed lookups only (`sql::WRITER_PLANS`).
pub(super) async fn writer_session(options: &PgOptions) -> Result<Client, StoreError> {
    let client = connect(options).await?;
    timeout(
        options.call_timeout(),
        client.batch_execute(sql::WRITER_PLANS),
    )
    .await
    .map_err(|_| unavailable("setting up a writer session timed out"))?
    .map_err(db_error)?;
    Ok(client)
}

impl Writer {
    /// Connects a writer; the first (`migrate`) applies the migrations before it prepares its statements.
    async fn open(
        options: &PgOptions,
        scope: Scope,
        shared: Shared,
        migrate: bool,
    ) -> Result<Self, StoreError> {
        let mut client = writer_session(options).await?;
        if migrate {
            timeout(
                Duration::from_millis(MIGRATION_TIMEOUT_MS),
                crate::migrations::run(&mut client, options.session_guard.as_millis()),
            )
            .await
            .map_err(|_| unavailable("applying the migrations timed out"))??;
        }
        let prepared = timeout(options.call_timeout(), Prepared::new(&client, scope))
            .await
            .map_err(|_| unavailable("preparing the store's statements timed out"))??;
        Ok(Self {
            client: Some(client),
            prepared,
            call_timeout: options.call_timeout(),
            shared,
            options: options.clone(),
        })
    }

    /// Connects again when the connection closed while it had nothing in flight (the database restarted, or
    /// a standby was promoted, while this writer was idle): nothing was lost with it, and every transaction of
    /// the new one checks the fence as before, so a write that comes now need not fail the store. A
    /// connection that fails a write fails the store instead (`commit_group`): what it had begun is unknown.
    async fn reconnect_if_closed(&mut self) -> Result<(), StoreError> {
        if !self.client.as_ref().is_some_and(Client::is_closed) {
            return Ok(());
        }
        tracing::info!("the store's idle connection closed; connecting again");
        let scope = self.prepared.scope;
        let fresh = Self::open(&self.options, scope, self.shared.clone(), false).await?;
        self.client = fresh.client;
        self.prepared = fresh.prepared;
        Ok(())
    }

    async fn run(mut self, mut jobs: mpsc::UnboundedReceiver<Job>) {
        let mut waiting: Option<Job> = None;
        loop {
            let first = match waiting.take() {
                Some(job) => job,
                None => match jobs.recv().await {
                    Some(job) => job,
                    None => break,
                },
            };
            match first {
                Job::Ops { ops, done } => {
                    let mut ops_in_group = ops.len();
                    let mut bytes_in_group = ops_bytes(&ops);
                    let mut group = vec![(ops, done)];
                    while ops_in_group < GROUP_OPS_MAX && bytes_in_group < GROUP_BYTES_MAX {
                        match jobs.try_recv() {
                            Ok(Job::Ops { ops, done }) => {
                                ops_in_group += ops.len();
                                bytes_in_group += ops_bytes(&ops);
                                group.push((ops, done));
                            }
                            Ok(other) => {
                                waiting = Some(other);
                                break;
                            }
                            Err(_) => break,
                        }
                    }
                    self.commit_group(group).await;
                }
                Job::Load { done } => {
                    let loaded = self.load().await;
                    let _caller_gone = done.send(loaded);
                }
                Job::Counts { done } => {
                    let _caller_gone = done.send(self.counts().await);
                }
                Job::Close { done } => {
                    self.client = None;
                    let _caller_gone = done.send(());
                    break;
                }
                Job::Flush { done } => {
                    let _dispatcher_gone = done.send(());
                }
            }
        }
    }

    /// Drops the connection (which rolls back whatever it had begun).
    pub(super) fn close(&mut self) {
        self.client = None;
    }

    pub(super) async fn load(&mut self) -> Result<Loaded, StoreError> {
        if let Some(refusal) = self.shared.refusal() {
            return Err(refusal);
        }
        let client = self.client.as_mut().ok_or(StoreError::Closed)?;
        let bound = Duration::from_millis(LOAD_TIMEOUT_MS) + self.call_timeout;
        timeout(bound, sql::load(client, self.prepared.scope))
            .await
            .map_err(|_| unavailable("loading from PostgreSQL timed out"))?
    }

    pub(super) async fn counts(&mut self) -> Result<(u64, u64), StoreError> {
        if let Some(refusal) = self.shared.refusal() {
            return Err(refusal);
        }
        let client = self.client.as_ref().ok_or(StoreError::Closed)?;
        timeout(self.call_timeout, sql::counts(client, self.prepared.scope))
            .await
            .map_err(|_| unavailable("counting in PostgreSQL timed out"))?
    }

    async fn commit_group(&mut self, group: Vec<(Vec<StoreOp>, Done)>) {
        let mut answers = Vec::with_capacity(group.len());
        let mut ops = Vec::new();
        for (submitted, done) in group {
            answers.push(done);
            ops.extend(submitted);
        }
        let result = match self.shared.refusal() {
            Some(refusal) => Err(refusal),
            // Only barriers: everything before them is already committed.
            None if ops.is_empty() => Ok(()),
            None => match self.reconnect_if_closed().await {
                Ok(()) => self.transaction(ops).await,
                Err(error) => Err(error),
            },
        };
        if let Err(error) = &result {
            // Whichever writer failed first names the failure; every writer drops its connection.
            self.client = None;
            self.shared.fail(error);
        }
        for done in answers {
            let _submitter_gone = done.send(result.as_ref().map(|_| ()).map_err(copy));
        }
    }

    /// One transaction for the group, pipelined in one round trip: BEGIN, the fencing check, the planned
    /// statements, COMMIT. Any statement's error aborts the transaction on the server (later ones fail, and
    /// COMMIT rolls back), so a fenced node writes nothing though it never waited for the check's answer.
    async fn transaction(&self, ops: Vec<StoreOp>) -> Result<(), StoreError> {
        let client = self.client.as_ref().ok_or(StoreError::Closed)?;
        let statements = planned(&self.prepared, ops)?;
        pipelined(client, &statements, self.call_timeout)
            .await
            .map_err(|failed| match failed {
                Failed::Fenced(error) | Failed::Other(error) => error,
            })?;
        self.shared.transactions.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }
}

/// A store's fencing check (under a lease) and `ops` planned into statements.
pub(super) fn planned(
    prepared: &Prepared,
    ops: Vec<StoreOp>,
) -> Result<Vec<(Statement, sql::Params)>, StoreError> {
    let mut statements = Vec::new();
    if let Some(fence) = prepared.fence() {
        statements.push(fence);
    }
    for step in plan::plan(ops) {
        match step {
            plan::Step::Batch(batch) => {
                statements.extend(batch::statements(&prepared.batch, batch)?)
            }
            plan::Step::One(op) => statements.push(sql::statement(prepared, *op)?),
        }
    }
    Ok(statements)
}

/// `statements` in one transaction, pipelined in one round trip: BEGIN, the statements, COMMIT. Any
/// statement's error aborts the transaction on the server (later ones fail, and COMMIT rolls back), so a
/// fenced store writes nothing though it never waited for the check's answer.
pub(super) async fn pipelined(
    client: &Client,
    statements: &[(Statement, sql::Params)],
    bound: Duration,
) -> Result<(), Failed> {
    let params: Vec<Vec<&(dyn ToSql + Sync)>> = statements
        .iter()
        .map(|(_, params)| {
            params
                .iter()
                .map(|param| param.as_ref() as &(dyn ToSql + Sync))
                .collect()
        })
        .collect();
    let work = futures_util::future::try_join3(
        client.batch_execute("BEGIN"),
        execute_all(client, statements, &params),
        client.batch_execute("COMMIT"),
    );
    match timeout(bound, work).await {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(error)) => Err(fenced_or_db_error(error)),
        Err(_) => Err(Failed::Other(unavailable("a PostgreSQL commit timed out"))),
    }
}

/// Why a transaction failed: a fencing check (some partition's lease moved on), or anything else.
pub(super) enum Failed {
    Fenced(StoreError),
    Other(StoreError),
}

/// A failed fencing check is "unavailable" (this node must stop serving), worded by `veil_fence`; any other
/// error as `db_error` judges it.
fn fenced_or_db_error(error: tokio_postgres::Error) -> Failed {
    match error.as_db_error() {
        Some(db) if db.code().code() == sql::FENCED_SQLSTATE => {
            Failed::Fenced(unavailable(db.message()))
        }
        _ => Failed::Other(db_error(error)),
    }
}

/// The bytes of bodies among `ops`: what makes one group's statements large.
pub(super) fn ops_bytes(ops: &[StoreOp]) -> usize {
    ops.iter()
        .map(|op| match op {
            StoreOp::PutMessage(put) => put.payload.body.len(),
            StoreOp::ReplaceBody { body, .. } => body.len(),
            _ => 0,
        })
        .sum()
}

/// Every statement of the group, sent in order before any answer is awaited (tokio-postgres sends a request
/// when its future is first polled, and `try_join_all` polls them in order).
async fn execute_all(
    client: &Client,
    statements: &[(Statement, sql::Params)],
    params: &[Vec<&(dyn ToSql + Sync)>],
) -> Result<(), tokio_postgres::Error> {
    futures_util::future::try_join_all(
        statements
            .iter()
            .zip(params)
            .map(|((statement, _), params)| client.execute(statement, params)),
    )
    .await
    .map(|_| ())
}

/// A reader connection and its prepared statement.
struct ReadConnection {
    client: Client,
    payloads: Statement,
    inbox: Statement,
}

async fn reader(options: PgOptions, jobs: Arc<Mutex<mpsc::UnboundedReceiver<ReadJob>>>) {
    let mut connection: Option<ReadConnection> = None;
    loop {
        let job = {
            let mut jobs = jobs.lock().await;
            match jobs.recv().await {
                Some(job) => job,
                None => return,
            }
        };
        let bound = options.call_timeout();
        match job {
            ReadJob::Payloads { queue, seqs, done } => {
                let result = timeout(
                    bound,
                    read_payloads(&options, &mut connection, queue, &seqs),
                )
                .await
                .unwrap_or_else(|_| Err(unavailable("reading from PostgreSQL timed out")));
                if result.is_err() {
                    connection = None;
                }
                done.send(result);
            }
            ReadJob::Inbox {
                partition,
                limit,
                done,
            } => {
                let result = timeout(
                    bound,
                    read_inbox(&options, &mut connection, partition, limit),
                )
                .await
                .unwrap_or_else(|_| Err(unavailable("reading from PostgreSQL timed out")));
                if result.is_err() {
                    connection = None;
                }
                done.send(result);
            }
        }
    }
}

/// The reader's connection, opened when it has none or its last one closed.
async fn ready<'c>(
    options: &PgOptions,
    connection: &'c mut Option<ReadConnection>,
) -> Result<&'c ReadConnection, StoreError> {
    if connection
        .as_ref()
        .is_some_and(|open| open.client.is_closed())
    {
        *connection = None;
    }
    if connection.is_none() {
        let client = connect(options).await?;
        let (payloads, inbox) = futures_util::future::try_join(
            client.prepare(sql::READ_PAYLOADS),
            client.prepare(sql::READ_INBOX),
        )
        .await
        .map_err(db_error)?;
        *connection = Some(ReadConnection {
            client,
            payloads,
            inbox,
        });
    }
    connection
        .as_ref()
        .ok_or_else(|| StoreError::Io("a reader connection went missing".into()))
}

async fn read_payloads(
    options: &PgOptions,
    connection: &mut Option<ReadConnection>,
    queue: QueueId,
    seqs: &[Seq],
) -> Result<Vec<Option<Payload>>, StoreError> {
    let open = ready(options, connection).await?;
    let wanted: Vec<i64> = seqs.iter().map(|&seq| big(seq)).collect();
    let rows = open
        .client
        .query(&open.payloads, &[&big(queue), &wanted])
        .await
        .map_err(db_error)?;
    let mut found = std::collections::HashMap::with_capacity(rows.len());
    for row in &rows {
        let (seq, payload) = sql::payload_row(row)?;
        found.insert(seq, payload);
    }
    Ok(seqs.iter().map(|seq| found.get(seq).cloned()).collect())
}

async fn read_inbox(
    options: &PgOptions,
    connection: &mut Option<ReadConnection>,
    partition: i32,
    limit: i64,
) -> Result<Vec<Inbound>, StoreError> {
    let open = ready(options, connection).await?;
    let rows = open
        .client
        .query(&open.inbox, &[&partition, &limit])
        .await
        .map_err(db_error)?;
    rows.iter().map(sql::inbox_row).collect()
}
