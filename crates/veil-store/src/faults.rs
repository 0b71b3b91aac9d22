//! Fault injection for the store's own tests (docs/reliability.md "Storage faults"): a [`FaultPlan`] makes
//! the Nth log append fail (EIO, nothing or only a prefix written), the Nth log sync fail, or the Nth
//! checkpoint fail before or after its redb commit. The server never sets one (`StoreOptions::faults` is
//! `None`), so the production path pays one untaken branch per group commit and per checkpoint.

use std::sync::atomic::{AtomicU64, Ordering};

/// What goes wrong, and where.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// The log append fails with EIO and writes nothing.
    WriteEio,
    /// The log append writes only the first half of its bytes, then fails with EIO: a torn write.
    WriteTorn,
    /// The append succeeds, its fdatasync fails with EIO.
    SyncEio,
    /// The checkpoint fails before it touches redb.
    CheckpointEio,
    /// The checkpoint commits to redb, then fails before it removes its log segment: the state a crash in the
    /// middle of a checkpoint leaves.
    CheckpointAfterCommit,
}

impl Fault {
    fn point(self) -> Point {
        match self {
            Fault::WriteEio | Fault::WriteTorn => Point::Append,
            Fault::SyncEio => Point::Sync,
            Fault::CheckpointEio | Fault::CheckpointAfterCommit => Point::Checkpoint,
        }
    }
}

/// Where a fault can strike; each point counts its own calls.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Point {
    Append,
    Sync,
    Checkpoint,
}

/// One fault at the `nth` call (counted from 1) of its point.
#[derive(Debug)]
pub struct FaultPlan {
    fault: Fault,
    nth: u64,
    calls: AtomicU64,
    injected: AtomicU64,
}

impl FaultPlan {
    pub fn new(fault: Fault, nth: u64) -> Self {
        Self {
            fault,
            nth,
            calls: AtomicU64::new(0),
            injected: AtomicU64::new(0),
        }
    }

    /// How many times the fault struck (0 or 1).
    pub fn injected(&self) -> u64 {
        self.injected.load(Ordering::Relaxed)
    }

    /// Counts a call at `point` and says which fault strikes it, if any.
    pub(crate) fn at(&self, point: Point) -> Option<Fault> {
        if self.fault.point() != point {
            return None;
        }
        let call = self.calls.fetch_add(1, Ordering::Relaxed) + 1;
        (call == self.nth).then(|| {
            self.injected.fetch_add(1, Ordering::Relaxed);
            self.fault
        })
    }
}

/// The error an injected fault reports: what the kernel says for a failed device.
pub(crate) fn eio() -> std::io::Error {
    std::io::Error::from_raw_os_error(libc::EIO)
}
