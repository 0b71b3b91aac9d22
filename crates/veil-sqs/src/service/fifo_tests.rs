//! FIFO queue tests (docs/semantics.md §SQS, "FIFO queues"): whole requests through the router over an engine
//! with an in-memory store and a manual clock, in both protocols — queue attributes and their errors, sends
//! with groups and deduplication ids and their errors, sequence numbers, the FIFO system attributes, receive
//! attempts, expired receipts and dead-letter queues of the source's type. Each is named after the rule it
//! checks.

use std::sync::Arc;

use axum::http::StatusCode;
use axum::Router;
use serde_json::{json, Value};
use veil_core::{Engine, ManualClock};

use super::*;
const BASE: &str = "http://localhost:9324/000000000000";
const FIFO_URL: &str = "http://localhost:9324/000000000000/jobs.fifo";
const STANDARD_URL: &str = "http://localhost:9324/000000000000/plain";

struct Harness {
    app: Router,
    clock: ManualClock,
    engine: Arc<Engine>,
}

/// An error as a client sees it: HTTP status, the Query code (`x-amzn-query-error`) and the message.
#[derive(Debug, PartialEq, Eq)]
struct Refusal {
    status: u16,
    code: String,
    message: String,
}

fn refusal(code: &str, message: &str) -> Refusal {
    Refusal {
        status: 400,
        code: code.to_string(),
        message: message.to_string(),
    }
}

fn harness() -> Harness {
    let (engine, clock) = test_support::engine();
    Harness {
        app: test_support::app(&engine),
        clock,
        engine,
    }
}

impl Harness {
    async fn call(&self, action: &str, body: Value) -> (StatusCode, Option<String>, Value) {
        test_support::json_call(&self.app, action, &body).await
    }

    async fn ok(&self, action: &str, body: Value) -> Value {
        let (status, _, reply) = self.call(action, body).await;
        assert_eq!(status, StatusCode::OK, "{action}: {reply}");
        reply
    }

    async fn refused(&self, action: &str, body: Value) -> Refusal {
        let (status, query_error, reply) = self.call(action, body).await;
        let code = query_error.unwrap_or_default();
        Refusal {
            status: status.as_u16(),
            code: code.trim_end_matches(";Sender").to_string(),
            message: reply["message"].as_str().unwrap_or_default().to_string(),
        }
    }

    /// A CreateQueue of `name` with `attributes` that is refused.
    async fn refused_create(&self, name: &str, attributes: Value) -> Refusal {
        self.refused(
            "CreateQueue",
            json!({ "QueueName": name, "Attributes": attributes }),
        )
        .await
    }

    /// A SetQueueAttributes of `attributes` on `url` that is refused.
    async fn refused_set(&self, url: &str, attributes: Value) -> Refusal {
        self.refused(
            "SetQueueAttributes",
            json!({ "QueueUrl": url, "Attributes": attributes }),
        )
        .await
    }

    async fn query(&self, form: &str) -> (StatusCode, String) {
        test_support::query_call(&self.app, "/", form).await
    }

    /// Creates `jobs.fifo` with `attributes` besides `FifoQueue=true`.
    async fn fifo(&self, attributes: Value) -> &'static str {
        let mut all = json!({ "FifoQueue": "true" });
        all.as_object_mut()
            .unwrap()
            .extend(attributes.as_object().unwrap().clone());
        self.ok(
            "CreateQueue",
            json!({ "QueueName": "jobs.fifo", "Attributes": all }),
        )
        .await;
        FIFO_URL
    }

    async fn standard(&self) -> &'static str {
        self.ok("CreateQueue", json!({ "QueueName": "plain" }))
            .await;
        STANDARD_URL
    }

    async fn send(&self, url: &str, body: &str, group: &str, dedup: &str) -> Value {
        self.ok(
            "SendMessage",
            json!({ "QueueUrl": url, "MessageBody": body, "MessageGroupId": group,
                    "MessageDeduplicationId": dedup }),
        )
        .await
    }

    async fn receive(&self, url: &str, extra: Value) -> Vec<Value> {
        let mut request = json!({ "QueueUrl": url, "MaxNumberOfMessages": 10 });
        request
            .as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        let reply = self.ok("ReceiveMessage", request).await;
        reply["Messages"].as_array().cloned().unwrap_or_default()
    }

    async fn attributes(&self, url: &str, names: &[&str]) -> Value {
        self.ok(
            "GetQueueAttributes",
            json!({ "QueueUrl": url, "AttributeNames": names }),
        )
        .await
        .get("Attributes")
        .cloned()
        .unwrap_or(json!({}))
    }
}

fn bodies(messages: &[Value]) -> Vec<&str> {
    messages
        .iter()
        .map(|m| m["Body"].as_str().unwrap())
        .collect()
}

fn handle(message: &Value) -> String {
    message["ReceiptHandle"].as_str().unwrap().to_string()
}

const STANDARD_NAME_RULE: &str =
    "Can only include alphanumeric characters, hyphens, or underscores. 1 to 80 in length";
const FIFO_NAME_RULE: &str =
    "The name of a FIFO queue can only include alphanumeric characters, hyphens, \
     or underscores, must end with .fifo suffix and be 1 to 80 in length.";

#[tokio::test]
async fn a_dot_fifo_name_needs_fifo_queue_true_and_fifo_queue_true_needs_the_suffix() {
    let h = harness();
    for (name, attributes, rule) in [
        ("jobs.fifo", json!({}), STANDARD_NAME_RULE),
        (
            "jobs.fifo",
            json!({ "FifoQueue": "false" }),
            STANDARD_NAME_RULE,
        ),
        ("jobs", json!({ "FifoQueue": "true" }), FIFO_NAME_RULE),
        (
            &format!("{}.fifo", "a".repeat(76)),
            json!({ "FifoQueue": "true" }),
            FIFO_NAME_RULE,
        ),
    ] {
        assert_eq!(
            h.refused_create(name, attributes.clone()).await,
            refusal("InvalidParameterValue", rule),
            "{name} {attributes}"
        );
    }
    let url = h
        .ok(
            "CreateQueue",
            json!({ "QueueName": format!("{}.fifo", "a".repeat(75)), "Attributes": { "FifoQueue": "True" } }),
        )
        .await["QueueUrl"]
        .clone();
    assert_eq!(url, format!("{BASE}/{}.fifo", "a".repeat(75)));
    let found = h
        .ok(
            "GetQueueUrl",
            json!({ "QueueName": format!("{}.fifo", "a".repeat(75)) }),
        )
        .await;
    assert_eq!(found["QueueUrl"], url);
}

#[tokio::test]
async fn get_queue_attributes_shows_the_fifo_attributes_of_fifo_queues_only() {
    let h = harness();
    let fifo = h
        .fifo(json!({ "ContentBasedDeduplication": "true", "DeduplicationScope": "messageGroup" }))
        .await;
    let all = h.attributes(fifo, &["All"]).await;
    assert_eq!(all["FifoQueue"], "true");
    assert_eq!(all["ContentBasedDeduplication"], "true");
    assert_eq!(all["DeduplicationScope"], "messageGroup");
    assert_eq!(all["FifoThroughputLimit"], "perQueue");
    assert_eq!(
        h.attributes(fifo, &["DeduplicationScope", "FifoQueue"])
            .await,
        json!({ "DeduplicationScope": "messageGroup", "FifoQueue": "true" })
    );
    let standard = h.standard().await;
    let all = h.attributes(standard, &["All"]).await;
    for name in [
        "FifoQueue",
        "ContentBasedDeduplication",
        "DeduplicationScope",
        "FifoThroughputLimit",
    ] {
        assert_eq!(all.get(name), None, "{name}");
    }
    assert_eq!(h.attributes(standard, &["FifoQueue"]).await, json!({}));
    let (status, xml) = h
        .query(&format!(
            "Action=GetQueueAttributes&QueueUrl={FIFO_URL}&AttributeName.1=FifoThroughputLimit"
        ))
        .await;
    assert_eq!(status, StatusCode::OK);
    assert!(
        xml.contains(
            "<Attribute><Name>FifoThroughputLimit</Name><Value>perQueue</Value></Attribute>"
        ),
        "{xml}"
    );
}

#[tokio::test]
async fn create_queue_again_is_idempotent_only_with_the_same_fifo_attributes() {
    let h = harness();
    let attributes = json!({ "FifoQueue": "true", "ContentBasedDeduplication": "true" });
    let create = json!({ "QueueName": "jobs.fifo", "Attributes": attributes });
    h.ok("CreateQueue", create.clone()).await;
    h.ok("CreateQueue", create).await;
    h.ok(
        "CreateQueue",
        json!({ "QueueName": "jobs.fifo", "Attributes": { "FifoQueue": "true", "FifoThroughputLimit": "perQueue" } }),
    )
    .await;
    assert_eq!(
        h.refused_create(
            "jobs.fifo",
            json!({ "FifoQueue": "true", "ContentBasedDeduplication": "false" })
        )
        .await,
        refusal(
            "QueueAlreadyExists",
            "A queue already exists with the same name and a different value for attribute \
             ContentBasedDeduplication"
        )
    );
}

#[tokio::test]
async fn create_queue_on_a_standard_queue_of_a_dot_fifo_name_is_a_different_fifo_queue() {
    let h = harness();
    // KubeMQ's channel names may end in `.fifo`; such a channel is a standard queue.
    h.engine
        .create_queue(
            veil_core::QueueKey::new(veil_core::DEFAULT_NAMESPACE, "jobs.fifo"),
            veil_core::QueueConfig::default(),
        )
        .await
        .unwrap();
    assert_eq!(
        h.refused_create("jobs.fifo", json!({ "FifoQueue": "true" }))
        .await,
        refusal(
            "QueueAlreadyExists",
            "A queue already exists with the same name and a different value for attribute FifoQueue"
        )
    );
}

#[tokio::test]
async fn set_queue_attributes_never_changes_the_queue_type() {
    let h = harness();
    let fifo = h.fifo(json!({})).await;
    h.ok(
        "SetQueueAttributes",
        json!({ "QueueUrl": fifo, "Attributes": { "FifoQueue": "true", "ContentBasedDeduplication": "true" } }),
    )
    .await;
    assert_eq!(
        h.attributes(fifo, &["ContentBasedDeduplication"]).await,
        json!({ "ContentBasedDeduplication": "true" })
    );
    assert_eq!(
        h.refused_set(fifo, json!({ "FifoQueue": "false" }))
        .await,
        refusal(
            "InvalidAttributeValue",
            "Invalid value for the parameter FifoQueue. Reason: Modifying queue type is not supported."
        )
    );
    let standard = h.standard().await;
    assert_eq!(
        h.refused_set(standard, json!({ "FifoQueue": "true" }))
            .await,
        refusal("InvalidAttributeName", "Unknown Attribute FifoQueue.")
    );
    assert_eq!(
        h.refused_create("other", json!({ "DeduplicationScope": "queue" }))
            .await,
        refusal(
            "InvalidAttributeName",
            "You can specify the DeduplicationScope only when FifoQueue is set to true."
        )
    );
}

#[tokio::test]
async fn per_message_group_throughput_needs_deduplication_by_message_group() {
    let h = harness();
    let rule = refusal(
        "InvalidAttributeValue",
        "Invalid value for the parameter FifoThroughputLimit. Reason: To set FifoThroughputLimit to \
         perMessageGroupId, the DeduplicationScope must be messageGroup.",
    );
    assert_eq!(
        h.refused_create(
            "jobs.fifo",
            json!({ "FifoQueue": "true", "FifoThroughputLimit": "perMessageGroupId" })
        )
        .await,
        rule
    );
    let fifo = h.fifo(json!({})).await;
    let set = |attributes: Value| json!({ "QueueUrl": fifo, "Attributes": attributes });
    assert_eq!(
        h.refused_set(fifo, json!({ "FifoThroughputLimit": "perMessageGroupId" }))
            .await,
        rule
    );
    assert_eq!(
        h.attributes(fifo, &["FifoThroughputLimit"]).await,
        json!({ "FifoThroughputLimit": "perQueue" }),
        "a refused change stores nothing"
    );
    h.ok(
        "SetQueueAttributes",
        set(json!({ "DeduplicationScope": "messageGroup", "FifoThroughputLimit": "perMessageGroupId" })),
    )
    .await;
    assert_eq!(
        h.refused_set(fifo, json!({ "DeduplicationScope": "queue" }))
            .await,
        rule
    );
}

#[tokio::test]
async fn fifo_sends_answer_strictly_increasing_sequence_numbers_and_standard_sends_none() {
    let h = harness();
    let fifo = h.fifo(json!({})).await;
    let mut numbers = Vec::new();
    for (i, group) in ["a", "b", "a"].into_iter().enumerate() {
        let sent = h.send(fifo, "x", group, &format!("d{i}")).await;
        numbers.push(sent["SequenceNumber"].as_str().unwrap().to_string());
    }
    let batch = h
        .ok(
            "SendMessageBatch",
            json!({ "QueueUrl": fifo, "Entries": [
                { "Id": "e1", "MessageBody": "y", "MessageGroupId": "b", "MessageDeduplicationId": "d3" },
                { "Id": "e2", "MessageBody": "y", "MessageGroupId": "c", "MessageDeduplicationId": "d4" }] }),
        )
        .await;
    for entry in batch["Successful"].as_array().unwrap() {
        numbers.push(entry["SequenceNumber"].as_str().unwrap().to_string());
    }
    let (status, xml) = h
        .query(&format!(
            "Action=SendMessage&QueueUrl={FIFO_URL}&MessageBody=z&MessageGroupId=a&MessageDeduplicationId=d5"
        ))
        .await;
    assert_eq!(status, StatusCode::OK, "{xml}");
    let start = xml
        .find("<SequenceNumber>")
        .expect("a SequenceNumber element")
        + 16;
    let end = xml.find("</SequenceNumber>").unwrap();
    numbers.push(xml[start..end].to_string());
    assert!(numbers.iter().all(|n| n.len() == 20), "{numbers:?}");
    let parsed: Vec<u128> = numbers.iter().map(|n| n.parse().unwrap()).collect();
    assert!(
        parsed.windows(2).all(|pair| pair[0] < pair[1]),
        "{numbers:?}"
    );
    let standard = h.standard().await;
    let sent = h
        .ok(
            "SendMessage",
            json!({ "QueueUrl": standard, "MessageBody": "x", "MessageGroupId": "tenant" }),
        )
        .await;
    assert_eq!(sent.get("SequenceNumber"), None);
}

#[tokio::test]
async fn a_fifo_send_without_a_group_is_missing_parameter_and_fails_a_whole_batch() {
    let h = harness();
    let fifo = h.fifo(json!({ "ContentBasedDeduplication": "true" })).await;
    assert_eq!(
        h.refused(
            "SendMessage",
            json!({ "QueueUrl": fifo, "MessageBody": "x" })
        )
        .await,
        refusal(
            "MissingParameter",
            "The request must contain the parameter MessageGroupId."
        )
    );
    assert_eq!(
        h.refused(
            "SendMessageBatch",
            json!({ "QueueUrl": fifo, "Entries": [
                { "Id": "a", "MessageBody": "x", "MessageGroupId": "g" },
                { "Id": "b", "MessageBody": "y" }] })
        )
        .await,
        refusal(
            "InvalidParameterValue",
            "The request must contain the parameter MessageGroupId."
        )
    );
    assert!(
        h.receive(fifo, json!({})).await.is_empty(),
        "nothing of a refused batch is sent"
    );
}

#[tokio::test]
async fn a_fifo_send_without_a_deduplication_id_needs_content_based_deduplication() {
    let h = harness();
    let fifo = h.fifo(json!({})).await;
    let rule = refusal(
        "InvalidParameterValue",
        "The queue should either have ContentBasedDeduplication enabled or MessageDeduplicationId provided \
         explicitly",
    );
    assert_eq!(
        h.refused(
            "SendMessage",
            json!({ "QueueUrl": fifo, "MessageBody": "x", "MessageGroupId": "g" })
        )
        .await,
        rule
    );
    assert_eq!(
        h.refused(
            "SendMessageBatch",
            json!({ "QueueUrl": fifo, "Entries": [
                { "Id": "a", "MessageBody": "x", "MessageGroupId": "g", "MessageDeduplicationId": "1" },
                { "Id": "b", "MessageBody": "y", "MessageGroupId": "g" }] })
        )
        .await,
        rule
    );
    // Also when the entry without an id has a fault of its own, which alone would fail only that entry.
    assert_eq!(
        h.refused(
            "SendMessageBatch",
            json!({ "QueueUrl": fifo, "Entries": [
                { "Id": "a", "MessageBody": "x", "MessageGroupId": "g", "MessageDeduplicationId": "1" },
                { "Id": "b", "MessageBody": "y", "MessageGroupId": "g", "DelaySeconds": 2 }] })
        )
        .await,
        rule
    );
    assert!(
        h.receive(fifo, json!({})).await.is_empty(),
        "nothing of a refused batch is sent"
    );
    h.ok(
        "SetQueueAttributes",
        json!({ "QueueUrl": fifo, "Attributes": { "ContentBasedDeduplication": "true" } }),
    )
    .await;
    h.ok(
        "SendMessage",
        json!({ "QueueUrl": fifo, "MessageBody": "x", "MessageGroupId": "g" }),
    )
    .await;
}

#[tokio::test]
async fn a_fifo_message_may_not_have_its_own_delay_but_zero_is_allowed() {
    let h = harness();
    let fifo = h.fifo(json!({})).await;
    let message = |delay: u64, dedup: &str| {
        json!({ "QueueUrl": fifo, "MessageBody": "x", "MessageGroupId": "g", "MessageDeduplicationId": dedup,
                "DelaySeconds": delay })
    };
    let rule = refusal(
        "InvalidParameterValue",
        "Value 2 for parameter DelaySeconds is invalid. Reason: The request include parameter that is not \
         valid for this queue type.",
    );
    assert_eq!(h.refused("SendMessage", message(2, "1")).await, rule);
    h.ok("SendMessage", message(0, "2")).await;
    let batch = h
        .ok(
            "SendMessageBatch",
            json!({ "QueueUrl": fifo, "Entries": [
                { "Id": "late", "MessageBody": "x", "MessageGroupId": "g", "MessageDeduplicationId": "3",
                  "DelaySeconds": 2 },
                { "Id": "now", "MessageBody": "y", "MessageGroupId": "g", "MessageDeduplicationId": "4" }] }),
        )
        .await;
    assert_eq!(batch["Successful"][0]["Id"], "now");
    assert_eq!(
        batch["Failed"],
        json!([{ "Id": "late", "SenderFault": true, "Code": "InvalidParameterValue", "Message": rule.message }])
    );
}

#[tokio::test]
async fn a_standard_queue_refuses_a_deduplication_id_and_shows_a_group_without_blocking() {
    let h = harness();
    let standard = h.standard().await;
    assert_eq!(
        h.refused(
            "SendMessage",
            json!({ "QueueUrl": standard, "MessageBody": "x", "MessageDeduplicationId": "d" })
        )
        .await,
        refusal(
            "InvalidParameterValue",
            "Value d for parameter MessageDeduplicationId is invalid. Reason: The request includes a parameter \
             that is not valid for this queue type."
        )
    );
    for body in ["one", "two"] {
        h.ok(
            "SendMessage",
            json!({ "QueueUrl": standard, "MessageBody": body, "MessageGroupId": "tenant-1" }),
        )
        .await;
    }
    let first = h
        .receive(
            standard,
            json!({ "MaxNumberOfMessages": 1, "AttributeNames": ["All"] }),
        )
        .await;
    assert_eq!(first[0]["Attributes"]["MessageGroupId"], "tenant-1");
    assert_eq!(first[0]["Attributes"].get("SequenceNumber"), None);
    assert_eq!(first[0]["Attributes"].get("MessageDeduplicationId"), None);
    let second = h.receive(standard, json!({})).await;
    assert_eq!(second.len(), 1, "a group never blocks a standard queue");
}

#[tokio::test]
async fn fifo_ids_must_be_1_to_128_letters_digits_or_punctuation() {
    let h = harness();
    let standard = h.standard().await;
    let reason = |parameter: &str, value: &str| {
        refusal(
            "InvalidParameterValue",
            &format!(
                "Value {value} for parameter {parameter} is invalid. Reason: {parameter} can only include \
                 alphanumeric and punctuation characters. 1 to 128 in length."
            ),
        )
    };
    for group in ["", "group 123"] {
        assert_eq!(
            h.refused(
                "SendMessage",
                json!({ "QueueUrl": standard, "MessageBody": "x", "MessageGroupId": group })
            )
            .await,
            reason("MessageGroupId", group)
        );
    }
    let fifo = h.fifo(json!({})).await;
    let long = "a".repeat(129);
    assert_eq!(
        h.refused(
            "SendMessage",
            json!({ "QueueUrl": fifo, "MessageBody": "x", "MessageGroupId": "g",
                                         "MessageDeduplicationId": long })
        )
        .await,
        reason("MessageDeduplicationId", &long)
    );
    h.send(fifo, "x", "g", &"a".repeat(128)).await;
    assert_eq!(
        h.refused(
            "ReceiveMessage",
            json!({ "QueueUrl": fifo, "ReceiveRequestAttemptId": "try again" })
        )
        .await,
        reason("ReceiveRequestAttemptId", "try again")
    );
}

#[tokio::test]
async fn a_duplicate_send_is_accepted_with_the_first_ids_and_never_delivered() {
    let h = harness();
    let fifo = h.fifo(json!({})).await;
    let first = h.send(fifo, "first", "g", "same").await;
    let again = h.send(fifo, "second", "other", "same").await;
    assert_eq!(again["MessageId"], first["MessageId"]);
    assert_eq!(again["SequenceNumber"], first["SequenceNumber"]);
    assert_eq!(
        again["MD5OfMessageBody"],
        crate::md5::md5_of_body(b"second")
    );
    let got = h.receive(fifo, json!({})).await;
    assert_eq!(bodies(&got), ["first"]);
    h.ok(
        "DeleteMessage",
        json!({ "QueueUrl": fifo, "ReceiptHandle": handle(&got[0]) }),
    )
    .await;
    let after_delete = h.send(fifo, "third", "g", "same").await;
    assert_eq!(
        after_delete["MessageId"], first["MessageId"],
        "still deduplicated after the first was deleted"
    );
    let batch = h
        .ok(
            "SendMessageBatch",
            json!({ "QueueUrl": fifo, "Entries": [
                { "Id": "a", "MessageBody": "b1", "MessageGroupId": "g", "MessageDeduplicationId": "twice" },
                { "Id": "b", "MessageBody": "b2", "MessageGroupId": "g", "MessageDeduplicationId": "twice" }] }),
        )
        .await;
    let successful = batch["Successful"].as_array().unwrap();
    assert_eq!(successful[0]["MessageId"], successful[1]["MessageId"]);
    assert_eq!(bodies(&h.receive(fifo, json!({})).await), ["b1"]);
    h.clock.advance_ms(limits::FIFO_DEDUP_INTERVAL_MS);
    let later = h.send(fifo, "fourth", "h", "same").await;
    assert_ne!(
        later["MessageId"], first["MessageId"],
        "an id is forgotten after the interval"
    );
}

#[tokio::test]
async fn content_based_deduplication_compares_bodies_and_shows_their_sha256() {
    let h = harness();
    let fifo = h.fifo(json!({ "ContentBasedDeduplication": "true" })).await;
    let send = |body: &str| json!({ "QueueUrl": fifo, "MessageBody": body, "MessageGroupId": "g" });
    let first = h.ok("SendMessage", send("same body")).await;
    let again = h.ok("SendMessage", send("same body")).await;
    assert_eq!(again["MessageId"], first["MessageId"]);
    h.ok("SendMessage", send("other body")).await;
    let got = h
        .receive(
            fifo,
            json!({ "AttributeNames": ["MessageDeduplicationId"] }),
        )
        .await;
    assert_eq!(bodies(&got), ["same body", "other body"]);
    // sha256("same body"), as `python3 -c 'import hashlib; print(hashlib.sha256(b"same body").hexdigest())'`.
    assert_eq!(
        got[0]["Attributes"]["MessageDeduplicationId"],
        "8f6372a8b1509601faa57ff3a292cfcccb95aa2325c18b8e50b0c035ea1648fe"
    );
}

#[tokio::test]
async fn message_group_scope_deduplicates_within_a_group_only() {
    let h = harness();
    let fifo = h
        .fifo(json!({ "DeduplicationScope": "messageGroup" }))
        .await;
    let a = h.send(fifo, "in a", "a", "same").await;
    let b = h.send(fifo, "in b", "b", "same").await;
    assert_ne!(a["MessageId"], b["MessageId"]);
    let again = h.send(fifo, "in a again", "a", "same").await;
    assert_eq!(again["MessageId"], a["MessageId"]);
    let mut got = bodies(&h.receive(fifo, json!({})).await)
        .into_iter()
        .map(str::to_string)
        .collect::<Vec<_>>();
    got.sort();
    assert_eq!(got, ["in a", "in b"]);
}

#[tokio::test]
async fn receive_shows_the_fifo_system_attributes_asked_for_in_either_list() {
    let h = harness();
    let fifo = h.fifo(json!({})).await;
    let sent = h.send(fifo, "x", "g-1", "d-1").await;
    let all = h
        .receive(
            fifo,
            json!({ "MessageSystemAttributeNames": ["All"], "VisibilityTimeout": 0 }),
        )
        .await;
    let attributes = &all[0]["Attributes"];
    assert_eq!(attributes["MessageGroupId"], "g-1");
    assert_eq!(attributes["MessageDeduplicationId"], "d-1");
    assert_eq!(attributes["SequenceNumber"], sent["SequenceNumber"]);
    let named = h
        .receive(
            fifo,
            json!({ "AttributeNames": ["SequenceNumber"], "VisibilityTimeout": 0 }),
        )
        .await;
    assert_eq!(
        named[0]["Attributes"],
        json!({ "SequenceNumber": sent["SequenceNumber"] })
    );
    let none = h.receive(fifo, json!({ "VisibilityTimeout": 0 })).await;
    assert_eq!(none[0].get("Attributes"), None);
    let (status, xml) = h
        .query(&format!(
            "Action=ReceiveMessage&QueueUrl={FIFO_URL}&AttributeName.1=MessageGroupId\
             &MessageSystemAttributeName.1=MessageDeduplicationId"
        ))
        .await;
    assert_eq!(status, StatusCode::OK);
    assert!(
        xml.contains(
            "<Attribute><Name>MessageDeduplicationId</Name><Value>d-1</Value></Attribute>\
             <Attribute><Name>MessageGroupId</Name><Value>g-1</Value></Attribute>"
        ),
        "{xml}"
    );
}

#[tokio::test]
async fn a_retried_receive_attempt_returns_the_same_messages_and_receipts() {
    let h = harness();
    let fifo = h.fifo(json!({})).await;
    for (i, body) in ["1", "2", "3"].into_iter().enumerate() {
        h.send(fifo, body, "g", &format!("d{i}")).await;
    }
    let attempt = json!({ "ReceiveRequestAttemptId": "attempt-1", "MaxNumberOfMessages": 2 });
    let first = h.receive(fifo, attempt.clone()).await;
    assert_eq!(bodies(&first), ["1", "2"]);
    h.clock.advance_ms(5_000);
    let retried = h.receive(fifo, attempt).await;
    assert_eq!(retried, first, "the same messages with the same receipts");
    assert!(
        h.receive(fifo, json!({})).await.is_empty(),
        "the group waits while its messages are in flight"
    );
    let (status, xml) = h
        .query(&format!(
            "Action=ReceiveMessage&QueueUrl={FIFO_URL}&MaxNumberOfMessages=2&ReceiveRequestAttemptId=attempt-1"
        ))
        .await;
    assert_eq!(status, StatusCode::OK);
    assert!(xml.contains(&handle(&first[0])), "{xml}");
    h.ok(
        "DeleteMessage",
        json!({ "QueueUrl": fifo, "ReceiptHandle": handle(&first[0]) }),
    )
    .await;
    assert!(
        h.receive(fifo, json!({ "ReceiveRequestAttemptId": "attempt-1" }))
            .await
            .is_empty(),
        "once a message changed, the attempt is a new receive (and the group is still held)"
    );
}

#[tokio::test]
async fn a_lapsed_receipt_cannot_delete_or_change_a_fifo_message() {
    let h = harness();
    let fifo = h.fifo(json!({ "VisibilityTimeout": "1" })).await;
    h.send(fifo, "x", "g", "d").await;
    let got = h.receive(fifo, json!({})).await;
    let receipt = handle(&got[0]);
    h.clock.advance_ms(1_000);
    assert_eq!(
        h.refused(
            "DeleteMessage",
            json!({ "QueueUrl": fifo, "ReceiptHandle": receipt })
        )
        .await,
        refusal(
            "InvalidParameterValue",
            &format!(
                "Value {receipt} for parameter ReceiptHandle is invalid. Reason: The receipt handle has expired."
            )
        )
    );
    let batch = h
        .ok(
            "DeleteMessageBatch",
            json!({ "QueueUrl": fifo, "Entries": [{ "Id": "a", "ReceiptHandle": receipt }] }),
        )
        .await;
    assert_eq!(batch["Failed"][0]["Code"], "InvalidParameterValue");
    assert!(batch["Failed"][0]["Message"]
        .as_str()
        .unwrap()
        .ends_with("Reason: The receipt handle has expired."));
    assert_eq!(
        h.refused(
            "ChangeMessageVisibility",
            json!({ "QueueUrl": fifo, "ReceiptHandle": receipt, "VisibilityTimeout": 30 })
        )
        .await,
        refusal(
            "InvalidParameterValue",
            &format!(
                "Value {receipt} for parameter ReceiptHandle is invalid. Reason: Message does not exist or is \
                 not available for visibility timeout change."
            )
        )
    );
    let again = h.receive(fifo, json!({})).await;
    assert_eq!(bodies(&again), ["x"], "the lapsed message came back");
    assert_eq!(
        h.refused(
            "DeleteMessage",
            json!({ "QueueUrl": fifo, "ReceiptHandle": receipt })
        )
        .await
        .message,
        format!(
            "Value {receipt} for parameter ReceiptHandle is invalid. Reason: The receipt handle has expired."
        ),
        "an older receipt stays expired"
    );
    h.ok(
        "DeleteMessage",
        json!({ "QueueUrl": fifo, "ReceiptHandle": handle(&again[0]) }),
    )
    .await;
}

#[tokio::test]
async fn a_redrive_policy_needs_a_dead_letter_queue_of_the_same_type() {
    let h = harness();
    let fifo = h.fifo(json!({})).await;
    let standard = h.standard().await;
    let policy = |target: &str| {
        json!({ "deadLetterTargetArn": format!("arn:aws:sqs:us-east-1:000000000000:{target}"),
                "maxReceiveCount": 2 })
        .to_string()
    };
    let rule = |target: &str| {
        refusal(
            "InvalidParameterValue",
            &format!(
                "Value {} for parameter RedrivePolicy is invalid. Reason: Dead-letter queue must be same type \
                 of queue as the source..",
                policy(target)
            ),
        )
    };
    assert_eq!(
        h.refused_set(fifo, json!({ "RedrivePolicy": policy("plain") }))
            .await,
        rule("plain")
    );
    assert_eq!(
        h.refused_set(standard, json!({ "RedrivePolicy": policy("jobs.fifo") }))
            .await,
        rule("jobs.fifo")
    );
    assert_eq!(
        h.refused_create(
            "src.fifo",
            json!({ "FifoQueue": "true", "RedrivePolicy": policy("plain") })
        )
        .await,
        rule("plain")
    );
    h.ok(
        "CreateQueue",
        json!({ "QueueName": "src.fifo", "Attributes": { "FifoQueue": "true", "RedrivePolicy": policy("jobs.fifo") } }),
    )
    .await;
}

#[tokio::test]
async fn a_fifo_dead_letter_keeps_its_group_and_unblocks_the_group() {
    let h = harness();
    let dlq = h.fifo(json!({})).await;
    let policy = json!({ "deadLetterTargetArn": "arn:aws:sqs:us-east-1:000000000000:jobs.fifo",
                         "maxReceiveCount": 1 })
    .to_string();
    h.ok(
        "CreateQueue",
        json!({ "QueueName": "src.fifo",
                "Attributes": { "FifoQueue": "true", "RedrivePolicy": policy, "VisibilityTimeout": "1" } }),
    )
    .await;
    let source = format!("{BASE}/src.fifo");
    h.send(&source, "poison", "g", "1").await;
    h.send(&source, "next", "g", "2").await;
    assert_eq!(
        bodies(
            &h.receive(&source, json!({ "MaxNumberOfMessages": 1 }))
                .await
        ),
        ["poison"]
    );
    h.clock.advance_ms(1_000);
    let after = h.receive(&source, json!({})).await;
    assert_eq!(
        bodies(&after),
        ["next"],
        "the used-up head moved and its group flows"
    );
    let dead = h
        .receive(
            dlq,
            json!({ "AttributeNames": ["MessageGroupId", "DeadLetterQueueSourceArn"] }),
        )
        .await;
    assert_eq!(bodies(&dead), ["poison"]);
    assert_eq!(dead[0]["Attributes"]["MessageGroupId"], "g");
    assert_eq!(
        dead[0]["Attributes"]["DeadLetterQueueSourceArn"],
        "arn:aws:sqs:us-east-1:000000000000:src.fifo"
    );
}

#[tokio::test]
async fn a_group_delivers_in_order_and_waits_while_one_of_its_messages_is_in_flight() {
    let h = harness();
    let fifo = h.fifo(json!({})).await;
    for (i, (group, body)) in [("a", "a1"), ("b", "b1"), ("a", "a2"), ("a", "a3")]
        .into_iter()
        .enumerate()
    {
        h.send(fifo, body, group, &format!("d{i}")).await;
    }
    let first = h.receive(fifo, json!({ "MaxNumberOfMessages": 1 })).await;
    assert_eq!(bodies(&first), ["a1"]);
    assert_eq!(
        bodies(&h.receive(fifo, json!({})).await),
        ["b1"],
        "group a is held while a1 is in flight; group b flows"
    );
    h.ok(
        "DeleteMessage",
        json!({ "QueueUrl": fifo, "ReceiptHandle": handle(&first[0]) }),
    )
    .await;
    assert_eq!(
        bodies(&h.receive(fifo, json!({})).await),
        ["a2", "a3"],
        "several of a group in one receive, in order"
    );
}
