"""The memory store's state and the steps every call stands on: making queues, settling
a queue's state, putting entries in, burying, and waking (due entries, expired leases,
rested queues, values whose time is up). The calls are in :mod:`.memory_admin` and
:mod:`.memory`, each a subclass of the one before."""

from __future__ import annotations

import heapq
import itertools
import threading
from collections.abc import MutableSet
from typing import TYPE_CHECKING

from .._native import native
from .base import (
    MAX_REDELIVERIES,
    DeadEntry,
    QueuePolicy,
    expired_error,
)
from .bloom import BloomShape, MemoryBloom
from .memory_loops import (
    _EMPTY,
    _READY,
    _RESTING,
    _SEQ_MAX,
    _item_priority,
    _item_retries,
    _Queue,
    _settle,
)

if TYPE_CHECKING:
    from .._speedups import FingerprintSet

class MemoryCore:
    """The memory store's state and shared steps (the store is
    :class:`crawlq.stores.memory.MemoryStore`)."""

    def __init__(
        self,
        policy: QueuePolicy | None = None,
        *,
        lifo: bool = False,
        bloom: BloomShape | None = None,
        max_redeliveries: int = MAX_REDELIVERIES,
    ) -> None:
        self.policy = policy or QueuePolicy()
        self.lifo = lifo
        self.max_redeliveries = max_redeliveries
        # an entry's sequence bytes (item[4:10]) -> how many of its leases expired;
        # only entries that had one are here (see _wake)
        self._expired: dict[bytes, int] = {}
        self._lock = threading.RLock()
        # The exact seen-set: a FingerprintSet where the C extension is built (about 30
        # bytes per fingerprint against ~90 in a set of bytes, and not walked by the
        # garbage collector), else a set; both answer `in`, add(), len() and iteration.
        fpset = native("FingerprintSet")
        self._seen: MutableSet[bytes] | FingerprintSet = set() if fpset is None else fpset()
        self._revisit: dict[bytes, float] = {}
        self._bloom = MemoryBloom(bloom) if bloom else None
        self._queues: dict[str, _Queue] = {}
        self._ready: list[bytes] = []  # (heap) memory_loops._ready_key of ready queues
        self._resting: list[tuple[float, int, str]] = []  # (ready_at, version, key)
        self._scheduled: list[tuple[float, int, str, bytes]] = []  # (not_before, n, key, item)
        self._leases: dict[int, tuple[_Queue, bytes, float]] = {}
        self._expiry: list[tuple[float, int, list[int]]] = []
        self._dead: dict[int, DeadEntry] = {}
        self._seq_n = _SEQ_MAX // 2  # counts down for LIFO, up for FIFO
        self._token_n = 0  # the last lease token given (memory_loops._serve_line)
        self._dead_ids = itertools.count(1)
        self._ticket = itertools.count()
        self._by_created: list[_Queue] = []  # queues in creation order (q.created)
        self._counters = dict.fromkeys(
            ("seen", "added", "done", "failed", "retried", "dead", "redelivered",
             "late_acks", "duplicates"), 0)
        self._rejected: dict[str, int] = {}
        self._values: dict[str, tuple[bytes, float | None]] = {}  # name -> (value, expires)
        self._value_expiry: list[tuple[float, str]] = []  # (heap) expires, name
        self._closed = False

    # -- helpers -----------------------------------------------------------------

    def _bury(self, q: _Queue, item: bytes, retries: int, error: str, now: float) -> None:
        """Keep a leased entry of ``q`` as dead (counted as a failure)."""
        self._counters["dead"] += 1
        self._counters["failed"] += 1
        did = next(self._dead_ids)
        self._dead[did] = DeadEntry(did, q.key, _item_priority(item), retries, item[12:],
                                    error, now)

    def _next_seq(self) -> int:
        self._seq_n += -1 if self.lifo else 1
        return self._seq_n

    def _queue(self, key: str) -> _Queue:
        q = self._queues.get(key)
        if q is None:
            q = self._queues[key] = _Queue(key, self.policy)
            # (ties in the ready heap go to the queue created first, as the SQLite
            # store's index orders them: by qid)
            q.created = len(self._by_created)
            self._by_created.append(q)
        return q

    def _settle(self, q: _Queue, now: float) -> None:
        """Put ``q`` in the state (and heap) its fields call for (see
        :func:`.memory_loops._settle`)."""
        _settle(self, q, now)

    def _mark_seen(self, fp: bytes, revisit_at: float | None) -> None:
        if self._bloom is not None:
            self._bloom.add(fp)
            return
        self._seen.add(fp)
        if revisit_at is not None:
            self._revisit[fp] = revisit_at
        elif self._revisit:
            self._revisit.pop(fp, None)

    def _push(self, q: _Queue, item: bytes, now: float) -> None:
        heap = q.heap
        if q.state == _READY:
            improves = item[:4] < heap[0][:4]
            heapq.heappush(heap, item)
            if improves:  # a better head: the ready heap must see its priority
                self._settle(q, now)
        else:
            heapq.heappush(heap, item)
            if q.state == _EMPTY:
                self._settle(q, now)

    def _wake(self, now: float) -> None:
        """Move due scheduled entries, expired leases and rested queues to ready; drop
        named values whose time is up.

        Entries that came due and leases that expired are taken in time order, each
        at its own time: a queue they make ready has waited since then, not since
        whichever call noticed (see sqlite_answers.SQLiteAnswers._wake)."""
        sched = self._scheduled
        expiry = self._expiry
        while True:
            if sched and sched[0][0] <= now and not (expiry and expiry[0][0] < sched[0][0]):
                at, _, key, item = heapq.heappop(sched)
                self._push(self._queue(key), item, at)
            elif expiry and expiry[0][0] <= now:
                at, _, tokens = heapq.heappop(expiry)
                for token in tokens:
                    held = self._leases.get(token)
                    if held is None or held[2] > at:  # answered, or renewed since
                        continue
                    del self._leases[token]
                    q, item, _ = held
                    q.inflight -= 1
                    seq = item[4:10]
                    n = self._expired.get(seq, 0) + 1
                    if n > self.max_redeliveries:
                        del self._expired[seq]
                        self._bury(q, item, _item_retries(item),
                                   expired_error(n, self.max_redeliveries), at)
                    else:
                        self._expired[seq] = n
                        self._counters["redelivered"] += 1
                        heapq.heappush(q.heap, item)  # its old place: the head of its queue
                    self._settle(q, at)
            else:
                break
        resting = self._resting
        while resting and resting[0][0] <= now:
            _, version, key = heapq.heappop(resting)
            q = self._queues[key]
            if q.version == version and q.state == _RESTING:
                self._settle(q, now)
        values, vx = self._values, self._value_expiry
        while vx and vx[0][0] <= now:
            at, name = heapq.heappop(vx)
            got = values.get(name)
            if got is not None and got[1] == at:  # (not put again since, nor dropped)
                del values[name]

    def _check_open(self) -> None:
        if self._closed:
            from ..errors import StoreError

            raise StoreError("the store is closed")

