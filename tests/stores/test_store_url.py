"""Store URLs, parsed in one place (crawlq.stores.StoreURL) for every reader."""

from __future__ import annotations

import pytest

from crawlq.errors import ConfigError
from crawlq.stores import StoreURL, sqlite_file


def test_the_kinds_of_store_url() -> None:
    assert StoreURL.parse("memory://").kind == "memory"
    assert StoreURL.parse("SQLite:///crawl.db").kind == "sqlite"
    for url in ("redis://h:6379/0", "rediss://h/1", "unix:///tmp/r.sock?db=2"):
        assert StoreURL.parse(url).kind == "redis"
    assert StoreURL.parse("mystore://x").kind == "mystore"  # (a store a plugin registers)


def test_sqlite_paths_take_exactly_the_two_sqlalchemy_forms() -> None:
    assert StoreURL.parse("sqlite:///crawl.db").sqlite_path == "crawl.db"
    assert StoreURL.parse("sqlite:////var/c.db?synchronous=full").sqlite_path == "/var/c.db"
    assert sqlite_file("redis://h/0") is None
    for bad in ("sqlite://crawl.db", "sqlite:/crawl.db", "sqlite://host/c.db", "sqlite:///"):
        with pytest.raises(ConfigError):
            _ = StoreURL.parse(bad).sqlite_path


def test_query_options_and_a_changed_query() -> None:
    url = StoreURL.parse("redis://:pw@h:7000/3?prefix=a&cluster=1&prefix=b&health=5")
    assert url.option("prefix") == "b" and url.option("cluster") == "1"
    assert url.option("missing", "d") == "d"
    assert url.hostname == "h" and url.port == 7000 and url.password == "pw"
    assert url.with_query(drop=("prefix", "cluster"), add=(("prefix", "c"),)) == \
        "redis://:pw@h:7000/3?health=5&prefix=c"


def test_what_is_no_store_url_is_a_config_error() -> None:
    for bad in (None, 42, "redis://[zz/0"):
        with pytest.raises(ConfigError):
            StoreURL.parse(bad)
    with pytest.raises(ConfigError, match="port"):
        _ = StoreURL.parse("redis://h:99999/0").port
