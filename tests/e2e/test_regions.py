"""Namespaces and URLs: the SigV4 credential-scope region selects the namespace (us-east-1 and eu-west-1 hold
different queues with their own attributes, messages and listings, and ARNs name the region), and the queue URL's
host is echoed from the request's Host header."""

import pytest

from helpers import (
    ACCOUNT, arn, expect_error, json_call, make_client, parse_xml, query_call, queue_attrs, receive, receive_one,
)


@pytest.fixture(scope="module")
def eu(endpoint):
    return make_client(endpoint, region="eu-west-1")


def test_a_queue_in_one_region_does_not_exist_in_another(sqs, eu, queue_name):
    sqs.create_queue(QueueName=queue_name)
    expect_error(eu.get_queue_url, "AWS.SimpleQueueService.NonExistentQueue", QueueName=queue_name)
    assert eu.list_queues(QueueNamePrefix=queue_name).get("QueueUrls", []) == []


def test_same_name_in_two_regions_are_two_queues(sqs, eu, queue_name):
    us_url = sqs.create_queue(QueueName=queue_name, Attributes={"VisibilityTimeout": "11"})["QueueUrl"]
    # Different attributes: no QueueAlreadyExists, because it is another namespace.
    eu_url = eu.create_queue(QueueName=queue_name, Attributes={"VisibilityTimeout": "22"})["QueueUrl"]
    assert queue_attrs(sqs, us_url, "VisibilityTimeout", "QueueArn") == {
        "VisibilityTimeout": "11", "QueueArn": arn(queue_name, "us-east-1")}
    assert queue_attrs(eu, eu_url, "VisibilityTimeout", "QueueArn") == {
        "VisibilityTimeout": "22", "QueueArn": arn(queue_name, "eu-west-1")}

    sqs.send_message(QueueUrl=us_url, MessageBody="for us-east-1")
    assert receive(eu, eu_url, WaitTimeSeconds=1) == [], "a message crossed regions"
    eu.send_message(QueueUrl=eu_url, MessageBody="for eu-west-1")
    assert [m["Body"] for m in receive(sqs, us_url, MaxNumberOfMessages=10)] == ["for us-east-1"]
    assert [m["Body"] for m in receive(eu, eu_url, MaxNumberOfMessages=10)] == ["for eu-west-1"]

    eu.delete_queue(QueueUrl=eu_url)
    assert sqs.get_queue_url(QueueName=queue_name)["QueueUrl"] == us_url, "deleting in eu-west-1 removed us-east-1's"


def test_a_receipt_from_one_region_is_receipt_handle_is_invalid_in_another(sqs, eu, queue_name):
    us_url = sqs.create_queue(QueueName=queue_name)["QueueUrl"]
    eu_url = eu.create_queue(QueueName=queue_name)["QueueUrl"]
    sqs.send_message(QueueUrl=us_url, MessageBody="us")
    eu.send_message(QueueUrl=eu_url, MessageBody="eu")
    us_msg = receive_one(sqs, us_url, VisibilityTimeout=60)
    # The receipt names us-east-1's queue, which is not the eu-west-1 queue of the same name: not Veil's receipt
    # for this queue, so refused (never a silent success that deletes nothing).
    expect_error(eu.delete_message, "ReceiptHandleIsInvalid", QueueUrl=eu_url, ReceiptHandle=us_msg["ReceiptHandle"])
    assert queue_attrs(eu, eu_url, "ApproximateNumberOfMessages")["ApproximateNumberOfMessages"] == "1"
    assert queue_attrs(sqs, us_url, "ApproximateNumberOfMessagesNotVisible")[
        "ApproximateNumberOfMessagesNotVisible"] == "1"


def test_query_protocol_uses_the_region_of_the_signature(sqs, endpoint, queue_name):
    sqs.create_queue(QueueName=queue_name)
    resp = query_call(endpoint, {"Action": "GetQueueUrl", "QueueName": queue_name}, region="eu-west-1")
    assert resp.status_code == 400, resp.text
    assert parse_xml(resp).findtext("Error/Code") == "AWS.SimpleQueueService.NonExistentQueue"
    resp = query_call(endpoint, {"Action": "CreateQueue", "QueueName": queue_name}, region="eu-west-1")
    assert resp.status_code == 200, resp.text
    resp = query_call(endpoint, {"Action": "GetQueueAttributes", "QueueUrl": f"{endpoint}/{ACCOUNT}/{queue_name}",
                                 "AttributeName.1": "QueueArn"}, region="eu-west-1")
    assert parse_xml(resp).findtext("GetQueueAttributesResult/Attribute/Value") == arn(queue_name, "eu-west-1")


def test_queue_url_host_is_echoed_from_the_host_header(endpoint, server, queue_name):
    localhost = make_client(f"http://localhost:{server.port}")
    url = localhost.create_queue(QueueName=queue_name)["QueueUrl"]
    assert url == f"http://localhost:{server.port}/{ACCOUNT}/{queue_name}"

    resp = json_call(endpoint, "GetQueueUrl", {"QueueName": queue_name}, headers={"Host": "veil.example:8443"})
    assert resp.status_code == 200, resp.text
    assert resp.json()["QueueUrl"] == f"http://veil.example:8443/{ACCOUNT}/{queue_name}"

    resp = query_call(endpoint, {"Action": "GetQueueUrl", "QueueName": queue_name}, headers={"Host": "sqs.internal"})
    assert resp.status_code == 200, resp.text
    assert parse_xml(resp).findtext("GetQueueUrlResult/QueueUrl") == f"http://sqs.internal/{ACCOUNT}/{queue_name}"

    listed = json_call(endpoint, "ListQueues", {"QueueNamePrefix": queue_name}, headers={"Host": "other:1"})
    assert listed.json().get("QueueUrls") == [f"http://other:1/{ACCOUNT}/{queue_name}"]
