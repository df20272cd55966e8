"""Shared fixtures: a real redis-server for the whole session (never a fake, never skipped)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

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
