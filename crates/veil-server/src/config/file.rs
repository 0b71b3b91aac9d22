//! The settings of `veil serve` in the config file's shape (README.md "Configuration"): every top-level key with
//! its default, and each front-end's table typed by the front-end's own settings (`[sqs]`, `[azure]`,
//! `[kubemq]`, `[limits]`, `[postgres]`, `[cluster]`). The file is read straight into this type, so an unknown
//! key or a value of the wrong type is refused with the TOML parser's own message; config/merge.rs then lays
//! the flags over it and hands the few top-level keys of a section (`sqs_account_id`, `admin_*`, `*_tls_*`,
//! `store`) to it.

use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::path::{Path, PathBuf};

use serde::Deserialize;
use veil_admin::declare::QueueDeclaration;
use veil_admin::settings::{AdminSettings, Tokenless};
use veil_azure::settings::AzureSettings;
use veil_http::settings::LimitsSection;
use veil_kubemq::settings::KubemqSettings;
use veil_postgres::settings::PostgresSettings;
use veil_sqs::settings::SqsSettings;

use super::{ConfigError, DurabilityMode, LogFormat};
use crate::cluster::settings::{ClusterFile, StoreSetting};
use crate::listeners::ListenerSettings;

pub const DATA_DIR_DEFAULT: &str = "./veil-data";
pub const SQS_LISTEN_DEFAULT: SocketAddr =
    SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::LOCALHOST, 9324));
pub const LOG_LEVEL_DEFAULT: &str = "info";
const MIB: usize = 1024 * 1024;

/// The settings in force. The keys are read from the file in this order (the TOML parser lists them so when
/// it refuses an unknown one); the fields after `cluster` are what merge resolves from them.
#[derive(Deserialize, Debug, Clone, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct Settings {
    pub data_dir: PathBuf,
    pub sqs_listen: SocketAddr,
    /// Handed to `sqs.account_id` by merge.
    pub(super) sqs_account_id: Option<String>,
    pub inflight_max: u32,
    pub durability: DurabilityMode,
    pub log_level: String,
    pub log_format: LogFormat,
    pub store_cache_mib: usize,
    pub wal_segment_mib: u64,
    /// The four `admin_*` keys are handed to `admin` by merge.
    pub(super) admin_listen: Option<SocketAddr>,
    pub(super) admin_token: Option<String>,
    pub(super) admin_allowed_hosts: Vec<String>,
    pub(super) admin_tokenless: Option<Tokenless>,
    /// Handed to `sqs.advertised_url` by merge.
    pub(super) sqs_advertised_url: Option<String>,
    pub azure: AzureSettings,
    pub kubemq: KubemqSettings,
    /// The certificate keys and `[limits]` are handed to `listeners` by merge.
    pub(super) tls_cert: Option<PathBuf>,
    pub(super) tls_key: Option<PathBuf>,
    pub(super) sqs_tls_cert: Option<PathBuf>,
    pub(super) sqs_tls_key: Option<PathBuf>,
    pub(super) admin_tls_cert: Option<PathBuf>,
    pub(super) admin_tls_key: Option<PathBuf>,
    pub(super) limits: LimitsSection,
    pub sqs: SqsSettings,
    /// `embedded` or a PostgreSQL connection string (docs/cluster.md); with `[postgres]` and `[cluster]`
    /// handed to `store` by merge.
    #[serde(rename = "store")]
    pub(super) store_url: Option<String>,
    pub(super) postgres: PostgresSettings,
    pub(super) cluster: ClusterFile,
    /// `[[queues]]`: queues created or brought to these settings at start, never deleted (README.md "Queues
    /// declared in the config file").
    pub queues: Vec<QueueDeclaration>,
    /// The admin endpoint: address, token, allowed hosts, and what it does beyond loopback without a token.
    #[serde(skip)]
    pub admin: AdminSettings,
    /// TLS and limits of each listener.
    #[serde(skip)]
    pub listeners: ListenerSettings,
    /// The embedded store, or PostgreSQL shared by a cluster of nodes.
    #[serde(skip)]
    pub store: StoreSetting,
    /// Test-only, a flag and never a key (docs/testing.md "Test clock"): an `OffsetClock` and the admin call
    /// that advances it.
    #[serde(skip)]
    pub unsafe_test_clock: bool,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            data_dir: DATA_DIR_DEFAULT.into(),
            sqs_listen: SQS_LISTEN_DEFAULT,
            sqs_account_id: None,
            inflight_max: veil_core::limits::INFLIGHT_MESSAGES_DEFAULT,
            durability: DurabilityMode::default(),
            log_level: LOG_LEVEL_DEFAULT.into(),
            log_format: LogFormat::default(),
            store_cache_mib: veil_store::CACHE_BYTES_DEFAULT / MIB,
            wal_segment_mib: veil_store::WAL_SEGMENT_BYTES_MAX / MIB as u64,
            admin_listen: None,
            admin_token: None,
            admin_allowed_hosts: Vec::new(),
            admin_tokenless: None,
            sqs_advertised_url: None,
            azure: AzureSettings::default(),
            kubemq: KubemqSettings::default(),
            tls_cert: None,
            tls_key: None,
            sqs_tls_cert: None,
            sqs_tls_key: None,
            admin_tls_cert: None,
            admin_tls_key: None,
            limits: LimitsSection::default(),
            sqs: SqsSettings::default(),
            store_url: None,
            postgres: PostgresSettings::default(),
            cluster: ClusterFile::default(),
            queues: Vec::new(),
            admin: AdminSettings::default(),
            listeners: ListenerSettings::default(),
            unsafe_test_clock: false,
            store: StoreSetting::Embedded,
        }
    }
}

/// The config file at `path`, every key it leaves out at its default.
pub(super) fn read(path: &Path) -> Result<Settings, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
        path: path.into(),
        source,
    })?;
    toml::from_str(&text).map_err(|source| ConfigError::Parse {
        path: path.into(),
        source,
    })
}
