"""The memory store's queues (:class:`MemoryQueues`): every queued, scheduled and leased
entry, the seen-set, the ready line and the rests, and the calls of a crawl on them
(add, lease, renew, release, waking). :class:`~crawlq.stores.memory.MemoryStore` holds
one and calls it under its lock; the rules a queue follows are :mod:`.rules`'.

An entry is one bytes object (:func:`make_item`): 4 bytes of inverted priority, 6 of
sequence, 2 of retries, then its payload. bytes compare lexicographically, so a heap of
items is ordered by (priority desc, sequence) with no tuple per entry: the reason the
memory store stays small.

setup.py compiles this module with mypyc (the one definition, compiled: these loops run
once per URL); the .py runs where the build could not compile it.
"""

from __future__ import annotations

import heapq
import itertools
import struct
from collections.abc import MutableSet, Sequence
from typing import TYPE_CHECKING, Any, Final

from .._native import native
from ..policies.domains import domain_of
from .base import (
    ACK_REQUEUE,
    ADDED,
    DUPLICATE,
    OVER_BUDGET,
    Ack,
    DeadEntry,
    Entry,
    Leased,
    QueuePolicy,
    expired_error,
)
from .bloom import BloomShape, MemoryBloom
from .rules import (
    DIES,
    EXHAUSTED,
    GONE,
    HEAD,
    LATER,
    READY,
    RESTING,
    TAIL,
    answer_place,
    answer_rest,
    domain_refusal,
    domain_room,
    entry_rank,
    event_times,
    expired_once,
    groups,
    is_parked,
    joins_line,
    lease_room,
    over_cap,
    park,
    rested,
    rounds,
    served,
    settled,
    share_domains,
)

if TYPE_CHECKING:
    from .._speedups import FingerprintSet

# (Final names: compiled, they are constants, not looked up in the module's dict)
_PRIO_BIAS: Final = 2**31 - 1
_SEQ_MID: Final = 2**47  # an item's sequence is this plus its rank (rules.entry_rank)
_SERVED: Final = -1  # a queue's state while a lease call serves it (see MemoryQueues.settle)
_INF: Final = float("inf")

_PACK: Final = struct.Struct(">IHIH").pack  # inverted priority, sequence (16+32 bits), retries
_SEQ: Final = struct.Struct(">HI").pack  # a sequence (16+32 bits)
_heappush: Final = heapq.heappush  # (heapq's functions, bound once)
_heappop: Final = heapq.heappop
# A ready queue's place in line, as bytes (compared by memcmp, the cheapest heap there
# is): inverted priority of its head (4), sign of `since` (1), `since` (8), its key
# (UTF-8, then a NUL: ties go by key), then its creation number (8), to find it. An
# entry is current while it is the one its queue holds (MemoryQueue.entry): older ones
# are skipped when they come up (lazy deletion). Non-negative doubles compare big-endian
# as their values do; a negative `since` (a caller's clock before 1970) is sign 0 with
# its bytes inverted, so it still comes first and in order.
_READY_KEY: Final = struct.Struct(">IBd").pack
_READY_NEG: Final = struct.Struct(">IBQ").pack
_CREATED: Final = struct.Struct(">Q").pack
_DOUBLE_BITS: Final = struct.Struct(">q").unpack
_DOUBLE: Final = struct.Struct(">d").pack


def make_item(priority: int, seq: int, retries: int, payload: bytes) -> bytes:
    """An entry as the memory store keeps it (see the module's docstring)."""
    return _PACK(_PRIO_BIAS - priority, seq >> 32, seq & 0xFFFFFFFF, retries) + payload


def item_priority(item: bytes) -> int:
    """An item's priority."""
    # (bytes indexing, not int.from_bytes: compiled, it is a native read of each byte)
    return _PRIO_BIAS - ((item[0] << 24) | (item[1] << 16) | (item[2] << 8) | item[3])


def item_retries(item: bytes) -> int:
    """An item's retry count."""
    return (item[10] << 8) | item[11]


def _with_seq(item: bytes, seq: int) -> bytes:
    """``item`` with sequence ``seq`` (its place among its priority's entries)."""
    return item[:4] + _SEQ(seq >> 32, seq & 0xFFFFFFFF) + item[10:]


def _first(t: tuple[int, MemoryQueue, bytes]) -> int:
    return t[0]


def _u64(b: bytes, at: int) -> int:
    """The big-endian 8-byte number at ``at`` of ``b`` (in compiled code, native reads)."""
    n = 0
    for i in range(at, at + 8):
        n = (n << 8) | b[i]
    return n


def ready_key(q: MemoryQueue) -> bytes:
    """``q``'s entry in the ready heap: orders queues by best head priority, then
    longest waiting, then key (see _READY_KEY)."""
    pinv = _PRIO_BIAS - item_priority(q.heap[0])
    since = q.since + 0.0  # (-0.0 becomes 0.0)
    if since >= 0.0:
        return _READY_KEY(pinv, 1, since) + q.name
    bits: int = _DOUBLE_BITS(_DOUBLE(since))[0]
    return _READY_NEG(pinv, 0, ~bits & 0xFFFFFFFFFFFFFFFF) + q.name


class MemoryDomain:
    """The counters of one domain of the memory store (see :mod:`.rules`), and its
    parked queues."""

    inflight: int
    accepted: int
    queues: int
    parked: list[tuple[float, bytes]]

    def __init__(self) -> None:
        self.inflight = 0  # leases of its queues in flight
        self.accepted = 0  # entries its queues accepted
        self.queues = 0  # queues it has
        # (heap) its parked queues: (the end of the rest parking gave it, its name):
        # the longest parked first, then by key (MemoryQueue.name starts with it)
        self.parked = []


class MemoryQueue:
    """One queue of the memory store: its entries (a heap of items) and its counters."""

    key: str
    domain: MemoryDomain
    name: bytes
    entry: bytes
    heap: list[bytes]
    inflight: int
    ready_at: float
    since: float
    state: int
    accepted: int
    session: int
    version: int
    created: int
    settings: dict[str, float]
    policy: QueuePolicy
    parked: float

    def __init__(self, key: str, policy: QueuePolicy, created: int,
                 domain: MemoryDomain) -> None:
        self.key = key
        self.domain = domain
        # (the end of its ready-heap entries: its key, then its creation number)
        self.name = key.encode("utf-8", "surrogateescape") + b"\0" + _CREATED(created)
        self.entry = b""  # its current entry in the ready heap
        self.heap = []
        self.inflight = 0
        self.ready_at = 0.0
        self.since = 0.0
        self.state = EXHAUSTED
        self.accepted = 0
        self.session = 0
        self.version = 0  # bumped at each settle: older resting-heap entries are stale
        self.created = created  # its number in creation order
        self.parked = 0.0  # the end of the rest parking gave it (see rules; 0: none)
        self.settings = {}  # its overrides of the store's policy
        self.policy = policy


class MemoryQueues:
    """The memory store's entries and queues, and the calls of a crawl on them. The
    caller holds the store's lock; every method takes the caller's clock ``now``."""

    policy: QueuePolicy
    lifo: bool
    max_redeliveries: int
    seen: Any  # a FingerprintSet or a set of bytes (see __init__)
    revisit: dict[bytes, float]
    bloom: MemoryBloom | None
    queues: dict[str, MemoryQueue]
    domains: dict[str, MemoryDomain]
    grouped: bool
    nowhere: MemoryDomain
    by_created: list[MemoryQueue]
    ready: list[bytes]
    resting: list[tuple[float, int, int]]
    scheduled: list[tuple[float, int, str, bytes]]
    leases: dict[int, tuple[MemoryQueue, bytes, float]]
    expiry: list[tuple[float, int, list[int]]]
    expired: dict[bytes, int]
    dead: dict[int, DeadEntry]
    counters: dict[str, int]
    n: int
    token: int

    def __init__(self, policy: QueuePolicy, lifo: bool, bloom: BloomShape | None,
                 max_redeliveries: int) -> None:
        self.policy = policy
        self.lifo = lifo
        self.max_redeliveries = max_redeliveries
        # The exact seen-set: a FingerprintSet where the C extension is built (about 30
        # bytes per fingerprint against ~90 in a set of bytes, and not walked by the
        # garbage collector), else a set; both answer `in`, add(), len() and iteration.
        fpset = native("FingerprintSet")
        seen: MutableSet[bytes] | FingerprintSet = set() if fpset is None else fpset()
        self.seen = seen
        self.revisit = {}
        self.bloom = MemoryBloom(bloom) if bloom else None
        self.queues = {}
        self.domains = {}  # domain_of(key) -> its counters
        self.grouped = groups(policy)
        self.nowhere = MemoryDomain()  # every queue's, while no domain rule is on
        self.by_created = []  # queues in creation order (q.created)
        self.ready = []  # (heap) ready_key of ready queues
        self.resting = []  # (heap) (ready_at, version, q.created)
        self.scheduled = []  # (heap) (not_before, ticket, key, item)
        self.leases = {}  # token -> (queue, item, expires)
        self.expiry = []  # (heap) (expires, first token, tokens of one call or renewal)
        # an entry's sequence bytes (item[4:10]) -> how many of its leases expired;
        # only entries that had one are here (see wake)
        self.expired = {}
        self.dead = {}
        self.counters = dict.fromkeys(
            ("seen", "added", "done", "failed", "retried", "dead", "redelivered",
             "late_acks", "duplicates"), 0)
        self.n = 0  # entries numbered (rules.entry_rank)
        self.token = 0  # the last lease token given
        self._tickets = itertools.count()
        self._dead_ids = itertools.count(1)

    # -- queues and entries ---------------------------------------------------------

    def queue(self, key: str) -> MemoryQueue:
        """The queue ``key``, made (exhausted) if it does not exist."""
        q = self.queues.get(key)
        if q is None:
            # (ties in the ready heap go to the queue created first, as the SQLite
            # store's index orders them: by qid)
            domain = self.domain(key) if self.grouped else self.nowhere
            q = self.queues[key] = MemoryQueue(key, self.policy, len(self.by_created),
                                               domain)
            domain.queues += 1
            self.by_created.append(q)
        return q

    def domain(self, key: str) -> MemoryDomain:
        """The counters of queue ``key``'s domain, made if they do not exist."""
        name = domain_of(key)
        d = self.domains.get(name)
        if d is None:
            d = self.domains[name] = MemoryDomain()
        return d

    def set_policy(self, policy: QueuePolicy) -> None:
        """Make ``policy`` the store's; queues keep their overrides. Domain rules turned
        on give every queue its domain and count them anew (see :func:`.rules.groups`)."""
        self.policy = policy
        for q in self.queues.values():
            q.policy = policy.merged(q.settings)
        grouped = groups(policy)
        if grouped and not self.grouped:
            self.domains = {}
            for q in self.queues.values():
                d = q.domain = self.domain(q.key)
                d.queues += 1
                d.accepted += q.accepted
                d.inflight += q.inflight
        elif self.grouped and not grouped:
            self.domains = {}
            for q in self.queues.values():
                q.domain = self.nowhere
        self.grouped = grouped

    def unpark(self, freed: dict[MemoryDomain, int], now: float) -> None:
        """Make ready again, per domain, as many of its parked queues as it ended
        leases (``freed``), the longest parked first (see rules)."""
        for domain, n in freed.items():
            parked = domain.parked
            while n > 0 and parked:
                until, name = _heappop(parked)
                q = self.by_created[_u64(name, len(name) - 8)]
                # (an entry is stale once its queue's park ended or was made anew)
                if q.parked == until and q.domain is domain and self.unpark_one(q, now):
                    self.settle(q, now)
                    n -= 1

    def unpark_one(self, q: MemoryQueue, now: float) -> bool:
        """End the park of ``q``, if it is parked, at ``now`` (before a rest or a block
        applies to it: the park's end must not absorb theirs); whether it was. A park
        that ended by ``now`` is over (the queue was ready since its end)."""
        if is_parked(q.state, q.ready_at, q.parked, now):
            q.ready_at = now
            q.parked = 0.0
            return True
        return False

    def forget(self, q: MemoryQueue) -> None:
        """Drop ``q``, which holds nothing (no entry, lease or dead entry) and is
        exhausted: its heap entries are stale already."""
        del self.queues[q.key]
        q.domain.queues -= 1

    def number(self, place: int) -> int:
        """The sequence of the next entry numbered, put at ``place`` (rules.TAIL, HEAD
        or LAST)."""
        self.n += 1
        return _SEQ_MID + entry_rank(self.n, self.lifo, place)

    def schedule(self, not_before: float, key: str, item: bytes) -> None:
        """Keep ``item`` of queue ``key`` until ``not_before``."""
        _heappush(self.scheduled, (not_before, next(self._tickets), key, item))

    def mark_seen(self, fp: bytes, revisit_at: float | None) -> None:
        """Add ``fp`` to the seen-set, due again at ``revisit_at`` (None: never)."""
        if self.bloom is not None:
            self.bloom.add(fp)
            return
        self.seen.add(fp)
        if revisit_at is not None:
            self.revisit[fp] = revisit_at
        elif self.revisit:
            self.revisit.pop(fp, None)

    def push(self, q: MemoryQueue, item: bytes, now: float) -> None:
        """Queue ``item`` in ``q`` and settle ``q`` where that changes its place."""
        heap = q.heap
        state = q.state
        if state == READY:
            improves = item[:4] < heap[0][:4]
            _heappush(heap, item)
            if improves:  # a better head: the ready heap must see its priority
                self.settle(q, now)
        else:
            _heappush(heap, item)
            if state == EXHAUSTED:
                self.settle(q, now)

    def bury(self, q: MemoryQueue, item: bytes, retries: int, error: str,
             now: float) -> None:
        """Keep an entry of ``q`` as dead (counted as a failure)."""
        self.counters["dead"] += 1
        self.counters["failed"] += 1
        self.keep_dead(q.key, item_priority(item), retries, item[12:], error, now)

    def keep_dead(self, queue: str, priority: int, retries: int, payload: bytes,
                  error: str, died_at: float) -> None:
        """Keep a dead entry under a new id."""
        did = next(self._dead_ids)
        self.dead[did] = DeadEntry(did, queue, priority, retries, payload, error, died_at)

    def settle(self, q: MemoryQueue, now: float) -> None:
        """Put ``q`` in the state (and heap) its fields call for (:func:`.rules.state_of`).

        A new ready-heap entry (MemoryQueue.entry), or a bumped version (the resting
        heap's), makes the queue's older heap entries stale (lazy deletion).
        A queue keeps its place in line while it stays ready (:func:`.rules.ready_since`);
        one just served goes to the back (callers mark that by setting ``state`` to
        _SERVED first).
        """
        old = q.state
        q.version += 1
        state, since = settled(old, old == _SERVED, len(q.heap), q.inflight,
                               q.policy.concurrency, q.since, q.ready_at, now)
        q.state = state
        if state == RESTING:
            _heappush(self.resting, (q.ready_at, q.version, q.created))
        elif state == READY:
            q.since = since
            entry = ready_key(q)
            q.entry = entry
            _heappush(self.ready, entry)

    def ready_queue(self, entry: bytes) -> MemoryQueue | None:
        """The queue a ready-heap entry stands for, or None where the entry is stale (the
        queue was settled since: lazy deletion)."""
        q = self.by_created[_u64(entry, len(entry) - 8)]
        if q.entry is entry and q.state == READY:
            return q
        return None

    # -- the calls of a crawl ----------------------------------------------------------

    def add(self, entries: Sequence[Entry], now: float, out: list[int]) -> dict[int, int]:
        """Add ``entries``, appending each one's verdict to ``out``; counts them.
        Returns how many were refused, by verdict (base.REFUSALS). (It runs once per URL.)"""
        # (Compiled, out.append is a native list append; bound methods would be calls)
        added = seen_added = dups = 0
        refused: dict[int, int] = {}
        policy = self.policy
        grouped = self.grouped
        url_cap = policy.max_domain_urls > 0
        queues = self.queues
        bloom = self.bloom
        seen, revisit = self.seen, self.revisit
        seen_add = seen.add  # (a FingerprintSet or a set: its method, looked up once)
        n, lifo = self.n, self.lifo
        for fp, key, prio, payload, not_before, revisit_at, retries in entries:
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
            q = queues.get(key)
            if q is None:  # a new queue: its domain may have as many as it takes
                if grouped:
                    domain = self.domain(key)
                    verdict = domain_refusal(policy, domain.accepted, domain.queues, True)
                    if verdict:
                        out.append(verdict)
                        refused[verdict] = refused.get(verdict, 0) + 1
                        continue
                q = self.queue(key)
                domain = q.domain
            else:
                domain = q.domain
                verdict = OVER_BUDGET if over_cap(q.policy, q.accepted) else 0
                if url_cap and not verdict:
                    verdict = domain_refusal(policy, domain.accepted, domain.queues, False)
                if verdict:
                    out.append(verdict)
                    refused[verdict] = refused.get(verdict, 0) + 1
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
            domain.accepted += 1
            added += 1
            n += 1
            seq = _SEQ_MID - n if lifo else _SEQ_MID + n  # (rules.entry_rank, TAIL)
            item = _PACK(_PRIO_BIAS - prio, seq >> 32, seq & 0xFFFFFFFF, retries) + payload
            if not_before is not None and not_before > now:
                _heappush(self.scheduled, (not_before, next(self._tickets), key, item))
            else:  # push, inlined (a call per URL costs add about a tenth of its speed)
                heap = q.heap
                state = q.state
                if state == READY:
                    # (a better head priority: item[:4] < heap[0][:4], as numbers)
                    improves = prio > item_priority(heap[0])
                    _heappush(heap, item)
                    if improves:  # a better head: the ready heap must see its priority
                        self.settle(q, now)
                else:
                    _heappush(heap, item)
                    if state == EXHAUSTED:
                        self.settle(q, now)
            out.append(ADDED)
        self.n = n
        c = self.counters
        c["added"] += added
        c["seen"] += seen_added
        c["duplicates"] += dups
        return refused

    def lease(self, now: float, limit: int, expires: float, queue: str | None,
              out: list[Leased]) -> None:
        """Lease up to ``limit`` entries into ``out`` (from ``queue`` only, if given).

        The line: the best ready queues, one per lease wanted. A round-robin over it in
        its order: each queue gives one entry, then those with more and room
        (:func:`.rules.lease_room`) give one more, and so on; the round goes on where
        it stopped when ``limit`` cuts it short and some queues had nothing left. (As a
        fair share of what is left from each, so that one big queue needs few rounds.)
        The served queues go to the back of the line at the end, in their order; the
        SQLite store serves its queues the same way.
        """
        self.wake(now)
        again = True
        while again and len(out) < limit:
            # (passes: a queue whose session ended without a rest is ready again at
            # once, behind the others, and may give more in this call)
            again = self._lease_pass(now, limit, expires, queue, out)
        if out:
            # One expiry record per call: the leases of a call expire together.
            _heappush(self.expiry, (expires, out[0][0], [le[0] for le in out]))

    def _lease_pass(self, now: float, limit: int, expires: float, queue: str | None,
                    out: list[Leased]) -> bool:
        """One pass of :meth:`lease` over the ready line; whether a queue it served is
        ready again."""
        line: list[MemoryQueue] = []
        # A queue joins the line if its domain has room for one more lease than the
        # queues of that domain ahead of it in the line will take (one each, at least).
        capped = self.policy.domain_concurrency > 0
        ahead: dict[MemoryDomain, int] = {}
        if queue is None:
            ready = self.ready
            while ready and len(line) < limit - len(out):
                q = self.ready_queue(_heappop(ready))
                if q is not None and (not capped or self._domain_admits(q, ahead, now)):
                    line.append(q)
        else:
            got = self.queues.get(queue)
            if got is not None and got.state == READY and (
                    not capped or self._domain_admits(got, ahead, now)):
                line.append(got)  # (its place in the ready heap: dropped by settle)
        rooms = [lease_room(q.policy, q.inflight, q.session, len(q.heap)) for q in line]
        for q in line:
            q.state = _SERVED  # served: settle sends it to the back of the line
        if ahead:  # (capped domains in the line: their queues share the domain's room)
            share_domains(rooms, [id(q.domain) for q in line],
                          {id(q.domain): domain_room(q.policy, q.domain.inflight)
                           for q in line})
        leases = self.leases
        token = self.token
        for each in rounds(rooms, limit - len(out)):
            for i, k in each:
                q = line[i]
                heap = q.heap
                key = q.key
                for _ in range(k):
                    item: bytes = _heappop(heap)
                    token += 1
                    leases[token] = (q, item, expires)
                    out.append((token, key, item_priority(item), item_retries(item),
                                item[12:], expires))
                q.inflight += k
                q.domain.inflight += k
                q.session += k
        self.token = token
        again = False
        for q in line:
            q.ready_at, q.session, spent = served(q.policy, q.ready_at, q.session, now)
            self.settle(q, now)
            if spent:
                # (it may be ready again at once; one still ready for another reason,
                # its domain full, waits for the next call)
                again = True
        return again

    def _domain_admits(self, q: MemoryQueue, ahead: dict[MemoryDomain, int],
                       now: float) -> bool:
        """Whether ready queue ``q`` joins a lease call's line, its domain having room
        for one more lease than ``ahead`` (domain -> its queues in the line already)
        counts; else it is parked (see rules), not served."""
        domain = q.domain
        n = ahead.get(domain, 0)
        if not joins_line(q.policy, domain.inflight, n):
            q.ready_at, until = park(q.ready_at, now)
            if until:
                q.parked = until
                _heappush(domain.parked, (until, q.name))
            self.settle(q, now)
            return False
        ahead[domain] = n + 1
        return True

    def renew(self, tokens: Sequence[int], expires: float, now: float) -> list[bool]:
        """Move the leases ``tokens`` still held to ``expires`` (never earlier)."""
        self.wake(now)
        out = []
        leases = self.leases
        for token in tokens:
            held = leases.get(token)
            out.append(held is not None)
            if held is not None and expires > held[2]:
                leases[token] = (held[0], held[1], expires)
                _heappush(self.expiry, (expires, token, [token]))
        return out

    def release(self, acks: Sequence[Ack], now: float, out: list[bool]) -> None:
        """End the leases ``acks`` answer, appending to ``out`` whether each was still
        held (counted; a late one changes nothing). What came due is woken first: an
        answer after its lease's expiry is late, whether or not a call noticed the
        expiry before."""
        self.wake(now)
        touched: dict[str, MemoryQueue] = {}
        leases = self.leases
        expired = self.expired
        back: list[tuple[int, MemoryQueue, bytes]] = []  # (token, queue, item) back at once
        late = done = failed_n = retried = 0
        freed: dict[MemoryDomain, int] = {}  # (with a domain cap: leases ended per domain)
        capped = self.policy.domain_concurrency > 0
        for token, kind, duration, not_before, retries, error, failed, delay in acks:
            held = leases.get(token)
            if held is None:
                late += 1
                out.append(False)
                continue
            del leases[token]
            q, item, _ = held
            q.inflight -= 1
            q.domain.inflight -= 1
            if capped:
                freed[q.domain] = freed.get(q.domain, 0) + 1
                if q.parked:  # (a host parked with a lease of its own out: it rests
                    self.unpark_one(q, now)  # from this answer, not the park's end)
            if expired and kind != ACK_REQUEUE:
                expired.pop(item[4:10], None)
            # (several answers of a queue in one call: it rests the longest of theirs)
            q.ready_at, q.session = rested(q.ready_at, q.session, now,
                                           answer_rest(q.policy, duration, delay))
            place = answer_place(kind, not_before, now)
            if place == GONE:
                done += 1
            elif place == DIES:
                self.bury(q, item, retries, error or "", now)
            else:
                if failed:
                    failed_n += 1
                retried += 1
                new = item[:10] + retries.to_bytes(2, "big") + item[12:]
                if place == LATER:
                    self.schedule(now if not_before is None else not_before, q.key, new)
                else:
                    back.append((token, q, new))
            touched[q.key] = q
            out.append(True)
        if back:
            self._back_at_head(back)
        c = self.counters
        c["late_acks"] += late
        c["done"] += done
        c["failed"] += failed_n
        c["retried"] += retried
        for q in touched.values():
            self.settle(q, now)
        if freed:
            self.unpark(freed, now)

    def _back_at_head(self, back: list[tuple[int, MemoryQueue, bytes]]) -> None:
        """Entries that come back at once (token, queue, item), each ahead of its
        priority's entries, several in the order they were leased (rules.HEAD: numbered
        latest lease first). An entry's count of expired leases follows it."""
        back.sort(key=_first, reverse=True)
        for _, q, item in back:
            _heappush(q.heap, self._renumbered(item, HEAD))

    def _renumbered(self, item: bytes, place: int) -> bytes:
        """``item`` numbered anew at ``place``; its count of expired leases follows it."""
        new = _with_seq(item, self.number(place))
        expired = self.expired
        if expired:
            n = expired.pop(item[4:10], 0)
            if n:
                expired[new[4:10]] = n
        return new

    def wake(self, now: float) -> None:
        """Bring in what came due by ``now``, time by time: scheduled entries (joining
        their queues as if added then, in the order they were scheduled), then leases
        that expired (back at the head of their queues, or buried after
        ``max_redeliveries``); each queue settled at that time, so a queue they make
        ready has waited since then, not since whichever call noticed (as the SQLite
        and Redis stores do). Then queues whose rest ended."""
        sched = self.scheduled
        expiry = self.expiry
        due: list[tuple[float, int, str, bytes]] = []
        while sched and sched[0][0] <= now:
            due.append(_heappop(sched))
        expired: list[tuple[float, int]] = []  # (time, token), in the order leased
        leases = self.leases
        while expiry and expiry[0][0] <= now:
            at, _, tokens = _heappop(expiry)
            for token in tokens:
                held = leases.get(token)
                if held is not None and held[2] <= at:  # (not answered, nor renewed since)
                    expired.append((at, token))
        times = event_times([d[0] for d in due], [e[0] for e in expired]) if (
            due or expired) else []  # (most calls find nothing due: no lists made)
        i = j = 0
        for at, i_end, j_end in times:
            touched: dict[str, MemoryQueue] = {}
            for _, _, key, item in due[i:i_end]:
                q = self.queue(key)
                _heappush(q.heap, self._renumbered(item, TAIL))
                touched[key] = q
            back: list[tuple[int, MemoryQueue, bytes]] = []
            freed: dict[MemoryDomain, int] = {}
            for _, token in expired[j:j_end]:
                q, item, _ = leases.pop(token)
                q.inflight -= 1
                q.domain.inflight -= 1
                if self.policy.domain_concurrency > 0:
                    freed[q.domain] = freed.get(q.domain, 0) + 1
                touched[q.key] = q
                seq = item[4:10]
                n, dies = expired_once(self.expired.get(seq, 0), self.max_redeliveries)
                if dies:
                    self.expired.pop(seq, None)
                    self.bury(q, item, item_retries(item),
                              expired_error(n, self.max_redeliveries), at)
                else:
                    self.expired[seq] = n
                    self.counters["redelivered"] += 1
                    back.append((token, q, item))
            i, j = i_end, j_end
            if back:
                self._back_at_head(back)
            for q in touched.values():
                self.settle(q, at)
            if freed:
                self.unpark(freed, at)
        resting = self.resting
        while resting and resting[0][0] <= now:
            _, version, created = _heappop(resting)
            q = self.by_created[created]
            if q.version == version and q.state == RESTING:
                self.settle(q, now)

    def next_ready_at(self, now: float) -> float | None:
        """When a lease call may next find something: ``now`` if a queue is ready, else
        the earliest rest end, scheduled entry or lease expiry (None: nothing waits)."""
        self.wake(now)
        ready = self.ready
        while ready:  # drop stale entries (lazy deletion) to see a real one
            if self.ready_queue(ready[0]) is not None:
                return now
            _heappop(ready)
        resting = self.resting
        while resting:
            _, version, created = resting[0]
            q = self.by_created[created]
            if q.version == version and q.state == RESTING:
                break
            _heappop(resting)
        expiry, leases = self.expiry, self.leases
        # (a record is spent when none of its leases is still held until its time: each
        # was answered, or renewed, which gave it a record of its own)
        while expiry and not any(t in leases and leases[t][2] <= expiry[0][0]
                                 for t in expiry[0][2]):
            _heappop(expiry)
        times = [h[0][0] for h in (resting, self.scheduled, expiry) if h]
        return min(times) if times else None
