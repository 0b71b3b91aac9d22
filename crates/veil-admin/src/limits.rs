//! The admin endpoint's limits, named with their unit last, in one place.

/// Most messages one admin send takes (an import sends in batches of this size).
pub const SEND_MESSAGES_MAX: usize = 1_000;
/// Largest JSON request body the admin API reads (a batch of sends with base64 bodies).
pub const REQUEST_BODY_BYTES_MAX: usize = 64 * 1024 * 1024;
/// Most messages one admin receive returns.
pub const RECEIVE_MESSAGES_MAX: usize = 1_000;
/// Longest wait of one admin receive.
pub const RECEIVE_WAIT_S_MAX: u64 = 20;
/// How often the console's per-queue series takes a sample.
pub const SERIES_INTERVAL_S: u64 = 30;
/// Samples kept per queue: one hour at `SERIES_INTERVAL_S`.
pub const SERIES_SAMPLES_MAX: usize = 120;
/// The receive counts a declared dead-letter rule may name (`[[queues]]`, `veil queues apply`): SQS's range,
/// the narrowest of the three protocols'.
pub const DECLARED_MAX_RECEIVE_COUNT_MIN: u32 = 1;
pub const DECLARED_MAX_RECEIVE_COUNT_MAX: u32 = 1_000;
/// Most queues one declaration list may hold (`[[queues]]`, `veil queues apply`): each entry is a look-up and
/// perhaps a create under the engine lock, and a longer list is applied in parts.
pub const DECLARED_QUEUES_MAX: usize = 10_000;
/// The longest retention an admin path sets, in seconds: the widest protocol's (Azure's message time-to-live
/// is a 32-bit count of seconds, about 68 years); a longer one could only overflow a deadline.
pub const RETENTION_S_MAX: u64 = i32::MAX as u64;
