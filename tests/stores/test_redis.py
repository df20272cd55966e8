"""The Redis store beyond the contract: restarts, outages, prefixes, Bloom sizing, idle
detection. Every test talks to a real redis-server started on a free loopback port."""

from __future__ import annotations

import contextlib
import hashlib
import socket
import struct
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import redis

from crawlq import Frontier, Request
from crawlq.errors import ConfigError, StoreError
from crawlq.stores.bloom import BLOCK_BYTES, BloomShape
from crawlq.stores.memory import MemoryStore
from crawlq.stores.policy import QueuePolicy
from crawlq.stores.redis_store import RedisStore
from crawlq.testing import FAST, Clock
from crawlq.testing.redis_server import LocalRedis


def _drain(f: Frontier, n: int = 100) -> int:
    got = 0
    while True:
        leases = f.next(n)
        if not leases:
            return got
        got += len(leases)
        f.done(leases)


@pytest.mark.parametrize("fsync", ["always", "everysec"])
def test_redis_killed_and_restarted_with_aof_loses_nothing(tmp_path: Path, fsync: str) -> None:
    server = LocalRedis(tmp_path / "r", appendonly=True, appendfsync=fsync).start()
    try:
        clock = Clock()
        f = Frontier.open(server.url + "?prefix=aof", clock=clock, lease_ttl=60,
                          concurrency=10, **FAST)
        assert f.add([f"https://h{i % 10}.example/{i}" for i in range(1000)]).added == 1000
        leases = f.next(100)
        f.done(leases[:50])
        if fsync == "everysec":
            time.sleep(1.5)  # the documented window: what the last second wrote may go
        server.kill()  # SIGKILL: no shutdown save, only what the AOF has
        server.start()
        # The same client reconnects, and reloads its scripts (NOSCRIPT) by itself.
        s = f.stats()
        assert (s.seen, s.done, s.leased, s.queued) == (1000, 50, 50, 900)
        clock.advance(61)  # the 50 leases held across the crash expire and come back
        assert _drain(f) == 950
        s = f.stats()
        assert s.finished and s.done == 1000 and s.redelivered == 50
        f.close()
    finally:
        server.stop()


def test_outage_is_retried_then_reported(tmp_path: Path) -> None:
    server = LocalRedis(tmp_path / "r", appendonly=True).start()
    try:
        f = Frontier.open(server.url + "?prefix=outage", retry_deadline=30, **FAST)
        f.add([f"https://a{i}.example/" for i in range(10)])
        server.stop()
        restart = threading.Timer(1.0, server.start)
        restart.start()
        t0 = time.monotonic()
        leases = f.next(10)  # waits through the outage, backing off
        restart.join()
        assert len(leases) == 10 and time.monotonic() - t0 >= 0.9
        f.done(leases)
        f.close()

        g = Frontier.open(server.url + "?prefix=outage", retry_deadline=1.0, **FAST)
        server.stop()
        t0 = time.monotonic()
        with pytest.raises(StoreError, match="unreachable for 1 s"):
            g.add("https://late.example/")
        assert time.monotonic() - t0 < 10
        with pytest.raises(StoreError, match="unreachable for 1 s"):  # sent in parts
            g.add([f"https://late.example/{i}" for i in range(2_500)])
        g.close()
    finally:
        server.stop()


def test_crawls_share_a_server_under_prefixes(redis_server: LocalRedis) -> None:
    a = Frontier.open(redis_server.url + "?prefix=iso-a", **FAST)
    b = Frontier.open(redis_server.url, prefix="iso-b", **FAST)
    a.add([f"https://x.example/{i}" for i in range(5)])
    assert b.add("https://x.example/0").added == 1  # b's seen-set is its own
    assert (a.stats().seen, b.stats().seen) == (5, 1)
    assert _drain(a) == 5 and _drain(b) == 1
    assert a.store.destroy() > 0  # type: ignore[attr-defined]
    assert b.stats().seen == 1  # a's keys are gone, b's are not
    r = redis.Redis.from_url(redis_server.url)
    assert not list(r.scan_iter(match="{iso-a}:*"))
    r.close()
    a.close()
    b.close()


def test_bloom_filter_on_redis_is_sized_for_the_crawl(redis_server: LocalRedis) -> None:
    shape = BloomShape(1_000_000, 0.001)
    f = Frontier.open(redis_server.url + "?prefix=bloom-size", bloom_capacity=1_000_000,
                      bloom_error_rate=0.001, **FAST)
    urls = [f"https://b{i % 50}.example/{i}" for i in range(20_000)]
    assert f.add(urls).added >= 19_990
    assert f.add(urls[:5000]).added == 0
    r = redis.Redis.from_url(redis_server.url)
    keys = list(r.scan_iter(match="{bloom-size}:bl:*", count=1000))
    # Many small blocks (512 bytes each), never one huge string near Redis' 512 MB limit.
    assert 0 < len(keys) <= shape.blocks
    assert max(r.strlen(k) for k in keys) <= BLOCK_BYTES
    r.close()
    # The same crawl cannot be reopened with an exact seen-set (or another shape).
    with pytest.raises(ConfigError, match="seen-set"):
        Frontier.open(redis_server.url + "?prefix=bloom-size")
    f.close()


def test_wait_tells_nothing_ready_from_finished(redis_server: LocalRedis) -> None:
    url = redis_server.url + "?prefix=idle"
    a = Frontier.open(url, **FAST)
    b = Frontier.open(url, **FAST)  # another worker (its own connection)
    assert a.wait() is False  # nothing at all: finished
    a.add("https://w.example/1")
    (lease,) = a.next(1)
    woke: list[bool] = []
    # b has nothing ready while a holds the lease; the crawl is not over either.
    t = threading.Thread(target=lambda: woke.append(b.wait(poll=0.05)))
    t.start()
    time.sleep(0.3)
    assert not woke
    a.add(Request("https://w.example/2"))  # links first, then the ack
    a.done(lease)
    t.join(5)
    assert woke == [True]
    (second,) = b.next(5)
    assert second.request.url == "https://w.example/2"
    t0 = time.monotonic()
    assert a.wait(timeout=0.3) is True  # b holds a lease: not over, a gives up waiting
    assert time.monotonic() - t0 >= 0.25
    b.done(second)
    assert a.wait() is False and b.wait() is False  # over, for every worker
    a.close()
    b.close()


@pytest.mark.parametrize("layout", ["exact-sb2", "exact-sb"])
def test_exact_seen_set_buckets_split_as_the_crawl_grows(redis_server: LocalRedis,
                                                         layout: str) -> None:
    """exact-sb2 (a new crawl's): 16-byte fingerprints one after the other in string
    buckets; exact-sb (a crawl an earlier crawlq made): fields of hash buckets, still
    read and written as such."""
    r = redis.Redis.from_url(redis_server.url)
    name = f"sb-{layout}"
    if layout == "exact-sb":
        r.hset(f"{{{name}}}:m", "seenset", layout)
    f = Frontier.open(f"{redis_server.url}?prefix={name}", **FAST)
    assert r.hget(f"{{{name}}}:m", "seenset") == layout.encode()
    urls = [f"https://h{i % 97}.example/p/{i}" for i in range(40_000)]
    for i in range(0, len(urls), 5000):
        assert f.add(urls[i:i + 5000]).added == 5000
    buckets = list(r.scan_iter(match=f"{{{name}}}:sb:*"))
    if layout == "exact-sb":
        sizes = [r.hlen(b) for b in buckets]
        assert {r.object("encoding", b) for b in buckets[:50]} == {b"listpack"}
    else:
        assert all(r.strlen(b) % 16 == 0 for b in buckets)
        sizes = [r.strlen(b) // 16 for b in buckets]
    # linear hashing: 256 buckets to start, one more per 48 fingerprints past that
    assert sum(sizes) == 40_000 == int(r.hget(f"{{{name}}}:m", "sb_n") or 0)
    assert len(buckets) == -(-40_000 // 48) and max(sizes) <= 128
    # every fingerprint is still found after the splits (each URL of the first batches
    # moved buckets at most a few times)
    assert f.add(urls).duplicates == 40_000 and f.stats().seen == 40_000
    # a dump loads into a fresh prefix with the same seen-set
    g = Frontier.open(f"{redis_server.url}?prefix={name}-2", **FAST)
    g.load(f.dump())
    assert g.add(urls[::7]).duplicates == len(urls[::7])
    assert g.add(["https://new.example/"]).added == 1
    f.close()
    g.close()


def test_fingerprints_of_other_lengths_and_across_records(redis_server: LocalRedis) -> None:
    """A fingerprint function of one's own may give any length: those not of 16 bytes
    are kept in hash buckets beside the string ones. And in a string bucket a
    fingerprint is one of its 16-byte records, never bytes across two of them."""
    # (a fingerprint's bucket is its 4th byte while the 256 first buckets are all)
    a = bytes([0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 3, 12, 13, 14, 15])
    b = bytes([9, 9, 9, 3]) + bytes(12)
    across = a[8:] + b[:8]  # (the end of a, the start of b: in bucket 3 too)
    assert across[3] == 3 == a[3] == b[3]
    fps = {"/a": a, "/b": b, "/across": across, "/short": b"\x03" * 8,
           "/long": b"\x03" * 20}

    def fingerprint(request: Request, canonical: str) -> bytes:
        return fps[canonical.split(".test", 1)[1]]

    r = redis.Redis.from_url(redis_server.url)
    f = Frontier.open(f"{redis_server.url}?prefix=sbfp&seen_cache=0",
                      fingerprint=fingerprint, **FAST)
    assert f.add(["http://x.test/a", "http://x.test/b"]).added == 2
    assert r.get("{sbfp}:sb:3") == a + b
    assert f.add(["http://x.test/across"]).added == 1  # (not found across a and b)
    assert f.add(["http://x.test/short", "http://x.test/long"]).added == 2
    assert set(r.hkeys("{sbfp}:sbh:3")) == {b"\x03" * 8, b"\x03" * 20}
    again = f.add([f"http://x.test{p}" for p in fps])
    assert again.duplicates == 5 and f.stats().seen == 5
    g = Frontier.open(f"{redis_server.url}?prefix=sbfp2&seen_cache=0",
                      fingerprint=fingerprint, **FAST)
    g.load(f.dump())
    assert g.add([f"http://x.test{p}" for p in fps]).duplicates == 5
    f.close()
    g.close()


def test_a_crawl_from_the_one_set_layout_is_refused(redis_server: LocalRedis) -> None:
    r = redis.Redis.from_url(redis_server.url)
    r.hset("{old}:m", "seenset", "exact")
    with pytest.raises(ConfigError, match="earlier crawlq"):
        Frontier.open(redis_server.url + "?prefix=old")


def test_a_crawl_an_older_crawlq_wrote_is_marked_and_its_expiry_counts_dropped(
        redis_server: LocalRedis) -> None:
    """Before items carried their count of expired leases, crawlq kept the counts in a
    hash ``{p}:ex``: opened by this version, that hash (which it no longer reads) is
    deleted and the crawl marked as holding items of format 2; its requests go on."""
    r = redis.Redis.from_url(redis_server.url)
    with Frontier.open(redis_server.url + "?prefix=older", **FAST) as f:
        f.add(["https://o.example/1", "https://o.example/2"])
    r.hdel("{older}:m", "items")  # (as the older crawlq left it)
    r.hset("{older}:ex", "0123abcd", 3)
    with Frontier.open(redis_server.url + "?prefix=older", **FAST) as f:
        assert not r.exists("{older}:ex")
        assert r.hget("{older}:m", "items") == b"2"
        assert _drain(f) == 2
    with Frontier.open(redis_server.url + "?prefix=newer", **FAST) as f:
        assert r.hget("{newer}:m", "items") == b"2"  # (a new crawl is marked at once)
        f.store.destroy()  # type: ignore[attr-defined]
    r.close()


def test_retry_deadline_in_the_url(redis_server: LocalRedis) -> None:
    f = Frontier.open(redis_server.url + "?prefix=rd&retry_deadline=2.5")
    assert f.store.retry_deadline == 2.5  # type: ignore[attr-defined]
    f.close()
    f = Frontier.open(redis_server.url + "?prefix=rd&retry_deadline=2.5", retry_deadline=7)
    # (the keyword wins)
    assert f.store.retry_deadline == 7  # type: ignore[attr-defined]
    f.close()
    with pytest.raises(ConfigError, match="retry_deadline"):
        Frontier.open(redis_server.url + "?prefix=rd&retry_deadline=soon")


class _OwnDelay(QueuePolicy):
    """A policy with a delay() of its own: the Lua scripts cannot run it."""

    def delay(self, duration: float | None) -> float:
        return 42.0


class _SameDelay(QueuePolicy):
    """A subclass that keeps QueuePolicy's delay()."""


def test_a_policy_with_its_own_delay_is_refused(redis_server: LocalRedis) -> None:
    """The Redis store computes the politeness delay in Lua from the policy's numbers;
    a QueuePolicy whose delay() is its own is refused with a clear error (opening and
    set_policy), where the memory and SQLite stores call it. One that keeps the
    standard delay() is taken."""
    url = f"{redis_server.url}?prefix=own-delay"
    with pytest.raises(ConfigError, match="cannot use _OwnDelay"):
        RedisStore(url, _OwnDelay())
    store = RedisStore(url, _SameDelay(min_delay=2.0))
    try:
        with pytest.raises(ConfigError, match="delay"):
            store.set_policy(_OwnDelay())
        assert store.policy == _SameDelay(min_delay=2.0)
    finally:
        store.close()
    memory = MemoryStore(_OwnDelay())  # (the memory and SQLite stores call it)
    memory.add([(None, "a", 0, b"x", None, None, 0)], 0.0)
    (lease,) = memory.lease(0.0, 1, 10.0)
    memory.release([(lease[0], 0, 0.1, None, 0, None, False, None)], 0.0)
    assert memory.queues(0.0)[0].ready_at == 42.0


class _CuttingProxy:
    """A TCP proxy on 127.0.0.1 in front of a redis-server that counts the bytes clients
    send and, once armed, drops the connection after forwarding ``cut_after`` more."""

    def __init__(self, port: int) -> None:
        self.target = port
        self.sent = 0
        self.cut_after: int | None = None
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.server.accept()
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", self.target))
            threading.Thread(target=self._pump, args=(client, upstream, True),
                             daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, client, False),
                             daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, counted: bool) -> None:
        try:
            while data := src.recv(65536):
                if counted and self.cut_after is not None:
                    if len(data) >= self.cut_after:
                        # The server gets the bytes up to the cut, then the end of the
                        # stream (it runs the commands it got whole); the client loses
                        # its connection.
                        dst.sendall(data[:self.cut_after])
                        self.cut_after = None
                        dst.shutdown(socket.SHUT_WR)
                        src.close()
                        return
                    self.cut_after -= len(data)
                if counted:
                    self.sent += len(data)
                dst.sendall(data)
        except OSError:
            pass
        for s in (src, dst):
            with contextlib.suppress(OSError):
                s.close()

    def close(self) -> None:
        self.server.close()


def test_a_batch_cut_midway_is_applied_in_chunks(redis_server: LocalRedis) -> None:
    """A batch bigger than CHUNK runs as several scripts in one round trip: each is
    atomic, the batch is not (as the Store docstring says). The connection dropped in
    the middle of sending it: the server applied the chunks it received whole; the
    retry sends the batch again, and the entries of those chunks come back as
    duplicates. Nothing is lost or added twice."""
    from crawlq.stores.base import ADDED, DUPLICATE
    from crawlq.stores.redis_store import CHUNK

    def batch(tag: str) -> list[Any]:
        return [(hashlib.blake2b(f"{tag}{i}".encode(), digest_size=16).digest(),
                 f"h{i % 9}", 0, f"{tag}{i}".encode(), None, None, 0)
                for i in range(2 * CHUNK + 500)]

    proxy = _CuttingProxy(redis_server.port)
    store = RedisStore(f"redis://127.0.0.1:{proxy.port}/0?prefix=cut", retry_deadline=10)
    try:
        store.add(batch("a"), 1.0)  # (the scripts are loaded now)
        before = proxy.sent
        store.add(batch("b"), 1.0)
        size = proxy.sent - before  # (the bytes one such batch sends)
        proxy.cut_after = size // 2  # (in the second chunk)
        got = store.add(batch("c"), 1.0)
        assert proxy.cut_after is None  # (it was cut)
        assert got.count(DUPLICATE) == CHUNK  # the first chunk, applied before the cut
        assert got[CHUNK:] == [ADDED] * (len(got) - CHUNK)
        assert store.stats(2.0).queued == 3 * len(got)
    finally:
        store.close()
        proxy.close()


def test_a_process_without_domain_rules_keeps_the_domains_counts(
        redis_server: LocalRedis) -> None:
    """A process sharing the crawl without domain rules (``crawlq stats`` with the
    defaults) that sees a lease expire keeps its domain's count of leases in flight: the
    domain's hosts are not held back for good by a lease that no longer exists."""
    now = [1000.0]
    url = redis_server.url + "?prefix=dom-mixed"
    ruled = Frontier.open(url, clock=lambda: now[0], domain_concurrency=1, **FAST)
    ruled.add([f"https://h{i}.ex.com/" for i in range(3)])
    assert len(ruled.next(5, ttl=10)) == 1
    plain = Frontier.open(url, clock=lambda: now[0], **FAST)
    now[0] += 20
    assert plain.stats().leased == 0  # (its wake ended the lease)
    now[0] += 10  # (and the parked hosts' rests)
    assert len(ruled.next(5)) == 1
    ruled.close()
    plain.close()


def test_an_exchange_on_a_full_redis_changes_nothing(tmp_path: Path) -> None:
    """maxmemory reached: the exchange is refused whole (StoreFull), never the links
    refused while the page that found them is answered; and after a restart without
    the scripts (SCRIPT FLUSH) it runs whole once they are loaded again."""
    from crawlq.errors import StoreFull

    with LocalRedis(tmp_path / "r", extra=("--maxmemory-policy", "noeviction")) as server:
        client = redis.Redis.from_url(server.url)
        with Frontier.open(server.url + "?prefix=full", **FAST) as f:
            f.add([f"https://h{i}.example/" for i in range(3)])
            lease, *_ = f.next(3)
            client.config_set("maxmemory", int(client.info("memory")["used_memory"]))
            links = [f"https://h0.example/{i}/" + "x" * 300 for i in range(500)]
            with pytest.raises(StoreFull):
                f.exchange(links, [lease], 5)
            client.config_set("maxmemory", 0)
            st = f.stats()
            assert (st.queued, st.leased, st.done) == (0, 3, 0)  # nothing of it ran
            client.script_flush()
            ex = f.exchange(links, [lease], 5)
            assert ex.added.added == 500 and ex.held == [True] and len(ex.leases) == 1


@pytest.mark.parametrize("broken", ["listed-but-empty", "fewer-than-counted"])
def test_a_lua_loop_ends_with_an_error_where_it_could_not_progress(tmp_path: Path,
                                                                   broken: str) -> None:
    """Every loop of the Lua scripts has a cap on its passes, from the sizes it works
    through: keys that contradict each other (a bug, made here by hand) end the lease
    script with a clear error, at once, instead of a loop that never ends and holds the
    server ("BUSY" for every client). The server goes on answering; other crawls too.
    (A throwaway server: without the caps this test would hang it.)"""
    with LocalRedis(tmp_path / "r") as server:
        client = redis.Redis.from_url(server.url)
        url = server.url + "?prefix=broken&socket_timeout=5&retry_deadline=1"
        clock = Clock()
        rec = struct.Struct("<9d")  # a queue's record (n, inf, ra, si, acc, ses, st, ...)
        if broken == "listed-but-empty":
            # b.example.com is in the ready line, its domain full, its record empty (st 3)
            f = Frontier.open(url, clock=clock, domain_concurrency=1, **FAST)
            f.add(["https://a.example.com/1", "https://b.example.com/1"])
            assert len(f.next(1)) == 1
            key = "{broken}:qm:b.example.com"
        else:
            # a.example counts 3 requests; its lists hold 1
            f = Frontier.open(url, clock=clock, concurrency=10, **FAST)
            f.add("https://a.example/1")
            key = "{broken}:qm:a.example"
        raw = client.get(key)
        assert isinstance(raw, bytes)
        fields = list(rec.unpack(raw[:rec.size]))
        if broken == "listed-but-empty":
            fields[0], fields[6] = 0.0, 3.0
        else:
            fields[0] = 3.0
        client.set(key, rec.pack(*fields) + raw[rec.size:])
        t0 = time.monotonic()
        # (listed-but-empty: as many wanted as the level lists, so its line reads on)
        n = 1 if broken == "listed-but-empty" else 5
        with pytest.raises(StoreError, match=r"ran past its bound of \d+ passes"):
            f.next(n)
        with pytest.raises(StoreError, match="ran past its bound"):
            f.exchange([], [], n)
        assert time.monotonic() - t0 < 2
        assert client.ping()
        with Frontier.open(server.url + "?prefix=other", **FAST) as g:
            g.add("https://c.example/1")
            assert len(g.next(5)) == 1
        f.close()
        client.close()


def _lookups(url: str) -> int:
    """How many GET and HEXISTS the server has run: the exact seen-set's membership
    tests (a string bucket read, once a script; a hash bucket's field) and little else
    in an add (a queue's record is read with MGET)."""
    stats = redis.Redis.from_url(url).info("commandstats")
    return sum(int(stats.get(f"cmdstat_{c}", {}).get("calls", 0)) for c in ("get", "hexists"))


def test_a_client_answers_the_duplicates_it_knows_without_the_server(
        redis_server: LocalRedis) -> None:
    """Fingerprints the seen-set holds for good are answered as duplicates by the store
    object that learned them (no membership test on the server), still counted in
    stats(), and sent again once another client cleared or loaded the crawl."""
    clock = Clock()
    url = redis_server.url + "?prefix=known"
    a = Frontier.open(url, clock=clock, **FAST)
    b = Frontier.open(url, clock=clock, **FAST)
    links = [f"https://k.example/{i}" for i in range(50)]
    assert a.add(links).added == 50
    assert b.add(links[:10]).duplicates == 10  # (b learns them from the server)
    before = _lookups(redis_server.url)
    again = a.add([*links, "https://k.example/new"])
    assert (again.added, again.duplicates) == (1, 50)
    ex = a.exchange(links[:5], [], 0)
    assert ex.added.duplicates == 5
    assert _lookups(redis_server.url) - before == 1  # only the new link was tested
    assert a.stats().duplicates == 10 + 50 + 5
    # Another client clears the crawl: what a knew no longer holds.
    b.clear()
    assert a.add(links[:3]).added == 3
    assert a.exchange(links[3:6], [], 0).added.added == 3
    # A dump loaded by another client may bring revisit times: known ones are sent again.
    dump = [{**r, "revisit_at": clock() + 10} if r.get("type") == "seen" else r
            for r in b.dump()]
    a.clear()
    assert a.add(links[:2]).added == 2  # (a knows them now)
    b.clear()
    b.load(dump)
    assert a.add(links[:2]).duplicates == 2
    clock.advance(11)
    assert a.add(links[:2]).added == 2  # their revisit time came: new again
    a.close()
    b.close()


def test_a_url_with_a_revisit_time_is_never_answered_by_the_client(
        redis_server: LocalRedis) -> None:
    clock = Clock()
    f = Frontier.open(redis_server.url + "?prefix=known-rv", clock=clock, **FAST)
    assert f.add(Request("https://rv.example/", revisit_after=5)).added == 1
    assert f.add("https://rv.example/").duplicates == 1
    clock.advance(6)
    assert f.add("https://rv.example/").added == 1  # (no revisit time now: for good)
    clock.advance(6)
    assert f.add("https://rv.example/").duplicates == 1
    f.close()


def test_the_seen_cache_option(redis_server: LocalRedis) -> None:
    url = redis_server.url + "?prefix=known-off&seen_cache=0"
    f = Frontier.open(url, **FAST)
    f.add("https://off.example/")
    before = _lookups(redis_server.url)
    assert f.add("https://off.example/").duplicates == 1
    assert _lookups(redis_server.url) - before == 1  # asked the server
    f.close()
    with pytest.raises(ConfigError, match="seen_cache must be a count"):
        Frontier.open(redis_server.url + "?prefix=known-bad&seen_cache=lots", **FAST)


def test_a_client_forgets_what_it_knew_when_redis_may_have_lost_writes(
        tmp_path: Path) -> None:
    """A restarted server (or a replica taking over) may lack the last writes: a URL the
    client saw added may be gone, the seen-set keeping its id. After the lost
    connection, the client asks the server again instead of answering it itself."""
    server = LocalRedis(tmp_path / "r").start()
    try:
        f = Frontier.open(server.url + "?prefix=lost", **FAST)
        assert f.add("https://lost.example/kept").added == 1
        redis.Redis.from_url(server.url).save()  # (what the restart comes back to)
        assert f.add("https://lost.example/gone").added == 1
        server.kill()
        server.start()  # from the snapshot: "gone" was never added
        assert f.add("https://lost.example/gone").added == 1
        assert f.add("https://lost.example/kept").duplicates == 1
        assert f.stats().duplicates == 1  # (the answer taken back is not counted)
        f.close()
    finally:
        server.stop()
