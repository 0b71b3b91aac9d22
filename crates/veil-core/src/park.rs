//! A hook the front-ends give a request so it learns when the engine parks it in a long poll
//! (docs/reliability.md, "Load and overload"): the HTTP listeners' admission limit counts requests being
//! worked on, and a long poll that waits is not — connections bound those — so it gives its admission slot
//! back when it parks. Task-local, so the engine's signatures stay free of transport concerns.

use std::future::Future;
use std::sync::Arc;

/// Called (at most once per request, by the hook's own choice) when a receive of the request parks.
pub type OnPark = Arc<dyn Fn() + Send + Sync>;

tokio::task_local! {
    static ON_PARK: OnPark;
}

/// Runs `request` with `on_park` as its park hook.
pub async fn with_on_park<F: Future>(on_park: OnPark, request: F) -> F::Output {
    ON_PARK.scope(on_park, request).await
}

/// Tells the current request's hook, if it has one, that a receive parks.
pub(crate) fn parking() {
    let _ = ON_PARK.try_with(|on_park| on_park());
}
