//! What a benchmark drives: a queue with send, receive (with a visibility timeout) and delete. Each system
//! under test (Veil over SQS JSON, moto, Redis streams, NATS JetStream, and later Azure Queue and KubeMQ)
//! implements [`Target`], so every scenario runs the same workload shape against each of them.

use std::future::Future;

use bytes::Bytes;

/// One delivered message: its body (which carries the send time for end-to-end latency) and the handle that
/// settles it (an SQS receipt handle, a Redis stream id, a NATS ack subject).
#[derive(Clone, Debug)]
pub struct Delivery {
    pub body: Bytes,
    pub handle: String,
}

#[derive(Debug, thiserror::Error)]
pub enum TargetError {
    #[error("{target}: {message}")]
    Failed {
        target: &'static str,
        message: String,
    },
}

pub type TargetResult<T> = Result<T, TargetError>;

/// A queue service under test. Implementations are cheap to clone (connection pools inside) so that each
/// producer and consumer task holds its own handle.
pub trait Target: Clone + Send + Sync + 'static {
    /// A short name for reports ("veil", "moto", "redis", "nats").
    fn name(&self) -> &'static str;
    /// Creates (or empties) the queue the run uses.
    fn prepare(
        &self,
        queue: &str,
        visibility_s: u32,
    ) -> impl Future<Output = TargetResult<()>> + Send;
    /// Sends 1..=10 messages in one request (a batch when more than one).
    fn send(
        &self,
        queue: &str,
        bodies: Vec<Bytes>,
    ) -> impl Future<Output = TargetResult<()>> + Send;
    /// Receives up to `max` messages, hiding them for `visibility_s`, waiting up to `wait_s` for the first.
    fn receive(
        &self,
        queue: &str,
        max: usize,
        visibility_s: u32,
        wait_s: u32,
    ) -> impl Future<Output = TargetResult<Vec<Delivery>>> + Send;
    /// Settles delivered messages (one request for the batch where the protocol allows).
    fn delete(
        &self,
        queue: &str,
        handles: Vec<String>,
    ) -> impl Future<Output = TargetResult<()>> + Send;
}
