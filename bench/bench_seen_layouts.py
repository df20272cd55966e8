#!/usr/bin/env python3
"""An experiment for the SQLite seen-set at scale: one random-key table vs three levels.

Not crawlq code: plain sqlite3 with the SQLite store's settings (WAL, synchronous=NORMAL,
the same checkpoint limits) and its seen-set rows (16-byte fingerprint, revisit_at).
Batches of random fingerprints are checked (prefetch) and inserted in one transaction
each, as SQLiteStore.add does.

- ``one``: one ``seen`` table (today's layout). Each batch dirties about one page per
  new fingerprint once the table is much larger than a batch: that is what slows the
  SQLite store's add down at 10M URLs (see docs/benchmarks.md#scale).
- ``three``: L0 (merged into L1 at --l0 keys), L1 (merged into L2 at --l1 keys), L2.
  Each merge inserts sorted keys, so a level is rewritten about once per merge instead
  of once per batch; lookups read all three levels.

    python bench/bench_seen_layouts.py --keys 4000000        # both layouts, ~2 minutes
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import tempfile
import time
from pathlib import Path


def run(layout: str, keys: int, batch: int, l0: int, l1: int, folder: Path) -> None:
    path = folder / f"seen-{layout}.db"
    c = sqlite3.connect(path, isolation_level=None)
    c.execute("PRAGMA journal_mode=WAL")
    c.execute("PRAGMA synchronous=NORMAL")
    c.execute("PRAGMA wal_autocheckpoint=10000")
    c.execute("PRAGMA journal_size_limit=67108864")
    levels = ["seen"] if layout == "one" else ["s0", "s1", "s2"]
    for t in levels:
        c.execute(f"CREATE TABLE {t} (fp BLOB PRIMARY KEY, revisit_at REAL) WITHOUT ROWID")
    n0 = n1 = 0

    def merge(src: str, dst: str) -> None:
        c.execute("BEGIN IMMEDIATE")
        c.execute(f"INSERT OR REPLACE INTO {dst} SELECT * FROM {src} ORDER BY fp")
        c.execute(f"DELETE FROM {src}")
        c.execute("COMMIT")

    done, t0 = 0, time.perf_counter()
    last = t0
    report = max(keys // 8, batch)
    while done < keys:
        fps = [os.urandom(16) for _ in range(batch)]
        c.execute("BEGIN IMMEDIATE")
        known: set[bytes] = set()
        for t in levels:
            for i in range(0, len(fps), 500):
                part = fps[i:i + 500]
                known.update(r[0] for r in c.execute(
                    f"SELECT fp FROM {t} WHERE fp IN ({','.join('?' * len(part))})", part))
        fresh = sorted((fp, None) for fp in fps if fp not in known)
        c.executemany(f"INSERT OR REPLACE INTO {levels[0]} VALUES (?, ?)", fresh)
        c.execute("COMMIT")
        done += batch
        if layout == "three":
            n0 += len(fresh)
            if n0 >= l0:
                merge("s0", "s1")
                n1, n0 = n1 + n0, 0
                if n1 >= l1:
                    merge("s1", "s2")
                    n1 = 0
        if done % report < batch:
            now = time.perf_counter()
            print(f"{layout:>5}: {done:>11,} keys, recent {report / (now - last):>9,.0f}/s",
                  flush=True)
            last = now
    total = time.perf_counter() - t0
    print(f"{layout:>5}: {keys:,} keys in {total:.1f} s ({keys / total:,.0f}/s)")
    c.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--keys", type=int, default=4_000_000)
    ap.add_argument("--batch", type=int, default=5_000)
    ap.add_argument("--l0", type=int, default=50_000, help="L0 size that triggers a merge")
    ap.add_argument("--l1", type=int, default=1_000_000, help="L1 size that triggers a merge")
    ap.add_argument("--layout", action="append", choices=["one", "three"])
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="crawlq-seen-") as tmp:
        for layout in a.layout or ["one", "three"]:
            run(layout, a.keys, a.batch, a.l0, a.l1, Path(tmp))


if __name__ == "__main__":
    main()
