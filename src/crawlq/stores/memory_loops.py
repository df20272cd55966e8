"""The memory store's per-entry loops and their data: an entry as one bytes item (its
sort prefix, then its payload), a queue (:class:`_Queue`), and add's, lease's and the
line's loops over them (``crawlq._speedups.MemoryLoops`` is their C twin). They work on
a :class:`~crawlq.stores.memory.MemoryStore` under its lock."""

from __future__ import annotations

import heapq
import struct
from collections.abc import Sequence
from typing import TYPE_CHECKING

from .base import (
    ADDED,
    DUPLICATE,
    OVER_BUDGET,
    Entry,
    Leased,
    QueuePolicy,
)

if TYPE_CHECKING:
    from .memory import MemoryStore

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


