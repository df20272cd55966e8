"""The memory store's calls that look at and steer a crawl rather than crawl it: queue
settings and blocks, counters, values, stats and listings, deleting and requeueing,
dump and load."""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ..errors import ConfigError
from ..models import QueueInfo, Stats
from . import dumpfmt
from .base import (
    DeadEntry,
    Pick,
    QueuePolicy,
    check_settings,
    queue_state,
)
from .memory_core import MemoryCore
from .memory_loops import (
    _EMPTY,
    _READY,
    _RESTING,
    _every,
    _item,
    _item_priority,
    _item_retries,
    _Queue,
)
from .policy import changed_settings

if TYPE_CHECKING:
    pass


class MemoryAdmin(MemoryCore):
    """The memory store's admin, reporting and dump calls."""

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
            known = self._queues.get(queue)
            kept = changed_settings(known.settings if known is not None else {}, clean)
            policy = self.policy.merged(kept)  # (raises before anything is kept or made)
            q = self._queue(queue)
            q.settings.clear()
            q.settings.update(kept)
            q.policy = policy
            if q.state != _EMPTY:
                self._settle(q, now)

    def set_policy(self, policy: QueuePolicy) -> None:
        """See :meth:`~crawlq.stores.base.PolicyChange.set_policy`."""
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
        """See :meth:`~crawlq.stores.base.QueueDeletion.delete_queue`."""
        return self.remove_queued(queue, _every, now)

    def remove_queued(self, queue: str, where: Pick, now: float) -> int:
        """See :meth:`~crawlq.stores.base.QueueRemoval.remove_queued`."""
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

    def close(self) -> None:
        """See :meth:`Store.close`."""
        self._closed = True
