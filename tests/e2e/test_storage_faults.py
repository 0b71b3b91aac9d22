"""Storage faults against the real binary (docs/reliability.md "Storage faults").

A full disk: Veil's data directory on a small tmpfs, filled by a filler file and then by sends until the log
cannot grow. Writes get each protocol's server error (SQS 500 InternalError, Azure 500 InternalError, a KubeMQ
error) and never hang; reads (queue lists, attributes, counts) go on; when the filler is removed Veil reopens
its store by itself on the same ports, and every acknowledged message is there — then and after a restart.

A flipped byte in a stopped server's store file stops the next start-up with a non-zero exit and an error
naming the damaged file, instead of serving it.
"""

from __future__ import annotations

import errno
import re
import subprocess
import time
from pathlib import Path

import pytest
import requests
from azure.core.exceptions import HttpResponseError
from azure.storage.queue import QueueClient
from botocore.exceptions import ClientError
from kubemq.queues import QueueMessage

from helpers import VeilServer, azure_name, counts, kubemq_client, make_client

# The tmpfs: room for the store file, two 1 MiB log segments and the filler's slack.
TMPFS_MIB = 24
# A log segment of 1 MiB (`--wal-segment-mib`): a few dozen sends fill it, and its rotation is what fails.
SEGMENT_MIB = 1
BODY_BYTES = 48 * 1024
# Sends on the full disk before one must have failed: a segment holds about 21 of these bodies.
FULL_DISK_SENDS_MAX = 60
# How long Veil may take to notice that space came back (probe every 1 s), drain and reopen.
RECOVERY_S_MAX = 8.0
TIMEOUT_S = 2


@pytest.fixture
def small_disk(tmp_path):
    """A TMPFS_MIB tmpfs mounted for the test (root, as here and in CI); skipped where mounting is not allowed."""
    mount = tmp_path / "disk"
    mount.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={TMPFS_MIB}m", "tmpfs", str(mount)],
        capture_output=True, text=True,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs for the full-disk test (needs root): {done.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def fill(path: Path) -> int:
    """Writes `path` until the file system is full; returns the bytes written."""
    chunk = b"\0" * (256 * 1024)
    written = 0
    with open(path, "wb", buffering=0) as f:
        while True:
            try:
                written += f.write(chunk)
            except OSError as e:
                assert e.errno == errno.ENOSPC, e
                break
    # Smaller pieces for the last partial chunk.
    with open(path, "ab", buffering=0) as f:
        for _ in range(64):
            try:
                written += f.write(b"\0" * 4096)
            except OSError as e:
                assert e.errno == errno.ENOSPC, e
                break
    return written


def metric(server, name: str) -> float:
    text = requests.get(f"{server.admin_endpoint}/metrics", timeout=TIMEOUT_S).text
    found = re.search(rf"^{name} (\S+)$", text, re.M)
    return float(found.group(1)) if found else 0.0


def body(i: int) -> str:
    return f"{i:05d}-" + "x" * BODY_BYTES


def test_a_full_disk_refuses_writes_with_server_errors_serves_reads_and_recovers_by_itself_losing_nothing_acknowledged(
    small_disk,
):
    server = VeilServer(small_disk / "data", log_dir=small_disk.parent,
                        extra_args=["--wal-segment-mib", str(SEGMENT_MIB), "--sqs-auth", "off"])
    server.start()
    try:
        sqs = make_client(server.endpoint, read_timeout=TIMEOUT_S)
        url = sqs.create_queue(QueueName="full-disk")["QueueUrl"]
        # No SDK retries, so that each refusal is seen once (and the test stays short).
        azure_queue = QueueClient.from_connection_string(server.azure_connection_string(), azure_name("full"),
                                                         retry_total=0)
        azure_queue.create_queue()
        kmq = kubemq_client(server)
        acknowledged = set()
        for i in range(3):
            sqs.send_message(QueueUrl=url, MessageBody=body(i))
            acknowledged.add(body(i))

        filler = small_disk / "filler"
        fill(filler)
        # The open log segment's space was allocated when it started, so sends go on until it is full; its
        # rotation then fails for want of space and the store stops taking writes.
        failure = None
        for i in range(3, 3 + FULL_DISK_SENDS_MAX):
            try:
                sqs.send_message(QueueUrl=url, MessageBody=body(i))
                acknowledged.add(body(i))
            except ClientError as e:
                failure = e.response
                break
        assert failure is not None, f"{FULL_DISK_SENDS_MAX} sends succeeded on a full disk\n{server.log_tail()}"
        assert failure["Error"]["Code"] == "InternalError", failure
        assert failure["ResponseMetadata"]["HTTPStatusCode"] == 500, failure

        # Every write is refused with the protocol's server error, at once (no hang: a 2 s read timeout).
        with pytest.raises(ClientError) as refused:
            sqs.send_message(QueueUrl=url, MessageBody="refused")
        error = refused.value.response["Error"]
        assert (error["Code"], refused.value.response["ResponseMetadata"]["HTTPStatusCode"]) == ("InternalError", 500)
        # The client hears AWS's words only; the cause is the operator's, in the log (docs/security.md "Errors
        # that say nothing inside").
        assert error["Message"] == "We encountered an internal error. Please try again.", error
        assert "No space left on device" in server.log_path.read_text(errors="replace"), server.log_tail()
        with pytest.raises(ClientError) as receive_refused:
            sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=1, WaitTimeSeconds=0)
        assert receive_refused.value.response["Error"]["Code"] == "InternalError"
        with pytest.raises(HttpResponseError) as azure_refused:
            azure_queue.send_message("refused")
        assert (azure_refused.value.status_code, azure_refused.value.error_code) == (500, "InternalError")
        kubemq_result = kmq.send_queue_message_simple(QueueMessage(channel="full-disk", body=b"refused"))
        assert kubemq_result.is_error, "KubeMQ send succeeded on a full disk"
        assert kubemq_result.error == "Error 500: internal error, retry", kubemq_result.error

        # Reads go on: the queue list, the attributes and counts, Azure's properties.
        assert url in sqs.list_queues().get("QueueUrls", [])
        visible, _, _ = counts(sqs, url)
        assert visible >= len(acknowledged)
        # (The failed store's engine may count refused writes: its memory is ahead of the disk until the reopen.)
        azure_queue.get_queue_properties()
        assert metric(server, "veil_store_failures_total") == 1
        assert server.running(), f"veil exited on a full disk\n{server.log_tail()}"

        # Space comes back: Veil reopens its store by itself, on the same ports.
        filler.unlink()
        deadline = time.monotonic() + RECOVERY_S_MAX
        while True:
            try:
                sqs.send_message(QueueUrl=url, MessageBody="after")
                acknowledged.add("after")
                break
            except Exception:  # 500s until the reopen, a read timeout while connections queue during it
                assert time.monotonic() < deadline, f"Veil did not recover within {RECOVERY_S_MAX}s\n{server.log_tail()}"
                time.sleep(0.2)
        assert metric(server, "veil_store_reopens_total") == 1
        azure_queue.send_message("azure after")
        kubemq_result = kmq.send_queue_message_simple(QueueMessage(channel="full-disk-k", body=b"after"))
        assert not kubemq_result.is_error, kubemq_result.error
        kmq.close()

        # Exactly the acknowledged messages: none lost, none of the refused ones.
        assert counts(sqs, url)[0] == len(acknowledged)
        server.stop_cleanly()
        server.start()
        sqs = make_client(server.endpoint, read_timeout=TIMEOUT_S)
        got = []
        while True:
            batch = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, VisibilityTimeout=60,
                                        WaitTimeSeconds=0).get("Messages", [])
            if not batch:
                break
            got.extend(m["Body"] for m in batch)
        assert sorted(got) == sorted(acknowledged)
        assert azure_queue.get_queue_properties().approximate_message_count == 1
    finally:
        server.kill()


def flip_byte(path: Path, offset: int) -> None:
    with open(path, "r+b") as f:
        f.seek(offset)
        byte = f.read(1)
        f.seek(offset)
        f.write(bytes([byte[0] ^ 0x01]))


def start_fails(data_dir: Path, log_dir: Path) -> str:
    """Starts veil on `data_dir`, expects it to exit non-zero at once; returns its output."""
    server = VeilServer(data_dir, log_dir=log_dir)
    done = subprocess.run(server.command(), capture_output=True, text=True, timeout=20)
    assert done.returncode != 0, f"veil started on damaged data\n{done.stdout}\n{done.stderr}"
    return done.stderr


def test_a_flipped_byte_in_the_store_file_stops_start_up_with_an_error_naming_the_file(tmp_path):
    server = VeilServer(tmp_path / "data", log_dir=tmp_path, extra_args=["--sqs-auth", "off"]).start()
    sqs = make_client(server.endpoint, read_timeout=TIMEOUT_S)
    url = sqs.create_queue(QueueName="flipped")["QueueUrl"]
    for i in range(20):
        sqs.send_message(QueueUrl=url, MessageBody=f"flip-target-{i:03d}-" + "y" * 200)
    # A clean stop checkpoints everything into veil.redb: the queue's record is in its pages now (the bodies
    # stay in their log segment, docs/decisions/0013-bodies-written-once.md).
    server.stop_cleanly()
    store_file = tmp_path / "data" / "veil.redb"
    at = store_file.read_bytes().find(b"flipped")
    assert at > 0, "the queue record is not in the store file"
    assert b"flip-target-007-" not in store_file.read_bytes(), "a body was written into the store file"
    flip_byte(store_file, at + 3)
    stderr = start_fails(tmp_path / "data", tmp_path)
    assert "veil.redb" in stderr and "checksums" in stderr, stderr
