//! Limits of the SQS front-end that `veil_core::limits::sqs` does not name yet. Everything else comes from
//! there; the two modules together are the single list of numbers the SQS protocol enforces.

use veil_core::limits::sqs as core_sqs;

/// The total of a SendMessageBatch (bodies and attributes) shares the single-message cap (protocols/sqs.md).
pub const BATCH_REQUEST_BYTES_MAX: u64 = core_sqs::MESSAGE_SIZE_BYTES_MAX;
/// Largest HTTP body accepted: a 1 MiB batch percent-encoded in a form can triple in size, plus overhead.
pub const HTTP_BODY_BYTES_MAX: usize = 4 * core_sqs::MESSAGE_SIZE_BYTES_MAX as usize;
/// ListDeadLetterSourceQueues pages like ListQueues.
pub const LIST_DEAD_LETTER_SOURCES_RESULTS_MAX: usize = core_sqs::LIST_QUEUES_RESULTS_MAX;
/// Tag keys and values (AWS: keys up to 128 characters, values up to 256).
pub const TAG_KEY_CHARS_MAX: usize = 128;
pub const TAG_VALUE_CHARS_MAX: usize = 256;
/// Digits in a Number message attribute (AWS: up to 38 digits of precision).
pub const NUMBER_ATTRIBUTE_DIGITS_MAX: usize = 38;
