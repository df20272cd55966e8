"""The SQLite store's dump: every piece of its state as the records of
:mod:`crawlq.stores.dumpfmt`, read from one snapshot on a connection of its own (so a
dump never holds up the store's writers). Loading is the store's own (a loader in
:mod:`.sqlite` writes in one of its transactions)."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from . import dumpfmt, sqlite_leases
from .base import QUEUE_SETTINGS, DeadEntry
from .bloom import BLOCK_BYTES, BloomShape
from .rules import BUSY, EXHAUSTED
from .sqlite_levels import QUEUED
from .sqlite_schema import SEEN_LEVELS, store_error
from .sqlite_values import KEPT_FOR_GOOD

if TYPE_CHECKING:
    pass

def records(path: str, bloom: BloomShape | None) -> Iterator[dict[str, Any]]:
    """The dump of the store at ``path`` (``bloom``: its filter's shape, or None)."""
    # (a reader may take the records in parts from different threads, one at a time:
    # crawlq serve's listings do)
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    try:
        conn.execute("BEGIN")
        m = dict(conn.execute("SELECT name, value FROM meta"))
        counters = {k: m[k] for k in ("seen", "added", "done", "failed", "retried", "dead",
                                      "redelivered", "late_acks", "duplicates")}
        yield dumpfmt.counters(counters, dict(conn.execute("SELECT reason, n FROM rejected")))
        counts = dict(conn.execute("SELECT name, n FROM tallies WHERE n > 0 ORDER BY name"))
        if counts:
            yield dumpfmt.tallies(counts)
        keys = {}
        for row in conn.execute(
                f"SELECT key, accepted, ready_at, qid, since, inflight > 0 AND state IN "
                f"({BUSY}, {EXHAUSTED}), {', '.join(QUEUE_SETTINGS)} FROM queues "
                "ORDER BY qid"):
            keys[row[3]] = row[0]
            settings = {k: v for k, v in zip(QUEUE_SETTINGS, row[6:]) if v is not None}
            yield dumpfmt.queue(row[0], row[1], row[2], settings, row[4], bool(row[5]))
        # Leased entries first, in the order they were leased (as if they had expired),
        # then each queue's in the order it hands them out, then the scheduled ones.
        for qid, nprio, _, retries, payload in sqlite_leases.open_leases(conn):
            yield dumpfmt.entry(keys[qid], -nprio, retries, payload, None)
        for qid, nprio, _, retries, payload in conn.execute(
                f"SELECT * FROM ({QUEUED}) ORDER BY 1, 2, 3"):
            yield dumpfmt.entry(keys[qid], -nprio, retries, payload, None)
        for qid, nprio, retries, payload, due in conn.execute(
                "SELECT qid, nprio, retries, payload, due FROM scheduled ORDER BY due, id"):
            yield dumpfmt.entry(keys[qid], -nprio, retries, payload, due)
        for did, qid, prio, retries, payload, error, died_at in conn.execute(
                "SELECT id, qid, prio, retries, payload, error, died_at FROM dead"):
            yield dumpfmt.dead(DeadEntry(did, keys[qid], prio, retries, payload, error,
                                         died_at))
        for name, data in conn.execute(KEPT_FOR_GOOD):
            yield dumpfmt.value(name, bytes(data), None)
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
