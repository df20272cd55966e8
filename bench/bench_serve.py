#!/usr/bin/env python3
"""``crawlq serve``'s JSON API against the same store called in-process, one run.

A ``crawlq serve`` process on a free loopback port and a client (aiohttp, one
connection) in this one: add URLs in batches, then lease and acknowledge them in
batches (``next n`` + ``ack``), politeness off. The same work is then done in-process
on a store of the same kind. Reported: URLs/s of each and the ratio.

    python bench/bench_serve.py --urls 50000 --batch 1000 --store sqlite
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import subprocess
import sys
import tempfile
import time
from typing import Any

from crawlq import Frontier


def urls(n: int) -> list[str]:
    return [f"https://h{i % 500}.example/p/{i}" for i in range(n)]


def in_process(store: str, n: int, batch: int) -> tuple[float, float]:
    with Frontier.open(store, min_delay=0, max_delay=0, delay_factor=0,
                       concurrency=1000) as f:
        todo = urls(n)
        t = time.perf_counter()
        for i in range(0, n, batch):
            f.add(todo[i:i + batch])
        add_s = time.perf_counter() - t
        t = time.perf_counter()
        done = 0
        while done < n:
            leases = f.next(batch)
            if not leases:
                break
            f.done(leases)
            done += len(leases)
        return n / add_s, done / (time.perf_counter() - t)


async def served(base: str, n: int, batch: int) -> tuple[float, float]:
    import aiohttp

    todo = urls(n)
    async with aiohttp.ClientSession() as s:
        t = time.perf_counter()
        for i in range(0, n, batch):
            async with s.post(f"{base}/v1/add", json={"requests": todo[i:i + batch]}) as r:
                assert r.status == 200, await r.text()
        add_s = time.perf_counter() - t
        t = time.perf_counter()
        done = 0
        while done < n:
            async with s.post(f"{base}/v1/next", json={"n": batch}) as r:
                leases: list[dict[str, Any]] = (await r.json())["leases"]
            if not leases:
                break
            async with s.post(f"{base}/v1/ack",
                              json={"leases": [le["lease"] for le in leases]}) as r:
                assert r.status == 200, await r.text()
            done += len(leases)
        return n / add_s, done / (time.perf_counter() - t)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--urls", type=int, default=50_000)
    ap.add_argument("--batch", type=int, default=1000)
    ap.add_argument("--store", choices=["sqlite", "memory"], default="sqlite")
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="crawlq-bench-serve-")
    store = "memory://" if a.store == "memory" else f"sqlite:///{tmp}/served.db"
    p = subprocess.Popen([sys.executable, "-m", "crawlq.cli", "--store", store,
                          "-o", "min_delay=0", "-o", "max_delay=0", "-o", "delay_factor=0",
                          "-o", "concurrency=1000", "serve", "--port", "0"],
                         stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout is not None
        base = p.stdout.readline().split(" on ", 1)[1].split()[0].rstrip("/")
        s_add, s_lease = asyncio.run(served(base, a.urls, a.batch))
    finally:
        p.send_signal(signal.SIGTERM)
        p.wait(30)
    local = "memory://" if a.store == "memory" else f"sqlite:///{tmp}/local.db"
    l_add, l_lease = in_process(local, a.urls, a.batch)
    print(f"{a.urls:,} URLs over 500 hosts, batches of {a.batch}, store {a.store}")
    print(f"{'':<12} {'add/s':>10} {'next+ack/s':>11}")
    print(f"{'served':<12} {s_add:>10,.0f} {s_lease:>11,.0f}")
    print(f"{'in-process':<12} {l_add:>10,.0f} {l_lease:>11,.0f}")
    print(f"  served: {s_add / l_add:.2f}x in-process add, {s_lease / l_lease:.2f}x next+ack")


if __name__ == "__main__":
    main()
