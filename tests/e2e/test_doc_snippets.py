"""The shell snippets of README.md "The `veil` CLI" and "Admin API" and of docs/cli.md's examples run as written
against a fresh server: each line through bash, with the real `veil` first on PATH, VEIL_ENDPOINT pointing at
the server, and the documented addresses (localhost:9325, 10.0.0.7:9325) replaced by the server's admin address.
A line that documents an interactive command is run as a user would: `veil top` until it has drawn a frame,
`veil queues purge` with a terminal that types the queue's name. Each line must exit 0. The state the lines
talk about (an `orders` queue with a dead-letter queue holding dead-lettered messages, message 42) is made
first with boto3, as a user's application would have made it."""

from __future__ import annotations

import json
import os
import pty
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from helpers import VeilServer, make_client, veil_bin

ROOT = Path(__file__).resolve().parents[2]
TIMEOUT = 60


def sh_blocks(text: str) -> list[str]:
    return re.findall(r"```sh\n(.*?)```", text, re.S)


def section(text: str, heading: str) -> str:
    start = text.index(heading)
    end = text.find("\n#", start + len(heading))
    return text[start:end if end != -1 else len(text)]


def lines_of(blocks: list[str]) -> list[str]:
    """Each command line of the blocks, continuation lines joined."""
    joined = "\n".join(blocks).replace("\\\n", " ")
    return [line for line in (raw.strip() for raw in joined.splitlines()) if line and not line.startswith("#")]


def make_state(server: VeilServer, orders: bool = True) -> None:
    """`orders-dlq` holding three messages dead-lettered from a source queue, and (with `orders`) an `orders`
    queue that is that source and holds a message with seq 42."""
    sqs = make_client(server.endpoint)
    dlq = sqs.create_queue(QueueName="orders-dlq")["QueueUrl"]
    arn = sqs.get_queue_attributes(QueueUrl=dlq, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    source_name = "orders" if orders else "orders-source"
    source = sqs.create_queue(QueueName=source_name, Attributes={
        "RedrivePolicy": json.dumps({"deadLetterTargetArn": arn, "maxReceiveCount": 1})})["QueueUrl"]
    for i in range(3):
        sqs.send_message(QueueUrl=source, MessageBody=f"poison {i}")
    for _ in range(2):
        sqs.receive_message(QueueUrl=source, MaxNumberOfMessages=10, VisibilityTimeout=0)
    if orders:
        for i in range(40):
            sqs.send_message(QueueUrl=source, MessageBody=json.dumps({"order": i}))


def run_line(line: str, server: VeilServer, cwd: Path) -> None:
    admin = server.admin_endpoint.removeprefix("http://")
    line = (line.replace("localhost:9325", admin).replace("127.0.0.1:9325", admin)
            .replace("10.0.0.7:9325", admin).replace("10.0.0.5:9325", admin))
    env = {**os.environ, "VEIL_ENDPOINT": server.admin_endpoint,
           "PATH": f"{Path(veil_bin()).resolve().parent}:{os.environ['PATH']}"}
    if re.match(r"veil top\s*(#|$)", line):
        proc = subprocess.Popen(["bash", "-c", line], cwd=cwd, env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        time.sleep(2)
        proc.kill()
        out, err = proc.communicate()
        assert "veil top" in out, (line, out, err)
        return
    if re.match(r"veil queues purge \S+\s*(#|$)", line):
        queue = line.split()[3]
        master, slave = pty.openpty()
        try:
            proc = subprocess.Popen(["bash", "-c", line], cwd=cwd, env=env, stdin=slave, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, text=True)
            os.write(master, queue.encode() + b"\n")
            out, err = proc.communicate(timeout=TIMEOUT)
        finally:
            os.close(master)
            os.close(slave)
        assert proc.returncode == 0, (line, out, err)
        assert "purged" in out, (line, out)
        return
    done = subprocess.run(["bash", "-o", "pipefail", "-c", line], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=TIMEOUT, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, (line, done.stdout, done.stderr)
    if line.startswith("curl"):
        # curl -s exits 0 on an HTTP error too: the API's error body is what would say it failed.
        assert '"error"' not in done.stdout, (line, done.stdout)


@pytest.fixture
def fresh(tmp_path):
    server = VeilServer(tmp_path / "data", log_dir=tmp_path).start()
    yield server
    server.kill()


def test_the_readmes_cli_and_admin_api_snippets_run_as_written(fresh, tmp_path):
    if not shutil.which("curl"):
        pytest.skip("curl is not installed")
    readme = (ROOT / "README.md").read_text()
    make_state(fresh)
    lines = lines_of(sh_blocks(section(readme, "### The `veil` CLI")))
    assert any(line.startswith("veil redrive") for line in lines) and len(lines) >= 8, lines
    for line in lines:
        run_line(line, fresh, tmp_path)
    # The admin API's lines, after the CLI's (the CLI block purges `orders`; the API block purges it again).
    api = lines_of(sh_blocks(section(readme, "### Admin API")))
    assert len(api) >= 6, api
    for line in api:
        run_line(line, fresh, tmp_path)


def test_the_cli_docs_examples_run_as_written(fresh, tmp_path):
    if not shutil.which("jq"):
        pytest.skip("jq is not installed")
    docs = (ROOT / "docs" / "cli.md").read_text()
    make_state(fresh, orders=False)
    lines = lines_of(sh_blocks(docs))
    assert any(line.startswith("veil queues create orders") for line in lines), lines
    for line in lines:
        run_line(line, fresh, tmp_path)
