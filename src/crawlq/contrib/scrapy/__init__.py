"""A drop-in Scrapy scheduler on a crawlq frontier: crash-safe resume, per-slot
politeness and fairness, and crawls shared by many processes through Redis.

Settings (only the first is needed)::

    SCHEDULER = "crawlq.contrib.scrapy.Scheduler"
    CRAWLQ_STORE = "sqlite:///crawl.db"   # or "redis://localhost:6379/0?prefix=myspider"

Without ``CRAWLQ_STORE`` the crawl lives in ``JOBDIR`` (a SQLite file there) when that
is set, else in memory: a fresh crawl every run, as with Scrapy's own scheduler.

How a request travels: ``enqueue_request`` asks the dupefilter (Scrapy's default one
is the frontier's durable seen-set; any other class is called as Scrapy calls it),
serializes the request with Scrapy's own ``Request.to_dict`` and adds it to the
frontier, in the queue of its download slot (the downloader's ``get_slot_key``: the
host name, or ``meta["download_slot"]``). ``next_request`` leases requests whose queue
is neither at its concurrency cap nor resting. The lease is acknowledged when the
engine is completely done with the request: its response (or final failure) has left
the downloader *and* the spider's callback has handed over the requests it yields, so
a process killed at any moment (``kill -9``) and restarted with the same settings
fetches again exactly the requests that were in flight, and loses none of the links
they led to. A redirect or a retry made by a downloader middleware is a new request
(added before its parent is acknowledged). Failures are kept as dead requests with
their error (``crawlq --store ... dead``); requests a middleware ignored (robots.txt)
are finished, and counted apart. Requests the frontier cannot keep (``data:``, unknown
schemes, unserializable callbacks) go to the downloader through this process's memory,
as with Scrapy's scheduler.

See ``docs/scrapy.md`` for every setting, the persistence rules and the differences
from Scrapy's scheduler.
"""

from __future__ import annotations

from .codec import TOKEN, feed_request, frontier_priority, scrapy_priority
from .config import StoreChoice, frontier_options, slot_overrides, store_choice
from .scheduler import Scheduler

__all__ = ["TOKEN", "Scheduler", "StoreChoice", "feed_request", "frontier_options",
           "frontier_priority", "scrapy_priority", "slot_overrides", "store_choice"]
