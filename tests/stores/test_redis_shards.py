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
