//! The audit log: one structured tracing event per destructive or security-relevant operation (a queue
//! deleted, purged or cleared, settings or permissions changed, a move task started or cancelled, a
//! credential rejected), whatever the protocol. It is an ordinary tracing event on the target
//! [`TARGET`] (`veil::audit`), so it goes wherever the server's logs go, in text or JSON, and can be
//! filtered on its own (`RUST_LOG=veil::audit=info`). Every call site is one [`record`] call.

use crate::Protocol;

/// The tracing target of audit events.
pub const TARGET: &str = "veil::audit";

/// The `outcome` of an operation that succeeded; a failure's outcome is its protocol error code.
pub const OK: &str = "ok";

/// One audited operation. Strings are borrowed: an event is built and logged in place.
#[derive(Clone, Copy, Debug)]
pub struct AuditEvent<'a> {
    /// The protocol's name for the operation (`DeleteQueue`, `ClearMessages`, `AckAllQueueMessages`,
    /// `Authenticate` for a rejected credential).
    pub action: &'a str,
    pub protocol: Protocol,
    /// The engine namespace of the queue, empty when none is known (a rejected credential).
    pub namespace: &'a str,
    /// The queue (or channel) name, empty when the operation names none.
    pub queue: &'a str,
    /// The caller's account, access key or client id where the protocol tells it, else empty.
    pub identity: &'a str,
    /// The peer address where known, else empty.
    pub client: &'a str,
    /// [`OK`] or the protocol's error code.
    pub outcome: &'a str,
}

/// Logs `event` on `veil::audit` at INFO (a rejected credential at WARN), with each part as its own field.
pub fn record(event: &AuditEvent<'_>) {
    let AuditEvent {
        action,
        protocol,
        namespace,
        queue,
        identity,
        client,
        outcome,
    } = *event;
    let protocol = protocol.as_str();
    // The target must be a literal for tracing's static callsite metadata; `TARGET` names the same.
    if outcome != OK && action == "Authenticate" {
        tracing::warn!(
            target: "veil::audit",
            action, protocol, namespace, queue, identity, client, outcome,
            "audit"
        );
    } else {
        tracing::info!(
            target: "veil::audit",
            action, protocol, namespace, queue, identity, client, outcome,
            "audit"
        );
    }
}
