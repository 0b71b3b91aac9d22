//! The store's limits, in one place. Each bounds memory, latency or recovery time; the reasons are on each.

/// redb's page cache when the configuration names none. Bounded so that resident memory does not grow with
/// the data (redb's own default is 1 GiB); message bodies are read from the OS page cache beyond it.
pub const CACHE_BYTES_DEFAULT: usize = 64 * 1024 * 1024;

/// Most operations one group commit takes; the rest wait for the next commit so that latency stays bounded.
pub const GROUP_OPS_MAX: usize = 50_000;

/// The log segment is handed to the checkpointer once it holds this many bytes. Everything in a segment is
/// also held in memory until its checkpoint (so that reads find it), and start-up replays at most two
/// segments: this bounds both that memory and recovery time (docs/decisions/0004-write-ahead-log.md).
pub const WAL_SEGMENT_BYTES_MAX: u64 = 64 * 1024 * 1024;

/// The same bound counted in operations, for small messages: an operation held in memory costs 72 bytes
/// (`size_of::<StoreOp>()`, veil_core's `STORE_OP_BYTES_MAX`), and a message's own operation ~370 more in its
/// box plus its body, so each of the two windows (open, checkpointing) holds at most 9 MiB of operations and,
/// if every one were a new message, ~38 MiB more besides bodies; a window's allocations are reused by the
/// next one. A message sent,
/// received and deleted in batches of ten costs about 3.3 operations, so a window holds about 40,000 such
/// messages: one that lives longer than that crosses a checkpoint and is written to redb.
pub const WAL_SEGMENT_OPS_MAX: usize = 131_072;

/// The largest record start-up accepts. A record is one submission; the engine's largest (a purge, a batch of
/// ten 1 MiB messages, a move of many messages) stays far below. A length beyond it can only be a torn or
/// corrupt header.
pub const WAL_RECORD_BYTES_MAX: u32 = 256 * 1024 * 1024;

/// Start-up compacts the redb file only when it is at least this large: below it the space is not worth it.
pub const COMPACT_FILE_BYTES_MIN: u64 = 64 * 1024 * 1024;

/// ...and only when the file is at least this many times the bytes of the message rows it holds (bodies live
/// in the log segments, so rows are locations, states and keys). redb's pages are not full, so a live file is
/// somewhat larger than its rows; 4× means most of the file is free, as after a large queue was drained or
/// purged: compacting it is quick, while compacting a mostly live file would take long for little.
pub const COMPACT_FILE_PER_ROW_BYTES_MIN: u64 = 4;

/// A kept log segment whose live bodies fall below this share (in percent) of the bodies it logged is
/// reclaimed: its survivors are copied forward and the file removed. A byte is then copied only while at most
/// a quarter of its segment is live, which bounds the copying at 1 / (1 − 0.25) ≈ 1.33× the bytes sent
/// (docs/decisions/0013-bodies-written-once.md).
pub const RECLAIM_LIVE_PERCENT_MAX: u64 = 25;

/// Most body bytes one relocation record copies: a reclaim of a larger remainder takes several checkpoints,
/// so that one record stays far below `WAL_RECORD_BYTES_MAX` and the memory it holds until its checkpoint
/// stays bounded.
pub const RELOCATION_BYTES_MAX: u64 = 32 * 1024 * 1024;

/// Bytes the server's probe writes and syncs into the data directory of a failed store to learn whether it
/// takes writes again (`probe_writable`): one page, enough to see ENOSPC or EIO, too little to matter.
pub const PROBE_BYTES: usize = 4096;

/// A failed store is reopened only when the file system has room for this many log segments: the reopen
/// creates one at once, and its recovery applies the unapplied log to redb, which needs up to about one more.
pub const REOPEN_FREE_SEGMENTS_MIN: u64 = 2;

/// Most kept body segments held open at once. With small segments (`--wal-segment-mib 1`) a large backlog
/// spans thousands of files, more than a process's default descriptor limit (1,024); past this many, one
/// handle is dropped and opened again when next read.
pub const BODY_FILES_OPEN_MAX: usize = 256;
