"""Opening stores: by URL, options and their checks, broken or foreign files, closed
stores, the frontier options that shape entries (priority, keys, canonical form)."""

from __future__ import annotations

import gc
import multiprocessing
import re
import sqlite3
from collections.abc import Callable
from multiprocessing.synchronize import Barrier
from pathlib import Path
from typing import Any

import pytest

from crawlq import (
    ConfigError,
    Frontier,
    Outcome,
    Request,
    RetryPolicy,
    StoreCorrupt,
    StoreError,
)
from crawlq.stores.base import ACK_DEAD, QueuePolicy
from crawlq.stores.memory import MemoryStore
from crawlq.testing import FAST
from crawlq.testing.redis_server import free_port


def test_open_by_url(tmp_path: Path) -> None:
    with Frontier.open("memory://") as f:
        assert type(f.store).__name__ == "MemoryStore"
    with Frontier.open(f"sqlite:///{tmp_path}/x.db") as f:
        assert type(f.store).__name__ == "SQLiteStore"
    assert (tmp_path / "x.db").exists()


def _open_and_add(url: str, start: Barrier, answers: Any) -> None:
    start.wait()
    try:
        with Frontier.open(url) as f:
            f.add([f"http://a.test/{multiprocessing.current_process().name}"])
        answers.put("ok")
    except Exception as exc:
        answers.put(f"{type(exc).__name__}: {exc}")


def test_processes_opening_a_new_sqlite_store_at_once(tmp_path: Path) -> None:
    """``crawlq crawl --workers N`` starts N processes on a store file that may not
    exist yet: each opens and adds at the same moment. Seen before: SQLite refused
    one's switch to WAL at once ("locked", no busy wait), and one found the other's
    requests before its canonical form and took the crawl for an old one (ConfigError);
    each in ~1 of 10 rounds of six."""
    ctx = multiprocessing.get_context("fork")
    for round_ in range(12):
        url = f"sqlite:///{tmp_path / f'r{round_}.db'}"
        start, answers = ctx.Barrier(6), ctx.Queue()
        procs = [ctx.Process(target=_open_and_add, args=(url, start, answers))
                 for _ in range(6)]
        for p in procs:
            p.start()
        got = [answers.get(timeout=60) for _ in procs]
        for p in procs:
            p.join(10)
        assert got == ["ok"] * 6, (round_, got)
        with Frontier.open(url) as f:
            assert f.stats().queued == 6


def test_relative_sqlite_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    with Frontier.open("sqlite:///rel.db") as f:
        f.add("https://a.example/")
    assert (tmp_path / "rel.db").exists()


@pytest.mark.parametrize("url", ["nosuch://x", "sqlite://", "redis://h/0?prefix={x}",
                                 "redis://h:notaport/0"])
def test_unusable_store_urls(url: str) -> None:
    with pytest.raises(ConfigError):
        Frontier.open(url)


def test_unreachable_redis_is_a_store_error() -> None:
    port = free_port()  # nobody listens there
    with pytest.raises(StoreError, match=f"127.0.0.1:{port}.*unreachable"):
        Frontier.open(f"redis://127.0.0.1:{port}/0", retry_deadline=0.3)


def test_unknown_and_bad_options() -> None:
    with pytest.raises(ConfigError, match="unknown option"):
        Frontier.open("memory://", no_such_option=1)
    with pytest.raises(ConfigError):
        Frontier.open("memory://", min_delay=-1)
    with pytest.raises(ConfigError):
        Frontier.open("memory://", min_delay=5, max_delay=1)
    with pytest.raises(ConfigError):
        Frontier.open("memory://", lease_ttl=0)
    with pytest.raises(ConfigError):
        Frontier.open("memory://", synchronous="full")   # sqlite-only option
    with pytest.raises(ConfigError, match="bloom_capacity must be an integer"):
        Frontier.open("memory://", bloom_capacity="lots")
    with pytest.raises(ConfigError):
        Frontier.open("memory://", concurrency=0)
    f = Frontier.open("memory://")
    with pytest.raises(ConfigError, match="unknown queue setting"):
        f.configure_queue("a.example", colour=3)
    f.close()


def test_sqlite_page_cache_option(tmp_path: Path) -> None:
    """``cache_mb`` sets the store connection's page cache (6 MiB by default), from a
    keyword or the URL; a size that is not a positive number of MiB is a ConfigError."""
    cases = [({}, "", -6144), ({"cache_mb": 16}, "", -16384), ({}, "?cache_mb=0.5", -512)]
    for i, (kw, query, want) in enumerate(cases):
        f = Frontier.open(f"sqlite:///{tmp_path}/c{i}.db{query}", **kw)
        conn = f.store._db.conn  # type: ignore[attr-defined]
        assert conn.execute("PRAGMA cache_size").fetchone()[0] == want
        f.close()
    for bad in (0, -1, "lots", float("nan"), 2**21):
        with pytest.raises(ConfigError, match="cache_mb"):
            Frontier.open(f"sqlite:///{tmp_path}/bad.db", cache_mb=bad)
    with pytest.raises(ConfigError, match="cache_mb"):
        Frontier.open(f"sqlite:///{tmp_path}/bad.db?cache_mb=big")
    with pytest.raises(ConfigError):
        Frontier.open("memory://", cache_mb=8)  # sqlite-only option


@pytest.mark.parametrize(("option", "value"), [
    ("lease_ttl", 0), ("lease_ttl", "abc"), ("lease_ttl", float("inf")),
    ("max_retries", -1), ("max_retries", 1.5), ("max_retries", "3"),
    ("retry_backoff", -1), ("retry_backoff", "abc"), ("retry_backoff_max", float("nan")),
    ("revisit_after", 0), ("revisit_after", "daily"),
    ("max_url_length", 0), ("max_url_length", "8k"),
    ("schemes", "https"), ("schemes", 5), ("schemes", ["https", 5]),
])
def test_frontier_options_are_checked_when_opened(option: str, value: object,
                                                  tmp_path: Path) -> None:
    """A bad value is a ConfigError naming the option at open, not a TypeError at the
    first failed fetch (retry_backoff="abc" used to be accepted)."""
    with pytest.raises(ConfigError, match=option):
        Frontier.open(f"sqlite:///{tmp_path}/f.db", **{option: value})


def test_bad_arguments_are_config_errors_that_change_nothing(tmp_path: Path) -> None:
    """Each of these used to raise a bare TypeError, or StoreCorrupt (next(2.5) reached
    SQLite as a float LIMIT), or was taken (block(until=nan), queues(-1): all)."""
    with Frontier.open(f"sqlite:///{tmp_path}/f.db", **FAST) as f:
        f.add(["https://a.example/1", "https://b.example/1"])
        (lease,) = f.next(1)
        calls: list[tuple[str, Callable[[], object]]] = [
            ("next", lambda: f.next("5")),  # type: ignore[arg-type]
            ("next", lambda: f.next(2.5)),  # type: ignore[arg-type]
            ("duration", lambda: f.done(lease, duration="slow")),  # type: ignore[arg-type]
            ("duration", lambda: f.done(lease, duration=-1.0)),
            ("after", lambda: f.retry(lease, after="later")),  # type: ignore[arg-type]
            ("after", lambda: f.retry(lease, after=float("nan"))),
            ("seconds", lambda: f.block("a.example", seconds="x")),  # type: ignore[arg-type]
            ("until", lambda: f.block("a.example", until=float("nan"))),
            ("per_queue", lambda: f.stats("x")),  # type: ignore[arg-type]
            ("limit", lambda: f.queues(-1)),
        ]
        for name, call in calls:
            with pytest.raises(ConfigError, match=name):
                call()
            s = f.stats()
            assert (s.queued, s.leased, s.done) == (1, 1, 0), name
        more: list[tuple[str, Callable[[], object]]] = [
            ("concurrency", lambda: f.configure_queue("a.example", concurrency=2.5)),
            ("concurrency",
             lambda: f.configure_queue("a.example", concurrency="2")),  # type: ignore[arg-type]
            ("min_delay", lambda: f.configure_queue("a.example", min_delay=True)),
            ("limit", lambda: f.dead("x")),  # type: ignore[arg-type]
            ("ids", lambda: f.requeue_dead("12")),  # type: ignore[arg-type]
            ("id", lambda: f.requeue_dead([1.5])),  # type: ignore[list-item]
            ("add", lambda: f.add(123)),  # type: ignore[arg-type]
        ]
        for name, call in more:
            with pytest.raises(ConfigError, match=name):
                call()
            s = f.stats()
            assert (s.queued, s.leased, s.done) == (1, 1, 0), name
        assert {q.key: q.leased for q in f.queues()}[lease.queue] == 1
        assert all(not q.settings for q in f.queues())  # no override was stored
        assert f.retry(lease, after=-5) == 1  # a time already past: now
        assert [q.key for q in f.queues(0)] == []


def test_schemes_may_be_any_iterable() -> None:
    with Frontier.open("memory://", schemes=(s for s in ["https"])) as f:
        r = f.add(["https://a.example/", "http://a.example/"])
        assert r.added == 1 and r.rejected[0].reason == "bad-scheme"


@pytest.mark.parametrize("name", ["lifo", "source_aware", "dedup_post", "strict_acks",
                                  "pause_gc"])
def test_on_off_options_take_only_booleans(name: str, tmp_path: Path) -> None:
    """A string or other value is refused, not read by its truth: "false" is truthy."""
    for bad in ("false", "maybe", 2, None, [True]):
        with pytest.raises(ConfigError, match=f"{name} must be true or false"):
            Frontier.open(f"sqlite:///{tmp_path}/f.db", **{name: bad})
    for good, want in ((True, True), (False, False), (1, True), (0, False)):
        with Frontier.open(f"sqlite:///{tmp_path}/{name}{good}.db", **{name: good}) as f:
            owner = {"lifo": f.store, "source_aware": f.fingerprint}.get(name, f)
            assert getattr(owner, name) is want


def test_garbage_file_is_a_clear_error(tmp_path: Path) -> None:
    p = tmp_path / "junk.db"
    p.write_bytes(b"this is not a database at all" * 200)
    with pytest.raises(StoreCorrupt):
        Frontier.open(f"sqlite:///{p}")
    assert p.read_bytes().startswith(b"this is not")  # and it was left untouched


def test_foreign_sqlite_file_is_refused(tmp_path: Path) -> None:
    p = tmp_path / "other.db"
    with sqlite3.connect(p) as c:
        c.execute("CREATE TABLE customers (id INTEGER)")
    with pytest.raises(StoreCorrupt, match="not a crawlq store"):
        Frontier.open(f"sqlite:///{p}")


def test_truncated_store_file(tmp_path: Path) -> None:
    p = tmp_path / "t.db"
    with Frontier.open(f"sqlite:///{p}", **FAST) as f:
        f.add([f"https://a{i}.example/{'x' * 200}" for i in range(3000)])
    data = p.read_bytes()
    p.write_bytes(data[: len(data) // 2])
    for suffix in ("-wal", "-shm"):
        Path(str(p) + suffix).unlink(missing_ok=True)
    with pytest.raises(StoreError), Frontier.open(f"sqlite:///{p}") as f:
        f.stats()
        f.next(3000)


def test_unopenable_sqlite_paths_say_why(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # SQLite itself says only "unable to open database file" in each case.
    with pytest.raises(StoreError, match="is a directory"):
        Frontier.open(f"sqlite:///{tmp_path}")
    missing = re.escape(f"directory {tmp_path}/no does not exist") + "$"
    with pytest.raises(StoreError, match=missing):
        Frontier.open(f"sqlite:///{tmp_path}/no/f.db")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(StoreError, match=r"relative to the current directory.*sqlite:////no/f\.db"):
        Frontier.open("sqlite:///no/f.db")
    assert not (tmp_path / "no").exists()


def test_too_old_sqlite_is_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import sqlite3  # (the module the store reads its version from)

    monkeypatch.setattr(sqlite3, "sqlite_version_info", (3, 31, 1))
    monkeypatch.setattr(sqlite3, "sqlite_version", "3.31.1")
    with pytest.raises(StoreError, match=r"needs SQLite >= 3\.35\.0.* uses 3\.31\.1"):
        Frontier.open(f"sqlite:///{tmp_path}/old.db")
    assert not (tmp_path / "old.db").exists()


def test_closed_store_raises(tmp_path: Path) -> None:
    for url in ("memory://", f"sqlite:///{tmp_path}/c.db"):
        f = Frontier.open(url)
        f.close()
        with pytest.raises(StoreError, match="closed"):
            f.add("https://a.example/")


def test_bloom_options_must_match_on_reopen(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/b.db"
    Frontier.open(url, bloom_capacity=1000).close()
    with pytest.raises(ConfigError, match="bloom"):
        Frontier.open(url)
    Frontier.open(url, bloom_capacity=1000).close()


def test_bloom_false_positive_rate_is_near_the_stated_one() -> None:
    with Frontier.open("memory://", bloom_capacity=20_000, bloom_error_rate=0.01) as f:
        assert f.add([f"https://a.example/{i}" for i in range(20_000)]).added > 19_700
        # A small probe, so that the probe itself barely fills the filter further.
        fresh = f.add([f"https://b.example/{i}" for i in range(1_000)])
        fp_rate = fresh.duplicates / 1_000
        assert fp_rate < 0.02


def test_custom_priority_rule(tmp_path: Path) -> None:
    def rule(req: object) -> int:
        return 10 if "/important/" in req.url else 0  # type: ignore[attr-defined]

    with Frontier.open("memory://", priority=rule, **FAST) as f:
        f.add(["https://a.example/x", "https://b.example/important/y"])
        assert f.next(1)[0].request.url == "https://b.example/important/y"


def test_a_failing_key_function_rejects_only_its_url() -> None:
    def key(url: str) -> str:
        if "boom" in url:
            raise RuntimeError("cannot key this")
        return url

    with Frontier.open("memory://", canonicalize=key) as f:
        r = f.add(["https://a.example/boom", "https://a.example/ok"])
        assert r.added == 1 and r.rejected[0].reason == "custom"
        assert f.stats().rejected == {"custom": 1}


class _GcWatchingStore(MemoryStore):
    """A memory store that notes whether the garbage collector ran during its calls."""

    def __init__(self) -> None:
        super().__init__(QueuePolicy(min_delay=0.0, max_delay=0.0, delay_factor=0.0))
        self.gc_seen: list[tuple[str, bool]] = []

    def add(self, entries: Any, now: float) -> list[int]:
        self.gc_seen.append(("add", gc.isenabled()))
        return super().add(entries, now)

    def lease(self, now: float, limit: int, ttl: float, queue: str | None = None) -> Any:
        self.gc_seen.append(("lease", gc.isenabled()))
        return super().lease(now, limit, ttl, queue)

    def release(self, acks: Any, now: float) -> list[bool]:
        self.gc_seen.append(("release", gc.isenabled()))
        if any(a[1] == ACK_DEAD for a in acks):
            raise RuntimeError("store failure")
        return super().release(acks, now)


@pytest.mark.parametrize("pause", [True, False])
def test_hot_calls_pause_the_garbage_collector(pause: bool) -> None:
    store = _GcWatchingStore()
    f = Frontier(store, pause_gc=pause, retry_policy=RetryPolicy(max_retries=0))
    assert gc.isenabled()
    try:
        f.add(["https://a.example/1", "https://b.example/2"])
        leases = f.next(2)
        f.done(leases[:1])
        f.retry(leases[1])  # retry() goes through done(): paused once, restored once
        assert gc.isenabled()
        assert store.gc_seen == [("add", not pause), ("lease", not pause),
                                 ("release", not pause), ("release", not pause)]
        # One lease done allocates next to nothing: answered without the pause.
        f.add("https://c.example/5")
        f.done(f.next(1)[0])
        assert store.gc_seen[-1] == ("release", True)
        # An exception out of the store still leaves the collector on.
        f.add("https://a.example/3")
        (lease,) = f.next(1)
        with pytest.raises(RuntimeError, match="store failure"):
            f.done(lease, Outcome.FAILED)  # no retries left: dead
        assert gc.isenabled()
        # A collector the caller turned off stays off.
        gc.disable()
        f.add("https://a.example/4")
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_bloom_and_revisit_do_not_mix() -> None:
    with pytest.raises(ConfigError, match="revisit_after"):
        Frontier.open("memory://", bloom_capacity=1000, revisit_after=60)


def test_queue_by_registered_domain() -> None:
    with Frontier.open("memory://", queue_by="domain", **FAST) as f:
        f.add(["https://news.example.co.uk/a", "https://shop.example.co.uk/b",
               "https://other.org/"])
        assert sorted(q.key for q in f.queues()) == ["example.co.uk", "other.org"]
        assert f.queue_of("https://x.y.example.co.uk/") == "example.co.uk"
        assert f.queue_of("http://127.0.0.1:8080/") == "127.0.0.1"
        assert f.queue_of("http://[::1]:8080/") == "[::1]:8080"


@pytest.mark.parametrize("url", ["memory://", "sqlite"])
def test_malformed_requests_are_rejected_one_by_one(url: str, tmp_path: Path) -> None:

    store = f"sqlite:///{tmp_path}/m.db" if url == "sqlite" else url
    bad = [
        Request("https://a.example/1", priority=2.5),           # type: ignore[arg-type]
        Request("https://a.example/2", priority=2**40),
        Request("https://a.example/3", retries=70_000),
        Request("https://a.example/4", body="text, not bytes"),  # type: ignore[arg-type]
        Request("https://a.example/5", not_before="tomorrow"),   # type: ignore[arg-type]
        Request("https://a.example/6", meta={"x": object()}),
        Request(12345),                                          # type: ignore[arg-type]
        None,
    ]
    with Frontier.open(store, **FAST) as f:
        r = f.add([*bad, "https://a.example/ok"])  # type: ignore[list-item]
        assert r.added == 1 and r.added_flags[-1]
        reasons = [x.reason for x in r.rejected]
        assert reasons == ["bad-priority", "bad-priority"] + ["invalid-request"] * 6
        assert all(x.detail for x in r.rejected)
        assert f.stats().rejected == {"bad-priority": 2, "invalid-request": 6}


def test_canonicalize_off_keeps_urls_but_still_validates() -> None:
    with Frontier.open("memory://", canonicalize=False, **FAST) as f:
        r = f.add(["https://A.example/x?b=1&a=2", "https://a.example/x?a=2&b=1", "ftp://x/"])
        assert r.added == 2 and [x.reason for x in r.rejected] == ["bad-scheme"]
