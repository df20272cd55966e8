"""Durability for real, on SQLite and Redis: worker processes share one frontier and
are killed with SIGKILL; afterwards every URL is accounted for."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from crawlq import Frontier
from crawlq.testing.redis_server import LocalRedis

WORKER = str(Path(__file__).with_name("durability_worker.py"))


@pytest.fixture(params=["sqlite", "sqlite-small-levels", "redis"])
def store(request: pytest.FixtureRequest, tmp_path: Path,
          monkeypatch: pytest.MonkeyPatch) -> str:
    """A fresh shared frontier: a SQLite file, or a prefix on the session's redis-server.

    ``sqlite-small-levels``: the workers merge the SQLite store's levels every 20 rows
    (instead of 50,000), so kills land in and around merges too."""
    if request.param.startswith("sqlite"):
        if request.param == "sqlite-small-levels":
            monkeypatch.setenv("CRAWLQ_TEST_L0_ROWS", "20")
        return f"sqlite:///{tmp_path}/f.db"
    server: LocalRedis = request.getfixturevalue("redis_server")
    return f"{server.url}?prefix=durability-{tmp_path.name}"


def _spawn(db: str, log: Path, n: int, *extra: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, WORKER, db, str(log), str(n), *extra])


def _read_log(log: Path) -> list[tuple[str, int, int, float, float, str]]:
    rows = []
    for line in log.read_text().splitlines():
        parts = line.split()
        if len(parts) == 6:  # a line cut by SIGKILL is incomplete: ignore it
            rows.append((parts[0], int(parts[1]), int(parts[2]), float(parts[3]),
                         float(parts[4]), parts[5]))
    return rows


def test_sigkill_loop_loses_nothing(store: str, tmp_path: Path) -> None:
    n = 4000
    db, log = store, tmp_path / "log.txt"
    with Frontier.open(db) as f:
        f.add("https://h0.example/n/0")
    rng = random.Random(7)
    # Each batch "fetches" for 10 ms, so the crawl lasts a few seconds however fast the
    # store is (a faster store once finished it before the third kill).
    args = ("--ttl", "2", "--fetch-time", "0.01")
    workers = [_spawn(db, log, n, *args) for _ in range(3)]
    kills = 0
    deadline = time.monotonic() + 120
    try:
        while kills < 12 and time.monotonic() < deadline:
            time.sleep(rng.uniform(0.05, 0.4))
            alive = [w for w in workers if w.poll() is None]
            if not alive:
                break
            victim = rng.choice(alive)
            os.kill(victim.pid, signal.SIGKILL)
            victim.wait()
            kills += 1
            workers[workers.index(victim)] = _spawn(db, log, n, *args)
        for w in workers:
            assert w.wait(timeout=120) == 0
    finally:
        for w in workers:
            if w.poll() is None:
                w.kill()
    assert kills >= 3, "the crawl ended before the test could kill workers"
    with Frontier.open(db) as f:
        s = f.stats()
    # Full accounting: every accepted URL is done exactly once, nothing queued or leased.
    assert (s.seen, s.added, s.done, s.queued, s.leased, s.dead) == (n, n, n, 0, 0, 0)
    fetched = Counter(row[2] for row in _read_log(log))
    assert set(fetched) == set(range(n))
    # Only requests in flight at a kill may be fetched twice.
    extra = sum(c - 1 for c in fetched.values())
    assert extra <= kills * 8, (extra, kills)
    if os.environ.get("CRAWLQ_TEST_L0_ROWS"):  # the merges did run: rows reached level 2
        import sqlite3

        with sqlite3.connect(db.removeprefix("sqlite:///")) as c:
            assert c.execute("SELECT count(*) FROM seen").fetchone()[0] > n // 4


def test_processes_share_one_frontier_without_double_leases(store: str,
                                                             tmp_path: Path) -> None:
    """Four workers drain one frontier: each URL fetched exactly once, and no host ever
    has more leases in flight (across all processes together) than its cap."""
    n, cap = 2000, 2
    db, log = store, tmp_path / "log.txt"
    with Frontier.open(db) as f:
        f.add([f"https://h{i % 13}.example/n/{i}" for i in range(n)])
    workers = [_spawn(db, log, n, "--ttl", "600", "--no-add", "--fetch-time", "0.005",
                      "--concurrency", str(cap), "--batch", "4")
               for _ in range(4)]
    for w in workers:
        assert w.wait(timeout=120) == 0
    rows = _read_log(log)
    fetched = Counter(row[2] for row in rows)
    assert set(fetched) == set(range(n)) and max(fetched.values()) == 1
    assert len({row[0] for row in rows}) == 4  # all four took part
    # Each worker held a lease at least from leased_at to logged_at, a span inside the
    # store's own lease: the spans of one host never overlap more than `cap` deep.
    events: dict[str, list[tuple[float, int]]] = {}
    for _, _, _, start, end, queue in rows:
        events.setdefault(queue, []).extend([(start, 1), (end, -1)])
    deepest = {}
    for queue, evs in events.items():
        depth = top = 0
        for _, step in sorted(evs, key=lambda e: (e[0], e[1])):  # ends before starts
            depth += step
            top = max(top, depth)
        deepest[queue] = top
    assert max(deepest.values()) <= cap, deepest
    assert max(deepest.values()) == cap  # and the cap was actually reached
