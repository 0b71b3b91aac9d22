//! veil-cluster: routing at the engine API (docs/cluster.md "Routing at the engine API"). Every node of a
//! cluster decodes every protocol itself; each engine call for queues this node does not own travels as data
//! (veil-core's `dispatch::Call`) over an internal gRPC service to the node that owns them, which runs it with
//! `Engine::execute` and sends back the `Reply`. The protocol crates see only `veil_core::Dispatch`.
//!
//! - [`routing::Routing`]: where this node's calls go now (its own engine, another node, or nowhere), as the
//!   node's lease loop last learned; the `Transport` behind the node's `Dispatch`.
//! - [`server`]: the internal service, answering from this node's engine while it owns the queues.
//! - [`client::Peer`]: a connection to another node's service.
//! - [`token`]: the credential every internal call carries, derived from the cluster's shared secret.
//! - [`tls`]: TLS between the nodes with mutual authentication by the cluster's CA.
//!
//! Knows nothing of PostgreSQL, leases or protocols: the server crate decides who owns what and tells
//! [`routing::Routing`].

pub mod client;
pub mod limits;
pub mod ownership;
pub mod routing;
pub mod server;
pub mod tls;
pub mod token;

/// The generated gRPC code of `proto/cluster.proto`.
#[allow(clippy::all, clippy::pedantic, missing_docs)]
pub mod pb {
    tonic::include_proto!("veil.cluster.v1");
}

use veil_core::{EngineError, StoreError};

/// What a call answers when no node can serve it now, or this node was asked for queues it no longer owns:
/// the protocols' "service unavailable", which clients retry.
pub fn unavailable(why: impl Into<String>) -> EngineError {
    EngineError::Store(StoreError::Unavailable(why.into()))
}
