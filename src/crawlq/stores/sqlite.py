"""The SQLite store: the embedded, durable default.

Every Store call is one ``BEGIN IMMEDIATE`` transaction in WAL mode, so a process killed
at any moment leaves the file at the last committed call, and several processes can
share one file (writers take turns; no entry is ever leased twice). Small
acknowledgements and small lease calls are group-committed with the calls that follow
(:mod:`.sqlite_group`): a crash undoes at most those, never an add. With
``synchronous=normal`` (the default) a committed call survives a killed process; with
``synchronous=full`` it survives a power loss too, at a cost in speed.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from . import sqlite_leases
from .base import OVER_BUDGET, Entry, Leased
from .sqlite_admin import SQLiteAdmin
from .sqlite_ahead import NO_HEAD
from .sqlite_core import DEFAULT_CACHE_MB, MIN_SQLITE
from .sqlite_levels import SeenTx, insert_rows, settle_levels
from .sqlite_rows import (
    CURSORS_AT,
    Q_ACCEPTED,
    Q_INFLIGHT,
    Q_SESSION,
    SETTINGS_AT,
    Delta,
    admit,
    take_rows,
)

__all__ = ["DEFAULT_CACHE_MB", "MIN_SQLITE", "SQLiteStore"]


class SQLiteStore(SQLiteAdmin):
    """Durable store in one SQLite file; see :class:`crawlq.stores.base.Store`. Its parts,
    each a class the next one extends: :class:`~.sqlite_core.SQLiteCore` (the
    connection and transaction), :class:`~.sqlite_answers.SQLiteAnswers` (leases coming
    back), :class:`~.sqlite_admin.SQLiteAdmin` (looking and steering); here ``add``
    and ``lease``."""

    def add(self, entries: Sequence[Entry], now: float) -> list[int]:
        """See :meth:`Store.add`."""
        if not entries:
            return []
        with self._tx() as c:
            qids = self._queues.qid_map(c, dict.fromkeys([e[1] for e in entries]))
            used = sorted({qids[e[1]] for e in entries})
            qrows = self._queues.rows_of(c, used)
            rows = {r[0]: r for r in qrows}
            accepted = {qid: rows[qid][Q_ACCEPTED] for qid in used}
            caps = {qid: self._policy(tuple(rows[qid][SETTINGS_AT:])).max_queue_urls
                    for qid in used}
            seen = SeenTx(c, self._bloom)
            seen.prefetch([e[0] for e in entries if e[0] is not None])
            seq = self._take(c, "entry_seq", len(entries))
            out, new_rows, later, dups, seen_added, seq = admit(
                entries, qids, caps, accepted, seen.marks, now, seq, self.lifo)
            deltas: dict[int, Delta] = {}
            if new_rows:
                new_rows.sort()  # in key order: inserts walk the b-tree once
                # Per queue: its rows are a run, the first of them its best (a candidate head).
                last = None
                for row in new_rows:
                    if row[0] != last:
                        last = row[0]
                        d = deltas[last] = Delta()
                        d.head = row[1]
                    d.queued += 1
                reset = self._before_level0(c, new_rows, qrows)
                if reset:  # (rows read before are stale there: their cursors changed)
                    fresh = {r[0]: r for r in self._queues.rows_of(c, sorted(reset))}
                    qrows = [fresh.get(r[0], r) for r in qrows]
                insert_rows(c, "INSERT INTO entries0", 5, new_rows)
                self._settled(settle_levels(c, "entries", len(new_rows)))
            if later:
                c.executemany("INSERT INTO scheduled (due, qid, nprio, ord, retries, payload) "
                              "VALUES (?,?,?,?,?,?)", later)
                self._wake_no_sooner(min(r[0] for r in later))
            seen.flush()
            for qid, n in accepted.items():
                if n != rows[qid][Q_ACCEPTED]:
                    d = deltas.get(qid) or deltas.setdefault(qid, Delta())
                    d.accepted = n - rows[qid][Q_ACCEPTED]
            self._apply(c, deltas, now, qrows)
            over = out.count(OVER_BUDGET)
            if over:
                self._reject(c, {"queue-budget": over})
            n = len(new_rows) + len(later)
            self._count(c, added=n, seen=seen_added, duplicates=dups, queued=n,
                        scheduled=len(later))
        return out

    def lease(self, now: float, limit: int, ttl: float,
              queue: str | None = None) -> list[Leased]:
        """See :meth:`Store.lease`."""
        out: list[Leased] = []
        if limit <= 0:
            return out
        expires = now + ttl
        with self._tx(leased=out) as c:
            self._wake(c, now)
            self._ahead.called()
            # The ready queues in line (the index alone), their rows from the cache.
            if queue is None:
                active = [r[0] for r in c.execute(
                    "SELECT qid FROM queues WHERE state=0 ORDER BY head, since LIMIT ?",
                    (limit,))]
            else:
                active = [r[0] for r in c.execute(
                    "SELECT qid FROM queues WHERE state=0 AND key=?", (queue,))]
            if not active:
                return out
            cands = self._queues.rows_of(c, active)
            keys = self._queues.keys_of(c, active)
            # qid -> the keys of the last entries it leased from each level past 0 (see
            # sqlite_schema): nprio (NO_CURSOR: none), ord per CURSOR_LEVELS
            cursor = {r[0]: r[CURSORS_AT:SETTINGS_AT] for r in cands}
            # qid -> how many it may lease in this call; needed once a queue can give
            # more than one (one round takes one from each of ``limit`` queues or more)
            room: dict[int, int] = {} if len(active) >= limit else self._room(cands)
            token = first = self._take(c, "lease_seq", 0)
            first += 1
            # the leases' entries, for sqlite_leases.write: FIELDS ints each, and payloads
            ints: list[int] = []
            payloads: list[bytes] = []
            taken: dict[int, int] = dict.fromkeys(active, 0)
            # qid -> its head after the call when known exactly (NO_HEAD: none left in
            # the levels; MAYBE_MORE: read on below; None: not known, looked up)
            after: dict[int, Any] = {}
            # Round-robin: one entry from each ready queue in order, then again from
            # those with room left, until ``limit`` is reached.
            while active and len(out) < limit:
                want = active[: limit - len(out)]
                share = max(1, (limit - len(out)) // len(want))
                got: list[tuple[Any, ...]] = []
                if share == 1:
                    got = self._ahead.take(c, want, cursor, after, cands)
                else:
                    # Few queues with room: a fair share of what is left from each.
                    for qid in want:
                        k = min(share, room[qid] - taken[qid], limit - len(out) - len(got))
                        if k > 0:
                            got += self._ahead.take_first(c, qid, k, cursor[qid], after)
                counts: dict[int, int] = {}
                token = take_rows(got, cursor, keys, token, expires, ints, payloads,
                                        out, counts)
                for qid, k in counts.items():
                    taken[qid] += k
                if len(out) >= limit:
                    break
                if not room:
                    room = self._room(cands)
                # A queue that gave less than asked is empty; drop it from the next round.
                # The queues not asked this time (``limit`` cut the round short, and some
                # asked were empty) go first: the round goes on where it stopped.
                active = active[len(want):] + [
                    q for q in want if q in counts and taken[q] < room[q]
                    and (share == 1 or counts[q] >= min(share, room[q]))]
            self._ahead.read_on(c, after, cursor)
            sqlite_leases.write(c, first, expires, ints, payloads)
            if payloads:
                self._wake_no_sooner(expires)
            self._group.own.made(first, token, expires)
            c.execute("UPDATE meta SET value=? WHERE name='lease_seq'", (token,))
            deltas: dict[int, Delta] = {}
            for qid, k in taken.items():
                if k:
                    d = deltas[qid] = Delta()
                    d.inflight = k
                    d.queued = -k
                    d.session = k
                    d.served = True
                    head = after.get(qid)
                    if head is None:
                        d.recompute = True
                    else:
                        d.head, d.exact = (None if head is NO_HEAD else head), True
                    d.cursor = cursor[qid]  # (every entry leased moved a cursor)
            self._apply(c, deltas, now, cands)
            self._count(c, leased=len(out), queued=-len(out))
        return out

    def _room(self, rows: Iterable[Sequence[Any]]) -> dict[int, int]:
        """qid -> how many more leases each of these ready queues (rows) may take now."""
        room = {}
        for r in rows:
            pol = self._policy(tuple(r[SETTINGS_AT:]))
            free = pol.concurrency - r[Q_INFLIGHT]
            if pol.session_budget:
                free = min(free, pol.session_budget - r[Q_SESSION])
            # (a ready queue always has room for one; session budgets reset at zero)
            room[r[0]] = max(free, 1)
        return room
