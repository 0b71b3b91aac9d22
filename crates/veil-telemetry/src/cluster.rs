//! What a cluster node reports about its internal RPC's token (docs/cluster.md "Rotating the cluster
//! token"): the key generation it sends, and the calls its port refused for a missing or wrong token. An
//! operator watches the first move on every node during a rotation, and alerts on the second, which stays at
//! zero in a healthy cluster (a node left behind by a rotation, or someone knocking with a stale capture).
//! Process-wide, like the listener counters: veil-cluster's interceptor counts without a handle.

use std::sync::OnceLock;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

/// The process's cluster-token metrics.
#[derive(Debug, Default)]
pub struct ClusterRpcMetrics {
    token_generation: Gauge,
    refused: Counter,
}

/// The cluster-token metrics of this process.
pub fn cluster_rpc() -> &'static ClusterRpcMetrics {
    static METRICS: OnceLock<ClusterRpcMetrics> = OnceLock::new();
    METRICS.get_or_init(ClusterRpcMetrics::default)
}

impl ClusterRpcMetrics {
    pub(crate) fn register(&self, registry: &mut Registry) {
        registry.register(
            "veil_cluster_token_generation",
            "The generation of the cluster token's key this node sends with its internal calls (0 until the first rotation)",
            self.token_generation.clone(),
        );
        registry.register(
            "veil_cluster_rpc_refused",
            "Calls to this node's internal RPC refused for a missing or wrong cluster token",
            self.refused.clone(),
        );
    }

    pub fn set_token_generation(&self, generation: u64) {
        self.token_generation
            .set(i64::try_from(generation).unwrap_or(i64::MAX));
    }

    pub fn refused_one(&self) {
        self.refused.inc();
    }

    pub fn refused(&self) -> u64 {
        self.refused.get()
    }
}
