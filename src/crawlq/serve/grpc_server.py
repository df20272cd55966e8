"""``crawlq serve``'s URLFrontier gRPC API (crawler-commons/url-frontier v2): any
URLFrontier client (StormCrawler's spout, the reference Java client, stubs generated
from its proto) can crawl from a crawlq store. This module holds the calls that look at
and steer crawls and queues, and starts the server; the URL calls are in
:mod:`.grpc_urls`, the plumbing in :mod:`.grpc_base`. docs/serve.md states what each
call means on a crawlq store.
"""

from __future__ import annotations

import logging
from typing import Any

import grpc
from grpc import aio

from ..errors import ConfigError
from ..frontier import Frontier
from . import uf_ops
from .app import is_active, set_active
from .crawls import DEFAULT, Crawls, crawl_id
from .grpc_base import MAX_MESSAGE, Refused, load_proto
from .grpc_urls import URLCalls
from .metrics import Metrics

_LEVELS = {0: logging.DEBUG, 1: logging.DEBUG, 2: logging.INFO, 3: logging.WARNING,
           4: logging.ERROR}
"""URLFrontier's log levels (TRACE is DEBUG in Python's logging)."""
DEFAULT_PAGE = 100
"""ListQueues' page size when the client gives none."""


class Service(URLCalls):
    """The URLFrontier servicer on a server's crawls."""

    async def ListNodes(self, req: Any, context: Any) -> Any:
        """This server's address: each server answers for the store it fronts."""
        await self._run(context, "ListNodes", lambda: None)
        return self.pb.StringList(values=[self.node])

    async def ListCrawls(self, req: Any, context: Any) -> Any:
        """DEFAULT and every other crawl beside the store (any server's)."""
        names = await self._run(context, "ListCrawls", self.crawls.names)
        return self.pb.StringList(values=names)

    async def DeleteCrawl(self, req: Any, context: Any) -> Any:
        """Delete a crawl's store; the answer is how many URLs it held."""
        n = await self._run(context, "DeleteCrawl", self._delete_crawl, req.value)
        return self.pb.Long(value=n)

    def _delete_crawl(self, crawl: str) -> int:
        if crawl_id(crawl) == DEFAULT:
            raise Refused(grpc.StatusCode.FAILED_PRECONDITION,
                          "DEFAULT is the store crawlq serve was given; the server does not "
                          "delete it (delete its file or Redis prefix yourself)")
        return self.crawls.delete(crawl)

    async def DeleteQueue(self, req: Any, context: Any) -> Any:
        """Remove a queue's queued and scheduled URLs; the answer is how many."""
        n = await self._run(context, "DeleteQueue", self._delete_queue, req)
        return self.pb.Long(value=n)

    def _delete_queue(self, req: Any) -> int:
        if not req.key:
            raise Refused(grpc.StatusCode.INVALID_ARGUMENT, "a queue key is needed")
        frontier = self._crawl(req.crawlID)
        return 0 if frontier is None else frontier.delete_queue(req.key)

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
        return crawl, [q.key for q in uf_ops.queue_infos(frontier)
                       if req.include_inactive or uf_ops.is_active_queue(q)]

    async def GetStats(self, req: Any, context: Any) -> Any:
        """A crawl's figures, or one queue's (``key``)."""
        return await self._run(context, "GetStats", self._stats, req)

    def _stats(self, req: Any) -> Any:
        crawl = crawl_id(req.crawlID)
        frontier = self._crawl(crawl)
        if frontier is None:
            return self.pb.Stats(crawlID=crawl)
        if req.key:
            q = uf_ops.queue_info(frontier, req.key)
            if q is None:
                return self.pb.Stats(crawlID=crawl)
            return self.pb.Stats(size=q.queued, inProcess=q.leased, numberOfQueues=1,
                                 crawlID=crawl, counts={"accepted": q.accepted,
                                                        "active_queues": int(
                                                            uf_ops.is_active_queue(q))})
        size, leased, queues, counts = uf_ops.stat_counts(frontier)
        return self.pb.Stats(size=size, inProcess=leased, numberOfQueues=queues,
                             counts=counts, crawlID=crawl)

    async def BlockQueueUntil(self, req: Any, context: Any) -> Any:
        """Serve nothing of the queue until ``time`` (epoch seconds)."""
        await self._run(context, "BlockQueueUntil", self._block, req)
        return self.pb.Empty()

    def _block(self, req: Any) -> None:
        frontier = self._frontier_for_queue(req.crawlID, req.key)
        now = frontier.clock()
        if req.time > now:
            frontier.block(req.key, until=float(req.time))
            return
        q = uf_ops.queue_info(frontier, req.key)
        if q is not None and q.ready_at > now:
            raise Refused(grpc.StatusCode.FAILED_PRECONDITION,
                          f"queue {req.key!r} rests until {q.ready_at:.0f}: crawlq cannot "
                          "end a block or a politeness rest early")

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
        if not req.key:
            self.crawls.set_default_delay(req.crawlID, req.delay_requestable)
            return
        frontier = self._frontier_for_queue(req.crawlID, req.key)
        delay = float(req.delay_requestable)
        frontier.configure_queue(req.key, min_delay=delay, max_delay=delay)

    async def SetCrawlLimit(self, req: Any, context: Any) -> Any:
        """The most URLs a queue takes (``max_queue_urls``; 0: no limit)."""
        await self._run(context, "SetCrawlLimit", self._limit, req)
        return self.pb.Empty()

    def _limit(self, req: Any) -> None:
        frontier = self._frontier_for_queue(req.crawlID, req.key)
        frontier.configure_queue(req.key, max_queue_urls=req.limit or None)

    async def SetLogLevel(self, req: Any, context: Any) -> Any:
        """Set a Python logger's level (``package``: its name; empty: the root)."""
        def apply() -> None:
            level = _LEVELS.get(req.level)
            if level is None:
                raise ConfigError(f"unknown log level {req.level}")
            logging.getLogger(req.package or None).setLevel(level)

        await self._run(context, "SetLogLevel", apply)
        return self.pb.Empty()


async def start(crawls: Crawls, metrics: Metrics, host: str, port: int,
                token: str | None = None, tls: tuple[bytes, bytes] | None = None,
                ) -> tuple[Any, int]:
    """Start the gRPC server on ``host:port`` (0: a free port); returns it and its port.
    ``tls``: (private key, certificate chain), PEM."""
    pb, services = load_proto()
    options = [("grpc.max_receive_message_length", MAX_MESSAGE),
               ("grpc.max_send_message_length", MAX_MESSAGE),
               ("grpc.so_reuseport", 0)]
    server = aio.server(options=options)
    node = f"{host}:{port}"
    service = Service(crawls, metrics, node, token, pb)
    services.add_URLFrontierServicer_to_server(service, server)
    address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    try:
        if tls is None:
            bound = server.add_insecure_port(address)
        else:
            bound = server.add_secure_port(address, grpc.ssl_server_credentials([tls]))
    except RuntimeError as exc:  # (grpcio's "Failed to bind")
        raise OSError(f"cannot listen on {address}: {exc}") from None
    if not bound:
        raise OSError(f"cannot listen on {address}")
    service.node = f"{host}:{bound}"
    await server.start()
    return server, bound
