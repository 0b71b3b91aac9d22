//! veil-store: Veil's durable embedded store. It implements veil-core's [`veil_core::Store`] port on redb
//! (see docs/decisions/0001-embedded-store.md): one writer thread applies submissions in order and commits
//! everything that queued up while the previous commit was syncing in one transaction, so concurrent requests
//! share one fsync (group commit). It also owns the rest of the data directory: the receipt secret.

mod codec;
mod redb_store;
mod secret;

pub use redb_store::{Durability, RedbStore, StoreOptions, CACHE_BYTES_DEFAULT};
pub use secret::load_or_create_secret;
