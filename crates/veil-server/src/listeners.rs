//! TLS and limits of the four listeners (docs/security.md "TLS", "Limits against abuse"): their flags, their
//! config-file keys, how they resolve (flags > environment > file > defaults; a listener's own certificate
//! over the shared one, a listener's `[limits.<listener>]` over `[limits]`) and the certificates in force,
//! which SIGHUP re-reads.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use clap::Args;
use serde::Deserialize;
use veil_http::limits::MAX_HEADER_BYTES_MIN;
use veil_http::{CertFiles, Limits, Rate, ReloadingCert, TlsError};

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

/// The `[limits]` table of the config file, and each `[limits.<listener>]` within it.
#[derive(Deserialize, Debug, Default, Clone)]
#[serde(deny_unknown_fields)]
pub struct LimitsFile {
    max_connections: Option<usize>,
    max_header_bytes: Option<usize>,
    max_headers: Option<usize>,
    header_read_timeout_ms: Option<u64>,
    body_read_timeout_ms: Option<u64>,
    body_read_total_timeout_ms: Option<u64>,
    tls_handshake_timeout_ms: Option<u64>,
    request_rate: Option<f64>,
    request_burst: Option<u32>,
    max_requests_in_flight: Option<usize>,
    admission_wait_ms: Option<u64>,
    sqs: Option<Box<LimitsFile>>,
    azure: Option<Box<LimitsFile>>,
    kubemq: Option<Box<LimitsFile>>,
    admin: Option<Box<LimitsFile>>,
}

impl LimitsFile {
    /// `self`'s keys over `base`'s.
    fn over(&self, base: &LimitsFile) -> LimitsFile {
        LimitsFile {
            max_connections: self.max_connections.or(base.max_connections),
            max_header_bytes: self.max_header_bytes.or(base.max_header_bytes),
            max_headers: self.max_headers.or(base.max_headers),
            header_read_timeout_ms: self.header_read_timeout_ms.or(base.header_read_timeout_ms),
            body_read_timeout_ms: self.body_read_timeout_ms.or(base.body_read_timeout_ms),
            body_read_total_timeout_ms: self
                .body_read_total_timeout_ms
                .or(base.body_read_total_timeout_ms),
            tls_handshake_timeout_ms: self
                .tls_handshake_timeout_ms
                .or(base.tls_handshake_timeout_ms),
            request_rate: self.request_rate.or(base.request_rate),
            request_burst: self.request_burst.or(base.request_burst),
            max_requests_in_flight: self.max_requests_in_flight.or(base.max_requests_in_flight),
            admission_wait_ms: self.admission_wait_ms.or(base.admission_wait_ms),
            ..LimitsFile::default()
        }
    }

    fn resolve(&self, listener: &str) -> Result<Limits, ConfigError> {
        let defaults = Limits::default();
        let ms = |value: Option<u64>, default: Duration| {
            value.map(Duration::from_millis).unwrap_or(default)
        };
        let rate = self
            .request_rate
            .unwrap_or(veil_http::limits::REQUEST_RATE_PER_S_DEFAULT);
        let burst = self
            .request_burst
            .unwrap_or(veil_http::limits::REQUEST_BURST_DEFAULT);
        if !rate.is_finite() || rate < 0.0 || burst == 0 {
            return Err(ConfigError::Invalid(format!(
                "{listener} request_rate must be 0 (off) or positive and request_burst at least 1"
            )));
        }
        let limits = Limits {
            max_connections: self.max_connections.unwrap_or(defaults.max_connections),
            max_header_bytes: self.max_header_bytes.unwrap_or(defaults.max_header_bytes),
            max_headers: self.max_headers.unwrap_or(defaults.max_headers),
            header_read_timeout: ms(self.header_read_timeout_ms, defaults.header_read_timeout),
            body_read_timeout: ms(self.body_read_timeout_ms, defaults.body_read_timeout),
            body_read_total_timeout: ms(
                self.body_read_total_timeout_ms,
                defaults.body_read_total_timeout,
            ),
            tls_handshake_timeout: ms(
                self.tls_handshake_timeout_ms,
                defaults.tls_handshake_timeout,
            ),
            rate: (rate > 0.0).then_some(Rate {
                per_second: rate,
                burst,
            }),
            max_requests_in_flight: self
                .max_requests_in_flight
                .unwrap_or(defaults.max_requests_in_flight),
            admission_wait: ms(self.admission_wait_ms, defaults.admission_wait),
        };
        if limits.max_connections == 0
            || limits.max_headers == 0
            || limits.max_header_bytes < MAX_HEADER_BYTES_MIN
            || limits.header_read_timeout.is_zero()
            || limits.body_read_timeout.is_zero()
            || limits.body_read_total_timeout.is_zero()
            || limits.tls_handshake_timeout.is_zero()
        {
            return Err(ConfigError::Invalid(format!(
                "{listener} limits: max_connections, max_headers and the timeouts must be positive, \
                 max_header_bytes at least {MAX_HEADER_BYTES_MIN}"
            )));
        }
        Ok(limits)
    }
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
    pub limits: LimitsFile,
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
        let flags = LimitsFile {
            max_connections: args.max_connections,
            request_rate: args.request_rate,
            request_burst: args.request_burst,
            max_requests_in_flight: args.max_requests_in_flight,
            ..LimitsFile::default()
        };
        // Flags apply to every listener, over the file's per-listener tables.
        let limits = |name: &str, table: &Option<Box<LimitsFile>>| {
            let listener = match table {
                Some(table) => table.over(&file.limits),
                None => file.limits.over(&LimitsFile::default()),
            };
            flags.over(&listener).resolve(name)
        };
        Ok(Self {
            sqs: Listener {
                tls: own("sqs", args.sqs_tls_cert, args.sqs_tls_key, file.sqs)?,
                limits: limits("sqs", &file.limits.sqs)?,
            },
            azure: Listener {
                tls: own("azure", args.azure_tls_cert, args.azure_tls_key, file.azure)?,
                limits: limits("azure", &file.limits.azure)?,
            },
            kubemq: Listener {
                tls: own(
                    "kubemq",
                    args.kubemq_tls_cert,
                    args.kubemq_tls_key,
                    file.kubemq,
                )?,
                limits: limits("kubemq", &file.limits.kubemq)?,
            },
            admin: Listener {
                tls: own("admin", args.admin_tls_cert, args.admin_tls_key, file.admin)?,
                limits: limits("admin", &file.limits.admin)?,
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
        #[cfg(unix)]
        tokio::spawn(async move {
            let mut hangups = match tokio::signal::unix::signal(
                tokio::signal::unix::SignalKind::hangup(),
            ) {
                Ok(hangups) => hangups,
                Err(error) => {
                    tracing::error!(%error, "cannot listen for SIGHUP; certificates will not reload");
                    return;
                }
            };
            while hangups.recv().await.is_some() {
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
            }
        });
    }
}

#[cfg(test)]
mod tests {
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
