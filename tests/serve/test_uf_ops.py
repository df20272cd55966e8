"""What URLFrontier's calls do to a frontier, called directly (no gRPC): the lease
handles of URLs handed out, kept one store value per GetURLs call and in each server's
memory (:class:`crawlq.serve.uf_ops.Handles`). Two ``Handles`` on one store stand for
two servers, a new one for a server started again; on memory, SQLite and Redis."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from crawlq import Frontier
from crawlq.redislocal import LocalRedis
from crawlq.serve import uf_ops
from crawlq.stores.base import Tallies

OPTS = {"min_delay": 0, "max_delay": 0, "delay_factor": 0, "concurrency": 100}


@pytest.fixture(params=["memory", "sqlite", "redis"])
def frontier(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Frontier]:
    if request.param == "memory":
        url = "memory://"
    elif request.param == "sqlite":
        url = f"sqlite:///{tmp_path}/crawl.db"
    else:
        redis: LocalRedis = request.getfixturevalue("redis_server")
        url = f"{redis.url}?prefix=ufops-{request.node.name.replace('[', '-').rstrip(']')}"
    with Frontier.open(url, **OPTS) as f:
        f.clear()
        yield f


def discovered(*urls: str) -> list[uf_ops.Item]:
    return [uf_ops.Item(u, "", {}, None) for u in urls]


def known(*urls: str, refetch: int = 0) -> list[uf_ops.Item]:
    return [uf_ops.Item(u, "", {}, refetch) for u in urls]


def lease(f: Frontier, handles: uf_ops.Handles, n: int = 10, ttl: float = 60.0) -> list[str]:
    return [le.request.url for le in uf_ops.lease(f, n, ttl, 0, 0, None, handles)]


def completed(f: Frontier) -> int:
    return uf_ops.stat_counts(f)[3]["completed"]


def test_an_answer_through_another_server_finds_its_handle_in_the_store(
        frontier: Frontier) -> None:
    """A URL leased through one server and answered through another is done: the
    other reads the call's handles from the store. Its answer through the first one
    later is a second answer: it changes nothing."""
    one, two = uf_ops.Handles(), uf_ops.Handles()
    urls = [f"https://h{i}.example/" for i in range(3)]
    assert uf_ops.put(frontier, discovered(*urls), one) == [uf_ops.OK] * 3
    leased = lease(frontier, one)
    assert sorted(leased) == urls
    assert len(one) == 3 and len(two) == 0
    assert uf_ops.put(frontier, known(leased[0]), two) == [uf_ops.OK]
    assert (frontier.stats().leased, completed(frontier)) == (2, 1)
    assert uf_ops.put(frontier, known(leased[0]), one) == [uf_ops.OK]
    assert (frontier.stats().leased, completed(frontier)) == (2, 1)
    # (answered through the server that leased it: found in its memory)
    assert uf_ops.put(frontier, known(*leased[1:]), one) == [uf_ops.OK] * 2
    assert (frontier.stats().leased, completed(frontier)) == (0, 3)
    assert sorted(x.url for x in uf_ops.listed(frontier)) == urls


def test_a_server_started_again_reads_back_the_calls_before_it(frontier: Frontier) -> None:
    """A server started again (new memory) answers URLs leased before it started, over
    more calls than it reads at a time, and a URL leased again since keeps the newer
    lease."""
    before = uf_ops.Handles()
    urls = [f"https://h{i}.example/" for i in range(7)]
    uf_ops.put(frontier, discovered(*urls), before)
    leased = [u for _ in range(7) for u in lease(frontier, before, n=1)]
    assert sorted(leased) == urls
    # the first URL back in its queue now, and leased again (a newer call)
    assert uf_ops.put(frontier, known(leased[0], refetch=1), before) == [uf_ops.OK]
    assert lease(frontier, before, n=1) == [leased[0]]
    after = uf_ops.Handles()
    after.SCAN = 2  # (the calls are read back two at a time)
    assert uf_ops.put(frontier, known(*leased), after) == [uf_ops.OK] * 7
    assert (frontier.stats().leased, completed(frontier)) == (0, 7)
    assert frontier.stats().queued == 0


def test_a_late_answer_changes_nothing_through_any_server(frontier: Frontier) -> None:
    """An answer after its lease ended makes no record and no count, through the
    server that leased the URL and through another one (which finds the call in the
    store); the URL is served again."""
    one, two = uf_ops.Handles(), uf_ops.Handles()
    clock = [1_000_000.0]
    frontier.clock = lambda: clock[0]
    uf_ops.put(frontier, discovered("https://a.example/", "https://b.example/"), one)
    a, b = sorted(lease(frontier, one, ttl=10))
    clock[0] += 30  # (both leases ended)
    assert uf_ops.put(frontier, known(a), one) == [uf_ops.OK]
    assert uf_ops.put(frontier, known(b), two) == [uf_ops.OK]
    assert completed(frontier) == 0
    assert sorted(lease(frontier, two)) == [a, b]


def test_a_deleted_queues_leases_end_and_late_answers_change_nothing(
        frontier: Frontier) -> None:
    """DeleteQueue ends the queue's leases, whichever server made them; an answer to
    one of them later, through either server, does not bring the queue back."""
    one, two = uf_ops.Handles(), uf_ops.Handles()
    uf_ops.put(frontier, discovered("https://a.example/1", "https://b.example/1"), one)
    leased = lease(frontier, one)
    a = next(u for u in leased if "a.example" in u)
    assert uf_ops.delete_queue(frontier, "a.example", two) == 1
    assert frontier.stats().leased == 1
    assert uf_ops.put(frontier, known(a), one) == [uf_ops.OK]
    assert uf_ops.put(frontier, known(a), two) == [uf_ops.OK]
    assert uf_ops.queue_info(frontier, "a.example") is None
    assert completed(frontier) == 0


def test_a_cleared_crawl_numbers_its_calls_again(frontier: Frontier) -> None:
    """A crawl cleared (DeleteCrawl) numbers its GetURLs calls from 1 again: a server
    that had read calls up to a higher number still finds the new ones."""
    one, two = uf_ops.Handles(), uf_ops.Handles()
    uf_ops.put(frontier, discovered(*(f"https://h{i}.example/" for i in range(3))), one)
    first = [u for _ in range(3) for u in lease(frontier, one, n=1)]
    assert uf_ops.put(frontier, known(first[2]), two) == [uf_ops.OK]  # (two read 3 calls)
    frontier.clear()
    uf_ops.put(frontier, discovered("https://new.example/"), one)
    (url,) = lease(frontier, one)
    assert uf_ops.put(frontier, known(url), two) == [uf_ops.OK]
    assert (frontier.stats().leased, completed(frontier)) == (0, 1)


def test_past_most_handles_the_oldest_calls_are_forgotten_first() -> None:
    """A server keeps at most ``most`` handles in memory: past it, those of its oldest
    calls go (the store still has them for other servers); its latest stay."""
    with Frontier.open("memory://", **OPTS) as f:
        handles = uf_ops.Handles(most=2)
        uf_ops.put(f, discovered(*(f"https://h{i}.example/" for i in range(3))), handles)
        leased = [u for _ in range(3) for u in lease(f, handles, n=1)]
        assert len(handles) == 2
        assert handles.find(leased)[0] is None
        assert all(h is not None for h in handles.find(leased[1:]))
        # another server still answers the forgotten one from the store
        assert uf_ops.put(f, known(leased[0]), uf_ops.Handles()) == [uf_ops.OK]
        assert f.stats().leased == 2


def test_a_get_urls_call_in_parts_keeps_its_limits_across_them(frontier: Frontier) -> None:
    """The parts of one GetURLs call (leased one after another) share its limits: at
    most ``per_queue`` URLs of a queue and ``max_queues`` queues in all."""
    handles = uf_ops.Handles()
    uf_ops.put(frontier, discovered(*(f"https://h{q}.example/{i}" for q in range(4)
                                      for i in range(3))), handles)
    taken: dict[str, int] = {}
    got = [le.request.url for _ in range(4)
           for le in uf_ops.lease(frontier, 2, 60.0, 2, 3, None, handles, taken)]
    assert sorted(taken.values()) == [2, 2, 2]
    assert len(got) == 6
    assert frontier.stats().leased == 6


def test_a_handle_read_before_its_url_was_leased_again_gives_way_to_the_new_one(
        frontier: Frontier) -> None:
    """A server that read a call's handles keeps them; when the URL is answered through
    the other server, back in its queue and leased again there, an answer through the
    first server takes the newer lease (read from the store then), not the old one."""
    one, two = uf_ops.Handles(), uf_ops.Handles()
    uf_ops.put(frontier, discovered("https://u.example/", "https://v.example/"), one)
    u, v = sorted(lease(frontier, one))
    assert uf_ops.put(frontier, known(v), two) == [uf_ops.OK]  # (two reads the call)
    assert uf_ops.put(frontier, known(u, refetch=1), one) == [uf_ops.OK]  # (back now)
    assert lease(frontier, one) == [u]  # (a newer call)
    assert uf_ops.put(frontier, known(u), two) == [uf_ops.OK]
    assert (frontier.stats().leased, completed(frontier)) == (0, 2)


def test_the_first_read_goes_past_calls_made_here(frontier: Frontier) -> None:
    """A server reading the store for the first time skips its own calls, and does not
    take a stretch of them for the end of the live calls: another server's call before
    them is found."""
    one, two = uf_ops.Handles(), uf_ops.Handles()
    two.SCAN = one.SCAN = 2
    uf_ops.put(frontier, discovered(*(f"https://h{i}.example/" for i in range(3))), one)
    (first,) = lease(frontier, one, n=1)  # (call 1: one's)
    lease(frontier, two, n=1)
    lease(frontier, two, n=1)  # (calls 2 and 3: two's own)
    assert uf_ops.put(frontier, known(first), two) == [uf_ops.OK]
    assert (frontier.stats().leased, completed(frontier)) == (2, 1)


def test_a_cleared_crawl_is_a_new_life_for_every_server(frontier: Frontier) -> None:
    """After the crawl is cleared its calls are numbered from 1 again: a server that
    held handles and read calls before (more of them than after, or fewer) answers the
    new leases, the same URL leased in both lives included."""
    one, two = uf_ops.Handles(), uf_ops.Handles()
    urls = [f"https://h{i}.example/" for i in range(3)]
    uf_ops.put(frontier, discovered(*urls), one)
    before = [u for _ in range(3) for u in lease(frontier, one, n=1)]
    assert uf_ops.put(frontier, known(before[2]), two) == [uf_ops.OK]  # (two read 3)
    frontier.clear()
    uf_ops.put(frontier, discovered(*urls, "https://h3.example/", "https://h4.example/"),
               two)
    after = [u for _ in range(5) for u in lease(frontier, two, n=1)]
    assert before[0] in after
    assert uf_ops.put(frontier, known(*after), one) == [uf_ops.OK] * 5
    assert (frontier.stats().leased, completed(frontier)) == (0, 5)


def test_a_call_numbered_before_its_value_is_written_is_read_later(
        frontier: Frontier) -> None:
    """On a store without transactions a GetURLs call is numbered a step before its
    handles are written: a server reading in between looks for that number again."""
    two = uf_ops.Handles()
    uf_ops.put(frontier, discovered("https://a.example/"), two)
    two.read(frontier)
    # another server's call, numbered ...
    tallies = frontier.store
    assert isinstance(tallies, Tallies)
    (call,) = tallies.tally({"crawlq:uf:calls": 1})
    tallies.tally({"crawlq:uf:epoch": 7})
    (le,) = frontier.next(1, ttl=60)
    two.read(frontier)  # (reads the number, finds no value yet)
    # ... and written
    until = le.expires_at + uf_ops.LATE_KEPT
    frontier.store.put_values([(f"crawlq:uf:call:{call}",
                                f"{until!r}\n{le.token}.{le.request.retries} 0 "
                                f"{le.request.url}".encode(), until)])
    assert uf_ops.put(frontier, known(le.request.url), two) == [uf_ops.OK]
    assert (frontier.stats().leased, completed(frontier)) == (0, 1)


@pytest.mark.parametrize("pause_gc", [True, False])
def test_the_servers_batches_run_with_the_collector_paused(pause_gc: bool) -> None:
    """The server runs a batch of a client's messages as the frontier runs its batch
    calls: the garbage collector paused unless the frontier's ``pause_gc`` is off, and
    as it was afterwards (left off when it was off)."""
    import gc

    from crawlq.frontier import PausedGC
    from crawlq.serve.grpc_server import _batch

    assert gc.isenabled()
    assert _batch(pause_gc, gc.isenabled) is not pause_gc
    assert gc.isenabled()
    with PausedGC():
        assert _batch(pause_gc, gc.isenabled) is False
        assert not gc.isenabled()
    assert gc.isenabled()
