"""A crawler-like worker for the durability tests (run as a separate process).

Leases URLs of a binary tree /n/<i> from a shared SQLite frontier, logs each one
before acknowledging it, adds its two children, then marks it done. It is killed with
SIGKILL at random moments by the test; nothing it held may be lost.

    python durability_worker.py DB LOG N [--ttl SECONDS] [--batch K]
"""

from __future__ import annotations

import argparse
import os
import sys
import time

from crawlq import Frontier, Request


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("db")
    ap.add_argument("log")
    ap.add_argument("n", type=int)
    ap.add_argument("--ttl", type=float, default=1.0)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--no-add", action="store_true")
    ap.add_argument("--fetch-time", type=float, default=0.0, help="seconds per batch")
    a = ap.parse_args()
    pid = os.getpid()
    with Frontier.open(f"sqlite:///{a.db}", lease_ttl=a.ttl, concurrency=4,
                       min_delay=0, max_delay=0, delay_factor=0) as f, \
            open(a.log, "a", buffering=1) as log:
        idle_since = time.monotonic()
        while True:
            leases = f.next(a.batch)
            if not leases:
                if f.stats().finished:
                    return
                if time.monotonic() - idle_since > 60:
                    sys.exit("worker idle for 60 s with work left")
                time.sleep(0.01)
                continue
            idle_since = time.monotonic()
            for le in leases:
                i = int(le.request.url.rsplit("/", 1)[1])
                log.write(f"{pid} {le.token} {i}\n")
                if not a.no_add:
                    kids = [k for k in (2 * i + 1, 2 * i + 2) if k < a.n]
                    f.add([Request(f"https://h{k % 13}.example/n/{k}", depth=le.request.depth + 1)
                           for k in kids])
            if a.fetch_time:
                time.sleep(a.fetch_time)
            f.done(leases)


if __name__ == "__main__":
    main()
