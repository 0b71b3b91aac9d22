"""Overload (docs/reliability.md "Load and overload"): beyond a listener's admission limit
(`max_requests_in_flight` requests worked on at once, plus `admission_wait_ms` of waiting for a slot) a request
is answered at once with the protocol's throttling error, never left to time out; Veil serves again as soon as
the load drops; and a waiting long poll does not count against the limit. The limit is set small by the
config file; slots are held by requests whose body never comes (admitted, then waiting on their body), so the
outcome does not depend on the machine's speed. Each refusal is counted in /metrics (`veil_requests_total` with
the protocol's throttling code).
"""

from __future__ import annotations

import socket
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

import pytest
from azure.core.exceptions import HttpResponseError
from azure.storage.queue import QueueServiceClient
from botocore.exceptions import ClientError

from helpers import VeilServer, make_client
from test_admin import scrape

IN_FLIGHT = 2
ADMISSION_WAIT_MS = 50
BODY_TIMEOUT_MS = 1500
THROTTLED_MESSAGE = "The request was denied due to request throttling."


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    base = tmp_path_factory.mktemp("veil-overload")
    config = base / "veil.toml"
    config.write_text(
        "[limits]\n"
        f"max_requests_in_flight = {IN_FLIGHT}\n"
        f"admission_wait_ms = {ADMISSION_WAIT_MS}\n"
        f"body_read_timeout_ms = {BODY_TIMEOUT_MS}\n"
    )
    srv = VeilServer(base / "data", log_dir=base, extra_args=["--config", str(config)]).start()
    yield srv
    assert srv.running(), f"veil died during the tests of this module\n{srv.log_tail()}"
    srv.stop_cleanly()


class HeldSlots:
    """`count` requests admitted on `port` that hold their slots: each sent its head and waits on its body."""

    def __init__(self, port: int, count: int):
        self.socks = []
        for _ in range(count):
            sock = socket.create_connection(("127.0.0.1", port), timeout=2)
            sock.sendall(b"POST / HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/x-amz-json-1.0\r\n"
                         b"Content-Length: 64\r\n\r\n")
            self.socks.append(sock)
        time.sleep(0.2)  # let the server admit them

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        for sock in self.socks:
            sock.close()
        time.sleep(0.2)  # let the server see them gone


def test_requests_beyond_the_admission_limit_get_request_throttled_at_once_not_a_timeout(server):
    sqs = make_client(server.endpoint, read_timeout=2)
    url = sqs.create_queue(QueueName=f"overload-{uuid.uuid4().hex[:8]}")["QueueUrl"]

    def send(i):
        started = time.monotonic()
        try:
            make_client(server.endpoint, read_timeout=2).send_message(QueueUrl=url, MessageBody=f"m{i}")
            return "sent", time.monotonic() - started
        except ClientError as error:
            answer = error.response
            assert answer["Error"]["Message"] == THROTTLED_MESSAGE
            assert answer["ResponseMetadata"]["HTTPStatusCode"] == 400
            return answer["Error"]["Code"], time.monotonic() - started

    with HeldSlots(server.port, IN_FLIGHT):
        with ThreadPoolExecutor(8) as pool:
            outcomes = list(pool.map(send, range(16)))
    assert [code for code, _ in outcomes] == ["RequestThrottled"] * 16
    throttled = scrape(server)[
        ("veil_requests_total",
         frozenset({("protocol", "sqs"), ("operation", "SendMessage"), ("code", "RequestThrottled")}))]
    assert throttled >= 16, "the refusals are not counted in /metrics"
    slowest = max(seconds for _, seconds in outcomes)
    assert slowest < 1.0, f"a throttled request took {slowest:.2f} s: it waited, not just the admission wait"
    # The load is gone: served again at once.
    sqs.send_message(QueueUrl=url, MessageBody="after")
    got = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=1)["Messages"]
    assert [m["Body"] for m in got] == ["after"]


def test_requests_beyond_the_admission_limit_get_azure_server_busy(server):
    service = QueueServiceClient.from_connection_string(server.azure_connection_string(), retry_total=0)
    with HeldSlots(server.azure_port, IN_FLIGHT):
        with pytest.raises(HttpResponseError) as caught:
            service.get_service_properties()
    assert caught.value.status_code == 503
    assert caught.value.error_code == "ServerBusy"
    busy = scrape(server)[
        ("veil_requests_total", frozenset({("protocol", "azure"), ("operation", "Unknown"), ("code", "503")}))]
    assert busy >= 1, "the refusal is not counted in /metrics"
    service.get_service_properties()


def test_waiting_long_polls_do_not_count_against_the_admission_limit(server):
    sqs = make_client(server.endpoint, read_timeout=5)
    url = sqs.create_queue(QueueName=f"overload-{uuid.uuid4().hex[:8]}")["QueueUrl"]
    received = []

    def long_poll():
        answer = make_client(server.endpoint, read_timeout=5).receive_message(
            QueueUrl=url, WaitTimeSeconds=2, VisibilityTimeout=30)
        received.extend(m["Body"] for m in answer.get("Messages", []))

    polls = [threading.Thread(target=long_poll) for _ in range(IN_FLIGHT + 2)]
    for poll in polls:
        poll.start()
    time.sleep(0.5)  # every poll is parked, more of them than the limit
    sqs.send_message(QueueUrl=url, MessageBody="through")
    for poll in polls:
        poll.join(timeout=5)
    assert received == ["through"]
