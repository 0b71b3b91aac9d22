//! What the log holds that the B-tree does not yet: the operations of the open segment (and of the one being
//! checkpointed), kept in memory in log order, with an index of the message payloads they leave behind so
//! that reads find a message the moment its commit is durable.
//!
//! A payload lookup goes newest first: the open window, the window being checkpointed, then redb. A window
//! answers "here it is", "it is gone" (deleted, moved away or purged in this window) or "not mine".

use std::sync::Arc;

// Keys are (queue id, seq) pairs the engine assigns, never chosen by a client: hashed fast rather than with
// SipHash (docs/decisions/0014-hashing.md).
use foldhash::{HashMap, HashMapExt, HashSet, HashSetExt};

use veil_core::{Payload, QueueId, Seq, StoreError, StoreOp};

use crate::bodies::{BodyAt, Relocation};
use crate::limits::WAL_SEGMENT_OPS_MAX;
use crate::tables::moved;

pub type Key = (QueueId, Seq);

/// Where a window keeps a live message's payload.
enum Held {
    /// In the `PutMessage` at this index of the window's operations: no copy made.
    Logged(usize),
    /// Made by a move or a body replacement in this window (rare; boxed so that the map stays small).
    Owned(Box<Payload>),
}

/// A window's answer for one message. Returned by value and consumed at once, so its size does not matter.
#[allow(clippy::large_enum_variant)]
pub enum Found {
    Payload(Payload),
    Gone,
    NotHere,
}

/// Where one record of a window starts: its first operation's index in `ops` and its place in the log.
#[derive(Clone, Copy, Debug)]
pub struct RecordStart {
    pub first_op: usize,
    pub generation: u64,
    pub offset: u64,
}

/// The operations of one log segment.
pub struct Window {
    pub generation: u64,
    /// In log order; the checkpoint applies them in this order.
    pub ops: Vec<StoreOp>,
    /// The records `ops` came in, in order: a checkpoint locates a body logged in this window from them.
    pub records: Vec<RecordStart>,
    /// Relocation records logged in this window; a checkpoint applies them after `ops`.
    pub relocations: Vec<Relocation>,
    /// Where the segment's last record ends, set when the window is closed: a segment kept for its bodies
    /// is cut there, giving back the rest of its preallocated space.
    pub segment_bytes: u64,
    payloads: HashMap<Key, Held>,
    gone: HashSet<Key>,
    purged: HashSet<QueueId>,
}

impl Window {
    pub fn new(generation: u64) -> Self {
        Self {
            generation,
            // Reserved once so that a filling window never moves its operations; pages are touched as used.
            ops: Vec::with_capacity(WAL_SEGMENT_OPS_MAX),
            records: Vec::new(),
            relocations: Vec::new(),
            segment_bytes: 0,
            payloads: HashMap::new(),
            gone: HashSet::new(),
            purged: HashSet::new(),
        }
    }

    /// Empties the window for reuse as segment `generation`'s, keeping its allocations: a window's
    /// operations fill megabytes, and fresh memory for each segment cost the writer page faults.
    pub fn reuse(&mut self, generation: u64) {
        self.generation = generation;
        self.ops.clear();
        self.records.clear();
        self.relocations.clear();
        self.segment_bytes = 0;
        self.payloads.clear();
        self.gone.clear();
        self.purged.clear();
    }

    fn find(&self, key: Key) -> Found {
        match self.payloads.get(&key) {
            Some(Held::Logged(index)) => match &self.ops[*index] {
                StoreOp::PutMessage(put) => Found::Payload(put.payload.clone()),
                other => unreachable!("a logged payload points at {other:?}"),
            },
            Some(Held::Owned(payload)) => Found::Payload(Payload::clone(payload)),
            None if self.gone.contains(&key) || self.purged.contains(&key.0) => Found::Gone,
            None => Found::NotHere,
        }
    }

    fn take_here(&mut self, key: Key) -> Option<Payload> {
        match self.payloads.remove(&key)? {
            Held::Logged(index) => match &self.ops[index] {
                StoreOp::PutMessage(put) => Some(put.payload.clone()),
                other => unreachable!("a logged payload points at {other:?}"),
            },
            Held::Owned(payload) => Some(*payload),
        }
    }
}

/// Where the operation at `index` was logged, given the records the operations came in.
pub fn locate(records: &[RecordStart], index: usize) -> BodyAt {
    let at = records.partition_point(|record| record.first_op <= index);
    assert!(
        at > 0,
        "operation {index} precedes every record of its window"
    );
    let record = records[at - 1];
    BodyAt {
        generation: record.generation,
        offset: record.offset,
        index: u32::try_from(index - record.first_op).unwrap_or(u32::MAX),
    }
}

/// The windows not yet in redb.
pub struct Overlay {
    /// The open segment's window; the writer appends to it.
    pub active: Window,
    /// The previous segment's window while the checkpointer applies it to redb; shared with that thread.
    pub frozen: Option<Arc<Window>>,
}

impl Overlay {
    pub fn new(generation: u64) -> Self {
        Self {
            active: Window::new(generation),
            frozen: None,
        }
    }

    /// The payload of a message as the windows know it.
    pub fn find(&self, key: Key) -> Found {
        match self.active.find(key) {
            Found::NotHere => match &self.frozen {
                Some(frozen) => frozen.find(key),
                None => Found::NotHere,
            },
            known => known,
        }
    }

    /// Notes that the operations recorded next came in one log record, at `offset` of the open segment.
    pub fn begin_record(&mut self, offset: u64) {
        let window = &mut self.active;
        window.records.push(RecordStart {
            first_op: window.ops.len(),
            generation: window.generation,
            offset,
        });
    }

    /// Adds a durable operation to the open window. `read_disk` reads a payload from redb, for the rare
    /// operations (a move, a body replacement) that start from a message's current payload.
    pub fn record(
        &mut self,
        op: StoreOp,
        read_disk: &dyn Fn(Key) -> Result<Option<Payload>, StoreError>,
    ) -> Result<(), StoreError> {
        match &op {
            StoreOp::PutMessage(put) => {
                let index = self.active.ops.len();
                self.active
                    .payloads
                    .insert((put.queue, put.seq), Held::Logged(index));
            }
            StoreOp::DeleteMessage { queue, seq } => self.forget((*queue, *seq)),
            StoreOp::PurgeQueue(queue) | StoreOp::DeleteQueue(queue) => {
                self.active.payloads.retain(|key, _| key.0 != *queue);
                self.active.gone.retain(|key| key.0 != *queue);
                self.active.purged.insert(*queue);
            }
            StoreOp::MoveMessage(move_op) => {
                let taken = self.take(move_op.from, read_disk)?;
                self.forget(move_op.from);
                if let Some(payload) = taken {
                    let payload = moved(payload, move_op.moved_from.clone());
                    self.active
                        .payloads
                        .insert(move_op.to, Held::Owned(Box::new(payload)));
                }
            }
            StoreOp::ReplaceBody {
                queue,
                seq,
                body,
                body_md5,
            } => {
                let key = (*queue, *seq);
                if let Some(mut payload) = self.take(key, read_disk)? {
                    payload.body = body.clone();
                    payload.body_md5 = *body_md5;
                    self.active
                        .payloads
                        .insert(key, Held::Owned(Box::new(payload)));
                }
            }
            _ => {}
        }
        self.active.ops.push(op);
        Ok(())
    }

    fn forget(&mut self, key: Key) {
        self.active.payloads.remove(&key);
        self.active.gone.insert(key);
    }

    /// The current payload of a message, wherever it is, taken out of the open window if it is there.
    fn take(
        &mut self,
        key: Key,
        read_disk: &dyn Fn(Key) -> Result<Option<Payload>, StoreError>,
    ) -> Result<Option<Payload>, StoreError> {
        if let Some(payload) = self.active.take_here(key) {
            return Ok(Some(payload));
        }
        match self.find(key) {
            Found::Payload(payload) => Ok(Some(payload)),
            Found::Gone => Ok(None),
            Found::NotHere => read_disk(key),
        }
    }

    /// Makes `next` the open window, handing back the closed one (whose segment ends at `closed_bytes`) for
    /// its checkpoint. The closed window stays
    /// readable until [`Overlay::checkpointed`].
    pub fn rotate(&mut self, next: Window, closed_bytes: u64) -> Arc<Window> {
        self.active.segment_bytes = closed_bytes;
        let closed = Arc::new(std::mem::replace(&mut self.active, next));
        self.frozen = Some(closed.clone());
        closed
    }

    /// The frozen window is in redb now: reads go there.
    pub fn checkpointed(&mut self) {
        self.frozen = None;
    }
}
