//! The web console: three static files compiled into the binary (no CDN, no build step, works offline),
//! served at `/` and `/assets/…`. The page talks only to the JSON admin API, so every response carries a
//! Content-Security-Policy that allows this origin and nothing else: no inline script or style, no
//! third-party request, no framing.

use axum::http::{header, HeaderName, HeaderValue};
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;

const INDEX_HTML: &str = include_str!("../console/index.html");
const CONSOLE_JS: &str = include_str!("../console/console.js");
const CONSOLE_CSS: &str = include_str!("../console/console.css");
const FAVICON_SVG: &str = include_str!("../console/favicon.svg");

/// Self only. `connect-src` covers the page's `fetch` of `/api/v1`; `img-src` the favicon.
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; \
                   connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

/// Generic over the state so that the routes can be tested without an engine.
pub(crate) fn routes<S: Clone + Send + Sync + 'static>() -> Router<S> {
    Router::new()
        .route("/", get(|| asset("text/html; charset=utf-8", INDEX_HTML)))
        .route(
            "/assets/console.js",
            get(|| asset("text/javascript; charset=utf-8", CONSOLE_JS)),
        )
        .route(
            "/assets/console.css",
            get(|| asset("text/css; charset=utf-8", CONSOLE_CSS)),
        )
        .route(
            "/assets/favicon.svg",
            get(|| asset("image/svg+xml", FAVICON_SVG)),
        )
        // Browsers ask for /favicon.ico on pages that name no icon (/metrics, the API's JSON).
        .route("/favicon.ico", get(|| asset("image/svg+xml", FAVICON_SVG)))
}

async fn asset(content_type: &'static str, body: &'static str) -> impl IntoResponse {
    (
        [
            (header::CONTENT_TYPE, HeaderValue::from_static(content_type)),
            (
                header::CONTENT_SECURITY_POLICY,
                HeaderValue::from_static(CSP),
            ),
            (
                header::X_CONTENT_TYPE_OPTIONS,
                HeaderValue::from_static("nosniff"),
            ),
            (
                header::REFERRER_POLICY,
                HeaderValue::from_static("no-referrer"),
            ),
            // The assets change with the binary, not with a version in their name: always revalidate.
            (header::CACHE_CONTROL, HeaderValue::from_static("no-cache")),
            (
                HeaderName::from_static("x-frame-options"),
                HeaderValue::from_static("DENY"),
            ),
        ],
        body,
    )
}

#[cfg(test)]
mod tests {
    use axum::body::Body;
    use axum::http::{Request, StatusCode};
    use http_body_util::BodyExt;
    use tower::ServiceExt;

    use super::*;

    async fn get_path(path: &str) -> (StatusCode, String, String, String) {
        let response = routes::<()>()
            .oneshot(Request::get(path).body(Body::empty()).unwrap())
            .await
            .unwrap();
        let header_of = |name| {
            response
                .headers()
                .get(name)
                .map(|v: &HeaderValue| v.to_str().unwrap().to_owned())
                .unwrap_or_default()
        };
        let content_type = header_of(header::CONTENT_TYPE);
        let csp = header_of(header::CONTENT_SECURITY_POLICY);
        let status = response.status();
        let body = response.into_body().collect().await.unwrap().to_bytes();
        (
            status,
            content_type,
            csp,
            String::from_utf8(body.to_vec()).unwrap(),
        )
    }

    #[tokio::test]
    async fn every_asset_is_served_with_its_type_and_the_policy() {
        for (path, wanted) in [
            ("/", "text/html"),
            ("/assets/console.js", "text/javascript"),
            ("/assets/console.css", "text/css"),
            ("/assets/favicon.svg", "image/svg+xml"),
        ] {
            let (status, content_type, csp, body) = get_path(path).await;
            assert_eq!(status, StatusCode::OK, "{path}");
            assert!(content_type.starts_with(wanted), "{path}: {content_type}");
            assert_eq!(csp, CSP, "{path}");
            assert!(!body.is_empty(), "{path}");
        }
    }

    #[tokio::test]
    async fn the_page_loads_only_its_own_assets() {
        let (_, _, _, html) = get_path("/").await;
        for asset in [
            "/assets/console.js",
            "/assets/console.css",
            "/assets/favicon.svg",
        ] {
            assert!(
                html.contains(asset),
                "index.html does not reference {asset}"
            );
        }
        // Inline script or style would be refused by the policy, and a remote URL would break offline use.
        assert!(!html.contains("<style"));
        assert!(!html.contains("style=\""));
        assert!(!html.contains("http://") && !html.contains("https://"));
        for line in html.lines().filter(|l| l.contains("<script")) {
            assert!(line.contains(" src="), "inline script: {line}");
        }
    }

    #[tokio::test]
    async fn the_script_never_assigns_markup() {
        // Queue names and bodies are user data: the script builds nodes and sets textContent only.
        assert!(!CONSOLE_JS.contains("innerHTML"));
        assert!(!CONSOLE_JS.contains("outerHTML"));
        assert!(!CONSOLE_JS.contains("insertAdjacentHTML"));
        assert!(!CONSOLE_JS.contains("document.write"));
    }
}
