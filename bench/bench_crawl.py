#!/usr/bin/env python3
"""`crawlq crawl` against Scrapy on the same local site, in one run.

Scenarios (each contender in its own process, the test web in this one, on its asyncio
engine so that the server is not what limits either crawler):

throughput
    200 hosts x 100 pages (20,000 pages and 200 indexes), every index a seed, politeness
    delays zero, robots.txt obeyed, the same concurrency overall and per host, links
    from ``<a>``/``<area>`` followed within ``crawlq.test``, every page written to a JSON
    Lines file. Reported: pages/s (pages fetched over the crawl's own run time).
efficiency
    20 hosts, the busiest with 100 pages, the others 30; a politeness delay of 0.2 s
    and one fetch at a time per host. Reported: wall time over the ideal, which is the
    busiest host's pages x the delay. Target for crawlq <= 1.2.

crawlq runs as the real CLI (``crawlq crawl ... --state DIR``, so on SQLite, durable);
Scrapy runs a CrawlSpider-like spider (LinkExtractor, FEEDS jsonl) with its default
scheduler ("scrapy") and with the classic priority queue ("scrapy-classic"),
with CONCURRENT_REQUESTS, CONCURRENT_REQUESTS_PER_DOMAIN, DOWNLOAD_DELAY set alike and
ROBOTSTXT_OBEY on. Both resolve ``*.crawlq.test`` to 127.0.0.1 without DNS.
"bare-aiohttp" is the limit: an aiohttp loop that fetches the known list of the site's
pages (no robots.txt, no parsing, no frontier, no output) at the same concurrency
overall and per host; crawlq's target is 0.8x its pages/s.

``--tiny`` shrinks both scenarios to a few seconds' run that only checks the benchmark
works (its figures mean nothing): throughput on 2 hosts x 10 pages, efficiency on 3 hosts
(the busiest with 10 pages, the others 3) with a delay of 0.05 s.

    python bench/bench_crawl.py
    python bench/bench_crawl.py --scenario throughput --hosts 50
    python bench/bench_crawl.py --tiny
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

CONTENDERS = ["scrapy", "scrapy-classic", "crawlq", "bare-aiohttp"]


TINY_HOSTS = 2
"""Hosts of the throughput site with ``--tiny``."""


def spec_for(scenario: str, hosts: int, tiny: bool = False) -> Any:
    """The test web of a scenario (``tiny``: the few pages of ``--tiny``)."""
    from crawlq.testing.web import SiteSpec

    if scenario == "throughput":
        return SiteSpec(hosts=hosts, pages=10 if tiny else 100, links=4, cross_links=1,
                        special_links=False, crawl_delay={}, robots_404=frozenset())
    hosts, pages, busiest = (3, 3, 10) if tiny else (20, 30, 100)
    return SiteSpec(hosts=hosts, pages=pages, host_pages={0: busiest}, links=4,
                    cross_links=1, special_links=False, crawl_delay={},
                    robots_404=frozenset())


def settings_for(scenario: str, concurrency: int, tiny: bool = False) -> tuple[int, int, float]:
    """(concurrency, per host, delay) of a scenario (``tiny``: a shorter delay)."""
    if scenario == "throughput":
        return concurrency, 2, 0.0
    return concurrency, 1, 0.05 if tiny else 0.2


# -- the Scrapy child --------------------------------------------------------------------


def scrapy_child(seeds: list[str], conc: int, per_host: int, delay: float,
                 out: str, classic: bool) -> None:
    import scrapy
    from bench_scrapy import run_spider  # (bench/ is on the path: this script's folder)
    from scrapy.linkextractors import LinkExtractor
    from scrapy.resolver import dnscache

    from crawlq.testing.web import DOMAIN

    for url in seeds:
        dnscache[url.split("//")[1].split(":")[0]] = "127.0.0.1"
    marks: dict[str, float] = {}

    class BenchSpider(scrapy.Spider):
        name = "bench-crawl"
        allowed_domains = [DOMAIN]
        start_urls = seeds
        links = LinkExtractor()  # (its allow_domains would compare host:port)

        def parse(self, response: Any) -> Any:
            yield {"url": response.url, "status": response.status,
                   "title": response.css("title::text").get()}
            for link in self.links.extract_links(response):
                host = link.url.split("//")[1].split(":")[0]
                dnscache[host] = "127.0.0.1"
                yield response.follow(link, callback=self.parse)

    settings: dict[str, Any] = {
        "LOG_LEVEL": "WARNING", "TELNETCONSOLE_ENABLED": False, "ROBOTSTXT_OBEY": True,
        "CONCURRENT_REQUESTS": conc, "CONCURRENT_REQUESTS_PER_DOMAIN": per_host,
        "DOWNLOAD_DELAY": delay, "RANDOMIZE_DOWNLOAD_DELAY": False,
        "USER_AGENT": "crawlq-bench", "FEEDS": {out: {"format": "jsonlines"}},
    }
    if classic:  # the default priority queue before Scrapy 2.13: faster on one core
        settings["SCHEDULER_PRIORITY_QUEUE"] = "scrapy.pqueues.ScrapyPriorityQueue"
    run_spider(settings, BenchSpider, marks)
    print(json.dumps({"seconds": marks["close"] - marks["open"]}))


def bare_child(urls: list[str], conc: int, per_host: int) -> None:
    """Fetch ``urls`` with nothing but aiohttp: the ceiling of any crawler here."""
    import asyncio
    import socket
    import time

    import aiohttp
    from aiohttp.abc import AbstractResolver, ResolveResult

    class Loopback(AbstractResolver):
        async def resolve(self, host: str, port: int = 0,
                          family: socket.AddressFamily = socket.AF_INET
                          ) -> list[ResolveResult]:
            return [{"hostname": host, "host": "127.0.0.1", "port": port,
                     "family": socket.AF_INET, "proto": 0, "flags": socket.AI_NUMERICHOST}]

        async def close(self) -> None:
            pass

    async def main() -> float:
        todo = list(reversed(urls))
        connector = aiohttp.TCPConnector(limit=conc, limit_per_host=per_host,
                                         resolver=Loopback())
        async with aiohttp.ClientSession(connector=connector) as session:

            async def worker() -> None:
                while todo:
                    async with session.get(todo.pop()) as r:
                        await r.read()

            start = time.monotonic()
            await asyncio.gather(*(worker() for _ in range(conc)))
            return time.monotonic() - start

    print(json.dumps({"seconds": asyncio.run(main())}))


def run_bare(urls: list[str], conc: int, per_host: int, tmp: str) -> float:
    job = Path(tmp) / "bare.json"  # (too long for a command line)
    job.write_text(json.dumps([urls, conc, per_host]))
    out = subprocess.run([sys.executable, __file__, "--bare", str(job)],
                         capture_output=True, text=True, timeout=3600)
    if out.returncode != 0:
        raise RuntimeError(f"the aiohttp loop failed:\n{out.stderr[-2000:]}")
    return float(json.loads(out.stdout.strip().splitlines()[-1])["seconds"])


# -- the parent ----------------------------------------------------------------------------


def crawlq_command(seeds: list[str], where: list[str], conc: int, per_host: int,
                   delay: float, out: str, per_domain: int,
                   domain: str | None = "crawlq.test",
                   resolve: str | None = None) -> list[str]:
    """``crawlq crawl`` (the console script) on the test web: store ``where``
    (``--state DIR`` or ``--store URL``), politeness as given, every page to ``out``.
    (The test web's hosts are one registered domain, crawlq.test, standing for separate
    sites: ``per_domain`` is the bench's choice, and no URL or host-name cap per domain.)
    ``domain``: the one domain crawled, every name under it resolved to 127.0.0.1;
    None: the seeds' hosts are crawled, those matching the glob ``resolve`` resolved
    there. Shared by bench_remote.py, bench_workers.py and bench_docs.py."""
    crawlq = str(Path(sys.executable).with_name("crawlq"))
    scope = [] if domain is None else ["--allow-domain", domain]
    return [crawlq, "crawl", *seeds, *where, *scope,
            "--concurrency", str(conc), "--per-host", str(per_host),
            "--min-delay", str(delay), "--max-delay", str(delay), "--delay-factor", "0",
            "--per-domain", str(per_domain), "--max-per-domain", "0",
            "--max-hosts-per-domain", "0", "--allow-private",
            "--resolve", f"{resolve or f'*.{domain}'}=127.0.0.1",
            "--user-agent", "crawlq-bench",
            "--out", out, "--log-level", "WARNING", "--progress", "0"]


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds process ``pid`` has used so far (Linux /proc). Shared
    by bench_redis_cost.py, bench_urlfrontier.py and bench_scrapy_scheduler.py."""
    import os

    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run_crawl(cmd: list[str], env: dict[str, str] | None = None) -> tuple[float, str]:
    """Run a ``crawlq crawl`` command (in ``env``, if given): the seconds its summary
    says it took, and its summary's last line (RuntimeError if it failed)."""
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=3600, env=env)
    if out.returncode != 0:
        raise RuntimeError(f"crawlq crawl failed:\n{out.stderr[-2000:]}")
    m = re.search(r"fetched (\d+) pages.* in ([\d.]+)s", out.stdout + out.stderr)
    if m is None:
        raise RuntimeError(f"no summary in crawlq's output:\n{out.stdout[-2000:]}")
    return float(m.group(2)), out.stdout.strip().splitlines()[-1]


def run_crawlq(seeds: list[str], conc: int, per_host: int, delay: float,
               tmp: str) -> float:
    # (--per-domain = the concurrency: no share per domain, as Scrapy's slots are per
    # host name)
    return run_crawl(crawlq_command(seeds, ["--state", f"{tmp}/state"], conc, per_host,
                                    delay, f"{tmp}/pages.jsonl", conc))[0]


def run_scrapy(seeds: list[str], conc: int, per_host: int, delay: float, tmp: str,
               classic: bool = False) -> float:
    out = subprocess.run(
        [sys.executable, __file__, "--child", json.dumps([seeds, conc, per_host, delay,
                                                          f"{tmp}/pages.jsonl", classic])],
        capture_output=True, text=True, timeout=3600)
    if out.returncode != 0:
        raise RuntimeError(f"the Scrapy spider failed:\n{out.stderr[-2000:]}")
    return float(json.loads(out.stdout.strip().splitlines()[-1])["seconds"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scenario", action="append", choices=["throughput", "efficiency"])
    ap.add_argument("--only", action="append", choices=CONTENDERS)
    ap.add_argument("--hosts", type=int, default=200, help="hosts of the throughput site")
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--tiny", action="store_true",
                    help=f"a few seconds' run that checks the benchmark works: throughput on "
                         f"{TINY_HOSTS} hosts x 10 pages (not --hosts), efficiency on 3 hosts "
                         "with a 0.05 s delay")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--bare", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        scrapy_child(*json.loads(a.child))
        return
    if a.bare:
        bare_child(*json.loads(Path(a.bare).read_text()))
        return
    from crawlq.testing.web import TestWeb, reachable

    for scenario in a.scenario or ["throughput", "efficiency"]:
        spec = spec_for(scenario, TINY_HOSTS if a.tiny else a.hosts, a.tiny)
        conc, per_host, delay = settings_for(scenario, a.concurrency, a.tiny)
        print(f"\n== {scenario}: {spec.hosts} hosts, concurrency {conc}, {per_host} per "
              f"host, delay {delay:g} s, robots.txt obeyed")
        print(f"{'contender':<15} {'pages':>7} {'twice':>6} {'missing':>8} {'seconds':>8} "
              f"{'pages/s':>8} {'efficiency':>11}")
        rates: dict[str, float] = {}
        for contender in a.only or CONTENDERS:
            web = TestWeb(spec, engine="asyncio").start()
            tmp = tempfile.mkdtemp(prefix="crawlq-bench-crawl-")
            try:
                seeds = [web.url(i, "/") for i in range(spec.hosts)]
                want = reachable(spec, web.port) | {(spec.host(i), "/")
                                                    for i in range(spec.hosts)}
                try:
                    if contender == "crawlq":
                        seconds = run_crawlq(seeds, conc, per_host, delay, tmp)
                    elif contender == "bare-aiohttp":
                        seconds = run_bare([f"http://{h}:{web.port}{p}" for h, p in
                                            sorted(want, key=lambda hp: hp[::-1])],
                                           conc, per_host, tmp)
                    else:
                        seconds = run_scrapy(seeds, conc, per_host, delay, tmp,
                                             classic=contender == "scrapy-classic")
                except RuntimeError as exc:
                    print(f"{contender:<15} FAILED: {exc}")
                    continue
                hits = web.hits()
            finally:
                web.stop()
            fetched = Counter((h.host, h.path) for h in hits if h.path != "/robots.txt")
            twice = sum(n - 1 for n in fetched.values())
            missing = len(want - set(fetched))
            rate = len(fetched) / seconds
            rates[contender] = rate
            eff = ""
            if delay:
                busiest = max(Counter(host for host, _ in fetched).values())
                eff = f"{seconds / (busiest * delay):.2f}"
            print(f"{contender:<15} {len(fetched):>7} {twice:>6} {missing:>8} {seconds:>8.1f} "
                  f"{rate:>8.1f} {eff:>11}")
        for peer in ("scrapy", "scrapy-classic", "bare-aiohttp"):
            if peer in rates and "crawlq" in rates:
                print(f"  crawlq: {rates['crawlq'] / rates[peer]:.2f}x the pages/s of {peer}")


if __name__ == "__main__":
    main()
