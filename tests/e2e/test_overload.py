"""Overload (docs/reliability.md "Load and overload"): beyond a listener's admission limit
(`max_requests_in_flight` requests worked on at once, plus `admission_wait_ms` of waiting for a slot) a request
is answered at once with the protocol's throttling error, never left to time out; Veil serves again as soon as
the load drops; and a waiting long poll does not count against the limit. The limit is set to one request by
the config file, with no wait, and many clients send durable messages at once: each send holds its slot until
its commit is synced, so refusals come within moments on any machine. Each refusal is counted in /metrics
(`veil_requests_total` with the protocol's throttling code).

No wall time is asserted here: that a refusal waits exactly `admission_wait_ms` is veil-http's admission test
on a paused clock (`a_request_beyond_the_limit_waits_the_admission_wait_then_is_refused`). What this suite
checks end to end is that a request beyond the limit gets the throttling error as an answer, where a server
that queued it for a slot would answer it with success once the load passed, or leave it to the client's read
timeout (an error that fails the test), and that parked long polls, counted by
`veil_queue_long_polls_waiting`, hold no slot.
"""

from __future__ import annotations

import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

import pytest
from azure.core.exceptions import HttpResponseError
from azure.storage.queue import QueueServiceClient
from botocore.exceptions import ClientError

from helpers import configured_server, make_client, wait_for_long_polls
from test_admin import scrape

IN_FLIGHT = 1
ADMISSION_WAIT_MS = 1
LOAD_SECONDS_MAX = 10
THREADS = 16
THROTTLED_MESSAGE = "The request was denied due to request throttling."


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    srv = configured_server(
        tmp_path_factory.mktemp("veil-overload"),
        f"[limits]\nmax_requests_in_flight = {IN_FLIGHT}\nadmission_wait_ms = {ADMISSION_WAIT_MS}\n",
    )
    yield srv
    assert srv.running(), f"veil died during the tests of this module\n{srv.log_tail()}"
    srv.stop_cleanly()


def under_load(call) -> list[str]:
    """Runs `call()` (a durable send, which holds its slot until its commit is on disk) from THREADS threads
    at once until some are throttled (or LOAD_SECONDS_MAX pass): `call` returns "sent" or the refusal's code.
    A slot is taken only by an authenticated request with its body read (test_slow_bodies.py), so the
    overload is made by many real requests, not by requests that hold a slot while sending nothing."""
    stop = threading.Event()
    deadline = time.monotonic() + LOAD_SECONDS_MAX

    def worker(_):
        outcomes = []
        while not stop.is_set() and time.monotonic() < deadline:
            outcome = call()
            outcomes.append(outcome)
            if outcome != "sent":
                stop.set()
        return outcomes

    with ThreadPoolExecutor(THREADS) as pool:
        return [outcome for outcomes in pool.map(worker, range(THREADS)) for outcome in outcomes]


def test_requests_beyond_the_admission_limit_get_request_throttled_at_once_not_a_timeout(server):
    sqs = make_client(server.endpoint, read_timeout=2)
    url = sqs.create_queue(QueueName=f"overload-{uuid.uuid4().hex[:8]}")["QueueUrl"]
    local = threading.local()

    def send():
        if not hasattr(local, "client"):  # one attempt: botocore would retry RequestThrottled
            local.client = make_client(server.endpoint, read_timeout=2)
        try:
            local.client.send_message(QueueUrl=url, MessageBody="m")
            return "sent"
        except ClientError as error:
            answer = error.response
            assert answer["Error"]["Message"] == THROTTLED_MESSAGE
            assert answer["ResponseMetadata"]["HTTPStatusCode"] == 400
            return answer["Error"]["Code"]

    outcomes = under_load(send)
    codes = set(outcomes)
    assert "RequestThrottled" in codes, f"{len(outcomes)} sends at {IN_FLIGHT} in flight, none throttled"
    assert codes <= {"sent", "RequestThrottled"}
    throttled = outcomes.count("RequestThrottled")
    counted = scrape(server)[
        ("veil_requests_total",
         frozenset({("protocol", "sqs"), ("operation", "SendMessage"), ("code", "RequestThrottled")}))]
    assert counted >= throttled, "the refusals are not counted in /metrics"
    # The load is gone: served again at once.
    sqs.send_message(QueueUrl=url, MessageBody="after")


def test_requests_beyond_the_admission_limit_get_azure_server_busy(server):
    service = QueueServiceClient.from_connection_string(server.azure_connection_string(), retry_total=0)
    queue = service.get_queue_client(f"overload-{uuid.uuid4().hex[:8]}")
    queue.create_queue()

    def put():
        try:
            queue.send_message("m")
            return "sent"
        except HttpResponseError as error:
            assert error.status_code == 503
            return error.error_code

    outcomes = under_load(put)
    codes = set(outcomes)
    assert "ServerBusy" in codes, f"{len(outcomes)} puts at {IN_FLIGHT} in flight, none refused"
    assert codes <= {"sent", "ServerBusy"}
    metrics = scrape(server)
    busy = sum(value for (name, labels), value in metrics.items()
               if name == "veil_requests_total" and ("protocol", "azure") in labels and ("code", "503") in labels)
    assert busy >= 1, "the refusal is not counted in /metrics"
    queue.send_message("after")


def test_waiting_long_polls_do_not_count_against_the_admission_limit(server):
    sqs = make_client(server.endpoint, read_timeout=10)
    url = sqs.create_queue(QueueName=f"overload-{uuid.uuid4().hex[:8]}")["QueueUrl"]
    received = []

    def long_poll():
        # Retried: the polls enter one at a time through the one slot, each giving it back as it parks. Waiting
        # 5 s: long enough that all of them are parked at once before the first one's wait ends.
        answer = make_client(server.endpoint, read_timeout=10, attempts=10).receive_message(
            QueueUrl=url, WaitTimeSeconds=5, VisibilityTimeout=30)
        received.extend(m["Body"] for m in answer.get("Messages", []))

    polls = [threading.Thread(target=long_poll) for _ in range(IN_FLIGHT + 2)]
    for poll in polls:
        poll.start()
    wait_for_long_polls(server, url, len(polls))  # every poll is parked, more of them than the limit
    sqs.send_message(QueueUrl=url, MessageBody="through")
    for poll in polls:
        poll.join(timeout=10)
    assert received == ["through"]
