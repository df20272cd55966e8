#!/usr/bin/env python3
"""`crawlq crawl --workers N` against one worker, in one run: does a crawl scale across
processes on one store?

The site is the test web (asyncio engine, in this process): ``--hosts`` hosts of
``--pages`` pages of about ``--page-bytes`` bytes with ``--links`` links each, every index
a seed, robots.txt obeyed, politeness delays zero, ``--per-host 2``, ``--concurrency 16``
per worker. The store is a Redis on loopback (``--store sqlite`` for a SQLite file). For
each count of workers: pages, pages fetched twice, missing, seconds, pages/s, the CPU
seconds of the crawl's processes (user + system of the command and its workers, from
``getrusage``), pages per CPU-second, and both against one worker. Targets (issue 49):
with 2 workers, pages per CPU-second >= 0.9x one worker's (no coordination overhead) and
pages/s >= one worker's. On a machine of few cores the test web (this process) and
Redis take their share of the same cores: see the "web CPU" column.

    python bench/bench_workers.py
    python bench/bench_workers.py --workers 1 --workers 2 --workers 3 --store sqlite
"""

from __future__ import annotations

import argparse
import resource
import tempfile
from collections import Counter
from pathlib import Path

from bench_crawl import crawlq_command, run_crawl  # (bench/ is on the path)

from crawlq.testing.redis_server import LocalRedis
from crawlq.testing.web import SiteSpec, TestWeb, reachable


def cpu_of_children() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def cpu_of_self() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workers", type=int, action="append", help="default: 1 and 2")
    ap.add_argument("--store", choices=["redis", "sqlite"], default="redis")
    ap.add_argument("--hosts", type=int, default=100)
    ap.add_argument("--pages", type=int, default=100)
    ap.add_argument("--page-bytes", type=int, default=20_000)
    ap.add_argument("--links", type=int, default=20)
    ap.add_argument("--concurrency", type=int, default=16)
    a = ap.parse_args()
    counts = a.workers or [1, 2]
    spec = SiteSpec(hosts=a.hosts, pages=a.pages, links=a.links, cross_links=1,
                    special_links=False, crawl_delay={}, robots_404=frozenset(),
                    page_bytes=a.page_bytes)
    print(f"{spec.hosts} hosts x {spec.pages} pages of ~{a.page_bytes} bytes, "
          f"{a.links} links each; concurrency {a.concurrency} per worker, 2 per host; "
          f"{a.store} store")
    print(f"{'workers':>7} {'pages':>6} {'twice':>6} {'missing':>8} {'seconds':>8} "
          f"{'pages/s':>8} {'CPU s':>6} {'pages/CPU-s':>11} {'web CPU':>8} "
          f"{'speed':>6} {'per CPU':>8}")
    base: tuple[float, float] | None = None
    with tempfile.TemporaryDirectory(prefix="crawlq-bench-workers-") as tmp:
        server = LocalRedis(Path(tmp) / "redis") if a.store == "redis" else None
        if server is not None:
            server.start()
        try:
            for n, workers in enumerate(counts):
                web = TestWeb(spec, engine="asyncio").start()
                run = Path(tmp) / f"run{n}"
                run.mkdir()
                where = (["--store", f"{server.url.rsplit('/', 1)[0]}/{n % 16}"]
                         if server is not None else ["--state", str(run / "state")])
                # (no per-domain cap: the test web's hosts stand for separate sites)
                cmd = crawlq_command([web.url(i, "/") for i in range(spec.hosts)], where,
                                     a.concurrency, 2, 0.0, str(run / "pages.jsonl"),
                                     1_000_000)
                if workers > 1:
                    cmd += ["--workers", str(workers)]
                try:
                    cpu0, web0 = cpu_of_children(), cpu_of_self()
                    try:
                        seconds, _ = run_crawl(cmd)
                    except RuntimeError as exc:
                        print(f"{workers:>7} FAILED: {exc}")
                        continue
                    cpu, web_cpu = cpu_of_children() - cpu0, cpu_of_self() - web0
                    hits = web.hits()
                    want = reachable(spec, web.port) | {(spec.host(i), "/")
                                                        for i in range(spec.hosts)}
                finally:
                    web.stop()
                fetched = Counter((h.host, h.path) for h in hits if h.path != "/robots.txt")
                twice = sum(k - 1 for k in fetched.values())
                missing = len(want - set(fetched))
                rate = len(fetched) / seconds
                per_cpu = len(fetched) / cpu
                if base is None:
                    base = (rate, per_cpu)
                print(f"{workers:>7} {len(fetched):>6} {twice:>6} {missing:>8} "
                      f"{seconds:>8.1f} {rate:>8.1f} {cpu:>6.1f} {per_cpu:>11.1f} "
                      f"{web_cpu:>8.1f} {rate / base[0]:>5.2f}x {per_cpu / base[1]:>7.2f}x",
                      flush=True)
        finally:
            if server is not None:
                server.stop()


if __name__ == "__main__":
    main()
