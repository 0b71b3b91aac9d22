//! Where this node's engine calls go now, partition by partition (docs/decisions/0011-partitioned-ownership.md):
//! to this node's engine for a partition it owns, to the owner's internal service for a partition another
//! node owns, nowhere (unavailable) for a partition no node can serve now. The node's lease loop sets the
//! routes ([`Routing::own`], [`Routing::follow`], [`Routing::nobody`]); every front-end reads them per call
//! through the node's `Dispatch`, which makes this the `Transport`. A call finds its partition from its
//! queue's key alone (`veil_core::partition::partition_of`); a call without a queue goes to every owner and
//! their answers are merged.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::RwLock;
use tokio::sync::watch;
use tokio::time::Instant;
use veil_core::dispatch::{merge, Answer, Call, Reply, Transport};
use veil_core::partition::{partition_of, Partition};
use veil_core::{Engine, EngineResult, QueueKey};

use crate::client::{CallError, Peer};
use crate::limits::REROUTE_WAIT_MS_MAX;
use crate::server::NOT_OWNER;
use crate::token::Tokens;
use crate::unavailable;

/// What a call answers while no node can serve its queue (the database unreachable, a new owner still
/// loading).
pub const NO_OWNER: &str = "no node serves this queue now; retry";

/// The routes, shared by the lease loop (writer) and every request (readers).
#[derive(Clone)]
pub struct Routing {
    /// Read on every call, written only when ownership changes; never held across an await.
    table: Arc<RwLock<Table>>,
    /// Bumped by every change of a route: a call waiting for its partition's next owner wakes on it.
    changed: Arc<watch::Sender<u64>>,
    /// Whether the lease loop can read the database now: only then is a partition without an owner on its
    /// way to one, worth waiting for; otherwise its calls fail at once.
    reachable: Arc<AtomicBool>,
    /// What calls to peers present; shared with the server side, set by the lease loop.
    tokens: Tokens,
    /// How this node connects to its peers: TLS with its certificate (crate::tls), or plaintext.
    tls: Option<Arc<rustls::ClientConfig>>,
}

struct Table {
    /// One route per partition; one partition (everything) until the cluster's count is known.
    routes: Vec<Route>,
}

#[derive(Clone)]
enum Route {
    Nobody,
    Here(Arc<Engine>),
    At(Box<Peer>),
}

/// How one partition is routed, for the lease loop's decisions and logs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RouteView {
    Nobody,
    Here,
    At(String),
}

impl Routing {
    /// Nobody serves yet; calls to other nodes present `tokens`' current token, over TLS with `tls`.
    pub fn new(tokens: Tokens, tls: Option<Arc<rustls::ClientConfig>>) -> Self {
        Self {
            table: Arc::new(RwLock::new(Table {
                routes: vec![Route::Nobody],
            })),
            changed: Arc::new(watch::channel(0).0),
            reachable: Arc::new(AtomicBool::new(false)),
            tokens,
            tls,
        }
    }

    /// Sets the cluster's partition count; every partition routes nowhere until told otherwise. Returns
    /// the engines this node was running, for the caller to drain (none once the count is fixed).
    pub fn set_count(&self, count: u32) -> Vec<Arc<Engine>> {
        let mut table = self.table.write();
        if table.routes.len() == count as usize {
            return Vec::new();
        }
        let old = std::mem::replace(
            &mut table.routes,
            vec![Route::Nobody; count.max(1) as usize],
        );
        drop(table);
        self.bump();
        engines(old)
    }

    /// Says whether the database is reachable now (see `reachable`).
    pub fn set_reachable(&self, reachable: bool) {
        if self.reachable.swap(reachable, Ordering::SeqCst) != reachable {
            self.bump();
        }
    }

    fn bump(&self) {
        self.changed.send_modify(|version| *version += 1);
    }

    /// The cluster's partition count as this node knows it.
    pub fn count(&self) -> u32 {
        self.table.read().routes.len() as u32
    }

    /// The partition of `key`.
    pub fn partition_of(&self, key: &QueueKey) -> Partition {
        partition_of(key, self.count())
    }

    /// This node owns `partition`: its calls, and other nodes' calls to it, run on `engine`.
    pub fn own(&self, partition: Partition, engine: Arc<Engine>) {
        self.set(partition, Route::Here(engine));
    }

    /// `addr` (`host:port` of its internal service) owns `partition`. Keeps the connection of any route
    /// to that owner already known.
    pub fn follow(&self, partition: Partition, addr: &str) {
        let known = {
            let table = self.table.read();
            let current = table.routes.get(partition as usize);
            if matches!(current, Some(Route::At(peer)) if peer.addr() == addr) {
                return;
            }
            table.routes.iter().find_map(|route| match route {
                Route::At(peer) if peer.addr() == addr => Some(Peer::clone(peer)),
                _ => None,
            })
        };
        let next = match known.map_or_else(|| Peer::new(addr, &self.tokens, self.tls.as_ref()), Ok)
        {
            Ok(peer) => Route::At(Box::new(peer)),
            Err(error) => {
                tracing::warn!(%error, addr, partition, "cannot route to the owner");
                Route::Nobody
            }
        };
        self.set(partition, next);
    }

    /// No node serves `partition` now. Returns this node's engine if it owned it, so the caller can drain
    /// it.
    pub fn nobody(&self, partition: Partition) -> Option<Arc<Engine>> {
        match self.set(partition, Route::Nobody) {
            Some(Route::Here(engine)) => Some(engine),
            _ => None,
        }
    }

    /// No node serves any partition now; returns the engines this node owned.
    pub fn nobody_anywhere(&self) -> Vec<Arc<Engine>> {
        let old = {
            let mut table = self.table.write();
            let count = table.routes.len();
            std::mem::replace(&mut table.routes, vec![Route::Nobody; count])
        };
        self.bump();
        engines(old)
    }

    fn set(&self, partition: Partition, route: Route) -> Option<Route> {
        let old = {
            let mut table = self.table.write();
            let slot = table.routes.get_mut(partition as usize)?;
            std::mem::replace(slot, route)
        };
        self.bump();
        Some(old)
    }

    /// The route of `key`'s partition now.
    fn route_of(&self, key: &QueueKey) -> Route {
        let table = self.table.read();
        let partition = partition_of(key, table.routes.len() as u32);
        table
            .routes
            .get(partition as usize)
            .cloned()
            .unwrap_or(Route::Nobody)
    }

    /// Waits until some route changes or `deadline` passes; `false` when it passed (or the database is out
    /// of reach, when nothing will change soon).
    async fn rerouted(&self, seen: &mut watch::Receiver<u64>, deadline: Instant) -> bool {
        if !self.reachable.load(Ordering::SeqCst) {
            return false;
        }
        matches!(
            tokio::time::timeout_at(deadline, seen.changed()).await,
            Ok(Ok(()))
        )
    }

    /// Runs a call on one queue at its partition's owner, following the partition when it moves: a call
    /// the known owner refused as not its own, or one whose partition has no owner yet, waits for the next
    /// owner up to `REROUTE_WAIT_MS_MAX`.
    async fn call_routed(self, call: Call) -> EngineResult<Reply> {
        let Some(key) = call.queue().cloned() else {
            return self.gather_routed(call).await;
        };
        let deadline = Instant::now() + Duration::from_millis(REROUTE_WAIT_MS_MAX);
        let mut seen = self.changed.subscribe();
        loop {
            seen.borrow_and_update();
            let refused = match self.route_of(&key) {
                Route::Here(engine) if engine.serving().is_ok() => {
                    return Ok(engine.execute(call).await)
                }
                // Ours, but no longer answerable (the lease may have lapsed, the store failed): the round
                // that drops it, or another node's takeover, changes the route.
                Route::Here(_) => NOT_OWNER,
                Route::At(peer) => match peer.call(&call, Vec::new()).await {
                    Ok(reply) => return Ok(reply),
                    Err(CallError::Failed(error)) => return Err(error),
                    Err(CallError::NotOwner) => NOT_OWNER,
                },
                Route::Nobody => NO_OWNER,
            };
            if !self.rerouted(&mut seen, deadline).await {
                return Err(unavailable(refused));
            }
        }
    }

    /// [`Transport::gather`]: every owner once, again while one refuses as not the owner, up to the same
    /// bound as a call on one queue.
    async fn gather_routed(self, call: Call) -> EngineResult<Reply> {
        let deadline = Instant::now() + Duration::from_millis(REROUTE_WAIT_MS_MAX);
        let mut seen = self.changed.subscribe();
        loop {
            seen.borrow_and_update();
            let refused = match self.owners() {
                None => NO_OWNER,
                Some((here, there)) => {
                    let local = here.into_iter().map(|engine| {
                        let call = call.clone();
                        Box::pin(async move {
                            match engine.serving() {
                                Ok(()) => Ok(engine.execute(call).await),
                                Err(_) => Err(CallError::NotOwner),
                            }
                        }) as Pending<'_>
                    });
                    let remote = there.into_values().map(|(peer, partitions)| {
                        let call = &call;
                        Box::pin(async move { peer.call(call, partitions).await }) as Pending<'_>
                    });
                    let answers = futures_util::future::join_all(local.chain(remote)).await;
                    let mut replies = Vec::with_capacity(answers.len());
                    let mut not_owner = false;
                    for answer in answers {
                        match answer {
                            Ok(reply) => replies.push(reply),
                            Err(CallError::NotOwner) => not_owner = true,
                            Err(CallError::Failed(error)) => return Err(error),
                        }
                    }
                    if !not_owner {
                        return Ok(merge(&call, replies));
                    }
                    NOT_OWNER
                }
            };
            if !self.rerouted(&mut seen, deadline).await {
                return Err(unavailable(refused));
            }
        }
    }

    /// Every owner once: this node's engines, and every other owner with the partitions it is asked to
    /// answer for; `None` while some partition has no owner.
    #[allow(clippy::type_complexity)]
    fn owners(&self) -> Option<(Vec<Arc<Engine>>, BTreeMap<String, (Peer, Vec<Partition>)>)> {
        let mut here: Vec<Arc<Engine>> = Vec::new();
        let mut there: BTreeMap<String, (Peer, Vec<Partition>)> = BTreeMap::new();
        let table = self.table.read();
        for (partition, route) in table.routes.iter().enumerate() {
            match route {
                Route::Nobody => return None,
                Route::Here(engine) => {
                    if !here.iter().any(|known| Arc::ptr_eq(known, engine)) {
                        here.push(engine.clone());
                    }
                }
                Route::At(peer) => there
                    .entry(peer.addr().to_owned())
                    .or_insert_with(|| (Peer::clone(peer), Vec::new()))
                    .1
                    .push(partition as Partition),
            }
        }
        Some((here, there))
    }

    /// How `partition` is routed now.
    pub fn route(&self, partition: Partition) -> RouteView {
        match self.table.read().routes.get(partition as usize) {
            None | Some(Route::Nobody) => RouteView::Nobody,
            Some(Route::Here(_)) => RouteView::Here,
            Some(Route::At(peer)) => RouteView::At(peer.addr().to_owned()),
        }
    }

    /// This node's engine for `partition` while it owns it.
    pub fn engine(&self, partition: Partition) -> Option<Arc<Engine>> {
        match self.table.read().routes.get(partition as usize) {
            Some(Route::Here(engine)) => Some(engine.clone()),
            _ => None,
        }
    }

    /// Whether some node (this one or another) serves every partition now, as far as this node knows.
    pub fn served(&self) -> bool {
        self.table
            .read()
            .routes
            .iter()
            .all(|route| !matches!(route, Route::Nobody))
    }

    /// Answers a call without a queue for `partitions`, which the caller expects this node to own, from
    /// this node's engines only (the internal service never forwards); `None` when it owns not all of them.
    pub async fn answer_for(&self, call: Call, partitions: &[Partition]) -> Option<Reply> {
        let mut partitions = partitions.to_vec();
        partitions.sort_unstable();
        partitions.dedup();
        let owned: Option<Vec<Arc<Engine>>> = {
            let table = self.table.read();
            partitions
                .iter()
                .map(|partition| match table.routes.get(*partition as usize) {
                    Some(Route::Here(engine)) if engine.serving().is_ok() => Some(engine.clone()),
                    _ => None,
                })
                .collect()
        };
        let mut engines = owned?;
        engines.dedup_by(|a, b| Arc::ptr_eq(a, b));
        let replies = futures_util::future::join_all(engines.into_iter().map(|engine| {
            let call = call.clone();
            async move { engine.execute(call).await }
        }))
        .await;
        Some(merge(&call, replies))
    }
}

/// The engines among `routes`.
fn engines(routes: Vec<Route>) -> Vec<Arc<Engine>> {
    routes
        .into_iter()
        .filter_map(|route| match route {
            Route::Here(engine) => Some(engine),
            _ => None,
        })
        .collect()
}

/// One owner's answer to a gathered call, pending.
type Pending<'a> =
    std::pin::Pin<Box<dyn std::future::Future<Output = Result<Reply, CallError>> + Send + 'a>>;

impl Transport for Routing {
    fn call(&self, call: Call) -> Answer {
        Box::pin(self.clone().call_routed(call))
    }

    fn local(&self, key: &QueueKey) -> Option<Arc<Engine>> {
        match self.route_of(key) {
            Route::Here(engine) => Some(engine),
            _ => None,
        }
    }

    fn gather(&self, call: Call) -> Answer {
        Box::pin(self.clone().gather_routed(call))
    }
}
