"""What the kill -9 tests share: the ledger of what the server acknowledged (and what was in doubt when it
died), and the traffic run that ends in the kill. Used by test_crash.py (SQS) and test_crash_protocols.py
(Azure Queue Storage and KubeMQ)."""

from __future__ import annotations

import threading
import time
from collections import defaultdict


class Ledger:
    """What the server acknowledged, and what was in doubt when it died."""

    def __init__(self):
        self.lock = threading.Lock()
        self.killed = threading.Event()
        self.attempted_bodies = set()
        self.sent = {}  # id -> body (acknowledged)
        self.deleted = set()  # ids whose delete was acknowledged
        self.delete_in_doubt = set()
        self.long_hidden = {}  # id -> receipt whose 60 s hide was acknowledged
        self.long_in_doubt = {}  # id -> receipt whose 60 s hide was in doubt
        self.nacked = set()  # ids a consumer tried to make visible again (acknowledged or in doubt)
        self.receives = defaultdict(int)  # id -> acknowledged receives
        self.taken_in_doubt = 0  # messages that requests cut off by the kill may have removed unseen (at most)
        self.errors = []  # unexpected failures before the kill

    def next_bodies(self, rng, tag: str, n: int, sizes) -> list:
        """The bodies of a producer's next send (one of `sizes` messages, numbered from `n`), recorded as
        attempted before the request goes out."""
        bodies = [f"{tag}-{n + i}-{'x' * rng.randint(0, 300)}" for i in range(rng.choice(sizes))]
        with self.lock:
            self.attempted_bodies.update(bodies)
        return bodies

    def failed(self, what, exc):
        """Classify a failed request: before the kill it is a server error, after it the request is in doubt."""
        if self.killed.is_set():
            return True
        with self.lock:
            self.errors.append(f"{what}: {type(exc).__name__}: {exc}")
        return False

    def assert_meaningful(self, sends_min: int = 20):
        assert not self.errors, "requests failed before the kill:\n" + "\n".join(self.errors[:20])
        assert len(self.sent) >= sends_min, (
            f"too little traffic to mean anything: {len(self.sent)} acknowledged sends"
        )
        assert self.receives, "the consumers never received anything"

    def summary(self, protocol: str) -> str:
        return (
            f"\n{protocol} crash test: {len(self.sent)} sends, {sum(self.receives.values())} receives, "
            f"{len(self.deleted)} deletes, {len(self.long_hidden)} 60 s hides acknowledged; in doubt at the kill: "
            f"{len(self.attempted_bodies) - len(self.sent)} sends, {len(self.delete_in_doubt)} deletes, "
            f"{len(self.long_in_doubt)} hides"
        )


def run_until_killed(server, ledger: Ledger, workers, seconds: float) -> float:
    """Runs `workers` (callables taking no argument) in threads for `seconds`, then kills the server with
    SIGKILL mid-traffic; returns the monotonic time of the kill once every worker has stopped."""
    threads = [threading.Thread(target=w) for w in workers]
    for t in threads:
        t.start()
    time.sleep(seconds)
    ledger.killed.set()
    server.kill()
    killed_at = time.monotonic()
    for t in threads:
        t.join(30)
    assert not any(t.is_alive() for t in threads), "worker threads did not stop after the kill"
    return killed_at


def sleep_until(moment: float) -> None:
    time.sleep(max(0.0, moment - time.monotonic()))
