"""A pytest plugin that runs Scrapy's own test suite with crawlq's scheduler.

Run from an unpacked Scrapy sdist (its ``tests`` package and ``conftest.py``)::

    pytest -p crawlq.contrib.scrapy.pytest_plugin --crawlq-store=sqlite tests/test_crawl.py

It makes ``crawlq.contrib.scrapy.Scheduler`` Scrapy's default ``SCHEDULER`` (so every
crawler a test builds uses it, unless the test sets its own), and picks the store:

- ``default``: no CRAWLQ_STORE, as a user who sets only SCHEDULER gets it;
- ``sqlite``: a SQLite file of its own for each test;
- ``redis``: a real ``redis-server`` started for the session on a free loopback port,
  with a key prefix of its own for each test.

With a store, every crawl starts from an empty one (``CRAWLQ_FLUSH_ON_START``): Scrapy's
tests run several crawls in one test and expect each to start afresh.
"""

from __future__ import annotations

import itertools
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

SCHEDULER = "crawlq.contrib.scrapy.Scheduler"
_KINDS = ("default", "sqlite", "redis")
_numbers = itertools.count()


def pytest_addoption(parser: pytest.Parser) -> None:
    """``--crawlq-store``: which store the scheduler uses."""
    parser.addoption("--crawlq-store", default="default", choices=_KINDS,
                     help="crawlq store for Scrapy's tests: default, sqlite or redis")


def pytest_configure(config: pytest.Config) -> None:
    """Make crawlq's scheduler Scrapy's default; start redis-server when asked."""
    from scrapy.settings import default_settings

    default_settings.SCHEDULER = SCHEDULER
    if config.getoption("--crawlq-store") == "redis":
        from ...testing.redis_server import LocalRedis

        folder = Path(tempfile.mkdtemp(prefix="crawlq-scrapy-redis-"))
        server = LocalRedis(folder)
        server.start()
        config.stash[_REDIS] = server


def pytest_unconfigure(config: pytest.Config) -> None:
    """Stop the redis-server this plugin started."""
    server = config.stash.get(_REDIS, None)
    if server is not None:
        server.stop()


def pytest_report_header(config: pytest.Config) -> str:
    """Say in the report which scheduler and store ran."""
    return f"scheduler: {SCHEDULER} (store: {config.getoption('--crawlq-store')})"


_REDIS = pytest.StashKey[Any]()


@pytest.fixture(autouse=True)
def _crawlq_store(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory,
                  monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A store of its own for each test (none with ``--crawlq-store=default``)."""
    from scrapy.settings import default_settings

    kind = request.config.getoption("--crawlq-store")
    n = next(_numbers)
    if kind == "sqlite":
        folder = tmp_path_factory.mktemp("crawlq")
        store = f"sqlite:///{folder}/crawl-{n}.db"
    elif kind == "redis":
        store = f"{request.config.stash[_REDIS].url}?prefix=scrapytest{n}"
    else:
        yield
        return
    monkeypatch.setattr(default_settings, "CRAWLQ_STORE", store, raising=False)
    monkeypatch.setattr(default_settings, "CRAWLQ_FLUSH_ON_START", True, raising=False)
    yield
