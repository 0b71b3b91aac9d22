//! Configuration of `veil serve`: command-line flags, `VEIL_*` environment variables and an optional TOML file,
//! in that order of precedence, over built-in defaults that need no setup (README.md "Configuration").
//!
//! This module only gathers the sources: flags.rs declares the flags, file.rs the file's shape (each front-end's
//! table typed by the front-end), merge.rs lays the flags over the file. What a setting may be is decided by
//! the section that owns it: `veil_sqs::settings`, `veil_azure::settings`, `veil_kubemq::settings`,
//! `veil_admin::settings`, `veil_http::settings` (listener limits) and crate::cluster::settings (the store).

mod file;
mod flags;
mod merge;

use std::path::PathBuf;

pub use file::{Settings, LOG_LEVEL_DEFAULT};
pub use flags::{DurabilityMode, LogFormat, ServeArgs};

/// The largest log segment `wal_segment_mib` may ask for: a segment is held in memory until its checkpoint
/// (two at a time), so a larger one costs memory and start-up time for no measured gain
/// (docs/decisions/0004-write-ahead-log.md).
pub const WAL_SEGMENT_MIB_MAX: u64 = 1024;

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
    #[error("invalid setting: {0}")]
    Sqs(#[from] veil_sqs::settings::SettingsError),
    #[error("invalid setting: {0}")]
    Azure(veil_azure::settings::SettingsError),
    #[error("invalid setting: {0}")]
    Kubemq(veil_kubemq::settings::SettingsError),
    #[error("invalid setting: {0}")]
    Admin(#[from] veil_admin::settings::SettingsError),
    #[error("invalid setting: {0}")]
    Limits(#[from] veil_http::settings::SettingsError),
    #[error("invalid setting: {0}")]
    Postgres(#[from] veil_postgres::settings::SettingsError),
    #[error("invalid [[queues]] entry: {0}")]
    Queues(#[from] veil_admin::declare::DeclareError),
}

/// A key or JWKS file a front-end could not read is reported as the config file's own read error.
impl From<veil_azure::settings::SettingsError> for ConfigError {
    fn from(error: veil_azure::settings::SettingsError) -> Self {
        match error {
            veil_azure::settings::SettingsError::Read { path, source } => {
                ConfigError::Read { path, source }
            }
            other => ConfigError::Azure(other),
        }
    }
}

impl From<veil_kubemq::settings::SettingsError> for ConfigError {
    fn from(error: veil_kubemq::settings::SettingsError) -> Self {
        match error {
            veil_kubemq::settings::SettingsError::Read { path, source } => {
                ConfigError::Read { path, source }
            }
            other => ConfigError::Kubemq(other),
        }
    }
}

impl Settings {
    /// The settings in force: the config file (if any), the flags and environment over it, each section
    /// checked by its owner.
    pub fn resolve(args: ServeArgs) -> Result<Self, ConfigError> {
        let file = match &args.config {
            Some(path) => file::read(path)?,
            None => Settings::default(),
        };
        let settings = file.merge(args)?;
        settings.validate()?;
        Ok(settings)
    }

    /// Rejects settings the front-ends, the store or the admin endpoint could not honour. Each section's
    /// `validate()` decides; the calls before them only fix the order, so that a config with several faults
    /// is refused for the same one first as it always was (what a section builds from files and lists, then
    /// the bounds).
    fn validate(&self) -> Result<(), ConfigError> {
        self.azure.entra()?;
        self.azure.accounts()?;
        self.kubemq.queue_settings()?;
        self.sqs.credentials()?;
        self.sqs.advertised_origin()?;
        self.azure.validate()?;
        self.sqs.validate()?;
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
        self.kubemq.validate()?;
        self.admin.validate()?;
        veil_admin::declare::validate(&self.queues)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests;
