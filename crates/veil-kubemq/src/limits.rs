//! KubeMQ's server settings (docs/semantics.md §KubeMQ), named in one place with their unit last. The defaults are
//! KubeMQ's; [`crate::KubemqConfig`] makes each configurable.

use veil_core::Millis;

pub const MAX_NUMBER_OF_MESSAGES: i32 = 1_024;
pub const MAX_WAIT_TIMEOUT_S: i32 = 3_600;
pub const MAX_EXPIRATION_S: i32 = 43_200;
pub const MAX_DELAY_S: i32 = 43_200;
/// A policy's `MaxReceiveCount` of 0 means this.
pub const MAX_RECEIVE_COUNT: i32 = 1_024;
pub const MAX_VISIBILITY_S: i32 = 43_200;
/// The server-side visibility timeout of a downstream transaction's unacked messages.
pub const DEFAULT_VISIBILITY_S: i32 = 60;
pub const DEFAULT_WAIT_TIMEOUT_S: i32 = 1;
/// Hidden messages per channel created through KubeMQ before receives fail.
pub const MAX_INFLIGHT: u32 = 2_048;
/// gRPC's default frame limit, used as the channel's message size cap.
pub const MESSAGE_SIZE_BYTES_MAX: u32 = 4 * 1_024 * 1_024;
/// ModifyVisibility may not push a deadline further than this after the receive (docs/semantics.md §2: 12 h).
pub const VISIBILITY_TOTAL_MS_MAX: Millis = 43_200 * 1_000;
/// The KubeMQ release whose queues protocol Veil implements (kubemq-community v2.4.0): what Ping reports as
/// the server version, so that SDKs checking a tested server range accept it.
pub const KUBEMQ_PROTOCOL_VERSION: &str = "2.4.0";
/// What Ping reports as the host.
pub const PING_HOST: &str = "veil";
pub const LISTEN_DEFAULT: &str = "127.0.0.1:50000";
/// The channel the SDKs send channel-management queries to.
pub const CLUSTER_REQUESTS_CHANNEL: &str = "kubemq.cluster.internal.requests";
/// How much sooner than its wait a downstream Get short of its items answers, at most (and at most a quarter
/// of the wait): the SDKs give up `WaitTimeout` + 0.5 s after sending a Get, so a Get that reaches Veil late
/// (a loaded client) would otherwise be answered after its SDK stopped listening (docs/semantics.md §KubeMQ).
pub const GET_ANSWER_LEAD_MS_MAX: Millis = 250;
/// Completed transactions a downstream stream remembers for TransactionStatus.
pub const COMPLETED_TRANSACTIONS_KEPT: usize = 256;

/// The longest channel name, in bytes: KubeMQ's SDKs refuse longer ones (kubemq-go's and kubemq-rust's
/// `validateChannel`, 256); its server (2.4.0) has no limit, but every name becomes a queue, a metrics label
/// and an audit field in Veil, so an unbounded one is refused here (docs/semantics.md §KubeMQ).
pub const CHANNEL_NAME_BYTES_MAX: usize = 256;
/// The longest ClientID, in bytes: the engine's bound on a client identity (veil-core's
/// `CLIENT_ID_BYTES_MAX`), as KubeMQ's SDKs bound a channel name. KubeMQ's server (2.4.0) sets none, but the id
/// is kept with every message and every delivery (docs/security.md "Identifiers").
pub const CLIENT_ID_BYTES_MAX: usize = veil_core::limits::CLIENT_ID_BYTES_MAX;
/// Tags one message may carry: SQS's own maximum of message attributes, because tags are the engine's
/// attributes and an SQS consumer of the same queue receives them as message attributes.
pub const MESSAGE_TAGS_MAX: usize = 10;
/// The longest tag key, in bytes (KubeMQ's SDKs; also SQS's longest message attribute name).
pub const TAG_KEY_BYTES_MAX: usize = 256;
/// The longest tag value, in bytes (KubeMQ's SDKs).
pub const TAG_VALUE_BYTES_MAX: usize = 4_096;

/// The first size of the buffers tonic gives each gRPC call, one to decode requests and one to encode
/// responses (tonic's default is 8 KiB each). They grow to fit a larger message, so this bounds nothing; it
/// is what a stream costs while it waits: 10,000 downstreams parked in a Get held 160 MiB of default-sized,
/// empty buffers (docs/reliability.md "What a waiting connection costs").
pub const GRPC_CODEC_BUFFER_BYTES: usize = 1_024;
