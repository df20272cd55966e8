"""The wire side of ``crawlq serve``'s URLFrontier API: the proto, compiled when the
server starts (grpcio-tools' ``grpc.protos_and_services``: ``urlfrontier.proto`` beside
this module is the one definition of the wire format), :class:`Refused` (a call refused
with a gRPC status) and :func:`batches` (a client's stream read in batches). The
servicer that stands on them is :class:`crawlq.serve.grpc_server.Service`.
"""

from __future__ import annotations

import asyncio
import sys
from collections import deque
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, TypeVar

import grpc

from .app import MAX_BATCH

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
