"""The memory store's per-entry loops and their data: an entry as one bytes item (its
sort prefix, then its payload), a queue (:class:`_Queue`), settling a queue, and add's,
lease's and release's loops over them. They work on a
:class:`~crawlq.stores.memory.MemoryStore` (typed as its core) under its lock.

setup.py compiles this module with mypyc (the one definition, compiled: there is no
other copy of these loops); the .py runs where the build could not compile it."""

from __future__ import annotations

import heapq
import struct
from collections.abc import Sequence
from typing import TYPE_CHECKING, Final

from .base import (
    ACK_DEAD,
    ACK_DONE,
    ACK_REQUEUE,
    ADDED,
    DUPLICATE,
    OVER_BUDGET,
    Ack,
    Entry,
    Leased,
    QueuePolicy,
)

if TYPE_CHECKING:
    from .memory_core import MemoryCore

# An item is bytes: 4 bytes of inverted priority, 6 of sequence, 2 of retries, payload.
# bytes compare lexicographically, so a heap of items is ordered by (priority desc,
# sequence) with no tuple per entry: the reason the memory store stays small.
# (Final names: compiled, they are constants, not looked up in the module's dict)
_PRIO_BIAS: Final = 2**31 - 1
_SEQ_MAX: Final = 2**48 - 1
_READY: Final = 0
_BUSY: Final = 1
_RESTING: Final = 2
_EMPTY: Final = 3
_INF: Final = float("inf")

_PACK: Final = struct.Struct(">IHIH").pack  # inverted priority, sequence (16+32 bits), retries
_heappush: Final = heapq.heappush  # (heapq's functions, bound once)
_heappop: Final = heapq.heappop
# A ready queue's place in line, as bytes (compared by memcmp, the cheapest heap there
# is): inverted priority of its head (4), sign of `since` (1), `since` (8), the queue's
# creation number (8), its version (8). Non-negative doubles compare big-endian as their
# values do; a negative `since` (a caller's clock before 1970) is sign 0 with its bytes
# inverted, so it still comes first and in order.
_READY_KEY: Final = struct.Struct(">IBdQQ").pack
_READY_NEG: Final = struct.Struct(">IBQQQ").pack
_DOUBLE_BITS: Final = struct.Struct(">q").unpack
_DOUBLE: Final = struct.Struct(">d").pack


def _item(priority: int, seq: int, retries: int, payload: bytes) -> bytes:
    return _PACK(_PRIO_BIAS - priority, seq >> 32, seq & 0xFFFFFFFF, retries) + payload


def _item_priority(item: bytes) -> int:
    # (bytes indexing, not int.from_bytes: compiled, it is a native read of each byte)
    return _PRIO_BIAS - ((item[0] << 24) | (item[1] << 16) | (item[2] << 8) | item[3])


def _item_retries(item: bytes) -> int:
    return (item[10] << 8) | item[11]


def _u64(b: bytes, at: int) -> int:
    """The big-endian 8-byte number at ``at`` of ``b`` (in compiled code, native reads)."""
    n = 0
    for i in range(at, at + 8):
        n = (n << 8) | b[i]
    return n


def _ready_key(q: _Queue) -> bytes:
    """``q``'s entry in the ready heap (see _READY_KEY)."""
    pinv = _PRIO_BIAS - _item_priority(q.heap[0])
    since = q.since + 0.0  # (-0.0 becomes 0.0)
    if since >= 0.0:
        return _READY_KEY(pinv, 1, since, q.created, q.version)
    bits: int = _DOUBLE_BITS(_DOUBLE(since))[0]
    return _READY_NEG(pinv, 0, ~bits & 0xFFFFFFFFFFFFFFFF, q.created, q.version)


def _ready_queue(store: MemoryCore, entry: bytes) -> _Queue | None:
    """The queue a ready-heap entry stands for, or None where the entry is stale (the
    queue was settled since: lazy deletion)."""
    q = store._by_created[_u64(entry, 13)]
    if q.version == _u64(entry, 21) and q.state == _READY:
        return q
    return None


def _every(priority: int, retries: int, payload: bytes, not_before: float | None) -> bool:
    """remove_queued's ``where`` of delete_queue."""
    return True


def _add_entries(store: MemoryCore, entries: Sequence[Entry], now: float,
                 out: list[int]) -> tuple[int, int, int]:
    """Add ``entries`` to ``store``, appending each one's verdict to ``out``.

    Returns (added, newly seen, duplicates) and advances the store's sequence; the
    caller counts them. MemoryStore.add's loop (it runs once per URL).
    """
    # (Compiled, out.append is a native list append; bound methods would be calls)
    added = seen_added = dups = 0
    queues = store._queues
    bloom = store._bloom
    seen, revisit = store._seen, store._revisit
    seen_add = seen.add  # (a FingerprintSet or a set: its method, looked up once)
    seq, step = store._seq_n, (-1 if store.lifo else 1)
    for fp, key, prio, payload, not_before, revisit_at, retries in entries:
        q = queues.get(key) or store._queue(key)
        if fp is not None:
            if bloom is None:
                if fp in seen and (not revisit or revisit.get(fp, _INF) > now):
                    out.append(DUPLICATE)
                    dups += 1
                    continue
            elif bloom.contains(fp):
                out.append(DUPLICATE)
                dups += 1
                continue
        cap = q.policy.max_queue_urls
        if cap and q.accepted >= cap:
            out.append(OVER_BUDGET)
            continue
        if fp is not None:
            if bloom is None:
                seen_add(fp)
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
        item = _PACK(_PRIO_BIAS - prio, seq >> 32, seq & 0xFFFFFFFF, retries) + payload
        if not_before is not None and not_before > now:
            _heappush(store._scheduled, (not_before, next(store._ticket), key, item))
        else:  # _push, inlined
            heap = q.heap
            state = q.state
            if state == _READY:
                # (a better head priority: item[:4] < heap[0][:4], as numbers)
                improves = prio > _item_priority(heap[0])
                _heappush(heap, item)
                if improves:  # a better head: the ready heap must see its priority
                    _settle(store, q, now)
            else:
                _heappush(heap, item)
                if state == _EMPTY:
                    _settle(store, q, now)
        out.append(ADDED)
    store._seq_n = seq
    return added, seen_added, dups


def _lease_rounds(store: MemoryCore, out: list[Leased], limit: int, now: float,
                  expires: float) -> None:
    """Lease up to ``limit`` entries (in all, counting those in ``out``) into ``out``.

    The line: the best ready queues, one per lease still wanted. A round-robin over it
    in its order: each queue gives one entry, then those with more and room give one
    more, and so on; the round goes on where it stopped when ``limit`` cuts it short
    and some queues had nothing left. (As a fair share of what is left from each, so
    that one big queue needs few rounds.) The served queues go to the back of the line
    at the end, in their order. MemoryStore.lease's loop; SQLiteStore.lease serves its
    queues the same way.
    """
    ready = store._ready
    pop = _heappop
    line: list[_Queue] = []
    while ready and len(line) < limit - len(out):
        q = _ready_queue(store, pop(ready))
        if q is not None:
            q.state = -1  # served: _settle sends it to the back of the line
            line.append(q)
    _serve_line(store, line, out, limit, now, expires)


def _serve_line(store: MemoryCore, line: list[_Queue], out: list[Leased], limit: int,
                now: float, expires: float) -> None:
    """The round-robin of :func:`_lease_rounds` over ``line`` (queues marked served),
    then each queue settled: the back of the line, or a rest at the end of a session."""
    leases = store._leases
    token = store._token_n
    pop = _heappop
    active = line
    while active and len(out) < limit:
        want = active[: limit - len(out)]
        share = max(1, (limit - len(out)) // len(want))
        for q in want:
            pol = q.policy
            # k = min(share, what is left, room under the cap, what the queue has)
            k = share
            k = min(k, limit - len(out))
            k = min(k, pol.concurrency - q.inflight)
            k = min(k, len(q.heap))
            if pol.session_budget:
                # (at least one: a budget lowered below the session so far (configure)
                # leaves the queue ready for one more, as in the SQLite store)
                k = min(k, max(1, pol.session_budget - q.session))
            heap = q.heap
            key = q.key
            for _ in range(k):
                item: bytes = pop(heap)
                token += 1
                leases[token] = (q, item, expires)
                out.append((token, key, _item_priority(item), _item_retries(item), item[12:],
                            expires))
            q.inflight += k
            q.session += k
        store._token_n = token
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
        _settle(store, q, now)


def _settle(store: MemoryCore, q: _Queue, now: float) -> None:
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
        _heappush(store._resting, (q.ready_at, q.version, q.key))
    else:
        if old == _RESTING:
            q.since = q.ready_at
        elif old != _READY:
            q.since = now
        q.state = _READY
        _heappush(store._ready, _ready_key(q))


def _release_acks(store: MemoryCore, acks: Sequence[Ack], now: float,
                  out: list[bool]) -> None:
    """End the leases ``acks`` answer, appending to ``out`` whether each was still held
    (counted; a late one changes nothing). MemoryStore.release's loop."""
    touched: dict[str, _Queue] = {}
    leases = store._leases
    expired = store._expired
    late = done = failed_n = retried = 0
    for token, kind, duration, not_before, retries, error, failed, delay in acks:
        held = leases.get(token)
        if held is None:
            late += 1
            out.append(False)
            continue
        del leases[token]
        q, item, _ = held
        q.inflight -= 1
        if expired and kind != ACK_REQUEUE:
            expired.pop(item[4:10], None)
        rest = delay if delay is not None else q.policy.delay(duration)
        if rest > 0:
            q.ready_at = max(q.ready_at, now + rest)
            q.session = 0
        if kind == ACK_DONE:
            done += 1
        elif kind == ACK_DEAD:
            store._bury(q, item, retries, error or "", now)
        else:
            if failed:
                failed_n += 1
            retried += 1
            new = item[:10] + retries.to_bytes(2, "big") + item[12:]
            if not_before is not None and not_before > now:
                _heappush(store._scheduled, (not_before, next(store._ticket), q.key, new))
            else:
                _heappush(q.heap, new)
        touched[q.key] = q
        out.append(True)
    c = store._counters
    c["late_acks"] += late
    c["done"] += done
    c["failed"] += failed_n
    c["retried"] += retried
    for q in touched.values():
        _settle(store, q, now)


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


