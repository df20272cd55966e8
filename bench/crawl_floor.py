#!/usr/bin/env python3
"""The CPU a crawler spends per page besides fetching it, part by part, with crawlq's own
parts and no network: link extraction, scope checks, adding the links to a SQLite
frontier (in groups of 50 pages, as the crawler's commit groups do), leasing and
answering, and writing a JSON Lines record. Compare the total with a bare fetch loop's
CPU per page (bench_crawl.py's bare-aiohttp).

``--n`` pages are measured (default 5,000; a few dozen check that the tool runs, as
tests/test_benches.py does).

    python bench/crawl_floor.py
    python bench/crawl_floor.py --n 20000
"""

from __future__ import annotations

import argparse
import tempfile
import time

from crawlq import Frontier, Request
from crawlq.crawler.fetch import Fetched
from crawlq.crawler.links import decode_html, extract
from crawlq.crawler.output import open_output
from crawlq.crawler.scope import Scope
from crawlq.testing.web import SiteSpec, TestWeb

N = 5000
"""Pages measured by default."""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=N, help=f"pages measured (default {N:,})")
    n = ap.parse_args().n
    spec = SiteSpec(hosts=200, pages=100, links=4, cross_links=1, special_links=False,
                    crawl_delay={}, robots_404=frozenset())
    web = TestWeb(spec)  # (not started: its pages are built without a socket)
    web.port = 8000
    bodies = [web.route(i % 200, f"/page/{i % 100}")[2] for i in range(200)]
    t = time.process_time()
    pages = [extract(decode_html(bodies[i % 200], "utf-8"),
                     f"http://site{i % 200}.crawlq.test:8000/page/{i % 100}")
             for i in range(n)]
    parse = (time.process_time() - t) / n
    links = sum(len(p.links) for p in pages) / n
    scope = Scope(["crawlq.test"], [], [], None)
    t = time.process_time()
    for p in pages:
        for u in p.links:
            scope.why_not(u, 1)
    in_scope = (time.process_time() - t) / n
    tmp = tempfile.mkdtemp(prefix="crawlq-floor-")
    with Frontier.open(f"sqlite:///{tmp}/f.db", min_delay=0, max_delay=0, delay_factor=0,
                       concurrency=2) as f:
        t = time.process_time()
        for i in range(0, n, 50):
            f.add([Request(u, depth=1, referrer="http://x/") for p in pages[i:i + 50]
                   for u in p.links])
        add = (time.process_time() - t) / n
        t = time.process_time()
        leased = 0
        while leased < n:
            got = f.next(16)
            if not got:
                break
            f.done(got)
            leased += len(got)
        lease = (time.process_time() - t) / max(leased, 1)
    out = open_output(f"{tmp}/p.jsonl")
    r = Fetched("http://a.test/", 200, {"content-type": "text/html"}, bodies[0], 0.01,
                raw=bodies[0])
    t = time.process_time()
    for _ in range(n):
        out.write(Request("http://a.test/x"), r, "title", 0)
    out.flush()
    out.sync()
    out.close()
    write = (time.process_time() - t) / n
    total = parse + in_scope + add + lease + write
    print(f"CPU per page: parse {parse * 1e6:.0f} us ({links:.1f} links), scope "
          f"{in_scope * 1e6:.0f} us, frontier add {add * 1e6:.0f} us, next+done "
          f"{lease * 1e6:.0f} us, output {write * 1e6:.0f} us: {total * 1e6:.0f} us in all")


if __name__ == "__main__":
    main()
