"""The SQS Query protocol with raw form-encoded, SigV4-signed POSTs (as older SDKs and tools send them) and parsed
XML replies: CreateQueue, GetQueueUrl, ListQueues, GetQueueAttributes, SendMessage with message attributes,
SendMessageBatch, ReceiveMessage with system and message attributes, DeleteMessage, requests addressed to the
queue URL path, the ErrorResponse shape with its HTTP status, unknown actions, missing parameters, and that
Query and JSON clients see the same queues."""

import base64
import time

import pytest

from helpers import ACCOUNT, md5_hex, md5_of_message_attributes, parse_xml, query_call, receive_one

XMLNS = "http://queue.amazonaws.com/doc/2012-11-05/"


def query_attributes(endpoint, qurl, *names) -> dict:
    params = {"Action": "GetQueueAttributes", "QueueUrl": qurl}
    params.update({f"AttributeName.{i + 1}": name for i, name in enumerate(names)})
    root = ok(query_call(endpoint, params), "GetQueueAttributes")
    return {a.findtext("Name"): a.findtext("Value") for a in root.findall("GetQueueAttributesResult/Attribute")}


def ok(resp, action):
    assert resp.status_code == 200, f"{action}: HTTP {resp.status_code} {resp.text[:800]}"
    assert "xml" in resp.headers.get("Content-Type", ""), resp.headers
    root = parse_xml(resp)
    assert root.tag == f"{action}Response", f"root element {root.tag}, expected {action}Response"
    rid = root.findtext("ResponseMetadata/RequestId")
    assert rid, f"{action}: no ResponseMetadata/RequestId in {resp.text[:500]}"
    return root


def error(resp, status, code):
    root = parse_xml(resp)
    assert root.tag == "ErrorResponse", resp.text
    err = root.find("Error")
    assert err is not None, resp.text
    assert err.findtext("Code") == code, f"expected {code}, got {err.findtext('Code')}: {resp.text}"
    assert resp.status_code == status, f"{code}: expected HTTP {status}, got {resp.status_code}"
    assert err.findtext("Type") == "Sender", resp.text
    assert err.findtext("Message"), f"empty error message: {resp.text}"
    assert err.find("Detail") is not None, f"no <Detail/> element: {resp.text}"
    assert root.findtext("RequestId"), f"no RequestId: {resp.text}"
    return err


@pytest.fixture
def qurl(endpoint, queue_name):
    root = ok(query_call(endpoint, {"Action": "CreateQueue", "QueueName": queue_name}), "CreateQueue")
    return root.findtext("CreateQueueResult/QueueUrl")


def test_query_create_queue_returns_the_queue_url_and_applies_its_attributes(endpoint, queue_name):
    resp = query_call(endpoint, {
        "Action": "CreateQueue", "QueueName": queue_name,
        "Attribute.1.Name": "VisibilityTimeout", "Attribute.1.Value": "42",
    })
    root = ok(resp, "CreateQueue")
    url = root.findtext("CreateQueueResult/QueueUrl")
    assert url == f"{endpoint}/{ACCOUNT}/{queue_name}"
    raw = resp.text
    assert XMLNS in raw, f"response lacks the SQS XML namespace {XMLNS}: {raw[:300]}"
    assert query_attributes(endpoint, url, "VisibilityTimeout") == {"VisibilityTimeout": "42"}


def test_query_get_queue_url_and_attributes(endpoint, qurl, queue_name):
    root = ok(query_call(endpoint, {"Action": "GetQueueUrl", "QueueName": queue_name}), "GetQueueUrl")
    assert root.findtext("GetQueueUrlResult/QueueUrl") == qurl
    root = ok(query_call(endpoint, {
        "Action": "GetQueueAttributes", "QueueUrl": qurl,
        "AttributeName.1": "VisibilityTimeout", "AttributeName.2": "QueueArn",
    }), "GetQueueAttributes")
    attrs = {a.findtext("Name"): a.findtext("Value") for a in root.findall("GetQueueAttributesResult/Attribute")}
    assert attrs == {"VisibilityTimeout": "30", "QueueArn": f"arn:aws:sqs:us-east-1:{ACCOUNT}:{queue_name}"}


def test_query_list_queues_with_prefix(endpoint, qurl, queue_name):
    root = ok(query_call(endpoint, {"Action": "ListQueues", "QueueNamePrefix": queue_name}), "ListQueues")
    assert [u.text for u in root.findall("ListQueuesResult/QueueUrl")] == [qurl]


def test_query_send_message_with_attributes_then_receive_and_delete(endpoint, qurl):
    binary = bytes([0, 1, 2, 250, 255])
    resp = query_call(endpoint, {
        "Action": "SendMessage", "QueueUrl": qurl, "MessageBody": "query body & <xml> ✓",
        "MessageAttribute.1.Name": "color", "MessageAttribute.1.Value.DataType": "String",
        "MessageAttribute.1.Value.StringValue": "blue",
        "MessageAttribute.2.Name": "size", "MessageAttribute.2.Value.DataType": "Number",
        "MessageAttribute.2.Value.StringValue": "12",
        "MessageAttribute.3.Name": "blob", "MessageAttribute.3.Value.DataType": "Binary",
        "MessageAttribute.3.Value.BinaryValue": base64.b64encode(binary).decode(),
    })
    root = ok(resp, "SendMessage")
    expected_attrs = {
        "color": {"DataType": "String", "StringValue": "blue"},
        "size": {"DataType": "Number", "StringValue": "12"},
        "blob": {"DataType": "Binary", "BinaryValue": binary},
    }
    message_id = root.findtext("SendMessageResult/MessageId")
    assert message_id
    assert root.findtext("SendMessageResult/MD5OfMessageBody") == md5_hex("query body & <xml> ✓")
    assert root.findtext("SendMessageResult/MD5OfMessageAttributes") == md5_of_message_attributes(expected_attrs)

    root = ok(query_call(endpoint, {
        "Action": "ReceiveMessage", "QueueUrl": qurl, "MaxNumberOfMessages": "10",
        "AttributeName.1": "All", "MessageAttributeName.1": "All", "VisibilityTimeout": "60",
    }), "ReceiveMessage")
    msgs = root.findall("ReceiveMessageResult/Message")
    assert len(msgs) == 1, resp.text
    m = msgs[0]
    assert m.findtext("MessageId") == message_id
    assert m.findtext("Body") == "query body & <xml> ✓"
    assert m.findtext("MD5OfBody") == md5_hex("query body & <xml> ✓")
    assert m.findtext("MD5OfMessageAttributes") == md5_of_message_attributes(expected_attrs)
    sys_attrs = {a.findtext("Name"): a.findtext("Value") for a in m.findall("Attribute")}
    assert sys_attrs["ApproximateReceiveCount"] == "1"
    assert abs(int(sys_attrs["SentTimestamp"]) - time.time() * 1000) < 60_000
    got = {}
    for a in m.findall("MessageAttribute"):
        v = a.find("Value")
        entry = {"DataType": v.findtext("DataType")}
        if v.find("StringValue") is not None:
            entry["StringValue"] = v.findtext("StringValue")
        if v.find("BinaryValue") is not None:
            entry["BinaryValue"] = base64.b64decode(v.findtext("BinaryValue"))
        got[a.findtext("Name")] = entry
    assert got == expected_attrs

    handle = m.findtext("ReceiptHandle")
    ok(query_call(endpoint, {"Action": "DeleteMessage", "QueueUrl": qurl, "ReceiptHandle": handle}), "DeleteMessage")
    attrs = query_attributes(endpoint, qurl, "All")
    assert (attrs["ApproximateNumberOfMessages"], attrs["ApproximateNumberOfMessagesNotVisible"]) == ("0", "0")


def test_query_receive_on_empty_queue_has_an_empty_result(endpoint, qurl):
    root = ok(query_call(endpoint, {"Action": "ReceiveMessage", "QueueUrl": qurl}), "ReceiveMessage")
    assert root.find("ReceiveMessageResult") is not None
    assert root.findall("ReceiveMessageResult/Message") == []


def test_query_send_message_batch(endpoint, qurl):
    root = ok(query_call(endpoint, {
        "Action": "SendMessageBatch", "QueueUrl": qurl,
        "SendMessageBatchRequestEntry.1.Id": "one", "SendMessageBatchRequestEntry.1.MessageBody": "b1",
        "SendMessageBatchRequestEntry.2.Id": "two", "SendMessageBatchRequestEntry.2.MessageBody": "b2",
        "SendMessageBatchRequestEntry.2.DelaySeconds": "0",
    }), "SendMessageBatch")
    ok_entries = root.findall("SendMessageBatchResult/SendMessageBatchResultEntry")
    assert sorted(e.findtext("Id") for e in ok_entries) == ["one", "two"]
    for e in ok_entries:
        assert e.findtext("MD5OfMessageBody") == md5_hex({"one": "b1", "two": "b2"}[e.findtext("Id")])
    assert root.findall("SendMessageBatchResult/BatchResultErrorEntry") == []
    assert query_attributes(endpoint, qurl, "ApproximateNumberOfMessages") == {"ApproximateNumberOfMessages": "2"}


def test_query_request_to_the_queue_url_path_needs_no_queue_url_parameter(endpoint, sqs, qurl, queue_name):
    path = f"/{ACCOUNT}/{queue_name}"
    root = ok(query_call(endpoint, {"Action": "SendMessage", "MessageBody": "via path"}, path=path), "SendMessage")
    assert root.findtext("SendMessageResult/MD5OfMessageBody") == md5_hex("via path")
    assert receive_one(sqs, qurl)["Body"] == "via path"


def test_query_and_json_clients_share_queues(endpoint, sqs, qurl):
    sqs.send_message(QueueUrl=qurl, MessageBody="from json")
    root = ok(query_call(endpoint, {"Action": "ReceiveMessage", "QueueUrl": qurl}), "ReceiveMessage")
    assert [m.findtext("Body") for m in root.findall("ReceiveMessageResult/Message")] == ["from json"]


def test_query_error_response_shape_and_status(endpoint, queue_name):
    resp = query_call(endpoint, {"Action": "GetQueueUrl", "QueueName": queue_name + "-missing"})
    error(resp, 400, "AWS.SimpleQueueService.NonExistentQueue")
    assert "xml" in resp.headers.get("Content-Type", "")


def test_query_invalid_parameter_error(endpoint, qurl):
    resp = query_call(endpoint, {"Action": "ReceiveMessage", "QueueUrl": qurl, "MaxNumberOfMessages": "11"})
    err = error(resp, 400, "InvalidParameterValue")
    assert "Must be between 1 and 10, if provided." in err.findtext("Message")


def test_query_forged_receipt_handle_is_receipt_handle_is_invalid(endpoint, qurl):
    resp = query_call(endpoint, {"Action": "DeleteMessage", "QueueUrl": qurl, "ReceiptHandle": "garbage"})
    err = error(resp, 400, "ReceiptHandleIsInvalid")
    assert err.findtext("Message") == 'The input receipt handle "garbage" is not a valid receipt handle.'


def test_query_unknown_action_is_invalid_action(endpoint):
    resp = query_call(endpoint, {"Action": "FlyToTheMoon"})
    error(resp, 400, "InvalidAction")


def test_query_missing_queue_name_is_missing_parameter(endpoint):
    resp = query_call(endpoint, {"Action": "CreateQueue"})
    error(resp, 400, "MissingParameter")


def test_query_batch_error_codes(endpoint, qurl):
    params = {"Action": "SendMessageBatch", "QueueUrl": qurl}
    for i in range(11):
        params[f"SendMessageBatchRequestEntry.{i + 1}.Id"] = f"e{i}"
        params[f"SendMessageBatchRequestEntry.{i + 1}.MessageBody"] = "x"
    error(query_call(endpoint, params), 400, "AWS.SimpleQueueService.TooManyEntriesInBatchRequest")
