#!/usr/bin/env python3
"""`crawlq crawl` with its Redis store near and far, in one run: pages/s with Redis on
loopback, then behind a delay proxy (crawlq.testing.delayproxy, its own process on 127.0.0.1)
adding 1 ms and 5 ms each way, as a store in the same data centre and across zones.

The site is the test web (asyncio engine, in this process). By default it is shaped as
the crawl the issue measured (four documentation sites, 4,569 pages): 4 hosts of 1,000
pages of about 40 KB with 60 links each (documentation pages carry long navigation),
every index a seed, robots.txt obeyed, politeness delays zero; the crawl is the real
CLI in a child process, ``--per-host 4 --concurrency 16``, writing every page to a JSON
Lines file. There the store's slots bind (4 hosts x 4 = 16 = the fetches at once), so a
slot's cycle is its fetch plus at least one round trip. ``--hosts 100 --pages 100
--page-bytes 0 --links 4`` is the other shape: many small sites, more hosts than
fetches at once, where leases taken ahead hide the round trips. Each run gets a
fresh Redis database. Reported per distance: the measured round trip of a Redis PING
through the proxy, pages, pages fetched twice, pages missing, seconds, pages/s and the
ratio to loopback. Targets (issue 49):
1 ms each way >= 0.9x, 5 ms each way >= 0.75x.

    python bench/bench_remote.py
    python bench/bench_remote.py --rounds 3      # alternated, medians
    python bench/bench_remote.py --delay 0 --delay 0.005 --hosts 20
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections import Counter
from pathlib import Path

from bench_crawl import crawlq_command, run_crawl  # (bench/ is on the path)

from crawlq.testing.delayproxy import DelayProxy
from crawlq.testing.redis_server import LocalRedis
from crawlq.testing.web import SiteSpec, TestWeb, reachable


def ping_ms(port: int) -> float:
    """A Redis PING's round trip through ``port``, in ms (median of 21)."""
    import redis

    client = redis.Redis(port=port)
    client.ping()
    times = []
    for _ in range(21):
        t = time.perf_counter()
        client.ping()
        times.append(time.perf_counter() - t)
    client.close()
    return sorted(times)[10] * 1000


def crawl(seeds: list[str], store: str, conc: int, per_host: int, tmp: str,
          extra: list[str]) -> tuple[float, str]:
    # (no per-domain cap: the test web's hosts stand for separate sites)
    return run_crawl(crawlq_command(seeds, ["--store", store], conc, per_host, 0.0,
                                    f"{tmp}/pages.jsonl", 1_000_000) + extra)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--delay", type=float, action="append",
                    help="seconds added each way (repeatable; default 0, 0.001, 0.005; "
                         "0 is Redis on loopback, no proxy)")
    ap.add_argument("--hosts", type=int, default=4)
    ap.add_argument("--pages", type=int, default=1000, help="pages per host")
    ap.add_argument("--page-bytes", type=int, default=40_000)
    ap.add_argument("--links", type=int, default=60, help="same-host links per page")
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--per-host", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=1,
                    help="rounds of every distance, alternated; medians reported")
    ap.add_argument("--crawl-arg", action="append", default=[],
                    help="an extra argument for crawlq crawl (repeatable)")
    a = ap.parse_args()
    delays = a.delay or [0.0, 0.001, 0.005]
    spec = SiteSpec(hosts=a.hosts, pages=a.pages, links=a.links, cross_links=1,
                    special_links=False, crawl_delay={}, robots_404=frozenset(),
                    page_bytes=a.page_bytes)
    print(f"{spec.hosts} hosts x {spec.pages} pages of ~{a.page_bytes} bytes, concurrency "
          f"{a.concurrency}, {a.per_host} per host, no politeness delay, robots.txt "
          "obeyed, Redis store")
    print(f"{'each way':>9} {'PING ms':>8} {'pages':>6} {'twice':>6} {'missing':>8} "
          f"{'seconds':>8} {'pages/s':>8} {'ratio':>6}")
    rates: dict[float, list[float]] = {d: [] for d in delays}
    with tempfile.TemporaryDirectory(prefix="crawlq-bench-remote-") as tmp:
        server = LocalRedis(Path(tmp) / "redis")
        server.start()
        try:
            port = int(server.url.rsplit(":", 1)[1].split("/")[0])
            runs = 0
            for _ in range(a.rounds):  # (the distances alternate: a slow spell hits all)
                base = None  # (this round's loopback run)
                for delay in delays:
                    runs += 1
                    rate = one_run(spec, a, port, delay, Path(tmp) / f"run{runs}", runs,
                                   base)
                    rates[delay].append(rate)
                    if delay == 0:
                        base = rate
        finally:
            server.stop()
    if a.rounds > 1 and 0.0 in rates:
        base = statistics.median(rates[0.0])
        print(f"medians of {a.rounds} rounds: " + ", ".join(
            f"{d * 1000:g} ms {statistics.median(v):.1f} pages/s "
            f"({statistics.median(v) / base:.2f}x)" for d, v in rates.items()))


def one_run(spec: SiteSpec, a: argparse.Namespace, port: int, delay: float, run: Path,
            n: int, base: float | None) -> float:
    """One crawl with ``delay`` each way (0: no proxy); prints its line (its ratio to
    ``base``, the round's loopback pages/s), returns its pages/s."""
    proxy = DelayProxy(port, delay).start() if delay else None
    try:
        via = proxy.port if proxy is not None else port
        rtt = ping_ms(via)
        web = TestWeb(spec, engine="asyncio").start()
        run.mkdir()
        try:
            seeds = [web.url(i, "/") for i in range(spec.hosts)]
            want = reachable(spec, web.port) | {(spec.host(i), "/")
                                                for i in range(spec.hosts)}
            seconds, _ = crawl(seeds, f"redis://127.0.0.1:{via}/{n % 16}", a.concurrency,
                               a.per_host, str(run), a.crawl_arg)
            hits = web.hits()
        finally:
            web.stop()
    finally:
        if proxy is not None:
            proxy.stop()
    fetched = Counter((h.host, h.path) for h in hits if h.path != "/robots.txt")
    twice = sum(k - 1 for k in fetched.values())
    missing = len(want - set(fetched))
    rate = len(fetched) / seconds
    ratio = f"{rate / base:.2f}x" if base else ("1.00x" if delay == 0 else "-")
    print(f"{delay * 1000:>7g}ms {rtt:>8.2f} {len(fetched):>6} {twice:>6} {missing:>8} "
          f"{seconds:>8.1f} {rate:>8.1f} {ratio:>6}", flush=True)
    return rate

if __name__ == "__main__":
    main()
