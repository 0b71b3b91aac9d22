"""The container image (Containerfile, scripts/package-image) as a user runs it.

The image is built from the binary under test (VEIL_BIN, when it is the static one ./scripts/test builds; else
scripts/package-image builds that), run with the engine scripts/container-runtime finds (docker with a daemon,
else podman), its four ports published on 127.0.0.1 at ports the engine picks and its data in a named volume.
The clients are the real SDKs (boto3, azure-storage-queue, kubemq) on the host, reaching the container through
the engine's port forwarding. The test skips, saying why, when no engine can run containers here.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
import requests
from kubemq.queues import QueueMessage

from helpers import (ACCOUNT, REPO, azure_connection_string, first_block, kubemq_client, kubemq_receive, lines_of,
                     make_client, receive_one, veil_bin, wait_for_default_ports)

IMAGE = "localhost/veil:latest"
# The user the Containerfile names: numeric, since a FROM scratch image has no /etc/passwd.
IMAGE_UID = 10001
PORTS = {"sqs": 9324, "azure": 10001, "kubemq": 50000, "admin": 9325}
# A container start includes opening the store; far more than it takes, far less than a hung test.
READY_TIMEOUT_S = 60
ENGINE_COMMAND_TIMEOUT_S = 180


@pytest.fixture(scope="module")
def engine() -> str:
    found = subprocess.run([str(REPO / "scripts" / "container-runtime")], capture_output=True, text=True,
                           timeout=900)
    if found.returncode == 3:
        pytest.skip(f"no container engine can run containers here: {found.stderr.strip()}")
    assert found.returncode == 0, found.stderr
    return found.stdout.strip()


def is_static(path: str) -> bool:
    """A binary without a program interpreter (ld.so) runs in a FROM scratch image."""
    headers = subprocess.run(["readelf", "-l", path], capture_output=True, text=True, check=True).stdout
    return "Requesting program interpreter" not in headers


@pytest.fixture(scope="module")
def image(engine) -> str:
    command = [str(REPO / "scripts" / "package-image")]
    if is_static(veil_bin()):
        command += ["--binary", veil_bin()]
    built = subprocess.run(command, capture_output=True, text=True, timeout=1800)
    assert built.returncode == 0, built.stderr
    version = subprocess.run([veil_bin(), "--version"], capture_output=True, text=True,
                             check=True).stdout.split()[1]
    assert built.stdout.split() == [IMAGE, f"localhost/veil:{version}"]
    return IMAGE


def ready_within(url: str, timeout_s: float) -> bool:
    """Whether `url` answers 200 within `timeout_s` (asked every 200 ms)."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            if requests.get(url, timeout=2).status_code == 200:
                return True
        except requests.RequestException:
            pass
        if time.monotonic() > deadline:
            return False
        time.sleep(0.2)


class Container:
    """One `veil` container of `image` with its data in `volume`; removed (not the volume) by `remove`."""

    def __init__(self, engine: str, image: str, volume: str, env: dict | None = None):
        self.engine = engine
        self.volume = volume
        self.name = f"veil-e2e-{uuid.uuid4().hex[:10]}"
        command = [engine, "run", "-d", "--name", self.name, "-v", f"{volume}:/data"]
        for port in PORTS.values():
            command += ["-p", f"127.0.0.1::{port}"]
        for key, value in (env or {}).items():
            command += ["-e", f"{key}={value}"]
        self.run(*command[1:], image)
        self.ports: dict[str, int] = {}
        self.wait_ready()

    def run(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        done = subprocess.run([self.engine, *args], capture_output=True, text=True,
                              timeout=ENGINE_COMMAND_TIMEOUT_S)
        if check:
            assert done.returncode == 0, f"{self.engine} {' '.join(args)}: {done.stderr}"
        return done

    def inspect(self, template: str) -> str:
        return self.run("inspect", "-f", template, self.name).stdout.strip()

    def read_ports(self) -> None:
        """The host ports the engine picked (a restarted container may get new ones)."""
        for protocol, port in PORTS.items():
            mapped = self.run("port", self.name, f"{port}/tcp").stdout.split()[0]
            self.ports[protocol] = int(mapped.rsplit(":", 1)[1])

    def wait_ready(self) -> None:
        """As a testcontainers wait strategy does: until /readyz on the published admin port answers 200."""
        self.read_ports()
        if not ready_within(self.url("admin", "/readyz"), READY_TIMEOUT_S):
            logs = self.run("logs", self.name, check=False)
            pytest.fail(f"{self.name} not ready after {READY_TIMEOUT_S} s: {logs.stdout}{logs.stderr}")

    def url(self, protocol: str, path: str = "") -> str:
        return f"http://127.0.0.1:{self.ports[protocol]}{path}"

    def sqs(self):
        return make_client(self.url("sqs"))

    def azure(self):
        from azure.storage.queue import QueueServiceClient

        return QueueServiceClient.from_connection_string(azure_connection_string(self.ports["azure"]))

    @property
    def kubemq_address(self) -> str:
        return f"127.0.0.1:{self.ports['kubemq']}"

    def kubemq(self):
        return kubemq_client(self, client_id="veil-image-e2e")

    def remove(self) -> None:
        self.run("rm", "-f", self.name, check=False)


@pytest.fixture
def containers(engine, image):
    """Starts containers of the image on named volumes; removes both after the test."""
    started: list[Container] = []
    volumes: list[str] = []

    def start(volume: str | None = None, env: dict | None = None) -> Container:
        if volume is None:
            volume = f"veil-e2e-{uuid.uuid4().hex[:10]}"
            volumes.append(volume)
        container = Container(engine, image, volume, env)
        started.append(container)
        return container

    yield start
    for container in started:
        container.remove()
    for volume in volumes:
        subprocess.run([engine, "volume", "rm", "-f", volume], capture_output=True, timeout=60)


def process_ids(container: Container) -> tuple[list[int], list[int]]:
    """The real, effective, saved and filesystem user and group ids of the container's main process."""
    pid = container.inspect("{{.State.Pid}}")
    with open(f"/proc/{pid}/status") as status:
        fields = dict(line.split(":", 1) for line in status if ":" in line)
    return [int(i) for i in fields["Uid"].split()], [int(i) for i in fields["Gid"].split()]


def test_messages_sent_over_every_protocol_survive_a_kill_and_a_new_container_on_the_same_volume(containers):
    first = containers()
    sqs = first.sqs()
    url = sqs.create_queue(QueueName="orders")["QueueUrl"]
    # Built from the Host the client sent: the address it reached, not the container's own.
    assert url == f"{first.url('sqs')}/{ACCOUNT}/orders"
    sqs.send_message(QueueUrl=url, MessageBody="via-sqs")
    invoices = first.azure().get_queue_client("invoices")
    invoices.create_queue()
    invoices.send_message("via-azure")
    sent = first.kubemq().send_queue_message(QueueMessage(channel="events", body=b"via-kubemq"))
    assert not sent.is_error, sent.error

    # kill -9 loses no acknowledged message; a new container on the same volume serves them.
    first.run("kill", "--signal", "KILL", first.name)
    first.remove()
    second = containers(volume=first.volume)
    sqs = second.sqs()
    assert receive_one(sqs, sqs.get_queue_url(QueueName="orders")["QueueUrl"])["Body"] == "via-sqs"
    assert [m.content for m in second.azure().get_queue_client("invoices").receive_messages()] == ["via-azure"]
    response = kubemq_receive(second.kubemq(), "events")
    assert [m.body for m in response.messages] == [b"via-kubemq"]


def test_veil_runs_as_a_non_root_user_and_stops_cleanly_on_sigterm(containers, image, engine):
    container = containers()
    uids, gids = process_ids(container)
    assert uids == [IMAGE_UID] * 4 and gids == [IMAGE_UID] * 4, (uids, gids)
    user = subprocess.run([engine, "image", "inspect", "-f", "{{.Config.User}}", image], capture_output=True,
                          text=True, check=True).stdout.strip()
    assert user == f"{IMAGE_UID}:{IMAGE_UID}"
    # `docker stop` sends SIGTERM to PID 1, which is veil: a graceful stop, exit status 0.
    container.run("stop", "-t", "20", container.name)
    assert container.inspect("{{.State.ExitCode}}") == "0"


def test_the_health_check_asks_healthz_from_inside_the_image(containers, image, engine):
    healthcheck = subprocess.run([engine, "image", "inspect", "-f", "{{json .Config.Healthcheck.Test}}", image],
                                 capture_output=True, text=True, check=True).stdout
    assert json.loads(healthcheck) == ["CMD", "/usr/local/bin/veil", "health"]
    container = containers()
    if engine == "podman":
        # podman runs health checks from systemd timers, which this machine may lack: run one now.
        assert container.run("healthcheck", "run", container.name, check=False).returncode == 0
    deadline = time.monotonic() + 60
    while container.inspect("{{.State.Health.Status}}") != "healthy":
        assert time.monotonic() < deadline, container.inspect("{{json .State.Health}}")
        time.sleep(1)


def test_without_a_token_the_admin_api_answers_only_inside_the_container(containers):
    container = containers()
    container.sqs().create_queue(QueueName="listed")
    for probe in ("/healthz", "/readyz"):
        assert requests.get(container.url("admin", probe), timeout=5).status_code == 200
    for path in ("/api/v1/queues", "/metrics"):
        # From the host, through the published port: not a loopback connection inside the container, and a
        # Host header of 127.0.0.1 does not change that.
        refused = requests.get(container.url("admin", path), timeout=5)
        assert refused.status_code == 403, refused.text
        assert refused.json()["error"]["code"] == "LoopbackOnly"
    listed = container.run("exec", container.name, "veil", "--output", "json", "queues", "list")
    assert "listed" in [queue["name"] for queue in json.loads(listed.stdout)["queues"]]


def test_with_a_token_the_admin_api_answers_its_holder_and_queue_urls_name_the_advertised_address(containers):
    token = uuid.uuid4().hex
    container = containers(env={"VEIL_ADMIN_TOKEN": token, "VEIL_SQS_ADVERTISED_URL": "http://veil.test:9324"})
    assert requests.get(container.url("admin", "/api/v1/queues"), timeout=5).status_code == 401
    answered = requests.get(container.url("admin", "/api/v1/queues"), timeout=5,
                            headers={"Authorization": f"Bearer {token}"})
    assert answered.status_code == 200, answered.text
    sqs = container.sqs()
    url = sqs.create_queue(QueueName="advertised")["QueueUrl"]
    assert url == f"http://veil.test:9324/{ACCOUNT}/advertised"
    # The URL names the queue wherever it is sent: the path is what Veil reads.
    sqs.send_message(QueueUrl=url, MessageBody="x")
    assert receive_one(sqs, url)["Body"] == "x"


def test_the_readmes_container_lines_run_as_written(engine, image, tmp_path):
    """README.md "Container image and static binary": the lines after `scripts/package-image` (which the `image`
    fixture ran, with the binary under test when it is the static build) run as written, `docker` being the
    engine found (the README says podman takes the same arguments): the container on the default ports with
    its named volume, a queue made with the aws CLI from the host, and the CLI inside the container lists it."""
    readme = (REPO / "README.md").read_text()
    lines = lines_of([first_block(readme, "## Container image and static binary", "sh")])
    assert lines[0] == "scripts/package-image", lines
    for name, kind in (("veil", "container"), ("veil-data", "volume")):
        exists = subprocess.run([engine, kind, "inspect", name], capture_output=True, timeout=60)
        if exists.returncode == 0:
            pytest.skip(f"a {kind} named {name} exists here; the README's lines would use it")
    wait_for_default_ports((9324, 10001, 50000, 9325))
    env = {**os.environ, "HOME": str(tmp_path), "AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test",
           "AWS_DEFAULT_REGION": "us-east-1", "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    outputs = []
    try:
        for line in lines[1:]:
            if line.startswith("docker "):
                line = engine + line.removeprefix("docker")
            done = subprocess.run(["bash", "-c", line], env=env, capture_output=True, text=True,
                                  timeout=ENGINE_COMMAND_TIMEOUT_S, stdin=subprocess.DEVNULL)
            assert done.returncode == 0, (line, done.stdout, done.stderr)
            outputs.append(done.stdout)
            if " run -d " in line:
                # As a user waits for a container before talking to it.
                assert ready_within("http://127.0.0.1:9325/readyz", READY_TIMEOUT_S), "not ready"
    finally:
        subprocess.run([engine, "rm", "-f", "veil"], capture_output=True, timeout=ENGINE_COMMAND_TIMEOUT_S)
        subprocess.run([engine, "volume", "rm", "-f", "veil-data"], capture_output=True, timeout=60)
    assert "/000000000000/orders" in outputs[-2], outputs
    assert "orders" in outputs[-1].split(), outputs
