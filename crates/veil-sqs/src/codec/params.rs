//! Typed inputs from a parameter object. Both protocols converge here: the JSON protocol's body is such an object
//! already, and the Query codec rebuilds the same object from its flattened form fields; either is decoded by
//! serde into [`Fields`], which keeps each member's JSON type unjudged. This module judges them, in each action's
//! order. Query values are all strings, so numbers are accepted as JSON numbers or as decimal strings.

use std::collections::BTreeMap;

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;

use super::fields::{AttributeFields, AttributeMap, Fields, Scalar, ScalarList, ScalarMap, Shaped};
use crate::api::*;
use crate::error::{ErrorCode, SqsError, SqsResult};

/// A view of one parameter object (`F`: an action's or a batch entry's [`Fields`], or a message attribute's
/// [`AttributeFields`]). `context` prefixes names in error messages (`Entries.2.`), so that a missing field of a
/// batch entry says which entry.
pub(crate) struct Params<'p, F> {
    pub(crate) f: &'p F,
    context: String,
}

fn type_error(name: &str, expected: &str) -> SqsError {
    SqsError::new(
        ErrorCode::Serialization,
        format!("Parameter {name} must be {expected}."),
    )
}

impl<'p, F> Params<'p, F> {
    pub(crate) fn new(f: &'p F) -> Self {
        Self {
            f,
            context: String::new(),
        }
    }

    fn full_name(&self, name: &str) -> String {
        format!("{}{name}", self.context)
    }

    pub(crate) fn string(&self, name: &str, value: &Scalar<'_>) -> SqsResult<Option<String>> {
        match value {
            Scalar::Null => Ok(None),
            Scalar::Str(text) => Ok(Some(text.to_string())),
            _ => Err(type_error(&self.full_name(name), "a string")),
        }
    }

    /// A string that must be present and non-empty (SQS treats an empty required string as missing).
    pub(crate) fn required_string(&self, name: &str, value: &Scalar<'_>) -> SqsResult<String> {
        match self.string(name, value)? {
            Some(text) if !text.is_empty() => Ok(text),
            _ => Err(SqsError::missing(&self.full_name(name))),
        }
    }

    pub(crate) fn integer(&self, name: &str, value: &Scalar<'_>) -> SqsResult<Option<i64>> {
        let invalid = |shown: &dyn std::fmt::Display| {
            SqsError::invalid_value(&self.full_name(name), shown, "Must be an integer.")
        };
        match value {
            Scalar::Null => Ok(None),
            Scalar::Number(number) => number.as_i64().map(Some).ok_or_else(|| invalid(number)),
            Scalar::Str(text) => text
                .trim()
                .parse::<i64>()
                .map(Some)
                .map_err(|_| invalid(text)),
            _ => Err(type_error(&self.full_name(name), "an integer")),
        }
    }

    pub(crate) fn required_integer(&self, name: &str, value: &Scalar<'_>) -> SqsResult<i64> {
        self.integer(name, value)?
            .ok_or_else(|| SqsError::missing(&self.full_name(name)))
    }

    pub(crate) fn string_list(&self, name: &str, value: &ScalarList<'_>) -> SqsResult<Vec<String>> {
        let wrong = || type_error(&self.full_name(name), "a list of strings");
        match value {
            Shaped::Null => Ok(Vec::new()),
            Shaped::Fits(items) => items
                .iter()
                .map(|item| match item {
                    Scalar::Str(text) => Ok(text.to_string()),
                    _ => Err(wrong()),
                })
                .collect(),
            Shaped::Misfit => Err(wrong()),
        }
    }

    pub(crate) fn string_map(
        &self,
        name: &str,
        value: &ScalarMap<'_>,
    ) -> SqsResult<BTreeMap<String, String>> {
        let wrong = || type_error(&self.full_name(name), "a map of strings");
        match value {
            Shaped::Null => Ok(BTreeMap::new()),
            Shaped::Fits(entries) => entries
                .iter()
                .map(|(key, value)| match value {
                    Scalar::Str(text) => Ok((key.clone(), text.to_string())),
                    // Some clients send numeric attribute values unquoted; SQS's values are strings.
                    Scalar::Number(number) => Ok((key.clone(), number.to_string())),
                    Scalar::Bool(flag) => Ok((key.clone(), flag.to_string())),
                    _ => Err(wrong()),
                })
                .collect(),
            Shaped::Misfit => Err(wrong()),
        }
    }

    /// A list of objects (batch entries), each viewed with its position in error messages.
    pub(crate) fn object_list<'q, T>(
        &self,
        name: &str,
        value: &'q Shaped<Vec<Shaped<T>>>,
    ) -> SqsResult<Vec<Params<'q, T>>> {
        let wrong = || type_error(&self.full_name(name), "a list of objects");
        match value {
            Shaped::Null => Ok(Vec::new()),
            Shaped::Fits(items) => items
                .iter()
                .enumerate()
                .map(|(position, item)| match item {
                    Shaped::Fits(f) => Ok(Params {
                        f,
                        context: format!("{}{name}.{}.", self.context, position + 1),
                    }),
                    _ => Err(wrong()),
                })
                .collect(),
            Shaped::Misfit => Err(wrong()),
        }
    }

    pub(crate) fn message_attributes(
        &self,
        name: &str,
        value: &AttributeMap<'_>,
    ) -> SqsResult<BTreeMap<String, MessageAttributeInput>> {
        let entries = match value {
            Shaped::Null => return Ok(BTreeMap::new()),
            Shaped::Fits(entries) => entries,
            Shaped::Misfit => {
                return Err(type_error(
                    &self.full_name(name),
                    "a map of attribute values",
                ))
            }
        };
        let mut attributes = BTreeMap::new();
        for (attribute_name, value) in entries {
            let Shaped::Fits(fields) = value else {
                return Err(type_error(
                    &format!("{}.{attribute_name}", self.full_name(name)),
                    "an attribute value",
                ));
            };
            let field = Params {
                f: fields,
                context: format!("{}.{attribute_name}.", self.full_name(name)),
            };
            attributes.insert(attribute_name.clone(), field.attribute()?);
        }
        Ok(attributes)
    }
}

impl Params<'_, AttributeFields<'_>> {
    fn attribute(&self) -> SqsResult<MessageAttributeInput> {
        let f = self.f;
        let binary_value = match self.string("BinaryValue", &f.binary_value)? {
            None => None,
            Some(encoded) => Some(BASE64.decode(encoded.trim()).map_err(|_| {
                SqsError::invalid_value(
                    &self.full_name("BinaryValue"),
                    &encoded,
                    "Binary values must be base64-encoded.",
                )
            })?),
        };
        let non_empty =
            |list: &Shaped<Vec<_>>| matches!(list, Shaped::Fits(items) if !items.is_empty());
        Ok(MessageAttributeInput {
            data_type: self.string("DataType", &f.data_type)?,
            string_value: self.string("StringValue", &f.string_value)?,
            binary_value,
            has_list_values: non_empty(&f.string_list_values) || non_empty(&f.binary_list_values),
        })
    }
}

impl<'p> Params<'p, Fields<'_>> {
    fn target(&self) -> SqsResult<QueueTarget> {
        Ok(QueueTarget {
            queue_url: self
                .string("QueueUrl", &self.f.queue_url)?
                .filter(|url| !url.is_empty()),
        })
    }

    fn message(&self) -> SqsResult<MessageInput> {
        let f = self.f;
        Ok(MessageInput {
            body: self.string("MessageBody", &f.message_body)?,
            delay_seconds: self.integer("DelaySeconds", &f.delay_seconds)?,
            message_attributes: self
                .message_attributes("MessageAttributes", &f.message_attributes)?,
            system_attributes: self
                .message_attributes("MessageSystemAttributes", &f.message_system_attributes)?,
            deduplication_id: self.string("MessageDeduplicationId", &f.message_deduplication_id)?,
            group_id: self.string("MessageGroupId", &f.message_group_id)?,
        })
    }

    /// A batch entry's id. An empty or missing one is not a missing parameter: SQS answers it with
    /// `InvalidBatchEntryId` like any other bad id (moto's AWS-verified `test_send_message_batch_errors`),
    /// which `validate::batch_entry_ids` does.
    fn entry_id(&self) -> SqsResult<String> {
        Ok(self.string("Id", &self.f.id)?.unwrap_or_default())
    }

    /// A batch action's `Entries`, each decoded by `decode` (which sees the entry's position in its errors).
    fn entries<T>(
        &self,
        decode: impl Fn(&Params<'p, Fields<'_>>) -> SqsResult<T>,
    ) -> SqsResult<Vec<T>> {
        self.object_list("Entries", &self.f.entries)?
            .iter()
            .map(decode)
            .collect()
    }
}

/// An action's parameters.
type P<'p, 'a> = Params<'p, Fields<'a>>;

/// Builds the typed action from its parameters. The match stays exhaustive so that a new action cannot be
/// left without a decoder.
pub(crate) fn decode_action(name: ActionName, params: &P<'_, '_>) -> SqsResult<Action> {
    use ActionName as N;
    Ok(match name {
        N::CreateQueue => Action::CreateQueue(create_queue(params)?),
        N::DeleteQueue => Action::DeleteQueue(params.target()?),
        N::GetQueueUrl => Action::GetQueueUrl(get_queue_url(params)?),
        N::ListQueues => Action::ListQueues(list_queues(params)?),
        N::GetQueueAttributes => Action::GetQueueAttributes(get_queue_attributes(params)?),
        N::SetQueueAttributes => Action::SetQueueAttributes(set_queue_attributes(params)?),
        N::SendMessage => Action::SendMessage(send_message(params)?),
        N::SendMessageBatch => Action::SendMessageBatch(send_message_batch(params)?),
        N::ReceiveMessage => Action::ReceiveMessage(receive_message(params)?),
        N::DeleteMessage => Action::DeleteMessage(delete_message(params)?),
        N::DeleteMessageBatch => Action::DeleteMessageBatch(delete_message_batch(params)?),
        N::ChangeMessageVisibility => {
            Action::ChangeMessageVisibility(change_message_visibility(params)?)
        }
        N::ChangeMessageVisibilityBatch => {
            Action::ChangeMessageVisibilityBatch(change_message_visibility_batch(params)?)
        }
        N::PurgeQueue => Action::PurgeQueue(params.target()?),
        N::TagQueue => Action::TagQueue(tag_queue(params)?),
        N::UntagQueue => Action::UntagQueue(untag_queue(params)?),
        N::ListQueueTags => Action::ListQueueTags(params.target()?),
        N::ListDeadLetterSourceQueues => {
            Action::ListDeadLetterSourceQueues(list_dead_letter_source_queues(params)?)
        }
        N::AddPermission => Action::AddPermission(add_permission(params)?),
        N::RemovePermission => Action::RemovePermission(remove_permission(params)?),
        N::StartMessageMoveTask => Action::StartMessageMoveTask(start_message_move_task(params)?),
        N::ListMessageMoveTasks => Action::ListMessageMoveTasks(list_message_move_tasks(params)?),
        N::CancelMessageMoveTask => {
            Action::CancelMessageMoveTask(cancel_message_move_task(params)?)
        }
    })
}

// The order of the reads below is part of the wire: when several parameters are wrong, the first one read is
// the error the client gets.

fn create_queue(params: &P<'_, '_>) -> SqsResult<CreateQueueInput> {
    Ok(CreateQueueInput {
        queue_name: params.required_string("QueueName", &params.f.queue_name)?,
        attributes: params.string_map("Attributes", &params.f.attributes)?,
        tags: params.string_map("tags", &params.f.create_tags)?,
    })
}

fn get_queue_url(params: &P<'_, '_>) -> SqsResult<GetQueueUrlInput> {
    Ok(GetQueueUrlInput {
        queue_name: params.required_string("QueueName", &params.f.queue_name)?,
        queue_owner_account_id: params
            .string(
                "QueueOwnerAWSAccountId",
                &params.f.queue_owner_aws_account_id,
            )?
            .filter(|id| !id.is_empty()),
    })
}

fn list_queues(params: &P<'_, '_>) -> SqsResult<ListQueuesInput> {
    Ok(ListQueuesInput {
        queue_name_prefix: params.string("QueueNamePrefix", &params.f.queue_name_prefix)?,
        max_results: params.integer("MaxResults", &params.f.max_results)?,
        next_token: params
            .string("NextToken", &params.f.next_token)?
            .filter(|t| !t.is_empty()),
    })
}

fn get_queue_attributes(params: &P<'_, '_>) -> SqsResult<GetQueueAttributesInput> {
    Ok(GetQueueAttributesInput {
        target: params.target()?,
        attribute_names: params.string_list("AttributeNames", &params.f.attribute_names)?,
    })
}

fn set_queue_attributes(params: &P<'_, '_>) -> SqsResult<SetQueueAttributesInput> {
    Ok(SetQueueAttributesInput {
        target: params.target()?,
        attributes: params.string_map("Attributes", &params.f.attributes)?,
    })
}

fn send_message(params: &P<'_, '_>) -> SqsResult<SendMessageInput> {
    Ok(SendMessageInput {
        target: params.target()?,
        message: params.message()?,
    })
}

fn send_message_batch(params: &P<'_, '_>) -> SqsResult<SendMessageBatchInput> {
    Ok(SendMessageBatchInput {
        target: params.target()?,
        entries: params.entries(|entry| {
            Ok(SendMessageBatchEntry {
                id: entry.entry_id()?,
                message: entry.message()?,
            })
        })?,
    })
}

/// `AttributeNames` (legacy) and `MessageSystemAttributeNames` both name system attributes; they are merged.
fn receive_message(params: &P<'_, '_>) -> SqsResult<ReceiveMessageInput> {
    let mut system_attribute_names =
        params.string_list("AttributeNames", &params.f.attribute_names)?;
    system_attribute_names.extend(params.string_list(
        "MessageSystemAttributeNames",
        &params.f.message_system_attribute_names,
    )?);
    Ok(ReceiveMessageInput {
        target: params.target()?,
        max_number_of_messages: params
            .integer("MaxNumberOfMessages", &params.f.max_number_of_messages)?,
        visibility_timeout: params.integer("VisibilityTimeout", &params.f.visibility_timeout)?,
        wait_time_seconds: params.integer("WaitTimeSeconds", &params.f.wait_time_seconds)?,
        system_attribute_names,
        message_attribute_names: params
            .string_list("MessageAttributeNames", &params.f.message_attribute_names)?,
        receive_request_attempt_id: params.string(
            "ReceiveRequestAttemptId",
            &params.f.receive_request_attempt_id,
        )?,
    })
}

fn delete_message(params: &P<'_, '_>) -> SqsResult<DeleteMessageInput> {
    Ok(DeleteMessageInput {
        target: params.target()?,
        receipt_handle: params.required_string("ReceiptHandle", &params.f.receipt_handle)?,
    })
}

fn delete_message_batch(params: &P<'_, '_>) -> SqsResult<DeleteMessageBatchInput> {
    Ok(DeleteMessageBatchInput {
        target: params.target()?,
        entries: params.entries(|entry| {
            Ok(DeleteMessageBatchEntry {
                id: entry.entry_id()?,
                receipt_handle: entry.required_string("ReceiptHandle", &entry.f.receipt_handle)?,
            })
        })?,
    })
}

fn change_message_visibility(params: &P<'_, '_>) -> SqsResult<ChangeMessageVisibilityInput> {
    Ok(ChangeMessageVisibilityInput {
        target: params.target()?,
        receipt_handle: params.required_string("ReceiptHandle", &params.f.receipt_handle)?,
        visibility_timeout: params
            .required_integer("VisibilityTimeout", &params.f.visibility_timeout)?,
    })
}

fn change_message_visibility_batch(
    params: &P<'_, '_>,
) -> SqsResult<ChangeMessageVisibilityBatchInput> {
    Ok(ChangeMessageVisibilityBatchInput {
        target: params.target()?,
        entries: params.entries(|entry| {
            Ok(ChangeMessageVisibilityBatchEntry {
                id: entry.entry_id()?,
                receipt_handle: entry.required_string("ReceiptHandle", &entry.f.receipt_handle)?,
                visibility_timeout: entry
                    .integer("VisibilityTimeout", &entry.f.visibility_timeout)?,
            })
        })?,
    })
}

fn tag_queue(params: &P<'_, '_>) -> SqsResult<TagQueueInput> {
    Ok(TagQueueInput {
        target: params.target()?,
        tags: params.string_map("Tags", &params.f.tags)?,
    })
}

fn untag_queue(params: &P<'_, '_>) -> SqsResult<UntagQueueInput> {
    Ok(UntagQueueInput {
        target: params.target()?,
        tag_keys: params.string_list("TagKeys", &params.f.tag_keys)?,
    })
}

fn list_dead_letter_source_queues(
    params: &P<'_, '_>,
) -> SqsResult<ListDeadLetterSourceQueuesInput> {
    Ok(ListDeadLetterSourceQueuesInput {
        target: params.target()?,
        max_results: params.integer("MaxResults", &params.f.max_results)?,
        next_token: params
            .string("NextToken", &params.f.next_token)?
            .filter(|t| !t.is_empty()),
    })
}

/// SQS checks AddPermission's lists for presence here: an absent account list is a missing `PrincipalId` (the
/// name AWS gives it in this answer, per Eucalyptus's AWS-compatible SQS, which notes it uses AWS's exact
/// message), while an empty one is left to the service, which answers it as an account it cannot verify; no
/// actions, absent or empty, is a missing `Actions` (moto's `test_add_permission_errors`).
fn add_permission(params: &P<'_, '_>) -> SqsResult<AddPermissionInput> {
    let target = params.target()?;
    let label = params.required_string("Label", &params.f.label)?;
    if matches!(params.f.aws_account_ids, Shaped::Null) {
        return Err(SqsError::missing("PrincipalId"));
    }
    let aws_account_ids = params.string_list("AWSAccountIds", &params.f.aws_account_ids)?;
    let actions = params.string_list("Actions", &params.f.actions)?;
    if actions.is_empty() {
        return Err(SqsError::missing("Actions"));
    }
    Ok(AddPermissionInput {
        target,
        label,
        aws_account_ids,
        actions,
    })
}

fn remove_permission(params: &P<'_, '_>) -> SqsResult<RemovePermissionInput> {
    Ok(RemovePermissionInput {
        target: params.target()?,
        label: params.required_string("Label", &params.f.label)?,
    })
}

/// A move-task parameter that must be present; an empty value is present (the handler answers it as a
/// malformed ARN or handle, as SQS does), unlike `required_string`.
fn present_string(params: &P<'_, '_>, name: &str, value: &Scalar<'_>) -> SqsResult<String> {
    params
        .string(name, value)?
        .ok_or_else(|| SqsError::missing(&params.full_name(name)))
}

fn start_message_move_task(params: &P<'_, '_>) -> SqsResult<StartMessageMoveTaskInput> {
    Ok(StartMessageMoveTaskInput {
        source_arn: present_string(params, "SourceArn", &params.f.source_arn)?,
        destination_arn: params.string("DestinationArn", &params.f.destination_arn)?,
        max_number_of_messages_per_second: params.integer(
            "MaxNumberOfMessagesPerSecond",
            &params.f.max_number_of_messages_per_second,
        )?,
    })
}

fn list_message_move_tasks(params: &P<'_, '_>) -> SqsResult<ListMessageMoveTasksInput> {
    Ok(ListMessageMoveTasksInput {
        source_arn: present_string(params, "SourceArn", &params.f.source_arn)?,
        max_results: params.integer("MaxResults", &params.f.max_results)?,
    })
}

fn cancel_message_move_task(params: &P<'_, '_>) -> SqsResult<CancelMessageMoveTaskInput> {
    Ok(CancelMessageMoveTaskInput {
        task_handle: present_string(params, "TaskHandle", &params.f.task_handle)?,
    })
}
