//! The listener limits as the configuration writes them (docs/security.md "Limits against abuse"): the
//! `[limits]` table of `veil serve`'s config file and each `[limits.<listener>]` within it, how a listener's
//! table overrides the shared one, and the checks that turn them into the [`Limits`] a listener runs with.
//! `veil serve` lays its flags over the tables; the rules live here.

use std::time::Duration;

use serde::Deserialize;

use crate::limits::{MAX_HEADER_BYTES_MIN, REQUEST_BURST_DEFAULT, REQUEST_RATE_PER_S_DEFAULT};
use crate::{Limits, Rate};

/// The `[limits]` table, and each `[limits.<listener>]` within it. Every key is optional: a missing one falls
/// back to the shared table, then to [`Limits::default`].
#[derive(Deserialize, Debug, Default, Clone, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct LimitsSection {
    pub max_connections: Option<usize>,
    pub max_header_bytes: Option<usize>,
    pub max_headers: Option<usize>,
    pub header_read_timeout_ms: Option<u64>,
    pub body_read_timeout_ms: Option<u64>,
    pub body_read_total_timeout_ms: Option<u64>,
    pub tls_handshake_timeout_ms: Option<u64>,
    pub request_rate: Option<f64>,
    pub request_burst: Option<u32>,
    pub max_requests_in_flight: Option<usize>,
    pub admission_wait_ms: Option<u64>,
    pub sqs: Option<Box<LimitsSection>>,
    pub azure: Option<Box<LimitsSection>>,
    pub kubemq: Option<Box<LimitsSection>>,
    pub admin: Option<Box<LimitsSection>>,
}

/// Limits a listener could not run with.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SettingsError {
    #[error("{listener} request_rate must be 0 (off) or positive and request_burst at least 1")]
    Rate { listener: String },
    #[error(
        "{listener} limits: max_connections, max_headers and the timeouts must be positive, \
         max_header_bytes at least {MAX_HEADER_BYTES_MIN}"
    )]
    NotPositive { listener: String },
}

impl LimitsSection {
    /// `self`'s keys over `base`'s (the listener tables are not carried over).
    pub fn over(&self, base: &LimitsSection) -> LimitsSection {
        LimitsSection {
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
            ..LimitsSection::default()
        }
    }

    /// The table of the listener named `listener` (`sqs`, `azure`, `kubemq` or `admin`) over the shared keys.
    pub fn for_listener(&self, listener: &str) -> LimitsSection {
        let own = match listener {
            "sqs" => &self.sqs,
            "azure" => &self.azure,
            "kubemq" => &self.kubemq,
            "admin" => &self.admin,
            _ => &None,
        };
        match own {
            Some(own) => own.over(self),
            None => self.over(&LimitsSection::default()),
        }
    }

    /// The limits in force, each key over its default; `listener` names them in errors.
    pub fn resolve(&self, listener: &str) -> Result<Limits, SettingsError> {
        let rate = self.request_rate.unwrap_or(REQUEST_RATE_PER_S_DEFAULT);
        let burst = self.request_burst.unwrap_or(REQUEST_BURST_DEFAULT);
        if !rate.is_finite() || rate < 0.0 || burst == 0 {
            return Err(SettingsError::Rate {
                listener: listener.into(),
            });
        }
        let limits = self.over_defaults((rate > 0.0).then_some(Rate {
            per_second: rate,
            burst,
        }));
        if limits.max_connections == 0
            || limits.max_headers == 0
            || limits.max_header_bytes < MAX_HEADER_BYTES_MIN
            || limits.header_read_timeout.is_zero()
            || limits.body_read_timeout.is_zero()
            || limits.body_read_total_timeout.is_zero()
            || limits.tls_handshake_timeout.is_zero()
        {
            return Err(SettingsError::NotPositive {
                listener: listener.into(),
            });
        }
        Ok(limits)
    }

    fn over_defaults(&self, rate: Option<Rate>) -> Limits {
        let defaults = Limits::default();
        let ms = |value: Option<u64>, default: Duration| {
            value.map(Duration::from_millis).unwrap_or(default)
        };
        Limits {
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
            rate,
            max_requests_in_flight: self
                .max_requests_in_flight
                .unwrap_or(defaults.max_requests_in_flight),
            admission_wait: ms(self.admission_wait_ms, defaults.admission_wait),
            idle_timeout: defaults.idle_timeout,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_empty_table_gives_the_default_limits() {
        let limits = LimitsSection::default().resolve("sqs").unwrap();
        assert_eq!(limits, Limits::default());
    }

    #[test]
    fn a_listener_table_wins_over_the_shared_keys() {
        let shared = LimitsSection {
            max_connections: Some(7),
            request_rate: Some(5.0),
            sqs: Some(Box::new(LimitsSection {
                max_connections: Some(3),
                ..LimitsSection::default()
            })),
            ..LimitsSection::default()
        };
        let sqs = shared.for_listener("sqs").resolve("sqs").unwrap();
        assert_eq!(sqs.max_connections, 3);
        assert_eq!(sqs.rate.map(|rate| rate.per_second), Some(5.0));
        let azure = shared.for_listener("azure").resolve("azure").unwrap();
        assert_eq!(azure.max_connections, 7);
    }

    #[test]
    fn a_negative_rate_or_a_zero_burst_is_refused_naming_the_listener() {
        for section in [
            LimitsSection {
                request_rate: Some(-1.0),
                ..LimitsSection::default()
            },
            LimitsSection {
                request_rate: Some(f64::NAN),
                ..LimitsSection::default()
            },
            LimitsSection {
                request_burst: Some(0),
                ..LimitsSection::default()
            },
        ] {
            let error = section.resolve("azure").unwrap_err();
            assert_eq!(
                error,
                SettingsError::Rate {
                    listener: "azure".into()
                }
            );
            assert!(
                error.to_string().starts_with("azure request_rate"),
                "{error}"
            );
        }
    }

    #[test]
    fn zero_limits_and_tiny_header_budgets_are_refused() {
        for section in [
            LimitsSection {
                max_connections: Some(0),
                ..LimitsSection::default()
            },
            LimitsSection {
                max_header_bytes: Some(MAX_HEADER_BYTES_MIN - 1),
                ..LimitsSection::default()
            },
            LimitsSection {
                header_read_timeout_ms: Some(0),
                ..LimitsSection::default()
            },
        ] {
            assert!(matches!(
                section.resolve("kubemq"),
                Err(SettingsError::NotPositive { .. })
            ));
        }
    }
}
