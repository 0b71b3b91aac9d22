//! Every limit Veil enforces, named with its unit last, in one place (TIGER_STYLE). The engine's own ranges come
//! here; each protocol's wire limits live in its front-end crate (`veil_sqs::limits`, `veil_azure::limits`,
//! `veil_kubemq::limits`), so the engine holds no protocol's rules.

use crate::clock::Millis;

pub const SECOND_MS: Millis = 1_000;
pub const HOUR_MS: Millis = 3_600 * SECOND_MS;
pub const DAY_MS: Millis = 24 * HOUR_MS;

/// The engine's visibility range: 0 .. 7 days (docs/semantics.md §3). Each front-end narrows it.
pub const VISIBILITY_TIMEOUT_MS_MAX: Millis = 7 * DAY_MS;
/// Default visibility of a new queue when its protocol does not say.
pub const VISIBILITY_TIMEOUT_MS_DEFAULT: Millis = 30 * SECOND_MS;
/// Default retention of a new queue when its protocol does not say (SQS: 4 days).
pub const RETENTION_MS_DEFAULT: Millis = 4 * DAY_MS;
/// Default cap on a message body for a new queue (SQS: 1 MiB).
pub const MESSAGE_SIZE_BYTES_DEFAULT: u32 = 1_048_576;
/// Default number of Hidden messages after which a standard queue's receive fails (AWS: ~120,000 per standard queue).
pub const INFLIGHT_MESSAGES_DEFAULT: u32 = 120_000;
/// Largest number of messages one engine receive or peek returns (KubeMQ's `MaxNumberOfMessages`).
pub const RECEIVE_MESSAGES_MAX: usize = 1_024;
/// Longest long-poll the engine accepts (KubeMQ allows an hour).
pub const RECEIVE_WAIT_MS_MAX: Millis = 3_600 * SECOND_MS;
/// Sequence numbers are reserved in blocks so that the store records a queue's high-water mark once per
/// block instead of once per send.
pub const SEQ_RESERVE_BLOCK: u64 = 1 << 16;
/// How long a FIFO queue remembers a deduplication id when its protocol does not say (SQS: 5 minutes).
pub const DEDUP_INTERVAL_MS_DEFAULT: Millis = 5 * 60 * SECOND_MS;
/// How long a FIFO queue remembers a receive attempt id for its retry (SQS: 5 minutes).
pub const RECEIVE_ATTEMPT_MS_MAX: Millis = 5 * 60 * SECOND_MS;
/// Most messages one step of a move task without a rate moves: bounds how long a step holds the engine lock
/// (docs/semantics.md §8).
pub const MOVE_TASK_MOVES_PER_STEP_MAX: usize = 1_000;
/// Most inbox entries one drain of a partition's inbox accepts (crate::inbox): bounds how long it holds the
/// engine lock and how large its commit is.
pub const INBOX_ENTRIES_PER_DRAIN_MAX: usize = 1_000;
/// Finished move tasks kept per source queue, most recent first; older ones are forgotten.
pub const MOVE_TASKS_FINISHED_PER_SOURCE_MAX: usize = 10;
/// Upper bounds of the receive-count buckets in which each queue counts its deliveries: first deliveries,
/// second ones, up to the 5th, up to the 10th; a last bucket takes the rest. Few buckets on purpose: every
/// queue exports each one as a series.
pub const DELIVERY_RECEIVE_COUNT_BUCKETS: [u32; 4] = [1, 2, 5, 10];
/// Most messages one browse returns.
pub const BROWSE_MESSAGES_MAX: usize = 1_000;
/// Deliveries a message's history keeps, most recent last; older ones are forgotten (docs/semantics.md §9).
pub const DELIVERY_HISTORY_ENTRIES_MAX: usize = 8;
/// Histories of recently deleted messages each queue keeps in memory (not durable), so that a question asked
/// right after a delete still answers "deleted". At most ~1.5 KiB each.
pub const DELETED_HISTORIES_KEPT: usize = 256;
/// Payloads one read of a history look-up takes when it must match message ids by reading them (histories
/// restored after a restart before their id was learned): bounds each read outside the engine lock.
pub const HISTORY_LOOKUP_PAYLOADS_PER_READ_MAX: usize = 1_024;
/// Upper bounds (nanoseconds) of the buckets in which the engine lock's waits and holds are counted
/// (`veil_engine_lock_hold_seconds`, ADR 0012): 1 µs to 10 ms, a last bucket takes the rest.
pub const ENGINE_LOCK_BUCKETS_NS: [u64; 11] = [
    1_000, 2_000, 5_000, 10_000, 20_000, 50_000, 100_000, 200_000, 500_000, 1_000_000, 10_000_000,
];
/// Distinct consumers whose one shared copy a queue's delivery histories keep (`Histories::consumer`); past
/// this the set starts over, which costs memory (a record then holds its own copy), never a record.
pub const HISTORY_CONSUMERS_INTERNED_MAX: usize = 256;

/// The longest namespace, in bytes (crate::ident): an SQS `sqs:<account>:<region>`, an Azure account's or a
/// KubeMQ one's, with room to spare; every namespace is a store key and a metrics label.
pub const NAMESPACE_BYTES_MAX: usize = 256;
/// The longest queue name, in bytes: the widest protocol's (KubeMQ channels, 256); SQS allows 80 characters
/// and Azure 63.
pub const QUEUE_NAME_BYTES_MAX: usize = 256;
/// The longest FIFO message group or deduplication id, in bytes (SQS's 128).
pub const MESSAGE_GROUP_ID_BYTES_MAX: usize = 128;
/// The longest sender or consumer identity a message or a delivery history keeps, in bytes (KubeMQ's ClientID,
/// the protocol with free-form client names; docs/security.md "Identifiers").
pub const CLIENT_ID_BYTES_MAX: usize = 256;
/// The longest attribute (KubeMQ tag, SQS message attribute) name, in bytes (SQS's 256).
pub const ATTRIBUTE_NAME_BYTES_MAX: usize = 256;
