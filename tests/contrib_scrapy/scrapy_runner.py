"""Run a real Scrapy spider with crawlq's scheduler against the local test web.

Run as a separate process by tests/contrib_scrapy/test_scrapy.py (Twisted's reactor runs once per
process). Prints the crawl's stats as one JSON line at the end.

    python scrapy_runner.py STORE START_URL [--settings JSON] [--spider NAME]

STORE ``-`` sets no CRAWLQ_STORE (the scheduler's own choice: JOBDIR or memory).
"""

from __future__ import annotations

import argparse
import gc
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
        # (objects the collector skips: crawlq's scheduler freezes the heap it found)
        self.crawler.stats.max_value("test/gc_frozen", gc.get_freeze_count())
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


class SemanticsSpider(SiteSpider):
    """One request of each kind a Scrapy user relies on; what reached a callback or an
    errback is counted in the stats as ``got/<what>`` and ``err/<what>``."""

    name = "semantics"
    allowed_domains: list[str] = []  # (data: and other schemes must reach the downloader)

    async def start(self) -> Any:
        base = self.start_urls[0].rstrip("/")
        # 503 once, then 200: RetryMiddleware's copy of a start request must be fetched.
        yield scrapy.Request(f"{base}/unavailable", callback=self.seen,
                             cb_kwargs={"what": "retried"}, dont_filter=True,
                             errback=self.failed)
        yield scrapy.Request("data:text/plain,hello", callback=self.seen,
                             cb_kwargs={"what": "data"}, errback=self.failed)
        yield scrapy.Request("weird://example/x", callback=self.seen,
                             cb_kwargs={"what": "weird"}, errback=self.failed)
        yield scrapy.Request(f"{base}/private/x", callback=self.seen,
                             cb_kwargs={"what": "robots"}, errback=self.failed)
        yield scrapy.Request(f"{base}/page/1", callback=self.seen, cb_kwargs={"what": "slot"},
                             meta={"download_slot": "my-slot"})
        for _ in range(2):  # the same page twice, and twice more with dont_filter
            yield scrapy.Request(f"{base}/page/2", callback=self.seen, cb_kwargs={"what": "dup"})
            yield scrapy.Request(f"{base}/page/3", callback=self.seen,
                                 cb_kwargs={"what": "dont_filter"}, dont_filter=True)
        yield scrapy.Request(f"{base}/error", callback=self.seen, cb_kwargs={"what": "error"},
                             errback=self.failed)
        # Nobody listens on port 1: a download error, after RetryMiddleware's retries.
        yield scrapy.Request(base.rsplit(":", 1)[0] + ":1/", callback=self.seen,
                             cb_kwargs={"what": "refused"}, errback=self.failed)

    def seen(self, response: scrapy.http.Response, what: str) -> Any:
        assert self.crawler.stats is not None
        self.crawler.stats.inc_value(f"got/{what}")
        return
        yield

    def parse(self, response: scrapy.http.Response, **kw: Any) -> Any:
        """Requests another producer added to the store arrive here (the default)."""
        assert self.crawler.stats is not None
        self.crawler.stats.inc_value("got/fed")
        if response.meta.get("crawlq_meta") == {"source": "api"}:
            self.crawler.stats.inc_value("got/fed-with-meta")
        return
        yield

    def failed(self, failure: Any) -> None:
        assert self.crawler.stats is not None
        what = failure.request.cb_kwargs.get("what", "?")
        self.crawler.stats.inc_value(f"err/{what}")


class LiveSpider(SiteSpider):
    """Marks every request it yields with an attribute that no serialization keeps;
    counts the responses whose request still has it (``got/live``: the very object the
    spider yielded) and those whose request was rebuilt from the store (``got/rebuilt``)."""

    name = "live"

    def parse(self, response: scrapy.http.Response, **kw: Any) -> Any:
        assert self.crawler.stats is not None
        live = getattr(response.request, "crawlq_test_mark", False)
        self.crawler.stats.inc_value("got/live" if live else "got/rebuilt")
        for request in super().parse(response, **kw):
            marked = MarkedRequest(request.url, callback=request.callback,
                                   cb_kwargs=request.cb_kwargs)
            marked.crawlq_test_mark = True
            yield marked


class MarkedRequest(scrapy.Request):
    """A request that can carry an attribute of its own (Request has slots)."""

    crawlq_test_mark = False


SPIDERS = {"site": SiteSpider, "priorities": PrioritySpider, "bad": BadSpider,
           "semantics": SemanticsSpider, "live": LiveSpider}


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
        "CRAWLQ_STORE": None if a.store == "-" else a.store,
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
    stats["test/gc_frozen_after"] = gc.get_freeze_count()
    print(json.dumps(stats))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
