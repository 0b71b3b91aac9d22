//! Connections to PostgreSQL with Veil's timeouts. The connection string is libpq's (a `postgres://` URL or
//! `key=value` pairs), so an operator may name a primary and its replicas (`host=a,b`) with
//! `target_session_attrs=read-write`: after a promotion, the next connection lands on the new primary.

use std::time::Duration;

use tokio_postgres::{Client, NoTls};
use veil_core::StoreError;

/// How a node reaches the database (README "Running on PostgreSQL" documents each).
#[derive(Clone, Debug)]
pub struct PgOptions {
    /// libpq connection string or URL.
    pub url: String,
    /// Connections the store reads payloads over, beside its writer connections.
    pub pool_size: usize,
    /// Writer connections, each committing the groups of its share of the queues (store/lanes.rs): several
    /// let the database work on several transactions at once.
    pub writers: usize,
    /// How long a connection attempt may take before the database counts as down.
    pub connect_timeout: Duration,
    /// PostgreSQL's `statement_timeout`, set on every connection; also bounds, client-side, how long any one
    /// database call may take (so a node answers "unavailable" instead of hanging on a dead server).
    pub statement_timeout: Duration,
    /// The schema Veil's tables live in (created when missing). Tests give each their own.
    pub schema: String,
    /// PostgreSQL's `lock_timeout` and `idle_in_transaction_session_timeout`, set on every connection, and
    /// how long TCP keepalives let a silent peer live. A node whose host froze or vanished mid-transaction
    /// holds its locks (the lease row's FOR SHARE among them) until the server ends its session: without
    /// these, until the kernel's keepalive gives up (~2 h), stalling every lease acquire behind it. A cluster
    /// keeps it below the lease term ([`PgOptions::guarded_below`]).
    pub session_guard: Duration,
}

pub const POOL_SIZE_DEFAULT: usize = 4;
/// One: on the 2-core machine of docs/benchmarks.md ("Writer lanes and writer plans") more writers made
/// smaller groups and cost the database more CPU per message; they pay where the database has cores to spare.
pub const WRITERS_DEFAULT: usize = 1;
pub const CONNECT_TIMEOUT_MS_DEFAULT: u64 = 2_000;
pub const STATEMENT_TIMEOUT_MS_DEFAULT: u64 = 5_000;
pub const SCHEMA_DEFAULT: &str = "veil";
pub const SESSION_GUARD_MS_DEFAULT: u64 = 2_500;
/// Keepalive probes sent, `session_guard / KEEPALIVE_PROBES` apart, before a silent connection is dropped.
const KEEPALIVE_PROBES: u32 = 3;

impl PgOptions {
    pub fn new(url: impl Into<String>) -> Self {
        Self {
            url: url.into(),
            pool_size: POOL_SIZE_DEFAULT,
            writers: WRITERS_DEFAULT,
            connect_timeout: Duration::from_millis(CONNECT_TIMEOUT_MS_DEFAULT),
            statement_timeout: Duration::from_millis(STATEMENT_TIMEOUT_MS_DEFAULT),
            schema: SCHEMA_DEFAULT.to_owned(),
            session_guard: Duration::from_millis(SESSION_GUARD_MS_DEFAULT),
        }
    }

    /// These options with the session guard at half of `lease_term`: a frozen node's session ends, and with
    /// it its locks, well before the lease it held can be taken over.
    pub fn guarded_below(mut self, lease_term: Duration) -> Self {
        self.session_guard = (lease_term / 2).max(Duration::from_millis(1));
        self
    }

    /// A bound on one database call as the client sees it: the server's statement timeout plus a network
    /// allowance of a connect timeout.
    pub fn call_timeout(&self) -> Duration {
        self.statement_timeout + self.connect_timeout
    }
}

/// Opens one connection, drives it on the current runtime, and sets the session up: the statement, lock and
/// idle-in-transaction timeouts, TCP keepalives, and the search path of Veil's schema (created when missing).
pub async fn connect(options: &PgOptions) -> Result<Client, StoreError> {
    let mut config: tokio_postgres::Config = options.url.parse().map_err(|error| {
        StoreError::Incompatible(format!("bad PostgreSQL connection string: {error}"))
    })?;
    config.connect_timeout(options.connect_timeout);
    config.application_name("veil");
    let probe_every = (options.session_guard / KEEPALIVE_PROBES).max(Duration::from_secs(1));
    config
        .keepalives(true)
        .keepalives_idle(probe_every)
        .keepalives_interval(probe_every)
        .keepalives_retries(KEEPALIVE_PROBES);
    let connecting = config.connect(NoTls);
    let (client, connection) = tokio::time::timeout(options.connect_timeout * 2, connecting)
        .await
        .map_err(|_| unavailable("connecting to PostgreSQL timed out"))?
        .map_err(|error| unavailable(format!("cannot connect to PostgreSQL: {error}")))?;
    tokio::spawn(async move {
        if let Err(error) = connection.await {
            tracing::debug!(%error, "PostgreSQL connection ended");
        }
    });
    let schema = quote_ident(&options.schema);
    let guard_ms = options.session_guard.as_millis();
    let setup = format!(
        "SET statement_timeout = {}; SET lock_timeout = {guard_ms}; \
         SET idle_in_transaction_session_timeout = {guard_ms}; \
         CREATE SCHEMA IF NOT EXISTS {schema}; SET search_path = {schema};",
        options.statement_timeout.as_millis()
    );
    tokio::time::timeout(options.call_timeout(), client.batch_execute(&setup))
        .await
        .map_err(|_| unavailable("PostgreSQL session setup timed out"))?
        .map_err(db_error)?;
    Ok(client)
}

/// The database cannot be reached or did not answer in time: the caller answers "service unavailable".
pub fn unavailable(message: impl Into<String>) -> StoreError {
    StoreError::Unavailable(message.into())
}

/// A database error: an unreachable or failing server is "unavailable"; anything else is I/O. A server that
/// is shutting down, starting, out of connections, read-only (a standby not yet promoted) or past its
/// statement timeout says so with an error of its own before it closes the connection: those are
/// "unavailable" too (retrying later may succeed).
pub fn db_error(error: tokio_postgres::Error) -> StoreError {
    let unreachable = match error.as_db_error() {
        None => true,
        Some(db) => {
            let code = db.code().code();
            code.starts_with("08") // connection exception
                || code.starts_with("53") // insufficient resources (too many connections, disk full)
                || matches!(
                    code,
                    "57P01" // admin_shutdown (pg_ctl stop -m fast)
                        | "57P02" // crash_shutdown
                        | "57P03" // cannot_connect_now (starting up, in recovery)
                        | "57014" // query_canceled (statement_timeout)
                        | "25006" // read_only_sql_transaction (a standby)
                        | "55P03" // lock_not_available (lock_timeout: a frozen session holds the lock)
                        | "25P03" // idle_in_transaction_session_timeout (this session was frozen)
                )
        }
    };
    // tokio-postgres's own text of a server's error is only "db error": name what the server said.
    let said = match error.as_db_error() {
        Some(db) => format!(
            "PostgreSQL: {} (SQLSTATE {})",
            db.message(),
            db.code().code()
        ),
        None => format!("PostgreSQL: {error}"),
    };
    if error.is_closed() || unreachable {
        StoreError::Unavailable(said)
    } else {
        StoreError::Io(said)
    }
}

/// `name` as an SQL identifier, quoted.
pub fn quote_ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}
