"""Shared fixtures: a real redis-server for the whole session (never a fake, never skipped)."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

from crawlq.redislocal import LocalCluster, LocalRedis


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


@pytest.fixture(scope="session")
def sqlite_rows_as_python() -> ModuleType:
    """crawlq.stores.sqlite_rows run from its .py source, as Python: setup.py compiles
    the module with mypyc, and the compiled one shadows the source on import."""
    from crawlq.stores import sqlite_rows

    source = Path(sqlite_rows.__file__ or "").with_name("sqlite_rows.py")
    spec = importlib.util.spec_from_file_location("crawlq.stores.sqlite_rows_as_python", source)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module
