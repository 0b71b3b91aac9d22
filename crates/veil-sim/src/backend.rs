//! What the simulator needs of the store under the engine, so that one executor and one set of judges run
//! over either store: the fault-injecting [`FaultStore`] (`--store fault`, the default), whose durable part
//! can be read after every step, or the real log, checkpointer and recovery on a simulated disk
//! ([`crate::wal::WalStore`], `--store wal`), whose durable part is what recovery finds after a crash.

use std::sync::Arc;

use veil_core::Store;

use crate::store::FaultStore;
use crate::wal::DiskStats;

pub trait Backend {
    /// The store the engine runs on.
    fn engine_store(&self) -> Arc<dyn Store>;
    /// What a crash now would keep, for the checks; `None` when it cannot be read without changing what the
    /// store does (the real store between recoveries).
    fn durable(&self) -> Option<&dyn Store>;
    /// Submissions not yet made durable or failed.
    fn pending_count(&self) -> usize;
    /// The store refuses writes until it is reopened.
    fn failed(&self) -> bool;
    /// Makes up to `count` pending submissions durable; returns how many.
    fn flush(&self, count: usize) -> usize;
    /// Makes a write of the store fail (`reached_disk`: after it reached the disk). Returns whether it did.
    fn fail(&self, reached_disk: bool) -> bool;
    /// The process dies. `Some(lost)`: it died now, losing `lost` pending submissions; `None`: it will die
    /// at a later write or sync ([`Backend::power_went`] says when).
    fn crash(&mut self, kept: usize) -> Option<usize>;
    /// The power went since the store was (re)started.
    fn power_went(&self) -> bool;
    /// Starts the store again after a crash, from what the disk kept.
    fn recover(&mut self) -> Result<(), String>;
    /// Waits until the store has answered every submission and finished its background work, so that the
    /// next operation finds it in one state whatever the threads did. Returns whether there was anything to
    /// wait for.
    fn settle(&self) -> bool;
    /// Removes every injected fault (the end of a run).
    fn heal(&self);
    /// A failed store is restarted at the next flush (the real store flushes by itself).
    fn restarts_when_failed(&self) -> bool {
        false
    }
    /// Reads may return a flipped bit: a start-up that finds corrupt data has detected one, and is retried.
    fn reads_flip(&self) -> bool {
        false
    }
    /// What the simulated disk did, when there is one.
    fn disk_stats(&self) -> Option<DiskStats> {
        None
    }
}

impl Backend for Arc<FaultStore> {
    fn engine_store(&self) -> Arc<dyn Store> {
        self.clone()
    }

    fn durable(&self) -> Option<&dyn Store> {
        Some(FaultStore::durable(self))
    }

    fn pending_count(&self) -> usize {
        FaultStore::pending_count(self)
    }

    fn failed(&self) -> bool {
        FaultStore::failed(self)
    }

    fn flush(&self, count: usize) -> usize {
        FaultStore::flush(self, count)
    }

    fn fail(&self, reached_disk: bool) -> bool {
        if FaultStore::pending_count(self) == 0 {
            return false;
        }
        FaultStore::fail(self, reached_disk);
        true
    }

    fn crash(&mut self, kept: usize) -> Option<usize> {
        Some(FaultStore::crash(self, kept))
    }

    fn power_went(&self) -> bool {
        false
    }

    fn recover(&mut self) -> Result<(), String> {
        Ok(())
    }

    fn settle(&self) -> bool {
        false
    }

    fn heal(&self) {}
}
