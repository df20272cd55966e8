"""The Frontier: policies on top of a Store, turning add / next / done into store calls.

It never sleeps and reads time only through its injected ``clock``; all state lives in
the store, so a Frontier object is cheap, thread-safe (stores lock) and can be opened
by many processes on the same SQLite file or Redis database. Its parts, each a class
the next one extends: :class:`~crawlq.frontier_core.FrontierCore` (options, entries,
canonical form, values), :class:`~crawlq.frontier_admin.FrontierAdmin` (looking and
steering); here the calls of a crawl.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Iterable, Sequence
from contextlib import AbstractContextManager, nullcontext

from .entries import leases as leases_of
from .entries import url_of
from .errors import ConfigError, LeaseError
from .frontier_admin import FrontierAdmin
from .frontier_core import _gc_paused
from .models import (
    AddResult,
    Lease,
    Outcome,
    Rejection,
    Request,
)
from .stores.base import (
    ACK_DEAD,
    ACK_DONE,
    ACK_REQUEUE,
    ADDED,
    DUPLICATE,
    Ack,
    Entry,
    ack,
    as_seconds,
)

_Leases = Lease | Iterable[Lease]
_PART = 1000
"""Requests per part of a batch handed to a store's ``add_begin`` (see Frontier.add)."""


class Frontier(FrontierAdmin):
    """The crawl frontier. Build one with :meth:`open`; use it as a context manager.

    See ``docs/options.md`` for every option. The hot paths take batches: pass many
    requests to :meth:`add`, ask :meth:`next` for many leases, acknowledge many at once.
    """

    # -- adding ---------------------------------------------------------------------

    @_gc_paused
    def add(self, requests: Request | str | Iterable[Request | str]) -> AddResult:
        """Offer requests (or plain URL strings); duplicates are dropped atomically.

        Invalid URLs and requests over a queue budget are rejected with a reason in
        ``AddResult.rejected`` and counted in ``stats().rejected``; nothing raises
        because one request of a batch is bad.
        """
        if isinstance(requests, (str, Request)):
            requests = [requests]
        elif not isinstance(requests, (list, tuple)):
            if not isinstance(requests, Iterable):
                raise ConfigError("add() takes a Request, a URL or an iterable of them, "
                                  f"not {requests!r}")
            requests = list(requests)
        now = self.clock()
        rejected: list[Rejection] = []
        make = self._entries.make
        entries: list[Entry] = []
        index: list[int] = []  # the position in requests of each entry
        # A store that can take part of a batch without waiting (Redis) gets a big batch
        # in parts as they are ready: its server works while the rest is canonicalized.
        total = len(requests)
        begin = getattr(self.store, "add_begin", None) if total > _PART else None
        pending: list[Callable[[], list[int]]] = []
        step = _PART if begin is not None else max(total, 1)
        for start in range(0, total, step):
            sent = len(entries)
            make(requests, start, start + step, now, rejected, entries, index)
            if begin is not None and len(entries) > sent:
                pending.append(begin(entries[sent:], now))
        if pending:
            statuses = [st for wait in pending for st in wait()]
        else:
            statuses = self.store.add(entries, now) if entries else []
        added, dups = statuses.count(ADDED), statuses.count(DUPLICATE)
        if len(index) == len(requests):  # (every request made an entry: index is 0, 1, ...)
            flags = [st == ADDED for st in statuses]
        else:
            flags = [False] * len(requests)
            for pos, st in zip(index, statuses):
                if st == ADDED:
                    flags[pos] = True
        if added + dups < len(statuses):
            rejected += [Rejection(pos, url_of(requests[pos]), "queue-budget")
                         for pos, st in zip(index, statuses) if st != ADDED and st != DUPLICATE]
        reasons: dict[str, int] = {}
        for r in rejected:
            if r.reason != "queue-budget":  # the store counted those itself
                reasons[r.reason] = reasons.get(r.reason, 0) + 1
        if reasons:
            self.store.count_rejected(reasons)
        if rejected:
            rejected.sort(key=lambda r: r.index)
        return AddResult(added, dups, tuple(rejected), tuple(flags))

    # -- leasing --------------------------------------------------------------------

    @_gc_paused
    def next(self, n: int = 1, *, ttl: float | None = None,
             queue: str | None = None) -> list[Lease]:
        """Lease up to ``n`` requests that may be fetched now (an empty list: none ready).

        Each lease must be answered with :meth:`done` or :meth:`retry` before ``ttl``
        seconds (default ``lease_ttl``); otherwise its request returns to its queue.
        ``queue``: lease from that queue only (under its politeness, as always).
        """
        if n.__class__ is not int:
            raise ConfigError(f"next() takes an int, not {n!r}")
        ttl = self.lease_ttl if ttl is None else as_seconds("ttl", ttl, positive=True)
        now = self.clock()
        if queue is None:
            leased = self.store.lease(now, n, ttl)
        elif not isinstance(queue, str) or not queue:
            raise ConfigError(f"a queue is a non-empty string, not {queue!r}")
        else:
            leased = self.store.lease(now, n, ttl, queue)
        return leases_of(leased if leased.__class__ is list else list(leased), now)

    def done(
        self,
        leases: _Leases,
        outcome: Outcome = Outcome.DONE,
        *,
        error: str | None = None,
        duration: float | Sequence[float | None] | None = None,
        after: float = 0.0,
    ) -> int:
        """Acknowledge leases; returns how many were still held.

        ``Outcome.DONE``: finished. ``Outcome.FAILED``: retried after an exponential
        backoff until ``max_retries``, then kept as dead with ``error``.
        ``Outcome.RETRY``: back to the queue after ``after`` seconds, no failure counted.
        ``Outcome.DEAD``: kept as dead with ``error`` at once, whatever its retries.
        ``duration`` (seconds the fetch took) feeds the politeness delay: one number for
        every lease, or a sequence with one (or None) per lease, so that the leases of
        many queues are answered in one call. Leases that
        expired or are unknown change nothing (counted as ``late_acks``; with
        ``strict_acks`` a :class:`LeaseError` is raised after the others are applied).
        """
        if (type(leases) is Lease and outcome is Outcome.DONE and not after
                and (duration is None or duration.__class__ is float)):
            # One lease done (README's loop, once per fetch): its answer alone, without
            # the batch path (nor its garbage-collector pause, which pays off for batches).
            d = None if duration is None else as_seconds("duration", duration)
            return self._release([ack(leases.token, ACK_DONE, d)], self.clock())
        return self._done(leases, outcome, error, duration, after)

    @_gc_paused
    def _done(self, leases: _Leases, outcome: Outcome, error: str | None,
              duration: float | Sequence[float | None] | None, after: float) -> int:
        """:meth:`done` for any leases and outcome."""
        if isinstance(leases, Lease):
            leases = (leases,)
        durations: Iterable[float | None]
        if duration is None or duration.__class__ in (float, int):
            durations = itertools.repeat(
                None if duration is None else as_seconds("duration", duration))
        else:
            leases, durations = _per_lease_durations(leases, duration)
        if after:
            after = as_seconds("after", after, signed=True)
        now = self.clock()
        acks: list[Ack] = []
        if outcome is Outcome.DONE:
            acks = [(le.token, ACK_DONE, d, None, 0, None, False, None)
                    for le, d in zip(leases, durations)]
        elif outcome is Outcome.RETRY:
            acks = [ack(le.token, ACK_REQUEUE, d, now + after, le.request.retries)
                    for le, d in zip(leases, durations)]
        elif outcome is Outcome.FAILED:
            for le, d in zip(leases, durations):
                n = le.request.retries + 1
                if n > self.max_retries:
                    acks.append(ack(le.token, ACK_DEAD, d, None, n, error, True))
                else:
                    backoff = min(self.retry_backoff * 2 ** (n - 1), self.retry_backoff_max)
                    acks.append(ack(le.token, ACK_REQUEUE, d, now + backoff, n,
                                    error, True))
        elif outcome is Outcome.DEAD:
            acks = [ack(le.token, ACK_DEAD, d, None, le.request.retries + 1, error, True)
                    for le, d in zip(leases, durations)]
        else:
            raise ConfigError(f"unknown outcome {outcome!r}")
        return self._release(acks, now)

    def renew(self, leases: _Leases, ttl: float | None = None) -> list[Lease]:
        """Extend leases still held (a page still being worked on) to ``ttl`` seconds
        from now (default ``lease_ttl``); returns them with their new ``expires_at``.
        Leases expired or answered are left out (with ``strict_acks`` a
        :class:`LeaseError` is raised for them). The SQLite store keeps one expiry per
        ``next()`` call: renewing one of its leases extends its unanswered siblings too.
        """
        if isinstance(leases, Lease):
            leases = (leases,)
        leases = list(leases)
        ttl = self.lease_ttl if ttl is None else as_seconds("ttl", ttl, positive=True)
        now = self.clock()
        expires = now + ttl
        held = self.store.renew([le.token for le in leases], expires, now)
        if self.strict_acks and not all(held):
            raise LeaseError([le.token for le, ok in zip(leases, held) if not ok])
        return [Lease(le.token, le.request, le.queue, le.leased_at, expires)
                for le, ok in zip(leases, held) if ok]

    def retry(self, leases: _Leases, after: float = 0.0, *,
              duration: float | None = None) -> int:
        """Put leased requests back to be fetched ``after`` seconds from now, no failure."""
        return self.done(leases, Outcome.RETRY, after=after, duration=duration)

    def _release(self, acks: list[Ack], now: float) -> int:
        if not acks:
            return 0
        held = self.store.release(acks, now)
        n = sum(held)
        if self.strict_acks and n < len(acks):
            raise LeaseError([a[0] for a, ok in zip(acks, held) if not ok])
        return n

    def transaction(self) -> AbstractContextManager[None]:
        """A block whose calls are one atomic step of the store, where it has them
        (SQLite): e.g. a page's links added and the page acknowledged together, or an
        acknowledgement and the next lease in one commit instead of two::

            with frontier.transaction():
                frontier.add(links)
                frontier.done(lease)
                leases = frontier.next(10)

        They take effect together when the block ends; an exception leaving the block
        undoes them all (leases handed out inside it are void), and so does a call that
        fails inside it. Blocks nest; other threads' calls wait until it ends. On a
        store without transactions (memory, Redis) each call inside takes effect on its
        own, as outside a block. See :class:`~crawlq.stores.base.Transactions`.
        """
        begin = getattr(self.store, "transaction", None)
        return begin() if begin is not None else nullcontext()

    # -- waiting --------------------------------------------------------------------

    def next_ready_at(self) -> float | None:
        """When :meth:`next` may next return something (epoch seconds; now or later),
        or ``None`` when nothing is queued or leased: the crawl is over. A fetch loop
        sleeps until then instead of polling."""
        return self.store.next_ready_at(self.clock())

    def wait(self, timeout: float | None = None, poll: float = 1.0) -> bool:
        """Sleep until :meth:`next` may return something (True), or until the crawl is
        over for every worker sharing this frontier: nothing queued and nothing leased
        anywhere (False). After ``timeout`` seconds it returns True: go and look.

        Idle detection across processes and machines (the scrapy-redis complaint)::

            while frontier.wait():
                for lease in frontier.next(100):
                    ...  # fetch, add(new links), then done(lease)

        Add the links a page yields *before* acknowledging it: then "nothing queued,
        nothing leased" cannot be seen while a worker is about to add more. Sleeps at
        most ``poll`` seconds at a time, since another worker may add work sooner.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            at = self.next_ready_at()
            if at is None:
                return False
            pause = min(at - self.clock(), poll)
            if pause <= 0:
                return True
            if deadline is not None:
                left = deadline - time.monotonic()
                if left <= 0:
                    return True
                pause = min(pause, left)
            time.sleep(pause)

def _per_lease_durations(leases: Iterable[Lease], durations: object,
                         ) -> tuple[list[Lease], list[float | None]]:
    """``done()``'s leases and their durations, one each (checked)."""
    if isinstance(durations, (str, bytes)) or not isinstance(durations, Sequence):
        raise ConfigError("duration must be a number of seconds or a sequence of them, "
                          f"not {durations!r}")
    leases = list(leases)
    if len(durations) != len(leases):
        raise ConfigError(f"{len(durations)} durations for {len(leases)} leases")
    return leases, [None if d is None else as_seconds("duration", d) for d in durations]
