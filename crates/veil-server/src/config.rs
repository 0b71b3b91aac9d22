//! Configuration of `veil serve`: command-line flags, `VEIL_*` environment variables and an optional TOML file,
//! in that order of precedence, over built-in defaults that need no setup.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use clap::{Args, ValueEnum};
use serde::Deserialize;

pub const DATA_DIR_DEFAULT: &str = "./veil-data";
pub const SQS_LISTEN_DEFAULT: &str = "127.0.0.1:9324";
pub const AZURE_LISTEN_DEFAULT: &str = "127.0.0.1:10001";
pub const KUBEMQ_LISTEN_DEFAULT: &str = veil_kubemq::limits::LISTEN_DEFAULT;
pub const ADMIN_LISTEN_DEFAULT: &str = "127.0.0.1:9325";
pub const LOG_LEVEL_DEFAULT: &str = "info";
const MIB: usize = 1024 * 1024;
/// The largest log segment `wal_segment_mib` may ask for: a segment is held in memory until its checkpoint
/// (two at a time), so a larger one costs memory and start-up time for no measured gain
/// (docs/decisions/0004-write-ahead-log.md).
pub const WAL_SEGMENT_MIB_MAX: u64 = 1024;

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

/// Whether the Azure endpoint verifies Shared Key and SAS signatures.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum AzureAuthMode {
    /// Verify every request (Azure's behaviour).
    #[default]
    On,
    /// Accept any request, signed or not: for local development only.
    Off,
}

/// Whether the SQS endpoint verifies SigV4 signatures and checks permissions (docs/security.md, "SQS").
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum SqsAuthMode {
    /// Verify every request against the configured credentials (AWS's behaviour).
    #[default]
    On,
    /// Accept any request, signed or not, with every permission: for local development only.
    Off,
}

/// What an admin endpoint listening beyond loopback without a token does (docs/security.md "Admin endpoint").
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum AdminTokenless {
    /// `veil serve` refuses to start: the admin API would be open to the network.
    #[default]
    Refuse,
    /// It starts: /healthz and /readyz answer anyone, the API and /metrics only connections from loopback
    /// (the container image's setting, where orchestrators probe from outside).
    ProbesOnly,
}

/// An SQS credential of the config file (`[[sqs.credentials]]`).
#[derive(Deserialize, Debug, Clone, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct SqsCredentialFile {
    pub access_key: String,
    pub secret_key: String,
    pub account_id: String,
    pub session_token: Option<String>,
    /// Absent: the account's owner (every permission on the account's queues).
    pub grants: Option<Vec<veil_core::GrantSpec>>,
}

/// The `[sqs]` table of the config file.
#[derive(Deserialize, Debug, Default)]
#[serde(deny_unknown_fields)]
struct SqsFile {
    auth: Option<SqsAuthMode>,
    /// The development credential `test`/`test` → the default account; on unless set to false.
    dev_credential: Option<bool>,
    #[serde(default)]
    credentials: Vec<SqsCredentialFile>,
}

/// The development credential every SQS emulator accepts (docs/security.md, "SQS").
pub const SQS_DEV_ACCESS_KEY: &str = "test";
pub const SQS_DEV_SECRET_KEY: &str = "test";

/// An Azure storage account of the config file (`[[azure.accounts]]`).
#[derive(Deserialize, Debug, Clone, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct AzureAccountFile {
    pub name: String,
    /// The account key, base64 (as in a connection string's AccountKey).
    pub key: String,
    /// Engine namespace of the account's queues; by default `devstoreaccount1` shares Veil's default
    /// namespace and any other account has `azure:<name>`.
    pub namespace: Option<String>,
}

/// The `[azure]` table of the config file.
#[derive(Deserialize, Debug, Default)]
#[serde(deny_unknown_fields)]
struct AzureFile {
    listen: Option<SocketAddr>,
    auth: Option<AzureAuthMode>,
    max_dequeue_count: Option<u32>,
    #[serde(default)]
    accounts: Vec<AzureAccountFile>,
    entra: Option<AzureEntraFile>,
    #[serde(default)]
    role_assignments: Vec<AzureRoleAssignmentFile>,
    tls_cert: Option<PathBuf>,
    tls_key: Option<PathBuf>,
}

/// How the Azure endpoint treats Entra ID bearer tokens (docs/security.md, "Azure Queue Storage").
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum AzureEntraMode {
    /// Refuse bearer tokens.
    #[default]
    Off,
    /// Accept any well-formed, unexpired token as a Contributor (local development only).
    Dev,
    /// Verify tokens against the JWKS file, issuers and audiences.
    Verify,
}

/// The `[azure.entra]` table.
#[derive(Deserialize, Debug, Default)]
#[serde(deny_unknown_fields)]
struct AzureEntraFile {
    mode: Option<AzureEntraMode>,
    jwks_file: Option<PathBuf>,
    #[serde(default)]
    issuers: Vec<String>,
    #[serde(default)]
    audiences: Vec<String>,
    tenant: Option<String>,
}

/// One `[[azure.role_assignments]]`: a principal (object id or application id) holds a storage queue data
/// role on the queues matching `queues` of the accounts matching `account` (both `*` by default).
#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields)]
struct AzureRoleAssignmentFile {
    principal: String,
    role: String,
    account: Option<String>,
    queues: Option<String>,
}

/// The `[kubemq]` table of the config file: the listener, the accepted auth tokens and KubeMQ's server
/// settings (docs/semantics.md §KubeMQ), each defaulting to KubeMQ's value.
#[derive(Deserialize, Debug, Default)]
#[serde(deny_unknown_fields)]
struct KubemqFile {
    listen: Option<SocketAddr>,
    #[serde(default)]
    auth_tokens: Vec<String>,
    auth_jwt_key: Option<String>,
    auth_jwt_key_file: Option<PathBuf>,
    auth_jwt_signature_type: Option<String>,
    auth_policy: Option<String>,
    auth_policy_file: Option<PathBuf>,
    #[serde(default)]
    rules: Vec<veil_kubemq::auth::RuleSpec>,
    #[serde(default)]
    tokens: Vec<KubemqTokenFile>,
    default_visibility_seconds: Option<i32>,
    max_visibility_seconds: Option<i32>,
    default_wait_timeout_seconds: Option<i32>,
    max_wait_timeout_seconds: Option<i32>,
    max_number_of_messages: Option<i32>,
    max_expiration_seconds: Option<i32>,
    max_delay_seconds: Option<i32>,
    max_receive_count: Option<i32>,
    max_inflight: Option<u32>,
    tls_cert: Option<PathBuf>,
    tls_key: Option<PathBuf>,
}

/// KubeMQ's JWT authentication and authorization policy, named after KubeMQ's own `authentication.jwtConfig`
/// (`key`, `filePath`, `signatureType`) and `authorization` (`policyData`, `filePath`) settings, plus Veil's
/// static tokens with grants (docs/security.md "KubeMQ").
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct KubemqAuthSettings {
    /// The JWT verification key inline: the HS* secret (KubeMQ's `jwtConfig.key`).
    pub auth_jwt_key: Option<String>,
    /// A file with the JWT verification key: the HS* secret or the RS*/ES* public key PEM (`jwtConfig.filePath`).
    pub auth_jwt_key_file: Option<PathBuf>,
    /// HS256, HS384, HS512, RS256, RS384, RS512, ES256 or ES384 (`jwtConfig.signatureType`).
    pub auth_jwt_signature_type: Option<String>,
    /// The authorization policy inline: KubeMQ's JSON array of rules (`authorization.policyData`).
    pub auth_policy: Option<String>,
    /// A file with the authorization policy, KubeMQ's JSON (`authorization.filePath`).
    pub auth_policy_file: Option<PathBuf>,
    /// The policy's rules written in TOML (`[[kubemq.rules]] client_id, channel, queues, read, write`).
    pub rules: Vec<veil_kubemq::auth::RuleSpec>,
    /// Static tokens limited to some grants (`[[kubemq.tokens]] token, grants`); `auth_tokens` are unrestricted.
    pub tokens: Vec<KubemqTokenFile>,
}

/// A static KubeMQ token with grants.
#[derive(Deserialize, Debug, Clone, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct KubemqTokenFile {
    pub token: String,
    #[serde(default)]
    pub grants: Vec<veil_core::access::GrantSpec>,
}

/// Builds the KubeMQ endpoint's authentication and authorization, reading the key and policy files.
pub fn kubemq_auth(
    tokens: &[String],
    auth: &KubemqAuthSettings,
) -> Result<veil_kubemq::AuthConfig, ConfigError> {
    use std::sync::Arc;
    use veil_kubemq::auth::{JwtVerifier, Policy, StaticToken};
    let invalid = |e: veil_kubemq::auth::AuthConfigError| ConfigError::Invalid(e.to_string());
    let read = |path: &PathBuf| {
        std::fs::read(path).map_err(|source| ConfigError::Read {
            path: path.clone(),
            source,
        })
    };
    let mut static_tokens: Vec<StaticToken> =
        tokens.iter().map(StaticToken::unrestricted).collect();
    for token in &auth.tokens {
        static_tokens.push(StaticToken::with_grants(&token.token, &token.grants).map_err(invalid)?);
    }
    let key = match (&auth.auth_jwt_key, &auth.auth_jwt_key_file) {
        (Some(key), _) => Some(key.as_bytes().to_vec()),
        (None, Some(path)) => Some(read(path)?),
        (None, None) => None,
    };
    let jwt = match (key, &auth.auth_jwt_signature_type) {
        (Some(key), Some(signature)) => Some(Arc::new(
            JwtVerifier::new(signature, &key).map_err(invalid)?,
        )),
        (None, None) => None,
        (Some(_), None) => {
            return Err(ConfigError::Invalid(
                "kubemq auth_jwt_signature_type is missing (HS256, RS256, ES256, ...)".into(),
            ))
        }
        (None, Some(_)) => {
            return Err(ConfigError::Invalid(
                "kubemq auth_jwt_signature_type needs auth_jwt_key or auth_jwt_key_file".into(),
            ))
        }
    };
    let policy = match (&auth.auth_policy, &auth.auth_policy_file) {
        (Some(text), _) => Some(Policy::from_json(text).map_err(invalid)?),
        (None, Some(path)) => {
            let text = String::from_utf8_lossy(&read(path)?).into_owned();
            Some(Policy::from_json(&text).map_err(invalid)?)
        }
        (None, None) if !auth.rules.is_empty() => {
            Some(Policy::from_specs(&auth.rules).map_err(invalid)?)
        }
        (None, None) => None,
    };
    Ok(veil_kubemq::AuthConfig {
        static_tokens,
        jwt,
        policy: policy.map(Arc::new),
    })
}

/// An Azure account in force, its key decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AzureAccountSetting {
    pub name: String,
    pub key: Vec<u8>,
    pub namespace: Option<String>,
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
    pub sqs_auth: Option<SqsAuthMode>,
    /// Address of the Azure Queue Storage endpoint (path style: /<account>/<queue>) [default: 127.0.0.1:10001]
    #[arg(long, env = "VEIL_AZURE_LISTEN")]
    pub azure_listen: Option<SocketAddr>,
    /// on: verify Shared Key and SAS signatures; off: accept any request (local development only)
    /// [default: on]
    #[arg(long, env = "VEIL_AZURE_AUTH", value_enum)]
    pub azure_auth: Option<AzureAuthMode>,
    /// Poison policy of queues created through Azure: a get that finds a message already dequeued this many
    /// times moves it to <queue>-poison instead; 0 turns it off [default: 0]
    #[arg(long, env = "VEIL_AZURE_MAX_DEQUEUE_COUNT")]
    pub azure_max_dequeue_count: Option<u32>,
    /// Entra ID bearer tokens: off refuses them, dev accepts any well-formed token as a Contributor (local
    /// development only), verify checks them against [azure.entra] jwks_file, issuers and audiences
    /// [default: off]
    #[arg(long, env = "VEIL_AZURE_ENTRA", value_enum)]
    pub azure_entra: Option<AzureEntraMode>,
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
    pub admin_tokenless: Option<AdminTokenless>,
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

/// The same settings as read from the TOML file.
#[derive(Deserialize, Debug, Default)]
#[serde(deny_unknown_fields)]
struct FileConfig {
    data_dir: Option<PathBuf>,
    sqs_listen: Option<SocketAddr>,
    sqs_account_id: Option<String>,
    inflight_max: Option<u32>,
    durability: Option<DurabilityMode>,
    log_level: Option<String>,
    log_format: Option<LogFormat>,
    store_cache_mib: Option<usize>,
    wal_segment_mib: Option<u64>,
    admin_listen: Option<SocketAddr>,
    admin_token: Option<String>,
    #[serde(default)]
    admin_allowed_hosts: Vec<String>,
    admin_tokenless: Option<AdminTokenless>,
    sqs_advertised_url: Option<String>,
    #[serde(default)]
    azure: AzureFile,
    #[serde(default)]
    kubemq: KubemqFile,
    tls_cert: Option<PathBuf>,
    tls_key: Option<PathBuf>,
    sqs_tls_cert: Option<PathBuf>,
    sqs_tls_key: Option<PathBuf>,
    admin_tls_cert: Option<PathBuf>,
    admin_tls_key: Option<PathBuf>,
    #[serde(default)]
    limits: crate::listeners::LimitsFile,
    #[serde(default)]
    sqs: SqsFile,
    /// `embedded` or a PostgreSQL connection string (docs/cluster.md).
    store: Option<String>,
    #[serde(default)]
    postgres: crate::cluster::settings::PostgresFile,
    #[serde(default)]
    cluster: crate::cluster::settings::ClusterFile,
}

/// The settings in force.
#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    pub data_dir: PathBuf,
    pub sqs_listen: SocketAddr,
    pub sqs_account_id: String,
    pub inflight_max: u32,
    pub durability: DurabilityMode,
    pub log_level: String,
    pub log_format: LogFormat,
    pub store_cache_mib: usize,
    pub wal_segment_mib: u64,
    pub azure_listen: SocketAddr,
    pub azure_auth: AzureAuthMode,
    /// 0 = no server-wide poison policy.
    pub azure_max_dequeue_count: u32,
    /// Accounts of the config file; `devstoreaccount1` is added by the front-end unless listed here.
    pub azure_accounts: Vec<AzureAccountSetting>,
    /// Bearer tokens: mode, keys, issuers, audiences and role assignments.
    pub azure_entra: veil_azure::entra::EntraConfig,
    pub kubemq_listen: SocketAddr,
    /// Empty, with no JWT key and no `[[kubemq.tokens]]`: no authentication on the KubeMQ endpoint.
    pub kubemq_auth_tokens: Vec<String>,
    pub kubemq_auth: KubemqAuthSettings,
    pub kubemq_settings: veil_kubemq::Settings,
    pub admin_listen: SocketAddr,
    /// TLS and limits of each listener.
    pub listeners: crate::listeners::ListenerSettings,
    pub sqs_auth: SqsAuthMode,
    /// The credentials in force: the config file's, and the development one unless turned off.
    pub sqs_credentials: Vec<veil_sqs::SqsCredential>,
    /// The admin endpoint's bearer token; `None` leaves it open (loopback only).
    pub admin_token: Option<String>,
    /// Host names besides loopback's that the admin endpoint answers without a token (flag over file).
    pub admin_allowed_hosts: Vec<String>,
    /// What an admin endpoint beyond loopback without a token does.
    pub admin_tokenless: AdminTokenless,
    /// `http(s)://host[:port]` that queue URLs start with, whatever Host a request names; `None`: the
    /// listener's scheme and the request's Host.
    pub sqs_advertised_url: Option<String>,
    /// The embedded store, or PostgreSQL shared by a cluster of nodes.
    pub store: crate::cluster::settings::StoreSetting,
    /// Test-only (docs/testing.md "Test clock"): an `OffsetClock` and the admin call that advances it.
    pub unsafe_test_clock: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config file {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("invalid config file {path}: {source}")]
    Parse {
        path: PathBuf,
        source: toml::de::Error,
    },
    #[error("invalid setting: {0}")]
    Invalid(String),
}

fn read_file(path: &Path) -> Result<FileConfig, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
        path: path.into(),
        source,
    })?;
    toml::from_str(&text).map_err(|source| ConfigError::Parse {
        path: path.into(),
        source,
    })
}

/// Who the admin endpoint answers: the token's holder, or without a token requests naming these hosts (over
/// loopback connections only, when it listens beyond loopback).
#[derive(Debug, Clone)]
pub struct AdminGuard {
    pub token: Option<String>,
    pub allowed_hosts: Vec<String>,
    pub loopback_peers_only: bool,
}

impl Settings {
    pub fn admin_guard(&self) -> AdminGuard {
        AdminGuard {
            token: self.admin_token.clone(),
            allowed_hosts: self.admin_allowed_hosts.clone(),
            loopback_peers_only: self.admin_token.is_none()
                && !self.admin_listen.ip().is_loopback(),
        }
    }

    pub fn resolve(args: ServeArgs) -> Result<Self, ConfigError> {
        let file = match &args.config {
            Some(path) => read_file(path)?,
            None => FileConfig::default(),
        };
        let settings = Self::merge(args, file)?;
        settings.validate()?;
        Ok(settings)
    }

    /// Each setting from the flags (or environment), else the config file, else its default.
    fn merge(args: ServeArgs, mut file: FileConfig) -> Result<Self, ConfigError> {
        let listeners =
            crate::listeners::ListenerSettings::resolve(args.listeners, listener_file(&file))?;
        let store = crate::cluster::settings::StoreSetting::resolve(
            args.cluster,
            file.store.clone(),
            std::mem::take(&mut file.postgres),
            std::mem::take(&mut file.cluster),
        )?;
        let sqs_account_id = args
            .sqs_account_id
            .or(file.sqs_account_id)
            .unwrap_or_else(|| veil_sqs::limits::DEFAULT_ACCOUNT_ID.into());
        Ok(Settings {
            store,
            listeners,
            data_dir: args
                .data_dir
                .or(file.data_dir)
                .unwrap_or_else(|| DATA_DIR_DEFAULT.into()),
            sqs_listen: listen_addr(args.sqs_listen.or(file.sqs_listen), SQS_LISTEN_DEFAULT)?,
            sqs_account_id: sqs_account_id.clone(),
            inflight_max: args
                .inflight_max
                .or(file.inflight_max)
                .unwrap_or(veil_core::limits::INFLIGHT_MESSAGES_DEFAULT),
            durability: args.durability.or(file.durability).unwrap_or_default(),
            log_level: args
                .log_level
                .or(file.log_level)
                .unwrap_or_else(|| LOG_LEVEL_DEFAULT.into()),
            log_format: args.log_format.or(file.log_format).unwrap_or_default(),
            store_cache_mib: args
                .store_cache_mib
                .or(file.store_cache_mib)
                .unwrap_or(veil_store::CACHE_BYTES_DEFAULT / MIB),
            wal_segment_mib: args
                .wal_segment_mib
                .or(file.wal_segment_mib)
                .unwrap_or(veil_store::WAL_SEGMENT_BYTES_MAX / MIB as u64),
            azure_listen: listen_addr(
                args.azure_listen.or(file.azure.listen),
                AZURE_LISTEN_DEFAULT,
            )?,
            azure_auth: args.azure_auth.or(file.azure.auth).unwrap_or_default(),
            azure_max_dequeue_count: args
                .azure_max_dequeue_count
                .or(file.azure.max_dequeue_count)
                .unwrap_or(0),
            azure_entra: azure_entra(
                args.azure_entra,
                file.azure.entra.unwrap_or_default(),
                file.azure.role_assignments,
            )?,
            azure_accounts: azure_accounts(file.azure.accounts)?,
            kubemq_listen: listen_addr(
                args.kubemq_listen.or(file.kubemq.listen),
                KUBEMQ_LISTEN_DEFAULT,
            )?,
            kubemq_auth_tokens: file.kubemq.auth_tokens.clone(),
            kubemq_auth: KubemqAuthSettings {
                auth_jwt_key: file.kubemq.auth_jwt_key.clone(),
                auth_jwt_key_file: file.kubemq.auth_jwt_key_file.clone(),
                auth_jwt_signature_type: file.kubemq.auth_jwt_signature_type.clone(),
                auth_policy: file.kubemq.auth_policy.clone(),
                auth_policy_file: file.kubemq.auth_policy_file.clone(),
                rules: file.kubemq.rules.clone(),
                tokens: file.kubemq.tokens.clone(),
            },
            kubemq_settings: kubemq_settings(&file.kubemq)?,
            admin_listen: listen_addr(
                args.admin_listen.or(file.admin_listen),
                ADMIN_LISTEN_DEFAULT,
            )?,
            sqs_auth: args.sqs_auth.or(file.sqs.auth).unwrap_or_default(),
            sqs_credentials: sqs_credentials(&file.sqs, &sqs_account_id)?,
            admin_token: args
                .admin_token
                .or(file.admin_token)
                .filter(|token| !token.is_empty()),
            admin_allowed_hosts: if args.admin_allowed_hosts.is_empty() {
                file.admin_allowed_hosts
            } else {
                args.admin_allowed_hosts.clone()
            },
            admin_tokenless: args
                .admin_tokenless
                .or(file.admin_tokenless)
                .unwrap_or_default(),
            sqs_advertised_url: args
                .sqs_advertised_url
                .or(file.sqs_advertised_url)
                .map(|url| advertised_url(&url))
                .transpose()?,
            unsafe_test_clock: args.unsafe_test_clock,
        })
    }

    /// Rejects settings the front-ends could not honour.
    fn validate(&self) -> Result<(), ConfigError> {
        if self.azure_max_dequeue_count > veil_azure::limits::MAX_DEQUEUE_COUNT_MAX {
            return Err(ConfigError::Invalid(format!(
                "azure max_dequeue_count must be 0 (off) or at most {}",
                veil_azure::limits::MAX_DEQUEUE_COUNT_MAX
            )));
        }
        for account in &self.azure_accounts {
            check_azure_account_name(&account.name)?;
        }
        if self.sqs_account_id.len() != 12
            || !self.sqs_account_id.bytes().all(|b| b.is_ascii_digit())
        {
            return Err(ConfigError::Invalid(format!(
                "sqs_account_id must be 12 digits, got {:?}",
                self.sqs_account_id
            )));
        }
        if self.inflight_max == 0 {
            return Err(ConfigError::Invalid(
                "inflight_max must be at least 1".into(),
            ));
        }
        if self.wal_segment_mib == 0 || self.wal_segment_mib > WAL_SEGMENT_MIB_MAX {
            return Err(ConfigError::Invalid(format!(
                "wal_segment_mib must be 1..={WAL_SEGMENT_MIB_MAX}"
            )));
        }
        kubemq_auth(&self.kubemq_auth_tokens, &self.kubemq_auth)?;
        check_admin_exposure(
            self.admin_listen,
            self.admin_token.as_deref(),
            self.admin_tokenless,
        )?;
        Ok(())
    }
}

/// The TLS and limits keys of the config file's tables, gathered for `listeners`.
fn listener_file(file: &FileConfig) -> crate::listeners::ListenerFile {
    use crate::listeners::TlsFile;
    let tls = |cert: &Option<PathBuf>, key: &Option<PathBuf>| TlsFile {
        tls_cert: cert.clone(),
        tls_key: key.clone(),
    };
    crate::listeners::ListenerFile {
        shared: tls(&file.tls_cert, &file.tls_key),
        sqs: tls(&file.sqs_tls_cert, &file.sqs_tls_key),
        azure: tls(&file.azure.tls_cert, &file.azure.tls_key),
        kubemq: tls(&file.kubemq.tls_cert, &file.kubemq.tls_key),
        admin: tls(&file.admin_tls_cert, &file.admin_tls_key),
        limits: file.limits.clone(),
    }
}

/// The `[[sqs.credentials]]`, each checked, and the development credential `test`/`test` → the default
/// account unless `dev_credential = false` or a listed credential uses the key `test`.
fn sqs_credentials(
    file: &SqsFile,
    default_account: &str,
) -> Result<Vec<veil_sqs::SqsCredential>, ConfigError> {
    let mut credentials: Vec<veil_sqs::SqsCredential> = file
        .credentials
        .iter()
        .map(|c| veil_sqs::SqsCredential {
            access_key: c.access_key.clone(),
            secret_key: c.secret_key.clone(),
            account_id: c.account_id.clone(),
            session_token: c.session_token.clone(),
            grants: c.grants.clone(),
        })
        .collect();
    let listed = credentials
        .iter()
        .any(|c| c.access_key == SQS_DEV_ACCESS_KEY);
    if file.dev_credential.unwrap_or(true) && !listed {
        credentials.push(veil_sqs::SqsCredential {
            access_key: SQS_DEV_ACCESS_KEY.into(),
            secret_key: SQS_DEV_SECRET_KEY.into(),
            account_id: default_account.into(),
            session_token: None,
            grants: None,
        });
    }
    let mut seen = std::collections::HashSet::new();
    for credential in &credentials {
        if !seen.insert(credential.access_key.as_str()) {
            return Err(ConfigError::Invalid(
                veil_sqs::CredentialError::Duplicate {
                    access_key: credential.access_key.clone(),
                }
                .to_string(),
            ));
        }
        credential
            .validate()
            .map_err(|error| ConfigError::Invalid(error.to_string()))?;
    }
    Ok(credentials)
}

/// An admin endpoint reachable beyond loopback must require a token, unless the operator chose probes-only
/// (docs/security.md "Admin endpoint").
fn check_admin_exposure(
    listen: SocketAddr,
    token: Option<&str>,
    tokenless: AdminTokenless,
) -> Result<(), ConfigError> {
    if listen.ip().is_loopback() || token.is_some() || tokenless == AdminTokenless::ProbesOnly {
        return Ok(());
    }
    Err(ConfigError::Invalid(format!(
        "the admin endpoint would listen on {listen}, beyond loopback, without a token: set --admin-token \
         (VEIL_ADMIN_TOKEN, or admin_token in the config file), listen on 127.0.0.1, or serve only the probes \
         beyond loopback with --admin-tokenless probes-only"
    )))
}

/// `http(s)://host[:port]`, without a path: queue URLs append `/<account>/<queue>` to it.
fn advertised_url(given: &str) -> Result<String, ConfigError> {
    let refused = || {
        ConfigError::Invalid(format!(
            "sqs_advertised_url must be http://host[:port] or https://host[:port] without a path, got {given:?}"
        ))
    };
    let uri: axum::http::Uri = given.parse().map_err(|_| refused())?;
    let scheme = uri
        .scheme_str()
        .filter(|scheme| matches!(*scheme, "http" | "https"))
        .ok_or_else(refused)?;
    let authority = uri
        .authority()
        .filter(|authority| !authority.host().is_empty() && !authority.as_str().contains('@'))
        .ok_or_else(refused)?;
    if uri.path() != "/" || uri.query().is_some() {
        return Err(refused());
    }
    Ok(format!("{scheme}://{authority}"))
}

/// The address given, else the built-in default.
fn listen_addr(given: Option<SocketAddr>, default: &str) -> Result<SocketAddr, ConfigError> {
    match given {
        Some(addr) => Ok(addr),
        None => default
            .parse()
            .map_err(|e| ConfigError::Invalid(format!("{e}"))),
    }
}

/// The bearer-token settings: the mode (flag > file), the JWKS file read and parsed, the role names checked.
fn azure_entra(
    flag: Option<AzureEntraMode>,
    file: AzureEntraFile,
    assignments: Vec<AzureRoleAssignmentFile>,
) -> Result<veil_azure::entra::EntraConfig, ConfigError> {
    use veil_azure::entra::{EntraConfig, EntraMode, Role, RoleAssignment};
    let mode = match flag.or(file.mode).unwrap_or_default() {
        AzureEntraMode::Off => EntraMode::Off,
        AzureEntraMode::Dev => EntraMode::Dev,
        AzureEntraMode::Verify => EntraMode::Verify,
    };
    let keys = match &file.jwks_file {
        Some(path) => {
            let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
                path: path.clone(),
                source,
            })?;
            EntraConfig::parse_jwks(&text).map_err(|e| {
                ConfigError::Invalid(format!("azure entra jwks_file {}: {e}", path.display()))
            })?
        }
        None if mode == EntraMode::Verify => {
            return Err(ConfigError::Invalid(
                "azure entra mode verify needs [azure.entra] jwks_file".into(),
            ))
        }
        None => Vec::new(),
    };
    let role_assignments = assignments
        .into_iter()
        .map(|a| {
            let role = Role::parse(&a.role).ok_or_else(|| {
                ConfigError::Invalid(format!(
                    "azure role_assignments: unknown role {:?} (one of {})",
                    a.role,
                    Role::ALL.map(Role::name).join(", ")
                ))
            })?;
            Ok(RoleAssignment {
                principal: a.principal,
                role,
                account: veil_core::Pattern::new(a.account.unwrap_or_else(|| "*".into())),
                queues: veil_core::Pattern::new(a.queues.unwrap_or_else(|| "*".into())),
            })
        })
        .collect::<Result<Vec<_>, ConfigError>>()?;
    Ok(EntraConfig {
        mode,
        keys,
        issuers: file.issuers,
        audiences: file.audiences,
        tenant: file.tenant,
        role_assignments,
    })
}

/// The config file's Azure accounts with their keys decoded.
fn azure_accounts(
    accounts: Vec<AzureAccountFile>,
) -> Result<Vec<AzureAccountSetting>, ConfigError> {
    accounts
        .into_iter()
        .map(|account| {
            let key = veil_azure::auth::decode_key(&account.key).ok_or_else(|| {
                ConfigError::Invalid(format!(
                    "the key of Azure account {:?} is not base64",
                    account.name
                ))
            })?;
            Ok(AzureAccountSetting {
                name: account.name,
                key,
                namespace: account.namespace,
            })
        })
        .collect()
}

/// Azure account names: 3-24 lower-case letters and digits.
fn check_azure_account_name(name: &str) -> Result<(), ConfigError> {
    let legal = (3..=24).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit());
    if legal {
        Ok(())
    } else {
        Err(ConfigError::Invalid(format!(
            "Azure account name {name:?} must be 3 to 24 lower-case letters and digits"
        )))
    }
}

/// KubeMQ's server settings from the `[kubemq]` table over KubeMQ's defaults; the visibility default must lie
/// within 1 ..= max visibility, and the maxima within what the engine accepts.
fn kubemq_settings(file: &KubemqFile) -> Result<veil_kubemq::Settings, ConfigError> {
    let defaults = veil_kubemq::Settings::default();
    let settings = veil_kubemq::Settings {
        max_number_of_messages: file
            .max_number_of_messages
            .unwrap_or(defaults.max_number_of_messages),
        max_wait_timeout_s: file
            .max_wait_timeout_seconds
            .unwrap_or(defaults.max_wait_timeout_s),
        max_expiration_s: file
            .max_expiration_seconds
            .unwrap_or(defaults.max_expiration_s),
        max_delay_s: file.max_delay_seconds.unwrap_or(defaults.max_delay_s),
        max_receive_count: file.max_receive_count.unwrap_or(defaults.max_receive_count),
        max_visibility_s: file
            .max_visibility_seconds
            .unwrap_or(defaults.max_visibility_s),
        default_visibility_s: file
            .default_visibility_seconds
            .unwrap_or(defaults.default_visibility_s),
        default_wait_timeout_s: file
            .default_wait_timeout_seconds
            .unwrap_or(defaults.default_wait_timeout_s),
        max_inflight: file.max_inflight.unwrap_or(defaults.max_inflight),
    };
    let engine_visibility_s_max = (veil_core::limits::VISIBILITY_TIMEOUT_MS_MAX / 1_000) as i32;
    if !(1..=engine_visibility_s_max).contains(&settings.max_visibility_s)
        || !(1..=settings.max_visibility_s).contains(&settings.default_visibility_s)
    {
        return Err(ConfigError::Invalid(format!(
            "kubemq default_visibility_seconds must be 1..=max_visibility_seconds (<= {engine_visibility_s_max})"
        )));
    }
    let engine_messages_max = veil_core::limits::RECEIVE_MESSAGES_MAX as i32;
    let engine_wait_s_max = (veil_core::limits::RECEIVE_WAIT_MS_MAX / 1_000) as i32;
    if !(1..=engine_messages_max).contains(&settings.max_number_of_messages)
        || !(0..=engine_wait_s_max).contains(&settings.max_wait_timeout_s)
        || settings.max_expiration_s < 0
        || settings.max_delay_s < 0
        || settings.max_receive_count < 1
        || settings.max_inflight == 0
    {
        return Err(ConfigError::Invalid(format!(
            "kubemq limits out of range (max_number_of_messages 1..={engine_messages_max}, \
             max_wait_timeout_seconds 0..={engine_wait_s_max}, max_receive_count and max_inflight >= 1)"
        )));
    }
    Ok(settings)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_admin_endpoint_beyond_loopback_needs_a_token() {
        let loopback: SocketAddr = "127.0.0.1:9325".parse().unwrap();
        let everywhere: SocketAddr = "0.0.0.0:9325".parse().unwrap();
        let refuse = AdminTokenless::Refuse;
        assert!(check_admin_exposure(loopback, None, refuse).is_ok());
        assert!(check_admin_exposure(everywhere, Some("t"), refuse).is_ok());
        let refused = check_admin_exposure(everywhere, None, refuse)
            .unwrap_err()
            .to_string();
        assert!(refused.contains("--admin-token"), "{refused}");
    }

    #[test]
    fn probes_only_lets_a_tokenless_admin_endpoint_listen_beyond_loopback_for_loopback_peers() {
        let everywhere: SocketAddr = "0.0.0.0:9325".parse().unwrap();
        assert!(check_admin_exposure(everywhere, None, AdminTokenless::ProbesOnly).is_ok());
        let settings = |listen: &str, token: Option<&str>| {
            let mut settings = Settings::resolve(ServeArgs::default()).unwrap();
            settings.admin_listen = listen.parse().unwrap();
            settings.admin_token = token.map(str::to_string);
            settings.admin_tokenless = AdminTokenless::ProbesOnly;
            settings
        };
        assert!(
            settings("0.0.0.0:9325", None)
                .admin_guard()
                .loopback_peers_only
        );
        assert!(
            !settings("0.0.0.0:9325", Some("t"))
                .admin_guard()
                .loopback_peers_only
        );
        assert!(
            !settings("127.0.0.1:9325", None)
                .admin_guard()
                .loopback_peers_only
        );
    }

    #[test]
    fn an_advertised_sqs_url_is_a_scheme_and_an_authority() {
        assert_eq!(
            advertised_url("http://veil:9324/").unwrap(),
            "http://veil:9324"
        );
        assert_eq!(
            advertised_url("https://[::1]:9324").unwrap(),
            "https://[::1]:9324"
        );
        for bad in [
            "veil:9324",
            "ftp://veil",
            "http://",
            "http://veil/queues",
            "http://veil?x=1",
        ] {
            assert!(advertised_url(bad).is_err(), "{bad} accepted");
        }
    }

    #[test]
    fn kubemq_jwt_and_rules_come_from_the_kubemq_table() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("veil.toml");
        std::fs::write(
            &path,
            "[kubemq]\nauth_jwt_key = \"s\"\nauth_jwt_signature_type = \"HS256\"\n\
             [[kubemq.rules]]\nclient_id = \"a\"\nchannel = \"b\"\nqueues = true\nwrite = true\n\
             [[kubemq.tokens]]\ntoken = \"t\"\ngrants = [{ queues = \"q*\", permissions = [\"send\"] }]\n",
        )
        .unwrap();
        let args = ServeArgs {
            config: Some(path),
            ..ServeArgs::default()
        };
        let settings = Settings::resolve(args).unwrap();
        let auth = kubemq_auth(&settings.kubemq_auth_tokens, &settings.kubemq_auth).unwrap();
        assert!(auth.jwt.is_some() && auth.policy.is_some());
        assert_eq!(auth.static_tokens.len(), 1);
        let bad = KubemqAuthSettings {
            auth_jwt_key: Some("s".into()),
            ..KubemqAuthSettings::default()
        };
        assert!(
            kubemq_auth(&[], &bad).is_err(),
            "a key without a signature type"
        );
    }

    #[test]
    fn kubemq_tokens_and_visibility_default_come_from_the_kubemq_table() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("veil.toml");
        std::fs::write(
            &path,
            "[kubemq]\nlisten = \"127.0.0.1:20050\"\nauth_tokens = [\"t1\", \"t2\"]\ndefault_visibility_seconds = 5\n",
        )
        .unwrap();
        let args = ServeArgs {
            config: Some(path),
            ..ServeArgs::default()
        };
        let settings = Settings::resolve(args).unwrap();
        assert_eq!(settings.kubemq_listen.to_string(), "127.0.0.1:20050");
        assert_eq!(
            settings.kubemq_auth_tokens,
            vec!["t1".to_string(), "t2".to_string()]
        );
        assert_eq!(settings.kubemq_settings.default_visibility_s, 5);
        assert_eq!(settings.kubemq_settings.max_visibility_s, 43_200);
    }

    #[test]
    fn a_kubemq_visibility_default_above_the_maximum_is_rejected() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("veil.toml");
        std::fs::write(&path, "[kubemq]\ndefault_visibility_seconds = 50000\n").unwrap();
        let args = ServeArgs {
            config: Some(path),
            ..ServeArgs::default()
        };
        match Settings::resolve(args) {
            Err(ConfigError::Invalid(message)) => {
                assert!(message.contains("default_visibility_seconds"), "{message}")
            }
            other => panic!("expected the visibility default to be refused, got {other:?}"),
        }
    }

    #[test]
    fn defaults_need_no_setup() {
        let settings = Settings::resolve(ServeArgs::default()).unwrap();
        assert_eq!(settings.data_dir, PathBuf::from(DATA_DIR_DEFAULT));
        assert_eq!(settings.sqs_listen.to_string(), SQS_LISTEN_DEFAULT);
        assert_eq!(settings.sqs_account_id, "000000000000");
        assert_eq!(settings.durability, DurabilityMode::Durable);
        assert_eq!(settings.azure_listen.to_string(), AZURE_LISTEN_DEFAULT);
        assert_eq!(settings.azure_auth, AzureAuthMode::On);
        assert_eq!(
            settings.azure_max_dequeue_count, 0,
            "no poison policy unless asked"
        );
        assert!(settings.azure_accounts.is_empty());
        assert_eq!(settings.kubemq_listen.to_string(), KUBEMQ_LISTEN_DEFAULT);
        assert!(settings.kubemq_auth_tokens.is_empty());
        assert_eq!(settings.kubemq_settings.default_visibility_s, 60);
    }

    fn resolve_text(text: &str) -> Result<Settings, ConfigError> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("veil.toml");
        std::fs::write(&path, text).unwrap();
        Settings::resolve(ServeArgs {
            config: Some(path),
            ..ServeArgs::default()
        })
    }

    #[test]
    fn sqs_auth_is_on_with_the_dev_credential_by_default() {
        let settings = Settings::resolve(ServeArgs::default()).unwrap();
        assert_eq!(settings.sqs_auth, SqsAuthMode::On);
        let keys: Vec<(&str, &str, &str)> = settings
            .sqs_credentials
            .iter()
            .map(|c| {
                (
                    c.access_key.as_str(),
                    c.secret_key.as_str(),
                    c.account_id.as_str(),
                )
            })
            .collect();
        assert_eq!(keys, [("test", "test", "000000000000")]);
    }

    #[test]
    fn sqs_credentials_come_from_the_sqs_table_and_the_dev_credential_can_be_turned_off() {
        let settings = resolve_text(
            "[sqs]\nauth = \"off\"\ndev_credential = false\n[[sqs.credentials]]\naccess_key = \"AK\"\n\
             secret_key = \"s\"\naccount_id = \"111111111111\"\nsession_token = \"t\"\n\
             grants = [{ queues = \"orders-*\", permissions = [\"send\"] }]\n",
        )
        .unwrap();
        assert_eq!(settings.sqs_auth, SqsAuthMode::Off);
        assert_eq!(settings.sqs_credentials.len(), 1);
        let credential = &settings.sqs_credentials[0];
        assert_eq!(credential.session_token.as_deref(), Some("t"));
        assert_eq!(credential.grants.as_ref().map(Vec::len), Some(1));
    }

    #[test]
    fn bad_sqs_credentials_are_rejected() {
        for (text, expected) in [
            ("[[sqs.credentials]]\naccess_key = \"AK\"\nsecret_key = \"s\"\naccount_id = \"12\"\n", "12 digits"),
            ("[[sqs.credentials]]\naccess_key = \"AK\"\nsecret_key = \"s\"\naccount_id = \"111111111111\"\ngrants = [{ permissions = [\"write\"] }]\n", "unknown permission"),
            ("[[sqs.credentials]]\naccess_key = \"AK\"\nsecret_key = \"s\"\naccount_id = \"111111111111\"\n[[sqs.credentials]]\naccess_key = \"AK\"\nsecret_key = \"t\"\naccount_id = \"111111111111\"\n", "listed twice"),
        ] {
            match resolve_text(text) {
                Err(ConfigError::Invalid(message)) => assert!(message.contains(expected), "{message}"),
                other => panic!("expected {expected:?}, got {other:?}"),
            }
        }
    }

    #[test]
    fn azure_entra_reads_the_jwks_file_role_assignments_and_refuses_unknown_roles() {
        use veil_azure::entra::{EntraMode, Role};
        let dir = tempfile::tempdir().unwrap();
        let jwks = dir.path().join("jwks.json");
        std::fs::write(
            &jwks,
            r#"{"keys":[{"kty":"RSA","kid":"k1","n":"sXchDaQebHnPiGvyDOAT4saGEUetSyo9MKLOoWFsueri23bOdgWp4Dy1WlUzewbgBHod5pcM9H95GQRV3JDXboIRROSBigeC5yjU1hGzHHyXss8UDprecbAYxknTcQkhslANGRUZmdTOQ5qTRsLAt6BTYuyvVRdhS8exSZEy_c4gs_7svlJJQ4H9_NxsiIoLwAEk7-Q3UXERGYw_75IDrGA84-lA_-Ct4eTlXHBIY2EaV7t7LjJaynVJCpkv4LKjTTAumiGUIuQhrNhZLuF_RJLqHpM2kgWFLU7-VTdL1VbC2tejvcI2BlMkEpk1BzBZI0KQB0GaDWFLN-aEAw3vRw","e":"AQAB"}]}"#,
        )
        .unwrap();
        let path = dir.path().join("veil.toml");
        std::fs::write(
            &path,
            format!(
                "[azure.entra]\nmode = \"verify\"\njwks_file = {:?}\naudiences = [\"https://storage.azure.com\"]\n\
                 [[azure.role_assignments]]\nprincipal = \"oid-1\"\nrole = \"Storage Queue Data Reader\"\nqueues = \"orders-*\"\n",
                jwks.display().to_string()
            ),
        )
        .unwrap();
        let args = |path: &Path, flag| ServeArgs {
            config: Some(path.to_path_buf()),
            azure_entra: flag,
            ..ServeArgs::default()
        };
        let entra = Settings::resolve(args(&path, None)).unwrap().azure_entra;
        assert_eq!(entra.mode, EntraMode::Verify);
        assert_eq!(entra.keys.len(), 1);
        assert_eq!(entra.role_assignments[0].role, Role::Reader);
        assert_eq!(entra.role_assignments[0].account.as_str(), "*");
        let dev = Settings::resolve(args(&path, Some(AzureEntraMode::Dev))).unwrap();
        assert_eq!(dev.azure_entra.mode, EntraMode::Dev, "the flag wins");

        let unknown = dir.path().join("unknown.toml");
        std::fs::write(
            &unknown,
            "[[azure.role_assignments]]\nprincipal = \"x\"\nrole = \"Owner\"\n",
        )
        .unwrap();
        assert!(Settings::resolve(args(&unknown, None)).is_err());
        let no_keys = dir.path().join("nokeys.toml");
        std::fs::write(&no_keys, "[azure.entra]\nmode = \"verify\"\n").unwrap();
        assert!(Settings::resolve(args(&no_keys, None)).is_err());
    }

    #[test]
    fn azure_accounts_and_poison_default_come_from_the_azure_table() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("veil.toml");
        std::fs::write(
            &path,
            "[azure]\nlisten = \"127.0.0.1:20001\"\nauth = \"off\"\nmax_dequeue_count = 5\n\
             [[azure.accounts]]\nname = \"prodlike\"\nkey = \"c2VjcmV0\"\nnamespace = \"default\"\n",
        )
        .unwrap();
        let args = ServeArgs {
            config: Some(path),
            azure_auth: Some(AzureAuthMode::On),
            ..ServeArgs::default()
        };
        let settings = Settings::resolve(args).unwrap();
        assert_eq!(settings.azure_listen.to_string(), "127.0.0.1:20001");
        assert_eq!(
            settings.azure_auth,
            AzureAuthMode::On,
            "the flag wins over the file"
        );
        assert_eq!(settings.azure_max_dequeue_count, 5);
        assert_eq!(
            settings.azure_accounts,
            vec![AzureAccountSetting {
                name: "prodlike".into(),
                key: b"secret".to_vec(),
                namespace: Some("default".into()),
            }]
        );
    }

    #[test]
    fn an_azure_account_key_that_is_not_base64_is_rejected() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("veil.toml");
        std::fs::write(
            &path,
            "[[azure.accounts]]\nname = \"acct\"\nkey = \"not base64!\"\n",
        )
        .unwrap();
        let args = ServeArgs {
            config: Some(path),
            ..ServeArgs::default()
        };
        match Settings::resolve(args) {
            Err(ConfigError::Invalid(message)) => {
                assert!(message.contains("is not base64"), "{message}")
            }
            other => panic!("expected the key to be refused, got {other:?}"),
        }
    }

    #[test]
    fn flags_override_the_config_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("veil.toml");
        std::fs::write(
            &path,
            "data_dir = \"/from/file\"\ninflight_max = 7\ndurability = \"relaxed\"\n",
        )
        .unwrap();
        let args = ServeArgs {
            config: Some(path),
            inflight_max: Some(9),
            ..ServeArgs::default()
        };
        let settings = Settings::resolve(args).unwrap();
        assert_eq!(settings.data_dir, PathBuf::from("/from/file"));
        assert_eq!(settings.inflight_max, 9);
        assert_eq!(settings.durability, DurabilityMode::Relaxed);
    }

    #[test]
    fn log_format_is_text_unless_the_flag_environment_or_file_says_json() {
        use clap::Parser;

        /// `veil serve`'s flags alone, parsed as clap parses them (flags and environment).
        #[derive(Parser)]
        struct Serve {
            #[command(flatten)]
            args: ServeArgs,
        }

        let parse = |argv: &[&str]| {
            let args = Serve::try_parse_from(argv).expect("parses").args;
            Settings::resolve(args).expect("resolves").log_format
        };
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("veil.toml");
        std::fs::write(&path, "log_format = \"json\"\n").unwrap();
        let file = path.to_str().expect("utf-8 path");
        // The environment variable is this test's own: no other test sets or reads VEIL_LOG_FORMAT.
        std::env::remove_var("VEIL_LOG_FORMAT");
        assert_eq!(parse(&["veil"]), LogFormat::Text);
        assert_eq!(parse(&["veil", "--log-format", "json"]), LogFormat::Json);
        assert_eq!(parse(&["veil", "--config", file]), LogFormat::Json);
        assert_eq!(
            parse(&["veil", "--config", file, "--log-format", "text"]),
            LogFormat::Text,
            "the flag wins over the file"
        );
        std::env::set_var("VEIL_LOG_FORMAT", "json");
        let from_env = parse(&["veil"]);
        std::env::remove_var("VEIL_LOG_FORMAT");
        assert_eq!(from_env, LogFormat::Json);
        assert!(
            Serve::try_parse_from(["veil", "--log-format", "xml"]).is_err(),
            "only text and json"
        );
    }

    #[test]
    fn unknown_keys_in_the_config_file_are_rejected() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("veil.toml");
        std::fs::write(&path, "data_dri = \"typo\"\n").unwrap();
        let args = ServeArgs {
            config: Some(path),
            ..ServeArgs::default()
        };
        match Settings::resolve(args) {
            Err(ConfigError::Parse { source, .. }) => {
                assert!(source.to_string().contains("data_dri"), "{source}")
            }
            other => panic!("expected the unknown key to be refused, got {other:?}"),
        }
    }
}
