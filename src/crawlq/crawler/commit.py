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
import collections
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from ..aio import AsyncFrontier
from ..errors import CrawlqError, StoreError
from ..frontier import Frontier
from ..models import Lease, Outcome
from .output import Output, OutputError

log = logging.getLogger("crawlq.crawl")

_Key = tuple[Outcome, "str | None", float]
Step = Callable[[list[Any], list[Lease], list["float | None"]], Awaitable[object]]
"""See :attr:`Acks.step`."""

OVERLAP_AFTER = 0.002
"""Seconds a commit waits for the one under way before it goes on beside it (with a
store far away)."""
FAR = 0.001
"""A store whose quickest recent answer took this many seconds or more is far away (a
network round trip): commits overlap. Nearer (SQLite, Redis on the same machine), they
take turns."""


class LinkBuffer(Protocol):
    """Links found by pages, waiting to be offered (the crawler's
    :class:`~crawlq.crawler.discover.Links`)."""

    def take(self) -> list[Any]:
        """Everything waiting, now (the buffer is left empty)."""
        ...

    def give_back(self, links: list[Any]) -> None:
        """Links taken that did not reach the store, back to the buffer."""
        ...


COMMITS = 4
"""Commits under way at once at most: while one waits for the store (a round trip to a
Redis far away), the next group's fsync and store call go."""


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
    run: the group is every page written while the last fsync ran. Up to
    :data:`COMMITS` commits are under way at once, each with its own group; each takes
    the links waiting (``take_links``) in the same step as its group, so a page's
    links always go in its own commit's store call or an earlier one that has not
    failed: commits may end in any order.
    """

    def __init__(self, frontier: AsyncFrontier, out: Output | None,
                 on_error: Callable[[CrawlqError], None], interval: float = 0.0,
                 step: Step | None = None, links: LinkBuffer | None = None) -> None:
        self.frontier = frontier
        self.out = out
        self.on_error = on_error
        self.step = step
        """Offers the links taken with a group (first), answers the group's leases of
        pages DONE (given them and their durations) and takes the next leases: the
        crawler's, one store call. Without it they are answered with ``done``."""
        self.links = links
        """Where the links pages found wait: each commit takes them with its group."""
        self._released: asyncio.Future[None] | None = None
        self.interval = interval
        self._held: dict[_Key, tuple[list[Lease], list[float | None]]] = {}
        self._wake = asyncio.Event()
        self._syncing = asyncio.Lock()
        self._rotate_due = False  # a file full while other commits were under way
        self._in_commit: list[list[Lease]] = []
        self._commits: set[asyncio.Task[None]] = set()
        self._answer_times: collections.deque[float] = collections.deque(maxlen=32)
        self.failed: OutputError | None = None

    def __len__(self) -> int:
        """Leases not acknowledged yet: held, or in the commit under way."""
        return (sum(len(group) for group in self._in_commit)
                + sum(len(leases) for leases, _ in self._held.values()))

    def held(self) -> list[Lease]:
        """The leases waiting for a commit (those of the commits under way included)."""
        return self._waiting() + [le for group in self._in_commit for le in group]

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
        """Commit what is held, every ``interval`` seconds at most, until cancelled;
        up to :data:`COMMITS` commits under way at once."""
        try:
            while True:
                await self._wake.wait()
                await asyncio.sleep(self.interval)  # let the group grow
                if self._commits:
                    # A commit under way. With a store nearby, wait for it: the next
                    # group grows meanwhile, and fewer, bigger calls cost less. With one
                    # far away (its quickest answers take a network round trip), wait a
                    # moment, then go on beside it: the round trips overlap.
                    far = len(self._answer_times) > 0 and min(self._answer_times) >= FAR
                    alone = not far or len(self._commits) >= COMMITS
                    await asyncio.wait(self._commits, return_when=asyncio.FIRST_COMPLETED,
                                       timeout=None if alone else OVERLAP_AFTER)
                    if len(self._commits) >= COMMITS:
                        continue
                if self.failed is not None:
                    self.on_error(self.failed)
                    self._release()  # (no commit comes any more: nobody waits for one)
                    return
                if self._rotate_due:  # the file is full: let the commits end, rotate
                    if self._commits:
                        await asyncio.wait(self._commits)
                    self._rotate()
                    continue
                self._wake.clear()
                task = asyncio.create_task(self._commit_caught())
                self._commits.add(task)
                task.add_done_callback(self._commits.discard)
                await asyncio.sleep(0)  # (let it take its group before looking again)
        finally:
            if self._commits:
                await asyncio.wait(self._commits)  # (none is cut off in its middle)

    async def _commit_caught(self) -> None:
        try:
            await self.commit()
        except OutputError as exc:
            self.on_error(exc)
            self._release()
        except Exception as exc:  # a bug: the crawl stops, its pages come back later
            log.exception("committing acknowledgements failed")
            self.on_error(CrawlqError(f"committing acknowledgements failed: {exc}"))
            self._release()

    def _rotate(self) -> None:
        """Start the next output file (no commit under way)."""
        self._rotate_due = False
        out = self.out
        if out is None:
            return
        try:
            out.rotate_if_full()
        except OSError as exc:
            self.failed = OutputError(f"cannot start the next output file after "
                                      f"{out.path}: {exc}")
            self.on_error(self.failed)

    async def commit(self) -> None:
        """Make the output durable, then acknowledge every lease held before."""
        # (the group and its links are taken with no await between: in one loop step)
        if self.failed is not None:
            raise self.failed
        held, self._held = self._held, {}
        if not held:
            return
        links = self.links.take() if self.links is not None else []
        group = [le for leases, _ in held.values() for le in leases]
        self._in_commit.append(group)
        try:
            await self._commit(held, links)
        finally:
            self._in_commit = [g for g in self._in_commit if g is not group]

    def _hold_again(self, held: dict[_Key, tuple[list[Lease], list[float | None]]]) -> None:
        for key, (leases, durations) in held.items():
            mine = self._held.setdefault(key, ([], []))
            mine[0].extend(leases)
            mine[1].extend(durations)

    async def stop(self, task: asyncio.Task[None]) -> None:
        """Stop :meth:`run`'s ``task``: the commits under way end first (none is cut
        off in its middle)."""
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    async def _commit(self, held: dict[_Key, tuple[list[Lease], list[float | None]]],
                      links: list[Any]) -> None:
        out = self.out
        try:
            if out is not None:
                out.flush()  # in the loop: ordered after every write of held pages
                # One fsync at a time, and none after one that failed: Linux reports a
                # write error once per file, so a later fsync could succeed over records
                # that never reached the disk.
                async with self._syncing:
                    if self.failed is not None:
                        raise OSError(f"an earlier write failed ({self.failed})")
                    await asyncio.to_thread(out.sync)
        except BaseException as exc:
            self._hold_again(held)  # not known durable: held for the next commit
            self._give_back(links)
            if isinstance(exc, OSError):
                assert out is not None
                self.failed = OutputError(
                    f"cannot write the output {out.path}: {exc}; the pages fetched since "
                    "its last good write were not acknowledged and are fetched again "
                    "when the crawl is run again")
                raise self.failed from None
            raise
        rest = dict(held)
        done = rest.pop((Outcome.DONE, None, 0.0), None) if self.step is not None else None
        try:
            sent = time.monotonic()
            if self.step is not None:  # links first, then the pages done, then leases
                await self.step(links, *(done or ([], [])))
                self._answer_times.append(time.monotonic() - sent)
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
        if len(self._in_commit) > 1:  # (another commit may be syncing: rotate after it)
            self._rotate_due = out.full()
            self._release()
            return
        self._rotate()  # (between commits: no record is cut in two)
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

    def _give_back(self, links: list[Any]) -> None:
        """Links of a commit that did not reach the store: back for the next one."""
        if links and self.links is not None:
            self.links.give_back(links)

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
