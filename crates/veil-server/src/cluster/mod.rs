//! A node of a cluster over PostgreSQL (docs/cluster.md, docs/decisions/0011-partitioned-ownership.md).
//!
//! Every node serves every protocol and the admin endpoint on its own listeners, TLS included, and calls the
//! engine through one `Dispatch` whose transport is this node's [`Routing`] (crates/veil-cluster). One node at
//! a time holds the leader lease (`veil_postgres::lease`) and runs the engine over `PgStore`: its own calls run
//! on it directly, and the other nodes send theirs to it over the internal RPC, whose address the lease row
//! publishes. The client's own address stays with its request on the node it entered (audit log, delivery
//! history, Azure's `sip`). While no node can serve (the database is down, a new leader still loading), the
//! calls fail as unavailable and each protocol answers its "service unavailable".
//!
//! The node's loop: keep a control connection, measure the database clock, and try to take the lease every
//! retry interval; as a follower, route to the holder. As the leader: open the store fenced by the lease's
//! epoch, rebuild the engine from the database, route to it, renew the lease every quarter of its term, and
//! step down — route nowhere, drain, drop the engine — when a renewal fails past the term, the store fails
//! (its memory may be ahead of the database, so only a reload is safe), or the node stops (then it releases
//! the lease so the next node need not wait for it to lapse). Within a term the engine answers only while the
//! lease is surely held (`TermGate`): a leader resumed from a pause past its lease answers "unavailable" at
//! once, to its own clients and to the calls other nodes send it.

pub mod settings;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::watch;
use tokio_postgres::Client;
use veil_cluster::routing::Routing;
use veil_cluster::token::Token;
use veil_core::dispatch::Remote;
use veil_core::{Dispatch, Engine, ReceiptKey, StoreError};
use veil_postgres::lease::{self, LeaderAddrs, Lease};
use veil_postgres::{DbClock, PgStore};
use veil_telemetry::Telemetry;

use self::settings::PostgresSettings;
use crate::config::Settings;
use crate::{bind, Admin, ServeError, Sockets, TlsConfigs};

/// A renewal must succeed this long before the lease's end as this node measures it, or the leader steps
/// down: the margin covers the database's and this node's clocks running at slightly different rates.
const LEASE_MARGIN_PERCENT: u32 = 20;
/// How long a stepping-down leader waits for its requests to drain before it drops the engine anyway.
const DRAIN_MS_MAX: u64 = 5_000;
/// How often a draining leader looks whether its last request let go of the engine.
const DRAIN_POLL_MS: u64 = 10;

/// What a node runs with.
pub struct Node<'a> {
    pub settings: &'a Settings,
    pub postgres: &'a PostgresSettings,
    pub telemetry: &'a Telemetry,
    pub tls: &'a TlsConfigs,
}

/// Runs this node until `shutdown` turns true.
pub async fn run(node: Node<'_>, shutdown: watch::Receiver<bool>) -> Result<(), ServeError> {
    let settings = node.settings;
    let postgres = node.postgres;
    let mut member = Member {
        node: &node,
        routing: None,
        rpc_addr: String::new(),
        readiness: None,
        clock: DbClock::default(),
        control: None,
        secret: None,
        shutdown: shutdown.clone(),
    };
    tracing::info!(node = %postgres.node_id, "cluster node starting; waiting for the database");
    // The cluster's secret keys receipts and the internal RPC's token: nothing is served before it is known.
    let Some(secret) = member.first_contact().await? else {
        return Ok(());
    };
    let token = Token::of(&secret);
    let routing = Routing::new(token.clone());
    let (rpc_listener, rpc_local) =
        veil_cluster::server::bind(postgres.bind)
            .await
            .map_err(|source| ServeError::Listen {
                addr: SocketAddr::new(postgres.bind, 0),
                source,
            })?;
    let dispatch = Dispatch::Remote(Arc::new(Remote::new(
        Box::new(routing.clone()),
        Arc::new(member.clock.clone()),
        ReceiptKey::new(secret),
    )));
    let admin = Admin::start(
        bind(settings.admin.listen).await?,
        node.tls.admin.clone(),
        settings.listeners.admin.limits.clone(),
        settings.admin.guard(),
        node.telemetry,
        None,
    );
    admin.engine_opened(dispatch.clone());
    let sampler = admin.series.spawn_sampler(dispatch.clone());
    let sockets = Sockets {
        sqs: bind(settings.sqs_listen).await?,
        azure: bind(settings.azure.listen).await?,
        kubemq: bind(settings.kubemq.listen).await?,
    };
    crate::log_listening(settings);
    let (stop_serving, serving_stopped) = watch::channel(false);
    let serving = {
        let (settings, telemetry, tls) =
            (settings.clone(), node.telemetry.clone(), node.tls.clone());
        let dispatch = dispatch.clone();
        tokio::spawn(async move {
            crate::serve_protocols(
                dispatch,
                secret.to_vec(),
                sockets,
                &settings,
                &telemetry,
                &tls,
                serving_stopped,
            )
            .await
        })
    };
    let rpc = tokio::spawn(veil_cluster::server::serve(
        rpc_listener,
        routing.clone(),
        token,
        shutdown,
    ));
    member.rpc_addr = format!("{}:{}", postgres.advertise, rpc_local.port());
    member.routing = Some(routing.clone());
    member.readiness = Some(admin.readiness.clone());
    let result = member.run().await;
    admin.readiness.set(veil_admin::Phase::Stopping);
    routing.nobody();
    stop_serving.send_replace(true);
    match serving.await {
        Ok(Err(error)) => tracing::warn!(%error, "serving ended with an error"),
        Err(error) => tracing::warn!(%error, "serving task failed"),
        Ok(Ok(())) => {}
    }
    if let Ok(Err(error)) = rpc.await {
        tracing::warn!(%error, "the cluster RPC ended with an error");
    }
    sampler.abort();
    admin.stop().await;
    tracing::info!("node stopped; bye");
    result
}

/// The node's state between terms.
struct Member<'a, 'n> {
    node: &'a Node<'n>,
    /// Where this node's engine calls go; `None` only before the first contact with the database.
    routing: Option<Routing>,
    /// This node's internal RPC address as other nodes reach it (`host:port`), published while it leads.
    rpc_addr: String,
    /// The admin endpoint's `/readyz`: ready while some node serves the queues.
    readiness: Option<veil_admin::Readiness>,
    /// The engine's clock while this node leads; synced at every lease attempt and renewal.
    clock: DbClock,
    /// The control connection (lease, clock); `None` after a failure, reopened on the next round.
    control: Option<Client>,
    /// The cluster's shared secret, read once from the database.
    secret: Option<[u8; 32]>,
    shutdown: watch::Receiver<bool>,
}

impl Member<'_, '_> {
    async fn run(&mut self) -> Result<(), ServeError> {
        let retry = self.node.postgres.retry_interval();
        while !*self.shutdown.borrow() {
            match self.round().await {
                Ok(Some(lease)) => self.lead(lease).await,
                Ok(None) => {}
                Err(RoundError::Fatal(error)) => return Err(error),
                Err(RoundError::Database(error)) => {
                    if self.control.take().is_some() {
                        tracing::warn!(%error, "database unreachable; answering 'service unavailable'");
                    }
                    self.route_nowhere();
                }
            }
            let mut shutdown = self.shutdown.clone();
            tokio::select! {
                () = tokio::time::sleep(retry) => {}
                _ = shutdown.wait_for(|stop| *stop) => {}
            }
        }
        Ok(())
    }

    /// Until the database answered once and gave the cluster's secret; `None` if the node stopped first.
    async fn first_contact(&mut self) -> Result<Option<[u8; 32]>, ServeError> {
        let retry = self.node.postgres.retry_interval();
        loop {
            match self.connect().await {
                Ok(()) => return Ok(self.secret),
                Err(RoundError::Fatal(error)) => return Err(error),
                Err(RoundError::Database(error)) => {
                    self.control = None;
                    tracing::warn!(%error, "database unreachable; retrying");
                }
            }
            let mut shutdown = self.shutdown.clone();
            tokio::select! {
                () = tokio::time::sleep(retry) => {}
                _ = shutdown.wait_for(|stop| *stop) => return Ok(None),
            }
        }
    }

    /// (Re)connects the control connection (migrating the schema) and reads the cluster's secret once.
    async fn connect(&mut self) -> Result<(), RoundError> {
        let postgres = self.node.postgres;
        let timeout = postgres.options().call_timeout();
        if self.control.is_none() {
            let mut client = veil_postgres::connect(&postgres.options()).await?;
            bounded(
                timeout,
                veil_postgres::migrations::run(
                    &mut client,
                    postgres.options().session_guard.as_millis(),
                ),
            )
            .await
            .map_err(|error| match error {
                StoreError::Incompatible(_) => RoundError::Fatal(ServeError::Store(error)),
                other => RoundError::Database(other),
            })?;
            tracing::info!(node = %postgres.node_id, "connected to the database");
            self.control = Some(client);
        }
        let client = self
            .control
            .as_ref()
            .ok_or(RoundError::Database(StoreError::Closed))?;
        if self.secret.is_none() {
            self.secret = Some(
                bounded(
                    timeout,
                    veil_postgres::secret::load_or_create(client, rand::random),
                )
                .await?,
            );
        }
        Ok(())
    }

    /// One round as a follower: (re)connect, sync the clock, try to take the lease, else follow its holder.
    async fn round(&mut self) -> Result<Option<Lease>, RoundError> {
        let postgres = self.node.postgres;
        let timeout = postgres.options().call_timeout();
        self.connect().await?;
        let client = self
            .control
            .as_ref()
            .ok_or(RoundError::Database(StoreError::Closed))?;
        bounded(timeout, self.clock.sync(client)).await?;
        let addrs = LeaderAddrs {
            rpc: self.rpc_addr.clone(),
        };
        let ttl = postgres.lease_ttl();
        if let Some(lease) = bounded(
            timeout,
            lease::try_acquire(client, &postgres.node_id, &addrs, ttl),
        )
        .await?
        {
            return Ok(Some(lease));
        }
        match bounded(timeout, lease::holder(client)).await? {
            Some(holder) => self.follow(&holder),
            None => self.route_nowhere(),
        }
        Ok(None)
    }

    fn follow(&self, holder: &lease::LeaseHolder) {
        let Some(routing) = &self.routing else {
            return;
        };
        if routing.follows().as_deref() != Some(holder.addrs.rpc.as_str()) {
            tracing::info!(leader = %holder.node, epoch = holder.epoch, rpc = %holder.addrs.rpc, "following the leader");
        }
        routing.follow(&holder.addrs.rpc);
        self.set_ready(routing.served());
    }

    /// No node serves now, as far as this node can tell: every call answers "unavailable".
    fn route_nowhere(&self) {
        if let Some(routing) = &self.routing {
            routing.nobody();
        }
        self.set_ready(false);
    }

    fn set_ready(&self, ready: bool) {
        if let Some(readiness) = &self.readiness {
            let phase = if ready {
                veil_admin::Phase::Ready
            } else {
                veil_admin::Phase::Starting
            };
            readiness.set(phase);
        }
    }

    /// One term as the leader, until it ends; every error ends it (and is logged).
    async fn lead(&mut self, lease: Lease) {
        let started = Instant::now();
        tracing::info!(node = %lease.node, epoch = lease.epoch, "took the leader lease; loading the queues");
        // Until the engine is rebuilt no node serves: the previous leader's route is gone.
        self.route_nowhere();
        let (opened, renewed_at) = self.open_renewing(&lease).await;
        let (store, engine) = match opened {
            Ok(opened) => opened,
            Err(error) => {
                tracing::warn!(%error, "cannot open the store as the leader; stepping down");
                self.step_down_lease(&lease).await;
                return;
            }
        };
        tracing::info!(
            epoch = lease.epoch,
            elapsed_ms = started.elapsed().as_millis() as u64,
            "leading: engine rebuilt from the database"
        );
        let gate = TermGate::new(renewed_at, self.usable_term());
        let open = gate.clone();
        engine.gate_serving(Box::new(move || open.open()));
        let sweeper = crate::spawn_sweeper(engine.clone());
        let mover = crate::spawn_move_task_driver(engine.clone());
        if let Some(routing) = &self.routing {
            routing.lead(engine.clone());
        }
        self.set_ready(true);
        let why = self.hold(&lease, &store, &gate).await;
        tracing::warn!(
            epoch = lease.epoch,
            reason = why,
            "leaving the leader's term"
        );
        // New calls answer "unavailable" until the next leader is known; long polls end at once.
        self.route_nowhere();
        engine.shutdown();
        sweeper.abort();
        mover.abort();
        drain(&engine).await;
        drop(engine);
        store.close();
        if *self.shutdown.borrow() {
            self.step_down_lease(&lease).await;
        }
    }

    /// Opens the store and rebuilds the engine while renewing the lease, so that a long load does not let it
    /// lapse under the loader; returns the last successful renewal. Losing the lease meanwhile fails the open.
    async fn open_renewing(
        &mut self,
        lease: &Lease,
    ) -> (Result<(Arc<PgStore>, Arc<Engine>), ServeError>, Instant) {
        let ttl = self.node.postgres.lease_ttl();
        let mut renewed_at = Instant::now();
        let opening = self.open(lease);
        tokio::pin!(opening);
        let mut lost = false;
        loop {
            tokio::select! {
                opened = &mut opening => {
                    if lost {
                        if let Ok((store, _)) = &opened {
                            store.close();
                        }
                        let error = ServeError::Cluster("the lease was lost while loading".into());
                        return (Err(error), renewed_at);
                    }
                    return (opened, renewed_at);
                }
                () = tokio::time::sleep(ttl / 4), if !lost => {
                    let attempt = Instant::now();
                    match self.renew(lease).await {
                        Ok(true) => renewed_at = attempt,
                        Ok(false) => lost = true,
                        Err(error) => tracing::warn!(%error, "cannot renew the leader lease while loading"),
                    }
                }
            }
        }
    }

    /// Opens the store fenced by `lease` and rebuilds the engine from it, off the async threads (both block).
    fn open(
        &self,
        lease: &Lease,
    ) -> impl std::future::Future<Output = Result<(Arc<PgStore>, Arc<Engine>), ServeError>> + 'static
    {
        let options = self.node.postgres.options();
        let epoch = lease.epoch;
        let clock = self.clock.clone();
        let secret = self.secret;
        async move {
            let secret = secret.ok_or(ServeError::Store(StoreError::Closed))?;
            open_blocking(options, epoch, clock, secret).await
        }
    }
}

/// `PgStore::open` and `Engine::open` block (the store's start-up reads, the index rebuild): off the async
/// threads.
async fn open_blocking(
    options: veil_postgres::PgOptions,
    epoch: i64,
    clock: DbClock,
    secret: [u8; 32],
) -> Result<(Arc<PgStore>, Arc<Engine>), ServeError> {
    tokio::task::spawn_blocking(move || -> Result<_, ServeError> {
        let store = Arc::new(PgStore::open(
            options,
            veil_postgres::Scope::Leader { epoch },
        )?);
        let engine = Arc::new(Engine::open(
            store.clone(),
            Arc::new(clock),
            ReceiptKey::new(secret),
        )?);
        Ok((store, engine))
    })
    .await
    .map_err(|error| ServeError::Cluster(format!("opening the store failed: {error}")))?
}

/// Waits until the requests of a term let go of its engine (each holds it while it runs), at most
/// `DRAIN_MS_MAX`: the store then closes under whatever is left, which fails as unavailable.
async fn drain(engine: &Arc<Engine>) {
    let deadline = Instant::now() + Duration::from_millis(DRAIN_MS_MAX);
    while Arc::strong_count(engine) > 1 {
        if Instant::now() >= deadline {
            tracing::warn!("requests did not drain in time; closing the store under them");
            return;
        }
        tokio::time::sleep(Duration::from_millis(DRAIN_POLL_MS)).await;
    }
}

impl Member<'_, '_> {
    /// How long after a successful renewal began this node may count on its lease.
    fn usable_term(&self) -> Duration {
        self.node.postgres.lease_ttl() * (100 - LEASE_MARGIN_PERCENT) / 100
    }

    /// Holds the lease until the term must end; says why. Every renewal extends `gate`.
    async fn hold(&mut self, lease: &Lease, store: &PgStore, gate: &TermGate) -> &'static str {
        let postgres = self.node.postgres;
        let ttl = postgres.lease_ttl();
        let usable = self.usable_term();
        let mut renewed_at = gate.renewed_at();
        let mut failed = store.failed();
        let mut tick = tokio::time::interval(ttl / 4);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut shutdown = self.shutdown.clone();
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                _ = failed.wait_for(|failed| *failed) => return "the store failed",
                _ = shutdown.wait_for(|stop| *stop) => return "the node is stopping",
            }
            let attempt = Instant::now();
            // A renewal may not outlast the term it would extend: a database that hangs rather than refuses
            // must not keep this node leading past its lease while the call waits for its own timeout.
            let left = usable.saturating_sub(renewed_at.elapsed());
            match tokio::time::timeout(left, self.renew(lease)).await {
                Ok(Ok(true)) => {
                    renewed_at = attempt;
                    gate.renewed(attempt);
                }
                Ok(Ok(false)) => return "another node took the lease",
                Ok(Err(error)) => {
                    tracing::warn!(%error, "cannot renew the leader lease");
                    self.control = None;
                }
                Err(_) => {
                    self.control = None;
                    return "the lease could not be renewed in time";
                }
            }
            if renewed_at.elapsed() >= usable {
                return "the lease could not be renewed in time";
            }
        }
    }

    async fn renew(&mut self, lease: &Lease) -> Result<bool, StoreError> {
        let postgres = self.node.postgres;
        let timeout = postgres.options().call_timeout();
        if self.control.is_none() {
            self.control = Some(veil_postgres::connect(&postgres.options()).await?);
        }
        let client = self.control.as_ref().ok_or(StoreError::Closed)?;
        let renewed = bounded(timeout, lease::renew(client, lease, postgres.lease_ttl())).await?;
        // The clock moves with the renewals: its offset never grows stale while this node leads.
        bounded(timeout, self.clock.sync(client)).await?;
        Ok(renewed)
    }

    /// Gives the lease up at once (best effort): the next node need not wait for it to lapse.
    async fn step_down_lease(&mut self, lease: &Lease) {
        let timeout = self.node.postgres.options().call_timeout();
        if let Some(client) = &self.control {
            if let Err(error) = bounded(timeout, lease::release(client, lease)).await {
                tracing::debug!(%error, "could not release the lease; it will lapse");
            }
        }
    }
}

/// Whether a leader may still answer from memory: until the usable part of its term after the last
/// renewal that succeeded, on this node's monotonic clock, which keeps running while the process is paused.
/// The engine asks it for every request (`Engine::serving`), so a leader resumed after a pause longer than
/// its lease answers "unavailable" at once, before its renewal loop has even run and found the lease gone,
/// and through the connections it still holds while its term drains.
#[derive(Clone)]
struct TermGate {
    base: Instant,
    usable: Duration,
    /// When the last successful renewal began, in microseconds after `base`; written by the renewal loop,
    /// read by every request.
    renewed_us: Arc<AtomicU64>,
}

impl TermGate {
    fn new(renewed_at: Instant, usable: Duration) -> Self {
        Self {
            base: renewed_at,
            usable,
            renewed_us: Arc::new(AtomicU64::new(0)),
        }
    }

    fn renewed(&self, at: Instant) {
        let us = at.saturating_duration_since(self.base).as_micros();
        self.renewed_us
            .fetch_max(u64::try_from(us).unwrap_or(u64::MAX), Ordering::SeqCst);
    }

    fn renewed_at(&self) -> Instant {
        self.base + Duration::from_micros(self.renewed_us.load(Ordering::SeqCst))
    }

    fn open(&self) -> bool {
        self.renewed_at().elapsed() < self.usable
    }
}

/// A round failed: the database could not be used (retry), or it must not be (stop the node).
enum RoundError {
    Database(StoreError),
    Fatal(ServeError),
}

impl From<StoreError> for RoundError {
    fn from(error: StoreError) -> Self {
        Self::Database(error)
    }
}

impl From<ServeError> for RoundError {
    fn from(error: ServeError) -> Self {
        Self::Fatal(error)
    }
}

/// `call` bounded by `timeout`; a call that takes longer counts as the database being unavailable.
async fn bounded<T>(
    timeout: Duration,
    call: impl std::future::Future<Output = Result<T, StoreError>>,
) -> Result<T, StoreError> {
    tokio::time::timeout(timeout, call)
        .await
        .map_err(|_| StoreError::Unavailable("the database did not answer in time".into()))?
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_term_gate_is_open_only_within_the_usable_term_after_the_last_renewal() {
        let usable = Duration::from_secs(4);
        let long_ago = Instant::now() - Duration::from_secs(60);
        let gate = TermGate::new(long_ago, usable);
        assert!(
            !gate.open(),
            "the term after a renewal a minute ago is over"
        );
        gate.renewed(Instant::now() - Duration::from_secs(1));
        assert!(gate.open(), "a renewal a second ago holds for {usable:?}");
        gate.renewed(long_ago);
        assert!(gate.open(), "an older renewal does not shorten the term");
    }
}
