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
    let captured = Captured::default();
    let layer = Collector {
        events: captured.events.clone(),
    };
    let guard = tracing::subscriber::set_default(tracing_subscriber::registry().with(layer));
    (captured, guard)
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
