//! The systems under test, one module per wire protocol. Each implements [`crate::target::Target`].

pub mod sqs;
