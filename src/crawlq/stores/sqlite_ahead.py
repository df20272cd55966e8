"""The SQLite store's entries read ahead, per queue, and the heads statement.

Leasing from a queue needs its first entry past its cursors in every level (see
:mod:`crawlq.stores.sqlite_schema`). The heads statement finds it with a seek per queue
and level, each lease. Reading ahead takes the next ``AHEAD`` entries of each level in
one seek instead, and keeps them in a :class:`ReadAhead` for the queue's next turns.
They stay valid under the rule of the store's cached queue rows (no other connection
committed), while no entry is put before the last of them (:meth:`ReadAhead.before`)
and no merge moves rows between levels (the store then calls :meth:`ReadAhead.forget`).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping, Sequence
from typing import Any

from .sqlite_levels import CHUNK, FIRST_ENTRIES, ahead_query, chunks, heads_query
from .sqlite_rows import Q_QID, Q_QUEUED
from .sqlite_schema import CURSOR_LEVELS, ENTRY_LEVELS

AHEAD = 16
"""Entries read ahead per queue and level."""
AHEAD_ROWS = 65_536
"""Entries read ahead and kept, at most (~220 bytes each)."""
AHEAD_RENEW = 1024
"""Lease calls after which all entries read ahead are dropped."""
AHEAD_FROM = 4
"""Entries queued in a queue, at least, for reading ahead for it (many queues)."""

NO_HEAD: Any = object()
"""A queue's head after a lease call: it has no entry left in its levels."""
MAYBE_MORE: Any = object()
"""A queue's head after a lease call: it gave all its entries read ahead and may have
more (read on: :meth:`ReadAhead.read_on`)."""

Row = tuple[Any, ...]
"""An entry as the queries give it: qid, nprio, ord, retries, payload, level."""
_NONE: tuple[list[Row], bool] = ([], False)  # (never filled: read only)


def no_head(complete: bool) -> Any:
    """The head of a queue that gave the last of its entries read ahead."""
    return NO_HEAD if complete else MAYBE_MORE


def take_heads(c: sqlite3.Connection, want: Sequence[int],
               cursor: Mapping[int, Sequence[int]], after: dict[int, Any]) -> list[Row]:
    """The first entry of each queue in ``want``, read without reading ahead: the first
    entry of each level of each queue in one statement, with the priority of the entry
    after it in its level; a queue's head is the best of them, and its next head (into
    ``after``) is the best of the others and the one after it."""
    best: dict[int, Row] = {}
    other: dict[int, int] = {}  # the best priority of the other levels
    # (in queue order, not the line's: neighbouring queues share pages, so the seeks
    # hit the page cache more, ~15% faster)
    for part in chunks(sorted(want), CHUNK // (1 + 2 * len(CURSOR_LEVELS))):
        args = [x for qid in part for x in (qid, *cursor[qid])]
        for row in c.execute(heads_query(len(part)), args):
            qid = row[0]
            have = best.get(qid)
            if have is None:
                best[qid] = row
                continue
            if row[1:3] < have[1:3]:
                best[qid], row = row, have
            o = other.get(qid)
            if o is None or row[1] < o:
                other[qid] = row[1]
    for qid, row in best.items():
        nxt, o = row[6], other.get(qid)
        after[qid] = o if nxt is None or (o is not None and o < nxt) else nxt
    return [best[qid] for qid in want if qid in best]


class ReadAhead:
    """One connection's entries read ahead: qid -> (the queue's next entries past its
    cursors, last first, never none; whether they are all it has in the levels)."""

    def __init__(self) -> None:
        self.queues: dict[int, tuple[list[Row], bool]] = {}
        self.rows = 0  # how many entries it holds
        self.calls = 0  # lease calls since it was last emptied
        self.spoiled: set[int] = set()  # queues not read ahead (see before)

    def forget(self) -> None:
        """Drop every entry read ahead."""
        self.queues = {}
        self.rows = 0
        self.calls = 0
        self.spoiled = set()

    def called(self) -> None:
        """A lease call starts: every AHEAD_RENEW of them all are dropped, so that the
        queues read ahead follow the crawl (see :meth:`room`)."""
        self.calls += 1
        if self.calls > AHEAD_RENEW:
            self.forget()

    def room(self) -> int:
        """For how many more queues entries may be read ahead without holding more than
        about AHEAD_ROWS.

        Entries read ahead serve their queue when its turn in the line of ready queues
        comes again. With more ready queues than the bound holds, dropping some to
        make room for others would drop them before their turn, every time: so once
        full, no more queues are taken in (those in read on as they run out, while
        there is room), and the others take the heads statement."""
        # (a fill keeps about AHEAD per queue: up to the first level that gave all)
        return max(0, (AHEAD_ROWS - self.rows) // AHEAD) if AHEAD else 0

    def before(self, rows: Sequence[Sequence[Any]]) -> None:
        """Entries ``rows`` (qid, nprio, ord, ...) go into level 0: a queue's entries
        read ahead stay while the new ones all sort after them (then they are no
        longer all the queue has), else they are dropped."""
        ahead = self.queues
        if not ahead:
            return
        for r in rows:
            e = ahead.get(r[0])
            if e is None:
                continue
            if e[0] and (r[1], r[2]) > e[0][0][1:3]:
                if e[1]:
                    ahead[r[0]] = (e[0], False)
            else:
                del ahead[r[0]]
                self.rows -= len(e[0])
                # (new rows keep landing before those read ahead, as in a LIFO crawl:
                # reading ahead there wastes the read, until the renewal)
                self.spoiled.add(r[0])

    def take(self, c: sqlite3.Connection, want: Sequence[int],
             cursor: Mapping[int, Sequence[int]], after: dict[int, Any],
             queue_rows: Sequence[Sequence[Any]]) -> list[Row]:
        """As :func:`take_heads`, from the entries read ahead: read for the queues that
        have none left, at least AHEAD_FROM queued (``queue_rows``), not spoiled (an add
        put rows before those read ahead: the read was wasted, and in a LIFO crawl
        would be every time) and while there is room, with the heads statement for the
        others. A queue's next head is the entry after the one taken."""
        ahead = self.queues
        need = [qid for qid in want if not ahead.get(qid, _NONE)[0]]
        heads: list[Row] = []
        if need:
            room = self.room()
            if room:
                # (a queue with few entries left gains little from a read that costs
                # more than the heads statement's)
                spoiled = self.spoiled
                big = {r[Q_QID] for r in queue_rows if r[Q_QUEUED] >= AHEAD_FROM
                       and r[Q_QID] not in spoiled}
                fill = [qid for qid in need if qid in big][:room]
            else:
                fill = []
            if len(fill) < len(need):
                chosen = set(fill)
                heads = take_heads(c, [q for q in need if q not in chosen], cursor, after)
            if fill:
                self.fill(c, fill, cursor)
        firsts = {row[0]: row for row in heads}
        for qid in want:
            rows, complete = ahead.get(qid, _NONE)
            if rows:
                firsts[qid] = rows.pop()
                self.rows -= 1
                if rows:
                    after[qid] = rows[-1][1]
                else:
                    after[qid] = no_head(complete)
                    del ahead[qid]  # (none kept without entries: a queue each)
        return [firsts[qid] for qid in want if qid in firsts]

    def take_first(self, c: sqlite3.Connection, qid: int, k: int, cursor: Sequence[int],
                   after: dict[int, Any]) -> list[Row]:
        """The first ``k`` entries of queue ``qid`` (fewer: all it has), from those read
        ahead, or read with the next ones (as many as a fill reads per level)."""
        rows, complete = self.queues.get(qid, _NONE)
        if len(rows) < k and not complete:
            more = AHEAD if rows or self.room() else 0
            n = k + more
            had = len(rows)
            rows = c.execute(FIRST_ENTRIES, (qid, n, *cursor)).fetchall()
            if not more:
                after[qid] = None  # (not known: looked up)
                return rows
            complete = len(rows) < n
            rows.reverse()
            self.rows += len(rows) - had
            self.queues[qid] = (rows, complete)
        got = rows[:-k - 1:-1]
        del rows[-k:]
        self.rows -= len(got)
        if rows:
            after[qid] = rows[-1][1]
        else:
            after[qid] = no_head(complete)
            self.queues.pop(qid, None)
        return got

    def read_on(self, c: sqlite3.Connection, after: dict[int, Any],
                cursor: Mapping[int, Sequence[int]]) -> None:
        """After a lease call's rounds: the queues that gave all they had read ahead,
        and may have more, read on now (their cursors moved), which tells their heads
        exactly; those there is no room for are looked up (None)."""
        dry = [qid for qid, h in after.items() if h is MAYBE_MORE]
        if not dry:
            return
        fits = self.room()
        for qid in dry[fits:]:
            after[qid] = None
        self.fill(c, dry[:fits], cursor)
        for qid in dry[:fits]:
            rows = self.queues.get(qid, _NONE)[0]
            after[qid] = rows[-1][1] if rows else NO_HEAD

    def fill(self, c: sqlite3.Connection, qids: Sequence[int],
             cursor: Mapping[int, Sequence[int]]) -> None:
        """Read the next entries of queues ``qids`` past their ``cursor`` s: up to AHEAD
        of each level in one statement per chunk of queues, and of them, in key order,
        those up to the last one read from any level that gave all AHEAD (after it,
        that level may have more). One seek per queue and level serves several
        leases, where the heads statement took three per lease."""
        k = AHEAD
        found: dict[int, list[Row]] = {}
        for part in chunks(sorted(qids), CHUNK // (1 + 2 * len(CURSOR_LEVELS))):
            args = [x for qid in part for x in (qid, *cursor[qid])]
            args.append(k)
            for row in c.execute(ahead_query(len(part)), args):
                rows = found.get(row[0])
                if rows is None:
                    found[row[0]] = [row]
                else:
                    rows.append(row)
        ahead = self.queues
        for qid in qids:
            rows = found.get(qid)
            if rows is None:  # (nothing past its cursors: nothing kept)
                ahead.pop(qid, None)
                continue
            full = False
            if len(rows) >= k:  # (else no level gave k)
                per_level = [0] * len(ENTRY_LEVELS)
                for r in rows:
                    per_level[r[5]] += 1
                ends = [max((r[1], r[2]) for r in rows if r[5] == lv)
                        for lv, n in enumerate(per_level) if n >= k]
                if ends:
                    full = True
                    bound = min(ends)
                    rows = [r for r in rows if (r[1], r[2]) <= bound]
            rows.sort(reverse=True)  # last first; by (qid,) nprio, ord: unique here
            ahead[qid] = (rows, not full)
            self.rows += len(rows)
