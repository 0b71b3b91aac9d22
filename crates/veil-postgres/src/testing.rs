//! Test support: where the tests' PostgreSQL is, and a schema of its own for each store a test opens, so
//! that tests run in parallel on one server without seeing each other's data. `./scripts/test` starts a
//! throwaway server (scripts/pg-test-server) and sets [`TEST_URL_ENV`]; without it the PostgreSQL tests skip.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::connect::PgOptions;

/// The variable naming the test server (`postgres://postgres@127.0.0.1:PORT/postgres`).
pub const TEST_URL_ENV: &str = "VEIL_TEST_POSTGRES_URL";

/// PostgreSQL's limit on an identifier, in bytes.
const IDENTIFIER_BYTES_MAX: usize = 63;

/// Set (to anything) to make a missing test server a failure instead of a skip: a run that must cover
/// PostgreSQL cannot then look green without it.
pub const REQUIRE_ENV: &str = "VEIL_REQUIRE_POSTGRES";

/// Options for a fresh schema on the test server, named after `test` (and this process and a counter, so
/// that it is new); `None`, after a skip line, when no test server is configured (a panic with
/// [`REQUIRE_ENV`] set).
pub fn test_options(test: &str) -> Option<PgOptions> {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let Some(url) = std::env::var(TEST_URL_ENV)
        .ok()
        .filter(|url| !url.is_empty())
    else {
        let why = format!("{TEST_URL_ENV} is not set (./scripts/test sets it)");
        assert!(std::env::var_os(REQUIRE_ENV).is_none(), "{test}: {why}");
        // Straight to the process's stderr: `eprintln!` is captured by the test harness and shown only for
        // a failing test, and a skipped one passes. This line shows in every run.
        use std::io::Write;
        let _ = writeln!(std::io::stderr(), "SKIPPED {test}: {why}");
        return None;
    };
    let mut options = PgOptions::new(url);
    let unique = format!(
        "_{}_{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    );
    let name: String = test
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '_'
            }
        })
        .take(IDENTIFIER_BYTES_MAX - unique.len() - 2)
        .collect();
    options.schema = format!("t_{name}{unique}");
    options.pool_size = 2;
    // Several writer lanes, so that every test over PostgreSQL also checks their barriers keep its order.
    options.writers = 4;
    Some(options)
}
