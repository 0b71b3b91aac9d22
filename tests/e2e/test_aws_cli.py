"""The aws CLI (installed in the test venv) against Veil: `aws sqs` create-queue, get-queue-url, list-queues,
send-message with message attributes, receive-message with attributes, delete-message, get-queue-attributes,
and the CLI's reporting of a service error (non-zero exit, the SQS error code on stderr)."""

import json

from helpers import ACCOUNT, md5_hex, md5_of_message_attributes


def test_cli_create_send_receive_delete(aws, endpoint, queue_name):
    url = aws("create-queue", "--queue-name", queue_name)["QueueUrl"]
    assert url == f"{endpoint}/{ACCOUNT}/{queue_name}"
    assert aws("get-queue-url", "--queue-name", queue_name)["QueueUrl"] == url
    assert aws("list-queues", "--queue-name-prefix", queue_name)["QueueUrls"] == [url]

    attrs = {"origin": {"DataType": "String", "StringValue": "cli"}, "n": {"DataType": "Number", "StringValue": "3"}}
    sent = aws("send-message", "--queue-url", url, "--message-body", "hello from the cli",
               "--message-attributes", json.dumps(attrs))
    assert sent["MD5OfMessageBody"] == md5_hex("hello from the cli")
    assert sent["MD5OfMessageAttributes"] == md5_of_message_attributes(attrs)

    got = aws("receive-message", "--queue-url", url, "--attribute-names", "All",
              "--message-attribute-names", "All", "--visibility-timeout", "60")
    assert len(got["Messages"]) == 1, got
    m = got["Messages"][0]
    assert (m["MessageId"], m["Body"]) == (sent["MessageId"], "hello from the cli")
    assert m["MessageAttributes"] == attrs
    assert m["Attributes"]["ApproximateReceiveCount"] == "1"

    qa = aws("get-queue-attributes", "--queue-url", url, "--attribute-names", "All")["Attributes"]
    assert (qa["ApproximateNumberOfMessages"], qa["ApproximateNumberOfMessagesNotVisible"]) == ("0", "1")

    aws("delete-message", "--queue-url", url, "--receipt-handle", m["ReceiptHandle"])
    qa = aws("get-queue-attributes", "--queue-url", url, "--attribute-names", "All")["Attributes"]
    assert (qa["ApproximateNumberOfMessages"], qa["ApproximateNumberOfMessagesNotVisible"]) == ("0", "0")
    assert aws("receive-message", "--queue-url", url).get("Messages", []) == []


def test_cli_send_message_batch_and_delete_queue(aws, queue_name):
    url = aws("create-queue", "--queue-name", queue_name, "--attributes", "VisibilityTimeout=40")["QueueUrl"]
    entries = [{"Id": f"e{i}", "MessageBody": f"body {i}"} for i in range(3)]
    resp = aws("send-message-batch", "--queue-url", url, "--entries", json.dumps(entries))
    assert sorted(s["Id"] for s in resp["Successful"]) == ["e0", "e1", "e2"]
    qa = aws("get-queue-attributes", "--queue-url", url, "--attribute-names", "VisibilityTimeout",
             "ApproximateNumberOfMessages")["Attributes"]
    assert qa == {"VisibilityTimeout": "40", "ApproximateNumberOfMessages": "3"}
    aws("delete-queue", "--queue-url", url)
    assert aws("list-queues", "--queue-name-prefix", queue_name).get("QueueUrls", []) == []


def test_cli_reports_the_sqs_error_code(aws, queue_name):
    proc = aws("get-queue-url", "--queue-name", queue_name + "-missing", check=False)
    assert proc.returncode != 0
    assert "AWS.SimpleQueueService.NonExistentQueue" in proc.stderr, proc.stderr
