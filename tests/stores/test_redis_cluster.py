"""A crawl on a real Redis Cluster while Redis moves it: ``redis-cli --cluster`` adds a
node and reshards the crawl's slot to it, or the master serving it is killed and its
replica takes over, while a client leases and answers. The crawl goes on (its calls
wait while its keys are split between two nodes, or no node serves its slot), nothing
is lost."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import redis
from redis.crc import key_slot

from crawlq import Frontier
from crawlq.testing import FAST
from crawlq.testing.redis_server import LocalCluster


def _prefix_in_slot(slot: int) -> str:
    """A crawl prefix whose keys hash to ``slot``."""
    for i in range(1_000_000):
        prefix = f"mv{i}"
        if key_slot(("{" + prefix + "}:m").encode()) == slot:
            return prefix
    raise AssertionError(f"no prefix for slot {slot}")


def _cluster(port: int, *args: object) -> Any:
    """The reply of ``CLUSTER <args>`` from the node on ``port``."""
    return redis.Redis(port=port).execute_command("CLUSTER", *args)  # type: ignore[no-untyped-call]


def _owner(port: int, slot: int) -> int:
    """The port of the node serving ``slot``, as the node on ``port`` sees it."""
    for start, end, master, *_ in _cluster(port, "SLOTS"):
        if start <= slot <= end:
            return int(master[1])
    raise AssertionError(f"slot {slot} is not served")


def _queued_crawl(cluster: LocalCluster, slot: int) -> tuple[Frontier, list[str]]:
    """A crawl whose keys hash to ``slot``, with 30,000 URLs of 200 hosts queued."""
    f = Frontier.open(f"{cluster.url}&prefix={_prefix_in_slot(slot)}", lease_ttl=600,
                      concurrency=1000, **FAST)
    urls = [f"https://h{i % 200}.example/p{i}" for i in range(30_000)]
    for start in range(0, len(urls), 5000):
        assert f.add(urls[start:start + 5000]).added == 5000
    return f, urls


def _crawl_in_thread(f: Frontier, leased: list[str], calls: list[tuple[float, float]],
                     failures: list[BaseException]) -> threading.Thread:
    """A client that leases 50 at a time and answers each batch until the crawl is
    finished, recording what it leased and when its calls ran."""

    def crawl() -> None:
        try:
            while True:
                t = time.monotonic()
                batch = f.next(50)
                calls.append((t, time.monotonic()))
                if not batch:
                    if f.stats().finished:
                        return
                    time.sleep(0.01)
                    continue
                leased.extend(le.request.url for le in batch)
                t = time.monotonic()
                f.done(batch)
                calls.append((t, time.monotonic()))
                time.sleep(0.003)
        except BaseException as exc:  # (reported by the test)
            failures.append(exc)

    worker = threading.Thread(target=crawl)
    worker.start()
    return worker


def test_a_crawl_goes_on_while_redis_cli_reshards_its_slot_to_a_new_node(
        tmp_path: Path) -> None:
    with LocalCluster(tmp_path / "cluster", masters=3) as cluster:
        slot = 0  # (reshard moves a node's slots lowest first: --cluster-slots 1 is this)
        f, urls = _queued_crawl(cluster, slot)
        source = _owner(cluster.nodes[0].port, slot)
        new = cluster.add_node()
        ids = {n.port: _cluster(n.port, "MYID").decode()
               for n in cluster.nodes}

        leased: list[str] = []
        calls: list[tuple[float, float]] = []  # (start, end) of each next() and done()
        failures: list[BaseException] = []
        worker = _crawl_in_thread(f, leased, calls, failures)
        time.sleep(0.3)
        moved_from = time.monotonic()
        res = cluster.cli("--cluster", "reshard", f"127.0.0.1:{cluster.nodes[0].port}",
                          "--cluster-from", ids[source], "--cluster-to", ids[new.port],
                          "--cluster-slots", "1", "--cluster-yes", "--cluster-pipeline", "1")
        moved_to = time.monotonic()
        worker.join(120)
        assert res.returncode == 0, res.stdout.decode()[-2000:] + res.stderr.decode()
        assert not worker.is_alive() and not failures, failures
        # The crawl's slot is on the new node now, with its keys.
        assert _owner(cluster.nodes[0].port, slot) == new.port
        assert _cluster(new.port, "COUNTKEYSINSLOT", slot) > 0
        # The client worked while the keys moved (the point of the test).
        assert any(start < moved_to and end > moved_from for start, end in calls)
        assert sorted(leased) == sorted(urls)  # every URL once, none lost
        s = f.stats()
        assert (s.finished, s.done, s.redelivered, s.queued) == (True, 30_000, 0, 0)
        f.close()


def test_a_crawl_goes_on_when_its_master_dies_and_a_replica_takes_over(
        tmp_path: Path) -> None:
    """What a failover can lose is what Redis's asynchronous replication lost: the
    crawl then goes on from a slightly older state (a URL leased or answered in that
    last moment is handed out again); no URL is lost (docs/stores.md)."""
    with LocalCluster(tmp_path / "cluster", masters=3, replicas=1,
                      node_timeout=1000) as cluster:
        slot = 0
        f, urls = _queued_crawl(cluster, slot)
        master = _owner(cluster.nodes[0].port, slot)
        leased: list[str] = []
        calls: list[tuple[float, float]] = []
        failures: list[BaseException] = []
        worker = _crawl_in_thread(f, leased, calls, failures)
        time.sleep(0.3)
        killed = time.monotonic()
        next(n for n in cluster.nodes if n.port == master).kill()
        worker.join(120)
        assert not worker.is_alive() and not failures, failures
        alive = next(n for n in cluster.nodes if n.port != master)
        assert _owner(alive.port, slot) not in (master, None)  # (a replica took over)
        # (the client was at work when the master died, and went on after)
        assert any(start < killed for start, _ in calls)
        assert any(start > killed for start, _ in calls)
        assert set(leased) == set(urls)  # none lost
        s = f.stats()
        assert (s.finished, s.queued, s.leased) == (True, 0, 0)
        f.close()


def test_a_sharded_crawl_of_many_sites_spreads_over_the_nodes(tmp_path: Path) -> None:
    """A crawl of 300 registered domains cut into 64 shards leaves each of 3 nodes
    between 25% and 42% of the crawl's keys and memory; one domain's queues all live
    in one shard."""
    with LocalCluster(tmp_path / "cluster", masters=3) as cluster:
        f = Frontier.open(f"{cluster.url}&prefix=spread&shards=64", **FAST)
        urls = [f"https://www.site{(i * 7919) % 300}.com/p{i}" for i in range(30_000)]
        for start in range(0, len(urls), 5000):
            assert f.add(urls[start:start + 5000]).added == 5000
        f.done(f.next(500))
        nodes = [redis.Redis(port=n.port) for n in cluster.nodes]
        keys = [r.dbsize() for r in nodes]
        memory = [r.info("memory")["used_memory_dataset"] for r in nodes]
        for part in (keys, memory):
            assert all(0.25 <= k / sum(part) <= 0.42 for k in part), part
        one = f.add([f"https://h{i}.big.example/" for i in range(50)])
        assert one.added == 50
        store: Any = f.store
        assert len({store.shard_of(f"h{i}.big.example") for i in range(50)}) == 1
        f.close()
