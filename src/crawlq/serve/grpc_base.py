"""What every URLFrontier call of ``crawlq serve`` stands on: the proto, compiled when
the server starts (grpcio-tools' ``grpc.protos_and_services``: ``urlfrontier.proto``
beside this module is the one definition of the wire format), and a base servicer that
runs a call's frontier work in a worker thread (stores block) and turns its errors into
gRPC statuses: a bad argument is INVALID_ARGUMENT, a call crawlq cannot do
FAILED_PRECONDITION with the reason, a store failure UNAVAILABLE (nothing changed;
the server stays up), a missing or wrong token UNAUTHENTICATED.
"""

from __future__ import annotations

import asyncio
import hmac
import sys
import time
from collections import deque
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any, TypeVar

import grpc

from ..errors import CrawlqError, StoreError
from ..frontier import Frontier
from .app import MAX_BATCH
from .crawls import Crawls
from .metrics import Metrics

DEFAULT_PORT = 7071
"""URLFrontier's port."""
MAX_MESSAGE = 64 * 1024 * 1024
"""Largest message accepted or sent, in bytes."""
LINGER = 0.002
"""Seconds a stream's batch waits for more messages while they keep arriving."""
_T = TypeVar("_T")


def load_proto() -> tuple[Any, Any]:
    """The URLFrontier message classes and service helpers, compiled from the proto."""
    root = str(Path(__file__).resolve().parent.parent.parent)
    sys.path.insert(0, root)
    try:
        return grpc.protos_and_services(  # type: ignore[no-any-return]
            "crawlq/serve/urlfrontier.proto")
    finally:
        sys.path.remove(root)


class Refused(Exception):
    """A call refused with a gRPC status."""

    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(message)
        self.code = code


class Base:
    """The plumbing of the URLFrontier servicer on a server's crawls."""

    def __init__(self, crawls: Crawls, metrics: Metrics, node: str,
                 token: str | None, pb: Any) -> None:
        self.crawls = crawls
        self.metrics = metrics
        self.node = node
        self.token = token
        self.pb = pb

    # -- plumbing -------------------------------------------------------------------

    async def _run(self, context: Any, name: str, fn: Callable[..., _T], *args: Any) -> _T:
        """``fn(*args)`` in a worker thread, its errors as gRPC statuses."""
        started = time.perf_counter()
        try:
            self._check_token(context)
            return await asyncio.to_thread(fn, *args)
        except Refused as exc:
            await context.abort(exc.code, str(exc))
        except StoreError as exc:
            self.metrics.store_errors.inc()
            await context.abort(grpc.StatusCode.UNAVAILABLE, f"the store failed: {exc}")
        except CrawlqError as exc:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
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


async def batches(items: AsyncIterator[_T], most: int = MAX_BATCH,
                  linger: float = LINGER) -> AsyncIterator[list[_T]]:
    """The items of a client's stream in lists of what has arrived (at most ``most``):
    one store call per list instead of one per message. A client streams its messages
    one by one, faster than a store call's fixed cost but not all at once, so while
    messages keep arriving the list waits ``linger`` seconds for more (again while more
    came): a trickle becomes a batch for one extra ``linger`` of latency."""
    buf: deque[_T] = deque()
    arrived, room = asyncio.Event(), asyncio.Event()
    room.set()
    end: list[BaseException | None] = []  # (set when the stream ended: its error or None)

    async def read() -> None:
        try:
            async for item in items:
                buf.append(item)
                arrived.set()
                if len(buf) >= most:  # (back-pressure: the client waits for the store)
                    room.clear()
                    await room.wait()
            end.append(None)
        except BaseException as exc:  # (the client went away: end the batches with it)
            end.append(exc)
        arrived.set()

    reader = asyncio.ensure_future(read())
    try:
        while True:
            await arrived.wait()
            while not end and len(buf) < most:
                before = len(buf)
                await asyncio.sleep(linger)
                if len(buf) == before:
                    break
            arrived.clear()
            batch = [buf.popleft() for _ in range(min(most, len(buf)))]
            room.set()
            if batch:
                yield batch
            if buf:
                arrived.set()
            elif end:
                if end[0] is not None:
                    raise end[0]
                return
    finally:
        reader.cancel()
