//! Limits of every listener against abuse (docs/security.md "Limits against abuse"), with their defaults.
//! Each listener has its own [`Limits`]; `veil serve` builds them from the config file's `[limits]` table.

use std::time::Duration;

/// Connections one listener holds open at once; a connection beyond it is closed as soon as it is accepted.
pub const MAX_CONNECTIONS_DEFAULT: usize = 10_000;
/// Bytes of one request's line and headers (HTTP/1 read buffer; HTTP/2 header list). 64 KiB: far above what
/// the SDKs send, far below what lets a client make the server buffer much per connection.
pub const MAX_HEADER_BYTES_DEFAULT: usize = 64 * 1024;
/// The smallest header limit hyper accepts for its HTTP/1 read buffer.
pub const MAX_HEADER_BYTES_MIN: usize = 8 * 1024;
/// Headers in one HTTP/1 request (hyper's own default).
pub const MAX_HEADERS_DEFAULT: usize = 100;
/// Time for a client to send a whole request head, and (HTTP/1) for an idle keep-alive connection to start
/// its next request: hyper runs the same timer from the end of one response to the end of the next head.
/// A new connection has as long to send its first bytes (HTTP/1 or HTTP/2), or it is closed.
pub const HEADER_READ_TIMEOUT_MS_DEFAULT: u64 = 30_000;
/// Pause between two peeks at a plain connection whose first bytes are only a part of HTTP/2's preface (a
/// peek returns the same bytes at once until more arrive).
pub const PREFACE_REPEEK_MS: u64 = 5;
/// Longest pause between two pieces of a request body before the request fails.
pub const BODY_READ_TIMEOUT_MS_DEFAULT: u64 = 30_000;
/// Longest time from a request's head to the last byte of its body, however steadily it trickles. 60 s lets
/// the largest body any protocol takes (SQS's 1 MiB) through at 17 KiB/s.
pub const BODY_READ_TOTAL_TIMEOUT_MS_DEFAULT: u64 = 60_000;
/// Time for a client to complete the TLS handshake after connecting.
pub const TLS_HANDSHAKE_TIMEOUT_MS_DEFAULT: u64 = 10_000;
/// Interval of HTTP/2 keep-alive pings, which close a connection whose peer stopped answering.
pub const HTTP2_KEEPALIVE_INTERVAL_MS: u64 = 60_000;
/// Requests per second per connection of the rate limit; 0 = no limit (the default: one client of a
/// trusted network may legitimately send thousands of requests a second over one connection).
pub const REQUEST_RATE_PER_S_DEFAULT: f64 = 0.0;
/// Requests a connection may send at once above the rate, when the rate limit is on.
pub const REQUEST_BURST_DEFAULT: u32 = 100;
/// Requests one listener works on at once (docs/reliability.md "Load and overload"); one more waits up to
/// `ADMISSION_WAIT_MS_DEFAULT` for a slot, then gets the protocol's throttling error. A long poll leaves the
/// count while it waits. 0 = no limit. Durable sends commit in groups, so throughput needs many requests in
/// flight; at 512 a shared 2-core machine sent about 4,000 messages/s (bench/overload.sh, docs/reliability.md
/// "Load and overload"), which bounds the queueing inside Veil to about 512 / 4,000 s ≈ 130 ms.
pub const MAX_REQUESTS_IN_FLIGHT_DEFAULT: usize = 512;
/// Milliseconds a request over the admission limit waits for a slot before it is refused: a short burst is
/// absorbed, sustained overload answered at once.
pub const ADMISSION_WAIT_MS_DEFAULT: u64 = 100;
/// Body bytes of a throttled request read (and dropped) so that its connection stays usable; a larger body
/// closes the connection instead.
pub const THROTTLED_BODY_DRAIN_BYTES: usize = 64 * 1024;
/// Accepted connections waiting for their TLS handshake or for the server to pick them up.
pub const ACCEPT_QUEUE: usize = 128;
/// Pause after the first failed accept of a run (e.g. out of file descriptors: EMFILE, ENFILE) before the
/// next, so the loop does not spin; each further failure in a row doubles it up to
/// `ACCEPT_ERROR_PAUSE_MS_MAX`, and an accept that succeeds starts over. The loop never ends on an accept
/// error: descriptors freed, the listener accepts again within the longest pause.
pub const ACCEPT_ERROR_PAUSE_MS_MIN: u64 = 10;
pub const ACCEPT_ERROR_PAUSE_MS_MAX: u64 = 1_000;

/// One listener's limits.
#[derive(Clone, Debug, PartialEq)]
pub struct Limits {
    pub max_connections: usize,
    pub max_header_bytes: usize,
    pub max_headers: usize,
    pub header_read_timeout: Duration,
    /// Longest pause between two pieces of a body.
    pub body_read_timeout: Duration,
    /// Longest time to read a whole body, from the request's head.
    pub body_read_total_timeout: Duration,
    pub tls_handshake_timeout: Duration,
    /// `None`: no per-connection request-rate limit.
    pub rate: Option<Rate>,
    /// Requests worked on at once (the admission limit); 0 = no limit.
    pub max_requests_in_flight: usize,
    /// Longest wait for an admission slot before the request is refused.
    pub admission_wait: Duration,
    /// `Some`: a connection whose peer sent nothing for this long is closed (its next read fails). Only for
    /// listeners whose clients keep talking while idle (the cluster's nodes ping every second); a protocol
    /// client may be silent between requests for as long as it likes. `None` by default.
    pub idle_timeout: Option<Duration>,
}

/// A token bucket's parameters: `per_second` requests on average, `burst` at once.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Rate {
    pub per_second: f64,
    pub burst: u32,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_connections: MAX_CONNECTIONS_DEFAULT,
            max_header_bytes: MAX_HEADER_BYTES_DEFAULT,
            max_headers: MAX_HEADERS_DEFAULT,
            header_read_timeout: Duration::from_millis(HEADER_READ_TIMEOUT_MS_DEFAULT),
            body_read_timeout: Duration::from_millis(BODY_READ_TIMEOUT_MS_DEFAULT),
            body_read_total_timeout: Duration::from_millis(BODY_READ_TOTAL_TIMEOUT_MS_DEFAULT),
            tls_handshake_timeout: Duration::from_millis(TLS_HANDSHAKE_TIMEOUT_MS_DEFAULT),
            rate: None,
            max_requests_in_flight: MAX_REQUESTS_IN_FLIGHT_DEFAULT,
            admission_wait: Duration::from_millis(ADMISSION_WAIT_MS_DEFAULT),
            idle_timeout: None,
        }
    }
}
