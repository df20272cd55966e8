"""The SQLite store's named values (``put_values``, ``get_values``, ``drop_values``): a
log of the latest writes, appended, over the table of values by name.

A batch of values whose names are spread over the key space (``crawlq serve`` keeps one
per URL fetched, named after the URL's digest) written into a table ordered by name
rewrites about one page of it per value, as a batch of new rows in one big B-tree does
(docs/benchmarks.md#why-the-sqlite-store-is-built-as-it-is; the entries and the
seen-set are leveled for the same reason). So a value is first appended to the log,
``vals_log``, under a sequence number (a batch writes a few pages at the end of it),
and the log is merged into ``vals`` in name order once it holds :func:`log_limit` rows:
each page of ``vals`` written once per merge, however many of its values changed. The
limit grows with ``vals`` (a fixed one made each merge rewrite the whole table for the
same number of values, so a value's cost grew with the table), bounded by the memory the
log's names take.

The log holds at most one row per name, newer than the name's row in ``vals`` (if
any): a name found in the log is answered from it (nothing, once its time is up), other
names from ``vals``. The log has no index by name (that index would be the random
write again): each connection keeps one in memory (:class:`ValueLog`), name -> sequence
number, read from the log when it is first needed and then kept up to date: its own
writes change it, another connection's are read by their numbers (``id`` above the
last one known) when ``PRAGMA data_version`` says that one committed, and it is read
again whole after a merge or a clear (meta ``vals_merged`` changed) or a rolled-back
transaction. An entry whose row another connection deleted (a drop, a replacement, a
value whose time was up) finds no row: the name is read from ``vals``, which that
connection changed in the same transaction.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence

from .sqlite_levels import chunks, insert_flat, marks

LOG_ROWS = 50_000
"""Values written into the log (replacements included) at which the write that reaches
them merges it into ``vals``, while ``vals`` holds up to ``LOG_SHARE`` times as many."""
MAX_LOG_ROWS = 200_000
"""The most values written into the log before a merge however big ``vals`` is (the
merging write's batch aside): the names a connection keeps in memory (~33 MB of
``crawlq serve``'s at most)."""
LOG_SHARE = 4
"""The log holds up to 1/LOG_SHARE of ``vals``' rows (see :func:`log_limit`)."""


def log_limit(rows: int) -> int:
    """Values in the log at which the write that reaches them merges it, with ``rows``
    in ``vals``.

    A merge writes every page of ``vals`` that the log's names fall on: nearly all of
    them once the log holds more values than ``vals`` has pages, as it soon does (names
    are digests, spread over the key space). So a merge costs about the size of
    ``vals``, and a value about ``rows / limit`` rows rewritten: a limit that grows with
    ``vals`` keeps that constant (LOG_SHARE) until MAX_LOG_ROWS. Measured in process
    (``uf_ops`` put and answered as the server calls them, 100,000 URLs a round on one
    store): the merge took 1.4 µs a URL in the first round and 6.2 in the sixth (600,000
    values) with a fixed 50,000.
    """
    return max(LOG_ROWS, min(MAX_LOG_ROWS, rows // LOG_SHARE))

Item = tuple[str, bytes, float | None]


class ValueLog:
    """One connection's view of the log: the names in it, by sequence number."""

    def __init__(self) -> None:
        self._ids: dict[str, int] = {}  # name -> its row in the log
        self._last = 0  # the highest sequence number read or written
        self._merged: int | None = None  # meta vals_merged when _ids was read (None: read)
        self._behind = False  # another connection committed since _ids was read
        self._limit = LOG_ROWS  # (log_limit of vals' rows when the log was last merged)

    def others_wrote(self) -> None:
        """Another connection committed: read its rows before the next use."""
        self._behind = True

    def forget(self) -> None:
        """A transaction was rolled back: what this connection wrote in it is not in
        the log; read the log again before the next use."""
        self._merged = None

    def _sync(self, c: sqlite3.Connection) -> int:
        """Bring the names up to date inside the transaction; returns meta vals_seq."""
        if self._merged is not None and not self._behind:
            return self._last
        seq, merged, rows = c.execute(
            "SELECT (SELECT value FROM meta WHERE name='vals_seq'), "
            "(SELECT value FROM meta WHERE name='vals_merged'), "
            "(SELECT value FROM meta WHERE name='vals_rows')").fetchone()
        seq, merged = int(seq), int(merged)
        if merged != self._merged:
            self._ids = dict(c.execute("SELECT name, id FROM vals_log"))
            self._merged = merged
        else:
            self._ids.update(c.execute("SELECT name, id FROM vals_log WHERE id > ?",
                                       (self._last,)))
        # (vals' rows at the last merge or clear: none recorded before the first one, or
        # in a file of an older crawlq, whose log is merged at LOG_ROWS once more)
        self._limit = log_limit(int(rows or 0))
        self._last, self._behind = seq, False
        return seq

    def put(self, c: sqlite3.Connection, items: Sequence[Item]) -> None:
        """Write values (a name given twice: the later one), each replacing its name's."""
        seq = self._sync(c)
        newest = {name: (value, expires) for name, value, expires in items}
        old = [i for name in newest if (i := self._ids.get(name)) is not None]
        for part in chunks(old):
            c.execute(f"DELETE FROM vals_log WHERE id IN ({marks(len(part))})", part)
        flat: list[object] = []
        for name, (value, expires) in newest.items():
            seq += 1
            self._ids[name] = seq
            flat += (seq, name, bytearray(value), expires)
        insert_flat(c, "INSERT INTO vals_log (id, name, value, expires)", 4, flat)
        self._last = seq
        c.execute("UPDATE meta SET value=? WHERE name='vals_seq'", (seq,))
        if seq - (self._merged or 0) >= self._limit:
            self._merge(c, seq)

    def _merge(self, c: sqlite3.Connection, seq: int) -> None:
        """Move the log into ``vals`` in name order (replacing what is there) and empty
        it: every page of ``vals`` the log's names fall on is written once."""
        c.execute("INSERT OR REPLACE INTO vals SELECT name, value, expires FROM vals_log "
                  "ORDER BY name")
        self._emptied(c, seq)

    def _emptied(self, c: sqlite3.Connection, seq: int) -> None:
        c.execute("DELETE FROM vals_log")
        # (vals' rows counted once a merge: a scan of the table, from the OS's cache or
        # the WAL past SQLite's own, cheaper than the merge that rewrote it; it sets
        # the next log's size for every connection)
        (rows,) = c.execute("SELECT count(*) FROM vals").fetchone()
        c.executemany("INSERT OR REPLACE INTO meta (name, value) VALUES (?, ?)",
                      (("vals_merged", seq), ("vals_rows", rows)))
        self._ids.clear()
        self._merged = seq
        self._limit = log_limit(rows)

    def get(self, c: sqlite3.Connection, names: Sequence[str],
            now: float) -> list[bytes | None]:
        """The values of ``names`` (None: none, or its time is up at ``now``)."""
        self._sync(c)
        got: dict[str, bytes | None] = {}
        logged = [i for n in names if (i := self._ids.get(n)) is not None]
        for part in chunks(logged):
            # (a row found is the name's newest: numbers are never given twice)
            for name, value, expires in c.execute(
                    f"SELECT name, value, expires FROM vals_log WHERE id IN "
                    f"({marks(len(part))})", part):
                got[name] = None if expires is not None and expires <= now else bytes(value)
        rest = [n for n in names if n not in got]
        for names_part in chunks(rest):
            got.update((n, bytes(v)) for n, v in c.execute(
                f"SELECT name, value FROM vals WHERE name IN ({marks(len(names_part))}) "
                "AND (expires IS NULL OR expires > ?)", (*names_part, now)))
        return [got.get(n) for n in names]

    def drop(self, c: sqlite3.Connection, names: Sequence[str]) -> None:
        """Remove values, wherever they are."""
        self._sync(c)
        c.executemany("DELETE FROM vals WHERE name=?", [(n,) for n in names])
        ids = [i for n in names if (i := self._ids.pop(n, None)) is not None]
        for part in chunks(ids):
            c.execute(f"DELETE FROM vals_log WHERE id IN ({marks(len(part))})", part)

    def expire(self, c: sqlite3.Connection, now: float) -> None:
        """Drop the values whose time is up (an older row of the name in ``vals`` too:
        the log's row replaced it)."""
        c.execute("DELETE FROM vals WHERE name IN (SELECT name FROM vals_log WHERE "
                  "expires <= ?)", (now,))
        c.execute("DELETE FROM vals_log WHERE expires <= ?", (now,))
        c.execute("DELETE FROM vals WHERE expires <= ?", (now,))

    def clear(self, c: sqlite3.Connection) -> None:
        """Remove every value."""
        seq = self._sync(c)
        c.execute("DELETE FROM vals")
        self._emptied(c, seq)


NEXT_EXPIRY = ("SELECT min(t) FROM (SELECT min(expires) AS t FROM vals WHERE expires IS NOT "
               "NULL UNION ALL SELECT min(expires) FROM vals_log WHERE expires IS NOT NULL)")
"""When the next value's time is up (NULL: none has a time), through both expiry
indexes."""

KEPT_FOR_GOOD = ("SELECT name, value FROM vals v WHERE expires IS NULL AND name NOT IN "
                 "(SELECT name FROM vals_log) UNION ALL SELECT name, value FROM vals_log "
                 "WHERE expires IS NULL ORDER BY name")
"""Every value kept for good (no expiry), by name: the log's, and the others of
``vals`` (a store's dump)."""
