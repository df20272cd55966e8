"""The memory store: the whole frontier in one process's memory, guarded by a lock.

Fast and small (one bytes object per queued entry: a sort prefix plus the payload),
and gone when the process ends. Use it for tests, short crawls and as the reference
implementation of the Store contract.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from typing import TYPE_CHECKING

from .base import (
    ACK_DEAD,
    ACK_DONE,
    ACK_REQUEUE,
    OVER_BUDGET,
    Ack,
    Entry,
    Leased,
)
from .memory_admin import MemoryAdmin
from .memory_loops import _READY, _RESTING, _add_entries, _Queue, _serve_line

if TYPE_CHECKING:
    pass


class MemoryStore(MemoryAdmin):
    """In-process store; see :class:`crawlq.stores.base.Store` for the contract. Its parts,
    each a class the next one extends: :class:`~.memory_core.MemoryCore` (state and
    shared steps), :class:`~.memory_admin.MemoryAdmin` (looking and steering); here the
    calls of a crawl. The per-entry loops are in :mod:`.memory_loops`."""

    def add(self, entries: Sequence[Entry], now: float) -> list[int]:
        """See :meth:`Store.add`."""
        out: list[int] = []
        with self._lock:
            self._check_open()
            if self._adder is not None and entries.__class__ in (list, tuple):
                added, seen_added, dups = self._adder(self, entries, now, out)
            else:
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
                self._rounds(self, out, limit, now, expires)
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
            c = self._counters
            # Plain acknowledgements (all ACK_DONE) in C where built: the loop below, the
            # same steps; it returns None, having changed nothing, for any other batch.
            # (not while an entry has expired leases: their counts end with them below)
            res = (None if self._release is None or acks.__class__ not in (list, tuple)
                   or self._expired else self._release(self, acks, now, out))
            if res is not None:
                c["done"] += res[0]
                c["late_acks"] += res[1]
                return out
            touched: dict[str, _Queue] = {}
            leases = self._leases
            for token, kind, duration, not_before, retries, error, failed, delay in acks:
                held = leases.pop(token, None)
                if held is None:
                    c["late_acks"] += 1
                    out.append(False)
                    continue
                q, item, _ = held
                q.inflight -= 1
                if self._expired and kind != ACK_REQUEUE:
                    self._expired.pop(item[4:10], None)
                rest = delay if delay is not None else q.policy.delay(duration)
                if rest > 0:
                    q.ready_at = max(q.ready_at, now + rest)
                    q.session = 0
                if kind == ACK_DONE:
                    c["done"] += 1
                elif kind == ACK_DEAD:
                    self._bury(q, item, retries, error or "", now)
                else:
                    if failed:
                        c["failed"] += 1
                    c["retried"] += 1
                    new = item[:10] + retries.to_bytes(2, "big") + item[12:]
                    if not_before is not None and not_before > now:
                        heapq.heappush(self._scheduled,
                                       (not_before, next(self._ticket), q.key, new))
                    else:
                        heapq.heappush(q.heap, new)
                touched[q.key] = q
                out.append(True)
            for q in touched.values():
                self._settle(q, now)
        return out

    def next_ready_at(self, now: float) -> float | None:
        """See :meth:`Store.next_ready_at`."""
        with self._lock:
            self._check_open()
            self._wake(now)
            ready = self._ready
            while ready:  # drop stale entries (lazy deletion) to see a real one
                _, _, _, version, key = ready[0]
                q = self._queues[key]
                if q.version == version and q.state == _READY:
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
            while expiry and not any(t in leases for t in expiry[0][2]):
                heapq.heappop(expiry)  # every lease of that call was answered
            times = [h[0][0] for h in (resting, self._scheduled, expiry) if h]
            return min(times) if times else None
