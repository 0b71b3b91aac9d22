//! veil-bench's error type: every failure names what was being done, so a broken benchmark says why.

use std::path::PathBuf;

use crate::noop::NoopError;
use crate::server::ServerError;
use crate::target::TargetError;

#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    #[error(transparent)]
    Target(#[from] TargetError),
    #[error(transparent)]
    Server(#[from] ServerError),
    #[error(transparent)]
    Noop(#[from] NoopError),
    #[error("invalid workload: {0}")]
    Workload(String),
    #[error("{context}: {path}: {source}")]
    Io {
        context: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{context}: {path}: {source}")]
    Json {
        context: &'static str,
        path: PathBuf,
        source: serde_json::Error,
    },
    #[error("chart {path}: {message}")]
    Chart { path: PathBuf, message: String },
    #[error("{0}")]
    Usage(String),
    #[error("scenario {scenario} on {system}: {message}")]
    Scenario {
        scenario: &'static str,
        system: String,
        message: String,
    },
}

impl BenchError {
    pub fn io(
        context: &'static str,
        path: impl Into<PathBuf>,
    ) -> impl FnOnce(std::io::Error) -> Self {
        let path = path.into();
        move |source| BenchError::Io {
            context,
            path,
            source,
        }
    }
}
