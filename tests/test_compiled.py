"""The modules setup.py compiles with mypyc from their own source (the one definition,
compiled): each is compiled and not older than its .py, and gives what its .py gives
when run as Python, on generated cases over every branch (mypyc's native ints, floats
and classes must not change a result)."""

from __future__ import annotations

import importlib
import importlib.util
import random
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from crawlq.errors import ConfigError
from crawlq.stores.base import (
    ADDED,
    DUPLICATE,
    OVER_BUDGET,
    OVER_DOMAIN_BUDGET,
    OVER_DOMAIN_QUEUES,
    QueuePolicy,
)
from crawlq.stores.rules import BUSY, EXHAUSTED, READY, RESTING
from crawlq.stores.sqlite_schema import CURSOR_LEVELS, NO_CURSOR

COMPILED = ["crawlq.entries", "crawlq.payload", "crawlq.policies.canonical",
            "crawlq.stores.sqlite_rows", "crawlq.stores.policy", "crawlq.stores.memory_queues",
            "crawlq.stores.rules"]


@pytest.mark.parametrize("name", COMPILED)
def test_the_compiled_module_is_built_from_this_source(name: str) -> None:
    """The install compiles these modules with mypyc (setup.py); a compiled module
    shadows its .py, so it must not be older than the source it came from."""
    module = importlib.import_module(name)
    compiled = Path(module.__file__ or "")
    source = compiled.parent / (name.rpartition(".")[2] + ".py")
    assert compiled.suffix == ".so", "not compiled: pip install -e . runs mypyc (setup.py)"
    assert compiled.stat().st_mtime >= source.stat().st_mtime, (
        f"{source.name} changed after it was compiled: pip install -e . compiles it again")


@pytest.fixture(scope="module")
def rows_modules(sqlite_rows_as_python: ModuleType) -> tuple[ModuleType, ModuleType]:
    """sqlite_rows compiled, and as Python."""
    return importlib.import_module("crawlq.stores.sqlite_rows"), sqlite_rows_as_python


class _OwnDelay(QueuePolicy):
    """A policy with its own delay: settling must call it, not compute its own."""

    def delay(self, duration: float | None) -> float:
        return 7.5 if duration else 0.25


def _random_settle_case(rng: random.Random, n: int) -> tuple[list[tuple[Any, ...]],
                                                             list[dict[str, Any]]]:
    """Queue rows (sqlite_rows.QUEUE_COLS) and delta fields for n queues, over
    every branch of the settling: states, heads, cursors, overrides, delays, budgets."""
    settings_choices: list[tuple[Any, ...]] = [
        (None,) * 7, (None,) * 7, (None,) * 7,
        (3, None, None, None, None, None, None),
        (None, 2.0, 9.0, 0.5, None, 4, 3.0),
        (1, 0.0, 0.0, 0.0, 10, 2, 0.0),
    ]
    rows, deltas = [], []
    for qid in range(1, n + 1):
        queued = rng.choice([0, 1, 2, 5, 40])
        inflight = rng.choice([0, 0, 1, 3])
        head = None if queued == 0 and rng.random() < 0.7 else rng.randint(-5, 5)
        cursors = tuple(x for _ in CURSOR_LEVELS for x in (
            (NO_CURSOR, 0) if rng.random() < 0.5 else (rng.randint(-5, 5), rng.randint(1, 99))))
        since = rng.choice([0.0, 90.0, 100.0])
        ready_at = rng.choice([0.0, 95.0, 100.0, 105.0, 150.0])
        rows.append((qid, rng.choice([READY, BUSY, RESTING, EXHAUSTED]), head, since, ready_at,
                     queued, inflight, rng.choice([0, 1, 3, 4]), rng.randint(0, 50),
                     *cursors, *rng.choice(settings_choices)))
        d: dict[str, Any] = {}
        kind = rng.choice(["lease", "done", "add", "block", "return", "empty"])
        if kind == "lease":
            k = rng.choice([1, 1, 2])
            d.update(inflight=k, queued=-k, session=k, served=True)
            if rng.random() < 0.4:
                d["recompute"] = True
            else:
                d.update(head=rng.choice([None, rng.randint(-5, 5)]), exact=True)
            if rng.random() < 0.3:
                d["cursor"] = (rng.randint(-5, 5), rng.randint(1, 99),
                               *(NO_CURSOR, 0) * (len(CURSOR_LEVELS) - 1))
        elif kind == "done":
            n = rng.choice([1, 2])
            d["inflight"] = -n
            answers: list[tuple[float | None, float | None]] = []
            for _ in range(n):  # (each answer: an explicit delay, or a fetch's duration)
                if rng.random() < 0.3:
                    answers.append((None, rng.choice([0.0, 3.0, 60.0])))
                else:
                    duration = rng.choice([0.0, 0.2, 2.0, None])
                    if duration is None and rng.random() < 0.5:
                        duration = 0  # (an int: duration or 0.0)
                    answers.append((duration, None))
            d["answers"] = answers
        elif kind == "add":
            d.update(queued=rng.choice([1, 3]), accepted=rng.choice([1, 3]),
                     head=rng.randint(-5, 5))
        elif kind == "block":
            d["ready_at"] = rng.choice([50.0, 120.0, 200])
        elif kind == "return":
            d.update(inflight=-1, queued=1, head=rng.randint(-5, 5))
        deltas.append(d)
    return rows, deltas


def _random_admit_case(rng: random.Random, n: int) -> tuple[list[Any], dict[str, int],
                                                            dict[int, int], dict[int, int]]:
    """Entries (fingerprint, key, priority, payload, not_before, revisit_at, retries) over
    a few queues, with repeats inside the batch, fingerprints already seen (with and
    without revisit times), no fingerprint (dont_filter), later not_before, and caps."""
    fps = [bytes([i]) * 16 for i in range(60)]
    keys = ["a", "b", "c", "d"]
    entries = []
    for _ in range(n):
        fp = None if rng.random() < 0.1 else rng.choice(fps)
        entries.append((fp, rng.choice(keys), rng.randint(-5, 5), bytes([rng.randint(0, 255)]),
                        rng.choice([None, None, 50.0, 150.0, 100]),
                        rng.choice([None, 130.0]), rng.choice([0, 0, 2])))
    qids = {k: i + 1 for i, k in enumerate(keys)}
    caps = {1: 0, 2: 5, 3: 0, 4: 30}
    accepted = {1: 0, 2: 3, 3: 10, 4: 0}
    return entries, qids, caps, accepted



@pytest.mark.parametrize("seed", range(6))
def test_queue_settling_compiled_agrees_with_python(
        rows_modules: tuple[ModuleType, ModuleType], seed: int) -> None:
    """settle writes and caches the same, compiled or as Python, for generated queue rows
    and deltas, policies with overrides and a QueuePolicy subclass with its own delay."""
    rng = random.Random(seed)
    policy = _OwnDelay(min_delay=1.0, session_budget=3) if seed % 3 == 2 else \
        QueuePolicy(min_delay=0.5, max_delay=20.0, delay_factor=2.0, session_budget=seed % 2)
    caches: list[dict[int, tuple[Any, ...]]] = [{}, {}]
    for now in (100.0, 100.0, 120.5):
        rows, fields = _random_settle_case(rng, 300)
        out = []
        rests: list[list[float]] = [[], []]
        spent: list[list[int]] = [[], []]
        for mod, cache, rest, yielded in zip(rows_modules, caches, rests, spent):
            deltas = {}
            for row, f in zip(rows, fields):
                d = deltas[row[0]] = mod.Delta()
                for k, v in f.items():
                    setattr(d, k, v)
            # (a generator: settle takes any iterable of rows)
            out.append(mod.settle((r for r in rows), deltas, now, policy, {}, cache, rest,
                                  yielded))
        assert out[0] == out[1] and rests[0] == rests[1] and spent[0] == spent[1]
        assert [list(w) for w in out[0].values()] == [list(w) for w in out[1].values()]
        assert caches[0] == caches[1]
        assert len(caches[0]) > 50 and len(out[0]) >= 3
        resting = sum(1 for r in caches[0].values() if r[1] == RESTING)
        assert rests[0] and all(t > now for t in rests[0]) and len(rests[0]) >= resting


@pytest.mark.parametrize("seed", range(4))
def test_admit_compiled_agrees_with_python(rows_modules: tuple[ModuleType, ModuleType],
                                           seed: int) -> None:
    """admit decides, numbers and marks entries the same, compiled or as Python: its
    queues' caps and its domains' (queues 1 and 2 of one domain, 3 and 4 of another; 3
    and 4 made by the call, one of them a queue too many)."""
    rng = random.Random(seed)
    entries, qids, caps, accepted = _random_admit_case(rng, 400)
    policies = {qid: QueuePolicy(max_queue_urls=cap, max_domain_urls=30,
                                 max_domain_queues=1 if qid > 2 else 0)
                for qid, cap in caps.items()}
    accepted[3] = 0  # (made by the call)
    dids = {1: 10, 2: 10, 3: 20, 4: 20}
    known = {bytes([i]) * 16: rng.choice([None, 90.0, 110.0, 100]) for i in range(0, 60, 3)}
    for lifo in (False, True):
        results = []
        for mod in rows_modules:
            seen = mod.SeenMarks(None)
            seen.known = dict(known)
            acc = dict(accepted)
            dacc: dict[int, int] = {10: 20}
            dq: dict[int, int] = {}
            made = {3, 4}
            got = mod.admit(entries, qids, policies, acc, seen, 100.0, 7, lifo, dids, dacc,
                            dq, made)
            results.append((got, acc, seen.batch, seen.fresh, dacc, dq, made))
        assert results[0] == results[1]
        statuses = set(results[0][0][0])
        assert statuses == {ADDED, DUPLICATE, OVER_BUDGET, OVER_DOMAIN_BUDGET,
                            OVER_DOMAIN_QUEUES} and results[0][0][1] and results[0][0][2]
        assert results[0][4] == {10: 30, 20: 30} and results[0][5] == {20: 1}
        assert len(results[0][6]) == 1  # (the other made queue took nothing)
    for mod in rows_modules:
        with pytest.raises(KeyError):
            mod.admit([(None, "zz", 0, b"", None, None, 0)], qids, policies, {},
                      mod.SeenMarks(None), 1.0, 0, False, dids, {}, {}, set())


@pytest.mark.parametrize("seed", range(4))
def test_take_rows_compiled_agrees_with_python(rows_modules: tuple[ModuleType, ModuleType],
                                               seed: int) -> None:
    """take_rows records a lease round the same, compiled or as Python: tokens,
    lease-log ints and payloads, lease rows, per-queue counts and moved cursors."""
    rng = random.Random(seed)
    qids = rng.sample(range(1, 10_000), 40)
    keys = {q: f"host{q}.example" for q in qids}
    start = {q: tuple(rng.choice([NO_CURSOR, rng.randint(-5, 5)]) if i % 2 == 0
                      else rng.randint(0, 2**40) for i in range(2 * len(CURSOR_LEVELS)))
             for q in qids}
    got: list[tuple[Any, ...]] = [
        (q, rng.randint(-5, 5), rng.randint(0, 2**48), rng.randint(0, 3),
         rng.randbytes(rng.randint(0, 40)), rng.randrange(len(CURSOR_LEVELS)),
         *([rng.randint(-5, 5)] if rng.random() < 0.5 else []))
        for q in (rng.choice(qids) for _ in range(300))]
    results = []
    for mod in rows_modules:
        cursor, ints, payloads = dict(start), [1, 2], [b"x"]
        out: list[tuple[Any, ...]] = [("kept",)]
        counts = {qids[0]: 5}
        token = mod.take_rows(got, cursor, keys, 2**40, 99.5, ints, payloads, out, counts)
        results.append((token, cursor, ints, payloads, out, counts))
    assert results[0] == results[1]
    token, cursor, ints, payloads, out, counts = results[0]
    assert token == 2**40 + len(got) and out[-1][0] == token and len(ints) == 2 + 4 * len(got)
    assert counts[qids[0]] == 5 + sum(r[0] == qids[0] for r in got)
    last = got[-1]
    assert cursor[last[0]][2 * last[5]:2 * last[5] + 2] == (last[1], last[2])
    assert out[-1] == (token, keys[last[0]], -last[1], last[3], last[4], 99.5)


def test_a_compiled_policy_keeps_its_types_and_checks_what_callers_give() -> None:
    """QueuePolicy is compiled (stores/policy.py): overrides keep int settings ints and
    times floats, and values from users are checked (ConfigError) before it is made."""
    p = QueuePolicy().merged({"session_budget": 4.0, "min_delay": 2, "max_queue_urls": 7.0})
    assert (type(p.session_budget), type(p.min_delay), type(p.max_queue_urls)) == (
        int, float, int)
    assert p == QueuePolicy(session_budget=4, min_delay=2.0, max_queue_urls=7)
    with pytest.raises(ConfigError, match="concurrency"):
        QueuePolicy.of({"concurrency": "2"})
    with pytest.raises(ConfigError, match="min_delay"):
        QueuePolicy.of({"min_delay": -1})
    with pytest.raises(ConfigError, match="max_delay"):
        QueuePolicy.of({"min_delay": 5, "max_delay": 1})
    assert QueuePolicy.of({"concurrency": 3, "min_delay": 0}) == QueuePolicy(concurrency=3,
                                                                             min_delay=0.0)
