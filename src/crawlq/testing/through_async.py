"""The contract through the asyncio API: :class:`ThroughAsync` gives a Frontier's calls
to an :class:`~crawlq.aio.AsyncFrontier` and waits for them on an event loop of its own,
so the one contract suite holds the async API to the sync one's behaviour, store by
store (a contract class returns ``ThroughAsync(frontier)`` from ``open_frontier``)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import contextvars
import inspect
import threading
from collections.abc import Iterator
from typing import Any

from ..aio import AsyncFrontier
from ..frontier import Frontier

_SYNC_ONLY = frozenset({"clock", "lease_ttl", "canonicalize", "queue_of", "fingerprint_of",
                        "canonical_form", "priority", "dedup_post", "revisit_after",
                        "max_retries", "strict_acks", "url_policy", "retry_policy",
                        "lease_policy", "local_values", "pause_gc"})
"""Frontier attributes that are options or pure functions (no store call): read from
the Frontier itself. Every other name must be an AsyncFrontier operation."""


class ThroughAsync:
    """A Frontier's interface whose every store call goes through an AsyncFrontier."""

    def __init__(self, frontier: Frontier, threads: int | None = None) -> None:
        # One event loop on a thread of its own: the contract's own threads (workers
        # sharing a frontier) each wait for their calls on it.
        self._loop = asyncio.new_event_loop()
        self._runner = threading.Thread(target=self._loop.run_forever, daemon=True,
                                        name="crawlq-contract-loop")
        self._runner.start()
        self._async = AsyncFrontier(frontier, threads=threads)
        self._frontier = frontier
        # One context per calling thread for all its calls: a transaction the async API
        # opens (a context variable naming its thread) holds for the calls made inside
        # the block.
        self._contexts: dict[int, contextvars.Context] = {}

    @property
    def store(self) -> Any:
        """The store (the contract checks a store's capabilities and counters)."""
        return self._frontier.store

    @store.setter
    def store(self, store: Any) -> None:
        self._frontier.store = store

    def _wait(self, coro: Any) -> Any:
        caller = threading.get_ident()
        context = self._contexts.get(caller) or contextvars.copy_context()
        result: concurrent.futures.Future[Any] = concurrent.futures.Future()

        async def call() -> Any:
            try:
                return await coro
            finally:  # (what the call set, a transaction's thread, holds for the next)
                self._contexts[caller] = contextvars.copy_context()

        def finish(task: asyncio.Task[Any]) -> None:
            exc = None if task.cancelled() else task.exception()
            if task.cancelled():
                result.cancel()
            elif exc is not None:
                result.set_exception(exc)
            else:
                result.set_result(task.result())

        def start() -> None:
            # (a task runs in a copy of the context it is made in: this thread's)
            context.run(self._loop.create_task, call()).add_done_callback(finish)

        self._loop.call_soon_threadsafe(start)
        return result.result()

    def __getattr__(self, name: str) -> Any:
        if name in _SYNC_ONLY:
            return getattr(self._frontier, name)
        op = getattr(self._async, name)  # (AttributeError: the async API lacks it)
        if inspect.isasyncgenfunction(op):
            return lambda *a, **k: iter(self._wait(_collect(op(*a, **k))))
        if not inspect.iscoroutinefunction(op):
            raise AttributeError(f"AsyncFrontier.{name} is not an operation")

        def call(*args: Any, **kwargs: Any) -> Any:
            return self._wait(op(*args, **kwargs))

        return call

    @contextlib.contextmanager
    def transaction(self) -> Iterator[None]:
        """The AsyncFrontier's transaction, its calls made from this thread."""
        block = self._async.transaction()
        self._wait(block.__aenter__())
        try:
            yield
        except BaseException as exc:
            if not self._wait(block.__aexit__(type(exc), exc, exc.__traceback__)):
                raise
        else:
            self._wait(block.__aexit__(None, None, None))

    def close(self) -> None:
        """Close the AsyncFrontier (and its store), then the loop."""
        try:
            self._wait(self._async.aclose())
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._runner.join()
            self._loop.close()


async def _collect(it: Any) -> list[Any]:
    return [x async for x in it]


def through_async(frontier: Frontier, threads: int | None = None) -> Frontier:
    """``frontier``'s calls through an AsyncFrontier, typed as the Frontier it stands
    for (what a contract's ``open_frontier`` returns)."""
    view: Any = ThroughAsync(frontier, threads)
    result: Frontier = view
    return result


__all__ = ["ThroughAsync", "through_async"]
