//! Settling a held message by its receipt: delete, change of visibility, and Azure's update (docs/semantics.md
//! §2 for which receipts each protocol honours).

use super::send::body_bytes;
use super::Engine;
use crate::clock::Millis;
use crate::error::{EngineError, EngineResult};
use crate::index::QueueIndex;
use crate::limits;
use crate::model::*;
use crate::receipt::Receipt;
use crate::store::StoreOp;

impl Engine {
    /// The receipt of a message's send (generation 0): current until the message's first receive, so a
    /// protocol whose put returns a receipt (Azure) can update or delete the message with it. Issued on request
    /// because most sends never need one.
    pub fn receipt_of_send(&self, sent: &SentMessage) -> String {
        self.receipts.of_send(sent)
    }

    pub(super) fn decode_receipt(&self, queue: QueueId, receipt: &str) -> EngineResult<Receipt> {
        match self.receipts.decode(receipt) {
            Some(decoded) if decoded.queue == queue => Ok(decoded),
            Some(_) => Err(EngineError::ReceiptOfAnotherQueue),
            None => Err(EngineError::ReceiptInvalid),
        }
    }

    /// Settles a message.
    pub async fn delete(
        &self,
        key: &QueueKey,
        receipt: &str,
        rule: ReceiptRule,
    ) -> EngineResult<DeleteOutcome> {
        let mut outcomes = self.delete_batch(key, &[receipt], rule).await?;
        outcomes.pop().expect("one outcome per receipt")
    }

    /// Settles several messages of one queue with one commit. The outer error is the queue's (or the
    /// store's); each receipt has its own outcome.
    pub async fn delete_batch(
        &self,
        key: &QueueKey,
        receipts: &[&str],
        rule: ReceiptRule,
    ) -> EngineResult<Vec<EngineResult<DeleteOutcome>>> {
        let now = self.clock.now();
        let (outcomes, commit) = self.on_queue(key, now, |locked| {
            let (index, ops) = locked.parts();
            let before = index.counters;
            let outcomes: Vec<_> = receipts
                .iter()
                .map(|receipt| self.delete_locked(index, receipt, rule, now, ops))
                .collect();
            index.persist_counters_since(before, ops);
            outcomes
        })?;
        Self::durable(commit).await?;
        Ok(outcomes)
    }

    fn delete_locked(
        &self,
        index: &mut QueueIndex,
        receipt: &str,
        rule: ReceiptRule,
        now: Millis,
        ops: &mut Vec<StoreOp>,
    ) -> EngineResult<DeleteOutcome> {
        let receipt = self.decode_receipt(index.id(), receipt)?;
        let Some(current) = index.get(receipt.seq) else {
            return match rule {
                ReceiptRule::AnyIssued | ReceiptRule::Unexpired => Ok(DeleteOutcome::AlreadyGone),
                ReceiptRule::Current => Err(EngineError::MessageNotAvailable),
            };
        };
        if receipt.generation > current.generation {
            return Err(EngineError::ReceiptInvalid);
        }
        let superseded = receipt.generation != current.generation;
        match rule {
            ReceiptRule::AnyIssued => {}
            ReceiptRule::Current if superseded => return Err(EngineError::MessageNotAvailable),
            ReceiptRule::Current => {}
            ReceiptRule::Unexpired if superseded || current.visible_at <= now => {
                return Err(EngineError::ReceiptExpired)
            }
            ReceiptRule::Unexpired => {}
        }
        // Before the removal, which would forget it: kept in memory a while (the store deletes it).
        index.history.deleted(receipt.seq, now);
        index.remove(receipt.seq);
        index.counters.deletes += 1;
        ops.push(StoreOp::DeleteMessage {
            queue: index.id(),
            seq: receipt.seq,
        });
        Ok(DeleteOutcome::Deleted)
    }

    /// Moves a message's deadline to `now + change.visibility_ms`. Needs the current receipt (any protocol).
    /// Returns the new deadline.
    pub async fn change_visibility(
        &self,
        key: &QueueKey,
        receipt: &str,
        change: VisibilityChange,
    ) -> EngineResult<Millis> {
        let mut results = self
            .change_visibility_batch(key, &[(receipt, change)])
            .await?;
        results.pop().expect("one result per entry")
    }

    /// Several visibility changes on one queue with one commit; each entry has its own result.
    pub async fn change_visibility_batch(
        &self,
        key: &QueueKey,
        entries: &[(&str, VisibilityChange)],
    ) -> EngineResult<Vec<EngineResult<Millis>>> {
        let now = self.clock.now();
        let (results, commit) = self.on_queue(key, now, |locked| {
            let (index, ops) = locked.parts();
            let before = index.counters;
            let results = entries
                .iter()
                .map(|(receipt, change)| {
                    self.reschedule_locked(index, receipt, change, None, now, ops)
                        .map(|(at, _)| at)
                })
                .collect();
            // A change to 0 gives the message back: a redelivery.
            index.persist_counters_since(before, ops);
            results
        })?;
        Self::durable(commit).await?;
        Ok(results)
    }

    /// Azure's update: like change-visibility, optionally replacing the body, and issuing a new receipt.
    pub async fn update(
        &self,
        key: &QueueKey,
        receipt: &str,
        change: VisibilityChange,
        new_body: Option<bytes::Bytes>,
    ) -> EngineResult<Updated> {
        let now = self.clock.now();
        let (result, commit) = self.on_queue(key, now, |locked| {
            let (index, ops) = locked.parts();
            let before = index.counters;
            let result = self.reschedule_locked(index, receipt, &change, Some(new_body), now, ops);
            index.persist_counters_since(before, ops);
            result
        })?;
        Self::durable(commit).await?;
        let (visible_at, receipt) = result?;
        Ok(Updated {
            receipt: receipt.expect("update issues a receipt"),
            visible_at,
        })
    }

    /// Applies one visibility change under the lock. `update` is `None` for a plain change and `Some(body)`
    /// for Azure's update, which also issues a new receipt and may replace the body.
    fn reschedule_locked(
        &self,
        index: &mut QueueIndex,
        receipt: &str,
        change: &VisibilityChange,
        update: Option<Option<bytes::Bytes>>,
        now: Millis,
        ops: &mut Vec<StoreOp>,
    ) -> EngineResult<(Millis, Option<String>)> {
        let id = index.id();
        let receipt = self.decode_receipt(id, receipt)?;
        let current = Self::check_reschedule(index, &receipt, change, now)?;
        if update.is_some() {
            // An update issues a new receipt, so it needs the current one whatever the rule says.
            Self::current(index, &receipt)?;
        }
        let visible_at = now.saturating_add(change.visibility_ms);
        let mut next = MessageState {
            visible_at,
            ..current
        };
        let new_receipt = match update {
            Some(new_body) => {
                Some(self.apply_update(index, (receipt.seq, now), &mut next, new_body, ops)?)
            }
            None => None,
        };
        if index.replace(receipt.seq, next, now) {
            index.waiters.rearm();
        }
        ops.push(StoreOp::PutState {
            queue: id,
            seq: receipt.seq,
            state: next,
        });
        let changed = index.history.visibility_changed(
            receipt.seq,
            change.visibility_ms,
            next.generation,
            now,
        );
        if let Some(history) = changed {
            ops.push(StoreOp::PutHistory {
                queue: id,
                seq: receipt.seq,
                history: history.clone(),
            });
        }
        Ok((visible_at, new_receipt))
    }

    /// The part of Azure's update beyond a visibility change: the body replaced if a new one is given (within
    /// the queue's size limit), and a new receipt issued, which makes every older one stale.
    fn apply_update(
        &self,
        index: &QueueIndex,
        (seq, now): (Seq, Millis),
        next: &mut MessageState,
        new_body: Option<bytes::Bytes>,
        ops: &mut Vec<StoreOp>,
    ) -> EngineResult<String> {
        let id = index.id();
        if let Some(body) = new_body {
            let max_bytes = index.record.config.message_size_bytes_max;
            if body.len() > max_bytes as usize {
                return Err(EngineError::MessageTooLarge {
                    size_bytes: body.len(),
                    max_bytes,
                });
            }
            let body_md5 = body_md5(&body);
            next.body_bytes = body_bytes(&body);
            ops.push(StoreOp::ReplaceBody {
                queue: id,
                seq,
                body,
                body_md5,
            });
        }
        next.generation += 1;
        Ok(self.receipts.encode(&Receipt {
            queue: id,
            seq,
            generation: next.generation,
            issued_at: now,
        }))
    }

    /// The message's state if `receipt` is its current one (issued by its latest receive or update).
    pub(super) fn current(index: &QueueIndex, receipt: &Receipt) -> EngineResult<MessageState> {
        let current = Self::issued(index, receipt)?;
        if receipt.generation != current.generation {
            return Err(EngineError::MessageNotAvailable);
        }
        Ok(current)
    }

    /// The message's state if `receipt` is any receipt issued for it (this delivery's or an earlier one's).
    fn issued(index: &QueueIndex, receipt: &Receipt) -> EngineResult<MessageState> {
        let current = index
            .get(receipt.seq)
            .ok_or(EngineError::MessageNotAvailable)?;
        if receipt.generation > current.generation {
            return Err(EngineError::ReceiptInvalid);
        }
        Ok(current)
    }

    fn check_reschedule(
        index: &QueueIndex,
        receipt: &Receipt,
        change: &VisibilityChange,
        now: Millis,
    ) -> EngineResult<MessageState> {
        let current = match change.receipts {
            ReceiptRule::Current => Self::current(index, receipt)?,
            ReceiptRule::AnyIssued => Self::issued(index, receipt)?,
            // A FIFO message whose visibility lapsed is no longer the holder's to change.
            ReceiptRule::Unexpired => Some(Self::current(index, receipt)?)
                .filter(|current| current.visible_at > now)
                .ok_or(EngineError::MessageNotAvailable)?,
        };
        if change.visibility_ms > limits::VISIBILITY_TIMEOUT_MS_MAX {
            return Err(EngineError::InvalidArgument(format!(
                "visibility of {} ms exceeds the engine's maximum of {} ms",
                change.visibility_ms,
                limits::VISIBILITY_TIMEOUT_MS_MAX
            )));
        }
        let visible_at = now.saturating_add(change.visibility_ms);
        if let Some(max_ms) = change.since_receive_ms_max {
            let requested_ms = visible_at.saturating_sub(receipt.issued_at);
            if requested_ms > max_ms {
                return Err(EngineError::VisibilityPastLimit {
                    requested_ms,
                    max_ms,
                });
            }
        }
        if change.not_past_expiry && current.expires_at != NEVER && visible_at > current.expires_at
        {
            return Err(EngineError::VisibilityPastExpiry);
        }
        Ok(current)
    }
}
