//! veil-admin: the operator's side of Veil, served on its own listener (default 127.0.0.1:9325):
//! `/metrics` (Prometheus text), `/healthz` and `/readyz` (Kubernetes probes), the protocol-neutral JSON admin
//! API under `/api/v1` (described by `/api/v1/openapi.json`, generated from this code) and the web console at
//! `/`. It reads and changes queues only through `veil_core::Engine`, like the protocol front-ends, and knows
//! no protocol's wire format.

mod api;
mod auth;
mod console;
pub mod declare;
mod health;
pub mod limits;
mod metrics;
pub mod names;
mod observe;
mod series;
pub mod settings;

use std::sync::Arc;

use axum::Router;
use veil_core::Dispatch;

pub use api::ApiDoc;
pub use health::{Phase, Readiness};
pub use prometheus_client::registry::Registry;
pub use series::Series;

/// What a client is told of an engine error: its own words, except a store's, which go to the log (a
/// database's error text, a peer's address): the client learns only whether to retry (docs/security.md
/// "Errors that say nothing inside").
pub(crate) fn engine_error_text(error: &veil_core::EngineError) -> String {
    match error {
        veil_core::EngineError::Store(store) => {
            tracing::error!(error = %store, "admin request failed in the store");
            match store {
                veil_core::StoreError::Unavailable(_) => {
                    "the store cannot be reached now; retry".into()
                }
                _ => "the store failed; the server's log says why".into(),
            }
        }
        other => other.to_string(),
    }
}

/// The engine the admin endpoint serves: empty while the store opens, replaced when the server reopens it.
pub type EngineSlot = Arc<parking_lot::RwLock<Option<Dispatch>>>;

/// What every admin handler shares.
#[derive(Clone)]
pub struct AdminState {
    /// Set once the store is open and the index rebuilt; until then the API answers 503 and the probes say
    /// "starting". A slot the server fills because the admin listener is bound before the (possibly long)
    /// recovery, so that probes get an answer during it, and refills when it reopens a failed store
    /// (docs/reliability.md "Storage faults").
    engine: EngineSlot,
    /// The server's metrics (requests, store); `/metrics` appends every queue's own.
    registry: Arc<Registry>,
    readiness: Readiness,
    /// The last hour of each queue's counts, for the console's charts.
    series: Series,
    /// The bearer token every route but the probes and the console's files requires; `None`: open, to
    /// requests naming a loopback host or one of `allowed_hosts`.
    token: Option<Arc<str>>,
    /// Host names besides loopback's that an endpoint without a token answers (`admin_allowed_hosts`).
    allowed_hosts: Arc<[String]>,
    /// An endpoint without a token that listens beyond loopback (`admin_tokenless = "probes-only"`, the
    /// container image's setting): the API and `/metrics` answer only connections from a loopback address.
    loopback_peers_only: bool,
    /// The server's clock when it runs with the test-only setting (docs/testing.md "Test clock"): its
    /// advance route exists only then.
    test_clock: Option<veil_core::OffsetClock>,
    /// Where the API's and `/metrics`' own requests are counted (`protocol="admin"`); `None` counts nothing.
    telemetry: Option<veil_telemetry::Telemetry>,
}

impl AdminState {
    /// `registry` holds the metrics the server exports besides the per-queue ones.
    pub fn new(
        engine: EngineSlot,
        registry: Registry,
        readiness: Readiness,
        series: Series,
    ) -> Self {
        Self {
            engine,
            registry: Arc::new(registry),
            readiness,
            series,
            token: None,
            allowed_hosts: Arc::new([]),
            loopback_peers_only: false,
            test_clock: None,
            telemetry: None,
        }
    }

    /// Counts the API's and `/metrics`' requests in these metrics (`veil_requests_total{protocol="admin"}`).
    pub fn with_telemetry(mut self, telemetry: veil_telemetry::Telemetry) -> Self {
        self.telemetry = Some(telemetry);
        self
    }

    /// Host names besides loopback's that the API and `/metrics` answer without a token (docs/security.md
    /// "Admin endpoint": DNS rebinding).
    pub fn with_allowed_hosts(mut self, hosts: Vec<String>) -> Self {
        // An empty name would admit a request with an empty `Host`, which no operator means to list.
        self.allowed_hosts = hosts.into_iter().filter(|host| !host.is_empty()).collect();
        self
    }

    /// Without a token, answers the API and `/metrics` only over connections from loopback (docs/security.md
    /// "Admin endpoint": an endpoint listening beyond loopback without a token). No effect with a token.
    pub fn with_loopback_peers_only(mut self, only: bool) -> Self {
        self.loopback_peers_only = only;
        self
    }

    /// Requires `Authorization: Bearer <token>` on the API and `/metrics` (docs/security.md "Admin endpoint").
    pub fn with_token(mut self, token: Option<String>) -> Self {
        self.token = token.filter(|t| !t.is_empty()).map(Arc::from);
        self
    }

    /// Routes `POST /api/v1/test/clock/advance`, which moves `clock` (docs/testing.md "Test clock").
    /// For tests only: the server must run on this clock.
    pub fn with_test_clock(mut self, clock: Option<veil_core::OffsetClock>) -> Self {
        self.test_clock = clock;
        self
    }

    fn engine(&self) -> Result<Dispatch, api::ApiError> {
        self.engine.read().clone().ok_or(api::ApiError::Starting)
    }
}

/// The admin endpoint's routes.
pub fn router(state: AdminState) -> Router {
    let mut api = api::routes();
    if state.test_clock.is_some() {
        api = api.merge(api::test_clock::routes());
    }
    let guarded = Router::new()
        .merge(metrics::routes())
        .nest("/api/v1", api)
        .route_layer(axum::middleware::from_fn_with_state(
            state.clone(),
            auth::require_token,
        ))
        // Added after the token check, so it runs before it: refused requests are counted too.
        .route_layer(axum::middleware::from_fn_with_state(
            state.clone(),
            observe::count_request,
        ));
    Router::new()
        .merge(health::routes())
        .merge(guarded)
        .merge(console::routes())
        .with_state(state)
}
