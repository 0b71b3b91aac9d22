//! Every limit Veil enforces, named with its unit last, in one place (TIGER_STYLE). The engine's own ranges come
//! first; each protocol's wire limits follow in a module of its own so that a front-end validates against the
//! same numbers the documentation quotes.

use crate::clock::Millis;

pub const SECOND_MS: Millis = 1_000;
pub const HOUR_MS: Millis = 3_600 * SECOND_MS;
pub const DAY_MS: Millis = 24 * HOUR_MS;

/// The engine's visibility range: 0 .. 7 days (SPEC §3). Each front-end narrows it.
pub const VISIBILITY_TIMEOUT_MS_MAX: Millis = 7 * DAY_MS;
/// Default visibility of a new queue when its protocol does not say.
pub const VISIBILITY_TIMEOUT_MS_DEFAULT: Millis = 30 * SECOND_MS;
/// Default retention of a new queue when its protocol does not say (SQS: 4 days).
pub const RETENTION_MS_DEFAULT: Millis = 4 * DAY_MS;
/// Default cap on a message body for a new queue (SQS: 1 MiB).
pub const MESSAGE_SIZE_BYTES_DEFAULT: u32 = 1_048_576;
/// Default number of Hidden messages after which a standard queue's receive fails (seed 004: ~120,000).
pub const INFLIGHT_MESSAGES_DEFAULT: u32 = 120_000;
/// Largest number of messages one engine receive or peek returns (KubeMQ's `MaxNumberOfMessages`).
pub const RECEIVE_MESSAGES_MAX: usize = 1_024;
/// Longest long-poll the engine accepts (KubeMQ allows an hour).
pub const RECEIVE_WAIT_MS_MAX: Millis = 3_600 * SECOND_MS;
/// Sequence numbers are reserved in blocks so that the store records a queue's high-water mark once per
/// block instead of once per send.
pub const SEQ_RESERVE_BLOCK: u64 = 1 << 16;

/// Amazon SQS wire limits (protocols/sqs.md).
pub mod sqs {
    use super::*;

    pub const VISIBILITY_TIMEOUT_S_MAX: u64 = 43_200;
    pub const VISIBILITY_TIMEOUT_S_DEFAULT: u64 = 30;
    /// ChangeMessageVisibility may not push a message past this long after its receive.
    pub const VISIBILITY_TOTAL_MS_MAX: Millis = 12 * HOUR_MS;
    pub const DELAY_S_MAX: u64 = 900;
    pub const RETENTION_S_MIN: u64 = 60;
    pub const RETENTION_S_MAX: u64 = 1_209_600;
    pub const RETENTION_S_DEFAULT: u64 = 345_600;
    pub const MESSAGE_SIZE_BYTES_MIN: u64 = 1_024;
    pub const MESSAGE_SIZE_BYTES_MAX: u64 = 1_048_576;
    pub const RECEIVE_WAIT_S_MAX: u64 = 20;
    pub const RECEIVE_MESSAGES_MAX: u64 = 10;
    pub const BATCH_ENTRIES_MAX: usize = 10;
    pub const BATCH_ENTRY_ID_CHARS_MAX: usize = 80;
    pub const QUEUE_NAME_CHARS_MAX: usize = 80;
    pub const MESSAGE_ATTRIBUTES_MAX: usize = 10;
    pub const MESSAGE_ATTRIBUTE_NAME_CHARS_MAX: usize = 256;
    pub const MAX_RECEIVE_COUNT_MIN: u32 = 1;
    pub const MAX_RECEIVE_COUNT_MAX: u32 = 1_000;
    pub const REDRIVE_ALLOW_SOURCE_ARNS_MAX: usize = 10;
    pub const LIST_QUEUES_RESULTS_MAX: usize = 1_000;
    pub const TAGS_PER_QUEUE_MAX: usize = 50;
    /// One PurgeQueue per queue per 60 s.
    pub const PURGE_INTERVAL_MS_MIN: Millis = 60 * SECOND_MS;
    pub const DEFAULT_ACCOUNT_ID: &str = "000000000000";
    pub const DEFAULT_REGION: &str = "us-east-1";
}
