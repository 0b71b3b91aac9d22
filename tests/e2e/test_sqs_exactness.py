"""SQS answers exactly as AWS answers (docs/semantics.md), with the real clients: boto3 (AWS JSON 1.0) and raw
Query requests. Every expected code and text is AWS's own, and each test says where it was recorded from AWS:
LocalStack's AWS-validated snapshot tests (tests/aws/services/sqs/test_sqs.snapshot.json), moto's
`aws_verified` tests, and errors that SDK users pasted from AWS into public issues. Where AWS's wording is not
recorded anywhere we found, the test checks the code and the rule, not the text.
"""

from __future__ import annotations

import json
import time
import uuid

import pytest

from helpers import (
    counts,
    expect_error,
    parse_xml,
    queue_attrs,
    query_call,
    query_error,
    receive,
    receive_one,
)

NON_EXISTENT = "AWS.SimpleQueueService.NonExistentQueue"


def missing_url(endpoint: str) -> str:
    return f"{endpoint}/000000000000/no-such-queue-{uuid.uuid4().hex[:8]}"


# ---- queues that do not exist ------------------------------------------------------------------------


def test_a_missing_queue_is_worded_per_protocol(sqs, endpoint):
    # LocalStack's test_non_existent_queue snapshot: JSON "...does not exist.", Query "...for this wsdl version."
    url = missing_url(endpoint)
    expect_error(sqs.get_queue_attributes, NON_EXISTENT, 400, QueueUrl=url, AttributeNames=["All"])
    resp = expect_error(sqs.send_message, NON_EXISTENT, 400, QueueUrl=url, MessageBody="x")
    assert resp["Error"]["Message"] == "The specified queue does not exist."
    status, code, message = query_error(
        query_call(endpoint, {"Action": "GetQueueAttributes", "QueueUrl": url, "AttributeName.1": "All"})
    )
    assert (status, code, message) == (400, NON_EXISTENT, "The specified queue does not exist for this wsdl version.")
    status, code, message = query_error(
        query_call(endpoint, {"Action": "GetQueueUrl", "QueueName": "no-such-queue-at-all"})
    )
    assert (status, code, message) == (400, NON_EXISTENT, "The specified queue does not exist for this wsdl version.")


def test_a_queue_url_that_names_no_queue_is_a_missing_queue(sqs):
    # moto's AWS-verified tests: sqs.Queue("http://whatever-incorrect-queue-address").load() -> NonExistentQueue.
    resp = expect_error(sqs.get_queue_attributes, NON_EXISTENT, 400,
                        QueueUrl="http://whatever-incorrect-queue-address", AttributeNames=["All"])
    assert resp["Error"]["Message"] == "The specified queue does not exist."


# ---- GetQueueAttributes --------------------------------------------------------------------------------


def test_get_queue_attributes_with_nothing_to_show_has_no_attributes(sqs, endpoint, queue_url):
    # moto's AWS-verified test_get_queue_attributes: no Attributes member when nothing is shown.
    assert "Attributes" not in sqs.get_queue_attributes(QueueUrl=queue_url)
    assert "Attributes" not in sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["KmsMasterKeyId"])
    resp = query_call(endpoint, {"Action": "GetQueueAttributes", "QueueUrl": queue_url})
    assert resp.status_code == 200, resp.text
    assert parse_xml(resp).find("GetQueueAttributesResult/Attribute") is None, resp.text


# ---- attributes infrastructure-as-code sets ------------------------------------------------------------

POLICY = json.dumps({
    "Version": "2012-10-17",
    "Statement": [{"Effect": "Allow", "Principal": "*", "Action": "sqs:SendMessage", "Resource": "*"}],
})


def test_a_new_queue_has_sse_sqs_on_as_aws_creates_it(sqs, queue_name, queue_url):
    # LocalStack's AWS-recorded test_set_queue_attributes_default_values: SqsManagedSseEnabled "true".
    attrs = queue_attrs(sqs, queue_url)
    assert attrs["SqsManagedSseEnabled"] == "true"
    assert "KmsMasterKeyId" not in attrs and "Policy" not in attrs
    # What CDK and Terraform send finds the queue unchanged, so CreateQueue stays idempotent.
    again = sqs.create_queue(QueueName=queue_name, Attributes={"SqsManagedSseEnabled": "true"})
    assert again["QueueUrl"] == queue_url
    expect_error(sqs.create_queue, "QueueAlreadyExists", 400, QueueName=queue_name,
                 Attributes={"SqsManagedSseEnabled": "false"})


def test_kms_and_policy_attributes_are_kept_returned_and_compared(sqs, queue_name):
    given = {"KmsMasterKeyId": "alias/aws/sqs", "KmsDataKeyReusePeriodSeconds": "6000", "Policy": POLICY}
    url = sqs.create_queue(QueueName=queue_name, Attributes=given)["QueueUrl"]
    attrs = queue_attrs(sqs, url)
    # LocalStack's AWS-recorded test_sse_queue_attributes: a KMS key turns SSE-SQS off.
    assert {k: attrs.get(k) for k in given} == given
    assert attrs["SqsManagedSseEnabled"] == "false"
    # CreateQueue is idempotent with the same values and refuses a different one, like any attribute.
    assert sqs.create_queue(QueueName=queue_name, Attributes=given)["QueueUrl"] == url
    resp = expect_error(sqs.create_queue, "QueueAlreadyExists", 400, QueueName=queue_name,
                        Attributes={**given, "KmsDataKeyReusePeriodSeconds": "600"})
    assert resp["Error"]["Message"] == (
        "A queue already exists with the same name and a different value for attribute KmsDataKeyReusePeriodSeconds"
    )
    # An empty Policy removes it; an empty key and the default reuse period read as never set.
    sqs.set_queue_attributes(QueueUrl=url, Attributes={"Policy": "", "KmsMasterKeyId": "",
                                                        "KmsDataKeyReusePeriodSeconds": "300"})
    attrs = queue_attrs(sqs, url)
    assert not {"Policy", "KmsMasterKeyId", "KmsDataKeyReusePeriodSeconds"} & set(attrs)
    assert attrs["SqsManagedSseEnabled"] == "false"
    sqs.set_queue_attributes(QueueUrl=url, Attributes={"SqsManagedSseEnabled": "true"})
    assert queue_attrs(sqs, url, "SqsManagedSseEnabled") == {"SqsManagedSseEnabled": "true"}


@pytest.mark.parametrize("name,value", [
    ("KmsDataKeyReusePeriodSeconds", "59"),
    ("KmsDataKeyReusePeriodSeconds", "86401"),
    ("Policy", "not json"),
    ("SqsManagedSseEnabled", "yes"),
    ("VisibilityTimeout", "43201"),
    ("MessageRetentionPeriod", "59"),
    ("MaximumMessageSize", "1048577"),
    ("DelaySeconds", "901"),
    ("ReceiveMessageWaitTimeSeconds", "21"),
])
def test_a_bad_attribute_value_names_the_attribute(sqs, queue_url, name, value):
    # AWS: {"__type":"com.amazonaws.sqs#InvalidAttributeValue","message":"Invalid value for the parameter Policy."}
    # (terraform-provider-aws PR 42209); the same form for every attribute.
    resp = expect_error(sqs.set_queue_attributes, "InvalidAttributeValue", 400,
                        QueueUrl=queue_url, Attributes={name: value})
    assert resp["Error"]["Message"] == f"Invalid value for the parameter {name}."


def test_both_kinds_of_encryption_at_once_are_refused(sqs, queue_url):
    # LocalStack's AWS-recorded test_sse_kms_and_sqs_are_mutually_exclusive (both protocols).
    resp = expect_error(sqs.set_queue_attributes, "InvalidAttributeName", 400, QueueUrl=queue_url,
                        Attributes={"KmsMasterKeyId": "alias/aws/sqs", "SqsManagedSseEnabled": "true"})
    assert resp["Error"]["Message"] == (
        "You can use one type of server-side encryption (SSE) at one time. You can either enable KMS SSE or SQS SSE."
    )


def test_fifo_attributes_on_a_standard_queue_get_awss_answers(sqs, queue_name, queue_url):
    # LocalStack's AWS-recorded test_create_standard_queue_with_fifo_attribute_raises_error and
    # test_set_unsupported_attribute_standard.
    resp = expect_error(sqs.create_queue, "InvalidAttributeName", 400, QueueName=queue_name + "-x",
                        Attributes={"FifoQueue": "false"})
    assert resp["Error"]["Message"] == "Unknown Attribute FifoQueue."
    resp = expect_error(sqs.set_queue_attributes, "InvalidAttributeName", 400, QueueUrl=queue_url,
                        Attributes={"FifoThroughputLimit": "perQueue"})
    assert resp["Error"]["Message"] == "You can specify the FifoThroughputLimit only when FifoQueue is set to true."


def test_max_receive_count_error_quotes_the_count(sqs, queue_url, new_queue):
    # LocalStack's provider quotes AWS's text for a maxReceiveCount out of 1..1000.
    dlq_arn = queue_attrs(sqs, new_queue("dlq"), "QueueArn")["QueueArn"]
    policy = json.dumps({"deadLetterTargetArn": dlq_arn, "maxReceiveCount": 1001})
    resp = expect_error(sqs.set_queue_attributes, "InvalidParameterValue", 400, QueueUrl=queue_url,
                        Attributes={"RedrivePolicy": policy})
    assert resp["Error"]["Message"] == (
        f"Value {policy} for parameter RedrivePolicy is invalid. Reason: Invalid value for maxReceiveCount: 1001, "
        "valid values are from 1 to 1000 both inclusive."
    )


# ---- message attributes -------------------------------------------------------------------------------


def test_message_attribute_names_select_as_aws_selects(sqs, new_queue):
    # LocalStack's AWS-recorded test_receive_message_message_attribute_names_filters.
    url = new_queue("filters", VisibilityTimeout=0)
    sqs.send_message(QueueUrl=url, MessageBody="msg", MessageAttributes={
        "Help.Me": {"DataType": "String", "StringValue": "Me"},
        "Hello": {"DataType": "String", "StringValue": "There"},
        "General": {"DataType": "String", "StringValue": "Kenobi"},
    })

    def names(filters):
        return set(receive_one(sqs, url, MessageAttributeNames=filters).get("MessageAttributes", {}))

    everything = {"Help.Me", "Hello", "General"}
    assert names(["All"]) == everything
    assert names(["*"]) == everything
    assert names([".*"]) == everything
    assert names(["Hel.*"]) == {"Hello", "Help.Me"}
    assert names(["Foo", "Hello"]) == {"Hello"}
    assert names(["Foo", "Help"]) == set()
    assert names(["AWS."]) == set()
    assert names(["..foo"]) == set()


def test_message_attribute_rules_and_texts(sqs, queue_url):
    def send(attributes):
        return sqs.send_message(QueueUrl=queue_url, MessageBody="test", MessageAttributes=attributes)

    def refused(attributes) -> str:
        return expect_error(send, "InvalidParameterValue", 400, attributes=attributes)["Error"]["Message"]

    # AWS's documented characters (A-Z, a-z, 0-9, _, -, .) and LocalStack's AWS-validated
    # test_send_message_with_invalid_string_attributes: 256 characters are fine, these are refused.
    send({"attr.1_A-z": {"DataType": "String", "StringValue": "Valida"}})
    send({"L" * 256: {"DataType": "String", "StringValue": "v"}})
    for name in ["aWs.x", "AMAZON.x", ".lead", "Invalid.", "Invalid-§-attr", "L" * 257, "a..b", "attr.1øßä"]:
        refused({name: {"DataType": "String", "StringValue": "v"}})
    assert refused({"öther_encodings": {"DataType": "String", "StringValue": "v"}}) == (
        "The message attribute name 'öther_encodings' is invalid. Attribute name can contain A-Z, a-z, 0-9, "
        "underscore (_), hyphen (-), and period (.) characters."
    )
    # In a batch the entry fails alone.
    batch = sqs.send_message_batch(QueueUrl=queue_url, Entries=[
        {"Id": "ok", "MessageBody": "x"},
        {"Id": "bad", "MessageBody": "x",
         "MessageAttributes": {"öther_encodings": {"DataType": "String", "StringValue": "v"}}}])
    assert [entry["Id"] for entry in batch["Successful"]] == ["ok"]
    assert [(entry["Id"], entry["Code"], entry["SenderFault"]) for entry in batch["Failed"]] == [
        ("bad", "InvalidParameterValue", True)]
    refused({"n": {"DataType": "Number." + "L" * 256, "StringValue": "1"}})
    # Texts recorded from AWS: LocalStack's test_send_message_with_empty_string_attribute snapshot and
    # grafana/k6-jslib-aws PR 65.
    assert refused({"ErrorDetails": {"DataType": "String", "StringValue": ""}}) == (
        "Message (user) attribute 'ErrorDetails' must contain a non-empty value of type 'String'."
    )
    assert refused({"my-attribute": {"DataType": "Text", "StringValue": "x"}}) == (
        "The type of message (user) attribute 'my-attribute' is invalid. You must use only the following "
        "supported type prefixes: Binary, Number, String."
    )
    # AWS's Number range: 38 digits, magnitude 10^-128 .. 10^126.
    send({"n": {"DataType": "Number", "StringValue": "1e126"}})
    refused({"n": {"DataType": "Number", "StringValue": "1e127"}})
    refused({"n": {"DataType": "Number", "StringValue": "1e-129"}})


def test_a_query_message_attribute_without_a_name(endpoint, queue_url):
    # AWS's Query answer, recorded in aws/aws-sdk-php issue 694.
    resp = query_call(endpoint, {
        "Action": "SendMessage", "QueueUrl": queue_url, "MessageBody": "b",
        "MessageAttribute.1.Value.DataType": "String", "MessageAttribute.1.Value.StringValue": "x",
    })
    assert query_error(resp) == (400, "InvalidParameterValue", "The request must contain non-empty message attribute name.")


# ---- batches ------------------------------------------------------------------------------------------


BATCH_ID_TEXT = (
    "A batch entry id can only contain alphanumeric characters, hyphens and underscores. "
    "It can be at most 80 letters long."
)


@pytest.mark.parametrize("bad_id", ["", "invalid:id", "i" * 81])
def test_batch_entry_ids(sqs, queue_url, bad_id):
    # LocalStack's AWS-recorded test_delete_message_batch_invalid_msg_id; moto's AWS-verified
    # test_send_message_batch_errors (an empty id is this error too, not a missing parameter).
    resp = expect_error(sqs.send_message_batch, "AWS.SimpleQueueService.InvalidBatchEntryId", 400,
                        QueueUrl=queue_url, Entries=[{"Id": bad_id, "MessageBody": "b"}])
    assert resp["Error"]["Message"] == BATCH_ID_TEXT
    resp = expect_error(sqs.delete_message_batch, "AWS.SimpleQueueService.InvalidBatchEntryId", 400,
                        QueueUrl=queue_url, Entries=[{"Id": bad_id, "ReceiptHandle": "h"}])
    assert resp["Error"]["Message"] == BATCH_ID_TEXT


@pytest.mark.parametrize("action,entry", [
    ("SendMessageBatch", "SendMessageBatchRequestEntry"),
    ("DeleteMessageBatch", "DeleteMessageBatchRequestEntry"),
    ("ChangeMessageVisibilityBatch", "ChangeMessageVisibilityBatchRequestEntry"),
])
def test_an_empty_batch_is_empty_batch_request_in_both_protocols(sqs, endpoint, queue_url, action, entry):
    # moto's AWS-verified test_delete_message_batch_with_zero_entries and test_send_message_batch_errors.
    text = f"There should be at least one {entry} in the request."
    method = {"SendMessageBatch": sqs.send_message_batch, "DeleteMessageBatch": sqs.delete_message_batch,
              "ChangeMessageVisibilityBatch": sqs.change_message_visibility_batch}[action]
    resp = expect_error(method, "AWS.SimpleQueueService.EmptyBatchRequest", 400, QueueUrl=queue_url, Entries=[])
    assert resp["Error"]["Message"] == text
    resp = query_call(endpoint, {"Action": action, "QueueUrl": queue_url})
    assert query_error(resp) == (400, "AWS.SimpleQueueService.EmptyBatchRequest", text)


def test_delay_seconds_is_worded_as_aws_words_it(sqs, queue_url):
    # AWS: "Value 54524 for parameter DelaySeconds is invalid. Reason: DelaySeconds must be >= 0 and <= 900."
    # (aws-samples/amazon-sqs-dlq-replay-backoff issue 8).
    text = "Value 901 for parameter DelaySeconds is invalid. Reason: DelaySeconds must be >= 0 and <= 900."
    resp = expect_error(sqs.send_message, "InvalidParameterValue", 400, QueueUrl=queue_url, MessageBody="b",
                        DelaySeconds=901)
    assert resp["Error"]["Message"] == text
    result = sqs.send_message_batch(QueueUrl=queue_url, Entries=[
        {"Id": "late", "MessageBody": "b", "DelaySeconds": 901}, {"Id": "ok", "MessageBody": "b"}])
    assert [e["Id"] for e in result["Successful"]] == ["ok"]
    assert result["Failed"] == [{"Id": "late", "SenderFault": True, "Code": "InvalidParameterValue", "Message": text}]


# ---- ranges -------------------------------------------------------------------------------------------


def test_receive_ranges(sqs, queue_url):
    # LocalStack's AWS-recorded test_send_receive_max_number_of_messages and test_send_receive_wait_time_seconds.
    resp = expect_error(sqs.receive_message, "InvalidParameterValue", 400, QueueUrl=queue_url, MaxNumberOfMessages=11)
    assert resp["Error"]["Message"] == (
        "Value 11 for parameter MaxNumberOfMessages is invalid. Reason: Must be between 1 and 10, if provided."
    )
    resp = expect_error(sqs.receive_message, "InvalidParameterValue", 400, QueueUrl=queue_url, WaitTimeSeconds=21)
    assert resp["Error"]["Message"] == (
        "Value 21 for parameter WaitTimeSeconds is invalid. Reason: Must be >= 0 and <= 20, if provided."
    )


def test_visibility_past_twelve_hours_is_worded_as_aws_words_it(sqs, queue_url):
    # AWS (gchq/sleeper issue 6507, Java SDK v2): "... beyond the limit [43200 seconds]." with the full stop.
    sqs.send_message(QueueUrl=queue_url, MessageBody="b")
    handle = receive_one(sqs, queue_url, VisibilityTimeout=60)["ReceiptHandle"]
    sqs.change_message_visibility(QueueUrl=queue_url, ReceiptHandle=handle, VisibilityTimeout=43200 - 5)
    resp = expect_error(sqs.change_message_visibility, "InvalidParameterValue", 400, QueueUrl=queue_url,
                        ReceiptHandle=handle, VisibilityTimeout=43200)
    assert resp["Error"]["Message"] == (
        "Value 43200 for parameter VisibilityTimeout is invalid. Reason: Total VisibilityTimeout for the message "
        "is beyond the limit [43200 seconds]."
    )


def test_message_and_batch_sizes(sqs, new_queue, queue_url):
    # LocalStack's AWS-recorded test_send_message_with_updated_maximum_message_size and
    # test_send_message_batch_with_oversized_contents.
    small = new_queue("small", MaximumMessageSize=1024)
    resp = expect_error(sqs.send_message, "InvalidParameterValue", 400, QueueUrl=small, MessageBody="x" * 1025)
    assert resp["Error"]["Message"] == "One or more parameters are invalid. Reason: Message must be shorter than 1024 bytes."
    # One entry too long fails alone, worded "cannot be validated" (LocalStack's AWS-recorded
    # test_send_batch_message_size).
    result = sqs.send_message_batch(QueueUrl=small, Entries=[{"Id": "big", "MessageBody": "x" * 1025},
                                                             {"Id": "ok", "MessageBody": "x"}])
    assert [e["Id"] for e in result["Successful"]] == ["ok"]
    assert result["Failed"] == [{
        "Id": "big", "SenderFault": True, "Code": "InvalidParameterValue",
        "Message": "One or more parameters cannot be validated. Reason: Message must be shorter than 1024 bytes.",
    }]
    entries = [{"Id": "a", "MessageBody": "x" * 524288}, {"Id": "b", "MessageBody": "x" * 524289}]
    resp = expect_error(sqs.send_message_batch, "AWS.SimpleQueueService.BatchRequestTooLong", 400,
                        QueueUrl=queue_url, Entries=entries)
    assert resp["Error"]["Message"] == "Batch requests cannot be longer than 1048576 bytes. You have sent 1048577 bytes."


# ---- receipt handles ----------------------------------------------------------------------------------


def test_a_malformed_receipt_handle(sqs, endpoint, queue_url):
    # LocalStack's AWS-validated test_delete_message_with_illegal_receipt_handle (JSON and Query) and
    # test_invalid_receipt_handle_should_return_error_message (ChangeMessageVisibility: the code).
    text = 'The input receipt handle "garbage" is not a valid receipt handle.'
    resp = expect_error(sqs.delete_message, "ReceiptHandleIsInvalid", 400, QueueUrl=queue_url, ReceiptHandle="garbage")
    assert resp["Error"]["Message"] == text
    expect_error(sqs.change_message_visibility, "ReceiptHandleIsInvalid", 400, QueueUrl=queue_url,
                 ReceiptHandle="garbage", VisibilityTimeout=60)
    for params in ({"Action": "DeleteMessage"}, {"Action": "ChangeMessageVisibility", "VisibilityTimeout": "60"}):
        resp = query_call(endpoint, {**params, "QueueUrl": queue_url, "ReceiptHandle": "garbage"})
        assert query_error(resp) == (400, "ReceiptHandleIsInvalid", text)


def test_an_older_receipt_still_changes_and_deletes_a_message_received_again(sqs, queue_url):
    # AWS accepts an older receipt of a message received again on standard queues (moto PR 4655, verified
    # against AWS; AWS's DeleteMessage reference).
    sqs.send_message(QueueUrl=queue_url, MessageBody="twice")
    first = receive_one(sqs, queue_url, VisibilityTimeout=1)["ReceiptHandle"]
    time.sleep(1.5)
    second = receive_one(sqs, queue_url, VisibilityTimeout=60)["ReceiptHandle"]
    assert first != second
    assert counts(sqs, queue_url) == (0, 1, 0)
    sqs.change_message_visibility(QueueUrl=queue_url, ReceiptHandle=first, VisibilityTimeout=0)
    # The new visibility applies: the message is visible again at once.
    assert counts(sqs, queue_url) == (1, 0, 0)
    assert receive_one(sqs, queue_url, VisibilityTimeout=60)["Body"] == "twice"
    sqs.delete_message(QueueUrl=queue_url, ReceiptHandle=first)
    assert counts(sqs, queue_url) == (0, 0, 0)
    assert receive(sqs, queue_url) == []


# ---- tags ---------------------------------------------------------------------------------------------


def test_tags_are_validated(sqs, queue_name, queue_url):
    sqs.tag_queue(QueueUrl=queue_url, Tags={"team": "a b_.:/=+-@é", "k" * 128: "v" * 256})
    for tags in ({"aws:owner": "x"}, {"k" * 129: "v"}, {"k": "v" * 257}, {"semi;colon": "v"}, {"k": "semi;colon"}):
        expect_error(sqs.tag_queue, "InvalidParameterValue", 400, QueueUrl=queue_url, Tags=tags)
    expect_error(sqs.untag_queue, "InvalidParameterValue", 400, QueueUrl=queue_url, TagKeys=["k" * 129])
    before = sqs.list_queue_tags(QueueUrl=queue_url)["Tags"]
    # 50 per queue, counting the tags it has; a refused TagQueue changes nothing (moto's wording).
    resp = expect_error(sqs.tag_queue, "InvalidParameterValue", 400, QueueUrl=queue_url,
                        Tags={f"t{i}": "v" for i in range(49)})
    assert resp["Error"]["Message"] == f"Too many tags added for queue {queue_name}."
    assert sqs.list_queue_tags(QueueUrl=queue_url)["Tags"] == before
    expect_error(sqs.create_queue, "InvalidParameterValue", 400, QueueName=queue_name + "-t",
                 tags={"aws:reserved": "x"})
