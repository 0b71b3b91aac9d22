//! The plan's one promise: its steps, applied in the order `sql` writes a batch, leave the same tables as the
//! operations applied one by one with the one-by-one statements' meaning (an update or history of a missing
//! message changes nothing; a delete takes the history with it; an insert replaces a message whole). Checked
//! on a model of the tables, over random operation lists on a few keys so that they collide often.

use std::collections::BTreeMap;

use proptest::prelude::*;

use super::*;
use veil_core::Payload;

/// The tables, as one-by-one statements leave them.
#[derive(Debug, Default, PartialEq)]
struct Tables {
    messages: BTreeMap<Key, NewMessage>,
    histories: BTreeMap<Key, DeliveryHistory>,
    dedup: BTreeMap<(QueueId, String), DedupEntry>,
    /// Every queue row exists (the operations under test never create or delete one).
    counters: BTreeMap<QueueId, Counters>,
}

impl Tables {
    fn apply(&mut self, op: StoreOp) {
        let op = match take_put(op) {
            Ok(message) => {
                self.messages.insert((message.queue, message.seq), *message);
                return;
            }
            Err(other) => other,
        };
        match op {
            StoreOp::PutState { queue, seq, state } => {
                if let Some(message) = self.messages.get_mut(&(queue, seq)) {
                    message.state = state;
                }
            }
            StoreOp::ReplaceBody {
                queue,
                seq,
                body,
                body_md5,
            } => {
                if let Some(message) = self.messages.get_mut(&(queue, seq)) {
                    message.payload.body = body;
                    message.payload.body_md5 = body_md5;
                }
            }
            StoreOp::DeleteMessage { queue, seq } => self.delete((queue, seq)),
            StoreOp::PutHistory {
                queue,
                seq,
                history,
            } => {
                if self.messages.contains_key(&(queue, seq)) {
                    self.histories.insert((queue, seq), history);
                }
            }
            StoreOp::PutDedup { queue, key, entry } => {
                self.dedup.insert((queue, key), entry);
            }
            StoreOp::DeleteDedup { queue, key } => {
                self.dedup.remove(&(queue, key));
            }
            StoreOp::PutCounters { queue, counters } => {
                self.counters.insert(queue, *counters);
            }
            StoreOp::PurgeQueue(queue) => {
                let gone: Vec<Key> = self
                    .messages
                    .keys()
                    .filter(|(q, _)| *q == queue)
                    .copied()
                    .collect();
                for key in gone {
                    self.delete(key);
                }
            }
            StoreOp::PutNextQueueId(_) => {}
            other => panic!("not generated: {other:?}"),
        }
    }

    fn delete(&mut self, key: Key) {
        self.messages.remove(&key);
        self.histories.remove(&key);
    }

    /// A batch in the order `sql::batch_statements` writes it.
    fn apply_batch(&mut self, batch: Batch) {
        for (key, entry) in batch.dedup {
            match entry {
                Some(entry) => self.dedup.insert(key, entry),
                None => self.dedup.remove(&key),
            };
        }
        for (key, write) in &batch.messages {
            if *write == MessageWrite::Delete {
                self.delete(*key);
            }
        }
        for (key, write) in batch.messages {
            match write {
                MessageWrite::Delete => {}
                MessageWrite::Insert(message) => {
                    self.messages.insert(key, *message);
                }
                MessageWrite::Update { state, body } => {
                    if let Some(message) = self.messages.get_mut(&key) {
                        if let Some(state) = state {
                            message.state = state;
                        }
                        if let Some((body, md5)) = body {
                            message.payload.body = body;
                            message.payload.body_md5 = md5;
                        }
                    }
                }
            }
        }
        for (key, history) in batch.histories {
            if self.messages.contains_key(&key) {
                self.histories.insert(key, history);
            }
        }
        self.counters.extend(batch.counters);
    }
}

fn state(n: u32) -> MessageState {
    MessageState {
        sent_at: 1,
        visible_at: u64::from(n),
        expires_at: 1_000,
        first_received_at: 0,
        receive_count: n,
        generation: n,
        body_bytes: 1,
        dead_letter_on_release: false,
    }
}

fn payload(n: u32) -> Payload {
    Payload {
        message_id: [n as u8; 16],
        body: Bytes::from(vec![n as u8]),
        body_md5: [0; 16],
        attributes: Default::default(),
        sent_at: 1,
        sender_id: String::new(),
        moved_from: None,
        group: None,
        dedup_id: None,
    }
}

fn insert(queue: QueueId, seq: Seq) -> StoreOp {
    StoreOp::PutMessage(Box::new(veil_core::store::PutMessage {
        queue,
        seq,
        payload: payload(1),
        state: state(1),
        redrive: None,
        fifo_group: None,
    }))
}

/// An operation of the kinds a group commit holds, on 2 queues × 3 messages and 2 deduplication keys.
fn op() -> impl Strategy<Value = StoreOp> {
    (0u8..10, 0u64..2, 0u64..3, 0u32..1_000).prop_map(|(kind, queue, seq, n)| match kind {
        0 => StoreOp::PutMessage(Box::new(veil_core::store::PutMessage {
            queue,
            seq,
            payload: payload(n),
            state: state(n),
            redrive: None,
            fifo_group: None,
        })),
        1 | 2 => StoreOp::PutState {
            queue,
            seq,
            state: state(n),
        },
        3 => StoreOp::DeleteMessage { queue, seq },
        4 => StoreOp::PutHistory {
            queue,
            seq,
            history: DeliveryHistory {
                message_id: Some([n as u8; 16]),
                deliveries: Vec::new(),
            },
        },
        5 => StoreOp::ReplaceBody {
            queue,
            seq,
            body: Bytes::from(vec![n as u8, 1]),
            body_md5: [n as u8; 16],
        },
        6 => StoreOp::PutDedup {
            queue,
            key: format!("k{}", seq % 2),
            entry: DedupEntry {
                sent_at: u64::from(n),
                message_id: [0; 16],
                seq,
            },
        },
        7 => StoreOp::DeleteDedup {
            queue,
            key: format!("k{}", seq % 2),
        },
        8 => StoreOp::put_counters(
            queue,
            Counters {
                sends: u64::from(n),
                ..Counters::default()
            },
        ),
        _ if n % 2 == 0 => StoreOp::PurgeQueue(queue),
        _ => StoreOp::PutNextQueueId(u64::from(n)),
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2_000))]

    #[test]
    fn a_planned_group_leaves_the_tables_as_its_operations_one_by_one(
        before in prop::collection::vec(op(), 0..12),
        group in prop::collection::vec(op(), 0..40),
    ) {
        let mut one_by_one = Tables::default();
        for op in before.iter().cloned() {
            one_by_one.apply(op);
        }
        let mut planned = Tables::default();
        for op in before {
            planned.apply(op);
        }
        for op in group.iter().cloned() {
            one_by_one.apply(op);
        }
        for step in plan(group) {
            match step {
                Step::Batch(batch) => planned.apply_batch(batch),
                Step::One(op) => planned.apply(*op),
            }
        }
        prop_assert_eq!(planned, one_by_one);
    }
}

#[test]
fn a_receive_then_delete_of_a_message_sent_in_the_same_group_writes_one_delete() {
    let steps = plan(vec![
        insert(1, 7),
        StoreOp::PutState {
            queue: 1,
            seq: 7,
            state: state(2),
        },
        StoreOp::DeleteMessage { queue: 1, seq: 7 },
    ]);
    let [Step::Batch(batch)] = steps.as_slice() else {
        panic!("one batch expected: {steps:?}");
    };
    assert_eq!(
        batch.messages.get(&(1, 7)),
        Some(&MessageWrite::Delete),
        "{batch:?}"
    );
    assert_eq!(batch.messages.len(), 1);
}

#[test]
fn a_state_written_after_an_insert_in_one_group_is_folded_into_the_insert() {
    let steps = plan(vec![
        insert(1, 7),
        StoreOp::PutState {
            queue: 1,
            seq: 7,
            state: state(2),
        },
    ]);
    let [Step::Batch(batch)] = steps.as_slice() else {
        panic!("one batch expected: {steps:?}");
    };
    let Some(MessageWrite::Insert(message)) = batch.messages.get(&(1, 7)) else {
        panic!("an insert expected: {batch:?}");
    };
    assert_eq!(message.state, state(2));
}

#[test]
fn a_whole_queue_operation_ends_the_batch_and_is_written_in_its_place() {
    let put = |seq| StoreOp::PutState {
        queue: 1,
        seq,
        state: state(1),
    };
    let steps = plan(vec![put(1), StoreOp::PurgeQueue(1), put(2)]);
    let [Step::Batch(_), Step::One(alone), Step::Batch(_)] = steps.as_slice() else {
        panic!("batch, purge, batch expected: {steps:?}");
    };
    assert_eq!(**alone, StoreOp::PurgeQueue(1));
}
