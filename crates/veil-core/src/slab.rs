//! `SeqSlab`: one queue's message states by sequence number, stored densely. Sequence numbers are handed out
//! in order and messages mostly leave in order, so states live in fixed chunks of `CHUNK_LEN` consecutive
//! sequence numbers with an occupancy bitmap: ~49 bytes per message instead of the ~100 a `BTreeMap` leaf
//! costs at its 55% fill under in-order inserts. The price: a chunk stays allocated while any one of its
//! messages lives (at worst ~1.3 KiB for a lone survivor), which is bounded and independent of body sizes.
//!
//! Each chunk also remembers a lower bound of its messages' expiry times, so that the index can find expired
//! messages through one entry per chunk instead of one per message.

use std::collections::BTreeMap;

use crate::clock::Millis;
use crate::model::{MessageState, Seq, NEVER};

const CHUNK_BITS: u32 = 5;
/// Sequence numbers per chunk.
pub const CHUNK_LEN: usize = 1 << CHUNK_BITS;

/// The number of the chunk holding `seq`.
pub fn chunk_of(seq: Seq) -> u64 {
    seq >> CHUNK_BITS
}

const EMPTY: MessageState = MessageState {
    sent_at: 0,
    visible_at: 0,
    expires_at: NEVER,
    first_received_at: 0,
    receive_count: 0,
    generation: 0,
    body_bytes: 0,
    dead_letter_on_release: false,
};

struct Chunk {
    /// Bit i set: `states[i]` holds the message with seq `chunk << CHUNK_BITS | i`.
    occupied: u32,
    /// No message of this chunk expires before this (it may be stale-low after removals; never too high).
    expires_at_min: Millis,
    states: [MessageState; CHUNK_LEN],
}

impl Chunk {
    /// Keeps `expires_at_min` a lower bound once a state expiring at `expires_at` is stored in this chunk.
    fn lower_expiry_bound(&mut self, number: u64, expires_at: Millis) -> ExpiryBound {
        if expires_at >= self.expires_at_min {
            return ExpiryBound::Unchanged;
        }
        let old = self.expires_at_min;
        self.expires_at_min = expires_at;
        ExpiryBound::Lowered {
            chunk: number,
            old,
            new: expires_at,
        }
    }
}

/// What an insert or removal did to a chunk's expiry lower bound, for the caller's expiry set.
#[derive(Debug, PartialEq, Eq)]
pub enum ExpiryBound {
    Unchanged,
    /// The chunk's lower bound moved from `old` (NEVER: it had none) to `new`.
    Lowered {
        chunk: u64,
        old: Millis,
        new: Millis,
    },
    /// The chunk was freed; its bound `old` is gone.
    Freed {
        chunk: u64,
        old: Millis,
    },
}

/// The live `(seq, state)` pairs of one chunk, in seq order: a copy of the chunk, so it holds no borrow.
#[derive(Clone)]
pub struct ChunkEntries {
    number: u64,
    occupied: u32,
    states: [MessageState; CHUNK_LEN],
}

impl IntoIterator for ChunkEntries {
    type Item = (Seq, MessageState);
    type IntoIter = ChunkIter;

    fn into_iter(self) -> ChunkIter {
        ChunkIter(self)
    }
}

/// Walks a [`ChunkEntries`], clearing each slot's bit as it is yielded.
pub struct ChunkIter(ChunkEntries);

impl Iterator for ChunkIter {
    type Item = (Seq, MessageState);

    fn next(&mut self) -> Option<Self::Item> {
        let entries = &mut self.0;
        if entries.occupied == 0 {
            return None;
        }
        let slot = entries.occupied.trailing_zeros() as usize;
        entries.occupied &= entries.occupied - 1;
        Some((
            (entries.number << CHUNK_BITS) | slot as u64,
            entries.states[slot],
        ))
    }
}

#[derive(Default)]
pub struct SeqSlab {
    chunks: BTreeMap<u64, Box<Chunk>>,
    len: usize,
}

impl SeqSlab {
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn get(&self, seq: Seq) -> Option<MessageState> {
        let chunk = self.chunks.get(&chunk_of(seq))?;
        let slot = (seq as usize) & (CHUNK_LEN - 1);
        (chunk.occupied & (1 << slot) != 0).then(|| chunk.states[slot])
    }

    /// Inserts a state for a seq that holds none. Panics (a broken invariant) if it holds one.
    pub fn insert(&mut self, seq: Seq, state: MessageState) -> ExpiryBound {
        let number = chunk_of(seq);
        let chunk = self.chunks.entry(number).or_insert_with(|| {
            Box::new(Chunk {
                occupied: 0,
                expires_at_min: NEVER,
                states: [EMPTY; CHUNK_LEN],
            })
        });
        let slot = (seq as usize) & (CHUNK_LEN - 1);
        assert!(
            chunk.occupied & (1 << slot) == 0,
            "seq {seq} inserted twice"
        );
        chunk.occupied |= 1 << slot;
        chunk.states[slot] = state;
        self.len += 1;
        chunk.lower_expiry_bound(number, state.expires_at)
    }

    /// Overwrites the state of a seq that holds one, keeping the chunk's expiry bound valid.
    pub fn set(&mut self, seq: Seq, state: MessageState) -> ExpiryBound {
        let number = chunk_of(seq);
        let slot = (seq as usize) & (CHUNK_LEN - 1);
        let chunk = self
            .chunks
            .get_mut(&number)
            .filter(|c| c.occupied & (1 << slot) != 0);
        let chunk = chunk.unwrap_or_else(|| panic!("set of unknown seq {seq}"));
        chunk.states[slot] = state;
        chunk.lower_expiry_bound(number, state.expires_at)
    }

    /// Removes a seq's state. The chunk's expiry bound is left as it is (a lower bound stays a lower bound);
    /// a chunk that becomes empty is freed.
    pub fn remove(&mut self, seq: Seq) -> Option<(MessageState, ExpiryBound)> {
        let number = chunk_of(seq);
        let chunk = self.chunks.get_mut(&number)?;
        let slot = (seq as usize) & (CHUNK_LEN - 1);
        if chunk.occupied & (1 << slot) == 0 {
            return None;
        }
        chunk.occupied &= !(1 << slot);
        let state = chunk.states[slot];
        self.len -= 1;
        let bound = if chunk.occupied == 0 {
            let old = chunk.expires_at_min;
            self.chunks.remove(&number);
            ExpiryBound::Freed { chunk: number, old }
        } else {
            ExpiryBound::Unchanged
        };
        Some((state, bound))
    }

    /// The state of the lowest live seq.
    pub fn first(&self) -> Option<(Seq, MessageState)> {
        let (&number, chunk) = self.chunks.first_key_value()?;
        let slot = chunk.occupied.trailing_zeros() as usize;
        Some(((number << CHUNK_BITS) | slot as u64, chunk.states[slot]))
    }

    /// The state of the highest live seq.
    pub fn last(&self) -> Option<(Seq, MessageState)> {
        let (&number, chunk) = self.chunks.last_key_value()?;
        let slot = (u32::BITS - 1 - chunk.occupied.leading_zeros()) as usize;
        Some(((number << CHUNK_BITS) | slot as u64, chunk.states[slot]))
    }

    /// Up to `max` live messages with a seq of at least `from`, in seq order (an operator's browse).
    pub fn range_from(&self, from: Seq, max: usize) -> Vec<(Seq, MessageState)> {
        let mut found = Vec::with_capacity(max.min(self.len));
        for (&number, chunk) in self.chunks.range(chunk_of(from)..) {
            for slot in 0..CHUNK_LEN {
                let seq = (number << CHUNK_BITS) | slot as u64;
                if chunk.occupied & (1 << slot) != 0 && seq >= from {
                    if found.len() == max {
                        return found;
                    }
                    found.push((seq, chunk.states[slot]));
                }
            }
        }
        found
    }

    /// The live messages of one chunk, copied out (no allocation), so that the caller may remove them from the
    /// slab while it walks them.
    pub fn chunk_entries(&self, number: u64) -> ChunkEntries {
        match self.chunks.get(&number) {
            Some(chunk) => ChunkEntries {
                number,
                occupied: chunk.occupied,
                states: chunk.states,
            },
            None => ChunkEntries {
                number,
                occupied: 0,
                states: [EMPTY; CHUNK_LEN],
            },
        }
    }

    /// Recomputes a chunk's exact expiry bound (after expired messages were removed from it). Returns it, or
    /// `None` if the chunk no longer exists.
    pub fn refresh_expiry_bound(&mut self, number: u64) -> Option<Millis> {
        let chunk = self.chunks.get_mut(&number)?;
        let exact = (0..CHUNK_LEN)
            .filter(|slot| chunk.occupied & (1 << slot) != 0)
            .map(|slot| chunk.states[slot].expires_at)
            .min()
            .unwrap_or(NEVER);
        chunk.expires_at_min = exact;
        Some(exact)
    }

    /// Every chunk's number and expiry bound (invariant checks).
    pub fn expiry_bounds(&self) -> impl Iterator<Item = (u64, Millis)> + '_ {
        self.chunks
            .iter()
            .map(|(&number, chunk)| (number, chunk.expires_at_min))
    }

    pub fn clear(&mut self) {
        self.chunks.clear();
        self.len = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(expires_at: Millis) -> MessageState {
        MessageState {
            expires_at,
            ..EMPTY
        }
    }

    #[test]
    fn states_come_back_by_seq_and_chunks_free_when_empty() {
        let mut slab = SeqSlab::default();
        for seq in 30..40 {
            slab.insert(seq, state(1_000 + seq));
        }
        assert_eq!(slab.len(), 10);
        assert_eq!(slab.get(35).map(|s| s.expires_at), Some(1_035));
        assert_eq!(slab.get(29), None);
        assert_eq!(slab.first().map(|(seq, _)| seq), Some(30));
        slab.remove(30);
        slab.remove(31);
        assert_eq!(
            slab.first().map(|(seq, _)| seq),
            Some(32),
            "chunk 0 freed, the next chunk's first seq"
        );
        let live: Vec<Seq> = slab
            .chunk_entries(1)
            .into_iter()
            .map(|(seq, _)| seq)
            .collect();
        assert_eq!(live, (32..40).collect::<Vec<_>>());
        assert_eq!(slab.remove(31), None, "removing twice finds nothing");
    }

    #[test]
    fn the_expiry_bound_of_a_chunk_is_never_above_its_messages() {
        let mut slab = SeqSlab::default();
        assert_eq!(
            slab.insert(0, state(500)),
            ExpiryBound::Lowered {
                chunk: 0,
                old: NEVER,
                new: 500
            }
        );
        assert_eq!(slab.insert(1, state(700)), ExpiryBound::Unchanged);
        assert_eq!(
            slab.insert(2, state(300)),
            ExpiryBound::Lowered {
                chunk: 0,
                old: 500,
                new: 300
            }
        );
        slab.remove(2);
        assert_eq!(slab.refresh_expiry_bound(0), Some(500));
        slab.remove(0);
        assert_eq!(
            slab.remove(1).map(|(_, bound)| bound),
            Some(ExpiryBound::Freed { chunk: 0, old: 500 })
        );
        assert_eq!(slab.refresh_expiry_bound(0), None);
    }
}
