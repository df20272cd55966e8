"""The stores agree: seeded sequences of adds, leases and answers give the same leases,
in the same order, on the SQLite store (its entry levels and read-ahead, with and
without delays, compiled or pure Python) and the Redis store as on the memory store."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from crawlq import Frontier, Outcome, Request
from crawlq.stores import sqlite_levels
from crawlq.testing import FAST


def lease_step(f: Frontier, op: str, arg: int, out: list[list[str]],
               held: list[Any]) -> bool:
    """One lease operation of the random-mix tests (here and in test_sqlite_store):
    next (its URLs into ``out``, its leases held), done, fail or retry (of ``arg`` leases
    held); False: not one."""
    if op == "next":
        leases = f.next(arg)
        out.append([lease.request.url for lease in leases])
        held += leases
    elif op == "done":
        f.done(held[:arg])
        del held[:arg]
    elif op == "fail":
        f.done(held[:arg], Outcome.FAILED, error="x")
        del held[:arg]
    elif op == "retry":  # back at once, under their old keys
        f.retry(held[-arg:])
        del held[-arg:]
    else:
        return False
    return True


def _mix_ops(hosts: int, seed: int, rich: bool = False) -> list[tuple[str, Any]]:
    """A random mix of adds (random priorities) on ``hosts`` hosts, leases of random
    sizes, acknowledgements, retries and expiries, for _run_mix; ``rich``: also time
    passing and acknowledgements with fetch times (politeness delays then matter),
    failures, retries for later, adds for later, blocks, per-queue settings, leases
    from one queue and queues deleted. Host
    ``hN`` is the N-th to appear: creation order and key order agree (the Redis store
    breaks ties in waiting time by key, the others by creation)."""
    import random

    rng = random.Random(seed)
    ops: list[tuple[str, Any]] = []
    rank: dict[int, int] = {}
    kinds = ["add", "add", "next", "next", "done", "retry", "expire"]
    if rich:
        kinds += ["next", "done_timed", "fail", "retry_later", "tick", "tick", "block",
                  "configure", "add_later", "next_queue", "delete_queue"]
    for _ in range(400 if rich else 300):
        op = rng.choice(kinds)
        if op in ("add", "add_later"):
            ops.append((op, [(rank.setdefault(rng.randrange(hosts), len(rank)),
                              rng.randint(-2, 2)) for _ in range(rng.randint(1, 9))]))
        elif op in ("next", "done", "done_timed", "fail", "retry", "retry_later"):
            ops.append((op, rng.randint(1, 12)))
        elif op == "tick":
            ops.append((op, rng.choice([0.5, 1, 2, 3.5])))
        elif op == "block":
            ops.append((op, (rng.randrange(hosts), rng.choice([1, 3, 7]))))
        elif op == "next_queue":
            ops.append((op, (rng.randrange(hosts), rng.randint(1, 5))))
        elif op == "delete_queue":
            # (rare, and not with one host: it deletes a host's share of the mix)
            if hosts > 1 and rng.random() < 0.3:
                ops.append((op, rng.randrange(hosts)))
        elif op == "configure":
            ops.append((op, (rng.randrange(hosts), rng.choice([
                {"concurrency": 2}, {"concurrency": None}, {"min_delay": 1.5},
                {"min_delay": None}, {"session_budget": 3, "session_rest": 2},
                {"session_budget": None}]))))
        elif rng.random() < 0.3:
            ops.append((op, None))
    return ops


def _run_mix(store: str, ops: list[tuple[str, Any]], **options: Any) -> list[list[str]]:
    """Run _mix_ops on a new frontier at ``store`` (politeness delays off unless given);
    the URLs of every next() call, then of the calls that drain it, then its counters."""
    now = [1000.0]
    out: list[list[str]] = []
    held: list[Any] = []
    n = deleted = 0
    with Frontier.open(store, clock=lambda: now[0], lease_ttl=10, **{**FAST, **options}) as f:
        for op, arg in ops:
            if op in ("add", "add_later"):
                nb = now[0] + 2.5 if op == "add_later" else None
                f.add([Request(f"https://h{h}.example/{n + i}", priority=p, not_before=nb)
                       for i, (h, p) in enumerate(arg)])
                n += len(arg)
            elif op == "done_timed":
                for j, lease in enumerate(held[:arg]):  # (fetch times: the delays differ)
                    f.done(lease, duration=0.1 * (j % 4))
                del held[:arg]
            elif op == "retry_later":
                f.retry(held[-arg:], after=1.5)
                del held[-arg:]
            elif op == "tick":
                now[0] += arg
            elif op == "block":
                f.block(f"h{arg[0]}.example", now[0] + arg[1])
            elif op == "configure":
                f.configure_queue(f"h{arg[0]}.example", **arg[1])
            elif op == "next_queue":
                leases = f.next(arg[1], queue=f"h{arg[0]}.example")
                out.append([lease.request.url for lease in leases])
                held += leases
            elif op == "delete_queue":
                gone = f.delete_queue(f"h{arg}.example")
                out.append([f"deleted {gone}"])
                deleted += gone
            elif not lease_step(f, op, arg, out, held):
                now[0] += 11  # every lease held expires
                held.clear()
        for _ in range(1000):
            now[0] += 5
            leases = f.next(7)
            out.append([lease.request.url for lease in leases])
            f.done(leases)
            if f.stats().finished:
                break
        s = f.stats()
        assert s.finished and s.done + s.dead + deleted == n
        out.append([f"done={s.done} dead={s.dead} redelivered={s.redelivered} "
                    f"failed={s.failed} retried={s.retried}"])
    return out


@pytest.mark.parametrize("l0_rows", [5, 40, 100_000])
@pytest.mark.parametrize("lifo", [False, True])
@pytest.mark.parametrize(("hosts", "concurrency"), [(1, 1000), (6, 1000), (6, 1)])
def test_sqlite_levels_lease_like_the_memory_store(tmp_path: Path, lifo: bool, l0_rows: int,
                                                   hosts: int, concurrency: int,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """A random mix of adds (random priorities), leases, acknowledgements, retries and
    expiries on one host or six gives the same leases in the same order from the SQLite
    store, with levels merged every 5 or 40 rows (cursors, drops and slice moves all
    along) or never (everything in level 0, behind and past its cursor), as from the
    memory store: the same queues in line (ties in waiting time go to the queue created
    first), the same rounds over them, the same entries from each."""

    monkeypatch.setattr(sqlite_levels, "L0_ROWS", l0_rows)
    monkeypatch.setattr(sqlite_levels, "SLICES", 2)
    ops = _mix_ops(hosts, 7 + hosts)
    expected = _run_mix("memory://", ops, concurrency=concurrency, lifo=lifo)
    assert sum(map(len, expected)) > 500
    assert _run_mix(f"sqlite:///{tmp_path}/f.db", ops, concurrency=concurrency,
                    lifo=lifo) == expected


@pytest.mark.parametrize("pure", [False, True])
@pytest.mark.parametrize("lifo", [False, True])
@pytest.mark.parametrize("seed", [1, 2])
@pytest.mark.parametrize(("hosts", "concurrency"), [(1, 3), (4, 1), (4, 3)])
def test_sqlite_store_leases_like_the_memory_store_with_delays(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, seed: int, hosts: int,
        concurrency: int, lifo: bool, pure: bool) -> None:
    """A richer random mix, where time passes: politeness delays from fetch times,
    failures with backoff until dead, retries and adds for later, blocks, per-queue
    concurrency, delays and session budgets set at run time, expiries. The SQLite store
    gives the same leases in the same order as the memory store, and the same counters;
    FIFO and LIFO, with the C speedups and without (both stores' pure-Python code)."""
    if pure:
        monkeypatch.setenv("CRAWLQ_PURE_PYTHON", "1")
    ops = _mix_ops(hosts, seed * 10 + hosts, rich=True)
    options = {"concurrency": concurrency, "min_delay": 0.5, "max_delay": 4.0,
               "delay_factor": 2.0, "max_retries": 1, "retry_backoff": 1.5, "lifo": lifo}
    expected = _run_mix("memory://", ops, **options)
    assert sum(map(len, expected)) > 100  # (queues deleted take their requests along)
    assert "failed=0 " not in expected[-1][0]
    assert _run_mix(f"sqlite:///{tmp_path}/f.db", ops, **options) == expected


@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.parametrize(("hosts", "concurrency"), [(1, 1000), (6, 1000), (6, 1)])
def test_redis_store_leases_like_the_memory_store(redis_server: Any, seed: int, hosts: int,
                                                  concurrency: int) -> None:
    """The same random mixes give the same leases in the same order from the Redis store
    (a real redis-server) as from the memory store: its own lease and release scripts
    serve the line and put requests back as the other stores do. (FIFO only: with
    ``lifo=True`` a request that comes back goes to the head of its Redis list, before
    requests added since it was leased, where the other stores put it in its old place
    behind them; see docs/concepts.md.)"""
    ops = _mix_ops(hosts, seed * 100 + hosts)
    expected = _run_mix("memory://", ops, concurrency=concurrency)
    assert sum(map(len, expected)) > 400
    prefix = f"mix-{seed}-{hosts}-{concurrency}"
    assert _run_mix(f"{redis_server.url}?prefix={prefix}", ops,
                    concurrency=concurrency) == expected


# (read ahead: entries per queue and level; entries kept at most; calls between renewals;
# entries a queue needs queued to read ahead for it)
