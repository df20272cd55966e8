#!/usr/bin/env python3
"""Does the SQLite store keep its speed as the frontier grows? Rates at 100 k vs 10 M queued.

Fills one SQLite frontier per checkpoint (--at, queued URLs), each in a process of its
own, with synthetic URLs over many hosts, then measures, in --repeat rounds that visit
every store in turn, the add rate of --window fresh URLs and the next+done rate of
--window leases (each add window tops the queue back up), and keeps the fastest of each.
Prints the rates, their ratio to the first checkpoint's, RSS (grown while the store
filled) and disk per queued URL.
The target: add and next rates at 10 M within 1.5x of their rates at 100 k.

The rounds interleave the checkpoints because the machine's speed drifts over the
minutes a 10 M fill takes: timing 100 k before the fill and 10 M after it gave ratios
from 0.88x to 2.19x for the same code. Each store has its own process, so that one
store's cached rows and heap cannot slow the other's windows, and each goes through the
same history before it is timed (see ``worker``).

The window (200k by default) is a whole number of level-0 merges at both sizes (every
50k rows at 100k, every 200k at 10M): an add that merges pays for the rows added since
the last merge, so a shorter window could miss that cost and look faster than the store
is over time (a warning says so).

    python bench/bench_scale.py                          # 100k and 10M (several minutes)
    python bench/bench_scale.py --at 100000 --at 1000000 # quicker
    python bench/bench_scale.py --dir /tmp/s               # keep the files (scale-N.db)
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import shutil
import sys
import tempfile
import time
from multiprocessing.connection import Connection
from pathlib import Path

from crawlq import Frontier, Request
from crawlq.stores.sqlite_levels import l0_limit as _l0_limit


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def urls(start: int, n: int, hosts: int) -> list[Request]:
    # Deterministic, all distinct; hosts by a multiplicative hash so queues interleave.
    return [Request(f"https://host-{(i * 2654435761) % hosts}.example/p/{i}?id={i * 7}",
                    priority=i % 11 - 5) for i in range(start, start + n)]


def window(f: Frontier, made: int, a: argparse.Namespace) -> tuple[float, float]:
    """Add --window fresh URLs (numbered from ``made``), then lease and acknowledge as
    many; their rates."""
    fresh = [urls(made + i, a.batch, a.hosts) for i in range(0, a.window, a.batch)]
    t0 = time.perf_counter()
    for batch in fresh:
        f.add(batch)
    t1 = time.perf_counter()
    taken = 0
    while taken < a.window:
        leases = f.next(1000)
        f.done(leases)
        taken += len(leases)
    t2 = time.perf_counter()
    return a.window / (t1 - t0), taken / (t2 - t1)


def worker(conn: Connection, db: Path, sizes: list[int], a: argparse.Namespace) -> None:
    """Fill a store at ``db`` through ``sizes`` (queued URLs; the last is its checkpoint),
    with an untimed window at each, then time windows when asked.

    Every store goes through the same history: filled in the same order, with a window at
    each smaller checkpoint, as one growing store measured at each would be, and one more
    at its own size before any is timed. That history matters: a window's adds exhaust
    and wake up queues all over the queue-id range, and afterwards each lease call's
    queues lie on many more pages of the queues table (a freshly filled store serves
    them in id order, so its lease calls dirty few pages): next+done at 10M ran at 53k/s
    freshly filled and at 43k/s after one window at 100k."""
    for suffix in ("", "-wal", "-shm"):
        Path(str(db) + suffix).unlink(missing_ok=True)
    rss0 = rss_bytes()
    f = Frontier.open(f"sqlite:///{db}", min_delay=0, max_delay=0, delay_factor=0,
                      concurrency=1_000_000)
    made = queued = 0  # (URLs numbered so far; queued: a window leaves it as it was)
    t = time.perf_counter()
    for size in sizes:
        while queued < size:
            n = min(a.batch * 20, size - queued)
            for i in range(0, n, a.batch):
                f.add(urls(made + i, min(a.batch, n - i), a.hosts))
            made += n
            queued += n
            print(f"\rfilling {db.name}: {queued:,} queued "
                  f"({queued / (time.perf_counter() - t):,.0f}/s)",
                  end="", file=sys.stderr, flush=True)
        window(f, made, a)  # (untimed: the history, and the warm-up)
        made += a.window
    print("", file=sys.stderr)
    assert f.stats().queued == queued, (f.stats().queued, queued)
    rss = (rss_bytes() - rss0) / queued
    conn.send("filled")
    while conn.recv() == "window":
        conn.send(window(f, made, a))
        made += a.window
    queued = f.stats().queued
    f.close()
    disk = sum(p.stat().st_size for p in db.parent.iterdir() if p.name.startswith(db.name))
    conn.send((rss, disk / queued))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--at", type=int, action="append",
                    help="checkpoints in queued URLs (default 100000 and 10000000)")
    ap.add_argument("--hosts", type=int, default=100_000)
    ap.add_argument("--window", type=int, default=200_000,
                    help="URLs timed per checkpoint; at least level 0's merge interval "
                         "(200k rows at 10M), or a window may miss the merge it pays for")
    ap.add_argument("--batch", type=int, default=5_000)
    ap.add_argument("--repeat", type=int, default=3,
                    help="rounds of timed add and next+done windows over the checkpoints; "
                         "the fastest of each counts")
    ap.add_argument("--dir", help="where to keep the databases, scale-<N>.db (default: a "
                                  "temp dir, removed)")
    a = ap.parse_args()
    points = sorted(a.at or [100_000, 10_000_000])
    for target in points:
        interval = max(_l0_limit(target), _l0_limit(target + a.window))
        if a.window % interval:
            print(f"warning: at {target:,} queued, level 0 merges every {interval:,} "
                  f"rows: a window of {a.window:,} is not a whole number of merges "
                  "and its rate is not the amortized one", file=sys.stderr)
    tmp = Path(a.dir) if a.dir else Path(tempfile.mkdtemp(prefix="crawlq-scale-"))
    tmp.mkdir(parents=True, exist_ok=True)
    # (the stores fill one after the other, then the rounds time one at a time: see the
    # module's docstring)
    ctx = multiprocessing.get_context("fork")
    links: list[Connection] = []
    procs = []
    try:
        for target in points:
            here, there = ctx.Pipe()
            sizes = [p for p in points if p <= target]
            proc = ctx.Process(target=worker, args=(there, tmp / f"scale-{target}.db",
                                                    sizes, a))
            proc.start()
            procs.append(proc)
            links.append(here)
            here.recv()  # (filled: the next store fills alone)
        best = [(0.0, 0.0) for _ in points]
        for r in range(a.repeat):  # best of --repeat: this machine is shared and noisy
            for i, (target, link) in enumerate(zip(points, links)):
                link.send("window")
                adds, nexts = link.recv()
                best[i] = (max(best[i][0], adds), max(best[i][1], nexts))
                print(f"round {r + 1}, {target:,} queued: add {adds:,.0f}/s, "
                      f"next+done {nexts:,.0f}/s", file=sys.stderr)
        results: list[tuple[int, float, float, float, float]] = []
        for i, (target, link) in enumerate(zip(points, links)):
            link.send("done")
            rss, disk = link.recv()
            results.append((target, best[i][0], best[i][1], rss, disk))
    finally:
        for proc in procs:
            proc.join(timeout=60)
            if proc.is_alive():
                proc.kill()
        if not a.dir:
            shutil.rmtree(tmp, ignore_errors=True)
    base_add, base_next = results[0][1], results[0][2]
    print(f"{'queued':>12} {'add/s':>10} {'next+done/s':>12} {'add slowdown':>13} "
          f"{'next slowdown':>14} {'RSS B/URL':>10} {'disk B/URL':>11}")
    for size, adds, nexts, rss, per_url_disk in results:
        print(f"{size:>12,} {adds:>10,.0f} {nexts:>12,.0f} "
              f"{base_add / adds:>12.2f}x {base_next / nexts:>13.2f}x "
              f"{rss:>10.1f} {per_url_disk:>11.0f}")


if __name__ == "__main__":
    main()
