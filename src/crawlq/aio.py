"""The Frontier for asyncio code: :class:`AsyncFrontier`, every operation an awaitable.

A store that waits (Redis's network, SQLite with ``synchronous=full``: an fsync per
commit) has its calls run on a few worker threads, so the event loop goes on (fetching,
parsing) while a call waits; the threads let several calls be under way at once (a
lease call while pages are acknowledged). A store whose calls are work of this process
rather than waits (memory; SQLite in WAL mode with ``synchronous=normal``, the default:
its store says so with ``in_process``) is called on the loop itself: on a thread the
same Python work would hold the GIL all the same, and the hand-offs cost more than they
free (``crawlq crawl`` on SQLite: about a third of its pages/s). ``threads=N`` sends
such a store's calls to threads all the same.

Why threads rather than redis-py's asyncio client: every store call is defined once, in
its store (the arguments of a Lua script, how its reply is read, the retries while Redis
is away, SQLite's group commit); an asyncio twin of each would be a second definition of
each. Waiting on a socket or the disk releases the GIL, so the thread costs a hop
(tens of microseconds) per call, not a core. The operations take batches as the
Frontier's do: one call for many pages is one hop and one round trip.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import itertools
import time
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from concurrent.futures import Executor, ThreadPoolExecutor
from typing import Any, ParamSpec, TypeVar

from .errors import ConfigError
from .frontier import Exchanged, Frontier
from .models import AddResult, DeadRequest, Lease, Outcome, QueueInfo, Request, Stats
from .stores.base import Store

_P = ParamSpec("_P")
_R = TypeVar("_R")
_Leases = Lease | Iterable[Lease]

THREADS = 4
"""Worker threads of an AsyncFrontier on a store that waits on I/O: calls under way at
once (each Redis call on a connection of its own)."""

_ROUTE: contextvars.ContextVar[Executor | None] = contextvars.ContextVar(
    "crawlq_transaction_thread", default=None)
"""The thread that holds this task's open :meth:`AsyncFrontier.transaction`, if any."""

_HOLDER: contextvars.ContextVar[AsyncFrontier | None] = contextvars.ContextVar(
    "crawlq_transaction_holder", default=None)
"""The AsyncFrontier whose transaction this task holds (its calls on the loop)."""

_PAGE = 1000
"""Records per hop when an AsyncFrontier streams a dump."""


def on_loop(store: Store) -> bool:
    """Whether asyncio code calls ``store`` on its event loop rather than on worker
    threads: a store whose calls are work of this process (``in_process``: memory;
    SQLite in WAL mode with synchronous=normal), not waits (see the module docstring
    and :attr:`Store.in_process <crawlq.stores.base.Store.in_process>`)."""
    return store.in_process


class AsyncFrontier:
    """A :class:`~crawlq.Frontier` whose operations are awaitables, for asyncio code.

    Same options, semantics and errors as the Frontier's; open one with :meth:`open`
    and use it as an async context manager::

        async with await AsyncFrontier.open("redis://127.0.0.1:6379/0") as frontier:
            await frontier.add(["https://example.com/"])
            while await frontier.wait():
                for lease in await frontier.next(100):
                    ...  # fetch, await frontier.add(links), then:
                    await frontier.done(lease)

    ``threads``: worker threads (default: :data:`THREADS` for a store that waits, none
    for one whose calls are work of this process, ``in_process``; 0 runs every call on
    the loop). The sync :attr:`frontier` stays at hand for what
    does not wait (:meth:`~crawlq.Frontier.queue_of`, ``canonicalize``, options).
    """

    def __init__(self, frontier: Frontier, *, threads: int | None = None) -> None:
        if not isinstance(frontier, Frontier):
            raise ConfigError(f"AsyncFrontier wraps a Frontier, not {frontier!r}")
        if threads is None:
            threads = 0 if on_loop(frontier.store) else THREADS
        if threads.__class__ is not int or threads < 0:
            raise ConfigError(f"threads is a count of threads (0 or more), not {threads!r}")
        self.frontier = frontier
        """The Frontier whose calls this one runs."""
        self._pool: ThreadPoolExecutor | None = (
            ThreadPoolExecutor(threads, thread_name_prefix="crawlq-store") if threads else None)
        self._closed = False
        self._block = asyncio.Lock()  # (held by a task's transaction, calls on the loop)

    @classmethod
    async def open(cls, url: str = "memory://", *, threads: int | None = None,
                   **options: Any) -> AsyncFrontier:
        """:meth:`Frontier.open <crawlq.Frontier.open>` off the loop (opening a store may
        read a file or reach a server), with the same ``url`` and options."""
        frontier = await asyncio.to_thread(Frontier.open, url, **options)
        return cls(frontier, threads=threads)

    async def _call(self, fn: Callable[_P, _R], /, *args: _P.args,
                    **kwargs: _P.kwargs) -> _R:
        """``fn(*args, **kwargs)``: on a worker thread (the one holding this task's
        transaction, if one is open), or on the loop for a store that never waits."""
        if self._closed:
            raise ConfigError("this AsyncFrontier is closed")
        route = _ROUTE.get() or self._pool
        if route is None:
            if self._block.locked() and _HOLDER.get() is not self:
                async with self._block:  # (another task's transaction: after its end)
                    pass
            return fn(*args, **kwargs)
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(route, functools.partial(fn, *args, **kwargs))

    # -- what does not wait --------------------------------------------------------

    @property
    def store(self) -> Store:
        """The store under the frontier."""
        return self.frontier.store

    @property
    def lease_ttl(self) -> float:
        """Seconds a lease lasts unless renewed (the frontier's ``lease_ttl``)."""
        return self.frontier.lease_ttl

    @property
    def canonicalize(self) -> Callable[[str], str]:
        """The frontier's canonicalization of URLs."""
        return self.frontier.canonicalize

    def queue_of(self, url: str) -> str:
        """The queue key a URL would wait in (no store call)."""
        return self.frontier.queue_of(url)

    def fingerprint_of(self, request: Request | str) -> bytes | None:
        """The seen-set key :meth:`add` would use (no store call)."""
        return self.frontier.fingerprint_of(request)

    # -- closing -------------------------------------------------------------------

    async def aclose(self) -> None:
        """Let the calls under way end, then close the store."""
        if self._closed:
            return
        self._closed = True
        pool = self._pool
        if pool is not None:
            await asyncio.to_thread(pool.shutdown, True)
            await asyncio.to_thread(self.frontier.close)
        else:
            self.frontier.close()

    async def __aenter__(self) -> AsyncFrontier:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def __repr__(self) -> str:
        return f"<AsyncFrontier store={type(self.frontier.store).__name__}>"

    # -- the calls of a crawl -------------------------------------------------------

    async def add(self, requests: Request | str | Iterable[Request | str]) -> AddResult:
        """:meth:`Frontier.add <crawlq.Frontier.add>`."""
        if not isinstance(requests, (str, Request, list, tuple)) and isinstance(
                requests, Iterable):
            requests = list(requests)  # (a generator runs here, not on a worker thread)
        return await self._call(self.frontier.add, requests)

    async def next(self, n: int = 1, *, ttl: float | None = None,
                   queue: str | None = None) -> list[Lease]:
        """:meth:`Frontier.next <crawlq.Frontier.next>`. Cancelled while the store
        leases, the leases it took are put back (unfailed) rather than left to expire."""
        if self._pool is None and not self._block.locked():
            return self.frontier.next(n, ttl=ttl, queue=queue)
        call = asyncio.ensure_future(self._call(self.frontier.next, n, ttl=ttl, queue=queue))
        try:
            return await asyncio.shield(call)
        except asyncio.CancelledError:
            call.add_done_callback(self._put_back)
            raise

    def _put_back(self, call: asyncio.Future[Any]) -> None:
        """Leases a cancelled :meth:`next` or :meth:`exchange` took: back to their
        queues, on a worker (or at once, for a store that never waits)."""
        if call.cancelled() or call.exception() is not None:
            return
        got = call.result()
        leases: list[Lease] = got.leases if isinstance(got, Exchanged) else got
        if not leases or self._closed:
            return
        pool = self._pool
        if pool is None:
            self.frontier.retry(leases)
            return
        with contextlib.suppress(RuntimeError):  # (the pool shut down meanwhile)
            pool.submit(self.frontier.retry, leases)

    async def exchange(self, add: Request | str | Iterable[Request | str] = (),
                       done: Iterable[Lease] = (), n: int = 0, *,
                       duration: float | Sequence[float | None] | None = None,
                       ttl: float | None = None) -> Exchanged:
        """:meth:`Frontier.exchange <crawlq.Frontier.exchange>`: add, answer and lease
        in one store call. Cancelled while the store works, the leases it took are put
        back (unfailed); what it added and answered stays done."""
        if not isinstance(add, (str, Request, list, tuple)) and isinstance(add, Iterable):
            add = list(add)
        call = asyncio.ensure_future(self._call(self.frontier.exchange, add, list(done), n,
                                                duration=duration, ttl=ttl))
        try:
            return await asyncio.shield(call)
        except asyncio.CancelledError:
            call.add_done_callback(self._put_back)
            raise

    async def done(self, leases: _Leases, outcome: Outcome = Outcome.DONE, *,
                   error: str | None = None,
                   duration: float | Sequence[float | None] | None = None,
                   after: float = 0.0) -> int:
        """:meth:`Frontier.done <crawlq.Frontier.done>`."""
        return await self._call(self.frontier.done, _listed(leases), outcome, error=error,
                                duration=duration, after=after)

    async def done_each(self, leases: Iterable[Lease], outcome: Outcome = Outcome.DONE, *,
                        error: str | None = None,
                        duration: float | Sequence[float | None] | None = None,
                        after: float = 0.0) -> list[bool]:
        """:meth:`Frontier.done_each <crawlq.Frontier.done_each>`."""
        return await self._call(self.frontier.done_each, list(leases), outcome, error=error,
                                duration=duration, after=after)

    async def retry(self, leases: _Leases, after: float = 0.0, *,
                    duration: float | None = None) -> int:
        """:meth:`Frontier.retry <crawlq.Frontier.retry>`."""
        return await self._call(self.frontier.retry, _listed(leases), after,
                                duration=duration)

    async def renew(self, leases: _Leases, ttl: float | None = None) -> list[Lease]:
        """:meth:`Frontier.renew <crawlq.Frontier.renew>`."""
        return await self._call(self.frontier.renew, _listed(leases), ttl)

    async def next_ready_at(self) -> float | None:
        """:meth:`Frontier.next_ready_at <crawlq.Frontier.next_ready_at>`."""
        return await self._call(self.frontier.next_ready_at)

    async def wait(self, timeout: float | None = None, poll: float = 1.0) -> bool:
        """:meth:`Frontier.wait <crawlq.Frontier.wait>`, sleeping on the loop."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            pause = await self._call(self.frontier.idle_for, poll, deadline)
            if pause is None:
                return False
            if pause <= 0:
                return True
            await asyncio.sleep(pause)

    @contextlib.asynccontextmanager
    async def transaction(self) -> AsyncIterator[None]:
        """:meth:`Frontier.transaction <crawlq.Frontier.transaction>` for asyncio: the
        calls this task (and the tasks it starts) makes inside the block are one atomic
        step of the store, run on one thread that holds the transaction; other tasks'
        calls wait on their threads for its end, never on the loop."""
        if self._pool is None:  # (calls on the loop: other tasks' wait for the block)
            if _HOLDER.get() is self:  # nested
                with self.frontier.transaction():
                    yield
                return
            async with self._block:
                _HOLDER.set(self)
                try:
                    with self.frontier.transaction():
                        yield
                finally:
                    _HOLDER.set(None)
            return
        if _ROUTE.get() is not None:  # nested: the thread holding it runs the inner one
            inner = self.frontier.transaction()
            await self._call(inner.__enter__)
            try:
                yield
            except BaseException as exc:
                if not await self._call(inner.__exit__, type(exc), exc, exc.__traceback__):
                    raise
            else:
                await self._call(inner.__exit__, None, None, None)
            return
        holder = ThreadPoolExecutor(1, thread_name_prefix="crawlq-transaction")
        loop = asyncio.get_running_loop()
        block = self.frontier.transaction()
        try:
            entering = loop.run_in_executor(holder, block.__enter__)
            try:
                await asyncio.shield(entering)
            except asyncio.CancelledError:
                # The thread may enter all the same: then it leaves the block (undone)
                # before going, or the store's lock would be held for good.
                with contextlib.suppress(BaseException):
                    await entering
                    await loop.run_in_executor(holder, block.__exit__, asyncio.CancelledError,
                                               asyncio.CancelledError(), None)
                raise
            _ROUTE.set(holder)
            try:
                yield
            except BaseException as exc:
                _ROUTE.set(None)  # (it was None: this is the outermost block)
                if not await loop.run_in_executor(
                        holder, block.__exit__, type(exc), exc, exc.__traceback__):
                    raise
            else:
                _ROUTE.set(None)  # (it was None: this is the outermost block)
                await loop.run_in_executor(holder, block.__exit__, None, None, None)
        finally:
            holder.shutdown(wait=False)

    async def call(self, fn: Callable[[Frontier], _R]) -> _R:
        """``fn(frontier)`` off the loop, as one call: several sync calls of the
        Frontier in one hop (a ``with frontier.transaction():`` block inside, say)."""
        return await self._call(fn, self.frontier)

    # -- named values and counts ----------------------------------------------------

    async def put_value(self, name: str, value: bytes, ttl: float | None = None) -> None:
        """:meth:`Frontier.put_value <crawlq.Frontier.put_value>`."""
        await self._call(self.frontier.put_value, name, value, ttl)

    async def get_value(self, name: str) -> bytes | None:
        """:meth:`Frontier.get_value <crawlq.Frontier.get_value>`."""
        return await self._call(self.frontier.get_value, name)

    async def drop_value(self, name: str) -> None:
        """:meth:`Frontier.drop_value <crawlq.Frontier.drop_value>`."""
        await self._call(self.frontier.drop_value, name)

    async def count_rejected(self, reason: str, n: int = 1) -> None:
        """:meth:`Frontier.count_rejected <crawlq.Frontier.count_rejected>`."""
        await self._call(self.frontier.count_rejected, reason, n)

    async def count_duplicates(self, n: int) -> None:
        """:meth:`Frontier.count_duplicates <crawlq.Frontier.count_duplicates>`."""
        await self._call(self.frontier.count_duplicates, n)

    # -- queues ---------------------------------------------------------------------

    async def block(self, queue: str, until: float | None = None, *,
                    seconds: float | None = None) -> None:
        """:meth:`Frontier.block <crawlq.Frontier.block>`."""
        await self._call(self.frontier.block, queue, until, seconds=seconds)

    async def unblock(self, queue: str) -> None:
        """:meth:`Frontier.unblock <crawlq.Frontier.unblock>`."""
        await self._call(self.frontier.unblock, queue)

    async def configure_queue(self, queue: str, **settings: float | None) -> None:
        """:meth:`Frontier.configure_queue <crawlq.Frontier.configure_queue>`."""
        await self._call(self.frontier.configure_queue, queue, **settings)

    async def configure_default(self, **settings: float) -> None:
        """:meth:`Frontier.configure_default <crawlq.Frontier.configure_default>`."""
        await self._call(self.frontier.configure_default, **settings)

    async def queues(self, limit: int = 100) -> list[QueueInfo]:
        """:meth:`Frontier.queues <crawlq.Frontier.queues>`."""
        return await self._call(self.frontier.queues, limit)

    async def delete_queue(self, queue: str) -> int:
        """:meth:`Frontier.delete_queue <crawlq.Frontier.delete_queue>`."""
        return await self._call(self.frontier.delete_queue, queue)

    async def remove_queued(self, where: Callable[[Request], bool],
                            queue: str | None = None) -> int:
        """:meth:`Frontier.remove_queued <crawlq.Frontier.remove_queued>` (``where``
        runs on a worker thread)."""
        return await self._call(self.frontier.remove_queued, where, queue)

    # -- reporting and maintenance ----------------------------------------------------

    async def stats(self, per_queue: int = 0) -> Stats:
        """:meth:`Frontier.stats <crawlq.Frontier.stats>`."""
        return await self._call(self.frontier.stats, per_queue)

    async def dead(self, limit: int = 100) -> list[DeadRequest]:
        """:meth:`Frontier.dead <crawlq.Frontier.dead>`."""
        return await self._call(self.frontier.dead, limit)

    async def requeue_dead(self, ids: Iterable[int] | None = None) -> int:
        """:meth:`Frontier.requeue_dead <crawlq.Frontier.requeue_dead>`."""
        return await self._call(self.frontier.requeue_dead,
                                None if ids is None else list(ids))

    async def clear(self) -> None:
        """:meth:`Frontier.clear <crawlq.Frontier.clear>`."""
        await self._call(self.frontier.clear)

    async def dump(self) -> AsyncIterator[dict[str, Any]]:
        """:meth:`Frontier.dump <crawlq.Frontier.dump>` as an async iterator (records
        read :data:`_PAGE` at a time off the loop)."""
        async for rec in self._stream(self.frontier.dump()):
            yield rec

    async def records(self) -> AsyncIterator[dict[str, Any]]:
        """:meth:`Frontier.records <crawlq.Frontier.records>` as an async iterator."""
        async for rec in self._stream(await self._call(self.frontier.records)):
            yield rec

    async def _stream(self, it: Iterable[dict[str, Any]]) -> AsyncIterator[dict[str, Any]]:
        it = iter(it)
        while True:
            page = await self._call(lambda: list(itertools.islice(it, _PAGE)))
            for rec in page:
                yield rec
            if len(page) < _PAGE:
                return

    async def load(self, records: Iterable[Mapping[str, Any]]) -> int:
        """:meth:`Frontier.load <crawlq.Frontier.load>` (``records`` is read on a worker
        thread: a list, or an iterator that does not need the loop)."""
        return await self._call(self.frontier.load, records)


def _listed(leases: _Leases) -> Lease | list[Lease]:
    """A lease, or a list of leases (an iterator is read on the loop, not a thread)."""
    return leases if isinstance(leases, Lease) else list(leases)
