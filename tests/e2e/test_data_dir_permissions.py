"""The data directory is private (docs/security.md "The data directory"): it holds every message body and the
secret receipts and user-delegation keys derive from, so Veil makes it 0700 and every file in it 0600 whatever
the umask, tightens what it finds wider at start (and says so in its log), and `veil cert dev` writes its key
0600.
"""

from __future__ import annotations

import os
import stat
import subprocess
import time
from pathlib import Path

import requests

from helpers import VeilServer, make_client, veil_bin


def wait_ready(server, seconds: float = 20) -> None:
    deadline = time.monotonic() + seconds
    while requests.get(f"{server.admin_endpoint}/readyz", timeout=5).status_code != 200:
        assert time.monotonic() < deadline, server.log_tail()
        time.sleep(0.05)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def modes_of(data_dir: Path) -> dict[str, int]:
    return {entry.name: mode(entry) for entry in data_dir.iterdir()}


class PermissiveServer(VeilServer):
    """A server started under umask 000, so anything whose mode Veil does not set itself comes out 0666/0777."""

    def start(self, timeout: float = 20.0):
        old = os.umask(0)
        try:
            return super().start(timeout)
        finally:
            os.umask(old)


def test_a_new_data_directory_and_its_files_are_private_whatever_the_umask(tmp_path):
    data = tmp_path / "fresh" / "data"
    server = PermissiveServer(data, log_dir=tmp_path)
    server.start()  # the fixture makes the directory first, 0777 under this umask: Veil must tighten it
    try:
        sqs = make_client(server.endpoint)
        url = sqs.create_queue(QueueName="private")["QueueUrl"]
        sqs.send_message(QueueUrl=url, MessageBody="a body no other user may read")
    finally:
        server.stop_cleanly()
    assert mode(data) == 0o700
    files = modes_of(data)
    assert files, "the data directory is empty"
    assert all(m == 0o600 for m in files.values()), {name: oct(m) for name, m in files.items()}


def test_a_readable_data_directory_is_tightened_at_start_and_logged(tmp_path):
    data = tmp_path / "data"
    server = VeilServer(data, log_dir=tmp_path)
    server.start()
    sqs = make_client(server.endpoint)
    sqs.create_queue(QueueName="tighten")
    server.stop_cleanly()
    os.chmod(data, 0o755)
    for entry in data.iterdir():
        os.chmod(entry, 0o644)
    server.start()
    try:
        wait_ready(server)  # the listeners open before the store does
        assert mode(data) == 0o700
        assert all(m == 0o600 for m in modes_of(data).values()), modes_of(data)
        log = server.log_path.read_text()
        assert "made private" in log, server.log_tail()
        assert make_client(server.endpoint).get_queue_url(QueueName="tighten")["QueueUrl"]
    finally:
        server.stop_cleanly()


def test_cert_dev_writes_its_key_0600_whatever_the_umask(tmp_path):
    out = tmp_path / "tls"
    done = subprocess.run([veil_bin(), "cert", "dev", "--out", str(out)], capture_output=True, text=True,
                          timeout=60, preexec_fn=lambda: os.umask(0))
    assert done.returncode == 0, done.stderr
    assert mode(out / "key.pem") == 0o600
