#!/usr/bin/env python3
"""How long one /metrics scrape takes with many queues (the target: < 50 ms at 10,000 queues, docs/benchmarks.md).

Usage: .venv/bin/python bench/metrics-many-queues.py [QUEUES] [BIN]
Starts a fresh veil on free ports, creates QUEUES queues through the admin API (one message in every tenth, one
in flight in every hundredth, so series carry values), then times 21 scrapes at 1 queue and at QUEUES queues
with curl and prints the medians and the size of the response."""

import socket
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

import requests


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def timed_scrapes(session, url, n=21):
    """Median and max of n scrapes as curl times them (request to last byte; Python's own reading of 10 MB
    would add tens of ms that are the client's), and the response size."""
    times, size = [], len(session.get(url, timeout=30).content)
    for _ in range(n):
        out = subprocess.run(["curl", "-s", "-o", "/dev/null", "-w", "%{time_total}", url],
                             capture_output=True, text=True, check=True).stdout
        times.append(float(out))
    return statistics.median(times) * 1e3, max(times) * 1e3, size


SESSIONS = {}


def fill(admin: str, i: int):
    """Creates queue i; every tenth gets a message, every hundredth one in flight."""
    import threading
    session = SESSIONS.setdefault(threading.get_ident(), requests.Session())
    name = f"q{i:05d}"
    session.post(f"{admin}/api/v1/queues", json={"name": name}).raise_for_status()
    if i % 10 == 0:
        session.post(f"{admin}/api/v1/queues/default/{name}/messages",
                     json={"messages": [{"body": "x" * 100}]}).raise_for_status()
    if i % 100 == 0:
        session.post(f"{admin}/api/v1/queues/default/{name}/messages/receive",
                     json={"max": 1, "visibility_timeout_s": 3600}).raise_for_status()


def main():
    queues = int(sys.argv[1]) if len(sys.argv) > 1 else 10_000
    binary = sys.argv[2] if len(sys.argv) > 2 else "target/release/veil"
    ports = [free_port() for _ in range(4)]
    with tempfile.TemporaryDirectory() as data:
        proc = subprocess.Popen([binary, "serve", "--data-dir", data, "--sqs-listen", f"127.0.0.1:{ports[0]}",
                                 "--azure-listen", f"127.0.0.1:{ports[1]}", "--kubemq-listen",
                                 f"127.0.0.1:{ports[2]}", "--admin-listen", f"127.0.0.1:{ports[3]}",
                                 "--log-level", "warn"])
        try:
            admin = f"http://127.0.0.1:{ports[3]}"
            session = requests.Session()
            for _ in range(200):
                try:
                    if session.get(f"{admin}/readyz", timeout=1).status_code == 200:
                        break
                except requests.ConnectionError:
                    pass
                time.sleep(0.05)
            session.post(f"{admin}/api/v1/queues", json={"name": "q00000"}).raise_for_status()
            one = timed_scrapes(session, f"{admin}/metrics")
            started = time.perf_counter()
            # Concurrent creates share commits (group commit), so filling takes seconds, not minutes.
            with ThreadPoolExecutor(16) as pool:
                list(pool.map(lambda i: fill(admin, i), range(1, queues)))
            filled = time.perf_counter() - started
            many = timed_scrapes(session, f"{admin}/metrics")
            if "--hold" in sys.argv:
                input(f"holding the server at {admin}; press enter to stop")
            print(f"1 queue: median {one[0]:.2f} ms, max {one[1]:.2f} ms, {one[2]} bytes")
            print(f"{queues} queues (created in {filled:.1f} s): median {many[0]:.2f} ms, max {many[1]:.2f} ms, "
                  f"{many[2]} bytes")
        finally:
            proc.terminate()
            proc.wait(30)


if __name__ == "__main__":
    main()
