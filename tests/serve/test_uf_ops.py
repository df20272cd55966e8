"""What URLFrontier's calls do to a frontier, called directly (no gRPC): the lease
handles of URLs handed out, kept one store value per GetURLs call and in each server's
memory (:class:`crawlq.serve.uf_ops.Handles`). Two ``Handles`` on one store stand for
two servers, a new one for a server started again; on memory, SQLite and Redis."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from crawlq import Frontier, Outcome, Request
from crawlq.serve import uf_ops
from crawlq.testing.redis_server import LocalRedis

OPTS = {"min_delay": 0, "max_delay": 0, "delay_factor": 0, "concurrency": 100}


@pytest.fixture(params=["memory", "sqlite", "redis"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "memory":
        return "memory://"
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path}/crawl.db"
    redis: LocalRedis = request.getfixturevalue("redis_server")
    return f"{redis.url}?prefix=ufops-{request.node.name.replace('[', '-').rstrip(']')}"


@pytest.fixture
def frontier(store_url: str) -> Iterator[Frontier]:
    with Frontier.open(store_url, **OPTS) as f:
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
    (call,) = frontier.store.tally({"crawlq:uf:calls": 1})
    frontier.store.tally({"crawlq:uf:epoch": 7})
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


def round_trip(f: Frontier) -> list[uf_ops.Item]:
    """The crawl's URLs as ListURLs gives them, as PutURLs takes them back (DumpURLs)."""
    return [uf_ops.Item(x.url, x.key, x.metadata, x.date) for x in uf_ops.listed(f)]


def listing(f: Frontier) -> list[tuple[str, str, int, int, dict[str, list[str]]]]:
    return sorted((x.url, x.key, x.date, x.created, x.metadata) for x in uf_ops.listed(f))


def test_an_update_of_a_known_url_is_never_refused_nor_counted_again(store_url: str) -> None:
    """A known URL put again (not leased) is no new request: the store's budgets do not
    count it again, nor refuse it (issue 58 item 8, review: with max_domain_urls the
    update was refused after its entry was removed, and the URL was lost for good)."""
    with Frontier.open(store_url, max_domain_urls=3, **OPTS) as f:
        f.clear()
        h = uf_ops.Handles()
        urls = [f"https://a.example/{i}" for i in range(3)]
        assert uf_ops.put(f, discovered(*urls), h) == [uf_ops.OK] * 3
        before = listing(f)
        assert uf_ops.put(f, round_trip(f), h) == [uf_ops.OK] * 3
        assert listing(f) == before  # (DumpURLs put back: nothing changes)
        later = int(f.clock()) + 3600
        assert uf_ops.put(f, known(urls[0], refetch=later), h) == [uf_ops.OK]
        assert [(u, d) for u, _, d, _, _ in listing(f)] == [
            (urls[0], later), *((u, d) for u, _, d, _, _ in before[1:])]
        assert uf_ops.put(f, known(urls[1]), h) == [uf_ops.OK]  # (done for good)
        st = f.stats()
        assert (st.queued, st.scheduled, st.rejected) == (2, 1, {})  # (queued: due later too)
        assert len(list(uf_ops.listed(f))) == 3 and completed(f) == 1
        # (a new URL over the budget is refused as any: it was never the crawl's)
        assert uf_ops.put(f, known("https://a.example/new", refetch=later), h) == [
            uf_ops.SKIPPED]
        assert f.stats().rejected == {"domain-budget": 1}


class Killed(Exception):
    """A server killed at this point of an update."""


def test_an_update_cut_off_midway_never_loses_the_url(
        frontier: Frontier, monkeypatch: pytest.MonkeyPatch) -> None:
    """The new state of a URL put again is written before its old entry goes: a server
    killed in between (on a store without transactions) leaves the URL, maybe twice for
    a moment, never gone; the next update of it leaves one."""
    h = uf_ops.Handles()
    later = int(frontier.clock()) + 3600
    load, add, remove = frontier.load, frontier.add, frontier.remove_queued

    def killed(*args: object, **kwargs: object) -> int:
        raise Killed

    def remove_killed(where: Callable[[Request], bool], queue: str | None = None) -> int:
        def dying(request: Request) -> bool:
            if where(request):
                raise Killed  # (nothing removed: the kill came before the removal)
            return False
        return remove(dying, queue)

    for step in ("write", "remove"):
        url = f"https://a.example/{step}"
        assert uf_ops.put(frontier, discovered(url), h) == [uf_ops.OK]
        if step == "write":
            monkeypatch.setattr(frontier, "load", killed)
            monkeypatch.setattr(frontier, "add", killed)
        else:
            monkeypatch.setattr(frontier, "remove_queued", remove_killed)
        for item in (known(url, refetch=later), known(url)):
            with pytest.raises(Killed):
                uf_ops.put(frontier, item, h)
            assert url in [x.url for x in uf_ops.listed(frontier)], step
        monkeypatch.setattr(frontier, "load", load)
        monkeypatch.setattr(frontier, "add", add)
        monkeypatch.setattr(frontier, "remove_queued", remove)
        assert uf_ops.put(frontier, known(url, refetch=later), h) == [uf_ops.OK]
        assert [x.date for x in uf_ops.listed(frontier) if x.url == url] == [later], step


def test_known_urls_the_crawl_never_saw_are_looked_for_nowhere(
        frontier: Frontier, monkeypatch: pytest.MonkeyPatch) -> None:
    """Known URLs put with a date that the crawl never saw (imported from another
    frontier) have no entry to replace: no queue is read for them (each read was a scan
    of a queue, on Redis of every scheduled entry too). A URL the crawl holds is looked
    for in its queue: one read of each queue a batch names, one removal step where an
    entry goes."""
    h = uf_ops.Handles()
    calls: list[str | None] = []
    remove = frontier.remove_queued

    def counted(where: Callable[[Request], bool], queue: str | None = None) -> int:
        calls.append(queue)
        return remove(where, queue)

    monkeypatch.setattr(frontier, "remove_queued", counted)
    later = int(frontier.clock()) + 3600
    urls = [f"https://h{i % 20}.example/{i}" for i in range(100)]
    assert uf_ops.put(frontier, known(*urls, refetch=later), h) == [uf_ops.OK] * 100
    assert calls == []
    assert frontier.stats().scheduled == 100
    assert uf_ops.put(frontier, known(*urls, refetch=later + 60), h) == [uf_ops.OK] * 100
    assert sorted(str(c) for c in calls) == sorted(2 * [f"h{i}.example" for i in range(20)])
    assert frontier.stats().scheduled == 100
    assert {x.date for x in uf_ops.listed(frontier)} == {later + 60}


def test_a_dead_url_put_back_stays_one_dead_url(store_url: str, tmp_path: Path) -> None:
    """A dead URL as ListURLs lists it (date 0, metadata crawlq_dead) put back changes
    nothing: listed once, still dead, not completed (review: it became a second, done
    one). Put with no crawlq_dead it is what the client says (done, or due at its
    date) in place of the dead one. crawlq_dead is never kept as a client's metadata;
    a dead URL put into another crawl is dead there."""
    with Frontier.open(store_url, **OPTS) as f:
        f.clear()
        h = uf_ops.Handles()
        urls = [f"https://a.example/{i}" for i in range(3)]
        assert uf_ops.put(f, discovered(*urls), h) == [uf_ops.OK] * 3
        leases = f.next(3)
        f.done(leases, Outcome.DEAD, error="gone")
        dumped = round_trip(f)
        assert all(x.refetch == 0 and x.metadata == {uf_ops.DEAD: ["gone"]} for x in dumped)
        assert uf_ops.put(f, dumped, h) == [uf_ops.OK] * 3
        assert listing(f) == sorted((x.url, x.key, 0, x.created, x.metadata)
                                    for x in uf_ops.listed(f))
        assert [x.url for x in uf_ops.listed(f)].count(urls[0]) == 1
        assert len(list(uf_ops.listed(f))) == 3
        assert (completed(f), f.stats().dead) == (0, 3)
        later = int(f.clock()) + 3600
        assert uf_ops.put(f, [*known(urls[0]), *known(urls[1], refetch=later)], h) == [
            uf_ops.OK] * 2
        assert sorted((x.url, x.date, x.metadata) for x in uf_ops.listed(f)) == [
            (urls[0], 0, {}), (urls[1], later, {}), (urls[2], 0, {uf_ops.DEAD: ["gone"]})]
        assert (completed(f), f.stats().dead, f.stats().scheduled) == (1, 1, 1)
        fake = uf_ops.Item("https://b.example/", "", {uf_ops.DEAD: ["no"], "k": ["v"]}, None)
        assert uf_ops.put(f, [fake], h) == [uf_ops.OK]
        (b,) = [x for x in uf_ops.listed(f) if x.url == "https://b.example/"]
        assert b.metadata == {"k": ["v"]} and b.date > 0
    with Frontier.open(f"sqlite:///{tmp_path}/other.db", **OPTS) as other:
        assert uf_ops.put(other, dumped, uf_ops.Handles()) == [uf_ops.OK] * 3
        assert sorted((x.url, x.date, x.metadata) for x in uf_ops.listed(other)) == sorted(
            (x.url, 0, {uf_ops.DEAD: ["gone"]}) for x in dumped)
        assert (completed(other), other.stats().dead) == (0, 3)
        assert uf_ops.put(other, discovered(*urls), uf_ops.Handles()) == [
            uf_ops.SKIPPED] * 3


def test_set_delay_leaves_a_rest_begun_meanwhile(store_url: str) -> None:
    """SetDelay shortens the rests running when it is called; a queue whose rest
    changed while the delay changed (another server's call) keeps it (review: the queues
    were read before the change, and the rest set meanwhile was replaced by one
    computed from the rest read before: the queue was served at once)."""
    now = [1000.0]
    with Frontier.open(store_url, clock=lambda: now[0],
                       **{**OPTS, "concurrency": 1, "min_delay": 3600,
                          "max_delay": 3600}) as f:
        f.clear()
        h = uf_ops.Handles()
        urls = [f"https://a.example/{i}" for i in range(2)]
        assert uf_ops.put(f, discovered(*urls), h) == [uf_ops.OK] * 2
        f.done(f.next(1))  # (a rest of an hour from 1000)
        now[0] = 2000.0

        def change() -> None:
            f.configure_default(min_delay=60, max_delay=60)
            f.block("a.example", until=5000.0)  # (meanwhile, from elsewhere)

        uf_ops.set_delay(f, None, 60, change)
        assert f.next(1, queue="a.example") == []
        now[0] = 5001.0
        assert len(f.next(1, queue="a.example")) == 1
