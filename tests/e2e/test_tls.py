"""TLS on every listener (docs/security.md "TLS"): the development certificate of the real `veil cert dev`, the
official clients over https/TLS trusting its CA (boto3 `verify=`, the aws CLI's `--ca-bundle`, the Azure SDK's
`connection_verify`, the KubeMQ SDK's TLS options, requests to the admin endpoint), https queue URLs, plain HTTP
refused, the handshake timeout, and SIGHUP reloading the certificate without dropping open connections.
"""

from __future__ import annotations

import http.client
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import time
import uuid
from pathlib import Path

import boto3
import pytest
import requests
from botocore.config import Config

from helpers import AZURE_ACCOUNT, AZURE_KEY, VeilServer, veil_bin

# Handshake timeout of the module's server: short, so the stalled-handshake test stays quick.
HANDSHAKE_TIMEOUT_MS = 500


def cert_dev(out: Path, *extra: str) -> subprocess.CompletedProcess:
    done = subprocess.run([veil_bin(), "cert", "dev", "--out", str(out), *extra],
                          capture_output=True, text=True, timeout=20)
    assert done.returncode == 0, done.stderr
    return done


def leaf_der(cert_pem: Path) -> bytes:
    """The first certificate of a PEM chain, DER."""
    text = cert_pem.read_text()
    first = text[: text.index("-----END CERTIFICATE-----") + len("-----END CERTIFICATE-----")]
    return ssl.PEM_cert_to_DER_cert(first)


def served_der(port: int) -> bytes:
    """The leaf certificate a new connection to `port` is served."""
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    with socket.create_connection(("127.0.0.1", port), timeout=2) as raw:
        with ctx.wrap_socket(raw, server_hostname="localhost") as tls:
            return tls.getpeercert(binary_form=True)


@pytest.fixture(scope="module")
def certs(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("tls") / "veil-tls"
    cert_dev(out)
    return out


@pytest.fixture(scope="module")
def tls_server(certs, tmp_path_factory):
    base = tmp_path_factory.mktemp("veil-tls-server")
    config = base / "veil.toml"
    config.write_text(f"[limits]\ntls_handshake_timeout_ms = {HANDSHAKE_TIMEOUT_MS}\n")
    srv = VeilServer(base / "data", log_dir=base, extra_args=[
        "--tls-cert", str(certs / "cert.pem"), "--tls-key", str(certs / "key.pem"), "--config", str(config),
    ]).start()
    yield srv
    assert srv.running(), f"veil died during the tests of this module\n{srv.log_tail()}"
    srv.stop_cleanly()


def https_sqs(srv: VeilServer, ca: Path):
    return boto3.client(
        "sqs", endpoint_url=f"https://localhost:{srv.port}", region_name="us-east-1",
        aws_access_key_id="test", aws_secret_access_key="test", verify=str(ca),
        config=Config(retries={"total_max_attempts": 1, "mode": "standard"}),
    )


def test_cert_dev_writes_a_ca_a_chain_and_a_private_key_readable_by_its_owner_only(certs):
    assert {p.name for p in certs.iterdir()} >= {"ca.pem", "cert.pem", "key.pem"}
    assert (certs / "key.pem").stat().st_mode & 0o777 == 0o600
    assert (certs / "cert.pem").read_text().count("BEGIN CERTIFICATE") == 2
    # The leaf covers localhost, 127.0.0.1 and ::1: Python's verifier accepts it for each under the CA.
    ctx = ssl.create_default_context(cafile=str(certs / "ca.pem"))
    decoded = ssl._ssl._test_decode_cert(str(certs / "cert.pem"))  # the leaf: the first of the chain
    names = {value for _, value in decoded["subjectAltName"]}
    assert {"localhost", "127.0.0.1"} <= names and any(n.startswith("0:0:0:0") or n == "::1" for n in names)
    assert ctx.cert_store_stats()["x509_ca"] == 1


def test_cert_dev_prints_how_to_trust_it_and_refuses_to_overwrite_without_force(tmp_path):
    out = tmp_path / "c"
    printed = cert_dev(out, "--host", "veil.example").stdout
    for hint in ("--tls-cert", "verify=", "AWS_CA_BUNDLE", "connection_verify", "tls_ca_file", "--cacert"):
        assert hint in printed, hint
    again = subprocess.run([veil_bin(), "cert", "dev", "--out", str(out)], capture_output=True, text=True)
    assert again.returncode != 0 and "--force" in again.stderr
    cert_dev(out, "--force")


def test_boto3_over_https_with_the_dev_ca_gets_https_queue_urls(tls_server, certs):
    sqs = https_sqs(tls_server, certs / "ca.pem")
    name = f"tls-{uuid.uuid4().hex[:8]}"
    url = sqs.create_queue(QueueName=name)["QueueUrl"]
    assert url.startswith("https://"), url
    sqs.send_message(QueueUrl=url, MessageBody="over tls")
    got = sqs.receive_message(QueueUrl=url, WaitTimeSeconds=1)["Messages"]
    assert [m["Body"] for m in got] == ["over tls"]


def test_boto3_without_the_ca_refuses_the_dev_certificate(tls_server):
    sqs = boto3.client("sqs", endpoint_url=f"https://localhost:{tls_server.port}", region_name="us-east-1",
                       aws_access_key_id="test", aws_secret_access_key="test",
                       config=Config(retries={"total_max_attempts": 1, "mode": "standard"}))
    from botocore.exceptions import SSLError
    with pytest.raises(SSLError):
        sqs.list_queues()


def test_aws_cli_with_ca_bundle_talks_https(tls_server, certs, tmp_path):
    beside = Path(sys.executable).parent / "aws"
    exe = str(beside) if beside.exists() else shutil.which("aws")
    assert exe, "the aws CLI is not installed"
    env = {"PATH": os.environ.get("PATH", ""), "HOME": str(tmp_path), "AWS_ACCESS_KEY_ID": "test",
           "AWS_SECRET_ACCESS_KEY": "test", "AWS_DEFAULT_REGION": "us-east-1", "AWS_MAX_ATTEMPTS": "1",
           "AWS_CONFIG_FILE": str(tmp_path / "config"), "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "creds"),
           "AWS_PAGER": ""}
    name = f"cli-tls-{uuid.uuid4().hex[:8]}"
    done = subprocess.run([exe, "sqs", "create-queue", "--queue-name", name, "--output", "json",
                           "--endpoint-url", f"https://localhost:{tls_server.port}",
                           "--ca-bundle", str(certs / "ca.pem")],
                          env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "https://" in done.stdout and name in done.stdout


def test_azure_sdk_over_https_with_connection_verify(tls_server, certs):
    from azure.storage.queue import QueueServiceClient

    conn = (f"DefaultEndpointsProtocol=https;AccountName={AZURE_ACCOUNT};AccountKey={AZURE_KEY};"
            f"QueueEndpoint=https://127.0.0.1:{tls_server.azure_port}/{AZURE_ACCOUNT};")
    service = QueueServiceClient.from_connection_string(conn, connection_verify=str(certs / "ca.pem"),
                                                        retry_total=0)
    name = f"tls{uuid.uuid4().hex[:8]}"
    queue = service.create_queue(name)
    queue.send_message("over tls")
    [message] = list(queue.receive_messages())
    assert message.content == "over tls"


def test_kubemq_sdk_over_tls_with_the_ca_file(tls_server, certs):
    from kubemq.queues import Client, QueueMessage

    client = Client(address=f"localhost:{tls_server.kubemq_port}", client_id="tls-e2e",
                    tls=True, tls_ca_file=str(certs / "ca.pem"))
    try:
        channel = f"tls-{uuid.uuid4().hex[:8]}"
        sent = client.send_queue_message(QueueMessage(channel=channel, body=b"over tls"))
        assert not sent.is_error, sent.error
        got = client.receive_queue_messages(channel=channel, max_messages=1, wait_timeout_in_seconds=1,
                                            auto_ack=True)
        assert not got.is_error, got.error
        assert [m.body for m in got.messages] == [b"over tls"]
    finally:
        client.close()


def test_admin_endpoint_over_https(tls_server, certs):
    resp = requests.get(f"https://localhost:{tls_server.admin_port}/healthz", verify=str(certs / "ca.pem"),
                        timeout=2)
    assert resp.status_code == 200


def cli_hint(printed: str) -> list[str]:
    """The `veil CLI:` line `veil cert dev` printed, as the arguments after `veil`."""
    line = next(line for line in printed.splitlines() if line.strip().startswith("veil CLI:"))
    words = line.split("veil CLI:", 1)[1].split()
    assert words[0] == "veil", line
    return words[1:]


def test_the_cli_line_cert_dev_prints_works_against_a_tls_server(tls_server, certs, tmp_path):
    out = tmp_path / "again"
    printed = cert_dev(out).stdout
    args = cli_hint(printed)
    # The hint names localhost:9325 and the CA it just wrote; point it at this server, trusting this
    # server's CA (the same command, another directory and port).
    args = [a.replace(str(out / "ca.pem"), str(certs / "ca.pem"))
             .replace("localhost:9325", f"localhost:{tls_server.admin_port}") for a in args]
    assert "--ca-file" in args and any(a.startswith("https://") for a in args), args
    done = subprocess.run([veil_bin(), *args], capture_output=True, text=True, timeout=20)
    assert done.returncode == 0, done.stderr
    name = f"cli-tls-{uuid.uuid4().hex[:8]}"
    endpoint = f"https://localhost:{tls_server.admin_port}"
    created = subprocess.run([veil_bin(), "--endpoint", endpoint, "--ca-file", str(certs / "ca.pem"),
                              "queues", "create", name], capture_output=True, text=True, timeout=20)
    assert created.returncode == 0, created.stderr
    listed = subprocess.run([veil_bin(), "--endpoint", endpoint, "--output", "json", "queues", "list"],
                            env={**os.environ, "VEIL_CA_FILE": str(certs / "ca.pem")},
                            capture_output=True, text=True, timeout=20)
    assert listed.returncode == 0, listed.stderr
    assert name in listed.stdout


def test_the_cli_refuses_an_untrusted_certificate_and_says_to_pass_ca_file(tls_server):
    env = {k: v for k, v in os.environ.items() if k not in ("VEIL_CA_FILE",)}
    done = subprocess.run([veil_bin(), "--endpoint", f"https://localhost:{tls_server.admin_port}", "queues", "list"],
                          env=env, capture_output=True, text=True, timeout=20)
    assert done.returncode == 3, (done.returncode, done.stderr)
    assert "--ca-file" in done.stderr and "certificate" in done.stderr, done.stderr


def test_the_cli_over_plain_http_to_a_tls_endpoint_says_to_use_https(tls_server):
    done = subprocess.run([veil_bin(), "--endpoint", f"http://127.0.0.1:{tls_server.admin_port}", "queues", "list"],
                          capture_output=True, text=True, timeout=20)
    assert done.returncode == 3, (done.returncode, done.stderr)
    assert "it serves TLS: use https:// and --ca-file" in done.stderr, done.stderr


def test_a_ca_file_without_a_certificate_is_a_usage_error(tls_server, tmp_path):
    empty = tmp_path / "empty.pem"
    empty.write_text("not a certificate\n")
    done = subprocess.run([veil_bin(), "--endpoint", f"https://localhost:{tls_server.admin_port}",
                           "--ca-file", str(empty), "queues", "list"], capture_output=True, text=True, timeout=20)
    assert done.returncode == 2, (done.returncode, done.stderr)
    assert "no PEM certificate" in done.stderr, done.stderr


@pytest.mark.parametrize("listener", ["port", "azure_port", "admin_port"])
def test_plain_http_to_a_tls_listener_fails_cleanly_and_the_listener_keeps_serving(tls_server, certs, listener):
    port = getattr(tls_server, listener)
    with pytest.raises(requests.exceptions.ConnectionError):
        requests.get(f"http://127.0.0.1:{port}/", timeout=2)
    assert served_der(port) == leaf_der(certs / "cert.pem")


def test_a_client_that_never_completes_the_handshake_is_disconnected(tls_server):
    with socket.create_connection(("127.0.0.1", tls_server.port), timeout=3) as raw:
        started = time.monotonic()
        assert raw.recv(1) == b"", "the server closes the connection without answering"
        assert time.monotonic() - started < HANDSHAKE_TIMEOUT_MS / 1000 + 1.0


def test_sighup_reloads_the_certificate_while_an_open_connection_keeps_working(tmp_path):
    live = tmp_path / "live"
    cert_dev(live)
    srv = VeilServer(tmp_path / "data", log_dir=tmp_path, extra_args=[
        "--tls-cert", str(live / "cert.pem"), "--tls-key", str(live / "key.pem")]).start()
    try:
        old_ca = ssl.create_default_context(cafile=str(live / "ca.pem"))
        kept = http.client.HTTPSConnection("localhost", srv.admin_port, context=old_ca, timeout=2)
        kept.request("GET", "/healthz")
        assert kept.getresponse().read().strip() == b"ok"
        sock = kept.sock
        old = leaf_der(live / "cert.pem")
        assert sock.getpeercert(binary_form=True) == old

        # A new certificate replaces the files (each atomically), then SIGHUP.
        fresh = tmp_path / "fresh"
        cert_dev(fresh)
        for name in ("cert.pem", "key.pem", "ca.pem"):
            shutil.copy(fresh / name, live / f".{name}.new")
            os.replace(live / f".{name}.new", live / name)
        srv.proc.send_signal(signal.SIGHUP)
        new = leaf_der(fresh / "cert.pem")
        deadline = time.monotonic() + 2
        while served_der(srv.admin_port) != new:
            assert time.monotonic() < deadline, f"the new certificate was not served\n{srv.log_tail()}"
            time.sleep(0.05)
        for port in (srv.port, srv.azure_port, srv.kubemq_port):
            assert served_der(port) == new

        # The connection opened before the reload is the same one and still answers, on its old certificate.
        kept.request("GET", "/healthz")
        assert kept.getresponse().read().strip() == b"ok"
        assert kept.sock is sock and sock.getpeercert(binary_form=True) == old
        kept.close()
        # A client trusting the new CA verifies the new certificate.
        new_ca = str(fresh / "ca.pem")
        assert requests.get(f"https://localhost:{srv.admin_port}/healthz", verify=new_ca, timeout=2).ok

        # A bad file on reload keeps the certificate in force and says so.
        (live / "cert.pem").write_text("not a certificate\n")
        srv.proc.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + 2
        while "NOT reloaded" not in srv.log_path.read_text():
            assert time.monotonic() < deadline, srv.log_tail()
            time.sleep(0.05)
        assert served_der(srv.admin_port) == new
        assert srv.running()
    finally:
        srv.stop_cleanly()
