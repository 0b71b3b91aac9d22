"""Limits against abuse (docs/security.md "Limits against abuse"): the per-connection request-rate limit answered
with each protocol's throttling error (SQS `RequestThrottled` in JSON and Query, Azure 503 `ServerBusy`, gRPC
`RESOURCE_EXHAUSTED`), the slow-client timeouts (a half-sent header, a stalled body) that free the connection
while others are served, and the connection limit. Timeouts are shortened by the config file.
"""

from __future__ import annotations

import socket
import time

import grpc
import pytest
import requests
from azure.core.exceptions import HttpResponseError
from azure.storage.queue import QueueServiceClient
from botocore.exceptions import ClientError

from helpers import VeilServer, make_client, strip_ns

BURST = 3
HEADER_TIMEOUT_MS = 500
BODY_TIMEOUT_MS = 500
ADMIN_MAX_CONNECTIONS = 3
THROTTLED_MESSAGE = "The request was denied due to request throttling."


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    base = tmp_path_factory.mktemp("veil-limits")
    config = base / "veil.toml"
    config.write_text(
        "[limits]\n"
        f"header_read_timeout_ms = {HEADER_TIMEOUT_MS}\n"
        f"body_read_timeout_ms = {BODY_TIMEOUT_MS}\n"
        # One request a second after a burst of three: a quick loop is throttled at its fourth request.
        f"request_rate = 1.0\nrequest_burst = {BURST}\n"
        "[limits.admin]\n"
        f"max_connections = {ADMIN_MAX_CONNECTIONS}\n"
        "header_read_timeout_ms = 5000\n"
        "request_rate = 0\n"
    )
    # SigV4 off: these tests send raw Query requests in bursts over one connection, and what they check (the
    # limits, which act before authentication) is the same either way; test_sqs_auth.py covers signatures.
    srv = VeilServer(base / "data", log_dir=base,
                     extra_args=["--config", str(config), "--sqs-auth", "off"]).start()
    yield srv
    assert srv.running(), f"veil died during the tests of this module\n{srv.log_tail()}"
    srv.stop_cleanly()


def test_a_burst_over_the_rate_gets_sqs_request_throttled_in_json(server):
    sqs = make_client(server.endpoint)  # one attempt: botocore would retry RequestThrottled
    for _ in range(BURST):
        sqs.list_queues()
    with pytest.raises(ClientError) as caught:
        for _ in range(BURST):
            sqs.list_queues()
    error = caught.value.response
    assert error["Error"]["Code"] == "RequestThrottled"
    assert error["Error"]["Message"] == THROTTLED_MESSAGE
    assert error["ResponseMetadata"]["HTTPStatusCode"] == 400


def test_a_burst_over_the_rate_gets_sqs_request_throttled_in_query(server):
    with requests.Session() as session:
        answers = [session.post(server.endpoint + "/", data={"Action": "ListQueues"}, timeout=2)
                   for _ in range(BURST + 2)]
    assert [a.status_code for a in answers[:BURST]] == [200] * BURST
    throttled = answers[-1]
    assert throttled.status_code == 400
    error = strip_ns(__import__("xml.etree.ElementTree", fromlist=["x"]).fromstring(throttled.content))
    assert error.findtext("Error/Code") == "RequestThrottled"
    assert error.findtext("Error/Type") == "Sender"
    assert error.findtext("Error/Message") == THROTTLED_MESSAGE


def test_the_rate_limit_is_per_connection(server):
    with requests.Session() as first:
        for _ in range(BURST + 1):
            last = first.post(server.endpoint + "/", data={"Action": "ListQueues"}, timeout=2)
        assert last.status_code == 400
        with requests.Session() as second:
            assert second.post(server.endpoint + "/", data={"Action": "ListQueues"}, timeout=2).ok


def test_a_burst_over_the_rate_gets_azure_server_busy(server):
    service = QueueServiceClient.from_connection_string(server.azure_connection_string(), retry_total=0)
    for _ in range(BURST):
        service.get_service_properties()
    with pytest.raises(HttpResponseError) as caught:
        for _ in range(BURST):
            service.get_service_properties()
    assert caught.value.status_code == 503
    assert caught.value.error_code == "ServerBusy"
    assert "The server is currently unable to receive requests. Please retry your request." in str(caught.value)


def test_a_burst_over_the_rate_gets_grpc_resource_exhausted(server):
    with grpc.insecure_channel(server.kubemq_address) as channel:
        ping = channel.unary_unary("/kubemq.kubemq/Ping", request_serializer=lambda _: b"",
                                   response_deserializer=lambda raw: raw)
        for _ in range(BURST):
            ping(None, timeout=2)
        with pytest.raises(grpc.RpcError) as caught:
            for _ in range(BURST):
                ping(None, timeout=2)
    assert caught.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED


def closed_within(sock: socket.socket, seconds: float) -> float:
    """Reads until the server closes `sock`; returns how long that took."""
    started = time.monotonic()
    sock.settimeout(seconds)
    try:
        while sock.recv(4096):
            pass
    except ConnectionResetError:
        pass  # closed with bytes of ours unread: a reset, not a FIN
    return time.monotonic() - started


@pytest.mark.parametrize("listener", ["port", "azure_port"])
def test_a_client_trickling_its_header_is_disconnected_while_others_are_served(server, listener):
    port = getattr(server, listener)
    with socket.create_connection(("127.0.0.1", port), timeout=2) as slow:
        slow.sendall(b"POST / HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-")
        # Meanwhile another client is served at once.
        started = time.monotonic()
        assert requests.get(f"http://127.0.0.1:{server.port}/?Action=ListQueues", timeout=2).status_code == 200
        assert time.monotonic() - started < 0.4
        assert closed_within(slow, 2.0) < 2.0


@pytest.mark.parametrize(("listener", "first_bytes"), [
    ("port", b""), ("azure_port", b""), ("kubemq_port", b""),
    ("port", b"PRI * HTTP/2.0\r\n"), ("azure_port", b"PRI * HTTP/2.0\r\n"),
], ids=["sqs-nothing", "azure-nothing", "kubemq-nothing", "sqs-half-h2-preface", "azure-half-h2-preface"])
def test_a_connection_that_sends_no_request_is_closed_after_the_header_read_timeout(server, listener, first_bytes):
    # Neither HTTP/2 (waiting for its preface) nor the HTTP listeners' version peek has a timer of its own:
    # without the first-bytes deadline a client could hold one of a listener's max_connections slots for ever
    # by connecting and sending nothing. (KubeMQ's HTTP/2 reads a partial preface, so the deadline is met.)
    with socket.create_connection(("127.0.0.1", getattr(server, listener)), timeout=2) as silent:
        silent.sendall(first_bytes)
        assert closed_within(silent, 3.0) < 3.0


def test_a_client_stalling_its_body_gets_an_error_after_the_body_timeout(server):
    with socket.create_connection(("127.0.0.1", server.port), timeout=2) as slow:
        slow.sendall(b"POST / HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/x-www-form-urlencoded\r\n"
                     b"Content-Length: 100\r\n\r\nAction=List")
        started = time.monotonic()
        slow.settimeout(2.0)
        answer = slow.recv(4096)
        assert time.monotonic() - started < 2.0
        assert answer.startswith(b"HTTP/1.1 400"), answer


def refused_connections(server, listener: str) -> float:
    text = requests.get(f"{server.admin_endpoint}/metrics", timeout=2).text
    line = next(line for line in text.splitlines()
                if line.startswith(f'veil_listener_refused_connections_total{{listener="{listener}"}}'))
    return float(line.rsplit(" ", 1)[1])


def healthz_over(sock: socket.socket) -> bytes:
    """Asks /healthz over `sock` (kept open: HTTP/1.1 keep-alive); the answer's first bytes, or b"" once the
    server closed it."""
    sock.settimeout(2)
    try:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        return sock.recv(4096)
    except OSError:
        return b""


def test_a_connection_beyond_the_maximum_is_refused_and_the_others_keep_working(server):
    refused_before = refused_connections(server, "admin")
    logged_before = server.log_path.read_text(errors="replace").count("connection refused: too many connections")
    # Every held connection is served before the next opens; one refused while the scrape's connection still
    # held its slot is opened again (and its refusal counted).
    held, early_refusals = [], 0
    while len(held) < ADMIN_MAX_CONNECTIONS:
        sock = socket.create_connection(("127.0.0.1", server.admin_port), timeout=2)
        if healthz_over(sock).startswith(b"HTTP/1.1 200"):
            held.append(sock)
        else:
            sock.close()
            early_refusals += 1
            assert early_refusals < 20, "the admin listener kept refusing below its maximum"
            time.sleep(0.05)
    try:
        for _ in range(3):
            with socket.create_connection(("127.0.0.1", server.admin_port), timeout=2) as extra:
                assert closed_within(extra, 1.0) < 1.0
        assert healthz_over(held[0]).startswith(b"HTTP/1.1 200"), "a held connection stopped being served"
    finally:
        for sock in held:
            sock.close()
    # The slots are free again once those connections closed (until the server saw them close, a connection
    # is still refused, and counted).
    deadline = time.monotonic() + 2
    late_refusals = 0
    while True:
        try:
            if requests.get(f"{server.admin_endpoint}/healthz", timeout=1).ok:
                break
        except requests.exceptions.ConnectionError:
            late_refusals += 1
        assert time.monotonic() < deadline
        time.sleep(0.05)
    # Each refusal is counted; a run of them is logged once (a flood of connections cannot flood the log).
    assert refused_connections(server, "admin") == refused_before + early_refusals + 3 + late_refusals
    log = server.log_path.read_text(errors="replace")
    assert log.count("connection refused: too many connections") <= logged_before + 2 + early_refusals, log[-2000:]
    assert log.count("connection refused: too many connections") >= logged_before + 1, log[-2000:]
    assert "accepting connections again below the connection cap" in log


MAX_HEADER_BYTES = 65536  # the default, which this module's config leaves alone


def send_head(port: int, header_value_bytes: int) -> bytes:
    """Sends one HTTP/1.1 request whose head carries an `x-pad` header of `header_value_bytes`, all at once,
    and returns the start of the answer."""
    head = (b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nx-pad: " + b"a" * header_value_bytes
            + b"\r\nConnection: close\r\n\r\n")
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(head)
        sock.settimeout(5)
        answer = b""
        try:
            while len(answer) < 12:
                piece = sock.recv(4096)
                if not piece:
                    break
                answer += piece
        except ConnectionResetError:
            pass
    return answer


@pytest.mark.parametrize("listener", ["port", "azure_port", "admin_port"])
def test_a_request_head_over_max_header_bytes_gets_431_however_fast_it_arrives(server, listener):
    # The probe's head: 114,618 bytes sent in one write, which hyper's read buffer took whole.
    answer = send_head(getattr(server, listener), 114_618 - 80)
    assert answer.startswith(b"HTTP/1.1 431"), answer[:100]
    # One just under the limit is served (here: whatever the listener answers to GET /healthz, not a 431).
    under = send_head(getattr(server, listener), MAX_HEADER_BYTES - 200)
    assert under.startswith(b"HTTP/1.1 ") and not under.startswith(b"HTTP/1.1 431"), under[:100]
