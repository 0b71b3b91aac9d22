//! Codec tests on raw bytes for what FIFO queues add to the wire: `MessageGroupId` and
//! `MessageDeduplicationId` on sends and batch entries, `ReceiveRequestAttemptId` on receives (both protocols),
//! and `SequenceNumber` in send answers (JSON members and Query elements, in botocore's member order).

use serde_json::Value;

use super::*;
use crate::api::*;
use crate::error::SqsError;

fn json_action(action: &str, body: &str) -> Result<Action, SqsError> {
    let target = format!("AmazonSQS.{action}");
    decode(&HttpRequestParts {
        method: "POST",
        query: None,
        target: Some(&target),
        body: body.as_bytes(),
    })
    .1
    .map(|request| request.action)
}

fn query_action(form: &str) -> Result<Action, SqsError> {
    decode(&HttpRequestParts {
        method: "POST",
        query: None,
        target: None,
        body: form.as_bytes(),
    })
    .1
    .map(|request| request.action)
}

fn fifo_fields(message: &MessageInput) -> (Option<&str>, Option<&str>) {
    (
        message.group_id.as_deref(),
        message.deduplication_id.as_deref(),
    )
}

#[test]
fn send_message_reads_the_group_and_deduplication_ids_in_both_protocols() {
    let json = json_action(
        "SendMessage",
        r#"{"QueueUrl":"u","MessageBody":"b","MessageGroupId":"g-1","MessageDeduplicationId":"d.1"}"#,
    )
    .unwrap();
    let query = query_action(
        "Action=SendMessage&QueueUrl=u&MessageBody=b&MessageGroupId=g-1&MessageDeduplicationId=d.1",
    )
    .unwrap();
    for action in [json, query] {
        let Action::SendMessage(input) = action else {
            panic!("{action:?}")
        };
        assert_eq!(fifo_fields(&input.message), (Some("g-1"), Some("d.1")));
    }
}

#[test]
fn an_empty_group_id_is_given_not_absent() {
    let Action::SendMessage(input) = json_action(
        "SendMessage",
        r#"{"QueueUrl":"u","MessageBody":"b","MessageGroupId":""}"#,
    )
    .unwrap() else {
        panic!()
    };
    assert_eq!(fifo_fields(&input.message), (Some(""), None));
}

#[test]
fn send_message_batch_entries_carry_their_own_fifo_ids_in_both_protocols() {
    let json = json_action(
        "SendMessageBatch",
        r#"{"QueueUrl":"u","Entries":[
            {"Id":"a","MessageBody":"1","MessageGroupId":"g","MessageDeduplicationId":"x"},
            {"Id":"b","MessageBody":"2","MessageGroupId":"h"}]}"#,
    )
    .unwrap();
    let query = query_action(
        "Action=SendMessageBatch&QueueUrl=u\
         &SendMessageBatchRequestEntry.2.Id=b&SendMessageBatchRequestEntry.2.MessageBody=2\
         &SendMessageBatchRequestEntry.2.MessageGroupId=h\
         &SendMessageBatchRequestEntry.1.Id=a&SendMessageBatchRequestEntry.1.MessageBody=1\
         &SendMessageBatchRequestEntry.1.MessageGroupId=g\
         &SendMessageBatchRequestEntry.1.MessageDeduplicationId=x",
    )
    .unwrap();
    for action in [json, query] {
        let Action::SendMessageBatch(input) = action else {
            panic!("{action:?}")
        };
        let fields: Vec<_> = input
            .entries
            .iter()
            .map(|entry| fifo_fields(&entry.message))
            .collect();
        assert_eq!(fields, [(Some("g"), Some("x")), (Some("h"), None)]);
    }
}

#[test]
fn receive_message_reads_the_attempt_id_in_both_protocols() {
    let json = json_action(
        "ReceiveMessage",
        r#"{"QueueUrl":"u","ReceiveRequestAttemptId":"try-1",
            "MessageSystemAttributeNames":["SequenceNumber","MessageGroupId"]}"#,
    )
    .unwrap();
    let query = query_action(
        "Action=ReceiveMessage&QueueUrl=u&ReceiveRequestAttemptId=try-1\
         &MessageSystemAttributeName.1=SequenceNumber&MessageSystemAttributeName.2=MessageGroupId",
    )
    .unwrap();
    for action in [json, query] {
        let Action::ReceiveMessage(input) = action else {
            panic!("{action:?}")
        };
        assert_eq!(input.receive_request_attempt_id.as_deref(), Some("try-1"));
        assert_eq!(
            input.system_attribute_names,
            ["SequenceNumber", "MessageGroupId"]
        );
    }
    let Action::ReceiveMessage(plain) =
        json_action("ReceiveMessage", r#"{"QueueUrl":"u"}"#).unwrap()
    else {
        panic!()
    };
    assert_eq!(plain.receive_request_attempt_id, None);
}

fn sent(sequence_number: Option<&str>) -> SentMessageResult {
    SentMessageResult {
        id: "e1".into(),
        message_id: "m-1".into(),
        md5_of_message_body: "md5".into(),
        sequence_number: sequence_number.map(str::to_string),
        ..Default::default()
    }
}

#[test]
fn json_send_answers_carry_the_sequence_number_only_when_there_is_one() {
    let encode = |action, output: &Output| -> Value {
        serde_json::from_slice(&json::encode_output(action, output).unwrap()).unwrap()
    };
    let fifo = encode(
        ActionName::SendMessage,
        &Output::SendMessage(sent(Some("10000000000000000007"))),
    );
    assert_eq!(fifo["SequenceNumber"], "10000000000000000007");
    let standard = encode(ActionName::SendMessage, &Output::SendMessage(sent(None)));
    assert_eq!(standard.get("SequenceNumber"), None);
    let batch = encode(
        ActionName::SendMessageBatch,
        &Output::SendMessageBatch {
            successful: vec![sent(Some("10000000000000000008"))],
            failed: Vec::new(),
        },
    );
    assert_eq!(
        batch["Successful"][0]["SequenceNumber"],
        Value::from("10000000000000000008")
    );
}

#[test]
fn query_send_answers_end_with_the_sequence_number() {
    let body = |action, output| {
        String::from_utf8(query::encode_output(action, &output, "req").body).unwrap()
    };
    let single = body(
        ActionName::SendMessage,
        Output::SendMessage(sent(Some("10000000000000000007"))),
    );
    assert!(
        single.contains(
            "<SendMessageResult><MessageId>m-1</MessageId><MD5OfMessageBody>md5</MD5OfMessageBody>\
             <SequenceNumber>10000000000000000007</SequenceNumber></SendMessageResult>"
        ),
        "{single}"
    );
    let batch = body(
        ActionName::SendMessageBatch,
        Output::SendMessageBatch {
            successful: vec![sent(Some("10000000000000000008"))],
            failed: Vec::new(),
        },
    );
    assert!(
        batch.contains(
            "<SendMessageBatchResultEntry><Id>e1</Id><MessageId>m-1</MessageId>\
             <MD5OfMessageBody>md5</MD5OfMessageBody><SequenceNumber>10000000000000000008</SequenceNumber>\
             </SendMessageBatchResultEntry>"
        ),
        "{batch}"
    );
    let standard = body(ActionName::SendMessage, Output::SendMessage(sent(None)));
    assert!(!standard.contains("SequenceNumber"), "{standard}");
}
