"""SQS FIFO queues against the real binary (docs/semantics.md §4 and §SQS "FIFO queues"), with boto3 over JSON,
raw Query requests and the aws CLI: creating FIFO queues and AWS's errors for a mismatched name or type; order
within a message group across receives; a group blocked while one of its messages is in flight while other groups
flow; several messages of one group in one receive, in order; a lapsed visibility redelivering the group's head
first; deduplication by id and by content (the duplicate answered with the first send's MessageId and
SequenceNumber and never delivered, also after the first was deleted) and by message group; strictly increasing
sequence numbers; a retried ReceiveRequestAttemptId getting the same messages and receipts; a lapsed receipt
refused as expired; a FIFO dead-letter queue keeping the group and unblocking it, a standard one refused; and a
deduplication id still remembered after kill -9 and a restart on the same data dir.

Timeouts are real but short (visibility of 1 s, waits of at most 2 s)."""

import hashlib
import json
import time
import uuid

import pytest

from helpers import (
    ACCOUNT,
    arn,
    expect_error,
    make_client,
    md5_hex,
    parse_xml,
    query_call,
    queue_attrs,
    receive,
    receive_one,
)

EXPIRED = "Reason: The receipt handle has expired."


@pytest.fixture
def fifo(sqs, queue_name):
    """fifo(suffix="", **attributes) -> URL of a fresh FIFO queue named <queue_name><suffix>.fifo."""

    def make(suffix: str = "", **attributes) -> str:
        attrs = {"FifoQueue": "true", **{k: str(v) for k, v in attributes.items()}}
        return sqs.create_queue(QueueName=f"{queue_name}{suffix}.fifo", Attributes=attrs)["QueueUrl"]

    return make


def send(sqs, url, body, group, dedup=None, **kwargs):
    params = {"QueueUrl": url, "MessageBody": body, "MessageGroupId": group, **kwargs}
    if dedup is not None:
        params["MessageDeduplicationId"] = dedup
    return sqs.send_message(**params)


def bodies(messages) -> list:
    return [m["Body"] for m in messages]


def delete(sqs, url, message):
    sqs.delete_message(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"])


# ---- queues -------------------------------------------------------------------------------------------


def test_a_fifo_queue_needs_fifo_queue_true_and_a_dot_fifo_name(sqs, queue_name, endpoint):
    resp = expect_error(sqs.create_queue, "InvalidParameterValue", 400, QueueName=f"{queue_name}.fifo")
    assert resp["Error"]["Message"] == (
        "Can only include alphanumeric characters, hyphens, or underscores. 1 to 80 in length")
    resp = expect_error(sqs.create_queue, "InvalidParameterValue", 400, QueueName=f"{queue_name}.fifo",
                        Attributes={"FifoQueue": "false"})
    assert resp["Error"]["Message"].startswith("Can only include alphanumeric characters")
    resp = expect_error(sqs.create_queue, "InvalidParameterValue", 400, QueueName=queue_name,
                        Attributes={"FifoQueue": "true"})
    assert resp["Error"]["Message"] == (
        "The name of a FIFO queue can only include alphanumeric characters, hyphens, or underscores, must end "
        "with .fifo suffix and be 1 to 80 in length.")
    too_long = "a" * 76 + ".fifo"
    expect_error(sqs.create_queue, "InvalidParameterValue", 400, QueueName=too_long,
                 Attributes={"FifoQueue": "true"})

    url = sqs.create_queue(QueueName=f"{queue_name}.fifo", Attributes={"FifoQueue": "True"})["QueueUrl"]
    assert url == f"{endpoint}/{ACCOUNT}/{queue_name}.fifo"
    assert sqs.get_queue_url(QueueName=f"{queue_name}.fifo")["QueueUrl"] == url
    attrs = queue_attrs(sqs, url)
    assert {k: attrs[k] for k in ("FifoQueue", "ContentBasedDeduplication", "DeduplicationScope",
                                  "FifoThroughputLimit")} == {
        "FifoQueue": "true", "ContentBasedDeduplication": "false", "DeduplicationScope": "queue",
        "FifoThroughputLimit": "perQueue"}
    # Idempotent with the same attributes, refused with another value.
    assert sqs.create_queue(QueueName=f"{queue_name}.fifo", Attributes={"FifoQueue": "true"})["QueueUrl"] == url
    resp = expect_error(sqs.create_queue, "QueueAlreadyExists", 400, QueueName=f"{queue_name}.fifo",
                        Attributes={"FifoQueue": "true", "ContentBasedDeduplication": "true"})
    assert resp["Error"]["Message"] == (
        "A queue already exists with the same name and a different value for attribute ContentBasedDeduplication")


def test_fifo_attributes_change_but_the_queue_type_never_does(sqs, fifo):
    url = fifo()
    sqs.set_queue_attributes(QueueUrl=url, Attributes={
        "ContentBasedDeduplication": "true", "DeduplicationScope": "messageGroup",
        "FifoThroughputLimit": "perMessageGroupId"})
    attrs = queue_attrs(sqs, url, "ContentBasedDeduplication", "DeduplicationScope", "FifoThroughputLimit")
    assert attrs == {"ContentBasedDeduplication": "true", "DeduplicationScope": "messageGroup",
                     "FifoThroughputLimit": "perMessageGroupId"}
    resp = expect_error(sqs.set_queue_attributes, "InvalidAttributeValue", 400, QueueUrl=url,
                        Attributes={"FifoQueue": "false"})
    assert resp["Error"]["Message"] == (
        "Invalid value for the parameter FifoQueue. Reason: Modifying queue type is not supported.")
    resp = expect_error(sqs.set_queue_attributes, "InvalidAttributeValue", 400, QueueUrl=url,
                        Attributes={"DeduplicationScope": "queue"})
    assert resp["Error"]["Message"] == (
        "Invalid value for the parameter FifoThroughputLimit. Reason: To set FifoThroughputLimit to "
        "perMessageGroupId, the DeduplicationScope must be messageGroup.")


def test_a_standard_queue_shows_no_fifo_attributes_and_keeps_a_group_without_blocking(sqs, queue_url):
    assert not {"FifoQueue", "ContentBasedDeduplication"} & set(queue_attrs(sqs, queue_url))
    resp = expect_error(sqs.set_queue_attributes, "InvalidAttributeName", 400, QueueUrl=queue_url,
                        Attributes={"FifoQueue": "true"})
    assert resp["Error"]["Message"] == "Unknown Attribute FifoQueue."
    sent = sqs.send_message(QueueUrl=queue_url, MessageBody="one", MessageGroupId="tenant")
    assert "SequenceNumber" not in sent
    sqs.send_message(QueueUrl=queue_url, MessageBody="two", MessageGroupId="tenant")
    first = receive_one(sqs, queue_url, AttributeNames=["All"], VisibilityTimeout=60)
    assert first["Attributes"]["MessageGroupId"] == "tenant"
    assert "SequenceNumber" not in first["Attributes"]
    assert len(receive(sqs, queue_url, VisibilityTimeout=60)) == 1, "a group never blocks a standard queue"
    resp = expect_error(sqs.send_message, "InvalidParameterValue", 400, QueueUrl=queue_url, MessageBody="x",
                        MessageDeduplicationId="d")
    assert resp["Error"]["Message"] == (
        "Value d for parameter MessageDeduplicationId is invalid. Reason: The request includes a parameter that "
        "is not valid for this queue type.")


# ---- sends --------------------------------------------------------------------------------------------


def test_fifo_sends_need_a_group_and_a_deduplication_id_and_no_delay_of_their_own(sqs, fifo):
    url = fifo()
    resp = expect_error(sqs.send_message, "MissingParameter", 400, QueueUrl=url, MessageBody="x",
                        MessageDeduplicationId="d")
    assert resp["Error"]["Message"] == "The request must contain the parameter MessageGroupId."
    no_dedup = ("The queue should either have ContentBasedDeduplication enabled or MessageDeduplicationId "
                "provided explicitly")
    resp = expect_error(sqs.send_message, "InvalidParameterValue", 400, QueueUrl=url, MessageBody="x",
                        MessageGroupId="g")
    assert resp["Error"]["Message"] == no_dedup
    resp = expect_error(sqs.send_message, "InvalidParameterValue", 400, QueueUrl=url, MessageBody="x",
                        MessageGroupId="g", MessageDeduplicationId="d", DelaySeconds=2)
    assert resp["Error"]["Message"] == (
        "Value 2 for parameter DelaySeconds is invalid. Reason: The request include parameter that is not valid "
        "for this queue type.")
    resp = expect_error(sqs.send_message, "InvalidParameterValue", 400, QueueUrl=url, MessageBody="x",
                        MessageGroupId="group 1", MessageDeduplicationId="d")
    assert resp["Error"]["Message"] == (
        "Value group 1 for parameter MessageGroupId is invalid. Reason: MessageGroupId can only include "
        "alphanumeric and punctuation characters. 1 to 128 in length.")
    # A batch with an entry lacking its group or deduplication id fails as a whole.
    resp = expect_error(sqs.send_message_batch, "InvalidParameterValue", 400, QueueUrl=url, Entries=[
        {"Id": "a", "MessageBody": "x", "MessageGroupId": "g", "MessageDeduplicationId": "1"},
        {"Id": "b", "MessageBody": "y", "MessageDeduplicationId": "2"}])
    assert resp["Error"]["Message"] == "The request must contain the parameter MessageGroupId."
    resp = expect_error(sqs.send_message_batch, "InvalidParameterValue", 400, QueueUrl=url, Entries=[
        {"Id": "a", "MessageBody": "x", "MessageGroupId": "g"}])
    assert resp["Error"]["Message"] == no_dedup
    assert receive(sqs, url) == [], "nothing of the refused sends arrived"
    sent = send(sqs, url, "now", "g", "ok", DelaySeconds=0)
    assert sent["MD5OfMessageBody"] == md5_hex("now")


def test_sequence_numbers_are_20_digits_and_strictly_increase(sqs, fifo):
    url = fifo()
    numbers = [send(sqs, url, f"m{i}", "ab"[i % 2], f"d{i}")["SequenceNumber"] for i in range(4)]
    batch = sqs.send_message_batch(QueueUrl=url, Entries=[
        {"Id": f"e{i}", "MessageBody": f"b{i}", "MessageGroupId": "c", "MessageDeduplicationId": f"b{i}"}
        for i in range(3)])
    numbers += [entry["SequenceNumber"] for entry in batch["Successful"]]
    assert all(len(n) == 20 and n.isdigit() for n in numbers), numbers
    assert [int(n) for n in numbers] == sorted(set(int(n) for n in numbers)), numbers
    got = receive(sqs, url, MaxNumberOfMessages=10, AttributeNames=["SequenceNumber"], VisibilityTimeout=60)
    shown = {m["Body"]: m["Attributes"]["SequenceNumber"] for m in got}
    assert shown["m0"] == numbers[0] and shown["m1"] == numbers[1]


# ---- order and blocking ---------------------------------------------------------------------------------


def test_a_group_is_delivered_in_send_order_across_receives(sqs, fifo):
    url = fifo()
    for i in range(5):
        send(sqs, url, f"m{i}", "g", f"d{i}")
    seen = []
    for _ in range(5):
        message = receive_one(sqs, url, VisibilityTimeout=30)
        seen.append(message["Body"])
        delete(sqs, url, message)
    assert seen == [f"m{i}" for i in range(5)]
    assert receive(sqs, url) == []


def test_a_group_waits_while_a_message_is_in_flight_and_other_groups_flow(sqs, fifo):
    url = fifo()
    send(sqs, url, "a1", "a", "1")
    send(sqs, url, "a2", "a", "2")
    send(sqs, url, "b1", "b", "3")
    first = receive_one(sqs, url, VisibilityTimeout=30)
    assert first["Body"] == "a1"
    assert bodies(receive(sqs, url, MaxNumberOfMessages=10, VisibilityTimeout=30)) == ["b1"]
    assert receive(sqs, url, MaxNumberOfMessages=10) == [], "group a is held while a1 is in flight"
    delete(sqs, url, first)
    assert bodies(receive(sqs, url, MaxNumberOfMessages=10, VisibilityTimeout=30)) == ["a2"]


def test_one_receive_takes_several_messages_of_a_group_in_order(sqs, fifo):
    url = fifo()
    for i in range(6):
        send(sqs, url, f"m{i}", "g", f"d{i}")
    got = receive(sqs, url, MaxNumberOfMessages=4, VisibilityTimeout=30)
    assert bodies(got) == ["m0", "m1", "m2", "m3"]
    assert receive(sqs, url, MaxNumberOfMessages=10) == []


def test_a_lapsed_visibility_redelivers_the_groups_head_first(sqs, fifo):
    url = fifo(VisibilityTimeout=1)
    for i in range(3):
        send(sqs, url, f"m{i}", "g", f"d{i}")
    assert bodies(receive(sqs, url, MaxNumberOfMessages=2)) == ["m0", "m1"]
    time.sleep(1.3)
    again = receive(sqs, url, MaxNumberOfMessages=10, AttributeNames=["ApproximateReceiveCount"],
                    VisibilityTimeout=30)
    assert bodies(again) == ["m0", "m1", "m2"]
    assert [m["Attributes"]["ApproximateReceiveCount"] for m in again] == ["2", "2", "1"]


def test_a_lapsed_receipt_cannot_delete(sqs, fifo):
    url = fifo(VisibilityTimeout=1)
    send(sqs, url, "x", "g", "d")
    message = receive_one(sqs, url)
    time.sleep(1.3)
    resp = expect_error(sqs.delete_message, "InvalidParameterValue", 400, QueueUrl=url,
                        ReceiptHandle=message["ReceiptHandle"])
    assert resp["Error"]["Message"] == (
        f"Value {message['ReceiptHandle']} for parameter ReceiptHandle is invalid. {EXPIRED}")
    batch = sqs.delete_message_batch(QueueUrl=url, Entries=[{"Id": "a", "ReceiptHandle": message["ReceiptHandle"]}])
    assert batch["Failed"][0]["Code"] == "InvalidParameterValue"
    assert batch["Failed"][0]["Message"].endswith(EXPIRED)
    again = receive_one(sqs, url, VisibilityTimeout=30)
    assert again["MessageId"] == message["MessageId"]
    delete(sqs, url, again)
    assert receive(sqs, url) == []


# ---- deduplication ------------------------------------------------------------------------------------


def test_a_duplicate_id_is_accepted_with_the_first_ids_and_never_delivered(sqs, fifo):
    url = fifo()
    first = send(sqs, url, "first", "g", "same")
    again = send(sqs, url, "second", "g", "same")
    assert (again["MessageId"], again["SequenceNumber"]) == (first["MessageId"], first["SequenceNumber"])
    message = receive_one(sqs, url, MaxNumberOfMessages=10, AttributeNames=["MessageDeduplicationId"])
    assert (message["Body"], message["Attributes"]["MessageDeduplicationId"]) == ("first", "same")
    delete(sqs, url, message)
    after = send(sqs, url, "third", "g", "same")
    assert after["MessageId"] == first["MessageId"], "still deduplicated after the first was deleted"
    assert receive(sqs, url, MaxNumberOfMessages=10, WaitTimeSeconds=1) == []


def test_content_based_deduplication_compares_bodies(sqs, fifo):
    url = fifo(ContentBasedDeduplication="true")
    first = send(sqs, url, "same body", "g")
    again = send(sqs, url, "same body", "g")
    assert again["MessageId"] == first["MessageId"]
    other = send(sqs, url, "other body", "g")
    assert other["MessageId"] != first["MessageId"]
    got = receive(sqs, url, MaxNumberOfMessages=10, AttributeNames=["All"], VisibilityTimeout=30)
    assert bodies(got) == ["same body", "other body"]
    assert got[0]["Attributes"]["MessageDeduplicationId"] == hashlib.sha256(b"same body").hexdigest()


def test_message_group_scope_deduplicates_within_each_group(sqs, fifo):
    url = fifo(DeduplicationScope="messageGroup")
    a = send(sqs, url, "in a", "a", "same")
    b = send(sqs, url, "in b", "b", "same")
    assert a["MessageId"] != b["MessageId"]
    assert send(sqs, url, "in a again", "a", "same")["MessageId"] == a["MessageId"]
    got = receive(sqs, url, MaxNumberOfMessages=10, VisibilityTimeout=30)
    assert sorted(bodies(got)) == ["in a", "in b"]


def test_a_deduplication_id_survives_kill_9_and_a_restart(make_server, tmp_path):
    srv = make_server(data_dir=tmp_path / "data")
    c = make_client(srv.endpoint)
    url = c.create_queue(QueueName="crash-dedup.fifo", Attributes={"FifoQueue": "true"})["QueueUrl"]
    first = c.send_message(QueueUrl=url, MessageBody="once", MessageGroupId="g", MessageDeduplicationId="only")
    srv.kill()
    restarted = make_server(data_dir=tmp_path / "data", port=srv.port)
    c = make_client(restarted.endpoint)
    again = c.send_message(QueueUrl=url, MessageBody="twice", MessageGroupId="g", MessageDeduplicationId="only")
    assert (again["MessageId"], again["SequenceNumber"]) == (first["MessageId"], first["SequenceNumber"])
    got = receive(c, url, MaxNumberOfMessages=10, WaitTimeSeconds=1)
    assert bodies(got) == ["once"]
    later = c.send_message(QueueUrl=url, MessageBody="new", MessageGroupId="g", MessageDeduplicationId="other")
    assert int(later["SequenceNumber"]) > int(first["SequenceNumber"])
    restarted.stop_cleanly()


# ---- receive attempts ---------------------------------------------------------------------------------


def test_a_retried_receive_attempt_returns_the_same_messages_and_receipts(sqs, fifo):
    url = fifo()
    for i in range(3):
        send(sqs, url, f"m{i}", "g", f"d{i}")
    first = receive(sqs, url, MaxNumberOfMessages=2, ReceiveRequestAttemptId="attempt-1", VisibilityTimeout=30)
    retried = receive(sqs, url, MaxNumberOfMessages=2, ReceiveRequestAttemptId="attempt-1", VisibilityTimeout=30)
    assert [(m["MessageId"], m["ReceiptHandle"]) for m in retried] == [
        (m["MessageId"], m["ReceiptHandle"]) for m in first]
    assert bodies(first) == ["m0", "m1"]
    assert receive(sqs, url, MaxNumberOfMessages=10, ReceiveRequestAttemptId="attempt-2") == []
    for m in retried:
        delete(sqs, url, m)
    assert bodies(receive(sqs, url, MaxNumberOfMessages=10)) == ["m2"]
    resp = expect_error(sqs.receive_message, "InvalidParameterValue", 400, QueueUrl=url,
                        ReceiveRequestAttemptId="with space")
    assert "ReceiveRequestAttemptId" in resp["Error"]["Message"]


# ---- dead letters -------------------------------------------------------------------------------------


def test_a_fifo_dead_letter_queue_keeps_the_group_and_unblocks_it(sqs, fifo, queue_name):
    dlq = fifo("-dlq")
    policy = json.dumps({"deadLetterTargetArn": arn(f"{queue_name}-dlq.fifo"), "maxReceiveCount": 1})
    src = fifo("-src", VisibilityTimeout=1, RedrivePolicy=policy)
    send(sqs, src, "poison", "g", "1")
    send(sqs, src, "next", "g", "2")
    assert receive_one(sqs, src)["Body"] == "poison"
    time.sleep(1.3)
    assert bodies(receive(sqs, src, MaxNumberOfMessages=10, VisibilityTimeout=30)) == ["next"]
    dead = receive_one(sqs, dlq, WaitTimeSeconds=2, AttributeNames=["MessageGroupId", "DeadLetterQueueSourceArn"])
    assert dead["Body"] == "poison"
    assert dead["Attributes"] == {"MessageGroupId": "g", "DeadLetterQueueSourceArn": arn(f"{queue_name}-src.fifo")}


def test_a_standard_dead_letter_queue_for_a_fifo_source_is_refused(sqs, fifo, new_queue, queue_name):
    new_queue("dlq")
    policy = json.dumps({"deadLetterTargetArn": arn(f"{queue_name}-dlq"), "maxReceiveCount": 3})
    src = fifo()
    resp = expect_error(sqs.set_queue_attributes, "InvalidParameterValue", 400, QueueUrl=src,
                        Attributes={"RedrivePolicy": policy})
    assert resp["Error"]["Message"].endswith(
        "for parameter RedrivePolicy is invalid. Reason: Dead-letter queue must be same type of queue as the "
        "source..")
    expect_error(sqs.create_queue, "InvalidParameterValue", 400, QueueName=f"{queue_name}-other.fifo",
                 Attributes={"FifoQueue": "true", "RedrivePolicy": policy})


# ---- the Query protocol ---------------------------------------------------------------------------------


def query_ok(resp, action):
    assert resp.status_code == 200, f"{action}: HTTP {resp.status_code} {resp.text[:800]}"
    root = parse_xml(resp)
    assert root.tag == f"{action}Response", resp.text
    return root


def test_query_fifo_queue_sends_with_sequence_numbers_and_retries_receive_attempts(endpoint, queue_name):
    name = f"{queue_name}.fifo"
    root = query_ok(query_call(endpoint, {
        "Action": "CreateQueue", "QueueName": name,
        "Attribute.1.Name": "FifoQueue", "Attribute.1.Value": "true",
        "Attribute.2.Name": "ContentBasedDeduplication", "Attribute.2.Value": "true"}), "CreateQueue")
    url = root.findtext("CreateQueueResult/QueueUrl")
    numbers = []
    for body in ("q1", "q2"):
        root = query_ok(query_call(endpoint, {
            "Action": "SendMessage", "QueueUrl": url, "MessageBody": body, "MessageGroupId": "g"}), "SendMessage")
        numbers.append(root.findtext("SendMessageResult/SequenceNumber"))
    assert all(n and len(n) == 20 for n in numbers) and int(numbers[0]) < int(numbers[1]), numbers
    root = query_ok(query_call(endpoint, {
        "Action": "SendMessageBatch", "QueueUrl": url,
        "SendMessageBatchRequestEntry.1.Id": "e1", "SendMessageBatchRequestEntry.1.MessageBody": "q3",
        "SendMessageBatchRequestEntry.1.MessageGroupId": "g"}), "SendMessageBatch")
    assert int(root.findtext("SendMessageBatchResult/SendMessageBatchResultEntry/SequenceNumber")) > int(numbers[1])

    params = {"Action": "ReceiveMessage", "QueueUrl": url, "MaxNumberOfMessages": "2",
              "ReceiveRequestAttemptId": "query-attempt", "AttributeName.1": "All"}
    first = query_ok(query_call(endpoint, params), "ReceiveMessage").findall("ReceiveMessageResult/Message")
    retried = query_ok(query_call(endpoint, params), "ReceiveMessage").findall("ReceiveMessageResult/Message")
    assert [m.findtext("Body") for m in first] == ["q1", "q2"]
    assert [m.findtext("ReceiptHandle") for m in retried] == [m.findtext("ReceiptHandle") for m in first]
    attrs = {a.findtext("Name"): a.findtext("Value") for a in first[0].findall("Attribute")}
    assert attrs["MessageGroupId"] == "g"
    assert attrs["SequenceNumber"] == numbers[0]
    assert attrs["MessageDeduplicationId"] == hashlib.sha256(b"q1").hexdigest()

    resp = query_call(endpoint, {"Action": "SendMessage", "QueueUrl": url, "MessageBody": "x"})
    assert resp.status_code == 400
    err = parse_xml(resp).find("Error")
    assert (err.findtext("Code"), err.findtext("Message")) == (
        "MissingParameter", "The request must contain the parameter MessageGroupId.")


# ---- the aws CLI --------------------------------------------------------------------------------------


def test_cli_fifo_queue_orders_deduplicates_and_reports_errors(aws, queue_name):
    name = f"{queue_name}-{uuid.uuid4().hex[:4]}.fifo"
    url = aws("create-queue", "--queue-name", name,
              "--attributes", "FifoQueue=true,ContentBasedDeduplication=true")["QueueUrl"]
    attrs = aws("get-queue-attributes", "--queue-url", url, "--attribute-names", "All")["Attributes"]
    assert (attrs["FifoQueue"], attrs["ContentBasedDeduplication"]) == ("true", "true")
    sent = [aws("send-message", "--queue-url", url, "--message-body", f"c{i}", "--message-group-id", "g")
            for i in range(2)]
    dup = aws("send-message", "--queue-url", url, "--message-body", "c0", "--message-group-id", "g")
    assert dup["MessageId"] == sent[0]["MessageId"]
    assert int(sent[0]["SequenceNumber"]) < int(sent[1]["SequenceNumber"])
    got = aws("receive-message", "--queue-url", url, "--max-number-of-messages", "10",
              "--attribute-names", "All", "--receive-request-attempt-id", "cli-1")["Messages"]
    assert [m["Body"] for m in got] == ["c0", "c1"]
    assert [m["Attributes"]["SequenceNumber"] for m in got] == [s["SequenceNumber"] for s in sent]
    proc = aws("send-message", "--queue-url", url, "--message-body", "x", check=False)
    assert proc.returncode != 0
    assert "MissingParameter" in proc.stderr and "MessageGroupId" in proc.stderr, proc.stderr
