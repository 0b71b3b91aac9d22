"""KubeMQ queues over gRPC with KubeMQ's official Python SDK (`kubemq` 4.x) against the real `veil` binary:
send (upstream stream, unary, batch), receive with wait and max items, ack, nack, re-queue, ack-all, peek,
delay, expiration, dead-letter via MaxReceiveCount, the server-side visibility timeout of downstream
transactions, release on a closed stream, token auth, channel management, and the shared namespace with SQS."""

from __future__ import annotations

import threading
import time

import grpc
import pytest
from kubemq.queues import QueueMessage

from helpers import channel_counts, channel_name, kubemq_client, kubemq_receive


@pytest.fixture
def channel() -> str:
    return channel_name("kmq")


receive = kubemq_receive
counts = channel_counts


def eventually_counts(sqs, name: str, expected: tuple[int, int], within_s: float = 10.0) -> None:
    """The SDKs send acks, nacks and re-queues without waiting for an answer: wait until the channel shows
    `expected`. The server-side visibility (60 s) is far longer, so only the settlement can produce it."""
    deadline = time.monotonic() + within_s
    while (seen := counts(sqs, name)) != expected:
        assert time.monotonic() < deadline, f"{name}: {seen}, expected {expected}"
        time.sleep(0.05)


def test_ping_reports_the_server(kmq):
    info = kmq.ping()
    assert info.host == "veil"


def test_send_over_the_upstream_stream_then_receive_and_ack(kmq, sqs, channel):
    result = kmq.send_queue_message(
        QueueMessage(channel=channel, body=b"hello", metadata="greeting", tags={"kind": "test"})
    )
    assert not result.is_error, result.error
    assert result.id
    response = receive(kmq, channel, wait=2)
    assert len(response.messages) == 1
    message = response.messages[0]
    assert message.body == b"hello"
    assert message.metadata == "greeting"
    assert message.tags.get("kind") == "test"
    assert message.id == result.id
    assert message.receive_count == 1
    assert message.sequence >= 1
    message.ack()
    eventually_counts(sqs, channel, (0, 0))


def test_unary_and_batch_sends_then_receive_max_items(kmq, channel):
    single = kmq.send_queue_message_simple(QueueMessage(channel=channel, body=b"m0"))
    assert not single.is_error, single.error
    batch = kmq.send_queue_messages_batch([QueueMessage(channel=channel, body=f"m{i}".encode()) for i in range(1, 5)])
    assert not batch.have_errors
    assert len(batch.results) == 4
    first = receive(kmq, channel, max_messages=3)
    assert [m.body for m in first.messages] == [b"m0", b"m1", b"m2"]
    first.ack_all()
    rest = receive(kmq, channel, max_messages=10)
    assert [m.body for m in rest.messages] == [b"m3", b"m4"]
    rest.ack_all()


def test_receive_waits_for_a_message_sent_later(kmq, channel):
    def send_later():
        time.sleep(0.7)
        kmq.send_queue_message_simple(QueueMessage(channel=channel, body=b"late"))

    sender = threading.Thread(target=send_later)
    started = time.monotonic()
    sender.start()
    response = receive(kmq, channel, wait=5)
    elapsed = time.monotonic() - started
    sender.join()
    assert [m.body for m in response.messages] == [b"late"]
    assert 0.5 < elapsed < 4, elapsed
    response.ack_all()


def test_an_empty_receive_answers_at_the_end_of_its_wait_less_the_answer_lead(kmq, channel):
    started = time.monotonic()
    response = receive(kmq, channel, wait=1)
    assert response.messages == []
    # 1 s less a quarter of it, the answer lead of a downstream poll (docs/semantics.md §KubeMQ).
    assert time.monotonic() - started >= 0.7


def test_nack_redelivers_with_a_higher_receive_count(kmq, channel):
    kmq.send_queue_message(QueueMessage(channel=channel, body=b"again"))
    first = receive(kmq, channel, wait=2).messages[0]
    assert first.receive_count == 1
    first.nack()
    second = receive(kmq, channel, wait=2).messages
    assert len(second) == 1
    assert second[0].body == b"again"
    assert second[0].receive_count == 2
    second[0].ack()


def test_re_queue_moves_the_message_to_another_channel(kmq, sqs, channel):
    other = channel_name("kmq-requeued")
    kmq.send_queue_message(QueueMessage(channel=channel, body=b"move me", tags={"t": "1"}))
    message = receive(kmq, channel, wait=2).messages[0]
    message.re_queue(other)
    moved = receive(kmq, other, wait=2).messages
    assert [m.body for m in moved] == [b"move me"]
    assert moved[0].tags.get("t") == "1"
    moved[0].ack()
    assert counts(sqs, channel) == (0, 0), "gone from the source, not hidden there"


def test_ack_all_queue_messages_empties_the_channel(kmq, channel):
    kmq.send_queue_messages_batch([QueueMessage(channel=channel, body=b"x") for _ in range(3)])
    assert kmq.ack_all_queue_messages(channel=channel, wait_time_seconds=1) == 3
    assert kmq.peek_queue_messages(channel, 10, 1).messages == []


def test_peek_changes_nothing(kmq, channel):
    kmq.send_queue_messages_batch([QueueMessage(channel=channel, body=f"p{i}".encode()) for i in range(2)])
    peeked = kmq.peek_queue_messages(channel, 10, 1)
    assert not peeked.is_error, peeked.error
    assert [m.body for m in peeked.messages] == [b"p0", b"p1"]
    again = kmq.peek_queue_messages(channel, 10, 1)
    assert len(again.messages) == 2
    received = receive(kmq, channel, max_messages=10)
    assert [m.receive_count for m in received.messages] == [1, 1]
    received.ack_all()


def test_pull_consumes_at_once(kmq, sqs, channel):
    kmq.send_queue_messages_batch([QueueMessage(channel=channel, body=f"q{i}".encode()) for i in range(3)])
    pulled = kmq.pull(channel, 2, 1)
    assert not pulled.is_error, pulled.error
    assert [m.body for m in pulled.messages] == [b"q0", b"q1"]
    assert pulled.messages_received == 2
    # Settled by the pull itself: nothing is left in flight, the third is what is left.
    assert counts(sqs, channel) == (1, 0)
    assert [m.body for m in kmq.peek_queue_messages(channel, 10, 1).messages] == [b"q2"]


def test_a_delayed_message_is_not_delivered_before_its_delay(kmq, channel):
    started = time.monotonic()
    result = kmq.send_queue_message(QueueMessage(channel=channel, body=b"later", delay_in_seconds=2))
    assert not result.is_error, result.error
    response = receive(kmq, channel, wait=10)
    assert [m.body for m in response.messages] == [b"later"]
    assert time.monotonic() - started >= 1.9, "delivered before its delay"
    response.ack_all()


def test_an_expired_message_is_never_delivered(kmq, channel):
    result = kmq.send_queue_message(QueueMessage(channel=channel, body=b"short", expiration_in_seconds=1))
    assert not result.is_error, result.error
    assert result.expired_at is not None
    kmq.send_queue_message(QueueMessage(channel=channel, body=b"long"))
    time.sleep(2)
    response = receive(kmq, channel, max_messages=10, wait=1)
    assert [m.body for m in response.messages] == [b"long"]
    response.ack_all()


def test_max_receive_count_moves_the_message_to_its_dead_letter_channel(kmq, channel):
    dead = channel_name("kmq-dead")
    kmq.send_queue_message(
        QueueMessage(channel=channel, body=b"poison", max_receive_count=2, max_receive_queue=dead)
    )
    for expected in (1, 2):
        message = receive(kmq, channel, wait=2).messages[0]
        assert message.receive_count == expected
        message.nack()
    # The third delivery would exceed MaxReceiveCount = 2: the message moves instead.
    assert receive(kmq, channel, wait=0).messages == []
    moved = receive(kmq, dead, wait=2).messages
    assert [m.body for m in moved] == [b"poison"]
    assert moved[0].is_re_routed
    assert moved[0].re_route_from_queue == channel
    moved[0].ack()


def test_an_invalid_send_is_an_in_band_error(kmq, channel):
    result = kmq.send_queue_message_simple(QueueMessage(channel=channel, body=b"x", expiration_in_seconds=50_000))
    assert result.is_error
    assert "expiration" in result.error


def test_channels_are_created_listed_and_deleted_through_the_cluster_requests_channel(kmq, sqs):
    name = channel_name("kmq-managed")
    assert kmq.create_queues_channel(name)
    assert any(url.endswith("/" + name) for url in sqs.list_queues(QueueNamePrefix=name).get("QueueUrls", []))
    listed = kmq.list_queues_channels(name)
    assert [c.name for c in listed] == [name]
    assert listed[0].type == "queues"
    assert kmq.delete_queues_channel(name)
    assert sqs.list_queues(QueueNamePrefix=name).get("QueueUrls", []) == []


def test_a_message_sent_with_boto3_is_polled_with_kubemq_and_the_reverse(kmq, sqs, channel):
    url = sqs.create_queue(QueueName=channel)["QueueUrl"]
    sqs.send_message(QueueUrl=url, MessageBody="from sqs",
                     MessageAttributes={"origin": {"DataType": "String", "StringValue": "boto3"}})
    polled = receive(kmq, channel, wait=2).messages
    assert [m.body for m in polled] == [b"from sqs"]
    assert polled[0].tags.get("origin") == "boto3"
    polled[0].ack()

    kmq.send_queue_message(QueueMessage(channel=channel, body=b"from kubemq", tags={"origin": "kubemq"}))
    got = sqs.receive_message(QueueUrl=url, WaitTimeSeconds=2, MessageAttributeNames=["All"]).get("Messages", [])
    assert [m["Body"] for m in got] == ["from kubemq"]
    assert got[0]["MessageAttributes"]["origin"]["StringValue"] == "kubemq"
    sqs.delete_message(QueueUrl=url, ReceiptHandle=got[0]["ReceiptHandle"])


# ----- servers of their own: a short server-side visibility timeout, token auth -----


@pytest.fixture(scope="module")
def short_visibility_server(make_server, tmp_path_factory):
    config = tmp_path_factory.mktemp("kubemq-config") / "veil.toml"
    config.write_text("[kubemq]\ndefault_visibility_seconds = 1\nauth_tokens = [\"secret-token\"]\n")
    return make_server(extra_args=["--config", str(config)])


@pytest.fixture(scope="module")
def make_server(veil_path, tmp_path_factory):
    # Module-scoped twin of conftest's make_server, so one server serves the tests below.
    from helpers import VeilServer

    started = []

    def make(extra_args=()):
        base = tmp_path_factory.mktemp("kubemq-server")
        server = VeilServer(base / "data", extra_args=extra_args, log_dir=base).start()
        started.append(server)
        return server

    yield make
    for server in started:
        if server.running():
            assert server.stop() == 0, server.log_tail()


def test_a_consumer_that_never_acks_loses_the_message_to_the_next_poll(short_visibility_server):
    channel = channel_name("kmq-hung")
    hung = kubemq_client(short_visibility_server, client_id="hung", auth_token="secret-token")
    other = kubemq_client(short_visibility_server, client_id="other", auth_token="secret-token")
    try:
        hung.send_queue_message(QueueMessage(channel=channel, body=b"work"))
        taken = receive(hung, channel, wait=2).messages
        assert len(taken) == 1
        # The hung consumer keeps its stream open and never acks: hidden for now ...
        assert receive(other, channel, wait=0).messages == []
        # ... and visible again after the server-side timeout (1 s here; nothing else releases it).
        again = receive(other, channel, wait=10).messages
        assert [m.body for m in again] == [b"work"]
        assert again[0].receive_count == 2
        again[0].ack()
    finally:
        hung.close()
        other.close()


def test_closing_the_client_releases_its_unacked_messages_at_once(server):
    # The module's server keeps the default 60 s server-side visibility: only the close can release it
    # within the second receive's wait.
    channel = channel_name("kmq-closed")
    first = kubemq_client(server, client_id="first")
    first.send_queue_message(QueueMessage(channel=channel, body=b"released"))
    assert len(receive(first, channel, wait=2).messages) == 1
    first.close()
    second = kubemq_client(server, client_id="second")
    try:
        got = receive(second, channel, wait=10).messages
        assert [m.body for m in got] == [b"released"]
        assert got[0].receive_count == 2
        got[0].ack()
    finally:
        second.close()


def test_a_wrong_token_is_refused(short_visibility_server):
    client = kubemq_client(short_visibility_server, client_id="intruder", auth_token="wrong")
    try:
        # The SDK passes the unary send's gRPC error through as it came.
        with pytest.raises(grpc.RpcError) as raised:
            client.send_queue_message_simple(QueueMessage(channel=channel_name("kmq-auth"), body=b"x"))
        assert raised.value.code() == grpc.StatusCode.UNAUTHENTICATED
        assert raised.value.details() == "Error 421: authentication verification failed, invalid token"
    finally:
        client.close()


def test_a_message_policy_moves_it_after_a_kill_9_and_restart(make_server):
    """The per-message MaxReceiveCount / MaxReceiveQueue is the engine's own durable state: a message received
    once before a crash moves to its dead-letter channel on the first receive after the restart, once."""
    server = make_server()
    channel, dead = channel_name("kmq-crash"), channel_name("kmq-crash-dead")
    client = kubemq_client(server, client_id="before-crash")
    try:
        result = client.send_queue_message(
            QueueMessage(channel=channel, body=b"poison", max_receive_count=1, max_receive_queue=dead)
        )
        assert not result.is_error, result.error
        client.send_queue_message(QueueMessage(channel=channel, body=b"healthy"))
        first = receive(client, channel, wait=2).messages[0]
        assert (first.body, first.receive_count) == (b"poison", 1)
        first.nack()
        time.sleep(0.3)  # the SDK sends the nack without waiting for a reply
    finally:
        client.close()
    server.kill()
    server.start()
    client = kubemq_client(server, client_id="after-crash")
    try:
        left = receive(client, channel, max_messages=10, wait=1).messages
        assert [m.body for m in left] == [b"healthy"], "the poison message moved instead of a second delivery"
        for m in left:
            m.ack()
        moved = receive(client, dead, max_messages=10, wait=2).messages
        assert [m.body for m in moved] == [b"poison"]
        assert moved[0].is_re_routed and moved[0].re_route_from_queue == channel
        assert moved[0].receive_count == 1, "a fresh message in the dead-letter channel"
        moved[0].ack()
    finally:
        client.close()


# QueuesInfo is not in the Python SDK 4.x; it is part of KubeMQ's proto (the Java SDK calls it). The test
# builds the four messages from their field numbers and calls the RPC over grpcio, as any gRPC client would.
def _queues_info_types():
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    F = descriptor_pb2.FieldDescriptorProto
    spec = {
        "QueuesInfoRequest": [("RequestID", 1, F.TYPE_STRING, None), ("QueueName", 2, F.TYPE_STRING, None)],
        "QueueInfo": [("Name", 1, F.TYPE_STRING, None)]
        + [(name, n, F.TYPE_INT64, None) for n, name in enumerate(
            ["Messages", "Bytes", "FirstSequence", "LastSequence", "Sent", "Delivered", "Waiting", "Subscribers"],
            start=2)],
        "QueuesInfo": [("TotalQueue", 1, F.TYPE_INT32, None), ("Sent", 2, F.TYPE_INT64, None),
                       ("Delivered", 3, F.TYPE_INT64, None), ("Waiting", 4, F.TYPE_INT64, None),
                       ("Queues", 5, F.TYPE_MESSAGE, ".veil_e2e.QueueInfo")],
        "QueuesInfoResponse": [("RefRequestID", 1, F.TYPE_STRING, None),
                               ("Info", 2, F.TYPE_MESSAGE, ".veil_e2e.QueuesInfo")],
    }
    # A package of its own, so that nothing clashes with the SDK's registered `kubemq` types; the wire only
    # carries field numbers, and the method path names KubeMQ's service.
    file = descriptor_pb2.FileDescriptorProto(name="veil_e2e_queues_info.proto", package="veil_e2e", syntax="proto3")
    for message, fields in spec.items():
        proto = file.message_type.add(name=message)
        for name, number, kind, type_name in fields:
            field = proto.field.add(name=name, number=number, type=kind,
                                    label=F.LABEL_REPEATED if name == "Queues" else F.LABEL_OPTIONAL)
            if type_name:
                field.type_name = type_name
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file)
    return {name: message_factory.GetMessageClass(pool.FindMessageTypeByName(f"veil_e2e.{name}"))
            for name in ("QueuesInfoRequest", "QueuesInfoResponse")}


def test_queues_info_reports_each_channel_and_the_totals(kmq, server, channel):
    kmq.send_queue_messages_batch([QueueMessage(channel=channel, body=b"x" * size) for size in (10, 20, 30)])
    held = receive(kmq, channel, wait=2).messages
    assert len(held) == 1
    types = _queues_info_types()
    with grpc.insecure_channel(server.kubemq_address) as rpc:
        call = rpc.unary_unary(
            "/kubemq.kubemq/QueuesInfo",
            request_serializer=types["QueuesInfoRequest"].SerializeToString,
            response_deserializer=types["QueuesInfoResponse"].FromString,
        )
        response = call(types["QueuesInfoRequest"](RequestID="info-1", QueueName=channel), timeout=5)
    assert response.RefRequestID == "info-1"
    assert response.Info.TotalQueue == 1
    [info] = response.Info.Queues
    assert info.Name == channel
    assert (info.Messages, info.Bytes) == (3, 60), "the held message is still stored"
    assert (info.FirstSequence, info.LastSequence) == (1, 3)
    assert (info.Sent, info.Delivered, info.Waiting) == (3, 1, 2)
    assert (response.Info.Sent, response.Info.Delivered, response.Info.Waiting) == (3, 1, 2)
    held[0].ack()
