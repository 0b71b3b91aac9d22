//! A tracing layer that collects events with their fields, so tests can check that an operation logged its
//! audit line (`veil::audit`). Built with the `capture` feature (the front-ends' dev-dependency) and in this
//! crate's own tests; never in the server.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, Mutex};

use tracing::field::{Field, Visit};
use tracing::subscriber::DefaultGuard;
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::Layer;

/// One event as it was logged: its target and every field (the message under `message`) as text.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CapturedEvent {
    pub target: String,
    pub fields: BTreeMap<String, String>,
}

impl CapturedEvent {
    /// The field's text, or "" when the event has no such field.
    pub fn field(&self, name: &str) -> &str {
        self.fields.get(name).map_or("", String::as_str)
    }
}

/// The events collected while its guard is alive.
#[derive(Clone, Debug, Default)]
pub struct Captured {
    events: Arc<Mutex<Vec<CapturedEvent>>>,
}

impl Captured {
    /// Every event so far.
    pub fn events(&self) -> Vec<CapturedEvent> {
        self.events.lock().map(|e| e.clone()).unwrap_or_default()
    }

    /// The audit events so far.
    pub fn audit(&self) -> Vec<CapturedEvent> {
        self.events()
            .into_iter()
            .filter(|event| event.target == crate::audit::TARGET)
            .collect()
    }
}

/// Collects every event of the current thread until the guard is dropped. A `#[tokio::test]` runs its tasks
/// on its own thread, so handlers' events are seen too.
pub fn capture() -> (Captured, DefaultGuard) {
    keep_interest_dynamic();
    let captured = Captured::default();
    let layer = Collector {
        events: captured.events.clone(),
    };
    let guard = tracing::subscriber::set_default(tracing_subscriber::registry().with(layer));
    tracing::callsite::rebuild_interest_cache();
    (captured, guard)
}

/// Tests run in parallel threads, most with no subscriber at all. A callsite first reached on such a thread
/// can have its interest cached as "never" while another thread is just installing its capture, and then the
/// audit event is lost to that test (seen in CI). A global subscriber that answers "sometimes" for every
/// callsite (and enables nothing itself) keeps every callsite asking the current thread's subscriber.
fn keep_interest_dynamic() {
    static INSTALLED: std::sync::Once = std::sync::Once::new();
    INSTALLED.call_once(|| {
        // Fails only if a global subscriber exists already, which then decides interest itself.
        let _ =
            tracing::subscriber::set_global_default(tracing_subscriber::registry().with(Undecided));
    });
}

/// Interested "sometimes" in every callsite, enabled for nothing.
struct Undecided;

impl<S: tracing::Subscriber> Layer<S> for Undecided {
    fn register_callsite(
        &self,
        _metadata: &'static tracing::Metadata<'static>,
    ) -> tracing::subscriber::Interest {
        tracing::subscriber::Interest::sometimes()
    }

    fn enabled(&self, _metadata: &tracing::Metadata<'_>, _ctx: Context<'_, S>) -> bool {
        false
    }
}

struct Collector {
    events: Arc<Mutex<Vec<CapturedEvent>>>,
}

impl<S: tracing::Subscriber> Layer<S> for Collector {
    fn on_event(&self, event: &tracing::Event<'_>, _ctx: Context<'_, S>) {
        let mut fields = Fields::default();
        event.record(&mut fields);
        if let Ok(mut events) = self.events.lock() {
            events.push(CapturedEvent {
                target: event.metadata().target().to_string(),
                fields: fields.0,
            });
        }
    }
}

#[derive(Default)]
struct Fields(BTreeMap<String, String>);

impl Visit for Fields {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().to_string(), value.to_string());
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.0
            .insert(field.name().to_string(), format!("{value:?}"));
    }
}
