//! veil-sqs: the Amazon SQS wire protocol over Veil's engine, so that boto3, the aws CLI and the other SDKs
//! work unchanged. Both of SQS's protocols are spoken: AWS JSON 1.0 (`X-Amz-Target`) and Query (forms + XML).
//!
//! The crate has two layers. [`codec`] is pure: it turns HTTP request parts into a typed [`api::SqsRequest`]
//! and typed outputs or [`error::SqsError`]s back into status, headers and body. [`service`] is thin: one
//! axum handler that decodes, resolves the namespace ([`namespace`]), calls the [`veil_core::Engine`] — the only
//! place that decides visibility — and encodes.

pub mod api;
pub mod attributes;
pub mod codec;
pub mod digest_hex;
pub mod error;
pub mod fifo;
pub mod limits;
pub mod md5;
pub mod namespace;
pub mod policy;
pub mod sender_id;
pub mod service;
pub mod settings;
pub mod sigv4;
pub mod validate;

pub use error::{ErrorCode, SqsError};

pub use service::{
    counted_throttled, router, unavailable, CredentialError, SqsAuth, SqsConfig, SqsCredential,
};
