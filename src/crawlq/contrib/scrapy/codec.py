"""Scrapy requests in and out of the frontier, and requests other producers added.

A Scrapy request is kept whole (``Request.to_dict``: callbacks by name, meta, headers,
cookies, flags...) in ``meta["scrapy"]`` of the frontier's request. A request without
that key was added by someone else (the CLI, the Python API, another language): the
spider's ``crawlq_request`` hook, or :func:`feed_request`, makes it a Scrapy request.
"""

from __future__ import annotations

import base64
import pickle
from typing import Any

from scrapy import Request as ScrapyRequest
from scrapy import Spider
from scrapy.utils.request import request_from_dict

from ...models import Request as CrawlqRequest
from ...stores.base import PRIORITY_MAX

TOKEN = "crawlq_lease"
"""``request.meta`` key of the lease a request was handed out under."""

BLOB = "scrapy"
"""``meta`` key of a frontier request that holds a whole Scrapy request."""

FEED_META = "crawlq_meta"
"""``meta`` key under which :func:`feed_request` passes a fed request's own meta."""

SCRAPY_PRIORITY_MAX = PRIORITY_MAX // 2 - 1
"""Scrapy priorities beyond ± this are clamped (see :func:`frontier_priority`)."""


def frontier_priority(priority: int, start: bool) -> int:
    """The frontier's priority for a Scrapy request.

    ``2p + 1``, and ``2p`` for a start request when start requests have their own
    queues: at one Scrapy priority the other requests go first, as with Scrapy's
    scheduler, while any higher Scrapy priority still goes before.
    """
    p = max(-SCRAPY_PRIORITY_MAX, min(SCRAPY_PRIORITY_MAX, int(priority)))
    return 2 * p + (0 if start else 1)


def scrapy_priority(priority: int) -> int:
    """The Scrapy priority of a frontier priority (the inverse of the above)."""
    return priority >> 1


def to_crawlq(request: ScrapyRequest, spider: Spider, *, queue: str, start: bool,
              dont_filter: bool, fingerprint: bytes | None) -> CrawlqRequest:
    """The frontier request that carries ``request``, filed in ``queue``."""
    d = request.to_dict(spider=spider)
    meta = d.get("meta")
    if meta and TOKEN in meta:
        d["meta"] = {k: v for k, v in meta.items() if k != TOKEN}
    # Pickle, as Scrapy's JOBDIR does: what a spider puts in meta is arbitrary Python.
    blob = base64.b64encode(pickle.dumps(d, protocol=4)).decode("ascii")
    cmeta: dict[str, Any] = {BLOB: blob}
    if fingerprint is not None:
        cmeta["fp"] = fingerprint.hex()
    depth = request.meta.get("depth", 0)
    return CrawlqRequest(request.url, method=request.method, body=request.body,
                         priority=frontier_priority(request.priority, start),
                         depth=depth if isinstance(depth, int) and depth >= 0 else 0,
                         meta=cmeta, dont_filter=dont_filter, queue=queue)


def from_crawlq(creq: CrawlqRequest, spider: Spider) -> ScrapyRequest:
    """The Scrapy request a leased frontier request stands for."""
    blob = creq.meta.get(BLOB)
    if isinstance(blob, str):
        # The store is the user's own, trusted data (as Scrapy's JOBDIR).
        d = pickle.loads(base64.b64decode(blob))
        return request_from_dict(d, spider=spider)
    hook = getattr(spider, "crawlq_request", None)
    request = hook(creq) if callable(hook) else feed_request(creq, spider)
    if not isinstance(request, ScrapyRequest):
        raise TypeError(f"{type(spider).__name__}.crawlq_request returned {request!r}, "
                        "not a scrapy.Request")
    return request


def feed_request(creq: CrawlqRequest, spider: Spider) -> ScrapyRequest:
    """The default Scrapy request for a URL another producer added: GET or its method
    and body, to the spider's ``parse``, with its depth, its frontier meta under
    ``meta["crawlq_meta"]`` and its referrer as the Referer header."""
    meta: dict[str, Any] = {"depth": creq.depth}
    if creq.meta:
        meta[FEED_META] = dict(creq.meta)
    headers = {"Referer": creq.referrer} if creq.referrer else None
    return ScrapyRequest(creq.url, method=creq.method, body=creq.body or None,
                         priority=scrapy_priority(creq.priority), meta=meta,
                         headers=headers, dont_filter=True)
