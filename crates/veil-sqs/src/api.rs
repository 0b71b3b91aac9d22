//! The typed shapes of the SQS actions, independent of the wire: what the codec decodes requests into and what
//! the service hands back to be encoded. Field names follow botocore's model; values are still raw (numbers
//! unchecked, names unvalidated) — range and format rules live in `validate` and `attributes`.

use std::collections::BTreeMap;

use veil_core::Attributes;

/// Which of SQS's two wire protocols a request used; the answer uses the same.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Protocol {
    /// AWS JSON 1.0 (`X-Amz-Target: AmazonSQS.<Action>`), used by current SDKs.
    Json,
    /// The Query protocol (form parameters, XML answers), used by older SDKs and tools.
    Query,
}

/// A decoded request.
#[derive(Clone, Debug, PartialEq)]
pub struct SqsRequest {
    pub protocol: Protocol,
    pub action: Action,
}

/// Every action SQS defines, by name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ActionName {
    CreateQueue,
    DeleteQueue,
    GetQueueUrl,
    ListQueues,
    GetQueueAttributes,
    SetQueueAttributes,
    SendMessage,
    SendMessageBatch,
    ReceiveMessage,
    DeleteMessage,
    DeleteMessageBatch,
    ChangeMessageVisibility,
    ChangeMessageVisibilityBatch,
    PurgeQueue,
    TagQueue,
    UntagQueue,
    ListQueueTags,
    ListDeadLetterSourceQueues,
    AddPermission,
    RemovePermission,
    StartMessageMoveTask,
    ListMessageMoveTasks,
    CancelMessageMoveTask,
}

impl ActionName {
    pub const ALL: [ActionName; 23] = [
        Self::CreateQueue,
        Self::DeleteQueue,
        Self::GetQueueUrl,
        Self::ListQueues,
        Self::GetQueueAttributes,
        Self::SetQueueAttributes,
        Self::SendMessage,
        Self::SendMessageBatch,
        Self::ReceiveMessage,
        Self::DeleteMessage,
        Self::DeleteMessageBatch,
        Self::ChangeMessageVisibility,
        Self::ChangeMessageVisibilityBatch,
        Self::PurgeQueue,
        Self::TagQueue,
        Self::UntagQueue,
        Self::ListQueueTags,
        Self::ListDeadLetterSourceQueues,
        Self::AddPermission,
        Self::RemovePermission,
        Self::StartMessageMoveTask,
        Self::ListMessageMoveTasks,
        Self::CancelMessageMoveTask,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::CreateQueue => "CreateQueue",
            Self::DeleteQueue => "DeleteQueue",
            Self::GetQueueUrl => "GetQueueUrl",
            Self::ListQueues => "ListQueues",
            Self::GetQueueAttributes => "GetQueueAttributes",
            Self::SetQueueAttributes => "SetQueueAttributes",
            Self::SendMessage => "SendMessage",
            Self::SendMessageBatch => "SendMessageBatch",
            Self::ReceiveMessage => "ReceiveMessage",
            Self::DeleteMessage => "DeleteMessage",
            Self::DeleteMessageBatch => "DeleteMessageBatch",
            Self::ChangeMessageVisibility => "ChangeMessageVisibility",
            Self::ChangeMessageVisibilityBatch => "ChangeMessageVisibilityBatch",
            Self::PurgeQueue => "PurgeQueue",
            Self::TagQueue => "TagQueue",
            Self::UntagQueue => "UntagQueue",
            Self::ListQueueTags => "ListQueueTags",
            Self::ListDeadLetterSourceQueues => "ListDeadLetterSourceQueues",
            Self::AddPermission => "AddPermission",
            Self::RemovePermission => "RemovePermission",
            Self::StartMessageMoveTask => "StartMessageMoveTask",
            Self::ListMessageMoveTasks => "ListMessageMoveTasks",
            Self::CancelMessageMoveTask => "CancelMessageMoveTask",
        }
    }

    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|action| action.as_str() == name)
    }
}

/// A decoded action with its input.
#[derive(Clone, Debug, PartialEq)]
pub enum Action {
    CreateQueue(CreateQueueInput),
    DeleteQueue(QueueTarget),
    GetQueueUrl(GetQueueUrlInput),
    ListQueues(ListQueuesInput),
    GetQueueAttributes(GetQueueAttributesInput),
    SetQueueAttributes(SetQueueAttributesInput),
    SendMessage(SendMessageInput),
    SendMessageBatch(SendMessageBatchInput),
    ReceiveMessage(ReceiveMessageInput),
    DeleteMessage(DeleteMessageInput),
    DeleteMessageBatch(DeleteMessageBatchInput),
    ChangeMessageVisibility(ChangeMessageVisibilityInput),
    ChangeMessageVisibilityBatch(ChangeMessageVisibilityBatchInput),
    PurgeQueue(QueueTarget),
    TagQueue(TagQueueInput),
    UntagQueue(UntagQueueInput),
    ListQueueTags(QueueTarget),
    ListDeadLetterSourceQueues(ListDeadLetterSourceQueuesInput),
    AddPermission(AddPermissionInput),
    RemovePermission(RemovePermissionInput),
    StartMessageMoveTask(StartMessageMoveTaskInput),
    ListMessageMoveTasks(ListMessageMoveTasksInput),
    CancelMessageMoveTask(CancelMessageMoveTaskInput),
}

impl Action {
    pub fn name(&self) -> ActionName {
        match self {
            Self::CreateQueue(_) => ActionName::CreateQueue,
            Self::DeleteQueue(_) => ActionName::DeleteQueue,
            Self::GetQueueUrl(_) => ActionName::GetQueueUrl,
            Self::ListQueues(_) => ActionName::ListQueues,
            Self::GetQueueAttributes(_) => ActionName::GetQueueAttributes,
            Self::SetQueueAttributes(_) => ActionName::SetQueueAttributes,
            Self::SendMessage(_) => ActionName::SendMessage,
            Self::SendMessageBatch(_) => ActionName::SendMessageBatch,
            Self::ReceiveMessage(_) => ActionName::ReceiveMessage,
            Self::DeleteMessage(_) => ActionName::DeleteMessage,
            Self::DeleteMessageBatch(_) => ActionName::DeleteMessageBatch,
            Self::ChangeMessageVisibility(_) => ActionName::ChangeMessageVisibility,
            Self::ChangeMessageVisibilityBatch(_) => ActionName::ChangeMessageVisibilityBatch,
            Self::PurgeQueue(_) => ActionName::PurgeQueue,
            Self::TagQueue(_) => ActionName::TagQueue,
            Self::UntagQueue(_) => ActionName::UntagQueue,
            Self::ListQueueTags(_) => ActionName::ListQueueTags,
            Self::ListDeadLetterSourceQueues(_) => ActionName::ListDeadLetterSourceQueues,
            Self::AddPermission(_) => ActionName::AddPermission,
            Self::RemovePermission(_) => ActionName::RemovePermission,
            Self::StartMessageMoveTask(_) => ActionName::StartMessageMoveTask,
            Self::ListMessageMoveTasks(_) => ActionName::ListMessageMoveTasks,
            Self::CancelMessageMoveTask(_) => ActionName::CancelMessageMoveTask,
        }
    }
}

/// The queue an action is about. `None` when the request gave no `QueueUrl`: the request path may name the
/// queue instead (`POST /<account>/<queue>`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct QueueTarget {
    pub queue_url: Option<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CreateQueueInput {
    pub queue_name: String,
    pub attributes: BTreeMap<String, String>,
    pub tags: BTreeMap<String, String>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GetQueueUrlInput {
    pub queue_name: String,
    pub queue_owner_account_id: Option<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ListQueuesInput {
    pub queue_name_prefix: Option<String>,
    pub max_results: Option<i64>,
    pub next_token: Option<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GetQueueAttributesInput {
    pub target: QueueTarget,
    pub attribute_names: Vec<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SetQueueAttributesInput {
    pub target: QueueTarget,
    pub attributes: BTreeMap<String, String>,
}

/// A message attribute as sent (`BinaryValue` already base64-decoded).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MessageAttributeInput {
    pub data_type: Option<String>,
    pub string_value: Option<String>,
    pub binary_value: Option<Vec<u8>>,
    /// `StringListValues` / `BinaryListValues` were given (reserved by AWS and refused by AWS as well).
    pub has_list_values: bool,
}

/// The part of SendMessage that a SendMessageBatch entry repeats.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MessageInput {
    pub body: Option<String>,
    pub delay_seconds: Option<i64>,
    pub message_attributes: BTreeMap<String, MessageAttributeInput>,
    pub system_attributes: BTreeMap<String, MessageAttributeInput>,
    pub deduplication_id: Option<String>,
    pub group_id: Option<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SendMessageInput {
    pub target: QueueTarget,
    pub message: MessageInput,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SendMessageBatchEntry {
    pub id: String,
    pub message: MessageInput,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SendMessageBatchInput {
    pub target: QueueTarget,
    pub entries: Vec<SendMessageBatchEntry>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReceiveMessageInput {
    pub target: QueueTarget,
    pub max_number_of_messages: Option<i64>,
    pub visibility_timeout: Option<i64>,
    pub wait_time_seconds: Option<i64>,
    /// `AttributeNames` and `MessageSystemAttributeNames` together (the first is the deprecated spelling).
    pub system_attribute_names: Vec<String>,
    pub message_attribute_names: Vec<String>,
    /// FIFO queues: a retry with the same id gets the same messages and receipts.
    pub receive_request_attempt_id: Option<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DeleteMessageInput {
    pub target: QueueTarget,
    pub receipt_handle: String,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DeleteMessageBatchEntry {
    pub id: String,
    pub receipt_handle: String,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DeleteMessageBatchInput {
    pub target: QueueTarget,
    pub entries: Vec<DeleteMessageBatchEntry>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ChangeMessageVisibilityInput {
    pub target: QueueTarget,
    pub receipt_handle: String,
    pub visibility_timeout: i64,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ChangeMessageVisibilityBatchEntry {
    pub id: String,
    pub receipt_handle: String,
    pub visibility_timeout: Option<i64>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ChangeMessageVisibilityBatchInput {
    pub target: QueueTarget,
    pub entries: Vec<ChangeMessageVisibilityBatchEntry>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TagQueueInput {
    pub target: QueueTarget,
    pub tags: BTreeMap<String, String>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct UntagQueueInput {
    pub target: QueueTarget,
    pub tag_keys: Vec<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ListDeadLetterSourceQueuesInput {
    pub target: QueueTarget,
    pub max_results: Option<i64>,
    pub next_token: Option<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AddPermissionInput {
    pub target: QueueTarget,
    pub label: String,
    pub aws_account_ids: Vec<String>,
    pub actions: Vec<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RemovePermissionInput {
    pub target: QueueTarget,
    pub label: String,
}

// ----- outputs -----

/// What a successful action answers.
#[derive(Clone, Debug, PartialEq)]
pub enum Output {
    /// Actions without a result (DeleteQueue, SetQueueAttributes, DeleteMessage, …).
    Empty,
    /// CreateQueue and GetQueueUrl.
    QueueUrl(String),
    /// ListQueues and ListDeadLetterSourceQueues.
    QueueUrls {
        urls: Vec<String>,
        next_token: Option<String>,
    },
    /// GetQueueAttributes, in the order SQS lists them.
    QueueAttributes(Vec<(String, String)>),
    /// ListQueueTags.
    Tags(BTreeMap<String, String>),
    SendMessage(SentMessageResult),
    SendMessageBatch {
        successful: Vec<SentMessageResult>,
        failed: Vec<BatchFailure>,
    },
    ReceiveMessage(Vec<ReceivedMessage>),
    /// DeleteMessageBatch and ChangeMessageVisibilityBatch: the ids that succeeded and the failures.
    BatchIds {
        successful: Vec<String>,
        failed: Vec<BatchFailure>,
    },
    /// StartMessageMoveTask.
    TaskHandle(String),
    /// ListMessageMoveTasks, most recent first.
    MoveTasks(Vec<MoveTaskEntry>),
    /// CancelMessageMoveTask: `ApproximateNumberOfMessagesMoved`.
    MessagesMoved(u64),
}

/// One sent message (the `id` is the batch entry id; empty for SendMessage).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SentMessageResult {
    pub id: String,
    pub message_id: String,
    pub md5_of_message_body: String,
    pub md5_of_message_attributes: Option<String>,
    pub md5_of_message_system_attributes: Option<String>,
    /// FIFO queues only.
    pub sequence_number: Option<String>,
}

/// A batch entry that failed while the rest of the batch went ahead.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BatchFailure {
    pub id: String,
    pub sender_fault: bool,
    pub code: String,
    pub message: String,
}

impl BatchFailure {
    pub fn from_error(id: &str, error: &crate::error::SqsError) -> Self {
        Self {
            id: id.to_string(),
            sender_fault: error.code.fault() == "Sender",
            code: error.code.query_code().to_string(),
            message: error.message.clone(),
        }
    }
}

/// A delivered message as ReceiveMessage renders it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReceivedMessage {
    pub message_id: String,
    pub receipt_handle: String,
    pub md5_of_body: String,
    pub body: String,
    /// The requested system attributes (`SentTimestamp`, …), in request order.
    pub attributes: Vec<(String, String)>,
    /// The requested message attributes; their digest is over exactly these.
    pub message_attributes: Attributes,
    pub md5_of_message_attributes: Option<String>,
}

/// StartMessageMoveTask's parameters as sent: the ARNs are checked by the handler (an empty one is malformed,
/// an absent `SourceArn` missing).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StartMessageMoveTaskInput {
    pub source_arn: String,
    pub destination_arn: Option<String>,
    pub max_number_of_messages_per_second: Option<i64>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ListMessageMoveTasksInput {
    pub source_arn: String,
    pub max_results: Option<i64>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CancelMessageMoveTaskInput {
    pub task_handle: String,
}

/// One task as ListMessageMoveTasks renders it (botocore's `ListMessageMoveTasksResultEntry`); the optional
/// members are present only when they apply.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MoveTaskEntry {
    /// Only while the task is running.
    pub task_handle: Option<String>,
    pub status: &'static str,
    pub source_arn: String,
    pub destination_arn: Option<String>,
    pub max_number_of_messages_per_second: Option<u32>,
    pub approximate_number_of_messages_moved: u64,
    pub approximate_number_of_messages_to_move: u64,
    /// Only for a failed task.
    pub failure_reason: Option<&'static str>,
    /// Epoch milliseconds.
    pub started_timestamp: u64,
}
