"""Scale-out end to end: several real `veil` nodes over one real PostgreSQL 15 (tests/e2e/pg_support.py starts
it), driven with the real SDKs (boto3, azure-storage-queue, the kubemq SDK).

The queues fall into 4 partitions (pg_support.CLUSTER_PARTITIONS; VEIL_PARTITIONS overrides), each owned by
one node at a time (its row of `<schema>.veil_partition`), which runs that partition's queues; every node
decodes its own clients' requests and sends each engine call to the owner of its queue's partition over the
internal RPC. The tests check that a client sees one node's semantics whichever node it talks to: every message
sent through one node is delivered to consumers on the others, once inside its visibility window and never
lost; a receipt issued by one node deletes through another; a long poll on a node that does not own the queue
wakes when another node sends; FIFO order and deduplication hold across nodes; the owner records the client's
own address, not the node it entered; a dead-letter queue in another partition gets its dead letters once, and
a move task takes them back across. Then the failures and changes: kill -9 of a queue's owner mid-load
(another node takes its partitions after the lease lapses, nothing acknowledged is lost, in-flight messages
come back, and another partition's clients see no error), a node joining under load (it takes its share; a
client that retries once sees no error), an owner paused past its lease (it answers nothing from memory), a
node in a network namespace of its own whose link to PostgreSQL goes down (its partitions move, it stops
answering for them),
PostgreSQL stopped mid-load (every node answers its protocol's "service unavailable" at once, and resumes by
itself when the database is back), a primary failover to a synchronous streaming standby, and a schema
migrated by a newer binary (refused at start-up). Last, shards: two nodes whose partitions live on two
PostgreSQL instances, each holding its own partitions' leases and queues; a dead letter crossing between them
arrives once and a move task takes it back; the second database stopped fails only its own queues.

Visibility timeouts are 2 s and the lease 1 s, so the whole file runs in about a minute.
"""

from __future__ import annotations

import json
import signal
import subprocess
import threading
import time
import uuid
from collections import Counter, defaultdict
from itertools import pairwise

import grpc
import pytest
import requests
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
from azure.core.exceptions import HttpResponseError
from azure.storage.queue import QueueClient
from botocore.exceptions import ClientError, ConnectionClosedError, EndpointConnectionError
from kubemq.grpc import kubemq_pb2, kubemq_pb2_grpc
from kubemq.queues import QueueMessage

from helpers import (
    DEFAULT_REGION,
    channel_counts,
    channel_name,
    counts,
    kubemq_client,
    make_client,
    wait_for_long_polls,
)
from pg_support import (LEASE_TTL_MS, Cluster, CuttableLink, NetworkNamespace, PgServer, both_hosts,
                        partition_of)

# Every consumer's visibility timeout (seconds): a message received and not deleted is back this long after.
VISIBILITY_S = 2
# Client-side slack on a visibility window measured from the client: the server starts the window before the
# response reaches the client, so two deliveries may look this much closer than they were.
CLOCK_SLACK_S = 0.25
# A long poll's wait, and how much sooner than that an event must end it to have been what ended it (seconds).
LONG_POLL_S = 20
WELL_BEFORE_THE_WAIT_ENDS_S = 10
# How quickly a node must answer while PostgreSQL is down (the issue: "quickly, no hang").
UNAVAILABLE_WITHIN_S = 5.0
# How long nodes may take to serve again after a leader's kill -9, PostgreSQL's return or a promotion: the
# lease TTL (1 s), a reconnect (retry interval 0.5 s) and the new leader's reload, with room for a slow CI host.
RECOVERY_WITHIN_S = 15.0
# A node refusing the database's schema exits at start-up, well inside this (seconds).
REFUSAL_WITHIN_S = 20


# ---- fixtures --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def pg():
    server = PgServer("pg").init().start()
    yield server
    server.destroy()


@pytest.fixture(scope="module")
def cluster(veil_path, pg, tmp_path_factory):
    """Three nodes over one schema of the module's PostgreSQL, for the tests that do not break anything."""
    c = Cluster(pg, tmp_path_factory.mktemp("cluster")).start()
    yield c
    for node in c.nodes:
        assert node.running(), f"{node.node_id} died during the tests of this module\n{node.log_tail()}"
    for node in c.nodes:
        node.stop_cleanly()


@pytest.fixture
def make_cluster(veil_path, tmp_path):
    """make_cluster(pg, size=3, store=None) -> a started Cluster on a fresh schema, killed after the test."""
    made: list[Cluster] = []

    def make(pg: PgServer, size: int = 3, store: str | None = None) -> Cluster:
        c = Cluster(pg, tmp_path / f"cluster-{len(made)}", size=size, store=store)
        made.append(c)
        return c.start()

    yield make
    for c in made:
        c.kill_all()


@pytest.fixture
def own_pg():
    """A PostgreSQL of the test's own, for the tests that stop or kill it."""
    server = PgServer("pg-own").init().start()
    yield server
    server.destroy()


def sqs_client(node, read_timeout: float = 10):
    return make_client(node.endpoint, read_timeout=read_timeout)


def azure_queue(node, name: str) -> QueueClient:
    """The Azure SDK on `node`, with its retries off so every error is seen."""
    return QueueClient.from_connection_string(
        node.azure_connection_string(), name, retry_total=0, connection_timeout=5, read_timeout=10
    )


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


class Deliveries:
    """Every delivery consumers saw, by body, with the client's monotonic time of the answer."""

    def __init__(self):
        self.lock = threading.Lock()
        self.times: dict[str, list[float]] = defaultdict(list)
        self.errors: list[str] = []

    def saw(self, body: str) -> None:
        with self.lock:
            self.times[body].append(time.monotonic())

    def failed(self, what: str, exc: BaseException) -> None:
        with self.lock:
            self.errors.append(f"{what}: {type(exc).__name__}: {exc}")

    def seen(self) -> set[str]:
        with self.lock:
            return set(self.times)

    def assert_all_of(self, bodies: set[str]) -> None:
        """No consumer failed, and exactly `bodies` were delivered, each at least once."""
        assert not self.errors, self.errors
        missing = bodies - self.seen()
        assert not missing, f"{len(missing)} messages never delivered, e.g. {sorted(missing)[:5]}"
        assert self.seen() == bodies, f"unknown bodies delivered: {self.seen() - bodies}"

    def redelivered_inside_visibility(self, visibility_s: float) -> dict[str, list[float]]:
        """Bodies delivered again before their previous delivery's visibility window closed."""
        with self.lock:
            return {
                body: ts for body, ts in self.times.items()
                if any(b - a < visibility_s - CLOCK_SLACK_S for a, b in pairwise(ts))
            }


def consume_until(deliveries: Deliveries, expected: set[str], done: threading.Event, deadline_s: float = 30):
    """Waits for consumer threads to see `expected`, then sets `done`."""
    deadline = time.monotonic() + deadline_s
    while not expected <= deliveries.seen() and time.monotonic() < deadline and not deliveries.errors:
        time.sleep(0.05)
    done.set()


def assert_kubemq_holds(node, channel: str, bodies: list[bytes]):
    """Receives through KubeMQ on `node` exactly `bodies` from `channel`, and acks them."""
    kmq = kubemq_client(node, client_id="after")
    try:
        response = kmq.receive_queue_messages(channel=channel, max_messages=10, wait_timeout_in_seconds=1)
        assert not response.is_error, response.error
        assert [m.body for m in response.messages] == bodies
        response.ack_all()
    finally:
        kmq.close()


def run_load(producer, consumer, consumer_args: list[tuple], deliveries: Deliveries, expected: set[str],
             done: threading.Event):
    """Runs `producer` and one `consumer` per argument tuple in threads until `expected` was seen."""
    threads = [threading.Thread(target=producer)]
    threads += [threading.Thread(target=consumer, args=args) for args in consumer_args]
    for t in threads:
        t.start()
    consume_until(deliveries, expected, done)
    for t in threads:
        t.join(timeout=20)


# ---- the single-node semantics across nodes ----------------------------------------------------------------


def test_sqs_messages_sent_through_one_node_reach_consumers_on_the_others_once_each(cluster):
    n1, n2, n3 = cluster.nodes
    name = unique("spread")
    url1 = sqs_client(n1).create_queue(QueueName=name)["QueueUrl"]
    bodies = {f"m-{i:04d}" for i in range(300)}
    deliveries = Deliveries()
    done = threading.Event()
    deletes_failed: list = []

    def producer():
        c = sqs_client(n1)
        ordered = sorted(bodies)
        for i in range(0, len(ordered), 10):
            entries = [{"Id": str(k), "MessageBody": b} for k, b in enumerate(ordered[i:i + 10])]
            try:
                result = c.send_message_batch(QueueUrl=url1, Entries=entries)
            except Exception as e:  # noqa: BLE001 - recorded and asserted on
                deliveries.failed("send", e)
                return
            if result.get("Failed"):
                deliveries.failed("send", AssertionError(result["Failed"]))

    def consumer(node, deleter):
        # Receives on one node and deletes through another: the receipt handle is valid cluster-wide.
        c, d = sqs_client(node), sqs_client(deleter)
        url, durl = c.get_queue_url(QueueName=name)["QueueUrl"], d.get_queue_url(QueueName=name)["QueueUrl"]
        while not done.is_set():
            try:
                msgs = c.receive_message(QueueUrl=url, MaxNumberOfMessages=10, VisibilityTimeout=VISIBILITY_S,
                                         WaitTimeSeconds=1).get("Messages", [])
                for m in msgs:
                    deliveries.saw(m["Body"])
                if msgs:
                    result = d.delete_message_batch(QueueUrl=durl, Entries=[
                        {"Id": str(k), "ReceiptHandle": m["ReceiptHandle"]} for k, m in enumerate(msgs)
                    ])
                    deletes_failed.extend(result.get("Failed", []))
            except Exception as e:  # noqa: BLE001 - recorded and asserted on
                deliveries.failed(f"consumer on {node.node_id}", e)
                return

    run_load(producer, consumer, [(n2, n3), (n3, n1)], deliveries, bodies, done)

    assert not deletes_failed, f"deletes with another node's receipt failed: {deletes_failed}"
    deliveries.assert_all_of(bodies)
    early = deliveries.redelivered_inside_visibility(VISIBILITY_S)
    assert not early, f"delivered twice inside the visibility window: {dict(list(early.items())[:5])}"
    for node in cluster.nodes:
        c = sqs_client(node)
        assert counts(c, c.get_queue_url(QueueName=name)["QueueUrl"]) == (0, 0, 0), node.node_id


def test_azure_messages_sent_through_one_node_reach_consumers_on_the_others_once_each(cluster):
    n1, n2, n3 = cluster.nodes
    name = unique("spread").lower()
    azure_queue(n1, name).create_queue()
    bodies = {f"a-{i:04d}" for i in range(150)}
    deliveries = Deliveries()
    done = threading.Event()

    def producer():
        q = azure_queue(n1, name)
        for body in sorted(bodies):
            try:
                q.send_message(body)
            except Exception as e:  # noqa: BLE001 - recorded and asserted on
                deliveries.failed("send", e)
                return

    def consumer(node, deleter):
        # The pop receipt a node hands out deletes through another node.
        q, d = azure_queue(node, name), azure_queue(deleter, name)
        while not done.is_set():
            try:
                msgs = list(q.receive_messages(messages_per_page=32, max_messages=32,
                                               visibility_timeout=VISIBILITY_S))
                for m in msgs:
                    deliveries.saw(m.content)
                for m in msgs:
                    d.delete_message(m.id, m.pop_receipt)
                if not msgs:
                    time.sleep(0.05)
            except Exception as e:  # noqa: BLE001 - recorded and asserted on
                deliveries.failed(f"consumer on {node.node_id}", e)
                return

    run_load(producer, consumer, [(n2, n3), (n3, n1)], deliveries, bodies, done)

    deliveries.assert_all_of(bodies)
    early = deliveries.redelivered_inside_visibility(VISIBILITY_S)
    assert not early, f"delivered twice inside the visibility window: {dict(list(early.items())[:5])}"
    for node in cluster.nodes:
        props = azure_queue(node, name).get_queue_properties()
        assert props.approximate_message_count == 0, node.node_id


def test_kubemq_messages_sent_through_one_node_reach_consumers_on_the_others_once_each(cluster):
    n1, n2, n3 = cluster.nodes
    channel = channel_name("spread")
    bodies = {f"k-{i:04d}" for i in range(150)}
    deliveries = Deliveries()
    done = threading.Event()

    def producer():
        client = kubemq_client(n1, client_id="producer")
        try:
            ordered = sorted(bodies)
            for i in range(0, len(ordered), 10):
                batch = client.send_queue_messages_batch(
                    [QueueMessage(channel=channel, body=b.encode()) for b in ordered[i:i + 10]]
                )
                if batch.have_errors:
                    deliveries.failed("send", AssertionError([r.error for r in batch.results if r.is_error]))
                    return
        except Exception as e:  # noqa: BLE001 - recorded and asserted on
            deliveries.failed("send", e)
        finally:
            client.close()

    def consumer(node):
        # A downstream transaction's messages stay hidden (server-side visibility) until acked on its stream.
        client = kubemq_client(node, client_id=f"consumer-{node.node_id}")
        try:
            while not done.is_set():
                response = client.receive_queue_messages(channel=channel, max_messages=10,
                                                         wait_timeout_in_seconds=1)
                if response.is_error:
                    deliveries.failed(f"receive on {node.node_id}", AssertionError(response.error))
                    return
                for m in response.messages:
                    deliveries.saw(m.body.decode())
                if response.messages:
                    response.ack_all()
        except Exception as e:  # noqa: BLE001 - recorded and asserted on
            deliveries.failed(f"consumer on {node.node_id}", e)
        finally:
            client.close()

    run_load(producer, consumer, [(n2,), (n3,)], deliveries, bodies, done)

    deliveries.assert_all_of(bodies)
    twice = {b: ts for b, ts in deliveries.times.items() if len(ts) > 1}
    assert not twice, f"delivered twice before any visibility lapse: {dict(list(twice.items())[:5])}"
    # The SDK sends acks without waiting for an answer: wait until every node reports the channel settled.
    for node in cluster.nodes:
        c = sqs_client(node)
        deadline = time.monotonic() + 10
        while (seen := channel_counts(c, channel)) != (0, 0):
            assert time.monotonic() < deadline, f"{node.node_id}: channel {channel} still holds {seen}"
            time.sleep(0.05)


def test_a_long_poll_on_a_follower_wakes_when_another_node_sends(cluster):
    # Each poll waits 20 s and the send comes once it is parked (the leader's engine counts it in
    # veil_queue_long_polls_waiting, on every node's /metrics): a poll answered well before its 20 s were up was
    # woken by the send, not by the end of its wait. (How many milliseconds the wake took is not asserted: on a
    # shared machine that measures the scheduler.)
    name = unique("wake")
    sqs_client(cluster.nodes[0]).create_queue(QueueName=name)
    leader = cluster.owner(name)
    follower, other_follower = cluster.others(name)
    listener = sqs_client(follower, read_timeout=LONG_POLL_S + 10)
    url = listener.get_queue_url(QueueName=name)["QueueUrl"]
    for sender in (other_follower, leader):
        body = f"from {sender.node_id}"
        channel = channel_name("wake")

        box = {}

        def poll_sqs():
            box["answer"] = listener.receive_message(QueueUrl=url, WaitTimeSeconds=LONG_POLL_S,
                                                     VisibilityTimeout=VISIBILITY_S)
            box["done"] = time.monotonic()

        t = threading.Thread(target=poll_sqs, daemon=True)
        t.start()
        wait_for_long_polls(follower, url, 1)
        c = sqs_client(sender)
        sent_at = time.monotonic()
        c.send_message(QueueUrl=c.get_queue_url(QueueName=name)["QueueUrl"], MessageBody=body)
        t.join(LONG_POLL_S + 10)
        msgs = box["answer"]
        assert [m["Body"] for m in msgs.get("Messages", [])] == [body]
        woke = box["done"] - sent_at
        assert woke < WELL_BEFORE_THE_WAIT_ENDS_S, (
            f"the long poll on {follower.node_id} answered {woke:.2f}s after the send: not woken by it"
        )
        listener.delete_message(QueueUrl=url, ReceiptHandle=msgs["Messages"][0]["ReceiptHandle"])

        # The same over KubeMQ: a receive waiting on a node that does not own the channel gets the message
        # another node takes in. The channel exists before the poll (a send and its ack make it), so that the
        # poll parks on a queue the gauge reports.
        primer = kubemq_client(sender, client_id="primer")
        primed = primer.send_queue_message_simple(QueueMessage(channel=channel, body=b"primer"))
        assert not primed.is_error, primed.error
        waiter = next(n for n in cluster.others(channel) if n is not sender)
        kmq = kubemq_client(waiter, client_id="waiter")
        try:
            kmq.receive_queue_messages(channel=channel, max_messages=1, wait_timeout_in_seconds=1).ack_all()
            kbox = {}

            def poll_kubemq(channel=channel):
                kbox["response"] = kmq.receive_queue_messages(channel=channel, max_messages=1,
                                                              wait_timeout_in_seconds=LONG_POLL_S)
                kbox["done"] = time.monotonic()

            t = threading.Thread(target=poll_kubemq, daemon=True)
            t.start()
            wait_for_long_polls(waiter, f"/{channel}", 1)
            producer = kubemq_client(sender, client_id="late-producer")
            try:
                sent_at = time.monotonic()
                result = producer.send_queue_message_simple(QueueMessage(channel=channel, body=body.encode()))
                assert not result.is_error, result.error
            finally:
                producer.close()
            t.join(LONG_POLL_S + 10)
            response = kbox["response"]
            assert not response.is_error, response.error
            assert [m.body for m in response.messages] == [body.encode()]
            woke = kbox["done"] - sent_at
            assert woke < WELL_BEFORE_THE_WAIT_ENDS_S, (
                f"the KubeMQ receive on {waiter.node_id} answered {woke:.2f}s after the send: not woken by it"
            )
            response.ack_all()
        finally:
            kmq.close()
            primer.close()


class SourceAddress(requests.adapters.HTTPAdapter):
    """Connections from `ip` (any 127.x address is this machine's loopback), so the server sees a client address
    no node has."""

    def __init__(self, ip: str):
        self.ip = ip
        super().__init__()

    def init_poolmanager(self, *args, **kwargs):
        kwargs["source_address"] = (self.ip, 0)
        super().init_poolmanager(*args, **kwargs)


def sqs_call_from(ip: str, node, action: str, params: dict) -> dict:
    """One SigV4-signed SQS JSON call to `node`, made from the address `ip`."""
    body = json.dumps(params)
    headers = {"X-Amz-Target": f"AmazonSQS.{action}", "Content-Type": "application/x-amz-json-1.0"}
    request = AWSRequest(method="POST", url=f"{node.endpoint}/", data=body, headers=headers)
    SigV4Auth(Credentials("test", "test"), "sqs", DEFAULT_REGION).add_auth(request)
    session = requests.Session()
    session.mount("http://", SourceAddress(ip))
    answer = session.post(f"{node.endpoint}/", data=body, headers=dict(request.headers), timeout=10)
    assert answer.status_code == 200, answer.text
    return answer.json()


def test_the_delivery_history_names_the_clients_own_address_whichever_node_it_entered(cluster):
    """A follower runs the call at the leader for its client: the leader records the client's address, not the
    follower's, and any node's admin API shows it."""
    name = unique("whose")
    sqs_client(cluster.nodes[0]).create_queue(QueueName=name)
    follower, other_follower = cluster.others(name)
    leader_sqs = sqs_client(cluster.owner(name))
    url = leader_sqs.get_queue_url(QueueName=name)["QueueUrl"]
    sent = leader_sqs.send_message(QueueUrl=url, MessageBody="whose receive")["MessageId"]
    got = sqs_call_from("127.0.0.2", follower, "ReceiveMessage",
                        {"QueueUrl": url, "MaxNumberOfMessages": 1, "VisibilityTimeout": 30})
    assert [m["MessageId"] for m in got["Messages"]] == [sent]
    history = requests.get(
        f"{other_follower.admin_endpoint}/api/v1/queues/default/{name}/messages/{sent}/history", timeout=10
    ).json()
    clients = [d["client"] for d in history["deliveries"]]
    assert len(clients) == 1 and clients[0].startswith("127.0.0.2:"), clients


def test_fifo_order_group_hiding_and_deduplication_hold_across_nodes(cluster):
    nodes = cluster.nodes
    name = unique("order") + ".fifo"
    clients = [sqs_client(n) for n in nodes]
    clients[0].create_queue(QueueName=name, Attributes={"FifoQueue": "true"})
    urls = [c.get_queue_url(QueueName=name)["QueueUrl"] for c in clients]

    # Each send acknowledged before the next, through the nodes in turn: the order of each group is defined.
    for i in range(10):
        for group in ("g1", "g2"):
            k = (2 * i + (group == "g2")) % 3
            clients[k].send_message(QueueUrl=urls[k], MessageBody=f"{group}-{i}", MessageGroupId=group,
                                    MessageDeduplicationId=f"{group}-{i}")
    # The same deduplication id through two nodes: one message.
    first = clients[0].send_message(QueueUrl=urls[0], MessageBody="dup", MessageGroupId="g3",
                                    MessageDeduplicationId="same")
    second = clients[1].send_message(QueueUrl=urls[1], MessageBody="dup", MessageGroupId="g3",
                                     MessageDeduplicationId="same")
    assert second["MessageId"] == first["MessageId"], "a deduplicated send answers the first send's id"

    # A group with a message in flight is hidden from every node's consumers.
    head = clients[1].receive_message(QueueUrl=urls[1], MaxNumberOfMessages=1,
                                      VisibilityTimeout=VISIBILITY_S)["Messages"]
    assert [m["Body"] for m in head] == ["g1-0"]
    others = clients[2].receive_message(QueueUrl=urls[2], MaxNumberOfMessages=10,
                                        VisibilityTimeout=VISIBILITY_S)["Messages"]
    assert others and not [m["Body"] for m in others if m["Body"].startswith("g1-")], (
        f"node3 got messages of the group node2 holds: {[m['Body'] for m in others]}"
    )
    order = defaultdict(list)
    for m in head + others:
        order[m["Body"].rsplit("-", 1)[0]].append(m["Body"])
    # Receipts of node2 and node3 deleted through node1.
    clients[0].delete_message(QueueUrl=urls[0], ReceiptHandle=head[0]["ReceiptHandle"])
    for m in others:
        clients[0].delete_message(QueueUrl=urls[0], ReceiptHandle=m["ReceiptHandle"])

    # The rest, received through the nodes in turn, each batch deleted before the next receive.
    turn = 0
    while True:
        k = turn % 3
        turn += 1
        msgs = clients[k].receive_message(QueueUrl=urls[k], MaxNumberOfMessages=3, VisibilityTimeout=VISIBILITY_S,
                                          WaitTimeSeconds=1).get("Messages", [])
        if not msgs:
            break
        for m in msgs:
            order[m["Body"].rsplit("-", 1)[0]].append(m["Body"])
            clients[(k + 1) % 3].delete_message(QueueUrl=urls[(k + 1) % 3], ReceiptHandle=m["ReceiptHandle"])
        assert turn < 40, f"the queue does not drain: {dict(order)}"

    assert order["g1"] == [f"g1-{i}" for i in range(10)]
    assert order["g2"] == [f"g2-{i}" for i in range(10)]
    assert order["dup"] == ["dup"], "a deduplicated send through another node was delivered twice"


# ---- failures ----------------------------------------------------------------------------------------------

def name_in_another_partition(cluster, prefix: str, than: str) -> str:
    """A fresh queue name whose partition is not that of the queue `than`."""
    taken = partition_of(than, cluster.partitions)
    return next(n for n in (unique(prefix) for _ in range(1000)) if partition_of(n, cluster.partitions) != taken)


def wait_messages(client, url: str, within_s: float = 10) -> list[dict]:
    """Receives from `url` until something comes (a move into another partition arrives when its owner
    accepts its inbox, within about 100 ms)."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        got = client.receive_message(QueueUrl=url, MaxNumberOfMessages=10, VisibilityTimeout=30,
                                     AttributeNames=["All"], WaitTimeSeconds=1).get("Messages", [])
        if got:
            return got
    raise AssertionError(f"nothing arrived in {url} within {within_s}s")


def queue_arn(client, url: str) -> str:
    return client.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]


def dead_letters_go_to(client, source_url: str, dlq_arn: str) -> None:
    """Gives the queue at `source_url` a redrive policy: its messages move to `dlq_arn` after one receive."""
    client.set_queue_attributes(QueueUrl=source_url, Attributes={
        "RedrivePolicy": json.dumps({"deadLetterTargetArn": dlq_arn, "maxReceiveCount": "1"})})


def test_dead_letters_and_move_tasks_cross_partitions_once(cluster):
    """A dead-letter queue in another partition than its source (another owner, usually another node): the
    dead letter arrives there once, with its id, body and source; a move task takes it back across; a KubeMQ
    message's own dead-letter channel, made on use, is created in its own partition."""
    a, b, c = cluster.nodes
    source = unique("dl-src")
    dlq = name_in_another_partition(cluster, "dl-dlq", source)
    source_url = sqs_client(a).create_queue(QueueName=source)["QueueUrl"]
    dlq_url = sqs_client(b).create_queue(QueueName=dlq)["QueueUrl"]
    dlq_arn, source_arn = queue_arn(sqs_client(b), dlq_url), queue_arn(sqs_client(a), source_url)
    dead_letters_go_to(sqs_client(c), source_url, dlq_arn)
    assert cluster.partition_of(source) != cluster.partition_of(dlq)
    sent = sqs_client(a).send_message(QueueUrl=source_url, MessageBody="poison")["MessageId"]
    first = sqs_client(b).receive_message(QueueUrl=source_url, VisibilityTimeout=0)["Messages"]
    assert [m["MessageId"] for m in first] == [sent]
    assert "Messages" not in sqs_client(c).receive_message(QueueUrl=source_url, VisibilityTimeout=0), (
        "the receive after maxReceiveCount moves the message instead of delivering it"
    )
    moved = wait_messages(sqs_client(c), dlq_url)
    assert [(m["MessageId"], m["Body"]) for m in moved] == [(sent, "poison")], "arrived once, itself"
    assert moved[0]["Attributes"]["DeadLetterQueueSourceArn"] == source_arn
    assert counts(sqs_client(a), source_url) == (0, 0, 0)
    sqs_client(a).change_message_visibility(QueueUrl=dlq_url, ReceiptHandle=moved[0]["ReceiptHandle"],
                                            VisibilityTimeout=0)

    # Back across, by a move task started through a third node.
    sqs_client(b).start_message_move_task(SourceArn=dlq_arn)
    back = wait_messages(sqs_client(a), source_url)
    assert [(m["MessageId"], m["Body"]) for m in back] == [(sent, "poison")]
    assert counts(sqs_client(c), dlq_url) == (0, 0, 0)

    # KubeMQ: a message's own dead-letter channel in another partition, created there when the message moves.
    channel = channel_name("dl-kmq")
    dead = name_in_another_partition(cluster, "dl-kmq-dead", channel)
    producer = kubemq_client(a, client_id="dl-producer")
    consumer = kubemq_client(b, client_id="dl-consumer")
    try:
        result = producer.send_queue_message_simple(
            QueueMessage(channel=channel, body=b"poison", max_receive_count=1, max_receive_queue=dead))
        assert not result.is_error, result.error
        got = consumer.receive_queue_messages(channel=channel, max_messages=1, wait_timeout_in_seconds=2)
        assert [m.body for m in got.messages] == [b"poison"]
        got.messages[0].nack()  # uses up its one receive: it moves at once
        deadline = time.monotonic() + 10
        while True:
            dead_got = consumer.receive_queue_messages(channel=dead, max_messages=1, wait_timeout_in_seconds=1)
            if dead_got.messages or time.monotonic() > deadline:
                break
        assert [m.body for m in dead_got.messages] == [b"poison"]
        assert (dead_got.messages[0].is_re_routed, dead_got.messages[0].re_route_from_queue) == (True, channel)
        dead_got.messages[0].ack()
    finally:
        producer.close()
        consumer.close()
    assert cluster.partition_of(dead) == partition_of(dead, cluster.partitions)


# What a client may see while the cluster changes leader or the database is away: a cut connection or the
# protocol's "service unavailable". Anything else (a 500, a hang) fails the test.
TRANSIENT_CONNECTION_ERRORS = (EndpointConnectionError, ConnectionClosedError)


def transient_kind(exc: BaseException) -> str | None:
    """The kind of an allowed transient failure, or None when `exc` is not one."""
    if isinstance(exc, ClientError):
        err = exc.response.get("Error", {})
        status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        if err.get("Code") == "ServiceUnavailable" and status == 503:
            return "ServiceUnavailable"
        return None
    if isinstance(exc, TRANSIENT_CONNECTION_ERRORS):
        return type(exc).__name__
    return None


class SqsLoad:
    """A producer and a consumer on given nodes, recording what the server acknowledged. From `disrupt()`
    on, failures are expected (kinds counted) and the requests they cut off are in doubt."""

    def __init__(self, name: str, producer_node, consumer_node, deleter_node, attempts: int = 1):
        self.name = name
        self.attempts = attempts  # per request: 2 lets a client retry once, as the SDKs' default policy does
        self.producer_node, self.consumer_node, self.deleter_node = producer_node, consumer_node, deleter_node
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.disrupted = threading.Event()
        self.sent: set[str] = set()  # bodies whose send was acknowledged
        self.send_in_doubt: set[str] = set()
        self.deleted: set[str] = set()  # bodies whose delete was acknowledged
        self.delete_in_doubt: set[str] = set()
        self.received: Counter = Counter()
        self.transient: Counter = Counter()
        self.unexpected: list[str] = []
        self.acked_after_disruption = 0
        self.threads = [threading.Thread(target=self._produce), threading.Thread(target=self._consume)]

    def start(self) -> SqsLoad:
        for t in self.threads:
            t.start()
        return self

    def disrupt(self) -> None:
        self.disrupted.set()

    def finish(self) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(timeout=30)
            assert not t.is_alive(), "a load thread hangs"

    def _failed(self, what: str, exc: BaseException) -> None:
        kind = transient_kind(exc)
        with self.lock:
            if self.disrupted.is_set() and kind is not None:
                self.transient[kind] += 1
            else:
                phase = "after" if self.disrupted.is_set() else "before"
                self.unexpected.append(f"{what} ({phase} the disruption): {type(exc).__name__}: {exc}")
        time.sleep(0.05)

    def _url(self, client):
        while not self.stop.is_set():
            try:
                return client.get_queue_url(QueueName=self.name)["QueueUrl"]
            except Exception as e:  # noqa: BLE001 - classified
                self._failed("get_queue_url", e)
        return None

    def _produce(self):
        c = make_client(self.producer_node.endpoint, read_timeout=8, attempts=self.attempts)
        url = self._url(c)
        n = 0
        while not self.stop.is_set():
            batch = [f"load-{n + k:05d}" for k in range(10)]
            n += 10
            try:
                result = c.send_message_batch(
                    QueueUrl=url, Entries=[{"Id": str(k), "MessageBody": b} for k, b in enumerate(batch)]
                )
            except Exception as e:  # noqa: BLE001 - classified; the whole batch is in doubt
                with self.lock:
                    self.send_in_doubt.update(batch)
                self._failed("send_message_batch", e)
                continue
            ok = {batch[int(e["Id"])] for e in result.get("Successful", [])}
            with self.lock:
                self.sent.update(ok)
                self.send_in_doubt.update(set(batch) - ok)
                if self.disrupted.is_set():
                    self.acked_after_disruption += 1
            for f in result.get("Failed", []):
                self._failed("send entry", AssertionError(f))
            time.sleep(0.02)

    def _consume(self):
        c = make_client(self.consumer_node.endpoint, read_timeout=8, attempts=self.attempts)
        d = make_client(self.deleter_node.endpoint, read_timeout=8, attempts=self.attempts)
        url, durl = self._url(c), self._url(d)
        while not self.stop.is_set():
            try:
                msgs = c.receive_message(QueueUrl=url, MaxNumberOfMessages=5, VisibilityTimeout=VISIBILITY_S,
                                         WaitTimeSeconds=1).get("Messages", [])
            except Exception as e:  # noqa: BLE001 - classified
                self._failed("receive_message", e)
                continue
            with self.lock:
                self.received.update(m["Body"] for m in msgs)
            for m in msgs:
                try:
                    d.delete_message(QueueUrl=durl, ReceiptHandle=m["ReceiptHandle"])
                except Exception as e:  # noqa: BLE001 - classified; the delete is in doubt
                    with self.lock:
                        self.delete_in_doubt.add(m["Body"])
                    self._failed("delete_message", e)
                    continue
                with self.lock:
                    self.deleted.add(m["Body"])

    def assert_nothing_acknowledged_lost(self, node) -> set[str]:
        """Drains the queue through `node` and checks it against what the server acknowledged: every
        acknowledged send is there unless an acknowledged (or in-doubt) delete removed it, nothing deleted
        comes back, nothing unknown appears, nothing twice. Returns the bodies found."""
        assert not self.unexpected, self.unexpected[:10]
        c = make_client(node.endpoint, read_timeout=10)
        url = c.get_queue_url(QueueName=self.name)["QueueUrl"]
        must = self.sent - self.deleted - self.delete_in_doubt
        may = self.sent | self.send_in_doubt | self.delete_in_doubt
        found: Counter = Counter()
        deadline = time.monotonic() + VISIBILITY_S + 10
        while time.monotonic() < deadline:
            msgs = c.receive_message(QueueUrl=url, MaxNumberOfMessages=10, VisibilityTimeout=60,
                                     WaitTimeSeconds=1).get("Messages", [])
            found.update(m["Body"] for m in msgs)
            if not msgs and must <= set(found):
                break
        missing = must - set(found)
        assert not missing, f"{len(missing)} acknowledged messages lost, e.g. {sorted(missing)[:5]}"
        resurrected = set(found) & (self.deleted - self.delete_in_doubt)
        assert not resurrected, f"acknowledged deletes came back: {sorted(resurrected)[:5]}"
        unknown = set(found) - may
        assert not unknown, f"messages nobody sent: {sorted(unknown)[:5]}"
        twice = [b for b, k in found.items() if k > 1]
        assert not twice, f"delivered twice inside a 60 s visibility: {twice[:5]}"
        return set(found)


def wait_serving(node, within_s: float = RECOVERY_WITHIN_S) -> float:
    """Seconds until `node` takes a send again (a queue of its own), failing after `within_s`."""
    started = time.monotonic()
    c = make_client(node.endpoint, read_timeout=5)
    name = unique("probe")
    last = None
    while time.monotonic() - started < within_s:
        try:
            url = c.create_queue(QueueName=name)["QueueUrl"]
            c.send_message(QueueUrl=url, MessageBody="probe")
            return time.monotonic() - started
        except Exception as e:  # noqa: BLE001 - "not yet"; the last is reported
            last = e
            time.sleep(0.1)
    raise AssertionError(f"{node.node_id} did not serve within {within_s}s of the disruption (last: {last!r})\n"
                         f"{node.log_tail()}")


def wait_taken_over(cluster, name: str, epoch: int, pg=None, within_s: float = RECOVERY_WITHIN_S) -> tuple[str, int]:
    """Until the partition of the queue `name` is owned under an epoch above `epoch`; its (node, epoch)."""
    deadline = time.monotonic() + within_s
    while (held := cluster.owner_id(name, pg)) is None or held[1] <= epoch:
        assert time.monotonic() < deadline, f"nobody took over the partition of {name}\n{cluster.logs()}"
        time.sleep(0.05)
    return held


def queue_owned_by_another(cluster, prefix: str, avoid) -> str:
    """An SQS queue, created here, whose partition `avoid` does not own."""
    for _ in range(50):
        name = unique(prefix)
        sqs_client(cluster.nodes[0]).create_queue(QueueName=name)
        if cluster.owner(name) is not avoid:
            return name
    raise AssertionError(f"every queue landed on {avoid.node_id}")


def test_a_killed_owner_is_replaced_and_its_partitions_lose_nothing_while_others_see_no_error(pg, make_cluster):
    cluster = make_cluster(pg)
    name = unique("kill")
    sqs_client(cluster.nodes[0]).create_queue(QueueName=name)
    leader = cluster.owner(name)
    epoch = cluster.owner_id(name)[1]
    s1, s2 = cluster.others(name)
    # A queue of a partition the killed node does not own, loaded through the survivors: its clients must see
    # no error at all (its load is never marked disrupted, so any failure is unexpected).
    calm_name = queue_owned_by_another(cluster, "calm", leader)
    load = SqsLoad(name, s1, s2, s1).start()
    calm = SqsLoad(calm_name, s2, s1, s2).start()
    time.sleep(1.0)

    # In flight at the kill, received through the owner itself and through another node, never deleted: they
    # come back when their 2 s visibility lapses, under the new owner.
    in_flight = set()
    for node in (leader, s2):
        c = sqs_client(node)
        url = c.get_queue_url(QueueName=name)["QueueUrl"]
        got = c.receive_message(QueueUrl=url, MaxNumberOfMessages=5, VisibilityTimeout=VISIBILITY_S)
        in_flight |= {m["Body"] for m in got.get("Messages", [])}
    assert in_flight, "the load sent nothing to hold in flight"

    load.disrupt()
    killed_at = time.monotonic()
    leader.kill()
    held = wait_taken_over(cluster, name, epoch)
    takeover_s = time.monotonic() - killed_at
    assert held[0] != leader.node_id, f"after the kill of {leader.node_id} the lease says {held}"
    takeover_s = max(takeover_s, wait_serving(s1), wait_serving(s2))
    # The lease row moves before the new owner has loaded the partition: wait for the load's own queue to take
    # a send again (on a loaded CI host that can take longer than a fixed pause), then load it a while more.
    deadline = time.monotonic() + RECOVERY_WITHIN_S
    while load.acked_after_disruption == 0:
        assert time.monotonic() < deadline, f"no send acknowledged after the takeover\n{cluster.logs()}"
        time.sleep(0.1)
    time.sleep(1.0)  # load under the new owner
    load.finish()
    calm.finish()
    print(f"kill -9 of {leader.node_id}: its partitions served again after {takeover_s:.2f}s; "
          f"client errors meanwhile: {dict(load.transient)}; on another partition's queue: {calm.unexpected[:3]}")
    assert in_flight <= load.sent, "a message received before the kill was never acknowledged as sent"
    found = load.assert_nothing_acknowledged_lost(s2)
    back = in_flight - load.deleted - load.delete_in_doubt
    assert back <= found, f"in-flight messages that never came back: {sorted(back - found)}"
    calm.assert_nothing_acknowledged_lost(s1)  # also asserts that its clients saw no error


def test_a_joining_node_takes_its_share_and_the_moved_queues_need_at_most_one_retry(pg, tmp_path):
    """Two nodes own every partition; a third joins under load. It takes its fair share, each handed back by
    its owner after the calls in flight finished, and a client that retries once (the SDKs' default retries
    more) sees no error on any queue, moved or not, and loses nothing."""
    cluster = Cluster(pg, tmp_path / "join", size=3)
    try:
        n1, n2, n3 = cluster.nodes
        n1.start()
        n2.start()
        cluster.wait_ready(nodes=[n1, n2])
        # A queue in every partition, so that whichever partitions move, some loaded queue moves with them.
        names = []
        for p in range(cluster.partitions):
            name = next(n for n in (unique(f"join{p}") for _ in range(1000))
                        if partition_of(n, cluster.partitions) == p)
            sqs_client(n1).create_queue(QueueName=name)
            names.append(name)
        before = cluster.ownership()
        assert n3.node_id not in before
        loads = [SqsLoad(name, n1, n2, n1, attempts=2).start() for name in names]
        time.sleep(1.0)
        n3.start()
        cluster.wait_ready()
        time.sleep(1.0)  # load after the moves
        for load in loads:
            load.finish()
        after = cluster.ownership()
        assert after.get(n3.node_id, 0) >= cluster.partitions // 3, f"the joining node took {dict(after)}"
        print(f"ownership before the join {dict(before)}, after {dict(after)}")
        for load in loads:
            load.assert_nothing_acknowledged_lost(n3)  # asserts no error reached a client, too
    finally:
        cluster.kill_all()


def test_a_node_cut_off_from_postgresql_loses_its_partitions_and_stops_serving_them(tmp_path):
    """A node whose network to PostgreSQL goes silent (a black hole, not a reset: its connections stay open
    and answer nothing) loses its partitions to the others once their leases lapse, and never answers for
    them from memory again: a question about one of its former queues, asked through it, gets "unavailable"
    (or the new owner's answer), never its stale count. The node runs in a network namespace of its own whose
    link to the database is taken down, its link to clients and the other nodes kept; where the machine allows
    no namespace, a forwarder that stops passing bytes stands in for that link."""
    pg = PgServer("pg-cut").init().listen_everywhere().start()
    namespace = NetworkNamespace() if NetworkNamespace.available() else None
    link = None
    if namespace:
        namespace.create()
        # The other nodes' RPC must be reachable from inside the namespace, over its client link.
        cluster = Cluster(pg, tmp_path / "cut", size=3,
                          extra_args=("--cluster-bind", "0.0.0.0", "--cluster-advertise", namespace.peer))
        cut_node = cluster.nodes[2]
        cut_node.in_namespace(namespace)
        # Its admin endpoint listens beyond loopback (on its namespace's address), which takes a token.
        cut_node.extra_args = ["--cluster-bind", namespace.host, "--admin-token", "e2e-cut-admin"]
        cut_node.store = pg.url_at(namespace.db_host)
        how = f"network namespace {namespace.name}, its database link down"
    else:
        link = CuttableLink(pg.port)
        cluster = Cluster(pg, tmp_path / "cut", size=3)
        cut_node = cluster.nodes[2]
        cut_node.store = link.url()
        how = "a black-hole forwarder (no network namespace here)"
    try:
        cluster.start()
        n1 = cluster.nodes[0]
        # The setup's client retries as the SDKs do by default (the forwarder adds latency to the cut node's
        # renewals on a loaded machine); the question asked through the cut node below does not.
        setup = make_client(n1.endpoint, read_timeout=15, attempts=4)
        name = next(n for n in (unique("cut") for _ in range(100))
                    if setup.create_queue(QueueName=n)["QueueUrl"] and cluster.owner(n) is cut_node)
        url = setup.get_queue_url(QueueName=name)["QueueUrl"]
        setup.send_message(QueueUrl=url, MessageBody="before the cut")
        through_cut = make_client(cut_node.endpoint, read_timeout=15, attempts=4)
        held_url = through_cut.get_queue_url(QueueName=name)["QueueUrl"]
        count = lambda client, u: client.get_queue_attributes(  # noqa: E731
            QueueUrl=u, AttributeNames=["ApproximateNumberOfMessages"])["Attributes"]["ApproximateNumberOfMessages"]
        assert count(through_cut, held_url) == "1"
        held = make_client(cut_node.endpoint, read_timeout=15)  # no retries: each answer is its own
        epoch = cluster.owner_id(name)[1]

        (namespace or link).cut()
        new_owner, _ = wait_taken_over(cluster, name, epoch)
        assert new_owner != cut_node.node_id
        wait_serving(n1)
        setup.send_message(QueueUrl=url, MessageBody="after the cut")
        assert count(setup, url) == "2"
        try:
            answered = count(held, held_url)
        except ClientError as e:
            got = (e.response["Error"].get("Code"), e.response["ResponseMetadata"]["HTTPStatusCode"])
            assert got == ("ServiceUnavailable", 503), f"the cut-off node answered {got}"
            outcome = "503 ServiceUnavailable"
        else:
            assert answered == "2", f"the cut-off node answered {answered} from memory; the queue holds 2"
            outcome = "the new owner's count"
        print(f"{cut_node.node_id} cut off from PostgreSQL ({how}): {new_owner} took its partition; asked "
              f"through it, the queue's count got {outcome}")
        assert cut_node.node_id not in cluster.ownership(), f"the cut-off node still owns {cluster.ownership()}"
        assert cut_node.running(), "a node cut off from the database keeps running (and retrying)"
    finally:
        cluster.kill_all()
        if link:
            link.close()
        if namespace:
            namespace.close()
        pg.destroy()


def test_a_leader_resumed_after_its_lease_lapsed_answers_nothing_from_memory(pg, make_cluster):
    """A leader paused (SIGSTOP) past its lease while another node took over must not answer, once resumed,
    from the memory it kept — not even over a connection it already held — since the queues changed under the
    new leader. It answers 503 until its term ends and its connections close; never the stale count."""
    cluster = make_cluster(pg, size=2)
    name = unique("paused")
    sqs_client(cluster.nodes[0]).create_queue(QueueName=name)
    old = cluster.owner(name)
    epoch = cluster.owner_id(name)[1]
    (other,) = cluster.others(name)
    url = sqs_client(other).get_queue_url(QueueName=name)["QueueUrl"]
    sqs_client(other).send_message(QueueUrl=url, MessageBody="before the pause")
    # A kept-alive connection through the old leader, to its engine; no retries, so each answer is its own.
    held = make_client(old.endpoint, read_timeout=10)
    held_url = held.get_queue_url(QueueName=name)["QueueUrl"]
    count = lambda: int(held.get_queue_attributes(  # noqa: E731
        QueueUrl=held_url, AttributeNames=["ApproximateNumberOfMessages"])["Attributes"]["ApproximateNumberOfMessages"])
    assert count() == 1

    old.proc.send_signal(signal.SIGSTOP)
    try:
        wait_taken_over(cluster, name, epoch)
        wait_serving(other)
        sqs_client(other).send_message(QueueUrl=url, MessageBody="under the new leader")
    finally:
        old.proc.send_signal(signal.SIGCONT)

    try:
        answered = count()
    except ClientError as e:
        got = (e.response["Error"].get("Code"), e.response["ResponseMetadata"]["HTTPStatusCode"])
        assert got == ("ServiceUnavailable", 503), f"{old.node_id} answered {got} {e.response['Error']}"
        outcome = "503 ServiceUnavailable"
    except (ConnectionClosedError, EndpointConnectionError) as e:
        outcome = f"no answer ({type(e).__name__})"  # its term ended and took the connection with it
    else:
        assert answered == 2, f"the resumed {old.node_id} answered {answered} from memory; the queue holds 2"
        outcome = "the new count"
    print(f"a request over the connection the resumed {old.node_id} kept got: {outcome}")
    assert sqs_client(other).get_queue_attributes(
        QueueUrl=url, AttributeNames=["ApproximateNumberOfMessages"])["Attributes"]["ApproximateNumberOfMessages"] == "2"


def sqs_unavailable(node, name: str) -> None:
    """A send and a long poll through `node` answer 503 ServiceUnavailable, each within the bound."""
    c = make_client(node.endpoint, read_timeout=UNAVAILABLE_WITHIN_S + 5)
    url = f"{node.endpoint}/000000000000/{name}"
    for call, kwargs in (
        (c.send_message, {"QueueUrl": url, "MessageBody": "while down"}),
        (c.receive_message, {"QueueUrl": url, "WaitTimeSeconds": 1}),
    ):
        started = time.monotonic()
        with pytest.raises(ClientError) as ei:
            call(**kwargs)
        elapsed = time.monotonic() - started
        err = ei.value.response
        got = (err["Error"].get("Code"), err["ResponseMetadata"]["HTTPStatusCode"])
        assert got == ("ServiceUnavailable", 503), f"{node.node_id} {call.__name__}: {got} {err['Error']}"
        assert elapsed < UNAVAILABLE_WITHIN_S, f"{node.node_id} {call.__name__} took {elapsed:.2f}s"


def azure_unavailable(node, name: str) -> None:
    q = azure_queue(node, name)
    started = time.monotonic()
    with pytest.raises(HttpResponseError) as ei:
        q.send_message("while down")
    elapsed = time.monotonic() - started
    assert (ei.value.status_code, ei.value.error_code) == (503, "ServerBusy"), (
        f"{node.node_id}: HTTP {ei.value.status_code} {ei.value.error_code}: {ei.value.message}"
    )
    assert elapsed < UNAVAILABLE_WITHIN_S, f"{node.node_id} Azure send took {elapsed:.2f}s"


def kubemq_unavailable(node, channel: str) -> str:
    """KubeMQ's unary send refused as unavailable, in one of its two real forms: while no node can serve, the
    node's stand-in server fails the RPC with gRPC status UNAVAILABLE; a leader whose store fails answers in-band
    (IsError, KubeMQ's "Error 503: service unavailable"), as KubeMQ carries its send errors. Returns which."""
    rpc = grpc.insecure_channel(node.kubemq_address)
    try:
        stub = kubemq_pb2_grpc.kubemqStub(rpc)
        started = time.monotonic()
        try:
            result = stub.SendQueueMessage(
                kubemq_pb2.QueueMessage(ClientID="probe", Channel=channel, Body=b"while down"),
                timeout=UNAVAILABLE_WITHIN_S + 5,
            )
        except grpc.RpcError as e:
            assert e.code() == grpc.StatusCode.UNAVAILABLE, f"{node.node_id}: {e}"
            form = "status UNAVAILABLE"
        else:
            assert result.IsError and result.Error.startswith("Error 503: service unavailable"), (
                f"{node.node_id}: {result}"
            )
            form = "in-band Error 503"
        elapsed = time.monotonic() - started
        assert elapsed < UNAVAILABLE_WITHIN_S, f"{node.node_id} KubeMQ send took {elapsed:.2f}s"
        return form
    finally:
        rpc.close()


def test_postgres_down_answers_service_unavailable_at_once_and_nodes_resume_when_it_returns(own_pg, make_cluster):
    cluster = make_cluster(own_pg)
    n1, n2, n3 = cluster.nodes
    name = unique("pgdown")
    sqs_client(n1).create_queue(QueueName=name)
    az_name = unique("az")  # not the SQS queue's name: the protocols share one namespace
    azure_queue(n2, az_name).create_queue()
    channel = channel_name("pgdown")
    # Acknowledged on each protocol before the first stop: must survive both.
    azure_queue(n2, az_name).send_message("azure before")
    kmq = kubemq_client(n3, client_id="before")
    try:
        result = kmq.send_queue_message_simple(QueueMessage(channel=channel, body=b"kubemq before"))
        assert not result.is_error, result.error
    finally:
        kmq.close()

    load = SqsLoad(name, n1, n2, n3).start()
    for mode in ("fast", "immediate"):
        time.sleep(1.0)
        load.disrupt()
        own_pg.stop(mode)
        forms = Counter()
        # At once, and again once every lease has lapsed: the answer is the same throughout the outage.
        for _ in range(2):
            for node in cluster.nodes:
                sqs_unavailable(node, name)
                azure_unavailable(node, az_name)
                forms[kubemq_unavailable(node, channel)] += 1
            time.sleep(LEASE_TTL_MS / 1000 + 0.5)
        print(f"pg_ctl stop -m {mode}: KubeMQ refusals {dict(forms)}")
        own_pg.start()
        recovered_s = max(wait_serving(node) for node in cluster.nodes)
        print(f"pg_ctl stop -m {mode}: every node served again {recovered_s:.2f}s after the restart")
        for node in cluster.nodes:
            assert node.running(), f"{node.node_id} died with the database away\n{node.log_tail()}"
    time.sleep(0.5)
    load.finish()
    assert load.acked_after_disruption > 0, "no send acknowledged after the database returned"
    print(f"client errors while the database was away: {dict(load.transient)}")
    load.assert_nothing_acknowledged_lost(n3)
    assert [m.content for m in azure_queue(n1, az_name).receive_messages()] == ["azure before"]
    assert_kubemq_holds(n1, channel, [b"kubemq before"])


def test_a_promoted_standby_takes_over_with_every_acknowledged_message(make_cluster):
    # Synchronous streaming replication set on the primary's command line only (pg_support's docstring says why).
    primary = PgServer("primary", options=("wal_level=replica", "synchronous_standby_names=*")).init().start()
    standby = None
    try:
        standby = primary.standby()
        primary.wait_sync_standby()
        cluster = make_cluster(primary, store=both_hosts(primary, standby))
        n1, n2, n3 = cluster.nodes
        name = unique("promote")
        c1 = sqs_client(n1)
        url = c1.create_queue(QueueName=name)["QueueUrl"]
        sent = {f"p-{i:03d}" for i in range(60)}
        ordered = sorted(sent)
        for i in range(0, len(ordered), 10):
            result = c1.send_message_batch(QueueUrl=url, Entries=[
                {"Id": str(k), "MessageBody": b} for k, b in enumerate(ordered[i:i + 10])
            ])
            assert not result.get("Failed"), result["Failed"]
        # Some deleted (must stay deleted), some in flight (must come back), the rest waiting.
        c2 = sqs_client(n2)
        url2 = c2.get_queue_url(QueueName=name)["QueueUrl"]
        got = c2.receive_message(QueueUrl=url2, MaxNumberOfMessages=10, VisibilityTimeout=VISIBILITY_S)["Messages"]
        deleted = {m["Body"] for m in got[:5]}
        for m in got[:5]:
            c1.delete_message(QueueUrl=url, ReceiptHandle=m["ReceiptHandle"])
        az_name = unique("az")  # not the SQS queue's name: the protocols share one namespace
        azure_queue(n3, az_name).create_queue()
        azure_queue(n3, az_name).send_message("azure acknowledged")
        channel = channel_name("promote")
        kmq = kubemq_client(n2, client_id="before")
        try:
            result = kmq.send_queue_message_simple(QueueMessage(channel=channel, body=b"kubemq acknowledged"))
            assert not result.is_error, result.error
        finally:
            kmq.close()

        primary.kill9()
        standby.promote()
        recovered_s = max(wait_serving(node) for node in cluster.nodes)
        print(f"after the primary's kill -9 and the standby's promotion, every node served in {recovered_s:.2f}s")
        # Every partition reloads from the promoted standby (each store failed with the primary); until its
        # partition serves again a queue answers "unavailable", which the checks below do not retry.
        cluster.pg = standby
        cluster.wait_ready()
        held = cluster.owner_id(name, standby)
        assert held is not None, "no lease on the promoted standby"

        c3 = sqs_client(n3)
        url3 = c3.get_queue_url(QueueName=name)["QueueUrl"]
        found: Counter = Counter()
        deadline = time.monotonic() + VISIBILITY_S + 10
        while time.monotonic() < deadline:
            msgs = c3.receive_message(QueueUrl=url3, MaxNumberOfMessages=10, VisibilityTimeout=60,
                                      WaitTimeSeconds=1).get("Messages", [])
            found.update(m["Body"] for m in msgs)
            if not msgs and sent - deleted <= set(found):
                break
        assert set(found) == sent - deleted, (
            f"lost: {sorted(sent - deleted - set(found))[:5]}, deleted yet back: {sorted(set(found) & deleted)[:5]}"
        )
        assert all(k == 1 for k in found.values()), "a message delivered twice inside a 60 s visibility"
        assert [m.content for m in azure_queue(n1, az_name).receive_messages()] == ["azure acknowledged"]
        assert_kubemq_holds(n1, channel, [b"kubemq acknowledged"])
    finally:
        primary.destroy()
        if standby is not None:
            standby.destroy()


def test_a_schema_migrated_by_a_newer_binary_is_refused_at_start(pg, tmp_path):
    cluster = Cluster(pg, tmp_path, size=1)
    node = cluster.nodes[0].start()
    try:
        # The first start migrates the schema (before it competes for the lease).
        deadline = time.monotonic() + 20
        while pg.sql(f"SELECT to_regclass('{cluster.schema}.veil_schema_history') IS NOT NULL") != "t":
            assert time.monotonic() < deadline, f"no schema history after the first start\n{node.log_tail()}"
            time.sleep(0.1)
        node.stop_cleanly()
    finally:
        node.kill()
    columns = pg.sql(
        "SELECT string_agg(column_name, ',' ORDER BY ordinal_position) FROM information_schema.columns "
        f"WHERE table_schema = '{cluster.schema}' AND table_name = 'veil_schema_history'"
    )
    assert columns == "version,name,applied_on,checksum", f"refinery's history table has columns {columns}"
    pg.sql(f"INSERT INTO {cluster.schema}.veil_schema_history (version, name, applied_on, checksum) "
           "VALUES (99, 'from_a_newer_veil', '2099-01-01T00:00:00Z', '0')")
    try:
        proc = subprocess.run(node.command(), capture_output=True, text=True, timeout=REFUSAL_WITHIN_S,
                              stdin=subprocess.DEVNULL, check=False)
    except subprocess.TimeoutExpired as e:
        raise AssertionError(f"veil kept running on a schema with a migration it does not know:\n{e.output}")
    output = proc.stdout + proc.stderr
    assert proc.returncode != 0, f"veil started on a schema with a migration it does not know\n{output}"
    assert "panicked" not in output, f"the refusal is a panic, not a message:\n{output}"
    assert "schema" in output and "newer" in output and "V99" in output, f"the refusal does not say why:\n{output}"


# ---- shards: the partitions spread over two databases -------------------------------------------------------


@pytest.fixture
def sharded(veil_path, pg, tmp_path):
    """Two nodes whose 4 partitions live on two PostgreSQL instances: 0 and 2 on the module's (the home), 1
    and 3 on a second one of the test's own."""
    second = PgServer("pg-shard").init().start()
    c = Cluster(pg, tmp_path / "sharded", size=2, shards=(second,), partitions=4).start()
    yield c, second
    c.kill_all()
    second.destroy()


def name_on_shard(cluster, prefix: str, shard: int) -> str:
    """A fresh queue name whose partition lives on shard `shard`."""
    count = len(cluster.databases)
    return next(n for n in (unique(prefix) for _ in range(1000))
                if partition_of(n, cluster.partitions) % count == shard)


def test_two_shards_hold_their_own_partitions_and_a_dead_letter_crosses_between_them_once(sharded):
    """Each database holds the leases and queues of its partitions only; a dead-letter queue on the other
    shard gets its dead letter once, and a move task takes it back; nothing is left in either inbox."""
    cluster, second = sharded
    home = cluster.pg
    assert home.sql(f"SELECT string_agg(partition::text, ',' ORDER BY partition) "
                    f"FROM {cluster.schema}.veil_partition") == "0,2"
    assert second.sql(f"SELECT string_agg(partition::text, ',' ORDER BY partition) "
                      f"FROM {cluster.schema}.veil_partition") == "1,3"
    a, b = cluster.nodes
    source, dlq = name_on_shard(cluster, "sh-src", 0), name_on_shard(cluster, "sh-dlq", 1)
    source_url = sqs_client(a).create_queue(QueueName=source)["QueueUrl"]
    dlq_url = sqs_client(b).create_queue(QueueName=dlq)["QueueUrl"]
    in_home = home.sql(f"SELECT string_agg(name, ',' ORDER BY name) FROM {cluster.schema}.veil_queue")
    in_second = second.sql(f"SELECT string_agg(name, ',' ORDER BY name) FROM {cluster.schema}.veil_queue")
    assert (in_home, in_second) == (source, dlq), "each queue's catalog row is on its partition's shard"
    dlq_arn, source_arn = queue_arn(sqs_client(a), dlq_url), queue_arn(sqs_client(b), source_url)
    dead_letters_go_to(sqs_client(b), source_url, dlq_arn)
    sent = [sqs_client(a).send_message(QueueUrl=source_url, MessageBody=f"poison-{i}")["MessageId"]
            for i in range(3)]
    first = sqs_client(b).receive_message(QueueUrl=source_url, MaxNumberOfMessages=10, VisibilityTimeout=0)
    assert sorted(m["MessageId"] for m in first["Messages"]) == sorted(sent)
    assert "Messages" not in sqs_client(a).receive_message(QueueUrl=source_url, VisibilityTimeout=0)
    moved: list[dict] = []
    deadline = time.monotonic() + 10
    while len(moved) < len(sent) and time.monotonic() < deadline:
        moved += wait_messages(sqs_client(a), dlq_url)
    assert sorted(m["MessageId"] for m in moved) == sorted(sent), "each dead letter arrived once, itself"
    assert {m["Attributes"]["DeadLetterQueueSourceArn"] for m in moved} == {source_arn}
    for m in moved:
        sqs_client(b).change_message_visibility(QueueUrl=dlq_url, ReceiptHandle=m["ReceiptHandle"],
                                                VisibilityTimeout=0)

    sqs_client(a).start_message_move_task(SourceArn=dlq_arn)
    back: list[dict] = []
    deadline = time.monotonic() + 10
    while len(back) < len(sent) and time.monotonic() < deadline:
        back += wait_messages(sqs_client(b), source_url)
    assert sorted((m["MessageId"], m["Body"]) for m in back) == sorted(
        (mid, f"poison-{i}") for i, mid in enumerate(sent)), "back across, once each"
    assert counts(sqs_client(a), dlq_url) == (0, 0, 0)
    for database in (home, second):
        left = database.sql(f"SELECT (SELECT count(*) FROM {cluster.schema}.veil_inbox) || ' ' || "
                            f"(SELECT count(*) FROM {cluster.schema}.veil_inbox_imported)")
        assert left == "0 0", f"entries or marks left behind on {database.name}: {left}"


def test_a_shard_down_fails_only_its_own_partitions_and_they_serve_again_when_it_returns(sharded):
    """The second database stops: its queues answer 503 through every node, the home's queues go on with no
    error; once it is back, its queues serve again with what they held."""
    cluster, second = sharded
    a, b = cluster.nodes
    calm, away = name_on_shard(cluster, "sh-calm", 0), name_on_shard(cluster, "sh-away", 1)
    calm_url = sqs_client(a).create_queue(QueueName=calm)["QueueUrl"]
    away_url = sqs_client(a).create_queue(QueueName=away)["QueueUrl"]
    sqs_client(b).send_message(QueueUrl=away_url, MessageBody="kept")
    second.stop()
    try:
        for node in (a, b):
            deadline = time.monotonic() + 10
            while True:
                try:
                    sqs_unavailable(node, away)
                    break
                except AssertionError:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.2)
        for i in range(20):
            node = (a, b)[i % 2]
            sqs_client(node).send_message(QueueUrl=calm_url, MessageBody=f"calm-{i}")
        assert counts(sqs_client(b), calm_url)[0] == 20
    finally:
        second.start()
    deadline = time.monotonic() + 20
    while True:
        try:
            got = sqs_client(a).receive_message(QueueUrl=away_url, WaitTimeSeconds=1).get("Messages", [])
            if got:
                break
        except ClientError as exc:
            assert exc.response["Error"]["Code"] == "ServiceUnavailable", exc.response
        assert time.monotonic() < deadline, f"the shard's queue did not serve again\n{cluster.logs()}"
    assert [m["Body"] for m in got] == ["kept"]
