//! The wake-up scenario: how soon a consumer parked in a long poll on an empty queue gets
//! a message that was just sent. Driven by hand, one message at a time, because the figure needs the send's
//! response time and the receipt time of that one message, with nothing else in the queue.

use std::collections::BTreeMap;
use std::time::Duration;

use tokio::sync::mpsc;

use super::{insert_percentiles, run_queue};
use crate::error::BenchError;
use crate::results::ScenarioRun;
use crate::run::body::{encode_body, new_run_id, BodyId};
use crate::stats::{now_us, Latency};
use crate::target::Target;

/// Scenario 5, Wake-up: a consumer long-polls an empty queue; a producer sends one message once the consumer has been
/// parked for 20 ms; the figure is the time from the send's response to the consumer's receipt (negative
/// when the receipt comes first, which counts as 0 and is reported separately).
pub(super) async fn wake_up<T: Target>(
    target: &T,
    rounds: usize,
) -> Result<ScenarioRun, BenchError> {
    let queue = run_queue("wake");
    target.prepare(&queue, 30).await?;
    let (arrived_tx, mut arrived_rx) = mpsc::channel::<Result<u64, String>>(1);
    let (poll_tx, mut poll_rx) = mpsc::channel::<()>(1);
    let consumer = {
        let target = target.clone();
        let queue = queue.clone();
        tokio::spawn(async move {
            for _ in 0..rounds {
                loop {
                    let _ = poll_tx.send(()).await;
                    match target.receive(&queue, 1, 30, 20).await {
                        Ok(deliveries) if deliveries.is_empty() => continue,
                        Ok(deliveries) => {
                            let at = now_us();
                            let _ = arrived_tx.send(Ok(at)).await;
                            let handles = deliveries.into_iter().map(|d| d.handle).collect();
                            let _ = target.delete(&queue, handles).await;
                            break;
                        }
                        Err(error) => {
                            let _ = arrived_tx.send(Err(error.to_string())).await;
                            return;
                        }
                    }
                }
            }
        })
    };
    let mut wake = Latency::new();
    let mut early = 0u64;
    let run_id = new_run_id();
    let mut failure = None;
    for seq in 0..rounds {
        // The consumer is about to poll; give it time to park on the empty queue.
        if poll_rx.recv().await.is_none() {
            failure = Some("the consumer stopped".to_owned());
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
        let body = encode_body(
            BodyId {
                run: run_id,
                producer: 0,
                seq: seq as u64,
                sent_us: now_us(),
            },
            128,
        );
        target.send(&queue, vec![body]).await?;
        let acked_us = now_us();
        match tokio::time::timeout(Duration::from_secs(25), arrived_rx.recv()).await {
            Ok(Some(Ok(arrived_us))) => {
                if arrived_us < acked_us {
                    early += 1;
                }
                wake.record_us(arrived_us.saturating_sub(acked_us));
            }
            Ok(Some(Err(error))) => {
                failure = Some(error);
                break;
            }
            Ok(None) | Err(_) => {
                failure = Some(format!("message {seq} was not received within 25 s"));
                break;
            }
        }
    }
    consumer.abort();
    let p = wake.percentiles();
    println!(
        "== {} · wake-up over {rounds} rounds: {}  (receipt before the send's response: {early})",
        target.name(),
        p.line()
    );
    let mut metrics = BTreeMap::new();
    insert_percentiles(&mut metrics, "wake", &p);
    metrics.insert("rounds".into(), p.count as f64);
    metrics.insert("before_ack".into(), early as f64);
    Ok(ScenarioRun {
        ok: failure.is_none(),
        error: failure,
        metrics,
        cdf_us: wake.cdf(),
        detail: serde_json::json!({ "wake_us": p }),
    })
}
