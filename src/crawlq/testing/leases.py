"""Part of the store contract (:class:`crawlq.testing.FrontierContract`). Leases:
expiry and redelivery, partial answers, strict acks, failures and backoff, renewal,
named values, transactions."""

from __future__ import annotations

import threading

import pytest

from ..errors import ConfigError, LeaseError, StoreError
from ..models import Outcome, Request
from ..stores.base import Transactions
from .env import FAST, Env


class LeaseContract:
    """Leases (part of :class:`crawlq.testing.FrontierContract`)."""

    def test_expired_lease_returns_to_head_of_queue(self, env: Env) -> None:
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

    def test_requests_come_back_in_their_old_order(self, env: Env) -> None:
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

    def test_leases_answered_in_part_then_expired(self, env: Env) -> None:
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

    def test_a_lease_acknowledged_twice_in_one_call_counts_once(self, env: Env) -> None:
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

    def test_an_answer_after_the_lease_expired_is_late(self, env: Env) -> None:
        """An answer that comes after its lease expired changes nothing, even when no call
        in between noticed the expiry: the request is handed out again."""
        f = env.open(lease_ttl=10, **FAST)
        f.add(["https://a.example/1"])
        (lease,) = f.next(1)
        env.clock.advance(10.5)
        assert f.done(lease) == 0
        s = f.stats()
        assert (s.late_acks, s.done, s.redelivered, s.queued) == (1, 0, 1, 1)
        (again,) = f.next(1)
        assert again.request.url == lease.request.url
        assert f.done(again) == 1

    def test_strict_acks_raise(self, env: Env) -> None:
        f = env.open(lease_ttl=10, strict_acks=True, **FAST)
        f.add("https://a.example/")
        (lease,) = f.next(1)
        env.clock.advance(11)
        f.next(1)
        with pytest.raises(LeaseError):
            f.done(lease)

    def test_failures_back_off_then_die(self, env: Env) -> None:
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

    def test_a_renewed_lease_outlives_its_first_ttl(self, env: Env) -> None:
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

    def test_a_renewed_lease_expires_at_its_own_time_in_a_long_wait(
            self, env: Env) -> None:
        """Renewed leases and a lease of a later call, all expired by the next look:
        each comes back at its own expiry, the renewed ones last (so ahead in their
        queue), not at the expiry of the call that gave them."""
        f = env.open(lease_ttl=10, concurrency=3, **FAST)
        f.add([f"https://a.example/{i}" for i in range(1, 5)])
        renewed = f.next(2)  # (a/1 and a/2, until 10 s; a/4 waits behind)
        env.clock.advance(1)
        f.next(1)  # (a/3, until 11 s)
        f.renew(renewed, ttl=19)  # (until 20 s; the whole call: SQLite renews per call)
        env.clock.advance(40)
        f = env.checkpoint()
        assert [le.request.url for le in f.next(3)] == [
            "https://a.example/1", "https://a.example/2", "https://a.example/3"]

    def test_a_renewal_moves_next_ready_at_and_never_shortens_a_lease(
            self, env: Env) -> None:
        """After renew(), next_ready_at() says the renewed expiry; a renewal shorter
        than what the lease has left changes nothing, and renew() reports the expiry
        the lease really has."""
        f = env.open(lease_ttl=10, **FAST)
        f.add(["https://a.example/1"])
        (la,) = f.next(1)
        start = env.clock()
        assert f.next_ready_at() == start + 10
        env.clock.advance(5)
        (renewed,) = f.renew([la], ttl=100)
        assert renewed.expires_at == start + 105
        f = env.checkpoint()
        assert f.next_ready_at() == start + 105
        (again,) = f.renew([renewed], ttl=1)  # shorter than what it has left
        assert again.expires_at == start + 105
        env.clock.advance(50)
        f = env.checkpoint()
        assert f.next(5) == [] and f.next_ready_at() == start + 105
        env.clock.advance(51)
        assert [le.request.url for le in f.next(5)] == ["https://a.example/1"]

    def test_a_shorter_renewal_of_one_lease_of_a_call_changes_nothing(
            self, env: Env) -> None:
        """Two leases of one next() call; one renewed with a ttl shorter than what it
        has left keeps its expiry (and is reported with it), on every store."""
        f = env.open(lease_ttl=100, concurrency=2, **FAST)
        f.add(["https://a.example/1", "https://a.example/2"])
        la, _ = f.next(2)
        start = env.clock()
        (renewed,) = f.renew([la], ttl=1)
        assert renewed.expires_at == start + 100
        env.clock.advance(50)
        f = env.checkpoint()
        assert f.next(5) == []  # neither lease was shortened
        env.clock.advance(51)
        assert len(f.next(5)) == 2

    def test_the_store_never_shortens_a_lease(self, env: Env) -> None:
        """The Store protocol's renew itself (not only the Frontier's) keeps the later
        expiry: asked for an earlier one, a lease keeps the expiry it has."""
        f = env.open(lease_ttl=100, concurrency=2, **FAST)
        f.add(["https://a.example/1", "https://a.example/2"])
        la, _ = f.next(2)
        now = env.clock()
        assert f.store.renew([la.token], now + 1, now) == [True]
        env.clock.advance(50)
        assert f.next(5) == []
        assert f.store.next_ready_at(env.clock()) == now + 100
        env.clock.advance(51)
        assert len(f.next(5)) == 2

    def test_a_lease_that_keeps_expiring_dies(self, env: Env) -> None:
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

    def test_two_requests_of_one_url_count_their_own_expiries(self, env: Env) -> None:
        """Expired leases are counted per request, not per URL: two requests of one URL
        (``dont_filter``, the same bytes; or a revisit while the first is out) each die
        after their own ``max_redeliveries``."""
        f = env.open(lease_ttl=10, max_redeliveries=1, concurrency=3, revisit_after=15,
                     **FAST)
        f.add([Request("https://a.example/x", dont_filter=True), "https://b.example/y"])
        assert len(f.next(5)) == 2
        env.clock.advance(16)  # the first of each URL: one expiry (b/y may come again)
        f.add([Request("https://a.example/x", dont_filter=True),
               Request("https://b.example/y", priority=1)])  # (b: a revisit)
        f = env.checkpoint()
        assert len(f.next(5)) == 4
        env.clock.advance(11)  # the first ones die, the second ones come back once
        f = env.checkpoint()
        s = f.stats()
        assert (s.dead, s.queued, s.redelivered) == (2, 2, 4)
        assert {d.error for d in f.dead()} == {
            "lease expired unanswered 2 times (max_redeliveries 1)"}
        assert [d.request.priority for d in f.dead()] == [0, 0]
        got = f.next(5)
        assert sorted(le.request.url for le in got) == ["https://a.example/x",
                                                        "https://b.example/y"]
        f.done(got)
        s = f.stats()
        assert (s.done, s.dead, s.queued, s.leased) == (2, 2, 0, 0)

    def test_named_values_are_kept_until_they_expire(self, env: Env) -> None:
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

    def test_tallies_count_atomically_and_load_added_up(self, env: Env) -> None:
        """Named counts (:meth:`~crawlq.stores.base.Store.tally`): each call adds to them
        atomically, from many threads and processes (none lost), never below 0; a dump
        carries them and a load adds them to the store's; clear() forgets them."""
        f = env.open(**FAST)
        store = f.store
        assert store.tally({"a": 2, "b": 5}) == [2, 5]
        assert store.tally({"a": -5, "b": 1}) == [0, 6]
        assert store.tallies(["a", "b", "c"]) == [0, 6, 0]

        def add() -> None:
            for _ in range(200):
                store.tally({"n": 1, "b": 1})

        threads = [threading.Thread(target=add) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        f = env.checkpoint()
        store = f.store
        assert store.tallies(["n", "b"]) == [800, 806]
        store.drop_tallies(["b"])
        assert store.tallies(["n", "b"]) == [800, 0]
        records = list(f.dump())
        assert [r["tallies"] for r in records if r["type"] == "tallies"] == [{"n": 800}]
        g = env.open_other(**FAST)
        g.store.tally({"n": 1})
        g.load(records)
        assert g.store.tallies(["n"]) == [801]
        g.clear()
        assert g.store.tallies(["n"]) == [0]

    def test_named_values_in_batches_keep_the_newest(self, env: Env) -> None:
        """put_values, get_values and drop_values in batches: a name's newest value is
        the one read (of a name given twice in a batch, the later), however many values
        came before it and wherever the store keeps them; one put with a time over one
        kept for good is gone once its time is up; a dump and a load carry those kept
        for good."""
        f = env.open(**FAST)
        clock = env.clock
        f.store.put_values([(f"v:{i}", b"first", None) for i in range(300)])
        f.store.put_values([("v:1", b"second", None), ("v:2", b"x", None),
                            ("v:2", b"later", None), ("v:3", b"a while", clock() + 10),
                            ("w", b"w", None)])
        f.store.drop_values(["v:4", "w", "never"])
        f = env.checkpoint()
        names = ["v:0", "v:1", "v:2", "v:3", "v:4", "w", "v:299"]
        assert f.store.get_values(names, clock()) == [
            b"first", b"second", b"later", b"a while", None, None, b"first"]
        clock.advance(20)
        assert f.next(1) == []  # (a call that wakes queues drops values whose time is up)
        f = env.checkpoint()
        assert f.store.get_values(["v:3", "v:1"], clock()) == [None, b"second"]
        f.store.put_values([("v:3", b"back", None)])
        records = [r for r in f.dump() if r["type"] == "value" and r["name"][:2] in (
            "v:", "w")]
        assert len(records) == 299
        g = env.open_other(**FAST)
        g.load(records)
        assert g.store.get_values(names, clock()) == [
            b"first", b"second", b"later", b"back", None, None, b"first"]

    def test_named_values_can_be_dropped(self, env: Env) -> None:
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

    def test_a_request_given_up_dies_at_once(self, env: Env) -> None:
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

    def test_retry_later_counts_no_failure(self, env: Env) -> None:
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

    def test_request_round_trips_through_the_store(self, env: Env) -> None:
        f = env.open(**FAST)
        req = Request("https://ü.example/päth?q=ß", method="POST", body=bytes(range(256)),
                      priority=3, depth=4, referrer="https://r.example/",
                      meta={"k": ["v", 1, None, {"x": 1.5}], "ü": True}, revisit_after=99.0)
        f.add(req)
        f = env.checkpoint()
        (lease,) = f.next(1)
        assert lease.request == req
        assert lease.queue == "xn--tda.example"

    def test_an_exchange_adds_then_answers_then_leases(self, env: Env) -> None:
        """``exchange(add, done, n)`` does what add(), done() and next(n) do, in that
        order: a link it adds and a host it frees are leasable in the same call."""
        f = env.open(max_queue_urls=3, **FAST)
        f.add(["https://a.example/1", "https://b.example/1"])
        a, b = f.next(2)
        ex = f.exchange(["https://a.example/2", "https://c.example/1", "https://a.example/1",
                         "not a url", "https://a.example/3", "https://a.example/4"],
                        [a], 5, duration=0.5)
        assert (ex.added.added, ex.added.duplicates) == (3, 1)
        assert [r.reason for r in ex.added.rejected] == ["not-absolute", "queue-budget"]
        assert ex.held == [True]
        # a.example was freed by the answer; b.example is still leased (one at a time)
        assert sorted(le.request.url for le in ex.leases) == [
            "https://a.example/2", "https://c.example/1"]
        f = env.checkpoint()
        late = f.exchange((), [a, b], 0)  # a: answered already; b: held
        assert late.held == [False, True] and late.leases == []
        s = f.stats()
        assert (s.done, s.leased, s.queued, s.late_acks) == (2, 2, 1, 1)
        empty = f.exchange()  # (nothing asked: nothing done)
        assert (empty.added.added, empty.held, empty.leases) == (0, [], [])
        assert f.exchange(n=5).leases == []  # a.example's one lease is out
        (two,) = [le for le in ex.leases if le.queue == "a.example"]
        assert [le.request.url for le in f.exchange(done=[two], n=5).leases] == [
            "https://a.example/3"]
        with pytest.raises(ConfigError):
            f.exchange(n="5")  # type: ignore[arg-type]

    def test_a_transaction_block_is_one_step_where_the_store_has_them(
            self, env: Env) -> None:
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
        atomic = isinstance(f.store, Transactions)
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
        with pytest.raises(StoreError), f.transaction():
            f.add(["https://d.example/1"])
            with pytest.raises(ZeroDivisionError):
                f.remove_queued(lambda r: 1 / 0 > 0)
            with pytest.raises(StoreError):
                f.next(1)
        assert f.add(["https://c.example/1", "https://d.example/1"]).added == 2
        assert [le.request.url for le in f.next(5)] == [
            "https://a.example/2", "https://c.example/1", "https://d.example/1"]
