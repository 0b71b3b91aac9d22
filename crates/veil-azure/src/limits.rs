//! Every number the Azure Queue Storage front-end enforces, in one place (docs/semantics.md §Azure). The
//! service and the codec validate against these names, and the README quotes them.

use veil_core::limits::{DAY_MS, SECOND_MS};
use veil_core::Millis;

/// Get Messages / Peek Messages: `numofmessages` 1..=32, 1 when omitted.
pub const MESSAGES_PER_GET_MIN: u64 = 1;
pub const MESSAGES_PER_GET_MAX: u64 = 32;
pub const MESSAGES_PER_GET_DEFAULT: u64 = 1;
/// Get Messages: `visibilitytimeout` 1..=604,800 s, 30 s when omitted.
pub const GET_VISIBILITY_S_MIN: u64 = 1;
pub const GET_VISIBILITY_S_DEFAULT: u64 = 30;
/// Put (initial invisibility) and Update: `visibilitytimeout` 0..=604,800 s; Put defaults to 0.
pub const VISIBILITY_S_MAX: u64 = 604_800;
/// Put Message: `messagettl` ≥ 1 s or -1 (never expires), 7 days when omitted. Azure names no maximum
/// beyond what fits a 32-bit signed count of seconds.
pub const MESSAGE_TTL_S_MIN: i64 = 1;
pub const MESSAGE_TTL_S_MAX: i64 = i32::MAX as i64;
pub const MESSAGE_TTL_S_DEFAULT: i64 = 604_800;
pub const MESSAGE_TTL_NEVER: i64 = -1;
/// MessageText, counted in bytes after XML decoding.
pub const MESSAGE_TEXT_BYTES_MAX: usize = 65_536;
/// Largest HTTP body read: a 64 KiB text fully escaped (`&quot;` is 6 bytes per byte) plus the envelope.
/// Anything larger cannot hold a legal message and is answered 413 without being read whole.
pub const HTTP_BODY_BYTES_MAX: usize = 6 * MESSAGE_TEXT_BYTES_MAX + 4_096;
/// Queue names: 3..=63 characters of `[a-z0-9-]`, starting and ending with a letter or digit, no `--`.
pub const QUEUE_NAME_CHARS_MIN: usize = 3;
pub const QUEUE_NAME_CHARS_MAX: usize = 63;
/// List Queues: `maxresults` ≥ 1; larger values than 5,000 are served as 5,000.
pub const LIST_RESULTS_MAX: usize = 5_000;
/// Set Queue ACL: at most five stored access policies, ids up to 64 characters.
pub const SIGNED_IDENTIFIERS_MAX: usize = 5;
pub const SIGNED_IDENTIFIER_ID_CHARS_MAX: usize = 64;
/// Metadata: names are C# identifiers; the whole set is limited to 8 KiB.
pub const METADATA_BYTES_MAX: usize = 8_192;
/// Poison policy (Veil's extension): the dequeue count after which a get moves a message aside.
/// Azure Functions' default `maxDequeueCount` is 5.
pub const MAX_DEQUEUE_COUNT_MIN: u32 = 1;
pub const MAX_DEQUEUE_COUNT_MAX: u32 = 1_000;
/// The poison queue of `<queue>` unless the queue's metadata names another (Azure Functions' convention).
pub const POISON_QUEUE_SUFFIX: &str = "-poison";
/// Queues created through Azure keep a message seven days unless its put says otherwise.
pub const QUEUE_RETENTION_MS: Millis = 7 * DAY_MS;
pub const QUEUE_VISIBILITY_MS: Millis = GET_VISIBILITY_S_DEFAULT * SECOND_MS;
/// The development account every emulator knows (`UseDevelopmentStorage=true`) and its published key.
pub const DEV_ACCOUNT_NAME: &str = "devstoreaccount1";
pub const DEV_ACCOUNT_KEY: &str =
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==";
/// Set Service Properties: a retention policy keeps 1..=365 days; at most five CORS rules, whose methods
/// come from this list (Azure's Set Queue Service Properties documentation).
pub const RETENTION_DAYS: std::ops::RangeInclusive<u32> = 1..=365;
pub const CORS_RULES_MAX: usize = 5;
pub const CORS_METHODS: [&str; 7] = ["DELETE", "GET", "HEAD", "MERGE", "POST", "OPTIONS", "PUT"];
/// The read-only secondary endpoint of an account is the account name with this suffix.
pub const SECONDARY_SUFFIX: &str = "-secondary";
/// The service version Veil answers with when the request names none (the az CLI's pinned one is older;
/// any well-formed version is accepted).
pub const SERVICE_VERSION_DEFAULT: &str = "2026-04-06";
/// Bearer tokens (Entra ID) are accepted from this service version on (Azure's "Authorize with Microsoft
/// Entra ID": OAuth for queues needs `x-ms-version` 2017-11-09 or later).
pub const BEARER_VERSION_MIN: &str = "2017-11-09";
/// How far a token's `exp` and `nbf` may be off the server's clock, as Entra ID's validators allow (five
/// minutes).
pub const TOKEN_CLOCK_SKEW_MS: Millis = 300 * SECOND_MS;
/// Get User Delegation Key: a key is valid at most seven days from the request (Azure rejects a longer one).
pub const USER_DELEGATION_KEY_LIFETIME_MS_MAX: Millis = 7 * DAY_MS;
/// The `signedservice` of a queue user delegation key.
pub const USER_DELEGATION_SERVICE: &str = "q";
/// Where `WWW-Authenticate` sends a client whose token failed when the config names no tenant.
pub const ENTRA_TENANT_DEFAULT: &str = "common";
/// The resource a storage token is requested for, named in `WWW-Authenticate`.
pub const STORAGE_RESOURCE_ID: &str = "https://storage.azure.com";
