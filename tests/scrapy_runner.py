"""Run a real Scrapy spider with crawlq's scheduler against the local test web.

Run as a separate process by tests/test_scrapy.py (Twisted's reactor runs once per
process). Prints the crawl's stats as one JSON line at the end.

    python scrapy_runner.py STORE START_URL [--settings JSON] [--spider site|priorities|bad]
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

import scrapy
from scrapy.crawler import CrawlerProcess
from scrapy.resolver import dnscache


class SiteSpider(scrapy.Spider):
    """Follows every link within crawlq.test."""

    name = "site"
    allowed_domains = ["crawlq.test"]

    def __init__(self, start: str = "", **kw: Any) -> None:
        super().__init__(**kw)
        self.start_urls = [start]

    def parse(self, response: scrapy.http.Response, **kw: Any) -> Any:
        if not isinstance(response, scrapy.http.TextResponse):
            return
        for href in response.css("a::attr(href)").getall():
            yield response.follow(href, callback=self.parse, cb_kwargs={"via": "a"})


class PrioritySpider(SiteSpider):
    """From the start page, asks for ten pages of one host with priorities 0..9."""

    name = "priorities"

    def parse(self, response: scrapy.http.Response, **kw: Any) -> Any:
        if response.meta.get("leaf"):
            return
        base = response.url.split("/", 3)[:3]
        host = "/".join(base).replace("site0", "site1")
        for p in range(10):
            yield scrapy.Request(f"{host}/page/{p}", priority=p, meta={"leaf": True},
                                 callback=self.parse)


class BadSpider(SiteSpider):
    """Yields one request that cannot be serialized (a lambda callback)."""

    name = "bad"

    def parse(self, response: scrapy.http.Response, **kw: Any) -> Any:
        if response.meta.get("leaf"):
            return
        yield scrapy.Request(response.urljoin("/page/1"),
                             callback=lambda r: None)  # type: ignore[misc]  # (on purpose)
        yield scrapy.Request(response.urljoin("/page/2"), callback=self.parse,
                             meta={"leaf": True})


SPIDERS = {"site": SiteSpider, "priorities": PrioritySpider, "bad": BadSpider}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("store")
    ap.add_argument("start")
    ap.add_argument("--settings", default="{}")
    ap.add_argument("--spider", default="site", choices=sorted(SPIDERS))
    ap.add_argument("--hosts", type=int, default=10)
    a = ap.parse_args()
    for i in range(a.hosts):  # the test web's hosts all live on 127.0.0.1
        dnscache[f"site{i}.crawlq.test"] = "127.0.0.1"
    settings: dict[str, Any] = {
        "SCHEDULER": "crawlq.contrib.scrapy.Scheduler",
        "CRAWLQ_STORE": a.store,
        "ROBOTSTXT_OBEY": False,
        "TELNETCONSOLE_ENABLED": False,
        "LOG_LEVEL": "INFO",
        "CONCURRENT_REQUESTS": 8,
        "CONCURRENT_REQUESTS_PER_DOMAIN": 2,
        "DOWNLOAD_TIMEOUT": 10,
        "RETRY_ENABLED": False,
    }
    settings.update(json.loads(a.settings))
    process = CrawlerProcess(settings)
    crawler = process.create_crawler(SPIDERS[a.spider])
    process.crawl(crawler, start=a.start)
    process.start()
    stats = {k: (v if isinstance(v, (int, float, str)) else str(v))
             for k, v in (crawler.stats.get_stats() if crawler.stats else {}).items()}
    print(json.dumps(stats))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
