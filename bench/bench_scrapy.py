#!/usr/bin/env python3
"""The same Scrapy spider with Scrapy's default scheduler, scrapy-redis and crawlq's
scheduler (SQLite and Redis), on the local test web, in one run.

Contenders: Scrapy's default scheduler (with its default DownloaderAwarePriorityQueue),
the same with ScrapyPriorityQueue ("scrapy-classic", the default before Scrapy 2.13),
scrapy-redis (its defaults), crawlq's scheduler on SQLite and on Redis.

Three scenarios, each run in its own process (Twisted's reactor runs once); every
contender runs ``--rounds`` times (default 3), the contenders alternating, and the
medians are compared (this machine's speed drifts by ±20% between minutes):

plain
    20 hosts x 200 pages, linked within and across hosts; no delays. Reported: pages/s
    from spider open to close (every page fetched once), and the CPU time the spider's
    process spent per page (steadier than the wall time on a shared machine).
head-of-line
    One host with 10,000 pages and a 0.5 s download delay (``DOWNLOAD_SLOTS``) plus
    100 hosts with 50 pages each, every host's index a start URL. Reported: seconds until
    every page of the 100 small hosts is fetched (the spider then closes itself).
scrapy-bench
    ``scrapy bench`` itself (its own server on localhost:8998, 10 s), once per contender
    per round, the contenders alternating; ``--rounds`` rounds (default 3). Reported:
    responses per minute of elapsed crawl time, the median of the rounds. Contenders:
    Scrapy's default scheduler, crawlq's on memory, SQLite and Redis, and "bare-list"
    (:class:`BareList`, the cheapest scheduler there can be: the most any scheduler
    can reach on this machine).

The test web (crawlq.testing.web) runs on 127.0.0.1 in this process; redis-server is
started on a free loopback port for the Redis contenders.

crawlq's scheduler freezes the garbage collector's view of the objects alive when the
spider opens (``CRAWLQ_GC_FREEZE``, on by default), which Scrapy's does not: that alone
makes a crawl here ~15% cheaper. ``--crawlq-setting CRAWLQ_GC_FREEZE=False`` compares
the schedulers without it.

``--tiny`` runs each scenario in a few seconds, only to check the benchmark works (its
figures mean nothing): plain on 3 hosts x 20 pages; head-of-line on 5 small hosts of
10 pages beside one of 50 pages with a 0.1 s delay; ``scrapy bench`` for 1 s.

    python bench/bench_scrapy.py
    python bench/bench_scrapy.py --tiny --rounds 1
    python bench/bench_scrapy.py --crawlq-setting CRAWLQ_GC_FREEZE=False
    python bench/bench_scrapy.py --scenario plain --only crawlq-sqlite
    python bench/bench_scrapy.py --scenario scrapy-bench --rounds 5
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

CONTENDERS = ["scrapy-default", "scrapy-classic", "scrapy-redis", "crawlq-sqlite",
              "crawlq-redis", "crawlq-memory", "bare-list"]
BENCH_CONTENDERS = ["scrapy-default", "crawlq-memory", "crawlq-sqlite", "crawlq-redis",
                    "bare-list"]
SMALL_HOSTS, SMALL_PAGES, BIG_PAGES, BIG_DELAY = 100, 50, 10_000, 0.5
TINY_SMALL_HOSTS, TINY_SMALL_PAGES, TINY_BIG_PAGES, TINY_BIG_DELAY = 5, 10, 50, 0.1
"""The head-of-line site (small hosts, pages of each, the big host's pages and its
download delay), and the same with ``--tiny``."""
_EXTRA = "CRAWLQ_BENCH_SETTINGS"
"""The environment variable that hands ``--crawlq-setting`` to the children (JSON)."""


def head_of_line(tiny: bool) -> tuple[int, int, int, float]:
    """(small hosts, pages of each, the big host's pages, its delay) of head-of-line."""
    if tiny:
        return TINY_SMALL_HOSTS, TINY_SMALL_PAGES, TINY_BIG_PAGES, TINY_BIG_DELAY
    return SMALL_HOSTS, SMALL_PAGES, BIG_PAGES, BIG_DELAY


def spec_for(scenario: str, tiny: bool = False) -> Any:
    """The test web of a scenario (``tiny``: the few pages of ``--tiny``)."""
    from crawlq.testing.web import SiteSpec

    if scenario == "plain":
        hosts, pages = (3, 20) if tiny else (20, 200)
        return SiteSpec(hosts=hosts, pages=pages, links=4, cross_links=1,
                        special_links=False, crawl_delay={})
    small_hosts, small_pages, big_pages, _ = head_of_line(tiny)
    return SiteSpec(hosts=small_hosts + 1, pages=small_pages, host_pages={0: big_pages},
                    links=4, cross_links=0, special_links=False, crawl_delay={})


class BareList:
    """A Scrapy scheduler that does as little as one can: a Python list (last in,
    first out, as Scrapy's default memory queue) and a set of URLs seen. No priorities,
    no politeness, no persistence, no stats: what a crawl spends outside the scheduler
    is all that is left, so its pages/min bound every scheduler's on this machine."""

    def __init__(self) -> None:
        self.queue: list[Any] = []
        self.seen: set[str] = set()

    @classmethod
    def from_crawler(cls, crawler: Any) -> BareList:
        return cls()

    def open(self, spider: Any) -> None:
        pass

    def close(self, reason: str) -> None:
        pass

    def has_pending_requests(self) -> bool:
        return bool(self.queue)

    def __len__(self) -> int:
        return len(self.queue)

    def enqueue_request(self, request: Any) -> bool:
        if not request.dont_filter:
            if request.url in self.seen:
                return False
            self.seen.add(request.url)
        self.queue.append(request)
        return True

    def next_request(self) -> Any:
        return self.queue.pop() if self.queue else None


# -- the child: one spider run -------------------------------------------------------------


def child(contender: str, scenario: str, port: int, redis_url: str, tmp: str,
          cap: float, tiny: bool) -> None:
    import scrapy
    from scrapy.exceptions import CloseSpider
    from scrapy.resolver import dnscache

    spec = spec_for(scenario, tiny)
    for name in spec.host_names():  # the test web's hosts all live on 127.0.0.1
        dnscache[name] = "127.0.0.1"
    big = spec.host(0)
    small_hosts, small_pages, _, big_delay = head_of_line(tiny)
    small_total = small_hosts * (small_pages + 1)  # pages and index of each small host
    marks: dict[str, float] = {}

    class BenchSpider(scrapy.Spider):
        name = f"bench-{scenario}"
        allowed_domains = ["crawlq.test"]
        small_seen = 0

        hosts = range(spec.hosts) if scenario == "head-of-line" else [0]
        start_urls = [f"http://{spec.host(i)}:{port}/" for i in hosts]

        def parse(self, response: Any) -> Any:
            if scenario == "head-of-line" and not response.url.startswith(f"http://{big}"):
                self.small_seen += 1
                if self.small_seen == small_total:
                    marks["small_done"] = time.monotonic()
                    raise CloseSpider("small hosts done")
            for href in response.css("a::attr(href)").getall():
                yield response.follow(href, callback=self.parse)

    settings: dict[str, Any] = {
        "LOG_LEVEL": "WARNING", "TELNETCONSOLE_ENABLED": False, "ROBOTSTXT_OBEY": False,
        "CONCURRENT_REQUESTS": 16, "CONCURRENT_REQUESTS_PER_DOMAIN": 8,
        "RETRY_ENABLED": False, "DOWNLOAD_TIMEOUT": 30,
        "CLOSESPIDER_TIMEOUT": cap,  # a contender stuck behind the big host stops here
    }
    if scenario == "head-of-line":
        settings["DOWNLOAD_SLOTS"] = {f"{big}": {"delay": big_delay}}
        settings["RANDOMIZE_DOWNLOAD_DELAY"] = False
    if contender == "scrapy-classic":
        # Scrapy's default priority queue before 2.13: one queue for all hosts.
        settings["SCHEDULER_PRIORITY_QUEUE"] = "scrapy.pqueues.ScrapyPriorityQueue"
    elif contender == "scrapy-redis":
        settings.update({"SCHEDULER": "scrapy_redis.scheduler.Scheduler",
                         "DUPEFILTER_CLASS": "scrapy_redis.dupefilter.RFPDupeFilter",
                         "REDIS_URL": redis_url, "SCHEDULER_PERSIST": False,
                         "SCHEDULER_FLUSH_ON_START": True,
                         "SCHEDULER_IDLE_BEFORE_CLOSE": 0})
    elif contender == "crawlq-memory":
        settings.update({"SCHEDULER": "crawlq.contrib.scrapy.Scheduler",
                         "CRAWLQ_STORE": "memory://"})
    elif contender == "bare-list":
        settings["SCHEDULER"] = f"{__name__}.BareList"
    elif contender == "crawlq-sqlite":
        settings.update({"SCHEDULER": "crawlq.contrib.scrapy.Scheduler",
                         "CRAWLQ_STORE": f"sqlite:///{tmp}/bench.db"})
    elif contender == "crawlq-redis":
        settings.update({"SCHEDULER": "crawlq.contrib.scrapy.Scheduler",
                         "CRAWLQ_STORE": f"{redis_url}?prefix=bench-{scenario}-{os.getpid()}"})
    if contender.startswith("crawlq-"):
        settings.update(json.loads(os.environ.get(_EXTRA, "{}")))
    crawler = run_spider(settings, BenchSpider, marks)
    stats = crawler.stats.get_stats() if crawler.stats else {}
    print(json.dumps({
        "seconds": marks["close"] - marks["open"],
        "small_done_s": marks["small_done"] - marks["open"] if "small_done" in marks else None,
        "responses": stats.get("response_received_count", 0),
        "reason": stats.get("finish_reason"),
    }))


def run_spider(settings: dict[str, Any], spider: Any, marks: dict[str, float]) -> Any:
    """Run ``spider`` once (Twisted's reactor: once per process) with ``settings``;
    ``marks`` gets the monotonic times of spider "open" and "close". Returns the
    crawler (for its stats)."""
    from scrapy import signals
    from scrapy.crawler import CrawlerProcess

    process = CrawlerProcess(settings)
    crawler = process.create_crawler(spider)

    def opened(spider: Any) -> None:
        marks["open"] = time.monotonic()

    def closed(spider: Any, reason: str) -> None:
        marks["close"] = time.monotonic()

    # (Scrapy keeps weak references to signal handlers: these live until the end.)
    crawler.signals.connect(opened, signals.spider_opened)
    crawler.signals.connect(closed, signals.spider_closed)
    process.crawl(crawler)
    process.start()
    return crawler


# -- scrapy bench -------------------------------------------------------------------------------


def scrapy_bench(contenders: list[str], rounds: int, redis_url: str, tiny: bool) -> None:
    """Run ``scrapy bench`` for each contender, alternating, and print pages/min
    (``tiny``: 1 s each instead of its 10 s)."""
    import re
    import statistics

    print("\n== scrapy-bench")
    rates: dict[str, list[float]] = {c: [] for c in contenders}
    for r in range(rounds):
        for contender in contenders:
            tmp = tempfile.mkdtemp(prefix="crawlq-bench-scrapy-")
            args = [sys.executable, "-m", "scrapy", "bench", "-s", "TELNETCONSOLE_ENABLED=0"]
            if tiny:
                args += ["-s", "CLOSESPIDER_TIMEOUT=1"]
            env = dict(os.environ)
            if contender == "bare-list":
                env["PYTHONPATH"] = os.pathsep.join(
                    p for p in (str(Path(__file__).parent), env.get("PYTHONPATH")) if p)
                args += ["-s", "SCHEDULER=bench_scrapy.BareList"]
            elif contender != "scrapy-default":
                store = {"crawlq-memory": "memory://",
                         "crawlq-sqlite": f"sqlite:///{tmp}/bench.db",
                         "crawlq-redis": f"{redis_url}?prefix=bench-{r}"}[contender]
                args += ["-s", "SCHEDULER=crawlq.contrib.scrapy.Scheduler",
                         "-s", f"CRAWLQ_STORE={store}"]
                for k, v in json.loads(os.environ.get(_EXTRA, "{}")).items():
                    args += ["-s", f"{k}={v}"]
            out = subprocess.run(args, capture_output=True, text=True, cwd=tmp, timeout=300,
                                 env=env)
            count = re.search(r"'response_received_count': (\d+)", out.stderr)
            elapsed = re.search(r"'elapsed_time_seconds': ([\d.]+)", out.stderr)
            if out.returncode != 0 or not count or not elapsed:
                print(f"{contender:<16} FAILED\n{out.stderr[-2000:]}")
                continue
            rate = int(count.group(1)) / float(elapsed.group(1)) * 60
            rates[contender].append(rate)
            print(f"round {r + 1}  {contender:<16} {rate:>8.0f} pages/min", flush=True)
    base = statistics.median(rates["scrapy-default"]) if rates.get("scrapy-default") else None
    for contender, got in rates.items():
        if got:
            med = statistics.median(got)
            ratio = f"  {med / base:.2f}x Scrapy's default scheduler" if base else ""
            print(f"{contender:<16} median {med:>8.0f} pages/min{ratio}")


# -- the parent --------------------------------------------------------------------------------


def _children_cpu() -> float:
    """CPU seconds (user and system) of the child processes waited for so far."""
    import resource

    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def crawl_scenario(scenario: str, contenders: list[str], rounds: int, cap: float,
                   redis_url: str, tiny: bool) -> None:
    """Run each contender ``rounds`` times, alternating, on a fresh test web each time;
    print every run, then the medians and their ratios to Scrapy's default."""
    import statistics
    from collections import Counter

    from crawlq.testing.web import TestWeb

    spec = spec_for(scenario, tiny)
    print(f"\n== {scenario}" + (" (--tiny)" if tiny else ""))
    print(f"{'round':<6} {'contender':<16} {'pages':>7} {'seconds':>8} {'pages/s':>8} "
          f"{'CPU ms/page':>11} {'small hosts done':>17}")
    seconds: dict[str, list[float]] = {c: [] for c in contenders}
    small_done: dict[str, list[float]] = {c: [] for c in contenders}
    cpu_ms: dict[str, list[float]] = {c: [] for c in contenders}
    for rnd in range(1, rounds + 1):
        for contender in contenders:
            web = TestWeb(spec).start()
            tmp = tempfile.mkdtemp(prefix="crawlq-bench-scrapy-")
            cpu0 = _children_cpu()
            try:
                out = subprocess.run(
                    [sys.executable, __file__, "--child", contender, scenario,
                     str(web.port), redis_url, tmp, str(cap), "tiny" if tiny else "full"],
                    capture_output=True, text=True, timeout=cap + 300)
                cpu = _children_cpu() - cpu0
                hits = Counter((h.host, h.path) for h in web.hits())
            finally:
                web.stop()
            if out.returncode != 0:
                print(f"{rnd:<6} {contender:<16} FAILED\n{out.stderr[-2000:]}")
                continue
            r = json.loads(out.stdout.strip().splitlines()[-1])
            seconds[contender].append(r["seconds"])
            cpu_ms[contender].append(cpu * 1000 / max(len(hits), 1))
            if r["small_done_s"] is not None:
                small_done[contender].append(r["small_done_s"])
            twice = sum(n - 1 for n in hits.values())
            small = (f"{r['small_done_s']:.1f} s" if r["small_done_s"] is not None
                     else "-" if scenario == "plain" else f"not in {cap:g} s")
            note = f"  ({twice} fetched twice)" if twice else ""
            print(f"{rnd:<6} {contender:<16} {len(hits):>7} {r['seconds']:>8.1f} "
                  f"{len(hits) / r['seconds']:>8.1f} {cpu_ms[contender][-1]:>11.2f} "
                  f"{small:>17}{note}", flush=True)
    base_cpu = cpu_ms.get("scrapy-default")
    print("CPU per page (the spider's process), medians:")
    for name, got in cpu_ms.items():
        if got:
            med = statistics.median(got)
            ratio = f", {statistics.median(base_cpu) / med:.2f}x Scrapy's default" \
                if base_cpu else ""
            print(f"  {name}: {med:.2f} ms{ratio}")
    figures = small_done if scenario == "head-of-line" else seconds
    base = figures.get("scrapy-default")
    print("medians:")
    for name, got in figures.items():
        if not got:
            continue
        med = statistics.median(got)
        if not base:
            print(f"  {name}: {med:.1f} s")
        elif scenario == "plain":
            print(f"  {name}: {med:.1f} s, {statistics.median(base) / med:.2f}x the pages/s "
                  "of Scrapy's default scheduler")
        else:
            print(f"  {name}: small hosts done in {med:.1f} s, "
                  f"{statistics.median(base) / med:.2f}x sooner than with Scrapy's default "
                  "scheduler")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scenario", action="append",
                    choices=["plain", "head-of-line", "scrapy-bench"])
    ap.add_argument("--only", action="append", choices=CONTENDERS)
    ap.add_argument("--rounds", type=int, default=3,
                    help="runs of each contender per scenario, alternating (medians count)")
    ap.add_argument("--cap", type=float, default=300,
                    help="seconds a run may take at most (the spider then closes)")
    ap.add_argument("--crawlq-setting", action="append", default=[], metavar="KEY=VALUE",
                    help="a Scrapy setting for crawlq's contenders only (e.g. "
                         "CRAWLQ_LEASE_BATCH=64); repeatable")
    ap.add_argument("--tiny", action="store_true",
                    help="a few seconds per scenario, only to check the benchmark works: "
                         "a few pages of each site, scrapy bench for 1 s")
    ap.add_argument("--child", nargs=7, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.crawlq_setting:
        extra = dict(kv.split("=", 1) for kv in a.crawlq_setting)
        os.environ[_EXTRA] = json.dumps(extra)
    if a.child:
        contender, scenario, port, redis_url, tmp, cap, size = a.child
        child(contender, scenario, int(port), redis_url, tmp, float(cap), size == "tiny")
        return
    from crawlq.testing.redis_server import LocalRedis

    server = LocalRedis(Path(tempfile.mkdtemp(prefix="crawlq-bench-redis-"))).start()
    try:
        for scenario in a.scenario or ["plain", "head-of-line", "scrapy-bench"]:
            if scenario == "scrapy-bench":
                scrapy_bench([c for c in BENCH_CONTENDERS if not a.only or c in a.only],
                             a.rounds, server.url, a.tiny)
                continue
            crawl_scenario(scenario, a.only or CONTENDERS, a.rounds, a.cap, server.url, a.tiny)
    finally:
        server.stop()


if __name__ == "__main__":
    main()
