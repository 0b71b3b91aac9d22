//! A node of a cluster over PostgreSQL (docs/cluster.md, docs/decisions/0007-scale-out.md).
//!
//! Every node binds the four public listeners and puts a *door* behind each (`door.rs`): a TCP relay that
//! hands each client connection to wherever it can be served now. One node at a time holds the leader lease
//! (`veil_postgres::lease`) and runs the ordinary engine over `PgStore` on internal listeners whose addresses
//! the lease row publishes; every door relays to those, the leader's own included. While no node can serve
//! (the database is down, a new leader still loading), doors relay to this node's *unavailable* servers
//! (`unavailable.rs`), which answer every request with the protocol's "service unavailable".
//!
//! The node's loop: keep a control connection, measure the database clock, and try to take the lease every
//! retry interval; as a follower, point the doors at the holder. As the leader: open the store fenced by the
//! lease's epoch, rebuild the engine from the database, serve, renew the lease every quarter of its term, and
//! step down — stop serving, drop the engine — when a renewal fails past the term, the store fails (its
//! memory may be ahead of the database, so only a reload is safe), or the node stops (then it releases the
//! lease so the next node need not wait for it to lapse). Within a term the engine answers only while the lease
//! is surely held (`TermGate`): a leader resumed from a pause past its lease answers "unavailable" at once.

pub mod door;
pub mod settings;
pub mod unavailable;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio_postgres::Client;
use veil_core::{Engine, ReceiptKey, StoreError};
use veil_postgres::lease::{self, LeaderAddrs, Lease};
use veil_postgres::{DbClock, PgStore};
use veil_telemetry::Telemetry;

use self::door::{Route, Targets};
use self::settings::PostgresSettings;
use crate::config::Settings;
use crate::{bind, Admin, ServeError, Sockets, TlsConfigs};

/// A renewal must succeed this long before the lease's end as this node measures it, or the leader steps
/// down: the margin covers the database's and this node's clocks running at slightly different rates.
const LEASE_MARGIN_PERCENT: u32 = 20;
/// How long a stepping-down leader waits for its requests to drain before it drops the engine anyway.
const DRAIN_MS_MAX: u64 = 5_000;

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
    let (route, routes) = watch::channel(Route::Unavailable);
    let unavailable = unavailable::start(node.tls, settings).await?;
    let doors = door::open_all(settings, routes, unavailable.addrs(), shutdown.clone()).await?;
    tracing::info!(
        node = %node.postgres.node_id,
        sqs = %settings.sqs_listen,
        azure = %settings.azure.listen,
        kubemq = %settings.kubemq.listen,
        admin = %settings.admin.listen,
        "cluster node listening; looking for the database and the leader"
    );
    let mut member = Member {
        node: &node,
        route,
        clock: DbClock::default(),
        control: None,
        secret: None,
        shutdown,
    };
    let result = member.run().await;
    member.route.send_replace(Route::Unavailable);
    doors.stop().await;
    unavailable.stop().await;
    tracing::info!("node stopped; bye");
    result
}

/// The node's state between terms.
struct Member<'a, 'n> {
    node: &'a Node<'n>,
    /// Where the doors relay new connections.
    route: watch::Sender<Route>,
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
        // Bound before each attempt to lead, so that the lease row can name them.
        let mut internal: Option<Internal> = None;
        while !*self.shutdown.borrow() {
            match self.round(&mut internal).await {
                Ok(Some(lease)) => {
                    // Bound just before; taken for the term (the next attempt binds new ones).
                    if let Some(sockets) = internal.take() {
                        self.lead(lease, sockets).await;
                    }
                }
                Ok(None) => {}
                Err(RoundError::Fatal(error)) => return Err(error),
                Err(RoundError::Database(error)) => {
                    if self.control.take().is_some() {
                        tracing::warn!(%error, "database unreachable; answering 'service unavailable'");
                    }
                    self.route.send_replace(Route::Unavailable);
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

    /// One round as a follower: (re)connect, sync the clock, try to take the lease, else follow its holder.
    async fn round(
        &mut self,
        internal: &mut Option<Internal>,
    ) -> Result<Option<Lease>, RoundError> {
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
        bounded(timeout, self.clock.sync(client)).await?;
        if internal.is_none() {
            *internal = Some(Internal::bind(postgres).await?);
        }
        let addrs = internal.as_ref().map(Internal::addrs).unwrap_or_default();
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
            Some(holder) => {
                let targets = Targets::resolve(&holder.addrs).await;
                let changed = self.route.send_if_modified(|route| {
                    let next = targets.clone().map_or(Route::Unavailable, Route::Leader);
                    let changed = *route != next;
                    *route = next;
                    changed
                });
                if changed {
                    tracing::info!(leader = %holder.node, epoch = holder.epoch, "following the leader");
                }
            }
            None => {
                self.route.send_replace(Route::Unavailable);
            }
        }
        Ok(None)
    }

    /// One term as the leader, until it ends; every error ends it (and is logged).
    async fn lead(&mut self, lease: Lease, internal: Internal) {
        let started = Instant::now();
        tracing::info!(node = %lease.node, epoch = lease.epoch, "took the leader lease; loading the queues");
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
        let Some(targets) = Targets::of(&internal) else {
            tracing::warn!("the internal listeners have no address; stepping down");
            self.step_down_lease(&lease).await;
            return;
        };
        let usable = self.usable_term();
        let gate = TermGate::new(renewed_at, usable);
        let open = gate.clone();
        engine.gate_serving(Box::new(move || open.open()));
        let (term_end, term_ended) = watch::channel(false);
        let term = self.serve(engine.clone(), internal, term_ended.clone());
        let serving = tokio::spawn(term);
        self.route.send_replace(Route::Leader(targets));
        let why = self.hold(&lease, &store, &gate).await;
        tracing::warn!(
            epoch = lease.epoch,
            reason = why,
            "leaving the leader's term"
        );
        // New connections go to the unavailable servers until the next leader is known.
        self.route.send_replace(Route::Unavailable);
        term_end.send_replace(true);
        let mut serving = serving;
        match tokio::time::timeout(Duration::from_millis(DRAIN_MS_MAX), &mut serving).await {
            Ok(Ok(Err(error))) => tracing::warn!(%error, "serving ended with an error"),
            Ok(Err(error)) => tracing::warn!(%error, "serving task failed"),
            Err(_) => {
                // Its listeners and connections go with it: nothing of this term may keep serving.
                tracing::warn!("requests did not drain in time; dropping them");
                serving.abort();
            }
            Ok(Ok(Ok(()))) => {}
        }
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
        let store = Arc::new(PgStore::open(options, Some(epoch))?);
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

impl Member<'_, '_> {
    /// Serves the engine on the internal listeners until `term_ended` turns true.
    fn serve(
        &self,
        engine: Arc<Engine>,
        internal: Internal,
        term_ended: watch::Receiver<bool>,
    ) -> impl std::future::Future<Output = Result<(), ServeError>> + Send + 'static {
        let settings = self.node.settings.clone();
        let telemetry = self.node.telemetry.clone();
        let tls = self.node.tls.clone();
        let secret = self
            .secret
            .map(|secret| secret.to_vec())
            .unwrap_or_default();
        async move {
            let admin = Admin::start(
                internal.admin,
                tls.admin.clone(),
                settings.listeners.admin.limits.clone(),
                settings.admin.guard(),
                &telemetry,
                None,
            );
            admin.engine_opened(&engine);
            let sampler = admin.series.spawn_sampler(engine.clone());
            admin.readiness.set(veil_admin::Phase::Ready);
            let stopped =
                crate::stop_engine_on(engine.clone(), term_ended, Some(admin.readiness.clone()));
            let served = crate::serve_engine(
                engine,
                secret,
                internal.sockets,
                &settings,
                &telemetry,
                &tls,
                stopped,
            )
            .await;
            sampler.abort();
            admin.stop().await;
            served
        }
    }

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

/// The internal listeners a leader serves on, bound before it asks for the lease.
pub struct Internal {
    sockets: Sockets,
    admin: TcpListener,
    advertise: String,
}

impl Internal {
    async fn bind(postgres: &PostgresSettings) -> Result<Self, ServeError> {
        let any = SocketAddr::new(postgres.bind, 0);
        Ok(Self {
            sockets: Sockets {
                sqs: bind(any).await?,
                azure: bind(any).await?,
                kubemq: bind(any).await?,
            },
            admin: bind(any).await?,
            advertise: postgres.advertise.clone(),
        })
    }

    fn port(listener: &TcpListener) -> u16 {
        listener.local_addr().map(|addr| addr.port()).unwrap_or(0)
    }

    /// The addresses the lease row publishes: the advertised host with each listener's port.
    fn addrs(&self) -> LeaderAddrs {
        let at = |listener: &TcpListener| format!("{}:{}", self.advertise, Self::port(listener));
        LeaderAddrs {
            sqs: at(&self.sockets.sqs),
            azure: at(&self.sockets.azure),
            kubemq: at(&self.sockets.kubemq),
            admin: at(&self.admin),
        }
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
