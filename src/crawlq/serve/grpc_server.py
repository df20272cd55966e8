"""``crawlq serve``'s URLFrontier gRPC API (crawler-commons/url-frontier v2): any
URLFrontier client (StormCrawler's spout, the reference Java client, stubs generated
from its proto) can crawl from a crawlq store. :class:`Service` is the servicer, one
class: its plumbing (each call's frontier work on the event loop or a worker thread,
as :func:`crawlq.aio.on_loop` says for the store; errors as gRPC statuses), the calls
that hand out, take and list URLs (see :mod:`.uf_ops` for what each does to a
frontier), then the calls that look at and steer crawls and queues;
:func:`start` starts the server. The proto and the streams' batching are in
:mod:`.grpc_wire`. docs/serve.md states what each call means on a crawlq store.
"""

from __future__ import annotations

import asyncio
import functools
import hmac
import logging
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from itertools import islice
from typing import Any, TypeVar

import grpc
from grpc import aio

from ..aio import on_loop
from ..errors import ConfigError, CrawlqError, InvalidURL, StoreError
from ..frontier import Frontier, PausedGC
from ..models import Lease
from . import uf_ops
from .app import MAX_BATCH, is_active, set_active
from .crawls import Crawls, crawl_id
from .grpc_wire import (
    MAX_MESSAGE,
    Refused,
    add_reflection,
    add_service,
    batches,
    check,
    checked,
    load_proto,
)
from .metrics import Metrics

DEFAULT_TTL = 30.0
"""Seconds a URL handed out by GetURLs stays leased when the client leaves it to us."""
PART = 1000
"""URLs of one step of store work on the URLs' path: GetURLs leases the URLs it sends this
many at a time, each part leased while the one before is sent (the first URLs go out
after a part's store work, not the whole call's), and PutURLs applies at most this many
of the messages that have arrived at once (their acks go out, and the loop serves the
other calls, after a part's store work: with parts of 10,000, a client's GetURLs and
acks waited behind each, 7% fewer URLs a second in bench_urlfrontier)."""
PAGE = 100
"""ListURLs' page size when the client gives none (as the reference server)."""
LIST_PAGE = 1000
"""ListURLs reads and sends the URLs asked for this many at a time."""
_LEVELS = {0: logging.DEBUG, 1: logging.DEBUG, 2: logging.INFO, 3: logging.WARNING,
           4: logging.ERROR}
"""URLFrontier's log levels (TRACE is DEBUG in Python's logging)."""
MAX_COUNT = 2**31 - 1
"""The largest count or number of seconds of GetParams and QueueDelayParams taken: the
proto's fields are uint32, which the reference server (Java) reads as int, so a
client's -1 arrives as 4294967295 (a lease of 136 years, had crawlq taken it). A value
over this is refused, INVALID_ARGUMENT; SetDelay's -1 for a queue is the reference's
'the default delay' (see Service.SetDelay)."""
DEFAULT_PAGE = 100
"""ListQueues' page size when the client gives none."""
_MINUS_ONE = 2**32 - 1
"""A client's -1 in a uint32 field."""
_T = TypeVar("_T")
_LOG = logging.getLogger(__name__)
_NO_METADATA: dict[str, list[str]] = {}
_NOTHING_HELD = {"completed": 0, "active_queues": 0}
"""GetStats' counts for a crawl or queue that holds nothing, as the reference's."""


class Service:
    """The URLFrontier servicer on a server's crawls."""

    def __init__(self, crawls: Crawls, metrics: Metrics, node: str,
                 token: str | None, pb: Any) -> None:
        self.crawls = crawls
        self.metrics = metrics
        self.node = node
        self.token = token
        self.pb = pb
        self._on_loop = on_loop(crawls.default.store)
        self._pause_gc = crawls.default.pause_gc
        self._handles_by_crawl: dict[str, uf_ops.Handles] = {}
        self._tasks: set[asyncio.Future[None]] = set()  # (give-backs under way)
        self._handles_lock = threading.Lock()

    # -- plumbing -------------------------------------------------------------------

    async def _run(self, context: Any, name: str, fn: Callable[..., _T], *args: Any,
                   hot: bool = False) -> _T:
        """``fn(*args)`` in a worker thread, its errors as gRPC statuses. ``hot``: a call
        of the URLs' path (GetURLs, PutURLs, PutDiscovered), run on the event loop itself
        where the store's calls are work of this process rather than waits (as
        :class:`~crawlq.aio.AsyncFrontier` calls them: the hand-offs to a thread, and
        the GIL taken back and forth, cost more than they free); the calls that scan a
        crawl stay on threads, so they do not hold up the others."""
        started = time.perf_counter()
        try:
            self._check_token(context)
            if hot:
                # (a batch of a client's messages: the frontier's batch rule)
                fn = functools.partial(_batch, self._pause_gc, fn)
                if self._on_loop:
                    return fn(*args)
            return await asyncio.to_thread(fn, *args)
        except Refused as exc:
            await context.abort(exc.code, str(exc))
        except StoreError as exc:
            self.metrics.store_errors.inc()
            await context.abort(grpc.StatusCode.UNAVAILABLE, f"the store failed: {exc}")
        except CrawlqError as exc:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        except Exception as exc:  # (a fault of this server's: logged, the call's answer)
            _LOG.exception("gRPC %s failed", name)
            await context.abort(grpc.StatusCode.INTERNAL,
                                f"{name} failed in the server: {type(exc).__name__}: {exc}")
        finally:
            self.metrics.latency.labels("grpc:" + name).observe(time.perf_counter() - started)
        raise AssertionError("abort returned")  # (context.abort always raises)

    def _check_token(self, context: Any) -> None:
        if self.token is None:
            return
        given = dict(context.invocation_metadata() or ()).get("authorization", "")
        if not hmac.compare_digest(str(given).encode(), f"Bearer {self.token}".encode()):
            raise Refused(grpc.StatusCode.UNAUTHENTICATED,
                           "a bearer token is needed (metadata authorization: Bearer <token>)")

    def _crawl(self, crawl: str, create: bool = False) -> Frontier | None:
        """The frontier of a crawl (None: it does not exist and ``create`` is off)."""
        return self.crawls.get(crawl, create=create)

    def _info(self, url: str, key: str, metadata: dict[str, list[str]], crawl: str) -> Any:
        pb = self.pb
        if not metadata:  # (most URLs: an empty map given costs twice the message)
            return pb.URLInfo(url=url, key=key, crawlID=crawl)
        return pb.URLInfo(url=url, key=key, crawlID=crawl, metadata={
            k: pb.StringList(values=v) for k, v in metadata.items()})

    # -- URLs: GetURLs, PutURLs, PutDiscovered, GetURLStatus, ListURLs, CountURLs, PurgeURLs --

    async def GetURLs(self, params: Any, context: Any) -> AsyncIterator[Any]:
        """Stream URLs due now: leases of ``delay_requestable`` seconds (0: 30), of one
        queue when ``key`` is set."""
        await checked(context, params)
        ttl = float(params.delay_requestable) or DEFAULT_TTL
        per_queue, max_queues = params.max_urls_per_queue, params.max_queues
        if max(per_queue, max_queues, params.delay_requestable) > MAX_COUNT:
            await self._run(context, "GetURLs", _counts, params)
        which = params.WhichOneof("item")
        if params.key and which != "crawlID":
            return  # (a queue is of a crawl: as the reference, nothing without one)
        any_crawl = which == "anyCrawlID"
        # (with anyCrawlID, max_queues and the 10,000 cap are for the call, all crawls)
        queues_left, urls_left = max_queues, MAX_BATCH
        for name, frontier in await self._run(context, "GetURLs", self._crawls_to_serve,
                                              any_crawl, params.crawlID):
            if urls_left <= 0 or (max_queues and queues_left <= 0):
                break
            cap = max(1, int(frontier.store.policy.concurrency))
            n = urls_left if not max_queues else min(urls_left, queues_left * (
                min(per_queue, cap) if per_queue else cap))
            taken: dict[str, int] = {}  # (queue -> URLs of this call: its parts share)
            handles = self._handles(name)

            def part(k: int, frontier: Frontier = frontier, handles: uf_ops.Handles =
                     handles, taken: dict[str, int] = taken,
                     most: int = queues_left) -> Awaitable[list[Lease]]:
                return self._run(context, "GetURLs", uf_ops.lease, frontier, k, ttl,
                                 per_queue, most, params.key or None, handles, taken,
                                 hot=True)

            # (in parts: the first URLs go out while the next part is leased)
            asked = min(n, PART)
            pending: asyncio.Future[list[Lease]] | None = asyncio.ensure_future(part(asked))
            left = n
            try:
                while pending is not None:
                    # (shielded: a client that goes away meanwhile cancels this call,
                    # not the part, whose leases then go back)
                    leases = await asyncio.shield(pending)
                    left -= len(leases)
                    pending = None
                    if len(leases) == asked and left > 0:
                        asked = min(left, PART)
                        pending = asyncio.ensure_future(part(asked))
                    for le in leases:
                        yield self._info(le.request.url, le.queue,
                                         uf_ops.metadata_of(le.request), name)
            finally:
                if pending is not None:  # (the client went away: the part goes back)
                    pending.add_done_callback(functools.partial(
                        self._give_back, frontier, handles))
            urls_left -= n - left
            queues_left -= len(taken)

    def _give_back(self, frontier: Frontier, handles: uf_ops.Handles,
                   part: asyncio.Future[list[Lease]]) -> None:
        """Put back the leases of a GetURLs part its client left before it was sent
        (in a worker thread: this runs as the part ends, in the loop's callbacks)."""
        if part.cancelled() or part.exception() is not None:
            return  # (nothing was leased, or the call's error was its answer)

        def back() -> None:
            try:
                uf_ops.give_back(frontier, part.result(), handles)
            except CrawlqError as exc:  # (their leases end in time all the same)
                _LOG.warning("GetURLs: leases of a client that left not given back: %s", exc)

        self._tasks.add(task := asyncio.ensure_future(asyncio.to_thread(back)))
        task.add_done_callback(self._tasks.discard)

    def _handles(self, crawl: str) -> uf_ops.Handles:
        """The lease handles of the crawl's URLs handed out, as this server knows them."""
        with self._handles_lock:
            return self._handles_by_crawl.setdefault(crawl, uf_ops.Handles())

    def _crawls_to_serve(self, any_crawl: bool, crawl: str) -> list[tuple[str, Frontier]]:
        """The crawls GetURLs serves (none while the frontier is inactive)."""
        if not is_active(self.crawls.default):
            return []
        names = self.crawls.names() if any_crawl else [crawl_id(crawl)]
        found = [(n, self._crawl(n)) for n in names]
        return [(n, f) for n, f in found if f is not None]

    async def PutURLs(self, items: AsyncIterator[Any], context: Any) -> AsyncIterator[Any]:
        """Take URLs as they stream in, in batches of what has arrived; ack each."""
        async for batch in batches(items, most=PART):
            acks = await self._run(context, "PutURLs", self._put_items, batch, hot=True)
            for ack in acks:
                yield ack

    def _put_items(self, batch: list[Any]) -> list[Any]:
        items: list[uf_ops.Item | None] = []
        crawls: list[str] = []
        for m in batch:
            check(m)  # (a message not parsed: nothing of the batch applied)
            which = m.WhichOneof("item")
            x = getattr(m, which) if which else None
            items.append(None if x is None else _item_of(
                x.info, int(x.refetchable_from_date) if which == "known" else None))
            crawls.append("" if x is None else x.info.crawlID)
        statuses = self._put(items, crawls, soft=True)
        return [self.pb.AckMessage(ID=m.ID or (it.url if it else ""), status=st)
                for m, it, st in zip(batch, items, statuses)]

    def _put(self, items: list[uf_ops.Item | None], crawls: list[str],
             soft: bool) -> list[int]:
        """Apply items (None: a malformed message, SKIPPED) to the crawls named beside
        them; one status per item. A crawl ID that cannot be served is a ConfigError
        before any item is applied. ``soft``: a crawl whose store fails leaves its items
        FAIL (the client may send them again) instead of raising."""
        for crawl in set(crawls):
            self.crawls.check(crawl)
        statuses = [uf_ops.FAIL] * len(items)
        by_crawl: dict[str, list[int]] = {}
        for i, (it, crawl) in enumerate(zip(items, crawls)):
            if it is None:
                statuses[i] = uf_ops.SKIPPED
            else:
                by_crawl.setdefault(crawl, []).append(i)
        for crawl, index in by_crawl.items():
            try:
                frontier = self._crawl(crawl, create=True)
                assert frontier is not None
                got = uf_ops.put(frontier, [it for it in (items[i] for i in index) if it],
                                 self._handles(crawl_id(crawl)))
            except StoreError as exc:
                if not soft:
                    raise
                self.metrics.store_errors.inc()
                _LOG.warning("PutURLs: the store failed: %s", exc)
                continue
            for i, st in zip(index, got):
                statuses[i] = st
        return statuses

    async def PutDiscovered(self, batches: AsyncIterator[Any],
                            context: Any) -> AsyncIterator[Any]:
        """Take batches of discovered URLs; one BatchAck each, a status per URL. A batch
        over MAX_BATCH URLs ends the stream with RESOURCE_EXHAUSTED (nothing of it taken;
        the batches before it were)."""
        async for batch in batches:
            await checked(context, batch)
            if len(batch.items) > MAX_BATCH:
                await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED,
                                    f"at most {MAX_BATCH} URLs per DiscoveredBatch, not "
                                    f"{len(batch.items)}: send them in smaller batches")
            statuses = await self._run(context, "PutDiscovered", self._put_batch, batch,
                                       hot=True)
            yield self.pb.BatchAck(ID=batch.ID, statuses=statuses)

    def _put_batch(self, batch: Any) -> list[int]:
        infos = list(batch.items)
        return self._put([_item_of(info) for info in infos],
                         [info.crawlID for info in infos], soft=False)

    # -- looking at URLs ------------------------------------------------------------

    async def GetURLStatus(self, req: Any, context: Any) -> Any:
        """What the crawl knows of one URL; NOT_FOUND for a URL it never took."""
        return await self._run(context, "GetURLStatus", self._status, req)

    def _status(self, req: Any) -> Any:
        frontier = self._crawl(req.crawlID)
        try:
            found = None if frontier is None else uf_ops.status_of(frontier, req.url)
        except InvalidURL:  # (never taken: not found, as the reference answers)
            found = None
        if found is None or (req.key and found.key != req.key):
            raise Refused(grpc.StatusCode.NOT_FOUND, f"{req.url!r} is not in crawl "
                                                     f"{crawl_id(req.crawlID)!r}")
        return self._item(found, crawl_id(req.crawlID))

    def _item(self, x: uf_ops.Listed, crawl: str) -> Any:
        """A URL as the reference server reports it: known, with the date it is due
        (0: never again)."""
        pb = self.pb
        info = self._info(x.url, x.key, x.metadata, crawl)
        return pb.URLItem(ID=x.url, creation_date=x.created, known=pb.KnownURLItem(
            info=info, refetchable_from_date=x.date))

    async def ListURLs(self, req: Any, context: Any) -> AsyncIterator[Any]:
        """The crawl's URLs (of a queue, containing a text), from ``start``, at most
        ``size`` of them (any size: they are read and sent in pages)."""
        await checked(context, req)
        crawl = crawl_id(req.crawlID)
        want = req.size or PAGE
        found = await self._run(context, "ListURLs", self._listing, req)
        while want > 0:
            part = min(want, LIST_PAGE)
            page = await self._run(context, "ListURLs", self._page, found, part, crawl)
            for item in page:
                yield item
            if len(page) < part:
                break
            want -= part

    def _page(self, found: Iterator[uf_ops.Listed], n: int, crawl: str) -> list[Any]:
        """The next ``n`` URLs of a listing as messages (fewer at its end)."""
        return [self._item(x, crawl) for x in islice(found, n)]

    def _listing(self, req: Any) -> Iterator[uf_ops.Listed]:
        """The URLs ListURLs asks for, from its ``start`` (read as they are taken)."""
        frontier = self._crawl(req.crawlID)
        if frontier is None:
            return iter(())
        text = req.filter if req.HasField("filter") else None
        found = uf_ops.listed(frontier, req.key, text, req.ignoreCase)
        return islice(found, req.start, None)

    async def CountURLs(self, req: Any, context: Any) -> Any:
        """How many URLs the crawl holds (queued, leased, scheduled, dead, fetched)."""
        n = await self._run(context, "CountURLs", self._count, req)
        return self.pb.Long(value=n)

    def _count(self, req: Any) -> int:
        frontier = self._crawl(req.crawlID)
        if frontier is None:
            return 0
        text = req.filter if req.HasField("filter") else None
        return sum(1 for _ in uf_ops.listed(frontier, req.key, text, req.ignoreCase))

    async def PurgeURLs(self, req: Any, context: Any) -> Any:
        """Remove the crawl's (or a queue's) queued URLs first stored more than ``days``
        days ago; the answer is how many."""
        n = await self._run(context, "PurgeURLs", self._purge, req)
        return self.pb.Long(value=n)

    def _purge(self, req: Any) -> int:
        frontier = self._crawl(req.crawlID)
        return 0 if frontier is None else uf_ops.purge(frontier, req.days, req.key or None)


    # -- crawls and queues ----------------------------------------------------------

    async def ListNodes(self, req: Any, context: Any) -> Any:
        """This server's address: each server answers for the store it fronts."""
        await self._run(context, "ListNodes", lambda: None)
        return self.pb.StringList(values=[self.node])

    async def ListCrawls(self, req: Any, context: Any) -> Any:
        """The crawls that hold something: DEFAULT, then the others beside the store
        (any server's)."""
        names = await self._run(context, "ListCrawls", self.crawls.names)
        return self.pb.StringList(values=names)

    async def DeleteCrawl(self, req: Any, context: Any) -> Any:
        """Delete a crawl and everything in it (DEFAULT, the server's own store, is
        emptied in place); the answer is how many URLs it held."""
        n = await self._run(context, "DeleteCrawl", self._delete_crawl, req.value)
        return self.pb.Long(value=n)

    def _delete_crawl(self, crawl: str) -> int:
        n = self.crawls.delete(crawl)
        self._handles(crawl_id(crawl)).forget()
        return n

    async def DeleteQueue(self, req: Any, context: Any) -> Any:
        """Remove a queue and every URL in it; the answer is how many URLs."""
        n = await self._run(context, "DeleteQueue", self._delete_queue, req)
        return self.pb.Long(value=n)

    def _delete_queue(self, req: Any) -> int:
        if not req.key:
            raise Refused(grpc.StatusCode.INVALID_ARGUMENT, "a queue key is needed")
        frontier = self._crawl(req.crawlID)
        return 0 if frontier is None else uf_ops.delete_queue(
            frontier, req.key, self._handles(crawl_id(req.crawlID)))

    async def ListQueues(self, req: Any, context: Any) -> Any:
        """A page of the crawl's queue keys, largest first; the active ones unless
        ``include_inactive``; ``total`` is how many match."""
        crawl, keys = await self._run(context, "ListQueues", self._queues, req)
        size = req.size or DEFAULT_PAGE
        page = keys[req.start:req.start + size]
        return self.pb.QueueList(values=page, total=len(keys), start=req.start,
                                 size=len(page), crawlID=crawl)

    def _queues(self, req: Any) -> tuple[str, list[str]]:
        crawl = crawl_id(req.crawlID)
        frontier = self._crawl(crawl)
        if frontier is None:
            return crawl, []
        keys = [q.key for q in uf_ops.queue_infos(frontier)
                if req.include_inactive or uf_ops.is_active_queue(q)]
        if req.include_inactive:
            return crawl, keys
        # (as the reference: without include_inactive, a queue blocked until later is
        # left out too)
        return crawl, [k for k, b in zip(keys, uf_ops.blocked(frontier, keys)) if not b]

    async def GetStats(self, req: Any, context: Any) -> Any:
        """A crawl's figures, or one queue's (``key``)."""
        return await self._run(context, "GetStats", self._stats, req)

    def _stats(self, req: Any) -> Any:
        crawl = crawl_id(req.crawlID)
        frontier = self._crawl(crawl)
        if frontier is None:
            return self.pb.Stats(crawlID=crawl, counts=_NOTHING_HELD)
        if req.key:
            q = uf_ops.queue_info(frontier, req.key)
            if q is None:
                return self.pb.Stats(crawlID=crawl, counts=_NOTHING_HELD)
            limit, completed = uf_ops.limit_of(frontier, req.key)
            return self.pb.Stats(size=uf_ops.active_urls(q), inProcess=q.leased,
                                 numberOfQueues=1, crawlID=crawl, counts={
                                     "accepted": q.accepted, "completed": completed,
                                     "crawl_limit": limit, "scheduled": q.scheduled,
                                     "active_queues": int(uf_ops.is_active_queue(q))})
        size, leased, queues, counts = uf_ops.stat_counts(frontier)
        return self.pb.Stats(size=size, inProcess=leased, numberOfQueues=queues,
                             counts=counts, crawlID=crawl)

    async def BlockQueueUntil(self, req: Any, context: Any) -> Any:
        """Serve nothing of the queue until ``time`` (epoch seconds); a time past ends
        its block."""
        await self._run(context, "BlockQueueUntil", self._block, req)
        return self.pb.Empty()

    def _block(self, req: Any) -> None:
        # (a time past: the block ends, and any politeness rest with it)
        uf_ops.block(self._frontier_for_queue(req.crawlID, req.key), req.key,
                     float(req.time))

    def _frontier_for_queue(self, crawl: str, key: str) -> Frontier:
        if not key:
            raise Refused(grpc.StatusCode.INVALID_ARGUMENT, "a queue key is needed")
        frontier = self._crawl(crawl, create=True)
        assert frontier is not None
        return frontier

    async def SetActive(self, req: Any, context: Any) -> Any:
        """Pause (false) or resume (true) GetURLs, for every server on the store."""
        await self._run(context, "SetActive", set_active, self.crawls.default, req.state)
        return self.pb.Empty()

    async def GetActive(self, req: Any, context: Any) -> Any:
        """Whether GetURLs hands out URLs (kept in the store: survives restarts)."""
        state = await self._run(context, "GetActive", is_active, self.crawls.default)
        return self.pb.Boolean(state=state)

    async def SetDelay(self, req: Any, context: Any) -> Any:
        """A queue's rest after each answer, in seconds (kept with the queue); without a
        ``key``, that of the crawl's queues with no delay of their own (kept in the
        crawl's store for every server)."""
        await self._run(context, "SetDelay", self._delay, req)
        return self.pb.Empty()

    def _delay(self, req: Any) -> None:
        if req.key and req.delay_requestable == _MINUS_ONE:
            # (as the reference: -1 is the crawl's default delay for the queue)
            uf_ops.set_delay(self._frontier_for_queue(req.crawlID, req.key), req.key, None)
            return
        _counts(req, "delay_requestable")
        delay = req.delay_requestable
        if not req.key:
            frontier = self._crawl(req.crawlID, create=True)
            assert frontier is not None
            uf_ops.set_delay(frontier, None, float(delay), functools.partial(
                self.crawls.set_default_delay, req.crawlID, delay))
            return
        uf_ops.set_delay(self._frontier_for_queue(req.crawlID, req.key), req.key,
                         float(delay))

    async def SetCrawlLimit(self, req: Any, context: Any) -> Any:
        """The most URLs of a queue fetched for good, after which it serves no more
        (0: no limit); kept in the store."""
        await self._run(context, "SetCrawlLimit", self._limit, req)
        return self.pb.Empty()

    def _limit(self, req: Any) -> None:
        frontier = self._frontier_for_queue(req.crawlID, req.key)
        uf_ops.set_limit(frontier, req.key, int(req.limit))

    async def SetLogLevel(self, req: Any, context: Any) -> Any:
        """Set a Python logger's level (``package``: its name; empty: the root)."""
        def apply() -> None:
            level = _LEVELS.get(req.level)
            if level is None:
                raise ConfigError(f"unknown log level {req.level}")
            logging.getLogger(req.package or None).setLevel(level)

        await self._run(context, "SetLogLevel", apply)
        return self.pb.Empty()

def _counts(params: Any, *fields: str) -> None:
    """Refused for a count of ``params`` over MAX_COUNT (GetParams' by default)."""
    for field in fields or ("max_urls_per_queue", "max_queues", "delay_requestable"):
        value = getattr(params, field)
        if value > MAX_COUNT:
            raise Refused(grpc.StatusCode.INVALID_ARGUMENT, (
                f"{field} {value} is -1 (or over {MAX_COUNT}): "
                f"{'2**32-1' if value == _MINUS_ONE else 'that'} is not a count crawlq takes"))


def _batch(pause_gc: bool, fn: Callable[..., _T], *args: Any) -> _T:
    """``fn(*args)``, a batch of the URLs' path, with the garbage collector paused as
    the frontier's batch calls pause it (``pause_gc``): a batch's thousands of messages,
    items and leases otherwise set off collections that walk the server's heap."""
    with PausedGC(pause_gc):
        return fn(*args)


def _item_of(info: Any, refetch: int | None = None) -> uf_ops.Item:
    """A URLInfo message as a plain Item (read once: protobuf fields cost per access)."""
    md = info.metadata
    metadata = {k: list(v.values) for k, v in md.items()} if md else _NO_METADATA
    return uf_ops.Item(info.url, info.key, metadata, refetch)


def native_server() -> type[Any] | None:
    """The compiled transport's server class, or None where it was not built."""
    try:
        from .grpc_edge import EdgeServer
    except ImportError:
        return None
    return EdgeServer


async def start(crawls: Crawls, metrics: Metrics, host: str, port: int,
                token: str | None = None, tls: tuple[bytes, bytes] | None = None,
                server_kind: str = "auto") -> tuple[Any, int, str]:
    """Start the gRPC server on ``host:port`` (0: a free port); returns it, its port and
    which it is (``native`` or ``grpcio``).
    ``tls``: (private key, certificate chain), PEM. ``server_kind``: ``native``, gRPC's
    C++ transport (:mod:`.grpc_edge`, built where the system has gRPC's C++ library; a
    ConfigError where it was not), ``grpcio``, grpcio's own asyncio server, or ``auto``,
    native where it was built."""
    pb, _ = load_proto()
    native = None if server_kind == "grpcio" else native_server()
    if native is None and server_kind == "native":
        raise ConfigError("the native gRPC server was not built (it needs gRPC's C++ "
                          "library when crawlq is installed: apt-get install "
                          "libgrpc++-dev, then reinstall crawlq); use --grpc-server grpcio")
    server: Any
    if native is not None:
        server = native(MAX_MESSAGE)
    else:
        server = aio.server(options=[("grpc.max_receive_message_length", MAX_MESSAGE),
                                     ("grpc.max_send_message_length", MAX_MESSAGE),
                                     ("grpc.so_reuseport", 0)])
    node = f"{host}:{port}"
    service = Service(crawls, metrics, node, token, pb)
    add_service(service, pb, server)
    # Server reflection, as the reference server offers it: grpcurl and other generic
    # clients list the service and its messages without the .proto file.
    if not add_reflection([pb.DESCRIPTOR.services_by_name["URLFrontier"].full_name],
                          server):  # (an install from before the serve extra named it)
        _LOG.warning("no gRPC server reflection: pip install grpcio-reflection")
    address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    try:
        if tls is None:
            bound = server.add_insecure_port(address)
        elif native is not None:
            bound = server.add_secure_port_pem(address, *tls)
        else:
            bound = server.add_secure_port(address, grpc.ssl_server_credentials([tls]))
    except RuntimeError as exc:  # (grpcio's "Failed to bind")
        raise OSError(f"cannot listen on {address}: {exc}") from None
    if not bound:
        raise OSError(f"cannot listen on {address}")
    service.node = f"{host}:{bound}"
    await server.start()
    return server, bound, "grpcio" if native is None else "native"
