"""The soak: mixed load over SQS (boto3), Azure Queue Storage (azure-storage-queue) and KubeMQ (the kubemq SDK)
against one real `veil` for a long time (an hour by default), restarting it every few minutes — SIGKILL and
SIGTERM in turn — while the load goes on. It samples the server's RSS and open file descriptors, and keeps the
crash test's accounting (tests/e2e/crash_support.py) across every restart:

- lost: an acknowledged send that is neither drained at the end nor deleted (acknowledged, or in doubt when a
  request was cut off by a restart);
- resurrected: a message drained at the end, or delivered again, after its delete was acknowledged;
- duplicate inside a window: a message delivered again before the visibility of its previous delivery ended,
  counted from when that receive was sent (the server's deadline can only be later), unless its holder
  released it (visibility 0, a nack) or a graceful shutdown released KubeMQ's open transactions.

Run by `scripts/soak` (not part of CI); prints a summary and writes it as JSON; exits 1 on any accounting
failure or a leak (file descriptors growing, RSS growing within a run of the server beyond the tolerance)."""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import threading
import time
from collections import defaultdict
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "e2e"))

from helpers import VeilServer, kubemq_client, make_client  # noqa: E402

VISIBILITY_S = 3  # every consumer's visibility (KubeMQ: the server-side default, configured)
# RSS is flat when the soak's second half never goes above its first half's peak by more than this (the log's
# in-memory overlay fills up to a segment after every start, so a run's own first minutes are no baseline).
RSS_SECOND_HALF_GROWTH_MAX = 1.25
RSS_SLACK_KIB = 16 * 1024
FD_GROWTH_MAX = 64  # open descriptors may differ by this much between runs (connections come and go)
pause_s = 0.01  # each worker's pause between rounds (--pause-ms)


class Ledger:
    """Everything the clients saw, over every restart."""

    def __init__(self):
        self.lock = threading.Lock()
        self.sent = {}  # (protocol, id) -> body, acknowledged
        self.attempted = set()  # bodies whose send was tried
        self.deleted = {}  # (protocol, id) -> monotonic time the delete was acknowledged
        self.delete_in_doubt = set()
        self.last_delivery = {}  # (protocol, id) -> (receive sent at, visibility end lower bound)
        self.released = set()  # deliveries released by their holder: (protocol, id)
        self.duplicates_in_window = []
        self.resurrected = []
        self.errors = defaultdict(int)  # failed requests by protocol (expected around restarts)
        self.counts = defaultdict(int)
        self.graceful_stops = []  # monotonic times of SIGTERMs (they release KubeMQ transactions)

    def delivered(self, protocol, mid, sent_at, visibility_s):
        key = (protocol, mid)
        now = time.monotonic()
        with self.lock:
            self.counts[f"{protocol}_receives"] += 1
            if key in self.deleted and now > self.deleted[key] + 1.0:
                self.resurrected.append((protocol, mid, "delivered after its delete was acknowledged"))
            previous = self.last_delivery.get(key)
            if previous and key not in self.released:
                prev_sent, prev_end = previous
                released_by_stop = protocol == "kubemq" and any(prev_sent <= t <= now for t in self.graceful_stops)
                if now < prev_end and not released_by_stop:
                    self.duplicates_in_window.append((protocol, mid, round(prev_end - now, 3)))
            self.released.discard(key)
            self.last_delivery[key] = (sent_at, sent_at + visibility_s)


def settle(ledger: Ledger, key, roll: float, delete, release):
    """What a consumer does with a delivery, by `roll`: 70% deleted (in doubt until the delete answers), 10%
    released at once (visibility 0), the rest left to time out."""
    if roll < 0.7:
        with ledger.lock:
            ledger.delete_in_doubt.add(key)
        delete()
        with ledger.lock:
            ledger.deleted[key] = time.monotonic()
            ledger.delete_in_doubt.discard(key)
    elif roll < 0.8:
        with ledger.lock:
            ledger.released.add(key)
        release()


# A worker makes its client anew after any failed request (the server may have restarted on the same ports).


def run_sqs(server: VeilServer, ledger: Ledger, stop: threading.Event, seed: int):
    rng = random.Random(seed)
    client, url = None, None
    n = 0
    while not stop.wait(pause_s):
        try:
            if client is None:
                client = make_client(server.endpoint, read_timeout=10, attempts=1)
                url = client.create_queue(QueueName="soak-sqs")["QueueUrl"]
            bodies = [f"sqs-{seed}-{n + i}" for i in range(rng.choice([1, 1, 5]))]
            n += len(bodies)
            with ledger.lock:
                ledger.attempted.update(bodies)
            if len(bodies) == 1:
                r = client.send_message(QueueUrl=url, MessageBody=bodies[0])
                acked = {r["MessageId"]: bodies[0]}
            else:
                r = client.send_message_batch(
                    QueueUrl=url, Entries=[{"Id": f"e{i}", "MessageBody": b} for i, b in enumerate(bodies)])
                acked = {s["MessageId"]: bodies[int(s["Id"][1:])] for s in r.get("Successful", [])}
            with ledger.lock:
                ledger.sent.update({("sqs", k): v for k, v in acked.items()})
            sent_at = time.monotonic()
            msgs = client.receive_message(QueueUrl=url, MaxNumberOfMessages=10, VisibilityTimeout=VISIBILITY_S,
                                          WaitTimeSeconds=1).get("Messages", [])
            for m in msgs:
                ledger.delivered("sqs", m["MessageId"], sent_at, VISIBILITY_S)
            for m in msgs:
                handle = m["ReceiptHandle"]
                settle(ledger, ("sqs", m["MessageId"]), rng.random(),
                       lambda: client.delete_message(QueueUrl=url, ReceiptHandle=handle),
                       lambda: client.change_message_visibility(QueueUrl=url, ReceiptHandle=handle,
                                                                VisibilityTimeout=0))
        except Exception:  # noqa: BLE001 - restarts cut requests off; they are in doubt
            with ledger.lock:
                ledger.errors["sqs"] += 1
            client = None
            time.sleep(0.2)


def run_azure(server: VeilServer, ledger: Ledger, stop: threading.Event, seed: int):
    from azure.core.exceptions import ResourceNotFoundError
    from azure.storage.queue import QueueClient

    rng = random.Random(seed)
    q = None
    n = 0
    while not stop.wait(pause_s):
        try:
            if q is None:
                q = QueueClient.from_connection_string(server.azure_connection_string(), "soak-azure",
                                                       retry_total=0, connection_timeout=5, read_timeout=10)
                try:
                    q.create_queue()
                except Exception:  # noqa: BLE001 - it exists
                    pass
            body = f"azure-{seed}-{n}"
            n += 1
            with ledger.lock:
                ledger.attempted.add(body)
            sent = q.send_message(body)
            with ledger.lock:
                ledger.sent[("azure", sent.id)] = body
            sent_at = time.monotonic()
            got = list(q.receive_messages(messages_per_page=16, max_messages=16, visibility_timeout=VISIBILITY_S))
            for m in got:
                ledger.delivered("azure", m.id, sent_at, VISIBILITY_S)
            for m in got:
                key = ("azure", m.id)
                try:
                    settle(ledger, key, rng.random(), lambda: q.delete_message(m.id, m.pop_receipt),
                           lambda: q.update_message(m.id, m.pop_receipt, visibility_timeout=0))
                except ResourceNotFoundError:
                    # Our visibility lapsed and someone else holds the message now: nothing happened.
                    with ledger.lock:
                        ledger.delete_in_doubt.discard(key)
        except Exception:  # noqa: BLE001
            with ledger.lock:
                ledger.errors["azure"] += 1
            q = None
            time.sleep(0.2)


def run_kubemq(server: VeilServer, ledger: Ledger, stop: threading.Event, seed: int):
    from kubemq.queues import QueueMessage

    rng = random.Random(seed)
    client = None
    n = 0
    while not stop.wait(pause_s):
        try:
            if client is None:
                client = kubemq_client(server, client_id=f"soak-{seed}")
            body = f"kubemq-{seed}-{n}"
            n += 1
            with ledger.lock:
                ledger.attempted.add(body)
            r = client.send_queue_message(QueueMessage(channel="soak-kubemq", body=body.encode()))
            if r.is_error:
                raise RuntimeError(r.error)
            with ledger.lock:
                ledger.sent[("kubemq", r.id)] = body
            sent_at = time.monotonic()
            if rng.random() < 0.4:
                pulled = client.pull("soak-kubemq", max_messages=1, wait_timeout_in_seconds=1)
                if pulled.is_error:
                    raise RuntimeError(pulled.error)
                for m in pulled.messages:
                    ledger.delivered("kubemq", m.id, sent_at, VISIBILITY_S)
                    with ledger.lock:
                        ledger.deleted[("kubemq", m.id)] = time.monotonic()
                continue
            # A poll collects until its maximum or the end of its wait: a maximum of one keeps the rounds short.
            got = client.receive_queue_messages(channel="soak-kubemq", max_messages=1,
                                                wait_timeout_in_seconds=1)
            if got.is_error:
                raise RuntimeError(got.error)
            for m in got.messages:
                ledger.delivered("kubemq", m.id, sent_at, VISIBILITY_S)
            for m in got.messages:
                key = ("kubemq", m.id)
                roll = rng.random()
                if roll < 0.6:
                    # The SDK sends an ack without waiting for an answer: in doubt until the end shows it.
                    with ledger.lock:
                        ledger.delete_in_doubt.add(key)
                    m.ack()
                elif roll < 0.8:
                    with ledger.lock:
                        ledger.released.add(key)
                    m.nack()
        except Exception:  # noqa: BLE001
            with ledger.lock:
                ledger.errors["kubemq"] += 1
            if client is not None:
                try:
                    client.close()
                except Exception:  # noqa: BLE001 - the connection is already gone
                    pass
            client = None
            time.sleep(0.2)
    if client is not None:
        client.close()


def sample(pid: int) -> tuple[int, int]:
    """(RSS in KiB, open file descriptors) of `pid`."""
    rss = 0
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            rss = int(line.split()[1])
    return rss, len(os.listdir(f"/proc/{pid}/fd"))


def drain_all(server: VeilServer) -> dict:
    """Everything left, per protocol: SQS and Azure received with a long visibility, KubeMQ pulled."""
    from azure.storage.queue import QueueClient

    left = defaultdict(list)
    sqs = make_client(server.endpoint, attempts=1)
    url = sqs.get_queue_url(QueueName="soak-sqs")["QueueUrl"]
    while msgs := sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, VisibilityTimeout=600,
                                      WaitTimeSeconds=1).get("Messages", []):
        left["sqs"] += [(m["MessageId"], m["Body"]) for m in msgs]
    q = QueueClient.from_connection_string(server.azure_connection_string(), "soak-azure", retry_total=0)
    while page := list(q.receive_messages(messages_per_page=32, max_messages=32, visibility_timeout=600)):
        left["azure"] += [(m.id, m.content) for m in page]
    client = kubemq_client(server, client_id="soak-drain")
    try:
        while True:
            pulled = client.pull("soak-kubemq", max_messages=500, wait_timeout_in_seconds=1)
            assert not pulled.is_error, pulled.error
            if not pulled.messages:
                break
            left["kubemq"] += [(m.id, m.body.decode()) for m in pulled.messages]
    finally:
        client.close()
    return left


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=60.0, help="how long the load runs")
    parser.add_argument("--restart-every", type=float, default=10.0, help="minutes between restarts")
    parser.add_argument("--workers", type=int, default=1, help="worker threads per protocol")
    parser.add_argument("--pause-ms", type=int, default=10, help="each worker's pause between rounds")
    parser.add_argument("--out", type=Path, default=Path("soak-result.json"))
    parser.add_argument("--dir", type=Path, help="data dir and logs (default: a temporary dir)")
    args = parser.parse_args()

    import tempfile

    global pause_s
    pause_s = args.pause_ms / 1000

    base = args.dir or Path(tempfile.mkdtemp(prefix="veil-soak-"))
    config = base / "veil.toml"
    base.mkdir(parents=True, exist_ok=True)
    config.write_text(f"[kubemq]\ndefault_visibility_seconds = {VISIBILITY_S}\n")
    server = VeilServer(base / "data", extra_args=["--config", str(config)], log_dir=base)
    server.start()
    ledger = Ledger()
    stop = threading.Event()
    threads = []
    for i in range(args.workers):
        threads.append(threading.Thread(target=run_sqs, args=(server, ledger, stop, i)))
        threads.append(threading.Thread(target=run_azure, args=(server, ledger, stop, 100 + i)))
        threads.append(threading.Thread(target=run_kubemq, args=(server, ledger, stop, 200 + i)))
    for t in threads:
        t.start()

    started = time.monotonic()
    end = started + args.minutes * 60
    next_restart = started + args.restart_every * 60
    runs = [{"samples": []}]
    restarts = 0
    while time.monotonic() < end:
        time.sleep(min(10.0, max(0.0, end - time.monotonic())))
        rss, fds = sample(server.proc.pid)
        runs[-1]["samples"].append((round(time.monotonic() - started), rss, fds))
        print(f"t={time.monotonic() - started:7.0f}s rss={rss / 1024:6.1f} MiB fds={fds:4d} "
              f"sent={len(ledger.sent)} deleted={len(ledger.deleted)} errors={dict(ledger.errors)}", flush=True)
        if time.monotonic() >= next_restart and time.monotonic() < end - 30:
            restarts += 1
            how = "SIGKILL" if restarts % 2 == 1 else "SIGTERM"
            if how == "SIGKILL":
                server.kill()
            else:
                with ledger.lock:
                    ledger.graceful_stops.append(time.monotonic())
                rc = server.stop()
                assert rc == 0, f"veil exited with {rc} after SIGTERM\n{server.log_tail()}"
            server.start()
            print(f"restart {restarts} ({how})", flush=True)
            runs.append({"after": how, "samples": []})
            next_restart += args.restart_every * 60
    stop.set()
    for t in threads:
        t.join(60)

    # Let every visibility lapse, then take everything that is left.
    time.sleep(VISIBILITY_S + 1)
    left = drain_all(server)
    final_rss, final_fds = sample(server.proc.pid)
    server.stop_cleanly()

    drained = {(p, i): body for p, items in left.items() for i, body in items}
    lost = [k for k in ledger.sent if k not in drained and k not in ledger.deleted and k not in ledger.delete_in_doubt]
    resurrected = list(ledger.resurrected) + [k for k in drained if k in ledger.deleted]
    unknown = [k for k, body in drained.items() if body not in ledger.attempted]
    drained_twice = sum(len(items) for items in left.values()) - len(drained)
    leaks = []
    samples = [s for run in runs for s in run["samples"]]
    half = len(samples) // 2
    if half >= 2:
        first_peak = max(rss for _, rss, _ in samples[:half])
        second_peak = max(rss for _, rss, _ in samples[half:])
        if second_peak > first_peak * RSS_SECOND_HALF_GROWTH_MAX + RSS_SLACK_KIB:
            leaks.append(f"RSS peak {first_peak} KiB in the first half, {second_peak} KiB in the second")
    fd_counts = [run["samples"][-1][2] for run in runs if run["samples"]]
    if fd_counts and max(fd_counts) - min(fd_counts) > FD_GROWTH_MAX:
        leaks.append(f"open descriptors per run: {fd_counts}")

    result = {
        "minutes": args.minutes,
        "restarts": restarts,
        "acknowledged_sends": len(ledger.sent),
        "acknowledged_deletes": len(ledger.deleted),
        "deletes_in_doubt": len(ledger.delete_in_doubt),
        "receives": dict(ledger.counts),
        "left_at_end": {p: len(v) for p, v in left.items()},
        "failed_requests": dict(ledger.errors),
        "lost": len(lost),
        "resurrected": len(resurrected),
        "unknown": len(unknown),
        "drained_twice": drained_twice,
        "duplicates_inside_a_window": len(ledger.duplicates_in_window),
        "rss_kib_per_run_first_peak_last": [
            [run["samples"][0][1], max(x[1] for x in run["samples"]), run["samples"][-1][1]]
            for run in runs if run["samples"]
        ],
        "fds_per_run": fd_counts,
        "final": {"rss_kib": final_rss, "fds": final_fds},
        "leaks": leaks,
        "examples": {"lost": lost[:5], "resurrected": resurrected[:5],
                     "duplicates": ledger.duplicates_in_window[:5]},
    }
    args.out.write_text(json.dumps(result, indent=2, default=str))
    print(json.dumps(result, indent=2, default=str))
    failed = lost or resurrected or unknown or drained_twice or ledger.duplicates_in_window or leaks
    print("SOAK FAILED" if failed else "soak passed", f"(result in {args.out}, logs in {base})")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
