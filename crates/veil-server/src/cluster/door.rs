//! The doors of a cluster node: behind each public listener, a TCP relay that hands every client connection
//! to the leader's internal listener for that protocol, or to this node's unavailable server while no node
//! can serve. Bytes pass through untouched, so TLS, signatures and HTTP/2 streams are end to end between the
//! client and the leader; the leader sees the relaying node as the client's address (docs/cluster.md
//! "Limits").

use std::net::SocketAddr;
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, Semaphore};
use tokio::task::JoinHandle;
use veil_postgres::LeaderAddrs;

use super::unavailable::UnavailableAddrs;
use super::Internal;
use crate::config::Settings;
use crate::{bind, ServeError};

/// How long a door waits for the leader to accept before it answers "unavailable" instead.
const LEADER_CONNECT_TIMEOUT_MS: u64 = 1_000;
/// How long a connection relayed to an unavailable server lives. HTTP/1 answers close theirs, but an HTTP/2
/// (gRPC) client keeps its connection and would never come back through the door to find a new leader.
const FALLBACK_CONNECTION_MS_MAX: u64 = 1_000;

/// Where new connections go.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Route {
    Unavailable,
    Leader(Targets),
}

/// The leader's internal listeners.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Targets {
    pub sqs: SocketAddr,
    pub azure: SocketAddr,
    pub kubemq: SocketAddr,
    pub admin: SocketAddr,
}

impl Targets {
    /// Resolves the addresses a lease row publishes; `None` if any does not resolve.
    pub async fn resolve(addrs: &LeaderAddrs) -> Option<Self> {
        async fn one(addr: &str) -> Option<SocketAddr> {
            tokio::net::lookup_host(addr).await.ok()?.next()
        }
        Some(Self {
            sqs: one(&addrs.sqs).await?,
            azure: one(&addrs.azure).await?,
            kubemq: one(&addrs.kubemq).await?,
            admin: one(&addrs.admin).await?,
        })
    }

    /// This node's own internal listeners, reached over loopback when they listen on every interface.
    pub fn of(internal: &Internal) -> Option<Self> {
        let local = |listener: &TcpListener| {
            let mut addr = listener.local_addr().ok()?;
            if addr.ip().is_unspecified() {
                addr.set_ip(std::net::Ipv4Addr::LOCALHOST.into());
            }
            Some(addr)
        };
        Some(Self {
            sqs: local(&internal.sockets.sqs)?,
            azure: local(&internal.sockets.azure)?,
            kubemq: local(&internal.sockets.kubemq)?,
            admin: local(&internal.admin)?,
        })
    }
}

#[derive(Clone, Copy, Debug)]
enum Protocol {
    Sqs,
    Azure,
    Kubemq,
    Admin,
}

/// The four doors, running.
pub struct Doors {
    tasks: Vec<JoinHandle<()>>,
}

impl Doors {
    /// Stops accepting. Relayed connections end with their client or their upstream.
    pub async fn stop(self) {
        for task in self.tasks {
            task.abort();
        }
    }
}

/// Binds the public listeners and relays their connections by `routes` until `shutdown`.
pub async fn open_all(
    settings: &Settings,
    routes: watch::Receiver<Route>,
    unavailable: UnavailableAddrs,
    shutdown: watch::Receiver<bool>,
) -> Result<Doors, ServeError> {
    let doors = [
        (
            Protocol::Sqs,
            settings.sqs_listen,
            unavailable.sqs,
            &settings.listeners.sqs,
        ),
        (
            Protocol::Azure,
            settings.azure.listen,
            unavailable.azure,
            &settings.listeners.azure,
        ),
        (
            Protocol::Kubemq,
            settings.kubemq.listen,
            unavailable.kubemq,
            &settings.listeners.kubemq,
        ),
        (
            Protocol::Admin,
            settings.admin.listen,
            unavailable.admin,
            &settings.listeners.admin,
        ),
    ];
    let mut tasks = Vec::new();
    for (protocol, addr, fallback, listener) in doors {
        let tcp = bind(addr).await?;
        let door = Door {
            protocol,
            routes: routes.clone(),
            fallback,
            connections: std::sync::Arc::new(Semaphore::new(listener.limits.max_connections)),
        };
        tasks.push(tokio::spawn(door.run(tcp, shutdown.clone())));
    }
    Ok(Doors { tasks })
}

struct Door {
    protocol: Protocol,
    routes: watch::Receiver<Route>,
    /// This node's unavailable server for the protocol.
    fallback: SocketAddr,
    /// The listener's connection limit, as on one node.
    connections: std::sync::Arc<Semaphore>,
}

impl Door {
    async fn run(self, tcp: TcpListener, mut shutdown: watch::Receiver<bool>) {
        loop {
            let accepted = tokio::select! {
                accepted = tcp.accept() => accepted,
                _ = shutdown.wait_for(|stop| *stop) => return,
            };
            let (client, peer) = match accepted {
                Ok(accepted) => accepted,
                Err(error) => {
                    tracing::debug!(%error, "accept failed");
                    continue;
                }
            };
            let Ok(permit) = self.connections.clone().try_acquire_owned() else {
                drop(client);
                continue;
            };
            let target = match &*self.routes.borrow() {
                Route::Leader(targets) => Some(self.pick(targets)),
                Route::Unavailable => None,
            };
            let fallback = self.fallback;
            tokio::spawn(async move {
                relay(client, peer, target, fallback).await;
                drop(permit);
            });
        }
    }

    fn pick(&self, targets: &Targets) -> SocketAddr {
        match self.protocol {
            Protocol::Sqs => targets.sqs,
            Protocol::Azure => targets.azure,
            Protocol::Kubemq => targets.kubemq,
            Protocol::Admin => targets.admin,
        }
    }
}

/// Connects the client to the leader (or, failing that, the unavailable server) and copies both ways until
/// either side closes.
async fn relay(
    mut client: TcpStream,
    peer: SocketAddr,
    target: Option<SocketAddr>,
    fallback: SocketAddr,
) {
    let _ = client.set_nodelay(true);
    if let Some(mut upstream) = match target {
        Some(addr) => connect(addr).await,
        None => None,
    } {
        if let Err(error) = tokio::io::copy_bidirectional(&mut client, &mut upstream).await {
            tracing::debug!(%peer, %error, "relayed connection ended with an error");
        }
        return;
    }
    let Some(mut upstream) = connect(fallback).await else {
        tracing::debug!(%peer, "no upstream for a connection");
        return;
    };
    let relayed = tokio::io::copy_bidirectional(&mut client, &mut upstream);
    let _ = tokio::time::timeout(Duration::from_millis(FALLBACK_CONNECTION_MS_MAX), relayed).await;
}

async fn connect(addr: SocketAddr) -> Option<TcpStream> {
    let connecting = TcpStream::connect(addr);
    let stream = tokio::time::timeout(Duration::from_millis(LEADER_CONNECT_TIMEOUT_MS), connecting)
        .await
        .ok()?
        .ok()?;
    let _ = stream.set_nodelay(true);
    Some(stream)
}
