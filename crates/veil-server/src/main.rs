//! The `veil` binary: parses the command line, opens the store, builds the engine, serves the protocol
//! front-ends and shuts down cleanly on SIGTERM or Ctrl-C (stop accepting, finish in-flight requests, close
//! the store). Every other subcommand is the CLI (`cli`), a client of a running server's admin API.

mod cli;
mod cluster;
mod config;
mod embedded;
mod listeners;

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::{Parser, Subcommand};
use tracing_subscriber::EnvFilter;
use veil_core::{Clock, Dispatch, Engine, OffsetClock, ReceiptKey, SystemClock};
use veil_store::{Durability, RedbStore, StoreOptions};
use veil_telemetry::Telemetry;

use crate::cluster::settings::StoreSetting;
use crate::config::{ConfigError, DurabilityMode, LogFormat, ServeArgs, Settings};
use veil_admin::settings::AdminGuard;
use veil_azure::settings::AuthMode as AzureAuthMode;
use veil_sqs::settings::AuthMode as SqsAuthMode;

/// mimalloc instead of glibc malloc: the store writer allocates and frees a 4 KiB page buffer per B-tree page
/// it touches, and glibc's consolidation of those showed as ~20% of the writer's CPU in profiles
/// (docs/decisions/0003-allocator.md has the measurement).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// How often expired messages are swept from queues nobody reads.
const SWEEP_INTERVAL_MS: u64 = 1_000;
/// How often running message move tasks take a step (each moves what its rate allows since the last).
const MOVE_TASK_STEP_INTERVAL_MS: u64 = 100;

#[derive(Parser, Debug)]
#[command(
    name = "veil",
    version,
    about = "Veil: a durable message-queue server built around the visibility timeout.",
    after_help = cli::EXIT_CODES_HELP
)]
struct Cli {
    #[command(flatten)]
    client: cli::GlobalArgs,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run the server: the embedded store in --data-dir, the SQS endpoint on --sqs-listen, the Azure
    /// Queue Storage endpoint on --azure-listen and the KubeMQ queues endpoint (gRPC) on --kubemq-listen.
    Serve(Box<ServeArgs>),
    /// Certificates for TLS: `veil cert dev` writes a development CA and server certificate.
    #[command(subcommand)]
    Cert(cli::cert::CertCommand),
    /// A cluster's shared state, in its database: `veil cluster rotate-token` rotates the nodes' RPC token.
    #[command(subcommand)]
    Cluster(cli::cluster::ClusterCommand),
    #[command(flatten)]
    Client(cli::ClientCommand),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Client(command) => cli::run(cli.client, command),
        Command::Cert(command) => cli::cert::run(command),
        Command::Cluster(command) => cli::cluster::run(command, cli.client.output),
        Command::Serve(mut args) => {
            args.admin_token = cli.client.admin_token.clone();
            let settings = match Settings::resolve(*args) {
                Ok(settings) => settings,
                Err(error) => {
                    eprintln!("veil: {error}");
                    return ExitCode::from(2);
                }
            };
            init_logging(&settings.log_level, settings.log_format);
            let runtime = match tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build()
            {
                Ok(runtime) => runtime,
                Err(error) => {
                    eprintln!("veil: cannot start the async runtime: {error}");
                    return ExitCode::FAILURE;
                }
            };
            match runtime.block_on(serve(settings)) {
                Ok(()) => ExitCode::SUCCESS,
                Err(error) => {
                    tracing::error!("{error}");
                    eprintln!("veil: {error}");
                    ExitCode::FAILURE
                }
            }
        }
    }
}

fn init_logging(filter: &str, format: LogFormat) {
    let filter =
        EnvFilter::try_new(filter).unwrap_or_else(|_| EnvFilter::new(config::LOG_LEVEL_DEFAULT));
    // Colours only on a terminal: escape codes in a log file or a collector break grepping and parsing.
    let logs = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => logs.init(),
        // Fields flattened beside the message, so that an audit event's action, queue and outcome are
        // top-level keys of its object.
        LogFormat::Json => logs.json().flatten_event(true).init(),
    }
}

#[derive(Debug, thiserror::Error)]
enum ServeError {
    #[error("store: {0}")]
    Store(#[from] veil_core::StoreError),
    #[error("engine: {0}")]
    Engine(#[from] veil_core::EngineError),
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        addr: std::net::SocketAddr,
        source: std::io::Error,
    },
    #[error("KubeMQ endpoint: {0}")]
    Kubemq(String),
    /// A setting checked at start-up that no longer holds (a file it read changed since).
    #[error("{0}")]
    Config(#[from] ConfigError),
    #[error("TLS: {0}")]
    Tls(#[from] veil_http::TlsError),
    #[error("cluster: {0}")]
    Cluster(String),
    /// A `[[queues]]` entry that could not be applied to the store (its queue exists as the other kind).
    #[error("config file: {0}")]
    Declared(#[from] veil_admin::declare::DeclareError),
    /// The task serving the listeners panicked or was cancelled.
    #[error("serving the listeners failed: {0}")]
    Serving(String),
    /// A public listener ended while the node ran (`watched`): the node stops rather than serve some
    /// protocols and not others, so that its supervisor restarts it whole.
    #[error(
        "the {0} listener ended while the node ran; stopping so that the node is restarted whole"
    )]
    ListenerEnded(&'static str),
}

/// Applies the config file's `[[queues]]` to the queues `engine` serves, logging what changed.
async fn apply_declared_queues(
    engine: &veil_core::Dispatch,
    settings: &Settings,
) -> Result<(), veil_admin::declare::DeclareError> {
    if settings.queues.is_empty() {
        return Ok(());
    }
    let changes = veil_admin::declare::apply(engine, &settings.queues, false).await?;
    for change in changes {
        match change.action {
            veil_admin::declare::ChangeAction::Unchanged => {}
            action => {
                tracing::info!(queue = %change.queue, ?action, details = ?change.details, "declared queue applied")
            }
        }
    }
    Ok(())
}

async fn serve(settings: Settings) -> Result<(), ServeError> {
    // One set of metrics for the whole server: every front-end and the store report into clones of it, and
    // the admin endpoint serves them.
    let telemetry = Telemetry::default();
    // Every certificate is read before anything listens: a bad file stops the start, not a later handshake.
    let mut certificates = listeners::Certificates::default();
    let tls = TlsConfigs::load(&settings.listeners, &mut certificates)?;
    certificates.reload_on_sighup();
    let shutdown = shutdown_on_signal();
    if settings.unsafe_test_clock {
        // A cluster's nodes read the database's clock, which no admin call of one node can move.
        if !matches!(settings.store, StoreSetting::Embedded) {
            return Err(ServeError::Cluster(
                "the test clock works with the embedded store only".into(),
            ));
        }
        tracing::warn!("the clock can be moved through the admin API: for tests only");
    }
    match &settings.store {
        StoreSetting::Embedded => {
            embedded::serve_embedded(&settings, &telemetry, &tls, shutdown).await
        }
        StoreSetting::Postgres(postgres) => {
            cluster::run(
                cluster::Node {
                    settings: &settings,
                    postgres,
                    telemetry: &telemetry,
                    tls: &tls,
                },
                shutdown,
            )
            .await
        }
    }
}

/// The bound sockets of the three protocol listeners.
struct Sockets {
    sqs: tokio::net::TcpListener,
    azure: tokio::net::TcpListener,
    kubemq: tokio::net::TcpListener,
}

/// Serves the three protocols over `engine` on `sockets` until `stopped` turns true (after the engine was
/// told to shut down), then drains their requests. `secret` roots Azure's user delegation keys and SQS's sender
/// ids. The sweeper and the move task driver run meanwhile.
async fn serve_engine(
    engine: Arc<Engine>,
    secret: Vec<u8>,
    sockets: Sockets,
    settings: &Settings,
    telemetry: &Telemetry,
    tls: &TlsConfigs,
    stopped: tokio::sync::watch::Receiver<bool>,
) -> Result<(), ServeError> {
    let sweeper = spawn_sweeper(engine.clone());
    let mover = spawn_move_task_driver(engine.clone());
    let served = serve_protocols(
        engine.into(),
        secret,
        sockets,
        settings,
        telemetry,
        tls,
        stopped,
    )
    .await;
    sweeper.abort();
    mover.abort();
    served
}

/// Serves the three protocols on `sockets`, each calling the engine through `dispatch` (this process's own,
/// or a cluster's owner), until `stopped` turns true; then drains their requests.
async fn serve_protocols(
    dispatch: Dispatch,
    secret: Vec<u8>,
    sockets: Sockets,
    settings: &Settings,
    telemetry: &Telemetry,
    tls: &TlsConfigs,
    stopped: tokio::sync::watch::Receiver<bool>,
) -> Result<(), ServeError> {
    let sqs_app = veil_sqs::router(
        dispatch.clone(),
        sqs_config(settings, telemetry, tls.sqs.is_some(), &secret)?,
    );
    let azure_app =
        veil_azure::router(dispatch.clone(), azure_config(settings, telemetry, secret)?);
    let kubemq_config = kubemq_config(settings, telemetry, tls.kubemq.clone())?;
    let limits = &settings.listeners;
    // Every listener stops on `all_stopped`: the node's stop, or one of them ending before it (`watched`).
    let (stop_all, all_stopped) = tokio::sync::watch::channel(false);
    let forward_stop = async {
        tokio::select! {
            () = until_stopped(stopped) => {}
            () = until_stopped(all_stopped.clone()) => {}
        }
        stop_all.send_replace(true);
    };
    let (_, sqs, azure, kubemq) = tokio::join!(
        forward_stop,
        // Requests carry the peer address (the audit log's `client`, the delivery history's consumer) and
        // veil_http::ConnectionInfo (whether the connection is TLS).
        watched(
            "sqs",
            veil_http::serve(
                veil_http::Listener {
                    name: "sqs",
                    tcp: sockets.sqs,
                    tls: tls.sqs.clone(),
                    limits: limits.sqs.limits.clone(),
                    throttled: veil_sqs::counted_throttled(telemetry.clone()),
                },
                sqs_app,
                until_stopped(all_stopped.clone()),
            ),
            &stop_all,
        ),
        // The peer address is what a SAS's `sip` is checked against.
        watched(
            "azure",
            veil_http::serve(
                veil_http::Listener {
                    name: "azure",
                    tcp: sockets.azure,
                    tls: tls.azure.clone(),
                    limits: limits.azure.limits.clone(),
                    throttled: veil_azure::counted_throttled(telemetry.clone()),
                },
                azure_app,
                until_stopped(all_stopped.clone()),
            ),
            &stop_all,
        ),
        // Open KubeMQ streams end on the same signal: downstreams get CloseByServer and release their
        // unacked messages before the store closes.
        watched(
            "kubemq",
            veil_kubemq::serve(dispatch, kubemq_config, sockets.kubemq, all_stopped.clone()),
            &stop_all,
        ),
    );
    sqs?;
    azure?;
    kubemq?.map_err(|error| ServeError::Kubemq(error.to_string()))
}

/// One public listener's serving, watched: ending before every listener was told to stop is a fault of the
/// node (docs/security.md "Every listener's accept loop"). It is logged and counted
/// (`veil_listener_failures_total`), and the other listeners are stopped, so that the node ends and is
/// restarted whole instead of answering on some protocols and not others while it reports ready.
async fn watched<T>(
    name: &'static str,
    served: impl std::future::Future<Output = T>,
    stop_all: &tokio::sync::watch::Sender<bool>,
) -> Result<T, ServeError> {
    let outcome = served.await;
    if *stop_all.borrow() {
        return Ok(outcome);
    }
    veil_telemetry::listeners().listener_failed(name);
    tracing::error!(
        listener = name,
        "a listener ended while the node runs; stopping the node so that it is restarted whole"
    );
    stop_all.send_replace(true);
    Err(ServeError::ListenerEnded(name))
}

/// The admin endpoint (docs: README "Operating Veil"): served from before the store opens until after the
/// protocol listeners drained.
struct Admin {
    engine: veil_admin::EngineSlot,
    readiness: veil_admin::Readiness,
    series: veil_admin::Series,
    /// Tells the admin server to stop accepting and finish its requests.
    stop: tokio::sync::oneshot::Sender<()>,
    served: tokio::task::JoinHandle<()>,
}

impl Admin {
    fn start(
        listener: tokio::net::TcpListener,
        tls: Option<Arc<rustls::ServerConfig>>,
        limits: veil_http::Limits,
        guard: AdminGuard,
        telemetry: &Telemetry,
        test_clock: Option<OffsetClock>,
    ) -> Self {
        let engine = veil_admin::EngineSlot::default();
        let mut registry = veil_admin::Registry::default();
        telemetry.register(&mut registry);
        registry.register_collector(Box::new(veil_telemetry::ProcessCollector::new(
            veil_telemetry::BuildInfo {
                version: env!("CARGO_PKG_VERSION"),
                commit: env!("VEIL_COMMIT"),
            },
        )));
        let readiness = veil_admin::Readiness::default();
        let series = veil_admin::Series::default();
        let state = veil_admin::AdminState::new(
            engine.clone(),
            registry,
            readiness.clone(),
            series.clone(),
        )
        .with_token(guard.token)
        .with_telemetry(telemetry.clone())
        .with_allowed_hosts(guard.allowed_hosts)
        .with_loopback_peers_only(guard.loopback_peers_only)
        .with_test_clock(test_clock);
        if let Ok(addr) = listener.local_addr() {
            tracing::info!(%addr, tls = tls.is_some(), "admin endpoint listening (/metrics, /healthz, /readyz, /api/v1, console)");
        }
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let listener = veil_http::Listener {
            name: "admin",
            tcp: listener,
            tls,
            limits,
            throttled: Arc::new(admin_throttled),
        };
        let served = tokio::spawn(veil_http::serve(
            listener,
            veil_admin::router(state),
            async move {
                let _ = stopped.await;
            },
        ));
        Self {
            engine,
            readiness,
            series,
            stop,
            served,
        }
    }

    fn engine_opened(&self, engine: impl Into<Dispatch>) {
        *self.engine.write() = Some(engine.into());
    }

    /// The engine is about to be dropped (its store failed and is reopened): the API answers "starting"
    /// meanwhile, and lets go of the engine so that the store's file is released.
    fn engine_closed(&self) {
        self.engine.write().take();
    }

    async fn stop(self) {
        let _ = self.stop.send(());
        if let Err(error) = self.served.await {
            tracing::warn!(%error, "admin endpoint task failed");
        }
    }
}

/// The movable clock of the test-only setting (docs/testing.md "Test clock"), one per process so that an
/// engine reopened after a store failure keeps the time a test moved.
static TEST_CLOCK: std::sync::OnceLock<OffsetClock> = std::sync::OnceLock::new();

/// The test clock when the setting is on.
fn test_clock(settings: &Settings) -> Option<OffsetClock> {
    settings
        .unsafe_test_clock
        .then(|| TEST_CLOCK.get_or_init(OffsetClock::new).clone())
}

/// What opening the data directory gives: the store, the engine over it and the directory's secret.
struct Opened {
    store: Arc<RedbStore>,
    engine: Arc<Engine>,
    /// Read once: the receipt key, and the root of Azure's user delegation keys. (The file may be anything
    /// the operator made it, a pipe included, so it is not read a second time: a reopen passes it in.)
    secret: [u8; veil_core::receipt::SECRET_BYTES],
}

/// Opens the store in the data directory and the engine over it, rebuilding the engine's index.
fn open_engine(
    settings: &Settings,
    telemetry: &Telemetry,
    secret: Option<[u8; veil_core::receipt::SECRET_BYTES]>,
) -> Result<Opened, ServeError> {
    let options = StoreOptions {
        durability: match settings.durability {
            DurabilityMode::Durable => Durability::Durable,
            DurabilityMode::Relaxed => Durability::Relaxed,
        },
        cache_bytes: settings.store_cache_mib.saturating_mul(1024 * 1024),
        wal_segment_bytes_max: settings.wal_segment_mib.saturating_mul(1024 * 1024),
        metrics: telemetry.store(),
        ..StoreOptions::default()
    };
    if settings.durability == DurabilityMode::Relaxed {
        tracing::warn!("durability is RELAXED: acknowledged changes may be lost in a crash");
    }
    let started = std::time::Instant::now();
    let store = Arc::new(RedbStore::open(&settings.data_dir, options)?);
    let secret = match secret {
        Some(secret) => secret,
        None => veil_store::load_or_create_secret(&settings.data_dir, rand::random)?,
    };
    let clock: Arc<dyn Clock> = match test_clock(settings) {
        Some(clock) => Arc::new(clock),
        None => Arc::new(SystemClock),
    };
    let engine = Arc::new(Engine::open(store.clone(), clock, ReceiptKey::new(secret))?);
    tracing::info!(
        data_dir = %settings.data_dir.display(),
        elapsed_ms = started.elapsed().as_millis() as u64,
        log_records_replayed = store.recovered().records,
        "store opened and index rebuilt"
    );
    Ok(Opened {
        store,
        engine,
        secret,
    })
}

/// Sweeps expired messages every `SWEEP_INTERVAL_MS`, until aborted.
fn spawn_sweeper(engine: Arc<Engine>) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_millis(SWEEP_INTERVAL_MS));
        loop {
            tick.tick().await;
            engine.sweep();
        }
    })
}

/// Steps the running message move tasks every `MOVE_TASK_STEP_INTERVAL_MS`, until aborted (docs/semantics.md
/// §8). A failed step (the store refusing writes) is logged; the next one tries again.
fn spawn_move_task_driver(engine: Arc<Engine>) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_millis(MOVE_TASK_STEP_INTERVAL_MS));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            if let Err(error) = engine.drive_move_tasks().await {
                tracing::warn!(%error, "a message move task step failed");
            }
        }
    })
}

/// The rustls configuration of each listener that serves TLS (docs/security.md "TLS").
#[derive(Clone)]
struct TlsConfigs {
    sqs: Option<Arc<rustls::ServerConfig>>,
    azure: Option<Arc<rustls::ServerConfig>>,
    kubemq: Option<Arc<rustls::ServerConfig>>,
    admin: Option<Arc<rustls::ServerConfig>>,
}

impl TlsConfigs {
    fn load(
        listeners: &listeners::ListenerSettings,
        certificates: &mut listeners::Certificates,
    ) -> Result<Self, veil_http::TlsError> {
        use veil_http::tls::{ALPN_GRPC, ALPN_HTTP};
        Ok(Self {
            sqs: certificates.server_config(&listeners.sqs.tls, ALPN_HTTP)?,
            azure: certificates.server_config(&listeners.azure.tls, ALPN_HTTP)?,
            kubemq: certificates.server_config(&listeners.kubemq.tls, ALPN_GRPC)?,
            admin: certificates.server_config(&listeners.admin.tls, ALPN_HTTP)?,
        })
    }
}

/// The admin API's answer to a connection over its rate limit: 429 with the API's error body.
fn admin_throttled(_headers: &axum::http::HeaderMap) -> axum::response::Response {
    use axum::response::IntoResponse;
    (
        axum::http::StatusCode::TOO_MANY_REQUESTS,
        axum::Json(serde_json::json!({
            "error": {"code": "Throttled", "message": "request rate limit of the connection exceeded"}
        })),
    )
        .into_response()
}

fn sqs_config(
    settings: &Settings,
    telemetry: &Telemetry,
    tls: bool,
    secret: &[u8],
) -> Result<veil_sqs::SqsConfig, ConfigError> {
    Ok(veil_sqs::SqsConfig {
        url_scheme: if tls { "https" } else { "http" },
        advertised_url: settings.sqs.advertised_origin()?,
        account_id: settings.sqs.account_id.clone(),
        inflight_max_default: settings.inflight_max,
        telemetry: telemetry.clone(),
        auth: settings.sqs.auth()?,
        // Sender ids derive from the data directory's (or the cluster's) secret, so a credential's stays the
        // same across restarts and nodes.
        sender_id_secret: Some(secret.to_vec()),
        ..veil_sqs::SqsConfig::default()
    })
}

/// The Azure endpoint's configuration; its JWKS file was read by `Settings::validate`, so a failure here
/// means it changed since.
fn azure_config(
    settings: &Settings,
    telemetry: &Telemetry,
    secret: Vec<u8>,
) -> Result<veil_azure::AzureConfig, ConfigError> {
    let azure = &settings.azure;
    Ok(veil_azure::AzureConfig {
        accounts: azure.accounts()?,
        verify_auth: azure.auth == AzureAuthMode::On,
        poison_default: (azure.max_dequeue_count > 0).then_some(veil_azure::PoisonDefault {
            max_dequeue_count: azure.max_dequeue_count,
        }),
        inflight_max_default: settings.inflight_max,
        // Service properties live in the data directory; a cluster has none (they stay in memory there).
        data_dir: matches!(settings.store, StoreSetting::Embedded)
            .then(|| settings.data_dir.clone()),
        telemetry: telemetry.clone(),
        entra: azure.entra()?,
        // User delegation keys derive from the data directory's secret, so they survive restarts.
        delegation_secret: Some(secret),
    })
}

/// The KubeMQ endpoint's configuration; its key and policy files were read once by `Settings::validate`, so
/// a failure here means they changed since.
fn kubemq_config(
    settings: &Settings,
    telemetry: &Telemetry,
    tls: Option<Arc<rustls::ServerConfig>>,
) -> Result<veil_kubemq::KubemqConfig, ServeError> {
    let kubemq = &settings.kubemq;
    let invalid = |error| ServeError::Kubemq(ConfigError::from(error).to_string());
    Ok(veil_kubemq::KubemqConfig {
        tls,
        limits: settings.listeners.kubemq.limits.clone(),
        settings: kubemq.queue_settings().map_err(invalid)?,
        auth: kubemq.auth().map_err(invalid)?,
        telemetry: telemetry.clone(),
    })
}

fn log_listening(settings: &Settings) {
    tracing::info!(
        addr = %settings.kubemq.listen,
        auth = settings.kubemq.authenticates(),
        policy = settings.kubemq.has_policy(),
        "KubeMQ queues endpoint (gRPC) listening"
    );
    tracing::info!(
        addr = %settings.sqs_listen,
        auth = ?settings.sqs.auth,
        credentials = settings.sqs.credentials().map_or(0, |credentials| credentials.len()),
        "SQS endpoint listening"
    );
    if settings.sqs.auth == SqsAuthMode::Off {
        tracing::warn!("SQS authentication is OFF: any request is accepted with every permission");
    }
    tracing::info!(
        addr = %settings.azure.listen,
        auth = ?settings.azure.auth,
        "Azure Queue Storage endpoint listening"
    );
    if settings.azure.auth == AzureAuthMode::Off {
        tracing::warn!("Azure authentication is OFF: any request is accepted");
    }
    if settings.azure.entra.mode == Some(veil_azure::settings::EntraSetting::Dev) {
        tracing::warn!("Azure Entra ID tokens in DEV mode: any well-formed token is a Contributor");
    }
}

/// Turns true on SIGTERM or Ctrl-C: every listener stops accepting and drains its in-flight requests.
fn shutdown_on_signal() -> tokio::sync::watch::Receiver<bool> {
    let (stop, stopped) = tokio::sync::watch::channel(false);
    tokio::spawn(async move {
        shutdown_signal().await;
        stop.send_replace(true);
    });
    stopped
}

/// The stop of one engine's listeners: turns true once `shutdown` does (and readiness says "stopping"), after
/// the engine was told, so that its long polls end at once instead of holding the drain for their wait
/// times. A cluster's leader also stops its engine when it loses the lease: it sends on `shutdown`'s sender.
fn stop_engine_on(
    engine: Arc<Engine>,
    mut shutdown: tokio::sync::watch::Receiver<bool>,
    readiness: Option<veil_admin::Readiness>,
) -> tokio::sync::watch::Receiver<bool> {
    let (stop, stopped) = tokio::sync::watch::channel(false);
    tokio::spawn(async move {
        let _ = shutdown.wait_for(|stop| *stop).await;
        if let Some(readiness) = readiness {
            readiness.set(veil_admin::Phase::Stopping);
        }
        engine.shutdown();
        stop.send_replace(true);
    });
    stopped
}

/// Resolves once `stopped` turns true.
async fn until_stopped(mut stopped: tokio::sync::watch::Receiver<bool>) {
    // An error means the sender is gone, which only happens after it sent `true`.
    let _ = stopped.wait_for(|stop| *stop).await;
}

async fn bind(addr: std::net::SocketAddr) -> Result<tokio::net::TcpListener, ServeError> {
    tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|source| ServeError::Listen { addr, source })
}

/// Resolves on SIGTERM or Ctrl-C.
async fn shutdown_signal() {
    let ctrl_c = async {
        if let Err(error) = tokio::signal::ctrl_c().await {
            tracing::error!(%error, "cannot listen for Ctrl-C");
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(error) => {
                tracing::error!(%error, "cannot listen for SIGTERM");
                std::future::pending::<()>().await;
            }
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => tracing::info!("Ctrl-C received; shutting down"),
        _ = terminate => tracing::info!("SIGTERM received; shutting down"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_listener_that_ends_before_the_stop_is_a_fault_that_stops_the_others() {
        let (stop_all, all_stopped) = tokio::sync::watch::channel(false);
        let failures_before = veil_telemetry::listeners().failures("test-early");
        let ended = watched("test-early", async {}, &stop_all).await;
        assert!(
            matches!(ended, Err(ServeError::ListenerEnded("test-early"))),
            "{ended:?}"
        );
        assert!(
            *all_stopped.borrow(),
            "the other listeners were not told to stop"
        );
        assert_eq!(
            veil_telemetry::listeners().failures("test-early"),
            failures_before + 1
        );
    }

    #[tokio::test]
    async fn a_listener_that_ends_after_the_stop_ended_normally() {
        let (stop_all, all_stopped) = tokio::sync::watch::channel(false);
        let served = watched("test-stopped", until_stopped(all_stopped), &stop_all);
        let stopping = async { stop_all.send_replace(true) };
        let (served, _) = tokio::join!(served, stopping);
        assert!(served.is_ok(), "{served:?}");
        assert_eq!(veil_telemetry::listeners().failures("test-stopped"), 0);
    }
}
