"""Part of the store contract (:class:`crawlq.testing.FrontierContract`). Politeness:
one lease per host, concurrency, the delay formula and its overrides, blocks,
budgets, sessions."""

from __future__ import annotations

from collections import Counter

import pytest

from ..errors import ConfigError
from .env import FAST, Env


class PolitenessContract:
    """Politeness (part of :class:`crawlq.testing.FrontierContract`)."""

    def test_one_lease_per_host_by_default(self, env: Env) -> None:
        f = env.open(**FAST)
        f.add([f"https://a.example/{i}" for i in range(3)] + ["https://b.example/"])
        leases = f.next(10)
        assert sorted(le.queue for le in leases) == ["a.example", "b.example"]
        assert f.next(10) == []
        f.done(leases)
        f = env.checkpoint()
        assert [le.queue for le in f.next(10)] == ["a.example"]

    def test_concurrency_option_and_queue_override(self, env: Env) -> None:
        f = env.open(concurrency=2, **FAST)
        f.add([f"https://a.example/{i}" for i in range(5)]
              + [f"https://b.example/{i}" for i in range(5)])
        f.configure_queue("b.example", concurrency=3)
        f = env.checkpoint()
        c = Counter(le.queue for le in f.next(100))
        assert c == {"a.example": 2, "b.example": 3}

    def test_politeness_delay_formula(self, env: Env) -> None:
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

    def test_each_answer_rests_its_queue_from_its_own_time(self, env: Env) -> None:
        """A queue rests from the time of the answer that ended its lease, whatever calls
        follow and whenever the store writes it (the SQLite store holds small answers
        for the next call: they still count from their own time)."""
        f = env.open(min_delay=0.0, max_delay=30.0, delay_factor=5.0)
        f.add(["https://a.example/1", "https://a.example/2", "https://b.example/1",
               "https://b.example/2"])
        a, b = sorted(f.next(2), key=lambda le: le.queue)
        f.done(a, duration=0.5)  # a rests 2.5 s from now
        env.clock.advance(2.0)
        f.done(b, duration=0.2)  # b rests 1 s from now
        env.clock.advance(0.4)
        assert f.next(2) == []
        assert f.next_ready_at() == env.clock() + 0.1
        env.clock.advance(0.1)
        assert [le.queue for le in f.next(2)] == ["a.example"]
        env.clock.advance(0.5)
        assert [le.queue for le in f.next(2)] == ["b.example"]

    def test_one_done_call_with_a_duration_per_lease(self, env: Env) -> None:
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

    def test_queue_delay_override(self, env: Env) -> None:
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

    def test_a_queue_setting_that_contradicts_its_others_changes_nothing(
            self, env: Env) -> None:
        """``min_delay`` above the queue's own ``max_delay`` is refused (ConfigError) on
        every store, before anything is kept: the queue's settings, listings, dumps and
        leases are as before."""
        f = env.open(**FAST)
        f.add(["https://a.example/1"])
        f.configure_queue("a.example", max_delay=2.0)
        with pytest.raises(ConfigError):
            f.configure_queue("a.example", min_delay=40.0)
        f = env.checkpoint()
        [q] = f.queues()
        assert dict(q.settings) == {"max_delay": 2.0}
        assert any(r.get("queue") == "a.example" for r in f.dump())
        assert [le.queue for le in f.next(10)] == ["a.example"]

    def test_the_default_rest_changes_while_open(self, env: Env) -> None:
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

    def test_block_until(self, env: Env) -> None:
        f = env.open(**FAST)
        f.add(["https://a.example/1", "https://b.example/1"])
        f.block("a.example", seconds=120)            # e.g. 429 with Retry-After: 120
        f = env.checkpoint()
        assert [le.queue for le in f.next(10)] == ["b.example"]
        env.clock.advance(121)
        assert [le.queue for le in f.next(10)] == ["a.example"]
        with pytest.raises(ConfigError):
            f.block("a.example")

    def test_unblock_ends_a_rest_early(self, env: Env) -> None:
        """``unblock(K)`` ends K's rest now, a block or a politeness rest: K is served
        at once, joining the ready line as a queue whose rest ended now. A block never
        shortens a rest; an unknown queue, or one not resting, is left as it is."""
        f = env.open(min_delay=30.0, max_delay=30.0, delay_factor=0.0)
        f.add(["https://a.example/1", "https://a.example/2", "https://b.example/1",
               "https://c.example/1"])
        f.block("a.example", seconds=600)
        f.block("a.example", seconds=60)  # (never shortens it)
        f = env.checkpoint()
        assert sorted(le.queue for le in f.next(10)) == ["b.example", "c.example"]
        env.clock.advance(100)
        assert f.next(10) == []
        f.unblock("a.example")
        f.unblock("nowhere.example")
        f = env.checkpoint()
        (a1,) = f.next(10)
        assert a1.request.url == "https://a.example/1"
        f.done(a1)  # (a politeness rest of 30 s)
        assert f.next(10) == []
        f.unblock("a.example")
        f.unblock("a.example")  # (not resting: nothing)
        assert [le.request.url for le in f.next(10)] == ["https://a.example/2"]
        assert f.next(10) == []

    def test_queue_budget_caps_accepted_urls(self, env: Env) -> None:
        f = env.open(max_queue_urls=3, **FAST)
        r = f.add([f"https://trap.example/{i}" for i in range(5)] + ["https://ok.example/"])
        assert r.added == 4
        assert [x.reason for x in r.rejected] == ["queue-budget", "queue-budget"]
        f = env.checkpoint()
        f.done(f.next(10))
        assert f.add("https://trap.example/again").added == 0  # "ever accept"
        assert f.stats().rejected == {"queue-budget": 3}

    def test_add_result_lines_up_with_the_batch(self, env: Env) -> None:
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

    def test_session_budget_yields_to_others(self, env: Env) -> None:
        f = env.open(concurrency=100, session_budget=2, session_rest=30, **FAST)
        f.add([f"https://big.example/{i}" for i in range(6)])
        first = f.next(100)
        assert len(first) == 2                       # the session is over after 2
        f.done(first)
        f = env.checkpoint()
        assert f.next(100) == []                     # resting 30 s
        env.clock.advance(31)
        assert len(f.next(100)) == 2

    def test_a_session_without_rest_goes_to_the_back_of_the_line(self, env: Env) -> None:
        """A queue whose session ends without a rest yields to the others but is ready
        again at once: one call takes from it again after them, so ``next(n)`` gives
        ``n`` while some queue could give one now."""
        f = env.open(concurrency=100, session_budget=1, session_rest=0, **FAST)
        f.add([f"https://a.example/{i}" for i in range(5)])
        assert [le.request.url[-1] for le in f.next(4)] == ["0", "1", "2", "3"]
        f.add([f"https://b.example/{i}" for i in range(3)])
        assert [le.queue[0] for le in f.next(4)] == ["a", "b", "b", "b"]
        assert f.next(4) == []

    def test_session_budget_lowered_below_the_session(self, env: Env) -> None:
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
