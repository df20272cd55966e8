"""The SQLite store's calls that look at and steer a crawl rather than crawl it: queue
settings and blocks, counters, values, stats and listings, deleting and requeueing,
dump and load."""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

from ..errors import StoreError
from ..models import QueueInfo, Stats
from . import dumpfmt, sqlite_dump
from .base import QUEUE_SETTINGS, DeadEntry, Pick, QueuePolicy, check_settings, queue_state
from .sqlite_answers import SQLiteAnswers
from .sqlite_group import SQLITE_SUFFIXES
from .sqlite_levels import FIRST_ENTRIES, chunks, marks
from .sqlite_rows import CURSORS_AT, Q_QID, Q_QUEUED, SEQ_MAX, SETTINGS_AT, Delta
from .sqlite_schema import BUSY, CURSOR_LEVELS, ENTRY_LEVELS, EXHAUSTED, NO_CURSOR, READY, RESTING


class SQLiteAdmin(SQLiteAnswers):
    """The SQLite store's admin, reporting and dump calls."""

    def block(self, queue: str, until: float, now: float) -> None:
        """See :meth:`Store.block`."""
        with self._tx() as c:
            qid = self._queues.qid_map(c, [queue])[queue]
            d = Delta()
            d.ready_at = until
            self._apply(c, {qid: d}, now)

    def configure_queue(self, queue: str, settings: Mapping[str, float | None],
                        now: float) -> None:
        """See :meth:`Store.configure_queue`."""
        clean = check_settings(settings)
        if not clean:
            return
        with self._tx() as c:
            qid = self._queues.qid_map(c, [queue])[queue]
            cols = ", ".join(f"{k}=?" for k in clean)
            c.execute(f"UPDATE queues SET {cols} WHERE qid=?", (*clean.values(), qid))
            self._queues.forget([qid])
            self._apply(c, {qid: Delta()}, now)

    def destroy(self) -> int:
        """See :meth:`~crawlq.stores.base.Destroyable.destroy`: closes the store, then
        deletes its files (``SQLITE_SUFFIXES``); returns how many there were."""
        self.close()
        n = 0
        for suffix in SQLITE_SUFFIXES:
            try:
                os.remove(self.path + suffix)
                n += 1
            except FileNotFoundError:
                pass
            except OSError as exc:
                raise StoreError(f"cannot delete {self.path + suffix}: "
                                 f"{exc.strerror}") from exc
        return n

    def set_policy(self, policy: QueuePolicy) -> None:
        """See :meth:`~crawlq.stores.base.PolicyChange.set_policy`."""
        with self._lock:
            self.policy = policy
            self._policies.clear()  # (each queue's policy is this one merged)

    def count_rejected(self, reasons: Mapping[str, int]) -> None:
        """See :meth:`Store.count_rejected`."""
        with self._tx() as c:
            self._reject(c, reasons)

    def count_duplicates(self, n: int) -> None:
        """See :meth:`Store.count_duplicates`."""
        with self._tx() as c:
            self._count(c, duplicates=n)

    def put_values(self, items: Sequence[tuple[str, bytes, float | None]]) -> None:
        """See :meth:`Store.put_values`."""
        with self._tx() as c:
            c.executemany(sqlite_dump.PUT_VALUE, [(n, bytearray(v), e) for n, v, e in items])
            expiries = [e for _, _, e in items if e is not None]
            if expiries:
                self._wake_no_sooner(min(expiries))

    def drop_values(self, names: Sequence[str]) -> None:
        """See :meth:`Store.drop_values`."""
        with self._tx() as c:
            c.executemany("DELETE FROM vals WHERE name=?", [(n,) for n in names])

    def get_values(self, names: Sequence[str], now: float) -> list[bytes | None]:
        """See :meth:`Store.get_values`."""
        with self._tx() as c:
            got: dict[str, bytes] = {}
            for part in chunks(list(names)):
                got.update((n, bytes(v)) for n, v in c.execute(
                    f"SELECT name, value FROM vals WHERE name IN ({marks(len(part))}) "
                    "AND (expires IS NULL OR expires > ?)", (*part, now)))
        return [got.get(n) for n in names]

    def stats(self, now: float, per_queue: int = 0) -> Stats:
        """See :meth:`Store.stats`."""
        with self._tx() as c:
            self._wake(c, now)
            self._write_counts(c)  # (those of the answers applied at the start)
            m = dict(c.execute("SELECT name, value FROM meta"))
            states = dict(c.execute("SELECT state, count(*) FROM queues GROUP BY state"))
            rejected = dict(c.execute("SELECT reason, n FROM rejected"))
            per = self._queue_infos(c, now, per_queue) if per_queue else []
        return Stats(
            seen=m["seen"], added=m["added"], queued=m["queued"], scheduled=m["scheduled"],
            leased=m["leased"], done=m["done"], failed=m["failed"], retried=m["retried"],
            dead=m["dead"], redelivered=m["redelivered"], late_acks=m["late_acks"],
            duplicates=m["duplicates"], rejected=rejected,
            queues_total=sum(states.values()), queues_ready=states.get(READY, 0),
            queues_resting=states.get(BUSY, 0) + states.get(RESTING, 0),
            queues_exhausted=states.get(EXHAUSTED, 0), per_queue=tuple(per),
        )

    def _queue_infos(self, c: sqlite3.Connection, now: float, limit: int) -> list[QueueInfo]:
        out = []
        for row in c.execute(
                f"SELECT key, queued, inflight, ready_at, accepted, {', '.join(QUEUE_SETTINGS)}"
                " FROM queues ORDER BY queued DESC, inflight DESC LIMIT ?", (limit,)):
            key, queued, inflight, ready_at, accepted = row[:5]
            pol = self._policy(tuple(row[5:]))
            settings = {k: v for k, v in zip(QUEUE_SETTINGS, row[5:]) if v is not None}
            out.append(QueueInfo(key, queued, inflight, ready_at, accepted,
                                 queue_state(queued, inflight, ready_at, pol.concurrency, now),
                                 settings))
        return out

    def queues(self, now: float, limit: int = 100) -> list[QueueInfo]:
        """See :meth:`Store.queues`."""
        with self._tx() as c:
            self._wake(c, now)
            return self._queue_infos(c, now, limit)

    def dead(self, limit: int = 100) -> list[DeadEntry]:
        """See :meth:`Store.dead`."""
        with self._tx() as c:
            return [DeadEntry(*r) for r in c.execute(
                "SELECT d.id, q.key, d.prio, d.retries, d.payload, d.error, d.died_at "
                "FROM dead d JOIN queues q ON q.qid = d.qid ORDER BY d.id LIMIT ?", (limit,))]

    def delete_queue(self, queue: str, now: float) -> int:
        """See :meth:`~crawlq.stores.base.QueueDeletion.delete_queue`.
        Its rows behind the cursors (what it leased) go too: a lease keeps what it needs
        to put its entry back (sqlite_leases), so the cursors start afresh."""
        with self._tx() as c:
            self._wake(c, now)
            row = c.execute("SELECT qid, queued FROM queues WHERE key=?", (queue,)).fetchone()
            if row is None:
                return 0
            qid, queued = row
            for table in ENTRY_LEVELS:
                c.execute(f"DELETE FROM {table} WHERE qid=?", (qid,))
            n_sched = c.execute("DELETE FROM scheduled WHERE qid=?", (qid,)).rowcount
            self._ahead.forget()
            self._queues.forget([qid])
            d = Delta()
            d.queued = -queued
            d.exact = True  # (head None: nothing left)
            d.cursor = (NO_CURSOR, 0) * len(CURSOR_LEVELS)
            self._apply(c, {qid: d}, now)
            self._count(c, queued=-(queued + n_sched), scheduled=-n_sched)
            return int(queued) + n_sched

    def remove_queued(self, queue: str, where: Pick, now: float) -> int:
        """See :meth:`~crawlq.stores.base.QueueRemoval.remove_queued`: the queue's entries past
        its cursors (its queued ones) and its scheduled ones, each given to ``where``."""
        with self._tx() as c:
            self._wake(c, now)
            found = c.execute("SELECT qid FROM queues WHERE key=?", (queue,)).fetchone()
            if found is None:
                return 0
            (row,) = self._queues.rows_of(c, [found[0]])
            qid, queued = row[Q_QID], row[Q_QUEUED]
            entries = c.execute(FIRST_ENTRIES, (qid, queued, *row[CURSORS_AT:SETTINGS_AT])
                                ).fetchall() if queued else []
            gone = [(level, nprio, order) for _, nprio, order, retries, payload, level
                    in entries if where(-nprio, retries, payload, None)]
            later = [(sid,) for sid, due, nprio, retries, payload in c.execute(
                "SELECT id, due, nprio, retries, payload FROM scheduled WHERE qid=?", (qid,))
                if where(-nprio, retries, payload, due)]
            for level, table in enumerate(ENTRY_LEVELS):
                c.executemany(f"DELETE FROM {table} WHERE qid=? AND nprio=? AND ord=?",
                              [(qid, n, o) for lv, n, o in gone if lv == level])
            c.executemany("DELETE FROM scheduled WHERE id=?", later)
            if gone:
                self._ahead.forget()
                self._queues.forget([qid])
                d = Delta()
                d.queued = -len(gone)
                d.recompute = True  # (its head may have gone)
                self._apply(c, {qid: d}, now)
            self._count(c, queued=-(len(gone) + len(later)), scheduled=-len(later))
            return len(gone) + len(later)

    def requeue_dead(self, ids: Iterable[int] | None, now: float) -> int:
        """See :meth:`Store.requeue_dead`."""
        with self._tx() as c:
            if ids is None:
                rows = c.execute("SELECT id, qid, prio, payload FROM dead ORDER BY id").fetchall()
            else:
                wanted = list(ids)
                rows = []
                for part in chunks(wanted):
                    rows.extend(c.execute("SELECT id, qid, prio, payload FROM dead WHERE id IN "
                                          f"({marks(len(part))}) ORDER BY id", part))
            if not rows:
                return 0
            seq = self._take(c, "entry_seq", len(rows))
            deltas: dict[int, Delta] = {}
            new_rows = []
            for _did, qid, prio, payload in rows:
                seq += 1
                new_rows.append((qid, -prio, SEQ_MAX - seq if self.lifo else seq, 0, payload))
            self._to_level0(c, new_rows, deltas, False)
            c.executemany("DELETE FROM dead WHERE id=?", [(r[0],) for r in rows])
            self._apply(c, deltas, now)
            self._count(c, dead=-len(rows), queued=len(rows))
            return len(rows)

    def dump(self) -> Iterator[dict[str, Any]]:
        """See :meth:`Store.dump`. Reads a consistent snapshot on its own connection."""
        with self._lock:
            if self._closed:
                raise StoreError("the store is closed")
            if self._group.pending:
                self._commit_held()
        yield from sqlite_dump.records(self.path, self._bloom)

    def load(self, records: Iterable[dict[str, Any]]) -> int:
        """See :meth:`Store.load`. All records are applied in one transaction."""
        loader = sqlite_dump.Loader(self)
        with self._tx() as c:
            loader.c = c
            n = sum(dumpfmt.apply(loader, rec) for rec in records)
            loader.finish()
            # (values, scheduled entries, leases and rests loaded: their times are not
            # known here)
            self._wake_due = None
        return n
