#!/usr/bin/env python3
"""Where the SQLite store's time goes: wall time per SQL statement, for add and next+done.

Wraps the store's connection in a proxy that times every execute/executemany (rows
fetched inside the timer), keyed by the statement's text, and prints the top statements
of each phase.

- Default: the reference workload of bench_frontier.py (200k requests, 5,000 hosts; ``--n``
  requests instead) on a fresh file, batches of 5,000 adds, then next(1000)/done until
  empty.
- ``--db FILE --start N``: an existing store file (work on a copy: it is changed), e.g.
  one left by ``bench_scale.py --dir D``; times --window adds of fresh synthetic URLs
  numbered from N (pick N above any already used) and --window next+done.

    python bench/profile_sqlite.py
    python bench/bench_scale.py --dir /tmp/s --at 10000000 && cp /tmp/s/scale-10000000.db /tmp/c.db
    python bench/profile_sqlite.py --db /tmp/c.db --start 20000000
"""

from __future__ import annotations

import argparse
import collections
import re
import sqlite3
import tempfile
import time
from pathlib import Path
from typing import Any

from crawlq import Frontier, Request

TIMES: collections.defaultdict[str, float] = collections.defaultdict(float)
CALLS: collections.Counter[str] = collections.Counter()


class _Rows(list):  # type: ignore[type-arg]
    """Fetched rows that still answer the cursor methods the store uses."""

    def fetchone(self) -> Any:
        return self[0] if self else None

    def fetchall(self) -> list[Any]:
        return list(self)


class TimedConnection:
    """Times each statement; everything else goes to the real connection."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)

    def _timed(self, fn: Any, sql: str, *args: Any) -> Any:
        t = time.perf_counter()
        result = fn(sql, *args)
        if sql.lstrip().upper().startswith(("SELECT", "WITH")):
            result = _Rows(result.fetchall())  # a cursor is lazy: fetch inside the timer
        key = re.sub(r"\?\d*(,\?\d*)*", "?", " ".join(sql.split()))
        if len(key) > 110:  # the start and the end: statements of one kind differ late
            key = f"{key[:70]} … {key[-35:]}"
        TIMES[key] += time.perf_counter() - t
        CALLS[key] += 1
        return result

    def execute(self, sql: str, *args: Any) -> Any:
        return self._timed(self._conn.execute, sql, *args)

    def executemany(self, sql: str, *args: Any) -> Any:
        return self._timed(self._conn.executemany, sql, *args)


def report(phase: str, seconds: float, n: int, top: int) -> None:
    print(f"{phase}: {n:,} in {seconds:.2f} s ({n / seconds:,.0f}/s); SQL "
          f"{sum(TIMES.values()):.2f} s")
    for key, t in sorted(TIMES.items(), key=lambda kv: -kv[1])[:top]:
        print(f"  {t:7.3f} s {CALLS[key]:7,} calls  {key}")
    TIMES.clear()
    CALLS.clear()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--db", help="an existing store file (a copy: it is changed)")
    ap.add_argument("--start", type=int, default=0, help="first synthetic URL number (--db)")
    ap.add_argument("--window", type=int, default=100_000, help="URLs per phase (--db)")
    ap.add_argument("--hosts", type=int, default=100_000, help="synthetic hosts (--db)")
    ap.add_argument("--n", type=int, default=200_000,
                    help="offered requests of the reference workload (without --db)")
    ap.add_argument("--top", type=int, default=12)
    a = ap.parse_args()
    if a.db:
        path = Path(a.db)
        reqs = [Request(f"https://host-{(i * 2654435761) % a.hosts}.example/p/{i}?id={i * 7}",
                        priority=i % 11 - 5) for i in range(a.start, a.start + a.window)]
    else:
        from workload import generate  # (bench/workload.py)

        urls, prios, _ = generate(a.n, 5_000, 42)
        reqs = [Request(u, priority=p) for u, p in zip(urls, prios)]
        path = Path(tempfile.mkdtemp(prefix="crawlq-profile-")) / "profile.db"
    f = Frontier.open(f"sqlite:///{path}", min_delay=0, max_delay=0, delay_factor=0,
                      concurrency=1_000_000)
    store: Any = f.store
    store._db.conn = TimedConnection(store._db.conn)
    t0 = time.perf_counter()
    for i in range(0, len(reqs), 5_000):
        f.add(reqs[i:i + 5_000])
    report("add", time.perf_counter() - t0, len(reqs), a.top)
    t0 = time.perf_counter()
    taken = 0
    while taken < a.window or not a.db:
        leases = f.next(1000)
        if not leases:
            break
        f.done(leases)
        taken += len(leases)
    report("next+done", time.perf_counter() - t0, taken, a.top)
    f.close()


if __name__ == "__main__":
    main()
