"""Every store passes the one contract suite (crawlq.testing), durable ones also reopened."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from crawlq import Frontier
from crawlq.stores import memory as memory_module
from crawlq.stores import rules, sqlite_levels, sqlite_rows, sqlite_values
from crawlq.stores import sqlite as sqlite_module
from crawlq.testing import Clock, FrontierContract, MemoryOnlyContract
from crawlq.testing.redis_server import LocalCluster, LocalRedis
from crawlq.testing.through_async import through_async


class TestMemoryStore(MemoryOnlyContract):
    def open_frontier(self, clock: Clock, path: Path, **options: Any) -> Frontier:
        return Frontier.open("memory://", clock=clock, **options)


class TestMemoryStorePurePython(MemoryOnlyContract):
    """The memory store's contract on Python alone: the C extension switched off (the
    seen-set, BLAKE2b), the frontier's entries and payloads and the store's loops
    (entries, payload, memory_queues, rules, compiled by mypyc) run from their .py source: what
    runs where nothing could be compiled."""

    @pytest.fixture(autouse=True)
    def _pure(self, monkeypatch: pytest.MonkeyPatch,
              memory_store_as_python: Callable[[], None], frontier_as_python: None) -> None:
        memory_store_as_python()
        monkeypatch.setenv("CRAWLQ_PURE_PYTHON", "1")

    def open_frontier(self, clock: Clock, path: Path, **options: Any) -> Frontier:
        f = Frontier.open("memory://", clock=clock, **options)
        assert type(f._entries).__module__.endswith("_as_python")
        book = f.store._book  # type: ignore[attr-defined]
        assert type(book).__module__.endswith("_as_python")
        assert vars(memory_module)["label"].__module__.endswith("_as_python")
        assert type(book.seen) is set
        return f


class TestSQLiteStore(FrontierContract):
    def open_frontier(self, clock: Clock, path: Path, **options: Any) -> Frontier:
        path.mkdir(parents=True, exist_ok=True)
        return Frontier.open(f"sqlite:///{path}/frontier.db", clock=clock, **options)


class TestSQLiteStorePurePython(TestSQLiteStore):
    """The SQLite store's contract on Python alone: the C extension switched off, the
    frontier's entries and payloads and the store's per-row rules (entries, payload,
    sqlite_rows, compiled by mypyc) run from their .py source."""

    @pytest.fixture(autouse=True)
    def _pure(self, monkeypatch: pytest.MonkeyPatch, sqlite_rows_as_python: ModuleType,
              rules_as_python: ModuleType, frontier_as_python: None) -> None:
        monkeypatch.setenv("CRAWLQ_PURE_PYTHON", "1")
        for source, python in ((sqlite_rows, sqlite_rows_as_python), (rules, rules_as_python)):
            for name, value in list(vars(sqlite_module).items()):
                if getattr(source, name, None) is value and not isinstance(value, int):
                    monkeypatch.setattr(sqlite_module, name, getattr(python, name))
        monkeypatch.setattr(sqlite_levels, "SeenMarks", sqlite_rows_as_python.SeenMarks)

    def open_frontier(self, clock: Clock, path: Path, **options: Any) -> Frontier:
        f = super().open_frontier(clock, path, **options)
        assert type(f._entries).__module__.endswith("_as_python")
        assert sqlite_module.settle.__module__.endswith("_as_python")  # type: ignore[attr-defined]
        assert sqlite_module.lease_room.__module__.endswith("_as_python")  # type: ignore[attr-defined]
        assert sqlite_module.take_rows.__module__.endswith("_as_python")  # type: ignore[attr-defined]
        return f


class TestSQLiteStoreTinyLevels(TestSQLiteStore):
    """The contract with level 0 merged every 2 rows: every test's fingerprints and queued
    entries move through all three levels of the SQLite store's seen-set and queues
    (see crawlq.stores.sqlite_schema), and its named values from the log into their
    table at every write (crawlq.stores.sqlite_values)."""

    @pytest.fixture(autouse=True)
    def _tiny(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setattr(sqlite_levels, "L0_ROWS", 2)
        monkeypatch.setattr(sqlite_values, "LOG_ROWS", 2)
        monkeypatch.setattr(sqlite_values, "MAX_LOG_ROWS", 2)


class TestRedisStore(FrontierContract):
    """The contract against a real redis-server; reopening is a new client and connection."""

    @pytest.fixture(autouse=True)
    def _server(self, redis_server: LocalRedis) -> None:
        self.url = redis_server.url

    def open_frontier(self, clock: Clock, path: Path, **options: Any) -> Frontier:
        # One prefix per test folder: tests share the server, never their keys.
        prefix = "t" + hashlib.blake2b(str(path).encode(), digest_size=8).hexdigest()
        return Frontier.open(f"{self.url}?prefix={prefix}", clock=clock, **options)


class TestRedisClusterStore(FrontierContract):
    """The contract on a 3-node Redis Cluster: a crawl's keys share one hash slot."""

    @pytest.fixture(autouse=True)
    def _server(self, redis_cluster: LocalCluster) -> None:
        self.url = redis_cluster.url

    def open_frontier(self, clock: Clock, path: Path, **options: Any) -> Frontier:
        prefix = "c" + hashlib.blake2b(str(path).encode(), digest_size=8).hexdigest()
        return Frontier.open(f"{self.url}&prefix={prefix}", clock=clock, **options)


class TestRedisShardedStore(FrontierContract):
    """The contract on one crawl cut into 4 shards (hash tags) on one redis-server."""

    @pytest.fixture(autouse=True)
    def _server(self, redis_server: LocalRedis) -> None:
        self.url = redis_server.url

    def open_frontier(self, clock: Clock, path: Path, **options: Any) -> Frontier:
        prefix = "s" + hashlib.blake2b(str(path).encode(), digest_size=8).hexdigest()
        return Frontier.open(f"{self.url}?prefix={prefix}&shards=4", clock=clock, **options)


class TestRedisClusterShardedStore(FrontierContract):
    """The contract on one crawl cut into 8 shards over a 3-node Redis Cluster."""

    @pytest.fixture(autouse=True)
    def _server(self, redis_cluster: LocalCluster) -> None:
        self.url = redis_cluster.url

    def open_frontier(self, clock: Clock, path: Path, **options: Any) -> Frontier:
        prefix = "k" + hashlib.blake2b(str(path).encode(), digest_size=8).hexdigest()
        return Frontier.open(f"{self.url}&prefix={prefix}&shards=8", clock=clock, **options)


# -- the same contract through the asyncio API ----------------------------------------


class TestMemoryStoreAsync(TestMemoryStore):
    """The contract through AsyncFrontier on memory: its calls on the event loop."""

    def open_frontier(self, clock: Clock, path: Path, **options: Any) -> Frontier:
        return through_async(super().open_frontier(clock, path, **options))


class TestMemoryStoreAsyncThreads(TestMemoryStore):
    """The contract through AsyncFrontier with memory's calls on worker threads, as a
    store that waits on I/O has them."""

    def open_frontier(self, clock: Clock, path: Path, **options: Any) -> Frontier:
        return through_async(super().open_frontier(clock, path, **options), threads=2)


class TestSQLiteStoreAsync(TestSQLiteStore):
    """The contract through AsyncFrontier on SQLite (its calls on the loop)."""

    def open_frontier(self, clock: Clock, path: Path, **options: Any) -> Frontier:
        return through_async(super().open_frontier(clock, path, **options))


class TestSQLiteStoreAsyncThreads(TestSQLiteStore):
    """The contract through AsyncFrontier with SQLite's calls on worker threads (as with
    synchronous=full, or threads=N)."""

    def open_frontier(self, clock: Clock, path: Path, **options: Any) -> Frontier:
        return through_async(super().open_frontier(clock, path, **options), threads=2)


class TestRedisStoreAsync(TestRedisStore):
    """The contract through AsyncFrontier on a real redis-server."""

    def open_frontier(self, clock: Clock, path: Path, **options: Any) -> Frontier:
        return through_async(super().open_frontier(clock, path, **options))
