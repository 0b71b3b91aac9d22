//! The systems under test, one module per wire protocol. Each implements [`crate::target::Target`].

pub mod azure;
pub mod kubemq;
pub mod nats;
pub mod pg;
pub mod rabbitmq;
pub mod redis;
pub mod sigv4;
pub mod sqs;
