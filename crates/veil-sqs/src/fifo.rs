//! What FIFO queues add to SQS on the wire (docs/semantics.md §SQS, "FIFO queues"): which queue is FIFO, the
//! `SequenceNumber` a FIFO message shows, and which receipts its deletes and visibility changes honour. The
//! rules themselves — order within a message group, a group blocked while one of its messages is in flight,
//! deduplication, receive attempts — are the engine's (`veil_core::FifoConfig`).

use veil_core::{ReceiptRule, Seq};

/// The suffix of every FIFO queue's name; it counts toward the 80 characters of a queue name.
pub const NAME_SUFFIX: &str = ".fifo";

/// A queue is FIFO exactly when its name ends in `.fifo`: CreateQueue refuses a `.fifo` name without
/// `FifoQueue=true` and `FifoQueue=true` without the suffix, and a queue never changes type, so the name
/// answers without a look-up.
pub fn is_fifo_name(name: &str) -> bool {
    name.ends_with(NAME_SUFFIX)
}

/// Added to the engine's sequence number to render `SequenceNumber`: AWS's are large 20-digit decimals
/// ("the large, non-consecutive number that Amazon SQS assigns to each message", botocore's model), which
/// clients store as strings or parse as big integers. 10^19 + seq keeps that shape for every seq a queue can
/// reach (it stays below 10^20 as u128 arithmetic), and grows strictly with seq, so the send order of a
/// queue's messages is the order of their sequence numbers, within each group and across groups.
const SEQUENCE_NUMBER_BASE: u128 = 10_000_000_000_000_000_000;

/// The `SequenceNumber` of the message the engine numbered `seq` in its queue.
pub fn sequence_number(seq: Seq) -> String {
    (SEQUENCE_NUMBER_BASE + u128::from(seq)).to_string()
}

/// Which receipts DeleteMessage and ChangeMessageVisibility honour on the queue `name`: on a FIFO queue only
/// the latest receive's, while its visibility lasts (AWS: "The receipt handle has expired." after it); on a
/// standard queue any receipt Veil issued for the message (docs/semantics.md §SQS, receipts).
pub fn receipt_rule(name: &str) -> ReceiptRule {
    if is_fifo_name(name) {
        ReceiptRule::Unexpired
    } else {
        ReceiptRule::AnyIssued
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sequence_numbers_are_20_digits_and_grow_with_seq() {
        assert_eq!(sequence_number(0), "10000000000000000000");
        assert_eq!(sequence_number(41), "10000000000000000041");
        let last = sequence_number(u64::MAX);
        assert_eq!(last.len(), 20);
        let shown: Vec<u128> = [0, 1, 9, 10, 1 << 40, u64::MAX - 1, u64::MAX]
            .into_iter()
            .map(|seq| sequence_number(seq).parse().unwrap())
            .collect();
        assert!(shown.windows(2).all(|pair| pair[0] < pair[1]), "{shown:?}");
    }

    #[test]
    fn only_fifo_queues_need_an_unexpired_receipt() {
        assert_eq!(receipt_rule("jobs.fifo"), ReceiptRule::Unexpired);
        assert_eq!(receipt_rule("jobs"), ReceiptRule::AnyIssued);
        assert_eq!(receipt_rule("fifo"), ReceiptRule::AnyIssued);
    }
}
