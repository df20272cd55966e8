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

LIVE = "scrapy_live"
"""``meta`` key of the handle under which the scheduler that added a request keeps the
live Scrapy request object: an int on a ``memory://`` store (it lives and dies with
the process: nothing is serialized); on a durable store a string unique to that
scheduler, next to the serialized request, which any other process reads instead."""

FEED_META = "crawlq_meta"
"""``meta`` key under which :func:`feed_request` passes a fed request's own meta."""

BAND = 2**16
"""Frontier priorities per Scrapy priority: Scrapy priority ``p`` is the band
``[p * BAND, (p + 1) * BAND)``, so start requests can be ordered inside it."""

SCRAPY_PRIORITY_MAX = PRIORITY_MAX // BAND - 1
"""Scrapy priorities beyond ± this (32,766) are clamped (see :func:`frontier_priority`)."""


def frontier_priority(priority: int, start_rank: int | None) -> int:
    """The frontier's priority for a Scrapy request.

    Scrapy priority ``p`` gives the band of ``p * BAND``; a higher Scrapy priority
    always goes first. Inside the band, other requests take the top level,
    ``p * BAND + BAND - 1``, so at one Scrapy priority they go before start requests,
    as with Scrapy's scheduler (``start_rank`` None: not a start request, or start
    requests share the other requests' queues). A start request takes the level
    ``p * BAND + start_rank``, with ``start_rank`` in ``[0, BAND - 2]``: the scheduler
    counts ranks so that start requests come out in their own order (FIFO by
    default) whatever the order of the others (clamped ranks share a level).
    """
    p = max(-SCRAPY_PRIORITY_MAX, min(SCRAPY_PRIORITY_MAX, int(priority)))
    if start_rank is None:
        return p * BAND + BAND - 1
    return p * BAND + max(0, min(start_rank, BAND - 2))


def scrapy_priority(priority: int) -> int:
    """The Scrapy priority of a frontier priority (the inverse of the above)."""
    return priority // BAND


def request_dict(request: ScrapyRequest, spider: Spider) -> dict[str, Any]:
    """``request.to_dict(spider=spider)``, without its search of the spider's members.

    Scrapy names a callback by scanning ``inspect.getmembers(spider)`` for the method,
    once per request: ~120 µs, more than the rest of a request's serialization. A
    callback is nearly always the spider method of its own ``__name__``, which one
    ``getattr`` confirms; anything else (another name, a request class with its own
    ``to_dict``) goes through Scrapy's ``to_dict``.
    """
    if type(request).to_dict is not ScrapyRequest.to_dict:
        return request.to_dict(spider=spider)
    callback, errback = request.callback, request.errback
    cb, eb = _method_name(spider, callback), _method_name(spider, errback)
    if (cb is None and callable(callback)) or (eb is None and callable(errback)):
        return request.to_dict(spider=spider)
    d: dict[str, Any] = {"url": request.url, "callback": cb if callable(callback) else callback,
                         "errback": eb if callable(errback) else errback,
                         "headers": dict(request.headers)}
    for attr in request.attributes:
        d.setdefault(attr, getattr(request, attr))
    if type(request) is not ScrapyRequest:
        d["_class"] = f"{type(request).__module__}.{type(request).__name__}"
    return d


def _method_name(spider: Spider, func: Any) -> str | None:
    """The name under which ``func``, a bound method, is found on ``spider`` (checked
    by its own name only), else None."""
    inner = getattr(func, "__func__", None)
    name = getattr(inner, "__name__", None)
    if inner is None or not isinstance(name, str):
        return None
    found = getattr(getattr(spider, name, None), "__func__", None)
    return name if found is inner else None


def to_crawlq(request: ScrapyRequest, spider: Spider, *, queue: str,
              start_rank: int | None, dont_filter: bool,
              fingerprint: bytes | None, handle: int | str | None = None) -> CrawlqRequest:
    """The frontier request that carries ``request``, filed in ``queue``: the whole
    request serialized, with ``handle`` (a str) when the scheduler also keeps the live
    object; or only ``handle`` (an int: the object is kept, nothing serialized)."""
    cmeta: dict[str, Any]
    if isinstance(handle, int):
        cmeta = {LIVE: handle}
    else:
        d = request_dict(request, spider)
        meta = d.get("meta")
        if meta and TOKEN in meta:
            d["meta"] = {k: v for k, v in meta.items() if k != TOKEN}
        # Pickle, as Scrapy's JOBDIR does: what a spider puts in meta is arbitrary Python.
        blob = base64.b64encode(pickle.dumps(d, protocol=4)).decode("ascii")
        cmeta = {BLOB: blob} if handle is None else {BLOB: blob, LIVE: handle}
    if fingerprint is not None:
        cmeta["fp"] = fingerprint.hex()
    depth = request.meta.get("depth", 0)
    return CrawlqRequest(request.url, method=request.method, body=request.body,
                         priority=frontier_priority(request.priority, start_rank),
                         depth=depth if isinstance(depth, int) and depth >= 0 else 0,
                         meta=cmeta, dont_filter=dont_filter, queue=queue)


def from_crawlq(creq: CrawlqRequest, spider: Spider) -> ScrapyRequest:
    """The Scrapy request a leased frontier request stands for."""
    blob = creq.meta.get(BLOB)
    if isinstance(blob, str):
        # The store is the user's own, trusted data (as Scrapy's JOBDIR).
        d = pickle.loads(base64.b64decode(blob))
        return request_from_dict(d, spider=spider)
    if LIVE in creq.meta:  # the scheduler resolves these; this one's process is gone
        raise LookupError("a live request of a scheduler that is gone")
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
