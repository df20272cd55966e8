#!/usr/bin/env python3
"""Does the SQLite store keep its speed as the frontier grows? Rates at 100 k vs 10 M queued.

Fills a SQLite frontier with synthetic URLs over many hosts, and at each checkpoint
(--at, queued URLs) measures the add rate of --window fresh URLs and the next+done rate
of --window leases, --repeat times (each add window tops the queue back up), and keeps
the fastest of each. Prints the rates, their ratio to the
first checkpoint's, RSS and disk per queued URL. The target: add and next rates at
10 M within 1.5x of their rates at 100 k.

The window (200k by default) is a whole number of level-0 merges at both sizes (every
50k rows at 100k, every 200k at 10M): an add that merges pays for the rows added since
the last merge, so a shorter window could miss that cost and look faster than the store
is over time (a warning says so).

    python bench/bench_scale.py                          # 100k and 10M (several minutes)
    python bench/bench_scale.py --at 100000 --at 1000000 # quicker
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from crawlq import Frontier, Request
from crawlq.stores.sqlite import _l0_limit


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def urls(start: int, n: int, hosts: int) -> list[Request]:
    # Deterministic, all distinct; hosts by a multiplicative hash so queues interleave.
    return [Request(f"https://host-{(i * 2654435761) % hosts}.example/p/{i}?id={i * 7}",
                    priority=i % 11 - 5) for i in range(start, start + n)]


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
                    help="timed add and next+done windows per checkpoint; the fastest counts")
    ap.add_argument("--dir", help="where to put the database (default: a temp dir)")
    a = ap.parse_args()
    points = sorted(a.at or [100_000, 10_000_000])
    tmp = Path(a.dir) if a.dir else Path(tempfile.mkdtemp(prefix="crawlq-scale-"))
    tmp.mkdir(parents=True, exist_ok=True)
    db = tmp / "scale.db"
    for suffix in ("", "-wal", "-shm"):
        Path(str(db) + suffix).unlink(missing_ok=True)
    f = Frontier.open(f"sqlite:///{db}", min_delay=0, max_delay=0, delay_factor=0,
                      concurrency=1_000_000)
    rss0 = rss_bytes()
    made = 0
    results: list[tuple[int, float, float, float, float]] = []
    try:
        for target in points:
            t = time.perf_counter()
            while f.stats().queued < target:
                n = min(a.batch * 20, target - f.stats().queued)
                for i in range(0, n, a.batch):
                    f.add(urls(made + i, min(a.batch, n - i), a.hosts))
                made += n
                print(f"\rfilling: {made:,} queued ({made / (time.perf_counter() - t):,.0f}/s)",
                      end="", file=sys.stderr, flush=True)
            print("", file=sys.stderr)
            interval = max(_l0_limit(target), _l0_limit(target + a.window))
            if a.window % interval:
                print(f"warning: at {target:,} queued, level 0 merges every {interval:,} "
                      f"rows: a window of {a.window:,} is not a whole number of merges "
                      "and its rate is not the amortized one", file=sys.stderr)
            add_rate = next_rate = 0.0
            for _ in range(a.repeat):  # best of --repeat: this machine is shared and noisy
                fresh = [urls(made + i, a.batch, a.hosts) for i in range(0, a.window, a.batch)]
                made += a.window
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
                add_rate = max(add_rate, a.window / (t1 - t0))
                next_rate = max(next_rate, taken / (t2 - t1))
            s = f.stats()
            disk = sum(p.stat().st_size for p in tmp.iterdir() if p.name.startswith("scale.db"))
            results.append((target, add_rate, next_rate,
                            (rss_bytes() - rss0) / s.queued, disk / s.queued))
    finally:
        f.close()
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
