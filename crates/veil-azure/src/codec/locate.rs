//! Where a request points: the storage account (the first path segment in path style, or the first label of
//! a dotted host name) and the path segments below it. Nothing here reads the query.

use std::net::IpAddr;

use super::query;
use crate::error::{AzureError, AzureResult, ErrorCode};
use crate::limits;

/// The account a request names and the path segments below it (percent-decoded).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Location {
    /// The account as the request names it, `-secondary` included.
    pub account: String,
    pub segments: Vec<String>,
}

impl Location {
    /// The account without the `-secondary` suffix of the read-only endpoint.
    pub fn primary_account(&self) -> &str {
        self.account
            .strip_suffix(limits::SECONDARY_SUFFIX)
            .unwrap_or(&self.account)
    }

    /// The queue segment, if the path names one (not yet checked against Azure's naming rules).
    pub fn queue(&self) -> Option<&str> {
        self.segments.first().map(String::as_str)
    }
}

/// Path style (`/<account>/<queue>…`) when the host is an IP address or `localhost` (or absent); otherwise
/// the account is the first label of a dotted host name (`acct.queue.example`).
pub fn locate(host: Option<&str>, path: &str) -> AzureResult<Location> {
    let mut segments: Vec<String> = path
        .split('/')
        .filter(|s| !s.is_empty())
        .map(query::decode_component)
        .collect();
    let host_name = host.map(host_without_port).unwrap_or("");
    let path_style = host_name.is_empty()
        || host_name.eq_ignore_ascii_case("localhost")
        || host_name.parse::<IpAddr>().is_ok()
        || !host_name.contains('.');
    let account = if path_style {
        if segments.is_empty() {
            return Err(AzureError::new(ErrorCode::InvalidUri));
        }
        segments.remove(0)
    } else {
        host_name.split('.').next().unwrap_or_default().to_string()
    };
    Ok(Location { account, segments })
}

fn host_without_port(host: &str) -> &str {
    if let Some(rest) = host.strip_prefix('[') {
        // [::1]:10001
        return rest.split(']').next().unwrap_or(rest);
    }
    match host.rsplit_once(':') {
        Some((name, port)) if port.bytes().all(|b| b.is_ascii_digit()) => name,
        _ => host,
    }
}
