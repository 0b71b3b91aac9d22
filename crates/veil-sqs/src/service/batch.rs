//! The three batch actions: SendMessageBatch, DeleteMessageBatch and ChangeMessageVisibilityBatch. An entry
//! that fails its own checks is reported in `Failed` while the others proceed; a problem with the request
//! as a whole (repeated ids, too many entries, too many bytes, a missing queue) fails all of it. Each batch
//! is one engine call, so its entries share one commit (ARCHITECTURE.md, group commit).

use veil_core::{EngineError, NewMessage, QueueKey, VisibilityChange};

use super::messages::{sent_result, visibility_change, PreparedMessage};
use super::{engine_error, receipt_error, RequestContext, Service};
use crate::api::{
    BatchFailure, ChangeMessageVisibilityBatchEntry, ChangeMessageVisibilityBatchInput,
    DeleteMessageBatchInput, Output, SendMessageBatchEntry, SendMessageBatchInput,
    SentMessageResult,
};
use crate::error::{ErrorCode, SqsError, SqsResult};
use crate::fifo;
use crate::limits;
use crate::validate;

impl Service {
    pub(super) async fn send_message_batch(
        &self,
        context: &RequestContext,
        input: SendMessageBatchInput,
    ) -> SqsResult<Output> {
        validate::batch_entry_ids(
            "SendMessageBatchRequestEntry",
            input.entries.iter().map(|entry| entry.id.as_str()),
        )?;
        let key = self.queue_key(context, &input.target)?;
        let fifo = fifo::is_fifo_name(&key.name);
        if fifo {
            self.check_fifo_batch(&key, &input.entries).await?;
        }
        check_batch_size(&input.entries)?;
        let mut accepted: Vec<(String, PreparedMessage)> = Vec::new();
        let mut failed = Vec::new();
        for entry in input.entries {
            match self.prepare_message(context, entry.message, fifo) {
                Ok(prepared) => accepted.push((entry.id, prepared)),
                Err(error) => failed.push(BatchFailure::from_error(&entry.id, &error)),
            }
        }
        let successful = self
            .send_accepted(&key, accepted, fifo, &mut failed)
            .await?;
        Ok(Output::SendMessageBatch { successful, failed })
    }

    /// A FIFO batch in which an entry lacks its group, or its deduplication id while the queue does not
    /// deduplicate by content, fails as a whole (an empty id counts as missing here), with AWS's texts and
    /// codes — both InvalidParameterValue, unlike SendMessage's MissingParameter for the group (LocalStack's
    /// AWS-recorded `test_send_batch_missing_message_group_id_for_fifo_queue` and
    /// `test_send_batch_missing_deduplication_id_for_fifo_queue` snapshots). Entries are checked in order,
    /// each for its deduplication id first.
    async fn check_fifo_batch(
        &self,
        key: &QueueKey,
        entries: &[SendMessageBatchEntry],
    ) -> SqsResult<()> {
        let content_based = self
            .engine
            .queue_info(key)
            .await
            .map_err(engine_error)?
            .config
            .fifo
            .is_some_and(|fifo| fifo.content_based_dedup);
        let missing = |id: &Option<String>| id.as_deref().is_none_or(str::is_empty);
        for entry in entries {
            if !content_based && missing(&entry.message.deduplication_id) {
                return Err(engine_error(EngineError::DedupIdRequired));
            }
            if missing(&entry.message.group_id) {
                return Err(SqsError::invalid_parameter_value(
                    "The request must contain the parameter MessageGroupId.",
                ));
            }
        }
        Ok(())
    }

    /// Sends the entries that passed their checks in one engine call and reports each as SQS does.
    /// The engine judges each entry on its own in the same call (the queue's size limit among its rules): an
    /// entry it refuses joins `failed`, the others are stored under one commit.
    async fn send_accepted(
        &self,
        key: &QueueKey,
        accepted: Vec<(String, PreparedMessage)>,
        fifo: bool,
        failed: &mut Vec<BatchFailure>,
    ) -> SqsResult<Vec<SentMessageResult>> {
        if accepted.is_empty() {
            return Ok(Vec::new());
        }
        let (ids, prepared): (Vec<String>, Vec<PreparedMessage>) = accepted.into_iter().unzip();
        let (messages, digests): (Vec<NewMessage>, Vec<_>) = prepared
            .into_iter()
            .map(|p| (p.message, (p.md5_of_attributes, p.md5_of_system_attributes)))
            .unzip();
        let outcomes = self
            .engine
            .send_each(key, messages)
            .await
            .map_err(engine_error)?;
        let mut successful = Vec::with_capacity(outcomes.len());
        for ((id, outcome), (md5_attributes, md5_system)) in
            ids.into_iter().zip(outcomes).zip(digests)
        {
            match outcome {
                Ok(sent) => {
                    successful.push(sent_result(id, &sent, fifo, md5_attributes, md5_system))
                }
                Err(error) => failed.push(BatchFailure::from_error(&id, &batch_entry_error(error))),
            }
        }
        Ok(successful)
    }

    pub(super) async fn delete_message_batch(
        &self,
        context: &RequestContext,
        input: DeleteMessageBatchInput,
    ) -> SqsResult<Output> {
        validate::batch_entry_ids(
            "DeleteMessageBatchRequestEntry",
            input.entries.iter().map(|entry| entry.id.as_str()),
        )?;
        let key = self.queue_key(context, &input.target)?;
        // A missing queue fails the engine call before any entry is looked at: no separate look-up (and lock).
        let handles: Vec<&str> = input
            .entries
            .iter()
            .map(|entry| entry.receipt_handle.as_str())
            .collect();
        let outcomes = self
            .engine
            .delete_batch(&key, &handles, fifo::receipt_rule(&key.name))
            .await
            .map_err(engine_error)?;
        let mut successful = Vec::new();
        let mut failed = Vec::new();
        for (entry, outcome) in input.entries.iter().zip(outcomes) {
            match outcome {
                Ok(_) => successful.push(entry.id.clone()),
                Err(error) => failed.push(BatchFailure::from_error(
                    &entry.id,
                    &receipt_error(error, &entry.receipt_handle, None),
                )),
            }
        }
        Ok(Output::BatchIds { successful, failed })
    }

    pub(super) async fn change_message_visibility_batch(
        &self,
        context: &RequestContext,
        input: ChangeMessageVisibilityBatchInput,
    ) -> SqsResult<Output> {
        validate::batch_entry_ids(
            "ChangeMessageVisibilityBatchRequestEntry",
            input.entries.iter().map(|entry| entry.id.as_str()),
        )?;
        let key = self.queue_key(context, &input.target)?;
        // A missing queue is reported before any entry's own problem: the engine call below fails as a whole
        // (even with no valid entry) before the entries' failures are answered, so no separate look-up is needed.
        let mut failed = Vec::new();
        let mut valid = Vec::new();
        for entry in &input.entries {
            match visibility_change(entry.visibility_timeout, &key) {
                Ok((seconds, change)) => valid.push((entry, seconds, change)),
                Err(error) => failed.push(BatchFailure::from_error(&entry.id, &error)),
            }
        }
        let successful = self.change_valid(&key, &valid, &mut failed).await?;
        // Failures are reported in request order, as SQS does.
        let order = |id: &str| input.entries.iter().position(|entry| entry.id == id);
        failed.sort_by_key(|failure| order(&failure.id));
        Ok(Output::BatchIds { successful, failed })
    }

    /// Applies the entries whose timeout passed its checks in one engine call; returns the ids that
    /// succeeded and adds the others to `failed`.
    async fn change_valid(
        &self,
        key: &QueueKey,
        valid: &[(&ChangeMessageVisibilityBatchEntry, u64, VisibilityChange)],
        failed: &mut Vec<BatchFailure>,
    ) -> SqsResult<Vec<String>> {
        let changes: Vec<(&str, VisibilityChange)> = valid
            .iter()
            .map(|(entry, _, change)| (entry.receipt_handle.as_str(), *change))
            .collect();
        let results = self
            .engine
            .change_visibility_batch(key, &changes)
            .await
            .map_err(engine_error)?;
        let mut successful = Vec::new();
        for ((entry, seconds, _), result) in valid.iter().zip(results) {
            match result {
                Ok(_) => successful.push(entry.id.clone()),
                Err(error) => failed.push(BatchFailure::from_error(
                    &entry.id,
                    &receipt_error(error, &entry.receipt_handle, Some(*seconds)),
                )),
            }
        }
        Ok(successful)
    }
}

/// The whole batch (bodies and attributes) may not pass the single-message cap, whatever the queue's own
/// limit (`limits::BATCH_REQUEST_BYTES_MAX`).
fn check_batch_size(entries: &[SendMessageBatchEntry]) -> SqsResult<()> {
    let total_bytes: u64 = entries.iter().map(entry_bytes).sum();
    if total_bytes > limits::BATCH_REQUEST_BYTES_MAX {
        return Err(SqsError::new(
            ErrorCode::BatchRequestTooLong,
            format!(
                "Batch requests cannot be longer than {} bytes. You have sent {total_bytes} bytes.",
                limits::BATCH_REQUEST_BYTES_MAX
            ),
        ));
    }
    Ok(())
}

/// One entry's share of the batch total: its body and each attribute's name, type and value.
fn entry_bytes(entry: &SendMessageBatchEntry) -> u64 {
    let body = entry.message.body.as_deref().map_or(0, str::len) as u64;
    let attributes: u64 = entry
        .message
        .message_attributes
        .iter()
        .map(|(name, value)| {
            (name.len()
                + value.data_type.as_deref().map_or(0, str::len)
                + value.string_value.as_deref().map_or(0, str::len)
                + value.binary_value.as_ref().map_or(0, Vec::len)) as u64
        })
        .sum();
    body + attributes
}

/// An entry the engine refused, as SendMessageBatch words it: a message over the size limit "cannot be
/// validated" there (AWS), anything else as SendMessage would answer it.
fn batch_entry_error(error: EngineError) -> SqsError {
    match error {
        EngineError::MessageTooLarge { max_bytes, .. } => {
            validate::batch_entry_too_long(u64::from(max_bytes))
        }
        other => engine_error(other),
    }
}
