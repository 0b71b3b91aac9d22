#!/bin/bash
# Usage: bench/idle-commit.sh [BIN] (needs the tests' venv, .venv, with boto3: ./scripts/test makes it; ports 9470-9473)
# The durable send of an idle server (issue 28, items 3 and 7): one SendMessage every 20 ms through boto3,
# then the server's own mean SendMessage time and mean group commit from /metrics; and a bare fdatasync after a
# 1.2 KiB write in the same directory, back to back and with 2 ms and 20 ms gaps. The many-waiters wake is the
# send's round trip when the server is otherwise idle, which is what this splits.
BIN=${1:-target/release/veil}
python=${VEIL_PYTHON:-$(dirname "$0")/../.venv/bin/python}
dir=$(mktemp -d); trap 'kill $P 2>/dev/null; wait $P 2>/dev/null; rm -rf "$dir"' EXIT
"$BIN" serve --data-dir "$dir/d" --sqs-listen 127.0.0.1:9470 --azure-listen 127.0.0.1:9471 \
  --kubemq-listen 127.0.0.1:9472 --admin-listen 127.0.0.1:9473 --log-level error & P=$!
sleep 0.5
"$python" - "$dir" <<'PY'
import os, sys, time, urllib.request
import boto3
sqs = boto3.client("sqs", endpoint_url="http://127.0.0.1:9470", region_name="us-east-1",
                   aws_access_key_id="test", aws_secret_access_key="test")
url = sqs.create_queue(QueueName="idle")["QueueUrl"]
client = []
for _ in range(300):
    time.sleep(0.02)
    started = time.perf_counter()
    sqs.send_message(QueueUrl=url, MessageBody="x")
    client.append((time.perf_counter() - started) * 1e6)
client.sort()
print(f"boto3 SendMessage every 20 ms: client p50 {client[150]:.0f} µs, p90 {client[270]:.0f} µs")
metrics = urllib.request.urlopen("http://127.0.0.1:9473/metrics").read().decode().splitlines()
def mean(name, label):
    value = {}
    for kind in ("sum", "count"):
        for line in metrics:
            if line.startswith(f"{name}_{kind}") and label in line:
                value[kind] = float(line.split()[-1])
    return value["sum"] / value["count"] * 1e6 if value.get("count") else float("nan")
send_us = mean("veil_request_duration_seconds", 'operation="SendMessage"')
commit_us = mean("veil_store_commit_duration_seconds", "")
print(f"server: SendMessage mean {send_us:.0f} µs, group commit (append + fdatasync) mean {commit_us:.0f} µs")
path = os.path.join(sys.argv[1], "fsync.bin")
fd = os.open(path, os.O_CREAT | os.O_RDWR, 0o600)
os.posix_fallocate(fd, 0, 64 << 20)
os.fsync(fd)
for gap in (0, 0.002, 0.02):
    syncs = []
    for i in range(200):
        if gap:
            time.sleep(gap)
        os.pwrite(fd, b"x" * 1200, i * 4096)
        started = time.perf_counter()
        os.fdatasync(fd)
        syncs.append((time.perf_counter() - started) * 1e6)
    syncs.sort()
    print(f"bare fdatasync, {gap * 1000:.0f} ms between: p50 {syncs[100]:.0f} µs, p90 {syncs[180]:.0f} µs")
PY
