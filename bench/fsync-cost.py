#!/usr/bin/env python3
"""What one fdatasync of a small log record costs on this machine's disk, three ways: appending to the file
(the sync also journals the new size), overwriting space reserved with posix_fallocate (what Veil's log
segments do, ADR 0004), and overwriting zeros written beforehand. Prints each way's per-sync median over
ROUNDS rounds of SYNCS syncs, interleaved. Usage: bench/fsync-cost.py [DIR] (default: $TMPDIR or /tmp)."""
import os
import statistics
import sys
import tempfile
import time

RECORD = b"x" * 1200
SYNCS = 1000
ROUNDS = 5


def per_sync_us(directory, way):
    fd, path = tempfile.mkstemp(dir=directory)
    try:
        size = SYNCS * len(RECORD) + 4096
        if way == "zeroed":
            os.write(fd, b"\0" * size)
            os.fsync(fd)
            os.lseek(fd, 0, 0)
        elif way == "fallocate":
            os.posix_fallocate(fd, 0, size)
            os.fsync(fd)
        started = time.perf_counter()
        for _ in range(SYNCS):
            os.write(fd, RECORD)
            os.fdatasync(fd)
        return (time.perf_counter() - started) / SYNCS * 1e6
    finally:
        os.close(fd)
        os.remove(path)


def main():
    directory = sys.argv[1] if len(sys.argv) > 1 else tempfile.gettempdir()
    ways = ["append", "fallocate", "zeroed"]
    results = {way: [] for way in ways}
    for _ in range(ROUNDS):
        for way in ways:
            results[way].append(per_sync_us(directory, way))
    for way in ways:
        runs = " ".join(f"{v:.0f}" for v in sorted(results[way]))
        print(f"{way:10} median {statistics.median(results[way]):.0f} µs per fdatasync  (runs: {runs})")


if __name__ == "__main__":
    main()
