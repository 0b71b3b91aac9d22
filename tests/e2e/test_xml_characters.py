"""Characters XML 1.0 forbids (docs/semantics.md §7, docs/security.md "Characters XML cannot carry"; issue 44,
item 5). Azure's Put Message and Update Message refuse a document holding one (raw, or as a character
reference like `&#x1;`) with Azure's 400 InvalidXmlDocument. A body another protocol stored with such bytes (a
KubeMQ body is any bytes) is shown with U+FFFD for each of them — as bytes that are not UTF-8 always were — so
every XML answer stays well-formed: the Azure SDK peeks and receives it and the messages around it, and SQS
shows it the same way over Query and JSON, with the digest of what it shows."""

from __future__ import annotations

import urllib.parse

import pytest
from kubemq.queues import QueueMessage

from helpers import (azure_error, azure_raw, expect_azure_error, md5_hex, md5_of_message_attributes, parse_xml,
                     query_call, query_error)

# A NUL, a BEL, a unit separator, U+FFFE and U+FFFF (UTF-8, but not XML characters), one byte that is not
# UTF-8, and the characters XML allows around them.
ODD_BODY = b"nul\x00 bel\x07 us\x1f fffe\xef\xbf\xbe ffff\xef\xbf\xbf bad\xff tab\t nl\n end"
ODD_SHOWN = "nul\ufffd bel\ufffd us\ufffd fffe\ufffd ffff\ufffd bad\ufffd tab\t nl\n end"


def kubemq_send(kmq, channel: str, body: bytes, **kwargs) -> None:
    result = kmq.send_queue_message(QueueMessage(channel=channel, body=body, **kwargs))
    assert not result.is_error, result.error


def test_a_kubemq_body_with_characters_xml_forbids_does_not_stop_azure_peeks_or_receives(kmq, azure_queue):
    name = azure_queue.queue_name
    kubemq_send(kmq, name, b"before")
    kubemq_send(kmq, name, ODD_BODY)
    kubemq_send(kmq, name, b"after")
    assert [m.content for m in azure_queue.peek_messages(max_messages=32)] == ["before", ODD_SHOWN, "after"]
    got = list(azure_queue.receive_messages(messages_per_page=32, visibility_timeout=60))
    assert [m.content for m in got] == ["before", ODD_SHOWN, "after"]
    for message in got:
        azure_queue.delete_message(message)
    assert azure_queue.get_queue_properties().approximate_message_count == 0


def test_sqs_shows_a_kubemq_body_and_tag_with_characters_xml_forbids_alike_over_query_and_json(
        kmq, sqs, endpoint, queue_name):
    url = sqs.create_queue(QueueName=queue_name)["QueueUrl"]
    kubemq_send(kmq, queue_name, ODD_BODY, tags={"note": "tab\t nul\x00 end"})
    shown_attributes = {"note": {"DataType": "String", "StringValue": "tab\t nul\ufffd end"}}
    root = parse_xml(query_call(endpoint, {
        "Action": "ReceiveMessage", "QueueUrl": url, "MessageAttributeName.1": "note", "VisibilityTimeout": "0",
    }))
    [message] = root.findall("ReceiveMessageResult/Message")
    assert message.findtext("Body") == ODD_SHOWN
    assert message.findtext("MD5OfBody") == md5_hex(ODD_SHOWN)
    attributes = {a.findtext("Name"): a.findtext("Value/StringValue") for a in message.findall("MessageAttribute")}
    assert attributes == {"note": "tab\t nul\ufffd end"}
    assert message.findtext("MD5OfMessageAttributes") == md5_of_message_attributes(shown_attributes)
    [received] = sqs.receive_message(QueueUrl=url, MessageAttributeNames=["note"]).get("Messages", [])
    assert (received["Body"], received["MD5OfBody"]) == (ODD_SHOWN, md5_hex(ODD_SHOWN)), "JSON shows it alike"
    assert received["MessageAttributes"] == shown_attributes
    assert received["MD5OfMessageAttributes"] == md5_of_message_attributes(shown_attributes)


@pytest.mark.parametrize("text", ["nul\x00", "bel\x07", "us\x1f", "nonchar\ufffe"])
def test_azure_put_and_update_with_a_character_xml_forbids_are_invalid_xml_document(azure_queue, text):
    expect_azure_error(azure_queue.send_message, "InvalidXmlDocument", 400, content=text)
    assert azure_queue.peek_messages() == [], "the message was stored"
    sent = azure_queue.send_message("kept")
    expect_azure_error(azure_queue.update_message, "InvalidXmlDocument", 400, message=sent.id,
                       pop_receipt=sent.pop_receipt, content=text, visibility_timeout=0)
    assert [m.content for m in azure_queue.peek_messages()] == ["kept"]


@pytest.mark.parametrize("reference", ["&#0;", "&#x1;", "&#8;", "&#x1F;", "&#xFFFE;", "&#65535;"])
def test_azure_put_and_update_with_a_reference_to_a_character_xml_forbids_are_invalid_xml_document(
        server, azure_queue, reference):
    path = f"/{azure_queue.queue_name}/messages"
    document = f"<QueueMessage><MessageText>a{reference}b</MessageText></QueueMessage>"
    put = azure_raw(server, "POST", path, data=document.encode())
    assert (put.status_code, put.headers.get("x-ms-error-code")) == (400, "InvalidXmlDocument"), put.text
    sent = azure_queue.send_message("kept")
    update = azure_raw(server, "PUT", f"{path}/{sent.id}",
                       query=f"popreceipt={urllib.parse.quote(sent.pop_receipt)}&visibilitytimeout=0", data=document.encode())
    assert (update.status_code, update.headers.get("x-ms-error-code")) == (400, "InvalidXmlDocument"), update.text
    assert [m.content for m in azure_queue.peek_messages()] == ["kept"]


def test_answers_that_echo_a_requests_control_characters_stay_well_formed(server, endpoint, queue_url):
    """The writer's rule covers every text, not only bodies: errors and listings that repeat what the request
    said (a parameter, a prefix) show its NUL or C0 control as U+FFFD."""
    listed = azure_raw(server, "GET", "/", query="comp=list&prefix=a%00b&marker=%01")
    assert listed.status_code == 200, listed.text
    root = parse_xml(listed)
    assert (root.findtext("Prefix"), root.findtext("Marker")) == ("a\ufffdb", "\ufffd")
    refused = azure_raw(server, "GET", "/any-queue/messages", query="numofmessages=%00")
    assert (refused.status_code, azure_error(refused)["QueryParameterValue"]) == (400, "\ufffd")
    status, code, message = query_error(query_call(endpoint, {"Action": "Nope\x00"}))
    assert (status, code) == (400, "InvalidAction") and "Nope\ufffd" in message
    status, code, message = query_error(query_call(endpoint, {
        "Action": "DeleteMessage", "QueueUrl": queue_url, "ReceiptHandle": "a\x00\x01b"}))
    assert (status, code) == (400, "ReceiptHandleIsInvalid") and "a\ufffd\ufffdb" in message
