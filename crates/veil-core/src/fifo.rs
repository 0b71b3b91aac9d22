//! What a FIFO queue keeps beside its index (docs/semantics.md §4): each message group's members in send
//! order and how many of them are in flight, the deduplication ids of the last interval, and the receive
//! attempts a retry may repeat. Standard queues have none of it, so their per-message cost is unchanged.
//!
//! The index asks this module two questions while it schedules: "is this message its group's head?" (only
//! heads enter the ready set, so a receive looks at one entry per group) and "is this group blocked?" (a
//! group with a message in flight delivers nothing).

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::sync::Arc;

use crate::clock::Millis;
use crate::limits;
use crate::model::{DedupEntry, Seq};

/// A group's name, shared by its members' entries.
pub(crate) type GroupName = Arc<str>;

#[derive(Default)]
struct Group {
    /// The group's stored messages in send order; the first is its head, the only one a receive may start at.
    seqs: BTreeSet<Seq>,
    /// Members received and still Hidden. While any is, the group delivers nothing more.
    inflight: u32,
}

/// The FIFO side of one queue's index.
#[derive(Default)]
pub(crate) struct Fifo {
    groups: HashMap<GroupName, Group>,
    group_of: HashMap<Seq, GroupName>,
    /// Visible members kept out of the ready set because an earlier member of their group is stored.
    pub behind: u64,
    pub dedup: Dedup,
    pub attempts: Attempts,
}

impl Fifo {
    /// Adds `seq` to its group; must come before the message is scheduled. Members join in seq order.
    pub fn join(&mut self, seq: Seq, name: &str) {
        let name: GroupName = match self.groups.get_key_value(name) {
            Some((existing, _)) => existing.clone(),
            None => Arc::from(name),
        };
        let group = self.groups.entry(name.clone()).or_default();
        assert!(
            group.seqs.last().is_none_or(|&last| last < seq),
            "group members join in send order"
        );
        group.seqs.insert(seq);
        self.group_of.insert(seq, name);
    }

    pub fn group_of(&self, seq: Seq) -> Option<&GroupName> {
        self.group_of.get(&seq)
    }

    /// Whether `seq` is the first stored member of its group (a message without a group is its own head).
    pub fn is_head(&self, seq: Seq) -> bool {
        match self.group_of.get(&seq) {
            Some(name) => self.groups[name].seqs.first() == Some(&seq),
            None => true,
        }
    }

    /// The member after `seq` in its group.
    pub fn next_in_group(&self, seq: Seq) -> Option<Seq> {
        let name = self.group_of.get(&seq)?;
        let after = (std::ops::Bound::Excluded(seq), std::ops::Bound::Unbounded);
        self.groups[name].seqs.range(after).next().copied()
    }

    /// Whether `seq`'s group has a message in flight.
    pub fn blocked(&self, seq: Seq) -> bool {
        self.group_of
            .get(&seq)
            .is_some_and(|name| self.groups[name].inflight > 0)
    }

    /// Counts a member entering (`true`) or leaving (`false`) the in-flight state.
    pub fn count_inflight(&mut self, seq: Seq, entering: bool) {
        let Some(name) = self.group_of.get(&seq) else {
            return;
        };
        let group = self.groups.get_mut(name).expect("group_of names a group");
        if entering {
            group.inflight += 1;
        } else {
            assert!(
                group.inflight > 0,
                "in-flight count of group {name} underflows"
            );
            group.inflight -= 1;
        }
    }

    /// Removes `seq` from its group, after it left the schedule. Returns the group's new head when `seq` was
    /// the head and others remain.
    pub fn leave(&mut self, seq: Seq) -> Option<Seq> {
        let name = self.group_of.remove(&seq)?;
        let group = self.groups.get_mut(&name).expect("group_of names a group");
        let was_head = group.seqs.first() == Some(&seq);
        group.seqs.remove(&seq);
        let new_head = group.seqs.first().copied();
        if new_head.is_none() {
            assert_eq!(group.inflight, 0, "an empty group has nothing in flight");
            self.groups.remove(&name);
        }
        new_head.filter(|_| was_head)
    }

    /// Forgets every member (a purge); deduplication ids stay, as they outlive their messages.
    pub fn clear(&mut self) {
        self.groups.clear();
        self.group_of.clear();
        self.behind = 0;
        self.attempts = Attempts::default();
    }

    /// (group, its members in order, in-flight count) for every group (invariant checks).
    pub fn groups(&self) -> impl Iterator<Item = (&GroupName, Vec<Seq>, u32)> {
        self.groups
            .iter()
            .map(|(name, group)| (name, group.seqs.iter().copied().collect(), group.inflight))
    }

    pub fn member_count(&self) -> usize {
        self.group_of.len()
    }
}

/// The key a send is deduplicated by: its id alone (queue scope), or its group and id (group scope). The
/// group's length comes first so that no two (group, id) pairs share a key.
pub(crate) fn dedup_key(group: Option<&str>, dedup_id: &str) -> String {
    match group {
        Some(group) => format!("{}:{group}{dedup_id}", group.len()),
        None => dedup_id.to_owned(),
    }
}

/// A FIFO queue's deduplication ids of the last interval. Bounded by what one interval of sends names: an id
/// is forgotten once its interval has passed.
#[derive(Default)]
pub(crate) struct Dedup {
    entries: HashMap<String, DedupEntry>,
    /// (first send, key) in the order ids were remembered, which is time order: the front expires first.
    by_age: VecDeque<(Millis, String)>,
}

impl Dedup {
    /// The remembered send with `key`, if its interval has not passed.
    pub fn get(&self, key: &str, now: Millis, interval_ms: Millis) -> Option<DedupEntry> {
        self.entries
            .get(key)
            .filter(|entry| now < entry.sent_at.saturating_add(interval_ms))
            .copied()
    }

    pub fn remember(&mut self, key: String, entry: DedupEntry) {
        self.by_age.push_back((entry.sent_at, key.clone()));
        self.entries.insert(key, entry);
    }

    /// Sorts the ids remembered again after a restart (read in key order) into time order.
    pub fn restored(&mut self) {
        self.by_age.make_contiguous().sort();
    }

    /// Forgets the ids whose interval has passed; returns their keys for the store.
    pub fn expire(&mut self, now: Millis, interval_ms: Millis) -> Vec<String> {
        let mut expired = Vec::new();
        while let Some((sent_at, _)) = self.by_age.front() {
            if now < sent_at.saturating_add(interval_ms) {
                break;
            }
            let (sent_at, key) = self.by_age.pop_front().expect("front exists");
            // A key remembered again later has a newer entry; only the entry of this send expires here.
            if self.entries.get(&key).is_some_and(|e| e.sent_at == sent_at) {
                self.entries.remove(&key);
                expired.push(key);
            }
        }
        expired
    }
}

/// One receive's result, kept so that a retry with the same attempt id gets the same messages and receipts.
#[derive(Clone)]
pub(crate) struct Attempt {
    pub at: Millis,
    /// (seq, generation of the delivery, receipt) of each delivered message.
    pub deliveries: Vec<(Seq, u32, crate::receipt::Receipt)>,
}

/// The receive attempts of the last `RECEIVE_ATTEMPT_MS_MAX`. Not durable: after a restart a retry is a new
/// receive, which may deliver other messages but never breaks group order.
#[derive(Default)]
pub(crate) struct Attempts {
    by_id: HashMap<String, Attempt>,
    by_age: VecDeque<(Millis, String)>,
}

impl Attempts {
    pub fn get(&mut self, id: &str, now: Millis) -> Option<Attempt> {
        self.expire(now);
        self.by_id.get(id).cloned()
    }

    pub fn remember(&mut self, id: String, attempt: Attempt) {
        self.by_age.push_back((attempt.at, id.clone()));
        self.by_id.insert(id, attempt);
    }

    fn expire(&mut self, now: Millis) {
        while let Some((at, _)) = self.by_age.front() {
            if now < at.saturating_add(limits::RECEIVE_ATTEMPT_MS_MAX) {
                break;
            }
            let (at, id) = self.by_age.pop_front().expect("front exists");
            if self.by_id.get(&id).is_some_and(|a| a.at == at) {
                self.by_id.remove(&id);
            }
        }
    }
}
