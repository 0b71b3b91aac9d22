//! The admin endpoint's bearer token (docs/security.md "Admin endpoint"). When the server has one, every
//! route but the probes (`/healthz`, `/readyz`) and the console's static files (code, no data: the page asks
//! for the token when the API refuses it) needs `Authorization: Bearer <token>`, compared in constant time;
//! anything else is 401 with `WWW-Authenticate: Bearer` and the API's JSON error. The token's holder is
//! `admin` in the audit log.

use axum::extract::{Request, State};
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

/// Lets the request through when the server has no token or the request carries it.
pub(crate) async fn require_token(
    State(state): State<AdminState>,
    request: Request,
    next: Next,
) -> Response {
    let Some(token) = state.token.as_deref() else {
        return next.run(request).await;
    };
    if bearer_matches(request.headers().get(header::AUTHORIZATION), token) {
        return IDENTITY.scope(ADMIN_IDENTITY, next.run(request)).await;
    }
    let mut response = ApiError::Unauthorized.into_response();
    response
        .headers_mut()
        .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
    response
}

#[cfg(test)]
mod tests {
    use super::bearer_matches;
    use axum::http::HeaderValue;

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
