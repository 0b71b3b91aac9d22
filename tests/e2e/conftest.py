"""Pytest fixtures for Veil's end-to-end suite.

`server` starts the real binary (env VEIL_BIN, default <repo>/target/release/veil) once per test module on
free ports (SQS and Azure Queue Storage) with a temporary data dir, waits until the ports accept, and at the
end SIGTERMs it and asserts it exited with code 0. `make_server` starts extra servers (own data dir or a given one, extra flags) and kills any
left running. `sqs` is a boto3 client for us-east-1 with test credentials; `queue_name` is unique per test and
`queue_url` a fresh standard queue of that name. `azure_conn` is the development account's connection
string for the module's server, `azure_service` a QueueServiceClient on it and `azure_queue` a fresh
QueueClient (its queue created) with a unique Azure-legal name.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from helpers import VeilServer, azure_name, kubemq_client, make_client, veil_bin


@pytest.fixture(scope="session")
def veil_path() -> str:
    path = veil_bin()
    if not (os.path.isfile(path) and os.access(path, os.X_OK)):
        pytest.fail(
            f"veil binary not found at {path}: build it with `cargo build --release --bin veil` "
            "or point VEIL_BIN at it (./scripts/test does both)",
            pytrace=False,
        )
    return path


@pytest.fixture(scope="module")
def server(veil_path, tmp_path_factory):
    base = tmp_path_factory.mktemp("veil")
    srv = VeilServer(base / "data", log_dir=base).start()
    yield srv
    assert srv.running(), f"veil died during the tests of this module\n{srv.log_tail()}"
    srv.stop_cleanly()
    # A module's server outlives tmp_path's cleanup; its data (a preallocated log segment) goes once it stopped
    # cleanly. A server that died keeps its directory: the assertion above failed first.
    shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def make_server(veil_path, tmp_path):
    """make_server(data_dir=None, port=None, extra_args=()) -> started VeilServer."""
    started: list[VeilServer] = []

    def make(data_dir: Path | None = None, port: int | None = None, extra_args=(),
             azure_port: int | None = None) -> VeilServer:
        d = Path(data_dir) if data_dir else tmp_path / f"data-{len(started)}"
        srv = VeilServer(d, port=port, extra_args=extra_args, log_dir=tmp_path, azure_port=azure_port).start()
        started.append(srv)
        return srv

    yield make
    for srv in started:
        srv.kill()


@pytest.fixture(scope="module")
def endpoint(server) -> str:
    return server.endpoint


@pytest.fixture(scope="module")
def sqs(endpoint):
    return make_client(endpoint)


@pytest.fixture
def queue_name(request) -> str:
    base = re.sub(r"[^A-Za-z0-9_-]", "-", request.node.name.removeprefix("test_"))[:50]
    return f"{base}-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def queue_url(sqs, queue_name) -> str:
    return sqs.create_queue(QueueName=queue_name)["QueueUrl"]


@pytest.fixture
def new_queue(sqs, queue_name):
    """new_queue(suffix, **attributes) -> URL of a fresh queue named <queue_name>-<suffix>."""

    def make(suffix: str, **attributes) -> str:
        attrs = {k: str(v) for k, v in attributes.items()}
        return sqs.create_queue(QueueName=f"{queue_name}-{suffix}", Attributes=attrs)["QueueUrl"]

    return make


@pytest.fixture(scope="module")
def azure_conn(server) -> str:
    return server.azure_connection_string()


@pytest.fixture(scope="module")
def azure_service(azure_conn):
    from azure.storage.queue import QueueServiceClient

    return QueueServiceClient.from_connection_string(azure_conn)


@pytest.fixture
def azure_queue_name(request) -> str:
    return azure_name(request.node.name.removeprefix("test_"))


@pytest.fixture
def azure_queue(azure_service, azure_queue_name):
    client = azure_service.get_queue_client(azure_queue_name)
    client.create_queue()
    return client


@pytest.fixture(scope="module")
def kmq(server):
    """One KubeMQ SDK client per test module, closed after it."""
    client = kubemq_client(server)
    yield client
    client.close()


@pytest.fixture(scope="module")
def aws(endpoint, tmp_path_factory):
    """The aws CLI (installed in the test venv) against this module's server: aws("create-queue", ...) runs
    `aws sqs create-queue ...` and returns its parsed JSON output, or with check=False the CompletedProcess."""
    beside = Path(sys.executable).parent / "aws"
    exe = str(beside) if beside.exists() else shutil.which("aws")
    if not exe:
        pytest.fail("the aws CLI is not installed: pip install -r tests/requirements.txt", pytrace=False)
    home = tmp_path_factory.mktemp("awscli-home")
    env = {
        "PATH": os.environ.get("PATH", ""),
        "HOME": str(home),
        "AWS_ACCESS_KEY_ID": "test",
        "AWS_SECRET_ACCESS_KEY": "test",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_CONFIG_FILE": str(home / "config"),
        "AWS_SHARED_CREDENTIALS_FILE": str(home / "credentials"),
        "AWS_MAX_ATTEMPTS": "1",
        "AWS_PAGER": "",
    }

    def run(*args, check=True):
        cmd = [exe, "--endpoint-url", endpoint, "--output", "json", "sqs", *args]
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
        if check:
            assert proc.returncode == 0, f"{' '.join(cmd)} exited {proc.returncode}\nstderr: {proc.stderr}"
            return json.loads(proc.stdout) if proc.stdout.strip() else {}
        return proc

    return run
