//! `SeqSlab`: one queue's message states by sequence number, stored densely. Sequence numbers are handed out
//! in order and messages mostly leave in order, so states live in fixed chunks of `CHUNK_LEN` consecutive
//! sequence numbers with an occupancy bitmap: ~41 bytes per message instead of the ~100 a `BTreeMap` leaf
//! costs at its 55% fill under in-order inserts. The price: a chunk stays allocated while any one of its
//! messages lives (at worst ~1.3 KiB for a lone survivor), which is bounded and independent of body sizes.
//!
//! Each chunk also remembers a lower bound of its messages' expiry times, so that the index can find expired
//! messages through one entry per chunk instead of one per message.
//!
//! States are stored packed ([`PackedState`], 40 bytes instead of `MessageState`'s 48): a time is 48 bits of
//! milliseconds (until the year 10889), [`NEVER`] its own value. A state that does not pack (a time beyond
//! that, which no protocol's limits produce) is kept whole beside the chunks (`spilled`), so packing never
//! changes a state; only memory (docs/benchmarks.md, "Memory per stored message").

use std::collections::{BTreeMap, HashMap};

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

/// The largest time a [`PackedState`] holds; [`NEVER`] packs as this, other times at or above it spill.
const PACKED_TIME_MAX: u64 = (1 << 48) - 1;

/// A [`MessageState`] in 40 bytes: its four times as 48-bit halves (low 32 bits, high 16), its counts as they
/// are. Aligned to 4, so an array of them has no padding.
#[derive(Clone, Copy)]
struct PackedState {
    times_low: [u32; 4],
    times_high: [u16; 4],
    receive_count: u32,
    generation: u32,
    body_bytes: u32,
    dead_letter_on_release: bool,
}

const _: () = assert!(std::mem::size_of::<PackedState>() == 40);

impl PackedState {
    /// `None` when a time does not fit in 48 bits (and is not [`NEVER`]).
    fn pack(state: &MessageState) -> Option<Self> {
        let times = [
            state.sent_at,
            state.visible_at,
            state.expires_at,
            state.first_received_at,
        ];
        let mut packed = PackedState {
            times_low: [0; 4],
            times_high: [0; 4],
            receive_count: state.receive_count,
            generation: state.generation,
            body_bytes: state.body_bytes,
            dead_letter_on_release: state.dead_letter_on_release,
        };
        for (i, time) in times.into_iter().enumerate() {
            let time = match time {
                NEVER => PACKED_TIME_MAX,
                time if time < PACKED_TIME_MAX => time,
                _ => return None,
            };
            packed.times_low[i] = time as u32;
            packed.times_high[i] = (time >> 32) as u16;
        }
        Some(packed)
    }

    fn unpack(&self) -> MessageState {
        let time =
            |i: usize| match u64::from(self.times_high[i]) << 32 | u64::from(self.times_low[i]) {
                PACKED_TIME_MAX => NEVER,
                time => time,
            };
        MessageState {
            sent_at: time(0),
            visible_at: time(1),
            expires_at: time(2),
            first_received_at: time(3),
            receive_count: self.receive_count,
            generation: self.generation,
            body_bytes: self.body_bytes,
            dead_letter_on_release: self.dead_letter_on_release,
        }
    }
}

const EMPTY_PACKED: PackedState = PackedState {
    times_low: [0; 4],
    times_high: [0; 4],
    receive_count: 0,
    generation: 0,
    body_bytes: 0,
    dead_letter_on_release: false,
};

struct Chunk {
    /// Bit i set: slot i holds the message with seq `chunk << CHUNK_BITS | i`.
    occupied: u32,
    /// Bit i set: slot i's state did not pack and is in [`SeqSlab::spilled`]; `states[i]` is unused.
    spilled: u32,
    /// No message of this chunk expires before this (it may be stale-low after removals; never too high).
    expires_at_min: Millis,
    states: [PackedState; CHUNK_LEN],
}

impl Chunk {
    fn state(&self, seq: Seq, slot: usize, spilled: &HashMap<Seq, MessageState>) -> MessageState {
        if self.spilled & (1 << slot) == 0 {
            return self.states[slot].unpack();
        }
        *spilled
            .get(&seq)
            .unwrap_or_else(|| panic!("seq {seq} marked spilled but not kept"))
    }
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
    /// States that did not pack, whole; empty unless a time passed the year 10889.
    spilled: HashMap<Seq, MessageState>,
    len: usize,
}

impl SeqSlab {
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn get(&self, seq: Seq) -> Option<MessageState> {
        let chunk = self.chunks.get(&chunk_of(seq))?;
        let slot = (seq as usize) & (CHUNK_LEN - 1);
        (chunk.occupied & (1 << slot) != 0).then(|| chunk.state(seq, slot, &self.spilled))
    }

    /// Stores `state` in its slot, packed, or whole in `spilled` when it does not pack.
    fn store(
        chunk: &mut Chunk,
        spilled: &mut HashMap<Seq, MessageState>,
        seq: Seq,
        slot: usize,
        state: MessageState,
    ) {
        match PackedState::pack(&state) {
            Some(packed) => {
                chunk.states[slot] = packed;
                if chunk.spilled & (1 << slot) != 0 {
                    chunk.spilled &= !(1 << slot);
                    spilled.remove(&seq);
                }
            }
            None => {
                chunk.spilled |= 1 << slot;
                spilled.insert(seq, state);
            }
        }
    }

    /// Inserts a state for a seq that holds none. Panics (a broken invariant) if it holds one.
    pub fn insert(&mut self, seq: Seq, state: MessageState) -> ExpiryBound {
        let number = chunk_of(seq);
        let chunk = self.chunks.entry(number).or_insert_with(|| {
            Box::new(Chunk {
                occupied: 0,
                spilled: 0,
                expires_at_min: NEVER,
                states: [EMPTY_PACKED; CHUNK_LEN],
            })
        });
        let slot = (seq as usize) & (CHUNK_LEN - 1);
        assert!(
            chunk.occupied & (1 << slot) == 0,
            "seq {seq} inserted twice"
        );
        chunk.occupied |= 1 << slot;
        Self::store(chunk, &mut self.spilled, seq, slot, state);
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
        Self::store(chunk, &mut self.spilled, seq, slot, state);
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
        let state = if chunk.spilled & (1 << slot) != 0 {
            chunk.spilled &= !(1 << slot);
            self.spilled
                .remove(&seq)
                .unwrap_or_else(|| panic!("seq {seq} marked spilled but not kept"))
        } else {
            chunk.states[slot].unpack()
        };
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
        let seq = (number << CHUNK_BITS) | slot as u64;
        Some((seq, chunk.state(seq, slot, &self.spilled)))
    }

    /// The state of the highest live seq.
    pub fn last(&self) -> Option<(Seq, MessageState)> {
        let (&number, chunk) = self.chunks.last_key_value()?;
        let slot = (u32::BITS - 1 - chunk.occupied.leading_zeros()) as usize;
        let seq = (number << CHUNK_BITS) | slot as u64;
        Some((seq, chunk.state(seq, slot, &self.spilled)))
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
                    found.push((seq, chunk.state(seq, slot, &self.spilled)));
                }
            }
        }
        found
    }

    /// The live messages of one chunk, copied out (no allocation), so that the caller may remove them from the
    /// slab while it walks them.
    pub fn chunk_entries(&self, number: u64) -> ChunkEntries {
        match self.chunks.get(&number) {
            Some(chunk) => {
                let mut states = [EMPTY; CHUNK_LEN];
                for (slot, state) in states.iter_mut().enumerate() {
                    if chunk.occupied & (1 << slot) != 0 {
                        let seq = (number << CHUNK_BITS) | slot as u64;
                        *state = chunk.state(seq, slot, &self.spilled);
                    }
                }
                ChunkEntries {
                    number,
                    occupied: chunk.occupied,
                    states,
                }
            }
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
            .map(|slot| {
                let seq = (number << CHUNK_BITS) | slot as u64;
                chunk.state(seq, slot, &self.spilled).expires_at
            })
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
        self.spilled.clear();
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

    fn full(time: Millis) -> MessageState {
        MessageState {
            sent_at: time,
            visible_at: time.saturating_add(1),
            expires_at: time.saturating_add(2),
            first_received_at: time.saturating_add(3),
            receive_count: u32::MAX,
            generation: 7,
            body_bytes: 1 << 20,
            dead_letter_on_release: true,
        }
    }

    #[test]
    fn a_stored_state_comes_back_exactly_packed_or_not() {
        let mut slab = SeqSlab::default();
        let unpackable = [PACKED_TIME_MAX - 3, PACKED_TIME_MAX, NEVER - 5];
        let states: Vec<MessageState> = [0, 1_764_000_000_000, PACKED_TIME_MAX - 4]
            .into_iter()
            .chain(unpackable)
            .map(full)
            .chain([state(NEVER), EMPTY])
            .collect();
        for (seq, state) in states.iter().enumerate() {
            slab.insert(seq as Seq, *state);
        }
        assert_eq!(
            slab.spilled.len(),
            unpackable.len(),
            "only times past 48 bits spill"
        );
        for (seq, state) in states.iter().enumerate() {
            assert_eq!(slab.get(seq as Seq), Some(*state), "seq {seq}");
        }
        let copied: Vec<MessageState> = slab.chunk_entries(0).into_iter().map(|(_, s)| s).collect();
        assert_eq!(copied, states);
        assert_eq!(slab.range_from(0, 100).len(), states.len());
        assert_eq!(slab.last().map(|(_, s)| s), states.last().copied());
        // A spilled state overwritten by one that packs leaves `spilled`, and the reverse.
        slab.set(3, full(5));
        slab.set(0, full(NEVER - 5));
        assert_eq!(
            (slab.get(3), slab.get(0)),
            (Some(full(5)), Some(full(NEVER - 5)))
        );
        assert_eq!(slab.spilled.len(), unpackable.len());
        for seq in 0..states.len() as Seq {
            assert!(slab.remove(seq).is_some());
        }
        assert!(slab.spilled.is_empty() && slab.chunks.is_empty());
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
