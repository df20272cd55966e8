"""What one SQLite store connection remembers of the ``queues`` table between calls.

A queue's id, key and domain never change once the queue exists, so they are kept for
the connection's life, as are the ids of domains (made as their first queue is, never
removed but by ``clear``). Its row (``QUEUE_COLS``: state, head, counters, cursors,
settings) is kept as this connection last read or wrote it, which is valid while no
other connection commits: the store checks ``PRAGMA data_version`` at the start of each
transaction and clears :attr:`QueueCache.rows` when it moved. A single process thus
reads each queue's row once, not in every call.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ..policies.domains import domain_of
from .policy import QueuePolicy
from .sqlite_levels import chunks, marks
from .sqlite_rows import Q_ACCEPTED, QUEUE_COLS

CACHED_QUEUES = 200_000
"""Queue rows kept in memory at most (about 450 bytes each); past it they are dropped
all at once and read again as they are needed."""


class QueueCache:
    """Queue ids, keys and rows of one connection (see the module docstring)."""

    def __init__(self) -> None:
        self.qids: dict[str, int] = {}  # key -> qid
        self.keys: dict[int, str] = {}  # qid -> key, the other way
        self.dids: dict[int, int | None] = {}  # qid -> its domain's id (None: none)
        self.domains: dict[str, int] = {}  # domain name -> its id
        self.grouped = False  # queues made get their domain (the store's rules.groups)
        self.rows: dict[int, tuple[Any, ...]] = {}
        self.stale = False  # set when a call changed queue rows behind the cache's back

    def forget_ids(self) -> None:
        """Drop the ids and keys (a rolled back transaction may have created queues
        whose qids go to other keys)."""
        self.qids.clear()
        self.keys.clear()
        self.dids.clear()
        self.domains.clear()

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
            self.create(c, [k for k in missing if k not in cache], self.grouped)
        return cache

    def existing(self, c: sqlite3.Connection, keys: Iterable[str]) -> list[str]:
        """Of ``keys``, those that have no queue (the others are in :attr:`qids`)."""
        cache = self.qids
        missing = [k for k in keys if k not in cache]
        if missing:
            self._read_keys(c, missing)
        return [k for k in missing if k not in cache]

    def create(self, c: sqlite3.Connection, keys: Sequence[str],
               grouped: bool = True) -> list[int]:
        """Make queues ``keys`` (none exists), each in its domain (``grouped``: the store
        keeps domains, :func:`.rules.groups`); their qids."""
        if not keys:
            return []
        dids: Sequence[int | None] = (self.domain_ids(c, [domain_of(k) for k in keys])
                                      if grouped else [None] * len(keys))
        c.executemany("INSERT INTO queues (key, did) VALUES (?, ?)", zip(keys, dids))
        self._read_keys(c, keys)
        return [self.qids[k] for k in keys]

    def drop(self, c: sqlite3.Connection, qids: Sequence[int]) -> None:
        """Delete queues ``qids``, made in this transaction and given nothing."""
        for part in chunks(qids):
            c.execute(f"DELETE FROM queues WHERE qid IN ({marks(len(part))})", part)
        for qid in qids:
            del self.qids[self.keys.pop(qid)]
            self.dids.pop(qid, None)
            self.rows.pop(qid, None)

    def domain_ids(self, c: sqlite3.Connection, names: Sequence[str]) -> list[int]:
        """The ids of domains ``names``, made where they do not exist."""
        cache = self.domains
        missing = list(dict.fromkeys(n for n in names if n not in cache))
        if missing:
            c.executemany("INSERT OR IGNORE INTO domains (name) VALUES (?)",
                          [(n,) for n in missing])
            for part in chunks(missing):
                cache.update(c.execute(
                    f"SELECT name, did FROM domains WHERE name IN ({marks(len(part))})", part))
        return [cache[n] for n in names]

    def dids_of(self, c: sqlite3.Connection, qids: Sequence[int]) -> dict[int, int | None]:
        """qid -> domain id of existing queues ``qids``."""
        dids = self.dids
        missing = [q for q in qids if q not in dids]
        for part in chunks(missing):
            for qid, key, did in c.execute(
                    f"SELECT qid, key, did FROM queues WHERE qid IN ({marks(len(part))})", part):
                self._know(qid, key, did)
        return dids

    def _know(self, qid: int, key: str, did: int | None) -> None:
        self.qids[key] = qid
        self.keys[qid] = key
        self.dids[qid] = did

    def _read_keys(self, c: sqlite3.Connection, keys: Sequence[str]) -> None:
        for part in chunks(keys):
            for qid, key, did in c.execute(
                    f"SELECT qid, key, did FROM queues WHERE key IN ({marks(len(part))})",
                    part):
                self._know(qid, key, did)

    def keys_of(self, c: sqlite3.Connection, qids: Sequence[int]) -> dict[int, str]:
        """qid -> key of existing queues."""
        keys = self.keys
        missing = [q for q in qids if q not in keys]
        for part in chunks(missing):
            for qid, key, did in c.execute(
                    f"SELECT qid, key, did FROM queues WHERE qid IN ({marks(len(part))})",
                    part):
                self._know(qid, key, did)
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


class Domains:
    """What one add call needs of the domains it touches (:func:`.rules.domain_refusal`):
    the entries each accepted (read where ``max_domain_urls`` caps them) and the queues
    each has (read for the domains of queues the call would make, where
    ``max_domain_queues`` caps them); :func:`.sqlite_rows.admit` counts them up."""

    def __init__(self, c: sqlite3.Connection, policy: QueuePolicy, cache: QueueCache,
                 new_keys: Sequence[str]) -> None:
        self.policy = policy
        self.accepted: dict[int, int] = {}  # did -> entries accepted
        self.queues: dict[int, int] = {}  # did -> queues it has
        if new_keys and policy.max_domain_queues > 0:
            dids = sorted(set(cache.domain_ids(c, [domain_of(k) for k in new_keys])))
            for part in chunks(dids):
                self.queues.update(c.execute(
                    f"SELECT did, count(*) FROM queues WHERE did IN ({marks(len(part))}) "
                    "GROUP BY did", part))

    def read_accepted(self, c: sqlite3.Connection, dids: Iterable[int]) -> None:
        """Read the entries accepted by domains ``dids``, where they are capped."""
        if self.policy.max_domain_urls > 0:
            for part in chunks(sorted(dids)):
                self.accepted.update(c.execute(
                    f"SELECT did, accepted FROM domains WHERE did IN ({marks(len(part))})",
                    part))

    @staticmethod
    def write_accepted(c: sqlite3.Connection, dids: Mapping[int, int],
                       accepted: Mapping[int, int], rows: Mapping[int, Sequence[Any]]) -> None:
        """Add to each domain what its queues accepted in the call (``accepted``: qid ->
        its count after the call; ``rows``: its queue row before)."""
        grown: dict[int, int] = {}
        for qid, n in accepted.items():
            n -= rows[qid][Q_ACCEPTED]
            if n:
                did = dids[qid]
                grown[did] = grown.get(did, 0) + n
        if grown:
            c.executemany("UPDATE domains SET accepted=accepted+? WHERE did=?",
                          [(n, did) for did, n in grown.items()])
