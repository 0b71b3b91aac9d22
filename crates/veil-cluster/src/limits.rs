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
/// Connections the internal port holds open at once; one more is closed as soon as it is accepted. Each node
/// keeps one connection to each other node, so this is far above any cluster's size, and far below what
/// exhausts the process's descriptors (the public listeners' default is 10,000 each).
pub const CONNECTIONS_MAX: usize = 1_024;
/// Time for a new connection to send its first bytes (a node's client sends the HTTP/2 preface at once), and
/// for a TLS handshake to complete (ms).
pub const FIRST_BYTES_MS_MAX: u64 = 5_000;
pub const TLS_HANDSHAKE_MS_MAX: u64 = 5_000;
/// A connection whose peer sent nothing for this long is closed: a node's connection carries an HTTP/2 ping
/// or its answer every `KEEPALIVE_INTERVAL_MS` even when idle, so only a half-open connection, or a client
/// that is not a node, stays silent this long (ms).
pub const IDLE_MS_MAX: u64 = 10_000;
