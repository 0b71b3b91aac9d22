//! Service tests: whole requests through `router(...).oneshot(...)` over an engine with an in-memory store and
//! a manual clock (no sockets, no sleeping). Each test is named after the rule it checks.

use axum::body::Body;
use axum::http::{HeaderMap, Request, StatusCode};
use axum::Router;
use http_body_util::BodyExt;
use serde_json::{json, Value};
use tower::ServiceExt;
use veil_core::ManualClock;

use super::test_support::{self, START_MS};
const URL: &str = "http://localhost:9324/000000000000/q";

struct Harness {
    app: Router,
    clock: ManualClock,
}

fn harness() -> Harness {
    let (engine, clock) = test_support::engine();
    Harness {
        app: test_support::app(&engine),
        clock,
    }
}

/// A ChangeMessageVisibility request for `handle` on the test queue.
fn change(handle: &str, visibility_timeout: u64) -> Value {
    json!({ "QueueUrl": URL, "ReceiptHandle": handle, "VisibilityTimeout": visibility_timeout })
}

struct JsonReply {
    status: StatusCode,
    headers: HeaderMap,
    body: Value,
}

impl JsonReply {
    fn error_type(&self) -> &str {
        self.body["__type"].as_str().unwrap_or_default()
    }
}

impl Harness {
    async fn send_request(&self, request: Request<Body>) -> (StatusCode, HeaderMap, Vec<u8>) {
        test_support::send(&self.app, request).await
    }

    async fn json_with(&self, action: &str, body: Value, authorization: Option<&str>) -> JsonReply {
        let mut request = test_support::json_request(action, true);
        if let Some(authorization) = authorization {
            request = request.header("authorization", authorization);
        }
        let (status, headers, bytes) = self
            .send_request(request.body(Body::from(body.to_string())).unwrap())
            .await;
        JsonReply {
            status,
            headers,
            body: serde_json::from_slice(&bytes).unwrap(),
        }
    }

    async fn json(&self, action: &str, body: Value) -> JsonReply {
        self.json_with(action, body, None).await
    }

    async fn ok(&self, action: &str, body: Value) -> Value {
        let reply = self.json(action, body).await;
        assert_eq!(reply.status, StatusCode::OK, "{action}: {}", reply.body);
        reply.body
    }

    async fn query(&self, path: &str, form: &str) -> (StatusCode, String) {
        test_support::query_call(&self.app, path, form).await
    }

    async fn create(&self, name: &str) -> String {
        let body = self.ok("CreateQueue", json!({ "QueueName": name })).await;
        body["QueueUrl"].as_str().unwrap().to_string()
    }

    async fn send(&self, body: &str) -> Value {
        self.ok(
            "SendMessage",
            json!({ "QueueUrl": URL, "MessageBody": body }),
        )
        .await
    }

    async fn receive(&self, extra: Value) -> Vec<Value> {
        let mut request = json!({ "QueueUrl": URL });
        if let (Some(request), Value::Object(extra)) = (request.as_object_mut(), extra) {
            request.extend(extra);
        }
        let body = self.ok("ReceiveMessage", request).await;
        body["Messages"].as_array().cloned().unwrap_or_default()
    }

    /// The handle of the one message a receive returns.
    async fn receive_handle(&self, extra: Value) -> String {
        let messages = self.receive(extra).await;
        assert_eq!(messages.len(), 1, "{messages:?}");
        messages[0]["ReceiptHandle"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    }

    /// ApproximateNumberOfMessages and ApproximateNumberOfMessagesNotVisible: what a receive cannot show
    /// while a message is hidden.
    async fn counts(&self, url: &str) -> [String; 2] {
        let attributes = self.attributes(url).await;
        [
            "ApproximateNumberOfMessages",
            "ApproximateNumberOfMessagesNotVisible",
        ]
        .map(|name| attributes[name].as_str().unwrap_or_default().to_string())
    }

    async fn attributes(&self, url: &str) -> Value {
        self.ok(
            "GetQueueAttributes",
            json!({ "QueueUrl": url, "AttributeNames": ["All"] }),
        )
        .await["Attributes"]
            .clone()
    }
}

#[tokio::test]
async fn create_queue_answers_a_url_on_the_request_host_and_default_account() {
    let h = harness();
    assert_eq!(h.create("q").await, URL);
    let body = h.ok("GetQueueUrl", json!({ "QueueName": "q" })).await;
    assert_eq!(body["QueueUrl"], URL);
}

#[tokio::test]
async fn create_queue_is_idempotent_only_when_given_attributes_match() {
    let h = harness();
    let attributes = json!({ "QueueName": "q", "Attributes": { "VisibilityTimeout": "60" } });
    h.ok("CreateQueue", attributes.clone()).await;
    h.ok("CreateQueue", attributes).await;
    h.ok("CreateQueue", json!({ "QueueName": "q" })).await;
    let reply = h
        .json(
            "CreateQueue",
            json!({ "QueueName": "q", "Attributes": { "VisibilityTimeout": "61" } }),
        )
        .await;
    assert_eq!(reply.status, StatusCode::BAD_REQUEST);
    assert_eq!(reply.error_type(), "com.amazonaws.sqs#QueueNameExists");
    assert_eq!(
        reply.body["message"],
        "A queue already exists with the same name and a different value for attribute VisibilityTimeout"
    );
    assert_eq!(
        reply.headers["x-amzn-query-error"],
        "QueueAlreadyExists;Sender"
    );
}

#[tokio::test]
async fn missing_queue_is_queue_does_not_exist_with_status_400() {
    let h = harness();
    let reply = h.json("GetQueueUrl", json!({ "QueueName": "nope" })).await;
    assert_eq!(reply.status, StatusCode::BAD_REQUEST);
    assert_eq!(reply.error_type(), "com.amazonaws.sqs#QueueDoesNotExist");
    assert_eq!(
        reply.headers["x-amzn-query-error"],
        "AWS.SimpleQueueService.NonExistentQueue;Sender"
    );
    assert!(reply.headers.contains_key("x-amzn-requestid"));
    let reply = h
        .json(
            "SendMessage",
            json!({ "QueueUrl": URL, "MessageBody": "x" }),
        )
        .await;
    assert_eq!(reply.error_type(), "com.amazonaws.sqs#QueueDoesNotExist");
}

#[tokio::test]
async fn list_queues_filters_by_prefix_and_pages_with_an_opaque_token() {
    let h = harness();
    for name in ["a1", "a2", "a3", "b1"] {
        h.create(name).await;
    }
    let all = h.ok("ListQueues", json!({})).await;
    assert_eq!(all["QueueUrls"].as_array().unwrap().len(), 4);
    assert!(all.get("NextToken").is_none());
    let first = h
        .ok(
            "ListQueues",
            json!({ "QueueNamePrefix": "a", "MaxResults": 2 }),
        )
        .await;
    assert_eq!(
        first["QueueUrls"],
        json!([
            "http://localhost:9324/000000000000/a1",
            "http://localhost:9324/000000000000/a2"
        ])
    );
    let token = first["NextToken"].as_str().unwrap();
    let second = h
        .ok(
            "ListQueues",
            json!({ "QueueNamePrefix": "a", "MaxResults": 2, "NextToken": token }),
        )
        .await;
    assert_eq!(
        second["QueueUrls"],
        json!(["http://localhost:9324/000000000000/a3"])
    );
    assert!(second.get("NextToken").is_none());
    let reply = h.json("ListQueues", json!({ "MaxResults": 0 })).await;
    assert_eq!(reply.status, StatusCode::BAD_REQUEST);
    assert_eq!(
        reply.error_type(),
        "com.amazonaws.sqs#InvalidParameterValueException"
    );
}

#[tokio::test]
async fn send_and_receive_round_trip_body_digests_and_system_attributes() {
    let h = harness();
    h.create("q").await;
    let sent = h
        .ok(
            "SendMessage",
            json!({ "QueueUrl": URL, "MessageBody": "hello",
                    "MessageAttributes": { "city": { "DataType": "String", "StringValue": "Any City" } } }),
        )
        .await;
    assert_eq!(sent["MD5OfMessageBody"], "5d41402abc4b2a76b9719d911017c592");
    assert_eq!(
        sent["MD5OfMessageAttributes"],
        "a6ffb68ea212e1f864e24e589a1bda87"
    );
    h.clock.advance_ms(5);
    let messages = h
        .receive(json!({ "AttributeNames": ["All"], "MessageAttributeNames": ["All"] }))
        .await;
    assert_eq!(messages.len(), 1);
    let message = &messages[0];
    assert_eq!(message["MessageId"], sent["MessageId"]);
    assert_eq!(message["Body"], "hello");
    assert_eq!(message["MD5OfBody"], "5d41402abc4b2a76b9719d911017c592");
    assert_eq!(
        message["MD5OfMessageAttributes"],
        "a6ffb68ea212e1f864e24e589a1bda87"
    );
    assert_eq!(message["Attributes"]["SentTimestamp"], START_MS.to_string());
    assert_eq!(
        message["Attributes"]["ApproximateFirstReceiveTimestamp"],
        (START_MS + 5).to_string()
    );
    assert_eq!(message["Attributes"]["ApproximateReceiveCount"], "1");
    assert_eq!(message["Attributes"]["SenderId"], "000000000000");
}

#[tokio::test]
async fn message_attributes_are_returned_only_when_asked_and_digested_as_returned() {
    let h = harness();
    h.create("q").await;
    h.ok(
        "SendMessage",
        json!({ "QueueUrl": URL, "MessageBody": "x", "MessageAttributes": {
            "city": { "DataType": "String", "StringValue": "Any City" },
            "geo.lat": { "DataType": "Number", "StringValue": "1.5" } } }),
    )
    .await;
    let plain = h.receive(json!({ "VisibilityTimeout": 0 })).await;
    assert!(plain[0].get("MessageAttributes").is_none());
    assert!(plain[0].get("MD5OfMessageAttributes").is_none());
    let selected = h
        .receive(json!({ "VisibilityTimeout": 0, "MessageAttributeNames": ["city"] }))
        .await;
    assert_eq!(
        selected[0]["MD5OfMessageAttributes"],
        "a6ffb68ea212e1f864e24e589a1bda87"
    );
    let prefixed = h
        .receive(json!({ "MessageAttributeNames": ["geo.*"] }))
        .await;
    let names: Vec<&String> = prefixed[0]["MessageAttributes"]
        .as_object()
        .unwrap()
        .keys()
        .collect();
    assert_eq!(names, ["geo.lat"]);
}

#[tokio::test]
async fn received_message_stays_hidden_until_its_visibility_timeout_passes() {
    let h = harness();
    h.create("q").await;
    h.send("m").await;
    assert_eq!(h.receive(json!({ "VisibilityTimeout": 10 })).await.len(), 1);
    assert!(h.receive(json!({})).await.is_empty());
    h.clock.advance_ms(10_000);
    let again = h
        .receive(json!({ "AttributeNames": ["ApproximateReceiveCount"] }))
        .await;
    assert_eq!(again[0]["Attributes"]["ApproximateReceiveCount"], "2");
}

#[tokio::test]
async fn receive_parameters_are_range_checked() {
    let h = harness();
    h.create("q").await;
    for (name, value) in [
        ("MaxNumberOfMessages", 0),
        ("MaxNumberOfMessages", 11),
        ("WaitTimeSeconds", 21),
        ("VisibilityTimeout", 43_201),
    ] {
        let reply = h
            .json("ReceiveMessage", json!({ "QueueUrl": URL, name: value }))
            .await;
        assert_eq!(reply.status, StatusCode::BAD_REQUEST, "{name}={value}");
        assert_eq!(
            reply.headers["x-amzn-query-error"], "InvalidParameterValue;Sender",
            "{name}"
        );
    }
    let reply = h
        .json(
            "ReceiveMessage",
            json!({ "QueueUrl": URL, "MaxNumberOfMessages": 11 }),
        )
        .await;
    assert_eq!(
        reply.body["message"],
        "Value 11 for parameter MaxNumberOfMessages is invalid. Reason: Must be between 1 and 10, if provided."
    );
}

#[tokio::test]
async fn long_poll_wakes_when_a_message_is_sent() {
    let h = harness();
    h.create("q").await;
    let app = h.app.clone();
    let poll = tokio::spawn(async move {
        let request = Request::post("/")
            .header("x-amz-target", "AmazonSQS.ReceiveMessage")
            .body(Body::from(
                json!({ "QueueUrl": URL, "WaitTimeSeconds": 20 }).to_string(),
            ))
            .unwrap();
        let response = app.oneshot(request).await.unwrap();
        let bytes = response.into_body().collect().await.unwrap().to_bytes();
        serde_json::from_slice::<Value>(&bytes).unwrap()
    });
    tokio::task::yield_now().await;
    h.send("wake").await;
    let body = poll.await.unwrap();
    assert_eq!(body["Messages"][0]["Body"], "wake");
}

#[tokio::test]
async fn delete_accepts_any_issued_receipt_and_rejects_forged_ones() {
    let h = harness();
    h.create("q").await;
    h.send("m").await;
    let old_handle = h.receive_handle(json!({ "VisibilityTimeout": 0 })).await;
    let new_handle = h.receive_handle(json!({ "VisibilityTimeout": 30 })).await;
    assert_ne!(old_handle, new_handle);
    // The second receive hides the message, so a receive cannot tell deleted from hidden: the counts can,
    // and so can a receive once the 30 s would have lapsed.
    assert_eq!(h.counts(URL).await, ["0", "1"]);
    h.ok(
        "DeleteMessage",
        json!({ "QueueUrl": URL, "ReceiptHandle": old_handle }),
    )
    .await;
    assert_eq!(h.counts(URL).await, ["0", "0"]);
    h.clock.advance_ms(30_000);
    assert_eq!(h.receive(json!({})).await, Vec::<Value>::new());
    // Already deleted: still 200.
    h.ok(
        "DeleteMessage",
        json!({ "QueueUrl": URL, "ReceiptHandle": old_handle }),
    )
    .await;
    let reply = h
        .json(
            "DeleteMessage",
            json!({ "QueueUrl": URL, "ReceiptHandle": "forged" }),
        )
        .await;
    assert_eq!(
        reply.error_type(),
        "com.amazonaws.sqs#ReceiptHandleIsInvalid"
    );
    assert_eq!(
        reply.body["message"],
        "The input receipt handle \"forged\" is not a valid receipt handle."
    );
}

#[tokio::test]
async fn change_visibility_counts_from_the_call_and_is_capped_at_12_hours_from_the_receive() {
    let h = harness();
    h.create("q").await;
    h.send("m").await;
    let handle = h.receive_handle(json!({ "VisibilityTimeout": 30 })).await;
    // 20 s into its 30 s, 60 s more: visible 80 s after the receive. Counting from the receive would make it
    // visible at 60 s.
    h.clock.advance_ms(20_000);
    h.ok("ChangeMessageVisibility", change(&handle, 60)).await;
    h.clock.advance_ms(59_999);
    assert_eq!(h.receive(json!({})).await, Vec::<Value>::new());
    h.clock.advance_ms(1);
    let handle = h.receive_handle(json!({})).await;
    // An hour after this receive, 11 hours more reach the 12-hour cap exactly; a second more passes it.
    h.clock.advance_ms(3_600_000);
    let reply = h
        .json("ChangeMessageVisibility", change(&handle, 39_601))
        .await;
    assert_eq!(reply.status, StatusCode::BAD_REQUEST);
    assert_eq!(
        reply.error_type(),
        "com.amazonaws.sqs#InvalidParameterValueException"
    );
    assert_eq!(
        reply.body["message"],
        "Value 39601 for parameter VisibilityTimeout is invalid. Reason: \
         Total VisibilityTimeout for the message is beyond the limit [43200 seconds]."
    );
    h.ok("ChangeMessageVisibility", change(&handle, 39_600))
        .await;
    h.clock.advance_ms(39_600_000 - 1);
    assert_eq!(h.receive(json!({})).await, Vec::<Value>::new());
    h.clock.advance_ms(1);
    assert_eq!(h.receive(json!({})).await.len(), 1);
}

#[tokio::test]
async fn change_visibility_accepts_the_handle_of_an_earlier_delivery() {
    let h = harness();
    h.create("q").await;
    h.send("m").await;
    let old_handle = h.receive_handle(json!({ "VisibilityTimeout": 0 })).await;
    h.receive_handle(json!({ "VisibilityTimeout": 30 })).await;
    // Standard queues honour any handle issued for the message, as AWS does (`VisibilityChange::receipts`):
    // the old handle ends the second delivery's 30 s at once.
    h.ok("ChangeMessageVisibility", change(&old_handle, 0))
        .await;
    assert_eq!(h.receive(json!({})).await.len(), 1);
}

#[tokio::test]
async fn send_message_batch_reports_each_failed_entry_and_sends_the_rest() {
    let h = harness();
    h.create("q").await;
    let body = h
        .ok(
            "SendMessageBatch",
            json!({ "QueueUrl": URL, "Entries": [
                { "Id": "good", "MessageBody": "a" },
                { "Id": "bad", "MessageBody": "nul\u{0}" },
                { "Id": "late", "MessageBody": "b", "DelaySeconds": 901 } ] }),
        )
        .await;
    let successful = body["Successful"].as_array().cloned().unwrap_or_default();
    assert_eq!(successful.len(), 1);
    assert_eq!(successful[0]["Id"], "good");
    let failed = body["Failed"].as_array().cloned().unwrap_or_default();
    let failures: Vec<(&Value, &Value, &Value)> = failed
        .iter()
        .map(|f| (&f["Id"], &f["Code"], &f["SenderFault"]))
        .collect();
    assert_eq!(
        failures,
        [
            (
                &json!("bad"),
                &json!("InvalidMessageContents"),
                &json!(true)
            ),
            (
                &json!("late"),
                &json!("InvalidParameterValue"),
                &json!(true)
            ),
        ]
    );
    // Only the good entry reached the queue, once: nothing delayed, one message to receive.
    let attributes = h.attributes(URL).await;
    assert_eq!(attributes["ApproximateNumberOfMessages"], "1");
    assert_eq!(attributes["ApproximateNumberOfMessagesDelayed"], "0");
    let received = h.receive(json!({ "MaxNumberOfMessages": 10 })).await;
    assert_eq!(received.len(), 1);
    assert_eq!(received[0]["Body"], "a");
    assert_eq!(received[0]["MessageId"], successful[0]["MessageId"]);
    assert_eq!(received[0]["MD5OfBody"], successful[0]["MD5OfMessageBody"]);
}

#[tokio::test]
async fn batch_requests_reject_repeated_ids_too_many_entries_and_oversize() {
    let h = harness();
    h.create("q").await;
    let repeated = h
        .json(
            "SendMessageBatch",
            json!({ "QueueUrl": URL, "Entries": [
                { "Id": "a", "MessageBody": "x" }, { "Id": "a", "MessageBody": "y" } ] }),
        )
        .await;
    assert_eq!(
        repeated.error_type(),
        "com.amazonaws.sqs#BatchEntryIdsNotDistinct"
    );
    let entries: Vec<Value> = (0..11)
        .map(|i| json!({ "Id": format!("e{i}"), "MessageBody": "x" }))
        .collect();
    let many = h
        .json(
            "SendMessageBatch",
            json!({ "QueueUrl": URL, "Entries": entries }),
        )
        .await;
    assert_eq!(
        many.error_type(),
        "com.amazonaws.sqs#TooManyEntriesInBatchRequest"
    );
    let big = "x".repeat(600_000);
    let long = h
        .json(
            "SendMessageBatch",
            json!({ "QueueUrl": URL, "Entries": [
                { "Id": "a", "MessageBody": big }, { "Id": "b", "MessageBody": big } ] }),
        )
        .await;
    assert_eq!(long.error_type(), "com.amazonaws.sqs#BatchRequestTooLong");
    let empty = h
        .json(
            "DeleteMessageBatch",
            json!({ "QueueUrl": URL, "Entries": [] }),
        )
        .await;
    assert_eq!(empty.error_type(), "com.amazonaws.sqs#EmptyBatchRequest");
}

#[tokio::test]
async fn message_over_the_queue_maximum_size_is_refused() {
    let h = harness();
    h.ok(
        "CreateQueue",
        json!({ "QueueName": "q", "Attributes": { "MaximumMessageSize": "1024" } }),
    )
    .await;
    let reply = h
        .json(
            "SendMessage",
            json!({ "QueueUrl": URL, "MessageBody": "x".repeat(1000),
                    "MessageAttributes": { "pad": { "DataType": "String", "StringValue": "y".repeat(30) } } }),
        )
        .await;
    assert_eq!(reply.status, StatusCode::BAD_REQUEST);
    assert_eq!(
        reply.error_type(),
        "com.amazonaws.sqs#InvalidParameterValueException"
    );
    assert!(reply.body["message"]
        .as_str()
        .unwrap()
        .contains("Message must be shorter than 1024 bytes."));
}

/// The size the engine compares with the queue's limit counts the kept trace header as an attribute, so a
/// body within the limit that the header takes over it is refused with the same answer.
#[tokio::test]
async fn a_trace_header_counts_toward_the_queue_maximum_size() {
    let h = harness();
    h.ok(
        "CreateQueue",
        json!({ "QueueName": "q", "Attributes": { "MaximumMessageSize": "1024" } }),
    )
    .await;
    let reply = h
        .json(
            "SendMessage",
            json!({ "QueueUrl": URL, "MessageBody": "x".repeat(990), "MessageSystemAttributes": {
                "AWSTraceHeader": { "DataType": "String", "StringValue": "y".repeat(30) } } }),
        )
        .await;
    assert_eq!(reply.status, StatusCode::BAD_REQUEST);
    assert!(reply.body["message"]
        .as_str()
        .unwrap()
        .contains("Message must be shorter than 1024 bytes."));
    h.ok(
        "SendMessage",
        json!({ "QueueUrl": URL, "MessageBody": "x".repeat(990), "MessageSystemAttributes": {
            "AWSTraceHeader": { "DataType": "String", "StringValue": "y" } } }),
    )
    .await;
}

#[tokio::test]
async fn delete_and_change_visibility_batches_report_per_entry_results() {
    let h = harness();
    h.create("q").await;
    h.send("m").await;
    let handle = h.receive(json!({})).await[0]["ReceiptHandle"].clone();
    let body = h
        .ok(
            "ChangeMessageVisibilityBatch",
            json!({ "QueueUrl": URL, "Entries": [
                { "Id": "ok", "ReceiptHandle": handle, "VisibilityTimeout": 100 },
                { "Id": "forged", "ReceiptHandle": "zzz", "VisibilityTimeout": 100 } ] }),
        )
        .await;
    assert_eq!(body["Successful"], json!([{ "Id": "ok" }]));
    assert_eq!(body["Failed"][0]["Code"], "ReceiptHandleIsInvalid");
    let body = h
        .ok(
            "DeleteMessageBatch",
            json!({ "QueueUrl": URL, "Entries": [ { "Id": "ok", "ReceiptHandle": handle } ] }),
        )
        .await;
    assert_eq!(body["Successful"], json!([{ "Id": "ok" }]));
    assert_eq!(
        h.attributes(URL).await["ApproximateNumberOfMessagesNotVisible"],
        "0"
    );
}

#[tokio::test]
async fn a_batch_on_a_missing_queue_fails_whole_before_its_entries_are_judged() {
    let h = harness();
    let reply = h
        .json(
            "ChangeMessageVisibilityBatch",
            json!({ "QueueUrl": URL, "Entries": [
                { "Id": "bad", "ReceiptHandle": "zzz", "VisibilityTimeout": -1 } ] }),
        )
        .await;
    assert_eq!(reply.error_type(), "com.amazonaws.sqs#QueueDoesNotExist");
    let reply = h
        .json(
            "DeleteMessageBatch",
            json!({ "QueueUrl": URL, "Entries": [ { "Id": "forged", "ReceiptHandle": "zzz" } ] }),
        )
        .await;
    assert_eq!(reply.error_type(), "com.amazonaws.sqs#QueueDoesNotExist");
}

#[tokio::test]
async fn purge_is_allowed_once_per_60_seconds() {
    let h = harness();
    h.create("q").await;
    h.send("m").await;
    h.ok("PurgeQueue", json!({ "QueueUrl": URL })).await;
    assert!(h.receive(json!({})).await.is_empty());
    let reply = h.json("PurgeQueue", json!({ "QueueUrl": URL })).await;
    assert_eq!(reply.error_type(), "com.amazonaws.sqs#PurgeQueueInProgress");
    assert_eq!(
        reply.headers["x-amzn-query-error"],
        "AWS.SimpleQueueService.PurgeQueueInProgress;Sender"
    );
    h.clock.advance_ms(60_000);
    h.ok("PurgeQueue", json!({ "QueueUrl": URL })).await;
}

#[tokio::test]
async fn queue_attributes_show_counts_settings_and_epoch_seconds() {
    let h = harness();
    h.ok(
        "CreateQueue",
        json!({ "QueueName": "q", "Attributes": { "VisibilityTimeout": "45", "DelaySeconds": "0" } }),
    )
    .await;
    h.send("visible").await;
    h.send("hidden").await;
    h.ok(
        "SendMessage",
        json!({ "QueueUrl": URL, "MessageBody": "delayed", "DelaySeconds": 60 }),
    )
    .await;
    h.receive(json!({})).await;
    let attributes = h.attributes(URL).await;
    assert_eq!(attributes["ApproximateNumberOfMessages"], "1");
    assert_eq!(attributes["ApproximateNumberOfMessagesNotVisible"], "1");
    assert_eq!(attributes["ApproximateNumberOfMessagesDelayed"], "1");
    assert_eq!(attributes["VisibilityTimeout"], "45");
    assert_eq!(attributes["MessageRetentionPeriod"], "345600");
    assert_eq!(attributes["MaximumMessageSize"], "1048576");
    assert_eq!(
        attributes["CreatedTimestamp"],
        (START_MS / 1000).to_string()
    );
    assert_eq!(
        attributes["QueueArn"],
        "arn:aws:sqs:us-east-1:000000000000:q"
    );
    // SSE-SQS is on for a new queue, as AWS creates them (attributes/render.rs).
    assert_eq!(attributes["SqsManagedSseEnabled"], "true");
    let reply = h
        .json(
            "GetQueueAttributes",
            json!({ "QueueUrl": URL, "AttributeNames": ["Bogus"] }),
        )
        .await;
    assert_eq!(reply.error_type(), "com.amazonaws.sqs#InvalidAttributeName");
}

#[tokio::test]
async fn set_queue_attributes_validates_ranges_and_applies_changes() {
    let h = harness();
    h.create("q").await;
    let reply = h
        .json(
            "SetQueueAttributes",
            json!({ "QueueUrl": URL, "Attributes": { "VisibilityTimeout": "43201" } }),
        )
        .await;
    assert_eq!(
        reply.error_type(),
        "com.amazonaws.sqs#InvalidAttributeValue"
    );
    h.ok(
        "SetQueueAttributes",
        json!({ "QueueUrl": URL, "Attributes": { "ReceiveMessageWaitTimeSeconds": "20" } }),
    )
    .await;
    assert_eq!(
        h.attributes(URL).await["ReceiveMessageWaitTimeSeconds"],
        "20"
    );
}

#[tokio::test]
async fn redrive_policy_needs_an_existing_target_and_moves_messages_after_max_receives() {
    let h = harness();
    h.create("q").await;
    let dlq_url = h.create("dlq").await;
    let policy = |target: &str| {
        json!({ "QueueUrl": URL, "Attributes": { "RedrivePolicy":
            format!(r#"{{"deadLetterTargetArn":"arn:aws:sqs:us-east-1:000000000000:{target}","maxReceiveCount":"1"}}"#) } })
    };
    let reply = h.json("SetQueueAttributes", policy("missing")).await;
    assert_eq!(
        reply.headers["x-amzn-query-error"],
        "InvalidParameterValue;Sender"
    );
    assert!(reply.body["message"]
        .as_str()
        .unwrap()
        .contains("does not exist"));
    h.ok("SetQueueAttributes", policy("dlq")).await;
    let rendered: Value =
        serde_json::from_str(h.attributes(URL).await["RedrivePolicy"].as_str().unwrap()).unwrap();
    assert_eq!(
        rendered,
        json!({ "deadLetterTargetArn": "arn:aws:sqs:us-east-1:000000000000:dlq", "maxReceiveCount": 1 })
    );
    h.send("poison").await;
    assert_eq!(h.receive(json!({ "VisibilityTimeout": 0 })).await.len(), 1);
    assert!(h.receive(json!({})).await.is_empty());
    let moved = h
        .ok(
            "ReceiveMessage",
            json!({ "QueueUrl": dlq_url, "MessageSystemAttributeNames": ["All"] }),
        )
        .await;
    let message = &moved["Messages"][0];
    assert_eq!(message["Body"], "poison");
    assert_eq!(message["Attributes"]["ApproximateReceiveCount"], "2");
    assert_eq!(
        message["Attributes"]["DeadLetterQueueSourceArn"],
        "arn:aws:sqs:us-east-1:000000000000:q"
    );
    let sources = h
        .ok("ListDeadLetterSourceQueues", json!({ "QueueUrl": dlq_url }))
        .await;
    assert_eq!(sources["queueUrls"], json!([URL]));
    h.ok(
        "SetQueueAttributes",
        json!({ "QueueUrl": URL, "Attributes": { "RedrivePolicy": "" } }),
    )
    .await;
    assert!(h.attributes(URL).await.get("RedrivePolicy").is_none());
}

#[tokio::test]
async fn redrive_allow_policy_deny_all_refuses_every_source() {
    let h = harness();
    h.create("q").await;
    h.ok(
        "CreateQueue",
        json!({ "QueueName": "dlq", "Attributes": { "RedriveAllowPolicy": r#"{"redrivePermission":"denyAll"}"# } }),
    )
    .await;
    let reply = h
        .json(
            "SetQueueAttributes",
            json!({ "QueueUrl": URL, "Attributes": { "RedrivePolicy":
                r#"{"deadLetterTargetArn":"arn:aws:sqs:us-east-1:000000000000:dlq","maxReceiveCount":3}"# } }),
        )
        .await;
    assert_eq!(reply.status, StatusCode::BAD_REQUEST);
    assert_eq!(
        reply.error_type(),
        "com.amazonaws.sqs#InvalidParameterValueException"
    );
    assert!(reply.body["message"]
        .as_str()
        .unwrap()
        .contains("RedriveAllowPolicy"));
}

#[tokio::test]
async fn tags_are_added_listed_and_removed() {
    let h = harness();
    h.ok(
        "CreateQueue",
        json!({ "QueueName": "q", "tags": { "team": "a" } }),
    )
    .await;
    h.ok(
        "TagQueue",
        json!({ "QueueUrl": URL, "Tags": { "env": "dev" } }),
    )
    .await;
    let tags = h.ok("ListQueueTags", json!({ "QueueUrl": URL })).await;
    assert_eq!(tags["Tags"], json!({ "env": "dev", "team": "a" }));
    h.ok(
        "UntagQueue",
        json!({ "QueueUrl": URL, "TagKeys": ["team"] }),
    )
    .await;
    let tags = h.ok("ListQueueTags", json!({ "QueueUrl": URL })).await;
    assert_eq!(tags["Tags"], json!({ "env": "dev" }));
}

#[tokio::test]
async fn tag_queue_without_tags_is_missing_parameter() {
    let h = harness();
    h.create("q").await;
    let reply = h
        .json("TagQueue", json!({ "QueueUrl": URL, "Tags": {} }))
        .await;
    assert_eq!(reply.status, StatusCode::BAD_REQUEST);
    assert_eq!(
        reply.body["message"],
        json!("The request must contain the parameter Tags.")
    );
    assert_eq!(
        reply.headers["x-amzn-query-error"],
        "MissingParameter;Sender"
    );
    let (status, xml) = h
        .query("/000000000000/q", "Action=TagQueue&Version=2012-11-05")
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(xml.contains("<Code>MissingParameter</Code>"), "{xml}");
}

#[tokio::test]
async fn query_protocol_speaks_forms_and_xml() {
    let h = harness();
    let (status, xml) = h
        .query("/", "Action=CreateQueue&QueueName=q&Version=2012-11-05")
        .await;
    assert_eq!(status, StatusCode::OK);
    assert!(
        xml.contains(&format!(
            "<CreateQueueResult><QueueUrl>{URL}</QueueUrl></CreateQueueResult>"
        )),
        "{xml}"
    );
    let (status, xml) = h
        .query(
            "/000000000000/q",
            "Action=SendMessage&MessageBody=a%26b&MessageAttribute.1.Name=city\
             &MessageAttribute.1.Value.DataType=String&MessageAttribute.1.Value.StringValue=Any+City",
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{xml}");
    assert!(xml.contains(
        "<MD5OfMessageAttributes>a6ffb68ea212e1f864e24e589a1bda87</MD5OfMessageAttributes>"
    ));
    let (_, xml) = h
        .query(
            "/",
            &format!("Action=ReceiveMessage&QueueUrl={URL}&MessageAttributeName.1=All"),
        )
        .await;
    assert!(xml.contains("<Body>a&amp;b</Body>"), "{xml}");
    assert!(xml.contains("<StringValue>Any City</StringValue>"), "{xml}");
    let (status, xml) = h.query("/", "Action=GetQueueUrl&QueueName=none").await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(
        xml.contains("<Code>AWS.SimpleQueueService.NonExistentQueue</Code>"),
        "{xml}"
    );
    let (status, xml) = h.query("/", "Action=Dance").await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(xml.contains("<Code>InvalidAction</Code>"), "{xml}");
}

#[tokio::test]
async fn another_region_is_a_separate_namespace() {
    let h = harness();
    let authorization = "AWS4-HMAC-SHA256 Credential=AKID/20240101/eu-west-1/sqs/aws4_request, \
                         SignedHeaders=host, Signature=0";
    h.create("q").await;
    let reply = h
        .json_with(
            "GetQueueUrl",
            json!({ "QueueName": "q" }),
            Some(authorization),
        )
        .await;
    assert_eq!(reply.error_type(), "com.amazonaws.sqs#QueueDoesNotExist");
    let created = h
        .json_with(
            "CreateQueue",
            json!({ "QueueName": "q" }),
            Some(authorization),
        )
        .await;
    let attributes = h
        .json_with(
            "GetQueueAttributes",
            json!({ "QueueUrl": created.body["QueueUrl"], "AttributeNames": ["QueueArn"] }),
            Some(authorization),
        )
        .await;
    assert_eq!(
        attributes.body["Attributes"]["QueueArn"],
        "arn:aws:sqs:eu-west-1:000000000000:q"
    );
}

#[tokio::test]
async fn an_advertised_url_names_every_queue_whatever_host_the_request_names() {
    let (engine, _clock) = test_support::engine();
    let config = super::SqsConfig {
        advertised_url: Some("https://veil.internal:9324".into()),
        ..super::SqsConfig::default()
    };
    let app = super::router(engine, config);
    let (status, _, body) =
        test_support::json_call(&app, "CreateQueue", &json!({ "QueueName": "q" })).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(
        body["QueueUrl"],
        "https://veil.internal:9324/000000000000/q"
    );
    let (_, _, listed) = test_support::json_call(&app, "ListQueues", &json!({})).await;
    assert_eq!(
        listed["QueueUrls"],
        json!(["https://veil.internal:9324/000000000000/q"])
    );
}

#[tokio::test]
async fn queue_url_with_another_host_still_names_the_queue() {
    let h = harness();
    h.create("q").await;
    h.ok(
        "SendMessage",
        json!({ "QueueUrl": "https://sqs.us-east-1.amazonaws.com/000000000000/q", "MessageBody": "x" }),
    )
    .await;
    assert_eq!(h.receive(json!({})).await.len(), 1);
}

#[tokio::test]
async fn an_unknown_action_is_an_unknown_operation() {
    let h = harness();
    let reply = h.json("NoSuchThing", json!({})).await;
    assert_eq!(
        reply.error_type(),
        "com.amazon.coral.service#UnknownOperationException"
    );
}

#[tokio::test]
async fn malformed_json_is_a_serialization_error_not_a_crash() {
    let h = harness();
    let request = Request::post("/")
        .header("x-amz-target", "AmazonSQS.SendMessage")
        .body(Body::from("{\"QueueUrl\":"))
        .unwrap();
    let (status, _, body) = h.send_request(request).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    let body: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(
        body["__type"],
        "com.amazon.coral.service#SerializationException"
    );
}

#[tokio::test]
async fn trace_header_is_a_system_attribute_not_a_user_attribute() {
    let h = harness();
    h.create("q").await;
    let sent = h
        .ok(
            "SendMessage",
            json!({ "QueueUrl": URL, "MessageBody": "x", "MessageSystemAttributes": {
                "AWSTraceHeader": { "DataType": "String", "StringValue": "Root=1-abc" } } }),
        )
        .await;
    assert!(sent.get("MD5OfMessageSystemAttributes").is_some());
    assert!(sent.get("MD5OfMessageAttributes").is_none());
    let messages = h
        .receive(json!({ "AttributeNames": ["All"], "MessageAttributeNames": ["All"] }))
        .await;
    assert_eq!(messages[0]["Attributes"]["AWSTraceHeader"], "Root=1-abc");
    assert!(messages[0].get("MessageAttributes").is_none());
}

/// What a waiting long poll keeps alive is the request's future (docs/reliability.md "Load and overload"):
/// its size is paid by every waiting connection, so a large action's state must not inflate it. With the
/// largest action's state inline it was 4.8 KiB; boxed, it is about 2.1 KiB (the bound leaves room for the
/// compiler's layout to move, not for an action's state to come back).
#[test]
fn the_future_of_a_waiting_request_stays_small() {
    let (engine, _clock) = test_support::engine();
    let config = super::SqsConfig::default();
    let service = std::sync::Arc::new(super::Service::new(engine.into(), config));
    let request = test_support::json_request("ReceiveMessage", true)
        .body(Body::from("{}"))
        .unwrap();
    let future = super::handle(axum::extract::State(service), request);
    let bytes = std::mem::size_of_val(&future);
    eprintln!("SQS request future: {bytes} bytes");
    assert!(bytes <= 3072, "the SQS request future is {bytes} bytes");
}
