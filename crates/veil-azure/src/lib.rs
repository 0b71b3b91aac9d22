//! veil-azure: the Azure Queue Storage REST API over Veil's engine, so that the official SDKs and the az CLI
//! work unchanged against `http://127.0.0.1:10001/<account>` (path style).
//!
//! Two layers, as in veil-sqs. [`codec`] is pure: it names a request's operation from its method and path
//! ([`codec::route`]), reads its parameters into a typed [`api::Operation`], and encodes typed outputs and
//! [`error::AzureError`]s into status, headers and XML; [`auth`] (pure too) verifies Shared Key, Shared Key
//! Lite and SAS. [`service`] is thin: one axum handler that authenticates before any parameter is read,
//! resolves the account's namespace (docs/semantics.md §7), calls the [`veil_core::Engine`] — the only place that decides
//! visibility — and encodes, adding the CORS headers of the account's rules.

pub mod api;
pub mod auth;
pub mod codec;
pub mod delegation;
pub mod entra;
pub mod error;
pub mod limits;
pub mod pop_receipt;
pub mod service;
pub mod settings;
pub mod time;

pub use error::{AzureError, ErrorCode};
pub use service::{counted_throttled, router, throttled, AzureAccount, AzureConfig, PoisonDefault};
