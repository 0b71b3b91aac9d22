//! The PostgreSQL connection settings as the configuration writes them (docs/cluster.md): the `[postgres]`
//! table of `veil serve`'s config file with its defaults, the connection string `veil serve` hands over from
//! its `store` key, and the checks that refuse what the store could not run with. `veil serve` only merges
//! the sources (flags > environment > file) into this type; the rules live here.

use std::time::Duration;

use serde::Deserialize;

use crate::connect::{
    CONNECT_TIMEOUT_MS_DEFAULT, POOL_SIZE_DEFAULT, SCHEMA_DEFAULT, STATEMENT_TIMEOUT_MS_DEFAULT,
    WRITERS_DEFAULT,
};
use crate::limits::{POOL_SIZE_MAX, SHARDS_MAX, WRITERS_MAX};
use crate::PgOptions;

/// How often a node retries the database after a failure, and polls the lease as a follower.
pub const RETRY_INTERVAL_MS_DEFAULT: u64 = 500;

/// The `[postgres]` table.
#[derive(Deserialize, Debug, Clone, PartialEq, Eq)]
#[serde(default, deny_unknown_fields)]
pub struct PostgresSettings {
    /// libpq connection string or URL (the top-level key `store`).
    #[serde(skip)]
    pub url: String,
    pub pool_size: usize,
    pub writers: usize,
    pub connect_timeout_ms: u64,
    pub statement_timeout_ms: u64,
    pub schema: String,
    pub retry_interval_ms: u64,
    /// More databases the partitions are spread over (`[[postgres.shards]]`), after the one `store` names:
    /// partition p lives on shard p mod (1 + shards.len()), shard 0 being `store` (docs/cluster.md "Shards").
    pub shards: Vec<ShardSettings>,
}

/// One `[[postgres.shards]]` entry.
#[derive(Deserialize, Debug, Clone, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct ShardSettings {
    /// libpq connection string or URL of the shard's database; every other setting is `[postgres]`'s.
    pub store: String,
}

impl Default for PostgresSettings {
    fn default() -> Self {
        Self {
            url: String::new(),
            pool_size: POOL_SIZE_DEFAULT,
            writers: WRITERS_DEFAULT,
            connect_timeout_ms: CONNECT_TIMEOUT_MS_DEFAULT,
            statement_timeout_ms: STATEMENT_TIMEOUT_MS_DEFAULT,
            schema: SCHEMA_DEFAULT.to_owned(),
            retry_interval_ms: RETRY_INTERVAL_MS_DEFAULT,
            shards: Vec::new(),
        }
    }
}

/// A connection setting the store cannot run with.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SettingsError {
    #[error("pg pool size must be 1 to {POOL_SIZE_MAX}")]
    PoolSize,
    #[error("pg writers must be 1 to {WRITERS_MAX}")]
    Writers,
    #[error("pg timeouts and the retry interval must be positive")]
    ZeroTimeout,
    #[error("a cluster has 1 to {SHARDS_MAX} shards (`store` and its [[postgres.shards]])")]
    Shards,
}

impl PostgresSettings {
    /// Refuses a pool outside 1 ..= [`POOL_SIZE_MAX`], writers outside 1 ..= [`WRITERS_MAX`] and a zero timeout or retry interval. (An empty schema is
    /// refused by `veil serve` together with the cluster's empty names, in one message.)
    pub fn validate(&self) -> Result<(), SettingsError> {
        if self.pool_size == 0 || self.pool_size > POOL_SIZE_MAX {
            return Err(SettingsError::PoolSize);
        }
        if self.writers == 0 || self.writers > WRITERS_MAX {
            return Err(SettingsError::Writers);
        }
        if self.connect_timeout_ms == 0
            || self.statement_timeout_ms == 0
            || self.retry_interval_ms == 0
        {
            return Err(SettingsError::ZeroTimeout);
        }
        if 1 + self.shards.len() > SHARDS_MAX as usize {
            return Err(SettingsError::Shards);
        }
        Ok(())
    }

    /// The options of every shard's database, shard 0 (`store`) first: the same settings, each its own URL.
    pub fn shard_options(&self) -> Vec<PgOptions> {
        let home = self.options();
        std::iter::once(home.clone())
            .chain(self.shards.iter().map(|shard| PgOptions {
                url: shard.store.clone(),
                ..home.clone()
            }))
            .collect()
    }

    pub fn options(&self) -> PgOptions {
        PgOptions {
            url: self.url.clone(),
            pool_size: self.pool_size,
            writers: self.writers,
            connect_timeout: Duration::from_millis(self.connect_timeout_ms),
            statement_timeout: Duration::from_millis(self.statement_timeout_ms),
            schema: self.schema.clone(),
            session_guard: Duration::from_millis(crate::connect::SESSION_GUARD_MS_DEFAULT),
        }
    }

    pub fn retry_interval(&self) -> Duration {
        Duration::from_millis(self.retry_interval_ms)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_defaults_are_valid_and_match_pg_options() {
        let settings = PostgresSettings {
            url: "postgres://veil@db/veil".into(),
            ..PostgresSettings::default()
        };
        settings.validate().unwrap();
        let options = settings.options();
        let defaults = PgOptions::new("postgres://veil@db/veil");
        assert_eq!(options.pool_size, defaults.pool_size);
        assert_eq!(options.writers, defaults.writers);
        assert_eq!(options.connect_timeout, defaults.connect_timeout);
        assert_eq!(options.statement_timeout, defaults.statement_timeout);
        assert_eq!(options.schema, defaults.schema);
    }

    /// `validate` of the defaults with one setting changed by `change`.
    fn validated_with(
        value: usize,
        change: fn(&mut PostgresSettings, usize),
    ) -> Result<(), SettingsError> {
        let mut settings = PostgresSettings::default();
        change(&mut settings, value);
        settings.validate()
    }

    #[test]
    fn a_pool_outside_its_range_is_refused() {
        let pool = |s: &mut PostgresSettings, v| s.pool_size = v;
        for refused in [0, POOL_SIZE_MAX + 1] {
            assert_eq!(validated_with(refused, pool), Err(SettingsError::PoolSize));
        }
        assert_eq!(validated_with(POOL_SIZE_MAX, pool), Ok(()));
    }

    #[test]
    fn writers_outside_their_range_are_refused() {
        let writers = |s: &mut PostgresSettings, v| s.writers = v;
        for refused in [0, WRITERS_MAX + 1] {
            assert_eq!(
                validated_with(refused, writers),
                Err(SettingsError::Writers)
            );
        }
        assert_eq!(validated_with(WRITERS_MAX, writers), Ok(()));
    }

    #[test]
    fn a_zero_timeout_or_retry_interval_is_refused() {
        let zero = |change: fn(&mut PostgresSettings)| {
            let mut settings = PostgresSettings::default();
            change(&mut settings);
            settings.validate()
        };
        assert_eq!(
            zero(|s| s.connect_timeout_ms = 0),
            Err(SettingsError::ZeroTimeout)
        );
        assert_eq!(
            zero(|s| s.statement_timeout_ms = 0),
            Err(SettingsError::ZeroTimeout)
        );
        assert_eq!(
            zero(|s| s.retry_interval_ms = 0),
            Err(SettingsError::ZeroTimeout)
        );
    }
}
