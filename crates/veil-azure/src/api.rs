//! The typed requests and answers of the Azure Queue Storage API, between the codec and the service.

use std::collections::BTreeMap;

use bytes::Bytes;
use veil_core::Millis;

use crate::pop_receipt::PopReceipt;

/// Metadata as the wire carries it (`x-ms-meta-<name>: <value>`), names as received (lower case over HTTP/1.1
/// in practice), sorted.
pub type Metadata = BTreeMap<String, String>;

/// How long a put message lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MessageTtl {
    Seconds(u64),
    /// `messagettl=-1`.
    Never,
}

/// One stored access policy of a queue ACL. Times and permissions are kept as the client wrote them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SignedIdentifier {
    pub id: String,
    pub start: Option<String>,
    pub expiry: Option<String>,
    pub permission: Option<String>,
}

/// Every operation of docs/semantics.md §Azure, with its validated parameters.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Operation {
    ListQueues {
        prefix: Option<String>,
        marker: Option<String>,
        max_results: Option<usize>,
        include_metadata: bool,
    },
    GetServiceProperties,
    SetServiceProperties {
        xml: String,
    },
    GetServiceStats,
    /// Get User Delegation Key: a key for signing user delegation SAS, for the bearer token's principal.
    /// Times as the client wrote them (ISO 8601 UTC); `start` defaults to now.
    GetUserDelegationKey {
        start: Option<String>,
        expiry: String,
        delegated_user_tid: Option<String>,
    },
    /// CORS preflight (`OPTIONS`), answered from the account's CORS rules without authentication.
    Preflight {
        origin: String,
        method: String,
        headers: Vec<String>,
    },
    CreateQueue {
        queue: String,
        metadata: Metadata,
    },
    DeleteQueue {
        queue: String,
    },
    GetMetadata {
        queue: String,
    },
    SetMetadata {
        queue: String,
        metadata: Metadata,
    },
    GetAcl {
        queue: String,
    },
    SetAcl {
        queue: String,
        identifiers: Vec<SignedIdentifier>,
    },
    PutMessage {
        queue: String,
        text: String,
        visibility_s: u64,
        ttl: MessageTtl,
    },
    GetMessages {
        queue: String,
        count: u64,
        visibility_s: u64,
    },
    PeekMessages {
        queue: String,
        count: u64,
    },
    ClearMessages {
        queue: String,
    },
    DeleteMessage {
        queue: String,
        message_id: String,
        pop_receipt: PopReceipt,
    },
    UpdateMessage {
        queue: String,
        message_id: String,
        pop_receipt: PopReceipt,
        visibility_s: u64,
        text: Option<String>,
    },
}

impl Operation {
    /// The queue the operation acts on, if any.
    pub fn queue(&self) -> Option<&str> {
        match self {
            Self::CreateQueue { queue, .. }
            | Self::DeleteQueue { queue }
            | Self::GetMetadata { queue }
            | Self::SetMetadata { queue, .. }
            | Self::GetAcl { queue }
            | Self::SetAcl { queue, .. }
            | Self::PutMessage { queue, .. }
            | Self::GetMessages { queue, .. }
            | Self::PeekMessages { queue, .. }
            | Self::ClearMessages { queue }
            | Self::DeleteMessage { queue, .. }
            | Self::UpdateMessage { queue, .. } => Some(queue),
            _ => None,
        }
    }
}

/// An operation named by its method, path and `restype` / `comp` / `peekonly` alone, before any parameter is
/// read: what authorization decides on (a SAS's permissions), so that a request that is not allowed learns
/// nothing from its parameters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OperationKind {
    ListQueues,
    GetServiceProperties,
    SetServiceProperties,
    GetServiceStats,
    GetUserDelegationKey,
    Preflight,
    CreateQueue,
    DeleteQueue,
    GetMetadata,
    SetMetadata,
    GetAcl,
    SetAcl,
    PutMessage,
    GetMessages,
    PeekMessages,
    ClearMessages,
    DeleteMessage,
    UpdateMessage,
}

impl OperationKind {
    /// The operation's name as Azure's REST reference spells it: the `operation` label of Veil's request
    /// metrics and the `action` of its audit log.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::ListQueues => "ListQueues",
            Self::GetServiceProperties => "GetServiceProperties",
            Self::SetServiceProperties => "SetServiceProperties",
            Self::GetServiceStats => "GetServiceStats",
            Self::GetUserDelegationKey => "GetUserDelegationKey",
            Self::Preflight => "Preflight",
            Self::CreateQueue => "CreateQueue",
            Self::DeleteQueue => "DeleteQueue",
            Self::GetMetadata => "GetMetadata",
            Self::SetMetadata => "SetMetadata",
            Self::GetAcl => "GetAcl",
            Self::SetAcl => "SetAcl",
            Self::PutMessage => "PutMessage",
            Self::GetMessages => "GetMessages",
            Self::PeekMessages => "PeekMessages",
            Self::ClearMessages => "ClearMessages",
            Self::DeleteMessage => "DeleteMessage",
            Self::UpdateMessage => "UpdateMessage",
        }
    }
}

/// A message as Put, Get and Peek show it. `pop_receipt` and `time_next_visible` are absent for Peek;
/// `dequeue_count` and `text` are absent for Put.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QueueMessage {
    pub message_id: String,
    pub insertion_time: Millis,
    pub expiration_time: Millis,
    pub pop_receipt: Option<String>,
    pub time_next_visible: Option<Millis>,
    pub dequeue_count: Option<u32>,
    /// The stored body, shared with the engine's copy rather than copied.
    pub text: Option<Bytes>,
}

/// One queue of a listing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QueueItem {
    pub name: String,
    /// `Some` when the listing asked for metadata.
    pub metadata: Option<Metadata>,
}

/// A page of List Queues.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QueueList {
    pub service_endpoint: String,
    pub prefix: Option<String>,
    pub marker: Option<String>,
    pub max_results: Option<usize>,
    pub queues: Vec<QueueItem>,
    pub next_marker: Option<String>,
}

/// What an operation answers on success.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Output {
    /// No body; status as given (201 create, 204 most writes, 202 set service properties).
    Empty {
        status: u16,
    },
    QueueList(QueueList),
    /// A raw XML document (service properties as stored).
    Xml(String),
    ServiceStats {
        last_sync_time: Millis,
    },
    Metadata {
        metadata: Metadata,
        approximate_count: u64,
    },
    Acl(Vec<SignedIdentifier>),
    /// 201 for Put, 200 for Get and Peek.
    Messages {
        status: u16,
        messages: Vec<QueueMessage>,
    },
    Updated {
        pop_receipt: String,
        time_next_visible: Millis,
    },
    UserDelegationKey(UserDelegationKey),
    Preflight {
        allow_origin: String,
        allow_methods: String,
        allow_headers: String,
        max_age_s: u64,
    },
}

/// A user delegation key as Get User Delegation Key answers it: the principal and window it was issued for,
/// and its value (base64), which signs user delegation SAS.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UserDelegationKey {
    pub signed_oid: String,
    pub signed_tid: String,
    pub signed_start: String,
    pub signed_expiry: String,
    pub signed_service: String,
    pub signed_version: String,
    pub signed_delegated_user_tid: Option<String>,
    pub value: String,
}
