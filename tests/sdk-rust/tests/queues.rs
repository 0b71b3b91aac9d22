//! Queue-level operations through the AWS SDK for Rust against the real `veil` binary: CreateQueue with
//! attributes and GetQueueAttributes, tags, and how a request signed with the wrong secret is refused. They
//! exist because the Rust SDK speaks AWS JSON 1.0 with its own signer and error parser, not boto3's.

use aws_sdk_sqs::error::ProvideErrorMetadata;
use aws_sdk_sqs::types::QueueAttributeName;
use veil_sdk_rust_tests::{queue_tags, Veil, ACCOUNT, REGION};

#[tokio::test]
async fn a_queue_created_with_attributes_reports_them_back() {
    let veil = Veil::start();
    let sqs = veil.client();
    let url = sqs
        .create_queue()
        .queue_name("orders")
        .attributes(QueueAttributeName::VisibilityTimeout, "7")
        .attributes(QueueAttributeName::DelaySeconds, "2")
        .attributes(QueueAttributeName::MessageRetentionPeriod, "3600")
        .attributes(QueueAttributeName::MaximumMessageSize, "2048")
        .attributes(QueueAttributeName::ReceiveMessageWaitTimeSeconds, "1")
        .send()
        .await
        .expect("CreateQueue")
        .queue_url
        .expect("a QueueUrl");
    assert_eq!(url, format!("{}/{ACCOUNT}/orders", veil.endpoint()));

    let attrs = sqs
        .get_queue_attributes()
        .queue_url(&url)
        .attribute_names(QueueAttributeName::All)
        .send()
        .await
        .expect("GetQueueAttributes")
        .attributes
        .expect("attributes");
    let get = |name: QueueAttributeName| attrs.get(&name).map(String::as_str);
    assert_eq!(get(QueueAttributeName::VisibilityTimeout), Some("7"));
    assert_eq!(get(QueueAttributeName::DelaySeconds), Some("2"));
    assert_eq!(
        get(QueueAttributeName::MessageRetentionPeriod),
        Some("3600")
    );
    assert_eq!(get(QueueAttributeName::MaximumMessageSize), Some("2048"));
    assert_eq!(
        get(QueueAttributeName::ReceiveMessageWaitTimeSeconds),
        Some("1")
    );
    assert_eq!(
        get(QueueAttributeName::QueueArn),
        Some(&*format!("arn:aws:sqs:{REGION}:{ACCOUNT}:orders"))
    );
    assert_eq!(
        get(QueueAttributeName::ApproximateNumberOfMessages),
        Some("0")
    );
    let created: i64 = get(QueueAttributeName::CreatedTimestamp)
        .expect("CreatedTimestamp")
        .parse()
        .unwrap();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    assert!(
        (now - created).abs() < 60,
        "CreatedTimestamp {created} is epoch seconds near {now}"
    );
    // Every attribute the SDK parsed is one it knows: nothing came back as an unknown variant.
    for name in attrs.keys() {
        assert!(
            QueueAttributeName::values().contains(&name.as_str()),
            "unknown attribute name {name:?}"
        );
    }

    // Asking for one attribute by name returns that one only.
    let one = sqs
        .get_queue_attributes()
        .queue_url(&url)
        .attribute_names(QueueAttributeName::DelaySeconds)
        .send()
        .await
        .expect("GetQueueAttributes DelaySeconds")
        .attributes
        .expect("attributes");
    assert_eq!(one.len(), 1, "{one:?}");
    assert_eq!(
        one.get(&QueueAttributeName::DelaySeconds)
            .map(String::as_str),
        Some("2")
    );

    // GetQueueUrl finds it by name, and ListQueues lists it.
    let found = sqs
        .get_queue_url()
        .queue_name("orders")
        .send()
        .await
        .expect("GetQueueUrl");
    assert_eq!(found.queue_url(), Some(url.as_str()));
    let listed = sqs.list_queues().send().await.expect("ListQueues");
    assert_eq!(listed.queue_urls(), std::slice::from_ref(&url));
}

#[tokio::test]
async fn a_missing_queue_is_the_sdks_queue_does_not_exist_error() {
    let veil = Veil::start();
    let err = veil
        .client()
        .get_queue_url()
        .queue_name("nowhere")
        .send()
        .await
        .expect_err("GetQueueUrl of a missing queue must fail");
    let code = err.code().map(str::to_owned);
    let service = err.into_service_error();
    assert_eq!(
        service.message(),
        Some("The specified queue does not exist.")
    );
    assert!(service.is_queue_does_not_exist(), "{service:?}");
    assert_eq!(
        code.as_deref(),
        Some("AWS.SimpleQueueService.NonExistentQueue")
    );
}

#[tokio::test]
async fn tags_added_are_listed_and_untagged_ones_are_gone() {
    let veil = Veil::start();
    let sqs = veil.client();
    let url = sqs
        .create_queue()
        .queue_name("tagged")
        .tags("team", "payments")
        .send()
        .await
        .expect("CreateQueue")
        .queue_url
        .unwrap();
    sqs.tag_queue()
        .queue_url(&url)
        .tags("env", "test")
        .tags("cost-center", "42")
        .send()
        .await
        .expect("TagQueue");
    let tags = queue_tags(&sqs, &url).await;
    let mut pairs: Vec<(&str, &str)> = tags.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    pairs.sort();
    assert_eq!(
        pairs,
        [("cost-center", "42"), ("env", "test"), ("team", "payments")]
    );

    sqs.untag_queue()
        .queue_url(&url)
        .tag_keys("env")
        .tag_keys("team")
        .send()
        .await
        .expect("UntagQueue");
    let tags = queue_tags(&sqs, &url).await;
    assert_eq!(tags.len(), 1, "{tags:?}");
    assert_eq!(tags.get("cost-center").map(String::as_str), Some("42"));

    // A queue without tags: the SDK sees no tags (not an error).
    sqs.untag_queue()
        .queue_url(&url)
        .tag_keys("cost-center")
        .send()
        .await
        .expect("UntagQueue");
    let tags = queue_tags(&sqs, &url).await;
    assert!(tags.is_empty(), "{tags:?}");
}

#[tokio::test]
async fn a_request_signed_with_the_wrong_secret_is_signature_does_not_match() {
    let veil = Veil::start();
    let err = veil
        .client_with("test", "not-the-secret")
        .list_queues()
        .send()
        .await
        .expect_err("a wrong secret must be refused");
    assert_eq!(err.code(), Some("SignatureDoesNotMatch"), "{err:?}");
    let status = err.raw_response().map(|r| r.status().as_u16());
    assert_eq!(status, Some(403), "{err:?}");
    // The right secret works on the same server.
    veil.client()
        .list_queues()
        .send()
        .await
        .expect("ListQueues with the right secret");
}

#[tokio::test]
async fn a_request_with_an_unknown_access_key_is_invalid_client_token_id() {
    let veil = Veil::start();
    let err = veil
        .client_with("AKIDNOBODY", "test")
        .list_queues()
        .send()
        .await
        .expect_err("an unknown key must be refused");
    assert_eq!(err.code(), Some("InvalidClientTokenId"), "{err:?}");
    assert_eq!(
        err.raw_response().map(|r| r.status().as_u16()),
        Some(403),
        "{err:?}"
    );
}

#[tokio::test]
async fn list_queues_pages_through_every_queue_with_its_next_token() {
    let veil = Veil::start();
    let sqs = veil.client();
    let mut expected = Vec::new();
    for i in 0..5 {
        let name = format!("page-{i}");
        sqs.create_queue()
            .queue_name(&name)
            .send()
            .await
            .expect("CreateQueue");
        expected.push(format!("{}/{ACCOUNT}/{name}", veil.endpoint()));
    }
    sqs.create_queue()
        .queue_name("other")
        .send()
        .await
        .expect("CreateQueue");

    let first = sqs
        .list_queues()
        .queue_name_prefix("page-")
        .max_results(2)
        .send()
        .await
        .expect("ListQueues");
    assert_eq!(first.queue_urls().len(), 2);
    assert!(first.next_token().is_some(), "more pages follow");
    // The SDK's paginator follows NextToken to the end.
    let mut all: Vec<String> = sqs
        .list_queues()
        .queue_name_prefix("page-")
        .max_results(2)
        .into_paginator()
        .items()
        .send()
        .collect::<Result<Vec<_>, _>>()
        .await
        .expect("ListQueues pages");
    all.sort();
    assert_eq!(all, expected);
}
