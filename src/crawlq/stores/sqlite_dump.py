"""The SQLite store's dump and load: every piece of its state as the records of
:mod:`crawlq.stores.dumpfmt`, read from one snapshot on a connection of its own (so a
dump never holds up the store's writers); and the writers that load such records back,
in one of the store's transactions."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from ..errors import ConfigError
from . import dumpfmt, sqlite_leases
from .base import QUEUE_SETTINGS, DeadEntry, check_settings
from .bloom import BLOCK_BYTES, BloomShape
from .sqlite_levels import QUEUED, SeenTx, settle_levels
from .sqlite_rows import SEQ_MAX, Delta
from .sqlite_schema import SEEN_LEVELS, store_error

if TYPE_CHECKING:
    from .sqlite_core import SQLiteCore

PUT_VALUE = "INSERT OR REPLACE INTO vals VALUES (?,?,?)"
"""The statement that keeps a named value (the store's put_values, and load)."""


def records(path: str, bloom: BloomShape | None) -> Iterator[dict[str, Any]]:
    """The dump of the store at ``path`` (``bloom``: its filter's shape, or None)."""
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("BEGIN")
        m = dict(conn.execute("SELECT name, value FROM meta"))
        counters = {k: m[k] for k in ("seen", "added", "done", "failed", "retried", "dead",
                                      "redelivered", "late_acks", "duplicates")}
        yield dumpfmt.counters(counters, dict(conn.execute("SELECT reason, n FROM rejected")))
        keys = {}
        for row in conn.execute(f"SELECT key, accepted, ready_at, qid, "
                                f"{', '.join(QUEUE_SETTINGS)} FROM queues"):
            keys[row[3]] = row[0]
            settings = {k: v for k, v in zip(QUEUE_SETTINGS, row[4:]) if v is not None}
            yield dumpfmt.queue(row[0], row[1], row[2], settings)
        for qid, nprio, retries, payload, due in conn.execute(
                f"{QUEUED} UNION ALL "
                "SELECT qid, nprio, retries, payload, due FROM scheduled"):
            yield dumpfmt.entry(keys[qid], -nprio, retries, payload, due)
        for qid, nprio, _, retries, payload in sqlite_leases.open_leases(conn):
            yield dumpfmt.entry(keys[qid], -nprio, retries, payload, None)
        for did, qid, prio, retries, payload, error, died_at in conn.execute(
                "SELECT id, qid, prio, retries, payload, error, died_at FROM dead"):
            yield dumpfmt.dead(DeadEntry(did, keys[qid], prio, retries, payload, error,
                                         died_at))
        if bloom is not None:
            bits = bytearray(bloom.size_bytes)
            for block, data in conn.execute("SELECT block, bits FROM bloom"):
                bits[block * BLOCK_BYTES:(block + 1) * BLOCK_BYTES] = data
            yield dumpfmt.bloom(bits)
        # Each fingerprint once, from the newest level that has it.
        for fp, revisit_at in conn.execute(" UNION ALL ".join(
                f"SELECT fp, revisit_at FROM {t} s WHERE 1" + "".join(
                    f" AND NOT EXISTS (SELECT 1 FROM {newer} WHERE fp = s.fp)"
                    for newer in SEEN_LEVELS[:level])
                for level, t in enumerate(SEEN_LEVELS))):
            yield dumpfmt.seen(fp, revisit_at)
        conn.execute("COMMIT")
    except sqlite3.Error as exc:
        raise store_error(path, exc) from exc
    finally:
        conn.close()


class Loader:
    """dumpfmt.apply's primitive writers for a SQLite store, inside one transaction (the
    store's ``load`` opens it and sets ``c``). They write as the store's own calls do,
    through its helpers: its queue ids, sequences, level-0 rules and counters."""

    def __init__(self, store: SQLiteCore) -> None:
        self.store = store
        self.c: sqlite3.Connection
        self.seen: SeenTx | None = None
        self.deltas: dict[int, Delta] = {}
        self.counts: dict[str, int] = {}
        self.entries = 0  # queued entries loaded since the last level merge check

    def _qid(self, key: str) -> int:
        return self.store._queues.qid_map(self.c, [key])[key]

    def _load_seen(self, fp: bytes, revisit_at: float | None) -> None:
        if self.seen is None:
            self.seen = SeenTx(self.c, self.store._bloom)
        if self.store._bloom is not None:
            self.seen.prefetch([fp])
        marks = self.seen.marks
        marks.mark(fp, revisit_at)
        marks.batch.clear()
        if len(marks.fresh) > 10_000 or len(marks.dirty) > 1_000:
            self.seen.flush()
            marks.fresh.clear()
            marks.dirty.clear()

    def _load_bloom(self, bits: bytes) -> None:
        shape = self.store._bloom
        if shape is None or len(bits) != shape.size_bytes:
            raise ConfigError("dump has a Bloom filter of another shape than this store")
        for b in range(shape.blocks):
            chunk = bits[b * BLOCK_BYTES:(b + 1) * BLOCK_BYTES]
            if any(chunk):
                row = self.c.execute("SELECT bits FROM bloom WHERE block=?", (b,)).fetchone()
                merged = bytes(x | y for x, y in zip(chunk, row[0])) if row else chunk
                self.c.execute("INSERT OR REPLACE INTO bloom VALUES (?, ?)", (b, merged))

    def _load_entry(self, key: str, priority: int, retries: int, payload: bytes,
                    not_before: float | None) -> None:
        qid = self._qid(key)
        seq = self.store._take(self.c, "entry_seq", 1) + 1
        order = SEQ_MAX - seq if self.store.lifo else seq
        self.counts["queued"] = self.counts.get("queued", 0) + 1
        if not_before is not None:
            self.c.execute("INSERT INTO scheduled (due, qid, nprio, ord, retries, payload) "
                           "VALUES (?,?,?,?,?,?)", (not_before, qid, -priority, order, retries,
                                                     payload))
            self.counts["scheduled"] = self.counts.get("scheduled", 0) + 1
            return
        self.store._before_level0(self.c, [(qid, -priority, order)])
        self.c.execute("INSERT INTO entries0 VALUES (?,?,?,?,?)",
                       (qid, -priority, order, retries, payload))
        self.entries += 1
        if self.entries >= 10_000:
            self.store._settled(settle_levels(self.c, "entries", self.entries))
            self.entries = 0
        d = self.deltas.get(qid) or self.deltas.setdefault(qid, Delta())
        d.queued += 1
        d.offer_head(-priority)

    def _load_queue(self, key: str, accepted: int, ready_at: float,
                    settings: Mapping[str, float]) -> None:
        qid = self._qid(key)
        clean = check_settings(settings)
        self.store._queues.forget([qid])
        self.c.execute("UPDATE queues SET accepted = max(accepted, ?) WHERE qid=?",
                       (accepted, qid))
        if clean:
            cols = ", ".join(f"{k}=?" for k in clean)
            self.c.execute(f"UPDATE queues SET {cols} WHERE qid=?", (*clean.values(), qid))
        d = self.deltas.get(qid) or self.deltas.setdefault(qid, Delta())
        d.ready_at = max(d.ready_at, ready_at)

    def _load_dead(self, queue: str, priority: int, retries: int, payload: bytes,
                   error: str, died_at: float) -> None:
        self.c.execute("INSERT INTO dead (qid, prio, retries, payload, error, died_at) "
                       "VALUES (?,?,?,?,?,?)",
                       (self._qid(queue), priority, retries, payload, error, died_at))
        self.counts["dead"] = self.counts.get("dead", 0) + 1

    def _load_counters(self, counters: Mapping[str, int], rejected: Mapping[str, int]) -> None:
        for k, v in counters.items():
            if k in ("seen", "added", "done", "failed", "retried", "redelivered",
                     "late_acks", "duplicates"):
                self.counts[k] = self.counts.get(k, 0) + int(v)
        if rejected:
            self.store._reject(self.c, {r: int(v) for r, v in rejected.items()})

    def _load_value(self, name: str, data: bytes, expires: float | None) -> None:
        self.c.execute(PUT_VALUE, (name, bytearray(data), expires))

    def finish(self) -> None:
        if self.seen is not None:
            self.seen.flush()
        self.store._settled(settle_levels(self.c, "entries", self.entries))
        # Time 0: every queue whose rest has not passed is resting; the next wake fixes it.
        self.store._apply(self.c, self.deltas, 0.0)
        self.store._count(self.c, **self.counts)

