//! TLS and limits of the four listeners (docs/security.md "TLS", "Limits against abuse"): their flags, their
//! config-file keys, how they resolve (flags > environment > file > defaults; a listener's own certificate
//! over the shared one, a listener's `[limits.<listener>]` over `[limits]`, whose keys and checks
//! veil_http::settings owns) and the certificates in force, which SIGHUP re-reads.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use clap::Args;
use serde::Deserialize;
use veil_http::settings::LimitsSection;
use veil_http::{CertFiles, Limits, ReloadingCert, TlsError};

use crate::config::ConfigError;

/// Flags of `veil serve` for TLS and the limits. The timeouts and sizes are config-file keys only.
#[derive(Args, Debug, Default)]
pub struct ListenerArgs {
    /// Certificate chain (PEM, leaf first) of every listener without its own; with it they serve TLS only
    /// (`veil cert dev` writes a development one)
    #[arg(long, env = "VEIL_TLS_CERT", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// Private key (PEM) of --tls-cert
    #[arg(long, env = "VEIL_TLS_KEY", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// Certificate chain of the SQS listener (over --tls-cert)
    #[arg(long, env = "VEIL_SQS_TLS_CERT", requires = "sqs_tls_key")]
    pub sqs_tls_cert: Option<PathBuf>,
    /// Private key of --sqs-tls-cert
    #[arg(long, env = "VEIL_SQS_TLS_KEY", requires = "sqs_tls_cert")]
    pub sqs_tls_key: Option<PathBuf>,
    /// Certificate chain of the Azure listener (over --tls-cert)
    #[arg(long, env = "VEIL_AZURE_TLS_CERT", requires = "azure_tls_key")]
    pub azure_tls_cert: Option<PathBuf>,
    /// Private key of --azure-tls-cert
    #[arg(long, env = "VEIL_AZURE_TLS_KEY", requires = "azure_tls_cert")]
    pub azure_tls_key: Option<PathBuf>,
    /// Certificate chain of the KubeMQ listener (over --tls-cert)
    #[arg(long, env = "VEIL_KUBEMQ_TLS_CERT", requires = "kubemq_tls_key")]
    pub kubemq_tls_cert: Option<PathBuf>,
    /// Private key of --kubemq-tls-cert
    #[arg(long, env = "VEIL_KUBEMQ_TLS_KEY", requires = "kubemq_tls_cert")]
    pub kubemq_tls_key: Option<PathBuf>,
    /// Certificate chain of the admin listener (over --tls-cert)
    #[arg(long, env = "VEIL_ADMIN_TLS_CERT", requires = "admin_tls_key")]
    pub admin_tls_cert: Option<PathBuf>,
    /// Private key of --admin-tls-cert
    #[arg(long, env = "VEIL_ADMIN_TLS_KEY", requires = "admin_tls_cert")]
    pub admin_tls_key: Option<PathBuf>,
    /// Connections each listener holds open at once; more are closed on accept [default: 10000]
    #[arg(long, env = "VEIL_MAX_CONNECTIONS")]
    pub max_connections: Option<usize>,
    /// Requests per second per connection; over it SQS answers RequestThrottled, Azure ServerBusy, KubeMQ
    /// RESOURCE_EXHAUSTED; 0 = no limit [default: 0]
    #[arg(long, env = "VEIL_REQUEST_RATE")]
    pub request_rate: Option<f64>,
    /// Requests a connection may send at once above --request-rate [default: 100]
    #[arg(long, env = "VEIL_REQUEST_BURST")]
    pub request_burst: Option<u32>,
    /// Requests each listener works on at once; one more waits up to admission_wait_ms for a slot, then gets
    /// the throttling error (SQS RequestThrottled, Azure ServerBusy, KubeMQ RESOURCE_EXHAUSTED on unary
    /// RPCs). A parked long poll does not count;
    /// 0 = no limit [default: 512]
    #[arg(long, env = "VEIL_MAX_REQUESTS_IN_FLIGHT")]
    pub max_requests_in_flight: Option<usize>,
}

/// TLS keys of the config file, top level or in a listener's table.
#[derive(Deserialize, Debug, Default, Clone)]
pub struct TlsFile {
    pub tls_cert: Option<PathBuf>,
    pub tls_key: Option<PathBuf>,
}

/// Each listener's TLS files and limits in force.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ListenerSettings {
    pub sqs: Listener,
    pub azure: Listener,
    pub kubemq: Listener,
    pub admin: Listener,
}

#[derive(Debug, Clone, PartialEq, Default)]
pub struct Listener {
    /// `None`: plain TCP.
    pub tls: Option<CertFiles>,
    pub limits: Limits,
}

/// What the config file says about the listeners, gathered from its tables.
#[derive(Debug, Default)]
pub struct ListenerFile {
    pub shared: TlsFile,
    pub sqs: TlsFile,
    pub azure: TlsFile,
    pub kubemq: TlsFile,
    pub admin: TlsFile,
    pub limits: LimitsSection,
}

impl ListenerSettings {
    pub fn resolve(args: ListenerArgs, file: ListenerFile) -> Result<Self, ConfigError> {
        let shared = pair(
            "tls",
            args.tls_cert.or(file.shared.tls_cert),
            args.tls_key.or(file.shared.tls_key),
        )?;
        let own = |name: &str, cert: Option<PathBuf>, key: Option<PathBuf>, file: TlsFile| {
            pair(name, cert.or(file.tls_cert), key.or(file.tls_key))
                .map(|files| files.or_else(|| shared.clone()))
        };
        let flags = LimitsSection {
            max_connections: args.max_connections,
            request_rate: args.request_rate,
            request_burst: args.request_burst,
            max_requests_in_flight: args.max_requests_in_flight,
            ..LimitsSection::default()
        };
        // Flags apply to every listener, over the file's per-listener tables.
        let limits = |name: &str| flags.over(&file.limits.for_listener(name)).resolve(name);
        Ok(Self {
            sqs: Listener {
                tls: own("sqs", args.sqs_tls_cert, args.sqs_tls_key, file.sqs)?,
                limits: limits("sqs")?,
            },
            azure: Listener {
                tls: own("azure", args.azure_tls_cert, args.azure_tls_key, file.azure)?,
                limits: limits("azure")?,
            },
            kubemq: Listener {
                tls: own(
                    "kubemq",
                    args.kubemq_tls_cert,
                    args.kubemq_tls_key,
                    file.kubemq,
                )?,
                limits: limits("kubemq")?,
            },
            admin: Listener {
                tls: own("admin", args.admin_tls_cert, args.admin_tls_key, file.admin)?,
                limits: limits("admin")?,
            },
        })
    }
}

/// A certificate and its key, both or neither.
fn pair(
    name: &str,
    cert: Option<PathBuf>,
    key: Option<PathBuf>,
) -> Result<Option<CertFiles>, ConfigError> {
    match (cert, key) {
        (Some(cert), Some(key)) => Ok(Some(CertFiles { cert, key })),
        (None, None) => Ok(None),
        _ => Err(ConfigError::Invalid(format!(
            "{name}: a TLS certificate needs its key and a key its certificate"
        ))),
    }
}

/// The certificates in force, one per distinct pair of files (listeners sharing files share it).
#[derive(Default)]
pub struct Certificates {
    loaded: HashMap<CertFiles, Arc<ReloadingCert>>,
}

impl Certificates {
    /// The rustls configuration of a listener with `files`, loading them on first use.
    pub fn server_config(
        &mut self,
        files: &Option<CertFiles>,
        alpn: &[&[u8]],
    ) -> Result<Option<Arc<rustls::ServerConfig>>, TlsError> {
        let Some(files) = files else {
            return Ok(None);
        };
        let cert = match self.loaded.get(files) {
            Some(cert) => cert.clone(),
            None => {
                let cert = Arc::new(ReloadingCert::load(files.clone())?);
                self.loaded.insert(files.clone(), cert.clone());
                cert
            }
        };
        cert.server_config(alpn).map(Some)
    }

    /// Re-reads every certificate on each SIGHUP; a file that fails keeps its old certificate in force.
    pub fn reload_on_sighup(self) {
        on_each_sighup("certificates", move || {
            if self.loaded.is_empty() {
                tracing::info!("SIGHUP received; no TLS certificate to reload");
            }
            for cert in self.loaded.values() {
                let files = cert.files();
                match cert.reload() {
                    Ok(()) => tracing::info!(
                        cert = %files.cert.display(),
                        "SIGHUP: TLS certificate reloaded"
                    ),
                    Err(error) => tracing::error!(
                        %error,
                        "SIGHUP: TLS certificate NOT reloaded; the previous one stays in force"
                    ),
                }
            }
        });
    }
}

/// Runs `reload` on each SIGHUP, in a task of its own, for as long as the process runs: the one way every
/// certificate of the process (the listeners', the cluster's) is reloaded. `what` names them in the log line
/// that says they will not reload when the signal cannot be listened for.
pub(crate) fn on_each_sighup(what: &'static str, mut reload: impl FnMut() + Send + 'static) {
    #[cfg(unix)]
    tokio::spawn(async move {
        let mut hangups = match tokio::signal::unix::signal(
            tokio::signal::unix::SignalKind::hangup(),
        ) {
            Ok(hangups) => hangups,
            Err(error) => {
                tracing::error!(%error, what, "cannot listen for SIGHUP; these will not reload");
                return;
            }
        };
        while hangups.recv().await.is_some() {
            reload();
        }
    });
    #[cfg(not(unix))]
    let _ = (what, reload);
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use veil_http::Rate;

    use super::*;

    #[test]
    fn a_listener_certificate_wins_over_the_shared_one_and_listener_limits_over_the_table() {
        let file = ListenerFile {
            shared: TlsFile {
                tls_cert: Some("all.pem".into()),
                tls_key: Some("all-key.pem".into()),
            },
            kubemq: TlsFile {
                tls_cert: Some("grpc.pem".into()),
                tls_key: Some("grpc-key.pem".into()),
            },
            limits: toml::from_str(
                "header_read_timeout_ms = 500\nrequest_rate = 5.0\n[sqs]\nrequest_burst = 2\n",
            )
            .expect("toml"),
            ..ListenerFile::default()
        };
        let args = ListenerArgs {
            max_connections: Some(7),
            ..ListenerArgs::default()
        };
        let settings = ListenerSettings::resolve(args, file).expect("resolve");
        assert_eq!(
            settings.kubemq.tls.as_ref().map(|f| f.cert.clone()),
            Some("grpc.pem".into())
        );
        assert_eq!(
            settings.sqs.tls.as_ref().map(|f| f.cert.clone()),
            Some("all.pem".into())
        );
        assert_eq!(settings.admin.limits.max_connections, 7);
        assert_eq!(
            settings.sqs.limits.rate,
            Some(Rate {
                per_second: 5.0,
                burst: 2
            })
        );
        assert_eq!(
            settings.azure.limits.header_read_timeout,
            Duration::from_millis(500)
        );
        assert_eq!(
            settings.azure.limits.rate.map(|r| r.burst),
            Some(veil_http::limits::REQUEST_BURST_DEFAULT)
        );
    }

    #[test]
    fn a_certificate_without_its_key_is_refused() {
        let file = ListenerFile {
            azure: TlsFile {
                tls_cert: Some("a.pem".into()),
                tls_key: None,
            },
            ..ListenerFile::default()
        };
        assert!(ListenerSettings::resolve(ListenerArgs::default(), file).is_err());
    }

    #[test]
    fn without_anything_every_listener_is_plain_with_the_default_limits() {
        let settings = ListenerSettings::resolve(ListenerArgs::default(), ListenerFile::default())
            .expect("resolve");
        assert_eq!(settings, ListenerSettings::default());
    }
}
