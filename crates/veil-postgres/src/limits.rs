//! The PostgreSQL store's limits (the connection settings an operator chooses are in `connect::PgOptions`).

/// Operations one group commit takes at most: the waiting submissions are drained up to this many operations
/// into one transaction; the rest form the next one. Bounds a transaction's size and its pipeline's memory.
pub const GROUP_OPS_MAX: usize = 8_192;

/// Bytes of message bodies one group commit takes before it stops draining (a group may pass it by one
/// submission): bounds a transaction's parameter arrays and the database's memory for them, whatever the
/// body size.
pub const GROUP_BYTES_MAX: usize = 16 * 1024 * 1024;

/// The statement timeout of the start-up load (and its client-side bound): reading every message's state of a
/// large database takes longer than one ordinary statement may.
pub const LOAD_TIMEOUT_MS: u64 = 600_000;

/// Added to a call's own client-side bound while a caller thread waits for the store's I/O thread to answer:
/// the I/O thread reports its own timeout first.
pub const ANSWER_MARGIN_MS: u64 = 1_000;

/// How long applying the migrations at start-up may take (they wait for another node applying them).
pub const MIGRATION_TIMEOUT_MS: u64 = 60_000;

/// The most read connections `pool_size` may ask for: each is one of the database's `max_connections`, held
/// by every node that leads.
pub const POOL_SIZE_MAX: usize = 64;

/// The most writer connections `writers` may ask for: each is one of the database's `max_connections` and one
/// more transaction a barrier (store/lanes.rs) waits for.
pub const WRITERS_MAX: usize = 16;

/// The most partitions a cluster may have (fixed when it is created): each is a lease row every node reads
/// each round, and its queue ids start at `partition << 40`.
pub const PARTITIONS_MAX: u32 = 1_024;

/// The most databases a cluster's partitions may be spread over (`store` and its `[[postgres.shards]]`):
/// each is one control and one import connection per node, and a query per node every round.
pub const SHARDS_MAX: u32 = 16;

/// Inbox entries one import from another shard copies at most (import.rs): bounds the arrays of one
/// statement; the rest follow in the next.
pub const IMPORT_ENTRIES_MAX: i64 = 500;

/// Bytes of bodies one import from another shard copies before it stops (it takes at least one entry,
/// whatever its size): as [`GROUP_BYTES_MAX`] bounds a group commit, this bounds the node's memory and the
/// copy's statement, whatever the bodies' size.
pub const IMPORT_BYTES_MAX: i64 = GROUP_BYTES_MAX as i64;
