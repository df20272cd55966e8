"""Shared fixtures: a real redis-server for the whole session (never a fake, never skipped)."""

from __future__ import annotations

import importlib
import importlib.util
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType

import pytest

from crawlq.testing.redis_server import LocalCluster, LocalRedis


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalRedis]:
    """One redis-server on a free loopback port; crawls keep apart by key prefix.

    If redis-server is missing this fixture errors, and so do the tests that use it:
    the Redis store's tests fail loudly instead of skipping.
    """
    server = LocalRedis(Path(tmp_path_factory.mktemp("redis")))
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def redis_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """A real 3-node Redis Cluster (redis-server --cluster-enabled, redis-cli --cluster
    create) on loopback, for the whole session."""
    cluster = LocalCluster(Path(tmp_path_factory.mktemp("redis-cluster")), masters=3)
    cluster.start()
    yield cluster
    cluster.stop()


def as_python(name: str) -> ModuleType:
    """The crawlq module ``name`` run from its .py source, as Python: setup.py compiles
    some modules with mypyc, and a compiled module shadows its source on import."""
    module = importlib.import_module(name)
    source = Path(module.__file__ or "").with_name(name.rpartition(".")[2] + ".py")
    spec = importlib.util.spec_from_file_location(name + "_as_python", source)
    assert spec is not None and spec.loader is not None
    python = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = python
    spec.loader.exec_module(python)
    return python


@pytest.fixture(scope="session")
def payload_as_python() -> ModuleType:
    """crawlq.payload run from its .py source (raising the compiled module's
    PayloadError, which its callers catch)."""
    from crawlq import payload

    python = as_python("crawlq.payload")
    python.PayloadError = payload.PayloadError  # type: ignore[attr-defined]
    return python


@pytest.fixture(scope="session")
def entries_as_python(payload_as_python: ModuleType) -> ModuleType:
    """crawlq.entries run from its .py source, with payload's .py source."""
    python = as_python("crawlq.entries")
    for name in ("encode", "decode", "PayloadError"):
        setattr(python, name, getattr(payload_as_python, name))
    return python


@pytest.fixture
def frontier_as_python(monkeypatch: pytest.MonkeyPatch, entries_as_python: ModuleType,
                       payload_as_python: ModuleType) -> None:
    """Until the test ends, frontiers make entries and leases (entries) and payloads
    (payload) from the .py sources, and fingerprints with hashlib's BLAKE2b: what runs
    where nothing could be compiled."""
    import hashlib

    from crawlq import frontier, models
    from crawlq.policies import fingerprint

    monkeypatch.setattr(frontier, "EntryMaker", entries_as_python.EntryMaker)
    monkeypatch.setattr(frontier, "leases_of", entries_as_python.leases)
    monkeypatch.setattr(models, "_encode", payload_as_python.encode)
    monkeypatch.setattr(models, "_decode", payload_as_python.decode)
    monkeypatch.setattr(fingerprint, "_blake2b_128",
                        lambda data: hashlib.blake2b(data, digest_size=16).digest())


@pytest.fixture(scope="session")
def sqlite_rows_as_python(rules_as_python: ModuleType) -> ModuleType:
    """crawlq.stores.sqlite_rows run from its .py source, its rules too."""
    return with_python_rules(as_python("crawlq.stores.sqlite_rows"), rules_as_python)


@pytest.fixture(scope="session")
def rules_as_python() -> ModuleType:
    """crawlq.stores.rules run from its .py source."""
    return as_python("crawlq.stores.rules")


def with_python_rules(module: ModuleType, rules_python: ModuleType) -> ModuleType:
    """``module`` (a module run as Python) calling the queue rules as Python too."""
    from crawlq.stores import rules

    for name, value in list(vars(module).items()):
        if getattr(rules, name, None) is value and not isinstance(value, int):
            setattr(module, name, getattr(rules_python, name))
    return module


@pytest.fixture(scope="session")
def memory_queues_as_python(rules_as_python: ModuleType) -> ModuleType:
    """crawlq.stores.memory_queues run from its .py source, its rules too."""
    return with_python_rules(as_python("crawlq.stores.memory_queues"), rules_as_python)


@pytest.fixture
def memory_store_as_python(monkeypatch: pytest.MonkeyPatch, rules_as_python: ModuleType,
                           memory_queues_as_python: ModuleType) -> Callable[[], None]:
    """A switch: once called, memory stores made after it run their compiled parts
    (memory_queues, rules) as Python, until the test ends."""
    from crawlq.stores import memory, memory_queues, rules

    def switch() -> None:
        for source, python in ((memory_queues, memory_queues_as_python),
                               (rules, rules_as_python)):
            for name, value in list(vars(memory).items()):
                if getattr(source, name, None) is value and not isinstance(value, int):
                    monkeypatch.setattr(memory, name, getattr(python, name))

    return switch
