//! veil-store: Veil's durable embedded store. It implements veil-core's [`veil_core::Store`] port with a
//! write-ahead log in front of redb (docs/decisions/0004-write-ahead-log.md): one writer thread appends
//! everything that queued up while the previous sync ran and syncs once (group commit); a checkpointer applies
//! closed log segments to redb in the background. It also owns the rest of the data directory: the receipt
//! secret.

mod bodies;
mod checkpoint;
mod codec;
mod faults;
#[doc(hidden)]
pub mod fuzzing;
mod io;
mod limits;
mod overlay;
mod private;
mod redb_store;
mod secret;
mod sim_disk;
mod tables;
mod wal;
mod writer;

pub use checkpoint::Recovered;
pub use faults::{Fault, FaultPlan};
pub use io::{FsIo, IoBackend, RedbBackend, StorageFile, StorageIo};
pub use limits::{CACHE_BYTES_DEFAULT, WAL_SEGMENT_BYTES_MAX};
pub use redb_store::{probe_writable, Durability, RedbStore, StoreOptions};
pub use secret::{load_or_create_secret, load_or_create_secret_on};
pub use sim_disk::{CrashPlan, Effect, IoOp, SimDisk, SimFault, SimStats, When};
