//! Which system a benchmark drives and through which client. The workload code is generic over
//! [`crate::target::Target`]; [`with_target!`] turns a runtime choice into a concrete target type with a
//! `match`, so each arm monomorphises the same generic runner.

use std::fmt;

use serde::{Deserialize, Serialize};

/// A system under test. Veil, moto and the no-op server all speak SQS JSON through
/// [`crate::targets::sqs::SqsTarget`]; Azure Queue Storage endpoints (Veil's front-end, Azurite) share
/// [`crate::targets::azure::AzureTarget`]; Redis streams, NATS JetStream, RabbitMQ, KubeMQ and the PostgreSQL
/// SKIP LOCKED queue have their own clients.
#[derive(
    Clone,
    Copy,
    Debug,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    Serialize,
    Deserialize,
    clap::ValueEnum,
)]
#[serde(rename_all = "lowercase")]
pub enum TargetKind {
    /// Veil over SQS JSON 1.0.
    Veil,
    /// moto_server over SQS JSON 1.0.
    Moto,
    /// Any other SQS JSON 1.0 endpoint.
    Sqs,
    /// veil-bench's no-op HTTP server (the loopback ceiling).
    Noop,
    /// Redis streams (XADD / XREADGROUP / XACK, XAUTOCLAIM as the visibility timeout).
    Redis,
    /// NATS JetStream (work-queue stream, explicit acks, AckWait as the visibility timeout).
    Nats,
    /// RabbitMQ over AMQP 0.9.1 (quorum queue, publisher confirms, manual acks with a prefetch).
    Rabbitmq,
    /// Any Azure Queue Storage endpoint, path style (Veil's Azure front-end by default).
    Azure,
    /// Azurite's queue service storing on disk (its default).
    Azurite,
    /// Azurite's queue service with `--inMemoryPersistence`.
    #[value(name = "azurite-inmemory")]
    #[serde(rename = "azurite-inmemory")]
    AzuriteInmemory,
    /// A KubeMQ queues endpoint over gRPC (Veil's KubeMQ front-end by default).
    Kubemq,
    /// A plain SQL queue in PostgreSQL (`FOR UPDATE SKIP LOCKED`), the raw database's ceiling.
    #[value(name = "pg-skip-locked")]
    #[serde(rename = "pg-skip-locked")]
    PgSkipLocked,
}

impl TargetKind {
    pub fn name(self) -> &'static str {
        match self {
            TargetKind::Veil => "veil",
            TargetKind::Moto => "moto",
            TargetKind::Sqs => "sqs",
            TargetKind::Noop => "noop",
            TargetKind::Redis => "redis",
            TargetKind::Nats => "nats",
            TargetKind::Rabbitmq => "rabbitmq",
            TargetKind::Azure => "azure",
            TargetKind::Azurite => "azurite",
            TargetKind::AzuriteInmemory => "azurite-inmemory",
            TargetKind::Kubemq => "kubemq",
            TargetKind::PgSkipLocked => "pg-skip-locked",
        }
    }

    pub fn parse(name: &str) -> Option<Self> {
        [
            Self::Veil,
            Self::Moto,
            Self::Sqs,
            Self::Noop,
            Self::Redis,
            Self::Nats,
            Self::Rabbitmq,
            Self::Azure,
            Self::Azurite,
            Self::AzuriteInmemory,
            Self::Kubemq,
            Self::PgSkipLocked,
        ]
        .into_iter()
        .find(|kind| kind.name() == name)
    }

    /// The endpoint `run` uses when none is given.
    pub fn default_endpoint(self) -> &'static str {
        match self {
            TargetKind::Veil | TargetKind::Sqs | TargetKind::Noop => "http://127.0.0.1:9324",
            TargetKind::Moto => "http://127.0.0.1:5000",
            TargetKind::Redis => "redis://127.0.0.1:6379",
            TargetKind::Nats => "nats://127.0.0.1:4222",
            TargetKind::Rabbitmq => "amqp://127.0.0.1:5672/%2f",
            TargetKind::Azure | TargetKind::Azurite | TargetKind::AzuriteInmemory => {
                "http://127.0.0.1:10001/devstoreaccount1"
            }
            TargetKind::Kubemq => "http://127.0.0.1:50000",
            TargetKind::PgSkipLocked => "postgres://postgres@127.0.0.1:5432/postgres",
        }
    }
}

impl fmt::Display for TargetKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// `with_target!(kind, endpoint, |target| body)`: connects the client for `kind` and evaluates `body` with
/// `target` bound to it (a different concrete type per arm). `body` must evaluate to
/// `Result<_, BenchError>`, and the macro must be used inside an async fn returning such a result.
#[macro_export]
macro_rules! with_target {
    ($kind:expr, $endpoint:expr, |$target:ident| $body:expr) => {{
        let kind: $crate::kind::TargetKind = $kind;
        let endpoint: &str = $endpoint;
        match kind {
            $crate::kind::TargetKind::Veil
            | $crate::kind::TargetKind::Moto
            | $crate::kind::TargetKind::Sqs
            | $crate::kind::TargetKind::Noop => {
                let $target = $crate::targets::sqs::SqsTarget::connect(endpoint)
                    .await?
                    .named(kind.name());
                $body
            }
            $crate::kind::TargetKind::Redis => {
                let $target = $crate::targets::redis::RedisTarget::connect(endpoint).await?;
                $body
            }
            $crate::kind::TargetKind::Nats => {
                let $target = $crate::targets::nats::NatsTarget::connect(endpoint).await?;
                $body
            }
            $crate::kind::TargetKind::Rabbitmq => {
                let $target = $crate::targets::rabbitmq::RabbitmqTarget::connect(endpoint).await?;
                $body
            }
            $crate::kind::TargetKind::Azure
            | $crate::kind::TargetKind::Azurite
            | $crate::kind::TargetKind::AzuriteInmemory => {
                let $target = $crate::targets::azure::AzureTarget::connect(endpoint)
                    .await?
                    .named(kind.name());
                $body
            }
            $crate::kind::TargetKind::Kubemq => {
                let $target = $crate::targets::kubemq::KubemqTarget::connect(endpoint).await?;
                $body
            }
            $crate::kind::TargetKind::PgSkipLocked => {
                let $target = $crate::targets::pg::PgTarget::connect(endpoint).await?;
                $body
            }
        }
    }};
}
