#!/usr/bin/env python3
"""What a waiting connection costs Veil (docs/reliability.md "Load and overload"): server RSS per idle
keep-alive connection, per SQS long poll (ReceiveMessage, WaitTimeSeconds=20, HTTP/1.1 keep-alive) and per
KubeMQ downstream waiting in a Get (gRPC streams, --streams-per-channel of them on each HTTP/2 connection).

    bench/long-poll-memory.py --veil-bin target/release/veil [--baseline-bin OLD] [--connections 10000]

Starts each binary (a fresh process per scenario) with a temp data dir and --sqs-auth off, raises this process's open-file limit to its hard
limit (Veil inherits it), and prints one line per binary; with --baseline-bin, the ratios too. RSS is VmRSS of
/proc/PID/status after the connections settle; per-connection figures are (RSS after - RSS before) / count.
"""
import argparse
import asyncio
import json
import os
import resource
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "e2e"))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rss(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS")


def sqs_call(port, action, body):
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/",
        data=json.dumps(body).encode(),
        headers={"content-type": "application/x-amz-json-1.0", "x-amz-target": f"AmazonSQS.{action}"},
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read() or b"{}")


async def settle(pid, seconds):
    await asyncio.sleep(seconds)
    return rss(pid)


async def sqs_waiters(pid, port, url, n):
    """Idle connections first, then a long poll on each; returns (per idle conn, per long poll) in bytes."""
    before = await settle(pid, 0.5)
    conns = []
    for i in range(0, n, 250):
        batch = await asyncio.gather(
            *(asyncio.open_connection("127.0.0.1", port) for _ in range(min(250, n - i)))
        )
        conns.extend(batch)
    idle = await settle(pid, 1.0 + n / 10000)
    body = json.dumps(
        {"QueueUrl": url, "WaitTimeSeconds": 20, "MaxNumberOfMessages": 1, "VisibilityTimeout": 600}
    ).encode()
    head = (
        f"POST / HTTP/1.1\r\nhost: 127.0.0.1:{port}\r\ncontent-type: application/x-amz-json-1.0\r\n"
        f"x-amz-target: AmazonSQS.ReceiveMessage\r\ncontent-length: {len(body)}\r\n\r\n"
    ).encode()
    for _, writer in conns:
        writer.write(head + body)
    await asyncio.gather(*(writer.drain() for _, writer in conns))
    waiting = await settle(pid, 2.0 + n / 5000)
    for _, writer in conns:
        writer.close()
    return (idle - before) / n, (waiting - before) / n


async def kubemq_waiters(pid, port, queue, channels, per_channel):
    import grpc
    from kubemq.grpc import kubemq_pb2 as pb, kubemq_pb2_grpc as pbg

    before = await settle(pid, 0.5)
    opened = []
    calls = []
    for c in range(channels):
        channel = grpc.aio.insecure_channel(
            f"127.0.0.1:{port}", options=[("grpc.use_local_subchannel_pool", 1), ("grpc.channel_id", c)]
        )
        stub = pbg.kubemqStub(channel)
        opened.append(channel)
        for s in range(per_channel):
            call = stub.QueuesDownstream()
            await call.write(
                pb.QueuesDownstreamRequest(
                    RequestID=f"r{c}-{s}", ClientID=f"mem-{c}-{s}", RequestTypeData=1, Channel=queue,
                    MaxItems=1, WaitTimeout=20_000,
                )
            )
            calls.append(call)
    waiting = await settle(pid, 2.0 + channels * per_channel / 5000)
    for call in calls:
        call.cancel()
    for channel in opened:
        await channel.close()
    return (waiting - before) / (channels * per_channel)


class Server:
    """One Veil process on a fresh data dir; each scenario gets its own, so memory one scenario frees late is
    not counted against the next."""

    def __init__(self, bin_path):
        self.data = tempfile.mkdtemp(prefix="veil-mem-")
        self.sqs, azure, self.kubemq, admin = (free_port() for _ in range(4))
        log = open(os.path.join(self.data, "veil.log"), "w")
        self.proc = subprocess.Popen(
            [bin_path, "serve", "--data-dir", os.path.join(self.data, "d"), "--sqs-listen", f"127.0.0.1:{self.sqs}",
             "--azure-listen", f"127.0.0.1:{azure}", "--kubemq-listen", f"127.0.0.1:{self.kubemq}",
             "--admin-listen", f"127.0.0.1:{admin}", "--sqs-auth", "off", "--log-level", "warn"],
            stdout=subprocess.DEVNULL, stderr=log,
        )
        for _ in range(300):
            try:
                self.url = sqs_call(self.sqs, "CreateQueue", {"QueueName": "mem"})["QueueUrl"]
                break
            except OSError:
                time.sleep(0.05)
        else:
            self.stop()
            raise RuntimeError(f"{bin_path} did not start; see {self.data}/veil.log")
        sqs_call(self.sqs, "SendMessage", {"QueueUrl": self.url, "MessageBody": "warm"})
        sqs_call(self.sqs, "ReceiveMessage", {"QueueUrl": self.url, "VisibilityTimeout": 600})
        self.pid = self.proc.pid

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()


async def measure(bin_path, n, channels, per_channel):
    server = Server(bin_path)
    try:
        idle_rss = rss(server.pid)
        per_idle, per_poll = await sqs_waiters(server.pid, server.sqs, server.url, n)
    finally:
        server.stop()
    server = Server(bin_path)
    try:
        per_stream = await kubemq_waiters(server.pid, server.kubemq, "mem", channels, per_channel)
    finally:
        server.stop()
    return {"bin": bin_path, "connections": n, "rss_start_mib": idle_rss / 2**20,
            "per_idle_connection_kib": per_idle / 1024, "per_sqs_long_poll_kib": per_poll / 1024,
            "kubemq_streams": channels * per_channel, "per_kubemq_downstream_kib": per_stream / 1024}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--veil-bin", default="target/release/veil")
    parser.add_argument("--baseline-bin")
    parser.add_argument("--connections", type=int, default=10_000)
    parser.add_argument("--kubemq-channels", type=int, default=100)
    parser.add_argument("--streams-per-channel", type=int, default=100)
    args = parser.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    if hard < args.connections + 1000:
        sys.exit(f"open-file hard limit {hard} is below {args.connections} connections")
    results = []
    for bin_path in [b for b in (args.baseline_bin, args.veil_bin) if b]:
        r = asyncio.run(measure(bin_path, args.connections, args.kubemq_channels, args.streams_per_channel))
        results.append(r)
        print(
            f"{r['bin']}: {r['connections']} connections: {r['per_idle_connection_kib']:.1f} KiB per idle "
            f"keep-alive connection, {r['per_sqs_long_poll_kib']:.1f} KiB per waiting SQS long poll; "
            f"{r['kubemq_streams']} KubeMQ downstreams: {r['per_kubemq_downstream_kib']:.1f} KiB each "
            f"(RSS at start {r['rss_start_mib']:.1f} MiB)",
            flush=True,
        )
    if len(results) == 2:
        b, a = results
        for key in ("per_idle_connection_kib", "per_sqs_long_poll_kib", "per_kubemq_downstream_kib"):
            print(f"  {key}: {b[key]:.1f} -> {a[key]:.1f} (x{a[key] / b[key]:.2f})" if b[key] else key)
    print(json.dumps(results))


if __name__ == "__main__":
    main()
