//! The store's writer lanes: `writers` connections, each a group-committing writer of its own, so that the
//! database works on several transactions at once instead of one backend carrying every write (one writer's
//! backend held nearly all of PostgreSQL's CPU; docs/benchmarks.md "Set-based PostgreSQL store").
//!
//! A submission whose operations all touch queues of one lane goes to that lane (a queue's lane is its id
//! modulo the lane count), so one queue's operations stay in submission order. Anything else — an operation on
//! no queue or on queues of two lanes (creating or deleting a queue, a move, a move task, the next queue id),
//! an empty submission, a load, a count, a close — is a **barrier**: the dispatcher waits until every lane has
//! finished what it was given, runs the barrier on the first lane, waits for it, and only then hands out what
//! came after. So whatever a crash leaves behind, each queue holds a prefix of its own operations and every
//! barrier either committed after all that came before it or not at all: the same cuts one writer allowed.
//!
//! A lane's failure fails the store (every lane refuses later groups, `Failure` is shared): the engine's
//! memory may then be ahead of the database, and only a reload is safe.

use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;
use veil_core::StoreOp;

use super::io::Job;

/// The lane every operation of `ops` belongs to, or `None` when the submission is a barrier.
pub fn lane_of(ops: &[StoreOp], lanes: usize) -> Option<usize> {
    let mut lane = None;
    for op in ops {
        let this = usize::try_from(queue_of(op)? % lanes as u64).ok()?;
        match lane {
            None => lane = Some(this),
            Some(seen) if seen == this => {}
            Some(_) => return None,
        }
    }
    lane
}

/// The queue an operation touches alone, or `None` for operations that span queues or touch none.
fn queue_of(op: &StoreOp) -> Option<u64> {
    match op {
        StoreOp::PutMessage(put) => Some(put.queue),
        StoreOp::PutCounters { queue, .. }
        | StoreOp::PutState { queue, .. }
        | StoreOp::DeleteMessage { queue, .. }
        | StoreOp::ReplaceBody { queue, .. }
        | StoreOp::PutDedup { queue, .. }
        | StoreOp::DeleteDedup { queue, .. }
        | StoreOp::PutHistory { queue, .. } => Some(*queue),
        // The inbox row it writes or deletes is no other queue's concern.
        StoreOp::SendToInbox(sent) => Some(sent.from.0),
        StoreOp::AcceptInbound(accepted) => Some(accepted.to.0),
        StoreOp::PutQueue(_)
        | StoreOp::DeleteQueue(_)
        | StoreOp::PurgeQueue(_)
        | StoreOp::MoveMessage { .. }
        | StoreOp::PutNextQueueId(_)
        | StoreOp::PutMoveTask(_)
        | StoreOp::DeleteMoveTask { .. }
        | StoreOp::ForwardInbound { .. } => None,
    }
}

/// Hands the store's jobs to the lanes in an order that keeps every barrier's promise, until the store closes
/// or is dropped; then waits for every lane to finish.
pub async fn dispatch(
    mut jobs: mpsc::UnboundedReceiver<Job>,
    lanes: Vec<mpsc::UnboundedSender<Job>>,
    running: Vec<JoinHandle<()>>,
) {
    while let Some(job) = jobs.recv().await {
        let lane = match &job {
            _ if lanes.len() == 1 => Some(0),
            Job::Ops { ops, .. } if !ops.is_empty() => lane_of(ops, lanes.len()),
            _ => None,
        };
        if let Some(lane) = lane {
            let closing = matches!(job, Job::Close { .. });
            let _lane_gone = lanes[lane].send(job);
            if closing {
                break;
            }
            continue;
        }
        flush(&lanes).await;
        if let Job::Close { done } = job {
            for lane in &lanes {
                let _lane_gone = lane.send(Job::Close { done: done.clone() });
            }
            break;
        }
        let _lane_gone = lanes[0].send(job);
        flush(&lanes[..1]).await;
    }
    drop(lanes);
    for lane in running {
        if lane.await.is_err() {
            tracing::error!("a PostgreSQL store writer panicked");
        }
    }
}

/// Returns once every lane has finished every job it was given before.
async fn flush(lanes: &[mpsc::UnboundedSender<Job>]) {
    let mut waits = Vec::with_capacity(lanes.len());
    for lane in lanes {
        let (done, finished) = oneshot::channel();
        if lane.send(Job::Flush { done }).is_ok() {
            waits.push(finished);
        }
    }
    for finished in waits {
        let _lane_gone = finished.await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn delete(queue: u64) -> StoreOp {
        StoreOp::DeleteMessage { queue, seq: 1 }
    }

    #[test]
    fn a_submission_on_one_queue_goes_to_that_queues_lane() {
        assert_eq!(lane_of(&[delete(7), delete(7)], 4), Some(3));
        assert_eq!(lane_of(&[delete(7)], 1), Some(0));
    }

    #[test]
    fn queues_of_one_lane_share_it_and_of_two_lanes_are_a_barrier() {
        assert_eq!(lane_of(&[delete(1), delete(5)], 4), Some(1));
        assert_eq!(lane_of(&[delete(1), delete(2)], 4), None);
    }

    #[test]
    fn operations_on_no_single_queue_are_barriers() {
        assert_eq!(lane_of(&[delete(1), StoreOp::PutNextQueueId(9)], 4), None);
        assert_eq!(lane_of(&[StoreOp::PurgeQueue(1)], 4), None);
        assert_eq!(lane_of(&[StoreOp::DeleteQueue(1)], 4), None);
    }
}
