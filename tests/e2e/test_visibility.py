"""Visibility-timeout rules through boto3: a new receipt handle per receive; standard-queue deletes with older
handles and twice; forged handles; ChangeMessageVisibility counting from the call, 0 = visible now, not
remembered for the next receive, the 12 h cap from the receive (an error, never clamped), older handles after a
re-receive (honoured on standard queues, as AWS does: docs/semantics.md §SQS), a lapsed-but-not-re-received
handle; redelivery after the timeout with growing ApproximateReceiveCount; long polling woken by a send, a
visibility expiry or a nack; and the in-flight OverLimit (server started with --inflight-max 5).

The module's server runs on the test clock (docs/testing.md "Test clock"): a test moves time past a
visibility timeout with `advance_clock` instead of sleeping, and checks both sides of each deadline on the
server's own clock. Each timeout is long (tens of seconds) so that the wall time a slow machine takes between two
calls cannot carry the clock across a deadline the test means to stay before. One test keeps a real 1 s timeout,
to show that the wall clock moves the server's time too; long polls that an event must end wait 20 s."""

import threading
import time

import pytest

from helpers import (TEST_CLOCK_ARGS, VeilServer, advance_clock, counts, expect_error, make_client, receive,
                     receive_one, wait_for_long_polls)

INVALID_HANDLE = 'The input receipt handle "garbage" is not a valid receipt handle.'
# A visibility timeout, and how far short of it a test advances to see the message still hidden: the rest is the
# slack for wall time between calls.
TIMEOUT_S = 60
SHORT_OF_IT_S = 50


@pytest.fixture(scope="module")
def server(veil_path, tmp_path_factory):
    base = tmp_path_factory.mktemp("veil-visibility")
    # SigV4 dates are judged on the server's clock, which these tests move by more than the 15 minutes of skew
    # allowed: boto3 signs with the wall clock, so the signatures are not checked here (test_sqs_auth.py does).
    srv = VeilServer(base / "data", log_dir=base, extra_args=[*TEST_CLOCK_ARGS, "--sqs-auth", "off"]).start()
    yield srv
    assert srv.running(), f"veil died during the tests of this module\n{srv.log_tail()}"
    srv.stop_cleanly()


def hidden_until_its_timeout_then_visible(sqs, server, url, timeout_s=TIMEOUT_S) -> dict:
    """Advances to just short of `timeout_s` (still hidden), then past it: the message comes back."""
    advance_clock(server, timeout_s - (TIMEOUT_S - SHORT_OF_IT_S))
    assert receive(sqs, url) == [], f"visible before its {timeout_s} s visibility timeout ended"
    advance_clock(server, TIMEOUT_S - SHORT_OF_IT_S)
    return receive_one(sqs, url, AttributeNames=["ApproximateReceiveCount"])


def test_every_receive_issues_a_new_receipt_handle(sqs, queue_url):
    sqs.send_message(QueueUrl=queue_url, MessageBody="m")
    handles = [receive_one(sqs, queue_url, VisibilityTimeout=0)["ReceiptHandle"] for _ in range(3)]
    assert len(set(handles)) == 3, f"receipt handles repeat across receives: {handles}"


def test_delete_with_an_older_receipt_handle_deletes_the_message(sqs, queue_url):
    sqs.send_message(QueueUrl=queue_url, MessageBody="m")
    old = receive_one(sqs, queue_url, VisibilityTimeout=0)["ReceiptHandle"]
    current = receive_one(sqs, queue_url, VisibilityTimeout=60)["ReceiptHandle"]
    assert old != current
    sqs.delete_message(QueueUrl=queue_url, ReceiptHandle=old)
    assert counts(sqs, queue_url) == (0, 0, 0), "delete with the older handle did not delete the message"
    sqs.delete_message(QueueUrl=queue_url, ReceiptHandle=current)


def test_delete_after_the_visibility_timeout_lapsed_deletes_the_message(sqs, server, queue_url):
    sqs.send_message(QueueUrl=queue_url, MessageBody="m")
    h = receive_one(sqs, queue_url, VisibilityTimeout=TIMEOUT_S)["ReceiptHandle"]
    advance_clock(server, TIMEOUT_S + 1)
    assert counts(sqs, queue_url) == (1, 0, 0), "the visibility timeout did not lapse"
    sqs.delete_message(QueueUrl=queue_url, ReceiptHandle=h)
    assert receive(sqs, queue_url) == []
    assert counts(sqs, queue_url) == (0, 0, 0)


def test_deleting_a_message_twice_succeeds(sqs, queue_url):
    sqs.send_message(QueueUrl=queue_url, MessageBody="m")
    h = receive_one(sqs, queue_url)["ReceiptHandle"]
    first = sqs.delete_message(QueueUrl=queue_url, ReceiptHandle=h)
    second = sqs.delete_message(QueueUrl=queue_url, ReceiptHandle=h)
    assert first["ResponseMetadata"]["HTTPStatusCode"] == second["ResponseMetadata"]["HTTPStatusCode"] == 200
    assert counts(sqs, queue_url) == (0, 0, 0), "the first delete did not delete the message"


def test_garbage_receipt_handle_is_receipt_handle_is_invalid(sqs, queue_url):
    expect_error(sqs.delete_message, "ReceiptHandleIsInvalid", message=INVALID_HANDLE,
                 QueueUrl=queue_url, ReceiptHandle="garbage")
    expect_error(sqs.change_message_visibility, "ReceiptHandleIsInvalid",
                 QueueUrl=queue_url, ReceiptHandle="garbage", VisibilityTimeout=5)


def test_tampered_receipt_handle_is_receipt_handle_is_invalid(sqs, queue_url):
    sqs.send_message(QueueUrl=queue_url, MessageBody="m")
    h = receive_one(sqs, queue_url, VisibilityTimeout=60)["ReceiptHandle"]
    i = len(h) // 2
    forged = h[:i] + ("A" if h[i] != "A" else "B") + h[i + 1:]
    expect_error(sqs.delete_message, "ReceiptHandleIsInvalid", QueueUrl=queue_url, ReceiptHandle=forged)
    expect_error(sqs.change_message_visibility, "ReceiptHandleIsInvalid",
                 QueueUrl=queue_url, ReceiptHandle=forged, VisibilityTimeout=0)
    assert counts(sqs, queue_url) == (0, 1, 0), "a forged handle changed the message"


def test_receipt_handle_of_another_queue_is_receipt_handle_is_invalid(sqs, new_queue):
    a, b = new_queue("a"), new_queue("b")
    sqs.send_message(QueueUrl=a, MessageBody="m")
    h = receive_one(sqs, a, VisibilityTimeout=60)["ReceiptHandle"]
    # AWS's text for a handle of another queue (docs/semantics.md §SQS), not the malformed-handle one.
    expected = f'The receipt handle "{h}" is not valid for this queue.'
    expect_error(sqs.delete_message, "ReceiptHandleIsInvalid", message=expected, QueueUrl=b, ReceiptHandle=h)
    expect_error(sqs.change_message_visibility, "ReceiptHandleIsInvalid", message=expected, QueueUrl=b,
                 ReceiptHandle=h, VisibilityTimeout=0)
    assert counts(sqs, a) == (0, 1, 0), "a receipt used on another queue changed the message"


def test_hidden_message_is_redelivered_after_its_visibility_timeout(sqs, server, queue_url):
    sent = sqs.send_message(QueueUrl=queue_url, MessageBody="m")["MessageId"]
    first = receive_one(sqs, queue_url, VisibilityTimeout=TIMEOUT_S, AttributeNames=["ApproximateReceiveCount"])
    assert receive(sqs, queue_url) == [], "a hidden message was delivered to a second consumer"
    again = hidden_until_its_timeout_then_visible(sqs, server, queue_url)
    assert again["MessageId"] == sent and first["MessageId"] == sent
    assert again["ReceiptHandle"] != first["ReceiptHandle"]
    assert (first["Attributes"]["ApproximateReceiveCount"], again["Attributes"]["ApproximateReceiveCount"]) == ("1", "2")


def test_a_visibility_timeout_lapses_in_real_time_too(sqs, queue_url):
    # The one real-time timeout of this module: the wall clock, not only an advance, moves the server's time.
    sqs.send_message(QueueUrl=queue_url, MessageBody="m")
    before_the_receive = time.monotonic()
    receive_one(sqs, queue_url, VisibilityTimeout=1)
    again = receive_one(sqs, queue_url, WaitTimeSeconds=5, AttributeNames=["ApproximateReceiveCount"])
    # Only a lower bound: the server hid it for 1 s from a receive that began after `before_the_receive`.
    waited = time.monotonic() - before_the_receive
    assert again["Attributes"]["ApproximateReceiveCount"] == "2"
    assert waited >= 0.99, f"a 1 s visibility timeout ended after {waited:.2f}s"


def test_queue_visibility_timeout_is_the_default_for_receives(sqs, server, new_queue):
    url = new_queue("q", VisibilityTimeout=TIMEOUT_S)
    sqs.send_message(QueueUrl=url, MessageBody="m")
    receive_one(sqs, url)
    assert receive(sqs, url) == []
    hidden_until_its_timeout_then_visible(sqs, server, url)


def test_approximate_receive_count_grows_and_first_receive_timestamp_is_set_once(sqs, server, queue_url):
    sqs.send_message(QueueUrl=queue_url, MessageBody="m")
    seen = []
    for _ in range(3):
        m = receive_one(sqs, queue_url, VisibilityTimeout=0, MessageSystemAttributeNames=["All"])
        seen.append(m["Attributes"])
        advance_clock(server, 1)  # so that a timestamp set again would differ
    assert [a["ApproximateReceiveCount"] for a in seen] == ["1", "2", "3"]
    assert len({a["ApproximateFirstReceiveTimestamp"] for a in seen}) == 1, seen
    assert len({a["SentTimestamp"] for a in seen}) == 1, seen


def test_change_visibility_counts_from_the_call(sqs, server, queue_url):
    sqs.send_message(QueueUrl=queue_url, MessageBody="m")
    h = receive_one(sqs, queue_url, VisibilityTimeout=TIMEOUT_S)["ReceiptHandle"]
    advance_clock(server, 40)
    sqs.change_message_visibility(QueueUrl=queue_url, ReceiptHandle=h, VisibilityTimeout=TIMEOUT_S)
    # Receive + 70 s: past receive + 60 s (where counting from the receive would end it), before call + 60 s.
    advance_clock(server, 30)
    assert counts(sqs, queue_url) == (0, 1, 0), "ChangeMessageVisibility counted from the receive, not from the call"
    advance_clock(server, 35)
    receive_one(sqs, queue_url)


def test_change_visibility_zero_makes_the_message_visible_now(sqs, queue_url):
    sqs.send_message(QueueUrl=queue_url, MessageBody="m")
    h = receive_one(sqs, queue_url, VisibilityTimeout=60)["ReceiptHandle"]
    sqs.change_message_visibility(QueueUrl=queue_url, ReceiptHandle=h, VisibilityTimeout=0)
    m = receive_one(sqs, queue_url, AttributeNames=["ApproximateReceiveCount"])
    assert m["Attributes"]["ApproximateReceiveCount"] == "2"


def test_change_visibility_extends_the_deadline(sqs, server, queue_url):
    sqs.send_message(QueueUrl=queue_url, MessageBody="m")
    h = receive_one(sqs, queue_url, VisibilityTimeout=10)["ReceiptHandle"]
    sqs.change_message_visibility(QueueUrl=queue_url, ReceiptHandle=h, VisibilityTimeout=TIMEOUT_S)
    advance_clock(server, 20)
    assert receive(sqs, queue_url) == [], "extended message became visible after its first 10 s"
    assert counts(sqs, queue_url) == (0, 1, 0)
    hidden_until_its_timeout_then_visible(sqs, server, queue_url, TIMEOUT_S - 20)


def test_change_visibility_is_not_remembered_for_the_next_receive(sqs, server, new_queue):
    url = new_queue("q", VisibilityTimeout=TIMEOUT_S)
    sqs.send_message(QueueUrl=url, MessageBody="m")
    h = receive_one(sqs, url)["ReceiptHandle"]
    sqs.change_message_visibility(QueueUrl=url, ReceiptHandle=h, VisibilityTimeout=0)
    receive_one(sqs, url)  # uses the queue's timeout again, not the 0 just set
    assert receive(sqs, url) == [], "the ChangeMessageVisibility value (0) was reused by the next receive"
    hidden_until_its_timeout_then_visible(sqs, server, url)


def test_change_visibility_past_12_hours_from_the_receive_is_rejected_not_clamped(sqs, server, queue_url):
    sqs.send_message(QueueUrl=queue_url, MessageBody="m")
    h = receive_one(sqs, queue_url, VisibilityTimeout=TIMEOUT_S)["ReceiptHandle"]
    advance_clock(server, 10)
    # 43,200 s from now passes receive + 12 h: an error, and the deadline stays receive + 60 s.
    expect_error(sqs.change_message_visibility, "InvalidParameterValue",
                 QueueUrl=queue_url, ReceiptHandle=h, VisibilityTimeout=43200)
    hidden_until_its_timeout_then_visible(sqs, server, queue_url, TIMEOUT_S - 10)


def test_change_visibility_within_12_hours_of_the_receive_is_accepted_and_applied(sqs, server, queue_url):
    sqs.send_message(QueueUrl=queue_url, MessageBody="m")
    h = receive_one(sqs, queue_url, VisibilityTimeout=10)["ReceiptHandle"]
    sqs.change_message_visibility(QueueUrl=queue_url, ReceiptHandle=h, VisibilityTimeout=43000)
    # Past the receive's own 10 s: only the accepted 43,000 s keeps the message hidden now.
    advance_clock(server, 20)
    assert receive(sqs, queue_url) == [], "the accepted change was not applied"
    assert counts(sqs, queue_url) == (0, 1, 0)
    advance_clock(server, 43000)
    receive_one(sqs, queue_url)


@pytest.mark.parametrize("seconds", [43201, -1])
def test_visibility_timeout_outside_0_to_43200_is_invalid_parameter_value(sqs, queue_url, seconds):
    sqs.send_message(QueueUrl=queue_url, MessageBody="m")
    expect_error(sqs.receive_message, "InvalidParameterValue", QueueUrl=queue_url, VisibilityTimeout=seconds)
    h = receive_one(sqs, queue_url, VisibilityTimeout=30)["ReceiptHandle"]
    expect_error(sqs.change_message_visibility, "InvalidParameterValue",
                 QueueUrl=queue_url, ReceiptHandle=h, VisibilityTimeout=seconds)


def test_change_visibility_with_an_older_handle_after_a_re_receive_changes_the_message(sqs, queue_url):
    # Standard queues honour any handle issued for the message (docs/semantics.md §SQS, as AWS's service does).
    sqs.send_message(QueueUrl=queue_url, MessageBody="m")
    old = receive_one(sqs, queue_url, VisibilityTimeout=0)["ReceiptHandle"]
    current = receive_one(sqs, queue_url, VisibilityTimeout=60)["ReceiptHandle"]
    assert old != current
    assert counts(sqs, queue_url) == (0, 1, 0)
    sqs.change_message_visibility(QueueUrl=queue_url, ReceiptHandle=old, VisibilityTimeout=0)
    m = receive_one(sqs, queue_url, VisibilityTimeout=60, AttributeNames=["ApproximateReceiveCount"])
    assert m["Attributes"]["ApproximateReceiveCount"] == "3", "the older handle did not end the 60 s delivery"


def test_change_visibility_after_the_timeout_lapsed_without_re_receive_succeeds(sqs, server, queue_url):
    sqs.send_message(QueueUrl=queue_url, MessageBody="m")
    h = receive_one(sqs, queue_url, VisibilityTimeout=TIMEOUT_S)["ReceiptHandle"]
    advance_clock(server, TIMEOUT_S + 1)
    assert counts(sqs, queue_url) == (1, 0, 0), "the visibility timeout did not lapse"
    sqs.change_message_visibility(QueueUrl=queue_url, ReceiptHandle=h, VisibilityTimeout=60)
    assert receive(sqs, queue_url) == [], "the change after the lapse did not hide the message again"
    assert counts(sqs, queue_url) == (0, 1, 0)


def test_change_visibility_on_a_deleted_message_is_invalid_parameter_value(sqs, queue_url):
    sqs.send_message(QueueUrl=queue_url, MessageBody="m")
    h = receive_one(sqs, queue_url)["ReceiptHandle"]
    sqs.change_message_visibility(QueueUrl=queue_url, ReceiptHandle=h, VisibilityTimeout=42)
    sqs.delete_message(QueueUrl=queue_url, ReceiptHandle=h)
    expect_error(sqs.change_message_visibility, "InvalidParameterValue",
                 message="Message does not exist or is not available for visibility timeout change",
                 QueueUrl=queue_url, ReceiptHandle=h, VisibilityTimeout=42)


def _receive_in_thread(client, url, wait):
    box = {}

    def run():
        box["messages"] = receive(client, url, WaitTimeSeconds=wait)
        box["done"] = time.monotonic()

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t, box


# The long polls below wait up to 20 s and the event that should end them comes once the poll is parked (the
# admin endpoint's veil_queue_long_polls_waiting says so): one that returns the message well before its 20 s were
# up was woken by that event, not by the end of its wait. (How many milliseconds the wake takes is not asserted:
# on a shared machine that measures the scheduler.)
LONG_POLL_S = 20
WELL_BEFORE_THE_WAIT_ENDS = 10


def test_long_poll_is_woken_by_a_send(sqs, server, endpoint, queue_url):
    poller = make_client(endpoint)
    thread, box = _receive_in_thread(poller, queue_url, LONG_POLL_S)
    wait_for_long_polls(server, queue_url, 1)
    assert thread.is_alive(), f"long poll of {LONG_POLL_S} s on an empty queue returned early: {box}"
    t_send = time.monotonic()
    sqs.send_message(QueueUrl=queue_url, MessageBody="wake up")
    thread.join(LONG_POLL_S + 5)
    assert not thread.is_alive()
    assert [m["Body"] for m in box["messages"]] == ["wake up"]
    latency = box["done"] - t_send
    assert latency < WELL_BEFORE_THE_WAIT_ENDS, f"long poll returned {latency:.2f}s after the send: not woken by it"


def test_long_poll_is_woken_when_a_visibility_timeout_expires(sqs, server, endpoint, queue_url):
    # A 15 s timeout inside the poll's 20 s: advancing past the first does not reach the second, and a poll
    # the advance did not wake would answer only when 15 s of wall time had passed.
    sqs.send_message(QueueUrl=queue_url, MessageBody="m")
    receive_one(sqs, queue_url, VisibilityTimeout=15)
    thread, box = _receive_in_thread(make_client(endpoint), queue_url, LONG_POLL_S)
    wait_for_long_polls(server, queue_url, 1)
    assert thread.is_alive(), f"long poll returned while the only message was hidden: {box}"
    advance_clock(server, 15)
    thread.join(WELL_BEFORE_THE_WAIT_ENDS)
    assert not thread.is_alive(), "the visibility timeout's end did not wake the poll"
    assert [m["Body"] for m in box["messages"]] == ["m"]


def test_long_poll_is_woken_when_a_message_is_made_visible_again(sqs, server, endpoint, queue_url):
    sqs.send_message(QueueUrl=queue_url, MessageBody="nacked")
    h = receive_one(sqs, queue_url, VisibilityTimeout=60)["ReceiptHandle"]
    thread, box = _receive_in_thread(make_client(endpoint), queue_url, LONG_POLL_S)
    wait_for_long_polls(server, queue_url, 1)
    assert thread.is_alive(), f"long poll returned while the only message was hidden: {box}"
    t_nack = time.monotonic()
    sqs.change_message_visibility(QueueUrl=queue_url, ReceiptHandle=h, VisibilityTimeout=0)
    thread.join(LONG_POLL_S + 5)
    assert not thread.is_alive()
    assert [m["Body"] for m in box["messages"]] == ["nacked"]
    latency = box["done"] - t_nack
    assert latency < WELL_BEFORE_THE_WAIT_ENDS, (
        f"long poll returned {latency:.2f}s after ChangeMessageVisibility(0): not woken by it"
    )


def test_long_poll_on_an_empty_queue_waits_the_full_time(sqs, server, endpoint, queue_url):
    thread, box = _receive_in_thread(make_client(endpoint), queue_url, LONG_POLL_S)
    wait_for_long_polls(server, queue_url, 1)
    advance_clock(server, LONG_POLL_S - 5)
    thread.join(0.5)  # a poll the advance ended early would be answered within this
    assert thread.is_alive(), f"a {LONG_POLL_S} s long poll ended 5 s early: {box}"
    advance_clock(server, 5)
    thread.join(WELL_BEFORE_THE_WAIT_ENDS)  # its 20 s of wall time are not up for a while yet
    assert not thread.is_alive(), "the long poll outlived its wait time on the server's clock"
    assert box["messages"] == []


def test_queue_receive_wait_time_is_the_default_wait(sqs, new_queue):
    # In real time (the module's other real-time check): a lower bound only, the wait began after `t`.
    url = new_queue("q", ReceiveMessageWaitTimeSeconds=1)
    t = time.monotonic()
    assert receive(sqs, url) == []
    assert time.monotonic() - t >= 0.99, "ReceiveMessageWaitTimeSeconds=1 was not applied"


def test_an_explicit_wait_time_of_zero_overrides_the_queue_wait(sqs, new_queue):
    url = new_queue("q", ReceiveMessageWaitTimeSeconds=LONG_POLL_S)
    t = time.monotonic()
    assert receive(sqs, url, WaitTimeSeconds=0) == []
    waited = time.monotonic() - t
    assert waited < WELL_BEFORE_THE_WAIT_ENDS, (
        f"WaitTimeSeconds=0 waited {waited:.2f}s: the queue's {LONG_POLL_S} s was used"
    )


def test_receive_at_the_in_flight_limit_is_over_limit(make_server, queue_name):
    srv = make_server(extra_args=["--inflight-max", "5"])
    client = make_client(srv.endpoint)
    url = client.create_queue(QueueName=queue_name)["QueueUrl"]
    other = client.create_queue(QueueName=queue_name + "-other")["QueueUrl"]
    for i in range(7):
        client.send_message(QueueUrl=url, MessageBody=f"m{i}")
    client.send_message(QueueUrl=other, MessageBody="elsewhere")
    held = [receive_one(client, url, VisibilityTimeout=60) for _ in range(5)]
    assert counts(client, url) == (2, 5, 0)
    expect_error(client.receive_message, "OverLimit", status=403, QueueUrl=url)
    expect_error(client.receive_message, "OverLimit", status=403, QueueUrl=url, WaitTimeSeconds=1)
    assert counts(client, url) == (2, 5, 0), "the refused receive changed the queue"
    assert receive_one(client, other, VisibilityTimeout=60)["Body"] == "elsewhere", "the limit is per queue"
    client.delete_message(QueueUrl=url, ReceiptHandle=held[0]["ReceiptHandle"])
    m = receive(client, url, MaxNumberOfMessages=10, VisibilityTimeout=60)
    assert len(m) == 1, f"with 4 in flight and a limit of 5 one more may be received, got {len(m)}"
    expect_error(client.receive_message, "OverLimit", status=403, QueueUrl=url)
    srv.stop_cleanly()
