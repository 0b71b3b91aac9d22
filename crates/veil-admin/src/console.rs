//! The web console: static assets compiled into the binary (no CDN, works offline), served at `/`. The page
//! talks only to the JSON admin API.

use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;

use crate::AdminState;

const INDEX_HTML: &str = include_str!("../console/index.html");

pub(crate) fn routes() -> Router<AdminState> {
    Router::new().route("/", get(index))
}

async fn index() -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, "text/html; charset=utf-8")],
        INDEX_HTML,
    )
}
