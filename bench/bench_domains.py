#!/usr/bin/env python3
"""What bounding registered domains costs, and what it buys, in one run.

lookup
    ``domain_of`` (a queue key's registered domain, by the Public Suffix List) per
    call: on ``--lookups`` keys never seen (what a store pays once per queue it makes)
    and on keys seen before (its cache). Reported: microseconds per call.
frontier
    The reference workload (bench/workload.py) added, leased and answered on the
    memory and SQLite stores, with the domain rules off (the library's default) and on
    (``max_domain_urls`` and ``max_domain_queues`` as ``crawlq crawl`` sets them, and
    a ``domain_concurrency`` that does not bind: the cost of the bookkeeping, not of a
    cap). The Public Suffix List is loaded before (once per process, ~0.1 s). Reported:
    offered requests per second, and on / off.
trap
    ``crawlq crawl`` (the real CLI, on SQLite) for ``--seconds`` on three sites of 40
    pages with a politeness delay of 0.2 s, alone, then beside a site whose every page
    links to ten new host names of its registered domain (a DNS wildcard), with the
    crawler's default domain bounds and with them off. Reported: pages of each site,
    and beside the trap over alone (the target is >= 0.8 with the bounds).

    python bench/bench_domains.py
    python bench/bench_domains.py --only trap --seconds 20
    python bench/bench_domains.py --lookups 5000 --n 2000 --seconds 1   # a quick check
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import re
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from aiohttp import web

from crawlq import Frontier, Request
from crawlq.policies.domains import domain_of

sys.path.insert(0, str(Path(__file__).parent))
from workload import generate

SITES = ["s1.test", "s2.test", "s3.test"]
PAGES = 40
# (the crawler's caps on URLs and host names; a lease cap as high as the queues' own,
# so that the figure is the rules' bookkeeping, not a cap that binds)
DOMAIN_RULES = {"domain_concurrency": 1000, "max_domain_urls": 100_000,
                "max_domain_queues": 1_000}


def bench_lookup(n: int) -> None:
    keys = [f"h{i}.site{i % 997}.example.co.uk" for i in range(n)]
    domain_of.cache_clear()
    t = time.perf_counter()
    for k in keys:
        domain_of(k)
    fresh = (time.perf_counter() - t) / n * 1e6
    t = time.perf_counter()
    for k in keys[-50_000:]:
        domain_of(k)
    cached = (time.perf_counter() - t) / min(n, 50_000) * 1e6
    print(f"lookup: {fresh:.2f} us per new key, {cached:.3f} us per key seen before")


def _frontier_rate(url: str, urls: list[str], prios: list[int], rules: dict[str, Any]) -> float:
    t = time.perf_counter()
    with Frontier.open(url, min_delay=0, max_delay=0, delay_factor=0, concurrency=1000,
                       **rules) as f:
        for i in range(0, len(urls), 5_000):
            f.add([Request(u, priority=p) for u, p in zip(urls[i:i + 5_000],
                                                          prios[i:i + 5_000])])
        while True:
            leases = f.next(1000)
            if not leases:
                if f.stats().finished:
                    break
                continue
            f.done(leases)
    return len(urls) / (time.perf_counter() - t)


def bench_frontier(n: int) -> None:
    urls, prios, _ = generate(n)
    domain_of("warm.example")  # (loads the list: once per process)
    print(f"frontier: {n:,} offered requests (bench/workload.py), add then next(1000)+done")
    for store in ("memory", "sqlite"):
        rates = {}
        for label, rules in (("off", {}), ("on", DOMAIN_RULES)):
            with tempfile.TemporaryDirectory() as tmp:
                url = "memory://" if store == "memory" else f"sqlite:///{tmp}/f.db"
                rates[label] = _frontier_rate(url, urls, prios, rules)
        print(f"  {store:7} rules off {rates['off']:>10,.0f}/s   on {rates['on']:>10,.0f}/s"
              f"   on/off {rates['on'] / rates['off']:.2f}x")


# -- the trap crawl ------------------------------------------------------------------------

def _app() -> web.Application:
    fresh = itertools.count()

    async def handle(request: web.Request) -> web.Response:
        host, _, port = request.host.rpartition(":")
        path = request.path
        if path == "/robots.txt":
            return web.Response(text="User-agent: *\nAllow: /\n")
        if host.endswith("a.test"):  # the trap: every host name of a.test answers
            links = [f"http://h{next(fresh)}.a.test:{port}/" for _ in range(10)]
        elif host in SITES and path == "/":
            links = [f"/p/{i}" for i in range(1, PAGES + 1)]
        elif host in SITES and re.fullmatch(r"/p/\d+", path):
            links = []
        else:
            return web.Response(status=404, text="not found")
        body = "".join(f'<a href="{u}">{u}</a>' for u in links)
        return web.Response(text=f"<html><body>{body}</body></html>", content_type="text/html")

    app = web.Application()
    app.router.add_get("/{tail:.*}", handle)
    return app


@contextmanager
def _server() -> Iterator[tuple[int, list[str]]]:
    """The sites on a free port of 127.0.0.1, in a thread; (port, log of host names)."""
    log: list[str] = []
    ready = threading.Event()
    box: dict[str, Any] = {}

    @web.middleware
    async def logged(request: web.Request, handler: Any) -> Any:
        if request.path != "/robots.txt":
            log.append(request.host.rpartition(":")[0])
        return await handler(request)

    def run() -> None:
        loop = asyncio.new_event_loop()
        app = _app()
        app.middlewares.append(logged)
        runner = web.AppRunner(app)
        loop.run_until_complete(runner.setup())
        site = web.TCPSite(runner, "127.0.0.1", 0)
        loop.run_until_complete(site.start())
        box["port"] = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        box["loop"] = loop
        ready.set()
        loop.run_forever()
        loop.run_until_complete(runner.cleanup())

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    ready.wait()
    try:
        yield box["port"], log
    finally:
        box["loop"].call_soon_threadsafe(box["loop"].stop)
        thread.join(10)


def _crawl(seeds: list[str], seconds: float, extra: list[str]) -> tuple[dict[str, int], int]:
    """Pages of each site, and trap host names fetched, in ``seconds`` of ``crawlq crawl``."""
    crawlq = str(Path(sys.executable).with_name("crawlq"))
    with _server() as (port, log), tempfile.TemporaryDirectory() as tmp:
        cmd = [crawlq, "crawl", *[f"http://{h}:{port}/" for h in seeds], "--state", tmp,
               "--allow-domain", "test", "--resolve", "*.test=127.0.0.1", "--allow-private",
               "--min-delay", "0.2", "--max-delay", "0.2", "--delay-factor", "0",
               "--duration", f"{seconds}s", "--progress", "0", *extra]
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=seconds + 120)
        if out.returncode not in (0, 3):  # (3: stopped by --duration with URLs left)
            raise RuntimeError(f"crawlq crawl failed ({out.returncode}):\n{out.stderr[-2000:]}")
        pages = {h: log.count(h) for h in SITES}
        return pages, len({h for h in log if h.endswith("a.test")})


def bench_trap(seconds: float) -> None:
    print(f"trap: {len(SITES)} sites of {PAGES} pages, 0.2 s politeness, {seconds:g} s of "
          "crawlq crawl (SQLite)")
    alone, _ = _crawl(SITES, seconds, [])
    print(f"  alone                    {alone}")
    for label, extra in (("beside the trap, bounds", []),
                         ("beside the trap, no bounds",
                          ["--per-domain", "10000", "--max-per-domain", "0",
                           "--max-hosts-per-domain", "0"])):
        pages, hosts = _crawl([*SITES, "a.test"], seconds, extra)
        worst = min(pages[h] / alone[h] for h in SITES if alone[h])
        print(f"  {label:24} {pages}  trap hosts fetched {hosts:,}; worst site "
              f"{worst:.2f}x alone")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--only", action="append", choices=["lookup", "frontier", "trap"])
    ap.add_argument("--n", type=int, default=100_000, help="offered requests (frontier)")
    ap.add_argument("--seconds", type=float, default=10.0, help="crawl time (trap)")
    ap.add_argument("--lookups", type=int, default=200_000, help="keys looked up (lookup)")
    args = ap.parse_args()
    only = args.only or ["lookup", "frontier", "trap"]
    if "lookup" in only:
        bench_lookup(args.lookups)
    if "frontier" in only:
        bench_frontier(args.n)
    if "trap" in only:
        bench_trap(args.seconds)


if __name__ == "__main__":
    main()
