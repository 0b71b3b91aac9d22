//! The `veil` binary: parses the command line, opens the store, builds the engine, serves the protocol
//! front-ends and shuts down cleanly on SIGTERM or Ctrl-C (stop accepting, finish in-flight requests, close
//! the store).

mod config;

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::{Parser, Subcommand};
use tracing_subscriber::EnvFilter;
use veil_core::{Engine, ReceiptKey, SystemClock};
use veil_store::{Durability, RedbStore, StoreOptions};

use crate::config::{DurabilityMode, ServeArgs, Settings};

/// mimalloc instead of glibc malloc: the store writer allocates and frees a 4 KiB page buffer per B-tree page
/// it touches, and glibc's consolidation of those showed as ~20% of the writer's CPU in profiles
/// (docs/decisions/0003-allocator.md has the measurement).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// How often expired messages are swept from queues nobody reads.
const SWEEP_INTERVAL_MS: u64 = 1_000;

#[derive(Parser, Debug)]
#[command(
    name = "veil",
    version,
    about = "Veil: a durable message-queue server built around the visibility timeout."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run the server: the embedded store in --data-dir and the SQS endpoint on --sqs-listen.
    Serve(ServeArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Serve(args) => {
            let settings = match Settings::resolve(args) {
                Ok(settings) => settings,
                Err(error) => {
                    eprintln!("veil: {error}");
                    return ExitCode::from(2);
                }
            };
            init_logging(&settings.log_level);
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

fn init_logging(filter: &str) {
    let filter =
        EnvFilter::try_new(filter).unwrap_or_else(|_| EnvFilter::new(config::LOG_LEVEL_DEFAULT));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
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
    #[error("server: {0}")]
    Serve(std::io::Error),
}

async fn serve(settings: Settings) -> Result<(), ServeError> {
    let options = StoreOptions {
        durability: match settings.durability {
            DurabilityMode::Durable => Durability::Durable,
            DurabilityMode::Relaxed => Durability::Relaxed,
        },
        cache_bytes: settings.store_cache_mib.saturating_mul(1024 * 1024),
    };
    if settings.durability == DurabilityMode::Relaxed {
        tracing::warn!("durability is RELAXED: acknowledged changes may be lost in a crash");
    }
    let started = std::time::Instant::now();
    let store = Arc::new(RedbStore::open(&settings.data_dir, options)?);
    let secret = veil_store::load_or_create_secret(&settings.data_dir, rand::random)?;
    let engine = Arc::new(Engine::open(
        store.clone(),
        Arc::new(SystemClock),
        ReceiptKey::new(secret),
    )?);
    tracing::info!(
        data_dir = %settings.data_dir.display(),
        elapsed_ms = started.elapsed().as_millis() as u64,
        "store opened and index rebuilt"
    );

    let sweeper = {
        let engine = engine.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_millis(SWEEP_INTERVAL_MS));
            loop {
                tick.tick().await;
                engine.sweep();
            }
        })
    };

    let sqs_config = veil_sqs::SqsConfig {
        account_id: settings.sqs_account_id.clone(),
        inflight_max_default: settings.inflight_max,
        ..veil_sqs::SqsConfig::default()
    };
    let app = veil_sqs::router(engine.clone(), sqs_config);
    let listener = tokio::net::TcpListener::bind(settings.sqs_listen)
        .await
        .map_err(|source| ServeError::Listen {
            addr: settings.sqs_listen,
            source,
        })?;
    tracing::info!(addr = %settings.sqs_listen, "SQS endpoint listening");

    let stopping = engine.clone();
    let served = axum::serve(listener, app)
        .with_graceful_shutdown(async move {
            shutdown_signal().await;
            stopping.shutdown();
        })
        .await;
    sweeper.abort();
    tracing::info!("requests drained; closing the store");
    drop(engine);
    store.close();
    tracing::info!("store closed; bye");
    served.map_err(ServeError::Serve)
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
