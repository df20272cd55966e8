"""Part of the store contract (:class:`crawlq.testing.FrontierContract`). Domains: the
hosts of one registered domain bounded as one site (leases in flight, URLs accepted,
queues), while the queue, and so politeness, stays per host."""

from __future__ import annotations

from collections import Counter

import pytest

from ..errors import ConfigError
from ..models import Request
from ..stores.rules import DOMAIN_WAIT
from .env import FAST, Env


def _trap(n: int, start: int = 0) -> list[str]:
    """One URL on each of ``n`` host names of one registered domain."""
    return [f"https://h{i}.trap.example/" for i in range(start, start + n)]


class DomainContract:
    """Domains (part of :class:`crawlq.testing.FrontierContract`)."""

    def test_a_domain_of_many_hosts_takes_only_its_share_of_leases(self, env: Env) -> None:
        f = env.open(domain_concurrency=2, **FAST)
        f.add([*_trap(6), "https://a.example/", "https://trap.example:8080/"])
        f = env.checkpoint()
        leases = f.next(100)
        by_domain = Counter(le.queue.split(".", 1)[-1] for le in leases)
        # (the port makes another site: trap.example:8080 is not trap.example's)
        assert by_domain == {"trap.example": 2, "example": 1, "example:8080": 1}
        assert f.next(100) == []  # the domain's other hosts are parked, not served
        trap = [le for le in leases if le.queue.endswith(".trap.example")]
        f.done(trap[0])
        f = env.checkpoint()
        again = f.next(100)  # a lease of the domain ended: one parked host is ready
        assert [le.queue for le in again] == ["h2.trap.example"]
        assert f.next(100) == []
        env.clock.advance(DOMAIN_WAIT)  # (the others rest that long at most: parked again)
        assert f.next(100) == []
        f.done(again)
        assert [le.queue for le in f.next(100)] == ["h3.trap.example"]

    def test_a_full_domain_does_not_hold_up_the_line(self, env: Env) -> None:
        """Hosts of a full domain ahead in the ready line are passed over: the next
        site's queue is served in the same call."""
        f = env.open(domain_concurrency=1, **FAST)
        f.add(_trap(5))
        env.clock.advance(1)
        f.add("https://a.example/")
        f = env.checkpoint()
        assert [le.queue for le in f.next(1)] == ["h0.trap.example"]
        assert [le.queue for le in f.next(1)] == ["a.example"]
        assert f.next(1) == []

    def test_expired_leases_give_their_domain_room_back(self, env: Env) -> None:
        f = env.open(domain_concurrency=2, **FAST)
        f.add(_trap(4))
        assert len(f.next(10, ttl=2)) == 2
        env.clock.advance(3)  # expired: back in their queues, the room with them, and
        f = env.checkpoint()  # the parked hosts ready again
        assert sorted(le.queue for le in f.next(10)) == [
            "h0.trap.example", "h1.trap.example"]

    def test_a_domain_accepts_so_many_hosts_and_urls(self, env: Env) -> None:
        f = env.open(max_domain_queues=3, max_domain_urls=5, **FAST)
        r = f.add([*_trap(4), "https://other.example/"])
        assert r.added_flags == (True, True, True, False, True)
        assert [(x.index, x.reason) for x in r.rejected] == [(3, "domain-queues")]
        f = env.checkpoint()
        r = f.add([f"https://h0.trap.example/{i}" for i in range(3)])
        assert r.added_flags == (True, True, False)
        assert [x.reason for x in r.rejected] == ["domain-budget"]
        f.done(f.next(100))
        f = env.checkpoint()
        assert f.add("https://h1.trap.example/again").added == 0  # "ever accept"
        assert f.add("https://trap.example:8080/").added == 1  # another site
        assert f.stats().rejected == {"domain-queues": 1, "domain-budget": 2}

    def test_a_named_host_is_a_queue_past_max_domain_queues(self, env: Env) -> None:
        """``max_domain_queues`` bounds the queues ``add`` makes (a trap's host names), not
        those a caller names: ``block`` and ``configure_queue`` of a host of a full domain
        make its queue (blocking a trap's host must work), which takes its requests and
        counts as one of the domain's, so that the next new host is refused all the
        same (docs/concepts.md, domains)."""
        f = env.open(max_domain_queues=1, **FAST)
        r = f.add(["https://h0.trap.example/1", "https://h1.trap.example/1"])
        assert [x.reason for x in r.rejected] == ["domain-queues"]
        f.configure_queue("h1.trap.example", concurrency=2)
        f.block("h2.trap.example", seconds=5)
        f = env.checkpoint()
        assert sorted(q.key for q in f.queues()) == [
            "h0.trap.example", "h1.trap.example", "h2.trap.example"]
        r = f.add(["https://h1.trap.example/2", "https://h2.trap.example/2",
                   "https://h3.trap.example/1"])
        assert r.added_flags == (True, True, False)
        assert [x.reason for x in r.rejected] == ["domain-queues"]

    def test_domain_settings_are_the_stores_not_a_queues(self, env: Env) -> None:
        f = env.open(**FAST)
        for name in ("domain_concurrency", "max_domain_urls", "max_domain_queues"):
            with pytest.raises(ConfigError, match="every domain"):
                f.configure_queue("a.example", **{name: 1})
        with pytest.raises(ConfigError, match="domain_concurrency"):
            env.open(domain_concurrency=-1)

    def test_a_domains_hosts_share_its_room_in_one_call(self, env: Env) -> None:
        """Hosts with room for several leases each take no more than their domain's
        together, each of them one at least."""
        f = env.open(domain_concurrency=3, concurrency=2, **FAST)
        f.add([f"https://h{h}.trap.example/{i}" for h in range(2) for i in range(3)])
        f = env.checkpoint()
        assert Counter(le.queue for le in f.next(100)) == {
            "h0.trap.example": 2, "h1.trap.example": 1}

    def test_a_host_with_fewer_requests_leaves_its_domains_room_to_the_others(
            self, env: Env) -> None:
        """A host's share of its domain's room is at most what it has queued: with room
        for three, a host of one request and one of two give all three in one call
        (next(n) never returns fewer than it could now)."""
        f = env.open(domain_concurrency=3, concurrency=2, **FAST)
        f.add([Request("https://x.trap.example/1", priority=1), "https://y.trap.example/1",
               "https://y.trap.example/2"])
        f = env.checkpoint()
        assert Counter(le.queue for le in f.next(10)) == {
            "x.trap.example": 1, "y.trap.example": 2}
        assert f.next(10) == []

    def test_a_parked_host_keeps_its_own_politeness_rest_and_blocks(self, env: Env) -> None:
        """A host parked while it has a lease of its own out (its concurrency lets it
        have two) rests, when that lease ends, as politeness says, whatever lease of its
        domain ends next; and a block on a parked host holds as given."""
        f = env.open(domain_concurrency=2, concurrency=2, min_delay=1.0, max_delay=1.0,
                     delay_factor=0.0)
        f.add([f"https://{h}.ex.com/{i}" for h in ("a", "b", "c") for i in range(3)])
        first = f.next(2)
        assert sorted(le.queue for le in first) == ["a.ex.com", "b.ex.com"]
        env.clock.advance(0.1)
        assert f.next(3) == []  # (the domain is full: a, b and c are parked)
        f.block("c.ex.com", seconds=3.0)
        env.clock.advance(0.4)
        f.done([le for le in first if le.queue == "a.ex.com"])  # a rests 1 s from now
        f = env.checkpoint()
        second = f.next(3)  # (a lease of the domain ended: b, parked, is ready again)
        assert [le.queue for le in second] == ["b.ex.com"]
        f.done([le for le in [*first, *second] if le.queue == "b.ex.com"])
        assert f.next(3) == []  # (a and b rest 1 s, c is blocked for 3 s)
        env.clock.advance(1.0)
        assert sorted(le.queue for le in f.next(3)) == ["a.ex.com", "b.ex.com"]
