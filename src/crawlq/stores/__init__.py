"""Stores: where frontier state lives. ``open_store(url)`` picks one by URL scheme."""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qsl, urlsplit

from ..errors import ConfigError
from .base import QueuePolicy, Store, flag
from .bloom import BloomShape

POLICY_OPTIONS = ("concurrency", "min_delay", "max_delay", "delay_factor", "max_queue_urls",
                  "session_budget", "session_rest")
STORE_OPTIONS = frozenset(
    (*POLICY_OPTIONS, "lifo", "bloom_capacity", "bloom_error_rate", "synchronous",
     "busy_timeout", "cache_mb", "prefix", "retry_deadline")
)
"""Keyword options of ``Frontier.open`` that configure the store."""


def open_store(url: str, **options: Any) -> Store:
    """Open the store named by ``url`` with the given store options."""
    policy = QueuePolicy(**{k: options.pop(k) for k in POLICY_OPTIONS if k in options})
    lifo = flag("lifo", options.pop("lifo", False))
    capacity = options.pop("bloom_capacity", None)
    error_rate = options.pop("bloom_error_rate", 0.001)
    bloom = BloomShape(int(capacity), float(error_rate)) if capacity else None
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme == "memory":
        _no_more(options, scheme)
        from .memory import MemoryStore

        return MemoryStore(policy, lifo=lifo, bloom=bloom)
    if scheme == "sqlite":
        path = url[len("sqlite://"):].split("?", 1)[0]
        if path.startswith("/"):
            path = path[1:]  # sqlite:///rel.db -> rel.db ; sqlite:////abs.db -> /abs.db
        if not path:
            raise ConfigError(f"sqlite URL needs a file path: {url!r} "
                              "(e.g. sqlite:///crawl.db)")
        query = dict(parse_qsl(parts.query))
        from .sqlite import DEFAULT_CACHE_MB, SQLiteStore

        synchronous = options.pop("synchronous", query.get("synchronous", "normal"))
        busy = float(options.pop("busy_timeout", query.get("busy_timeout", 60.0)))
        cache_mb = options.pop("cache_mb", query.get("cache_mb", DEFAULT_CACHE_MB))
        try:
            cache_mb = float(cache_mb)
        except (TypeError, ValueError):
            raise ConfigError(f"cache_mb must be a number of MiB, not {cache_mb!r}") from None
        _no_more(options, scheme)
        return SQLiteStore(path, policy, lifo=lifo, bloom=bloom, synchronous=synchronous,
                           busy_timeout=busy, cache_mb=cache_mb)
    if scheme in ("redis", "rediss", "unix"):
        from .redis_store import RedisStore

        deadline = options.pop("retry_deadline", None)  # None: the URL's, or 30 s
        prefix = options.pop("prefix", None)
        _no_more(options, scheme)
        return RedisStore(url, policy, lifo=lifo, bloom=bloom, prefix=prefix,
                          retry_deadline=None if deadline is None else float(deadline))
    raise ConfigError(f"unknown store URL {url!r}: use memory://, sqlite:///path.db or "
                      "redis://host:port/db?prefix=name")


def _no_more(options: dict[str, Any], scheme: str) -> None:
    if options:
        raise ConfigError(f"option(s) {sorted(options)} do not apply to {scheme}:// stores")


__all__ = ["STORE_OPTIONS", "BloomShape", "QueuePolicy", "Store", "open_store"]
