//! Lays the flags of `veil serve` (clap has already put each flag's environment variable under it) over the
//! settings read from the config file, and hands each section the top-level keys that belong to it. Nothing
//! here knows a default or a rule: those live with each section's type.

use std::path::PathBuf;

use veil_admin::settings::AdminSettings;

use super::{ConfigError, ServeArgs, Settings};
use crate::cluster::settings::StoreSetting;
use crate::listeners::{ListenerFile, ListenerSettings, TlsFile};

/// A flag given wins over the file's value (or the default the file left in place).
fn set<T>(slot: &mut T, flag: Option<T>) {
    if let Some(value) = flag {
        *slot = value;
    }
}

impl Settings {
    /// `args` over `self` (the file's settings): flags > environment > file > defaults.
    pub(super) fn merge(mut self, args: ServeArgs) -> Result<Self, ConfigError> {
        self.listeners = ListenerSettings::resolve(args.listeners, self.listener_file())?;
        self.store = StoreSetting::resolve(
            args.cluster,
            self.store_url.take(),
            std::mem::take(&mut self.postgres),
            std::mem::take(&mut self.cluster),
        )?;
        set(&mut self.data_dir, args.data_dir);
        set(&mut self.sqs_listen, args.sqs_listen);
        set(&mut self.inflight_max, args.inflight_max);
        set(&mut self.durability, args.durability);
        set(&mut self.log_level, args.log_level);
        set(&mut self.log_format, args.log_format);
        set(&mut self.store_cache_mib, args.store_cache_mib);
        set(&mut self.wal_segment_mib, args.wal_segment_mib);
        set(&mut self.sqs.auth, args.sqs_auth);
        set(
            &mut self.sqs.account_id,
            args.sqs_account_id.or(self.sqs_account_id.take()),
        );
        self.sqs.advertised_url = args.sqs_advertised_url.or(self.sqs_advertised_url.take());
        self.unsafe_test_clock = args.unsafe_test_clock;
        set(&mut self.azure.listen, args.azure_listen);
        set(&mut self.azure.auth, args.azure_auth);
        set(
            &mut self.azure.max_dequeue_count,
            args.azure_max_dequeue_count,
        );
        self.azure.entra.mode = args.azure_entra.or(self.azure.entra.mode);
        set(&mut self.kubemq.listen, args.kubemq_listen);
        let defaults = AdminSettings::default();
        self.admin = AdminSettings {
            listen: args
                .admin_listen
                .or(self.admin_listen)
                .unwrap_or(defaults.listen),
            token: args
                .admin_token
                .or(self.admin_token.take())
                .filter(|token| !token.is_empty()),
            allowed_hosts: if args.admin_allowed_hosts.is_empty() {
                std::mem::take(&mut self.admin_allowed_hosts)
            } else {
                args.admin_allowed_hosts
            },
            tokenless: args
                .admin_tokenless
                .or(self.admin_tokenless)
                .unwrap_or(defaults.tokenless),
        };
        Ok(self)
    }

    /// The TLS and limits keys of the file's tables, gathered for `listeners`.
    fn listener_file(&self) -> ListenerFile {
        let tls = |cert: &Option<PathBuf>, key: &Option<PathBuf>| TlsFile {
            tls_cert: cert.clone(),
            tls_key: key.clone(),
        };
        ListenerFile {
            shared: tls(&self.tls_cert, &self.tls_key),
            sqs: tls(&self.sqs_tls_cert, &self.sqs_tls_key),
            azure: tls(&self.azure.tls_cert, &self.azure.tls_key),
            kubemq: tls(&self.kubemq.tls_cert, &self.kubemq.tls_key),
            admin: tls(&self.admin_tls_cert, &self.admin_tls_key),
            limits: self.limits.clone(),
        }
    }
}
