"""The AWS JSON 1.0 protocol on the wire, with raw SigV4-signed requests: success responses (content type,
x-amzn-RequestId), error responses (HTTP status, `x-amzn-query-error: <QueryCode>;Sender`, body `__type` and
`message`), malformed JSON, an unknown X-Amz-Target, wrong parameter types and missing required parameters —
bad input gets a 4xx error, never a 5xx or a dropped connection."""

import pytest

from helpers import ACCOUNT, json_call

JSON_CT = "application/x-amz-json-1.0"


def check_error(resp, status, query_code, shape):
    assert resp.status_code == status, f"expected HTTP {status}, got {resp.status_code}: {resp.text[:500]}"
    assert resp.headers.get("x-amzn-query-error") == f"{query_code};Sender", (
        f"x-amzn-query-error: expected {query_code};Sender, got {resp.headers.get('x-amzn-query-error')!r}"
    )
    assert resp.headers.get("x-amzn-RequestId"), f"no x-amzn-RequestId header: {dict(resp.headers)}"
    assert resp.headers.get("Content-Type", "").startswith(JSON_CT), resp.headers
    body = resp.json()
    assert body.get("__type") == f"com.amazonaws.sqs#{shape}", f"__type: {body}"
    assert body.get("message"), f"error body without a message: {body}"
    return body


def check_framework_error(resp, shape):
    """An error of the service framework rather than of SQS's model (a body that cannot be read, an unknown
    operation): HTTP 400, `__type` under `com.amazon.coral.service#`, and no `x-amzn-query-error` header, for
    there is no Query code to name."""
    assert resp.status_code == 400, f"expected HTTP 400, got {resp.status_code}: {resp.text[:500]}"
    assert resp.headers.get("Content-Type", "").startswith(JSON_CT), resp.headers
    body = resp.json()
    assert body.get("__type") == f"com.amazon.coral.service#{shape}", f"__type: {body}"
    assert body.get("message"), f"error body without a message: {body}"
    assert "x-amzn-query-error" not in resp.headers, dict(resp.headers)
    return body


@pytest.fixture
def qurl(endpoint, queue_name):
    resp = json_call(endpoint, "CreateQueue", {"QueueName": queue_name})
    assert resp.status_code == 200, resp.text
    return resp.json()["QueueUrl"]


def test_json_success_has_json_content_type_and_request_id(endpoint, queue_name):
    resp = json_call(endpoint, "CreateQueue", {"QueueName": queue_name})
    assert resp.status_code == 200, resp.text
    assert resp.headers.get("Content-Type", "").startswith(JSON_CT), resp.headers
    assert resp.headers.get("x-amzn-RequestId"), dict(resp.headers)
    assert resp.json() == {"QueueUrl": f"{endpoint}/{ACCOUNT}/{queue_name}"}


def test_json_nonexistent_queue_error(endpoint, queue_name):
    resp = json_call(endpoint, "GetQueueUrl", {"QueueName": queue_name + "-missing"})
    body = check_error(resp, 400, "AWS.SimpleQueueService.NonExistentQueue", "QueueDoesNotExist")
    assert body["message"] == "The specified queue does not exist."


def test_json_invalid_parameter_value_error(endpoint, qurl):
    resp = json_call(endpoint, "ReceiveMessage", {"QueueUrl": qurl, "MaxNumberOfMessages": 11})
    body = check_error(resp, 400, "InvalidParameterValue", "InvalidParameterValueException")
    assert "Must be between 1 and 10, if provided." in body["message"]


def test_json_receipt_handle_is_invalid_error(endpoint, qurl):
    resp = json_call(endpoint, "DeleteMessage", {"QueueUrl": qurl, "ReceiptHandle": "garbage"})
    body = check_error(resp, 400, "ReceiptHandleIsInvalid", "ReceiptHandleIsInvalid")
    assert body["message"] == 'The input receipt handle "garbage" is not a valid receipt handle.'


def test_json_batch_errors(endpoint, qurl):
    entries = [{"Id": "same", "MessageBody": "a"}, {"Id": "same", "MessageBody": "b"}]
    resp = json_call(endpoint, "SendMessageBatch", {"QueueUrl": qurl, "Entries": entries})
    check_error(resp, 400, "AWS.SimpleQueueService.BatchEntryIdsNotDistinct", "BatchEntryIdsNotDistinct")
    resp = json_call(endpoint, "SendMessageBatch", {"QueueUrl": qurl, "Entries": []})
    check_error(resp, 400, "AWS.SimpleQueueService.EmptyBatchRequest", "EmptyBatchRequest")


def test_json_queue_already_exists_error(endpoint, queue_name):
    assert json_call(endpoint, "CreateQueue", {"QueueName": queue_name, "Attributes": {"DelaySeconds": "1"}}).ok
    resp = json_call(endpoint, "CreateQueue", {"QueueName": queue_name, "Attributes": {"DelaySeconds": "5"}})
    check_error(resp, 400, "QueueAlreadyExists", "QueueNameExists")


def test_json_missing_required_parameter(endpoint, qurl):
    resp = json_call(endpoint, "SendMessage", {"QueueUrl": qurl})
    check_error(resp, 400, "MissingParameter", "MissingRequiredParameterException")


@pytest.mark.parametrize("raw", [b"{not json", b"[1, 2", b"\xff\xfe\x00"])
def test_json_malformed_body_is_serialization_exception(endpoint, raw):
    check_framework_error(json_call(endpoint, "ListQueues", None, raw=raw), "SerializationException")


@pytest.mark.parametrize("parameters", [{"MaxNumberOfMessages": [1]}, {"VisibilityTimeout": {"s": 1}}])
def test_json_parameter_of_the_wrong_json_type_is_serialization_exception(endpoint, qurl, parameters):
    resp = json_call(endpoint, "ReceiveMessage", {"QueueUrl": qurl, **parameters})
    check_framework_error(resp, "SerializationException")


def test_json_queue_url_that_is_not_a_string_is_serialization_exception(endpoint):
    check_framework_error(json_call(endpoint, "ReceiveMessage", {"QueueUrl": 7}), "SerializationException")


def test_json_string_that_is_no_integer_is_invalid_parameter_value(endpoint, qurl):
    resp = json_call(endpoint, "ReceiveMessage", {"QueueUrl": qurl, "MaxNumberOfMessages": "lots"})
    check_error(resp, 400, "InvalidParameterValue", "InvalidParameterValueException")


def test_json_unknown_target_is_unknown_operation_exception(endpoint):
    check_framework_error(json_call(endpoint, "FlyToTheMoon", {}), "UnknownOperationException")


def test_json_server_keeps_serving_after_bad_requests(endpoint, queue_name):
    for raw in (b"{", b"null", b"42", b'{"QueueName": 7}'):
        bad = json_call(endpoint, "CreateQueue", None, raw=raw)
        assert 400 <= bad.status_code < 500, f"{raw!r}: HTTP {bad.status_code} {bad.text[:300]}"
    resp = json_call(endpoint, "CreateQueue", {"QueueName": queue_name})
    assert resp.status_code == 200, resp.text
