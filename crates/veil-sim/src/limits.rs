//! The simulator's sizes and ranges, named with their unit last.

use veil_core::limits::{DAY_MS, HOUR_MS, SECOND_MS};
use veil_core::Millis;

/// Where every run's clock starts (2026-01-01), far from 0 so that no time saturates.
pub const CLOCK_START_MS: Millis = 1_767_225_600_000;
/// Operations generated per seed unless `--steps` says otherwise.
pub const STEPS_DEFAULT: usize = 300;
/// Simulated clients; each holds the receipts it received.
pub const CLIENTS: u8 = 4;
/// Receipts a client keeps; the oldest is forgotten (a client that gave up on a message).
pub const HELD_RECEIPTS_MAX: usize = 16;
/// Messages one generated batch send carries at most.
pub const SEND_BATCH_MAX: u8 = 4;
/// Messages one generated receive asks for at most.
pub const RECEIVE_MAX: u8 = 5;
/// FIFO message groups the generator spreads sends over.
pub const FIFO_GROUPS: u8 = 3;
/// Visibility a generated receive or change asks for at most.
pub const VISIBILITY_MS_MAX: Millis = 120 * SECOND_MS;
/// A small clock step (time passing between requests).
pub const SMALL_STEP_MS_MAX: Millis = 20 * SECOND_MS;
/// A clock jump (a stalled process, a VM pause): big enough to pass visibility windows, delays and dedup
/// intervals, sometimes retention.
pub const JUMP_MS_MAX: Millis = 2 * DAY_MS;
/// Shortest and longest retention a simulated queue gets.
pub const RETENTION_MS_MIN: Millis = HOUR_MS;
pub const RETENTION_MS_MAX: Millis = 4 * DAY_MS;
/// Longest delay a simulated queue gets.
pub const DELAY_MS_MAX: Millis = 10 * SECOND_MS;
/// A FIFO queue's deduplication interval in the simulation (SQS's 5 minutes).
pub const DEDUP_INTERVAL_MS: Millis = 5 * 60 * SECOND_MS;
/// Longest long-poll a generated receive waits.
pub const RECEIVE_WAIT_MS_MAX: Millis = 5 * SECOND_MS;
/// SQS and KubeMQ refuse a visibility deadline later than this after the receive.
pub const SINCE_RECEIVE_MS_MAX: Millis = 12 * HOUR_MS;
/// Visibility of the final drain's receives: long enough that nothing it holds comes back before its delete.
pub const DRAIN_VISIBILITY_MS: Millis = HOUR_MS;
/// Rounds of flushing and polling (or sweeping and re-reading) after which the simulator stops waiting for
/// the engine to settle; one or two always do.
pub const SETTLE_PASSES_MAX: usize = 3;
/// Receives of one queue the final drain makes at most before it calls the queue stuck.
pub const DRAIN_RECEIVES_MAX: usize = 10_000;
/// Re-runs the shrinker may spend on one failure.
pub const SHRINK_RUNS_MAX: usize = 20_000;

// ----- `--store wal`: the real store on a simulated disk -----

/// Log segments of a few commits, so that every seed rolls segments, runs checkpoints and recovers across
/// them (production: `veil_store::WAL_SEGMENT_BYTES_MAX`, 64 MiB).
pub const WAL_SEGMENT_BYTES_SIM: u64 = 512;
/// redb's page cache: small, so that reads reach the (simulated) disk and its faults.
pub const WAL_CACHE_BYTES_SIM: usize = 256 * 1024;
/// Where the store lives on the simulated disk.
pub const WAL_DATA_DIR: &str = "/sim/data";
/// Mixed into the seed for the wal mode's own draws, so that they do not shift the generator's.
pub const WAL_SEED_SALT: u64 = 0x5741_4C5F_5345_4544;
/// Share of seeds whose disk flips a bit in some reads, and how often it then does (per million reads).
pub const WAL_FLIP_SEEDS_SHARE: f64 = 0.25;
pub const WAL_FLIPS_PER_MILLION: u32 = 2_000;
/// With `--log-flips`, reads of the log flip this often: the log is read only at recovery, once a segment.
pub const WAL_LOG_FLIPS_PER_MILLION: u32 = 200_000;
/// Share of injected write faults that strike the log (the rest strike the redb file under a checkpoint).
pub const WAL_LOG_FAULT_SHARE: f64 = 0.75;
/// A crash of `kept` = k loses the power within the next k × this many writes (or syncs).
pub const WAL_CRASH_CALLS_PER_KEPT: u64 = 12;
/// Recoveries tried in a row (each may be interrupted by a power loss or see a flipped bit) before the run
/// calls recovery stuck.
pub const RECOVERY_ATTEMPTS_MAX: usize = 10;
/// Longest park while waiting for the store's writer to answer (it wakes the simulator earlier).
pub const WAL_PARK_MS: u64 = 10;
/// Longest wait for a checkpoint to finish before the simulator goes on (and counts it).
pub const WAL_IDLE_WAIT_MS_MAX: u64 = 10_000;
