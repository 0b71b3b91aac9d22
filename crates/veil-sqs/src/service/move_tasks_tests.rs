//! Tests of StartMessageMoveTask, ListMessageMoveTasks and CancelMessageMoveTask: whole requests through the
//! router over an in-memory engine and a manual clock, in both protocols, the engine's steps driven by the
//! test. Each is named after the rule it checks.

use std::sync::Arc;

use axum::http::StatusCode;
use axum::Router;
use serde_json::{json, Value};
use veil_core::Engine;

use super::*;
use crate::service::test_support::{self, START_MS};
const DLQ_URL: &str = "http://localhost:9324/000000000000/dlq";
const DLQ_ARN: &str = "arn:aws:sqs:us-east-1:000000000000:dlq";
const ORIGIN_ARN: &str = "arn:aws:sqs:us-east-1:000000000000:origin";
const TARGET_ARN: &str = "arn:aws:sqs:us-east-1:000000000000:target";

struct Harness {
    app: Router,
    engine: Arc<Engine>,
}

struct Reply {
    status: StatusCode,
    query_error: Option<String>,
    body: Value,
}

impl Reply {
    fn error(&self) -> (StatusCode, &str, &str) {
        let code = self.query_error.as_deref().unwrap_or_default();
        let message = self.body["message"].as_str().unwrap_or_default();
        (self.status, code, message)
    }
}

/// `dlq` (the dead-letter queue of `origin`), `origin` and `target`.
async fn harness() -> Harness {
    let (engine, _clock) = test_support::engine();
    let h = Harness {
        app: test_support::app(&engine),
        engine,
    };
    h.ok("CreateQueue", json!({ "QueueName": "dlq" })).await;
    let policy = json!({ "deadLetterTargetArn": DLQ_ARN, "maxReceiveCount": 1 }).to_string();
    h.ok(
        "CreateQueue",
        json!({ "QueueName": "origin", "Attributes": { "RedrivePolicy": policy } }),
    )
    .await;
    h.ok("CreateQueue", json!({ "QueueName": "target" })).await;
    h
}

impl Harness {
    async fn call(&self, action: &str, body: Value) -> Reply {
        let (status, query_error, body) = test_support::json_call(&self.app, action, &body).await;
        Reply {
            status,
            query_error,
            body,
        }
    }

    async fn ok(&self, action: &str, body: Value) -> Value {
        let reply = self.call(action, body).await;
        assert_eq!(reply.status, StatusCode::OK, "{action}: {}", reply.body);
        reply.body
    }

    async fn query(&self, form: &str) -> (StatusCode, String) {
        test_support::query_call(&self.app, "/", form).await
    }

    async fn send_to_dlq(&self, count: usize) {
        for i in 0..count {
            let body = json!({ "QueueUrl": DLQ_URL, "MessageBody": format!("m{i}") });
            self.ok("SendMessage", body).await;
        }
    }

    async fn list(&self, max_results: i64) -> Vec<Value> {
        let body = json!({ "SourceArn": DLQ_ARN, "MaxResults": max_results });
        let reply = self.ok("ListMessageMoveTasks", body).await;
        reply["Results"].as_array().cloned().unwrap_or_default()
    }
}

#[tokio::test]
async fn a_task_is_started_listed_and_cancelled_with_sqs_shapes() {
    let h = harness().await;
    h.send_to_dlq(3).await;
    let body = json!({ "SourceArn": DLQ_ARN, "DestinationArn": TARGET_ARN, "MaxNumberOfMessagesPerSecond": 1 });
    let handle = h.ok("StartMessageMoveTask", body).await["TaskHandle"]
        .as_str()
        .unwrap()
        .to_owned();
    let (task_id, source_arn) = decode_handle(&handle).expect("a handle as AWS makes them");
    assert_eq!(source_arn, DLQ_ARN);
    assert!(uuid::Uuid::parse_str(&task_id).is_ok(), "{task_id}");

    let running = h.list(10).await;
    assert_eq!(
        running,
        [json!({
            "TaskHandle": handle,
            "Status": "RUNNING",
            "SourceArn": DLQ_ARN,
            "DestinationArn": TARGET_ARN,
            "MaxNumberOfMessagesPerSecond": 1,
            "ApproximateNumberOfMessagesMoved": 0,
            "ApproximateNumberOfMessagesToMove": 3,
            "StartedTimestamp": START_MS,
        })]
    );
    h.engine.drive_move_tasks().await.unwrap();
    let cancelled = h
        .ok("CancelMessageMoveTask", json!({ "TaskHandle": handle }))
        .await;
    assert_eq!(cancelled, json!({ "ApproximateNumberOfMessagesMoved": 1 }));
    let after = h.list(1).await;
    assert_eq!(after[0]["Status"], "CANCELLED");
    assert_eq!(
        after[0].get("TaskHandle"),
        None,
        "a handle only while running"
    );

    let again = h
        .call("CancelMessageMoveTask", json!({ "TaskHandle": handle }))
        .await;
    assert_eq!(
        again.error(),
        (
            StatusCode::NOT_FOUND,
            "ResourceNotFoundException;Sender",
            "Task does not exist."
        )
    );
    assert_eq!(
        again.body["__type"],
        "com.amazonaws.sqs#ResourceNotFoundException"
    );
}

#[tokio::test]
async fn without_a_destination_messages_go_back_and_the_listing_names_no_destination() {
    let h = harness().await;
    let origin_url = "http://localhost:9324/000000000000/origin";
    h.ok(
        "SendMessage",
        json!({ "QueueUrl": origin_url, "MessageBody": "poison" }),
    )
    .await;
    let receive = json!({ "QueueUrl": origin_url, "VisibilityTimeout": 0 });
    h.ok("ReceiveMessage", receive.clone()).await;
    h.ok("ReceiveMessage", receive).await;

    h.ok("StartMessageMoveTask", json!({ "SourceArn": DLQ_ARN }))
        .await;
    h.engine.drive_move_tasks().await.unwrap();

    let task = &h.list(1).await[0];
    assert_eq!(task["Status"], "COMPLETED");
    assert_eq!(task["ApproximateNumberOfMessagesMoved"], 1);
    assert_eq!(task.get("DestinationArn"), None);
    assert_eq!(task.get("MaxNumberOfMessagesPerSecond"), None);
    let back = h
        .ok("ReceiveMessage", json!({ "QueueUrl": origin_url }))
        .await;
    assert_eq!(back["Messages"][0]["Body"], "poison");
}

#[tokio::test]
async fn a_failed_task_shows_aws_failure_reason() {
    let h = harness().await;
    h.send_to_dlq(1).await;
    h.ok("StartMessageMoveTask", json!({ "SourceArn": DLQ_ARN }))
        .await;
    h.engine.drive_move_tasks().await.unwrap();

    let task = &h.list(1).await[0];
    assert_eq!(task["Status"], "FAILED");
    assert_eq!(task["FailureReason"], "CouldNotDetermineMessageSource");
    assert_eq!(task["ApproximateNumberOfMessagesMoved"], 0);
}

#[tokio::test]
async fn start_is_checked_in_aws_order_with_aws_texts() {
    let h = harness().await;
    let format = |name: &str| {
        format!(
            "You must use this format to specify the {name}: \
             arn:<partition>:<service>:<region>:<account-id>:<resource-id>"
        )
    };
    let missing_dlq = "arn:aws:sqs:us-east-1:000000000000:nope";
    let cases = [
        (
            json!({}),
            400,
            "MissingParameter",
            "The request must contain the parameter SourceArn.".to_owned(),
        ),
        (
            json!({ "SourceArn": "" }),
            400,
            "InvalidParameterValue",
            format("SourceArn"),
        ),
        (
            json!({ "SourceArn": "dlq" }),
            400,
            "InvalidParameterValue",
            format("SourceArn"),
        ),
        (
            json!({ "SourceArn": missing_dlq }),
            404,
            "ResourceNotFoundException",
            "The resource that you specified for the SourceArn parameter doesn't exist.".to_owned(),
        ),
        (
            json!({ "SourceArn": ORIGIN_ARN }),
            400,
            "InvalidParameterValue",
            "Source queue must be configured as a Dead Letter Queue.".to_owned(),
        ),
        (
            json!({ "SourceArn": DLQ_ARN, "DestinationArn": "" }),
            400,
            "InvalidParameterValue",
            format("DestinationArn"),
        ),
        (
            json!({ "SourceArn": DLQ_ARN, "DestinationArn": DLQ_ARN }),
            400,
            "InvalidParameterValue",
            "Source queue arn and destination queue arn cannot be the same.".to_owned(),
        ),
        (
            json!({ "SourceArn": DLQ_ARN, "DestinationArn": missing_dlq, "MaxNumberOfMessagesPerSecond": 0 }),
            404,
            "ResourceNotFoundException",
            "The resource that you specified for the DestinationArn parameter doesn't exist."
                .to_owned(),
        ),
    ];
    for (body, status, code, message) in cases {
        let reply = h.call("StartMessageMoveTask", body.clone()).await;
        let code = format!("{code};Sender");
        assert_eq!(
            reply.error(),
            (
                StatusCode::from_u16(status).unwrap(),
                code.as_str(),
                message.as_str()
            ),
            "{body}"
        );
    }
    for rate in [0_i64, 501, -1, 4_294_967_297] {
        let body = json!({ "SourceArn": DLQ_ARN, "MaxNumberOfMessagesPerSecond": rate });
        let reply = h.call("StartMessageMoveTask", body).await;
        assert_eq!(
            reply.error(),
            (
                StatusCode::BAD_REQUEST,
                "InvalidParameterValue;Sender",
                "Value for parameter MaxNumberOfMessagesPerSecond is invalid. Reason: You must enter a \
                 number that's between 1 and 500."
            ),
            "rate {rate}"
        );
    }
    for rate in [1, 500] {
        let body = json!({ "SourceArn": DLQ_ARN, "MaxNumberOfMessagesPerSecond": rate });
        let handle = h.ok("StartMessageMoveTask", body).await["TaskHandle"].clone();
        h.ok("CancelMessageMoveTask", json!({ "TaskHandle": handle }))
            .await;
    }
    h.ok("StartMessageMoveTask", json!({ "SourceArn": DLQ_ARN }))
        .await;
    let second = h
        .call(
            "StartMessageMoveTask",
            json!({ "SourceArn": DLQ_ARN, "DestinationArn": TARGET_ARN }),
        )
        .await;
    assert_eq!(
        second.error(),
        (
            StatusCode::BAD_REQUEST,
            "InvalidParameterValue;Sender",
            "There is already a task running. Only one active task is allowed for a source queue arn at \
             a given time."
        )
    );
}

#[tokio::test]
async fn list_shows_the_most_recent_task_unless_max_results_asks_for_up_to_ten() {
    let h = harness().await;
    for _ in 0..3 {
        h.ok("StartMessageMoveTask", json!({ "SourceArn": DLQ_ARN }))
            .await;
        h.engine.drive_move_tasks().await.unwrap();
    }
    let one = h
        .ok("ListMessageMoveTasks", json!({ "SourceArn": DLQ_ARN }))
        .await;
    assert_eq!(one["Results"].as_array().map(Vec::len), Some(1));
    assert_eq!(h.list(10).await.len(), 3);
    for max_results in [0, 11] {
        let body = json!({ "SourceArn": DLQ_ARN, "MaxResults": max_results });
        let reply = h.call("ListMessageMoveTasks", body).await;
        let message = format!(
            "Value {max_results} for parameter MaxResults is invalid. Reason: Must be between 1 and 10."
        );
        assert_eq!(
            reply.error(),
            (
                StatusCode::BAD_REQUEST,
                "InvalidParameterValue;Sender",
                message.as_str()
            )
        );
    }
    let target = json!({ "SourceArn": TARGET_ARN });
    assert_eq!(
        h.ok("ListMessageMoveTasks", target).await,
        json!({ "Results": [] }),
        "a queue without tasks lists none"
    );
    let missing = json!({ "SourceArn": "arn:aws:sqs:us-east-1:000000000000:nope" });
    assert_eq!(
        h.call("ListMessageMoveTasks", missing).await.error().0,
        StatusCode::NOT_FOUND
    );
}

#[tokio::test]
async fn cancel_refuses_handles_veil_did_not_make() {
    let h = harness().await;
    let handle = |doc: Value| BASE64.encode(doc.to_string());
    let cases = [
        (
            "foobared".to_owned(),
            StatusCode::BAD_REQUEST,
            "InvalidParameterValue;Sender",
            "Value for parameter TaskHandle is invalid.",
        ),
        (
            String::new(),
            StatusCode::BAD_REQUEST,
            "InvalidParameterValue;Sender",
            "Value for parameter TaskHandle is invalid.",
        ),
        (
            handle(
                json!({ "taskId": "x", "sourceArn": "arn:aws:sqs:us-east-1:000000000000:nope" }),
            ),
            StatusCode::NOT_FOUND,
            "ResourceNotFoundException;Sender",
            "The resource that you specified for the SourceArn parameter doesn't exist.",
        ),
        (
            handle(json!({ "taskId": uuid::Uuid::new_v4().to_string(), "sourceArn": DLQ_ARN })),
            StatusCode::NOT_FOUND,
            "ResourceNotFoundException;Sender",
            "Task does not exist.",
        ),
        (
            handle(json!({ "taskId": "not a uuid", "sourceArn": DLQ_ARN })),
            StatusCode::NOT_FOUND,
            "ResourceNotFoundException;Sender",
            "Task does not exist.",
        ),
    ];
    for (task_handle, status, code, message) in cases {
        let reply = h
            .call(
                "CancelMessageMoveTask",
                json!({ "TaskHandle": task_handle }),
            )
            .await;
        assert_eq!(reply.error(), (status, code, message), "{task_handle}");
    }
    let missing = h.call("CancelMessageMoveTask", json!({})).await;
    assert_eq!(
        missing.error().2,
        "The request must contain the parameter TaskHandle."
    );
}

#[tokio::test]
async fn the_query_protocol_answers_move_tasks_in_xml() {
    let h = harness().await;
    h.send_to_dlq(1).await;
    let (status, started) = h
        .query(&format!(
            "Action=StartMessageMoveTask&SourceArn={DLQ_ARN}&DestinationArn={TARGET_ARN}&MaxNumberOfMessagesPerSecond=5"
        ))
        .await;
    assert_eq!(status, StatusCode::OK, "{started}");
    assert!(
        started.contains("<StartMessageMoveTaskResult><TaskHandle>"),
        "{started}"
    );
    let (_, listed) = h
        .query(&format!("Action=ListMessageMoveTasks&SourceArn={DLQ_ARN}"))
        .await;
    assert!(
        listed
            .contains("<ListMessageMoveTasksResult><ListMessageMoveTasksResultEntry><TaskHandle>"),
        "{listed}"
    );
    assert!(
        listed.contains(&format!(
            "<Status>RUNNING</Status><SourceArn>{DLQ_ARN}</SourceArn><DestinationArn>{TARGET_ARN}</DestinationArn>\
             <MaxNumberOfMessagesPerSecond>5</MaxNumberOfMessagesPerSecond>\
             <ApproximateNumberOfMessagesMoved>0</ApproximateNumberOfMessagesMoved>\
             <ApproximateNumberOfMessagesToMove>1</ApproximateNumberOfMessagesToMove>\
             <StartedTimestamp>{START_MS}</StartedTimestamp></ListMessageMoveTasksResultEntry>"
        )),
        "{listed}"
    );
    let handle = started
        .split("<TaskHandle>")
        .nth(1)
        .and_then(|rest| rest.split("</TaskHandle>").next())
        .unwrap()
        .to_owned();
    let form = format!(
        "Action=CancelMessageMoveTask&TaskHandle={}",
        form_urlencoded::byte_serialize(handle.as_bytes()).collect::<String>()
    );
    let (status, cancelled) = h.query(&form).await;
    assert_eq!(status, StatusCode::OK, "{cancelled}");
    assert!(
        cancelled.contains(
            "<CancelMessageMoveTaskResult><ApproximateNumberOfMessagesMoved>0\
             </ApproximateNumberOfMessagesMoved></CancelMessageMoveTaskResult>"
        ),
        "{cancelled}"
    );
    let (status, refused) = h
        .query("Action=StartMessageMoveTask&SourceArn=arn:aws:sqs:us-east-1:000000000000:nope")
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert!(
        refused.contains("<Code>ResourceNotFoundException</Code>"),
        "{refused}"
    );
}

#[tokio::test]
async fn a_destination_must_be_of_the_source_queue_type() {
    let h = harness().await;
    let fifo = veil_core::QueueKey::new(veil_core::DEFAULT_NAMESPACE, "target.fifo");
    let config = veil_core::QueueConfig {
        fifo: Some(veil_core::FifoConfig::default()),
        ..veil_core::QueueConfig::default()
    };
    h.engine.create_queue(fifo, config).await.unwrap();
    let body = json!({
        "SourceArn": DLQ_ARN,
        "DestinationArn": "arn:aws:sqs:us-east-1:000000000000:target.fifo",
        "MaxNumberOfMessagesPerSecond": 0,
    });
    let reply = h.call("StartMessageMoveTask", body).await;
    assert_eq!(
        reply.error(),
        (
            StatusCode::BAD_REQUEST,
            "InvalidParameterValue;Sender",
            "The source queue and destination queue must be of the same queue type."
        ),
        "checked before the rate"
    );
}
