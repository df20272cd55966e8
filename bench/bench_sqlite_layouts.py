#!/usr/bin/env python3
"""An experiment for SQLite tables at scale: one B-tree vs three levels merged in key order.

Not crawlq code: plain sqlite3 with the SQLite store's settings (WAL, synchronous=NORMAL,
the same checkpoint limits) and one of its tables' rows, written in batches of --batch
rows per transaction, as SQLiteStore.add does.

- ``--table seen``: the seen-set's rows (16-byte random fingerprint, revisit_at); each
  batch is first looked up (prefetch), then its new keys inserted.
- ``--table entries``: queue entries (queue id, negated priority, order, retries, a
  60-byte payload) clustered by queue, over --queues queues picked at random per row.

Layouts:

- ``one``: one table. Each batch dirties about one page per row once the table is much
  larger than a batch: what slowed the SQLite store's add down at 10M URLs
  (docs/benchmarks.md#why-the-sqlite-store-is-built-as-it-is).
- ``three``: L0, merged into L1 every --l0 rows; each such merge also moves one of
  --slices slices of the key space from L1 into L2 (the layout the store has). Lookups
  read all three levels.
- ``four``: the same plus L3: each merge also moves one of --slices2 slices of L2 into
  L3, so L2 stays at about --l0 x --slices2 rows and each move into the biggest level
  rewrites 1/--slices2 of it. Lookups read four levels.

    python bench/bench_sqlite_layouts.py --keys 4000000                  # seen, ~2 minutes
    python bench/bench_sqlite_layouts.py --table entries --keys 10000000 # ~10 minutes
    python bench/bench_sqlite_layouts.py --table entries --keys 10000000 \
        --layout three --layout four --slices 8 --slices2 32
"""

from __future__ import annotations

import argparse
import os
import random
import sqlite3
import tempfile
import time
from pathlib import Path
from typing import Any

SCHEMA = {
    "seen": "(fp BLOB PRIMARY KEY, revisit_at REAL) WITHOUT ROWID",
    "entries": "(qid INTEGER NOT NULL, nprio INTEGER NOT NULL, ord INTEGER NOT NULL, "
               "retries INTEGER NOT NULL, payload BLOB NOT NULL, "
               "PRIMARY KEY (qid, nprio, ord)) WITHOUT ROWID",
}


class Rows:
    """The rows of one batch, and the key-space slices of the table kind."""

    def __init__(self, table: str, queues: int, slices: int) -> None:
        self.table, self.queues, self.slices = table, queues, slices
        self.col = "fp" if table == "seen" else "qid"
        self.seq = 0
        self.rng = random.Random(7)

    def batch(self, n: int) -> list[tuple[Any, ...]]:
        if self.table == "seen":
            return [(os.urandom(16), None) for _ in range(n)]
        out = []
        for _ in range(n):
            self.seq += 1
            out.append((self.rng.randrange(self.queues), -self.rng.randrange(11), self.seq,
                        0, os.urandom(60)))
        return out

    def bounds(self, i: int, slices: int) -> tuple[Any, Any]:
        if self.table == "seen":
            step = 256 // slices
            return bytes([step * i]), bytes([step * (i + 1)]) if i + 1 < slices \
                else b"\xff" * 17
        step = -(-self.queues // slices)
        return step * i, step * (i + 1)


def run(layout: str, a: argparse.Namespace, folder: Path) -> None:
    path = folder / f"{a.table}-{layout}.db"
    c = sqlite3.connect(path, isolation_level=None)
    c.execute("PRAGMA journal_mode=WAL")
    c.execute("PRAGMA synchronous=NORMAL")
    c.execute("PRAGMA wal_autocheckpoint=10000")
    c.execute("PRAGMA journal_size_limit=67108864")
    depth = {"one": 1, "three": 3, "four": 4}[layout]
    levels = ["t"] if depth == 1 else [f"t{i}" for i in reversed(range(depth))]  # oldest first
    slices = {1: a.slices, 2: a.slices2}  # level -> its slices moving down
    for t in levels:
        c.execute(f"CREATE TABLE {t} {SCHEMA[a.table]}")
    rows = Rows(a.table, a.queues, a.slices)
    width = 2 if a.table == "seen" else 5
    insert = f"INSERT OR REPLACE INTO {levels[-1]} VALUES ({','.join('?' * width)})"
    n0 = 0
    cursor = dict.fromkeys(slices, 0)

    def merge() -> None:
        c.execute("INSERT OR REPLACE INTO t1 SELECT * FROM t0 ORDER BY 1")
        c.execute("DELETE FROM t0")
        for level in range(1, depth - 1):  # one slice of each level moves one level down
            lo, hi = rows.bounds(cursor[level], slices[level])
            c.execute(f"INSERT OR REPLACE INTO t{level + 1} SELECT * FROM t{level} WHERE "
                      f"{rows.col} >= ? AND {rows.col} < ? ORDER BY 1", (lo, hi))
            c.execute(f"DELETE FROM t{level} WHERE {rows.col} >= ? AND {rows.col} < ?",
                      (lo, hi))
            cursor[level] = (cursor[level] + 1) % slices[level]

    done, t0 = 0, time.perf_counter()
    last = t0
    report = max(a.keys // 8, a.batch)
    while done < a.keys:
        batch = rows.batch(a.batch)
        c.execute("BEGIN IMMEDIATE")
        fresh = batch
        if a.table == "seen":
            fps = sorted(r[0] for r in batch)
            known: set[bytes] = set()
            for t in levels:
                for i in range(0, len(fps), 500):
                    part = fps[i:i + 500]
                    known.update(r[0] for r in c.execute(
                        f"SELECT fp FROM {t} WHERE fp IN ({','.join('?' * len(part))})", part))
            fresh = [r for r in batch if r[0] not in known]
        fresh.sort()
        c.executemany(insert, fresh)
        if depth > 1:
            n0 += len(fresh)
            if n0 >= a.l0:
                merge()
                n0 = 0
        c.execute("COMMIT")
        done += a.batch
        if done % report < a.batch:
            now = time.perf_counter()
            print(f"{a.table} {layout:>5}: {done:>11,} rows, recent "
                  f"{report / (now - last):>9,.0f}/s", flush=True)
            last = now
    total = time.perf_counter() - t0
    print(f"{a.table} {layout:>5}: {a.keys:,} rows in {total:.1f} s ({a.keys / total:,.0f}/s)")
    c.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--table", choices=sorted(SCHEMA), default="seen")
    ap.add_argument("--keys", type=int, default=4_000_000, help="rows to write in all")
    ap.add_argument("--batch", type=int, default=5_000)
    ap.add_argument("--queues", type=int, default=100_000, help="queues (--table entries)")
    ap.add_argument("--l0", type=int, default=50_000, help="L0 rows that trigger a merge")
    ap.add_argument("--slices", type=int, default=16,
                    help="key-space slices: one moves from L1 to L2 per merge")
    ap.add_argument("--slices2", type=int, default=32,
                    help="(four) key-space slices: one moves from L2 to L3 per merge")
    ap.add_argument("--layout", action="append", choices=["one", "three", "four"])
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="crawlq-layouts-") as tmp:
        for layout in a.layout or ["one", "three"]:
            run(layout, a, Path(tmp))


if __name__ == "__main__":
    main()
