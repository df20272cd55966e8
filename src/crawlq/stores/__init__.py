"""Stores: where frontier state lives. ``open_store(url)`` picks one by URL scheme."""

from __future__ import annotations

import os
from typing import Any

from ..errors import ConfigError, StoreError
from .base import MAX_REDELIVERIES, Destroyable, QueuePolicy, Store, as_count, flag, lacking
from .bloom import BloomShape
from .sqlite_group import SQLITE_SUFFIXES
from .url import REDIS_SCHEMES, StoreURL

POLICY_OPTIONS = ("concurrency", "min_delay", "max_delay", "delay_factor", "max_queue_urls",
                  "session_budget", "session_rest", "domain_concurrency", "max_domain_urls",
                  "max_domain_queues")
STORE_OPTIONS = frozenset(
    (*POLICY_OPTIONS, "lifo", "max_redeliveries", "bloom_capacity", "bloom_error_rate",
     "create", "synchronous", "busy_timeout", "group_commit", "cache_mb", "prefix",
     "retry_deadline", "shards")
)
"""Keyword options of ``Frontier.open`` that configure the store."""


def open_store(url: str, **options: Any) -> Store:
    """Open the store named by ``url`` with the given store options."""
    policy = QueuePolicy.of({k: options.pop(k) for k in POLICY_OPTIONS if k in options})
    lifo = flag("lifo", options.pop("lifo", False))
    # create=False: open a crawl that exists, never make an empty one (commands that
    # only look would otherwise report zeros for a mistyped name)
    create = flag("create", options.pop("create", True))
    redeliveries = as_count("max_redeliveries",
                            options.pop("max_redeliveries", MAX_REDELIVERIES))
    capacity = options.pop("bloom_capacity", None)
    error_rate = options.pop("bloom_error_rate", 0.001)
    bloom = None
    if capacity:
        if isinstance(capacity, float) and capacity.is_integer():
            capacity = int(capacity)  # (-o bloom_capacity=1e8 reads as a float)
        if not isinstance(error_rate, (int, float)) or isinstance(error_rate, bool):
            raise ConfigError(f"bloom_error_rate must be a number, not {error_rate!r}")
        bloom = BloomShape(as_count("bloom_capacity", capacity, 1), float(error_rate))
    parsed = StoreURL.parse(url)
    scheme = parsed.scheme
    if scheme == "memory":
        _no_more(options, scheme)
        from .memory import MemoryStore

        try:
            return MemoryStore(policy, lifo=lifo, bloom=bloom,
                               max_redeliveries=redeliveries)
        except MemoryError:
            assert bloom is not None
            raise ConfigError(f"a Bloom filter for {bloom.capacity:,} URLs takes "
                              f"{bloom.size_bytes:,} bytes: more memory than there is") from None
    if scheme == "sqlite":
        path = parsed.sqlite_path
        if not create and not os.path.exists(path):
            raise StoreError(f"no crawl at {url}: {path} does not exist")
        from .sqlite import DEFAULT_CACHE_MB, SQLiteStore
        from .sqlite_group import GROUP_COMMIT

        synchronous = options.pop("synchronous", parsed.option("synchronous", "normal"))
        busy = float(options.pop("busy_timeout", parsed.option("busy_timeout", "60")))
        cache_mb = options.pop("cache_mb", parsed.option("cache_mb", str(DEFAULT_CACHE_MB)))
        group = options.pop("group_commit", parsed.option("group_commit", str(GROUP_COMMIT)))
        try:
            group = float(group)
        except (TypeError, ValueError):
            raise ConfigError(f"group_commit must be a number of seconds, not {group!r}"
                              ) from None
        if not 0 <= group <= 1:
            raise ConfigError(f"group_commit is at most 1 s (0: off), not {group!r}")
        try:
            cache_mb = float(cache_mb)
        except (TypeError, ValueError):
            raise ConfigError(f"cache_mb must be a number of MiB, not {cache_mb!r}") from None
        _no_more(options, scheme)
        return SQLiteStore(path, policy, lifo=lifo, bloom=bloom, synchronous=synchronous,
                           busy_timeout=busy, cache_mb=cache_mb,
                           max_redeliveries=redeliveries, group_commit=group)
    if parsed.kind == "redis":
        from .redis_store import RedisStore

        deadline = options.pop("retry_deadline", None)  # None: the URL's, or 30 s
        prefix = options.pop("prefix", None)
        shards = options.pop("shards", None)
        shards = (parsed.count_option("shards", None, 1) if shards is None
                  else as_count("shards", shards, 1))
        _no_more(options, scheme)
        if shards is not None:
            from .redis_shards import ShardedRedisStore

            return ShardedRedisStore(
                url, policy, shards=shards, lifo=lifo,
                bloom=bloom, prefix=prefix,
                retry_deadline=None if deadline is None else float(deadline),
                max_redeliveries=redeliveries, create=create)
        return RedisStore(url, policy, lifo=lifo, bloom=bloom, prefix=prefix,
                          retry_deadline=None if deadline is None else float(deadline),
                          max_redeliveries=redeliveries, create=create)
    factory = _registered(scheme)
    if factory is not None:
        store = factory(url, policy=policy, lifo=lifo, bloom=bloom,
                        max_redeliveries=redeliveries, **options)
        if not isinstance(store, Store):  # (a Frontier calls every member of Store)
            raise ConfigError(f"the store registered for {scheme}:// is no crawlq Store: "
                              f"{type(store).__name__} lacks {', '.join(lacking(store))} "
                              "(see crawlq.stores.base.Store)")
        return store
    raise ConfigError(f"unknown store URL {url!r}: use memory://, sqlite:///path.db, "
                      "redis://host:port/db?prefix=name or the scheme of a store installed "
                      f"under the {ENTRY_POINTS!r} entry points")


ENTRY_POINTS = "crawlq.stores"
"""The entry point group where other packages register stores: the name is the URL
scheme, the object a callable ``(url, *, policy, lifo, bloom, max_redeliveries,
**options) -> Store`` (options: the other store options given to ``Frontier.open``)."""


def _registered(scheme: str) -> Any:
    """The store factory another package registered for ``scheme``, or None."""
    from importlib.metadata import entry_points

    for ep in entry_points(group=ENTRY_POINTS):
        if ep.name == scheme:
            try:
                return ep.load()
            except Exception as exc:  # a broken plugin: say which
                raise ConfigError(f"the store registered for {scheme}:// ({ep.value}) "
                                  f"cannot be loaded: {exc!r}") from None
    return None


def destroy_store(store: Store) -> None:
    """Delete all state of an open store and close it: a Redis store's keys under its
    prefix, a SQLite store's files (``SQLITE_SUFFIXES``); a memory store (no
    :class:`~crawlq.stores.base.Destroyable`: its state goes with it) is just closed."""
    try:
        if isinstance(store, Destroyable):
            store.destroy()
    finally:
        store.close()


def sqlite_file(url: str) -> str | None:
    """The file a ``sqlite://`` store URL names; None for other stores. Raises
    :class:`ConfigError` for a malformed one."""
    parsed = StoreURL.parse(url)
    return parsed.sqlite_path if parsed.scheme == "sqlite" else None


def _no_more(options: dict[str, Any], scheme: str) -> None:
    if options:
        raise ConfigError(f"option(s) {sorted(options)} do not apply to {scheme}:// stores")


__all__ = ["ENTRY_POINTS", "REDIS_SCHEMES", "SQLITE_SUFFIXES", "STORE_OPTIONS", "BloomShape",
           "QueuePolicy", "Store", "StoreURL", "destroy_store", "open_store", "sqlite_file"]
