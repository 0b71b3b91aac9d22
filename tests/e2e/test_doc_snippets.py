"""The README's walkthroughs and the shell snippets of README.md "The `veil` CLI" and "Admin API" and of
docs/cli.md's examples run as written against a fresh server.

The walkthroughs (the aws CLI, boto3, the Azure SDK, the az CLI, the KubeMQ SDK) run in the README's order
against a server on the default ports they name, each Python block as a script with the test venv's Python and
each shell line through bash with the aws and az CLIs on PATH; a placeholder a reader fills in from the reply
above it (`<ReceiptHandle>`, `<message-id>`, `<pop-receipt>`) is filled in from that reply.

The CLI and admin API snippets run each line through bash, with the real `veil` first on PATH, VEIL_ENDPOINT pointing at
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
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from helpers import (VeilServer, az_executable, first_block, lines_of, make_client, sh_blocks, veil_bin,
                     wait_for_default_ports)

ROOT = Path(__file__).resolve().parents[2]
TIMEOUT = 60


def section(text: str, heading: str) -> str:
    start = text.index(heading)
    end = text.find("\n#", start + len(heading))
    return text[start:end if end != -1 else len(text)]


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


# What a reader copies from a reply into a later command: the placeholder, and the reply's JSON key.
PLACEHOLDERS = {"<ReceiptHandle>": "ReceiptHandle", "<message-id>": "id", "<pop-receipt>": "popReceipt"}


def replied(value, found: dict) -> None:
    """Remembers every placeholder's key the JSON reply `value` carries (the first message's, in a list)."""
    if isinstance(value, list):
        if value:
            replied(value[0], found)
    elif isinstance(value, dict):
        for key, item in value.items():
            if key in PLACEHOLDERS.values() and isinstance(item, str):
                found[key] = item
            else:
                replied(item, found)


def run_walkthrough_lines(block: str, env: dict, cwd: Path) -> list[str]:
    """Runs a shell walkthrough line by line as a reader would: `export` lines set the environment of the lines
    after them, a placeholder is filled in from the replies before it. Returns each line's output."""
    env = dict(env)
    found: dict[str, str] = {}
    outputs = []
    for line in lines_of([block]):
        if line.startswith("export "):
            for assignment in shlex.split(line)[1:]:
                name, _, value = assignment.partition("=")
                env[name] = value
            continue
        for placeholder, key in PLACEHOLDERS.items():
            if placeholder in line:
                assert key in found, f"{placeholder} in {line!r}, but no reply before it carried {key}"
                line = line.replace(placeholder, found[key])
        done = subprocess.run(["bash", "-c", line], cwd=cwd, env=env, capture_output=True, text=True,
                              timeout=120, stdin=subprocess.DEVNULL)
        assert done.returncode == 0, (line, done.stdout, done.stderr)
        if done.stdout.strip().startswith(("{", "[")):
            replied(json.loads(done.stdout), found)
        outputs.append(done.stdout)
    return outputs


def run_python(block: str, cwd: Path, env: dict) -> str:
    script = cwd / "snippet.py"
    script.write_text(block)
    done = subprocess.run([sys.executable, str(script)], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=120, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, (block, done.stdout, done.stderr)
    return done.stdout


@pytest.fixture
def on_default_ports(tmp_path):
    """A fresh server on the ports the walkthroughs name: SQS 9324, Azure 10001, KubeMQ 50000."""
    wait_for_default_ports()
    server = VeilServer(tmp_path / "data", log_dir=tmp_path, port=9324, azure_port=10001, kubemq_port=50000).start()
    yield server
    server.kill()


def test_the_readmes_walkthroughs_run_as_written_in_order(on_default_ports, tmp_path):
    readme = (ROOT / "README.md").read_text()
    home = tmp_path / "home"
    home.mkdir()
    # The CLIs beside the test venv's Python (aws) and in their own venv (az); a home of their own, so that no
    # profile or config of the machine's user changes what they do.
    env = {**os.environ, "HOME": str(home), "AZURE_CONFIG_DIR": str(home / ".azure"),
           "AZURE_CORE_COLLECT_TELEMETRY": "false", "AZURE_CORE_NO_COLOR": "true",
           "AZURE_CORE_ONLY_SHOW_ERRORS": "true", "AZURE_CORE_SURVEY_MESSAGE": "false",
           "PATH": f"{Path(sys.executable).parent}:{Path(az_executable()).parent}:{os.environ['PATH']}"}
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_DEFAULT_REGION", "AZURE_STORAGE_CONNECTION_STRING"):
        env.pop(name, None)

    aws = run_walkthrough_lines(first_block(readme, "## Walkthrough with the aws CLI", "sh"), env, tmp_path)
    assert '"Body": "hello"' in "".join(aws), aws
    printed = run_python(first_block(readme, "## With boto3", "python"), tmp_path, env)
    assert printed.splitlines() == ["hello 1"], printed
    # Azure after SQS: both make `orders`, the namespace they share.
    printed = run_python(first_block(readme, "## Azure Queue Storage", "python"), tmp_path, env)
    assert printed.splitlines()[-1] == "0", printed
    az = run_walkthrough_lines(first_block(readme, "## Azure Queue Storage", "sh"), env, tmp_path)
    assert '"content": "hello"' in az[2], az
    printed = run_python(first_block(readme, "## KubeMQ queues (gRPC)", "python"), tmp_path, env)
    body, _sequence, receive_count = printed.splitlines()[0].split()
    assert (body, receive_count) == ("b'hello'", "1"), printed
    assert printed.splitlines()[-1] == "[]", "the peek after the ack finds nothing"
