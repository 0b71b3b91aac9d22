//! The admin endpoint's settings (README.md "Configuration", docs/security.md "Admin endpoint"): its address,
//! bearer token, allowed host names and what it does beyond loopback without a token, and the check that
//! refuses an endpoint open to the network. `veil serve` merges them from its top-level `admin_*` keys,
//! flags and environment; the rule lives here.

use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};

use serde::Deserialize;

/// Where the admin endpoint listens unless told otherwise.
pub const LISTEN_DEFAULT: SocketAddr = SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::LOCALHOST, 9325));

/// What an admin endpoint listening beyond loopback without a token does (docs/security.md "Admin endpoint").
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, Default)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[serde(rename_all = "kebab-case")]
pub enum Tokenless {
    /// `veil serve` refuses to start: the admin API would be open to the network.
    #[default]
    Refuse,
    /// It starts: /healthz and /readyz answer anyone, the API and /metrics only connections from loopback
    /// (the container image's setting, where orchestrators probe from outside).
    ProbesOnly,
}

/// The admin endpoint's settings in force.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdminSettings {
    pub listen: SocketAddr,
    /// The bearer token; `None` leaves the endpoint open (loopback only, unless `tokenless` says otherwise).
    pub token: Option<String>,
    /// Host names besides loopback's that the endpoint answers without a token.
    pub allowed_hosts: Vec<String>,
    pub tokenless: Tokenless,
}

impl Default for AdminSettings {
    fn default() -> Self {
        Self {
            listen: LISTEN_DEFAULT,
            token: None,
            allowed_hosts: Vec::new(),
            tokenless: Tokenless::default(),
        }
    }
}

/// An admin setting `veil serve` must not start with.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SettingsError {
    #[error(
        "the admin endpoint would listen on {listen}, beyond loopback, without a token: set --admin-token \
         (VEIL_ADMIN_TOKEN, or admin_token in the config file), listen on 127.0.0.1, or serve only the probes \
         beyond loopback with --admin-tokenless probes-only"
    )]
    OpenToTheNetwork { listen: SocketAddr },
}

/// Who the admin endpoint answers: the token's holder, or without a token requests naming these hosts (over
/// loopback connections only, when it listens beyond loopback).
#[derive(Debug, Clone)]
pub struct AdminGuard {
    pub token: Option<String>,
    pub allowed_hosts: Vec<String>,
    pub loopback_peers_only: bool,
}

impl AdminSettings {
    /// An endpoint reachable beyond loopback must require a token, unless the operator chose probes-only.
    pub fn validate(&self) -> Result<(), SettingsError> {
        if self.listen.ip().is_loopback()
            || self.token.is_some()
            || self.tokenless == Tokenless::ProbesOnly
        {
            return Ok(());
        }
        Err(SettingsError::OpenToTheNetwork {
            listen: self.listen,
        })
    }

    pub fn guard(&self) -> AdminGuard {
        AdminGuard {
            token: self.token.clone(),
            allowed_hosts: self.allowed_hosts.clone(),
            loopback_peers_only: self.token.is_none() && !self.listen.ip().is_loopback(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(listen: &str, token: Option<&str>, tokenless: Tokenless) -> AdminSettings {
        AdminSettings {
            listen: listen.parse().unwrap(),
            token: token.map(str::to_string),
            allowed_hosts: Vec::new(),
            tokenless,
        }
    }

    #[test]
    fn an_admin_endpoint_beyond_loopback_needs_a_token() {
        let refuse = Tokenless::Refuse;
        assert!(settings("127.0.0.1:9325", None, refuse).validate().is_ok());
        assert!(settings("0.0.0.0:9325", Some("t"), refuse)
            .validate()
            .is_ok());
        let refused = settings("0.0.0.0:9325", None, refuse)
            .validate()
            .unwrap_err()
            .to_string();
        assert!(refused.contains("--admin-token"), "{refused}");
        assert!(AdminSettings::default().validate().is_ok());
    }

    #[test]
    fn probes_only_lets_a_tokenless_admin_endpoint_listen_beyond_loopback_for_loopback_peers() {
        let probes = Tokenless::ProbesOnly;
        assert!(settings("0.0.0.0:9325", None, probes).validate().is_ok());
        assert!(
            settings("0.0.0.0:9325", None, probes)
                .guard()
                .loopback_peers_only
        );
        assert!(
            !settings("0.0.0.0:9325", Some("t"), probes)
                .guard()
                .loopback_peers_only
        );
        assert!(
            !settings("127.0.0.1:9325", None, probes)
                .guard()
                .loopback_peers_only
        );
    }
}
