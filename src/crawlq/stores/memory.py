"""The memory store: the whole frontier in one process's memory, guarded by a lock.

Fast and small (one bytes object per queued entry: a sort prefix plus the payload),
and gone when the process ends. Use it for tests, short crawls and as the reference
implementation of the Store contract.
"""

from __future__ import annotations

import heapq
import itertools
import struct
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, MutableSet, Sequence
from typing import TYPE_CHECKING, Any

from .._native import native
from ..errors import ConfigError
from ..models import QueueInfo, Stats
from . import dumpfmt
from .base import (
    ACK_DEAD,
    ACK_DONE,
    ACK_REQUEUE,
    ADDED,
    DUPLICATE,
    MAX_REDELIVERIES,
    OVER_BUDGET,
    Ack,
    DeadEntry,
    Entry,
    Leased,
    Pick,
    QueuePolicy,
    check_settings,
    expired_error,
    queue_state,
)
from .bloom import BloomShape, MemoryBloom

if TYPE_CHECKING:
    from .._speedups import FingerprintSet

# An item is bytes: 4 bytes of inverted priority, 6 of sequence, 2 of retries, payload.
# bytes compare lexicographically, so a heap of items is ordered by (priority desc,
# sequence) with no tuple per entry: the reason the memory store stays small.
_PRIO_BIAS = 2**31 - 1
_SEQ_MAX = 2**48 - 1
_READY, _BUSY, _RESTING, _EMPTY = 0, 1, 2, 3


_PACK = struct.Struct(">IHIH").pack  # inverted priority, sequence (16 + 32 bits), retries
_UNPACK_HEAD = struct.Struct(">I6xH").unpack_from  # -> (inverted priority, retries)
_INF = float("inf")


def _item(priority: int, seq: int, retries: int, payload: bytes) -> bytes:
    return _PACK(_PRIO_BIAS - priority, seq >> 32, seq & 0xFFFFFFFF, retries) + payload


def _item_priority(item: bytes) -> int:
    return _PRIO_BIAS - int.from_bytes(item[:4], "big")


def _item_retries(item: bytes) -> int:
    return int.from_bytes(item[10:12], "big")


def _every(priority: int, retries: int, payload: bytes, not_before: float | None) -> bool:
    """remove_queued's ``where`` of delete_queue."""
    return True


def _add_entries(store: MemoryStore, entries: Sequence[Entry], now: float,
                 out: list[int]) -> tuple[int, int, int]:
    """Add ``entries`` to ``store``, appending each one's verdict to ``out``.

    Returns (added, newly seen, duplicates) and advances the store's sequence; the
    caller counts them. The definition of MemoryStore.add's loop (it runs once per URL);
    crawlq._speedups.MemoryLoops.add is its C twin for an exact seen-set.
    """
    append = out.append
    added = seen_added = dups = 0
    queues = store._queues
    bloom = store._bloom
    seen, revisit = store._seen, store._revisit
    push, pack = heapq.heappush, _PACK
    seq, step = store._seq_n, (-1 if store.lifo else 1)
    for fp, key, prio, payload, not_before, revisit_at, retries in entries:
        q = queues.get(key) or store._queue(key)
        if fp is not None:
            if bloom is None:
                if fp in seen and (not revisit or revisit.get(fp, _INF) > now):
                    append(DUPLICATE)
                    dups += 1
                    continue
            elif bloom.contains(fp):
                append(DUPLICATE)
                dups += 1
                continue
        cap = q.policy.max_queue_urls
        if cap and q.accepted >= cap:
            append(OVER_BUDGET)
            continue
        if fp is not None:
            if bloom is None:
                seen.add(fp)
                if revisit_at is not None:
                    revisit[fp] = revisit_at
                elif revisit:
                    revisit.pop(fp, None)
            else:
                bloom.add(fp)
            seen_added += 1
        q.accepted += 1
        added += 1
        seq += step
        item = pack(_PRIO_BIAS - prio, seq >> 32, seq & 0xFFFFFFFF, retries) + payload
        if not_before is not None and not_before > now:
            push(store._scheduled, (not_before, next(store._ticket), key, item))
        else:  # _push, inlined
            heap = q.heap
            state = q.state
            if state == _READY:
                improves = item[:4] < heap[0][:4]
                push(heap, item)
                if improves:  # a better head: the ready heap must see its priority
                    store._settle(q, now)
            else:
                push(heap, item)
                if state == _EMPTY:
                    store._settle(q, now)
        append(ADDED)
    store._seq_n = seq
    return added, seen_added, dups


def _lease_rounds(store: MemoryStore, out: list[Leased], limit: int, now: float,
                  expires: float) -> None:
    """Lease up to ``limit`` entries (in all, counting those in ``out``) into ``out``.

    The line: the best ready queues, one per lease still wanted. A round-robin over it
    in its order: each queue gives one entry, then those with more and room give one
    more, and so on; the round goes on where it stopped when ``limit`` cuts it short
    and some queues had nothing left. (As a fair share of what is left from each, so
    that one big queue needs few rounds.) The served queues go to the back of the line
    at the end, in their order. The definition of MemoryStore.lease's loop;
    crawlq._speedups.MemoryLoops.lease is its C twin (the same heaps, tokens and rows),
    and SQLiteStore.lease serves its queues the same way.
    """
    ready = store._ready
    queues = store._queues
    pop = heapq.heappop
    line: list[_Queue] = []
    while ready and len(line) < limit - len(out):
        _, _, _, version, key = pop(ready)
        q = queues[key]
        if q.version == version and q.state == _READY:
            q.state = -1  # served: _settle sends it to the back of the line
            line.append(q)
    _serve_line(store, line, out, limit, now, expires)


def _serve_line(store: MemoryStore, line: list[_Queue], out: list[Leased], limit: int,
                now: float, expires: float) -> None:
    """The round-robin of :func:`_lease_rounds` over ``line`` (queues marked served),
    then each queue settled: the back of the line, or a rest at the end of a session."""
    leases = store._leases
    tokens = store._tokens
    pop = heapq.heappop
    unpack = _UNPACK_HEAD
    active = line
    while active and len(out) < limit:
        want = active[: limit - len(out)]
        share = max(1, (limit - len(out)) // len(want))
        for q in want:
            pol = q.policy
            k = min(share, limit - len(out), pol.concurrency - q.inflight, len(q.heap))
            if pol.session_budget:
                # (at least one: a budget lowered below the session so far (configure)
                # leaves the queue ready for one more, as in the SQLite store)
                k = min(k, max(1, pol.session_budget - q.session))
            heap = q.heap
            key = q.key
            for _ in range(k):
                item = pop(heap)
                token = next(tokens)
                leases[token] = (q, item, expires)
                pinv, retries = unpack(item)
                out.append((token, key, _PRIO_BIAS - pinv, retries, item[12:], expires))
            q.inflight += k
            q.session += k
        if len(out) >= limit:
            break
        # The next round: those not asked, then those asked that have more and room.
        active = active[len(want):] + [
            q for q in want if q.heap and q.inflight < q.policy.concurrency
            and (not q.policy.session_budget or q.session < q.policy.session_budget)]
    for q in line:
        budget = q.policy.session_budget
        if budget and q.session >= budget:
            # Yield to the others: rest a while, then the back of the line.
            q.session = 0
            q.ready_at = max(q.ready_at, now + q.policy.session_rest)
        store._settle(q, now)


class _Queue:
    __slots__ = ("accepted", "created", "heap", "inflight", "key", "policy", "ready_at",
                 "session", "settings", "since", "state", "version")

    def __init__(self, key: str, policy: QueuePolicy) -> None:
        self.key = key
        self.heap: list[bytes] = []
        self.inflight = 0
        self.ready_at = 0.0
        self.since = 0.0
        self.state = _EMPTY
        self.accepted = 0
        self.session = 0
        self.version = 0
        self.created = 0  # its number in creation order (set by MemoryStore._queue)
        self.settings: dict[str, float] = {}
        self.policy = policy


class MemoryStore:
    """In-process store; see :class:`crawlq.stores.base.Store` for the contract."""

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
        # (-prio, since, created, version, key)
        self._ready: list[tuple[int, float, int, int, str]] = []
        self._resting: list[tuple[float, int, str]] = []  # (ready_at, version, key)
        self._scheduled: list[tuple[float, int, str, bytes]] = []  # (not_before, n, key, item)
        self._leases: dict[int, tuple[_Queue, bytes, float]] = {}
        self._expiry: list[tuple[float, int, list[int]]] = []
        self._dead: dict[int, DeadEntry] = {}
        self._seq_n = _SEQ_MAX // 2  # counts down for LIFO, up for FIFO
        self._tokens = itertools.count(1)
        self._dead_ids = itertools.count(1)
        self._ticket = itertools.count()
        self._created = itertools.count()  # queues, in creation order
        self._counters = dict.fromkeys(
            ("seen", "added", "done", "failed", "retried", "dead", "redelivered",
             "late_acks", "duplicates"), 0)
        self._rejected: dict[str, int] = {}
        self._values: dict[str, tuple[bytes, float | None]] = {}  # name -> (value, expires)
        self._value_expiry: list[tuple[float, str]] = []  # (heap) expires, name
        self._closed = False
        # add's, lease's and release's loops in C where built (their twins: _add_entries,
        # _lease_rounds and release's loop); add's only for an exact seen-set (a Bloom
        # filter takes Python's), release's only for plain acknowledgements.
        loops = native("MemoryLoops")
        if loops is not None:
            loops = loops(_Queue, _PRIO_BIAS, (_READY, _BUSY, _RESTING, _EMPTY),
                          (ADDED, DUPLICATE, OVER_BUDGET), ACK_DONE)
        self._rounds: Callable[[MemoryStore, list[Leased], int, float, float], None] = (
            _lease_rounds if loops is None else loops.lease)
        self._adder: Callable[[MemoryStore, Sequence[Entry], float, list[int]],
                              tuple[int, int, int]] | None = (
            None if loops is None or bloom else loops.add)
        self._release: Callable[[MemoryStore, Sequence[Ack], float, list[bool]],
                                tuple[int, int] | None] | None = (
            None if loops is None else loops.release)

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
            q.created = next(self._created)
        return q

    def _settle(self, q: _Queue, now: float) -> None:
        """Put ``q`` in the state (and heap) that its fields call for.

        Bumping the version invalidates the queue's older heap entries (lazy deletion).
        A queue keeps its place in line while it stays ready; one that just became
        ready has waited since its rest ended; one just served goes to the back
        (callers mark that by setting ``state = -1`` first).
        """
        old = q.state
        q.version += 1
        if not q.heap:
            q.state = _EMPTY
        elif q.inflight >= q.policy.concurrency:
            q.state = _BUSY
        elif q.ready_at > now:
            q.state = _RESTING
            heapq.heappush(self._resting, (q.ready_at, q.version, q.key))
        else:
            if old == _RESTING:
                q.since = q.ready_at
            elif old != _READY:
                q.since = now
            q.state = _READY
            heapq.heappush(self._ready, (-_item_priority(q.heap[0]), q.since, q.created,
                                         q.version, q.key))

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

    # -- the contract --------------------------------------------------------------

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

    def block(self, queue: str, until: float, now: float) -> None:
        """See :meth:`Store.block`."""
        with self._lock:
            self._check_open()
            q = self._queue(queue)
            if until > q.ready_at:
                q.ready_at = until
                if q.state in (_READY, _RESTING):
                    self._settle(q, now)

    def configure_queue(self, queue: str, settings: Mapping[str, float | None],
                        now: float) -> None:
        """See :meth:`Store.configure_queue`."""
        clean = check_settings(settings)
        with self._lock:
            self._check_open()
            q = self._queue(queue)
            for k, v in clean.items():
                if v is None:
                    q.settings.pop(k, None)
                else:
                    q.settings[k] = v
            q.policy = self.policy.merged(q.settings)
            if q.state != _EMPTY:
                self._settle(q, now)

    def set_policy(self, policy: QueuePolicy) -> None:
        """See :meth:`QueueAdmin.set_policy`."""
        with self._lock:
            self.policy = policy
            for q in self._queues.values():
                q.policy = policy.merged(q.settings)

    def count_rejected(self, reasons: Mapping[str, int]) -> None:
        """See :meth:`Store.count_rejected`."""
        with self._lock:
            for r, n in reasons.items():
                self._rejected[r] = self._rejected.get(r, 0) + n

    def count_duplicates(self, n: int) -> None:
        """See :meth:`Store.count_duplicates`."""
        with self._lock:
            self._counters["duplicates"] += n

    def put_values(self, items: Sequence[tuple[str, bytes, float | None]]) -> None:
        """See :meth:`Store.put_values`."""
        with self._lock:
            self._check_open()
            for name, value, expires in items:
                self._keep_value(name, value, expires)

    def _keep_value(self, name: str, value: bytes, expires: float | None) -> None:
        self._values[name] = (value, expires)
        if expires is not None:
            heapq.heappush(self._value_expiry, (expires, name))

    def drop_values(self, names: Sequence[str]) -> None:
        """See :meth:`Store.drop_values`."""
        with self._lock:
            self._check_open()
            for name in names:
                self._values.pop(name, None)

    def get_values(self, names: Sequence[str], now: float) -> list[bytes | None]:
        """See :meth:`Store.get_values`."""
        with self._lock:
            self._check_open()
            out: list[bytes | None] = []
            for name in names:
                got = self._values.get(name)
                out.append(None if got is None or (got[1] is not None and got[1] <= now)
                           else got[0])
            return out

    def _info(self, q: _Queue, now: float) -> QueueInfo:
        return QueueInfo(q.key, len(q.heap), q.inflight, q.ready_at, q.accepted,
                         queue_state(len(q.heap), q.inflight, q.ready_at,
                                     q.policy.concurrency, now),
                         dict(q.settings))

    def stats(self, now: float, per_queue: int = 0) -> Stats:
        """See :meth:`Store.stats`."""
        with self._lock:
            self._check_open()
            self._wake(now)
            queued = ready = resting = exhausted = 0
            for q in self._queues.values():
                n = len(q.heap)
                queued += n
                if n == 0:
                    exhausted += 1
                elif q.state == _READY:
                    ready += 1
                else:
                    resting += 1
            c = self._counters
            return Stats(
                seen=c["seen"], added=c["added"], queued=queued + len(self._scheduled),
                scheduled=len(self._scheduled), leased=len(self._leases), done=c["done"],
                failed=c["failed"], retried=c["retried"], dead=len(self._dead),
                redelivered=c["redelivered"], late_acks=c["late_acks"],
                duplicates=c["duplicates"], rejected=dict(self._rejected),
                queues_total=len(self._queues), queues_ready=ready,
                queues_resting=resting, queues_exhausted=exhausted,
                per_queue=tuple(self.queues(now, per_queue)) if per_queue else (),
            )

    def queues(self, now: float, limit: int = 100) -> list[QueueInfo]:
        """See :meth:`Store.queues`."""
        with self._lock:
            self._check_open()
            best = heapq.nlargest(limit, self._queues.values(),
                                  key=lambda q: (len(q.heap), q.inflight))
            return [self._info(q, now) for q in best]

    def dead(self, limit: int = 100) -> list[DeadEntry]:
        """See :meth:`Store.dead`."""
        with self._lock:
            return list(itertools.islice(self._dead.values(), limit))

    def delete_queue(self, queue: str, now: float) -> int:
        """See :meth:`QueueAdmin.delete_queue`."""
        return self.remove_queued(queue, _every, now)

    def remove_queued(self, queue: str, where: Pick, now: float) -> int:
        """See :meth:`QueueAdmin.remove_queued`."""
        with self._lock:
            self._check_open()
            self._wake(now)
            q = self._queues.get(queue)
            if q is None:
                return 0
            # (all picked first: an error in ``where`` leaves everything as it was)
            gone = {it for it in q.heap
                    if where(_item_priority(it), _item_retries(it), it[12:], None)}
            sched = self._scheduled
            tickets = {s[1] for s in sched if s[2] == queue and where(
                _item_priority(s[3]), _item_retries(s[3]), s[3][12:], s[0])}
            # (the lists changed in place: they are shared by reference)
            if gone:
                q.heap[:] = [it for it in q.heap if it not in gone]
                heapq.heapify(q.heap)
            if tickets:
                sched[:] = [s for s in sched if s[1] not in tickets]
                heapq.heapify(sched)
            if gone:
                self._settle(q, now)
            return len(gone) + len(tickets)

    def requeue_dead(self, ids: Iterable[int] | None, now: float) -> int:
        """See :meth:`Store.requeue_dead`."""
        with self._lock:
            self._check_open()
            chosen = list(self._dead) if ids is None else [i for i in ids if i in self._dead]
            for i in chosen:
                d = self._dead.pop(i)
                q = self._queue(d.queue)
                self._push(q, _item(d.priority, self._next_seq(), 0, d.payload), now)
            return len(chosen)

    def dump(self) -> Iterator[dict[str, Any]]:
        """See :meth:`Store.dump`."""
        with self._lock:
            self._check_open()
            records = list(self._dump_records())
        yield from records

    def _dump_records(self) -> Iterator[dict[str, Any]]:
        c = dict(self._counters)
        c["dead"] = len(self._dead)
        yield dumpfmt.counters(c, self._rejected)
        for q in self._queues.values():
            yield dumpfmt.queue(q.key, q.accepted, q.ready_at, q.settings)
            for item in q.heap:
                yield dumpfmt.entry(q.key, _item_priority(item),
                                    int.from_bytes(item[10:12], "big"), item[12:], None)
        for q, item, _ in self._leases.values():
            yield dumpfmt.entry(q.key, _item_priority(item),
                                int.from_bytes(item[10:12], "big"), item[12:], None)
        for nb, _, key, item in self._scheduled:
            yield dumpfmt.entry(key, _item_priority(item),
                                int.from_bytes(item[10:12], "big"), item[12:], nb)
        for d in self._dead.values():
            yield dumpfmt.dead(d)
        if self._bloom is not None:
            yield dumpfmt.bloom(self._bloom.bits)
        # In key order (as the SQLite store's): the same dump whichever set holds them.
        for fp in sorted(self._seen):
            yield dumpfmt.seen(fp, self._revisit.get(fp))

    def load(self, records: Iterable[dict[str, Any]]) -> int:
        """See :meth:`Store.load`."""
        n = 0
        with self._lock:
            self._check_open()
            for rec in records:
                n += dumpfmt.apply(self, rec)
        return n

    # Primitive writers used by dumpfmt.apply (load); not part of the contract.

    def _load_seen(self, fp: bytes, revisit_at: float | None) -> None:
        self._mark_seen(fp, revisit_at)

    def _load_bloom(self, bits: bytes) -> None:
        if self._bloom is None or len(bits) != len(self._bloom.bits):
            raise ConfigError("dump has a Bloom filter of another shape than this store")
        for i, b in enumerate(bits):
            self._bloom.bits[i] |= b

    def _load_entry(self, key: str, priority: int, retries: int, payload: bytes,
                    not_before: float | None) -> None:
        q = self._queue(key)
        item = _item(priority, self._next_seq(), retries, payload)
        if not_before is not None:
            heapq.heappush(self._scheduled, (not_before, next(self._ticket), key, item))
        else:
            self._push(q, item, 0.0)

    def _load_queue(self, key: str, accepted: int, ready_at: float,
                    settings: Mapping[str, float]) -> None:
        q = self._queue(key)
        q.accepted = max(q.accepted, accepted)
        q.ready_at = max(q.ready_at, ready_at)
        q.settings.update(settings)
        q.policy = self.policy.merged(q.settings)
        if q.state in (_READY, _RESTING):
            self._settle(q, 0.0)

    def _load_dead(self, queue: str, priority: int, retries: int, payload: bytes,
                   error: str, died_at: float) -> None:
        did = next(self._dead_ids)
        self._dead[did] = DeadEntry(did, queue, priority, retries, payload, error, died_at)

    def _load_counters(self, counters: Mapping[str, int], rejected: Mapping[str, int]) -> None:
        for k, v in counters.items():
            if k in self._counters and k != "dead":
                self._counters[k] += int(v)
        for r, v in rejected.items():
            self._rejected[r] = self._rejected.get(r, 0) + int(v)

    def _load_value(self, name: str, data: bytes, expires: float | None) -> None:
        self._keep_value(name, data, expires)

    def _check_open(self) -> None:
        if self._closed:
            from ..errors import StoreError

            raise StoreError("the store is closed")

    def close(self) -> None:
        """See :meth:`Store.close`."""
        self._closed = True
