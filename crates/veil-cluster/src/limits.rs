//! The internal RPC's limits, in one place.

/// Largest frame either way: a receive of the most messages at the largest size any protocol allows, with
/// room for their attributes and the history of each (bytes).
pub const FRAME_BYTES_MAX: usize = 64 * 1024 * 1024;
/// How long a call may take beyond the long-poll wait it asks for (a receive may wait up to the engine's
/// `RECEIVE_WAIT_MS_MAX`, an hour for KubeMQ): the owner's work and the round trip (ms).
pub const CALL_BEYOND_WAIT_MS_MAX: u64 = 10_000;
/// How long connecting to another node may take before the call fails as unavailable (ms).
pub const CONNECT_MS_MAX: u64 = 1_000;
/// HTTP/2 pings on an idle connection, and how long one may go unanswered before the connection is dropped:
/// a node that vanished (its host lost, the process paused) fails the calls waiting on it within about this
/// long instead of at the call's own bound (ms).
pub const KEEPALIVE_INTERVAL_MS: u64 = 1_000;
pub const KEEPALIVE_TIMEOUT_MS: u64 = 2_000;
/// How long a call waits for its partition's next owner when the one it knew handed it over (or none is
/// known while the database is reachable): a partition moving between nodes costs its callers this much
/// latency at most, not an error (ms).
pub const REROUTE_WAIT_MS_MAX: u64 = 2_000;
