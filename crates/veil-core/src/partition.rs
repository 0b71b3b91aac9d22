//! Partitions of a cluster's queues (docs/decisions/0011-partitioned-ownership.md): which partition a queue
//! belongs to, decided from its key alone, so that every node finds a queue's owner without asking anyone.
//! The count is fixed per cluster; nothing moves a queue between partitions.

use crate::model::QueueKey;

/// A partition's number, `0..count`.
pub type Partition = u32;

/// The partition of the queue `(namespace, name)` among `count`: FNV-1a (64-bit) over the namespace, a zero
/// byte and the name, modulo `count`. Written down here because it must never change: every node of every
/// version must place a queue where the catalog has it.
pub fn partition_of(key: &QueueKey, count: u32) -> Partition {
    let hash = fnv1a([key.namespace.as_bytes(), &[0u8], key.name.as_bytes()]);
    (hash % u64::from(count.max(1))) as Partition
}

/// FNV-1a (64-bit) over `parts` one after the other: a stable hash, the same in every build and process.
pub fn fnv1a<'a>(parts: impl IntoIterator<Item = &'a [u8]>) -> u64 {
    const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    parts.into_iter().flatten().fold(OFFSET, |hash, byte| {
        (hash ^ u64::from(*byte)).wrapping_mul(PRIME)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(namespace: &str, name: &str) -> QueueKey {
        QueueKey::new(namespace, name)
    }

    #[test]
    fn a_queues_partition_never_changes_between_versions() {
        // Pinned values: a change to the hash would move every existing queue away from its data.
        let pinned = [
            (key("000000000000", "orders"), 64),
            (key("devstoreaccount1", "orders"), 64),
            (key("kubemq", "jobs"), 16),
        ];
        let first: Vec<u32> = pinned.iter().map(|(k, n)| partition_of(k, *n)).collect();
        assert_eq!(first, EXPECTED, "the partition hash changed");
    }

    /// FNV-1a computed apart from this code (a Python one-liner) for the pinned keys.
    const EXPECTED: [u32; 3] = [22, 4, 6];

    #[test]
    fn namespace_and_name_do_not_run_together() {
        let count = 1 << 20;
        assert_ne!(
            partition_of(&key("ab", "c"), count),
            partition_of(&key("a", "bc"), count),
            "the separator keeps (ab, c) and (a, bc) apart"
        );
    }

    #[test]
    fn queues_spread_over_the_partitions() {
        let count = 16u32;
        let mut seen = vec![0u32; count as usize];
        for n in 0..1_600 {
            seen[partition_of(&key("000000000000", &format!("queue-{n}")), count) as usize] += 1;
        }
        let (least, most) = (seen.iter().min(), seen.iter().max());
        assert!(
            least >= Some(&60) && most <= Some(&140),
            "1,600 queues over 16 partitions, each 100 ± 40: {seen:?}"
        );
    }
}
