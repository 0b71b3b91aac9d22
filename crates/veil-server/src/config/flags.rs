//! The flags of `veil serve` (each with its `VEIL_*` environment variable), as clap parses them. Each flag
//! overrides one key of the config file (config/merge.rs lays them over it); the key's type, default and
//! checks live with the section that owns it (config/file.rs, each front-end's settings.rs).

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{Args, ValueEnum};
use serde::Deserialize;

/// Whether each success waits for fsync.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum DurabilityMode {
    /// fsync before every success (group commit shares it between concurrent requests).
    #[default]
    Durable,
    /// No fsync: a crash can lose acknowledged changes. Only for throughput experiments.
    Relaxed,
}

/// How log lines are written to stderr. Audit events (`veil::audit`) are ordinary events, so they come out in
/// either format.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// One human-readable line per event.
    #[default]
    Text,
    /// One JSON object per line (tracing-subscriber's format: timestamp, level, target, fields), for log
    /// collectors.
    Json,
}

/// Flags of `veil serve`. Every one can also come from the environment or the config file.
#[derive(Args, Debug, Default)]
pub struct ServeArgs {
    /// TOML file with any of the settings below (keys: data_dir, sqs_listen, sqs_account_id, inflight_max,
    /// durability, log_level, log_format, store_cache_mib, wal_segment_mib, admin_listen, admin_token,
    /// admin_allowed_hosts, admin_tokenless, sqs_advertised_url, tls_cert, tls_key, sqs_tls_cert,
    /// sqs_tls_key, admin_tls_cert, admin_tls_key, a [limits] table, an [sqs] table with auth, dev_credential
    /// and [[sqs.credentials]] access_key/secret_key/account_id/session_token/grants, and an [azure] table
    /// with listen, auth, max_dequeue_count, tls_cert, tls_key and [[azure.accounts]] name/key/namespace;
    /// `store`, a [postgres] table with pool_size, connect_timeout_ms, statement_timeout_ms, schema and
    /// retry_interval_ms, and a [cluster] table with node_id, lease_ttl_ms, bind and advertise).
    /// Flags and environment variables override it.
    #[arg(long, env = "VEIL_CONFIG")]
    pub config: Option<PathBuf>,
    /// Directory of the embedded store and the receipt secret [default: ./veil-data]
    #[arg(long, env = "VEIL_DATA_DIR")]
    pub data_dir: Option<PathBuf>,
    /// Address of the Amazon SQS endpoint (JSON and Query protocols) [default: 127.0.0.1:9324]
    #[arg(long, env = "VEIL_SQS_LISTEN")]
    pub sqs_listen: Option<SocketAddr>,
    /// SQS account id used in queue URLs and ARNs when a request names none [default: 000000000000]
    #[arg(long, env = "VEIL_SQS_ACCOUNT_ID")]
    pub sqs_account_id: Option<String>,
    /// In-flight (hidden) message limit of new queues; a receive at the limit fails with OverLimit
    /// [default: 120000]
    #[arg(long, env = "VEIL_INFLIGHT_MAX")]
    pub inflight_max: Option<u32>,
    /// durable: fsync before every success; relaxed: no fsync, a crash may lose acknowledged changes
    /// [default: durable]
    #[arg(long, env = "VEIL_DURABILITY", value_enum)]
    pub durability: Option<DurabilityMode>,
    /// Log filter, e.g. info, debug, veil_sqs=debug [default: info]
    #[arg(long, env = "VEIL_LOG")]
    pub log_level: Option<String>,
    /// text: human-readable lines; json: one JSON object per line, audit events included [default: text]
    #[arg(long, env = "VEIL_LOG_FORMAT", value_enum)]
    pub log_format: Option<LogFormat>,
    /// Memory for the store's page cache, in MiB [default: 64]
    #[arg(long, env = "VEIL_STORE_CACHE_MIB")]
    pub store_cache_mib: Option<usize>,
    /// Size of one write-ahead log segment, in MiB: allocated on disk when the segment starts, held in memory
    /// until it is checkpointed; a reopen after a full disk waits for room for two [default: 64]
    #[arg(long, env = "VEIL_WAL_SEGMENT_MIB")]
    pub wal_segment_mib: Option<u64>,
    /// on: verify SigV4 signatures and check each credential's permissions; off: accept any request
    /// (local development only) [default: on]
    #[arg(long, env = "VEIL_SQS_AUTH", value_enum)]
    pub sqs_auth: Option<veil_sqs::settings::AuthMode>,
    /// Address of the Azure Queue Storage endpoint (path style: /<account>/<queue>) [default: 127.0.0.1:10001]
    #[arg(long, env = "VEIL_AZURE_LISTEN")]
    pub azure_listen: Option<SocketAddr>,
    /// on: verify Shared Key and SAS signatures; off: accept any request (local development only)
    /// [default: on]
    #[arg(long, env = "VEIL_AZURE_AUTH", value_enum)]
    pub azure_auth: Option<veil_azure::settings::AuthMode>,
    /// Poison policy of queues created through Azure: a get that finds a message already dequeued this many
    /// times moves it to <queue>-poison instead; 0 turns it off [default: 0]
    #[arg(long, env = "VEIL_AZURE_MAX_DEQUEUE_COUNT")]
    pub azure_max_dequeue_count: Option<u32>,
    /// Entra ID bearer tokens: off refuses them, dev accepts any well-formed token as a Contributor (local
    /// development only), verify checks them against [azure.entra] jwks_file, issuers and audiences
    /// [default: off]
    #[arg(long, env = "VEIL_AZURE_ENTRA", value_enum)]
    pub azure_entra: Option<veil_azure::settings::EntraSetting>,
    /// Address of the KubeMQ queues endpoint (gRPC) [default: 127.0.0.1:50000]
    #[arg(long, env = "VEIL_KUBEMQ_LISTEN")]
    pub kubemq_listen: Option<SocketAddr>,
    /// Address of the admin endpoint: /metrics, /healthz, /readyz, the admin API (/api/v1) and the web
    /// console (/) [default: 127.0.0.1:9325]
    #[arg(long, env = "VEIL_ADMIN_LISTEN")]
    pub admin_listen: Option<SocketAddr>,
    /// A host name, besides loopback's, that the admin API and /metrics answer when there is no admin token
    /// (repeatable; requests naming any other Host are refused, against DNS rebinding)
    #[arg(
        long = "admin-allowed-host",
        env = "VEIL_ADMIN_ALLOWED_HOSTS",
        value_delimiter = ','
    )]
    pub admin_allowed_hosts: Vec<String>,
    /// An admin endpoint listening beyond loopback without an admin token: refuse to start, or probes-only:
    /// serve /healthz and /readyz to anyone and the API and /metrics to loopback connections only
    /// [default: refuse]
    #[arg(long, env = "VEIL_ADMIN_TOKENLESS", value_enum)]
    pub admin_tokenless: Option<veil_admin::settings::Tokenless>,
    /// The scheme, host and port SQS queue URLs start with, e.g. http://veil:9324, for when clients reach
    /// Veil by another address than the Host they send [default: the listener's scheme and the request's Host]
    #[arg(long, env = "VEIL_SQS_ADVERTISED_URL")]
    pub sqs_advertised_url: Option<String>,
    /// Test-only, hidden (docs/testing.md "Test clock"): the clock becomes movable through the admin API.
    #[arg(long, env = "VEIL_UNSAFE_TEST_CLOCK", hide = true)]
    pub unsafe_test_clock: bool,
    #[command(flatten)]
    pub listeners: crate::listeners::ListenerArgs,
    #[command(flatten)]
    pub cluster: crate::cluster::settings::ClusterArgs,
    /// The admin endpoint's bearer token: the global `--admin-token` / `VEIL_ADMIN_TOKEN` (one flag serves
    /// both the server and the CLI), set by `main` before `resolve`.
    #[arg(skip)]
    pub admin_token: Option<String>,
}
