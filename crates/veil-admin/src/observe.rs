//! The admin endpoint's own request counts: each request to the API and `/metrics` is counted in
//! `veil_requests_total{protocol="admin"}` and timed in `veil_request_duration_seconds`, with the method
//! and route template as the operation (`GET /api/v1/queues/{namespace}/{queue}`) and the HTTP status as
//! the code. A route layer, so it sees the matched template and never a path a client chose, and outside the
//! token check, so refused requests count too.

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};
use std::time::Instant;

use axum::extract::{MatchedPath, Request, State};
use axum::http::Method;
use axum::middleware::Next;
use axum::response::Response;
use veil_telemetry::{Code, Protocol};

use crate::AdminState;

pub(crate) async fn count_request(
    State(state): State<AdminState>,
    matched: Option<MatchedPath>,
    request: Request,
    next: Next,
) -> Response {
    let Some(telemetry) = state.telemetry.clone() else {
        return next.run(request).await;
    };
    let operation = operation_name(request.method(), matched.as_ref().map(MatchedPath::as_str));
    let started = Instant::now();
    let response = next.run(request).await;
    telemetry.observe_request(
        Protocol::Admin,
        operation,
        Code::Status(response.status().as_u16()),
        started.elapsed(),
    );
    response
}

/// `METHOD /route/template` as a `&'static str` (the label type). The routes and the standard methods are a
/// fixed set, so each name is made once and kept; any other method is `OTHER`, so no client can add a label
/// value.
fn operation_name(method: &Method, template: Option<&str>) -> &'static str {
    static NAMES: OnceLock<Mutex<HashMap<(&'static str, String), &'static str>>> = OnceLock::new();
    let method = match *method {
        Method::GET => "GET",
        Method::POST => "POST",
        Method::PUT => "PUT",
        Method::PATCH => "PATCH",
        Method::DELETE => "DELETE",
        Method::HEAD => "HEAD",
        Method::OPTIONS => "OPTIONS",
        _ => "OTHER",
    };
    let template = template.unwrap_or("unmatched");
    let mut names = match NAMES.get_or_init(Default::default).lock() {
        Ok(names) => names,
        Err(poisoned) => poisoned.into_inner(),
    };
    names
        .entry((method, template.to_owned()))
        .or_insert_with(|| Box::leak(format!("{method} {template}").into_boxed_str()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_operation_is_the_method_and_the_route_template_made_once() {
        let first = operation_name(&Method::GET, Some("/api/v1/queues/{namespace}/{queue}"));
        assert_eq!(first, "GET /api/v1/queues/{namespace}/{queue}");
        let again = operation_name(&Method::GET, Some("/api/v1/queues/{namespace}/{queue}"));
        assert!(
            std::ptr::eq(first, again),
            "the same name is reused, not made again"
        );
    }

    #[test]
    fn a_method_outside_the_standard_set_is_other() {
        let custom = Method::from_bytes(b"FROBNICATE").expect("a valid method token");
        assert_eq!(operation_name(&custom, Some("/metrics")), "OTHER /metrics");
    }
}
