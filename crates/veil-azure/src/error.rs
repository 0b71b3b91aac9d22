//! Azure Queue Storage errors as the wire shows them. An [`ErrorCode`] knows its status and its code string
//! (sent as `<Code>` in the XML body and in the `x-ms-error-code` header, which the SDKs read first); an
//! [`AzureError`] adds the message and the extra elements some codes carry (the query parameter name, value
//! and allowed range of OutOfRangeQueryParameterValue, the reason of an invalid value, the detail of an
//! authentication failure).

use std::fmt;

/// Every error code Veil answers with, spelled and numbered as Azure Queue Storage does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorCode {
    QueueNotFound,
    QueueAlreadyExists,
    MessageNotFound,
    InvalidQueryParameterValue,
    OutOfRangeQueryParameterValue,
    MissingRequiredQueryParameter,
    InvalidXmlDocument,
    InvalidXmlNodeValue,
    RequestBodyTooLarge,
    OutOfRangeInput,
    InvalidResourceName,
    InvalidMetadata,
    InvalidUri,
    InvalidHeaderValue,
    UnsupportedHttpVerb,
    NoAuthenticationInformation,
    InvalidAuthenticationInfo,
    AuthenticationFailed,
    AuthorizationPermissionMismatch,
    AuthorizationResourceTypeMismatch,
    AuthorizationServiceMismatch,
    AuthorizationProtocolMismatch,
    AuthorizationSourceIPMismatch,
    CorsPreflightFailure,
    ServerBusy,
    InternalError,
}

impl ErrorCode {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::QueueNotFound => "QueueNotFound",
            Self::QueueAlreadyExists => "QueueAlreadyExists",
            Self::MessageNotFound => "MessageNotFound",
            Self::InvalidQueryParameterValue => "InvalidQueryParameterValue",
            Self::OutOfRangeQueryParameterValue => "OutOfRangeQueryParameterValue",
            Self::MissingRequiredQueryParameter => "MissingRequiredQueryParameter",
            Self::InvalidXmlDocument => "InvalidXmlDocument",
            Self::InvalidXmlNodeValue => "InvalidXmlNodeValue",
            Self::RequestBodyTooLarge => "RequestBodyTooLarge",
            Self::OutOfRangeInput => "OutOfRangeInput",
            Self::InvalidResourceName => "InvalidResourceName",
            Self::InvalidMetadata => "InvalidMetadata",
            Self::InvalidUri => "InvalidUri",
            Self::InvalidHeaderValue => "InvalidHeaderValue",
            Self::UnsupportedHttpVerb => "UnsupportedHttpVerb",
            Self::NoAuthenticationInformation => "NoAuthenticationInformation",
            Self::InvalidAuthenticationInfo => "InvalidAuthenticationInfo",
            Self::AuthenticationFailed => "AuthenticationFailed",
            Self::AuthorizationPermissionMismatch => "AuthorizationPermissionMismatch",
            Self::AuthorizationResourceTypeMismatch => "AuthorizationResourceTypeMismatch",
            Self::AuthorizationServiceMismatch => "AuthorizationServiceMismatch",
            Self::AuthorizationProtocolMismatch => "AuthorizationProtocolMismatch",
            Self::AuthorizationSourceIPMismatch => "AuthorizationSourceIPMismatch",
            Self::CorsPreflightFailure => "CorsPreflightFailure",
            Self::ServerBusy => "ServerBusy",
            Self::InternalError => "InternalError",
        }
    }

    pub fn status(self) -> u16 {
        match self {
            Self::QueueNotFound | Self::MessageNotFound => 404,
            Self::QueueAlreadyExists => 409,
            Self::RequestBodyTooLarge => 413,
            Self::UnsupportedHttpVerb => 405,
            Self::NoAuthenticationInformation | Self::InvalidAuthenticationInfo => 401,
            Self::AuthenticationFailed
            | Self::AuthorizationPermissionMismatch
            | Self::AuthorizationResourceTypeMismatch
            | Self::AuthorizationServiceMismatch
            | Self::AuthorizationProtocolMismatch
            | Self::AuthorizationSourceIPMismatch
            | Self::CorsPreflightFailure => 403,
            Self::InternalError => 500,
            Self::ServerBusy => 503,
            _ => 400,
        }
    }

    /// Azure's standard wording for the code.
    pub fn default_message(self) -> &'static str {
        match self {
            Self::QueueNotFound => "The specified queue does not exist.",
            Self::QueueAlreadyExists => "The specified queue already exists.",
            Self::MessageNotFound => "The specified message does not exist.",
            Self::InvalidQueryParameterValue => {
                "Value for one of the query parameters specified in the request URI is invalid."
            }
            Self::OutOfRangeQueryParameterValue => {
                "One of the query parameters specified in the request URI is outside the permissible range."
            }
            Self::MissingRequiredQueryParameter => {
                "A query parameter that's mandatory for this request is not specified."
            }
            Self::InvalidXmlDocument => "XML specified is not syntactically valid.",
            Self::InvalidXmlNodeValue => "The value for one of the XML nodes is not in the correct format.",
            Self::RequestBodyTooLarge => {
                "The request body is too large and exceeds the maximum permissible limit."
            }
            Self::OutOfRangeInput => "One of the request inputs is out of range.",
            Self::InvalidResourceName => "The specifed resource name contains invalid characters.",
            Self::InvalidMetadata => {
                "The metadata specified is invalid. It has characters that are not permitted."
            }
            Self::InvalidUri => "The requested URI does not represent any resource on the server.",
            Self::InvalidHeaderValue => {
                "The value for one of the HTTP headers is not in the correct format."
            }
            Self::UnsupportedHttpVerb => "The resource doesn't support the specified HTTP verb.",
            Self::NoAuthenticationInformation => {
                "Server failed to authenticate the request. Please refer to the information in the www-authenticate header."
            }
            Self::InvalidAuthenticationInfo => {
                "Server failed to authenticate the request. Please refer to the information in the www-authenticate header."
            }
            Self::AuthenticationFailed => {
                "Server failed to authenticate the request. Make sure the value of Authorization header is formed correctly including the signature."
            }
            Self::AuthorizationPermissionMismatch => {
                "This request is not authorized to perform this operation using this permission."
            }
            Self::AuthorizationResourceTypeMismatch => {
                "This request is not authorized to perform this operation using this resource type."
            }
            Self::AuthorizationServiceMismatch => {
                "This request is not authorized to perform this operation using this service."
            }
            Self::AuthorizationProtocolMismatch => {
                "This request is not authorized to perform this operation using this protocol."
            }
            Self::AuthorizationSourceIPMismatch => {
                "This request is not authorized to perform this operation using this source IP {SourceIP}."
            }
            Self::CorsPreflightFailure => {
                "CORS not enabled or no matching rule found for this request."
            }
            Self::ServerBusy => {
                "The server is currently unable to receive requests. Please retry your request."
            }
            Self::InternalError => "The server encountered an internal error. Please retry the request.",
        }
    }
}

/// An error answer: the code, the message, and the extra elements of the `<Error>` body in order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AzureError {
    pub code: ErrorCode,
    pub message: String,
    pub details: Vec<(&'static str, String)>,
    /// Extra response headers (`WWW-Authenticate` of a refused bearer token).
    pub headers: Vec<(&'static str, String)>,
}

impl AzureError {
    pub fn new(code: ErrorCode) -> Self {
        Self {
            code,
            message: code.default_message().to_string(),
            details: Vec::new(),
            headers: Vec::new(),
        }
    }

    pub fn with_message(code: ErrorCode, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
            details: Vec::new(),
            headers: Vec::new(),
        }
    }

    pub fn detail(mut self, name: &'static str, value: impl fmt::Display) -> Self {
        self.details.push((name, value.to_string()));
        self
    }

    pub fn header(mut self, name: &'static str, value: impl Into<String>) -> Self {
        self.headers.push((name, value.into()));
        self
    }

    /// A query parameter that does not parse (InvalidQueryParameterValue with the parameter and a reason).
    pub fn invalid_query(name: &str, value: &str, reason: &str) -> Self {
        Self::new(ErrorCode::InvalidQueryParameterValue)
            .detail("QueryParameterName", name)
            .detail("QueryParameterValue", value)
            .detail("Reason", reason)
    }

    /// A query parameter outside its range, with the four detail fields Azure sends.
    pub fn out_of_range(
        name: &str,
        value: impl fmt::Display,
        min: impl fmt::Display,
        max: impl fmt::Display,
    ) -> Self {
        Self::new(ErrorCode::OutOfRangeQueryParameterValue)
            .detail("QueryParameterName", name)
            .detail("QueryParameterValue", value)
            .detail("MinimumAllowed", min)
            .detail("MaximumAllowed", max)
    }

    pub fn missing_query(name: &str) -> Self {
        Self::new(ErrorCode::MissingRequiredQueryParameter).detail("QueryParameterName", name)
    }

    /// 403 AuthenticationFailed with Azure's `AuthenticationErrorDetail`.
    pub fn authentication(detail: impl fmt::Display) -> Self {
        Self::new(ErrorCode::AuthenticationFailed).detail("AuthenticationErrorDetail", detail)
    }

    /// Azure's internal error. `detail` goes to the log only: a 5xx never carries a store's or a database's
    /// words to the client (docs/security.md "Errors that say nothing inside").
    pub fn internal(detail: impl fmt::Display) -> Self {
        tracing::error!(%detail, "azure request failed with an internal error");
        Self::new(ErrorCode::InternalError)
    }
}

impl fmt::Display for AzureError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.code.as_str(), self.message)
    }
}

impl std::error::Error for AzureError {}

pub type AzureResult<T> = Result<T, AzureError>;
