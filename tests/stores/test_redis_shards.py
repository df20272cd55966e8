"""A sharded crawl's exchange (``shards=N``) on a real redis-server: its leases follow
each shard's line in brief (docs/stores.md), so what it must keep is checked here: every
shard served, no URL twice or lost, each shard's line order, the best priority first,
calls from several threads."""

from __future__ import annotations

import threading
from collections import Counter, defaultdict
from typing import Any

from crawlq import Frontier, Lease, Request
from crawlq.stores.redis_shards import ShardedRedisStore
from crawlq.testing import FAST

SHARDS = 8


def _open(redis_server: Any, name: str, **options: Any) -> Frontier:
    return Frontier.open(f"{redis_server.url}?prefix={name}&shards={SHARDS}",
                         **{**FAST, "concurrency": 1, **options})


def _shard(f: Frontier, url: str) -> int:
    store = f.store
    assert isinstance(store, ShardedRedisStore)
    return store.shard_of(f.queue_of(url))


def test_an_exchange_serves_every_shard_each_in_its_line_order(redis_server: Any) -> None:
    f = _open(redis_server, "xorder")
    hosts = [f"site{i}.test" for i in range(24)]  # (24 registered domains)
    assert len({_shard(f, f"http://{h}/") for h in hosts}) == SHARDS
    f.add([f"http://{h}/{k}" for k in range(6) for h in hosts])
    order: list[str] = []
    first: dict[str, int] = {}
    held: list[Lease] = []
    for call in range(1000):
        got = f.exchange(done=held, n=3)
        held = got.leases
        for le in held:
            order.append(le.request.url)
            first.setdefault(le.request.url.split("/")[2], call)
        if not held and f.stats().queued == 0:
            break
    f.exchange(done=held)
    assert sorted(order) == sorted(f"http://{h}/{k}" for k in range(6) for h in hosts)
    assert len(set(order)) == len(order)
    # each host's URLs in the order added (its queue's order)
    by_host: dict[str, list[int]] = defaultdict(list)
    for url in order:
        by_host[url.split("/")[2]].append(int(url.rsplit("/", 1)[1]))
    assert all(ks == sorted(ks) for ks in by_host.values()), by_host
    # no shard left waiting: 24 ready hosts, 3 leases a call; every host served in the
    # first 16 calls (twice the calls a perfect round-robin needs)
    assert len(first) == 24 and max(first.values()) < 16, sorted(first.values())
    # and each shard's hosts served in its line's order: all became ready at once, so
    # in the order of their queue keys
    for shard in range(SHARDS):
        mine = sorted((h for h in hosts if _shard(f, f"http://{h}/") == shard),
                      key=lambda h: f.queue_of(f"http://{h}/"))
        assert [first[h] for h in mine] == sorted(first[h] for h in mine), (shard, mine)
    f.close()


def test_a_better_priority_in_another_shard_goes_first(redis_server: Any) -> None:
    f = _open(redis_server, "xprio")
    hosts = [f"site{i}.test" for i in range(16)]
    f.add([f"http://{h}/{k}" for k in range(5) for h in hosts])
    held = f.exchange(n=4).leases
    busy = {_shard(f, le.request.url) for le in held}
    other = next(h for h in hosts if _shard(f, f"http://{h}/") not in busy)
    held = f.exchange(add=[], done=held, n=4).leases  # (the shards' lines known)
    f.add(Request(f"http://{other}/urgent", priority=10))
    got = f.exchange(done=held, n=4).leases
    assert f"http://{other}/urgent" in [le.request.url for le in got]
    f.close()


def test_threads_exchanging_on_one_sharded_crawl_lease_each_url_once(
        redis_server: Any) -> None:
    f = _open(redis_server, "xthreads")
    urls = [f"http://site{i}.test/{k}" for k in range(20) for i in range(40)]
    f.add(urls)
    leased: list[str] = []
    lock = threading.Lock()
    errors: list[BaseException] = []

    def work() -> None:
        try:
            held: list[Lease] = []
            idle = 0
            while idle < 20:
                got = f.exchange(done=held, n=5).leases
                with lock:
                    leased.extend(le.request.url for le in got)
                idle = 0 if got else idle + 1
                held = got
            f.exchange(done=held)
        except BaseException as exc:  # (reported by the test's thread)
            errors.append(exc)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors
    counts = Counter(leased)
    assert set(counts) == set(urls) and max(counts.values()) == 1
    st = f.stats()
    assert st.queued == 0 and st.leased == 0 and st.done == len(urls)
    f.close()


def test_a_big_lease_call_lists_a_long_line_in_parts(redis_server: Any) -> None:
    """next(n) lists the first n queues of each shard's line: past ~8,000 at once Lua's
    unpack() fails (seen: 9,000 of 18,000 one-URL domains on 2 shards)."""
    f = Frontier.open(f"{redis_server.url}?prefix=xbig&shards=2", **FAST)
    f.add([f"http://s{i}.test/" for i in range(18_000)])
    assert len(f.next(9_000)) == 9_000
    f.close()


def test_a_crawl_cleared_by_another_process_is_followed_within_a_second(
        redis_server: Any) -> None:
    clock = [1_000_000.0]
    url = f"{redis_server.url}?prefix=xclear&shards={SHARDS}"
    a = Frontier.open(url, clock=lambda: clock[0], **{**FAST, "concurrency": 1})
    b = Frontier.open(url, clock=lambda: clock[0], **{**FAST, "concurrency": 1})
    a.add([f"http://site{i}.test/{k}" for k in range(10) for i in range(24)])
    held: list[Lease] = []
    for _ in range(100):  # (the shards' line versions grow)
        held = a.exchange(done=held, n=4).leases
    b.clear()  # (each shard's line version goes on from where it was)
    b.add([f"http://new{i}.test/" for i in range(24)])
    clock[0] += 2  # (past what a reading serves: a's readings are old)
    got = a.exchange(done=held, n=4).leases
    assert len(got) == 4, got
    # what a reads of a shard now serves its next call: a URL it queues at a better
    # priority is the next one leased (were its readings refused, older ones holding
    # them off, the shard would be unknown and served by chance)
    for r in range(3):
        a.add(Request(f"http://urgent{r}.test/", priority=10))
        got = a.exchange(done=got, n=1).leases
        assert [le.request.url for le in got] == [f"http://urgent{r}.test/"]
    a.close()
    b.close()


def test_crawl_ids_beside_a_sharded_crawl_are_never_its_shards(redis_server: Any) -> None:
    """``crawlq serve`` keeps crawl IDs as crawls beside the one it serves, their IDs
    in the prefix percent-encoded (``.`` kept): a shard's prefix is its crawl's, ``#``
    and its number, which no crawl ID gives."""
    base = f"{redis_server.url}?shards=4&prefix="
    main = Frontier.open(base + "xids")
    for crawl in ("xids/crawl/a", "xids/crawl/a.1", "xids/crawl/a%231"):
        other = Frontier.open(base + crawl.replace("%", "%25"))
        other.add(f"http://{crawl.rsplit('/', 1)[1]}.test/")
        other.close()
    store = main.store
    assert isinstance(store, ShardedRedisStore)
    assert store.prefixes_under("xids/") == ["xids/crawl/a", "xids/crawl/a%231",
                                             "xids/crawl/a.1"]
    main.close()
