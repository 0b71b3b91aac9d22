"""The README's run command works as written: the first command of its first shell block is started from the
repository root exactly as a new user would type it (only the data directory is pointed at a temporary one),
Veil answers on the default SQS port 127.0.0.1:9324 with boto3, and SIGTERM stops it cleanly.

./scripts/test builds for the static target only (docs/decisions/0009-static-binary.md); when the binary under
test (VEIL_BIN) is that build, cargo is pointed at its target (CARGO_BUILD_TARGET) so that the command reuses it
rather than compiling the whole workspace a second time for the host, which a user's cargo does."""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import time
from pathlib import Path

from helpers import make_client, port_open, veil_bin, wait_for_default_ports

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_SQS = ("127.0.0.1", 9324)
STARTUP_SECONDS = 180  # cargo may still have to link the binary the command names


def readme_run_command() -> list[str]:
    text = (ROOT / "README.md").read_text()
    block = re.search(r"```sh\n(.*?)```", text, re.S)
    assert block, "README.md has no ```sh block with the two commands"
    first = block.group(1).splitlines()[0].split("#", 1)[0].strip()
    return shlex.split(first)


def built_target() -> str | None:
    """The target triple VEIL_BIN was built for, when it lies in target/<triple>/release."""
    path = Path(veil_bin()).resolve()
    if path.parent.name == "release" and path.parent.parent.parent.name == "target":
        return path.parent.parent.name
    return None


def test_the_readme_run_command_serves_sqs_on_the_default_port(tmp_path):
    command = readme_run_command()
    assert command[:2] == ["cargo", "run"], f"the README's first command is not a cargo run: {command}"
    wait_for_default_ports()
    env = dict(os.environ, VEIL_DATA_DIR=str(tmp_path / "data"), VEIL_LOG="warn")
    if (target := built_target()) is not None:
        env["CARGO_BUILD_TARGET"] = target
    log = open(tmp_path / "veil.log", "wb")
    process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
                               start_new_session=True)
    try:
        deadline = time.monotonic() + STARTUP_SECONDS
        while not port_open(DEFAULT_SQS):
            assert process.poll() is None, (tmp_path / "veil.log").read_text()[-3000:]
            assert time.monotonic() < deadline, "the README's command did not start listening in time"
            time.sleep(0.2)
        sqs = make_client(f"http://{DEFAULT_SQS[0]}:{DEFAULT_SQS[1]}")
        url = sqs.create_queue(QueueName="readme")["QueueUrl"]
        sqs.send_message(QueueUrl=url, MessageBody="hello")
        got = sqs.receive_message(QueueUrl=url, WaitTimeSeconds=1)["Messages"]
        assert [m["Body"] for m in got] == ["hello"]
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGTERM)
        code = process.wait(timeout=30)
        log.close()
    assert code == 0, (tmp_path / "veil.log").read_text()[-3000:]
