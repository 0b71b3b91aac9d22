//! The message move task actions (docs/semantics.md §8): StartMessageMoveTask, ListMessageMoveTasks and
//! CancelMessageMoveTask over the engine's move tasks. This file holds SQS's side only: the ARNs and the task
//! handle, the ranges, the order of the checks and AWS's texts; moving is the engine's.
//!
//! The texts: the 404s, the dead-letter precondition, the second task, an invalid handle and a task that does
//! not exist were recorded from AWS in LocalStack's `test_sqs_move_task` snapshots; the malformed ARN, the
//! same source and destination, queues of different types and the rate range follow local-sqs's (Inqnuam)
//! AWS-matching answers; MaxResults
//! and cancelling a task that is no longer running follow moto (no recording of AWS's answer was found). A task
//! handle is, as AWS's is, base64 of `{"taskId":"<uuid>","sourceArn":"<arn>"}`.

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;
use serde_json::{json, Value};
use veil_core::{MoveTaskError, MoveTaskFailure, MoveTaskRecord, MoveTaskStatus, QueueKey};

use super::{engine_error, RequestContext, Service};
use crate::api::{
    CancelMessageMoveTaskInput, ListMessageMoveTasksInput, MoveTaskEntry, Output,
    StartMessageMoveTaskInput,
};
use crate::error::{ErrorCode, SqsError, SqsResult};
use crate::limits;

/// The two ARN parameters of the move-task actions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ArnParameter {
    SourceArn,
    DestinationArn,
}

impl ArnParameter {
    fn name(self) -> &'static str {
        match self {
            Self::SourceArn => "SourceArn",
            Self::DestinationArn => "DestinationArn",
        }
    }

    fn malformed(self) -> SqsError {
        SqsError::invalid_parameter_value(format!(
            "You must use this format to specify the {}: \
             arn:<partition>:<service>:<region>:<account-id>:<resource-id>",
            self.name()
        ))
    }

    fn not_found(self) -> SqsError {
        SqsError::new(
            ErrorCode::ResourceNotFound,
            format!(
                "The resource that you specified for the {} parameter doesn't exist.",
                self.name()
            ),
        )
    }
}

fn not_a_dead_letter_queue() -> SqsError {
    SqsError::invalid_parameter_value("Source queue must be configured as a Dead Letter Queue.")
}

fn same_source_and_destination() -> SqsError {
    SqsError::invalid_parameter_value(
        "Source queue arn and destination queue arn cannot be the same.",
    )
}

fn different_queue_types() -> SqsError {
    SqsError::invalid_parameter_value(
        "The source queue and destination queue must be of the same queue type.",
    )
}

fn rate_out_of_range() -> SqsError {
    SqsError::invalid_parameter_value(format!(
        "Value for parameter MaxNumberOfMessagesPerSecond is invalid. Reason: You must enter a number \
         that's between {} and {}.",
        limits::MOVE_TASK_RATE_PER_S_MIN,
        limits::MOVE_TASK_RATE_PER_S_MAX
    ))
}

fn already_running() -> SqsError {
    SqsError::invalid_parameter_value(
        "There is already a task running. Only one active task is allowed for a source queue arn at a \
         given time.",
    )
}

fn handle_invalid() -> SqsError {
    SqsError::invalid_parameter_value("Value for parameter TaskHandle is invalid.")
}

fn task_does_not_exist() -> SqsError {
    SqsError::new(ErrorCode::ResourceNotFound, "Task does not exist.")
}

/// The answer to each engine refusal of a move-task operation.
fn move_task_error(error: MoveTaskError) -> SqsError {
    match error {
        MoveTaskError::SourceNotFound => ArnParameter::SourceArn.not_found(),
        MoveTaskError::DestinationNotFound => ArnParameter::DestinationArn.not_found(),
        MoveTaskError::DestinationIsSource => same_source_and_destination(),
        MoveTaskError::RateZero => rate_out_of_range(),
        MoveTaskError::AlreadyRunning => already_running(),
        MoveTaskError::TaskNotFound | MoveTaskError::NotRunning => task_does_not_exist(),
        MoveTaskError::Engine(error) => engine_error(error),
    }
}

fn status_name(status: MoveTaskStatus) -> &'static str {
    match status {
        MoveTaskStatus::Running => "RUNNING",
        MoveTaskStatus::Completed => "COMPLETED",
        MoveTaskStatus::Cancelled => "CANCELLED",
        MoveTaskStatus::Failed => "FAILED",
    }
}

/// `FailureReason` as AWS words it (its DLQ redrive troubleshooting guide).
fn failure_reason(failure: MoveTaskFailure) -> &'static str {
    match failure {
        MoveTaskFailure::TargetQueueMissing => "AWS.SimpleQueueService.NonExistentQueue",
        MoveTaskFailure::OriginUnknown => "CouldNotDetermineMessageSource",
    }
}

/// `base64({"taskId":"<uuid>","sourceArn":"<arn>"})`.
fn encode_handle(task_id: &[u8; 16], source_arn: &str) -> String {
    let doc = json!({
        "taskId": uuid::Uuid::from_bytes(*task_id).to_string(),
        "sourceArn": source_arn,
    });
    BASE64.encode(doc.to_string())
}

/// The task id and source ARN a handle names; `None` for anything that is not such a handle.
fn decode_handle(handle: &str) -> Option<(String, String)> {
    let bytes = BASE64.decode(handle.trim()).ok()?;
    let doc: Value = serde_json::from_slice(&bytes).ok()?;
    let text = |name: &str| doc.get(name)?.as_str().map(str::to_owned);
    Some((text("taskId")?, text("sourceArn")?))
}

/// The source ARN a task handle names (the audit log's queue of CancelMessageMoveTask).
pub(super) fn source_of_handle(handle: &str) -> Option<String> {
    decode_handle(handle).map(|(_, source_arn)| source_arn)
}

impl Service {
    pub(super) async fn start_message_move_task(
        &self,
        context: &RequestContext,
        input: StartMessageMoveTaskInput,
    ) -> SqsResult<Output> {
        let source = self
            .existing_queue(ArnParameter::SourceArn, &input.source_arn)
            .await?;
        let dead_letter_sources = self
            .engine
            .dead_letter_sources(&source)
            .await
            .map_err(engine_error)?;
        if dead_letter_sources.is_empty() {
            return Err(not_a_dead_letter_queue());
        }
        let destination = match &input.destination_arn {
            None => {
                self.authorize_return(context, &dead_letter_sources).await?;
                None
            }
            Some(arn) => {
                let key = self.queue_of_arn(ArnParameter::DestinationArn, arn)?;
                if key == source {
                    return Err(same_source_and_destination());
                }
                // The task sends to the destination on the caller's behalf: it needs what a SendMessage there
                // needs, checked before the queue's existence so that a refusal tells nothing about another
                // account's queues (docs/security.md, "SQS").
                self.authorize_send(context, &key).await?;
                self.require_arn_queue(ArnParameter::DestinationArn, &key)
                    .await?;
                if self.is_fifo(&source).await? != self.is_fifo(&key).await? {
                    return Err(different_queue_types());
                }
                Some(key)
            }
        };
        let rate = match input.max_number_of_messages_per_second {
            None => None,
            Some(rate) => Some(
                u32::try_from(rate)
                    .ok()
                    .filter(|_| {
                        (limits::MOVE_TASK_RATE_PER_S_MIN..=limits::MOVE_TASK_RATE_PER_S_MAX)
                            .contains(&rate)
                    })
                    .ok_or_else(rate_out_of_range)?,
            ),
        };
        let task = self
            .engine
            .start_move_task(&source, destination.as_ref(), rate)
            .await
            .map_err(move_task_error)?;
        Ok(Output::TaskHandle(encode_handle(
            &task.id,
            &self.arn(context, &source),
        )))
    }

    pub(super) async fn list_message_move_tasks(
        &self,
        context: &RequestContext,
        input: ListMessageMoveTasksInput,
    ) -> SqsResult<Output> {
        let source = self
            .existing_queue(ArnParameter::SourceArn, &input.source_arn)
            .await?;
        let max_results = input
            .max_results
            .unwrap_or(limits::MOVE_TASK_LIST_RESULTS_DEFAULT);
        if !(1..=limits::MOVE_TASK_LIST_RESULTS_MAX).contains(&max_results) {
            return Err(SqsError::invalid_value(
                "MaxResults",
                max_results,
                &format!(
                    "Must be between 1 and {}.",
                    limits::MOVE_TASK_LIST_RESULTS_MAX
                ),
            ));
        }
        let tasks = self
            .engine
            .move_tasks(&source)
            .await
            .map_err(move_task_error)?;
        let shown = usize::try_from(max_results).unwrap_or(usize::MAX);
        Ok(Output::MoveTasks(
            tasks
                .iter()
                .take(shown)
                .map(|task| self.move_task_entry(context, task))
                .collect(),
        ))
    }

    pub(super) async fn cancel_message_move_task(
        &self,
        _context: &RequestContext,
        input: CancelMessageMoveTaskInput,
    ) -> SqsResult<Output> {
        let (task_id, source_arn) = decode_handle(&input.task_handle).ok_or_else(handle_invalid)?;
        let source = self
            .existing_queue(ArnParameter::SourceArn, &source_arn)
            .await?;
        // A handle that decodes but names no task Veil made is a task that does not exist.
        let task_id = uuid::Uuid::parse_str(&task_id).map_err(|_| task_does_not_exist())?;
        let task = self
            .engine
            .cancel_move_task(&source, task_id.as_bytes())
            .await
            .map_err(move_task_error)?;
        Ok(Output::MessagesMoved(task.moved))
    }

    /// A task without a destination sends each message back to the queue it was dead-lettered from, so the
    /// caller needs `send` on each queue whose redrive policy names this one — checked at the start, as AWS
    /// checks a redrive's permissions. A message from a queue that has since stopped naming this one goes back
    /// to it too, unchecked: it returns a queue's own message to it (docs/security.md, "SQS").
    async fn authorize_return(
        &self,
        context: &RequestContext,
        sources: &[QueueKey],
    ) -> SqsResult<()> {
        for key in sources {
            self.authorize_send(context, key).await?;
        }
        Ok(())
    }

    /// The queue a well-formed ARN names (which may not exist); a malformed one is refused with AWS's format
    /// text, and one of another service names no queue.
    fn queue_of_arn(&self, parameter: ArnParameter, arn: &str) -> SqsResult<QueueKey> {
        let parts = arn.split(':').count();
        if !arn.starts_with("arn:") || parts < 6 {
            return Err(parameter.malformed());
        }
        self.names
            .key_from_arn(arn)
            .ok_or_else(|| parameter.not_found())
    }

    async fn require_arn_queue(&self, parameter: ArnParameter, key: &QueueKey) -> SqsResult<()> {
        if self.engine.queue_exists(key).await.map_err(engine_error)? {
            Ok(())
        } else {
            Err(parameter.not_found())
        }
    }

    async fn is_fifo(&self, key: &QueueKey) -> SqsResult<bool> {
        let info = self.engine.queue_info(key).await.map_err(engine_error)?;
        Ok(info.config.fifo.is_some())
    }

    /// The existing queue an ARN parameter names.
    async fn existing_queue(&self, parameter: ArnParameter, arn: &str) -> SqsResult<QueueKey> {
        let key = self.queue_of_arn(parameter, arn)?;
        self.require_arn_queue(parameter, &key).await?;
        Ok(key)
    }

    fn move_task_entry(&self, context: &RequestContext, task: &MoveTaskRecord) -> MoveTaskEntry {
        let source_arn = self.arn(context, &task.source_key);
        MoveTaskEntry {
            task_handle: task
                .status
                .is_running()
                .then(|| encode_handle(&task.id, &source_arn)),
            status: status_name(task.status),
            destination_arn: task
                .destination
                .as_ref()
                .map(|(_, key)| self.arn(context, key)),
            source_arn,
            max_number_of_messages_per_second: task.rate_per_s_max,
            approximate_number_of_messages_moved: task.moved,
            approximate_number_of_messages_to_move: task.to_move,
            failure_reason: task.failure.map(failure_reason),
            started_timestamp: task.started_at,
        }
    }
}

#[cfg(test)]
#[path = "move_tasks_tests.rs"]
mod tests;
