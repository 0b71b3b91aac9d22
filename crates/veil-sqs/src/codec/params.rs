//! Typed inputs from a parameter object. Both protocols converge here: the JSON protocol's body is such an object
//! already, and the Query codec rebuilds the same object from its flattened form fields. Query values are all
//! strings, so numbers are accepted as JSON numbers or as decimal strings.

use std::collections::BTreeMap;

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;
use serde_json::{Map, Value};

use crate::api::*;
use crate::error::{ErrorCode, SqsError, SqsResult};

/// A view of one parameter object. `context` prefixes names in error messages (`Entries.2.`), so that a
/// missing field of a batch entry says which entry.
pub(crate) struct Params<'a> {
    map: &'a Map<String, Value>,
    context: String,
}

fn type_error(name: &str, expected: &str) -> SqsError {
    SqsError::new(
        ErrorCode::Serialization,
        format!("Parameter {name} must be {expected}."),
    )
}

impl<'a> Params<'a> {
    pub(crate) fn new(map: &'a Map<String, Value>) -> Self {
        Self {
            map,
            context: String::new(),
        }
    }

    fn full_name(&self, name: &str) -> String {
        format!("{}{name}", self.context)
    }

    fn get(&self, name: &str) -> Option<&'a Value> {
        self.map.get(name).filter(|value| !value.is_null())
    }

    pub(crate) fn string(&self, name: &str) -> SqsResult<Option<String>> {
        match self.get(name) {
            None => Ok(None),
            Some(Value::String(text)) => Ok(Some(text.clone())),
            Some(_) => Err(type_error(&self.full_name(name), "a string")),
        }
    }

    /// A string that must be present and non-empty (SQS treats an empty required string as missing).
    pub(crate) fn required_string(&self, name: &str) -> SqsResult<String> {
        match self.string(name)? {
            Some(text) if !text.is_empty() => Ok(text),
            _ => Err(SqsError::missing(&self.full_name(name))),
        }
    }

    pub(crate) fn integer(&self, name: &str) -> SqsResult<Option<i64>> {
        let invalid = |shown: &dyn std::fmt::Display| {
            SqsError::invalid_value(&self.full_name(name), shown, "Must be an integer.")
        };
        match self.get(name) {
            None => Ok(None),
            Some(Value::Number(number)) => number.as_i64().map(Some).ok_or_else(|| invalid(number)),
            Some(Value::String(text)) => text
                .trim()
                .parse::<i64>()
                .map(Some)
                .map_err(|_| invalid(text)),
            Some(_) => Err(type_error(&self.full_name(name), "an integer")),
        }
    }

    pub(crate) fn required_integer(&self, name: &str) -> SqsResult<i64> {
        self.integer(name)?
            .ok_or_else(|| SqsError::missing(&self.full_name(name)))
    }

    pub(crate) fn string_list(&self, name: &str) -> SqsResult<Vec<String>> {
        match self.get(name) {
            None => Ok(Vec::new()),
            Some(Value::Array(items)) => items
                .iter()
                .map(|item| match item {
                    Value::String(text) => Ok(text.clone()),
                    _ => Err(type_error(&self.full_name(name), "a list of strings")),
                })
                .collect(),
            Some(_) => Err(type_error(&self.full_name(name), "a list of strings")),
        }
    }

    pub(crate) fn string_map(&self, name: &str) -> SqsResult<BTreeMap<String, String>> {
        match self.get(name) {
            None => Ok(BTreeMap::new()),
            Some(Value::Object(entries)) => entries
                .iter()
                .map(|(key, value)| match value {
                    Value::String(text) => Ok((key.clone(), text.clone())),
                    // Some clients send numeric attribute values unquoted; SQS's values are strings.
                    Value::Number(number) => Ok((key.clone(), number.to_string())),
                    Value::Bool(flag) => Ok((key.clone(), flag.to_string())),
                    _ => Err(type_error(&self.full_name(name), "a map of strings")),
                })
                .collect(),
            Some(_) => Err(type_error(&self.full_name(name), "a map of strings")),
        }
    }

    /// A list of objects (batch entries), each viewed with its position in error messages.
    pub(crate) fn object_list(&self, name: &str) -> SqsResult<Vec<Params<'a>>> {
        match self.get(name) {
            None => Ok(Vec::new()),
            Some(Value::Array(items)) => items
                .iter()
                .enumerate()
                .map(|(position, item)| match item {
                    Value::Object(map) => Ok(Params {
                        map,
                        context: format!("{}{name}.{}.", self.context, position + 1),
                    }),
                    _ => Err(type_error(&self.full_name(name), "a list of objects")),
                })
                .collect(),
            Some(_) => Err(type_error(&self.full_name(name), "a list of objects")),
        }
    }

    pub(crate) fn message_attributes(
        &self,
        name: &str,
    ) -> SqsResult<BTreeMap<String, MessageAttributeInput>> {
        let entries = match self.get(name) {
            None => return Ok(BTreeMap::new()),
            Some(Value::Object(entries)) => entries,
            Some(_) => {
                return Err(type_error(
                    &self.full_name(name),
                    "a map of attribute values",
                ))
            }
        };
        let mut attributes = BTreeMap::new();
        for (attribute_name, value) in entries {
            let Value::Object(fields) = value else {
                return Err(type_error(
                    &format!("{}.{attribute_name}", self.full_name(name)),
                    "an attribute value",
                ));
            };
            let field = Params {
                map: fields,
                context: format!("{}.{attribute_name}.", self.full_name(name)),
            };
            let binary_value = match field.string("BinaryValue")? {
                None => None,
                Some(encoded) => Some(BASE64.decode(encoded.trim()).map_err(|_| {
                    SqsError::invalid_value(
                        &field.full_name("BinaryValue"),
                        &encoded,
                        "Binary values must be base64-encoded.",
                    )
                })?),
            };
            let has_list_values = ["StringListValues", "BinaryListValues"].iter().any(
                |list| matches!(fields.get(*list), Some(Value::Array(items)) if !items.is_empty()),
            );
            attributes.insert(
                attribute_name.clone(),
                MessageAttributeInput {
                    data_type: field.string("DataType")?,
                    string_value: field.string("StringValue")?,
                    binary_value,
                    has_list_values,
                },
            );
        }
        Ok(attributes)
    }

    fn target(&self) -> SqsResult<QueueTarget> {
        Ok(QueueTarget {
            queue_url: self.string("QueueUrl")?.filter(|url| !url.is_empty()),
        })
    }

    fn message(&self) -> SqsResult<MessageInput> {
        Ok(MessageInput {
            body: self.string("MessageBody")?,
            delay_seconds: self.integer("DelaySeconds")?,
            message_attributes: self.message_attributes("MessageAttributes")?,
            system_attributes: self.message_attributes("MessageSystemAttributes")?,
            deduplication_id: self.string("MessageDeduplicationId")?,
            group_id: self.string("MessageGroupId")?,
        })
    }

    /// A batch entry's id. An empty or missing one is not a missing parameter: SQS answers it with
    /// `InvalidBatchEntryId` like any other bad id (moto's AWS-verified `test_send_message_batch_errors`),
    /// which `validate::batch_entry_ids` does.
    fn entry_id(&self) -> SqsResult<String> {
        Ok(self.string("Id")?.unwrap_or_default())
    }

    /// A batch action's `Entries`, each decoded by `decode` (which sees the entry's position in its errors).
    fn entries<T>(&self, decode: impl Fn(&Params<'a>) -> SqsResult<T>) -> SqsResult<Vec<T>> {
        self.object_list("Entries")?.iter().map(decode).collect()
    }
}

/// Builds the typed action from its parameters. The match stays exhaustive so that a new action cannot be
/// left without a decoder.
pub(crate) fn decode_action(name: ActionName, params: &Params<'_>) -> SqsResult<Action> {
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

fn create_queue(params: &Params<'_>) -> SqsResult<CreateQueueInput> {
    Ok(CreateQueueInput {
        queue_name: params.required_string("QueueName")?,
        attributes: params.string_map("Attributes")?,
        tags: params.string_map("tags")?,
    })
}

fn get_queue_url(params: &Params<'_>) -> SqsResult<GetQueueUrlInput> {
    Ok(GetQueueUrlInput {
        queue_name: params.required_string("QueueName")?,
        queue_owner_account_id: params
            .string("QueueOwnerAWSAccountId")?
            .filter(|id| !id.is_empty()),
    })
}

fn list_queues(params: &Params<'_>) -> SqsResult<ListQueuesInput> {
    Ok(ListQueuesInput {
        queue_name_prefix: params.string("QueueNamePrefix")?,
        max_results: params.integer("MaxResults")?,
        next_token: params.string("NextToken")?.filter(|t| !t.is_empty()),
    })
}

fn get_queue_attributes(params: &Params<'_>) -> SqsResult<GetQueueAttributesInput> {
    Ok(GetQueueAttributesInput {
        target: params.target()?,
        attribute_names: params.string_list("AttributeNames")?,
    })
}

fn set_queue_attributes(params: &Params<'_>) -> SqsResult<SetQueueAttributesInput> {
    Ok(SetQueueAttributesInput {
        target: params.target()?,
        attributes: params.string_map("Attributes")?,
    })
}

fn send_message(params: &Params<'_>) -> SqsResult<SendMessageInput> {
    Ok(SendMessageInput {
        target: params.target()?,
        message: params.message()?,
    })
}

fn send_message_batch(params: &Params<'_>) -> SqsResult<SendMessageBatchInput> {
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
fn receive_message(params: &Params<'_>) -> SqsResult<ReceiveMessageInput> {
    let mut system_attribute_names = params.string_list("AttributeNames")?;
    system_attribute_names.extend(params.string_list("MessageSystemAttributeNames")?);
    Ok(ReceiveMessageInput {
        target: params.target()?,
        max_number_of_messages: params.integer("MaxNumberOfMessages")?,
        visibility_timeout: params.integer("VisibilityTimeout")?,
        wait_time_seconds: params.integer("WaitTimeSeconds")?,
        system_attribute_names,
        message_attribute_names: params.string_list("MessageAttributeNames")?,
        receive_request_attempt_id: params.string("ReceiveRequestAttemptId")?,
    })
}

fn delete_message(params: &Params<'_>) -> SqsResult<DeleteMessageInput> {
    Ok(DeleteMessageInput {
        target: params.target()?,
        receipt_handle: params.required_string("ReceiptHandle")?,
    })
}

fn delete_message_batch(params: &Params<'_>) -> SqsResult<DeleteMessageBatchInput> {
    Ok(DeleteMessageBatchInput {
        target: params.target()?,
        entries: params.entries(|entry| {
            Ok(DeleteMessageBatchEntry {
                id: entry.entry_id()?,
                receipt_handle: entry.required_string("ReceiptHandle")?,
            })
        })?,
    })
}

fn change_message_visibility(params: &Params<'_>) -> SqsResult<ChangeMessageVisibilityInput> {
    Ok(ChangeMessageVisibilityInput {
        target: params.target()?,
        receipt_handle: params.required_string("ReceiptHandle")?,
        visibility_timeout: params.required_integer("VisibilityTimeout")?,
    })
}

fn change_message_visibility_batch(
    params: &Params<'_>,
) -> SqsResult<ChangeMessageVisibilityBatchInput> {
    Ok(ChangeMessageVisibilityBatchInput {
        target: params.target()?,
        entries: params.entries(|entry| {
            Ok(ChangeMessageVisibilityBatchEntry {
                id: entry.entry_id()?,
                receipt_handle: entry.required_string("ReceiptHandle")?,
                visibility_timeout: entry.integer("VisibilityTimeout")?,
            })
        })?,
    })
}

fn tag_queue(params: &Params<'_>) -> SqsResult<TagQueueInput> {
    Ok(TagQueueInput {
        target: params.target()?,
        tags: params.string_map("Tags")?,
    })
}

fn untag_queue(params: &Params<'_>) -> SqsResult<UntagQueueInput> {
    Ok(UntagQueueInput {
        target: params.target()?,
        tag_keys: params.string_list("TagKeys")?,
    })
}

fn list_dead_letter_source_queues(
    params: &Params<'_>,
) -> SqsResult<ListDeadLetterSourceQueuesInput> {
    Ok(ListDeadLetterSourceQueuesInput {
        target: params.target()?,
        max_results: params.integer("MaxResults")?,
        next_token: params.string("NextToken")?.filter(|t| !t.is_empty()),
    })
}

/// SQS checks AddPermission's lists for presence here: an absent account list is a missing `PrincipalId` (the
/// name AWS gives it in this answer, per Eucalyptus's AWS-compatible SQS, which notes it uses AWS's exact
/// message), while an empty one is left to the service, which answers it as an account it cannot verify; no
/// actions, absent or empty, is a missing `Actions` (moto's `test_add_permission_errors`).
fn add_permission(params: &Params<'_>) -> SqsResult<AddPermissionInput> {
    let target = params.target()?;
    let label = params.required_string("Label")?;
    if params.get("AWSAccountIds").is_none() {
        return Err(SqsError::missing("PrincipalId"));
    }
    let aws_account_ids = params.string_list("AWSAccountIds")?;
    let actions = params.string_list("Actions")?;
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

fn remove_permission(params: &Params<'_>) -> SqsResult<RemovePermissionInput> {
    Ok(RemovePermissionInput {
        target: params.target()?,
        label: params.required_string("Label")?,
    })
}

/// A move-task parameter that must be present; an empty value is present (the handler answers it as a
/// malformed ARN or handle, as SQS does), unlike `required_string`.
fn present_string(params: &Params<'_>, name: &str) -> SqsResult<String> {
    params
        .string(name)?
        .ok_or_else(|| SqsError::missing(&params.full_name(name)))
}

fn start_message_move_task(params: &Params<'_>) -> SqsResult<StartMessageMoveTaskInput> {
    Ok(StartMessageMoveTaskInput {
        source_arn: present_string(params, "SourceArn")?,
        destination_arn: params.string("DestinationArn")?,
        max_number_of_messages_per_second: params.integer("MaxNumberOfMessagesPerSecond")?,
    })
}

fn list_message_move_tasks(params: &Params<'_>) -> SqsResult<ListMessageMoveTasksInput> {
    Ok(ListMessageMoveTasksInput {
        source_arn: present_string(params, "SourceArn")?,
        max_results: params.integer("MaxResults")?,
    })
}

fn cancel_message_move_task(params: &Params<'_>) -> SqsResult<CancelMessageMoveTaskInput> {
    Ok(CancelMessageMoveTaskInput {
        task_handle: present_string(params, "TaskHandle")?,
    })
}
