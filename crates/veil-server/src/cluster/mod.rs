//! A node of a cluster over PostgreSQL (docs/cluster.md, docs/decisions/0011-partitioned-ownership.md).
//!
//! Every node serves every protocol and the admin endpoint on its own listeners, TLS included, and calls the
//! engine through one `Dispatch` whose transport is this node's [`Routing`] (crates/veil-cluster). The
//! queues are spread over a fixed number of partitions (`veil_postgres::partition`), each owned by one node
//! at a time under its own lease (`veil_postgres::partition_lease`): the owner runs an engine over a
//! `PgStore` that holds only that partition's queues and fences its writes with the partition's epoch. A
//! call on a queue this node owns runs on its engine; one on a queue another node owns goes to that node's
//! internal RPC, whose address the lease row publishes; a list or an overview asks every owner. The client's
//! own address stays with its request on the node it entered (audit log, delivery history, Azure's `sip`).
//! While a partition has no owner that can serve (the database is down, a new owner still loading), its
//! calls fail as unavailable and each protocol answers its "service unavailable".
//!
//! The node's loop, every round (a quarter of the lease term, or the retry interval if shorter): keep a
//! control connection, fix the partition count if no node has, measure the database clock, renew every
//! lease it holds in one statement, say it is alive, read the leases, route each partition, and follow the
//! ownership plan (crates/veil-cluster/src/ownership.rs): take lapsed partitions up to its fair share,
//! hand one surplus partition back — drain, then release — when another node is short. Taking a partition
//! opens its store and rebuilds its engine off the loop, renewing meanwhile. A partition is left — route
//! nowhere, drain, drop the engine — when its renewal fails past the term, its store fails (memory may be
//! ahead of the database, so only a reload is safe), or the node stops (then every lease is released so the
//! other nodes need not wait for them to lapse). Within a term an engine answers only while its lease is
//! surely held (`TermGate`): a node resumed from a pause past its leases answers "unavailable" at once, to
//! its own clients and to the calls other nodes send it.

pub mod settings;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, watch};
use tokio::task::{JoinHandle, JoinSet};
use tokio_postgres::Client;
use veil_cluster::ownership::{self, Slot};
use veil_cluster::routing::Routing;
use veil_cluster::token::Tokens;
use veil_core::dispatch::Remote;
use veil_core::inbox::Placement;
use veil_core::partition::Partition;
use veil_core::{Clock, Dispatch, Engine, ReceiptKey, StoreError};
use veil_postgres::lease::LeaderAddrs;
use veil_postgres::partition::Shard;
use veil_postgres::partition_lease::{self, PartitionLease, PartitionRow};
use veil_postgres::{DbClock, PgStore, Scope, SharedWriter};
use veil_telemetry::Telemetry;

use self::settings::ClusterSettings;
use crate::config::Settings;
use crate::{bind, Admin, ServeError, Sockets, TlsConfigs};

/// A renewal must succeed this long before the lease's end as this node measures it, or the owner steps
/// down: the margin covers the database's and this node's clocks running at slightly different rates.
const LEASE_MARGIN_PERCENT: u32 = 20;
/// How long a partition's stepping-down owner waits for its requests to drain before it drops the engine
/// anyway.
const DRAIN_MS_MAX: u64 = 5_000;
/// How often a draining owner looks whether its last request let go of the engine.
const DRAIN_POLL_MS: u64 = 10;
/// How often an owned partition looks into its inbox when the last look found it empty: the longest a
/// message moved here from another partition (a dead letter, a re-queue, a move task's) waits to arrive.
const INBOX_POLL_MS: u64 = 100;
/// How often a node tries to apply the config file's `[[queues]]` before it gives up, and how long it waits
/// between tries: a minute, time for the cluster's partitions to find their owners.
const DECLARED_QUEUES_ATTEMPTS_MAX: u32 = 30;
const DECLARED_QUEUES_RETRY: Duration = Duration::from_secs(2);
/// How often a node tries to bind its internal RPC port again after the listener ended, and the pause
/// between tries: then it gives up its partitions and stops, so that other nodes serve them.
const RPC_REBIND_ATTEMPTS_MAX: u32 = 20;
const RPC_REBIND_PAUSE: Duration = Duration::from_millis(250);

/// What a node runs with.
pub struct Node<'a> {
    pub settings: &'a Settings,
    pub postgres: &'a ClusterSettings,
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
        shards: postgres.shard_options(),
        controls: std::iter::repeat_with(|| None)
            .take(1 + postgres.pg.shards.len())
            .collect(),
        known: BTreeMap::new(),
        writers: std::iter::repeat_with(|| None)
            .take(1 + postgres.pg.shards.len())
            .collect(),
        serving: watch::channel(BTreeMap::new()).0,
        secret: None,
        tokens: None,
        count: None,
        share: 1,
        owned: BTreeMap::new(),
        loading: BTreeMap::new(),
        opening: JoinSet::new(),
        draining: BTreeMap::new(),
        drained: mpsc::unbounded_channel(),
        faults: None,
        shutdown: shutdown.clone(),
    };
    // The cluster's TLS is read before anything else: a bad file stops the start, not a later handshake.
    let cluster_tls = match &postgres.tls {
        Some(files) => {
            let tls = veil_cluster::tls::ClusterTls::load(files)?;
            tracing::info!(ca = %files.ca.display(), cert = %files.cert.cert.display(), "cluster RPC: TLS between nodes, peers authenticated by the cluster's CA");
            reload_on_sighup(tls.clone());
            Some(tls)
        }
        None if postgres.insecure_plaintext => {
            tracing::warn!(
                bind = %postgres.bind,
                advertise = %postgres.advertise,
                "INSECURE: the cluster RPC is PLAINTEXT beyond loopback (--cluster-insecure-plaintext): the cluster \
                 token and every message body cross the network in clear, and anyone who captures the token can \
                 run any engine call; give the nodes TLS (--cluster-ca, --cluster-cert, --cluster-key)"
            );
            None
        }
        None => {
            tracing::info!("cluster RPC: plaintext on loopback");
            None
        }
    };
    let rpc_server_tls = cluster_tls
        .as_ref()
        .map(|tls| tls.server_config())
        .transpose()?;
    let rpc_client_tls = cluster_tls
        .as_ref()
        .map(|tls| tls.client_config())
        .transpose()?;
    tracing::info!(node = %postgres.node_id, "cluster node starting; waiting for the database");
    // The cluster's secret keys receipts and the internal RPC's token: nothing is served before it is known.
    let Some(secret) = member.first_contact().await? else {
        return Ok(());
    };
    let tokens = Tokens::new(&secret);
    member.tokens = Some(tokens.clone());
    // A cluster that rotated its token before this node started: send and accept its keys from the start.
    if let Err(RoundError::Database(error)) = member.refresh_tokens().await {
        tracing::warn!(%error, "the cluster token's keys could not be read yet; the next round reads them");
    }
    let routing = Routing::new(tokens.clone(), rpc_client_tls);
    if let Some(count) = member.count {
        routing.set_count(count);
    }
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
    let declared = spawn_declared_queues(dispatch.clone(), settings.clone());
    let sockets = Sockets {
        sqs: bind(settings.sqs_listen).await?,
        azure: bind(settings.azure.listen).await?,
        kubemq: bind(settings.kubemq.listen).await?,
    };
    crate::log_listening(settings);
    let (stop_serving, serving_stopped) = watch::channel(false);
    let (fault, faults) = mpsc::unbounded_channel();
    let serving = {
        let fault = fault.clone();
        let (settings, telemetry, tls) =
            (settings.clone(), node.telemetry.clone(), node.tls.clone());
        let dispatch = dispatch.clone();
        let protocols = tokio::spawn(async move {
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
        });
        tokio::spawn(async move {
            let served = protocols
                .await
                .unwrap_or_else(|error| Err(ServeError::Serving(error.to_string())));
            // Serving that fails, whatever the cause (a listener that ended, a setting that no longer holds,
            // a panic), is the node's fault as the internal port's is: give up the partitions and stop,
            // rather than stay ready serving some protocols or none. (After a stop nobody reads the fault.)
            if let Err(error) = &served {
                let _ = fault.send(ServeError::Serving(error.to_string()));
            }
            served
        })
    };
    let rpc = spawn_rpc(
        rpc_listener,
        rpc_local,
        rpc_server_tls,
        routing.clone(),
        tokens,
        shutdown,
        fault,
    );
    member.rpc_addr = format!("{}:{}", postgres.advertise, rpc_local.port());
    member.routing = Some(routing.clone());
    member.readiness = Some(admin.readiness.clone());
    member.faults = Some(faults);
    let importer = (member.shards.len() > 1)
        .then(|| spawn_importer(member.shards.clone(), member.serving.subscribe()));
    let result = member.run().await;
    if let Some(importer) = importer {
        importer.abort();
    }
    admin.readiness.set(veil_admin::Phase::Stopping);
    routing.nobody_anywhere();
    stop_serving.send_replace(true);
    match serving.await {
        Ok(Err(error)) => tracing::warn!(%error, "serving ended with an error"),
        Err(error) => tracing::warn!(%error, "the serving supervisor failed"),
        Ok(Ok(())) => {}
    }
    if let Err(error) = rpc.await {
        tracing::warn!(%error, "the cluster RPC task failed");
    }
    sampler.abort();
    declared.abort();
    admin.stop().await;
    tracing::info!("node stopped; bye");
    result
}

/// The node's state between rounds.
struct Member<'a, 'n> {
    node: &'a Node<'n>,
    /// Where this node's engine calls go; `None` only before the first contact with the database.
    routing: Option<Routing>,
    /// This node's internal RPC address as other nodes reach it (`host:port`), published in its leases.
    rpc_addr: String,
    /// The admin endpoint's `/readyz`: ready while some node serves every partition.
    readiness: Option<veil_admin::Readiness>,
    /// Every engine's clock on this node; synced every round.
    clock: DbClock,
    /// How to reach each shard's database, the home (shard 0, `store`) first (docs/cluster.md "Shards").
    shards: Vec<veil_postgres::PgOptions>,
    /// One control connection per shard (the home's: clock, membership and its leases; another's: its
    /// leases), in `shards`' order; `None` after a failure, reopened on the next round.
    controls: Vec<Option<Client>>,
    /// Every partition's lease as last read: a shard out of reach keeps its last rows for the plan.
    known: BTreeMap<Partition, PartitionRow>,
    /// One writer per shard for every partition this node owns there (veil_postgres::SharedWriter), started
    /// with the first partition it loads on that shard: its group commits gather every partition's writes.
    writers: Vec<Option<Arc<SharedWriter>>>,
    /// The leases of the partitions this node serves, for the import of moves between shards
    /// (`spawn_importer`); written on every install and leave.
    serving: watch::Sender<BTreeMap<Partition, PartitionLease>>,
    /// The cluster's shared secret, read once from the database.
    secret: Option<[u8; 32]>,
    /// The internal RPC's tokens, sent and accepted (shared with the routing and the RPC server), set from the
    /// database every round: a rotation changes them (docs/cluster.md "Rotating the cluster token").
    tokens: Option<Tokens>,
    /// The cluster's partition count, once fixed.
    count: Option<u32>,
    /// This node's fair share of the partitions as of the last round (⌈P / live nodes⌉): the partitions
    /// it may hold split its connections.
    share: usize,
    /// The partitions this node serves.
    owned: BTreeMap<Partition, Owned>,
    /// Partitions whose lease this node holds while their store opens (in `opening`), with their gates.
    loading: BTreeMap<Partition, (PartitionLease, TermGate)>,
    /// The opens in flight; each answers with its lease.
    opening: JoinSet<Opened>,
    /// Partitions handed back, whose leases are kept (and renewed) until their engines drained, then
    /// released: the next owner starts when no request of this node's is left on them.
    draining: BTreeMap<Partition, (PartitionLease, TermGate)>,
    /// Says which partition finished draining.
    drained: (
        mpsc::UnboundedSender<Partition>,
        mpsc::UnboundedReceiver<Partition>,
    ),
    /// A listener of this node that ended for good (the internal RPC could not be restarted, or serving the
    /// public listeners failed): the node gives up its leases and stops rather than stay half alive.
    faults: Option<mpsc::UnboundedReceiver<ServeError>>,
    shutdown: watch::Receiver<bool>,
}

/// A partition this node serves.
struct Owned {
    lease: PartitionLease,
    store: Arc<PgStore>,
    engine: Arc<Engine>,
    gate: TermGate,
    sweeper: JoinHandle<()>,
    mover: JoinHandle<()>,
    /// Accepts what other partitions move into this one (`spawn_inbox_driver`).
    inbox: JoinHandle<()>,
}

/// Re-reads the cluster's CA bundle and this node's certificate on each SIGHUP, as the public listeners'
/// certificates are (docs/cluster.md "TLS between nodes"): new handshakes use them, open connections keep
/// theirs; a file that fails keeps what is in force.
fn reload_on_sighup(tls: Arc<veil_cluster::tls::ClusterTls>) {
    crate::listeners::on_each_sighup("the cluster's TLS", move || match tls.reload() {
        Ok(()) => tracing::info!(
            ca = %tls.ca_file().display(),
            "SIGHUP: the cluster's CA bundle and node certificate reloaded"
        ),
        Err(error) => tracing::error!(
            %error,
            "SIGHUP: the cluster's TLS NOT reloaded; what was in force stays"
        ),
    });
}

/// The next fault a listener reports; pending for ever without a channel.
async fn next_fault(
    faults: &mut Option<mpsc::UnboundedReceiver<ServeError>>,
) -> Option<ServeError> {
    match faults {
        Some(faults) => faults.recv().await,
        None => std::future::pending().await,
    }
}

/// Serves the internal RPC on `listener` (bound to `addr`) for the node's whole life. The accept loop under
/// it never ends on an accept error, so the server ending before `shutdown` is a fault: it is logged at
/// error and counted (`veil_listener_failures_total{listener="cluster"}`), and the port is bound again and
/// served — the leases publish its address, so it must come back on the same port. If it cannot be bound
/// again within `RPC_REBIND_ATTEMPTS_MAX` tries, `fault` tells the node, which gives up its leases and stops
/// (docs/security.md "Every listener's accept loop").
fn spawn_rpc(
    listener: tokio::net::TcpListener,
    addr: SocketAddr,
    tls: Option<Arc<rustls::ServerConfig>>,
    routing: Routing,
    tokens: Tokens,
    shutdown: watch::Receiver<bool>,
    fault: mpsc::UnboundedSender<ServeError>,
) -> JoinHandle<()> {
    let listener_name = veil_cluster::server::LISTENER;
    veil_telemetry::listeners().declare(listener_name);
    tokio::spawn(async move {
        let mut listener = listener;
        loop {
            let served = veil_cluster::server::serve(
                listener,
                tls.clone(),
                routing.clone(),
                tokens.clone(),
                shutdown.clone(),
            )
            .await;
            if *shutdown.borrow() {
                if let Err(error) = served {
                    tracing::warn!(%error, "the cluster RPC ended with an error");
                }
                return;
            }
            veil_telemetry::listeners().listener_failed(listener_name);
            match &served {
                Err(error) => {
                    tracing::error!(%error, %addr, "the cluster RPC listener ended while the node runs; binding it again")
                }
                Ok(()) => {
                    tracing::error!(%addr, "the cluster RPC listener ended while the node runs; binding it again")
                }
            }
            let mut attempt = 0;
            listener = loop {
                // The old listener closes as its accept loop ends, just after the server: the first tries
                // may find the port still taken.
                match tokio::net::TcpListener::bind(addr).await {
                    Ok(listener) => break listener,
                    Err(source) => {
                        attempt += 1;
                        if attempt >= RPC_REBIND_ATTEMPTS_MAX {
                            let _ = fault.send(ServeError::Listen { addr, source });
                            return;
                        }
                        let mut stop = shutdown.clone();
                        tokio::select! {
                            () = tokio::time::sleep(RPC_REBIND_PAUSE) => {}
                            _ = stop.wait_for(|stop| *stop) => return,
                        }
                    }
                }
            };
        }
    })
}

/// A finished open: the lease it was for, and the store and engine, or why not.
type Opened = (
    PartitionLease,
    Result<(Arc<PgStore>, Arc<Engine>), ServeError>,
);

impl Member<'_, '_> {
    async fn run(&mut self) -> Result<(), ServeError> {
        let tick = self.tick();
        while !*self.shutdown.borrow() {
            let round = self.round().await;
            if let Some(routing) = &self.routing {
                routing.set_reachable(round.is_ok());
            }
            match round {
                Ok(()) => {}
                Err(RoundError::Fatal(error)) => {
                    self.leave().await;
                    return Err(error);
                }
                Err(RoundError::Database(error)) => {
                    if self.drop_control(0) {
                        tracing::warn!(%error, "database unreachable; answering 'service unavailable'");
                    }
                    self.route_others_nowhere();
                }
            }
            self.leave_lapsed_terms();
            self.set_ready();
            let mut shutdown = self.shutdown.clone();
            tokio::select! {
                () = tokio::time::sleep(tick) => {}
                _ = shutdown.wait_for(|stop| *stop) => {}
                Some(opened) = self.opening.join_next(), if !self.opening.is_empty() => match opened {
                    Ok(opened) => self.install(opened).await,
                    Err(error) => tracing::warn!(%error, "opening a partition failed"),
                },
                Some(partition) = self.drained.1.recv() => self.release_drained(partition).await,
                Some(fault) = next_fault(&mut self.faults) => {
                    tracing::error!(error = %fault, "giving up every partition and stopping: other nodes take them over");
                    if let Some(readiness) = &self.readiness {
                        readiness.set(veil_admin::Phase::Stopping);
                    }
                    self.leave().await;
                    return Err(fault);
                }
            }
        }
        self.leave().await;
        Ok(())
    }

    /// How often the loop runs a round: often enough to renew the leases four times a term.
    fn tick(&self) -> Duration {
        let postgres = self.node.postgres;
        postgres.retry_interval().min(postgres.lease_ttl() / 4)
    }

    /// Until the database answered once and gave the cluster's secret; `None` if the node stopped first.
    async fn first_contact(&mut self) -> Result<Option<[u8; 32]>, ServeError> {
        let retry = self.node.postgres.retry_interval();
        loop {
            match self.connect().await {
                Ok(()) => return Ok(self.secret),
                Err(RoundError::Fatal(error)) => return Err(error),
                Err(RoundError::Database(error)) => {
                    self.drop_control(0);
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

    /// How many databases the partitions are spread over.
    fn shard_count(&self) -> u32 {
        self.shards.len() as u32
    }

    /// The shard `partition` lives on.
    fn shard_of(&self, partition: Partition) -> usize {
        Shard::of(partition, self.shard_count()) as usize
    }

    /// Shard `shard`'s control connection, while it has one.
    fn control(&self, shard: usize) -> Option<&Client> {
        self.controls.get(shard).and_then(Option::as_ref)
    }

    /// The home's control connection.
    fn home(&self) -> Result<&Client, RoundError> {
        self.control(0)
            .ok_or(RoundError::Database(StoreError::Closed))
    }

    /// Drops shard `shard`'s control connection; whether it had one.
    fn drop_control(&mut self, shard: usize) -> bool {
        self.controls
            .get_mut(shard)
            .and_then(Option::take)
            .is_some()
    }

    /// (Re)connects the home's control connection (migrating the schema), reads the cluster's secret once and
    /// fixes or learns the partition count once; then (re)connects every other shard, fixing its partitions.
    /// A shard other than the home out of reach fails only its own partitions.
    async fn connect(&mut self) -> Result<(), RoundError> {
        let postgres = self.node.postgres;
        let timeout = postgres.options().call_timeout();
        let shards = self.shard_count();
        if self.control(0).is_none() {
            let client = self.open_control(0).await?;
            tracing::info!(node = %postgres.node_id, "connected to the database");
            self.controls[0] = Some(client);
        }
        let client = self.controls[0]
            .as_mut()
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
        if self.count.is_none() {
            let home = Shard {
                index: 0,
                count: shards,
            };
            let count = fix_partitions(timeout, client, postgres.partitions, home).await?;
            if count != postgres.partitions {
                tracing::info!(
                    partitions = count,
                    asked = postgres.partitions,
                    "the cluster's partition count was fixed before; it stays"
                );
            }
            if let Some(routing) = &self.routing {
                routing.set_count(count);
            }
            self.count = Some(count);
        }
        for index in 1..shards as usize {
            if self.control(index).is_some() {
                continue;
            }
            match self.connect_shard(index).await {
                Ok(client) => {
                    tracing::info!(shard = index, "connected to the shard's database");
                    self.controls[index] = Some(client);
                }
                Err(RoundError::Database(error)) => {
                    tracing::debug!(%error, shard = index, "the shard's database is out of reach");
                }
                Err(fatal) => return Err(fatal),
            }
        }
        Ok(())
    }

    /// A control connection to shard `index`, its schema migrated.
    async fn open_control(&self, index: usize) -> Result<Client, RoundError> {
        let options = &self.shards[index];
        let mut client = veil_postgres::connect(options).await?;
        bounded(
            options.call_timeout(),
            veil_postgres::migrations::run(&mut client, options.session_guard.as_millis()),
        )
        .await
        .map_err(fatal_if_incompatible)?;
        Ok(client)
    }

    /// A control connection to shard `index` (not the home), its partitions fixed with the home's count.
    async fn connect_shard(&self, index: usize) -> Result<Client, RoundError> {
        let count = self.count.ok_or(RoundError::Database(StoreError::Closed))?;
        let mut client = self.open_control(index).await?;
        let shard = Shard {
            index: index as u32,
            count: self.shard_count(),
        };
        fix_partitions(self.shards[index].call_timeout(), &mut client, count, shard).await?;
        Ok(client)
    }

    /// Reads the token's rotated keys and puts in force what the database's time says (veil_postgres::rpc_keys):
    /// one round is far shorter than a rotation's step, so every node accepts a new key before any sends it.
    async fn refresh_tokens(&self) -> Result<(), RoundError> {
        let (Some(tokens), Some(secret)) = (&self.tokens, self.secret) else {
            return Ok(());
        };
        let timeout = self.node.postgres.options().call_timeout();
        let rotated = bounded(timeout, veil_postgres::rpc_keys::read(self.home()?)).await?;
        let keys = veil_postgres::rpc_keys::KeysInForce::at(self.clock.now(), secret, &rotated);
        let accepts = keys
            .accepts
            .iter()
            .map(|key| (key.generation, &key.secret[..]));
        if tokens.set((keys.sends.generation, &keys.sends.secret), accepts) {
            veil_telemetry::cluster_rpc().set_token_generation(keys.sends.generation);
            tracing::info!(
                sends = keys.sends.generation,
                accepts = ?keys.accepted_generations(),
                "the cluster token's keys in force changed"
            );
        }
        Ok(())
    }

    fn addrs(&self) -> LeaderAddrs {
        LeaderAddrs {
            rpc: self.rpc_addr.clone(),
        }
    }

    /// One round: connect, sync the clock, renew, say this node is alive, route, and follow the plan.
    async fn round(&mut self) -> Result<(), RoundError> {
        let postgres = self.node.postgres;
        let timeout = postgres.options().call_timeout();
        self.connect().await?;
        bounded(timeout, self.clock.sync(self.home()?)).await?;
        self.refresh_tokens().await?;
        self.renew().await?;
        self.leave_failed_stores();
        let ttl = postgres.lease_ttl();
        let addrs = self.addrs();
        let live = bounded(
            timeout,
            partition_lease::heartbeat(self.home()?, &postgres.node_id, &addrs, ttl),
        )
        .await?;
        self.read_leases().await?;
        self.route();
        let slots: Vec<Slot> = self
            .known
            .values()
            .map(|row| Slot {
                partition: row.partition,
                owner: row.live.then(|| row.node.clone()),
            })
            .collect();
        self.share = slots.len().div_ceil(live.len().max(1)).max(1);
        let plan = ownership::plan(&postgres.node_id, &live, &slots);
        if let Some(partition) = plan.hand_back {
            if self.owned.contains_key(&partition) {
                self.leave_partition(partition, "handing it back to a node below its share", true);
            }
        }
        for partition in plan.take {
            let shard = self.shard_of(partition);
            let Some(client) = self.control(shard) else {
                continue;
            };
            let attempt = Instant::now();
            let taken = bounded(
                timeout,
                partition_lease::try_acquire(client, partition, &postgres.node_id, &addrs, ttl),
            )
            .await;
            match taken {
                Ok(Some(lease)) => self.load(lease, attempt),
                Ok(None) => {}
                Err(error) if shard == 0 => return Err(error.into()),
                Err(error) => self.shard_lost(shard, &error),
            }
        }
        Ok(())
    }

    /// Reads every reachable shard's leases into `known`: the home's must answer; another shard that does not
    /// is dropped until the next round, its partitions kept as last read.
    async fn read_leases(&mut self) -> Result<(), RoundError> {
        let timeout = self.node.postgres.options().call_timeout();
        for shard in 0..self.shards.len() {
            let Some(client) = self.control(shard) else {
                continue;
            };
            match bounded(timeout, partition_lease::table(client)).await {
                Ok(rows) => {
                    for row in rows {
                        self.known.insert(row.partition, row);
                    }
                }
                Err(error) if shard == 0 => return Err(error.into()),
                Err(error) => self.shard_lost(shard, &error),
            }
        }
        Ok(())
    }

    /// Shard `shard` (not the home) stopped answering: its control connection goes, and the partitions on it
    /// this node does not serve answer "unavailable" until it answers again. Those this node serves go on
    /// while their terms last, as with the home.
    fn shard_lost(&mut self, shard: usize, error: &StoreError) {
        if self.drop_control(shard) {
            tracing::warn!(%error, shard, "a shard's database is out of reach; its other partitions answer 'service unavailable'");
        }
    }

    /// Routes every partition this node does not serve: to its live owner, or nowhere (also when its shard
    /// is out of reach, as for every partition while the home is).
    fn route(&self) {
        let Some(routing) = &self.routing else {
            return;
        };
        for row in self.known.values() {
            if self.owned.contains_key(&row.partition) {
                continue;
            }
            let reachable = self.control(self.shard_of(row.partition)).is_some();
            let elsewhere = reachable && row.live && row.node != self.node.postgres.node_id;
            if elsewhere && !row.addrs.rpc.is_empty() {
                if routing.route(row.partition) == veil_cluster::routing::RouteView::Nobody {
                    tracing::debug!(partition = row.partition, owner = %row.node, "following the owner");
                }
                routing.follow(row.partition, &row.addrs.rpc);
            } else {
                routing.nobody(row.partition);
            }
        }
    }

    /// The database is out of reach: no owner elsewhere can be known, so their partitions answer
    /// "unavailable"; this node's own serve on while their terms last.
    fn route_others_nowhere(&self) {
        let (Some(routing), Some(count)) = (&self.routing, self.count) else {
            return;
        };
        for partition in 0..count {
            if !self.owned.contains_key(&partition) {
                routing.nobody(partition);
            }
        }
    }

    fn set_ready(&self) {
        let (Some(readiness), Some(routing)) = (&self.readiness, &self.routing) else {
            return;
        };
        let phase = if routing.served() {
            veil_admin::Phase::Ready
        } else {
            veil_admin::Phase::Starting
        };
        readiness.set(phase);
    }

    /// How long after a successful renewal began this node may count on a lease.
    fn usable_term(&self) -> Duration {
        self.node.postgres.lease_ttl() * (100 - LEASE_MARGIN_PERCENT) / 100
    }

    /// Renews every lease this node holds, in one statement per shard bounded by the shortest term left there;
    /// leaves the partitions another node took. The home failing fails the round; another shard failing
    /// only drops its connection (its partitions' terms then run out unless a later round renews them).
    async fn renew(&mut self) -> Result<(), RoundError> {
        let mut held: Vec<(PartitionLease, TermGate)> = Vec::new();
        held.extend(self.owned.values().map(|o| (o.lease, o.gate.clone())));
        held.extend(self.loading.values().cloned());
        held.extend(self.draining.values().cloned());
        for shard in 0..self.shards.len() {
            let on_shard: Vec<(PartitionLease, TermGate)> = held
                .iter()
                .filter(|(lease, _)| self.shard_of(lease.partition) == shard)
                .cloned()
                .collect();
            match self.renew_on(shard, &on_shard).await {
                Ok(()) => {}
                Err(error) if shard == 0 => {
                    self.drop_control(0);
                    return Err(error.into());
                }
                Err(error) => self.shard_lost(shard, &error),
            }
        }
        Ok(())
    }

    /// Renews `held`, all on shard `shard`.
    async fn renew_on(
        &mut self,
        shard: usize,
        held: &[(PartitionLease, TermGate)],
    ) -> Result<(), StoreError> {
        if held.is_empty() {
            return Ok(());
        }
        let postgres = self.node.postgres;
        let left = held
            .iter()
            .map(|(_, gate)| gate.left())
            .min()
            .unwrap_or_default();
        let client = self.control(shard).ok_or(StoreError::Closed)?;
        let leases: Vec<PartitionLease> = held.iter().map(|(lease, _)| *lease).collect();
        let attempt = Instant::now();
        let renewal =
            partition_lease::renew(client, &postgres.node_id, &leases, postgres.lease_ttl());
        let still = tokio::time::timeout(left, renewal).await.map_err(|_| {
            StoreError::Unavailable("the leases could not be renewed in time".into())
        })??;
        for (lease, gate) in held {
            if still.contains(&lease.partition) {
                gate.renewed(attempt);
            }
        }
        let lost: Vec<Partition> = leases
            .iter()
            .map(|lease| lease.partition)
            .filter(|partition| !still.contains(partition))
            .collect();
        for partition in lost {
            self.loading.remove(&partition);
            self.draining.remove(&partition);
            self.leave_partition(partition, "another node took the lease", false);
        }
        Ok(())
    }

    /// Leaves every partition whose term ran out without a renewal (the database out of reach, or slow).
    fn leave_lapsed_terms(&mut self) {
        let lapsed: Vec<Partition> = self
            .owned
            .iter()
            .filter(|(_, owned)| !owned.gate.open())
            .map(|(partition, _)| *partition)
            .collect();
        for partition in lapsed {
            self.leave_partition(partition, "the lease could not be renewed in time", false);
        }
        self.loading.retain(|_, (_, gate)| gate.open());
        self.draining.retain(|_, (_, gate)| gate.open());
    }

    /// Leaves every partition whose store failed: its engine may be ahead of the database. The lease is
    /// released, so that whichever node takes it next reloads from the database.
    fn leave_failed_stores(&mut self) {
        let failed: Vec<Partition> = self
            .owned
            .iter()
            .filter(|(_, owned)| *owned.store.failed().borrow())
            .map(|(partition, _)| *partition)
            .collect();
        for partition in failed {
            self.leave_partition(partition, "the store failed", true);
        }
    }

    /// Takes `lease`'s partition: opens its store and rebuilds its engine off the loop (renewing meanwhile).
    fn load(&mut self, lease: PartitionLease, taken_at: Instant) {
        let (Some(secret), Some(count)) = (self.secret, self.count) else {
            return;
        };
        tracing::info!(
            partition = lease.partition,
            epoch = lease.epoch,
            "took a partition; loading its queues"
        );
        let gate = TermGate::new(taken_at, self.usable_term());
        self.loading.insert(lease.partition, (lease, gate));
        let options = self.partition_options(lease.partition);
        let writer = match self.writer(lease.partition) {
            Ok(writer) => writer,
            Err(error) => {
                tracing::warn!(%error, partition = lease.partition, "cannot start the shard's writer");
                self.loading.remove(&lease.partition);
                return;
            }
        };
        let scope = Scope::Partition {
            partition: lease.partition,
            count,
            epoch: lease.epoch,
        };
        let clock = self.clock.clone();
        self.opening.spawn(async move {
            let started = Instant::now();
            let opened = open_blocking(options, scope, writer, clock, secret).await;
            if opened.is_ok() {
                tracing::info!(
                    partition = lease.partition,
                    elapsed_ms = started.elapsed().as_millis() as u64,
                    "partition loaded"
                );
            }
            (lease, opened)
        });
    }

    /// One partition's connections, to its shard: the node's read pool shared among the partitions of its
    /// fair share, at least one each (its writes go to the shard's shared writer).
    fn partition_options(&self, partition: Partition) -> veil_postgres::PgOptions {
        let mut options = self.shards[self.shard_of(partition)].clone();
        options.pool_size = (options.pool_size / self.share).max(1);
        options
    }

    /// The writer of `partition`'s shard, started if it was not.
    fn writer(&mut self, partition: Partition) -> Result<Arc<SharedWriter>, StoreError> {
        let shard = self.shard_of(partition);
        if let Some(writer) = &self.writers[shard] {
            return Ok(writer.clone());
        }
        let writer = Arc::new(SharedWriter::start(self.shards[shard].clone())?);
        self.writers[shard] = Some(writer.clone());
        Ok(writer)
    }

    /// Serves a partition whose open finished, if its lease is still held.
    async fn install(&mut self, (lease, opened): Opened) {
        let held = self
            .loading
            .get(&lease.partition)
            .filter(|(held, _)| *held == lease)
            .map(|(_, gate)| gate.clone());
        let (store, engine) = match opened {
            Ok(opened) => opened,
            Err(error) => {
                tracing::warn!(%error, partition = lease.partition, "cannot open the partition's store; releasing it");
                self.loading.remove(&lease.partition);
                self.release(lease).await;
                return;
            }
        };
        let Some(gate) = held else {
            tracing::warn!(
                partition = lease.partition,
                "the lease was lost while loading"
            );
            close_off_loop(store);
            return;
        };
        self.loading.remove(&lease.partition);
        let open = gate.clone();
        // Nor once its store failed: the engine's memory may then hold changes that never committed (a receive
        // whose commit failed still hides its message there), until the next round drops the engine.
        let failed = store.failed();
        engine.gate_serving(Box::new(move || open.open() && !*failed.borrow()));
        let sweeper = crate::spawn_sweeper(engine.clone());
        let mover = crate::spawn_move_task_driver(engine.clone());
        let inbox = spawn_inbox_driver(engine.clone(), lease.partition);
        if let Some(routing) = &self.routing {
            routing.own(lease.partition, engine.clone());
        }
        self.serving.send_modify(|serving| {
            serving.insert(lease.partition, lease);
        });
        tracing::info!(
            partition = lease.partition,
            epoch = lease.epoch,
            "serving the partition"
        );
        self.owned.insert(
            lease.partition,
            Owned {
                lease,
                store,
                engine,
                gate,
                sweeper,
                mover,
                inbox,
            },
        );
    }

    /// Stops serving `partition`: new calls answer "unavailable" until its next owner is known, long polls
    /// end at once, and the engine drains off the loop. With `hand_back` the lease is kept until the drain
    /// ends, then released.
    fn leave_partition(&mut self, partition: Partition, why: &str, hand_back: bool) {
        let Some(owned) = self.owned.remove(&partition) else {
            return;
        };
        tracing::warn!(
            partition,
            epoch = owned.lease.epoch,
            reason = why,
            "leaving the partition"
        );
        if let Some(routing) = &self.routing {
            routing.nobody(partition);
        }
        self.serving.send_modify(|serving| {
            serving.remove(&partition);
        });
        if hand_back {
            self.draining
                .insert(partition, (owned.lease, owned.gate.clone()));
        }
        let drained = self.drained.0.clone();
        tokio::spawn(async move {
            retire(owned).await;
            let _loop_gone = drained.send(partition);
        });
    }

    /// Releases a handed-back partition once its engine drained.
    async fn release_drained(&mut self, partition: Partition) {
        if let Some((lease, _)) = self.draining.remove(&partition) {
            self.release(lease).await;
        }
    }

    /// Gives `lease` up at once (best effort): the next node need not wait for it to lapse.
    async fn release(&self, lease: PartitionLease) {
        let postgres = self.node.postgres;
        let timeout = postgres.options().call_timeout();
        if let Some(client) = self.control(self.shard_of(lease.partition)) {
            let released = partition_lease::release(client, &postgres.node_id, lease);
            if let Err(error) = bounded(timeout, released).await {
                tracing::debug!(%error, partition = lease.partition, "could not release a lease; it will lapse");
            }
        }
    }

    /// The node stops: every partition is left and drained together, every lease released, and the node
    /// counted out.
    async fn leave(&mut self) {
        self.opening.abort_all();
        if let Some(routing) = &self.routing {
            routing.nobody_anywhere();
        }
        let owned = std::mem::take(&mut self.owned);
        self.serving.send_modify(BTreeMap::clear);
        let mut leases: Vec<PartitionLease> = owned.values().map(|owned| owned.lease).collect();
        let mut retiring = JoinSet::new();
        for owned in owned.into_values() {
            retiring.spawn(retire(owned));
        }
        while retiring.join_next().await.is_some() {}
        leases.extend(self.loading.values().map(|(lease, _)| *lease));
        leases.extend(self.draining.values().map(|(lease, _)| *lease));
        for lease in leases {
            self.release(lease).await;
        }
        let postgres = self.node.postgres;
        if let Some(client) = self.control(0) {
            let left = partition_lease::leave(client, &postgres.node_id);
            if let Err(error) = bounded(postgres.options().call_timeout(), left).await {
                tracing::debug!(%error, "could not leave the node table; this node's row will lapse");
            }
        }
    }
}

/// Fixes (or learns) the partition count on one shard; a database fixed otherwise stops the node.
/// Applies the config file's `[[queues]]` once the cluster routes them: every node does, idempotently, and
/// until its partitions' owners answer a failure is retried (docs/cluster.md). A list that cannot apply (a
/// queue of the other kind) is logged as an error and left.
fn spawn_declared_queues(dispatch: Dispatch, settings: Settings) -> JoinHandle<()> {
    tokio::spawn(async move {
        for attempt in 1..=DECLARED_QUEUES_ATTEMPTS_MAX {
            match crate::apply_declared_queues(&dispatch, &settings).await {
                Ok(()) => return,
                Err(error) if attempt == DECLARED_QUEUES_ATTEMPTS_MAX => {
                    tracing::error!(%error, "the config file's [[queues]] could not be applied");
                }
                Err(error) => {
                    tracing::warn!(%error, attempt, "applying the config file's [[queues]]; retrying");
                    tokio::time::sleep(DECLARED_QUEUES_RETRY).await;
                }
            }
        }
    })
}

async fn fix_partitions(
    timeout: Duration,
    client: &mut Client,
    wanted: u32,
    shard: Shard,
) -> Result<u32, RoundError> {
    bounded(
        timeout,
        veil_postgres::partition::establish(client, wanted, shard),
    )
    .await
    .map_err(fatal_if_incompatible)
}

/// A database this binary must not use stops the node; any other failure is retried.
fn fatal_if_incompatible(error: StoreError) -> RoundError {
    match error {
        StoreError::Incompatible(_) => RoundError::Fatal(ServeError::Store(error)),
        other => RoundError::Database(other),
    }
}

/// Ends a partition's engine: its long polls, its timers, then — once its requests let go, at most
/// `DRAIN_MS_MAX` — its store.
async fn retire(owned: Owned) {
    owned.engine.shutdown();
    owned.sweeper.abort();
    owned.mover.abort();
    owned.inbox.abort();
    drain(&owned.engine).await;
    drop(owned.engine);
    close_off_loop(owned.store);
}

/// Closes a store (which waits for its writes in flight and its thread) off the async threads.
fn close_off_loop(store: Arc<PgStore>) {
    tokio::task::spawn_blocking(move || store.close());
}

/// `PgStore::open` and `Engine::open` block (the store's start-up reads, the index rebuild): off the async
/// threads.
async fn open_blocking(
    options: veil_postgres::PgOptions,
    scope: Scope,
    writer: Arc<SharedWriter>,
    clock: DbClock,
    secret: [u8; 32],
) -> Result<(Arc<PgStore>, Arc<Engine>), ServeError> {
    tokio::task::spawn_blocking(move || -> Result<_, ServeError> {
        let store = Arc::new(PgStore::open_shared(options, scope, &writer)?);
        let mut engine = Engine::open(store.clone(), Arc::new(clock), ReceiptKey::new(secret))?;
        if let Scope::Partition {
            partition, count, ..
        } = scope
        {
            engine = engine.placed(Placement { partition, count });
        }
        Ok((store, Arc::new(engine)))
    })
    .await
    .map_err(|error| ServeError::Cluster(format!("opening the store failed: {error}")))?
}

/// Accepts the entries of a partition's inbox (veil_core::inbox) as they come, until aborted: again at once
/// while a drain finds entries, after `INBOX_POLL_MS` when it found none or failed. One drain at a time, so no
/// entry is accepted twice.
fn spawn_inbox_driver(engine: Arc<Engine>, partition: Partition) -> JoinHandle<()> {
    tokio::spawn(async move {
        loop {
            match engine.drain_inbox().await {
                Ok(0) => {}
                Ok(_) => continue,
                Err(error) => {
                    tracing::warn!(%error, partition, "accepting the partition's inbox failed");
                }
            }
            tokio::time::sleep(Duration::from_millis(INBOX_POLL_MS)).await;
        }
    })
}

/// Brings home, while the node runs, what other shards' partitions moved into the partitions this node
/// serves (veil_postgres::import): every `INBOX_POLL_MS`, for each shard holding one of them, the entries
/// waiting for them on every other shard are copied in, then each partition's inbox driver accepts them. Its
/// own connection per shard, opened when first needed and again after a failure.
fn spawn_importer(
    shards: Vec<veil_postgres::PgOptions>,
    serving: watch::Receiver<BTreeMap<Partition, PartitionLease>>,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        let mut clients: Vec<Option<Client>> =
            std::iter::repeat_with(|| None).take(shards.len()).collect();
        loop {
            tokio::time::sleep(Duration::from_millis(INBOX_POLL_MS)).await;
            let leases: Vec<PartitionLease> = serving.borrow().values().copied().collect();
            let count = shards.len() as u32;
            for home in 0..shards.len() {
                let here: Vec<PartitionLease> = leases
                    .iter()
                    .copied()
                    .filter(|lease| Shard::of(lease.partition, count) as usize == home)
                    .collect();
                if here.is_empty() {
                    continue;
                }
                for origin in (0..shards.len()).filter(|&origin| origin != home) {
                    if let Err(error) =
                        import_once(&shards, &mut clients, origin, home, &here).await
                    {
                        tracing::warn!(%error, origin, home, "bringing moves home from another shard failed");
                        clients[origin] = None;
                        clients[home] = None;
                    }
                }
            }
        }
    })
}

/// One copy of the entries waiting on shard `origin` for the partitions of `leases` (all on shard `home`).
async fn import_once(
    shards: &[veil_postgres::PgOptions],
    clients: &mut [Option<Client>],
    origin: usize,
    home: usize,
    leases: &[PartitionLease],
) -> Result<(), StoreError> {
    for index in [origin, home] {
        if clients[index].is_none() {
            clients[index] = Some(veil_postgres::connect(&shards[index]).await?);
        }
    }
    let timeout = shards[home].call_timeout();
    let (first, second) = clients.split_at_mut(origin.max(home));
    let (origin_client, home_client) = if origin < home {
        (first[origin].as_ref(), second[0].as_mut())
    } else {
        (second[0].as_ref(), first[home].as_mut())
    };
    let (Some(origin_client), Some(home_client)) = (origin_client, home_client) else {
        return Err(StoreError::Closed);
    };
    let partitions: Vec<Partition> = leases.iter().map(|lease| lease.partition).collect();
    let waiting = bounded(
        timeout,
        veil_postgres::import::waiting(
            origin_client,
            origin as u32,
            &partitions,
            veil_postgres::limits::IMPORT_BYTES_MAX,
        ),
    )
    .await?;
    if waiting.is_empty() {
        return Ok(());
    }
    for lease in leases {
        // Three commits: the copy, the originals' delete, the marks' removal.
        let brought = bounded(
            timeout * 3,
            veil_postgres::import::bring_home(origin_client, home_client, *lease, &waiting),
        )
        .await?;
        if brought > 0 {
            tracing::debug!(
                partition = lease.partition,
                origin,
                brought,
                "brought moves home from another shard"
            );
        }
    }
    Ok(())
}

/// Waits until the requests of a partition let go of its engine (each holds it while it runs), at most
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

/// Whether a partition's owner may still answer from memory: until the usable part of its term after the last
/// renewal that succeeded, on this node's monotonic clock, which keeps running while the process is paused.
/// The engine asks it for every request (`Engine::serving`), so an owner resumed after a pause longer than
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

    /// How much of the usable term is left.
    fn left(&self) -> Duration {
        self.usable.saturating_sub(self.renewed_at().elapsed())
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
