"""Unauthenticated slow bodies cannot starve admission (docs/security.md "Limits against abuse"): a request takes
an admission slot only once its body is read and its caller authenticated, and a body has a total deadline
(`body_read_total_timeout_ms`) besides the longest pause between its pieces (`body_read_timeout_ms`).

The attack: more connections than `max_requests_in_flight` each send a head announcing a large body and then
trickle it, one byte at a time, never pausing long enough for the pause timeout. Before the fix each held a
slot, and every signed request of every protocol was throttled for as long as the trickle lasted.
"""

from __future__ import annotations

import socket
import threading
import time
import uuid

import pytest
from azure.storage.queue import QueueServiceClient
from kubemq.queues import QueueMessage

from helpers import channel_name, configured_server, kubemq_client, kubemq_receive, make_client

IN_FLIGHT = 4
TRICKLERS = 3 * IN_FLIGHT
PAUSE_TIMEOUT_MS = 1500
TOTAL_TIMEOUT_MS = 4000
TRICKLE_EVERY_S = 0.5


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    srv = configured_server(
        tmp_path_factory.mktemp("veil-slow-bodies"),
        "[limits]\n"
        f"max_requests_in_flight = {IN_FLIGHT}\n"
        "admission_wait_ms = 50\n"
        f"body_read_timeout_ms = {PAUSE_TIMEOUT_MS}\n"
        f"body_read_total_timeout_ms = {TOTAL_TIMEOUT_MS}\n",
    )
    yield srv
    assert srv.running(), f"veil died during the tests of this module\n{srv.log_tail()}"
    srv.stop_cleanly()


class Tricklers:
    """`count` unauthenticated requests on `port` that announce a 1 MB body and send a byte of it every
    TRICKLE_EVERY_S, until stopped or the server closes them. Each asks `Expect: 100-continue` and waits for the
    server's `100 Continue`, which it sends once its handler reads the body: so every trickler is being read
    (where the old design held a slot) before anything else runs."""

    def __init__(self, port: int, count: int):
        self.socks = []
        for _ in range(count):
            sock = socket.create_connection(("127.0.0.1", port), timeout=2)
            sock.sendall(b"POST / HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/x-amz-json-1.0\r\n"
                         b"Expect: 100-continue\r\nContent-Length: 1000000\r\n\r\n")
            interim = b""
            while b"\r\n\r\n" not in interim:
                piece = sock.recv(1024)
                assert piece, f"the server closed a trickler before reading its body: {interim!r}"
                interim += piece
            assert interim.startswith(b"HTTP/1.1 100"), f"the body is not being read: {interim!r}"
            sock.sendall(b"{")
            self.socks.append(sock)
        self.stopped = threading.Event()
        self.closed_after: list[float] = []
        self.started = time.monotonic()
        self.thread = threading.Thread(target=self._trickle, daemon=True)
        self.thread.start()

    def _trickle(self):
        live = list(self.socks)
        while live and not self.stopped.wait(TRICKLE_EVERY_S):
            for sock in list(live):
                try:
                    sock.sendall(b" ")
                except OSError:
                    self.closed_after.append(time.monotonic() - self.started)
                    live.remove(sock)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stopped.set()
        self.thread.join(timeout=5)
        for sock in self.socks:
            sock.close()


def test_trickling_unauthenticated_bodies_take_no_admission_slot(server):
    sqs = make_client(server.endpoint, read_timeout=5)  # one attempt: a RequestThrottled would fail it
    url = sqs.create_queue(QueueName=f"slow-{uuid.uuid4().hex[:8]}")["QueueUrl"]
    azure = QueueServiceClient.from_connection_string(server.azure_connection_string(), retry_total=0)
    queue = azure.get_queue_client(f"slow-{uuid.uuid4().hex[:8]}")
    queue.create_queue()
    channel = channel_name("slow")
    kubemq = kubemq_client(server)
    # The HTTP listeners are trickled; KubeMQ's gRPC takes a slot only for a decoded message of an
    # authenticated caller, and is checked alongside.
    with Tricklers(server.port, TRICKLERS), Tricklers(server.azure_port, TRICKLERS):
        # Signed requests of every protocol are served meanwhile, each several times the limit.
        for i in range(2 * IN_FLIGHT):
            sqs.send_message(QueueUrl=url, MessageBody=f"sqs-{i}")
            queue.send_message(f"azure-{i}")
            sent = kubemq.send_queue_message_simple(QueueMessage(channel=channel, body=f"kubemq-{i}".encode()))
            assert not sent.is_error, sent.error
        assert sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10)["Messages"]
        assert len(list(queue.receive_messages(max_messages=32))) == 2 * IN_FLIGHT
        assert len(kubemq_receive(kubemq, channel, max_messages=32).messages) == 2 * IN_FLIGHT


def test_a_trickled_body_fails_at_its_total_deadline(server):
    # Never a pause as long as the pause timeout, yet the request ends at the total deadline.
    with socket.create_connection(("127.0.0.1", server.port), timeout=2) as slow:
        slow.sendall(b"POST / HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/x-www-form-urlencoded\r\n"
                     b"Content-Length: 100000\r\n\r\nAction=ListQueues")
        started = time.monotonic()
        slow.settimeout(0.05)
        answer = b""
        while time.monotonic() - started < TOTAL_TIMEOUT_MS / 1000 + 3:
            try:
                answer += slow.recv(4096)
            except socket.timeout:
                pass
            if answer:
                break
            slow.sendall(b"&")
            time.sleep(0.2)
        took = time.monotonic() - started
    assert answer.startswith(b"HTTP/1.1 400"), answer
    # The total deadline ended it, not a pause (the answer says which), and not before the deadline.
    assert f"not complete within {TOTAL_TIMEOUT_MS} ms".encode() in answer, answer
    assert took >= TOTAL_TIMEOUT_MS / 1000 - 0.5, took
