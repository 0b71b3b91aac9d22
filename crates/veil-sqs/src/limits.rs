//! Every limit the SQS front-end enforces, named with its unit last, in one place (docs/semantics.md quotes
//! them). The engine knows none of these: it takes durations and counts that this crate has validated.

use veil_core::limits::{HOUR_MS, SECOND_MS};
use veil_core::Millis;

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

/// The total of a SendMessageBatch (bodies and attributes) shares the single-message cap (docs/semantics.md §SQS).
pub const BATCH_REQUEST_BYTES_MAX: u64 = MESSAGE_SIZE_BYTES_MAX;
/// Largest HTTP body accepted: a 1 MiB batch percent-encoded in a form can triple in size, plus overhead.
pub const HTTP_BODY_BYTES_MAX: usize = 4 * MESSAGE_SIZE_BYTES_MAX as usize;
/// ListDeadLetterSourceQueues pages like ListQueues.
pub const LIST_DEAD_LETTER_SOURCES_RESULTS_MAX: usize = LIST_QUEUES_RESULTS_MAX;
/// Tag keys and values (AWS: keys up to 128 characters, values up to 256).
pub const TAG_KEY_CHARS_MAX: usize = 128;
pub const TAG_VALUE_CHARS_MAX: usize = 256;
/// Digits in a Number message attribute (AWS: up to 38 digits of precision).
pub const NUMBER_ATTRIBUTE_DIGITS_MAX: usize = 38;
/// Characters in a message attribute's data type, custom suffix included (AWS's documented 256).
pub const MESSAGE_ATTRIBUTE_TYPE_CHARS_MAX: usize = 256;
/// A Number message attribute's magnitude is 0 or between 10^-128 and 10^126 (AWS's documented range).
pub const NUMBER_ATTRIBUTE_EXPONENT_MIN: i64 = -128;
pub const NUMBER_ATTRIBUTE_EXPONENT_MAX: i64 = 126;
/// `KmsDataKeyReusePeriodSeconds`: 60 s to 24 h, 300 s when not set (AWS's CreateQueue reference).
pub const KMS_DATA_KEY_REUSE_S_MIN: u64 = 60;
pub const KMS_DATA_KEY_REUSE_S_MAX: u64 = 86_400;
pub const KMS_DATA_KEY_REUSE_S_DEFAULT: u64 = 300;
/// AddPermission: at most 7 actions in one statement (AWS's AddPermission reference), a label of 1 to 80
/// characters, and 12-digit account ids.
pub const PERMISSION_ACTIONS_MAX: usize = 7;
pub const PERMISSION_LABEL_CHARS_MAX: usize = 80;
pub const ACCOUNT_ID_DIGITS: usize = 12;
/// StartMessageMoveTask's `MaxNumberOfMessagesPerSecond`: 1 to 500 when given (AWS's reference); without it a
/// task moves as fast as the engine's steps allow.
pub const MOVE_TASK_RATE_PER_S_MIN: i64 = 1;
pub const MOVE_TASK_RATE_PER_S_MAX: i64 = 500;
/// ListMessageMoveTasks' `MaxResults`: 1 to 10, the most recent task when not given.
pub const MOVE_TASK_LIST_RESULTS_MAX: i64 = 10;
pub const MOVE_TASK_LIST_RESULTS_DEFAULT: i64 = 1;
/// FIFO queues (docs/semantics.md §SQS "FIFO queues"): at most 20,000 messages in flight (AWS's quota; at the
/// limit a receive returns nothing rather than OverLimit), deduplication ids remembered for 5 minutes, and
/// `MessageGroupId`, `MessageDeduplicationId` and `ReceiveRequestAttemptId` of 1 to 128 characters.
pub const FIFO_INFLIGHT_MESSAGES_MAX: u32 = 20_000;
pub const FIFO_DEDUP_INTERVAL_MS: Millis = 5 * 60 * SECOND_MS;
pub const FIFO_ID_CHARS_MAX: usize = 128;
/// SigV4 (docs/security.md, "SQS"): a signed request may be dated up to 15 minutes from the server's clock
/// either way (AWS's skew), a presigned URL may be valid for at most 7 days (`X-Amz-Expires`, AWS's maximum),
/// and a signature may cover at most this many headers (a bound on the work of one canonical request).
pub const SIGV4_CLOCK_SKEW_MS_MAX: Millis = 15 * 60 * SECOND_MS;
pub const SIGV4_PRESIGNED_EXPIRES_S_MAX: u64 = 604_800;
pub const SIGV4_SIGNED_HEADERS_MAX: usize = 64;
/// Derived SigV4 signing keys kept (one per credential, day, region and service); the cache starts over when full.
pub const SIGV4_SIGNING_KEYS_CACHED_MAX: usize = 1_024;

/// The longest region name a credential scope may carry (AWS's longest today, `us-isob-east-1` style names,
/// are under 20): the region becomes part of a namespace (docs/security.md "Identifiers").
pub const REGION_CHARS_MAX: usize = 32;
