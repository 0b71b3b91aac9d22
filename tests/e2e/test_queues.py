"""Queue administration through boto3 (AWS JSON 1.0): CreateQueue (URL shape, idempotency, QueueAlreadyExists,
name validation), GetQueueUrl, DeleteQueue, ListQueues (prefix, MaxResults/NextToken), Get/SetQueueAttributes
(defaults, round trip, ranges, read-only and approximate counts, timestamps), PurgeQueue and its 60 s rule,
TagQueue/UntagQueue/ListQueueTags, and NonExistentQueue for every operation on a missing queue."""

import time
import uuid

import pytest

from helpers import ACCOUNT, arn, counts, expect_error, query_call, query_error, queue_attrs, receive

NONEXISTENT = "AWS.SimpleQueueService.NonExistentQueue"


def test_create_queue_url_is_host_account_and_name(sqs, endpoint, queue_name):
    url = sqs.create_queue(QueueName=queue_name)["QueueUrl"]
    assert url == f"{endpoint}/{ACCOUNT}/{queue_name}"


def test_create_queue_is_idempotent_when_attributes_match(sqs, queue_name):
    first = sqs.create_queue(QueueName=queue_name, Attributes={"VisibilityTimeout": "17", "DelaySeconds": "2"})
    again = sqs.create_queue(QueueName=queue_name, Attributes={"VisibilityTimeout": "17", "DelaySeconds": "2"})
    assert again["QueueUrl"] == first["QueueUrl"]
    assert queue_attrs(sqs, first["QueueUrl"], "VisibilityTimeout")["VisibilityTimeout"] == "17"


def test_create_queue_naming_the_default_value_matches_an_existing_queue(sqs, queue_name):
    first = sqs.create_queue(QueueName=queue_name)["QueueUrl"]
    again = sqs.create_queue(QueueName=queue_name, Attributes={"VisibilityTimeout": "30", "DelaySeconds": "0"})
    assert again["QueueUrl"] == first


def test_create_queue_with_different_attribute_value_is_queue_already_exists(sqs, queue_name):
    sqs.create_queue(QueueName=queue_name, Attributes={"DelaySeconds": "1"})
    resp = expect_error(
        sqs.create_queue, "QueueAlreadyExists",
        QueueName=queue_name, Attributes={"DelaySeconds": "2"},
    )
    assert "different value for attribute" in resp["Error"]["Message"], resp["Error"]
    assert "DelaySeconds" in resp["Error"]["Message"], resp["Error"]


@pytest.mark.parametrize("bad_name", ["has space", "dot.in.name", "a" * 81, "slash/name", "ünïcode"])
def test_invalid_queue_name_is_invalid_parameter_value(sqs, bad_name):
    expect_error(sqs.create_queue, "InvalidParameterValue", QueueName=bad_name)


def test_queue_name_of_80_allowed_characters_is_accepted(sqs):
    name = ("Ok_-" + uuid.uuid4().hex * 3)[:80]
    assert len(name) == 80
    url = sqs.create_queue(QueueName=name)["QueueUrl"]
    assert url.endswith(f"/{ACCOUNT}/{name}")
    sqs.delete_queue(QueueUrl=url)


def test_get_queue_url_returns_the_created_url(sqs, queue_url, queue_name):
    assert sqs.get_queue_url(QueueName=queue_name)["QueueUrl"] == queue_url


def test_get_queue_url_of_missing_queue_is_nonexistent_queue(sqs, queue_name):
    expect_error(
        sqs.get_queue_url, NONEXISTENT, message="The specified queue does not exist",
        QueueName=queue_name + "-missing",
    )


def test_delete_queue_removes_it_everywhere(sqs, queue_url, queue_name):
    sqs.send_message(QueueUrl=queue_url, MessageBody="doomed")
    sqs.delete_queue(QueueUrl=queue_url)
    expect_error(sqs.get_queue_url, NONEXISTENT, QueueName=queue_name)
    expect_error(sqs.send_message, NONEXISTENT, QueueUrl=queue_url, MessageBody="x")
    listed = sqs.list_queues(QueueNamePrefix=queue_name).get("QueueUrls", [])
    assert listed == [], f"deleted queue still listed: {listed}"


@pytest.mark.parametrize(
    "operation, kwargs",
    [
        ("send_message", {"MessageBody": "x"}),
        ("receive_message", {}),
        ("get_queue_attributes", {"AttributeNames": ["All"]}),
        ("set_queue_attributes", {"Attributes": {"VisibilityTimeout": "5"}}),
        ("purge_queue", {}),
        ("delete_queue", {}),
        ("list_queue_tags", {}),
        ("send_message_batch", {"Entries": [{"Id": "a", "MessageBody": "x"}]}),
    ],
)
def test_operation_on_missing_queue_is_nonexistent_queue(sqs, endpoint, queue_name, operation, kwargs):
    url = f"{endpoint}/{ACCOUNT}/{queue_name}-missing"
    expect_error(getattr(sqs, operation), NONEXISTENT, QueueUrl=url, **kwargs)


def test_list_queues_filters_by_prefix(sqs, queue_name):
    made = sorted(sqs.create_queue(QueueName=f"{queue_name}-{i}")["QueueUrl"] for i in range(3))
    other = sqs.create_queue(QueueName=f"x{queue_name}")["QueueUrl"]
    listed = sorted(sqs.list_queues(QueueNamePrefix=queue_name).get("QueueUrls", []))
    assert listed == made
    assert other not in listed


def test_list_queues_with_unmatched_prefix_returns_no_urls(sqs, queue_name):
    assert sqs.list_queues(QueueNamePrefix=queue_name + "-none").get("QueueUrls", []) == []


def test_list_queues_paginates_with_max_results_and_next_token(sqs, queue_name):
    made = {sqs.create_queue(QueueName=f"{queue_name}-{i}")["QueueUrl"] for i in range(5)}
    pages = []
    kwargs = {"QueueNamePrefix": queue_name, "MaxResults": 2}
    while True:
        resp = sqs.list_queues(**kwargs)
        pages.append(resp.get("QueueUrls", []))
        token = resp.get("NextToken")
        if not token:
            break
        assert len(pages) < 10, f"pagination does not end: {pages}"
        kwargs["NextToken"] = token
    assert [len(p) for p in pages] == [2, 2, 1], f"pages of MaxResults=2 over 5 queues: {pages}"
    flat = [u for p in pages for u in p]
    assert len(flat) == len(set(flat)) == 5, f"duplicates across pages: {pages}"
    assert set(flat) == made


def test_max_results_out_of_range_is_invalid_parameter_value(sqs):
    expect_error(sqs.list_queues, "InvalidParameterValue", MaxResults=1001)
    expect_error(sqs.list_queues, "InvalidParameterValue", MaxResults=0)


def test_new_queue_has_default_attributes(sqs, queue_name):
    before = int(time.time())
    url = sqs.create_queue(QueueName=queue_name)["QueueUrl"]
    after = int(time.time())
    a = queue_attrs(sqs, url)
    expected = {
        "VisibilityTimeout": "30",
        "DelaySeconds": "0",
        "MessageRetentionPeriod": "345600",
        "MaximumMessageSize": "1048576",
        "ReceiveMessageWaitTimeSeconds": "0",
        "ApproximateNumberOfMessages": "0",
        "ApproximateNumberOfMessagesNotVisible": "0",
        "ApproximateNumberOfMessagesDelayed": "0",
        "QueueArn": arn(queue_name),
    }
    assert {k: a.get(k) for k in expected} == expected
    assert "RedrivePolicy" not in a, a
    for ts in ("CreatedTimestamp", "LastModifiedTimestamp"):
        assert before - 2 <= int(a[ts]) <= after + 2, f"{ts}={a[ts]} is not epoch seconds near {before}"


def test_get_queue_attributes_returns_only_the_requested_names(sqs, queue_url, queue_name):
    a = queue_attrs(sqs, queue_url, "VisibilityTimeout", "QueueArn")
    assert a == {"VisibilityTimeout": "30", "QueueArn": arn(queue_name)}


def test_get_queue_attributes_with_unknown_name_is_invalid_attribute_name(sqs, queue_url):
    # botocore does not check enum values; "Bogus" reaches the server as given.
    expect_error(sqs.get_queue_attributes, "InvalidAttributeName", QueueUrl=queue_url, AttributeNames=["Bogus"])


def test_set_queue_attributes_round_trip_and_update_last_modified(sqs, queue_url):
    created = int(queue_attrs(sqs, queue_url, "CreatedTimestamp")["CreatedTimestamp"])
    time.sleep(1.1)  # the timestamps are whole seconds: the change must land in a later one
    new = {
        "VisibilityTimeout": "45",
        "DelaySeconds": "3",
        "MessageRetentionPeriod": "120",
        "MaximumMessageSize": "2048",
        "ReceiveMessageWaitTimeSeconds": "2",
    }
    sqs.set_queue_attributes(QueueUrl=queue_url, Attributes=new)
    a = queue_attrs(sqs, queue_url)
    assert {k: a[k] for k in new} == new
    assert int(a["LastModifiedTimestamp"]) > created, "SetQueueAttributes did not update LastModifiedTimestamp"
    assert int(a["CreatedTimestamp"]) == created


@pytest.mark.parametrize(
    "attribute, value",
    [
        ("VisibilityTimeout", "43201"),
        ("VisibilityTimeout", "-1"),
        ("DelaySeconds", "901"),
        ("MessageRetentionPeriod", "59"),
        ("MessageRetentionPeriod", "1209601"),
        ("MaximumMessageSize", "1023"),
        ("MaximumMessageSize", "1048577"),
        ("ReceiveMessageWaitTimeSeconds", "21"),
        ("VisibilityTimeout", "ten"),
    ],
)
def test_set_queue_attributes_rejects_out_of_range_values(sqs, queue_url, attribute, value):
    before = queue_attrs(sqs, queue_url, attribute)[attribute]
    expect_error(
        sqs.set_queue_attributes, "InvalidAttributeValue", message=f"Invalid value for the parameter {attribute}",
        QueueUrl=queue_url, Attributes={attribute: value},
    )
    assert queue_attrs(sqs, queue_url, attribute)[attribute] == before, "a rejected value was stored"


def test_create_queue_rejects_out_of_range_attribute(sqs, queue_name):
    expect_error(
        sqs.create_queue, "InvalidAttributeValue", message="Invalid value for the parameter VisibilityTimeout",
        QueueName=queue_name, Attributes={"VisibilityTimeout": "43201"},
    )
    expect_error(sqs.get_queue_url, NONEXISTENT, QueueName=queue_name)


@pytest.mark.parametrize("read_only", ["ApproximateNumberOfMessages", "QueueArn", "CreatedTimestamp"])
def test_read_only_attribute_cannot_be_set(sqs, queue_url, read_only):
    expect_error(sqs.set_queue_attributes, "InvalidAttributeName", QueueUrl=queue_url, Attributes={read_only: "5"})


def test_approximate_counts_track_visible_hidden_and_delayed(sqs, queue_url):
    for i in range(3):
        sqs.send_message(QueueUrl=queue_url, MessageBody=f"visible-{i}")
    sqs.send_message(QueueUrl=queue_url, MessageBody="delayed", DelaySeconds=60)
    assert counts(sqs, queue_url) == (3, 0, 1)
    got = receive(sqs, queue_url, MaxNumberOfMessages=1, VisibilityTimeout=60)
    assert len(got) == 1 and got[0]["Body"].startswith("visible-"), got
    assert counts(sqs, queue_url) == (2, 1, 1)
    sqs.delete_message(QueueUrl=queue_url, ReceiptHandle=got[0]["ReceiptHandle"])
    assert counts(sqs, queue_url) == (2, 0, 1)


def test_purge_queue_deletes_visible_hidden_and_delayed_messages(sqs, queue_url):
    for i in range(4):
        sqs.send_message(QueueUrl=queue_url, MessageBody=f"m{i}")
    sqs.send_message(QueueUrl=queue_url, MessageBody="later", DelaySeconds=30)
    hidden = receive(sqs, queue_url, MaxNumberOfMessages=2, VisibilityTimeout=60)
    assert len(hidden) == 2
    assert counts(sqs, queue_url) == (2, 2, 1)
    sqs.purge_queue(QueueUrl=queue_url)
    assert counts(sqs, queue_url) == (0, 0, 0)
    assert receive(sqs, queue_url, MaxNumberOfMessages=10) == []
    # The purged hidden message cannot be made visible again.
    expect_error(
        sqs.change_message_visibility, "InvalidParameterValue",
        QueueUrl=queue_url, ReceiptHandle=hidden[0]["ReceiptHandle"], VisibilityTimeout=0,
    )
    assert receive(sqs, queue_url, MaxNumberOfMessages=10) == []


def test_second_purge_within_60_seconds_is_purge_queue_in_progress(sqs, queue_url):
    sqs.purge_queue(QueueUrl=queue_url)
    expect_error(
        sqs.purge_queue, "AWS.SimpleQueueService.PurgeQueueInProgress", status=403,
        message="Only one PurgeQueue operation on", QueueUrl=queue_url,
    )


def test_purge_rule_is_per_queue(sqs, new_queue):
    a, b = new_queue("a"), new_queue("b")
    sqs.purge_queue(QueueUrl=a)
    sqs.purge_queue(QueueUrl=b)  # a's purge does not hold b back...
    expect_error(  # ...while a itself is held back
        sqs.purge_queue, "AWS.SimpleQueueService.PurgeQueueInProgress", status=403, QueueUrl=a,
    )


def test_tag_list_and_untag_queue(sqs, queue_url):
    sqs.tag_queue(QueueUrl=queue_url, Tags={"team": "veil", "env": "test", "empty": ""})
    assert sqs.list_queue_tags(QueueUrl=queue_url).get("Tags") == {"team": "veil", "env": "test", "empty": ""}
    sqs.tag_queue(QueueUrl=queue_url, Tags={"env": "prod"})
    assert sqs.list_queue_tags(QueueUrl=queue_url).get("Tags") == {"team": "veil", "env": "prod", "empty": ""}
    sqs.untag_queue(QueueUrl=queue_url, TagKeys=["team", "empty"])
    assert sqs.list_queue_tags(QueueUrl=queue_url).get("Tags") == {"env": "prod"}
    sqs.untag_queue(QueueUrl=queue_url, TagKeys=["env", "never-set"])
    assert sqs.list_queue_tags(QueueUrl=queue_url).get("Tags", {}) == {}


def test_tag_queue_without_tags_is_missing_parameter(sqs, endpoint, queue_url):
    # moto's test_tag_queue_errors; a Query TagQueue without any Tag.N is the same request.
    expect_error(sqs.tag_queue, "MissingParameter", 400, "The request must contain the parameter Tags.",
                 QueueUrl=queue_url, Tags={})
    resp = query_call(endpoint, {"Action": "TagQueue", "QueueUrl": queue_url})
    assert query_error(resp) == (400, "MissingParameter", "The request must contain the parameter Tags.")
    assert sqs.list_queue_tags(QueueUrl=queue_url).get("Tags", {}) == {}


def test_create_queue_with_tags(sqs, queue_name):
    url = sqs.create_queue(QueueName=queue_name, tags={"owner": "e2e"})["QueueUrl"]
    assert sqs.list_queue_tags(QueueUrl=url).get("Tags") == {"owner": "e2e"}
