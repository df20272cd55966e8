"""Acknowledgements that wait for the output: a page's lease is acknowledged only once
its record is durable.

Order matters on a crash. Acknowledge first and write second, and a ``kill -9`` in
between loses the page: the frontier has it as done, the file never got it. Write,
fsync, then acknowledge, and the same kill leaves a page that is in the file but still
leased: its lease runs out, it is fetched again and written a second time. A duplicate
record can be filtered by whoever reads the output; a lost page cannot be found.

One fsync per page would cost a disk round trip per page, so acknowledgements are
grouped: while pages keep coming, one flush, one fsync and one frontier call cover all
the pages written in the last ``interval`` seconds (group commit, as databases do). The
same grouping serves a store far away: the pages answered while one commit waits for
the store (a network round trip to Redis) all go in the next one, so the round trips
per page shrink as the store's distance grows. Pages without an output record (no
output, a failure) are answered the same way, grouped, never one call each.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable

from ..aio import AsyncFrontier
from ..errors import CrawlqError, StoreError
from ..frontier import Frontier
from ..models import Lease, Outcome
from .output import Output, OutputError

_Key = tuple[Outcome, "str | None", float]
Step = Callable[[list[Lease], list["float | None"]], Awaitable[object]]
"""See :attr:`Acks.step`."""


class Acks:
    """Leases to acknowledge once ``out`` is durable (see the module's docstring);
    with ``out`` None (no output), grouped only.

    :meth:`add` holds an acknowledgement; :meth:`run` (a task for the crawl's lifetime)
    commits every ``interval`` seconds while some are held; :meth:`commit` commits now.
    ``on_error`` is told when the frontier fails or the output cannot be written (a
    full disk): nothing held is acknowledged then, and the leases come back after their
    TTL, so nothing is lost. :meth:`commit` also raises :class:`OutputError`.
    :meth:`released` is a future that is done when leases were next acknowledged
    (their hosts may be free), or when committing stopped for good.

    ``interval`` 0 (the default) commits as soon as the event loop has nothing else to
    run: the group is every page written while the last fsync ran.
    """

    def __init__(self, frontier: AsyncFrontier, out: Output | None,
                 on_error: Callable[[CrawlqError], None], interval: float = 0.0,
                 step: Step | None = None) -> None:
        self.frontier = frontier
        self.out = out
        self.on_error = on_error
        self.step = step
        """Answers the leases of pages DONE, given them and their durations, in the
        call that also offers the links pages found (first) and takes the next leases
        (the crawler's; one store call). Without it they are answered with ``done``."""
        self._released: asyncio.Future[None] | None = None
        self.interval = interval
        self._held: dict[_Key, tuple[list[Lease], list[float | None]]] = {}
        self._wake = asyncio.Event()
        self._lock = asyncio.Lock()
        self._in_commit: list[Lease] = []
        self.failed: OutputError | None = None

    def __len__(self) -> int:
        """Leases not acknowledged yet: held, or in the commit under way."""
        return len(self._in_commit) + sum(len(leases) for leases, _ in self._held.values())

    def held(self) -> list[Lease]:
        """The leases waiting for a commit (those of a commit under way included)."""
        return self._waiting() + self._in_commit

    def _waiting(self) -> list[Lease]:
        return [le for leases, _ in self._held.values() for le in leases]

    def add(self, lease: Lease, outcome: Outcome = Outcome.DONE, *, error: str | None = None,
            duration: float | None = None, after: float = 0.0) -> None:
        """Acknowledge ``lease`` (as :meth:`Frontier.done` would) at the next commit."""
        leases, durations = self._held.setdefault((outcome, error, after), ([], []))
        leases.append(lease)
        durations.append(duration)
        self._wake.set()

    async def run(self) -> None:
        """Commit what is held, every ``interval`` seconds at most, until cancelled."""
        while True:
            await self._wake.wait()
            await asyncio.sleep(self.interval)  # let the group grow
            try:
                await self.commit()
            except OutputError as exc:
                self.on_error(exc)
                self._release()  # (no commit comes any more: nobody waits for one)
                return

    async def commit(self) -> None:
        """Make the output durable, then acknowledge every lease held before."""
        async with self._lock:
            self._wake.clear()
            if self.failed is not None:
                raise self.failed
            held, self._held = self._held, {}
            if not held:
                return
            self._in_commit = [le for leases, _ in held.values() for le in leases]
            try:
                await self._commit(held)
            finally:
                self._in_commit = []

    def _hold_again(self, held: dict[_Key, tuple[list[Lease], list[float | None]]]) -> None:
        for key, (leases, durations) in held.items():
            mine = self._held.setdefault(key, ([], []))
            mine[0].extend(leases)
            mine[1].extend(durations)

    async def stop(self, task: asyncio.Task[None]) -> None:
        """Stop :meth:`run`'s ``task`` between two commits (never inside one)."""
        async with self._lock:
            task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    async def _commit(self, held: dict[_Key, tuple[list[Lease], list[float | None]]]) -> None:
        out = self.out
        try:
            if out is not None:
                out.flush()  # in the loop: ordered after every write of held pages
                await asyncio.to_thread(out.sync)
        except asyncio.CancelledError:
            self._hold_again(held)  # not known durable: held for the next commit
            raise
        except OSError as exc:
            self._hold_again(held)  # still held: see forget()
            assert out is not None
            self.failed = OutputError(
                f"cannot write the output {out.path}: {exc}; the pages fetched "
                "since its last good write were not acknowledged and are fetched again "
                "when the crawl is run again")
            raise self.failed from None
        rest = dict(held)
        done = rest.pop((Outcome.DONE, None, 0.0), None) if self.step is not None else None
        try:
            if self.step is not None:  # links first, then the pages done, then leases
                await self.step(*(done or ([], [])))
            if rest:  # (the other outcomes: one hop to the store's thread)
                await self.frontier.call(lambda f: _answer(f, rest))
        except asyncio.CancelledError:
            self._hold_again(held)  # (cancelled before or while the store answered
            raise  # them: answered again, an answer that came late changes nothing)
        except StoreError as exc:
            self.on_error(exc)
            self._release()  # (the crawl stops: nobody waits for a commit)
            return
        if out is None:
            self._release()
            return
        try:
            out.rotate_if_full()  # (between commits: no record is cut in two)
        except OSError as exc:
            self.failed = OutputError(f"cannot start the next output file after "
                                      f"{out.path}: {exc}")
            self.on_error(self.failed)
        self._release()

    def released(self) -> asyncio.Future[None]:
        """A future done at the next acknowledgement. Taken in the same step as a look
        at ``len(acks)``, it cannot miss the commit of what was seen (a task waiting on
        an event could: the event may be set and cleared before the task first runs)."""
        if self._released is None or self._released.done():
            self._released = asyncio.get_running_loop().create_future()
        return self._released

    def _release(self) -> None:
        """Wake everyone waiting on :meth:`released`; later waiters wait anew."""
        if self._released is not None and not self._released.done():
            self._released.set_result(None)
        self._released = None

    def forget(self) -> list[Lease]:
        """Drop what is held without acknowledging it, and return those leases: for a
        crawl that stops because its frontier or output failed."""
        leases = self._waiting()
        self._held.clear()
        return leases


def _answer(frontier: Frontier,
            held: dict[_Key, tuple[list[Lease], list[float | None]]]) -> None:
    """Answer every group of held leases (one ``done`` per outcome and reason)."""
    for (outcome, error, after), (leases, durations) in held.items():
        frontier.done(leases, outcome, error=error, duration=durations, after=after)
