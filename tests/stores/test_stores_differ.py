"""The queue rules, differentially: seeded random sequences of every public call (add,
next, done with fetch times, explicit delays, failures, give-ups, retries, renewals,
lease expiry, blocks, per-queue settings, requeueing the dead, deleting a queue, a
dump loaded into a new store) run on the memory, SQLite and Redis stores with one
injected clock, under several option sets. After every call the test records what
the call returned and everything a user can look at (``next_ready_at()``, ``stats()``,
``queues()``); the three stores must agree step by step. The memory and SQLite stores
call stores/rules.py; the Redis store's Lua scripts are the other copy of those rules,
and this test is what holds them to it."""

from __future__ import annotations

import itertools
import os
import random
from pathlib import Path
from typing import Any

import pytest

from crawlq import ConfigError, Frontier, Outcome, Request
from crawlq.stores.base import ACK_DONE, ack

HOSTS = 4
TTL = 10.0

OPTION_SETS: dict[str, dict[str, Any]] = {
    "plain": {"min_delay": 0.0, "max_delay": 0.0, "delay_factor": 0.0,
              "concurrency": 1000, "max_retries": 2, "retry_backoff": 1.0},
    "polite": {"min_delay": 0.5, "max_delay": 4.0, "delay_factor": 2.0, "concurrency": 2,
               "max_retries": 1, "retry_backoff": 1.5},
    "polite-lifo": {"min_delay": 0.5, "max_delay": 4.0, "delay_factor": 2.0,
                    "concurrency": 1, "max_retries": 1, "retry_backoff": 1.5,
                    "lifo": True},
    "budgets": {"min_delay": 0.0, "max_delay": 0.0, "delay_factor": 0.0, "concurrency": 3,
                "session_budget": 3, "session_rest": 2.0, "max_queue_urls": 14,
                "max_retries": 2, "retry_backoff": 1.0, "max_redeliveries": 2},
    # (hosts h0 and h2 are of one domain, h1 and h3 of another: see _url)
    "domains": {"min_delay": 0.3, "max_delay": 2.0, "delay_factor": 1.0, "concurrency": 2,
                "domain_concurrency": 3, "max_domain_urls": 25, "max_retries": 1,
                "retry_backoff": 1.0},
    "domain-queues": {"min_delay": 0.0, "max_delay": 0.0, "delay_factor": 0.0,
                      "concurrency": 1, "domain_concurrency": 1, "max_domain_queues": 1,
                      "max_retries": 2, "retry_backoff": 1.0},
}


def _url(host: int, k: int) -> str:
    """URL number ``k`` of host ``host``: hosts of even and odd numbers are of two
    registered domains (their keys still sort in the order of their numbers)."""
    return f"https://{_key(host)}/{k}"


def _key(host: int) -> str:
    """Host ``host``'s queue key (see _url)."""
    return f"h{host}.{'ab'[host % 2]}.example"


def diff_ops(seed: int, steps: int) -> list[tuple[str, Any]]:
    """A seeded sequence of calls (see the module's docstring)."""
    rng = random.Random(seed)
    kinds = {"add": 6, "next": 6, "next_queue": 1, "done": 4, "done_delay": 1, "fail": 2,
             "dead": 1, "retry": 1, "renew": 1, "tick": 4, "expire": 1, "block": 1,
             "unblock": 0.5, "configure": 1, "requeue_dead": 1, "delete_queue": 0.2,
             "dump_load": 0.3}
    names, weights = list(kinds), list(kinds.values())
    ops: list[tuple[str, Any]] = []
    urls = 0
    # Host hN is the N-th a call names, so that creation order and key order agree
    # (ties in waiting time go to the queue created first on the memory and SQLite
    # stores, to the smaller key on Redis). A URL's number picks its host.
    rank: dict[int, int] = {}

    def host(raw: int) -> int:
        return rank.setdefault(raw, len(rank))

    for _ in range(steps):
        op = rng.choices(names, weights)[0]
        if op == "add":
            batch = []
            for _ in range(rng.randint(1, 6)):
                if urls and rng.random() < 0.15:
                    k = rng.randrange(urls)  # a URL added before: a duplicate
                else:
                    k, urls = urls, urls + 1
                batch.append((k, host(k % HOSTS), rng.randint(-2, 2),
                              rng.choice([None, None, None, 1.5, 4.0])))
            ops.append((op, batch))
        elif op == "next":
            ops.append((op, rng.randint(1, 8)))
        elif op == "next_queue":
            ops.append((op, (host(rng.randrange(HOSTS)), rng.randint(1, 4))))
        elif op in ("done", "fail", "dead"):
            ops.append((op, (rng.randint(1, 5), [rng.choice([None, 0.0, 0.1, 0.4, 1.5])
                                                 for _ in range(5)])))
        elif op == "done_delay":
            ops.append((op, (rng.randint(1, 3), rng.choice([0.0, 0.7, 3.0]),
                             rng.choice([None, 0.2, 2.0]))))
        elif op == "retry":
            ops.append((op, (rng.randint(1, 3), rng.choice([0.0, 1.0, 2.5]))))
        elif op == "renew":
            ops.append((op, (rng.randint(1, 4), rng.choice([2.0, 15.0]))))
        elif op == "tick":
            ops.append((op, rng.choice([0.25, 0.5, 1.0, 2.0, 3.5])))
        elif op == "block":
            ops.append((op, (host(rng.randrange(HOSTS)), rng.choice([1.0, 3.0, 7.0]))))
        elif op == "unblock":
            ops.append((op, host(rng.randrange(HOSTS))))
        elif op == "configure":
            ops.append((op, (host(rng.randrange(HOSTS)), rng.choice([
                {"concurrency": 2}, {"concurrency": None}, {"min_delay": 1.5},
                {"min_delay": None}, {"session_budget": 2, "session_rest": 1.0},
                {"session_budget": None, "session_rest": None}, {"max_queue_urls": 6},
                {"max_queue_urls": None}]))))
        elif op == "delete_queue":
            ops.append((op, host(rng.randrange(HOSTS))))
        else:
            ops.append((op, None))
    return ops


class Run:
    """One store's run of a sequence: the frontier, the clock, the leases held."""

    def __init__(self, url_of: Any, options: dict[str, Any]) -> None:
        self.now = 1000.0
        self.options = options
        self.url_of = url_of  # n -> a new store URL
        self.n = 0
        self.f = self._open()
        self.held: list[tuple[int, Any]] = []  # (its next() call, a lease held)
        self.calls = 0

    def _open(self) -> Frontier:
        self.n += 1
        return Frontier.open(self.url_of(self.n), clock=lambda: self.now, lease_ttl=TTL,
                             **self.options)

    def step(self, op: str, arg: Any) -> Any:
        """Make one call; what it returned, in plain values."""
        f, held = self.f, self.held
        if op == "add":
            got = f.add([Request(_url(h, k), priority=p,
                                 not_before=None if nb is None else self.now + nb)
                         for k, h, p, nb in arg])
            return (got.added, got.duplicates, [r.reason for r in got.rejected])
        if op == "add_requests":  # (url, priority, dont_filter): any URL, as a case has
            got = f.add([Request(url, priority=p, dont_filter=df) for url, p, df in arg])
            return (got.added, got.duplicates, [r.reason for r in got.rejected])
        if op == "answer":  # (queue, how, after): the first lease held of that queue
            queue, how, after = arg
            i = next(j for j, (_, le) in enumerate(held) if le.queue == queue)
            lease = held.pop(i)[1]
            if how == "retry":
                return f.retry(lease, after=after)
            outcome = {"done": Outcome.DONE, "fail": Outcome.FAILED,
                       "dead": Outcome.DEAD}[how]
            return f.done(lease, outcome, error="x")
        if op in ("next", "next_queue"):
            leases = (f.next(arg) if op == "next"
                      else f.next(arg[1], queue=_key(arg[0])))
            self.calls += 1
            held += [(self.calls, le) for le in leases]
            return [(le.request.url, le.request.retries, le.expires_at) for le in leases]
        if op in ("done", "fail", "dead"):
            m, durations = arg
            some, held[:m] = [le for _, le in held[:m]], []
            outcome = {"done": Outcome.DONE, "fail": Outcome.FAILED,
                       "dead": Outcome.DEAD}[op]
            return f.done(some, outcome, error="x", duration=durations[:len(some)])
        if op == "done_delay":  # an explicit rest, as crawlq serve's answers give
            m, delay, duration = arg
            some, held[:m] = [le for _, le in held[:m]], []
            return f.store.release([ack(le.token, ACK_DONE, duration, delay=delay)
                                    for le in some], self.now)
        if op == "retry":
            m, after = arg
            some, held[-m:] = [le for _, le in held[-m:]], []
            return f.retry(some, after=after)
        if op == "renew":
            # (the leases of one next() call: the SQLite store keeps one expiry per
            # call, and renewing one of them renews its siblings, as documented)
            m, ttl = arg
            if not held:
                return []
            call = held[min(m, len(held)) - 1][0]
            renewed = f.renew([le for c, le in held if c == call], ttl)
            by_token = {le.token: le for le in renewed}
            held[:] = [(c, by_token.get(le.token, le)) for c, le in held]
            return [(le.request.url, le.expires_at) for le in renewed]
        if op == "block_key":  # (queue key, seconds)
            f.block(arg[0], seconds=arg[1])
            return None
        if op == "delete_key":
            return f.delete_queue(arg)
        if op == "configure_default":
            f.configure_default(**arg)
            return None
        if op == "tick":
            self.now += arg
            return None
        if op == "expire":  # every lease held expires (their answers come late)
            self.now += TTL + 1
            return None
        if op == "block":
            f.block(_key(arg[0]), seconds=arg[1])
            return None
        if op == "unblock":
            f.unblock(_key(arg))
            return None
        if op == "configure":
            f.configure_queue(_key(arg[0]), **arg[1])
            return None
        if op == "requeue_dead":
            return f.requeue_dead()
        if op == "delete_queue":
            return f.delete_queue(_key(arg))
        if op == "dump_load":  # into a new store of the same kind; leases come back queued
            records = list(f.dump())
            f.close()
            self.f = self._open()
            self.held = []
            return self.f.load(records)
        raise AssertionError(op)

    def look(self) -> Any:
        """Everything a user can look at."""
        f = self.f
        # (each of these wakes what came due: the listing first, so that a store whose
        # listing forgot to is caught)
        queues = sorted((q.key, q.queued, q.scheduled, q.leased, q.ready_at, q.accepted,
                         q.state, dict(q.settings)) for q in f.queues(100))
        s = f.stats()
        stats = {k: v for k, v in s.as_dict().items() if k != "per_queue"}
        return f.next_ready_at(), stats, queues

    def drain(self) -> list[Any]:
        """Lease and finish everything left, time passing; what came out, in order."""
        out = []
        for _ in range(500):
            self.now += 5
            leases = self.f.next(7)
            out.append([le.request.url for le in leases])
            self.f.done(leases)
            if self.f.stats().finished:
                break
        return out


def trace(url_of: Any, ops: list[tuple[str, Any]], options: dict[str, Any]) -> list[Any]:
    """Each call of ``ops`` with its result and what could be seen after it, then the
    drain; on one kind of store."""
    run = Run(url_of, options)
    out = []
    try:
        for op, arg in ops:
            if op == "unseen":  # a call not looked at after: the next one notices first
                op, arg = arg
                out.append((op, arg, run.step(op, arg), None))
            else:
                out.append((op, arg, run.step(op, arg), run.look()))
        out.append(("drain", None, run.drain(), run.look()))
    finally:
        run.f.close()
    return out


def assert_same(name: str, got: list[Any], want: list[Any]) -> None:
    """The first step where ``got`` (of store ``name``) differs from the memory store's."""
    for i, (g, w) in enumerate(itertools.zip_longest(got, want)):
        if g != w:
            context = "\n".join(f"  {j}: {want[j][0]} {want[j][1]} -> {want[j][2]}"
                                for j in range(max(0, i - 8), i))
            raise AssertionError(
                f"{name} differs from memory at step {i}:\n{context}\n"
                f"  {i}: {w[0] if w else None} {w[1] if w else None}\n"
                f"    memory: {w[2:] if w else None}\n    {name}: {g[2:] if g else None}")


@pytest.mark.parametrize("options", list(OPTION_SETS))
@pytest.mark.parametrize("seed", range(1, 1 + int(os.environ.get("DIFF_SEEDS", "3"))))
def test_memory_sqlite_and_redis_agree_step_by_step(tmp_path: Path, redis_server: Any,
                                                    redis_cluster: Any, options: str,
                                                    seed: int) -> None:
    """The same seeded calls, under one option set, give the same results and the same
    views after every call on the memory, SQLite and Redis stores, and on a crawl cut
    into 8 shards over a 3-node Redis Cluster."""
    ops = diff_ops(seed * 31 + len(options), 220)
    opts = OPTION_SETS[options]
    want = trace(lambda n: "memory://", ops, opts)
    leased = sum(len(r) for op, _, r, _ in want if op in ("next", "next_queue"))
    assert leased > 30  # (a sequence that does something)
    got_sqlite = trace(lambda n: f"sqlite:///{tmp_path}/s{n}.db", ops, opts)
    assert_same("sqlite", got_sqlite, want)
    got_redis = trace(lambda n: f"{redis_server.url}?prefix=diff-{options}-{seed}-{n}",
                      ops, opts)
    assert_same("redis", got_redis, want)
    got_shards = trace(lambda n: f"{redis_cluster.url}&prefix=sdiff-{options}-{seed}-{n}"
                       "&shards=8", ops, opts)
    assert_same("redis-sharded", got_shards, want)


_FAST = {"min_delay": 0.0, "max_delay": 0.0, "delay_factor": 0.0}

CASES: dict[str, tuple[dict[str, Any], list[tuple[str, Any]]]] = {
    # Short sequences where a store once went its own way (issue 58), each with its
    # options. Host 9 is never used: deleting h9.b.example deletes a queue that does
    # not exist. ("unseen": nothing is looked at after that call, so that the next
    # call is the first to notice what came due meanwhile. The SQLite store runs them
    # with group_commit=1: a small answer is held until the next call, never committed
    # by the flusher in between.)
    "lease-after-deleting-a-missing-queue": (  # Redis: the lease script never ended
        {"min_delay": 0.0, "max_delay": 1.0, "delay_factor": 1.0, "domain_concurrency": 1,
         "session_budget": 2, "retry_backoff": 1.0},
        [("add_requests", [("http://example.com/p4", 0, False),
                           ("http://h5.a.test/p9", -2, True),
                           ("http://d.example.com:8080/p5", -3, False),
                           ("http://example.com/p11", -1, False)]),
         ("next", 50),
         ("answer", ("h5.a.test", "done", None)),
         ("answer", ("example.com", "retry", -2.0)),
         ("answer", ("d.example.com:8080", "dead", None)),
         ("next", 2), ("tick", 2.0),
         ("answer", ("example.com", "fail", None)), ("unseen", ("tick", 1.0)),
         ("unseen", ("add_requests", [("http://x.example.co.uk/p7", -3, False),
                                      ("http://h5.a.test/p10", 0, False)])),
         ("delete_queue", 9), ("requeue_dead", None), ("next", 5)]),
    "a-due-request-kept-by-deleting-a-missing-queue": (  # Redis: stranded, crawl finished
        {**_FAST, "retry_backoff": 1.0},
        [("add_requests", [("http://a.test/1", 0, False)]), ("next", 5),
         ("fail", (1, [None])), ("unseen", ("tick", 2.0)), ("delete_queue", 9),
         ("next", 5)]),
    "load-delete-add": (  # Redis: old priority, then two leases under concurrency 1
        {"min_delay": 0.5, "max_delay": 3.0, "delay_factor": 1.0},
        [("add_requests", [("http://a.test/1", 3, False), ("http://a.test/2", -3, False),
                           ("http://b.test/1", -2, False)]),
         ("next", 5), ("answer", ("a.test", "done", None)),
         ("add_requests", [("http://b.test/2", -2, False)]),
         ("dump_load", None), ("unseen", ("tick", 2.0)), ("delete_queue", 9),
         ("add_requests", [("http://a.test/3", 0, False)]), ("next", 5), ("next", 5)]),
    "a-revisit-counts-its-own-expiries": (  # Redis: counted with the first request's
        {**_FAST, "max_redeliveries": 1, "revisit_after": 20},
        [("add_requests", [("http://a.test/x", -1, False)]), ("next", 1), ("tick", 20.0),
         ("add_requests", [("http://a.test/x", 1, False)]), ("next", 1), ("tick", 10.0),
         ("next", 0)]),
    "two-requests-of-one-url-count-their-own-expiries": (
        {**_FAST, "max_redeliveries": 2, "concurrency": 3},
        [("add_requests", [("http://a.test/x", -1, True)]), ("next", 5),
         ("add_requests", [("http://a.test/x", 1, True)]), ("tick", 11.0), ("next", 5),
         ("tick", 11.0), ("next", 0)]),
    "twins-count-their-own-expiries": (  # (the same priority: the same bytes queued)
        {**_FAST, "max_redeliveries": 2, "concurrency": 3},
        [("add_requests", [("http://a.test/x", 0, True)]), ("next", 5),
         ("add_requests", [("http://a.test/x", 0, True)]), ("tick", 11.0), ("next", 5),
         ("tick", 11.0), ("next", 0)]),
    "a-grouped-answer-rests-by-the-policy-of-its-time": (  # SQLite: by the new default
        {"min_delay": 0.0, "max_delay": 1.0, "delay_factor": 1.0},
        [("add_requests", [("http://c.test/1", 0, False), ("http://c.test/2", 0, False)]),
         ("next", 5), ("unseen", ("done", (1, [0.25]))),
         ("configure_default", {"min_delay": 0.5, "max_delay": 1.0, "delay_factor": 1.0}),
         ("tick", 0.25), ("next", 5)]),
    "a-grouped-answer-leaves-a-park-that-ended-before-it": (  # SQLite: ready at T0+9
        {**_FAST, "domain_concurrency": 1, "retry_backoff": 0.0},
        [("add_requests", [("http://127.0.0.1/p", -1, False),
                           ("http://a.example.com/p", 2, False),
                           ("http://b.example.com/p", -3, False),
                           ("http://c.example.com:8080/p", 1, False)]),
         ("next", 10), ("unseen", ("answer", ("127.0.0.1", "fail", None))),
         ("unseen", ("tick", 9.0)), ("done", (2, [2.0, 2.0])), ("next", 10)]),
    "a-parked-queue-emptied-by-delete-queue": (  # SQLite: unparked by a later lease end
        {**_FAST, "domain_concurrency": 2, "concurrency": 2},
        [("add_requests", [("http://b.example.com/p0", 1, False),
                           ("http://example.com/p12", -2, False)]),
         ("next", 50),
         ("add_requests", [("http://example.com/p10", -1, False),
                           ("http://c.example.com/p24", -1, False)]),
         ("answer", ("b.example.com", "done", None)), ("next", 10),
         ("delete_key", "example.com"), ("answer", ("c.example.com", "done", None)),
         ("answer", ("example.com", "done", None)),
         ("add_requests", [("http://example.com/p20", -2, False),
                           ("http://b.example.com/p13", 0, False)]),
         ("next", 2), ("done", (2, [None, None])), ("next", 1)]),
    "the-order-of-one-calls-later-rounds": (  # SQLite: a/p4 c/p6 a/p5 (the others
        {**_FAST, "concurrency": 3},       # a/p4 a/p5 c/p6)
        [("add_requests", [("http://a.test/p4", 1, False), ("http://b.test/p1", -1, False),
                           ("http://c.test/p2", 2, False), ("http://d.test/p18", 1, False),
                           ("http://e.test/p20", 1, False), ("http://f.test/p0", 1, False)]),
         ("add_requests", [("http://a.test/p5", 0, False), ("http://c.test/p6", 2, False),
                           ("http://a.test/p10", 2, False)]),
         ("next", 10)]),
    "a-dump-of-a-rest-ended-unnoticed": (  # SQLite: another first lease after the load
        {"domain_concurrency": 2, "min_delay": 0.25, "max_delay": 2.0, "delay_factor": 1.0},
        [("add_requests", [("http://b.example.com/p18", -2, False),
                           ("http://c.example.com/p5", -2, False),
                           ("http://x.example.co.uk/p0", 0, False),
                           ("http://y.example.co.uk/p2", 2, False)]),
         ("next", 3),
         ("add_requests", [("http://y.example.co.uk/p13", -3, False),
                           ("http://c.example.com/p10", 0, False)]),
         ("answer", ("x.example.co.uk", "done", None)),
         ("answer", ("y.example.co.uk", "done", None)), ("next", 2),
         ("done", (2, [0.0, 0.0])),
         ("unseen", ("tick", 5.0)),
         ("unseen", ("add_requests", [("http://c.example.com/p23", 0, False)])),
         ("dump_load", None),
         ("add_requests", [("http://y.example.co.uk/p12", 0, False)]), ("next", 1)]),
    "block-for-no-time-after-a-rest-ended-unnoticed": (  # memory, SQLite: sent back
        {"min_delay": 1.0, "max_delay": 3.0, "delay_factor": 1.0},
        [("add_requests", [("http://a.test/1", 0, False), ("http://a.test/2", 0, False),
                           ("http://b.test/1", 0, False), ("http://b.test/2", 0, False)]),
         ("next", 2), ("done", (2, [None, None])), ("unseen", ("tick", 2.0)),
         ("block_key", ("a.test", 0.0)), ("next", 1)]),
}


@pytest.mark.parametrize("case", list(CASES))
def test_the_stores_agree_on_the_cases_found(tmp_path: Path, redis_server: Any,
                                             redis_cluster: Any, case: str) -> None:
    """Each of CASES gives the same results and views after every call on the memory,
    SQLite and Redis stores, and on a crawl cut into 8 shards over a Redis Cluster."""
    opts, ops = CASES[case]
    want = trace(lambda n: "memory://", ops, opts)
    assert_same("sqlite", trace(lambda n: f"sqlite:///{tmp_path}/c{n}.db?group_commit=1",
                                ops, opts), want)
    assert_same("redis", trace(lambda n: f"{redis_server.url}?prefix=case-{case}-{n}",
                               ops, opts), want)
    assert_same("redis-sharded", trace(
        lambda n: f"{redis_cluster.url}&prefix=scase-{case}-{n}&shards=8", ops, opts), want)


@pytest.mark.parametrize("bloom", [False, True])
def test_a_dump_moves_between_the_stores(tmp_path: Path, redis_server: Any,
                                         redis_cluster: Any, bloom: bool) -> None:
    """A dump of any store loads into any other: the URLs it fetched stay known (exact
    seen-set or Bloom filter, whose bits each store lays out its own way), a queue's
    settings stay its own (a memory store's dump once wrote its counts as floats, which
    the others refused), and what it had queued comes out in the same order. A crawl
    sharded over a Redis Cluster takes part with an exact seen-set; its Bloom filters
    (one per shard) go only to a crawl of as many shards, and it refuses another's."""
    options: dict[str, Any] = {"min_delay": 0.0, "max_delay": 0.0, "delay_factor": 0.0,
                               "concurrency": 100}
    if bloom:
        options["bloom_capacity"] = 10_000
    n = itertools.count()

    def url_of(kind: str) -> str:
        k = next(n)
        return {"memory": "memory://", "sqlite": f"sqlite:///{tmp_path}/m{k}.db",
                "redis": f"{redis_server.url}?prefix=move-{bloom}-{k}",
                "sharded": f"{redis_cluster.url}&prefix=smove-{bloom}-{k}&shards=8"}[kind]

    urls = [f"https://h{i % 3}.example/{i}" for i in range(60)]
    kinds: tuple[str, ...] = ("memory", "sqlite", "redis")
    if not bloom:
        kinds += ("sharded",)
    else:
        with Frontier.open(url_of("memory"), **options) as f:
            f.add(urls[:5])
            records = list(f.dump())
        with Frontier.open(url_of("sharded"), **options) as g, \
                pytest.raises(ConfigError, match="a filter per shard"):
            g.load(records)
        with Frontier.open(url_of("sharded"), **options) as f:
            f.add(urls[:40])
            records = list(f.dump())
        with Frontier.open(url_of("sharded"), **options) as g:
            g.load(records)
            assert g.add(urls[:40]).added == 0
            assert g.add(urls[40:]).added == 20
    for source in kinds:
        with Frontier.open(url_of(source), **options) as f:
            f.add(urls[:40])
            f.configure_queue("h1.example", concurrency=100, max_queue_urls=50,
                              min_delay=0.0)
            f.done(f.next(20))  # fetched: known only to the seen-set
            f.next(3)  # leased: dumped as queued, at the head of their queues
            records = list(f.dump())
        orders = []
        for target in kinds:
            with Frontier.open(url_of(target), **options) as g:
                g.load(records)
                assert {q.key: q.settings for q in g.queues()}["h1.example"] == {
                    "concurrency": 100, "max_queue_urls": 50, "min_delay": 0.0}
                assert g.add(urls[:40]).added == 0, (source, target)
                assert g.add(urls[40:]).added == 20
                order = []
                while leases := g.next(5):
                    order += [le.request.url for le in leases]
                    g.done(leases)
                orders.append(order)
        assert len(orders[0]) == 40 and all(o == orders[0] for o in orders[1:]), source
