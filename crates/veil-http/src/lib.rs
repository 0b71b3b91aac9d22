//! The HTTP glue that Veil's HTTP front-ends (veil-sqs, veil-azure) share. Their codecs are pure: they produce
//! an [`HttpReply`] (status, headers, body) that tests read as bytes, and only the service turns it into an axum
//! [`Response`] here, so the two front-ends cannot drift in how a reply reaches the wire.
//!
//! It also holds what every listener runs (docs/security.md "TLS", "Limits against abuse"): [`conn::accept`]
//! (connection limit, TLS handshake under a timeout), [`tls`] (certificates reloaded on SIGHUP), [`serve()`]
//! (the HTTP serve loop with its limits and graceful stop), the per-connection rate limit ([`rate`]) and the
//! per-listener admission limit ([`admission`]), and the request [`pipeline`] every front-end — HTTP or gRPC —
//! runs its requests through.

pub mod admission;
pub mod conn;
pub mod grpc;
pub mod limits;
pub mod pipeline;
pub mod rate;
pub mod serve;
pub mod settings;
pub mod tls;

pub use admission::{admit, Admission, AdmissionRefused, Admitted};
pub use conn::{accept, Conn, ConnectionInfo};
pub use limits::{Limits, Rate};
pub use pipeline::{Pipeline, Trip, Who};
pub use serve::{serve, Listener, Throttled};
pub use tls::{CertFiles, ReloadingCert, TlsError};

use std::borrow::Cow;

use axum::body::Body;
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode};
use axum::response::Response;

/// An encoded answer, before it becomes an HTTP response.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HttpReply {
    pub status: u16,
    /// In the order they are written; a later header of the same name replaces an earlier one.
    pub headers: Vec<(Cow<'static, str>, String)>,
    pub body: Vec<u8>,
}

impl HttpReply {
    pub fn new(status: u16, body: Vec<u8>) -> Self {
        Self {
            status,
            headers: Vec::new(),
            body,
        }
    }

    pub fn with_header(
        mut self,
        name: impl Into<Cow<'static, str>>,
        value: impl Into<String>,
    ) -> Self {
        self.headers.push((name.into(), value.into()));
        self
    }

    /// The last value of the header `name` (case-insensitive), as the response will carry it.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .rev()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, value)| value.as_str())
    }
}

/// A request header as text; `None` when it is absent or not visible ASCII.
pub fn header_str<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).and_then(|value| value.to_str().ok())
}

/// The axum response for `reply`. A header whose name or value HTTP cannot carry is left out rather than
/// failing the whole reply: the codecs only write names they know and values they produced.
pub fn into_response(reply: HttpReply) -> Response {
    let mut response = Response::new(Body::from(reply.body));
    *response.status_mut() =
        StatusCode::from_u16(reply.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let headers = response.headers_mut();
    for (name, value) in reply.headers {
        if let (Ok(name), Ok(value)) = (
            HeaderName::from_bytes(name.as_bytes()),
            HeaderValue::from_str(&value),
        ) {
            headers.insert(name, value);
        }
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn later_header_of_the_same_name_wins() {
        let reply = HttpReply::new(200, b"x".to_vec())
            .with_header("content-type", "text/plain")
            .with_header("Content-Type", "application/xml");
        assert_eq!(reply.header("content-type"), Some("application/xml"));
        let response = into_response(reply);
        assert_eq!(response.status(), StatusCode::OK);
        assert_eq!(response.headers()["content-type"], "application/xml");
    }

    #[test]
    fn a_header_http_cannot_carry_is_left_out() {
        let reply = HttpReply::new(400, Vec::new())
            .with_header("x-ok", "yes")
            .with_header("x-bad", "line\nbreak");
        let response = into_response(reply);
        assert_eq!(response.status(), StatusCode::BAD_REQUEST);
        assert_eq!(response.headers()["x-ok"], "yes");
        assert!(response.headers().get("x-bad").is_none());
    }

    #[test]
    fn an_unknown_status_becomes_a_server_error() {
        assert_eq!(
            into_response(HttpReply::new(1000, Vec::new())).status(),
            StatusCode::INTERNAL_SERVER_ERROR
        );
    }
}
