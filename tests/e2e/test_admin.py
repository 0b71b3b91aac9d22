"""The admin endpoint against the real binary: /metrics agrees exactly with what a scripted workload over SQS,
Azure Queue Storage and KubeMQ left behind; /readyz flips while starting and while stopping; the JSON admin API
driven through a client generated from its own OpenAPI document; the audit lines of admin operations."""

from __future__ import annotations

import importlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
import requests

from helpers import VeilServer, receive, veil_bin, wait_until

METRIC_LINE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$')
LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def scrape(server) -> dict[tuple[str, frozenset], float]:
    """Every sample of /metrics as {(name, labels): value}."""
    response = requests.get(f"{server.admin_endpoint}/metrics", timeout=10)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain; version=0.0.4")
    samples = {}
    for line in response.text.splitlines():
        if not line or line.startswith("#"):
            continue
        match = METRIC_LINE.match(line)
        assert match, f"not a Prometheus sample line: {line!r}"
        name, labels, value = match.groups()
        samples[(name, frozenset(LABEL.findall(labels or "")))] = float(value)
    return samples


def queue_metric(samples, name: str, queue: str, **labels) -> float:
    """The one sample of `name` for `queue` (in the default namespace) with these extra labels."""
    found = [
        value for (n, ls), value in samples.items()
        if n == name and ("queue", queue) in ls and ("namespace", "default") in ls
        and all((k, v) in ls for k, v in labels.items())
    ]
    assert len(found) == 1, f"{name} for {queue} {labels}: {found}"
    return found[0]


def states(samples, queue: str) -> tuple[float, float, float]:
    return tuple(queue_metric(samples, "veil_queue_messages", queue, state=s) for s in ("visible", "inflight", "delayed"))


def test_metrics_match_the_state_a_workload_over_all_three_protocols_left(server, sqs, azure_service, kmq):
    from kubemq.queues import QueueMessage

    tag = uuid.uuid4().hex[:8]
    # SQS: 5 sent, 2 received (in flight), 1 delayed, 1 deleted.
    sqs_name = f"metrics-sqs-{tag}"
    url = sqs.create_queue(QueueName=sqs_name)["QueueUrl"]
    for i in range(5):
        sqs.send_message(QueueUrl=url, MessageBody=f"m{i}")
    sqs.send_message(QueueUrl=url, MessageBody="later", DelaySeconds=60)
    got = receive(sqs, url, MaxNumberOfMessages=3, VisibilityTimeout=60)
    assert len(got) == 3
    sqs.delete_message(QueueUrl=url, ReceiptHandle=got[0]["ReceiptHandle"])
    # SQS dead letters: 2 messages received twice with maxReceiveCount 1 move to the DLQ.
    dlq_name, src_name = f"metrics-dlq-{tag}", f"metrics-src-{tag}"
    dlq_url = sqs.create_queue(QueueName=dlq_name)["QueueUrl"]
    dlq_arn = sqs.get_queue_attributes(QueueUrl=dlq_url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    src_url = sqs.create_queue(QueueName=src_name, Attributes={
        "RedrivePolicy": json.dumps({"deadLetterTargetArn": dlq_arn, "maxReceiveCount": "1"})})["QueueUrl"]
    for i in range(2):
        sqs.send_message(QueueUrl=src_url, MessageBody=f"d{i}")
    assert len(receive(sqs, src_url, MaxNumberOfMessages=10, VisibilityTimeout=0)) == 2
    assert receive(sqs, src_url, MaxNumberOfMessages=10, VisibilityTimeout=0) == []
    # A lapse: received with a 1 s visibility timeout that ends unacknowledged.
    lapse_name = f"metrics-lapse-{tag}"
    lapse_url = sqs.create_queue(QueueName=lapse_name)["QueueUrl"]
    sqs.send_message(QueueUrl=lapse_url, MessageBody="slow worker")
    assert len(receive(sqs, lapse_url, VisibilityTimeout=1)) == 1
    # Azure: 3 put, 1 got (in flight), 1 put invisible for a minute (delayed).
    az_name = f"metrics-az-{tag}"
    az = azure_service.get_queue_client(az_name)
    az.create_queue()
    for i in range(3):
        az.send_message(f"a{i}")
    az.send_message("hidden", visibility_timeout=60)
    assert len(list(az.receive_messages(max_messages=1, visibility_timeout=60))) == 1
    # KubeMQ: 4 sent, 1 received and not acknowledged (in flight).
    kube_name = f"metrics-kube-{tag}"
    kmq.send_queue_messages_batch([QueueMessage(channel=kube_name, body=f"k{i}".encode()) for i in range(4)])
    polled = kmq.receive_queue_messages(channel=kube_name, max_messages=1, wait_timeout_in_seconds=1)
    assert not polled.is_error and len(polled.messages) == 1

    time.sleep(1.2)  # the lapse's 1 s ends
    samples = scrape(server)
    assert states(samples, sqs_name) == (2, 2, 1)
    assert states(samples, az_name) == (2, 1, 1)
    assert states(samples, kube_name) == (3, 1, 0)
    assert states(samples, src_name) == (0, 0, 0)
    assert states(samples, dlq_name) == (2, 0, 0)
    assert queue_metric(samples, "veil_messages_sent_total", sqs_name) == 6
    assert queue_metric(samples, "veil_messages_received_total", sqs_name) == 3
    assert queue_metric(samples, "veil_messages_deleted_total", sqs_name) == 1
    assert queue_metric(samples, "veil_messages_dead_lettered_total", src_name) == 2
    # Received with visibility 0: each delivery lapses at once, a redelivery (docs/semantics.md §9, "Totals").
    assert queue_metric(samples, "veil_messages_redelivered_total", src_name) == 2
    # The dead letters' arrivals are the dead-letter queue's sends.
    assert queue_metric(samples, "veil_messages_sent_total", dlq_name) == 2
    assert states(samples, lapse_name) == (1, 0, 0)
    assert queue_metric(samples, "veil_messages_redelivered_total", lapse_name) == 1
    assert queue_metric(samples, "veil_queue_bytes", sqs_name) == len("m1m2m3m4later")
    # Who made each queue is a label.
    assert queue_metric(samples, "veil_queue_bytes", az_name, protocol_created="azure") > 0
    assert queue_metric(samples, "veil_queue_bytes", kube_name, protocol_created="kubemq") > 0
    assert queue_metric(samples, "veil_queue_bytes", sqs_name, protocol_created="sqs") > 0
    # The source's two first deliveries are in the le="1" bucket; the second receive moved them instead.
    assert queue_metric(samples, "veil_queue_delivery_receive_count_bucket", src_name, le="1") == 2
    assert queue_metric(samples, "veil_queue_delivery_receive_count_count", src_name) == 2
    polled.messages[0].ack()


def test_metrics_and_peek_change_nothing(server, sqs, queue_name):
    url = sqs.create_queue(QueueName=queue_name)["QueueUrl"]
    sqs.send_message(QueueUrl=url, MessageBody="look, don't touch")
    for _ in range(3):
        scrape(server)
        peeked = requests.get(f"{server.admin_endpoint}/api/v1/queues/default/{queue_name}/messages",
                              timeout=10).json()["messages"]
        assert [m["body"] for m in peeked] == ["look, don't touch"]
        assert peeked[0]["receive_count"] == 0
    attributes = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
    assert attributes["ApproximateNumberOfMessages"] == "1"
    assert attributes["ApproximateNumberOfMessagesNotVisible"] == "0"
    got = receive(sqs, url, AttributeNames=["ApproximateReceiveCount"])
    assert got[0]["Attributes"]["ApproximateReceiveCount"] == "1"


def one(samples, name: str, **labels) -> float:
    """The one sample of `name` whose labels include these."""
    found = [value for (n, ls), value in samples.items() if n == name and all((k, v) in ls for k, v in labels.items())]
    assert len(found) == 1, f"{name} {labels}: {found}"
    return found[0]


def test_metrics_carry_build_info_and_the_standard_process_metrics(server):
    samples = scrape(server)
    build = [ls for (n, ls) in samples if n == "veil_build_info"]
    assert len(build) == 1, build
    labels = dict(build[0])
    version = subprocess.run([veil_bin(), "--version"], capture_output=True, text=True, timeout=10).stdout.split()[-1]
    assert labels["version"] == version, (labels, version)
    assert re.fullmatch(r"[0-9a-f]{12}|unknown", labels["commit"]), labels
    assert samples[("veil_build_info", build[0])] == 1
    pid = server.proc.pid
    with open(f"/proc/{pid}/stat") as stat:
        start_ticks = int(stat.read().rsplit(")", 1)[1].split()[19])
    with open("/proc/stat") as stat:
        boot = next(int(line.split()[1]) for line in stat if line.startswith("btime "))
    started = boot + start_ticks / os.sysconf("SC_CLK_TCK")
    assert abs(one(samples, "process_start_time_seconds") - started) < 1.0
    rss = int(next(line.split()[1] for line in open(f"/proc/{pid}/status") if line.startswith("VmRSS:"))) * 1024
    assert 0.5 * rss < one(samples, "process_resident_memory_bytes") < 2 * rss
    assert one(samples, "process_virtual_memory_bytes") >= one(samples, "process_resident_memory_bytes")
    assert 3 <= one(samples, "process_open_fds") <= len(os.listdir(f"/proc/{pid}/fd")) + 16
    assert one(samples, "process_max_fds") >= one(samples, "process_open_fds")
    cpu = one(samples, "process_cpu_seconds_total")
    assert cpu > 0
    # Read anew at each scrape: serving scrapes costs the server CPU, which the counter shows.
    wait_until(lambda: one(scrape(server), "process_cpu_seconds_total") > cpu,
               "process_cpu_seconds_total grows while the server works")


def test_the_admin_api_counts_its_own_requests(server, queue_name):
    def count(operation: str, code: str) -> float:
        return scrape(server).get(("veil_requests_total", frozenset(
            {("protocol", "admin"), ("operation", operation), ("code", code)})), 0.0)

    listed = count("GET /api/v1/queues", "200")
    missing = count("GET /api/v1/queues/{namespace}/{queue}", "404")
    for _ in range(3):
        assert requests.get(f"{server.admin_endpoint}/api/v1/queues", timeout=10).status_code == 200
    assert requests.get(f"{server.admin_endpoint}/api/v1/queues/default/{queue_name}", timeout=10).status_code == 404
    assert count("GET /api/v1/queues", "200") == listed + 3
    assert count("GET /api/v1/queues/{namespace}/{queue}", "404") == missing + 1
    # The scrape itself is counted, and so is its time.
    samples = scrape(server)
    assert one(samples, "veil_requests_total", protocol="admin", operation="GET /metrics", code="200") >= 1
    assert one(samples, "veil_request_duration_seconds_count", protocol="admin", operation="GET /metrics") >= 1


def test_healthz_answers_while_serving(server):
    assert requests.get(f"{server.admin_endpoint}/healthz", timeout=5).status_code == 200
    assert requests.get(f"{server.admin_endpoint}/readyz", timeout=5).status_code == 200


def readyz(srv) -> tuple[int, str]:
    response = requests.get(f"{srv.admin_endpoint}/readyz", timeout=5)
    return response.status_code, response.text.strip()


def test_the_test_clock_is_hidden_and_its_route_absent_unless_turned_on(veil_path, server):
    # docs/testing.md "Test clock": a server started without the setting has no route that moves its clock.
    resp = requests.post(f"{server.admin_endpoint}/api/v1/test/clock/advance", json={"by_ms": 1000}, timeout=10)
    assert resp.status_code == 404, resp.text
    usage = subprocess.run([veil_path, "serve", "--help"], capture_output=True, text=True, check=True).stdout
    assert "test-clock" not in usage and "TEST_CLOCK" not in usage, "the test-only setting shows in --help"


def test_readyz_is_503_until_the_store_is_open_and_again_once_stopping(veil_path, tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    # The receipt secret is read while the store opens. As a named pipe it blocks that read until the test
    # writes it: a start held in the middle of opening, deterministically.
    secret = data / "receipt.key"
    os.mkfifo(secret)
    srv = VeilServer(data, log_dir=tmp_path)
    cmd = [veil_path, "serve", "--data-dir", str(data), "--sqs-listen", f"127.0.0.1:{srv.port}",
           "--azure-listen", f"127.0.0.1:{srv.azure_port}", "--kubemq-listen", f"127.0.0.1:{srv.kubemq_port}",
           "--admin-listen", f"127.0.0.1:{srv.admin_port}"]
    log = open(tmp_path / "readyz.log", "wb")
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                status = readyz(srv)
                break
            except requests.ConnectionError:
                assert proc.poll() is None and time.monotonic() < deadline, (tmp_path / "readyz.log").read_text()
                time.sleep(0.05)
        assert status == (503, "starting")
        assert requests.get(f"{srv.admin_endpoint}/healthz", timeout=5).status_code == 200
        with open(secret, "wb") as pipe:
            pipe.write(bytes(range(32)))
        deadline = time.monotonic() + 20
        while readyz(srv)[0] != 200:
            assert time.monotonic() < deadline, (tmp_path / "readyz.log").read_text()
            time.sleep(0.05)

        # A request in progress holds the graceful stop open: half a body sent to the SQS port.
        hold = socket.create_connection(("127.0.0.1", srv.port))
        hold.sendall(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-www-form-urlencoded\r\n"
                     b"Content-Length: 100\r\n\r\nAction=List")
        time.sleep(0.2)
        proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 10
        while readyz(srv) != (503, "stopping"):
            assert time.monotonic() < deadline, "readyz never said stopping"
            time.sleep(0.05)
        assert proc.poll() is None, "the held request keeps the server draining"
        hold.close()
        assert proc.wait(20) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
        log.close()


@pytest.fixture(scope="module")
def generated_client(server, tmp_path_factory):
    """A Python client generated by openapi-python-client from the server's own /api/v1/openapi.json."""
    out = tmp_path_factory.mktemp("openapi")
    spec = out / "openapi.json"
    spec.write_text(requests.get(f"{server.admin_endpoint}/api/v1/openapi.json", timeout=10).text)
    generator = Path(sys.executable).parent / "openapi-python-client"
    env = dict(os.environ, PATH=f"{generator.parent}{os.pathsep}{os.environ.get('PATH', '')}")
    proc = subprocess.run([str(generator), "generate", "--path", str(spec), "--meta", "none",
                           "--output-path", str(out / "veil_admin_client")],
                          capture_output=True, text=True, timeout=120, env=env)
    assert (out / "veil_admin_client" / "client.py").exists(), proc.stdout + proc.stderr
    sys.path.insert(0, str(out))
    try:
        package = importlib.import_module("veil_admin_client")
        yield package, package.Client(base_url=server.admin_endpoint, raise_on_unexpected_status=True)
    finally:
        sys.path.remove(str(out))


def test_generated_client_drives_the_whole_api(generated_client, sqs, queue_name):
    package, client = generated_client
    from veil_admin_client.api.messages import browse, delete_one, receive as receive_api, send
    from veil_admin_client.api.queues import create, delete, detail, list_, purge
    from veil_admin_client.api.redrive import list_ as redrives
    from veil_admin_client.models import (CreateQueue, ErrorBody, NewMessage, PurgeRequest, ReceiveRequest,
                                          SendRequest)

    created = create.sync(client=client, body=CreateQueue(name=queue_name))
    assert created.queue.created_by == "admin"
    sent = send.sync("default", queue_name, client=client,
                     body=SendRequest(messages=[NewMessage(body=f"b{i}") for i in range(3)]))
    assert [s.seq for s in sent.sent] == [0, 1, 2]
    # The queue is a queue like any other: SQS sees the messages.
    url = sqs.get_queue_url(QueueName=queue_name)["QueueUrl"]
    assert sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["ApproximateNumberOfMessages"])[
        "Attributes"]["ApproximateNumberOfMessages"] == "3"

    listed = [q for q in list_.sync(client=client).queues if q.name == queue_name]
    assert listed[0].visible == 3
    peeked = browse.sync("default", queue_name, client=client, max_=10)
    assert [m.body for m in peeked.messages] == ["b0", "b1", "b2"]
    got = receive_api.sync("default", queue_name, client=client, body=ReceiveRequest(max_=1, visibility_timeout_s=60))
    assert got.messages[0].receipt
    assert detail.sync("default", queue_name, client=client).queue.inflight == 1
    assert delete_one.sync("default", queue_name, str(sent.sent[2].seq), client=client).deleted
    assert delete_one.sync("default", queue_name, sent.sent[1].id, client=client).deleted

    refused = purge.sync_detailed("default", queue_name, client=client, body=PurgeRequest(confirm="other"))
    assert refused.status_code == 400
    assert isinstance(refused.parsed, ErrorBody) and refused.parsed.error.code == "ConfirmationMismatch"
    assert detail.sync("default", queue_name, client=client).queue.inflight == 1, "a refused purge purges nothing"
    assert purge.sync("default", queue_name, client=client, body=PurgeRequest(confirm=queue_name)).purged == 1
    assert redrives.sync("default", queue_name, client=client).redrives == []
    assert delete.sync("default", queue_name, client=client).deleted
    missing = detail.sync_detailed("default", queue_name, client=client)
    assert missing.status_code == 404 and missing.parsed.error.code == "QueueNotFound"


def wait_for_redrive(admin_queue: str) -> dict:
    deadline = time.monotonic() + 20
    while True:
        task = requests.get(f"{admin_queue}/redrive", timeout=10).json()["redrives"][0]
        if task["status"] != "running":
            return task
        assert time.monotonic() < deadline, task
        time.sleep(0.1)


def test_admin_redrive_moves_an_azure_poison_queue_back(make_server):
    from azure.storage.queue import QueueClient

    srv = make_server(extra_args=["--azure-max-dequeue-count", "1"])
    name = f"work{uuid.uuid4().hex[:8]}"
    queue = QueueClient.from_connection_string(srv.azure_connection_string(), name)
    queue.create_queue()
    for body in ("p1", "p2"):
        queue.send_message(body)
    assert len(list(queue.receive_messages(max_messages=2, visibility_timeout=1))) == 2
    time.sleep(1.2)
    # Dequeued once already: the next get moves them to the poison queue instead.
    assert list(queue.receive_messages(max_messages=2)) == []
    poison = f"{srv.admin_endpoint}/api/v1/queues/default/{name}-poison"
    assert requests.get(poison, timeout=10).json()["queue"]["visible"] == 2

    started = requests.post(f"{poison}/redrive", json={}, timeout=10)
    assert started.status_code == 200, started.text
    assert started.json()["to_move"] == 2
    task = wait_for_redrive(poison)
    assert (task["status"], task["moved"]) == ("completed", 2)
    back = requests.get(f"{srv.admin_endpoint}/api/v1/queues/default/{name}/messages", timeout=10).json()
    assert sorted(m["body"] for m in back["messages"]) == ["p1", "p2"]
    assert requests.get(poison, timeout=10).json()["queue"]["visible"] == 0


def test_admin_redrive_of_a_missing_queue_is_404_and_to_a_missing_destination_400(server, sqs, queue_name):
    admin = f"{server.admin_endpoint}/api/v1/queues/default/{queue_name}"
    assert requests.post(f"{admin}/redrive", json={}, timeout=10).status_code == 404
    sqs.create_queue(QueueName=queue_name)
    url = sqs.get_queue_url(QueueName=queue_name)["QueueUrl"]
    sqs.send_message(QueueUrl=url, MessageBody="x")
    first = requests.post(f"{admin}/redrive", json={"rate_per_s_max": 1,
                                                    "to": {"namespace": "default", "name": queue_name + "-x"}},
                          timeout=10)
    assert first.status_code == 400, first.text  # the destination does not exist
    assert first.json()["error"]["code"] == "InvalidArgument"


def test_admin_operations_write_audit_lines(make_server, tmp_path):
    srv = make_server()
    admin = f"{srv.admin_endpoint}/api/v1"
    name = f"audit-{uuid.uuid4().hex[:8]}"
    requests.post(f"{admin}/queues", json={"name": name}, timeout=10).raise_for_status()
    requests.post(f"{admin}/queues/default/{name}/messages", json={"messages": [{"body": "x"}]}, timeout=10)
    assert requests.post(f"{admin}/queues/default/{name}/purge", json={"confirm": "nope"}, timeout=10).status_code == 400
    requests.post(f"{admin}/queues/default/{name}/purge", json={"confirm": name}, timeout=10).raise_for_status()
    requests.delete(f"{admin}/queues/default/{name}", timeout=10).raise_for_status()
    log = re.sub(r"\x1b\[[0-9;]*m", "", srv.log_path.read_text())
    audit = [line for line in log.splitlines() if "veil::audit" in line and name in line]
    actions = [re.search(r'action="?(\w+)', line).group(1) for line in audit]
    outcomes = [re.search(r'outcome="?(\w+)', line).group(1) for line in audit]
    assert actions == ["create_queue", "purge", "purge", "delete_queue"], log
    assert outcomes == ["ok", "ConfirmationMismatch", "ok", "ok"]
    assert all("protocol=\"admin\"" in line or "protocol=admin" in line for line in audit)


def test_delivery_history_says_why_a_message_came_back(server, sqs, queue_name):
    url = sqs.create_queue(QueueName=queue_name)["QueueUrl"]
    sent = sqs.send_message(QueueUrl=url, MessageBody="flaky job")["MessageId"]
    first = receive(sqs, url, VisibilityTimeout=1)
    assert len(first) == 1
    time.sleep(1.2)  # the worker died: its 1 s visibility timeout ends
    second = receive(sqs, url, VisibilityTimeout=30)
    sqs.change_message_visibility(QueueUrl=url, ReceiptHandle=second[0]["ReceiptHandle"], VisibilityTimeout=60)
    history = requests.get(f"{server.admin_endpoint}/api/v1/queues/default/{queue_name}/messages/{sent}/history",
                           timeout=10).json()
    deliveries = history["deliveries"]
    assert [d["receive_count"] for d in deliveries] == [1, 2]
    assert all(d["protocol"] == "sqs" and d["identity"] == "test" for d in deliveries)
    assert all(d["client"].startswith("127.0.0.1:") for d in deliveries)
    assert [d["visibility_timeout_ms"] for d in deliveries] == [1000, 30000]
    assert deliveries[0]["ended"]["how"] == "lapsed"
    assert deliveries[1]["ended"]["how"] == "in_flight"
    assert deliveries[1]["visibility_changes"] == 1
    assert deliveries[1]["last_visibility_change"]["visibility_timeout_ms"] == 60000
    # Reading the history changed nothing; deleting ends the last delivery, and the history still answers.
    assert sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["ApproximateNumberOfMessagesNotVisible"])[
        "Attributes"]["ApproximateNumberOfMessagesNotVisible"] == "1"
    sqs.delete_message(QueueUrl=url, ReceiptHandle=second[0]["ReceiptHandle"])
    after = requests.get(f"{server.admin_endpoint}/api/v1/queues/default/{queue_name}/messages/{sent}/history",
                         timeout=10).json()
    assert after["deleted"] is True
    assert after["deliveries"][-1]["ended"]["how"] == "deleted"


def test_delivery_history_follows_a_dead_lettered_message_and_can_be_turned_off(server, sqs, queue_name):
    dlq = sqs.create_queue(QueueName=f"{queue_name}-dlq")["QueueUrl"]
    arn = sqs.get_queue_attributes(QueueUrl=dlq, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    src = sqs.create_queue(QueueName=queue_name, Attributes={
        "RedrivePolicy": json.dumps({"deadLetterTargetArn": arn, "maxReceiveCount": "1"})})["QueueUrl"]
    sent = sqs.send_message(QueueUrl=src, MessageBody="poison")["MessageId"]
    assert len(receive(sqs, src, VisibilityTimeout=0)) == 1
    assert receive(sqs, src, VisibilityTimeout=0) == []
    history = requests.get(
        f"{server.admin_endpoint}/api/v1/queues/default/{queue_name}-dlq/messages/{sent}/history", timeout=10).json()
    assert history["queue"]["name"] == f"{queue_name}-dlq"
    assert history["deliveries"][-1]["ended"]["how"] == "dead_lettered"
    assert history["deliveries"][-1]["ended"]["to"]["name"] == f"{queue_name}-dlq"

    admin = f"{server.admin_endpoint}/api/v1/queues/default/{queue_name}"
    assert requests.patch(admin, json={"delivery_history": False}, timeout=10).json()["settings"][
        "delivery_history"] is False
    quiet = sqs.send_message(QueueUrl=src, MessageBody="unrecorded")["MessageId"]
    assert len(receive(sqs, src, VisibilityTimeout=30)) == 1
    unrecorded = requests.get(f"{admin}/messages/{quiet}/history", timeout=10).json()
    assert unrecorded["deliveries"] == []
    missing = requests.get(f"{admin}/messages/{uuid.uuid4()}/history", timeout=10)
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "MessageNotFound"
