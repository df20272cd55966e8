"""The memory store: the whole frontier in one process's memory, guarded by a lock.

Fast and small (one bytes object per queued entry: a sort prefix plus the payload),
and gone when the process ends. Use it for tests, short crawls and as the reference
implementation of the Store contract.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence

from .base import OVER_BUDGET, Ack, Entry, Leased
from .memory_admin import MemoryAdmin
from .memory_loops import (
    _READY,
    _RESTING,
    _add_entries,
    _lease_rounds,
    _ready_queue,
    _release_acks,
    _serve_line,
)


class MemoryStore(MemoryAdmin):
    """In-process store; see :class:`crawlq.stores.base.Store` for the contract. Its parts,
    each a class the next one extends: :class:`~.memory_core.MemoryCore` (state and
    shared steps), :class:`~.memory_admin.MemoryAdmin` (looking and steering); here the
    calls of a crawl. The per-entry loops are in :mod:`.memory_loops` (compiled by mypyc)."""

    def add(self, entries: Sequence[Entry], now: float) -> list[int]:
        """See :meth:`Store.add`."""
        out: list[int] = []
        with self._lock:
            self._check_open()
            added, seen_added, dups = _add_entries(self, entries, now, out)
            c = self._counters
            c["added"] += added
            c["seen"] += seen_added
            c["duplicates"] += dups
            over = out.count(OVER_BUDGET)
            if over:
                self._rejected["queue-budget"] = self._rejected.get("queue-budget", 0) + over
        return out

    def lease(self, now: float, limit: int, ttl: float,
              queue: str | None = None) -> list[Leased]:
        """See :meth:`Store.lease`."""
        out: list[Leased] = []
        if limit <= 0:
            return out
        expires = now + ttl
        with self._lock:
            self._check_open()
            self._wake(now)
            if queue is None:
                _lease_rounds(self, out, limit, now, expires)
            else:
                q = self._queues.get(queue)
                if q is not None and q.state == _READY:
                    q.state = -1  # (its place in the ready heap: dropped by _settle)
                    _serve_line(self, [q], out, limit, now, expires)
            if out:
                # One expiry record per call: the leases of a call expire together.
                heapq.heappush(self._expiry, (expires, out[0][0], [le[0] for le in out]))
        return out

    def renew(self, tokens: Sequence[int], expires: float, now: float) -> list[bool]:
        """See :meth:`Store.renew`."""
        out = []
        with self._lock:
            self._check_open()
            self._wake(now)
            leases = self._leases
            for token in tokens:
                held = leases.get(token)
                out.append(held is not None)
                if held is not None and expires > held[2]:
                    leases[token] = (held[0], held[1], expires)
                    heapq.heappush(self._expiry, (expires, token, [token]))
        return out

    def release(self, acks: Sequence[Ack], now: float) -> list[bool]:
        """See :meth:`Store.release`."""
        out: list[bool] = []
        with self._lock:
            self._check_open()
            _release_acks(self, acks, now, out)
        return out

    def next_ready_at(self, now: float) -> float | None:
        """See :meth:`Store.next_ready_at`."""
        with self._lock:
            self._check_open()
            self._wake(now)
            ready = self._ready
            while ready:  # drop stale entries (lazy deletion) to see a real one
                if _ready_queue(self, ready[0]) is not None:
                    return now
                heapq.heappop(ready)
            resting = self._resting
            while resting:
                _, version, key = resting[0]
                q = self._queues[key]
                if q.version == version and q.state == _RESTING:
                    break
                heapq.heappop(resting)
            expiry, leases = self._expiry, self._leases
            # (a record is spent when none of its leases is still held until its time:
            # each was answered, or renewed, which gave it a record of its own)
            while expiry and not any(t in leases and leases[t][2] <= expiry[0][0]
                                     for t in expiry[0][2]):
                heapq.heappop(expiry)
            times = [h[0][0] for h in (resting, self._scheduled, expiry) if h]
            return min(times) if times else None
