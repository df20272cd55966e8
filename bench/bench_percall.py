#!/usr/bin/env python3
"""Batch acknowledgements against one ``done()`` per lease, on one store, in one run.

20,000 URLs over 500 hosts, politeness off; ``next(1000)`` until empty, each batch
answered either with one ``done(leases)`` or with one ``done(lease)`` per lease (the
loop README shows). Reported: leases answered per second, and per-call over batch. On
SQLite, with group commit (the default) and without (``group_commit=0``); on Redis, a
redis-server of the bench's own on loopback (``redis``), and a crawl of 8 shards on a
3-node Redis Cluster of its own (``sharded``: a done() per lease is then one script on
the one shard its lease is from).

    python bench/bench_percall.py [--store sqlite|memory|redis|sharded] [--urls 20000]
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import tempfile
import time
from pathlib import Path

from crawlq import Frontier
from crawlq.testing.redis_server import LocalCluster, LocalRedis


def run(store: str, n: int, per_call: bool, **options: float) -> float:
    with Frontier.open(store, min_delay=0, max_delay=0, delay_factor=0, concurrency=1000,
                       **options) as f:
        f.add([f"https://h{i % 500}.example/p/{i}" for i in range(n)])
        t = time.perf_counter()
        done = 0
        while True:
            leases = f.next(1000)
            if not leases:
                break
            if per_call:
                for le in leases:
                    f.done(le)
            else:
                f.done(leases)
            done += len(leases)
        return done / (time.perf_counter() - t)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--store", choices=["sqlite", "memory", "redis", "sharded"],
                    default="sqlite")
    ap.add_argument("--urls", type=int, default=20_000)
    a = ap.parse_args()
    settings = [{"group_commit": 0.005}, {"group_commit": 0.0}] if a.store == "sqlite" \
        else [{}]
    with contextlib.ExitStack() as stack:
        base = ""
        if a.store in ("redis", "sharded"):
            folder = Path(stack.enter_context(tempfile.TemporaryDirectory(
                prefix="crawlq-percall-")))
            if a.store == "redis":
                server = LocalRedis(folder / "redis").start()
                stack.callback(server.stop)
                base = f"{server.url}?prefix="
            else:
                cluster = stack.enter_context(LocalCluster(folder / "cluster"))
                base = f"{cluster.url}&shards=8&prefix="
        crawls = itertools.count()

        def url() -> str:
            if a.store == "memory":
                return "memory://"
            if base:
                return f"{base}percall{next(crawls)}"
            return f"sqlite:///{tempfile.mkdtemp(prefix='crawlq-percall-')}/f.db"

        for options in settings:
            batch = run(url(), a.urls, False, **options)
            per = run(url(), a.urls, True, **options)
            label = ", ".join(f"{k}={v}" for k, v in options.items()) or a.store
            print(f"{a.store} ({label}): batch {batch:,.0f}/s, one done() per lease "
                  f"{per:,.0f}/s: {per / batch:.2f}x")


if __name__ == "__main__":
    main()
