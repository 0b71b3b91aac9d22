//! veil-azure: the Azure Queue Storage REST API over Veil's engine, so that the official SDKs and the az CLI
//! work unchanged against `http://127.0.0.1:10001/<account>` (path style).
//!
//! Two layers, as in veil-sqs. [`codec`] is pure: it turns HTTP request parts into a typed
//! [`api::Operation`], verifies Shared Key and SAS signatures ([`auth`]), and encodes typed outputs and
//! [`error::AzureError`]s into status, headers and XML. [`service`] is thin: one axum handler that
//! authenticates, resolves the account's namespace (SPEC §7), calls the [`veil_core::Engine`] — the only
//! place that decides visibility — and encodes.

pub mod api;
pub mod auth;
pub mod codec;
pub mod error;
pub mod limits;
pub mod pop_receipt;
pub mod service;
pub mod time;

pub use error::{AzureError, ErrorCode};
pub use service::{router, AzureAccount, AzureConfig, PoisonDefault};
