"""The Redis store's calls that look at and steer a crawl rather than crawl it: queue
settings and blocks, counters, values, stats and listings, deleting and requeueing."""

from __future__ import annotations

import heapq
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

from ..models import QueueInfo, Stats
from .base import (
    DeadEntry,
    Pick,
    QueuePolicy,
    check_settings,
    queue_state,
)
from .policy import changed_settings
from .redis_core import _EXPIRES, _QREC, RedisCore, _dead, _kv, _unpack


class RedisAdmin(RedisCore):
    """The Redis store's admin and reporting calls."""

    def block(self, queue: str, until: float, now: float) -> None:
        """See :meth:`Store.block`."""
        self._run("queue_op", now, "block", queue, until)

    def set_policy(self, policy: QueuePolicy) -> None:
        """See :meth:`~crawlq.stores.base.PolicyChange.set_policy`."""
        self.policy = policy
        self._pargs = self._policy_args()

    def configure_queue(self, queue: str, settings: Mapping[str, float | None],
                        now: float) -> None:
        """See :meth:`Store.configure_queue`."""
        clean = check_settings(settings)
        # The queue's settings as they will be, checked before the script keeps them
        # (Lua cannot run QueuePolicy's checks). Read first, then written: a change
        # another process makes in between is checked by its own call.
        key = queue.encode("utf-8", "surrogateescape")
        kept = {f.decode(): float(v) for f, v in self._retrying(
            lambda: self._client.hgetall(self._p.encode() + b":qset:" + key)).items()}
        self.policy.merged(changed_settings(kept, clean))  # (raises: nothing kept)
        args: list[Any] = []
        for k, v in clean.items():
            args += [k, "" if v is None else v]
        self._run("queue_op", now, "configure", queue, *args)

    def count_rejected(self, reasons: Mapping[str, int]) -> None:
        """See :meth:`Store.count_rejected`."""
        def go() -> None:
            pipe = self._client.pipeline(transaction=False)
            for r, n in reasons.items():
                pipe.hincrby(f"{self._p}:rej", r, n)
            pipe.execute()

        self._retrying(go)

    def count_duplicates(self, n: int) -> None:
        """See :meth:`Store.count_duplicates`."""
        self._retrying(lambda: self._client.hincrby(self._m, "duplicates", n))

    def put_values(self, items: Sequence[tuple[str, bytes, float | None]]) -> None:
        """See :meth:`Store.put_values`. One hash, ``{prefix}:kv``: name -> expiry (a
        little-endian double, +inf for none) then the value; and the expiries again in a
        sorted set, ``{prefix}:kvx``, from which waking drops the values whose time is
        up (common.lua ``drop_old_values``). (Redis's own expiry counts on the server's
        clock; stores take the time from their caller.)"""
        if not items:
            return
        mapping = {n: _kv(v, e) for n, v, e in items}
        due = {n: e for n, _, e in items if e is not None}
        lasting = [n for n, _, e in items if e is None]

        def go() -> None:
            pipe = self._client.pipeline(transaction=False)
            pipe.hset(f"{self._p}:kv", mapping=mapping)
            if due:
                pipe.zadd(f"{self._p}:kvx", due)
            if lasting:
                pipe.zrem(f"{self._p}:kvx", *lasting)
            pipe.execute()

        self._retrying(go)

    def drop_values(self, names: Sequence[str]) -> None:
        """See :meth:`Store.drop_values`."""
        if not names:
            return

        def go() -> None:
            pipe = self._client.pipeline(transaction=False)
            pipe.hdel(f"{self._p}:kv", *names)
            pipe.zrem(f"{self._p}:kvx", *names)
            pipe.execute()

        self._retrying(go)

    def get_values(self, names: Sequence[str], now: float) -> list[bytes | None]:
        """See :meth:`Store.get_values`."""
        if not names:
            return []
        got = self._retrying(lambda: self._client.hmget(f"{self._p}:kv", list(names)))
        return [None if g is None or _EXPIRES.unpack_from(g)[0] <= now else g[8:]
                for g in got]

    def stats(self, now: float, per_queue: int = 0) -> Stats:
        """See :meth:`Store.stats`."""
        meta, rej, scheduled, leased, dead, total, ready = self._run("maintain", now, "stats")
        c = {meta[i].decode(): meta[i + 1] for i in range(0, len(meta), 2)}

        def n(name: str) -> int:
            try:
                return int(c.get(name, 0))
            except ValueError:
                return 0

        nonempty = n("nonempty")
        return Stats(
            seen=n("seen"), added=n("added"), queued=n("queued") + scheduled,
            scheduled=scheduled, leased=leased, done=n("done"), failed=n("failed"),
            retried=n("retried"), dead=dead, redelivered=n("redelivered"),
            late_acks=n("late_acks"), duplicates=n("duplicates"),
            rejected={rej[i].decode(): int(rej[i + 1]) for i in range(0, len(rej), 2)},
            queues_total=total, queues_ready=ready, queues_resting=nonempty - ready,
            queues_exhausted=total - nonempty,
            per_queue=tuple(self.queues(now, per_queue)) if per_queue else (),
        )

    def _queue_infos(self, keys: list[bytes], now: float) -> list[QueueInfo]:
        """QueueInfo of each queue in ``keys`` (queues that vanished are left out)."""
        p = self._p.encode()

        def go() -> list[Any]:
            pipe = self._client.pipeline(transaction=False)
            for k in keys:
                pipe.get(p + b":qm:" + k)
            return list(pipe.execute())

        recs = self._retrying(go)
        with_settings = [k for k, rec in zip(keys, recs) if rec and _QREC.unpack(rec)[8]]

        def go_settings() -> list[Any]:
            pipe = self._client.pipeline(transaction=False)
            for k in with_settings:
                pipe.hgetall(p + b":qset:" + k)
            return list(pipe.execute())

        overrides = dict(zip(with_settings, self._retrying(go_settings))) if with_settings \
            else {}
        out: list[QueueInfo] = []
        for k, rec in zip(keys, recs):
            if rec is None:
                continue
            n, inflight, ready_at, _, accepted, _, _, _, _ = _QREC.unpack(rec)
            settings = {f.decode(): float(v) for f, v in overrides.get(k, {}).items()}
            pol = self.policy.merged(settings)
            out.append(QueueInfo(
                k.decode("utf-8", "surrogateescape"), int(n), int(inflight), ready_at,
                int(accepted), queue_state(int(n), int(inflight), ready_at, pol.concurrency,
                                           now),
                {s: (int(v) if s in ("concurrency", "max_queue_urls", "session_budget")
                     else v) for s, v in settings.items()}))
        return out

    def _all_queue_keys(self) -> list[bytes]:
        return self._retrying(
            lambda: list(self._client.sscan_iter(f"{self._p}:qk", count=5000)))

    def queues(self, now: float, limit: int = 100) -> list[QueueInfo]:
        """See :meth:`Store.queues`. Reads every queue's record (in pipelined chunks,
        never blocking the server): a listing costs time in proportion to the queues."""
        if limit <= 0:
            return []
        keys = self._all_queue_keys()
        best: list[QueueInfo] = []
        for i in range(0, len(keys), 1000):
            best = heapq.nlargest(limit, best + self._queue_infos(keys[i:i + 1000], now),
                                  key=lambda q: (q.queued, q.leased))
        return best

    def dead(self, limit: int = 100) -> list[DeadEntry]:
        """See :meth:`Store.dead`."""
        if limit <= 0:
            return []

        def go() -> list[DeadEntry]:
            ids = self._client.zrange(f"{self._p}:dz", 0, limit - 1)
            if not ids:
                return []
            recs = self._client.hmget(f"{self._p}:dead", ids)
            return [_dead(int(i), r) for i, r in zip(ids, recs) if r is not None]

        return self._retrying(go)

    def requeue_dead(self, ids: Iterable[int] | None, now: float) -> int:
        """See :meth:`Store.requeue_dead`."""
        chosen: list[Any] = ["*"] if ids is None else [int(i) for i in ids]
        if not chosen:
            return 0
        return int(self._run("maintain", now, "requeue_dead", *chosen))

    # -- dump and load ----------------------------------------------------------------

    def delete_queue(self, queue: str, now: float) -> int:
        """See :meth:`~crawlq.stores.base.QueueDeletion.delete_queue`."""
        return int(self._run("queue_op", now, "delete", queue))

    def remove_queued(self, queue: str, where: Pick, now: float) -> int:
        """See :meth:`~crawlq.stores.base.QueueRemoval.remove_queued`. The entries are read
        here and removed by one script, which takes out only those still there (one
        leased or come due since stays)."""
        p, k = self._p, queue.encode("utf-8", "surrogateescape")
        picked: list[Any] = []
        for level in self._cmd("zrange", f"{p}:qp:".encode() + k, 0, -1):
            for item in self._cmd("lrange", f"{p}:q:".encode() + level + b":" + k, 0, -1):
                if where(int(level), int.from_bytes(item[:2], "big"), item[2:], None):
                    picked += [level, item]
        picked.append("")
        # (every scheduled entry is read: an admin call, as delete_queue's scan)
        for sid, at, key, prio, item in self._scheduled():
            if key == k and where(prio, int.from_bytes(item[:2], "big"), item[2:], at):
                picked.append(sid)
        if len(picked) == 1:
            return 0
        return int(self._run("queue_op", now, "remove", queue, *picked))

    def _scheduled(self) -> Iterator[tuple[bytes, float, bytes, int, bytes]]:
        """Every scheduled entry: (id, due, queue key, priority, item), read in parts."""
        p = self._p
        sched = self._retrying(lambda: self._client.zrange(f"{p}:sc", 0, -1, withscores=True))
        for i in range(0, len(sched), 1000):
            part = sched[i:i + 1000]
            for (sid, at), rec in zip(part, self._cmd("hmget", f"{p}:scd",
                                                      [s for s, _ in part])):
                if rec is not None:  # (gone since the list was read)
                    key, prio, item = _unpack(rec)
                    yield sid, at, key, prio, item

    def prefixes_under(self, start: str) -> list[str]:
        """The prefixes of the crawls on this server whose prefix begins with ``start``
        (found by their main key, with SCAN: for listing, not for hot paths)."""
        pattern = "{" + re.sub(r"([*?\[\]\\])", r"\\\1", start) + "*}:m"

        def go() -> list[str]:
            return sorted({k.decode("utf-8", "replace")[1:-3]
                           for k in self._client.scan_iter(match=pattern, count=1000)})

        return self._retrying(go)

    def destroy(self) -> int:
        """Delete every key of this crawl (its prefix); returns how many were deleted."""
        def go() -> int:
            n = 0
            for key in self._client.scan_iter(match=f"{self._p}:*", count=1000):
                n += int(self._client.delete(key))
            return n

        return self._retrying(go)
