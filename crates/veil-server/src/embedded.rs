//! One node on the embedded store in the data directory, and the supervision of that store
//! (docs/reliability.md "Storage faults").
//!
//! The store fail-stops: after a failed log write, sync or checkpoint (a full disk, a failing one) it refuses
//! every write, because the engine's memory may then hold changes the disk does not. The server keeps serving
//! meanwhile — reads answer from the engine, writes get the protocol's server error — and probes the data
//! directory every `PROBE_INTERVAL_MS`. Once it takes writes again (and has room for a new log segment), the
//! listeners drain, the engine and the store are dropped and opened again from disk (log recovery replays
//! what was acknowledged and cuts any torn tail), and serving resumes on the same bound sockets: clients see
//! a short window of queued connections, never a port change, and no operator has to restart anything.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::net::TcpListener;
use tokio::sync::watch;
use veil_store::RedbStore;
use veil_telemetry::Telemetry;

use crate::config::Settings;
use crate::{
    bind, log_listening, open_engine, serve_engine, stop_engine_on, Admin, Opened, ServeError,
    Sockets, TlsConfigs,
};

/// How often a failed store's data directory is probed (a 4 KiB write, fdatasync, removal), and how often a
/// reopen that failed is tried again.
const PROBE_INTERVAL_MS: u64 = 1_000;
/// How long the requests of a failed store's engine may take to drain before they are dropped for the reopen.
const DRAIN_MS_MAX: u64 = 5_000;
/// How long the reopen waits for the last reference to the failed store (a request still finishing) to go,
/// so that its file lock is released; after it, the reopen is tried anyway and retried.
const RELEASE_MS_MAX: u64 = 5_000;
/// How often that wait looks.
const RELEASE_POLL_MS: u64 = 10;
const MIB: u64 = 1024 * 1024;

/// Why a term of serving one engine ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum TermEnd {
    /// SIGTERM or Ctrl-C.
    Shutdown,
    /// The store failed and the data directory takes writes again: reopen.
    Reopen,
}

/// The end of serving for good. The admin endpoint stops last, so /readyz answers "stopping" while the
/// others drain; then the store closes.
async fn close_for_good(
    admin: Admin,
    engine: Arc<veil_core::Engine>,
    store: Arc<RedbStore>,
    served: Result<Result<(), ServeError>, tokio::task::JoinError>,
) -> Result<(), ServeError> {
    admin.stop().await;
    drop(engine);
    store.close();
    tracing::info!("store closed; bye");
    served.unwrap_or_else(|error| Err(ServeError::Serving(error.to_string())))
}

/// Serves until `shutdown`, reopening the store whenever it failed and the disk recovered.
pub async fn serve_embedded(
    settings: &Settings,
    telemetry: &Telemetry,
    tls: &TlsConfigs,
    shutdown: watch::Receiver<bool>,
) -> Result<(), ServeError> {
    // The admin endpoint comes up first, so that probes get an answer ("starting") while the store recovers.
    let admin = Admin::start(
        bind(settings.admin.listen).await?,
        tls.admin.clone(),
        settings.listeners.admin.limits.clone(),
        settings.admin.guard(),
        telemetry,
        crate::test_clock(settings),
    );
    let mut opened = open_engine(settings, telemetry, None)?;
    // Before any protocol listener is bound, so that clients find the declared queues from the first request.
    crate::apply_declared_queues(&opened.engine.clone().into(), settings).await?;
    let secret = opened.secret;
    let sockets = Sockets {
        sqs: bind(settings.sqs_listen).await?,
        azure: bind(settings.azure.listen).await?,
        kubemq: bind(settings.kubemq.listen).await?,
    };
    log_listening(settings);
    loop {
        let Opened { store, engine, .. } = opened;
        admin.engine_opened(engine.clone());
        let sampler = admin.series.spawn_sampler(engine.clone());
        // Every listener is bound and the store is open: ready for traffic.
        admin.readiness.set(veil_admin::Phase::Ready);
        let (end_term, term_ended) = watch::channel(false);
        let mut watching = tokio::spawn(watch_store(
            store.failed(),
            settings.data_dir.clone(),
            segment_bytes(settings),
            shutdown.clone(),
            end_term,
        ));
        let stopped = stop_engine_on(engine.clone(), term_ended, Some(admin.readiness.clone()));
        let term = {
            let (engine, sockets) = (engine.clone(), sockets.share()?);
            let (settings, telemetry, tls) = (settings.clone(), telemetry.clone(), tls.clone());
            async move {
                let secret = secret.to_vec();
                serve_engine(
                    engine, secret, sockets, &settings, &telemetry, &tls, stopped,
                )
                .await
            }
        };
        let mut serving = tokio::spawn(term);
        let end = tokio::select! {
            end = &mut watching => end.unwrap_or(TermEnd::Shutdown),
            served = &mut serving => {
                // Serving ended on its own (a listener failed): stop as at a shutdown.
                watching.abort();
                sampler.abort();
                return close_for_good(admin, engine, store, served).await;
            }
        };
        let served = match end {
            TermEnd::Shutdown => serving.await,
            TermEnd::Reopen => {
                match tokio::time::timeout(Duration::from_millis(DRAIN_MS_MAX), &mut serving).await
                {
                    Ok(served) => served,
                    Err(_) => {
                        tracing::warn!(
                            "requests did not drain in time; dropping them to reopen the store"
                        );
                        serving.abort();
                        Ok(Ok(()))
                    }
                }
            }
        };
        sampler.abort();
        if end == TermEnd::Shutdown {
            tracing::info!("requests drained; closing the store");
            return close_for_good(admin, engine, store, served).await;
        }
        if let Ok(Err(error)) = served {
            tracing::warn!(%error, "serving the failed store's engine ended with an error");
        }
        admin.engine_closed();
        drop(engine);
        release(store).await;
        let mut shutdown = shutdown.clone();
        opened = match reopen(settings, telemetry, secret, &mut shutdown).await {
            Some(opened) => opened,
            None => {
                admin.stop().await;
                tracing::info!("stopped while the store was being reopened; bye");
                return Ok(());
            }
        };
    }
}

/// The log segment size the settings ask for.
fn segment_bytes(settings: &Settings) -> u64 {
    settings.wal_segment_mib.saturating_mul(MIB)
}

/// Ends the term (sends on `end`) at shutdown, or once the store has failed and its data directory takes
/// writes again.
async fn watch_store(
    mut failed: watch::Receiver<bool>,
    data_dir: PathBuf,
    segment_bytes: u64,
    mut shutdown: watch::Receiver<bool>,
    end: watch::Sender<bool>,
) -> TermEnd {
    let end_with = |why: TermEnd| {
        end.send_replace(true);
        why
    };
    tokio::select! {
        _ = shutdown.wait_for(|stop| *stop) => return end_with(TermEnd::Shutdown),
        // An error means the writer thread is gone, which a running store's writer never is: failed too.
        _ = failed.wait_for(|failed| *failed) => {}
    }
    tracing::error!(
        data_dir = %data_dir.display(),
        probe_interval_ms = PROBE_INTERVAL_MS,
        "the store failed: writes get a server error, reads go on; the store is reopened as soon as the \
         data directory takes writes again"
    );
    let mut tick = tokio::time::interval(Duration::from_millis(PROBE_INTERVAL_MS));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut probes = 0u64;
    loop {
        tokio::select! {
            _ = shutdown.wait_for(|stop| *stop) => return end_with(TermEnd::Shutdown),
            _ = tick.tick() => {}
        }
        let dir = data_dir.clone();
        let probe =
            tokio::task::spawn_blocking(move || veil_store::probe_writable(&dir, segment_bytes))
                .await;
        probes += 1;
        match probe {
            Ok(Ok(())) => {
                tracing::info!(
                    probes,
                    "the data directory takes writes again; reopening the store"
                );
                return end_with(TermEnd::Reopen);
            }
            // Once at warn, then quietly: the condition lasts until an operator frees space.
            Ok(Err(error)) if probes == 1 => {
                tracing::warn!(%error, "the data directory does not take writes yet")
            }
            Ok(Err(error)) => {
                tracing::debug!(%error, "the data directory does not take writes yet")
            }
            Err(error) => tracing::warn!(%error, "the probe of the data directory failed"),
        }
    }
}

/// Closes the failed store and waits (bounded) for the last reference to it to go, so that its file lock is
/// free for the reopen.
async fn release(store: Arc<RedbStore>) {
    let closing = store.clone();
    // The writer's final checkpoint fails at once on a failed store (it is logged); joining it blocks briefly.
    if let Err(error) = tokio::task::spawn_blocking(move || closing.close()).await {
        tracing::warn!(%error, "closing the failed store failed");
    }
    let deadline = Instant::now() + Duration::from_millis(RELEASE_MS_MAX);
    let mut store = store;
    loop {
        match Arc::try_unwrap(store) {
            Ok(last) => {
                drop(last);
                return;
            }
            Err(shared) if Instant::now() >= deadline => {
                tracing::warn!(
                    references = Arc::strong_count(&shared),
                    "the failed store is still referenced; reopening anyway"
                );
                return;
            }
            Err(shared) => {
                store = shared;
                tokio::time::sleep(Duration::from_millis(RELEASE_POLL_MS)).await;
            }
        }
    }
}

/// Opens the store and the engine again, retrying every `PROBE_INTERVAL_MS` until it works; `None` if the
/// server is told to stop meanwhile.
async fn reopen(
    settings: &Settings,
    telemetry: &Telemetry,
    secret: [u8; veil_core::receipt::SECRET_BYTES],
    shutdown: &mut watch::Receiver<bool>,
) -> Option<Opened> {
    loop {
        let started = Instant::now();
        let (owned_settings, owned_telemetry) = (settings.clone(), telemetry.clone());
        let opened = tokio::task::spawn_blocking(move || {
            open_engine(&owned_settings, &owned_telemetry, Some(secret))
        })
        .await;
        match opened {
            Ok(Ok(opened)) => {
                telemetry.store().reopened();
                tracing::info!(
                    elapsed_ms = started.elapsed().as_millis() as u64,
                    torn_bytes_cut = opened.store.recovered().torn_bytes,
                    "store reopened after its failure; serving again"
                );
                return Some(opened);
            }
            Ok(Err(error)) => tracing::error!(%error, "cannot reopen the store yet; retrying"),
            Err(error) => tracing::error!(%error, "reopening the store failed; retrying"),
        }
        tokio::select! {
            () = tokio::time::sleep(Duration::from_millis(PROBE_INTERVAL_MS)) => {}
            _ = shutdown.wait_for(|stop| *stop) => return None,
        }
    }
}

impl Sockets {
    /// Another handle on the same three bound sockets (duplicated descriptors). A term serves on the copies;
    /// the originals keep the ports bound between terms, so connections made meanwhile wait in the accept
    /// queue for the next term instead of being refused.
    fn share(&self) -> Result<Sockets, ServeError> {
        Ok(Sockets {
            sqs: dup(&self.sqs)?,
            azure: dup(&self.azure)?,
            kubemq: dup(&self.kubemq)?,
        })
    }
}

fn dup(listener: &TcpListener) -> Result<TcpListener, ServeError> {
    use std::os::fd::AsFd;
    let addr = listener
        .local_addr()
        .unwrap_or_else(|_| std::net::SocketAddr::from(([0, 0, 0, 0], 0)));
    let copy = listener
        .as_fd()
        .try_clone_to_owned()
        .and_then(|fd| TcpListener::from_std(std::net::TcpListener::from(fd)))
        .map_err(|source| ServeError::Listen { addr, source })?;
    Ok(copy)
}
