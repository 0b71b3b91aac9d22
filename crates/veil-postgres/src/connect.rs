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
    /// Connections the store reads payloads over, beside its one writer connection.
    pub pool_size: usize,
    /// How long a connection attempt may take before the database counts as down.
    pub connect_timeout: Duration,
    /// PostgreSQL's `statement_timeout`, set on every connection; also bounds, client-side, how long any one
    /// database call may take (so a node answers "unavailable" instead of hanging on a dead server).
    pub statement_timeout: Duration,
    /// The schema Veil's tables live in (created when missing). Tests give each their own.
    pub schema: String,
}

pub const POOL_SIZE_DEFAULT: usize = 4;
pub const CONNECT_TIMEOUT_MS_DEFAULT: u64 = 2_000;
pub const STATEMENT_TIMEOUT_MS_DEFAULT: u64 = 5_000;
pub const SCHEMA_DEFAULT: &str = "veil";

impl PgOptions {
    pub fn new(url: impl Into<String>) -> Self {
        Self {
            url: url.into(),
            pool_size: POOL_SIZE_DEFAULT,
            connect_timeout: Duration::from_millis(CONNECT_TIMEOUT_MS_DEFAULT),
            statement_timeout: Duration::from_millis(STATEMENT_TIMEOUT_MS_DEFAULT),
            schema: SCHEMA_DEFAULT.to_owned(),
        }
    }

    /// A bound on one database call as the client sees it: the server's statement timeout plus a network
    /// allowance of a connect timeout.
    pub fn call_timeout(&self) -> Duration {
        self.statement_timeout + self.connect_timeout
    }
}

/// Opens one connection, drives it on the current runtime, and sets the session up: the statement timeout
/// and the search path of Veil's schema (created when missing).
pub async fn connect(options: &PgOptions) -> Result<Client, StoreError> {
    let mut config: tokio_postgres::Config = options.url.parse().map_err(|error| {
        StoreError::Incompatible(format!("bad PostgreSQL connection string: {error}"))
    })?;
    config.connect_timeout(options.connect_timeout);
    config.application_name("veil");
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
    let setup = format!(
        "SET statement_timeout = {}; CREATE SCHEMA IF NOT EXISTS {schema}; SET search_path = {schema};",
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
                )
        }
    };
    if error.is_closed() || unreachable {
        StoreError::Unavailable(format!("PostgreSQL: {error}"))
    } else {
        StoreError::Io(format!("PostgreSQL: {error}"))
    }
}

/// `name` as an SQL identifier, quoted.
pub fn quote_ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}
