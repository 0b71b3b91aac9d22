//! SQS errors as the wire shows them. One [`ErrorCode`] names each error SQS can answer with and knows its three
//! spellings: the Query protocol code (`<Code>` and the `x-amzn-query-error` header), the JSON protocol shape
//! (`__type`, which botocore maps to its modeled exception classes), and the HTTP status. [`SqsError`] pairs a
//! code with the human message, worded like AWS's where clients or users are known to read it.

use std::fmt;

use crate::api::Protocol;

/// AWS's words for a throttled request (the `RequestThrottled` shape's documentation).
pub const REQUEST_THROTTLED: &str = "The request was denied due to request throttling.";

/// AWS's words for a queue that does not exist, per protocol (see [`SqsError::message_in`]).
pub const QUEUE_DOES_NOT_EXIST_JSON: &str = "The specified queue does not exist.";
pub const QUEUE_DOES_NOT_EXIST_QUERY: &str =
    "The specified queue does not exist for this wsdl version.";

/// Every error code Veil answers with. The modeled ones come from botocore's `sqs/2012-11-05/service-2.json`;
/// the Query codes are those of the former Query model (`awsQueryError`), which SDKs still read from the
/// `x-amzn-query-error` header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorCode {
    InvalidParameterValue,
    MissingParameter,
    /// Query protocol: an `Action` Veil does not know.
    InvalidAction,
    /// JSON protocol: an `X-Amz-Target` Veil does not know.
    UnknownOperation,
    /// JSON protocol: a body that is not a JSON object of the right types.
    Serialization,
    QueueDoesNotExist,
    QueueNameExists,
    InvalidAddress,
    ReceiptHandleIsInvalid,
    OverLimit,
    PurgeQueueInProgress,
    TooManyEntriesInBatchRequest,
    BatchEntryIdsNotDistinct,
    EmptyBatchRequest,
    InvalidBatchEntryId,
    BatchRequestTooLong,
    InvalidAttributeName,
    InvalidAttributeValue,
    InvalidMessageContents,
    UnsupportedOperation,
    InternalError,
    /// A message move task, or a queue one names by ARN, that does not exist (HTTP 404).
    ResourceNotFound,
    /// A connection over its request-rate limit (docs/security.md "Limits against abuse"). botocore's model
    /// has the shape without a Query override, so the Query code is the shape name; botocore retries it as
    /// a throttling error.
    RequestThrottled,
    /// SigV4 (docs/security.md, "SQS"): an access key Veil does not know, or a session token that is not
    /// the credential's (403).
    InvalidClientTokenId,
    /// A signature that does not match, a scope for another service, or a date more than 15 minutes off (403).
    SignatureDoesNotMatch,
    /// An `Authorization` header or presigned query that cannot be read (400).
    IncompleteSignature,
    /// No signature at all (403).
    MissingAuthenticationToken,
    /// A presigned URL past its `X-Amz-Expires` (400).
    RequestExpired,
    /// A caller without the permission, and no queue policy that allows it (403).
    AccessDenied,
    /// The store cannot be reached (a cluster's database down or failing over, docs/cluster.md): AWS's common
    /// error for "a temporary failure of the server" (503). SDKs retry it.
    ServiceUnavailable,
}

impl ErrorCode {
    /// The code of the Query protocol, also sent as `x-amzn-query-error: <code>;Sender` with JSON.
    pub fn query_code(self) -> &'static str {
        match self {
            Self::InvalidParameterValue => "InvalidParameterValue",
            Self::MissingParameter => "MissingParameter",
            Self::InvalidAction | Self::UnknownOperation => "InvalidAction",
            Self::Serialization => "SerializationException",
            Self::QueueDoesNotExist => "AWS.SimpleQueueService.NonExistentQueue",
            Self::QueueNameExists => "QueueAlreadyExists",
            Self::InvalidAddress => "InvalidAddress",
            Self::ReceiptHandleIsInvalid => "ReceiptHandleIsInvalid",
            Self::OverLimit => "OverLimit",
            Self::PurgeQueueInProgress => "AWS.SimpleQueueService.PurgeQueueInProgress",
            Self::TooManyEntriesInBatchRequest => {
                "AWS.SimpleQueueService.TooManyEntriesInBatchRequest"
            }
            Self::BatchEntryIdsNotDistinct => "AWS.SimpleQueueService.BatchEntryIdsNotDistinct",
            Self::EmptyBatchRequest => "AWS.SimpleQueueService.EmptyBatchRequest",
            Self::InvalidBatchEntryId => "AWS.SimpleQueueService.InvalidBatchEntryId",
            Self::BatchRequestTooLong => "AWS.SimpleQueueService.BatchRequestTooLong",
            Self::InvalidAttributeName => "InvalidAttributeName",
            Self::InvalidAttributeValue => "InvalidAttributeValue",
            Self::InvalidMessageContents => "InvalidMessageContents",
            Self::UnsupportedOperation => "AWS.SimpleQueueService.UnsupportedOperation",
            Self::InternalError => "InternalError",
            Self::ResourceNotFound => "ResourceNotFoundException",
            Self::RequestThrottled => "RequestThrottled",
            Self::InvalidClientTokenId => "InvalidClientTokenId",
            Self::SignatureDoesNotMatch => "SignatureDoesNotMatch",
            Self::IncompleteSignature => "IncompleteSignature",
            Self::MissingAuthenticationToken => "MissingAuthenticationToken",
            Self::RequestExpired => "RequestExpired",
            Self::ServiceUnavailable => "ServiceUnavailable",
            Self::AccessDenied => "AccessDenied",
        }
    }

    /// The full `__type` of the JSON protocol. Modeled errors use botocore's shape name under
    /// `com.amazonaws.sqs#`; protocol-level errors use the service framework's names, as AWS does.
    pub fn json_type(self) -> &'static str {
        match self {
            Self::InvalidParameterValue => "com.amazonaws.sqs#InvalidParameterValueException",
            Self::MissingParameter => "com.amazonaws.sqs#MissingRequiredParameterException",
            Self::InvalidAction | Self::UnknownOperation => {
                "com.amazon.coral.service#UnknownOperationException"
            }
            Self::Serialization => "com.amazon.coral.service#SerializationException",
            Self::QueueDoesNotExist => "com.amazonaws.sqs#QueueDoesNotExist",
            Self::QueueNameExists => "com.amazonaws.sqs#QueueNameExists",
            Self::InvalidAddress => "com.amazonaws.sqs#InvalidAddress",
            Self::ReceiptHandleIsInvalid => "com.amazonaws.sqs#ReceiptHandleIsInvalid",
            Self::OverLimit => "com.amazonaws.sqs#OverLimit",
            Self::PurgeQueueInProgress => "com.amazonaws.sqs#PurgeQueueInProgress",
            Self::TooManyEntriesInBatchRequest => "com.amazonaws.sqs#TooManyEntriesInBatchRequest",
            Self::BatchEntryIdsNotDistinct => "com.amazonaws.sqs#BatchEntryIdsNotDistinct",
            Self::EmptyBatchRequest => "com.amazonaws.sqs#EmptyBatchRequest",
            Self::InvalidBatchEntryId => "com.amazonaws.sqs#InvalidBatchEntryId",
            Self::BatchRequestTooLong => "com.amazonaws.sqs#BatchRequestTooLong",
            Self::InvalidAttributeName => "com.amazonaws.sqs#InvalidAttributeName",
            Self::InvalidAttributeValue => "com.amazonaws.sqs#InvalidAttributeValue",
            Self::InvalidMessageContents => "com.amazonaws.sqs#InvalidMessageContents",
            Self::UnsupportedOperation => "com.amazonaws.sqs#UnsupportedOperation",
            Self::InternalError => "com.amazonaws.sqs#InternalError",
            Self::ResourceNotFound => "com.amazonaws.sqs#ResourceNotFoundException",
            Self::RequestThrottled => "com.amazonaws.sqs#RequestThrottled",
            // Authentication and authorization are the service framework's, not SQS's model's: their
            // `__type`s are coral's, and SDKs take SQS's code from the `x-amzn-query-error` header.
            Self::InvalidClientTokenId => "com.amazon.coral.service#UnrecognizedClientException",
            Self::SignatureDoesNotMatch => "com.amazon.coral.service#InvalidSignatureException",
            Self::IncompleteSignature => "com.amazon.coral.service#IncompleteSignatureException",
            Self::MissingAuthenticationToken => {
                "com.amazon.coral.service#MissingAuthenticationTokenException"
            }
            Self::RequestExpired => "com.amazon.coral.service#RequestExpired",
            Self::AccessDenied => "com.amazon.coral.service#AccessDeniedException",
            Self::ServiceUnavailable => "com.amazon.coral.service#ServiceUnavailableException",
        }
    }

    /// The AWS error code as modern SDKs name it: the shape name of [`ErrorCode::json_type`] without its
    /// namespace (`QueueDoesNotExist`, `InvalidParameterValueException`). The `code` label of Veil's request
    /// metrics, the same for both wire protocols.
    pub fn aws_code(self) -> &'static str {
        let json_type = self.json_type();
        json_type.rsplit('#').next().unwrap_or(json_type)
    }

    /// Whether the JSON protocol sends the `x-amzn-query-error` header: only for errors that have a Query
    /// code (the framework's serialization and unknown-operation errors have none).
    pub fn has_query_code(self) -> bool {
        !matches!(self, Self::UnknownOperation | Self::Serialization)
    }

    /// HTTP status: SQS answers 400 for client errors (QueueDoesNotExist included), 403 for the limits
    /// OverLimit and PurgeQueueInProgress (as the SQS API reference and recordings of AWS show) and for a
    /// refused credential, signature or permission (AWS's common errors; IncompleteSignature and
    /// RequestExpired are 400 there), 404 for a
    /// move task's missing resource (recorded from AWS in LocalStack's `test_sqs_move_task` snapshots), and
    /// 500 for its own.
    pub fn status(self) -> u16 {
        match self {
            Self::InternalError => 500,
            Self::ServiceUnavailable => 503,
            Self::OverLimit
            | Self::PurgeQueueInProgress
            | Self::InvalidClientTokenId
            | Self::SignatureDoesNotMatch
            | Self::MissingAuthenticationToken
            | Self::AccessDenied => 403,
            Self::ResourceNotFound => 404,
            _ => 400,
        }
    }

    /// `Sender` for the client's fault, `Receiver` for the server's (the `<Type>` and the header suffix).
    pub fn fault(self) -> &'static str {
        match self {
            Self::InternalError | Self::ServiceUnavailable => "Receiver",
            _ => "Sender",
        }
    }
}

/// An error answer: which error and the message shown to the user.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SqsError {
    pub code: ErrorCode,
    pub message: String,
}

impl SqsError {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
        }
    }

    /// AWS's wording for a parameter outside its range or format.
    pub fn invalid_value(parameter: &str, value: impl fmt::Display, reason: &str) -> Self {
        Self::new(
            ErrorCode::InvalidParameterValue,
            format!("Value {value} for parameter {parameter} is invalid. Reason: {reason}"),
        )
    }

    /// An InvalidParameterValue error worded entirely by the caller.
    pub fn invalid_parameter_value(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::InvalidParameterValue, message)
    }

    /// A generic "one or more parameters are invalid" error with a reason.
    pub fn invalid_parameters(reason: impl fmt::Display) -> Self {
        Self::new(
            ErrorCode::InvalidParameterValue,
            format!("One or more parameters are invalid. Reason: {reason}"),
        )
    }

    pub fn missing(parameter: &str) -> Self {
        Self::new(
            ErrorCode::MissingParameter,
            format!("The request must contain the parameter {parameter}."),
        )
    }

    /// A queue that does not exist, in the JSON protocol's words; the Query protocol words it differently
    /// ([`SqsError::message_in`]).
    pub fn queue_does_not_exist() -> Self {
        Self::new(ErrorCode::QueueDoesNotExist, QUEUE_DOES_NOT_EXIST_JSON)
    }

    /// The message as the given protocol shows it. SQS words one error differently per protocol: a missing
    /// queue is "…does not exist for this wsdl version." in Query answers (recorded from AWS in LocalStack's
    /// `test_non_existent_queue` snapshot) and "…does not exist." in JSON ones.
    pub fn message_in(&self, protocol: Protocol) -> &str {
        match (self.code, protocol) {
            (ErrorCode::QueueDoesNotExist, Protocol::Query) => QUEUE_DOES_NOT_EXIST_QUERY,
            _ => &self.message,
        }
    }

    pub fn receipt_handle_invalid(handle: &str) -> Self {
        Self::new(
            ErrorCode::ReceiptHandleIsInvalid,
            format!("The input receipt handle \"{handle}\" is not a valid receipt handle."),
        )
    }

    /// ChangeMessageVisibility past 12 h after the receive (AWS's text, full stop included, as recorded by
    /// SDK users).
    pub fn visibility_past_limit(seconds: impl fmt::Display, max_seconds: u64) -> Self {
        Self::invalid_value(
            "VisibilityTimeout",
            seconds,
            &format!(
                "Total VisibilityTimeout for the message is beyond the limit [{max_seconds} seconds]."
            ),
        )
    }

    pub fn unknown_attribute(name: &str) -> Self {
        Self::new(
            ErrorCode::InvalidAttributeName,
            format!("Unknown Attribute {name}."),
        )
    }

    /// A queue attribute whose value SQS refuses: AWS names the attribute and gives no reason
    /// (`{"__type":"com.amazonaws.sqs#InvalidAttributeValue","message":"Invalid value for the parameter
    /// Policy."}`, recorded in terraform-provider-aws PR 42209), for ranges as for malformed values.
    pub fn invalid_attribute_value(name: &str) -> Self {
        Self::new(
            ErrorCode::InvalidAttributeValue,
            format!("Invalid value for the parameter {name}."),
        )
    }

    /// AWS's words for a temporary failure of the server (its common error `ServiceUnavailable`).
    pub fn unavailable() -> Self {
        Self::new(
            ErrorCode::ServiceUnavailable,
            "The request has failed due to a temporary failure of the server.",
        )
    }

    /// AWS's internal error. `detail` goes to the log only: a 5xx never carries a store's or a database's
    /// words to the client (docs/security.md "Errors that say nothing inside").
    pub fn internal(detail: impl fmt::Display) -> Self {
        tracing::error!(%detail, "sqs request failed with an internal error");
        Self::new(
            ErrorCode::InternalError,
            "We encountered an internal error. Please try again.",
        )
    }
}

impl fmt::Display for SqsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.code.query_code(), self.message)
    }
}

impl std::error::Error for SqsError {}

pub type SqsResult<T> = Result<T, SqsError>;

/// The code and text a refused input gets: what the client sees, so that is what the tests check.
#[cfg(test)]
pub(crate) fn refusal<T: fmt::Debug>(result: SqsResult<T>) -> (ErrorCode, String) {
    let error = result.unwrap_err();
    (error.code, error.message)
}
