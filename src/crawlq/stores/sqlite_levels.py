"""The SQL of the SQLite store's levels: statements built for ``n`` rows, the queries
that read queues' first entries past their cursors, the seen-set's lookups and writes
inside a transaction, and the merges of level 0 into level 1 into level 2 (the layout
is described in :mod:`crawlq.stores.sqlite_schema`). Plain functions of a connection:
:class:`~crawlq.stores.sqlite.SQLiteStore` calls them inside its transactions.
"""

from __future__ import annotations

import functools
import sqlite3
from collections.abc import Iterable, Iterator, Sequence
from itertools import chain
from typing import Any, TypeVar

from .bloom import BloomShape
from .sqlite_rows import SeenMarks
from .sqlite_schema import (
    CURSOR_LEVELS,
    ENTRY_LEVELS,
    L0_ROWS,
    NO_CURSOR,
    SEEN_LEVELS,
    SLICES,
)

CHUNK = 900
"""Bound parameters per statement, under every SQLite's default limit."""
_T = TypeVar("_T")


def chunks(seq: Sequence[_T], n: int = CHUNK) -> Iterator[Sequence[_T]]:
    """``seq`` in slices of at most ``n`` (one statement's parameters each)."""
    for i in range(0, len(seq), n):
        yield seq[i:i + n]


def marks(n: int) -> str:
    """``n`` parameter marks, comma-separated (for ``IN (...)``)."""
    return ",".join("?" * n)


@functools.lru_cache(maxsize=64)
def values_sql(head: str, width: int, n: int) -> str:
    """``head`` (an INSERT up to its VALUES) with ``n`` rows of ``width`` parameters."""
    row = "(" + ",".join("?" * width) + ")"
    return f"{head} VALUES {','.join([row] * n)}"


def insert_rows(c: sqlite3.Connection, head: str, width: int,
                 rows: Sequence[Sequence[Any]]) -> None:
    """Insert ``rows`` (``width`` values each) in multi-row VALUES statements, in order.

    One statement steps once for many rows, where executemany steps (and pysqlite
    releases and takes the GIL) once per row: about 30% less time per inserted row.
    Statements hold a full chunk of rows, and the rest goes in powers of two, so that
    few statement texts are prepared and they stay in the statement cache.
    """
    insert_flat(c, head, width, list(chain.from_iterable(rows)))


def insert_flat(c: sqlite3.Connection, head: str, width: int, values: list[Any]) -> None:
    """insert_rows of rows given one after the other in a flat list (no tuple per row:
    fewer objects alive at once, so fewer garbage collector passes)."""
    per = CHUNK // width
    i, n = 0, len(values) // width
    while i < n:
        k = min(per, n - i)
        if k < per:
            k = 1 << (k.bit_length() - 1)
        c.execute(values_sql(head, width, k), values[i * width:(i + k) * width])
        i += k


class SeenTx:
    """The seen-set inside one transaction: its marks (sqlite_rows.SeenMarks), read
    for a call's fingerprints (prefetch) and written at its end (flush)."""

    def __init__(self, c: sqlite3.Connection, bloom: BloomShape | None) -> None:
        self.c = c
        self.marks = SeenMarks(bloom)

    def prefetch(self, fps: list[bytes]) -> None:
        m = self.marks
        if m.bloom is not None:
            wanted = sorted({m.bloom.locate(fp)[0] for fp in fps})
            for part in chunks(wanted):
                for block, bits in self.c.execute(
                        f"SELECT block, bits FROM bloom WHERE block IN ({marks(len(part))})",
                        part):
                    m.blocks[block] = bytearray(bits)
            return
        # One statement per chunk for all levels, the parameters bound once (?1..?n in
        # each part); UNION ALL keeps the parts' order, oldest level first, so a newer
        # level's row overrides an older one in the dict.
        for chunk in chunks(sorted(fps)):
            m.known.update(self.c.execute(seen_lookup(len(chunk)), list(map(bytearray,
                                                                             chunk))))

    def flush(self) -> None:
        m = self.marks
        if m.fresh:
            # In key order, so the inserts walk the b-tree once; REPLACE for revisits.
            # Without a revisit time, revisit_at is left NULL (see QUEUE_COLS on None).
            # (the bare fingerprints sorted: a third faster than the (fp, at) pairs)
            insert_flat(self.c, "INSERT OR REPLACE INTO seen0 (fp)", 1, [
                bytearray(fp) for fp in sorted([fp for fp, at in m.fresh if at is None])])
            insert_rows(self.c, "INSERT OR REPLACE INTO seen0 (fp, revisit_at)", 2, [
                (bytearray(fp), at) for fp, at in sorted(
                    [(fp, at) for fp, at in m.fresh if at is not None])])
            settle_levels(self.c, "seen", len(m.fresh))
        if m.dirty:
            self.c.executemany("INSERT OR REPLACE INTO bloom (block, bits) VALUES (?, ?)",
                               [(b, bytes(m.blocks[b])) for b in m.dirty])


def _past(cursors: Iterable[tuple[str, str]]) -> tuple[str, ...]:
    """Per level, the condition on its rows ``y``: each level is read past the queue's
    cursor there (SQL for nprio, NULL for none, and ord; per CURSOR_LEVELS; see
    sqlite_schema); the rows at or before it are leased or done."""
    return tuple(f" AND (y.nprio, y.ord) > (ifnull({n}, {NO_CURSOR}), {o})"
                 for n, o in cursors)


def _queues_with_cursors(n: int) -> str:
    """``WITH q(qid, n0, o0, ...)``: ``n`` queues and their cursors (nprio, ord per
    CURSOR_LEVELS) as parameters, a table for the statement after it to join."""
    width = 1 + 2 * len(CURSOR_LEVELS)
    rows = ",".join("(" + ",".join("?" * width) + ")" for _ in range(n))
    names = "".join(f", n{lv}, o{lv}" for lv in CURSOR_LEVELS)
    return f"WITH q(qid{names}) AS (VALUES {rows}) "


@functools.lru_cache(maxsize=64)
def heads_query(n: int) -> str:
    """The first entry (best priority, then order) of ``n`` queues in each entry level,
    tagged with the level's index and the priority of the entry after it in that level
    (NULL: none): up to one row per level and queue. Parameters per queue: qid and its
    cursors (nprio, ord per CURSOR_LEVELS); each level's first entry is one index seek,
    the one after it another."""
    return _queues_with_cursors(n) + " UNION ALL ".join(
        # (the entry after the first: the same seek past the cursor, one step further; a
        # seek on (nprio, ord) > (e.nprio, e.ord) would be by nprio alone and step over
        # the leased rows behind the cursor)
        f"SELECT e.qid, e.nprio, e.ord, e.retries, e.payload, {level}, (SELECT y.nprio "
        f"FROM {t} y WHERE y.qid = q.qid{past} ORDER BY y.nprio, y.ord LIMIT 1 OFFSET 1) "
        f"FROM q JOIN {t} e ON e.qid = q.qid AND (e.nprio, e.ord) = (SELECT y.nprio, y.ord "
        f"FROM {t} y WHERE y.qid = q.qid{past} ORDER BY y.nprio, y.ord LIMIT 1)"
        for level, (t, past) in enumerate(zip(ENTRY_LEVELS, _past(
            (f"q.n{lv}", f"q.o{lv}") for lv in CURSOR_LEVELS))))


@functools.lru_cache(maxsize=64)
def ahead_query(n: int) -> str:
    """The first k entries past their cursors of ``n`` queues in each entry level,
    tagged with the level's index (parameters as for heads_query, then k). Per queue
    and level: one seek for the list of keys, then one exact seek per entry."""
    k = n * (1 + 2 * len(CURSOR_LEVELS)) + 1  # (the number of k's parameter)
    return _queues_with_cursors(n) + " UNION ALL ".join(
        f"SELECT e.qid, e.nprio, e.ord, e.retries, e.payload, {level} FROM q JOIN {t} e "
        f"ON e.qid = q.qid AND (e.nprio, e.ord) IN (SELECT y.nprio, y.ord FROM {t} y "
        f"WHERE y.qid = q.qid{past} ORDER BY y.nprio, y.ord LIMIT ?{k})"
        for level, (t, past) in enumerate(zip(ENTRY_LEVELS, _past(
            (f"q.n{lv}", f"q.o{lv}") for lv in CURSOR_LEVELS))))


QUEUED = " UNION ALL ".join(
    f"SELECT y.qid, y.nprio, y.ord, y.retries, y.payload FROM {t} y"
    + (f" JOIN queues q ON q.qid = y.qid WHERE 1{past}" if past else "")
    for t, past in zip(ENTRY_LEVELS, _past(
        (f"q.l{level}_nprio", f"q.l{level}_ord") for level in CURSOR_LEVELS)))
"""Every queued entry (qid, nprio, ord, retries, payload) of the levels."""

FIRST_ENTRIES = " UNION ALL ".join(
    f"SELECT y.qid, y.nprio, y.ord, y.retries, y.payload, {level} FROM {t} y WHERE "
    f"y.qid=?1{past}"
    for level, (t, past) in enumerate(zip(ENTRY_LEVELS, _past(
        (f"?{2 * i + 3}", f"?{2 * i + 4}") for i in range(len(CURSOR_LEVELS)))))
) + " ORDER BY 2, 3 LIMIT ?2"
"""A queue's first ``?2`` queued entries over all levels, tagged with the level index;
``?3`` on: the queue's cursors (nprio, ord per CURSOR_LEVELS). (Each level is scanned in
key order and the scans merged until the limit: no sorting, no more rows read.)"""


@functools.lru_cache(maxsize=64)
def seen_lookup(n: int) -> str:
    """SELECT fp, revisit_at for ``n`` fingerprints from every seen level, oldest first.

    The fingerprints come as a VALUES list joined to each level, which SQLite walks in
    order, one primary-key seek each; ``fp IN (?, ...)`` built an ephemeral index of the
    list for every level first (10% slower, measured when this was made).
    """
    values = ",".join(f"(?{i})" for i in range(1, n + 1))
    return f"WITH k(fp) AS (VALUES {values}) " + " UNION ALL ".join(
        f"SELECT s.fp, s.revisit_at FROM k JOIN {t} s ON s.fp = k.fp"
        for t in reversed(SEEN_LEVELS))


# kind -> (tables: level 0, 1, 2; slicing column; row counter; slice cursor; insert verb;
# merge order; the meta counter that tells the kind's size)
_LEVEL_KINDS = {
    "seen": (SEEN_LEVELS, "fp", "seen0_keys", "seen_slice",
             # REPLACE: a newer level's revisit_at wins
             "INSERT OR REPLACE", "fp", "seen"),
    "entries": (ENTRY_LEVELS, "qid", "entries0_rows", "entry_slice",
                "INSERT", "qid, nprio, ord", "queued"),
}
_L0_GROWTH = 50
"""Level 0 holds at least 1/_L0_GROWTH of its kind's rows (see l0_limit)."""


def l0_limit(total: int) -> int:
    """Rows in level 0 that trigger a merge, for a kind with ``total`` rows: L0_ROWS, and
    from 2.5M rows on 1/50 of them, up to 4 x L0_ROWS (200k at 10M).

    A merge moves one slice of level 1 into level 2 and so rewrites about 1/SLICES of
    level 2: with a fixed level 0, the pages rewritten per added row grow with the store.
    Growing level 0 with it keeps that constant, while small stores keep a small level 0
    (every add batch rewrites its pages). Measured on a 10M-URL store, 400k adds ran at
    37.1k/s with 50k rows, 39.3k/s with 100k, 45.4k/s with 200k.
    """
    return max(L0_ROWS, min(4 * L0_ROWS, total // _L0_GROWTH))


def settle_levels(c: sqlite3.Connection, kind: str, n: int) -> bool:
    """Count ``n`` new rows into level 0 of ``kind``; merge the levels when it is full
    (l0_limit; then returns True: queue rows may have changed, their cursors reset).

    One merge: all of level 0 into level 1, then one slice of the key space (a rotating
    cursor) of level 1 into level 2. Both in key order, so each writes every page of its
    target range once (see crawlq.stores.sqlite_schema).
    """
    (l0, l1, l2), col, counter, cursor_name, insert, order, size = _LEVEL_KINDS[kind]
    meta = dict(c.execute("SELECT name, value FROM meta WHERE name IN (?, ?, ?)",
                          (counter, cursor_name, size)))
    rows = int(meta[counter]) + n
    cursor = int(meta[cursor_name])
    if rows >= l0_limit(int(meta[size])):
        if kind == "entries":
            # What the queues leased in level 0 (behind their cursors) ends there, and
            # the queues whose new rows sort before their level-1 cursor (a better
            # priority, a lease come back) drop what they leased there.
            drop_behind_cursors(c, 0, c.execute(
                "SELECT qid, l0_nprio, l0_ord FROM queues WHERE l0_nprio IS NOT NULL "
                "ORDER BY qid").fetchall())
            drop_behind_cursors(c, 1, c.execute(_OVERTAKEN).fetchall())
        c.execute(f"{insert} INTO {l1} SELECT * FROM {l0} ORDER BY {order}")
        c.execute(f"DELETE FROM {l0}")
        lo, hi = _slice_bounds(c, kind, cursor)
        if kind == "entries":
            # The slice leaves level 1 for level 2: what its queues leased in either goes.
            # (Level 0's cursors were all reset just now.)
            for level in (1, 2):
                drop_behind_cursors(c, level, c.execute(
                    f"SELECT qid, l{level}_nprio, l{level}_ord FROM queues WHERE qid >= ? AND "
                    f"qid < ? AND l{level}_nprio IS NOT NULL", (lo, hi)).fetchall())
        c.execute(f"{insert} INTO {l2} SELECT * FROM {l1} WHERE {col} >= ? AND {col} < ? "
                  f"ORDER BY {order}", (lo, hi))
        c.execute(f"DELETE FROM {l1} WHERE {col} >= ? AND {col} < ?", (lo, hi))
        rows, cursor, merged = 0, (cursor + 1) % SLICES, True
    else:
        merged = False
    c.executemany("UPDATE meta SET value=? WHERE name=?",
                  ((rows, counter), (cursor, cursor_name)))
    return merged


_OVERTAKEN = (f"SELECT DISTINCT q.qid, q.l1_nprio, q.l1_ord FROM {ENTRY_LEVELS[0]} y "
              "JOIN queues q ON q.qid = y.qid WHERE q.l1_nprio IS NOT NULL AND "
              "(y.nprio, y.ord) <= (q.l1_nprio, q.l1_ord) ORDER BY q.qid")
"""The queues (qid and level-1 cursor) with a row in level 0 that sorts before the
cursor (run once level 0 holds queued rows only)."""


def drop_behind_cursors(c: sqlite3.Connection, level: int,
                         behind: Sequence[tuple[int, int, int]]) -> None:
    """Delete the rows of entry ``level`` behind the given cursors (qid, nprio, ord: what
    those queues leased there; in key order) and reset the cursors."""
    assert level in CURSOR_LEVELS
    c.executemany(f"DELETE FROM {ENTRY_LEVELS[level]} WHERE qid = ?1 AND (nprio, ord) <= "
                  "(?2, ?3)", behind)
    c.executemany(f"UPDATE queues SET l{level}_nprio=NULL, l{level}_ord=0 WHERE qid=?",
                  [(r[0],) for r in behind])


def _slice_bounds(c: sqlite3.Connection, kind: str, i: int) -> tuple[Any, Any]:
    """Slice ``i`` of a level's key space: fingerprints by first byte (BLOBs compare as
    memcmp), queue ids by range (the last slice open-ended, as queues keep coming)."""
    if kind == "seen":
        step = 256 // SLICES
        return bytes([step * i]), bytes([step * (i + 1)]) if i + 1 < SLICES else b"\xff" * 64
    (top,) = c.execute("SELECT max(qid) FROM queues").fetchone()
    step = (top or 0) // SLICES + 1
    return step * i, step * (i + 1) if i + 1 < SLICES else 2**62
