"""The store contract suite: the executable specification of a crawlq Store.

Anyone writing a store subclasses :class:`FrontierContract` in a pytest module and
implements :meth:`FrontierContract.open_frontier`; every test then runs twice, the second
time closing and reopening the store at its checkpoints (a store that keeps nothing
across a reopen, by design, subclasses :class:`MemoryOnlyContract` instead)::

    class TestMyStore(FrontierContract):
        def open_frontier(self, clock, path, **options):
            return Frontier.open(f"mystore://{path}", clock=clock, **options)

Time is a :class:`Clock` the tests move by hand; nothing here sleeps.
"""

from __future__ import annotations

import json
import threading
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from .errors import ConfigError, LeaseError, StoreError
from .frontier import Frontier
from .models import Outcome, Request

T0 = 1_800_000_000.0


class Clock:
    """A hand-moved clock for frontier tests."""

    def __init__(self, t: float = T0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t

    def advance(self, seconds: float) -> None:
        """Move time forward."""
        self.t += seconds


FAST = {"min_delay": 0.0, "max_delay": 0.0, "delay_factor": 0.0}
"""Options that turn politeness delays off, for tests about other things."""


class FrontierContract:
    """Behaviour every store must show through the Frontier API."""

    def open_frontier(self, clock: Clock, path: Path, **options: Any) -> Frontier:
        """Open a frontier on the store under test; ``path`` is a fresh folder."""
        raise NotImplementedError

    # -- fixtures ------------------------------------------------------------------

    @pytest.fixture(params=["live", "reopened"])
    def reopen_mode(self, request: pytest.FixtureRequest) -> str:
        """Durable stores run each test twice; a memory store overrides this fixture
        with ``params=["live"]`` (see :class:`MemoryOnlyContract`)."""
        return str(request.param)

    @pytest.fixture
    def env(self, tmp_path: Path, reopen_mode: str) -> Iterator[_Env]:
        e = _Env(self, tmp_path, reopen_mode == "reopened")
        yield e
        e.close()

    # -- adding and dedup ---------------------------------------------------------------

    def test_add_dedups_canonical_forms(self, env: _Env) -> None:
        f = env.open(**FAST)
        r = f.add(["https://Example.com:443/a?b=2&a=1#x", "https://example.com/a?a=1&b=2",
                   "https://example.com/a?a=1&b=2&utm_source=news", "https://example.com/b"])
        assert (r.added, r.duplicates, r.rejected) == (2, 2, ())
        assert r.added_flags == (True, False, False, True)
        f = env.checkpoint()
        r = f.add(["https://EXAMPLE.com/a?b=2&a=1", "https://example.com/c"])
        assert (r.added, r.duplicates) == (1, 1)
        s = f.stats()
        assert (s.seen, s.added, s.queued, s.duplicates) == (3, 3, 3, 3)

    def test_duplicates_a_caller_recognized_are_counted(self, env: _Env) -> None:
        f = env.open(**FAST)
        f.add(["https://a.example/", "https://a.example/"])
        f.count_duplicates(3)
        f.count_duplicates(0)
        with pytest.raises(ConfigError):
            f.count_duplicates(-1)
        f = env.checkpoint()
        s = f.stats()
        assert (s.added, s.duplicates) == (1, 4)

    def test_bad_urls_are_rejected_with_reasons_not_raised(self, env: _Env) -> None:
        f = env.open(**FAST)
        r = f.add(["ftp://example.com/", "https://", "https://ok.example/",
                   "https://example.com/" + "a" * 50_000, "http://exa mple.com/",
                   "https://exa\x00mple.com/", "mailto:someone@example.com", ""])
        assert r.added == 1
        reasons = {x.index: x.reason for x in r.rejected}
        assert reasons == {0: "bad-scheme", 1: "no-host", 3: "too-long", 4: "bad-host",
                           5: "control-chars", 6: "bad-scheme", 7: "empty"}
        f = env.checkpoint()
        assert f.stats().rejected == {"bad-scheme": 2, "no-host": 1, "too-long": 1,
                                      "bad-host": 1, "control-chars": 1, "empty": 1}

    def test_dont_filter_and_retries_bypass_dedup(self, env: _Env) -> None:
        f = env.open(**FAST)
        f.add("https://a.example/")
        r = f.add([Request("https://a.example/", dont_filter=True),
                   Request("https://a.example/", retries=1)])
        assert r.added == 2
        assert f.stats().seen == 1 and f.stats().added == 3

    def test_post_dedup_policy(self, env: _Env) -> None:
        f = env.open(dedup_post=False, **FAST)
        post = Request("https://a.example/form", method="POST", body=b"q=1")
        assert f.add([post, post]).added == 2
        g = env.open_other(**FAST)
        assert g.add([post, post, Request("https://a.example/form", method="POST",
                                          body=b"q=2")]).added == 2

    def test_source_aware_fingerprints(self, env: _Env) -> None:
        f = env.open(source_aware=True, **FAST)
        r = f.add([Request("https://a.example/x", referrer="https://a.example/1"),
                   Request("https://a.example/x", referrer="https://a.example/2"),
                   Request("https://a.example/x", referrer="https://a.example/1")])
        assert r.added_flags == (True, True, False)

    def test_custom_key_function(self, env: _Env) -> None:
        f = env.open(canonicalize=lambda u: u.split("?")[0], **FAST)
        r = f.add(["https://a.example/p?session=1", "https://a.example/p?session=2"])
        assert r.added == 1

    def test_a_request_may_name_its_queue(self, env: _Env) -> None:
        f = env.open(concurrency=1, **FAST)
        r = f.add([Request("https://a.example/1", queue="slot-x"),
                   Request("https://b.example/2", queue="slot-x"),
                   Request("https://a.example/3"),
                   Request("https://a.example/4", queue=""),
                   Request("https://a.example/5", queue=7)])  # type: ignore[arg-type]
        assert r.added == 3
        assert [(x.index, x.reason) for x in r.rejected] == [
            (3, "invalid-request"), (4, "invalid-request")]
        got = f.next(10)
        # One queue for both named ones (one lease at a time), the host's for the third.
        assert sorted((le.queue, le.request.url) for le in got) == [
            ("a.example", "https://a.example/3"), ("slot-x", "https://a.example/1")]
        f.done(got)
        (last,) = f.next(10)
        assert (last.queue, last.request.url) == ("slot-x", "https://b.example/2")
        assert last.request.queue is None  # where it waited is the lease's queue

    def test_revisit_after_interval(self, env: _Env) -> None:
        f = env.open(revisit_after=3600, **FAST)
        f.add("https://a.example/daily")
        f.done(f.next(1))
        env.clock.advance(1800)
        f = env.checkpoint()
        assert f.add("https://a.example/daily").added == 0
        env.clock.advance(1801)
        assert f.add("https://a.example/daily").added == 1
        # A per-request interval overrides the frontier's.
        assert f.add(Request("https://a.example/often", revisit_after=10)).added == 1
        env.clock.advance(11)
        assert f.add("https://a.example/often").added == 1  # then the default (1 h) holds
        env.clock.advance(11)
        assert f.add("https://a.example/often").added == 0

    # -- ordering --------------------------------------------------------------------------

    def test_priority_then_fifo_within_a_queue(self, env: _Env) -> None:
        f = env.open(concurrency=10, **FAST)
        f.add([Request(f"https://a.example/{i}", priority=p)
               for i, p in enumerate([0, 5, 0, 5, -3, 9])])
        f = env.checkpoint()
        got = [le.request.url.rsplit("/", 1)[1] for le in f.next(10)]
        assert got == ["5", "1", "3", "0", "2", "4"]

    def test_lifo_option(self, env: _Env) -> None:
        f = env.open(concurrency=10, lifo=True, **FAST)
        f.add([f"https://a.example/{i}" for i in range(4)])
        f = env.checkpoint()
        assert [le.request.url[-1] for le in f.next(10)] == ["3", "2", "1", "0"]

    def test_high_priority_on_any_host_goes_first(self, env: _Env) -> None:
        f = env.open(**FAST)
        f.add([f"https://big.example/{i}" for i in range(50)])
        f.add(Request("https://small.example/urgent", priority=7))
        first = f.next(1)
        assert first[0].request.url == "https://small.example/urgent"

    def test_ready_queues_served_by_waiting_time(self, env: _Env) -> None:
        f = env.open(**FAST)
        f.add("https://old.example/")
        env.clock.advance(5)
        f.add("https://new.example/")
        env.clock.advance(5)
        f = env.checkpoint()
        assert [le.queue for le in f.next(2)] == ["old.example", "new.example"]

    def test_a_lease_lasts_the_ttl_its_call_asked_for(self, env: _Env) -> None:
        """``next(n, ttl=S)`` leases for S seconds instead of ``lease_ttl``."""
        f = env.open(lease_ttl=100, **FAST)
        f.add(["https://a.example/1", "https://b.example/1"])
        now = env.clock()
        (short,) = f.next(1, ttl=5)
        (long,) = f.next(1)
        assert (short.expires_at, long.expires_at) == (now + 5, now + 100)
        env.clock.advance(6)
        f = env.checkpoint()
        assert [le.request.url for le in f.next(2)] == [short.request.url]
        with pytest.raises(ConfigError):
            f.next(1, ttl=0)

    def test_next_can_take_from_one_queue(self, env: _Env) -> None:
        """``next(n, queue=K)`` leases only from queue K, under K's politeness (its
        concurrency, its rest after an answer); the other queues keep their places."""
        f = env.open(concurrency=2, **FAST)
        f.add([Request("https://a.example/1", priority=1), "https://a.example/2",
               "https://a.example/3", "https://b.example/1"])
        f = env.checkpoint()
        got = f.next(5, queue="a.example")
        assert [le.request.url for le in got] == ["https://a.example/1",
                                                  "https://a.example/2"]
        assert f.next(5, queue="a.example") == []  # (its concurrency is 2)
        assert f.next(5, queue="nowhere.example") == []
        assert [le.queue for le in f.next(5)] == ["b.example"]
        f.done(got)
        f = env.checkpoint()
        assert [le.request.url for le in f.next(5, queue="a.example")] == [
            "https://a.example/3"]
        assert f.stats().leased == 2 and f.stats().queued == 0
        f = env.open(concurrency=2, min_delay=10.0, max_delay=10.0, lease_ttl=100)
        f.add(["https://c.example/1", "https://c.example/2"])
        f.done(f.next(1, queue="c.example"))
        assert f.next(5, queue="c.example") == []  # resting
        env.clock.advance(11)
        assert len(f.next(5, queue="c.example")) == 1

    def test_delete_queue_drops_what_it_holds(self, env: _Env) -> None:
        """``delete_queue(K)`` removes K's queued and scheduled requests (returns how
        many); its leased ones stay leased and are answered as usual (one whose lease
        ends comes back); the other queues, the seen-set and dead requests are kept."""
        f = env.open(lease_ttl=10, **FAST)
        f.add(["https://a.example/1", "https://a.example/2", "https://a.example/3",
               Request("https://a.example/later", not_before=env.clock() + 100),
               "https://b.example/1"])
        (held,) = f.next(1, queue="a.example")
        f = env.checkpoint()
        assert f.delete_queue("a.example") == 3
        assert f.delete_queue("nowhere.example") == 0
        st = f.stats()
        assert (st.queued, st.scheduled, st.leased) == (1, 0, 1)
        assert [le.queue for le in f.next(5)] == ["b.example"]
        assert f.add("https://a.example/2").duplicates == 1  # still seen
        assert f.add("https://a.example/4").added == 1       # the queue takes new ones
        f = env.checkpoint()
        assert [le.request.url for le in f.next(5, queue="a.example")] == []  # (busy)
        assert f.done(held) == 1
        assert [le.request.url for le in f.next(5, queue="a.example")] == [
            "https://a.example/4"]
        # a leased request of a deleted queue whose lease ends comes back
        f.add("https://c.example/1")
        (c1,) = f.next(1, queue="c.example")
        assert f.delete_queue("c.example") == 0
        env.clock.advance(11)
        f = env.checkpoint()
        assert [le.request.url for le in f.next(5, queue="c.example")] == [c1.request.url]
        st = f.stats()  # (b.example's and a.example's leases ended too: back in line)
        assert (st.leased, st.queued) == (1, 2)

    def test_remove_queued_takes_out_what_matches(self, env: _Env) -> None:
        """``remove_queued(where, queue=K)`` removes the queued and scheduled requests
        (of K; of every queue without it) that ``where`` picks, and returns how many;
        leased ones stay leased, their URLs stay seen. An error in ``where`` removes
        nothing."""
        f = env.open(**FAST)
        t0 = env.clock()
        f.add(["https://a.example/old1", "https://a.example/new1", "https://a.example/old2",
               Request("https://b.example/old3", priority=3), "https://b.example/new3",
               "https://c.example/new2", Request("https://b.example/old4", not_before=t0 + 60),
               Request("https://d.example/new4", priority=1)])
        (leased,) = f.next(1, queue="a.example")
        assert leased.request.url == "https://a.example/old1"
        f = env.checkpoint()

        def old(r: Request) -> bool:
            return "/old" in r.url

        with pytest.raises(ZeroDivisionError):
            f.remove_queued(lambda r: 1 / 0 > 0)
        assert f.stats().queued == 7
        assert f.remove_queued(old, queue="a.example") == 1         # old2: old1 is leased
        assert f.remove_queued(lambda r: r.priority == 3) == 1      # b's old3, its head
        assert f.remove_queued(old, queue="b.example") == 1         # the scheduled old4
        assert f.remove_queued(old) == 0
        assert f.remove_queued(old, queue="nowhere.example") == 0
        with pytest.raises(ConfigError):
            f.remove_queued(old, queue="")
        f = env.checkpoint()
        s = f.stats()
        assert (s.queued, s.scheduled, s.leased) == (4, 0, 1)
        f.done(leased)
        env.clock.advance(100)
        # (b's head is its priority-0 entry now: d's priority 1 goes first)
        assert [le.request.url for le in f.next(1)] == ["https://d.example/new4"]
        assert sorted(le.request.url for le in f.next(10)) == [
            "https://a.example/new1", "https://b.example/new3", "https://c.example/new2"]
        assert f.next(10) == []
        assert f.add(["https://a.example/old2", "https://b.example/old4"]).duplicates == 2

    def test_waiting_counts_from_when_a_queue_could_go(self, env: _Env) -> None:
        """A queue whose lease expired, or whose request came due, has waited since
        then, however late the frontier notices: it goes before a queue that became
        ready after that (the stores notice at different calls)."""
        f = env.open(lease_ttl=10, **FAST)
        f.add(["https://a.example/1", "https://a.example/2",
               Request("https://c.example/1", not_before=env.clock() + 12)])
        assert [le.queue for le in f.next(1)] == ["a.example"]  # expires in 10 s
        env.clock.advance(15)
        f.add("https://b.example/1")                 # ready since 15 s
        f = env.checkpoint()
        env.clock.advance(5)
        # a since 10 s, c since 12 s, b since 15 s
        assert [le.queue for le in f.next(3)] == ["a.example", "c.example", "b.example"]

    def test_big_host_does_not_starve_others(self, env: _Env) -> None:
        f = env.open(**FAST)
        f.add([f"https://big.example/{i}" for i in range(100)])
        f.add([f"https://s{i}.example/" for i in range(5)])
        served: list[str] = []
        for _ in range(6):
            batch = f.next(10)
            served += [le.queue for le in batch]
            f.done(batch)
            env.clock.advance(1)
        assert {f"s{i}.example" for i in range(5)} <= set(served[:6])

    def test_next_is_a_round_robin_over_the_line(self, env: _Env) -> None:
        """``next(n)`` takes one request from each ready queue in line, then one more
        from each that has more, in the same order, and so on until ``n``: never fewer
        than ``n`` while some queue can still give, whatever the queues' sizes."""
        cases = [([4, 7, 1], 10), ([1, 4, 7, 2], 10), ([3, 3, 3], 7), ([5, 1, 5, 1], 9),
                 ([2, 9], 6), ([1, 1, 1, 8], 3), ([1, 6, 1, 6], 11), ([2, 2], 9)]
        for sizes, n in cases:
            f = env.open_other(**FAST, concurrency=100)
            for i, size in enumerate(sizes):  # in line by waiting time: q0 first
                f.add([f"https://q{i}.example/{j}" for j in range(size)])
                env.clock.advance(1)
            expected: Counter[str] = Counter()
            left = list(sizes)
            while sum(expected.values()) < n and any(left):
                for i in range(len(sizes)):
                    if left[i] and sum(expected.values()) < n:
                        expected[f"q{i}.example"] += 1
                        left[i] -= 1
            got = Counter(le.queue for le in f.next(n))
            assert got == expected, (sizes, n)

    def test_not_before_waits(self, env: _Env) -> None:
        f = env.open(**FAST)
        f.add([Request("https://a.example/later", not_before=env.clock() + 60),
               "https://b.example/now"])
        assert [le.queue for le in f.next(10)] == ["b.example"]
        s = f.stats()
        assert (s.queued, s.scheduled) == (1, 1)
        f = env.checkpoint()
        env.clock.advance(61)
        assert [le.request.url for le in f.next(10)] == ["https://a.example/later"]

    def test_next_ready_at_says_when_to_come_back(self, env: _Env) -> None:
        f = env.open(min_delay=10.0, max_delay=10.0, lease_ttl=100)
        t0 = env.clock()
        assert f.next_ready_at() is None                      # nothing at all
        f.add(["https://a.example/1", "https://a.example/2",
               Request("https://b.example/later", not_before=t0 + 25)])
        assert f.next_ready_at() == t0                        # a.example is ready
        (lease,) = f.next(5)
        f = env.checkpoint()
        assert f.next_ready_at() == t0 + 25                   # busy a, scheduled b
        f.done(lease)
        assert f.next_ready_at() == t0 + 10                   # a rests 10 s
        env.clock.advance(10)
        (lease,) = f.next(5)
        assert f.next_ready_at() == t0 + 25
        env.clock.advance(20)
        (b,) = f.next(5)
        assert b.request.url == "https://b.example/later"
        assert f.next_ready_at() == t0 + 110                  # only leases left: expiry
        f.done([lease, b])
        assert f.next_ready_at() is None and f.stats().finished

    # -- politeness and concurrency ------------------------------------------------------

    def test_one_lease_per_host_by_default(self, env: _Env) -> None:
        f = env.open(**FAST)
        f.add([f"https://a.example/{i}" for i in range(3)] + ["https://b.example/"])
        leases = f.next(10)
        assert sorted(le.queue for le in leases) == ["a.example", "b.example"]
        assert f.next(10) == []
        f.done(leases)
        f = env.checkpoint()
        assert [le.queue for le in f.next(10)] == ["a.example"]

    def test_concurrency_option_and_queue_override(self, env: _Env) -> None:
        f = env.open(concurrency=2, **FAST)
        f.add([f"https://a.example/{i}" for i in range(5)]
              + [f"https://b.example/{i}" for i in range(5)])
        f.configure_queue("b.example", concurrency=3)
        f = env.checkpoint()
        c = Counter(le.queue for le in f.next(100))
        assert c == {"a.example": 2, "b.example": 3}

    def test_politeness_delay_formula(self, env: _Env) -> None:
        f = env.open(min_delay=2.0, max_delay=30.0, delay_factor=5.0)
        f.add(["https://a.example/1", "https://a.example/2", "https://a.example/3",
               "https://a.example/4"])
        f.done(f.next(1), duration=1.0)            # rest 5 s
        env.clock.advance(4.9)
        f = env.checkpoint()
        assert f.next(1) == []
        env.clock.advance(0.2)
        lease = f.next(1)
        assert len(lease) == 1
        f.done(lease, duration=0.1)                 # 0.5 s -> clamped up to 2 s
        env.clock.advance(1.9)
        assert f.next(1) == []
        env.clock.advance(0.2)
        lease = f.next(1)
        f.done(lease, duration=100.0)               # 500 s -> clamped down to 30 s
        env.clock.advance(29.9)
        assert f.next(1) == []
        env.clock.advance(0.2)
        assert len(f.next(1)) == 1

    def test_one_done_call_with_a_duration_per_lease(self, env: _Env) -> None:
        f = env.open(min_delay=0.0, max_delay=30.0, delay_factor=1.0)
        f.add(["https://a.example/1", "https://a.example/2", "https://b.example/1",
               "https://b.example/2", "https://c.example/1", "https://c.example/2"])
        leases = sorted(f.next(3), key=lambda le: le.queue)
        with pytest.raises(ConfigError):
            f.done(leases, duration=[1.0])  # one per lease, or one for all
        with pytest.raises(ConfigError):
            f.done(leases, duration=[1.0, -2.0, None])
        assert f.done(iter(leases), duration=[1.0, 10.0, None]) == 3
        env.clock.advance(1.1)
        f = env.checkpoint()
        assert sorted(le.queue for le in f.next(3)) == ["a.example", "c.example"]
        env.clock.advance(9.0)
        assert [le.queue for le in f.next(3)] == ["b.example"]

    def test_queue_delay_override(self, env: _Env) -> None:
        f = env.open(min_delay=0.0, max_delay=30.0, delay_factor=0.0)
        f.configure_queue("slow.example", min_delay=10.0)
        f.add(["https://slow.example/1", "https://slow.example/2",
               "https://fast.example/1", "https://fast.example/2"])
        f.done(f.next(10))
        f = env.checkpoint()
        assert [le.queue for le in f.next(10)] == ["fast.example"]
        env.clock.advance(10)
        assert [le.queue for le in f.next(10)] == ["slow.example"]
        assert f.queues()[0].settings or f.queues()[1].settings

    def test_the_default_rest_changes_while_open(self, env: _Env) -> None:
        """``configure_default`` changes the rest of queues without their own, from
        their next answer on; a queue's own rest still wins."""
        f = env.open(**FAST)
        f.configure_queue("own.example", min_delay=2.0)
        f.add(["https://a.example/1", "https://a.example/2", "https://own.example/1",
               "https://own.example/2"])
        f.configure_default(min_delay=10.0, max_delay=10.0)
        f.done(f.next(10))
        f = env.checkpoint()                          # (the rests taken are kept)
        env.clock.advance(2.1)
        assert [le.queue for le in f.next(10)] == ["own.example"]
        env.clock.advance(8.0)
        assert [le.queue for le in f.next(10)] == ["a.example"]
        for bad in ({"concurrency": 2}, {}, {"min_delay": -1.0}, {"max_delay": None},
                    {"min_delay": 20.0, "max_delay": 5.0}):
            with pytest.raises(ConfigError):
                f.configure_default(**bad)

    def test_block_until(self, env: _Env) -> None:
        f = env.open(**FAST)
        f.add(["https://a.example/1", "https://b.example/1"])
        f.block("a.example", seconds=120)            # e.g. 429 with Retry-After: 120
        f = env.checkpoint()
        assert [le.queue for le in f.next(10)] == ["b.example"]
        env.clock.advance(121)
        assert [le.queue for le in f.next(10)] == ["a.example"]
        with pytest.raises(ConfigError):
            f.block("a.example")

    def test_queue_budget_caps_accepted_urls(self, env: _Env) -> None:
        f = env.open(max_queue_urls=3, **FAST)
        r = f.add([f"https://trap.example/{i}" for i in range(5)] + ["https://ok.example/"])
        assert r.added == 4
        assert [x.reason for x in r.rejected] == ["queue-budget", "queue-budget"]
        f = env.checkpoint()
        f.done(f.next(10))
        assert f.add("https://trap.example/again").added == 0  # "ever accept"
        assert f.stats().rejected == {"queue-budget": 3}

    def test_add_result_lines_up_with_the_batch(self, env: _Env) -> None:
        """Per request, AddResult says added or not, and each rejection names its index,
        with bad URLs, duplicates and budget rejections mixed in one batch."""
        f = env.open(max_queue_urls=2, **FAST)
        r = f.add(["https://trap.example/1", "ftp://x.example/", "https://trap.example/1",
                   "https://trap.example/2", "https://trap.example/3", "https://ok.example/",
                   "https://trap.example/4"])
        assert r.added_flags == (True, False, False, True, False, True, False)
        assert (r.added, r.duplicates) == (3, 1)
        assert [(x.index, x.reason) for x in r.rejected] == [
            (1, "bad-scheme"), (4, "queue-budget"), (6, "queue-budget")]
        r = f.add(["https://ok.example/", "https://trap.example/5", "https://b.example/"])
        assert r.added_flags == (False, False, True)
        assert (r.added, r.duplicates) == (1, 1)
        assert [(x.index, x.reason) for x in r.rejected] == [(1, "queue-budget")]

    def test_session_budget_yields_to_others(self, env: _Env) -> None:
        f = env.open(concurrency=100, session_budget=2, session_rest=30, **FAST)
        f.add([f"https://big.example/{i}" for i in range(6)])
        first = f.next(100)
        assert len(first) == 2                       # the session is over after 2
        f.done(first)
        f = env.checkpoint()
        assert f.next(100) == []                     # resting 30 s
        env.clock.advance(31)
        assert len(f.next(100)) == 2

    def test_session_budget_lowered_below_the_session(self, env: _Env) -> None:
        """A session budget set (configure_queue) below what a ready queue has leased in
        its session so far: the queue gives one more, then yields; nothing goes
        negative or missing."""
        f = env.open(concurrency=100, session_budget=10, session_rest=30, **FAST)
        f.add([f"https://big.example/{i}" for i in range(12)])
        first = f.next(4)
        assert len(first) == 4
        f.configure_queue("big.example", session_budget=2)
        f = env.checkpoint()
        second = f.next(100)
        assert len(second) == 1
        s = f.stats()
        assert (s.leased, s.queued) == (5, 7)
        assert f.queues()[0].leased == 5
        assert f.done(first + second) == 5
        assert f.next(100) == []                     # resting 30 s
        env.clock.advance(31)
        assert len(f.next(100)) == 2
        assert f.queues()[0].leased == 2

    # -- leases -----------------------------------------------------------------------------

    def test_expired_lease_returns_to_head_of_queue(self, env: _Env) -> None:
        f = env.open(lease_ttl=60, **FAST)
        f.add(["https://a.example/1", "https://a.example/2"])
        (lease,) = f.next(5)
        f = env.checkpoint()
        env.clock.advance(61)
        (again,) = f.next(5)
        assert again.request.url == lease.request.url and again.token != lease.token
        s = f.stats()
        assert (s.redelivered, s.leased, s.queued) == (1, 1, 1)
        assert f.done(lease) == 0                    # too late: a documented no-op
        assert f.stats().late_acks == 1
        assert f.done(again) == 1

    def test_requests_come_back_in_their_old_order(self, env: _Env) -> None:
        """Several leases of one queue that come back together (retried in any order in
        one call, or expired) take their old places at the head, in their old order."""
        f = env.open(lease_ttl=60, concurrency=10, **FAST)
        f.add([f"https://a.example/{i}" for i in range(8)])
        first = f.next(3)
        f.retry(first[::-1])                         # answered last-first
        again = f.next(4)
        assert [le.request.url[-1] for le in again] == ["0", "1", "2", "3"]
        f = env.checkpoint()
        env.clock.advance(61)                        # all four expire
        assert [le.request.url[-1] for le in f.next(8)] == [str(i) for i in range(8)]

    def test_leases_answered_in_part_then_expired(self, env: _Env) -> None:
        """Of one call's leases, those answered (done, retried) stay answered; only the
        others come back when the lease time is over, once each."""
        f = env.open(lease_ttl=60, concurrency=100, retry_backoff=10, **FAST)
        urls = [f"https://h{i % 3}.example/{i}" for i in range(12)]
        f.add(urls)
        leases = f.next(12)
        assert len(leases) == 12
        f.done(leases[0:4])
        f.done(leases[4], Outcome.FAILED, error="x")  # retried after 10 s
        f.done(leases[5])
        f = env.checkpoint()
        env.clock.advance(61)
        back = f.next(20)
        assert sorted(le.request.url for le in back) == sorted(
            le.request.url for le in leases[4:5] + leases[6:])
        s = f.stats()
        assert (s.done, s.redelivered, s.leased, s.queued) == (5, 6, 7, 0)
        assert f.done(leases[7]) == 0  # its lease expired: late
        assert f.done(back) == 7 and f.stats().finished

    def test_a_lease_acknowledged_twice_in_one_call_counts_once(self, env: _Env) -> None:
        f = env.open(**FAST)
        f.add(["https://a.example/1", "https://b.example/1"])
        la, lb = f.next(5)
        assert f.done([la, la, lb]) == 2
        s = f.stats()
        assert (s.done, s.late_acks, s.leased) == (2, 1, 0) and s.finished
        f.add(["https://a.example/2"])
        (lc,) = f.next(5)
        assert f.done([lc, lc], Outcome.FAILED, error="x") == 1
        s = f.stats()
        assert (s.failed, s.scheduled, s.late_acks) == (1, 1, 2)

    def test_strict_acks_raise(self, env: _Env) -> None:
        f = env.open(lease_ttl=10, strict_acks=True, **FAST)
        f.add("https://a.example/")
        (lease,) = f.next(1)
        env.clock.advance(11)
        f.next(1)
        with pytest.raises(LeaseError):
            f.done(lease)

    def test_failures_back_off_then_die(self, env: _Env) -> None:
        f = env.open(max_retries=2, retry_backoff=10, **FAST)
        f.add("https://a.example/flaky")
        f.done(f.next(1), Outcome.FAILED, error="timeout")
        assert f.next(1) == []
        env.clock.advance(10)
        f = env.checkpoint()
        (lease,) = f.next(1)
        assert lease.request.retries == 1
        f.done(lease, Outcome.FAILED, error="timeout")
        env.clock.advance(19)
        assert f.next(1) == []
        env.clock.advance(1)
        (lease,) = f.next(1)
        f.done(lease, Outcome.FAILED, error="HTTP 503")
        s = f.stats()
        assert (s.failed, s.dead, s.queued, s.leased) == (3, 1, 0, 0)
        f = env.checkpoint()
        (dead,) = f.dead()
        assert dead.error == "HTTP 503" and dead.request.url == "https://a.example/flaky"
        assert f.requeue_dead() == 1
        (lease,) = f.next(1)
        assert lease.request.retries == 0 and f.stats().dead == 0

    def test_a_renewed_lease_outlives_its_first_ttl(self, env: _Env) -> None:
        """renew() extends a lease still held (a page still being worked on); one not
        renewed expires as before; a lease expired or answered cannot be renewed."""
        f = env.open(lease_ttl=10, **FAST)
        f.add(["https://a.example/1", "https://b.example/1", "https://c.example/1"])
        (la,) = f.next(1)  # (separate next() calls: SQLite renews per call)
        (lb,) = f.next(1)
        env.clock.advance(8)
        (renewed,) = f.renew([la])
        assert (renewed.token, renewed.expires_at) == (la.token, env.clock() + 10)
        env.clock.advance(4)  # 12 s: lb has expired, la holds until 18 s
        f = env.checkpoint()
        got = {le.request.url: le for le in f.next(1) + f.next(1)}  # (two calls again)
        assert set(got) == {"https://b.example/1", "https://c.example/1"}
        assert f.next(5) == []  # a is still leased
        assert f.renew([lb]) == []  # expired: it went to someone else
        assert f.done(la) == 1 and f.stats().late_acks == 0
        assert f.renew([la]) == []  # answered
        lc = got["https://c.example/1"]
        f.renew(lc, ttl=100)
        env.clock.advance(50)
        f = env.checkpoint()
        (again,) = f.next(5)  # b, not answered, came back; c is renewed
        assert again.request.url == "https://b.example/1"
        f.done(again)
        env.clock.advance(60)  # past the renewal: c comes back
        assert [le.request.url for le in f.next(5)] == ["https://c.example/1"]
        assert f.stats().redelivered == 3

    def test_a_lease_that_keeps_expiring_dies(self, env: _Env) -> None:
        """A request whose lease expires unanswered more than ``max_redeliveries`` times
        (a page that crashes or stalls every fetcher it reaches) is kept as dead with the
        reason, instead of being handed out for ever. Answers in between (a retry) do not
        reset its count; a request answered done leaves nothing behind."""
        f = env.open(lease_ttl=10, max_redeliveries=2, max_retries=5, **FAST)
        f.add(["https://a.example/poison", "https://b.example/slow"])
        for round_ in range(3):
            got = {le.request.url: le for le in f.next(5)}
            assert set(got) == {"https://a.example/poison", "https://b.example/slow"}, round_
            if round_ == 1:
                f.retry(got["https://b.example/slow"])  # answered once, then expires again
            env.clock.advance(11)
            f = env.checkpoint()
        # a: three expiries, dies; b: two expiries and a retry: it is served again
        (lb,) = f.next(5)
        assert lb.request.url == "https://b.example/slow" and lb.request.retries == 0
        s = f.stats()
        assert (s.redelivered, s.dead, s.failed, s.leased, s.queued) == (4, 1, 1, 1, 0)
        (dead,) = f.dead()
        assert dead.request.url == "https://a.example/poison"
        assert dead.error == "lease expired unanswered 3 times (max_redeliveries 2)"
        f.done(lb)
        assert f.requeue_dead() == 1
        f = env.checkpoint()
        for _ in range(2):
            (la,) = f.next(5)
            env.clock.advance(11)
        (la,) = f.next(5)  # a third lease: requeued, its count began afresh
        f.done(la)
        s = f.stats()
        assert (s.done, s.dead, s.queued, s.leased, s.redelivered) == (2, 0, 0, 0, 6)
        with pytest.raises(ConfigError):
            env.open_other(max_redeliveries=-1)

    def test_named_values_are_kept_until_they_expire(self, env: _Env) -> None:
        """put_value/get_value: bytes under a name, for every process of the crawl, until
        their time to live ends; a value put again replaces the old one."""
        f = env.open(**FAST)
        f.put_value("robots:https://a.example", b"User-agent: *\nDisallow: /x", ttl=100)
        f.put_value("note", b"\x00\xffbinary", ttl=None)
        f.put_value("short", b"1", ttl=10)
        f = env.checkpoint()
        assert f.get_value("robots:https://a.example") == b"User-agent: *\nDisallow: /x"
        assert f.get_value("note") == b"\x00\xffbinary"
        assert f.get_value("never") is None
        env.clock.advance(50)
        assert f.get_value("short") is None
        f.put_value("robots:https://a.example", b"", ttl=100)
        env.clock.advance(60)  # the first robots value would have expired by now
        f = env.checkpoint()
        assert f.get_value("robots:https://a.example") == b""
        env.clock.advance(10**6)
        assert f.get_value("robots:https://a.example") is None
        assert f.get_value("note") == b"\x00\xffbinary"
        for bad in ((1, b"x"), ("n", "text"), ("n", b"x", -1.0), ("", b"x")):
            with pytest.raises(ConfigError):
                f.put_value(*bad)
        assert f.stats().queued == 0  # values are not requests

    def test_named_values_can_be_dropped(self, env: _Env) -> None:
        """drop_value forgets a value before its time is up, for every process; a name
        dropped may be kept again; a value put again after its old time is up is the
        new one (a store dropping values whose time is up never drops a newer one)."""
        f = env.open(**FAST)
        f.put_value("lease:a", b"1", ttl=10)
        f.put_value("lease:b", b"2", ttl=10)
        f.put_value("kept", b"3", ttl=None)
        f.drop_value("lease:a")
        f.drop_value("never-kept")
        f = env.checkpoint()
        assert [f.get_value(n) for n in ("lease:a", "lease:b", "kept")] == [None, b"2", b"3"]
        f.put_value("lease:a", b"again", ttl=100)
        assert f.get_value("lease:a") == b"again"
        env.clock.advance(20)  # lease:b's time is up; a call that wakes queues drops it
        f.put_value("lease:b", b"new", ttl=100)
        assert f.next(1) == [] and f.stats().queued == 0
        f = env.checkpoint()
        assert [f.get_value(n) for n in ("lease:a", "lease:b", "kept")] == [
            b"again", b"new", b"3"]
        f.drop_value("kept")
        assert f.get_value("kept") is None
        with pytest.raises(ConfigError):
            f.drop_value(1)  # type: ignore[arg-type]

    def test_a_request_given_up_dies_at_once(self, env: _Env) -> None:
        f = env.open(max_retries=5, **FAST)
        f.add(["https://a.example/private", "https://b.example/ok"])
        leases = {le.request.url: le for le in f.next(2)}
        assert f.done(leases["https://a.example/private"], Outcome.DEAD,
                      error="private-address") == 1
        f.done(leases["https://b.example/ok"])
        s = f.stats()
        assert (s.failed, s.dead, s.done, s.queued, s.leased) == (1, 1, 1, 0, 0)
        f = env.checkpoint()
        assert f.next_ready_at() is None  # nothing comes back: the crawl is over
        (dead,) = f.dead()
        assert (dead.error, dead.request.url) == ("private-address",
                                                  "https://a.example/private")
        assert f.requeue_dead([dead.id]) == 1
        (lease,) = f.next(1)
        assert lease.request.url == "https://a.example/private" and f.stats().dead == 0

    def test_retry_later_counts_no_failure(self, env: _Env) -> None:
        f = env.open(**FAST)
        f.add("https://a.example/")
        f.retry(f.next(1), after=30)
        f = env.checkpoint()
        assert f.next(1) == []
        env.clock.advance(30)
        (lease,) = f.next(1)
        assert lease.request.retries == 0
        s = f.stats()
        assert (s.failed, s.retried) == (0, 1)

    def test_request_round_trips_through_the_store(self, env: _Env) -> None:
        f = env.open(**FAST)
        req = Request("https://ü.example/päth?q=ß", method="POST", body=bytes(range(256)),
                      priority=3, depth=4, referrer="https://r.example/",
                      meta={"k": ["v", 1, None, {"x": 1.5}], "ü": True}, revisit_after=99.0)
        f.add(req)
        f = env.checkpoint()
        (lease,) = f.next(1)
        assert lease.request == req
        assert lease.queue == "xn--tda.example"

    def test_a_transaction_block_is_one_step_where_the_store_has_them(
            self, env: _Env) -> None:
        """Calls inside ``with f.transaction():`` do what they do outside it. On a store
        with transactions they are one step: an exception leaving the block undoes them
        all, and a call that fails inside it dooms the block even if caught; on a store
        without, each call took effect on its own."""
        f = env.open(**FAST)
        f.add(["https://a.example/1", "https://b.example/1"])
        with f.transaction():
            (a,) = f.next(1, queue="a.example")
            assert f.add(["https://a.example/2", "https://a.example/1"]).added == 1
            assert f.done(a) == 1
            with f.transaction():  # (nested: part of the outer block)
                (b,) = f.next(1, queue="b.example")
        f = env.checkpoint()
        s = f.stats()
        assert (s.done, s.leased, s.queued, s.seen) == (1, 1, 1, 3)
        atomic = hasattr(f.store, "transaction")
        with pytest.raises(ZeroDivisionError), f.transaction():
            f.add(["https://c.example/1"])
            f.done(b)
            assert f.stats().done == 2  # (inside the block, its calls are seen)
            raise ZeroDivisionError
        s = f.stats()
        if not atomic:
            assert (s.done, s.leased, s.queued, s.seen) == (2, 0, 2, 4)
            return
        assert (s.done, s.leased, s.queued, s.seen) == (1, 1, 1, 3)
        f = env.checkpoint()
        assert f.done(b) == 1  # (still held: its answer was undone)
        if hasattr(f.store, "remove_queued"):
            with pytest.raises(StoreError), f.transaction():
                f.add(["https://d.example/1"])
                with pytest.raises(ZeroDivisionError):
                    f.remove_queued(lambda r: 1 / 0 > 0)
                with pytest.raises(StoreError):
                    f.next(1)
        assert f.add(["https://c.example/1", "https://d.example/1"]).added == 2
        assert [le.request.url for le in f.next(5)] == [
            "https://a.example/2", "https://c.example/1", "https://d.example/1"]

    # -- stats, accounting, dump ---------------------------------------------------------

    def test_stats_and_queue_listing(self, env: _Env) -> None:
        f = env.open(**FAST)
        f.add([f"https://a.example/{i}" for i in range(3)] + ["https://b.example/"])
        f.next(10)
        f = env.checkpoint()
        s = f.stats(per_queue=10)
        assert (s.seen, s.queued, s.leased, s.queues_total) == (4, 2, 2, 2)
        assert (s.queues_ready, s.queues_resting, s.queues_exhausted) == (0, 1, 1)
        a = next(q for q in s.per_queue if q.key == "a.example")
        assert (a.queued, a.leased, a.accepted, a.state) == (2, 1, 3, "busy")
        assert not s.finished
        assert s.as_dict()["per_queue"][0]["key"] == "a.example"

    def test_everything_accepted_is_accounted_for(self, env: _Env) -> None:
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

    def test_dump_and_load_round_trip(self, env: _Env) -> None:
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

    def test_a_dump_loads_once_and_whole(self, env: _Env) -> None:
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

    def test_bloom_seen_set(self, env: _Env) -> None:
        f = env.open(bloom_capacity=10_000, bloom_error_rate=0.001, concurrency=100, **FAST)
        urls = [f"https://a.example/{i}" for i in range(2000)]
        assert f.add(urls).added >= 1990
        f = env.checkpoint()
        assert f.add(urls[:1000]).added == 0          # a Bloom filter has no false negatives

    def test_threads_never_share_a_lease(self, env: _Env) -> None:
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


class MemoryOnlyContract(FrontierContract):
    """The contract for stores that keep nothing across a reopen, by design."""

    @pytest.fixture(params=["live"])
    def reopen_mode(self, request: pytest.FixtureRequest) -> str:
        return str(request.param)


class _Env:
    """One test's frontier, its clock, and its close/reopen checkpoints."""

    def __init__(self, contract: FrontierContract, path: Path, reopen: bool) -> None:
        self.contract = contract
        self.path = path
        self.reopen = reopen
        self.clock = Clock()
        self.frontier: Frontier | None = None
        self.options: dict[str, Any] = {}
        self.others: list[Frontier] = []

    def open(self, **options: Any) -> Frontier:
        self.options = options
        self.frontier = self.contract.open_frontier(self.clock, self.path / "main", **options)
        return self.frontier

    def open_other(self, **options: Any) -> Frontier:
        """A second, independent frontier (another store)."""
        n = len(self.others)
        g = self.contract.open_frontier(self.clock, self.path / f"other{n}", **options)
        self.others.append(g)
        return g

    def checkpoint(self) -> Frontier:
        """Close and reopen the store when testing durability; else the same frontier."""
        assert self.frontier is not None
        if self.reopen:
            self.frontier.close()
            self.frontier = self.contract.open_frontier(self.clock, self.path / "main",
                                                        **self.options)
        return self.frontier

    def close(self) -> None:
        for g in [self.frontier, *self.others]:
            if g is not None:
                g.close()
