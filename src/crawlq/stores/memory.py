"""The memory store: the whole frontier in one process's memory, guarded by a lock.

Fast and small (one bytes object per queued entry: a sort prefix plus the payload),
and gone when the process ends. Use it for tests, short crawls and as the reference
implementation of the Store contract.
"""

from __future__ import annotations

import collections
import heapq
import itertools
import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

from ..errors import ConfigError, StoreError
from ..models import QueueInfo, Stats
from . import dumpfmt
from .base import (
    MAX_REDELIVERIES,
    REFUSALS,
    Ack,
    DeadEntry,
    Entry,
    Leased,
    Pick,
    QueuePolicy,
    check_settings,
)
from .bloom import BloomShape
from .memory_queues import MemoryQueue, MemoryQueues, item_priority, item_retries, make_item
from .policy import changed_settings, typed_settings
from .rules import BUSY, EXHAUSTED, LAST, READY, RESTING, TAIL, label


class MemoryStore:
    """In-process store; see :class:`crawlq.stores.base.Store` for the contract.

    Its parts: the queues and entries with the calls of a crawl on them
    (:class:`~.memory_queues.MemoryQueues`, compiled), the named values, the rejection
    counts and the lock every call takes."""

    in_process = True
    """Its calls never wait on I/O: :class:`~crawlq.aio.AsyncFrontier` runs them on the
    event loop rather than a thread (see :attr:`Store.in_process
    <crawlq.stores.base.Store.in_process>`)."""

    def __init__(
        self,
        policy: QueuePolicy | None = None,
        *,
        lifo: bool = False,
        bloom: BloomShape | None = None,
        max_redeliveries: int = MAX_REDELIVERIES,
    ) -> None:
        self._lock = threading.RLock()
        self._book = MemoryQueues(policy or QueuePolicy(), lifo, bloom, max_redeliveries)
        self._rejected: dict[str, int] = {}
        self._values: dict[str, tuple[bytes, float | None]] = {}  # name -> (value, expires)
        self._tallies: dict[str, int] = {}
        self._value_expiry: list[tuple[float, str]] = []  # (heap) expires, name
        self._closed = False

    @property
    def policy(self) -> QueuePolicy:
        """The store's default queue policy."""
        return self._book.policy

    @property
    def lifo(self) -> bool:
        """Whether a queue's entries of one priority come out newest first."""
        return self._book.lifo

    @property
    def max_redeliveries(self) -> int:
        """How many times a lease of one entry may expire before it is buried."""
        return self._book.max_redeliveries

    def _check_open(self) -> None:
        if self._closed:
            raise StoreError("the store is closed")

    # -- the calls of a crawl (MemoryQueues') ------------------------------------------

    def add(self, entries: Sequence[Entry], now: float) -> list[int]:
        """See :meth:`Store.add`."""
        out: list[int] = []
        with self._lock:
            self._check_open()
            refused = self._book.add(entries, now, out)
            for verdict, n in refused.items():
                reason = REFUSALS[verdict]
                self._rejected[reason] = self._rejected.get(reason, 0) + n
        return out

    def lease(self, now: float, limit: int, ttl: float,
              queue: str | None = None) -> list[Leased]:
        """See :meth:`Store.lease`."""
        out: list[Leased] = []
        if limit <= 0:
            return out
        with self._lock:
            self._check_open()
            self._expire_values(now)
            self._book.lease(now, limit, now + ttl, queue, out)
        return out

    def renew(self, tokens: Sequence[int], expires: float, now: float) -> list[bool]:
        """See :meth:`Store.renew`."""
        with self._lock:
            self._check_open()
            self._expire_values(now)
            return self._book.renew(tokens, expires, now)

    def release(self, acks: Sequence[Ack], now: float) -> list[bool]:
        """See :meth:`Store.release`."""
        out: list[bool] = []
        with self._lock:
            self._check_open()
            self._book.release(acks, now, out)
        return out

    def next_ready_at(self, now: float) -> float | None:
        """See :meth:`Store.next_ready_at`."""
        with self._lock:
            self._check_open()
            self._expire_values(now)
            return self._book.next_ready_at(now)

    def _wake(self, now: float) -> None:
        """What came due woken (:meth:`MemoryQueues.wake`), and values whose time is up
        dropped."""
        self._book.wake(now)
        self._expire_values(now)

    def _expire_values(self, now: float) -> None:
        """Drop the named values whose time is up."""
        values, vx = self._values, self._value_expiry
        while vx and vx[0][0] <= now:
            at, name = heapq.heappop(vx)
            got = values.get(name)
            if got is not None and got[1] == at:  # (not put again since, nor dropped)
                del values[name]

    # -- steering ----------------------------------------------------------------------

    def block(self, queue: str, until: float, now: float) -> None:
        """See :meth:`Store.block`."""
        with self._lock:
            self._check_open()
            self._wake(now)  # (a rest that ended is seen: the queue keeps its place)
            q = self._book.queue(queue)
            unparked = self._book.unpark_one(q, now)  # (a block replaces a park)
            if until > q.ready_at:
                q.ready_at = until
            if (unparked or q.ready_at == until) and q.state in (READY, RESTING):
                self._book.settle(q, now)

    def unblock(self, queue: str, now: float) -> None:
        """See :meth:`Store.unblock`."""
        with self._lock:
            self._check_open()
            q = self._book.queues.get(queue)
            if q is not None and q.ready_at > now:
                q.ready_at = now
                if q.state == RESTING:
                    self._book.settle(q, now)

    def configure_queue(self, queue: str, settings: Mapping[str, float | None],
                        now: float) -> None:
        """See :meth:`Store.configure_queue`."""
        clean = check_settings(settings)
        with self._lock:
            self._check_open()
            book = self._book
            known = book.queues.get(queue)
            kept = changed_settings(known.settings if known is not None else {}, clean)
            policy = book.policy.merged(kept)  # (raises before anything is kept or made)
            q = book.queue(queue)
            q.settings.clear()
            q.settings.update(kept)
            q.policy = policy
            if q.state != EXHAUSTED:
                book.settle(q, now)

    def set_policy(self, policy: QueuePolicy) -> None:
        """See :meth:`Store.set_policy`."""
        with self._lock:
            self._book.set_policy(policy)

    def count_rejected(self, reasons: Mapping[str, int]) -> None:
        """See :meth:`Store.count_rejected`."""
        with self._lock:
            for r, n in reasons.items():
                self._rejected[r] = self._rejected.get(r, 0) + n

    def count_duplicates(self, n: int) -> None:
        """See :meth:`Store.count_duplicates`."""
        with self._lock:
            self._book.counters["duplicates"] += n

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

    def tally(self, deltas: Mapping[str, int]) -> list[int]:
        """See :meth:`Store.tally`."""
        with self._lock:
            self._check_open()
            return [self._add_tally(name, int(d)) for name, d in deltas.items()]

    def _add_tally(self, name: str, delta: int) -> int:
        n = max(0, self._tallies.get(name, 0) + delta)
        if n:
            self._tallies[name] = n
        else:
            self._tallies.pop(name, None)
        return n

    def tallies(self, names: Sequence[str]) -> list[int]:
        """See :meth:`Store.tallies`."""
        with self._lock:
            self._check_open()
            return [self._tallies.get(n, 0) for n in names]

    def drop_tallies(self, names: Sequence[str]) -> None:
        """See :meth:`Store.drop_tallies`."""
        with self._lock:
            self._check_open()
            for n in names:
                self._tallies.pop(n, None)

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

    # -- looking -----------------------------------------------------------------------

    def _info(self, q: MemoryQueue, now: float, scheduled: Mapping[str, int]) -> QueueInfo:
        return QueueInfo(q.key, len(q.heap), q.inflight, q.ready_at, q.accepted,
                         label(len(q.heap), q.inflight, q.policy.concurrency, q.ready_at,
                               now),
                         typed_settings(q.settings), scheduled.get(q.key, 0))

    def stats(self, now: float, per_queue: int = 0) -> Stats:
        """See :meth:`Store.stats`."""
        with self._lock:
            self._check_open()
            self._wake(now)
            book = self._book
            queued = 0
            states = [0, 0, 0, 0]  # per rules.QueueState
            for q in book.queues.values():
                queued += len(q.heap)
                states[q.state] += 1
            c = book.counters
            return Stats(
                seen=c["seen"], added=c["added"], queued=queued + len(book.scheduled),
                scheduled=len(book.scheduled), leased=len(book.leases), done=c["done"],
                failed=c["failed"], retried=c["retried"], dead=len(book.dead),
                redelivered=c["redelivered"], late_acks=c["late_acks"],
                duplicates=c["duplicates"], rejected=dict(self._rejected),
                queues_total=len(book.queues), queues_ready=states[READY],
                queues_busy=states[BUSY], queues_resting=states[RESTING],
                queues_exhausted=states[EXHAUSTED],
                per_queue=tuple(self.queues(now, per_queue)) if per_queue else (),
            )

    def queues(self, now: float, limit: int = 100) -> list[QueueInfo]:
        """See :meth:`Store.queues`."""
        with self._lock:
            self._check_open()
            self._wake(now)
            best = heapq.nlargest(limit, self._book.queues.values(),
                                  key=lambda q: (len(q.heap), q.inflight))
            # (a count of every scheduled entry: an admin call's scan)
            waiting = collections.Counter(s[2] for s in self._book.scheduled)
            return [self._info(q, now, waiting) for q in best]

    def dead(self, limit: int = 100) -> list[DeadEntry]:
        """See :meth:`Store.dead`."""
        with self._lock:
            return list(itertools.islice(self._book.dead.values(), limit))

    # -- removing and requeueing -------------------------------------------------------

    def delete_queue(self, queue: str, now: float) -> int:
        """See :meth:`Store.delete_queue`."""
        with self._lock:
            n = self.remove_queued(queue, _every, now)
            book = self._book
            q = book.queues.get(queue)
            if q is not None and not q.inflight and not q.heap and not any(
                    d.queue == queue for d in book.dead.values()):
                # (nothing of it is left: it goes, settings and counts with it)
                book.forget(q)
            return n

    def remove_queued(self, queue: str, where: Pick, now: float) -> int:
        """See :meth:`Store.remove_queued`."""
        with self._lock:
            self._check_open()
            self._wake(now)
            book = self._book
            q = book.queues.get(queue)
            if q is None:
                return 0
            # (all picked first: an error in ``where`` leaves everything as it was)
            gone = {it for it in q.heap
                    if where(item_priority(it), item_retries(it), it[12:], None)}
            sched = book.scheduled
            tickets = {s[1] for s in sched if s[2] == queue and where(
                item_priority(s[3]), item_retries(s[3]), s[3][12:], s[0])}
            # (the lists changed in place: they are shared by reference)
            if gone:
                q.heap[:] = [it for it in q.heap if it not in gone]
                heapq.heapify(q.heap)
            if tickets:
                sched[:] = [s for s in sched if s[1] not in tickets]
                heapq.heapify(sched)
            if gone:
                if not q.heap:  # (an empty queue waits for no domain: see rules)
                    book.unpark_one(q, now)
                book.settle(q, now)
            return len(gone) + len(tickets)

    def requeue_dead(self, ids: Iterable[int] | None, now: float) -> int:
        """See :meth:`Store.requeue_dead`."""
        with self._lock:
            self._check_open()
            book = self._book
            chosen = list(book.dead) if ids is None else [i for i in ids if i in book.dead]
            for i in chosen:
                d = book.dead.pop(i)
                book.push(book.queue(d.queue),
                          make_item(d.priority, book.number(TAIL), 0, d.payload), now)
            return len(chosen)

    # -- dump and load -----------------------------------------------------------------

    def dump(self) -> Iterator[dict[str, Any]]:
        """See :meth:`Store.dump`."""
        with self._lock:
            self._check_open()
            records = list(self._dump_records())
        yield from records

    def _dump_records(self) -> Iterator[dict[str, Any]]:
        book = self._book
        c = dict(book.counters)
        c["dead"] = len(book.dead)
        yield dumpfmt.counters(c, self._rejected)
        if self._tallies:
            yield dumpfmt.tallies(dict(sorted(self._tallies.items())))
        for q in book.queues.values():
            yield dumpfmt.queue(q.key, q.accepted, q.ready_at, q.settings, q.since,
                                q.inflight > 0 and q.state in (BUSY, EXHAUSTED))
        # Leased entries first, in the order they were leased (as if they had expired),
        # then each queue's in the order it hands them out (sorted items are).
        for q, item, _ in book.leases.values():
            yield dumpfmt.entry(q.key, item_priority(item), item_retries(item), item[12:],
                                None)
        for q in book.queues.values():
            for item in sorted(q.heap):
                yield dumpfmt.entry(q.key, item_priority(item), item_retries(item),
                                    item[12:], None)
        for nb, _, key, item in sorted(book.scheduled):
            yield dumpfmt.entry(key, item_priority(item), item_retries(item), item[12:], nb)
        for d in book.dead.values():
            yield dumpfmt.dead(d)
        for name in sorted(self._values):
            data, expires = self._values[name]
            if expires is None:
                yield dumpfmt.value(name, data, None)
        if book.bloom is not None:
            yield dumpfmt.bloom(book.bloom.bits)
        # In key order (as the SQLite store's): the same dump whichever set holds them.
        for fp in sorted(book.seen):
            yield dumpfmt.seen(fp, book.revisit.get(fp))

    def load(self, records: Iterable[dict[str, Any]], now: float) -> int:
        """See :meth:`Store.load`."""
        n = 0
        with self._lock:
            self._check_open()
            loader = _Loader(self, self._book, now)
            for rec in records:
                n += dumpfmt.apply(loader, rec)
            loader.finish()
        return n

    def clear(self) -> None:
        """See :meth:`Store.clear`."""
        with self._lock:
            self._check_open()
            book = self._book
            self._book = MemoryQueues(book.policy, book.lifo,
                                      None if book.bloom is None else book.bloom.shape,
                                      book.max_redeliveries)
            # (the numbering goes on: a late answer to a lease of before must not find a
            # lease of after under its token)
            self._book.token = book.token
            self._book.n = book.n
            self._rejected.clear()
            self._values.clear()
            self._value_expiry.clear()
            self._tallies.clear()

    def close(self) -> None:
        """See :meth:`Store.close`."""
        self._closed = True


def _every(priority: int, retries: int, payload: bytes, not_before: float | None) -> bool:
    """remove_queued's ``where`` of delete_queue."""
    return True


class _Loader:
    """The memory store's :class:`~.dumpfmt.Loader`: writes each record at ``now`` into
    ``book``, the store's queues and entries, through
    :class:`~.memory_queues.MemoryQueues`' calls, and what the store keeps beside them
    (rejections, named values, tallies) through the store's own Store calls (``load``
    holds the store's lock, which they take again)."""

    def __init__(self, store: MemoryStore, book: MemoryQueues, now: float) -> None:
        self.store = store
        self.book = book
        self.now = now
        self.since: dict[str, float] = {}  # queue -> since when it waited, as dumped

    def load_seen(self, fp: bytes, revisit_at: float | None) -> None:
        self.book.mark_seen(fp, revisit_at)

    def load_bloom(self, bits: bytes) -> None:
        bloom = self.book.bloom
        if bloom is None or len(bits) != len(bloom.bits):
            raise ConfigError("dump has a Bloom filter of another shape than this store")
        for i, b in enumerate(bits):
            bloom.bits[i] |= b

    def load_entry(self, key: str, priority: int, retries: int, payload: bytes,
                   not_before: float | None) -> None:
        book = self.book
        item = make_item(priority, book.number(LAST), retries, payload)
        if not_before is not None:
            book.schedule(not_before, key, item)
        else:
            book.push(book.queue(key), item, self.now)

    def load_queue(self, key: str, accepted: int, ready_at: float,
                   settings: Mapping[str, float], since: float | None) -> None:
        book = self.book
        clean = check_settings(settings)  # (as every store's loader checks them)
        q = book.queue(key)
        if accepted > q.accepted:
            q.domain.accepted += accepted - q.accepted
            q.accepted = accepted
        q.ready_at = max(q.ready_at, ready_at)
        q.settings.update({k: v for k, v in clean.items() if v is not None})
        q.policy = book.policy.merged(q.settings)
        if since is not None:
            self.since[key] = since
        if q.state in (READY, RESTING):
            book.settle(q, self.now)

    def load_dead(self, queue: str, priority: int, retries: int, payload: bytes,
                  error: str, died_at: float) -> None:
        self.book.keep_dead(queue, priority, retries, payload, error, died_at)

    def load_counters(self, counters: Mapping[str, int], rejected: Mapping[str, int]) -> None:
        mine = self.book.counters
        for k, v in counters.items():
            if k in mine and k != "dead":
                mine[k] += int(v)
        self.store.count_rejected({r: int(v) for r, v in rejected.items()})

    def load_value(self, name: str, data: bytes, expires: float | None) -> None:
        self.store.put_values([(name, data, expires)])

    def load_tallies(self, counts: Mapping[str, int]) -> None:
        self.store.tally(counts)

    def finish(self) -> None:
        """The loaded queues that are ready take their places in the ready line."""
        book = self.book
        for key, since in self.since.items():
            q = book.queues[key]
            if q.state == READY:
                q.since = since
                book.settle(q, self.now)  # (a new place in the ready heap)
