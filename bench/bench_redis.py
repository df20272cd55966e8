#!/usr/bin/env python3
"""crawlq's Redis store with 1, 2 and 3 client processes sharing one crawl, in one run.

The workload (bench/workload.py) is split round-robin between the
clients. All clients add their share at once (batches of --batch), wait for each
other, then all lease and acknowledge (next(1000)/done) until the crawl is finished
for everyone. Reported: wall time of each phase, combined aggregate rate (offered
requests / total wall time) and its ratio to one client. A throwaway redis-server is
started on a free loopback port (or set CRAWLQ_BENCH_REDIS to use your own).

    python bench/bench_redis.py                    # 200,000 requests, 5,000 hosts
    python bench/bench_redis.py --clients 1 --clients 4
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent


def _client(url: str, urls: list[str], prios: list[int], batch: int, barrier: Any,
            out: Any) -> None:
    from crawlq import Frontier, Request

    f = Frontier.open(url, min_delay=0, max_delay=0, delay_factor=0, concurrency=1_000_000)
    pairs = list(zip(urls, prios))
    barrier.wait()
    t0 = time.perf_counter()
    added = 0
    for i in range(0, len(pairs), batch):
        added += f.add([Request(u, priority=p) for u, p in pairs[i:i + batch]]).added
    t1 = time.perf_counter()
    barrier.wait()
    t2 = time.perf_counter()
    taken = 0
    while True:
        leases = f.next(1000)
        if leases:
            taken += len(leases)
            f.done(leases)
        elif f.stats().finished:
            break
    t3 = time.perf_counter()
    f.close()
    out.put((added, taken, t0, t1, t2, t3))


def run(url: str, k: int, urls: list[str], prios: list[int], batch: int) -> dict[str, Any]:
    ctx = mp.get_context("fork")
    barrier = ctx.Barrier(k)
    out = ctx.Queue()
    procs = [ctx.Process(target=_client, args=(url, urls[i::k], prios[i::k], batch,
                                                barrier, out)) for i in range(k)]
    for p in procs:
        p.start()
    rows = [out.get(timeout=1800) for _ in procs]
    for p in procs:
        p.join()
    add_s = max(r[3] for r in rows) - min(r[2] for r in rows)
    drain_s = max(r[5] for r in rows) - min(r[4] for r in rows)
    return {"added": sum(r[0] for r in rows), "taken": sum(r[1] for r in rows),
            "add_s": add_s, "drain_s": drain_s}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=200_000, help="offered requests")
    ap.add_argument("--hosts", type=int, default=5_000)
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--batch", type=int, default=5_000, help="add batch size")
    ap.add_argument("--clients", type=int, action="append",
                    help="client process counts to run (default: 1, 2, 3)")
    a = ap.parse_args()
    from workload import generate  # (bench/workload.py)

    urls, prios, unique = generate(a.n, a.hosts, a.seed)
    server = None
    base = os.environ.get("CRAWLQ_BENCH_REDIS")
    if not base:
        from crawlq.testing.redis_server import LocalRedis

        server = LocalRedis(Path(tempfile.mkdtemp(prefix="crawlq-bench-redis-"))).start()
        base = server.url
    print(f"workload: {a.n:,} offered requests, {a.hosts:,} hosts, seed {a.seed}; "
          f"{os.cpu_count()} CPUs (the server, and the clients, share them)")
    print(f"{'clients':>7} {'add s':>7} {'drain s':>8} {'combined/s':>11} {'vs 1 client':>12}")
    first = None
    try:
        for k in a.clients or [1, 2, 3]:
            url = f"{base}?prefix=bench-redis-{k}"
            r = run(url, k, urls, prios, a.batch)
            ok = r["added"] == unique == r["taken"]
            rate = a.n / (r["add_s"] + r["drain_s"])
            first = first or rate
            print(f"{k:>7} {r['add_s']:>7.2f} {r['drain_s']:>8.2f} {rate:>11,.0f} "
                  f"{rate / first:>11.2f}x{'' if ok else '  WRONG COUNT'}")
            from crawlq import Frontier

            with Frontier.open(url) as f:
                f.store.destroy()  # type: ignore[attr-defined]
    finally:
        if server is not None:
            server.stop()


if __name__ == "__main__":
    main()
