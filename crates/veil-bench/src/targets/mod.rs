//! The systems under test, one module per wire protocol. Each implements [`crate::target::Target`].

pub mod nats;
pub mod redis;
pub mod sqs;
