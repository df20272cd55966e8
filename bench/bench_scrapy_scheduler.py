#!/usr/bin/env python3
"""What a Scrapy scheduler costs per page, without the crawl around it.

bench_scrapy.py times whole crawls: ~5 ms of CPU a page on this machine, of which the
scheduler takes a few hundred µs, and the machine's speed drifts by ±20% between
minutes, so a crawl's ratio cannot tell schedulers apart by less than that. This
benchmark replays the calls a Scrapy engine makes on a real ``Crawler`` and engine,
with no network and no downloads: ``next_request``; the ``response_received`` signal
and the scraper's ``enqueue_scrape`` of the response; ``enqueue_request`` of the page's
links (real ``scrapy.Request`` objects, built alike
for every contender); then the engine's ``_slot.remove_request``. The site is that of
bench_scrapy.py's plain scenario (20 hosts x 200 pages, 4 links within the host and
1 across). Eight requests are in flight at a time. Reported: the process CPU time per
page (all threads), the contenders alternating, and the median of the rounds; for
crawlq on Redis, the CPU redis-server spent too (it shares the machine in a crawl).

    python bench/bench_scrapy_scheduler.py
    python bench/bench_scrapy_scheduler.py --rounds 7 --only scrapy-default --only crawlq-sqlite
"""

from __future__ import annotations

import argparse
import logging
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench_crawl import cpu_seconds

HOSTS, PAGES, IN_FLIGHT = 20, 200, 8
CONTENDERS: dict[str, dict[str, str]] = {
    "scrapy-default": {"SCHEDULER": "scrapy.core.scheduler.Scheduler"},
    "crawlq-memory": {"CRAWLQ_STORE": "memory://"},
    "crawlq-sqlite": {"CRAWLQ_STORE": "sqlite:///{tmp}/bench.db"},
    "crawlq-redis": {"CRAWLQ_STORE": "{redis}?prefix=bench-{n}"},
}


def links(host: int, page: int) -> list[tuple[int, int]]:
    """The (host, page) links of a page: the same on every run."""
    rnd = random.Random(host * 1000 + page)
    out = [(host, rnd.randrange(PAGES)) for _ in range(4)]
    out.append((rnd.randrange(HOSTS), rnd.randrange(PAGES)))
    return out


def url(host: int, page: int) -> str:
    return f"http://site{host}.crawlq.test:8000/page/{page}"


def replay(settings: dict[str, Any]) -> tuple[int, float]:
    """Crawl the site through the scheduler ``settings`` name; (pages, CPU seconds)."""
    import scrapy
    from scrapy import signals
    from scrapy.core.engine import _Slot
    from scrapy.crawler import Crawler
    from scrapy.http import HtmlResponse
    from scrapy.utils.misc import build_from_crawler, load_object

    class ReplaySpider(scrapy.Spider):
        name = "replay"

        def parse(self, response: Any) -> None:
            pass

    class NoCall:  # the engine's next-step timer: the replay drives the steps
        def schedule(self, *args: Any) -> None:
            pass

    class NoScrape:  # the scraper: the replay yields the links itself
        def enqueue_scrape(self, result: Any, request: Any) -> None:
            pass

    crawler = Crawler(ReplaySpider, settings)
    crawler._apply_settings()
    spider = crawler.spider = crawler._create_spider()
    engine = crawler.engine = crawler._create_engine()
    engine.scraper = NoScrape()  # type: ignore[assignment]
    sched = build_from_crawler(load_object(crawler.settings["SCHEDULER"]), crawler)
    slot = engine._slot = _Slot(False, NoCall(), sched)  # type: ignore[arg-type]
    engine.spider = spider
    sched.open(spider)
    sched.enqueue_request(scrapy.Request(url(0, 0), callback=spider.parse, dont_filter=True))
    pages = 0
    t0 = time.process_time()
    held: list[Any] = []
    while True:
        request = sched.next_request()
        if request is not None:
            slot.add_request(request)
            held.append(request)
        elif not held and not sched.has_pending_requests():
            break
        if len(held) < IN_FLIGHT and request is not None:
            continue
        for r in held:  # their downloads end, their callbacks yield the links
            host = int(r.url.split("site", 1)[1].split(".", 1)[0])
            page = int(r.url.rsplit("/", 1)[1])
            r.meta["download_latency"] = 0.01
            response = HtmlResponse(r.url, body=b"", request=r)
            crawler.signals.send_catch_log(signals.response_received, response=response,
                                           request=r, spider=spider)
            engine.scraper.enqueue_scrape(response, r)
            for h, p in links(host, page):
                sched.enqueue_request(scrapy.Request(url(h, p), callback=spider.parse,
                                                     meta={"depth": 1}))
            slot.remove_request(r)
            pages += 1
        held = []
    cpu = time.process_time() - t0
    sched.close("finished")
    return pages, cpu


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5, help="runs of each contender, alternating")
    ap.add_argument("--only", action="append", choices=list(CONTENDERS))
    a = ap.parse_args()
    logging.disable(logging.INFO)
    from scrapy.utils.reactor import install_reactor

    install_reactor("twisted.internet.asyncioreactor.AsyncioSelectorReactor")
    from crawlq.testing.redis_server import LocalRedis

    names = a.only or list(CONTENDERS)
    server = LocalRedis(Path(tempfile.mkdtemp(prefix="crawlq-bench-redis-"))).start()
    cpu: dict[str, list[float]] = {n: [] for n in names}
    try:
        for rnd in range(a.rounds):
            for name in names:
                tmp = tempfile.mkdtemp(prefix="crawlq-bench-sched-")
                settings: dict[str, Any] = {
                    "LOG_LEVEL": "WARNING", "TELNETCONSOLE_ENABLED": False,
                    "SCHEDULER": "crawlq.contrib.scrapy.Scheduler",
                    # (the scheduler's own work only: not the collector's, which
                    # CRAWLQ_GC_FREEZE changes for the whole process)
                    "CRAWLQ_GC_FREEZE": False}
                settings.update({k: v.format(tmp=tmp, redis=server.url, n=rnd)
                                 for k, v in CONTENDERS[name].items()})
                redis0 = cpu_seconds(server.proc.pid)
                pages, used = replay(settings)
                redis_cpu = cpu_seconds(server.proc.pid) - redis0
                extra = (f"  (+ redis-server {redis_cpu * 1e6 / pages:.0f} µs)"
                         if "redis" in name else "")
                if "redis" in name:
                    used += redis_cpu
                cpu[name].append(used * 1e6 / pages)
                print(f"round {rnd + 1}  {name:<16} {pages} pages  "
                      f"{cpu[name][-1]:6.0f} µs CPU/page{extra}", flush=True)
    finally:
        server.stop()
    base = statistics.median(cpu["scrapy-default"]) if cpu.get("scrapy-default") else None
    print("medians:")
    for name, got in cpu.items():
        med = statistics.median(got)
        ratio = f", {base / med:.2f}x Scrapy's default scheduler" if base else ""
        print(f"  {name:<16} {med:6.0f} µs CPU/page{ratio}")


if __name__ == "__main__":
    sys.exit(main())
