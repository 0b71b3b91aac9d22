//! The single-message actions: SendMessage, ReceiveMessage, DeleteMessage and ChangeMessageVisibility, and
//! what the batch actions share with them — building a message to send and the visibility change. The
//! engine decides visibility (ARCHITECTURE.md); these handlers validate SQS's limits and pass durations.

use bytes::Bytes;
use veil_core::limits::SECOND_MS;
use veil_core::{
    AttributeData, AttributeValue, Attributes, Message, MessageState, NewMessage, Payload,
    QueueKey, ReceiveOptions, SentMessage, VisibilityChange,
};

use super::{engine_error, receipt_error, RequestContext, Service};
use crate::api::{
    ChangeMessageVisibilityInput, DeleteMessageInput, MessageInput, Output, ReceiveMessageInput,
    ReceivedMessage, SendMessageInput, SentMessageResult,
};
use crate::error::{SqsError, SqsResult};
use crate::fifo;
use crate::limits;
use crate::md5::{hex, md5_of_attributes, md5_of_body};
use crate::validate;

/// Engine attribute key under which the `AWSTraceHeader` system attribute is kept. User attribute names may
/// not start with `AWS.`, so it never collides with one, and it is never shown as a user attribute.
const TRACE_HEADER_KEY: &str = "AWS.SQS.AWSTraceHeader";
/// Engine attribute keys with this prefix belong to SQS itself, not to the user.
const RESERVED_ATTRIBUTE_PREFIX: &str = "AWS.";

/// A message ready to send, with the digests its answer reports.
pub(super) struct PreparedMessage {
    pub(super) message: NewMessage,
    pub(super) md5_of_attributes: Option<String>,
    pub(super) md5_of_system_attributes: Option<String>,
}

impl Service {
    pub(super) async fn send_message(
        &self,
        context: &RequestContext,
        input: SendMessageInput,
    ) -> SqsResult<Output> {
        let key = self.queue_key(context, &input.target)?;
        let fifo = fifo::is_fifo_name(&key.name);
        let prepared = self.prepare_message(context, input.message, fifo)?;
        // One engine call: the queue's own rules travel with the send. A message over the queue's size limit
        // (`MessageTooLarge`), a FIFO message without a group, or without a deduplication id on a queue that
        // does not deduplicate by content (`GroupRequired` first, then `DedupIdRequired`), is refused by the
        // engine, which `engine_error` answers with AWS's code and text for SendMessage.
        let sent = self
            .engine
            .send(&key, vec![prepared.message])
            .await
            .map_err(engine_error)?;
        let sent = sent
            .first()
            .ok_or_else(|| SqsError::internal("the engine returned no sent message"))?;
        Ok(Output::SendMessage(sent_result(
            String::new(),
            sent,
            fifo,
            prepared.md5_of_attributes,
            prepared.md5_of_system_attributes,
        )))
    }

    /// Checks one message (body, delay, attributes, the FIFO ids and what the queue's type allows) and
    /// builds it, its size measured as SQS counts it. The queue's size limit is the engine's to apply, in the
    /// send itself (SendMessage and SendMessageBatch word its refusal differently). Whether a FIFO message
    /// names its group is left to the caller: SendMessage and SendMessageBatch answer its absence differently.
    pub(super) fn prepare_message(
        &self,
        context: &RequestContext,
        input: MessageInput,
        fifo: bool,
    ) -> SqsResult<PreparedMessage> {
        let body = input
            .body
            .filter(|body| !body.is_empty())
            .ok_or_else(|| SqsError::missing("MessageBody"))?;
        validate::message_contents(&body)?;
        let delay_seconds = input
            .delay_seconds
            .map(|s| validate::in_range("DelaySeconds", s, 0, limits::DELAY_S_MAX))
            .transpose()?;
        let (mut attributes, attributes_bytes) =
            validate::message_attributes(&input.message_attributes)?;
        let trace_header = validate::system_attributes(&input.system_attributes)?;
        check_fifo_fields(
            &input.deduplication_id,
            &input.group_id,
            delay_seconds,
            fifo,
        )?;
        let md5_of_attributes = md5_of_attributes(&attributes);
        let md5_of_system_attributes = trace_header
            .as_ref()
            .and_then(|value| md5_of_attributes_of(validate::TRACE_HEADER, value.clone()));
        // The size the engine compares with the queue's limit counts the kept trace header too (SQS's rule,
        // `validate::attribute_size`), as it did when the engine counted it.
        let mut size_bytes = body.len() as u64 + attributes_bytes;
        if let Some(value) = trace_header {
            size_bytes += validate::attribute_size(TRACE_HEADER_KEY, &value);
            attributes.insert(TRACE_HEADER_KEY.to_string(), value);
        }
        Ok(PreparedMessage {
            md5_of_attributes,
            md5_of_system_attributes,
            message: NewMessage {
                body: Bytes::from(body),
                attributes,
                size_bytes: usize::try_from(size_bytes).unwrap_or(usize::MAX),
                delay_ms: delay_seconds.map(|s| s * SECOND_MS),
                ttl: None,
                sender_id: context.sender_id.clone(),
                redrive: None,
                moved_from: None,
                group: input.group_id,
                dedup_id: input.deduplication_id,
            },
        })
    }

    pub(super) async fn receive_message(
        &self,
        context: &RequestContext,
        input: ReceiveMessageInput,
    ) -> SqsResult<Output> {
        // The parameters are checked before the queue is looked up, as SQS does.
        let options = ReceiveOptions {
            consumer: Some(context.consumer.clone()),
            ..receive_options(&input)?
        };
        let key = self.queue_key(context, &input.target)?;
        let fifo = fifo::is_fifo_name(&key.name);
        let messages = self
            .engine
            .receive(&key, options)
            .await
            .map_err(engine_error)?;
        Ok(Output::ReceiveMessage(
            messages
                .into_iter()
                .map(|message| self.render_message(context, &input, message, fifo))
                .collect(),
        ))
    }

    /// A delivered message as SQS shows it: the body as UTF-8, the requested system attributes (a FIFO
    /// queue's, `fifo`, include its sequence number), and the requested user attributes with their digest.
    fn render_message(
        &self,
        context: &RequestContext,
        input: &ReceiveMessageInput,
        message: Message,
        fifo: bool,
    ) -> ReceivedMessage {
        let message_id = message.message_id_string();
        let Message {
            seq,
            mut payload,
            state,
            receipt,
            ..
        } = message;
        let (body, md5_of_message_body) =
            shown_body(std::mem::take(&mut payload.body), &payload.body_md5);
        let shown = Shown {
            payload: &payload,
            state: &state,
            sequence_number: fifo.then(|| fifo::sequence_number(seq)),
        };
        let system = self.system_attributes(context, &input.system_attribute_names, &shown);
        let message_attributes: Attributes = payload
            .attributes
            .into_iter()
            .filter(|(name, _)| !name.starts_with(RESERVED_ATTRIBUTE_PREFIX))
            .filter(|(name, _)| {
                validate::message_attribute_selected(&input.message_attribute_names, name)
            })
            .map(shown_attribute)
            .collect();
        ReceivedMessage {
            message_id,
            receipt_handle: receipt.unwrap_or_default(),
            md5_of_body: md5_of_message_body,
            body,
            attributes: system,
            md5_of_message_attributes: md5_of_attributes(&message_attributes),
            message_attributes,
        }
    }

    /// The system attributes a receive asked for (`All` or by name), in SQS's order (botocore's
    /// `MessageSystemAttributeName`, except that the source ARN precedes the trace header); those a message
    /// does not have (a source ARN, a trace header, a group, a FIFO queue's sequence number and deduplication
    /// id) are left out.
    fn system_attributes(
        &self,
        context: &RequestContext,
        names: &[String],
        shown: &Shown<'_>,
    ) -> Vec<(String, String)> {
        let Shown { payload, state, .. } = *shown;
        let wants = |attribute: &str| names.iter().any(|n| n == "All" || n == attribute);
        let mut system = Vec::new();
        if wants("SenderId") {
            // A KubeMQ sender's client id is any string; shown with the body's character rule.
            let sender = veil_xml::xml_chars(&payload.sender_id).into_owned();
            system.push(("SenderId".to_string(), sender));
        }
        if wants("SentTimestamp") {
            system.push(("SentTimestamp".to_string(), payload.sent_at.to_string()));
        }
        if wants("ApproximateReceiveCount") {
            system.push((
                "ApproximateReceiveCount".to_string(),
                state.receive_count.to_string(),
            ));
        }
        if wants("ApproximateFirstReceiveTimestamp") {
            system.push((
                "ApproximateFirstReceiveTimestamp".to_string(),
                state.first_received_at.to_string(),
            ));
        }
        // A FIFO queue's message shows its sequence number and the deduplication id it was compared by (the
        // sender's, or the body's SHA-256); a group is shown on any queue that was given one (AWS's fair
        // queues show it on standard queues: LocalStack's AWS-recorded `test_fair_queue_with_message_group_id`).
        let fifo_fields = [
            ("SequenceNumber", shown.sequence_number.as_ref()),
            ("MessageDeduplicationId", payload.dedup_id.as_ref()),
            ("MessageGroupId", payload.group.as_ref()),
        ];
        for (name, value) in fifo_fields {
            if let Some(value) = value.filter(|_| wants(name)) {
                system.push((name.to_string(), value.clone()));
            }
        }
        if wants("DeadLetterQueueSourceArn") {
            if let Some(source) = payload.dead_letter_source() {
                system.push((
                    "DeadLetterQueueSourceArn".to_string(),
                    self.arn(context, source),
                ));
            }
        }
        if wants(validate::TRACE_HEADER) {
            if let Some(AttributeValue {
                value: AttributeData::String(trace),
                ..
            }) = payload.attributes.get(TRACE_HEADER_KEY)
            {
                system.push((validate::TRACE_HEADER.to_string(), trace.clone()));
            }
        }
        system
    }

    pub(super) async fn delete_message(
        &self,
        context: &RequestContext,
        input: DeleteMessageInput,
    ) -> SqsResult<Output> {
        let key = self.queue_key(context, &input.target)?;
        self.engine
            .delete(&key, &input.receipt_handle, fifo::receipt_rule(&key.name))
            .await
            .map_err(|e| receipt_error(e, &input.receipt_handle, None))?;
        Ok(Output::Empty)
    }

    pub(super) async fn change_message_visibility(
        &self,
        context: &RequestContext,
        input: ChangeMessageVisibilityInput,
    ) -> SqsResult<Output> {
        let key = self.queue_key(context, &input.target)?;
        let (seconds, change) = visibility_change(Some(input.visibility_timeout), &key)?;
        self.engine
            .change_visibility(&key, &input.receipt_handle, change)
            .await
            .map_err(|e| receipt_error(e, &input.receipt_handle, Some(seconds)))?;
        Ok(Output::Empty)
    }
}

/// ReceiveMessage's parameters checked against SQS's ranges and turned into the engine's options. The
/// attempt id is checked on any queue and passed on; the engine uses it on FIFO queues only, as AWS does.
fn receive_options(input: &ReceiveMessageInput) -> SqsResult<ReceiveOptions> {
    let max_messages = match input.max_number_of_messages {
        None => 1,
        Some(n) => usize::try_from(n)
            .ok()
            .filter(|n| (1..=limits::RECEIVE_MESSAGES_MAX as usize).contains(n))
            .ok_or_else(|| {
                SqsError::invalid_value(
                    "MaxNumberOfMessages",
                    n,
                    &format!(
                        "Must be between 1 and {}, if provided.",
                        limits::RECEIVE_MESSAGES_MAX
                    ),
                )
            })?,
    };
    let visibility_ms = input
        .visibility_timeout
        .map(|s| validate::in_range("VisibilityTimeout", s, 0, limits::VISIBILITY_TIMEOUT_S_MAX))
        .transpose()?
        .map(|s| s * SECOND_MS);
    let wait_ms = input
        .wait_time_seconds
        .map(|s| validate::in_range("WaitTimeSeconds", s, 0, limits::RECEIVE_WAIT_S_MAX))
        .transpose()?
        .map(|s| s * SECOND_MS);
    if let Some(attempt_id) = &input.receive_request_attempt_id {
        validate::fifo_id("ReceiveRequestAttemptId", attempt_id)?;
    }
    Ok(ReceiveOptions {
        dead_letter: veil_core::DeadLetterTiming::OnReceive,
        max_messages,
        visibility_ms,
        wait_ms,
        attempt_id: input.receive_request_attempt_id.clone(),
        consumer: None,
    })
}

/// The body as SQS shows it, with its digest. The stored digest is of the bytes; a body sent by another
/// protocol that is not UTF-8, or holds characters SQS refuses in a body (XML 1.0's rule: a NUL, another C0
/// control, U+FFFE, U+FFFF), is shown with U+FFFD for each byte that is not UTF-8 and each such character
/// (docs/semantics.md §7), in JSON and Query alike, and its digest must then be of what is shown for the
/// client's check to pass. The common case takes the bytes as they are: std's UTF-8 check (word at a time
/// over ASCII), the character check (vectorized, veil-xml) and no copy where the buffer is the body's own;
/// the lossy decoder, ~7 instructions a byte (docs/benchmarks.md), only for a body that fails them.
fn shown_body(body: Bytes, body_md5: &[u8; 16]) -> (String, String) {
    let shown = match String::from_utf8(Vec::from(body)) {
        Ok(text) if veil_xml::is_xml_text(&text) => return (text, hex(body_md5)),
        Ok(text) => veil_xml::xml_chars(&text).into_owned(),
        Err(not_utf8) => {
            veil_xml::xml_chars(&String::from_utf8_lossy(not_utf8.as_bytes())).into_owned()
        }
    };
    let digest = md5_of_body(shown.as_bytes());
    (shown, digest)
}

/// A message attribute as SQS shows it: a KubeMQ tag's name and text may hold characters SQS refuses, shown
/// as U+FFFD like a body's ([`shown_body`]), so that the attributes' digest is of what is shown.
fn shown_attribute((name, mut attribute): (String, AttributeValue)) -> (String, AttributeValue) {
    if let AttributeData::String(text) = &mut attribute.value {
        if !veil_xml::is_xml_text(text) {
            *text = veil_xml::xml_chars(text).into_owned();
        }
    }
    if veil_xml::is_xml_text(&name) {
        (name, attribute)
    } else {
        (veil_xml::xml_chars(&name).into_owned(), attribute)
    }
}

/// Validates a VisibilityTimeout and turns it into the engine's change of a message of the queue `key` (12 h
/// cap from the receive; the receipts the queue's type honours).
pub(super) fn visibility_change(
    visibility_timeout: Option<i64>,
    key: &QueueKey,
) -> SqsResult<(u64, VisibilityChange)> {
    let seconds = visibility_timeout.ok_or_else(|| SqsError::missing("VisibilityTimeout"))?;
    let seconds = validate::in_range(
        "VisibilityTimeout",
        seconds,
        0,
        limits::VISIBILITY_TIMEOUT_S_MAX,
    )?;
    let change = VisibilityChange {
        receipts: fifo::receipt_rule(&key.name),
        visibility_ms: seconds * SECOND_MS,
        since_receive_ms_max: Some(limits::VISIBILITY_TOTAL_MS_MAX),
        not_past_expiry: false,
    };
    Ok((seconds, change))
}

/// What a FIFO queue's sends must and must not carry (docs/semantics.md §SQS, "FIFO queues"), after the ids'
/// format (checked on every queue, deduplication id first, as AWS does): a FIFO message has no delay of its
/// own (AWS's text, "include" sic: LocalStack's AWS-recorded
/// `test_fifo_queue_send_message_with_delay_seconds_fails`; 0 is allowed), and a standard queue takes no
/// deduplication id (its group is kept and shown, AWS's fair queues).
fn check_fifo_fields(
    deduplication_id: &Option<String>,
    group_id: &Option<String>,
    delay_seconds: Option<u64>,
    fifo: bool,
) -> SqsResult<()> {
    if let Some(id) = deduplication_id {
        validate::fifo_id("MessageDeduplicationId", id)?;
    }
    if let Some(id) = group_id {
        validate::fifo_id("MessageGroupId", id)?;
    }
    match (fifo, delay_seconds, deduplication_id) {
        (true, Some(delay), _) if delay > 0 => Err(SqsError::invalid_value(
            "DelaySeconds",
            delay,
            "The request include parameter that is not valid for this queue type.",
        )),
        (false, _, Some(id)) => Err(SqsError::invalid_value(
            "MessageDeduplicationId",
            id,
            "The request includes a parameter that is not valid for this queue type.",
        )),
        _ => Ok(()),
    }
}

/// How SendMessage and each SendMessageBatch entry answer a message the engine accepted: a FIFO queue's
/// answer carries its `SequenceNumber` (a duplicate's is the first send's, as is its message id).
pub(super) fn sent_result(
    id: String,
    sent: &SentMessage,
    fifo: bool,
    md5_of_message_attributes: Option<String>,
    md5_of_message_system_attributes: Option<String>,
) -> SentMessageResult {
    SentMessageResult {
        id,
        message_id: veil_core::message_id_text(&sent.message_id),
        md5_of_message_body: hex(&sent.body_md5),
        md5_of_message_attributes,
        md5_of_message_system_attributes,
        sequence_number: fifo.then(|| fifo::sequence_number(sent.seq)),
    }
}

/// What a receive shows of one message beside its body.
struct Shown<'a> {
    payload: &'a Payload,
    state: &'a MessageState,
    /// A FIFO queue's messages only.
    sequence_number: Option<String>,
}

/// The digest of a single attribute map entry (used for `MD5OfMessageSystemAttributes`).
fn md5_of_attributes_of(name: &str, value: AttributeValue) -> Option<String> {
    md5_of_attributes(&Attributes::from([(name.to_string(), value)]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_foreign_body_is_shown_with_the_replacement_character_and_digested_as_shown() {
        let stored = b"a\x00b\x1fc\xef\xbf\xbfd\xffe\tf";
        let (shown, digest) = shown_body(Bytes::from_static(stored), &[0; 16]);
        assert_eq!(shown, "a\u{FFFD}b\u{FFFD}c\u{FFFD}d\u{FFFD}e\tf");
        assert_eq!(digest, md5_of_body(shown.as_bytes()));
        let (shown, digest) = shown_body(Bytes::from_static(b"plain\r\n"), &[7; 16]);
        assert_eq!((shown.as_str(), digest), ("plain\r\n", hex(&[7; 16])));
    }

    #[test]
    fn a_foreign_tag_is_shown_with_the_replacement_character() {
        let tag = AttributeValue {
            data_type: "String".into(),
            value: AttributeData::String("v\u{0}".into()),
        };
        let (name, shown) = shown_attribute(("k\u{1}".into(), tag));
        assert_eq!(name, "k\u{FFFD}");
        assert_eq!(shown.value, AttributeData::String("v\u{FFFD}".into()));
    }
}
