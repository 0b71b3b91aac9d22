"""KubeMQ channel names and tags are bounded (docs/semantics.md §KubeMQ), with KubeMQ's official Python SDK
(`kubemq` 4.x, which checks neither length nor characters) and raw gRPC where the SDK sends no such request,
against the real `veil` binary.

A channel name is KubeMQ's rule: at most 256 bytes of ASCII letters, digits, `.`, `_`, `-` and `/` (its SDKs),
not starting with `.` (its documentation), not ending with `.` and without spaces or wildcards (its server),
refused with KubeMQ's queue-name error wherever a name enters — send, dead-letter channel, re-queue target,
receive, peek, pull, ack-all, create and delete — and never becoming a queue. A message carries at most 10 tags
(SQS's count of message attributes, which is how an SQS consumer of the same queue sees them).
"""

from __future__ import annotations

import queue
import uuid

import grpc
import pytest
import requests
from kubemq.grpc import kubemq_pb2, kubemq_pb2_grpc
from kubemq.queues import QueueMessage

from helpers import channel_name, kubemq_receive

NAME_REFUSED = (
    "Error 120: invalid queue name value, cannot be empty, contains wildcards ,white spaces and end with dot"
)
# Names KubeMQ's rules refuse though its Python SDK sends them: too long, a path that climbs, a right-to-left
# override, non-ASCII, a leading dot.
MIB = 1024 * 1024


def bad_names() -> list[str]:
    tag = uuid.uuid4().hex[:8]
    return [
        f"long-{tag}-" + "a" * 251,  # 257 bytes
        f"../etc-{tag}",
        f"orders-{tag}\u202etxt",
        f"caf\u00e9-{tag}",
        f".hidden-{tag}",
    ]


@pytest.fixture
def channel() -> str:
    return channel_name("kmqn")


@pytest.fixture
def rpc(server):
    with grpc.insecure_channel(server.kubemq_address) as channel:
        yield kubemq_pb2_grpc.kubemqStub(channel)


def queue_names(sqs) -> set[str]:
    urls = sqs.list_queues(MaxResults=1000).get("QueueUrls", [])
    return {url.rsplit("/", 1)[1] for url in urls}


def admin_queue_names(server) -> list[str]:
    body = requests.get(f"{server.admin_endpoint}/api/v1/queues", timeout=10).json()
    return [q["name"] for q in body["queues"]]


def test_a_channel_name_of_kubemq_length_and_characters_is_a_channel(kmq, channel):
    for name in [channel + "-" + "a" * (256 - len(channel) - 1), f"{channel}.eu/v2_x"]:
        assert len(name.encode()) <= 256
        result = kmq.send_queue_message(QueueMessage(channel=name, body=b"ok"))
        assert not result.is_error, result.error
        [message] = kubemq_receive(kmq, name, wait=2).messages
        message.ack()


def test_a_three_mib_channel_name_is_refused_and_becomes_no_queue_metric_or_log(kmq, server):
    huge = "huge-" + uuid.uuid4().hex + "a" * (3 * MIB)
    before = len(requests.get(f"{server.admin_endpoint}/metrics", timeout=10).content)
    for _ in range(6):
        result = kmq.send_queue_message(QueueMessage(channel=huge, body=b"x"))
        assert result.is_error
        assert result.error == NAME_REFUSED
        unary = kmq.send_queue_message_simple(QueueMessage(channel=huge, body=b"x"))
        assert unary.is_error
        assert unary.error == NAME_REFUSED
    after = len(requests.get(f"{server.admin_endpoint}/metrics", timeout=10).content)
    assert after < before + 64 * 1024, f"/metrics grew from {before} to {after} bytes"
    assert not [name for name in admin_queue_names(server) if name.startswith("huge-")]
    assert server.log_path.stat().st_size < MIB, "no log line carries the name"


def test_channel_names_outside_kubemq_rules_are_refused_on_send(kmq, sqs):
    for name in bad_names():
        result = kmq.send_queue_message(QueueMessage(channel=name, body=b"x"))
        assert result.is_error, name
        assert result.error == NAME_REFUSED, name
    names = queue_names(sqs)
    assert not [n for n in bad_names() if n in names]


def test_every_place_a_channel_name_enters_refuses_a_bad_one(kmq, server, rpc, channel):
    for name in bad_names():
        # Downstream Get (the SDK's receive), peek and pull.
        polled = kmq.receive_queue_messages(channel=name, max_messages=1, wait_timeout_in_seconds=1)
        assert polled.is_error and polled.error == NAME_REFUSED, (name, polled.error)
        peeked = kmq.peek_queue_messages(name, 1, 1)
        assert peeked.is_error and peeked.error == NAME_REFUSED, (name, peeked.error)
        pulled = kmq.pull(name, 1, 1)
        assert pulled.is_error and pulled.error == NAME_REFUSED, (name, pulled.error)
        # Ack-all (purge) answers in-band.
        purged = rpc.AckAllQueueMessages(
            kubemq_pb2.AckAllQueueMessagesRequest(RequestID="p", ClientID="names", Channel=name), timeout=10
        )
        assert purged.IsError and purged.Error == NAME_REFUSED, (name, purged.Error)
        # Channel management.
        with pytest.raises(Exception) as created:
            kmq.create_queues_channel(name)
        assert NAME_REFUSED in str(created.value), name
        with pytest.raises(Exception) as deleted:
            kmq.delete_queues_channel(name)
        assert NAME_REFUSED in str(deleted.value), name
        # A dead-letter channel.
        dead = kmq.send_queue_message(
            QueueMessage(channel=channel, body=b"x", max_receive_count=1, max_receive_queue=name)
        )
        assert dead.is_error and dead.error == NAME_REFUSED, (name, dead.error)
        # The legacy stream's receive.
        legacy = rpc.StreamQueueMessage(
            iter([kubemq_pb2.StreamQueueMessagesRequest(
                RequestID="l", ClientID="names", StreamRequestTypeData=kubemq_pb2.ReceiveMessage,
                Channel=name, VisibilitySeconds=1, WaitTimeSeconds=1,
            )]),
            timeout=10,
        )
        [answer] = list(legacy)
        assert answer.IsError and answer.Error == NAME_REFUSED, (name, answer.Error)
    assert not [n for n in admin_queue_names(server) if n in bad_names()]


def test_a_re_queue_to_a_bad_channel_name_is_refused_and_the_message_stays_held(kmq, rpc, sqs, channel):
    kmq.send_queue_message(QueueMessage(channel=channel, body=b"stay"))
    requests_: queue.Queue = queue.Queue()
    responses = rpc.QueuesDownstream(iter(requests_.get, None))
    T = kubemq_pb2.QueuesDownstreamRequestType
    requests_.put(kubemq_pb2.QueuesDownstreamRequest(
        RequestID="g", ClientID="names", RequestTypeData=T.Get, Channel=channel, MaxItems=1, WaitTimeout=1000,
    ))
    got = next(responses)
    assert len(got.Messages) == 1, got
    target = "x" * 300
    requests_.put(kubemq_pb2.QueuesDownstreamRequest(
        RequestID="r", ClientID="names", RequestTypeData=T.ReQueueAll, RefTransactionId=got.TransactionId,
        ReQueueChannel=target,
    ))
    # A status request behind it: the re-queue, answered only when it fails, must answer first.
    requests_.put(kubemq_pb2.QueuesDownstreamRequest(
        RequestID="s", ClientID="names", RequestTypeData=T.TransactionStatus, RefTransactionId=got.TransactionId,
    ))
    refused = next(responses)
    assert refused.RefRequestId == "r", refused
    assert refused.IsError, refused
    assert refused.Error == "Error 400: invalid requeue channel name"
    assert target not in queue_names(sqs)
    assert next(responses).ActiveOffsets == list(got.ActiveOffsets), "still held"
    requests_.put(kubemq_pb2.QueuesDownstreamRequest(
        RequestID="a", ClientID="names", RequestTypeData=T.AckAll, RefTransactionId=got.TransactionId,
    ))
    requests_.put(None)
    list(responses)


def test_a_message_carries_at_most_ten_tags_and_sqs_consumers_see_them_as_attributes(kmq, sqs, channel):
    many = {f"t{i}": "v" for i in range(5_000)}
    refused = kmq.send_queue_message(QueueMessage(channel=channel, body=b"x", tags=many))
    assert refused.is_error
    assert refused.error == "Error 400: invalid tags, a message may carry at most 10 tags"
    too_long = kmq.send_queue_message(QueueMessage(channel=channel, body=b"x", tags={"k": "v" * 4097}))
    assert too_long.error == "Error 400: invalid tag value, must be at most 4096 bytes"
    ten = {f"tag-{i}": f"value-{i}" for i in range(10)}
    sent = kmq.send_queue_message(QueueMessage(channel=channel, body=b"tagged", tags=ten))
    assert not sent.is_error, sent.error
    url = sqs.get_queue_url(QueueName=channel)["QueueUrl"]
    [message] = sqs.receive_message(QueueUrl=url, MessageAttributeNames=["All"], WaitTimeSeconds=2)["Messages"]
    shown = {name: value["StringValue"] for name, value in message["MessageAttributes"].items()}
    # Each tag is a String attribute of its name; KubeMQ's own fields (here the SDK's MessageID) travel
    # beside them under the reserved `kubemq.` prefix.
    assert {name: value for name, value in shown.items() if not name.startswith("kubemq.")} == ten
    assert set(shown) - set(ten) <= {"kubemq.message_id", "kubemq.metadata"}
    sqs.delete_message(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"])
