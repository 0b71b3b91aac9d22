//! Veil on PostgreSQL (docs/cluster.md; docs/decisions/0011-partitioned-ownership.md). Several stateless Veil
//! nodes share one database, or several (shards): the queues are spread over partitions, each owned by one
//! node at a time, which runs an engine over a [`PgStore`] of that partition. This crate is everything that
//! talks to PostgreSQL:
//!
//! - `connect`: connections from a libpq-style string (several hosts and `target_session_attrs=read-write`
//!   allowed, so a promoted replica is found by reconnecting), with Veil's timeouts set on each;
//! - `migrations`: the versioned schema, applied at start-up by refinery; a database migrated by a newer
//!   binary is refused;
//! - `store`: [`PgStore`], veil-core's `Store` over the schema, with group commit and the lease's fencing
//!   epoch checked inside every write transaction;
//! - `lease`: the leader lease, its epoch and the addresses its holder serves on;
//! - `partition`, `partition_lease`: which partition a queue belongs to, the cluster's partition count, and
//!   each partition's lease and epoch, and the nodes alive now;
//! - `import`: moves between shards, copied from one database's inbox into another's;
//! - `clock`: [`DbClock`], the engine's clock in a cluster: the database's time, so every leader decides
//!   visibility on one clock;
//! - `secret`: the cluster's shared secret (receipt key, Azure delegation keys, forwarding token);
//! - `rpc_keys`: the keys of the internal RPC's token after a rotation, and when each is sent and accepted.
//!
//! It knows nothing of any protocol.

pub mod clock;
pub mod connect;
pub mod import;
pub mod lease;
pub mod limits;
pub mod migrations;
pub mod partition;
pub mod partition_lease;
pub mod rpc_keys;
pub mod secret;
pub mod settings;
pub mod store;
pub mod testing;

pub use clock::DbClock;
pub use connect::{connect, PgOptions};
pub use lease::{LeaderAddrs, Lease, LeaseHolder};
pub use store::{PgStore, Scope, SharedWriter};
