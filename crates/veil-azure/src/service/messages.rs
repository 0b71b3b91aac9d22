//! Message handlers: put, get, peek, update, delete and clear. Visibility is the engine's: these pass
//! durations and show the times the engine decided. A pop receipt is the message id followed by the engine
//! receipt (`pop_receipt.rs`), so delete and update check the path's id without a store read.

use bytes::Bytes;
use veil_core::limits::SECOND_MS;
use veil_core::{
    Consumer, EngineError, Message, NewMessage, Protocol, ReceiptRule, ReceiveOptions, Ttl,
    VisibilityChange,
};

use super::{engine_error, visibility_past_expiry, Ctx, Service};
use crate::api::{MessageTtl, Operation, Output, QueueMessage};
use crate::error::{AzureError, AzureResult, ErrorCode};
use crate::pop_receipt::{self, PopReceipt};

/// The parameters of Update Message.
pub(super) struct Update<'a> {
    pub message_id: &'a str,
    pub pop_receipt: &'a PopReceipt,
    pub visibility_s: u64,
    pub text: Option<String>,
}

impl Service {
    /// Dispatches a message operation to its handler ([`Service::execute`] hands them over).
    pub(super) async fn execute_message(
        &self,
        ctx: &Ctx,
        operation: Operation,
    ) -> AzureResult<Output> {
        match operation {
            Operation::PutMessage {
                queue,
                text,
                visibility_s,
                ttl,
            } => self.put_message(ctx, &queue, text, visibility_s, ttl).await,
            Operation::GetMessages {
                queue,
                count,
                visibility_s,
            } => self.get_messages(ctx, &queue, count, visibility_s).await,
            Operation::PeekMessages { queue, count } => {
                self.peek_messages(ctx, &queue, count).await
            }
            Operation::ClearMessages { queue } => self.clear_messages(ctx, &queue).await,
            Operation::DeleteMessage {
                queue,
                message_id,
                pop_receipt,
            } => {
                self.delete_message(ctx, &queue, &message_id, &pop_receipt)
                    .await
            }
            Operation::UpdateMessage {
                queue,
                message_id,
                pop_receipt,
                visibility_s,
                text,
            } => {
                let update = Update {
                    message_id: &message_id,
                    pop_receipt: &pop_receipt,
                    visibility_s,
                    text,
                };
                self.update_message(ctx, &queue, update).await
            }
            // `execute` hands over the message operations only.
            _ => Err(AzureError::internal("not a message operation")),
        }
    }

    /// Put: `visibility_s` is the initial invisibility; the answer carries a pop receipt usable at once.
    pub(super) async fn put_message(
        &self,
        ctx: &Ctx,
        queue: &str,
        text: String,
        visibility_s: u64,
        ttl: MessageTtl,
    ) -> AzureResult<Output> {
        let mut message = NewMessage::new(Bytes::from(text.into_bytes()));
        message.delay_ms = Some(visibility_s * SECOND_MS);
        message.ttl = Some(match ttl {
            MessageTtl::Seconds(s) => Ttl::After(s.saturating_mul(SECOND_MS)),
            MessageTtl::Never => Ttl::Never,
        });
        let sent = self
            .engine
            .send(&ctx.key(queue), vec![message])
            .await?
            .pop()
            .ok_or_else(|| AzureError::internal("the engine sent no message"))?;
        let receipt = pop_receipt::encode(&sent.message_id, &self.engine.receipt_of_send(&sent));
        Ok(Output::Messages {
            status: 201,
            messages: vec![QueueMessage {
                message_id: veil_core::message_id_text(&sent.message_id),
                insertion_time: sent.sent_at,
                expiration_time: sent.expires_at,
                pop_receipt: Some(receipt),
                time_next_visible: Some(sent.visible_at),
                dequeue_count: None,
                text: None,
            }],
        })
    }

    pub(super) async fn get_messages(
        &self,
        ctx: &Ctx,
        queue: &str,
        count: u64,
        visibility_s: u64,
    ) -> AzureResult<Output> {
        let options = ReceiveOptions {
            dead_letter: veil_core::DeadLetterTiming::OnReceive,
            max_messages: count as usize,
            visibility_ms: Some(visibility_s * SECOND_MS),
            wait_ms: Some(0),
            attempt_id: None,
            // Azure names its caller by the account (Shared Key, or the SAS's account).
            consumer: Some(Consumer::new(
                Protocol::Azure,
                ctx.peer,
                Some(ctx.account.clone()),
            )),
        };
        let messages = self.engine.receive(&ctx.key(queue), options).await?;
        Ok(Output::Messages {
            status: 200,
            messages: messages.into_iter().map(|m| render(m, true)).collect(),
        })
    }

    pub(super) async fn peek_messages(
        &self,
        ctx: &Ctx,
        queue: &str,
        count: u64,
    ) -> AzureResult<Output> {
        let messages = self.engine.peek(&ctx.key(queue), count as usize).await?;
        Ok(Output::Messages {
            status: 200,
            messages: messages.into_iter().map(|m| render(m, false)).collect(),
        })
    }

    pub(super) async fn clear_messages(&self, ctx: &Ctx, queue: &str) -> AzureResult<Output> {
        let cleared = self.engine.purge(&ctx.key(queue), None).await?;
        // The audit line is the dispatcher's (`service/mod.rs`), with the outcome; this adds the count.
        tracing::debug!(account = %ctx.account, %queue, cleared, "queue cleared");
        Ok(Output::Empty { status: 204 })
    }

    pub(super) async fn delete_message(
        &self,
        ctx: &Ctx,
        queue: &str,
        message_id: &str,
        receipt: &PopReceipt,
    ) -> AzureResult<Output> {
        check_message_id(message_id, receipt)?;
        self.engine
            .delete(
                &ctx.key(queue),
                &receipt.engine_receipt,
                ReceiptRule::Current,
            )
            .await
            .map_err(|e| receipt_error(e, receipt))?;
        Ok(Output::Empty { status: 204 })
    }

    /// Update: a new visibility (not past the message's expiry) and optionally new text; a new pop receipt.
    pub(super) async fn update_message(
        &self,
        ctx: &Ctx,
        queue: &str,
        update: Update<'_>,
    ) -> AzureResult<Output> {
        let receipt = update.pop_receipt;
        check_message_id(update.message_id, receipt)?;
        let change = VisibilityChange {
            receipts: veil_core::ReceiptRule::Current,
            visibility_ms: update.visibility_s * SECOND_MS,
            since_receive_ms_max: None,
            not_past_expiry: true,
        };
        let text = update.text.map(|t| Bytes::from(t.into_bytes()));
        let updated = self
            .engine
            .update(&ctx.key(queue), &receipt.engine_receipt, change, text)
            .await
            .map_err(|e| match e {
                EngineError::VisibilityPastExpiry => {
                    visibility_past_expiry().detail("QueryParameterValue", update.visibility_s)
                }
                other => receipt_error(other, receipt),
            })?;
        Ok(Output::Updated {
            pop_receipt: pop_receipt::encode(&receipt.message_id, &updated.receipt),
            time_next_visible: updated.visible_at,
        })
    }
}

/// The path's message id must be the one the pop receipt was issued for (Azure: 404 otherwise).
fn check_message_id(message_id: &str, receipt: &PopReceipt) -> AzureResult<()> {
    match uuid::Uuid::parse_str(message_id) {
        Ok(id) if id.as_bytes() == &receipt.message_id => Ok(()),
        _ => Err(AzureError::new(ErrorCode::MessageNotFound)),
    }
}

/// Errors of delete and update: a receipt Veil never issued is malformed (400); a stale one names a message
/// that is gone or was dequeued again (404 MessageNotFound).
fn receipt_error(error: EngineError, receipt: &PopReceipt) -> AzureError {
    match error {
        EngineError::ReceiptInvalid => AzureError::invalid_query(
            "popreceipt",
            &pop_receipt::encode(&receipt.message_id, &receipt.engine_receipt),
            "Invalid pop receipt format",
        ),
        other => engine_error(other),
    }
}

/// A message as Get (with its new pop receipt and time-next-visible) or Peek shows it. Bodies are bytes
/// in the engine; Azure shows them as text.
fn render(message: Message, with_receipt: bool) -> QueueMessage {
    let message_id = message.message_id_string();
    let pop_receipt = if with_receipt {
        message
            .receipt
            .as_deref()
            .map(|r| pop_receipt::encode(&message.payload.message_id, r))
    } else {
        None
    };
    QueueMessage {
        message_id,
        insertion_time: message.payload.sent_at,
        expiration_time: message.state.expires_at,
        pop_receipt,
        time_next_visible: with_receipt.then_some(message.state.visible_at),
        dequeue_count: Some(message.state.receive_count),
        text: Some(message.payload.body),
    }
}
