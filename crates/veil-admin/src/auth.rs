//! The admin endpoint's bearer token (docs/security.md "Admin endpoint"). When the server has one, every
//! route but the probes (`/healthz`, `/readyz`) and the console's static files (code, no data: the page asks
//! for the token when the API refuses it) needs `Authorization: Bearer <token>`, compared in constant time;
//! anything else is 401 with `WWW-Authenticate: Bearer` and the API's JSON error. The token's holder is
//! `admin` in the audit log.
//!
//! Without a token the endpoint listens on loopback only (`veil serve` refuses otherwise), but a web page
//! the operator opens can still reach it by DNS rebinding: a name the attacker controls first resolves to
//! the attacker's server, then to 127.0.0.1, and the browser sends the page's requests to Veil with the
//! attacker's name in `Host`. So without a token the API and `/metrics` answer only requests whose `Host`
//! is a loopback name or address, or one the operator listed (`admin_allowed_hosts`).
//!
//! An endpoint without a token may listen beyond loopback only when the operator says so
//! (`admin_tokenless = "probes-only"`, the container image's setting, where the probes must answer from
//! outside): then the API and `/metrics` also need the connection to come from a loopback address, which no
//! `Host` header can fake.
//!
//! Once a request is let in it takes a slot of the listener's admission limit (veil-http): only here, past
//! the token, so an unauthenticated client never holds one.

use std::net::{IpAddr, SocketAddr};

use axum::extract::{ConnectInfo, Request, State};
use axum::http::{header, HeaderValue};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use subtle::ConstantTimeEq;

use crate::api::ApiError;
use crate::AdminState;

/// The identity the audit log names for an authenticated admin request.
pub(crate) const ADMIN_IDENTITY: &str = "admin";

tokio::task_local! {
    /// Who is making the admin request being handled: `admin` once the token was checked, unset otherwise.
    static IDENTITY: &'static str;
}

/// The identity of the admin request this task is handling ("" when the endpoint has no token).
pub(crate) fn identity() -> &'static str {
    IDENTITY.try_with(|identity| *identity).unwrap_or("")
}

/// Whether `header` (an `Authorization` value) carries `token` as a bearer token.
pub(crate) fn bearer_matches(header: Option<&HeaderValue>, token: &str) -> bool {
    let Some(presented) = header
        .and_then(|value| value.to_str().ok())
        .and_then(|value| {
            let (scheme, credentials) = value.split_once(' ')?;
            scheme
                .eq_ignore_ascii_case("bearer")
                .then(|| credentials.trim())
        })
    else {
        return false;
    };
    presented.len() == token.len() && bool::from(presented.as_bytes().ct_eq(token.as_bytes()))
}

/// The host a request names, without its port: HTTP/2's `:authority` (the URI's), else the `Host` header.
fn requested_host(request: &Request) -> Option<&str> {
    let authority = match request.uri().authority() {
        Some(authority) => authority.as_str(),
        None => request.headers().get(header::HOST)?.to_str().ok()?,
    };
    let host = match authority.strip_prefix('[') {
        // An IPv6 literal: `[::1]:9325`.
        Some(rest) => rest.split_once(']').map(|(host, _)| host)?,
        None => authority
            .rsplit_once(':')
            .map_or(authority, |(host, _)| host),
    };
    Some(host)
}

/// Whether `host` names this machine's loopback: `localhost`, a name under `.localhost` (which resolvers and
/// browsers keep on loopback, RFC 6761), or a loopback address.
fn is_loopback_host(host: &str) -> bool {
    let lower = host.to_ascii_lowercase();
    let name = lower.strip_suffix('.').unwrap_or(&lower);
    name == "localhost"
        || name.ends_with(".localhost")
        || name.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

/// Whether a request to an endpoint without a token names a host it may answer.
fn host_allowed(request: &Request, allowed: &[String]) -> bool {
    requested_host(request).is_some_and(|host| {
        is_loopback_host(host) || allowed.iter().any(|name| name.eq_ignore_ascii_case(host))
    })
}

/// Whether the request's connection comes from a loopback address (an IPv4 one mapped into IPv6 included).
fn peer_is_loopback(request: &Request) -> bool {
    request
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .is_some_and(|ConnectInfo(peer)| peer.ip().to_canonical().is_loopback())
}

/// Lets the request through when it carries the server's token, or when the server has none and the request
/// names a loopback or listed host (over a loopback connection, where the endpoint listens beyond it); then
/// takes its admission slot.
pub(crate) async fn require_token(
    State(state): State<AdminState>,
    request: Request,
    next: Next,
) -> Response {
    let Some(token) = state.token.as_deref() else {
        if state.loopback_peers_only && !peer_is_loopback(&request) {
            return ApiError::LoopbackOnly.into_response();
        }
        if !host_allowed(&request, &state.allowed_hosts) {
            return ApiError::HostNotAllowed.into_response();
        }
        return admitted(request, next).await;
    };
    if bearer_matches(request.headers().get(header::AUTHORIZATION), token) {
        return IDENTITY
            .scope(ADMIN_IDENTITY, admitted(request, next))
            .await;
    }
    let mut response = ApiError::Unauthorized.into_response();
    response
        .headers_mut()
        .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
    response
}

/// Runs an authenticated request in a slot of the listener's admission limit, held until its answer.
async fn admitted(request: Request, next: Next) -> Response {
    match veil_http::admit(request.extensions()).await {
        Ok(_slot) => next.run(request).await,
        Err(veil_http::AdmissionRefused) => ApiError::Throttled.into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::{bearer_matches, host_allowed, peer_is_loopback};
    use axum::extract::Request;
    use axum::http::HeaderValue;

    fn to_host(host: &str) -> Request {
        Request::builder()
            .uri("/api/v1/queues")
            .header("host", host)
            .body(axum::body::Body::empty())
            .unwrap()
    }

    fn from_peer(peer: Option<&str>) -> Request {
        let mut request = to_host("127.0.0.1:9325");
        if let Some(peer) = peer {
            let peer: std::net::SocketAddr = peer.parse().unwrap();
            request
                .extensions_mut()
                .insert(axum::extract::ConnectInfo(peer));
        }
        request
    }

    #[test]
    fn only_connections_from_loopback_addresses_count_as_local() {
        for peer in [
            "127.0.0.1:40000",
            "127.9.9.9:1",
            "[::1]:40000",
            "[::ffff:127.0.0.1]:40000",
        ] {
            assert!(peer_is_loopback(&from_peer(Some(peer))), "{peer} not local");
        }
        for peer in [
            "10.88.0.1:40000",
            "172.17.0.1:1",
            "[::ffff:10.0.0.1]:1",
            "[fe80::1]:1",
        ] {
            assert!(!peer_is_loopback(&from_peer(Some(peer))), "{peer} local");
        }
        // A request whose connection is unknown is not taken for a local one.
        assert!(!peer_is_loopback(&from_peer(None)));
    }

    #[test]
    fn without_a_token_only_loopback_or_listed_hosts_are_answered() {
        let listed = vec!["veil.internal".to_string()];
        for host in [
            "127.0.0.1:9325",
            "127.8.9.10",
            "localhost:9325",
            "LOCALHOST",
            "app.localhost:9325",
            "[::1]:9325",
            "veil.internal:9325",
            "VEIL.internal",
        ] {
            assert!(host_allowed(&to_host(host), &listed), "{host} refused");
        }
        for host in [
            "attacker.example:9325",
            "attacker.example",
            "localhost.attacker.example",
            "10.0.0.1:9325",
            "[::2]:9325",
            "",
            "127.0.0.1.attacker.example",
        ] {
            assert!(!host_allowed(&to_host(host), &listed), "{host} allowed");
        }
    }

    #[test]
    fn an_http2_authority_is_the_host_checked() {
        let request = Request::builder()
            .uri("http://attacker.example:9325/metrics")
            .header("host", "127.0.0.1")
            .body(axum::body::Body::empty())
            .unwrap();
        assert!(!host_allowed(&request, &[]));
        let no_host = Request::builder()
            .uri("/metrics")
            .body(axum::body::Body::empty())
            .unwrap();
        assert!(!host_allowed(&no_host, &[]));
    }

    #[test]
    fn only_the_exact_bearer_token_matches() {
        let header = |v: &str| HeaderValue::from_str(v).unwrap();
        assert!(bearer_matches(Some(&header("Bearer s3cret")), "s3cret"));
        assert!(bearer_matches(Some(&header("bearer s3cret")), "s3cret"));
        assert!(!bearer_matches(Some(&header("Bearer s3cre")), "s3cret"));
        assert!(!bearer_matches(Some(&header("Bearer s3cretX")), "s3cret"));
        assert!(!bearer_matches(Some(&header("Basic s3cret")), "s3cret"));
        assert!(!bearer_matches(Some(&header("s3cret")), "s3cret"));
        assert!(!bearer_matches(None, "s3cret"));
    }
}
