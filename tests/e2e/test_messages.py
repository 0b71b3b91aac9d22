"""Messages through boto3: SendMessage / ReceiveMessage / DeleteMessage, the body and attribute MD5s (checked
against hashlib and against digests recorded from real AWS), message attribute types and name filters, system
attributes (SentTimestamp, ApproximateReceiveCount, ApproximateFirstReceiveTimestamp), the batch actions with
their per-entry results and batch-level errors, per-message and per-queue delays, size and character limits,
and receive parameter validation."""

import time

import pytest

from helpers import MIB, counts, expect_error, md5_hex, md5_of_message_attributes, receive, receive_one

BATCH_ERRORS = "AWS.SimpleQueueService."


def test_send_returns_message_id_and_body_md5(sqs, queue_url):
    resp = sqs.send_message(QueueUrl=queue_url, MessageBody="hello veil")
    assert resp["MD5OfMessageBody"] == md5_hex("hello veil")
    assert len(resp["MessageId"]) == 36 and resp["MessageId"].count("-") == 4, resp["MessageId"]
    assert "MD5OfMessageAttributes" not in resp


def test_message_ids_are_unique(sqs, queue_url):
    ids = {sqs.send_message(QueueUrl=queue_url, MessageBody="same body")["MessageId"] for _ in range(20)}
    assert len(ids) == 20


def test_receive_returns_body_id_md5_and_receipt_handle(sqs, queue_url):
    sent = sqs.send_message(QueueUrl=queue_url, MessageBody="payload")
    m = receive_one(sqs, queue_url)
    assert m["MessageId"] == sent["MessageId"]
    assert m["Body"] == "payload"
    assert m["MD5OfBody"] == md5_hex("payload")
    assert isinstance(m["ReceiptHandle"], str) and len(m["ReceiptHandle"]) >= 16, m["ReceiptHandle"]
    assert "Attributes" not in m, "system attributes returned without being asked for"
    assert "MessageAttributes" not in m


def test_deleted_message_is_not_received_again(sqs, queue_url):
    sqs.send_message(QueueUrl=queue_url, MessageBody="once")
    m = receive_one(sqs, queue_url, VisibilityTimeout=0)
    sqs.delete_message(QueueUrl=queue_url, ReceiptHandle=m["ReceiptHandle"])
    assert receive(sqs, queue_url, WaitTimeSeconds=1) == []
    assert counts(sqs, queue_url) == (0, 0, 0)


def test_receive_on_empty_queue_returns_no_messages(sqs, queue_url):
    resp = sqs.receive_message(QueueUrl=queue_url)
    assert resp.get("Messages", []) == []
    assert resp["ResponseMetadata"]["HTTPStatusCode"] == 200


def test_unicode_body_round_trips_and_md5_is_over_utf8(sqs, queue_url):
    body = "héllo ✓ 𝄞 tab\tnl\ncr\r \ud7ff \ue000 \ufffd \U0010ffff"
    resp = sqs.send_message(QueueUrl=queue_url, MessageBody=body)
    assert resp["MD5OfMessageBody"] == md5_hex(body.encode("utf-8"))
    m = receive_one(sqs, queue_url)
    assert m["Body"] == body
    assert m["MD5OfBody"] == md5_hex(body)


def test_message_attributes_of_every_type_round_trip_with_md5(sqs, queue_url):
    attrs = {
        "str": {"DataType": "String", "StringValue": "plain ✓"},
        "num": {"DataType": "Number", "StringValue": "-12.5"},
        "bin": {"DataType": "Binary", "BinaryValue": bytes(range(256))},
        "custom": {"DataType": "String.custom", "StringValue": "typed"},
        "numint": {"DataType": "Number.int", "StringValue": "42"},
        "bincustom": {"DataType": "Binary.gz", "BinaryValue": b"\x1f\x8b\x00"},
    }
    sent = sqs.send_message(QueueUrl=queue_url, MessageBody="with attributes", MessageAttributes=attrs)
    assert sent["MD5OfMessageAttributes"] == md5_of_message_attributes(attrs)
    m = receive_one(sqs, queue_url, MessageAttributeNames=["All"])
    assert m["MessageAttributes"] == attrs
    assert m["MD5OfMessageAttributes"] == md5_of_message_attributes(attrs)
    assert m["MD5OfBody"] == md5_hex("with attributes")


def test_message_attribute_md5_matches_digests_recorded_from_aws(sqs, queue_url):
    # Digests recorded against real SQS for these attributes.
    string_attr = {"MyAttribute": {"StringValue": "foobar", "DataType": "String"}}
    binary_attr = {
        "attr1": {
            "DataType": "Binary",
            "BinaryValue": b"traceparent\x1e00-774062d6c37081a5a0b9b5b88e30627c-2d2482211f6489da-01",
        }
    }
    r1 = sqs.send_message(QueueUrl=queue_url, MessageBody="test", MessageAttributes=string_attr)
    r2 = sqs.send_message(QueueUrl=queue_url, MessageBody="test", MessageAttributes=binary_attr)
    assert r1["MD5OfMessageAttributes"] == "adb59cd4678ea5a855436b949cd07ab6"
    assert r2["MD5OfMessageAttributes"] == "8cbe4db156db8a94db8b801b7addb984"
    assert r1["MD5OfMessageBody"] == "098f6bcd4621d373cade4e832627b4f6"


def test_message_attribute_names_select_exact_names_and_prefix_wildcards(sqs, queue_url):
    attrs = {
        "foo.a": {"DataType": "String", "StringValue": "1"},
        "foo.b": {"DataType": "Number", "StringValue": "2"},
        "bar": {"DataType": "String", "StringValue": "3"},
        "food": {"DataType": "String", "StringValue": "4"},
    }
    sqs.send_message(QueueUrl=queue_url, MessageBody="filtered", MessageAttributes=attrs)

    def received_attrs(names):
        m = receive_one(sqs, queue_url, VisibilityTimeout=0, **({"MessageAttributeNames": names} if names else {}))
        got = m.get("MessageAttributes", {})
        if got:
            assert m["MD5OfMessageAttributes"] == md5_of_message_attributes(got), f"digest of the returned {names}"
        return got

    assert received_attrs(None) == {}
    assert received_attrs(["All"]) == attrs
    assert received_attrs([".*"]) == attrs
    assert received_attrs(["bar"]) == {"bar": attrs["bar"]}
    # AWS's prefix rule: "foo.*" selects every name that starts with "foo", so "food" too (docs/semantics.md §SQS).
    assert received_attrs(["foo.*"]) == {"foo.a": attrs["foo.a"], "foo.b": attrs["foo.b"], "food": attrs["food"]}
    assert received_attrs(["foo.a.*"]) == {"foo.a": attrs["foo.a"]}
    assert received_attrs(["bar", "foo.b", "missing"]) == {"bar": attrs["bar"], "foo.b": attrs["foo.b"]}
    assert received_attrs(["nothing-matches"]) == {}


def test_string_attribute_without_value_is_invalid_parameter_value(sqs, queue_url):
    expect_error(
        sqs.send_message, "InvalidParameterValue",
        QueueUrl=queue_url, MessageBody="x", MessageAttributes={"a": {"DataType": "String", "StringValue": ""}},
    )


def test_more_than_10_message_attributes_is_invalid_parameter_value(sqs, queue_url):
    attrs = {f"a{i}": {"DataType": "String", "StringValue": str(i)} for i in range(11)}
    expect_error(sqs.send_message, "InvalidParameterValue", QueueUrl=queue_url, MessageBody="x", MessageAttributes=attrs)
    ok = {f"a{i}": {"DataType": "String", "StringValue": str(i)} for i in range(10)}
    sqs.send_message(QueueUrl=queue_url, MessageBody="x", MessageAttributes=ok)


def test_system_attributes_sent_timestamp_receive_count_and_first_receive(sqs, queue_url):
    t0 = int(time.time() * 1000)
    sqs.send_message(QueueUrl=queue_url, MessageBody="sys")
    t1 = int(time.time() * 1000)
    m = receive_one(sqs, queue_url, MessageSystemAttributeNames=["All"], VisibilityTimeout=0)
    t2 = int(time.time() * 1000)
    a = m["Attributes"]
    assert t0 - 1000 <= int(a["SentTimestamp"]) <= t1 + 1000, (t0, a)
    assert a["ApproximateReceiveCount"] == "1"
    first = int(a["ApproximateFirstReceiveTimestamp"])
    assert int(a["SentTimestamp"]) <= first <= t2 + 1000, a
    time.sleep(0.05)
    m2 = receive_one(sqs, queue_url, AttributeNames=["All"])
    assert m2["Attributes"]["ApproximateReceiveCount"] == "2"
    assert m2["Attributes"]["ApproximateFirstReceiveTimestamp"] == a["ApproximateFirstReceiveTimestamp"]
    assert m2["Attributes"]["SentTimestamp"] == a["SentTimestamp"]


def test_only_requested_system_attributes_are_returned(sqs, queue_url):
    sqs.send_message(QueueUrl=queue_url, MessageBody="sys")
    m = receive_one(sqs, queue_url, MessageSystemAttributeNames=["SentTimestamp", "ApproximateReceiveCount"])
    assert set(m["Attributes"]) == {"SentTimestamp", "ApproximateReceiveCount"}, m["Attributes"]


def test_send_message_batch_returns_per_entry_results(sqs, queue_url):
    entries = [
        {"Id": "plain", "MessageBody": "b1"},
        {"Id": "with_attr", "MessageBody": "b2",
         "MessageAttributes": {"k": {"DataType": "String", "StringValue": "v"}}},
        {"Id": "delayed-1", "MessageBody": "b3", "DelaySeconds": 30},
    ]
    resp = sqs.send_message_batch(QueueUrl=queue_url, Entries=entries)
    assert resp.get("Failed", []) == []
    ok = {e["Id"]: e for e in resp["Successful"]}
    assert set(ok) == {"plain", "with_attr", "delayed-1"}
    assert ok["plain"]["MD5OfMessageBody"] == md5_hex("b1")
    assert ok["with_attr"]["MD5OfMessageAttributes"] == md5_of_message_attributes(entries[1]["MessageAttributes"])
    assert "MD5OfMessageAttributes" not in ok["plain"]
    assert len({e["MessageId"] for e in resp["Successful"]}) == 3
    assert counts(sqs, queue_url) == (2, 0, 1)
    got = receive(sqs, queue_url, MaxNumberOfMessages=10, MessageAttributeNames=["All"])
    by_id = {m["MessageId"]: m for m in got}
    assert set(by_id) == {ok["plain"]["MessageId"], ok["with_attr"]["MessageId"]}
    assert by_id[ok["with_attr"]["MessageId"]]["MessageAttributes"] == entries[1]["MessageAttributes"]


def test_send_message_batch_reports_invalid_characters_per_entry(sqs, queue_url):
    entries = [{"Id": str(i), "MessageBody": f"ok-{i}"} for i in range(9)] + [{"Id": "9", "MessageBody": "\x01"}]
    resp = sqs.send_message_batch(QueueUrl=queue_url, Entries=entries)
    assert sorted(s["Id"] for s in resp["Successful"]) == [str(i) for i in range(9)]
    assert len(resp["Failed"]) == 1, resp["Failed"]
    failed = resp["Failed"][0]
    assert (failed["Id"], failed["Code"], failed["SenderFault"]) == ("9", "InvalidMessageContents", True)
    assert counts(sqs, queue_url)[0] == 9


@pytest.mark.parametrize("action", ["send_message_batch", "delete_message_batch", "change_message_visibility_batch"])
class TestBatchRequestErrors:
    """Batch-level errors are the same for the three batch actions."""

    @staticmethod
    def entries(action, ids):
        if action == "send_message_batch":
            return [{"Id": i, "MessageBody": "x"} for i in ids]
        if action == "delete_message_batch":
            return [{"Id": i, "ReceiptHandle": "rh"} for i in ids]
        return [{"Id": i, "ReceiptHandle": "rh", "VisibilityTimeout": 1} for i in ids]

    def test_eleven_entries_is_too_many_entries_in_batch_request(self, sqs, queue_url, action):
        expect_error(
            getattr(sqs, action), BATCH_ERRORS + "TooManyEntriesInBatchRequest",
            QueueUrl=queue_url, Entries=self.entries(action, [f"e{i}" for i in range(11)]),
        )

    def test_duplicate_entry_ids_is_batch_entry_ids_not_distinct(self, sqs, queue_url, action):
        expect_error(
            getattr(sqs, action), BATCH_ERRORS + "BatchEntryIdsNotDistinct",
            QueueUrl=queue_url, Entries=self.entries(action, ["same", "other", "same"]),
        )

    def test_empty_batch_is_empty_batch_request(self, sqs, queue_url, action):
        expect_error(getattr(sqs, action), BATCH_ERRORS + "EmptyBatchRequest", QueueUrl=queue_url, Entries=[])

    @pytest.mark.parametrize("bad_id", ["invalid:id", "a" * 81, "space id"])
    def test_invalid_entry_id_is_invalid_batch_entry_id(self, sqs, queue_url, action, bad_id):
        expect_error(
            getattr(sqs, action), BATCH_ERRORS + "InvalidBatchEntryId",
            QueueUrl=queue_url, Entries=self.entries(action, [bad_id]),
        )


def test_send_batch_of_exactly_10_and_80_char_ids_is_accepted(sqs, queue_url):
    ids = [f"{i}".rjust(80, "x") for i in range(10)]
    resp = sqs.send_message_batch(QueueUrl=queue_url, Entries=[{"Id": i, "MessageBody": "x"} for i in ids])
    assert sorted(s["Id"] for s in resp["Successful"]) == sorted(ids)


def test_batch_over_1_mib_in_total_is_batch_request_too_long(sqs, queue_url):
    entries = [{"Id": f"e{i}", "MessageBody": "x" * 300_000} for i in range(4)]
    expect_error(sqs.send_message_batch, BATCH_ERRORS + "BatchRequestTooLong", QueueUrl=queue_url, Entries=entries)
    assert counts(sqs, queue_url) == (0, 0, 0), "part of a rejected batch was stored"


def test_delete_message_batch_deletes_and_reports_bad_handles(sqs, queue_url):
    for i in range(3):
        sqs.send_message(QueueUrl=queue_url, MessageBody=f"d{i}")
    msgs = receive(sqs, queue_url, MaxNumberOfMessages=10, VisibilityTimeout=60)
    assert len(msgs) == 3
    entries = [{"Id": f"m{i}", "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(msgs)]
    entries.append({"Id": "forged", "ReceiptHandle": "garbage"})
    resp = sqs.delete_message_batch(QueueUrl=queue_url, Entries=entries)
    assert sorted(s["Id"] for s in resp["Successful"]) == ["m0", "m1", "m2"]
    assert [(f["Id"], f["Code"], f["SenderFault"]) for f in resp["Failed"]] == [
        ("forged", "ReceiptHandleIsInvalid", True)
    ]
    assert counts(sqs, queue_url) == (0, 0, 0)


def test_change_message_visibility_batch_changes_each_entry(sqs, queue_url):
    for i in range(3):
        sqs.send_message(QueueUrl=queue_url, MessageBody=f"c{i}")
    # Received with 1 s: after that only the batch's own values can keep a message hidden.
    msgs = receive(sqs, queue_url, MaxNumberOfMessages=10, VisibilityTimeout=1)
    assert len(msgs) == 3
    entries = [{"Id": "now", "ReceiptHandle": msgs[0]["ReceiptHandle"], "VisibilityTimeout": 0},
               {"Id": "later", "ReceiptHandle": msgs[1]["ReceiptHandle"], "VisibilityTimeout": 120},
               {"Id": "also", "ReceiptHandle": msgs[2]["ReceiptHandle"], "VisibilityTimeout": 60},
               {"Id": "forged", "ReceiptHandle": "garbage", "VisibilityTimeout": 0}]
    resp = sqs.change_message_visibility_batch(QueueUrl=queue_url, Entries=entries)
    assert sorted(s["Id"] for s in resp["Successful"]) == ["also", "later", "now"]
    assert [(f["Id"], f["Code"], f["SenderFault"]) for f in resp["Failed"]] == [
        ("forged", "ReceiptHandleIsInvalid", True)
    ]
    again = receive(sqs, queue_url, MaxNumberOfMessages=10, VisibilityTimeout=60)
    assert [m["MessageId"] for m in again] == [msgs[0]["MessageId"]], "VisibilityTimeout 0 did not show it at once"
    assert receive(sqs, queue_url, MaxNumberOfMessages=10, WaitTimeSeconds=2) == [], (
        "a message the batch hid for 60 or 120 s came back after the receive's 1 s"
    )
    assert counts(sqs, queue_url) == (0, 3, 0)


def test_body_of_exactly_1_mib_is_accepted(sqs, queue_url):
    body = "x" * MIB
    resp = sqs.send_message(QueueUrl=queue_url, MessageBody=body)
    assert resp["MD5OfMessageBody"] == md5_hex(body)
    m = receive_one(sqs, queue_url)
    assert len(m["Body"]) == MIB and m["MD5OfBody"] == md5_hex(body)


def test_body_of_1_mib_plus_1_is_rejected(sqs, queue_url):
    expect_error(
        sqs.send_message, "InvalidParameterValue", message="Message must be shorter than 1048576 bytes.",
        QueueUrl=queue_url, MessageBody="x" * (MIB + 1),
    )
    assert counts(sqs, queue_url) == (0, 0, 0)


def test_body_and_attributes_together_count_toward_the_size_limit(sqs, queue_url):
    attrs = {"k": {"DataType": "String", "StringValue": "x"}}
    size = len("k") + len("String") + len("x")
    expect_error(
        sqs.send_message, "InvalidParameterValue", message="Message must be shorter than 1048576 bytes.",
        QueueUrl=queue_url, MessageBody="a" * (MIB - size + 1), MessageAttributes=attrs,
    )
    # One byte less is exactly the limit, and fits.
    sqs.send_message(QueueUrl=queue_url, MessageBody="a" * (MIB - size), MessageAttributes=attrs)
    assert counts(sqs, queue_url) == (1, 0, 0)


def test_maximum_message_size_attribute_lowers_the_limit(sqs, new_queue):
    url = new_queue("small", MaximumMessageSize=1024)
    sqs.send_message(QueueUrl=url, MessageBody="y" * 1024)
    expect_error(sqs.send_message, "InvalidParameterValue", QueueUrl=url, MessageBody="y" * 1025)


@pytest.mark.parametrize("bad", ["nul\x00", "bell\x07", "ctl\x1f", "nonchar\uffff", "fffe\ufffe"])
def test_invalid_characters_in_body_is_invalid_message_contents(sqs, queue_url, bad):
    expect_error(sqs.send_message, "InvalidMessageContents", QueueUrl=queue_url, MessageBody=bad)
    assert counts(sqs, queue_url) == (0, 0, 0)


def test_send_message_batch_reports_oversized_entry_per_entry(sqs, new_queue):
    url = new_queue("small", MaximumMessageSize=1024)
    resp = sqs.send_message_batch(
        QueueUrl=url, Entries=[{"Id": "big", "MessageBody": "z" * 1025}, {"Id": "fits", "MessageBody": "z" * 10}]
    )
    assert [s["Id"] for s in resp["Successful"]] == ["fits"]
    assert [(f["Id"], f["Code"], f["SenderFault"]) for f in resp["Failed"]] == [("big", "InvalidParameterValue", True)]
    assert "Message must be shorter than 1024 bytes" in resp["Failed"][0]["Message"], resp["Failed"][0]


def test_empty_body_is_missing_parameter(sqs, queue_url):
    expect_error(sqs.send_message, "MissingParameter", QueueUrl=queue_url, MessageBody="")


@pytest.mark.parametrize("n", [0, 11])
def test_max_number_of_messages_outside_1_to_10_is_invalid_parameter_value(sqs, queue_url, n):
    expect_error(
        sqs.receive_message, "InvalidParameterValue", message="Must be between 1 and 10, if provided.",
        QueueUrl=queue_url, MaxNumberOfMessages=n,
    )


def test_wait_time_seconds_21_is_invalid_parameter_value(sqs, queue_url):
    expect_error(sqs.receive_message, "InvalidParameterValue", QueueUrl=queue_url, WaitTimeSeconds=21)


def test_receive_returns_at_most_max_number_of_messages(sqs, queue_url):
    sent = {sqs.send_message(QueueUrl=queue_url, MessageBody=f"n{i}")["MessageId"] for i in range(15)}
    assert len(receive(sqs, queue_url, VisibilityTimeout=60)) == 1, "default MaxNumberOfMessages is 1"
    first = receive(sqs, queue_url, MaxNumberOfMessages=10, VisibilityTimeout=60)
    second = receive(sqs, queue_url, MaxNumberOfMessages=10, VisibilityTimeout=60)
    assert (len(first), len(second)) == (10, 4)
    ids = [m["MessageId"] for m in first + second]
    assert len(set(ids)) == 14 and set(ids) <= sent


def test_per_message_delay_hides_message_until_due(sqs, queue_url):
    sqs.send_message(QueueUrl=queue_url, MessageBody="delayed", DelaySeconds=2)
    t_sent = time.monotonic()
    assert receive(sqs, queue_url) == []
    assert counts(sqs, queue_url) == (0, 0, 1)
    m = receive_one(sqs, queue_url, WaitTimeSeconds=5)
    waited = time.monotonic() - t_sent
    assert m["Body"] == "delayed"
    assert 1.5 <= waited <= 3.5, f"a 2 s delay ended after {waited:.2f}s (long poll must wake when it ends)"


def test_queue_delay_applies_to_messages_without_their_own(sqs, new_queue):
    url = new_queue("q", DelaySeconds=60)
    sqs.send_message(QueueUrl=url, MessageBody="queue default")
    sqs.send_message(QueueUrl=url, MessageBody="explicit zero", DelaySeconds=0)
    assert counts(sqs, url) == (1, 0, 1)
    assert receive_one(sqs, url, MaxNumberOfMessages=10)["Body"] == "explicit zero"


def test_delay_seconds_over_900_is_invalid_parameter_value(sqs, queue_url):
    expect_error(sqs.send_message, "InvalidParameterValue", QueueUrl=queue_url, MessageBody="x", DelaySeconds=901)
    sqs.send_message(QueueUrl=queue_url, MessageBody="x", DelaySeconds=900)
