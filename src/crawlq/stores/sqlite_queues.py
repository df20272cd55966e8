"""What one SQLite store connection remembers of the ``queues`` table between calls.

A queue's id and key never change once the queue exists, so both directions are kept
for the connection's life. Its row (``QUEUE_COLS``: state, head, counters, cursors,
settings) is kept as this connection last read or wrote it, which is valid while no
other connection commits: the store checks ``PRAGMA data_version`` at the start of each
transaction and clears :attr:`QueueCache.rows` when it moved. A single process thus
reads each queue's row once, not in every call.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Sequence
from typing import Any

from .sqlite_levels import chunks, marks
from .sqlite_rows import QUEUE_COLS

CACHED_QUEUES = 200_000
"""Queue rows kept in memory at most (about 450 bytes each); past it they are dropped
all at once and read again as they are needed."""


class QueueCache:
    """Queue ids, keys and rows of one connection (see the module docstring)."""

    def __init__(self) -> None:
        self.qids: dict[str, int] = {}  # key -> qid
        self.keys: dict[int, str] = {}  # qid -> key, the other way
        self.rows: dict[int, tuple[Any, ...]] = {}
        self.stale = False  # set when a call changed queue rows behind the cache's back

    def forget_ids(self) -> None:
        """Drop the ids and keys (a rolled back transaction may have created queues
        whose qids go to other keys)."""
        self.qids.clear()
        self.keys.clear()

    def forget(self, qids: Iterable[int]) -> None:
        """Drop the rows of queues changed other than through the cache."""
        for qid in qids:
            self.rows.pop(qid, None)

    def qid_map(self, c: sqlite3.Connection, keys: Iterable[str]) -> dict[str, int]:
        """key -> qid, creating missing queues (in the transaction ``c``)."""
        cache = self.qids
        missing = [k for k in keys if k not in cache]
        if missing:
            self._read_keys(c, missing)
            new = [k for k in missing if k not in cache]
            if new:
                c.executemany("INSERT INTO queues (key) VALUES (?)", [(k,) for k in new])
                self._read_keys(c, new)
        return cache

    def _read_keys(self, c: sqlite3.Connection, keys: Sequence[str]) -> None:
        for part in chunks(keys):
            for qid, key in c.execute(
                    f"SELECT qid, key FROM queues WHERE key IN ({marks(len(part))})", part):
                self.qids[key] = qid
                self.keys[qid] = key

    def keys_of(self, c: sqlite3.Connection, qids: Sequence[int]) -> dict[int, str]:
        """qid -> key of existing queues."""
        keys = self.keys
        missing = [q for q in qids if q not in keys]
        for part in chunks(missing):
            for qid, key in c.execute(
                    f"SELECT qid, key FROM queues WHERE qid IN ({marks(len(part))})", part):
                keys[qid] = key
                self.qids[key] = qid
        return keys

    def rows_of(self, c: sqlite3.Connection, qids: Sequence[int]) -> list[tuple[Any, ...]]:
        """The rows (``QUEUE_COLS``) of existing queues ``qids``, kept or read."""
        cache = self.rows
        rows = [r for r in map(cache.get, qids) if r is not None]
        if len(rows) < len(qids):
            if len(cache) > CACHED_QUEUES:
                cache.clear()
            for part in chunks([q for q in qids if q not in cache]):
                for row in c.execute(
                        f"SELECT {QUEUE_COLS} FROM queues WHERE qid IN ({marks(len(part))})",
                        part):
                    cache[row[0]] = row
                    rows.append(row)
        return rows
