#!/usr/bin/env python3
"""How fast can any SQLite frontier with a row per URL be? A lower bound on the work.

Not crawlq's store: the least SQL a durable frontier must run on the reference workload,
through the sqlite3 module, with the SQLite store's settings (WAL, synchronous=NORMAL):

- add, in batches of 5,000: look the batch's fingerprints up in a seen table, insert the
  new ones, and insert one entry row per new URL (clustered by queue, priority, order);
- next, 1,000 at a time: the first entry of each of 1,000 queues (one statement per 200
  queues), delete those entries and write the leases;
- done: delete the leases.

No politeness, queue rows, counters, budgets or retries: the queues' line is a Python
list, so it does less than crawlq's store must. Requests become entries with crawlq's own
entry maker (canonical URL, host key, fingerprint, payload), as in the store's runs, so
only the storage differs. ``--leases batch`` writes one row per next() call (all its
leases in one blob) instead of a row per lease: the saving of a batched lease log.
``--leases none`` drops the leases and the queues' line too: each next() takes the
first 1,000 entries in key order with one ``DELETE ... RETURNING`` (no per-host queue,
nothing to acknowledge): the least any SQLite frontier with a row per URL can do.

    python bench/sqlite_floor.py                 # a row per lease
    python bench/sqlite_floor.py --leases batch  # a row per next() call
    python bench/sqlite_floor.py --leases none   # no leases, no per-host queues
"""

from __future__ import annotations

import argparse
import pickle
import sqlite3
import tempfile
import time
from typing import Any

_HEAD = ("SELECT * FROM (SELECT qid, nprio, seq, payload FROM entries WHERE qid=?{} "
         "ORDER BY nprio, seq LIMIT 1)")


def marks(n: int) -> str:
    return ",".join("?" * n)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--leases", choices=("rows", "batch", "none"), default="rows")
    ap.add_argument("--n", type=int, default=200_000, help="offered requests")
    ap.add_argument("--hosts", type=int, default=5_000)
    a = ap.parse_args()
    from workload import generate  # (bench/workload.py)

    from crawlq import Frontier, Request

    urls, prios, unique = generate(a.n, a.hosts, 42)
    pairs = list(zip(urls, prios))
    folder = tempfile.mkdtemp()
    c = sqlite3.connect(f"{folder}/floor.db", isolation_level=None)
    c.execute("PRAGMA journal_mode=WAL")
    c.execute("PRAGMA synchronous=NORMAL")
    c.execute("PRAGMA wal_autocheckpoint=10000")
    c.executescript("""
        CREATE TABLE seen (fp BLOB PRIMARY KEY) WITHOUT ROWID;
        CREATE TABLE entries (qid INT, nprio INT, seq INT, payload BLOB,
                              PRIMARY KEY (qid, nprio, seq)) WITHOUT ROWID;
        CREATE TABLE leases (token INTEGER PRIMARY KEY, qid INT, nprio INT, seq INT,
                             payload BLOB);
    """)
    make = Frontier.open("memory://")._entries.make  # crawlq's entries, as add() makes them
    qids: dict[str, int] = {}
    line: list[int] = []  # the queues in round-robin order (in memory: not durable)
    seq = 0
    t0 = time.perf_counter()
    for i in range(0, len(pairs), 5_000):
        reqs = [Request(u, priority=p) for u, p in pairs[i:i + 5_000]]
        entries: list[Any] = []
        make(reqs, 0, len(reqs), 0.0, [], entries, [])
        c.execute("BEGIN")
        fps = sorted({e[0] for e in entries})
        known: set[bytes] = set()
        for j in range(0, len(fps), 500):
            part = fps[j:j + 500]
            known.update(r[0] for r in c.execute(
                f"SELECT fp FROM seen WHERE fp IN ({marks(len(part))})", part))
        new_fps, rows = [], []
        for fp, key, prio, payload, _nb, _rv, _retries in entries:
            if fp in known:
                continue
            known.add(fp)
            new_fps.append((fp,))
            q = qids.get(key)
            if q is None:
                q = qids[key] = len(qids) + 1
                line.append(q)
            seq += 1
            rows.append((q, -prio, seq, payload))
        new_fps.sort()
        rows.sort()
        c.executemany("INSERT INTO seen VALUES (?)", new_fps)
        c.executemany("INSERT INTO entries VALUES (?,?,?,?)", rows)
        c.execute("COMMIT")
    t1 = time.perf_counter()
    token = taken = 0
    while a.leases == "none":
        c.execute("BEGIN")
        got = c.execute("DELETE FROM entries WHERE (qid, nprio, seq) IN (SELECT qid, nprio, "
                        "seq FROM entries ORDER BY qid, nprio, seq LIMIT 1000) "
                        "RETURNING payload").fetchall()
        c.execute("COMMIT")
        if not got:
            break
        taken += len(got)
    while line and a.leases != "none":
        want, line = line[:1_000], line[1_000:]
        c.execute("BEGIN")
        got: list[Any] = []
        for j in range(0, len(want), 200):
            part = want[j:j + 200]
            sql = " UNION ALL ".join(_HEAD.format(k + 1) for k in range(len(part)))
            got.extend(c.execute(sql, part))
        leases = []
        for q, nprio, s, payload in got:
            token += 1
            leases.append((token, q, nprio, s, payload))
        c.executemany("DELETE FROM entries WHERE qid=? AND nprio=? AND seq=?",
                      [le[1:4] for le in leases])
        if a.leases == "batch":
            c.execute("INSERT INTO leases (token, payload) VALUES (?, ?)",
                      (token, pickle.dumps(leases)))
        else:
            c.executemany("INSERT INTO leases VALUES (?,?,?,?,?)", leases)
        c.execute("COMMIT")
        c.execute("BEGIN")  # done, all of them
        tokens = [token] if a.leases == "batch" else [le[0] for le in leases]
        for j in range(0, len(tokens), 500):
            part = tokens[j:j + 500]
            c.execute(f"DELETE FROM leases WHERE token IN ({marks(len(part))})", part)
        c.execute("COMMIT")
        taken += len(leases)
        line.extend(le[1] for le in leases)  # to the back; a queue that gave none is empty
    t2 = time.perf_counter()
    assert taken == unique, (taken, unique)
    print(f"leases as {a.leases}: add {a.n / (t1 - t0):,.0f}/s, next+done "
          f"{taken / (t2 - t1):,.0f}/s, combined {a.n / (t2 - t0):,.0f}/s")


if __name__ == "__main__":
    main()
