"""Dead-letter queues through boto3: the move happens on the receive after maxReceiveCount deliveries (not at
visibility expiry), keeps id, body, attributes and SentTimestamp, carries ApproximateReceiveCount and adds
DeadLetterQueueSourceArn; RedrivePolicy validation and round trip; removing the policy; ListDeadLetterSourceQueues
with pagination; and RedriveAllowPolicy (allowAll, denyAll, byQueue)."""

import json

import pytest

from helpers import counts, expect_error, queue_attrs, receive, receive_one

# AWS answers every invalid RedrivePolicy / RedriveAllowPolicy with InvalidParameterValue
# ("Value ... for parameter RedrivePolicy is invalid. Reason: ...").
BAD_POLICY = "InvalidParameterValue"


def qarn(sqs, url):
    return queue_attrs(sqs, url, "QueueArn")["QueueArn"]


def redrive(dlq_arn, max_receive_count):
    return json.dumps({"deadLetterTargetArn": dlq_arn, "maxReceiveCount": max_receive_count})


@pytest.fixture
def dlq_pair(sqs, new_queue):
    """(source URL, DLQ URL): source moves to the DLQ after 2 receives."""
    dlq = new_queue("dlq")
    src = new_queue("src", RedrivePolicy=redrive(qarn(sqs, dlq), 2))
    return src, dlq


def test_message_moves_to_the_dlq_on_the_receive_after_max_receive_count(sqs, dlq_pair):
    src, dlq = dlq_pair
    attrs = {"kind": {"DataType": "String", "StringValue": "poison"}}
    sent = sqs.send_message(QueueUrl=src, MessageBody="poison pill", MessageAttributes=attrs)
    first = receive_one(sqs, src, VisibilityTimeout=0, AttributeNames=["All"])
    second = receive_one(sqs, src, VisibilityTimeout=0, AttributeNames=["All"])
    assert [first["Attributes"]["ApproximateReceiveCount"], second["Attributes"]["ApproximateReceiveCount"]] == ["1", "2"]
    # The move happens on the next receive, not when the visibility timeout expires.
    assert counts(sqs, src) == (1, 0, 0)
    assert counts(sqs, dlq) == (0, 0, 0)
    assert receive(sqs, src, MaxNumberOfMessages=10) == [], "a message past maxReceiveCount was delivered"
    assert counts(sqs, src) == (0, 0, 0)
    assert counts(sqs, dlq) == (1, 0, 0)

    moved = receive_one(sqs, dlq, MessageSystemAttributeNames=["All"], MessageAttributeNames=["All"])
    a = moved["Attributes"]
    assert moved["MessageId"] == sent["MessageId"]
    assert moved["Body"] == "poison pill"
    assert moved["MessageAttributes"] == attrs
    assert a["ApproximateReceiveCount"] == "3", "ApproximateReceiveCount must carry into the DLQ (2 + this receive)"
    assert a["SentTimestamp"] == first["Attributes"]["SentTimestamp"], "the DLQ must keep the original send time"
    assert a["ApproximateFirstReceiveTimestamp"] == first["Attributes"]["ApproximateFirstReceiveTimestamp"]
    assert a["DeadLetterQueueSourceArn"] == qarn(sqs, src)


def test_messages_below_max_receive_count_are_delivered_normally(sqs, dlq_pair):
    src, dlq = dlq_pair
    sqs.send_message(QueueUrl=src, MessageBody="fine")
    receive_one(sqs, src, VisibilityTimeout=0)
    m = receive_one(sqs, src, VisibilityTimeout=60)
    sqs.delete_message(QueueUrl=src, ReceiptHandle=m["ReceiptHandle"])
    assert counts(sqs, src) == (0, 0, 0)
    assert counts(sqs, dlq) == (0, 0, 0)


def test_only_the_exhausted_message_moves(sqs, dlq_pair):
    src, dlq = dlq_pair
    sqs.send_message(QueueUrl=src, MessageBody="old")
    for _ in range(2):
        receive_one(sqs, src, VisibilityTimeout=0)
    sqs.send_message(QueueUrl=src, MessageBody="new")
    got = receive(sqs, src, MaxNumberOfMessages=10, VisibilityTimeout=60)
    assert [m["Body"] for m in got] == ["new"]
    assert [m["Body"] for m in receive(sqs, dlq, MaxNumberOfMessages=10)] == ["old"]


def test_redrive_policy_round_trips_as_json(sqs, new_queue):
    dlq = new_queue("dlq")
    src = new_queue("src", RedrivePolicy=redrive(qarn(sqs, dlq), 7))
    policy = json.loads(queue_attrs(sqs, src, "RedrivePolicy")["RedrivePolicy"])
    assert policy["deadLetterTargetArn"] == qarn(sqs, dlq)
    assert int(policy["maxReceiveCount"]) == 7
    assert set(policy) == {"deadLetterTargetArn", "maxReceiveCount"}


def test_removing_the_redrive_policy_stops_dead_lettering(sqs, new_queue):
    dlq = new_queue("dlq")
    src = new_queue("src", RedrivePolicy=redrive(qarn(sqs, dlq), 1))
    sqs.set_queue_attributes(QueueUrl=src, Attributes={"RedrivePolicy": ""})
    assert "RedrivePolicy" not in queue_attrs(sqs, src)
    sqs.send_message(QueueUrl=src, MessageBody="stays")
    for n in range(1, 4):
        m = receive_one(sqs, src, VisibilityTimeout=0, AttributeNames=["ApproximateReceiveCount"])
        assert m["Attributes"]["ApproximateReceiveCount"] == str(n)
    assert counts(sqs, dlq) == (0, 0, 0)


@pytest.mark.parametrize("max_receive_count", [0, 1001])
def test_max_receive_count_outside_1_to_1000_is_rejected(sqs, new_queue, max_receive_count):
    dlq = new_queue("dlq")
    src = new_queue("src")
    expect_error(sqs.set_queue_attributes, BAD_POLICY,
                    QueueUrl=src, Attributes={"RedrivePolicy": redrive(qarn(sqs, dlq), max_receive_count)})
    assert "RedrivePolicy" not in queue_attrs(sqs, src)


def test_redrive_policy_to_a_missing_queue_is_rejected(sqs, new_queue, queue_name):
    src = new_queue("src")
    missing = qarn(sqs, src).rsplit(":", 1)[0] + f":{queue_name}-nope"
    expect_error(sqs.set_queue_attributes, BAD_POLICY,
                    QueueUrl=src, Attributes={"RedrivePolicy": redrive(missing, 3)})
    assert "RedrivePolicy" not in queue_attrs(sqs, src)


def test_redrive_policy_without_max_receive_count_is_rejected(sqs, new_queue):
    dlq = new_queue("dlq")
    src = new_queue("src")
    expect_error(sqs.set_queue_attributes, BAD_POLICY,
                    QueueUrl=src, Attributes={"RedrivePolicy": json.dumps({"deadLetterTargetArn": qarn(sqs, dlq)})})
    assert "RedrivePolicy" not in queue_attrs(sqs, src)


def test_list_dead_letter_source_queues_lists_exactly_the_sources(sqs, new_queue):
    dlq = new_queue("dlq")
    sources = {new_queue(f"src{i}", RedrivePolicy=redrive(qarn(sqs, dlq), 3)) for i in range(3)}
    new_queue("unrelated")
    listed = sqs.list_dead_letter_source_queues(QueueUrl=dlq)["queueUrls"]
    assert sorted(listed) == sorted(sources)

    pages, kwargs = [], {"QueueUrl": dlq, "MaxResults": 2}
    while True:
        resp = sqs.list_dead_letter_source_queues(**kwargs)
        pages.append(resp["queueUrls"])
        if not resp.get("NextToken"):
            break
        assert len(pages) < 10
        kwargs["NextToken"] = resp["NextToken"]
    assert [len(p) for p in pages] == [2, 1], pages
    assert sorted(u for p in pages for u in p) == sorted(sources)


def test_list_dead_letter_source_queues_of_a_queue_without_sources_is_empty(sqs, queue_url):
    assert sqs.list_dead_letter_source_queues(QueueUrl=queue_url)["queueUrls"] == []


def test_redrive_allow_policy_round_trips(sqs, new_queue):
    policy = {"redrivePermission": "allowAll"}
    dlq = new_queue("dlq", RedriveAllowPolicy=json.dumps(policy))
    assert json.loads(queue_attrs(sqs, dlq, "RedriveAllowPolicy")["RedriveAllowPolicy"]) == policy


def test_redrive_allow_policy_deny_all_refuses_every_source(sqs, new_queue):
    dlq = new_queue("dlq", RedriveAllowPolicy=json.dumps({"redrivePermission": "denyAll"}))
    src = new_queue("src")
    expect_error(sqs.set_queue_attributes, BAD_POLICY,
                    QueueUrl=src, Attributes={"RedrivePolicy": redrive(qarn(sqs, dlq), 2)})
    assert "RedrivePolicy" not in queue_attrs(sqs, src)


def test_redrive_allow_policy_by_queue_allows_only_the_listed_sources(sqs, new_queue):
    allowed = new_queue("ok")
    refused = new_queue("no")
    policy = {"redrivePermission": "byQueue", "sourceQueueArns": [qarn(sqs, allowed)]}
    dlq = new_queue("dlq", RedriveAllowPolicy=json.dumps(policy))
    sqs.set_queue_attributes(QueueUrl=allowed, Attributes={"RedrivePolicy": redrive(qarn(sqs, dlq), 2)})
    expect_error(sqs.set_queue_attributes, BAD_POLICY,
                    QueueUrl=refused, Attributes={"RedrivePolicy": redrive(qarn(sqs, dlq), 2)})
    assert sqs.list_dead_letter_source_queues(QueueUrl=dlq)["queueUrls"] == [allowed]


def test_redrive_allow_policy_by_queue_with_more_than_10_arns_is_rejected(sqs, new_queue):
    dlq = new_queue("dlq")
    base = qarn(sqs, dlq)
    policy = {"redrivePermission": "byQueue", "sourceQueueArns": [f"{base}-{i}" for i in range(11)]}
    expect_error(sqs.set_queue_attributes, BAD_POLICY,
                    QueueUrl=dlq, Attributes={"RedriveAllowPolicy": json.dumps(policy)})


def test_redrive_allow_policy_with_unknown_permission_is_rejected(sqs, new_queue):
    dlq = new_queue("dlq")
    expect_error(sqs.set_queue_attributes, BAD_POLICY,
                    QueueUrl=dlq, Attributes={"RedriveAllowPolicy": json.dumps({"redrivePermission": "sometimes"})})
