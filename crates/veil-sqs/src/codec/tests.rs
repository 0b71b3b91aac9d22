//! Codec tests on raw bytes: every action's main shape in both protocols, and the error and output encodings.

use std::collections::BTreeMap;

use serde_json::Value;
use veil_core::{AttributeData, AttributeValue, Attributes};

use super::*;
use crate::api::*;
use crate::error::{ErrorCode, SqsError};

fn json_action(action: &str, body: &str) -> Result<Action, SqsError> {
    let target = format!("AmazonSQS.{action}");
    let (protocol, decoded) = decode(&HttpRequestParts {
        method: "POST",
        query: None,
        target: Some(&target),
        body: body.as_bytes(),
    });
    assert_eq!(protocol, Protocol::Json);
    decoded.map(|request| request.action)
}

fn query_action(form: &str) -> Result<Action, SqsError> {
    let (protocol, decoded) = decode(&HttpRequestParts {
        method: "POST",
        query: None,
        target: None,
        body: form.as_bytes(),
    });
    assert_eq!(protocol, Protocol::Query);
    decoded.map(|request| request.action)
}

fn url() -> Option<String> {
    Some("http://localhost:9324/000000000000/q".into())
}

fn string_attribute(data_type: &str, value: &str) -> MessageAttributeInput {
    MessageAttributeInput {
        data_type: Some(data_type.into()),
        string_value: Some(value.into()),
        ..Default::default()
    }
}

#[test]
fn json_send_message_decodes_body_delay_and_attributes() {
    let action = json_action(
        "SendMessage",
        r#"{"QueueUrl":"http://localhost:9324/000000000000/q","MessageBody":"hi","DelaySeconds":5,
            "MessageAttributes":{"a":{"DataType":"String","StringValue":"x"},
                                 "b":{"DataType":"Binary","BinaryValue":"AAEC"}}}"#,
    )
    .unwrap();
    let Action::SendMessage(input) = action else {
        panic!("{action:?}")
    };
    assert_eq!(input.target.queue_url, url());
    assert_eq!(input.message.body.as_deref(), Some("hi"));
    assert_eq!(input.message.delay_seconds, Some(5));
    assert_eq!(
        input.message.message_attributes["a"],
        string_attribute("String", "x")
    );
    assert_eq!(
        input.message.message_attributes["b"].binary_value,
        Some(vec![0, 1, 2])
    );
}

#[test]
fn json_receive_message_merges_both_attribute_name_lists() {
    let action = json_action(
        "ReceiveMessage",
        r#"{"QueueUrl":"u","MaxNumberOfMessages":10,"WaitTimeSeconds":2,"VisibilityTimeout":0,
            "AttributeNames":["SentTimestamp"],"MessageSystemAttributeNames":["All"],
            "MessageAttributeNames":["foo.*"]}"#,
    )
    .unwrap();
    assert_eq!(
        action,
        Action::ReceiveMessage(ReceiveMessageInput {
            target: QueueTarget {
                queue_url: Some("u".into())
            },
            max_number_of_messages: Some(10),
            visibility_timeout: Some(0),
            wait_time_seconds: Some(2),
            system_attribute_names: vec!["SentTimestamp".into(), "All".into()],
            message_attribute_names: vec!["foo.*".into()],
            receive_request_attempt_id: None,
        })
    );
}

#[test]
fn json_batches_decode_every_entry() {
    let action = json_action(
        "DeleteMessageBatch",
        r#"{"QueueUrl":"u","Entries":[{"Id":"a","ReceiptHandle":"r1"},{"Id":"b","ReceiptHandle":"r2"}]}"#,
    )
    .unwrap();
    let Action::DeleteMessageBatch(input) = action else {
        panic!()
    };
    assert_eq!(input.entries.len(), 2);
    assert_eq!(input.entries[1].receipt_handle, "r2");
    let missing = json_action(
        "ChangeMessageVisibilityBatch",
        r#"{"QueueUrl":"u","Entries":[{"Id":"a"}]}"#,
    )
    .unwrap_err();
    assert_eq!(missing.code, ErrorCode::MissingParameter);
    assert!(
        missing.message.contains("Entries.1.ReceiptHandle"),
        "{}",
        missing.message
    );
}

#[test]
fn json_create_queue_reads_attributes_and_lowercase_tags() {
    let action = json_action(
        "CreateQueue",
        r#"{"QueueName":"q","Attributes":{"VisibilityTimeout":"60"},"tags":{"team":"a"}}"#,
    )
    .unwrap();
    assert_eq!(
        action,
        Action::CreateQueue(CreateQueueInput {
            queue_name: "q".into(),
            attributes: BTreeMap::from([("VisibilityTimeout".into(), "60".into())]),
            tags: BTreeMap::from([("team".into(), "a".into())]),
        })
    );
}

#[test]
fn json_empty_body_is_an_empty_parameter_object() {
    assert_eq!(
        json_action("ListQueues", "").unwrap(),
        Action::ListQueues(ListQueuesInput::default())
    );
}

#[test]
fn json_unknown_target_is_unknown_operation() {
    let error = json_action("Frobnicate", "{}").unwrap_err();
    assert_eq!(error.code, ErrorCode::UnknownOperation);
}

#[test]
fn json_malformed_body_is_a_serialization_error() {
    assert_eq!(
        json_action("SendMessage", "{not json").unwrap_err().code,
        ErrorCode::Serialization
    );
    assert_eq!(
        json_action("SendMessage", "[1]").unwrap_err().code,
        ErrorCode::Serialization
    );
    assert_eq!(
        json_action("SendMessage", r#"{"QueueUrl":5}"#)
            .unwrap_err()
            .code,
        ErrorCode::Serialization
    );
}

#[test]
fn missing_required_parameter_is_missing_parameter() {
    let error = json_action("DeleteMessage", r#"{"QueueUrl":"u"}"#).unwrap_err();
    assert_eq!(error.code, ErrorCode::MissingParameter);
    assert_eq!(
        error.message,
        "The request must contain the parameter ReceiptHandle."
    );
    let error = query_action("Action=CreateQueue").unwrap_err();
    assert_eq!(error.code, ErrorCode::MissingParameter);
}

#[test]
fn non_integer_number_is_invalid_parameter_value() {
    let error =
        query_action("Action=ReceiveMessage&QueueUrl=u&MaxNumberOfMessages=ten").unwrap_err();
    assert_eq!(error.code, ErrorCode::InvalidParameterValue);
    assert!(error.message.contains("MaxNumberOfMessages"));
}

#[test]
fn query_create_queue_reads_flattened_attributes_and_tags() {
    let action = query_action(
        "Action=CreateQueue&QueueName=q&Attribute.1.Name=VisibilityTimeout&Attribute.1.Value=60\
         &Attribute.2.Name=DelaySeconds&Attribute.2.Value=5&Tag.1.Key=team&Tag.1.Value=a%20b&Version=2012-11-05",
    )
    .unwrap();
    assert_eq!(
        action,
        Action::CreateQueue(CreateQueueInput {
            queue_name: "q".into(),
            attributes: BTreeMap::from([
                ("VisibilityTimeout".into(), "60".into()),
                ("DelaySeconds".into(), "5".into())
            ]),
            tags: BTreeMap::from([("team".into(), "a b".into())]),
        })
    );
}

#[test]
fn query_send_message_reads_message_attributes() {
    let action = query_action(
        "Action=SendMessage&QueueUrl=http%3A%2F%2Flocalhost%3A9324%2F000000000000%2Fq&MessageBody=a+b%26c\
         &MessageAttribute.1.Name=city&MessageAttribute.1.Value.DataType=String\
         &MessageAttribute.1.Value.StringValue=Any+City\
         &MessageAttribute.2.Name=blob&MessageAttribute.2.Value.DataType=Binary\
         &MessageAttribute.2.Value.BinaryValue=AAEC\
         &MessageSystemAttribute.1.Name=AWSTraceHeader&MessageSystemAttribute.1.Value.DataType=String\
         &MessageSystemAttribute.1.Value.StringValue=Root%3D1",
    )
    .unwrap();
    let Action::SendMessage(input) = action else {
        panic!()
    };
    assert_eq!(input.target.queue_url, url());
    assert_eq!(input.message.body.as_deref(), Some("a b&c"));
    assert_eq!(
        input.message.message_attributes["city"],
        string_attribute("String", "Any City")
    );
    assert_eq!(
        input.message.message_attributes["blob"].binary_value,
        Some(vec![0, 1, 2])
    );
    assert_eq!(
        input.message.system_attributes["AWSTraceHeader"],
        string_attribute("String", "Root=1")
    );
}

#[test]
fn query_send_message_batch_reads_entries_in_index_order() {
    let action = query_action(
        "Action=SendMessageBatch&QueueUrl=u\
         &SendMessageBatchRequestEntry.2.Id=second&SendMessageBatchRequestEntry.2.MessageBody=two\
         &SendMessageBatchRequestEntry.10.Id=tenth&SendMessageBatchRequestEntry.10.MessageBody=ten\
         &SendMessageBatchRequestEntry.1.Id=first&SendMessageBatchRequestEntry.1.MessageBody=one\
         &SendMessageBatchRequestEntry.1.DelaySeconds=3\
         &SendMessageBatchRequestEntry.1.MessageAttribute.1.Name=k\
         &SendMessageBatchRequestEntry.1.MessageAttribute.1.Value.DataType=Number\
         &SendMessageBatchRequestEntry.1.MessageAttribute.1.Value.StringValue=7",
    )
    .unwrap();
    let Action::SendMessageBatch(input) = action else {
        panic!()
    };
    let ids: Vec<&str> = input.entries.iter().map(|e| e.id.as_str()).collect();
    assert_eq!(ids, ["first", "second", "tenth"]);
    assert_eq!(input.entries[0].message.delay_seconds, Some(3));
    assert_eq!(
        input.entries[0].message.message_attributes["k"],
        string_attribute("Number", "7")
    );
}

#[test]
fn query_delete_and_change_visibility_batches_read_entries() {
    let Action::DeleteMessageBatch(delete) = query_action(
        "Action=DeleteMessageBatch&QueueUrl=u&DeleteMessageBatchRequestEntry.1.Id=a\
         &DeleteMessageBatchRequestEntry.1.ReceiptHandle=r",
    )
    .unwrap() else {
        panic!()
    };
    assert_eq!(
        delete.entries,
        vec![DeleteMessageBatchEntry {
            id: "a".into(),
            receipt_handle: "r".into()
        }]
    );
    let Action::ChangeMessageVisibilityBatch(change) = query_action(
        "Action=ChangeMessageVisibilityBatch&QueueUrl=u\
         &ChangeMessageVisibilityBatchRequestEntry.1.Id=a\
         &ChangeMessageVisibilityBatchRequestEntry.1.ReceiptHandle=r\
         &ChangeMessageVisibilityBatchRequestEntry.1.VisibilityTimeout=45",
    )
    .unwrap() else {
        panic!()
    };
    assert_eq!(change.entries[0].visibility_timeout, Some(45));
}

#[test]
fn query_receive_message_reads_name_lists() {
    let Action::ReceiveMessage(input) = query_action(
        "Action=ReceiveMessage&QueueUrl=u&AttributeName.1=SentTimestamp\
         &MessageSystemAttributeName.1=ApproximateReceiveCount&MessageAttributeName.1=All\
         &MaxNumberOfMessages=3",
    )
    .unwrap() else {
        panic!()
    };
    assert_eq!(
        input.system_attribute_names,
        ["SentTimestamp", "ApproximateReceiveCount"]
    );
    assert_eq!(input.message_attribute_names, ["All"]);
    assert_eq!(input.max_number_of_messages, Some(3));
}

#[test]
fn query_tags_and_attribute_names_decode() {
    let Action::TagQueue(tag) =
        query_action("Action=TagQueue&QueueUrl=u&Tag.1.Key=k&Tag.1.Value=v").unwrap()
    else {
        panic!()
    };
    assert_eq!(tag.tags, BTreeMap::from([("k".into(), "v".into())]));
    let Action::UntagQueue(untag) =
        query_action("Action=UntagQueue&QueueUrl=u&TagKey.1=k&TagKey.2=j").unwrap()
    else {
        panic!()
    };
    assert_eq!(untag.tag_keys, ["k", "j"]);
    let Action::GetQueueAttributes(get) =
        query_action("Action=GetQueueAttributes&QueueUrl=u&AttributeName.1=All").unwrap()
    else {
        panic!()
    };
    assert_eq!(get.attribute_names, ["All"]);
}

#[test]
fn query_get_reads_the_query_string() {
    let (_, decoded) = decode(&HttpRequestParts {
        method: "GET",
        query: Some("Action=ListQueues&QueueNamePrefix=or"),
        target: None,
        body: b"",
    });
    assert_eq!(
        decoded.unwrap().action,
        Action::ListQueues(ListQueuesInput {
            queue_name_prefix: Some("or".into()),
            ..Default::default()
        })
    );
}

#[test]
fn query_unknown_or_missing_action_is_rejected() {
    assert_eq!(
        query_action("Action=Frobnicate").unwrap_err().code,
        ErrorCode::InvalidAction
    );
    assert_eq!(
        query_action("QueueUrl=u").unwrap_err().code,
        ErrorCode::MissingParameter
    );
    assert_eq!(
        query_action("Action=UntagQueue&QueueUrl=u&TagKey.x=k")
            .unwrap_err()
            .code,
        ErrorCode::InvalidParameterValue
    );
}

#[test]
fn move_task_actions_decode_in_both_protocols() {
    let start = StartMessageMoveTaskInput {
        source_arn: "arn:a".into(),
        destination_arn: Some("arn:b".into()),
        max_number_of_messages_per_second: Some(5),
    };
    assert_eq!(
        json_action(
            "StartMessageMoveTask",
            r#"{"SourceArn":"arn:a","DestinationArn":"arn:b","MaxNumberOfMessagesPerSecond":5}"#
        )
        .unwrap(),
        Action::StartMessageMoveTask(start.clone())
    );
    assert_eq!(
        query_action(
            "Action=StartMessageMoveTask&SourceArn=arn:a&DestinationArn=arn:b&MaxNumberOfMessagesPerSecond=5"
        )
        .unwrap(),
        Action::StartMessageMoveTask(start)
    );
    assert_eq!(
        query_action("Action=ListMessageMoveTasks&SourceArn=arn:a&MaxResults=10").unwrap(),
        Action::ListMessageMoveTasks(ListMessageMoveTasksInput {
            source_arn: "arn:a".into(),
            max_results: Some(10),
        })
    );
    assert_eq!(
        json_action("CancelMessageMoveTask", r#"{"TaskHandle":""}"#).unwrap(),
        Action::CancelMessageMoveTask(CancelMessageMoveTaskInput {
            task_handle: String::new(),
        }),
        "an empty handle is present: the service answers it as an invalid handle"
    );
    for (action, missing) in [
        ("StartMessageMoveTask", "SourceArn"),
        ("ListMessageMoveTasks", "SourceArn"),
        ("CancelMessageMoveTask", "TaskHandle"),
    ] {
        let error = json_action(action, "{}").unwrap_err();
        assert_eq!(error, SqsError::missing(missing), "{action}");
    }
}

#[test]
fn json_error_has_type_query_header_and_request_id() {
    let reply = encode_error(Protocol::Json, &SqsError::queue_does_not_exist(), "req-1");
    assert_eq!(reply.status, 400);
    assert_eq!(
        reply.header("content-type"),
        Some("application/x-amz-json-1.0")
    );
    assert_eq!(
        reply.header("x-amzn-query-error"),
        Some("AWS.SimpleQueueService.NonExistentQueue;Sender")
    );
    assert_eq!(reply.header("x-amzn-RequestId"), Some("req-1"));
    let body: Value = serde_json::from_slice(&reply.body).unwrap();
    assert_eq!(body["__type"], "com.amazonaws.sqs#QueueDoesNotExist");
    assert_eq!(body["message"], "The specified queue does not exist.");
}

#[test]
fn query_error_is_an_error_response_document() {
    let reply = encode_error(
        Protocol::Query,
        &SqsError::receipt_handle_invalid("a<b"),
        "req-2",
    );
    assert_eq!(reply.status, 400);
    let text = String::from_utf8(reply.body).unwrap();
    assert!(text.contains(
        "<ErrorResponse xmlns=\"http://queue.amazonaws.com/doc/2012-11-05/\"><Error><Type>Sender</Type>\
         <Code>ReceiptHandleIsInvalid</Code><Message>The input receipt handle &quot;a&lt;b&quot; is not a \
         valid receipt handle.</Message><Detail/></Error><RequestId>req-2</RequestId></ErrorResponse>"
    ), "{text}");
}

fn received() -> ReceivedMessage {
    let mut attributes = Attributes::new();
    attributes.insert(
        "city".into(),
        AttributeValue {
            data_type: "String".into(),
            value: AttributeData::String("A&B".into()),
        },
    );
    ReceivedMessage {
        message_id: "id-1".into(),
        receipt_handle: "rh".into(),
        md5_of_body: "md5".into(),
        body: "<x>\r\n".into(),
        attributes: vec![("SentTimestamp".into(), "1000".into())],
        message_attributes: attributes,
        md5_of_message_attributes: Some("amd5".into()),
    }
}

#[test]
fn query_receive_output_is_escaped_xml() {
    let reply = encode_output(
        Protocol::Query,
        ActionName::ReceiveMessage,
        &Output::ReceiveMessage(vec![received()]),
        "req-3",
    );
    let text = String::from_utf8(reply.body).unwrap();
    assert!(text.contains(
        "<ReceiveMessageResult><Message><MessageId>id-1</MessageId><ReceiptHandle>rh</ReceiptHandle>\
         <MD5OfBody>md5</MD5OfBody><Body>&lt;x&gt;&#xD;\n</Body><Attribute><Name>SentTimestamp</Name>\
         <Value>1000</Value></Attribute><MD5OfMessageAttributes>amd5</MD5OfMessageAttributes>\
         <MessageAttribute><Name>city</Name><Value><StringValue>A&amp;B</StringValue>\
         <DataType>String</DataType></Value></MessageAttribute></Message></ReceiveMessageResult>\
         <ResponseMetadata><RequestId>req-3</RequestId></ResponseMetadata></ReceiveMessageResponse>"
    ), "{text}");
}

#[test]
fn json_receive_output_names_members_like_botocore() {
    let reply = encode_output(
        Protocol::Json,
        ActionName::ReceiveMessage,
        &Output::ReceiveMessage(vec![received()]),
        "r",
    );
    let body: Value = serde_json::from_slice(&reply.body).unwrap();
    let message = &body["Messages"][0];
    assert_eq!(message["Body"], "<x>\r\n");
    assert_eq!(message["Attributes"]["SentTimestamp"], "1000");
    assert_eq!(message["MessageAttributes"]["city"]["StringValue"], "A&B");
    assert_eq!(message["MD5OfMessageAttributes"], "amd5");
}

#[test]
fn empty_outputs_have_no_result_element() {
    let reply = encode_output(
        Protocol::Query,
        ActionName::DeleteQueue,
        &Output::Empty,
        "r",
    );
    let text = String::from_utf8(reply.body).unwrap();
    assert!(!text.contains("DeleteQueueResult"));
    assert!(text.contains("<DeleteQueueResponse"));
    let reply = encode_output(Protocol::Json, ActionName::DeleteQueue, &Output::Empty, "r");
    assert_eq!(reply.body, b"{}");
}

#[test]
fn dead_letter_sources_use_the_lowercase_json_member() {
    let output = Output::QueueUrls {
        urls: vec!["u1".into()],
        next_token: Some("t".into()),
    };
    let body: Value = serde_json::from_slice(
        &encode_output(
            Protocol::Json,
            ActionName::ListDeadLetterSourceQueues,
            &output,
            "r",
        )
        .body,
    )
    .unwrap();
    assert_eq!(body["queueUrls"][0], "u1");
    assert_eq!(body["NextToken"], "t");
    let body: Value = serde_json::from_slice(
        &encode_output(Protocol::Json, ActionName::ListQueues, &output, "r").body,
    )
    .unwrap();
    assert_eq!(body["QueueUrls"][0], "u1");
}

#[test]
fn batch_output_lists_successes_and_failures() {
    let output = Output::BatchIds {
        successful: vec!["a".into()],
        failed: vec![BatchFailure {
            id: "b".into(),
            sender_fault: true,
            code: "ReceiptHandleIsInvalid".into(),
            message: "bad".into(),
        }],
    };
    let text = String::from_utf8(
        encode_output(
            Protocol::Query,
            ActionName::DeleteMessageBatch,
            &output,
            "r",
        )
        .body,
    )
    .unwrap();
    assert!(
        text.contains(
            "<DeleteMessageBatchResultEntry><Id>a</Id></DeleteMessageBatchResultEntry>\
         <BatchResultErrorEntry><Id>b</Id><SenderFault>true</SenderFault>\
         <Code>ReceiptHandleIsInvalid</Code><Message>bad</Message></BatchResultErrorEntry>"
        ),
        "{text}"
    );
    let body: Value = serde_json::from_slice(
        &encode_output(Protocol::Json, ActionName::DeleteMessageBatch, &output, "r").body,
    )
    .unwrap();
    assert_eq!(body["Successful"][0]["Id"], "a");
    assert_eq!(body["Failed"][0]["SenderFault"], true);
}

#[test]
fn a_missing_queue_is_worded_per_protocol() {
    let error = SqsError::queue_does_not_exist();
    let query = String::from_utf8(encode_error(Protocol::Query, &error, "r").body).unwrap();
    assert!(query.contains(
        "<Code>AWS.SimpleQueueService.NonExistentQueue</Code><Message>The specified queue does not exist \
         for this wsdl version.</Message>"
    ), "{query}");
    let json: Value =
        serde_json::from_slice(&encode_error(Protocol::Json, &error, "r").body).unwrap();
    assert_eq!(json["message"], "The specified queue does not exist.");
}

#[test]
fn queue_attributes_without_any_attribute_have_no_attributes_member() {
    let empty = json::encode_output(
        ActionName::GetQueueAttributes,
        &Output::QueueAttributes(vec![]),
    )
    .unwrap();
    assert_eq!(empty, b"{}");
    let query = String::from_utf8(
        encode_output(
            Protocol::Query,
            ActionName::GetQueueAttributes,
            &Output::QueueAttributes(vec![]),
            "r",
        )
        .body,
    )
    .unwrap();
    assert!(!query.contains("<Attribute>"), "{query}");
}

#[test]
fn a_query_message_attribute_without_a_name_is_awss_invalid_parameter_value() {
    let error = query_action(
        "Action=SendMessage&QueueUrl=u&MessageBody=b&MessageAttribute.1.Value.DataType=String\
         &MessageAttribute.1.Value.StringValue=x",
    )
    .unwrap_err();
    assert_eq!(error.code, ErrorCode::InvalidParameterValue);
    assert_eq!(
        error.message,
        "The request must contain non-empty message attribute name."
    );
}

#[test]
fn an_empty_batch_entry_id_is_left_to_the_id_rules() {
    let action = json_action(
        "DeleteMessageBatch",
        r#"{"QueueUrl":"u","Entries":[{"Id":"","ReceiptHandle":"h"}]}"#,
    )
    .unwrap();
    let Action::DeleteMessageBatch(input) = action else {
        panic!("{action:?}")
    };
    assert_eq!(input.entries[0].id, "");
    let query = query_action(
        "Action=SendMessageBatch&QueueUrl=u&SendMessageBatchRequestEntry.1.MessageBody=b",
    )
    .unwrap();
    let Action::SendMessageBatch(input) = query else {
        panic!("{query:?}")
    };
    assert_eq!(input.entries[0].id, "");
}

/// The code and text a JSON body is refused with.
fn json_refusal(action: &str, body: &[u8]) -> (ErrorCode, String) {
    let target = format!("AmazonSQS.{action}");
    let (_, decoded) = decode(&HttpRequestParts {
        method: "POST",
        query: None,
        target: Some(&target),
        body,
    });
    let error = decoded.unwrap_err();
    (error.code, error.message)
}

#[test]
fn json_type_errors_follow_the_actions_read_order_not_the_bodys() {
    // QueueUrl is read first, whatever the order of the members in the body.
    assert_eq!(
        json_refusal("SendMessage", br#"{"MessageBody":5,"QueueUrl":5}"#),
        (
            ErrorCode::Serialization,
            "Parameter QueueUrl must be a string.".into()
        )
    );
    // A member the action does not read is not judged.
    assert!(json_action("DeleteQueue", r#"{"QueueUrl":"u","MessageBody":[1]}"#).is_ok());
    assert_eq!(
        json_refusal(
            "SendMessageBatch",
            br#"{"QueueUrl":"u","Entries":[{"Id":"a","MessageBody":"b"},{"Id":"b","DelaySeconds":1.5}]}"#
        ),
        (
            ErrorCode::InvalidParameterValue,
            "Value 1.5 for parameter Entries.2.DelaySeconds is invalid. Reason: Must be an integer.".into()
        )
    );
    assert_eq!(
        json_refusal(
            "SendMessage",
            br#"{"QueueUrl":"u","MessageAttributes":{"z":{"DataType":5},"a":null}}"#
        ),
        (
            ErrorCode::Serialization,
            "Parameter MessageAttributes.a must be an attribute value.".into()
        )
    );
    assert_eq!(
        json_refusal("ReceiveMessage", br#"{"QueueUrl":"u","MaxNumberOfMessages":18446744073709551615}"#),
        (
            ErrorCode::InvalidParameterValue,
            "Value 18446744073709551615 for parameter MaxNumberOfMessages is invalid. Reason: Must be an integer."
                .into()
        )
    );
}

#[test]
fn json_repeated_members_keep_the_last_value() {
    let Action::DeleteMessage(input) = json_action(
        "DeleteMessage",
        r#"{"QueueUrl":"u","ReceiptHandle":5,"ReceiptHandle":"r","Unknown":{"x":[1,{"y":null}]}}"#,
    )
    .unwrap() else {
        panic!()
    };
    assert_eq!(input.receipt_handle, "r");
    let Action::SendMessage(input) = json_action(
        "SendMessage",
        r#"{"QueueUrl":"u","MessageAttributes":{"a":{"DataType":"String","StringValue":"1"},
            "a":{"DataType":"Number","StringValue":"2","StringListValues":["x"]}}}"#,
    )
    .unwrap() else {
        panic!()
    };
    let attribute = &input.message.message_attributes["a"];
    assert_eq!(attribute.data_type.as_deref(), Some("Number"));
    assert!(attribute.has_list_values);
}

#[test]
fn json_bodies_are_checked_whole_before_their_shape() {
    let not_json = |body: &[u8]| {
        let (code, message) = json_refusal("ListQueues", body);
        assert_eq!(code, ErrorCode::Serialization);
        message
    };
    assert_eq!(not_json(b"null"), "The request body must be a JSON object.");
    assert_eq!(
        not_json(b"\"x\""),
        "The request body must be a JSON object."
    );
    assert_eq!(
        not_json(b"[1] x"),
        "The request body is not valid JSON: trailing characters at line 1 column 5"
    );
    assert_eq!(
        not_json(b"{\"A\":\"\xff\"}"),
        "The request body is not valid JSON: invalid unicode code point at line 1 column 7"
    );
    // Even in members no action reads, strings are checked and nesting is limited.
    let deep = format!("{{\"Unknown\":{}{}}}", "[".repeat(200), "]".repeat(200));
    assert!(
        not_json(deep.as_bytes()).contains("recursion limit exceeded"),
        "{}",
        not_json(deep.as_bytes())
    );
    assert!(not_json(b"{\"Unknown\":[\"\xff\"]}").contains("invalid unicode code point"));
    assert_eq!(
        not_json(b"{\"Unknown\":\"\\ud800\"}"),
        "The request body is not valid JSON: unexpected end of hex escape at line 1 column 19"
    );
}

#[test]
fn an_action_named_twice_differently_is_invalid_action() {
    let decoded = |query: Option<&str>, target: Option<&str>, body: &str| {
        decode(&HttpRequestParts {
            method: "POST",
            query,
            target,
            body: body.as_bytes(),
        })
        .1
        .map(|request| request.action.name())
    };
    let refused = Err(SqsError::new(ErrorCode::InvalidAction, ACTION_NAMED_TWICE));
    let purge = r#"{"QueueUrl":"http://localhost:9324/000000000000/q"}"#;
    // A presigned GetQueueUrl turned into a PurgeQueue by a header and a body.
    assert_eq!(
        decoded(
            Some("Action=GetQueueUrl&QueueName=q"),
            Some("AmazonSQS.PurgeQueue"),
            purge
        ),
        refused
    );
    assert_eq!(
        decoded(
            Some("Action=GetQueueUrl&QueueName=q"),
            None,
            "Action=PurgeQueue&QueueUrl=x"
        ),
        refused
    );
    // The same action in both places, or in one, is fine.
    assert_eq!(
        decoded(
            Some("Action=PurgeQueue"),
            Some("AmazonSQS.PurgeQueue"),
            purge
        ),
        Ok(ActionName::PurgeQueue)
    );
    assert_eq!(
        decoded(
            Some("Version=2012-11-05"),
            Some("AmazonSQS.PurgeQueue"),
            purge
        ),
        Ok(ActionName::PurgeQueue)
    );
    assert_eq!(
        decoded(
            Some("Action=GetQueueUrl"),
            None,
            "Action=GetQueueUrl&QueueName=q"
        ),
        Ok(ActionName::GetQueueUrl)
    );
}
