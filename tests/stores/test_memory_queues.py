"""The memory store's queues (crawlq.stores.memory_queues, and the queue rules it calls)
compiled by mypyc leave a store exactly as the same modules run as Python do, call after
call, and keep no memory.

setup.py compiles memory_queues from its one source; where the build could not, the .py
runs. Both must behave the same: mypyc's native ints, floats and classes must not change
a verdict, a lease, a heap's order or a counter.
"""

from __future__ import annotations

import gc
import random
import tracemalloc
from collections.abc import Callable
from typing import Any

import pytest

from crawlq.stores import memory as memory_module
from crawlq.stores import memory_queues
from crawlq.stores.base import PRIORITY_MAX, QueuePolicy


class _SlowPolicy(QueuePolicy):
    """A policy with its own delay: the compiled settling must call it, not compute its
    own."""

    def delay(self, duration: float | None) -> float:
        return 7.5 if duration else 0.25


def _memory_ops(rng: random.Random, steps: int) -> list[tuple[Any, ...]]:
    """A generated run of MemoryStore calls: adds with duplicates, revisits, not_before,
    retries and priorities at both ends; leases; acks of every kind; per-queue budgets,
    concurrency and delays; blocks; and a clock that moves on (before 1970 too: the
    ready heap's order of negative times)."""
    fps = [rng.randbytes(16) for _ in range(120)]
    keys = [f"h{i}.example" for i in range(7)]
    ops: list[tuple[Any, ...]] = []
    now = rng.choice([1000.0, -50.0])
    for _ in range(steps):
        now += rng.choice([0.0, 0.0, 0.5, 1.0, 3.0])
        kind = rng.choices(["add", "lease", "ack", "configure", "block"], [5, 5, 4, 1, 1])[0]
        if kind == "add":
            entries = []
            for _ in range(rng.randint(1, 60)):
                prio = rng.choice([0, 0, 1, -1, 5, -5, PRIORITY_MAX, -PRIORITY_MAX])
                entries.append((
                    None if rng.random() < 0.1 else rng.choice(fps), rng.choice(keys), prio,
                    rng.randbytes(rng.randint(0, 30)),
                    None if rng.random() < 0.85 else now + rng.choice([-1.0, 0.0, 2.0, 9]),
                    None if rng.random() < 0.8 else now + rng.choice([0.0, 4.0]),
                    rng.choice([0, 0, 0, 1, 3, 300])))
            ops.append(("add", entries, now))
        elif kind == "lease":
            ops.append(("lease", now, rng.choice([1, 3, 10, 50]), rng.choice([2.0, 30.0])))
        elif kind == "ack":
            ops.append(("ack", rng.random(), rng.choice([0, 0, 1, 2]),
                        rng.choice([None, 0.0, 0.3, 2.0]), rng.choice([None, None, 0.0, 1.5]),
                        now))
        elif kind == "configure":
            settings = rng.choice([{"concurrency": 2}, {"concurrency": None},
                                   {"session_budget": 2, "session_rest": 1.5},
                                   {"session_budget": None}, {"max_queue_urls": 15},
                                   {"min_delay": 0.5, "delay_factor": 2.0}])
            ops.append(("configure", rng.choice(keys), settings, now))
        else:
            # (an int time too: a queue's times may be ints)
            until = rng.choice([now + 1.0, now + 5, int(now) + 7])
            ops.append(("block", rng.choice(keys), until, now))
    return ops


def _memory_call(s: Any, op: tuple[Any, ...]) -> Any:
    """Make one generated call (see _memory_ops) on a MemoryStore; its result. An "ack"
    answers the given share of the leases held, oldest first."""
    if op[0] == "add":
        return s.add(op[1], op[2])
    if op[0] == "lease":
        return s.lease(*op[1:])
    if op[0] == "ack":
        _, pick, kind, duration, delay, now = op
        held = sorted(s._book.leases)
        return s.release([(t, kind, duration, None, 1, "err", kind != 0, delay)
                          for t in held[:max(1, int(len(held) * pick))]], now)
    if op[0] == "configure":
        return s.configure_queue(*op[1:])
    return s.block(*op[1:])


def _memory_state(s: Any) -> tuple[Any, ...]:
    """A copy of everything a MemoryStore holds, heaps in their list order."""
    b = s._book
    queues = {k: (list(q.heap), q.inflight, q.ready_at, q.since, q.state, q.version,
                  q.accepted, q.session, q.policy) for k, q in b.queues.items()}
    leases = {t: (q.key, item, exp) for t, (q, item, exp) in b.leases.items()}
    return (queues, list(b.ready), list(b.resting), list(b.scheduled), leases,
            set(b.seen), dict(b.revisit), b.n, dict(b.counters), dict(s._rejected),
            [(at, t, list(ts)) for at, t, ts in b.expiry], b.token)


def _run(policy: QueuePolicy, lifo: bool,
         ops: list[tuple[Any, ...]]) -> tuple[list[tuple[Any, Any]], Any]:
    """Each call's result and the store's state after it; the store's stats at the end."""
    s = memory_module.MemoryStore(policy, lifo=lifo)
    seen = [(_memory_call(s, op), _memory_state(s)) for op in ops]
    now = ops[-1][1] if ops[-1][0] == "lease" else ops[-1][-1]
    return seen, s.stats(now, per_queue=10)


def test_memory_queues_are_compiled() -> None:
    """The install compiled memory_queues (else the comparison below compares the .py
    with itself)."""
    assert (memory_queues.__file__ or "").endswith(".so")


@pytest.mark.parametrize("seed", range(12))
def test_compiled_queues_agree_with_python(seed: int,
                                          memory_store_as_python: Callable[[], None]) -> None:
    """Compiled and as Python, memory_queues gives the same verdicts, leases and
    acknowledgements and leaves the same heaps (in list order), queue fields, seen-set,
    revisits, sequence, tokens and counters, after every generated call."""
    rng = random.Random(seed)
    policy_type = _SlowPolicy if seed % 4 == 3 else QueuePolicy  # a subclass: own delay()
    policy = policy_type(concurrency=rng.choice([1, 2, 3, 1_000]),
                         min_delay=rng.choice([0, 0.25, 1.0]), max_delay=5.0,
                         delay_factor=rng.choice([0.0, 1.0, 3.0]),
                         session_budget=(seed % 3) * 2, max_queue_urls=rng.choice([0, 0, 25]))
    lifo = seed % 2 == 1
    ops = _memory_ops(rng, 400)
    compiled, compiled_stats = _run(policy, lifo, ops)
    memory_store_as_python()
    assert vars(memory_module)["MemoryQueues"].__module__.endswith("_as_python")
    python, python_stats = _run(policy, lifo, ops)
    for op, got, want in zip(ops, compiled, python, strict=True):
        assert got == want, op
    assert compiled_stats == python_stats
    counters = compiled[-1][1][8]
    assert sum(len(r) for op, (r, _) in zip(ops, compiled) if op[0] == "lease") > 100
    assert counters["duplicates"] > 10 and counters["done"] + counters["retried"] > 50


def test_memory_store_keeps_no_memory() -> None:
    """Stores that ran the compiled loops over generated calls leave nothing behind once
    closed: no object leaked per call or per store."""
    runs = [_memory_ops(random.Random(seed), 150) for seed in range(10)]

    def run_all() -> None:
        for ops in runs:
            s = memory_module.MemoryStore(QueuePolicy(concurrency=3, min_delay=0.5,
                                                      session_budget=2))
            for op in ops:
                _memory_call(s, op)
            s.close()

    run_all()  # warm up: caches, interned strings, free lists
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for _ in range(5):
            run_all()
        gc.collect()
        grown = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    # 50 stores and ~7,500 calls: one object kept per store or per call would be 3 kB to
    # hundreds of kB; what remains is tracemalloc's and the interpreter's own noise.
    assert grown < 2_500, grown


def test_ready_keys_sort_as_the_line_does() -> None:
    """A ready queue's key (bytes, compared by memcmp) orders queues by best head
    priority, then longest waiting (times before 1970 and -0.0 too), then key (as
    Redis orders equal scores: by their bytes; a key that is a prefix of another first)."""
    cases = []
    keys = ["a", "ab", "b", "é.example", "z"]
    for prio in (5, 0, -3):
        for since in (-1e9, -2.5, -0.0, 0.0, 1e-9, 7.0, 1.7e9):
            for created, key in enumerate(keys):
                q = memory_queues.MemoryQueue(key, QueuePolicy(), 2**40 - created,
                                               memory_queues.MemoryDomain())
                q.heap = [memory_queues.make_item(prio, 1, 0, b"")]
                q.since, q.version = since, created + 3
                cases.append(((-prio, since, key.encode()), memory_queues.ready_key(q)))
    # (Python sorts -0.0 and 0.0 as equal, stably: so do the keys)
    assert [k for _, k in sorted(cases, key=lambda c: c[0])] == sorted(k for _, k in cases)
