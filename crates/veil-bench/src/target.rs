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

/// The conformance check every target's live test runs: ten messages sent, received and hidden, redelivered
/// after the 1 s visibility timeout, then deleted for good.
#[cfg(test)]
pub async fn check_round_trip_and_redelivery<T: Target>(target: T) {
    let queue = "unit-round-trip";
    target.prepare(queue, 1).await.expect("prepare");
    let bodies: Vec<Bytes> = (0..10).map(|i| Bytes::from(format!("m{i}"))).collect();
    target.send(queue, bodies).await.expect("send");

    let consumer = target.clone();
    let got = consumer.receive(queue, 10, 1, 1).await.expect("receive");
    assert_eq!(got.len(), 10);
    // Nothing else is visible until the visibility timeout passes; then all ten come back.
    assert!(consumer
        .receive(queue, 10, 1, 0)
        .await
        .expect("receive")
        .is_empty());
    let again = consumer.receive(queue, 10, 1, 3).await.expect("redelivery");
    assert_eq!(again.len(), 10);
    consumer
        .delete(queue, again.into_iter().map(|d| d.handle).collect())
        .await
        .expect("delete");
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    assert!(consumer
        .receive(queue, 10, 1, 0)
        .await
        .expect("receive")
        .is_empty());
}
