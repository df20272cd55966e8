"""Part of the store contract (:class:`crawlq.testing.FrontierContract`). Order:
priorities, FIFO and LIFO, the line of ready queues, one queue, deleting and
removing, not_before, next_ready_at."""

from __future__ import annotations

from collections import Counter

import pytest

from ..errors import ConfigError
from ..models import Outcome, Request
from .env import FAST, Env


class OrderingContract:
    """Order (part of :class:`crawlq.testing.FrontierContract`)."""

    def test_priority_then_fifo_within_a_queue(self, env: Env) -> None:
        f = env.open(concurrency=10, **FAST)
        f.add([Request(f"https://a.example/{i}", priority=p)
               for i, p in enumerate([0, 5, 0, 5, -3, 9])])
        f = env.checkpoint()
        got = [le.request.url.rsplit("/", 1)[1] for le in f.next(10)]
        assert got == ["5", "1", "3", "0", "2", "4"]

    def test_lifo_option(self, env: Env) -> None:
        f = env.open(concurrency=10, lifo=True, **FAST)
        f.add([f"https://a.example/{i}" for i in range(4)])
        f = env.checkpoint()
        assert [le.request.url[-1] for le in f.next(10)] == ["3", "2", "1", "0"]

    def test_high_priority_on_any_host_goes_first(self, env: Env) -> None:
        f = env.open(**FAST)
        f.add([f"https://big.example/{i}" for i in range(50)])
        f.add(Request("https://small.example/urgent", priority=7))
        first = f.next(1)
        assert first[0].request.url == "https://small.example/urgent"

    def test_ready_queues_served_by_waiting_time(self, env: Env) -> None:
        f = env.open(**FAST)
        f.add("https://old.example/")
        env.clock.advance(5)
        f.add("https://new.example/")
        env.clock.advance(5)
        f = env.checkpoint()
        assert [le.queue for le in f.next(2)] == ["old.example", "new.example"]

    def test_a_lease_lasts_the_ttl_its_call_asked_for(self, env: Env) -> None:
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

    def test_next_can_take_from_one_queue(self, env: Env) -> None:
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

    def test_delete_queue_drops_what_it_holds(self, env: Env) -> None:
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

    def test_a_deleted_queue_with_nothing_left_is_forgotten(self, env: Env) -> None:
        """A queue that ``delete_queue`` leaves with no lease out and no dead request is
        gone: not in ``queues()`` nor counted by ``stats()``, its settings and counts
        forgotten (a URL added for it later starts a new queue). One with a lease out,
        or a dead request, stays."""
        f = env.open(lease_ttl=10, **FAST)
        f.add(["https://a.example/1", Request("https://a.example/2",
                                               not_before=env.clock() + 50),
               "https://b.example/1", "https://c.example/1", "https://d.example/1"])
        f.configure_queue("a.example", max_queue_urls=2)
        (held,) = f.next(1, queue="b.example")
        (dying,) = f.next(1, queue="c.example")
        f.done(dying, Outcome.DEAD, error="gone")
        f = env.checkpoint()
        assert f.stats().queues_total == 4
        assert f.delete_queue("a.example") == 2
        assert f.delete_queue("b.example") == 0
        assert f.delete_queue("c.example") == 0
        f = env.checkpoint()
        assert sorted(q.key for q in f.queues()) == ["b.example", "c.example", "d.example"]
        assert f.stats().queues_total == 3
        # its cap went with it: a new a.example takes what the old one would have refused
        assert f.add(["https://a.example/3", "https://a.example/4",
                      "https://a.example/5"]).added == 3
        (q,) = [q for q in f.queues() if q.key == "a.example"]
        assert (q.queued, q.accepted, q.settings) == (3, 3, {})
        assert f.done(held) == 1  # (b.example stayed: its lease is answered as usual)
        f = env.checkpoint()
        assert f.delete_queue("b.example") == 0
        assert sorted(q.key for q in f.queues()) == ["a.example", "c.example", "d.example"]

    def test_remove_queued_takes_out_what_matches(self, env: Env) -> None:
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


    def test_remove_queued_takes_a_request_that_came_due(self, env: Env) -> None:
        """A request scheduled for a time that has passed is queued by then, whether or
        not a call noticed: ``remove_queued`` finds and removes it."""
        f = env.open(**FAST)
        f.add(Request("https://a.example/later", not_before=env.clock() + 5))
        env.clock.advance(10)
        assert f.remove_queued(lambda r: True, queue="a.example") == 1
        s = f.stats()
        assert (s.queued, s.scheduled) == (0, 0) and f.next(1) == []

    @pytest.mark.parametrize("call", ["delete_queue", "remove_queued", "unblock"])
    def test_a_call_on_a_missing_queue_keeps_what_came_due(self, env: Env,
                                                            call: str) -> None:
        """``delete_queue``, ``remove_queued`` or ``unblock`` of a queue that does not
        exist changes nothing, even as the first call to notice what came due elsewhere:
        a failed request whose backoff ended is queued, counted and leased (a request is
        never lost), a queue whose rest ended takes a better request at its new priority,
        and each queue's concurrency still holds."""
        f = env.open(lease_ttl=100, retry_backoff=1.0, min_delay=0.5, max_delay=3.0,
                     delay_factor=1.0)
        f.add([Request("https://a.example/1", priority=3),
               Request("https://a.example/2", priority=-3),
               Request("https://b.example/1", priority=-2), "https://c.example/1"])
        got = {le.queue: le for le in f.next(5)}
        assert sorted(got) == ["a.example", "b.example", "c.example"]
        f.done(got["a.example"])                                # a rests 0.5 s
        f.done(got["c.example"], Outcome.FAILED, error="boom")  # c/1 due again in 1 s
        f = env.checkpoint()
        env.clock.advance(2)
        if call == "delete_queue":
            assert f.delete_queue("nowhere.example") == 0
        elif call == "remove_queued":
            assert f.remove_queued(lambda r: True, queue="nowhere.example") == 0
        else:
            f.unblock("nowhere.example")
        s = f.stats()
        assert (s.queued, s.leased, s.queues_ready, s.finished) == (2, 1, 2, False)
        f = env.checkpoint()
        f.add(Request("https://a.example/3", priority=1))
        assert [(le.request.url, le.request.retries) for le in f.next(5)] == [
            ("https://a.example/3", 0), ("https://c.example/1", 1)]
        assert f.next(5) == []  # (each queue's one lease is out)
        s = f.stats()
        assert (s.queued, s.leased, s.queues_ready, s.queues_busy) == (1, 3, 0, 1)
    def test_waiting_counts_from_when_a_queue_could_go(self, env: Env) -> None:
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

    def test_big_host_does_not_starve_others(self, env: Env) -> None:
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

    def test_next_is_a_round_robin_over_the_line(self, env: Env) -> None:
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

    def test_not_before_waits(self, env: Env) -> None:
        f = env.open(**FAST)
        f.add([Request("https://a.example/later", not_before=env.clock() + 60),
               "https://b.example/now"])
        assert [le.queue for le in f.next(10)] == ["b.example"]
        s = f.stats()
        assert (s.queued, s.scheduled) == (1, 1)
        f = env.checkpoint()
        env.clock.advance(61)
        assert [le.request.url for le in f.next(10)] == ["https://a.example/later"]

    def test_next_ready_at_says_when_to_come_back(self, env: Env) -> None:
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

