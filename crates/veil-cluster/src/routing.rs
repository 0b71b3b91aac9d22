//! Where this node's engine calls go now: to its own engine while it owns the queues, to the owner's
//! internal service while another node does, nowhere (unavailable) while no node can serve. The node's lease
//! loop sets it ([`Routing::lead`], [`Routing::follow`], [`Routing::nobody`]); every front-end reads it per
//! call through the node's `Dispatch`, which makes this the `Transport`.

use std::sync::Arc;

use parking_lot::RwLock;
use veil_core::dispatch::{Answer, Call, Transport};
use veil_core::Engine;

use crate::client::Peer;
use crate::token::Token;
use crate::unavailable;

/// What a call answers while no node can serve (the database unreachable, a new owner still loading).
pub const NO_OWNER: &str = "no node serves the queues now; retry";

/// The current route, shared by the lease loop (writer) and every request (readers).
#[derive(Clone)]
pub struct Routing {
    /// Read on every call, written only when ownership changes; never held across an await.
    route: Arc<RwLock<Route>>,
    token: Token,
}

enum Route {
    Nobody,
    Here(Arc<Engine>),
    At(Box<Peer>),
}

impl Routing {
    /// Nobody serves yet; calls to other nodes present `token`.
    pub fn new(token: Token) -> Self {
        Self {
            route: Arc::new(RwLock::new(Route::Nobody)),
            token,
        }
    }

    /// This node owns the queues: its calls, and other nodes' calls to it, run on `engine`.
    pub fn lead(&self, engine: Arc<Engine>) {
        *self.route.write() = Route::Here(engine);
    }

    /// `addr` (`host:port` of its internal service) owns the queues. Keeps the connection when it is the
    /// owner already known.
    pub fn follow(&self, addr: &str) {
        if matches!(&*self.route.read(), Route::At(peer) if peer.addr() == addr) {
            return;
        }
        let next = match Peer::new(addr, &self.token) {
            Ok(peer) => Route::At(Box::new(peer)),
            Err(error) => {
                tracing::warn!(%error, addr, "cannot route to the owner");
                Route::Nobody
            }
        };
        *self.route.write() = next;
    }

    /// No node serves now. Returns this node's engine if it was the owner, so the caller can drain it.
    pub fn nobody(&self) -> Option<Arc<Engine>> {
        match std::mem::replace(&mut *self.route.write(), Route::Nobody) {
            Route::Here(engine) => Some(engine),
            _ => None,
        }
    }

    /// The owner's address while another node owns the queues.
    pub fn follows(&self) -> Option<String> {
        match &*self.route.read() {
            Route::At(peer) => Some(peer.addr().to_owned()),
            _ => None,
        }
    }

    /// This node's engine while it owns the queues.
    pub fn engine(&self) -> Option<Arc<Engine>> {
        match &*self.route.read() {
            Route::Here(engine) => Some(engine.clone()),
            _ => None,
        }
    }

    /// Whether some node (this one or another) serves the queues now, as far as this node knows.
    pub fn served(&self) -> bool {
        !matches!(&*self.route.read(), Route::Nobody)
    }
}

impl Transport for Routing {
    fn call(&self, call: Call) -> Answer {
        let route = match &*self.route.read() {
            Route::Nobody => None,
            Route::Here(engine) => Some(Err(engine.clone())),
            Route::At(peer) => Some(Ok(Peer::clone(peer))),
        };
        Box::pin(async move {
            match route {
                None => Err(unavailable(NO_OWNER)),
                Some(Err(engine)) => Ok(engine.execute(call).await),
                Some(Ok(peer)) => peer.call(call).await,
            }
        })
    }

    fn local(&self) -> Option<Arc<Engine>> {
        self.engine()
    }
}
