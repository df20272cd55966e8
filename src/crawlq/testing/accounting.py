"""Part of the store contract (:class:`crawlq.testing.FrontierContract`). Accounting:
stats and listings, every accepted request accounted for, dump and load, the Bloom
seen-set, threads."""

from __future__ import annotations

import json
import threading

import pytest

from ..errors import ConfigError
from ..models import Outcome, Request
from ..stores import dumpfmt
from .env import FAST, Env


class AccountingContract:
    """Accounting (part of :class:`crawlq.testing.FrontierContract`)."""

    def test_clear_empties_the_store_in_place(self, env: Env) -> None:
        """``clear()`` forgets everything (queued, scheduled, leased and dead requests,
        the seen-set, queues, counters, values) while the frontier stays open on the
        store: the same URLs are new again. An answer to a lease of before comes late,
        never to a lease of after."""
        f = env.open(max_retries=0, **FAST)
        f.add(["https://a.example/1", "https://a.example/2", "https://b.example/1",
               Request("https://c.example/later", not_before=env.clock() + 60)])
        (old,) = f.next(1, queue="a.example")
        (gone,) = f.next(1, queue="b.example")
        f.done(gone, Outcome.FAILED, error="x")  # dead
        f.put_value("v", b"1")
        f.clear()
        f = env.checkpoint()
        s = f.stats()
        assert (s.seen, s.added, s.queued, s.scheduled, s.leased, s.dead, s.done,
                s.failed, s.queues_total) == (0, 0, 0, 0, 0, 0, 0, 0, 0)
        assert f.get_value("v") is None and f.dead() == [] and f.next(5) == []
        assert f.add(["https://a.example/1", "https://a.example/2"]).added == 2
        (new,) = f.next(1)
        assert f.done(old) == 0 and f.stats().late_acks == 1
        assert f.done(new) == 1
        assert f.add(["https://a.example/1"]).duplicates == 1

    def test_stats_and_queue_listing(self, env: Env) -> None:
        f = env.open(**FAST)
        f.add([f"https://a.example/{i}" for i in range(3)] + ["https://b.example/"])
        f.next(10)
        f = env.checkpoint()
        s = f.stats(per_queue=10)
        assert (s.seen, s.queued, s.leased, s.queues_total) == (4, 2, 2, 2)
        assert (s.queues_ready, s.queues_busy, s.queues_resting, s.queues_exhausted) == (
            0, 1, 0, 1)
        a = next(q for q in s.per_queue if q.key == "a.example")
        assert (a.queued, a.leased, a.accepted, a.state) == (2, 1, 3, "busy")
        assert not s.finished
        assert s.as_dict()["per_queue"][0]["key"] == "a.example"

    def test_everything_accepted_is_accounted_for(self, env: Env) -> None:
        f = env.open(lease_ttl=30, max_retries=1, retry_backoff=1, concurrency=4, **FAST)
        urls = [f"https://h{i % 7}.example/{i}" for i in range(300)]
        f.add(urls)
        finished: set[str] = set()
        for step in range(400):
            leases = f.next(17)
            if step % 5 == 0:
                f = env.checkpoint()
            for i, le in enumerate(leases):
                if i % 6 == 5:
                    continue  # abandoned: the lease expires
                if i % 6 == 4:
                    f.done(le, Outcome.FAILED, error="x")
                else:
                    assert le.request.url not in finished
                    f.done(le)
                    finished.add(le.request.url)
            env.clock.advance(7)
            if f.stats().finished:
                break
        s = f.stats()
        assert s.finished
        dead = {d.request.url for d in f.dead(1000)}
        assert finished | dead == set(urls) and not finished & dead
        assert s.done == len(finished) and s.dead == len(dead)

    def test_queues_count_their_scheduled_requests(self, env: Env) -> None:
        """``queues()`` gives each queue's requests waiting for a time (``scheduled``)
        apart from its queued ones; one that came due is queued."""
        f = env.open(**FAST)
        t = env.clock()
        f.add([Request("https://a.example/1", not_before=t + 10),
               Request("https://a.example/2", not_before=t + 20), "https://a.example/3",
               Request("https://b.example/1", not_before=t + 10)])
        f = env.checkpoint()
        got = {q.key: (q.queued, q.scheduled) for q in f.queues()}
        assert got == {"a.example": (1, 2), "b.example": (0, 1)}
        env.clock.advance(15)
        got = {q.key: (q.queued, q.scheduled) for q in f.queues()}
        assert got == {"a.example": (2, 1), "b.example": (1, 0)}
        assert f.stats(per_queue=1).per_queue[0].scheduled == 1

    def test_dump_and_load_round_trip(self, env: Env) -> None:
        f = env.open(max_retries=0, **FAST)
        f.add([Request("https://a.example/1", priority=2, meta={"m": 1}),
               "https://a.example/2", "https://b.example/1",
               Request("https://c.example/later", not_before=env.clock() + 100)])
        f.configure_queue("b.example", min_delay=7.0)
        leases = f.next(10)
        f.done([le for le in leases if le.queue == "b.example"], Outcome.FAILED, error="boom")
        records = list(f.dump())
        g = env.open_other(max_retries=0, **FAST)
        assert records[0]["type"] == "dump"
        assert g.load(records) == len(records) - 1  # (the header is no state)
        s, t = f.stats(), g.stats()
        assert (t.seen, t.dead, t.failed) == (s.seen, s.dead, s.failed)
        assert t.queued == s.queued + s.leased  # leases come back as queued
        assert g.add("https://a.example/1").added == 0
        assert g.dead()[0].error == "boom"
        got = {le.request.url for le in g.next(10)}
        assert "https://a.example/1" in got
        env.clock.advance(101)
        assert "https://c.example/later" in {le.request.url for le in g.next(10)}

    def test_a_load_keeps_the_ready_line_whoever_noticed_what(self, env: Env) -> None:
        """A dump loaded at once gives the lease the frontier would have given: a queue
        whose rest ended unnoticed waits from the rest's end, and one whose only lease
        ran out unnoticed (dumped as queued) waits from the load, not from before its
        lease; whatever the queues' keys' order."""
        options = {"min_delay": 0.5, "max_delay": 3.0, "delay_factor": 1.0}
        for first in ("a.example", "z.example"):
            f = env.open_other(**options)
            f.add([f"https://{first}/1", Request("https://b.example/1", priority=3)])
            leases = f.next(2, ttl=5)
            f.add(Request(f"https://{first}/2", priority=3))
            f.done([le for le in leases if le.queue == first])  # rests 0.5 s
            env.clock.advance(6)  # (b.example's lease ran out 1 s ago)
            f.add(f"https://{first}/3")
            g = env.open_other(**options)
            g.load(f.dump())
            assert [le.queue for le in g.next(1)] == [le.queue for le in f.next(1)] == [
                first]

    def test_a_dump_writes_each_setting_in_its_type(self, env: Env) -> None:
        """A dump writes a queue's counts (concurrency, budgets) as ints and its times as
        floats, whichever store wrote it, so that it loads into every store, through
        JSON too; a dump that wrote a count as a whole float (``2.0``) still loads, a
        count that is not whole is refused."""
        f = env.open(**FAST)
        f.add(["https://a.example/1", "https://b.example/1"])
        f.configure_queue("b.example", concurrency=2, max_queue_urls=5, session_budget=3,
                          session_rest=1.0, min_delay=1.5)
        records = [json.loads(json.dumps(r)) for r in f.dump()]
        (settings,) = [r["settings"] for r in records
                       if r["type"] == "queue" and r["key"] == "b.example"]
        assert settings == {"concurrency": 2, "max_queue_urls": 5, "session_budget": 3,
                            "session_rest": 1.0, "min_delay": 1.5}
        assert {k: type(v) for k, v in settings.items()} == {
            "concurrency": int, "max_queue_urls": int, "session_budget": int,
            "session_rest": float, "min_delay": float}
        g = env.open_other(**FAST)
        assert g.load(records) == len(records) - 1
        (q,) = [q for q in g.queues() if q.key == "b.example"]
        assert q.settings == settings
        settings["concurrency"] = 2.0
        assert env.open_other(**FAST).load(records) == len(records) - 1
        settings["concurrency"] = 2.5
        with pytest.raises(ConfigError, match="concurrency must be an integer"):
            env.open_other(**FAST).load(records)

    def test_a_dump_carries_the_named_values_that_last(self, env: Env) -> None:
        """A dump carries the named values with no expiry (a server's settings, what it
        keeps of fetched URLs), in name order; those with an expiry belong to this store's
        leases and times, and stay, as do the store's own (named under a prefix of the
        frontier's ``local_values``, as ``crawlq serve``'s ``crawlq:serve:...``): a load
        leaves the ones of the store it goes into as they are."""
        local = ("server:", "crawlq:serve:")
        f = env.open(local_values=local, **FAST)
        f.store.put_values([("b", b"\x00two", None), ("a", b"one", None),
                            ("c", b"later", env.clock() + 100),
                            ("crawlq:serve:active", b"0", None), ("server:x", b"0", None)])
        values = [r for r in f.dump() if r["type"] == "value"]
        assert [v["name"] for v in values] == ["a", "b"]
        g = env.open_other(local_values=local, **FAST)
        g.put_value("server:x", b"1")
        g.load([*f.dump(), dumpfmt.value("server:x", b"0", None)])
        assert g.store.get_values(["a", "b", "c", "server:x", "crawlq:serve:active"],
                                  env.clock()) == [b"one", b"\x00two", None, b"1", None]

    def test_a_dump_loads_once_and_whole(self, env: Env) -> None:
        """A dump goes through JSON whole (bytes and non-string keys in meta included);
        loading it twice is refused, changing nothing; a request with a bad field is
        refused before it reaches the store."""
        meta = {"raw": b"\x00\xff", "n": {1: "an int key"}, "t": [b"x", "y"],
                "$bytes": "a key like a tag"}
        f = env.open(**FAST)
        f.add([Request("https://a.example/1", meta=meta), "https://a.example/2"])
        records = [json.loads(json.dumps(r)) for r in f.dump()]  # as crawlq dump writes
        g = env.open_other(**FAST)
        assert g.load(records) == len(records) - 1
        before = g.stats()
        with pytest.raises(ConfigError, match="loaded into this store already"):
            g.load(records)
        after = g.stats()
        assert (after.seen, after.added, after.queued) == (before.seen, before.added, 2)
        got = {le.request.url: le.request for le in g.next(5)}
        assert got["https://a.example/1"].meta == meta
        h = env.open_other(**FAST)
        bad = {"type": "entry", "queue": "z.example",
               "request": {"url": "https://z.example/", "referrer": 5}}
        with pytest.raises(ConfigError, match="referrer must be a URL"):
            h.load([records[0], bad, *records[1:]])
        assert h.stats().queued == 0 and h.next(5) == []
        assert h.load(records) == len(records) - 1  # (not marked loaded by the failure)

    def test_bloom_seen_set(self, env: Env) -> None:
        f = env.open(bloom_capacity=10_000, bloom_error_rate=0.001, concurrency=100, **FAST)
        urls = [f"https://a.example/{i}" for i in range(2000)]
        assert f.add(urls).added >= 1990
        f = env.checkpoint()
        assert f.add(urls[:1000]).added == 0          # a Bloom filter has no false negatives

    def test_threads_never_share_a_lease(self, env: Env) -> None:
        f = env.open(concurrency=5, **FAST)
        f.add([f"https://h{i % 20}.example/{i}" for i in range(1000)])
        got: list[str] = []
        lock = threading.Lock()

        def worker() -> None:
            while True:
                leases = f.next(7)
                if not leases:
                    if f.stats().finished:
                        return
                    continue
                with lock:
                    got.extend(le.request.url for le in leases)
                f.done(leases)

        threads = [threading.Thread(target=worker) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert len(got) == 1000 and len(set(got)) == 1000
        assert f.stats().done == 1000
