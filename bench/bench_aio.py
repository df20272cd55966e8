#!/usr/bin/env python3
"""AsyncFrontier against the Frontier on the same work, in one run: what an await costs.

Per call (README's loop: one ``next(1)`` and one ``done(lease)`` per URL, and one
``add(url)`` per URL) and in batches (``add`` of 1,000, ``next(1000)``, ``done`` of
1,000), on the memory store (its calls run on the event loop) and on SQLite (its calls
go to a worker thread). ``--n`` URLs of the reference shape (100 hosts, no politeness).
Reported: microseconds per URL, sync and async, and their ratio. Targets (issue 49):
per call on memory <= 1.5x, batches at par.

    python bench/bench_aio.py
    python bench/bench_aio.py --n 20000
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from collections.abc import Callable
from typing import Any

from crawlq import AsyncFrontier, Frontier

FAST: dict[str, Any] = {"min_delay": 0.0, "max_delay": 0.0, "delay_factor": 0.0,
                        "concurrency": 1_000_000}


def urls(n: int) -> list[str]:
    return [f"https://h{i % 100}.example/p/{i}" for i in range(n)]


def sync_run(url: str, n: int, batch: bool) -> dict[str, float]:
    times: dict[str, float] = {}
    with Frontier.open(url, **FAST) as f:
        todo = urls(n)
        t = time.perf_counter()
        if batch:
            for i in range(0, n, 1000):
                f.add(todo[i:i + 1000])
        else:
            for u in todo:
                f.add(u)
        times["add"] = time.perf_counter() - t
        t = time.perf_counter()
        if batch:
            leases = [le for _ in range(0, n, 1000) for le in f.next(1000)]
        else:
            leases = [f.next(1)[0] for _ in range(n)]
        times["next"] = time.perf_counter() - t
        t = time.perf_counter()
        if batch:
            for i in range(0, n, 1000):
                f.done(leases[i:i + 1000])
        else:
            for le in leases:
                f.done(le)
        times["done"] = time.perf_counter() - t
    return times


async def async_run(url: str, n: int, batch: bool) -> dict[str, float]:
    times: dict[str, float] = {}
    async with await AsyncFrontier.open(url, **FAST) as f:
        todo = urls(n)
        t = time.perf_counter()
        if batch:
            for i in range(0, n, 1000):
                await f.add(todo[i:i + 1000])
        else:
            for u in todo:
                await f.add(u)
        times["add"] = time.perf_counter() - t
        t = time.perf_counter()
        if batch:
            leases = [le for _ in range(0, n, 1000) for le in await f.next(1000)]
        else:
            leases = [(await f.next(1))[0] for _ in range(n)]
        times["next"] = time.perf_counter() - t
        t = time.perf_counter()
        if batch:
            for i in range(0, n, 1000):
                await f.done(leases[i:i + 1000])
        else:
            for le in leases:
                await f.done(le)
        times["done"] = time.perf_counter() - t
    return times


def best(fn: Callable[[], dict[str, float]], rounds: int) -> dict[str, float]:
    runs = [fn() for _ in range(rounds)]
    return {k: min(r[k] for r in runs) for k in runs[0]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=10_000)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    print(f"{a.n} URLs, best of {a.rounds}; microseconds per URL")
    print(f"{'store':<8} {'use':<9} {'call':<5} {'sync':>8} {'async':>8} {'ratio':>6}")
    with tempfile.TemporaryDirectory() as tmp:
        for store in ("memory", "sqlite"):
            for batch in (False, True):
                names = iter(range(1_000_000))

                def url(store: str = store, names: Any = names) -> str:
                    return ("memory://" if store == "memory"
                            else f"sqlite:///{tmp}/{store}{next(names)}.db")

                s = best(lambda b=batch: sync_run(url(), a.n, b), a.rounds)
                y = best(lambda b=batch: asyncio.run(async_run(url(), a.n, b)), a.rounds)
                for call in ("add", "next", "done"):
                    print(f"{store:<8} {'batch' if batch else 'per call':<9} {call:<5} "
                          f"{s[call] / a.n * 1e6:>8.2f} {y[call] / a.n * 1e6:>8.2f} "
                          f"{y[call] / s[call]:>5.2f}x", flush=True)


if __name__ == "__main__":
    main()
