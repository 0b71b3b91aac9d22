//! Which partitions a node takes and hands back (docs/decisions/0011-partitioned-ownership.md): a pure
//! decision from what the partition leases and the live nodes say now, made by each node every round. A node
//! takes lapsed partitions up to its fair share (⌈P / live nodes⌉) and hands back one surplus partition per
//! round — only when some live node holds less than ⌊P / live⌋ and no partition is free for it to take,
//! which is the hysteresis: shares that differ by one are left alone, so ownership does not flap.

use veil_core::partition::Partition;

/// One partition as the leases say now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Slot {
    pub partition: Partition,
    /// The node holding a live lease on it; `None` while it is free (lapsed or released).
    pub owner: Option<String>,
}

/// What this node does this round.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Plan {
    /// Free partitions to try to take, in order (another node may take one first).
    pub take: Vec<Partition>,
    /// A partition to drain and release, for a node below its share.
    pub hand_back: Option<Partition>,
}

/// This round's plan for node `me`, given the nodes alive now and every partition's lease.
pub fn plan(me: &str, live: &[String], slots: &[Slot]) -> Plan {
    let mut nodes: Vec<&str> = live.iter().map(String::as_str).collect();
    if !nodes.contains(&me) {
        nodes.push(me);
    }
    // An owner whose node row lapsed still holds its leases: count it, or it would be asked for nothing.
    for slot in slots {
        if let Some(owner) = slot.owner.as_deref() {
            if !nodes.contains(&owner) {
                nodes.push(owner);
            }
        }
    }
    let count = slots.len();
    let share_max = count.div_ceil(nodes.len());
    let share_min = count / nodes.len();
    let held = |node: &str| {
        slots
            .iter()
            .filter(|slot| slot.owner.as_deref() == Some(node))
            .count()
    };
    let mine: Vec<Partition> = slots
        .iter()
        .filter(|slot| slot.owner.as_deref() == Some(me))
        .map(|slot| slot.partition)
        .collect();
    let free: Vec<Partition> = slots
        .iter()
        .filter(|slot| slot.owner.is_none())
        .map(|slot| slot.partition)
        .collect();
    let mut plan = Plan::default();
    // While another node holds less than the smaller share, a free partition is left to it beyond this node's
    // own smaller share: otherwise a node that just handed one back to a short node takes it again at once
    // (its next round follows the release), and the hand-back repeats without end.
    let others_short = nodes
        .iter()
        .any(|node| *node != me && held(node) < share_min);
    let target = if others_short { share_min } else { share_max };
    if mine.len() < target && !free.is_empty() {
        // Nodes starting together try different partitions first.
        let start = first_choice(me, free.len());
        plan.take = free
            .iter()
            .cycle()
            .skip(start)
            .take(free.len().min(target - mine.len()))
            .copied()
            .collect();
    }
    let someone_short = nodes.iter().any(|node| held(node) < share_min);
    let surplus = mine.len() > share_max || (mine.len() > share_min && someone_short);
    if surplus && free.is_empty() {
        plan.hand_back = mine.last().copied();
    }
    plan
}

/// Where in a list of `len` free partitions node `me` starts taking: a hash of its id.
fn first_choice(me: &str, len: usize) -> usize {
    (veil_core::partition::fnv1a([me.as_bytes()]) % len.max(1) as u64) as usize
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slots(owners: &[Option<&str>]) -> Vec<Slot> {
        owners
            .iter()
            .enumerate()
            .map(|(partition, owner)| Slot {
                partition: partition as Partition,
                owner: owner.map(str::to_owned),
            })
            .collect()
    }

    fn nodes(names: &[&str]) -> Vec<String> {
        names.iter().map(|name| (*name).to_owned()).collect()
    }

    /// Runs rounds in which each node in turn plans and acts on the leases at once (a take succeeds only on
    /// a free partition); returns the leases once a whole round changed nothing, and how many rounds that took.
    fn settle(names: &[&str], table: &mut [Slot], rounds_max: usize) -> usize {
        let live = nodes(names);
        for round in 1..=rounds_max {
            let before = table.to_vec();
            for me in names {
                let plan = plan(me, &live, table);
                if let Some(partition) = plan.hand_back {
                    table[partition as usize].owner = None;
                }
                for partition in plan.take {
                    let slot = &mut table[partition as usize];
                    if slot.owner.is_none() {
                        slot.owner = Some((*me).to_owned());
                    }
                }
            }
            if before == table {
                return round;
            }
        }
        panic!("ownership did not settle in {rounds_max} rounds: {table:?}");
    }

    fn shares(names: &[&str], table: &[Slot]) -> Vec<usize> {
        names
            .iter()
            .map(|name| {
                table
                    .iter()
                    .filter(|slot| slot.owner.as_deref() == Some(*name))
                    .count()
            })
            .collect()
    }

    #[test]
    fn a_lone_node_takes_every_partition() {
        let table = slots(&[None; 8]);
        let plan = plan("a", &nodes(&["a"]), &table);
        assert_eq!(plan.take.len(), 8);
        assert_eq!(plan.hand_back, None);
    }

    #[test]
    fn nodes_starting_together_split_the_partitions_evenly_and_then_hold_still() {
        for count in [1usize, 2, 7, 16, 64] {
            let mut table = slots(&vec![None; count]);
            let names = ["a", "b", "c"];
            settle(&names, &mut table, 50);
            assert!(table.iter().all(|slot| slot.owner.is_some()), "all owned");
            let shares = shares(&names, &table);
            let (least, most) = (shares.iter().min(), shares.iter().max());
            assert!(
                most.zip(least)
                    .is_some_and(|(most, least)| most - least <= 1),
                "{count} partitions over 3 nodes: {shares:?}"
            );
        }
    }

    #[test]
    fn a_joining_node_gets_its_share_from_the_others_one_hand_back_at_a_time() {
        let mut table = slots(&vec![None; 16]);
        settle(&["a", "b"], &mut table, 50);
        assert_eq!(shares(&["a", "b"], &table), vec![8, 8]);
        let first = plan("a", &nodes(&["a", "b", "c"]), &table);
        assert!(first.take.is_empty());
        assert!(first.hand_back.is_some(), "a holds 8 > ⌈16/3⌉ = 6");
        settle(&["a", "b", "c"], &mut table, 50);
        let mut shares = shares(&["a", "b", "c"], &table);
        shares.sort_unstable();
        assert_eq!(shares, vec![5, 5, 6]);
    }

    #[test]
    fn a_free_partition_is_left_to_a_short_node_not_taken_back_by_the_one_that_released_it() {
        // a just handed partition 1 back for c, which holds nothing; a's next round comes first.
        let table = slots(&[Some("a"), None, Some("b"), Some("b")]);
        let live = nodes(&["a", "b", "c"]);
        assert_eq!(plan("a", &live, &table), Plan::default(), "a keeps its one");
        assert_eq!(plan("c", &live, &table).take, vec![1], "c takes it");
    }

    #[test]
    fn shares_that_differ_by_one_are_left_alone() {
        let owners: Vec<Option<&str>> = (0..16)
            .map(|p| Some(["a", "b", "c"][(p % 3) as usize]))
            .collect();
        let table = slots(&owners);
        for me in ["a", "b", "c"] {
            assert_eq!(plan(me, &nodes(&["a", "b", "c"]), &table), Plan::default());
        }
    }

    #[test]
    fn no_partition_is_handed_back_while_one_is_free() {
        let mut owners = vec![Some("a"); 15];
        owners.push(None);
        let table = slots(&owners);
        let plan = plan("a", &nodes(&["a", "b"]), &table);
        assert_eq!(
            plan.hand_back, None,
            "b takes the free one first; a hands back only what b cannot take"
        );
    }

    #[test]
    fn a_single_partition_stays_with_its_owner_whoever_joins() {
        let table = slots(&[Some("a")]);
        for me in ["a", "b", "c"] {
            assert_eq!(plan(me, &nodes(&["a", "b", "c"]), &table), Plan::default());
        }
    }

    #[test]
    fn an_owner_missing_from_the_live_nodes_still_counts_for_the_shares() {
        // b's node row lapsed while its leases are still live: a must not count on holding all 8.
        let owners: Vec<Option<&str>> = (0..8)
            .map(|p| Some(if p < 4 { "a" } else { "b" }))
            .collect();
        assert_eq!(plan("a", &nodes(&["a"]), &slots(&owners)), Plan::default());
    }
}
