//! The engine's clock in a cluster: the database's time. Every node that may lead reads `now` as its own
//! wall clock corrected by an offset to the database's `clock_timestamp()`, measured at each lease renewal
//! (error: half the round trip). A new leader therefore decides visibility on the same clock the old one
//! did, whatever the skew between the nodes' own clocks (docs/decisions/0007-scale-out.md "One clock").

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio_postgres::{Client, GenericClient};
use veil_core::clock::Sleep;
use veil_core::{Clock, Millis, StoreError, SystemClock};

use crate::connect::db_error;

/// The database's clock as this node reads it. Cheap to clone; clones share the offset.
#[derive(Clone, Debug, Default)]
pub struct DbClock {
    inner: Arc<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    /// Database time minus this node's wall time, in ms; written by `sync`, read by every `now`.
    offset_ms: AtomicI64,
    /// The largest `now` returned: an offset corrected downwards never moves time backwards for the engine.
    last_ms: AtomicU64,
}

impl DbClock {
    /// Measures the offset to the database's clock once; returns the round trip it took.
    pub async fn sync(&self, client: &Client) -> Result<Duration, StoreError> {
        let sent = Instant::now();
        let local_before = SystemClock.now() as i64;
        let db_ms = db_now_ms(client).await?;
        let round_trip = sent.elapsed();
        let local_mid = local_before + round_trip.as_millis() as i64 / 2;
        self.inner
            .offset_ms
            .store(db_ms - local_mid, Ordering::Relaxed);
        Ok(round_trip)
    }

    /// The offset last measured (database minus node), in ms.
    pub fn offset_ms(&self) -> i64 {
        self.inner.offset_ms.load(Ordering::Relaxed)
    }
}

/// The database's own time now (`clock_timestamp()`, not the transaction's start), in ms since the epoch.
pub async fn db_now_ms(client: &impl GenericClient) -> Result<i64, StoreError> {
    let row = client
        .query_one(
            "SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint",
            &[],
        )
        .await
        .map_err(db_error)?;
    Ok(row.get(0))
}

impl Clock for DbClock {
    fn now(&self) -> Millis {
        let corrected = (SystemClock.now() as i64)
            .saturating_add(self.inner.offset_ms.load(Ordering::Relaxed))
            .max(0) as u64;
        let previous = self.inner.last_ms.fetch_max(corrected, Ordering::Relaxed);
        previous.max(corrected)
    }

    fn sleep_until(&self, deadline: Millis) -> Sleep {
        let wait_ms = deadline.saturating_sub(self.now());
        Box::pin(tokio::time::sleep(Duration::from_millis(wait_ms)))
    }
}
