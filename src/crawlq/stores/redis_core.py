"""The Redis store's foundation: the client, the scripts and how calls reach the server
(retried with backoff until ``retry_deadline``, cut into pipelined chunks). The calls
are in :mod:`.redis_admin` (looking and steering), :mod:`.redis_dump` (dump and load)
and :mod:`.redis_store` (a crawl's calls), each a subclass of the one before."""

from __future__ import annotations

import contextlib
import math
import os
import struct
import time
from collections.abc import Callable
from importlib import resources
from typing import Any, TypeVar

import msgpack

from ..errors import ConfigError, StoreError, StoreFull
from .base import (
    MAX_REDELIVERIES,
    DeadEntry,
    QueuePolicy,
)
from .bloom import BloomShape
from .url import StoreURL

_EXPIRES = struct.Struct("<d")
"""A kept value's expiry, before its bytes (see RedisStore.put_values)."""



def _kv(data: bytes, expires: float | None) -> bytes:
    """A kept value as stored in ``{prefix}:kv``: its expiry, then its bytes."""
    return _EXPIRES.pack(math.inf if expires is None else expires) + data


CHUNK = 2000
"""Entries per script call: big enough to amortize a call, small enough (a few ms) not
to stall other clients of the server."""

_QREC = struct.Struct("<9d")  # a queue's record, P:qm:<key> (see common.lua)
_SCRIPTS = ("add", "lease", "release", "ready_at", "queue_op", "maintain", "renew")
_T = TypeVar("_T")
_OURS = ("prefix", "cluster", "retry_deadline")
"""The Redis store URL's query options that are crawlq's (the others go to redis-py)."""
_COUNTERS = ("seen", "added", "done", "failed", "retried", "redelivered", "late_acks",
             "duplicates")


def _lua(name: str) -> str:
    pkg = resources.files("crawlq.stores") / "lua"
    return (pkg / "common.lua").read_text("utf-8") + "\n" + (pkg / f"{name}.lua").read_text(
        "utf-8")


class RedisCore:
    """The client, scripts and call plumbing of :class:`~crawlq.stores.redis_store.RedisStore`.

    ``url`` is a redis-py URL (``redis://``, ``rediss://``, ``unix://``) with optional
    crawlq query arguments ``prefix`` (default ``crawlq``), ``cluster`` (``1`` for a
    Redis Cluster) and ``retry_deadline`` (the keyword argument wins). A password comes
    from the URL or ``$CRAWLQ_REDIS_PASSWORD``.
    """

    def __init__(
        self,
        url: str,
        policy: QueuePolicy | None = None,
        *,
        lifo: bool = False,
        bloom: BloomShape | None = None,
        prefix: str | None = None,
        retry_deadline: float | None = None,
        max_redeliveries: int = MAX_REDELIVERIES,
        create: bool = True,
    ) -> None:
        try:
            import redis
        except ImportError:  # pragma: no cover - depends on the installation
            raise ConfigError("the Redis store needs redis-py: pip install 'crawlq[redis]'"
                              ) from None
        self._redis = redis
        self.policy = policy or QueuePolicy()
        self.lifo = lifo
        self.max_redeliveries = max_redeliveries
        self.bloom = bloom
        parsed = StoreURL.parse(url)
        deadline: float | str = (retry_deadline if retry_deadline is not None
                                 else parsed.option("retry_deadline", "30") or "")
        try:
            self.retry_deadline = float(deadline)
        except ValueError:
            raise ConfigError(f"retry_deadline must be a number of seconds, not "
                              f"{deadline!r}") from None
        prefix = prefix or parsed.option("prefix") or "crawlq"
        if not prefix or any(c in prefix for c in "{}\r\n "):
            raise ConfigError(f"bad Redis key prefix {prefix!r}: no braces, spaces or "
                              "line breaks")
        self.prefix = prefix
        self._where = f"{parsed.hostname or parsed.path}:{parsed.port or ''}"
        plain = parsed.with_query(drop=_OURS)  # (the rest is redis-py's)
        kwargs: dict[str, Any] = {"socket_connect_timeout": 10.0, "socket_timeout": 120.0}
        if parsed.password is None and os.environ.get("CRAWLQ_REDIS_PASSWORD"):
            kwargs["password"] = os.environ["CRAWLQ_REDIS_PASSWORD"]
        cluster = (parsed.option("cluster") or "").lower() in ("1", "true", "yes")
        self.cluster = cluster
        try:
            if cluster:
                from redis.cluster import RedisCluster

                self._client: Any = RedisCluster.from_url(plain, **kwargs)
            else:
                self._client = redis.Redis.from_url(plain, **kwargs)
        except (ValueError, TypeError) as exc:
            raise ConfigError(f"bad Redis URL {url!r}: {exc}") from None
        except redis.RedisError as exc:
            raise StoreError(f"cannot connect to Redis at {self._where}: {exc}") from exc
        tag = "{" + prefix + "}"
        self._p = tag
        self._m = f"{tag}:m"
        self._keys = [self._m]
        self._scripts = {name: self._client.register_script(_lua(name)) for name in _SCRIPTS}
        self._pargs = self._policy_args()
        self._closed = False
        if not create and not self._retrying(lambda: self._client.exists(self._m)):
            raise StoreError(f"no crawl at {self._where} under the prefix {prefix!r} (its "
                             f"key {self._m} does not exist)")
        self._check_shape(create)

    # -- plumbing -------------------------------------------------------------------------

    def _retrying(self, fn: Callable[[], _T]) -> _T:
        """Run ``fn``, retrying connection errors with backoff until the deadline."""
        if self._closed:
            raise StoreError("the store is closed")
        redis = self._redis
        deadline = 0.0
        pause = 0.05
        while True:
            try:
                return fn()
            except (redis.ConnectionError, redis.TimeoutError) as exc:
                now = time.monotonic()
                if not deadline:
                    deadline = now + self.retry_deadline
                if now >= deadline:
                    raise StoreError(f"Redis at {self._where} unreachable for "
                                     f"{self.retry_deadline:g} s: {exc}") from exc
                time.sleep(min(pause, deadline - now))
                pause = min(pause * 2, 2.0)
            except redis.ResponseError as exc:
                raise self.refused(exc) from exc

    def refused(self, exc: Exception) -> StoreError:
        """The error for a command Redis refused: :class:`StoreFull` when it is full
        (``maxmemory`` with ``noeviction``: Redis refuses a script that may write before
        it runs, so the call changed nothing)."""
        text = str(exc)
        if text.startswith("OOM") or "maxmemory" in text:
            return StoreFull(f"Redis at {self._where} is full (maxmemory, noeviction): "
                             f"{text}; the call that failed changed nothing: give Redis "
                             "more memory and run again")
        return StoreError(f"Redis refused a crawlq command: {text}")

    def _cmd(self, command: str, *args: Any, **kwargs: Any) -> Any:
        """One plain Redis command (redis-py method ``command``), retried."""
        method = getattr(self._client, command)
        return self._retrying(lambda: method(*args, **kwargs))

    def _run(self, name: str, *args: Any) -> Any:
        script = self._scripts[name]
        argv = self._pargs + list(args)
        return self._retrying(lambda: script(keys=self._keys, args=argv))

    def _run_chunks(self, name: str, head: list[Any], chunks: list[list[Any]]) -> list[Any]:
        """Run script ``name`` once per chunk of arguments, in one pipelined round trip."""
        if len(chunks) == 1 or self.cluster:
            # redis-py's cluster pipeline refuses EVALSHA: one call per chunk there.
            return [self._run(name, *head, *chunk) for chunk in chunks]
        script = self._scripts[name]

        def go() -> list[Any]:
            pipe = self._client.pipeline(transaction=False)
            for chunk in chunks:
                script(keys=self._keys, args=self._pargs + head + chunk, client=pipe)
            return list(pipe.execute())

        return self._retrying(go)

    def _check_shape(self, create: bool = True) -> None:
        """Refuse to mix a Bloom seen-set of one shape with another (or exact) one (and
        record this one's for a new crawl, unless ``create`` is False)."""
        # "exact-sb": fingerprints in linear-hashing buckets (see common.lua); "exact" was
        # one set, written by crawlq before 0.1's bucketed layout.
        shape = ("exact-sb" if self.bloom is None
                 else f"bloom:{self.bloom.capacity}:{self.bloom.error_rate!r}")
        stored = self._retrying(lambda: (create and self._client.hsetnx(self._m, "seenset",
                                                                         shape),
                                         self._client.hget(self._m, "seenset"))[1])
        if stored == b"exact" and shape == "exact-sb":
            raise ConfigError("this crawl was written by an earlier crawlq (one seen-set "
                              "key): dump it with that version, then load it here")
        if stored is not None and stored.decode() != shape:
            raise ConfigError(f"this crawl's seen-set is {stored.decode()}, not {shape}: "
                              "open it with the same bloom_capacity and bloom_error_rate")

    # -- the contract ---------------------------------------------------------------------

    def _policy_args(self) -> list[Any]:
        """The default policy as the Lua scripts take it (ARGV)."""
        p = self.policy
        return [p.concurrency, p.min_delay, p.max_delay, p.delay_factor, p.max_queue_urls,
                p.session_budget, p.session_rest, 1 if self.lifo else 0,
                self.max_redeliveries]

    def close(self) -> None:
        """See :meth:`Store.close`."""
        if not self._closed:
            self._closed = True
            # Closing a connection to a server that went away is not an error.
            with contextlib.suppress(Exception):
                self._client.close()


def _bloom_spec(shape: BloomShape, fp: bytes) -> list[int]:
    block, bits = shape.locate(fp)
    return [block, *bits]


def _unpack(rec: bytes) -> list[Any]:
    """The values of a record written by Lua's ``cmsgpack.pack(a, b, ...)``: a stream
    of msgpack objects, not one array."""
    unpacker = msgpack.Unpacker(raw=True)
    unpacker.feed(rec)
    return list(unpacker)


def _dead(did: int, rec: bytes) -> DeadEntry:
    key, prio, retries, payload, error, died_at = _unpack(rec)
    return DeadEntry(did, key.decode("utf-8", "surrogateescape"), int(prio), int(retries),
                     payload, error.decode("utf-8", "replace"), float(died_at))
