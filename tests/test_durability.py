"""SQLite durability for real: processes share one file and are killed with SIGKILL."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

from crawlq import Frontier

WORKER = str(Path(__file__).with_name("durability_worker.py"))


def _spawn(db: Path, log: Path, n: int, *extra: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, WORKER, str(db), str(log), str(n), *extra])


def _read_log(log: Path) -> list[tuple[str, int, int]]:
    rows = []
    for line in log.read_text().splitlines():
        parts = line.split()
        if len(parts) == 3:  # a line cut by SIGKILL is incomplete: ignore it
            rows.append((parts[0], int(parts[1]), int(parts[2])))
    return rows


def test_sigkill_loop_loses_nothing(tmp_path: Path) -> None:
    n = 3000
    db, log = tmp_path / "f.db", tmp_path / "log.txt"
    with Frontier.open(f"sqlite:///{db}") as f:
        f.add("https://h0.example/n/0")
    rng = random.Random(7)
    workers = [_spawn(db, log, n, "--ttl", "2") for _ in range(3)]
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
            workers[workers.index(victim)] = _spawn(db, log, n, "--ttl", "2")
        for w in workers:
            assert w.wait(timeout=120) == 0
    finally:
        for w in workers:
            if w.poll() is None:
                w.kill()
    assert kills >= 3, "the crawl ended before the test could kill workers"
    with Frontier.open(f"sqlite:///{db}") as f:
        s = f.stats()
    # Full accounting: every accepted URL is done exactly once, nothing queued or leased.
    assert (s.seen, s.added, s.done, s.queued, s.leased, s.dead) == (n, n, n, 0, 0, 0)
    fetched = Counter(i for _, _, i in _read_log(log))
    assert set(fetched) == set(range(n))
    # Only requests in flight at a kill may be fetched twice.
    extra = sum(c - 1 for c in fetched.values())
    assert extra <= kills * 8, (extra, kills)


def test_processes_share_one_file_without_double_leases(tmp_path: Path) -> None:
    n = 2000
    db, log = tmp_path / "f.db", tmp_path / "log.txt"
    with Frontier.open(f"sqlite:///{db}") as f:
        f.add([f"https://h{i % 13}.example/n/{i}" for i in range(n)])
    workers = [_spawn(db, log, n, "--ttl", "600", "--no-add", "--fetch-time", "0.005")
               for _ in range(3)]
    for w in workers:
        assert w.wait(timeout=120) == 0
    rows = _read_log(log)
    fetched = Counter(i for _, _, i in rows)
    assert set(fetched) == set(range(n)) and max(fetched.values()) == 1
    assert len({pid for pid, _, _ in rows}) == 3  # all three took part
