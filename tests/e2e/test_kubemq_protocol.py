"""KubeMQ protocol details that the SDKs rely on, with KubeMQ's official Python SDK (`kubemq` 4.x) against the
real `veil` binary: the server version Ping reports (the SDK checks it against its tested range), when a pull
answers (KubeMQ collects until MaxNumberOfMessages or the wait's end), the re-routed marks of a re-queued
message, and dead-lettering at the moment a message is released (nack, visibility lapse).

Counts come from SQS GetQueueAttributes on the same queue (KubeMQ channels live in Veil's default
namespace), so a test never infers "deleted" from a receive that would find the message hidden anyway.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
import uuid
import warnings

import grpc
import pytest
from kubemq.grpc import kubemq_pb2, kubemq_pb2_grpc
from kubemq.queues import Client, QueueMessage

from helpers import channel_counts, channel_name, kubemq_client, kubemq_receive

# The SDK's own record of the server versions it was tested against; what Ping reports must lie inside it.
from kubemq._internal.compat import MAX_TESTED_SERVER_VERSION, MIN_TESTED_SERVER_VERSION, parse_version_tuple

# Long enough that a pull answering at its wait's end cannot be mistaken for one answering early, and that
# a message the rule under test should deliver has time to arrive on a loaded machine.
WAIT_S = 5


@pytest.fixture
def channel() -> str:
    return channel_name("kmqp")


def receive(client: Client, channel: str, max_messages: int = 1, wait: int = WAIT_S):
    return kubemq_receive(client, channel, max_messages, wait)


counts = channel_counts


# ----- Ping: the version the SDK checks -----


def test_the_sdk_connects_without_a_server_version_warning(server, caplog):
    caplog.set_level(logging.DEBUG)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        client = kubemq_client(server, client_id="version-check")
        try:
            info = client.ping()
        finally:
            client.close()
    # The SDK's check logs "KubeMQ server version '…' is older than the tested minimum …" (or newer than the
    # maximum, or could not be parsed / verified) on the logger "KubeMQ".
    about_version = [r.getMessage() for r in caplog.records if "server version" in r.getMessage().lower()]
    assert about_version == [], about_version
    assert [str(w.message) for w in caught if "server version" in str(w.message).lower()] == []
    parsed = parse_version_tuple(info.version)
    assert parse_version_tuple(MIN_TESTED_SERVER_VERSION) <= parsed <= parse_version_tuple(MAX_TESTED_SERVER_VERSION)
    kubemq_version, _, veil_version = info.version.partition("+veil.")
    assert kubemq_version == "2.4.0", info.version
    assert veil_version, "Veil's own version travels as build metadata"
    assert info.host == "veil"


# ----- when a pull answers -----


def test_a_receive_collects_until_max_items_rather_than_answering_at_the_first(kmq, channel):
    kmq.send_queue_message(QueueMessage(channel=channel, body=b"first"))

    def send_later():
        time.sleep(1.0)
        kmq.send_queue_message(QueueMessage(channel=channel, body=b"second"))

    sender = threading.Thread(target=send_later)
    sender.start()
    try:
        started = time.monotonic()
        response = receive(kmq, channel, max_messages=2, wait=WAIT_S)
        elapsed = time.monotonic() - started
    finally:
        sender.join()
    assert [m.body for m in response.messages] == [b"first", b"second"]
    assert elapsed < WAIT_S - 1, "answered when the second made max items, not at the wait's end"
    response.ack_all()


def test_a_receive_short_of_max_items_answers_at_the_end_of_its_wait_less_the_answer_lead(kmq, channel):
    kmq.send_queue_message(QueueMessage(channel=channel, body=b"alone"))
    started = time.monotonic()
    response = receive(kmq, channel, max_messages=5, wait=2)
    elapsed = time.monotonic() - started
    assert [m.body for m in response.messages] == [b"alone"]
    # 2 s less the 250 ms lead (docs/semantics.md §KubeMQ).
    assert elapsed >= 1.7, f"answered after {elapsed:.2f} s, before its 2 s wait less 250 ms was over"
    response.ack_all()


# How late a Get reaches Veil in the test below: more than the SDK's 0.5 s of slack, less than that slack and
# Veil's 250 ms answer lead together.
LATE_GET_S = 0.6


def test_a_get_that_reaches_veil_late_is_answered_before_the_sdk_gives_up_and_its_ack_settles(
        server, sqs, channel):
    """The README's snippet on a loaded client: the SDK queues a Get, starts its clock (WaitTimeout + 0.5 s)
    and its sending thread puts the Get on the wire late. Veil counted the wait from its own receipt of the Get
    and answered at its end, after the SDK had given up ("Error: Timeout waiting for response"): the message
    stayed in a transaction nobody could settle, was released when the client closed, and came back. Veil now
    answers a Get short of its items 250 ms before its wait ends, so it is answered in time and the ack that
    follows settles it. The delay is made here by holding the Get back in the SDK's own send queue."""
    client = kubemq_client(server, client_id="late-get")
    try:
        assert not client.send_queue_message(QueueMessage(channel=channel, body=b"late")).is_error
        receiver = client._get_downstream_receiver()
        put = receiver.queue.put_nowait

        def late(request):
            if request.RequestTypeData == kubemq_pb2.QueuesDownstreamRequestType.Get:
                threading.Timer(LATE_GET_S, put, (request,)).start()
            else:
                put(request)

        receiver.queue.put_nowait = late
        response = client.receive_queue_messages(channel=channel, max_messages=10, wait_timeout_in_seconds=2)
        assert not response.is_error, response.error
        assert [m.body for m in response.messages] == [b"late"]
        response.messages[0].ack()
        deadline = time.monotonic() + 10
        while counts(sqs, channel) != (0, 0):
            assert time.monotonic() < deadline, f"not acked: {counts(sqs, channel)}"
            time.sleep(0.05)
    finally:
        client.close()
    assert counts(sqs, channel) == (0, 0), "nothing comes back once the client is gone"


def test_a_receive_with_no_wait_answers_at_once_with_what_is_there(kmq, channel):
    """KubeMQ would wait at least 1 s; the SDK gives up 0.5 s after a Get with no wait, so Veil answers at
    once rather than strand what it collects in a transaction the SDK has dropped."""
    kmq.send_queue_message(QueueMessage(channel=channel, body=b"here"))
    started = time.monotonic()
    response = receive(kmq, channel, max_messages=10, wait=0)
    assert [m.body for m in response.messages] == [b"here"]
    assert time.monotonic() - started < 0.5
    response.ack_all()


def test_a_pull_collects_until_max_then_settles_what_it_returns(kmq, sqs, channel):
    kmq.send_queue_message_simple(QueueMessage(channel=channel, body=b"p0"))

    def send_later():
        time.sleep(1.0)
        kmq.send_queue_messages_batch([QueueMessage(channel=channel, body=f"p{i}".encode()) for i in (1, 2)])

    sender = threading.Thread(target=send_later)
    sender.start()
    try:
        pulled = kmq.pull(channel, 2, WAIT_S)
    finally:
        sender.join()
    assert not pulled.is_error, pulled.error
    assert [m.body for m in pulled.messages] == [b"p0", b"p1"]
    # Settled by the pull: one stored message left, visible, none in flight.
    assert counts(sqs, channel) == (1, 0)


def test_re_queued_messages_are_all_found_by_a_pull_that_waits_for_them(kmq, channel):
    """The kubemq Rust crate's stream re-queue example, in Python: three re-queues sent without waiting,
    then one pull of up to 10 with a wait finds all three on the target channel."""
    target = channel_name("kmqp-target")
    kmq.send_queue_messages_batch([QueueMessage(channel=channel, body=f"r{i}".encode()) for i in range(3)])
    polled = receive(kmq, channel, max_messages=3, wait=WAIT_S)
    assert len(polled.messages) == 3
    for message in polled.messages:
        message.re_queue(target)
    pulled = kmq.pull(target, 10, 3)
    assert not pulled.is_error, pulled.error
    assert sorted(m.body for m in pulled.messages) == [b"r0", b"r1", b"r2"]


# ----- re-queued messages are marked -----

def test_a_re_queued_message_arrives_marked_with_its_source_channel(kmq, channel):
    target = channel_name("kmqp-requeued")
    kmq.send_queue_message(QueueMessage(channel=channel, body=b"move me"))
    receive(kmq, channel).messages[0].re_queue(target)
    moved = receive(kmq, target).messages
    assert [m.body for m in moved] == [b"move me"]
    assert moved[0].is_re_routed
    assert moved[0].re_route_from_queue == channel
    moved[0].ack()


class LegacyStream:
    """KubeMQ's legacy StreamQueueMessage RPC, which the Python SDK 4.x ships in its generated gRPC module
    but does not wrap."""

    def __init__(self, address: str):
        self._rpc = grpc.insecure_channel(address)
        self._requests: queue.Queue = queue.Queue()
        stub = kubemq_pb2_grpc.kubemqStub(self._rpc)
        self._responses = stub.StreamQueueMessage(iter(self._requests.get, None))

    def call(self, kind, **fields):
        request = kubemq_pb2.StreamQueueMessagesRequest(
            RequestID=uuid.uuid4().hex, ClientID="legacy", StreamRequestTypeData=kind, **fields
        )
        self._requests.put(request)
        response = next(self._responses)
        assert not response.IsError, response.Error
        return response

    def close(self):
        self._requests.put(None)
        self._rpc.close()


@pytest.fixture
def legacy(server):
    stream = LegacyStream(server.kubemq_address)
    yield stream
    stream.close()


def receive_on_legacy(legacy: LegacyStream, channel: str):
    return legacy.call(kubemq_pb2.ReceiveMessage, Channel=channel, VisibilitySeconds=30, WaitTimeSeconds=WAIT_S)


def test_a_legacy_resend_arrives_marked_with_its_source_channel(kmq, legacy, channel):
    target = channel_name("kmqp-resent")
    kmq.send_queue_message(QueueMessage(channel=channel, body=b"resend me"))
    assert receive_on_legacy(legacy, channel).Message.Body == b"resend me"
    legacy.call(kubemq_pb2.ResendMessage, Channel=target)
    moved = receive(kmq, target).messages
    assert [m.body for m in moved] == [b"resend me"]
    assert (moved[0].is_re_routed, moved[0].re_route_from_queue) == (True, channel)
    moved[0].ack()


def test_a_legacy_send_modified_arrives_marked_with_its_source_channel(kmq, sqs, legacy, channel):
    target = channel_name("kmqp-modified")
    kmq.send_queue_message(QueueMessage(channel=channel, body=b"original"))
    assert receive_on_legacy(legacy, channel).Message.Body == b"original"
    modified = kubemq_pb2.QueueMessage(ClientID="legacy", Channel=target, Body=b"modified")
    legacy.call(kubemq_pb2.SendModifiedMessage, ModifiedMessage=modified)
    moved = receive(kmq, target).messages
    assert [m.body for m in moved] == [b"modified"]
    assert (moved[0].is_re_routed, moved[0].re_route_from_queue) == (True, channel)
    assert moved[0].tags == {}, "the mark is an attribute, not a tag"
    moved[0].ack()
    assert counts(sqs, channel) == (0, 0), "the original was settled"


# ----- dead-lettering when a message is released -----

def test_the_nack_that_uses_up_max_receive_count_moves_the_message_at_once(kmq, sqs, channel):
    dead = channel_name("kmqp-dead")
    kmq.send_queue_message(QueueMessage(channel=channel, body=b"poison", max_receive_count=3, max_receive_queue=dead))
    for expected in (1, 2, 3):
        message = receive(kmq, channel).messages[0]
        assert message.receive_count == expected
        message.nack()
    # No further receive on the source: the third nack itself moved it.
    moved = receive(kmq, dead).messages
    assert [m.body for m in moved] == [b"poison"]
    assert (moved[0].is_re_routed, moved[0].re_route_from_queue) == (True, channel)
    assert moved[0].receive_count == 1
    moved[0].ack()
    assert counts(sqs, channel) == (0, 0)


@pytest.fixture(scope="module")
def short_visibility_server(veil_path, tmp_path_factory):
    from helpers import VeilServer

    base = tmp_path_factory.mktemp("kubemq-protocol-short-visibility")
    config = base / "veil.toml"
    config.write_text("[kubemq]\ndefault_visibility_seconds = 1\n")
    server = VeilServer(base / "data", extra_args=["--config", str(config)], log_dir=base).start()
    yield server
    assert server.stop() == 0, server.log_tail()


def test_a_visibility_lapse_that_uses_up_max_receive_count_moves_the_message_without_another_receive(
    short_visibility_server,
):
    channel, dead = channel_name("kmqp-lapse"), channel_name("kmqp-lapse-dead")
    hung = kubemq_client(short_visibility_server, client_id="hung")
    watcher = kubemq_client(short_visibility_server, client_id="dead-letter-watcher")
    try:
        hung.send_queue_message(QueueMessage(channel=channel, body=b"stuck", max_receive_count=1, max_receive_queue=dead))
        taken = receive(hung, channel).messages
        assert [m.receive_count for m in taken] == [1]
        # The hung consumer keeps its stream open and never settles; its 1 s visibility lapses, and the
        # dead-letter channel's consumer gets the message with nobody receiving from the source again.
        moved = receive(watcher, dead, wait=WAIT_S).messages
        assert [m.body for m in moved] == [b"stuck"]
        assert (moved[0].is_re_routed, moved[0].re_route_from_queue) == (True, channel)
        moved[0].ack()
    finally:
        hung.close()
        watcher.close()
