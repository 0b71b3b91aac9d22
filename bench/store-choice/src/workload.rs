//! Veil's queue workload as the benchmark models it: key, state and body
//! encodings, and the stream of send/receive/delete operations that a single
//! writer applies in groups.

/// Messages touched by one operation (one send, receive or delete of 10).
pub const MSGS_PER_OP: u64 = 10;

/// Size of a message body in the `payloads` keyspace.
pub const BODY_LEN: usize = 1024;

/// Size of the mutable per-message record in the `state` keyspace.
pub const STATE_LEN: usize = 40;

/// How many send batches a message waits before it is received, and again
/// before it is deleted. With at least one op per tick this keeps a send, its
/// receive and its delete at least `LAG` ops apart, so they never share a group
/// of up to `LAG` ops (a write batch cannot read its own uncommitted writes).
pub const LAG: u64 = 100;

/// Largest group size the op stream supports without a message's phases
/// sharing a group.
pub const MAX_GROUP: usize = LAG as usize;

/// A message key: (queue_id, seq), both big-endian so keys sort by queue, then seq.
pub fn key(queue: u64, seq: u64) -> [u8; 16] {
    let mut k = [0u8; 16];
    k[..8].copy_from_slice(&queue.to_be_bytes());
    k[8..].copy_from_slice(&seq.to_be_bytes());
    k
}

/// The mutable state record: visible_at, receive_count, generation, sent_at,
/// first_received_at, flags; 40 bytes.
pub fn state(seq: u64, receive_count: u32) -> [u8; STATE_LEN] {
    let mut s = [0u8; STATE_LEN];
    let now = 1_700_000_000_000u64 + seq;
    s[0..8].copy_from_slice(&(now + 30_000 * u64::from(receive_count)).to_be_bytes());
    s[8..12].copy_from_slice(&receive_count.to_be_bytes());
    s[12..20].copy_from_slice(&(u64::from(receive_count) + 1).to_be_bytes());
    s[20..28].copy_from_slice(&now.to_be_bytes());
    s[28..36].copy_from_slice(&(now + 1).to_be_bytes());
    s[36..40].copy_from_slice(&0u32.to_be_bytes());
    s
}

/// Produces ~incompressible 1 KiB bodies, each stamped with its key so that no
/// two bodies are equal.
pub struct Bodies {
    template: Vec<u8>,
}

impl Bodies {
    /// Fills the template with a fixed pseudo-random sequence.
    pub fn new() -> Self {
        let mut rng = SplitMix64(0x5eed_ba5e);
        let template = (0..BODY_LEN).map(|_| rng.next() as u8).collect();
        Self { template }
    }

    /// The body of message `key`.
    pub fn body(&mut self, key: &[u8; 16]) -> &[u8] {
        self.template[..16].copy_from_slice(key);
        &self.template
    }
}

/// A small deterministic PRNG (splitmix64), enough for key selection.
pub struct SplitMix64(pub u64);

impl SplitMix64 {
    /// Next pseudo-random value.
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

/// What an operation does to its 10 messages.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Insert payload and state.
    Send,
    /// Read the payload and overwrite the state.
    Receive,
    /// Remove payload and state.
    Delete,
}

/// One operation on `MSGS_PER_OP` consecutive messages of a queue.
#[derive(Clone, Copy, Debug)]
pub struct Op {
    pub kind: Kind,
    pub queue: u64,
    /// Sequence number of the first of the op's messages.
    pub first_seq: u64,
}

impl Op {
    /// Sequence numbers of the op's messages.
    pub fn seqs(&self) -> std::ops::Range<u64> {
        self.first_seq..self.first_seq + MSGS_PER_OP
    }
}

/// The op stream of one queue: per tick a send of batch `t`, a receive of
/// batch `t - LAG` and a delete of batch `t - 2 * LAG`, so that in steady
/// state the ops are an even mix and ~`2 * LAG * 10` messages are in flight.
pub struct OpStream {
    queue: u64,
    sent: u64,
    received: u64,
    deleted: u64,
    phase: u8,
    draining: bool,
}

impl OpStream {
    /// An empty queue.
    pub fn new(queue: u64) -> Self {
        Self {
            queue,
            sent: 0,
            received: 0,
            deleted: 0,
            phase: 0,
            draining: false,
        }
    }

    /// Ops of the warm-up: until the stream emits all three kinds each tick.
    pub fn warmup_ops() -> u64 {
        // LAG ticks of sends, then LAG ticks of send + receive.
        LAG + 2 * LAG
    }

    /// Stops sending; from then on only receives and deletes of what is in
    /// flight come out, until `next` returns `None`.
    pub fn drain(&mut self) {
        self.draining = true;
    }

    fn op(&self, kind: Kind, batch: u64) -> Op {
        Op {
            kind,
            queue: self.queue,
            first_seq: batch * MSGS_PER_OP,
        }
    }

    /// The next op, or `None` once a drained stream is empty.
    pub fn next_op(&mut self) -> Option<Op> {
        loop {
            if self.draining && self.deleted == self.sent {
                return None;
            }
            let phase = self.phase;
            self.phase = (self.phase + 1) % 3;
            match phase {
                0 if !self.draining => {
                    self.sent += 1;
                    return Some(self.op(Kind::Send, self.sent - 1));
                }
                1 if self.received < self.sent
                    && (self.draining || self.received + LAG < self.sent) =>
                {
                    self.received += 1;
                    return Some(self.op(Kind::Receive, self.received - 1));
                }
                2 if self.deleted < self.received
                    && ((self.draining && self.received == self.sent)
                        || self.deleted + LAG < self.received) =>
                {
                    self.deleted += 1;
                    return Some(self.op(Kind::Delete, self.deleted - 1));
                }
                _ => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn phases_never_share_a_group_of_max_size() {
        let mut s = OpStream::new(1);
        let mut ops: Vec<Op> = (0..5_000).map(|_| s.next_op().unwrap()).collect();
        let drain_start = ops.len();
        s.drain();
        while let Some(op) = s.next_op() {
            ops.push(op);
        }
        let mut at = std::collections::HashMap::new();
        for (i, op) in ops.iter().enumerate() {
            at.entry(op.first_seq)
                .or_insert_with(Vec::new)
                .push((op.kind, i));
        }
        for (_, v) in at {
            assert_eq!(v.len(), 3, "every message is sent, received, deleted");
            assert_eq!(v[0].0, Kind::Send);
            assert_eq!(v[1].0, Kind::Receive);
            assert_eq!(v[2].0, Kind::Delete);
            if v[1].1 < drain_start {
                assert!(v[1].1 - v[0].1 >= MAX_GROUP);
            }
            if v[2].1 < drain_start {
                assert!(v[2].1 - v[1].1 >= MAX_GROUP);
            }
        }
    }
}
