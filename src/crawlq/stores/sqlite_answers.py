"""The SQLite store's leases coming back: answered (:meth:`~SQLiteAnswers.release`, with
group commit), expired or due (:meth:`~SQLiteAnswers._wake`, which every call that looks
at queues runs first), renewed; and when the next one is due."""

from __future__ import annotations

import itertools
import math
import sqlite3
from collections.abc import Sequence
from typing import Any

from ..errors import StoreError
from . import sqlite_leases
from .base import ACK_DEAD, ACK_DONE, ACK_REQUEUE, Ack, expired_error
from .sqlite_core import SQLiteCore
from .sqlite_rows import Delta


class SQLiteAnswers(SQLiteCore):
    """Answers, expiries and renewals of the SQLite store's leases."""

    def _wake(self, c: sqlite3.Connection, now: float) -> None:
        """Expired leases back to their queues, due entries in, rested queues ready;
        named values whose time is up dropped.

        Due entries and expired leases are settled in time order, each at its own time
        (due entries first at equal times, as the memory store takes them): a queue they
        make ready has waited since then, not since the call that noticed."""
        due = self._wake_due
        if due is not None and now < due:
            return  # nothing can be due yet (see SQLiteCore._wake_due)
        self._wake_events(c, now)
        c.execute("DELETE FROM vals WHERE expires <= ?", (now,))  # values whose time is up
        # When the next of them may be due, each through its index (scheduled_due,
        # lease_calls_expiry, queues_resting, vals_expiry).
        times = c.execute(
            "SELECT (SELECT min(due) FROM scheduled), (SELECT min(expires) FROM lease_calls), "
            "(SELECT min(ready_at) FROM queues WHERE state=2), "
            "(SELECT min(expires) FROM vals WHERE expires IS NOT NULL)").fetchone()
        self._wake_due = min((float(t) for t in times if t is not None), default=math.inf)

    def _wake_events(self, c: sqlite3.Connection, now: float) -> None:
        """_wake's due entries, expired leases and ended rests."""
        # (time, 0: due entry / 1: expired lease, entry); expired leases go back to their
        # old place: the same key puts them at the head.
        events = [(r[0], 0, r[1:]) for r in c.execute(
            "DELETE FROM scheduled WHERE due <= ? RETURNING due, qid, nprio, ord, retries, "
            "payload", (now,)).fetchall()]
        n_due = len(events)
        expired = sqlite_leases.expire(c, now)
        if expired:
            events += self._expired(c, expired)  # (2: buried, after max_redeliveries)
        if events:
            events.sort(key=lambda e: (e[0], e[1]))
            for at, same in itertools.groupby(events, key=lambda e: e[0]):
                group = list(same)
                deltas: dict[int, Delta] = {}
                for kind in (0, 1):
                    self._to_level0(c, [e[2] for e in group if e[1] == kind], deltas,
                                    kind == 1)
                for e in group:
                    if e[1] == 2:
                        qid = e[2][0]
                        (deltas.get(qid) or deltas.setdefault(qid, Delta())).inflight -= 1
                self._apply(c, deltas, at)
            n_back = sum(e[1] == 1 for e in events)
            n_buried = len(events) - n_due - n_back
            self._count(c, redelivered=n_back, leased=-n_back - n_buried, queued=n_back,
                        dead=n_buried, failed=n_buried, scheduled=-n_due)
        self._queues.forget(r[0] for r in c.execute(
            "UPDATE queues SET state=0, since=ready_at WHERE state=2 AND ready_at <= ? "
            "RETURNING qid", (now,)).fetchall())

    def _expired(self, c: sqlite3.Connection,
                 expired: list[tuple[float, sqlite_leases.LeaseRow]]
                 ) -> list[tuple[float, int, sqlite_leases.LeaseRow]]:
        """Each expired lease (when, entry) as a wake event: back to its queue (1), or,
        past ``max_redeliveries`` expiries, kept as dead (2). An entry's count is a row
        of ``expiries`` under its key (qid, nprio, ord), which it keeps for life."""
        cap = self.max_redeliveries
        out: list[tuple[float, int, sqlite_leases.LeaseRow]] = []
        counts: list[tuple[int, int, int, int]] = []
        gone: list[tuple[int, int, int]] = []
        dead_rows: list[tuple[Any, ...]] = []
        for at, row in expired:
            key = (row[0], row[1], row[2])
            got = c.execute("SELECT n FROM expiries WHERE qid=? AND nprio=? AND ord=?",
                            key).fetchone()
            n = (got[0] if got else 0) + 1
            if n > cap:
                gone.append(key)
                dead_rows.append((row[0], -row[1], row[3], bytearray(row[4]),
                                  expired_error(n, cap), at))
                out.append((at, 2, row))
            else:
                counts.append((*key, n))
                out.append((at, 1, row))
        c.executemany("INSERT OR REPLACE INTO expiries VALUES (?,?,?,?)", counts)
        c.executemany("DELETE FROM expiries WHERE qid=? AND nprio=? AND ord=?", gone)
        c.executemany("INSERT INTO dead (qid, prio, retries, payload, error, died_at) "
                      "VALUES (?,?,?,?,?,?)", dead_rows)
        if counts:
            self._expiries = True
        return out

    def release(self, acks: Sequence[Ack], now: float) -> list[bool]:
        """See :meth:`Store.release`.

        Group commit (:mod:`~crawlq.stores.sqlite_group`): a small call is answered at
        once and held, to be applied at the start of the next transaction (any call's)
        or by the flusher thread after ``group_commit`` seconds; a crash in between
        undoes those acknowledgements (their leases expire and the pages are fetched
        again), never an add. Rests start from the latest of the held calls' times."""
        if not acks:
            return []
        if not self._group.holds(len(acks)) or self._tx_open:
            # (in a transaction block: applied in it, nothing held; another thread's
            # call waits for the block and then commits on its own)
            with self._tx() as c:
                applied = self._release(c, acks, now)
            with self._lock:  # (once committed: a failed call answered nothing)
                self._group.own.answered(a[0] for a in acks)
            return applied
        with self._lock:
            if self._closed:
                raise StoreError("the store is closed")
            return self._group.hold(self._conn, acks, now)

    def _release(self, c: sqlite3.Connection, acks: Sequence[Ack], now: float) -> list[bool]:
        """Apply ``acks`` in the transaction ``c``."""
        # token -> (qid, nprio) of each open lease among them, now closed; the whole
        # entry of those that go back, die or wait (a token answered twice in one
        # call: its first answer wins, the second finds it closed)
        if self._expiries is None:
            self._expiries = c.execute(
                "SELECT EXISTS (SELECT 1 FROM expiries)").fetchone()[0] == 1
        tokens = [a[0] for a in acks]
        held, entries = sqlite_leases.answer(
            c, tokens, set(tokens) if self._expiries
            else {a[0] for a in acks if a[1] != ACK_DONE})
        if self._expiries:
            # Entries done or dead end their expiry counts (retried ones keep them).
            ended = {a[0] for a in acks if a[1] != ACK_REQUEUE}
            c.executemany("DELETE FROM expiries WHERE qid=? AND nprio=? AND ord=?",
                          [e[:3] for t, e in entries.items() if t in ended])
        out: list[bool] = []
        deltas: dict[int, Delta] = {}
        dead_rows: list[tuple[Any, ...]] = []
        back: list[tuple[Any, ...]] = []
        later: list[tuple[Any, ...]] = []
        n_done = n_failed = n_retried = n_dead = late = 0
        for token, kind, duration, not_before, retries, error, failed, delay in acks:
            h = held.pop(token, None)
            if h is None:
                out.append(False)
                late += 1
                continue
            out.append(True)
            qid, nprio = h
            d = deltas.get(qid)
            if d is None:
                d = deltas[qid] = Delta()
            d.inflight -= 1
            # (the longest wins; comparisons, not max(): once per acknowledgement)
            if delay is not None:
                if d.explicit_delay is None or delay > d.explicit_delay:
                    d.explicit_delay = delay
            elif d.duration is None or (duration or 0.0) > d.duration:
                d.duration = duration or 0.0
            if kind == ACK_DONE:
                n_done += 1
            elif kind == ACK_DEAD:
                e = entries[token]
                dead_rows.append((qid, -nprio, retries, bytearray(e[4]), error or "", now))
                n_dead += 1
                n_failed += 1
            else:
                n_retried += 1
                n_failed += failed
                e = entries[token]
                if not_before is not None and not_before > now:
                    later.append((not_before, qid, nprio, e[2], retries, bytearray(e[4])))
                else:
                    back.append((qid, nprio, e[2], retries, e[4]))
        if dead_rows:
            c.executemany("INSERT INTO dead (qid, prio, retries, payload, error, died_at) "
                          "VALUES (?,?,?,?,?,?)", dead_rows)
        self._to_level0(c, back, deltas, False)  # (inflight counted above)
        if later:
            c.executemany("INSERT INTO scheduled (due, qid, nprio, ord, retries, payload) "
                          "VALUES (?,?,?,?,?,?)", later)
            self._wake_no_sooner(min(r[0] for r in later))
        requeue = back + later
        n_sched = len(later)
        self._apply(c, deltas, now)
        n_held = n_done + n_dead + len(requeue)
        self._count(c, done=n_done, failed=n_failed, retried=n_retried, dead=n_dead,
                    late_acks=late, leased=-n_held, queued=len(requeue),
                    scheduled=n_sched)
        return out

    def next_ready_at(self, now: float) -> float | None:
        """See :meth:`Store.next_ready_at`."""
        with self._tx() as c:
            self._wake(c, now)
            if c.execute("SELECT 1 FROM queues WHERE state=0 LIMIT 1").fetchone():
                return now
            (at,) = c.execute(
                "SELECT min(t) FROM (SELECT min(ready_at) AS t FROM queues WHERE state=2 "
                "UNION ALL SELECT min(due) FROM scheduled "
                "UNION ALL SELECT min(expires) FROM lease_calls)").fetchone()
            return None if at is None else float(at)

    def renew(self, tokens: Sequence[int], expires: float, now: float) -> list[bool]:
        """See :meth:`Store.renew` (per ``next()`` call: see sqlite_leases.renew)."""
        with self._tx() as c:
            self._wake(c, now)
            held = sqlite_leases.renew(c, tokens, expires)
        with self._lock:  # (once committed)
            self._group.own.renewed([t for t, ok in zip(tokens, held) if ok], expires)
        return held
