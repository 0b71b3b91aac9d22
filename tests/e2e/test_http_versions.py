"""Every HTTP listener speaks HTTP/1.1 and HTTP/2 (docs/reliability.md "What a waiting connection costs"): the
server tells the version from a plain connection's first bytes (HTTP/2's connection preface, h2c with prior
knowledge) or from TLS's ALPN before hyper takes the connection, and waits for more when the first bytes are
only a part of the preface. Checked with curl, whose HTTP/2 is nghttp2's, and with raw sockets for
the byte-at-a-time cases.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import time

import pytest

from helpers import VeilServer
from test_tls import cert_dev

pytestmark = pytest.mark.skipif(shutil.which("curl") is None, reason="needs curl")


def curl_version(url: str, *options: str) -> str:
    """The HTTP version curl used for GET `url`, and the status: `2 200`."""
    done = subprocess.run(
        ["curl", "-s", "-o", "/dev/null", "-w", "%{http_version} %{http_code}", "--max-time", "10", *options, url],
        capture_output=True, text=True, timeout=20,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_a_plain_listener_answers_http1_and_http2_with_prior_knowledge(server):
    url = f"http://127.0.0.1:{server.admin_port}/healthz"
    assert curl_version(url, "--http1.1") == "1.1 200"
    assert curl_version(url, "--http2-prior-knowledge") == "2 200"


def test_the_sqs_listener_answers_http2_with_prior_knowledge(server):
    # Any answer from the SQS front-end shows the HTTP/2 connection was served: an unsigned GET gets its error.
    version, status = curl_version(f"http://127.0.0.1:{server.port}/", "--http2-prior-knowledge").split()
    assert version == "2"
    assert status.startswith("4"), status


def read_answer(sock: socket.socket) -> bytes:
    sock.settimeout(5)
    answer = b""
    while b"\r\n\r\n" not in answer:
        chunk = sock.recv(4096)
        if not chunk:
            break
        answer += chunk
    return answer


def test_a_request_whose_first_byte_could_begin_the_http2_preface_is_still_served_as_http1(server):
    # "P" is also the preface's first byte: the server cannot tell yet and reads on.
    with socket.create_connection(("127.0.0.1", server.admin_port)) as sock:
        sock.sendall(b"P")
        time.sleep(0.3)
        sock.sendall(b"OST /healthz HTTP/1.1\r\nhost: x\r\ncontent-length: 0\r\n\r\n")
        answer = read_answer(sock)
    assert answer.startswith(b"HTTP/1.1 "), answer[:80]


def test_an_http2_preface_sent_in_two_pieces_is_served_as_http2(server):
    preface = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
    empty_settings = b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"
    with socket.create_connection(("127.0.0.1", server.admin_port)) as sock:
        sock.sendall(preface[:10])
        time.sleep(0.3)
        sock.sendall(preface[10:] + empty_settings)
        sock.settimeout(5)
        frame_head = b""
        while len(frame_head) < 9:
            chunk = sock.recv(9 - len(frame_head))
            assert chunk, "closed before the server's first frame"
            frame_head += chunk
    assert frame_head[3] == 0x4, f"the server's first frame is not HTTP/2 SETTINGS: {frame_head!r}"


def test_a_client_that_sent_nothing_is_closed_when_the_server_stops(tmp_path):
    srv = VeilServer(tmp_path / "data", log_dir=tmp_path).start()
    try:
        silent = socket.create_connection(("127.0.0.1", srv.admin_port))
        silent.settimeout(10)
        started = time.monotonic()
        assert srv.stop() == 0
        assert time.monotonic() - started < 10, "the stop waited on a connection that never sent a byte"
        try:
            assert silent.recv(1) == b"", "the connection stayed open after the stop"
        except ConnectionResetError:
            pass  # closed too: the process ended with the socket open
        silent.close()
    finally:
        if srv.running():
            srv.stop()


def test_tls_serves_http2_by_alpn_and_http1_without_it(tmp_path):
    certs = tmp_path / "certs"
    cert_dev(certs)
    srv = VeilServer(tmp_path / "data", log_dir=tmp_path, extra_args=[
        "--tls-cert", str(certs / "cert.pem"), "--tls-key", str(certs / "key.pem"),
    ]).start()
    try:
        url = f"https://localhost:{srv.admin_port}/healthz"
        ca = ["--cacert", str(certs / "ca.pem")]
        assert curl_version(url, *ca, "--http2") == "2 200"
        assert curl_version(url, *ca, "--http1.1") == "1.1 200"
        assert curl_version(url, *ca, "--http2", "--no-alpn") == "1.1 200"
    finally:
        srv.stop_cleanly()
