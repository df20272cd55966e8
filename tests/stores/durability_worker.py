"""A crawler-like worker for the durability tests (run as a separate process).

Leases URLs of a binary tree /n/<i> from a shared frontier (a SQLite file, or any
store URL such as redis://...), adds each one's two children, logs it and then marks
it done. It is killed with SIGKILL at random moments by the test; nothing it held may
be lost. Each log line is ``pid token i leased_at logged_at queue``: the span in which
the worker held the lease, for checks of per-host concurrency across processes.

    python durability_worker.py STORE LOG N [--ttl SECONDS] [--batch K]
"""

from __future__ import annotations

import argparse
import os
import sys
import time

from crawlq import Frontier, Request


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("store", help="a store URL, or a SQLite file path")
    ap.add_argument("log")
    ap.add_argument("n", type=int)
    ap.add_argument("--ttl", type=float, default=1.0)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--no-add", action="store_true")
    ap.add_argument("--fetch-time", type=float, default=0.0, help="seconds per batch")
    ap.add_argument("--concurrency", type=int, default=4, help="leases per host at most")
    a = ap.parse_args()
    pid = os.getpid()
    l0_rows = os.environ.get("CRAWLQ_TEST_L0_ROWS")
    if l0_rows:  # small SQLite levels, so that merges happen while workers get killed
        from crawlq.stores import sqlite_levels

        setattr(sqlite_levels, "L0_ROWS", int(l0_rows))  # noqa: B010 (a test knob)
    store = a.store if "://" in a.store else f"sqlite:///{a.store}"
    with Frontier.open(store, lease_ttl=a.ttl, concurrency=a.concurrency,
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
            leased_at = time.time()
            for le in leases:
                i = int(le.request.url.rsplit("/", 1)[1])
                if not a.no_add:
                    kids = [k for k in (2 * i + 1, 2 * i + 2) if k < a.n]
                    f.add([Request(f"https://h{k % 13}.example/n/{k}", depth=le.request.depth + 1)
                           for k in kids])
            if a.fetch_time:
                time.sleep(a.fetch_time)
            # Logged before acknowledging: a line may be logged twice (killed in
            # between), a done request is never missing from the log.
            now = time.time()
            log.write("".join(f"{pid} {le.token} {le.request.url.rsplit('/', 1)[1]} "
                              f"{leased_at!r} {now!r} {le.queue}\n" for le in leases))
            f.done(leases)


if __name__ == "__main__":
    main()
