//! The request pipeline every front-end runs (ARCHITECTURE.md, "The request pipeline"): **identify** (the
//! front-end's credential check) → **authorize** (the one permission model, `veil_core::access`) → **admit /
//! park** ([`crate::admission`]) → **dispatch** (the front-end's handler, which calls the engine) → **audit**
//! (`veil_telemetry::audit`) → **observe** (`veil_requests_total`, `veil_request_duration_seconds`).
//!
//! A front-end supplies only what is its protocol's: decoding, encoding, the mapping of its errors onto its
//! answers and metric codes, and its credential check. The steps themselves are here, once: a [`Trip`] is one
//! request's pass through them, so the three front-ends cannot drift in what a refused credential, a full
//! listener or a parked long poll costs them or how each is counted.
//!
//! Per-request cost: a `Trip` is a borrowed [`Pipeline`] and an `Instant` on the stack; nothing here allocates
//! or boxes, except the park hook of [`Trip::dispatch_parking`], which the long-polling operations already
//! paid for (docs/reliability.md "Load and overload").

use std::future::Future;
use std::sync::Arc;
use std::time::Instant;

use veil_core::Protocol;
use veil_telemetry::audit::{self, AuditEvent};
use veil_telemetry::{Code, Telemetry};

use crate::admission::{Admission, AdmissionRefused, Admitted};

/// The audit log's action for a refused credential (docs/security.md "Audit log").
pub const AUTHENTICATE: &str = "Authenticate";

/// One front-end's pipeline: the protocol its requests are counted and audited under, and where.
#[derive(Clone, Debug)]
pub struct Pipeline {
    protocol: Protocol,
    telemetry: Telemetry,
}

/// Who asked, as the audit log names them; empty strings where the protocol does not tell.
#[derive(Clone, Copy, Debug, Default)]
pub struct Who<'a> {
    /// The engine namespace of the queue, when one is known.
    pub namespace: &'a str,
    /// The queue (or channel) the request names.
    pub queue: &'a str,
    /// The caller's account, access key or client id.
    pub identity: &'a str,
    /// The peer's address.
    pub client: &'a str,
}

impl Pipeline {
    pub fn new(protocol: Protocol, telemetry: Telemetry) -> Self {
        Self {
            protocol,
            telemetry,
        }
    }

    pub fn protocol(&self) -> Protocol {
        self.protocol
    }

    pub fn telemetry(&self) -> &Telemetry {
        &self.telemetry
    }

    /// **audit**: one record of a destructive or security-relevant `action` with its protocol `outcome`
    /// ([`audit::OK`] or the protocol's error code). A stream's requests and a refusal inside a handler audit
    /// here, without a [`Trip`].
    pub fn audit(&self, action: &str, who: Who<'_>, outcome: &str) {
        audit::record(&AuditEvent {
            action,
            protocol: self.protocol,
            namespace: who.namespace,
            queue: who.queue,
            identity: who.identity,
            client: who.client,
            outcome,
        });
    }

    /// A request arrived: its latency counts from now.
    pub fn start(&self) -> Trip<'_> {
        Trip {
            pipeline: self,
            started: Instant::now(),
        }
    }
}

/// One request's pass through the pipeline.
#[derive(Debug)]
pub struct Trip<'a> {
    pipeline: &'a Pipeline,
    /// When the request arrived: `veil_request_duration_seconds` is measured from here to the answer.
    started: Instant,
}

impl Trip<'_> {
    /// **identify** refused the caller: the audit log's `Authenticate` record with the protocol's `outcome`,
    /// and the request counted under `operation` with `code`.
    pub fn unidentified(&self, operation: &'static str, who: Who<'_>, outcome: &str, code: Code) {
        self.audit(AUTHENTICATE, who, outcome);
        self.observe(operation, code);
    }

    /// **admit**: a slot of the listener's admission limit, waiting at most its admission wait. Called once
    /// the request's body is read and its caller identified (ARCHITECTURE.md, Architecture Invariants), so a
    /// client that cannot authenticate never holds a slot. The caller answers a refusal with its protocol's
    /// throttling error and counts it with [`Trip::observe`].
    pub async fn admit(&self, admission: &Admission) -> Result<Admitted, AdmissionRefused> {
        admission.enter().await.ok_or(AdmissionRefused)
    }

    /// **admit** for an HTTP request, whose listener left its [`Admission`] in the request's extensions
    /// ([`crate::admit`]).
    pub async fn admit_http(
        &self,
        extensions: &axum::http::Extensions,
    ) -> Result<Admitted, AdmissionRefused> {
        crate::admission::admit(extensions).await
    }

    /// **dispatch** of an operation that may long-poll: while the engine parks it, the request gives its
    /// admission slot back (`veil_core::park`), since waiting costs a connection, not work.
    /// Not an `async fn`: each async layer would keep its own copy of `work` in its state, and a waiting long
    /// poll's future is paid for by every waiting connection.
    pub fn dispatch_parking<F: Future>(
        &self,
        admitted: &Admitted,
        work: F,
    ) -> impl Future<Output = F::Output> {
        dispatch_parking(admitted, work)
    }

    /// **audit**: see [`Pipeline::audit`].
    pub fn audit(&self, action: &str, who: Who<'_>, outcome: &str) {
        self.pipeline.audit(action, who, outcome);
    }

    /// **observe**: counts the request under `operation` with its protocol's `code` and records how long it
    /// took since it arrived.
    pub fn observe(&self, operation: &'static str, code: Code) {
        self.pipeline.telemetry.observe_request(
            self.pipeline.protocol,
            operation,
            code,
            self.started.elapsed(),
        );
    }
}

/// [`Trip::dispatch_parking`] for a handler that holds its slot but not its trip (KubeMQ's unary RPCs hand
/// their handler the slot only).
pub fn dispatch_parking<F: Future>(
    admitted: &Admitted,
    work: F,
) -> impl Future<Output = F::Output> {
    let parked = admitted.clone();
    let on_park: veil_core::park::OnPark = Arc::new(move || parked.release());
    veil_core::park::with_on_park(on_park, work)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limits::Limits;
    use std::time::Duration;

    fn pipeline() -> Pipeline {
        Pipeline::new(Protocol::Sqs, Telemetry::default())
    }

    #[test]
    fn a_refused_credential_is_counted_under_its_operation() {
        let pipeline = pipeline();
        let trip = pipeline.start();
        trip.unidentified(
            "SendMessage",
            Who::default(),
            "InvalidClientTokenId",
            Code::Error("X"),
        );
        let count =
            pipeline
                .telemetry()
                .request_count(Protocol::Sqs, "SendMessage", Code::Error("X"));
        assert_eq!(count, 1);
    }

    #[tokio::test(start_paused = true)]
    async fn a_request_beyond_the_admission_limit_is_refused_after_the_wait() {
        let admission = Admission::new(&Limits {
            max_requests_in_flight: 1,
            admission_wait: Duration::from_millis(10),
            ..Limits::default()
        });
        let pipeline = pipeline();
        let held = pipeline.start().admit(&admission).await.expect("the slot");
        let refused = pipeline.start().admit(&admission).await;
        assert_eq!(refused.err(), Some(AdmissionRefused));
        drop(held);
        assert!(pipeline.start().admit(&admission).await.is_ok());
    }
}
