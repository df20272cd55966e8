"""URLFrontier's calls that hand out, take and list URLs (see :mod:`.uf_ops` for what
each does to a crawlq frontier)."""

from __future__ import annotations

import logging
import threading
from collections.abc import AsyncIterator
from itertools import islice
from typing import Any

import grpc

from ..errors import ConfigError, StoreError
from ..frontier import Frontier
from . import uf_ops
from .app import MAX_BATCH, is_active
from .crawls import crawl_id
from .grpc_base import Base, Refused, batches

DEFAULT_TTL = 30.0
"""Seconds a URL handed out by GetURLs stays leased when the client leaves it to us."""
PAGE = 100
"""ListURLs' page size when the client gives none (as the reference server)."""


class URLCalls(Base):
    """GetURLs, PutURLs, PutDiscovered, GetURLStatus, ListURLs, CountURLs, PurgeURLs."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._spent_by_crawl: dict[str, uf_ops.Spent] = {}
        self._spent_lock = threading.Lock()

    async def GetURLs(self, params: Any, context: Any) -> AsyncIterator[Any]:
        """Stream URLs due now: leases of ``delay_requestable`` seconds (0: 30), of one
        queue when ``key`` is set."""
        ttl = float(params.delay_requestable) or DEFAULT_TTL
        per_queue, max_queues = params.max_urls_per_queue, params.max_queues
        any_crawl = params.WhichOneof("item") == "anyCrawlID"
        for name, frontier in await self._run(context, "GetURLs", self._crawls_to_serve,
                                              any_crawl, params.crawlID):
            policy = getattr(frontier.store, "policy", None)
            cap = max(1, int(getattr(policy, "concurrency", 1)))
            n = MAX_BATCH if not max_queues else max_queues * (
                min(per_queue, cap) if per_queue else cap)
            leases = await self._run(context, "GetURLs", uf_ops.lease, frontier,
                                     min(n, MAX_BATCH), ttl, per_queue, max_queues,
                                     params.key or None, self._spent(name))
            for le in leases:
                yield self._info(le.request.url, le.queue, uf_ops.metadata_of(le.request),
                                 name)

    def _spent(self, crawl: str) -> uf_ops.Spent:
        """The lease handles of the crawl's answered URLs, until its next GetURLs."""
        with self._spent_lock:
            return self._spent_by_crawl.setdefault(crawl, uf_ops.Spent())

    def _crawls_to_serve(self, any_crawl: bool, crawl: str) -> list[tuple[str, Frontier]]:
        """The crawls GetURLs serves (none while the frontier is inactive)."""
        if not is_active(self.crawls.default):
            return []
        names = self.crawls.names() if any_crawl else [crawl_id(crawl)]
        found = [(n, self._crawl(n)) for n in names]
        return [(n, f) for n, f in found if f is not None]

    async def PutURLs(self, items: AsyncIterator[Any], context: Any) -> AsyncIterator[Any]:
        """Take URLs as they stream in, in batches of what has arrived; ack each."""
        async for batch in batches(items):
            acks = await self._run(context, "PutURLs", self._put_items, batch)
            for ack in acks:
                yield ack

    def _put_items(self, batch: list[Any]) -> list[Any]:
        items: list[uf_ops.Item | None] = []
        crawls: list[str] = []
        for m in batch:
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
        them (a bad crawl ID: SKIPPED); one status per item. ``soft``: a crawl whose store
        fails leaves its items FAIL (the client may send them again) instead of raising."""
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
                                 self._spent(crawl_id(crawl)))
            except ConfigError:  # (a bad crawl ID)
                got = [uf_ops.SKIPPED] * len(index)
            except StoreError as exc:
                if not soft:
                    raise
                self.metrics.store_errors.inc()
                logging.getLogger(__name__).warning("PutURLs: the store failed: %s", exc)
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
            if len(batch.items) > MAX_BATCH:
                await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED,
                                    f"at most {MAX_BATCH} URLs per DiscoveredBatch, not "
                                    f"{len(batch.items)}: send them in smaller batches")
            statuses = await self._run(context, "PutDiscovered", self._put_batch, batch)
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
        found = None if frontier is None else uf_ops.status_of(frontier, req.url)
        if found is None or (req.key and found.key != req.key):
            raise Refused(grpc.StatusCode.NOT_FOUND, f"{req.url!r} is not in crawl "
                                                     f"{crawl_id(req.crawlID)!r}")
        return self._item(found, crawl_id(req.crawlID))

    def _item(self, x: uf_ops.Listed, crawl: str) -> Any:
        """A URL as URLFrontier reports it: fetched for good (dead, or done) is known with
        no refetch date, one queued again for later is known with its date, the others
        (queued or leased, never answered) are discovered."""
        pb = self.pb
        info = self._info(x.url, x.key, x.metadata, crawl)
        if x.dead or x.done or x.not_before is not None:
            return pb.URLItem(ID=x.url, creation_date=x.created, known=pb.KnownURLItem(
                info=info, refetchable_from_date=round(x.not_before or 0)))
        return pb.URLItem(ID=x.url, creation_date=x.created,
                          discovered=pb.DiscoveredURLItem(info=info))

    async def ListURLs(self, req: Any, context: Any) -> AsyncIterator[Any]:
        """A page of the URLs held as text (queued, leased, dead), in the store's order."""
        size = req.size or PAGE
        if size > MAX_BATCH:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                                f"size may be at most {MAX_BATCH}, not {size}")
        crawl, page = await self._run(context, "ListURLs", self._page, req, size)
        for x in page:
            yield self._item(x, crawl)

    def _page(self, req: Any, size: int) -> tuple[str, list[uf_ops.Listed]]:
        crawl = crawl_id(req.crawlID)
        frontier = self._crawl(crawl)
        if frontier is None:
            return crawl, []
        text = req.filter if req.HasField("filter") else None
        found = uf_ops.listed(frontier, req.key, text, req.ignoreCase)
        return crawl, list(islice(found, req.start, req.start + size))

    async def CountURLs(self, req: Any, context: Any) -> Any:
        """How many URLs the crawl holds as text (queued, leased, dead)."""
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


_NO_METADATA: dict[str, list[str]] = {}


def _item_of(info: Any, refetch: int | None = None) -> uf_ops.Item:
    """A URLInfo message as a plain Item (read once: protobuf fields cost per access)."""
    md = info.metadata
    metadata = {k: list(v.values) for k, v in md.items()} if md else _NO_METADATA
    return uf_ops.Item(info.url, info.key, metadata, refetch)
