//! Configuration of `veil serve`: command-line flags, `VEIL_*` environment variables and an optional TOML file,
//! in that order of precedence, over built-in defaults that need no setup.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use clap::{Args, ValueEnum};
use serde::Deserialize;

pub const DATA_DIR_DEFAULT: &str = "./veil-data";
pub const SQS_LISTEN_DEFAULT: &str = "127.0.0.1:9324";
pub const LOG_LEVEL_DEFAULT: &str = "info";
const MIB: usize = 1024 * 1024;

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

/// Flags of `veil serve`. Every one can also come from the environment or the config file.
#[derive(Args, Debug, Default)]
pub struct ServeArgs {
    /// TOML file with any of the settings below (keys: data_dir, sqs_listen, sqs_account_id, inflight_max,
    /// durability, log_level, store_cache_mib). Flags and environment variables override it.
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
    /// Memory for the store's page cache, in MiB [default: 64]
    #[arg(long, env = "VEIL_STORE_CACHE_MIB")]
    pub store_cache_mib: Option<usize>,
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
    store_cache_mib: Option<usize>,
}

/// The settings in force.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    pub data_dir: PathBuf,
    pub sqs_listen: SocketAddr,
    pub sqs_account_id: String,
    pub inflight_max: u32,
    pub durability: DurabilityMode,
    pub log_level: String,
    pub store_cache_mib: usize,
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

impl Settings {
    pub fn resolve(args: ServeArgs) -> Result<Self, ConfigError> {
        let file = match &args.config {
            Some(path) => read_file(path)?,
            None => FileConfig::default(),
        };
        let settings = Settings {
            data_dir: args
                .data_dir
                .or(file.data_dir)
                .unwrap_or_else(|| DATA_DIR_DEFAULT.into()),
            sqs_listen: match args.sqs_listen.or(file.sqs_listen) {
                Some(addr) => addr,
                None => SQS_LISTEN_DEFAULT
                    .parse()
                    .map_err(|e| ConfigError::Invalid(format!("{e}")))?,
            },
            sqs_account_id: args
                .sqs_account_id
                .or(file.sqs_account_id)
                .unwrap_or_else(|| veil_core::limits::sqs::DEFAULT_ACCOUNT_ID.into()),
            inflight_max: args
                .inflight_max
                .or(file.inflight_max)
                .unwrap_or(veil_core::limits::INFLIGHT_MESSAGES_DEFAULT),
            durability: args.durability.or(file.durability).unwrap_or_default(),
            log_level: args
                .log_level
                .or(file.log_level)
                .unwrap_or_else(|| LOG_LEVEL_DEFAULT.into()),
            store_cache_mib: args
                .store_cache_mib
                .or(file.store_cache_mib)
                .unwrap_or(veil_store::CACHE_BYTES_DEFAULT / MIB),
        };
        if settings.sqs_account_id.len() != 12
            || !settings.sqs_account_id.bytes().all(|b| b.is_ascii_digit())
        {
            return Err(ConfigError::Invalid(format!(
                "sqs_account_id must be 12 digits, got {:?}",
                settings.sqs_account_id
            )));
        }
        if settings.inflight_max == 0 {
            return Err(ConfigError::Invalid(
                "inflight_max must be at least 1".into(),
            ));
        }
        Ok(settings)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_need_no_setup() {
        let settings = Settings::resolve(ServeArgs::default()).unwrap();
        assert_eq!(settings.data_dir, PathBuf::from(DATA_DIR_DEFAULT));
        assert_eq!(settings.sqs_listen.to_string(), SQS_LISTEN_DEFAULT);
        assert_eq!(settings.sqs_account_id, "000000000000");
        assert_eq!(settings.durability, DurabilityMode::Durable);
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
    fn unknown_keys_in_the_config_file_are_rejected() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("veil.toml");
        std::fs::write(&path, "data_dri = \"typo\"\n").unwrap();
        let args = ServeArgs {
            config: Some(path),
            ..ServeArgs::default()
        };
        assert!(matches!(
            Settings::resolve(args),
            Err(ConfigError::Parse { .. })
        ));
    }
}
