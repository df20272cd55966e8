"""The crawl loop: leases from the frontier, fetches, follows links, reports done.

All politeness comes from the frontier (per-host concurrency and delays fed with real
fetch durations, Crawl-delay as a per-queue minimum, Retry-After as a block); the loop
only keeps at most ``concurrency`` fetches in flight and sleeps until
``Frontier.next_ready_at()`` when nothing is ready.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from typing import Any

from ..errors import StoreError
from ..frontier import Frontier
from ..models import Lease
from . import seeds
from .base import EVENTS
from .commit import Acks
from .config import DEFAULT_AGENT, CrawlConfig, Summary
from .decode import ACCEPT_ENCODING
from .fetch import Fetcher
from .output import Output, OutputError, open_output
from .visits import PageVisits

__all__ = ["DEFAULT_AGENT", "EVENTS", "CrawlConfig", "Crawler", "Summary"]


class Crawler(PageVisits):
    """A polite crawler on a :class:`~crawlq.Frontier`.

    ``events`` maps ``start``, ``round_start``, ``page``, ``error``, ``round_end`` and
    ``shutdown`` to callables; an exception in one is logged, never fatal.
    """

    async def run(self) -> Summary:
        """Crawl until nothing in scope is left, a limit is reached or :meth:`stop`.

        Raises :class:`~crawlq.errors.StoreError` when the frontier fails for good and
        :class:`~crawlq.crawler.output.OutputError` when the output cannot be written;
        either way nothing is lost: what was not acknowledged is fetched again.
        """
        c = self.config
        started = time.monotonic()
        out = (open_output(c.out, c.out_format, save=c.save, rotate=c.out_rotate)
               if c.out else None)
        try:
            frontier = Frontier.open(
                c.store, concurrency=c.per_host, min_delay=c.min_delay,
                max_delay=c.max_delay, delay_factor=c.delay_factor,
                max_queue_urls=c.max_per_host, max_retries=c.max_retries,
                retry_backoff=c.retry_backoff, lease_ttl=c.lease_ttl or c.timeout * 3 + 60,
                revisit_after=c.revisit_after, max_redeliveries=c.max_redeliveries)
        except BaseException:
            if out is not None:
                out.close()
            raise
        self.frontier = frontier
        fetcher = Fetcher(user_agent=c.user_agent, timeout=c.timeout, max_bytes=c.max_bytes,
                          resolve=c.resolve, allow_private=c.allow_private,
                          allow_addresses=c.allow_addresses, connections=c.concurrency,
                          ca_file=c.ca_file, headers=c.headers, proxy=c.proxy,
                          proxy_from_env=c.proxy_from_env, cookies=c.cookies,
                          accept_encoding=(out.accept_encoding if out is not None
                                           and out.accept_encoding else ACCEPT_ENCODING))
        self._out = out
        acks = self._acks = (Acks(frontier, out, self._fail,
                                  before_done=lambda: self.links.flush(frontier))
                             if out is not None else None)
        committer = asyncio.create_task(acks.run()) if acks is not None else None
        inflight: dict[asyncio.Task[None], Lease] = {}
        renewer = asyncio.create_task(self._renew(frontier, inflight))
        try:
            self._emit("start", self)
            seeds.revive(frontier, c.seeds)
            for n in range(1, max(c.rounds, 1) + 1):
                self.summary.rounds = n
                self.links.new_round()
                # Seeds again each round: with revisit_after they are accepted anew once
                # their interval has passed, and so are the pages they lead to.
                seeds.offer(frontier, c.seeds, self.scope, self.summary, report=n == 1)
                self._emit("round_start", n)
                deadline = time.monotonic() + c.duration if c.duration else None
                try:
                    self.summary.finished = await self._round(frontier, fetcher, out,
                                                              inflight, deadline)
                except StoreError as exc:  # (a flush, lease or wait call failed)
                    self._fail(exc)  # nothing more is acknowledged in this run
                    raise
                if self._fatal is not None:
                    raise self._fatal
                self._emit("round_end", n, self.summary)
                if self._stop or n == c.rounds or self._limit_left(inflight) == 0:
                    break
                pause_until = time.monotonic() + c.round_delay
                while not self._stop and time.monotonic() < pause_until:
                    await asyncio.sleep(min(0.2, pause_until - time.monotonic()))
        finally:
            renewer.cancel()
            for t in inflight:
                t.cancel()
            if committer is not None and acks is not None:
                await acks.stop(committer)  # (a commit under way finishes first)
            await fetcher.close()
            await self._parsers.aclose()
            try:
                if acks is not None and self._fatal is None:
                    await acks.commit()  # the last pages written: durable, then acknowledged
                if self._fatal is None:
                    self.links.flush(frontier)
            finally:
                if out is not None:
                    try:
                        out.close()
                    except OSError as exc:  # (nothing it held was acknowledged)
                        if self._fatal is None:
                            raise OutputError(f"closing the output {out.path} failed: "
                                              f"{exc}") from None
                self.frontier = None
                frontier.close()
                self.summary.seconds = time.monotonic() - started
                self._emit("shutdown", self.summary)
        return self.summary

    def _limit_left(self, inflight: Mapping[asyncio.Task[None], Lease]) -> int | None:
        if self.config.max_pages is None:
            return None
        return max(self.config.max_pages - self.summary.fetched - len(inflight), 0)

    async def _round(self, frontier: Frontier, fetcher: Fetcher, out: Output | None,
                     inflight: dict[asyncio.Task[None], Lease],
                     deadline: float | None) -> bool:
        """Crawl until the frontier is empty (True), or a limit, the deadline or a stop."""
        c = self.config
        finished = False
        while not self._stop:
            if deadline is not None and time.monotonic() >= deadline:
                break
            limit_left = self._limit_left(inflight)
            free = c.concurrency - len(inflight)
            if limit_left is not None:
                free = min(free, limit_left)
            if free <= 0 and inflight:  # every slot busy: wait for one to free up
                await self._wait(inflight, None)
                continue
            self.links.flush(frontier)  # (what the last pages found is leasable too)
            leases = frontier.next(free) if free > 0 else []
            for lease in leases:
                task = asyncio.create_task(self._visit(frontier, fetcher, lease, out))
                inflight[task] = lease
            if leases:
                continue
            if limit_left == 0 and not inflight:
                break
            when = frontier.next_ready_at()
            if when is None and not inflight:
                finished = True
                break
            wait = 1.0 if when is None else min(max(when - time.time(), 0.005), 1.0)
            if deadline is not None:
                wait = max(min(wait, deadline - time.monotonic()), 0.0)
            await self._wait(inflight, wait)
        if inflight:
            await self._drain(frontier, inflight)
        return finished

    async def _wait(self, inflight: dict[asyncio.Task[None], Lease],
                    timeout: float | None) -> None:
        """Until a fetch ends, held acknowledgements are committed (their hosts may be
        free again) or ``timeout`` passes."""
        waiters: set[asyncio.Future[Any]] = set(inflight)
        waker = None
        if self._acks is not None and len(self._acks):
            waker = asyncio.ensure_future(self._acks.released.wait())
            waiters.add(waker)
        if not waiters:
            await asyncio.sleep(timeout or 0)
            return
        done, _ = await asyncio.wait(waiters, timeout=timeout,
                                     return_when=asyncio.FIRST_COMPLETED)
        if waker is not None:
            waker.cancel()
        for t in done:
            inflight.pop(t, None)

    async def _drain(self, frontier: Frontier,
                     inflight: dict[asyncio.Task[None], Lease]) -> None:
        """Let the fetches in flight finish and be acknowledged: all of them at a limit,
        for :attr:`STOP_GRACE` seconds after a stop. Those still running then are
        cancelled and put back unfailed; when the frontier is gone they are only
        cancelled (their leases come back after ``lease_ttl``); when the output failed,
        every fetch is cancelled and put back."""
        if self._fatal is None:
            grace = self.STOP_GRACE if self.summary.interrupted else None
            _, pending = await asyncio.wait(inflight, timeout=grace)
        else:
            pending = set(inflight)
        for t in pending:
            t.cancel()
        if pending:
            await asyncio.wait(pending)
        back = [inflight[t] for t in pending]
        inflight.clear()
        if back and not isinstance(self._fatal, StoreError):
            self._put_back(frontier, back)

    async def _renew(self, frontier: Frontier,
                     inflight: dict[asyncio.Task[None], Lease]) -> None:
        """Renew the leases of the pages still worked on (fetched, parsed, or written
        and waiting for their commit) every third of the lease time: a slow page or a
        slow disk does not let its lease expire and the page go to another crawler."""
        every = frontier.lease_ttl / 3
        while True:
            await asyncio.sleep(every)
            leases = list(inflight.values())
            if self._acks is not None:
                leases += self._acks.held()
            if leases and self._fatal is None:
                try:
                    frontier.renew(leases)
                except StoreError as exc:
                    self._fail(exc)
                    return
