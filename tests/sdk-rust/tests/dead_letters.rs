//! Dead letters through the AWS SDK for Rust against the real `veil` binary: a RedrivePolicy moves a message
//! received too often to its dead-letter queue, and a message move task (StartMessageMoveTask,
//! ListMessageMoveTasks) brings it back to the queue it came from.

use std::time::{Duration, Instant};

use aws_sdk_sqs::types::{MessageSystemAttributeName, QueueAttributeName};
use aws_sdk_sqs::Client;
use veil_sdk_rust_tests::{receive, Veil, ACCOUNT, REGION};

async fn receive_one(
    sqs: &Client,
    url: &str,
    visibility: i32,
) -> Option<aws_sdk_sqs::types::Message> {
    let mut got = receive(sqs, url, Some(visibility), 1).await;
    assert!(got.len() <= 1, "{got:?}");
    got.pop()
}

async fn count(sqs: &Client, url: &str) -> String {
    sqs.get_queue_attributes()
        .queue_url(url)
        .attribute_names(QueueAttributeName::ApproximateNumberOfMessages)
        .send()
        .await
        .expect("GetQueueAttributes")
        .attributes
        .and_then(|mut a| a.remove(&QueueAttributeName::ApproximateNumberOfMessages))
        .expect("ApproximateNumberOfMessages")
}

#[tokio::test]
async fn a_message_received_more_than_max_receive_count_moves_to_the_dead_letter_queue_and_a_move_task_brings_it_back(
) {
    let veil = Veil::start();
    let sqs = veil.client();
    let dlq = sqs
        .create_queue()
        .queue_name("orders-dlq")
        .send()
        .await
        .expect("CreateQueue")
        .queue_url
        .unwrap();
    let dlq_arn = format!("arn:aws:sqs:{REGION}:{ACCOUNT}:orders-dlq");
    let policy = format!(r#"{{"deadLetterTargetArn":"{dlq_arn}","maxReceiveCount":"1"}}"#);
    let src = sqs
        .create_queue()
        .queue_name("orders")
        .attributes(QueueAttributeName::RedrivePolicy, &policy)
        .send()
        .await
        .expect("CreateQueue")
        .queue_url
        .unwrap();
    let src_arn = format!("arn:aws:sqs:{REGION}:{ACCOUNT}:orders");
    let shown = sqs
        .get_queue_attributes()
        .queue_url(&src)
        .attribute_names(QueueAttributeName::RedrivePolicy)
        .send()
        .await
        .expect("GetQueueAttributes")
        .attributes
        .unwrap_or_default();
    let shown = shown
        .get(&QueueAttributeName::RedrivePolicy)
        .expect("RedrivePolicy");
    assert!(
        shown.contains(&dlq_arn) && shown.contains("maxReceiveCount"),
        "{shown}"
    );
    let sources = sqs
        .list_dead_letter_source_queues()
        .queue_url(&dlq)
        .send()
        .await
        .expect("ListDeadLetterSourceQueues");
    assert_eq!(sources.queue_urls(), std::slice::from_ref(&src));

    let sent = sqs
        .send_message()
        .queue_url(&src)
        .message_body("poison")
        .send()
        .await
        .expect("SendMessage");
    // The first receive delivers it (count 1 = maxReceiveCount); visibility 0 puts it straight back.
    let first = receive_one(&sqs, &src, 0)
        .await
        .expect("the first receive delivers the message");
    assert_eq!(first.message_id(), sent.message_id());
    // The receive that would deliver it a second time moves it to the dead-letter queue instead.
    assert!(
        receive_one(&sqs, &src, 0).await.is_none(),
        "the second receive must not deliver it"
    );
    let dead = receive_one(&sqs, &dlq, 0)
        .await
        .expect("the message is in the dead-letter queue");
    assert_eq!(dead.message_id(), sent.message_id(), "same id");
    assert_eq!(dead.body(), Some("poison"));
    let origin = dead
        .attributes
        .as_ref()
        .and_then(|a| a.get(&MessageSystemAttributeName::DeadLetterQueueSourceArn));
    assert_eq!(
        origin,
        Some(&src_arn),
        "a dead letter names the queue it came from"
    );
    assert_eq!(count(&sqs, &src).await, "0");

    // Move it back: no destination means the queue it was dead-lettered from.
    let started = sqs
        .start_message_move_task()
        .source_arn(&dlq_arn)
        .max_number_of_messages_per_second(10)
        .send()
        .await
        .expect("StartMessageMoveTask");
    let handle = started.task_handle().expect("TaskHandle").to_owned();
    assert!(!handle.is_empty());

    let deadline = Instant::now() + Duration::from_secs(10);
    let task = loop {
        let tasks = sqs
            .list_message_move_tasks()
            .source_arn(&dlq_arn)
            .send()
            .await
            .expect("ListMessageMoveTasks")
            .results
            .unwrap_or_default();
        assert_eq!(tasks.len(), 1, "the most recent task: {tasks:?}");
        let task = tasks.into_iter().next().unwrap();
        assert_eq!(task.source_arn(), Some(dlq_arn.as_str()));
        assert_eq!(task.max_number_of_messages_per_second(), Some(10));
        match task.status() {
            Some("RUNNING") => assert_eq!(
                task.task_handle(),
                Some(handle.as_str()),
                "a running task shows its handle"
            ),
            Some("COMPLETED") => break task,
            other => panic!("unexpected task status {other:?}: {task:?}"),
        }
        assert!(
            Instant::now() < deadline,
            "the move task did not complete in 10 s: {task:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(task.approximate_number_of_messages_moved(), 1, "{task:?}");
    assert_eq!(
        task.approximate_number_of_messages_to_move(),
        Some(1),
        "{task:?}"
    );
    assert_eq!(
        task.destination_arn(),
        None,
        "no destination was given: {task:?}"
    );
    let started_ms = task.started_timestamp();
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    assert!(
        (now_ms - 60_000..=now_ms + 1000).contains(&started_ms),
        "StartedTimestamp {started_ms} is epoch ms"
    );

    let back = receive_one(&sqs, &src, 30)
        .await
        .expect("the message is back in its source queue");
    assert_eq!(back.message_id(), sent.message_id());
    assert_eq!(back.body(), Some("poison"));
    let receives = back
        .attributes
        .as_ref()
        .and_then(|a| a.get(&MessageSystemAttributeName::ApproximateReceiveCount));
    assert_eq!(
        receives.map(String::as_str),
        Some("1"),
        "a moved message starts counting receives afresh"
    );
    assert_eq!(count(&sqs, &dlq).await, "0");
}
