"""The Redis store: one crawl shared by many processes and machines.

Every state change is one Lua script run atomically by the server (files in
``crawlq/stores/lua``, each prefixed with ``common.lua``); redis-py loads a script once
and reloads it after a ``NOSCRIPT`` (a restarted or flushed server). Batches are cut
into chunks of :data:`CHUNK` entries, sent in one pipelined round trip: each chunk is
atomic (the batch is not: a connection lost midway leaves the chunks the server got
whole applied, and the retry reports their entries as duplicates and their answers as
not held), and no script runs long enough to stall the other workers.

All keys of a crawl start with the hash tag ``{prefix}``, so a crawl lives in one hash
slot: it works on Redis Cluster, and several crawls (prefixes) spread over its nodes.
The key layout is described at the top of ``common.lua``.

Connection errors are retried with exponential backoff until ``retry_deadline``
seconds have passed, then raised as :class:`~crawlq.errors.StoreError`. A script
either ran whole or not at all, so a retry never finds half-applied state; a retried
call whose first reply was lost may lease requests nobody receives (they come back
when their lease expires) or report added requests as duplicates.
"""

from __future__ import annotations

import contextlib
import dataclasses
import heapq
import math
import os
import re
import struct
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from importlib import resources
from typing import Any, NamedTuple, TypeVar

import msgpack

from ..errors import ConfigError, StoreError, StoreFull
from ..models import QueueInfo, Stats
from ..policies.domains import domain_of
from . import dumpfmt
from .base import (
    DUPLICATE,
    MAX_REDELIVERIES,
    Ack,
    DeadEntry,
    Entry,
    Leased,
    Pick,
    QueuePolicy,
    check_settings,
)
from .bloom import BLOCK_BYTES, BloomShape
from .known import KnownSeen
from .policy import changed_settings, typed_settings
from .rules import DOMAIN_WAIT, QueueState, groups, label
from .url import StoreURL

__all__ = ["CHUNK", "RedisStore", "run_many"]

_EXPIRES = struct.Struct("<d")
"""A kept value's expiry, before its bytes (see RedisStore.put_values)."""



def _kv(data: bytes, expires: float | None) -> bytes:
    """A kept value as stored in ``{prefix}:kv``: its expiry, then its bytes."""
    return _EXPIRES.pack(math.inf if expires is None else expires) + data


CHUNK = 2000
"""Entries per script call: big enough to amortize a call, small enough (a few ms) not
to stall other clients of the server."""

SEEN_CACHE = 200_000
"""Fingerprints a store object remembers the crawl's seen-set holds for good (the
``seen_cache`` store URL option; 0: none): offered again, they are answered as
duplicates in the process, with no script work (see :class:`~.known.KnownSeen`)."""

_QREC = struct.Struct("<9d")  # a queue's record, P:qm:<key>, then its domain (common.lua)
_SCRIPTS = ("add", "lease", "release", "ready_at", "queue_op", "maintain", "renew",
            "exchange", "line")
_T = TypeVar("_T")
_OURS = ("prefix", "cluster", "retry_deadline", "seen_cache", "shards")
"""The Redis store URL's query options that are crawlq's (the others go to redis-py)."""
_COUNTERS = ("seen", "added", "done", "failed", "retried", "redelivered", "late_acks",
             "duplicates")


def _lua(name: str) -> str:
    """Script ``name``: common.lua, then its own file. ``exchange`` is made of add's,
    release's and lease's files, each as a function of its own ARGV (a Lua parameter of
    that name shadows the global), then exchange.lua, which calls them in turn: one
    definition of each, run in one script."""
    pkg = resources.files("crawlq.stores") / "lua"

    def text(part: str) -> str:
        return (pkg / f"{part}.lua").read_text("utf-8")

    if name != "exchange":
        return text("common") + "\n" + text(name)
    parts = "".join(f"local function {part}_part(ARGV)\n{text(part)}\nend\n"
                    for part in ("add", "release", "lease"))
    return text("common") + "\n" + parts + text("exchange")


ITEMS = b"2"
"""The format of a crawl's queue items, kept in its meta hash: 2 = the request's
retries, then (once a lease of it expired) a zero byte and how many did (at most
65,535), then its payload. Items without the count (format 1, or none recorded) are
read the same way; a crawlq older than format 2 cannot read format 2 items."""


Head = tuple[int, float, str, int, str, int]
"""A queue of a store's ready line as the ``line`` script lists it: (priority
level, ready since, queue, how many leases it may give, its domain ('' when none is
kept), the domain's leases out)."""


class Offer(NamedTuple):
    """An add's entries as sent (RedisStore._add_blobs): the script's argument per
    chunk, the places of the entries sent (None: all; the others were answered from
    what the client knew), and the seen-set's id and the client's connection
    generation they were answered under."""

    blobs: list[bytes]
    sent_at: list[int] | None
    seen_id: bytes
    generation: int


class Line(NamedTuple):
    """A store's ready line as a sharded crawl reads it (:meth:`RedisStore.ready_line_reply`):
    its first queues (None: not listed), each level's ready queues (best level first),
    the earliest time something may become ready (None: nothing is waited for), and
    its version (one up with every sharded call that may change it: of two readings,
    the newer has the higher)."""

    heads: list[Head] | None
    levels: list[tuple[int, int]]
    due: float | None
    version: int


class Exchanged(NamedTuple):
    """What a sharded crawl's call of one shard did (:meth:`RedisStore.exchange_reply`):
    each entry's status, each answer's flag, the leases, whether a queue served is ready
    again at once, and the shard's ready line after it all."""

    statuses: list[int]
    held: list[bool]
    leases: list[Leased]
    again: bool
    line: Line | None


class RedisStore:
    """A store on a Redis server or cluster; see :class:`crawlq.stores.base.Store`.

    ``share``: another RedisStore whose client (and connections) this one uses;
    ``home``: the store is a sharded crawl's home (see :mod:`.redis_shards`): a crawl
    that has shards is refused without it.

    ``url`` is a redis-py URL (``redis://``, ``rediss://``, ``unix://``) with optional
    crawlq query arguments ``prefix`` (default ``crawlq``), ``cluster`` (``1`` for a
    Redis Cluster), ``retry_deadline`` (the keyword argument wins) and ``seen_cache``
    (default :data:`SEEN_CACHE`, 0 for none: how many fingerprints the object remembers
    the crawl's seen-set holds for good, to answer their next offers itself). A password
    comes from the URL or ``$CRAWLQ_REDIS_PASSWORD``. The queue rules run in the Lua scripts
    (``lua/``), the one copy besides :mod:`.rules`; tests/stores/test_stores_agree.py
    holds them to the same results.
    """

    in_process = False
    """Every call waits on the network: :class:`~crawlq.aio.AsyncFrontier` runs them on
    worker threads (see :attr:`Store.in_process <crawlq.stores.base.Store.in_process>`)."""

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
        share: RedisStore | None = None,
        home: bool = False,
    ) -> None:
        try:
            import redis
        except ImportError:  # pragma: no cover - depends on the installation
            raise ConfigError("the Redis store needs redis-py: pip install 'crawlq[redis]'"
                              ) from None
        self._redis = redis
        self.policy = _lua_policy(policy or QueuePolicy())
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
        cache = parsed.count_option("seen_cache", SEEN_CACHE)
        # The fingerprints known to be in the seen-set for good, valid while the set's
        # id (kept in the crawl's meta hash, returned by every add) stays the same: a
        # clear or a load gives the set a new one.
        self._known = KnownSeen(cache or 0)
        self._seen_id = b""
        self._generation = 0  # (new connections made: see _connected)
        self._owner = share is None  # (of its client: closes it)
        self._sharers: list[RedisStore] = []  # (stores on its client: hear of _connected)
        self._where = f"{parsed.hostname or parsed.path}:{parsed.port or ''}"
        plain = parsed.with_query(drop=_OURS)  # (the rest is redis-py's)
        kwargs: dict[str, Any] = {"socket_connect_timeout": 10.0, "socket_timeout": 120.0,
                                  "redis_connect_func": self._connected}
        if parsed.password is None and os.environ.get("CRAWLQ_REDIS_PASSWORD"):
            kwargs["password"] = os.environ["CRAWLQ_REDIS_PASSWORD"]
        cluster = (parsed.option("cluster") or "").lower() in ("1", "true", "yes")
        self.cluster = cluster
        try:
            if share is not None:  # (the shards of one crawl share one client)
                self._client: Any = share._client
                share._sharers.append(self)
            elif cluster:
                from redis.cluster import RedisCluster

                self._client = RedisCluster.from_url(plain, **kwargs)
            else:
                self._client = redis.Redis.from_url(plain, **kwargs)
        except (ValueError, TypeError) as exc:
            raise ConfigError(f"bad Redis URL {url!r}: {exc}") from None
        except redis.RedisError as exc:
            raise StoreError(f"cannot connect to Redis at {self._where}: {exc}") from exc
        tag = "{" + prefix + "}"
        self._p = tag
        self._m = f"{tag}:m"
        # Every script declares the meta hash and a key that never exists, the fence:
        # while the crawl's slot moves between Redis Cluster nodes, a command declaring
        # a key the node lacks is redirected (ASK), and refused on the importing node
        # (TRYAGAIN) until every key arrived. So no script runs while the crawl's keys
        # are split between two nodes (one would fail at the first key that left, with
        # what it wrote so far kept); the calls wait (see _retrying). (Off a cluster,
        # declared keys change nothing.)
        self._keys = [self._m, f"{tag}:fence"]
        self._scripts = {name: self._client.register_script(_lua(name)) for name in _SCRIPTS}
        self._pargs = self._policy_args()
        self._closed = False
        if not create and not self._retrying(lambda: self._client.exists(self._m)):
            raise StoreError(f"no crawl at {self._where} under the prefix {prefix!r} (its "
                             f"key {self._m} does not exist)")
        self._home = home
        self._check_shape(create)

    # -- plumbing -------------------------------------------------------------------------

    def _retrying(self, fn: Callable[[], _T]) -> _T:
        """Run ``fn``, retrying with backoff until the deadline what passes: a lost
        connection, and on a cluster a slot on the move (redirections redis-py did not
        follow to the end, TRYAGAIN while the crawl's keys are split: see the fence in
        ``__init__``) or a cluster without a node for a slot (a failover under way)."""
        if self._closed:
            raise StoreError("the store is closed")
        redis = self._redis
        errors = redis.exceptions
        deadline = 0.0
        pause = 0.05
        while True:
            try:
                return fn()
            except (redis.ConnectionError, redis.TimeoutError, errors.TryAgainError,
                    errors.AskError, errors.ClusterDownError, errors.ClusterError) as exc:
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

    def _connected(self, connection: Any) -> None:
        """redis-py's hook on each new connection (its own set-up: the plain client's
        ``on_connect``; the cluster client made it before). A new connection may reach
        a server that lacks the last writes this client saw (one restarted, a replica
        that took over): what the client learned of the seen-set from them may be
        gone, so it forgets it (the next adds ask the server)."""
        for store in (self, *self._sharers):
            store._known.clear()
            store._generation += 1
        if not self.cluster:
            connection.on_connect()

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

    def _queue_op(self, now: float, op: str, queue: str, *args: Any) -> Any:
        """Run queue_op.lua's ``op`` on ``queue`` (with its domain: the op may make it)."""
        return self._run("queue_op", now, op, queue, self._domain_of(queue), *args)

    def _domain_of(self, queue: str) -> str:
        """``queue``'s domain, for a script that may make it ('' while no domain rule
        is on: rules.groups)."""
        return domain_of(queue) if groups(self.policy) else ""

    def _run_chunks(self, name: str, head: list[Any], chunks: list[list[Any]]) -> list[Any]:
        """Run script ``name`` once per chunk of arguments, in one pipelined round trip
        (:func:`run_many`)."""
        if len(chunks) == 1:
            return [self._run(name, *head, *chunks[0])]
        return run_many([(self, name, [*head, *chunk]) for chunk in chunks])

    def _evalsha(self, name: str, args: Sequence[Any]) -> tuple[Any, ...]:
        """The EVALSHA command that runs script ``name`` with ``args`` (its keys: the
        meta hash and the fence; see ``__init__``)."""
        return ("EVALSHA", self._scripts[name].sha, len(self._keys), *self._keys,
                *self._pargs, *args)

    def _check_shape(self, create: bool = True) -> None:
        """Refuse to mix a Bloom seen-set of one shape with another (or exact) one (and
        record this one's for a new crawl, unless ``create`` is False); mark the crawl's
        items as carrying their count of expired leases (``items`` = 2)."""
        # "exact-sb2": 16-byte fingerprints in string buckets, addressed by linear
        # hashing (see common.lua); "exact-sb", the same buckets as hashes, is still
        # read and written as such; "exact" was one set, written by crawlq before 0.1's
        # bucketed layout.
        shape = ("exact-sb2" if self.bloom is None
                 else f"bloom:{self.bloom.capacity}:{self.bloom.error_rate!r}")
        stored = self._retrying(lambda: (create and self._client.hsetnx(self._m, "seenset",
                                                                         shape),
                                         self._client.hget(self._m, "seenset"))[1])
        if stored is not None and self._retrying(
                lambda: self._client.hget(self._m, "items")) != ITEMS:
            # A crawl an older crawlq wrote: it kept the counts of expired leases in a
            # hash of its own, which this one no longer reads (a request counts its
            # expiries from zero again); marked, so a later crawlq can tell the formats.
            self._retrying(lambda: (self._client.delete(f"{self._p}:ex"),
                                    self._client.hset(self._m, "items", ITEMS)))
        shards = None if self._home else self._retrying(
            lambda: self._client.hget(self._m, "shards"))
        if shards is not None:
            raise ConfigError(f"the crawl {self.prefix!r} is sharded: open it with "
                              f"shards={int(shards)}")
        if stored == b"exact" and shape == "exact-sb2":
            raise ConfigError("this crawl was written by an earlier crawlq (one seen-set "
                              "key): dump it with that version, then load it here")
        if stored is not None and stored.decode() != shape and not (
                stored == b"exact-sb" and shape == "exact-sb2"):
            raise ConfigError(f"this crawl's seen-set is {stored.decode()}, not {shape}: "
                              "open it with the same bloom_capacity and bloom_error_rate")

    # -- the contract ---------------------------------------------------------------------

    def _policy_args(self) -> list[Any]:
        """The default policy as the Lua scripts take it (ARGV)."""
        p = self.policy
        return [p.concurrency, p.min_delay, p.max_delay, p.delay_factor, p.max_queue_urls,
                p.session_budget, p.session_rest, 1 if self.lifo else 0,
                self.max_redeliveries, p.domain_concurrency, p.max_domain_urls,
                p.max_domain_queues, DOMAIN_WAIT]

    def shard_count(self, shards: int) -> int | None:
        """The shard count of the sharded crawl whose home this is: ``shards``, kept
        for a new crawl; None for a crawl that already ran unsharded (a plain crawl is
        not turned into a home)."""
        def go() -> int | None:
            if self._client.hsetnx(self._m, "shards", shards) and any(
                    self._client.hmget(self._m, ["added", "token"])):
                self._client.hdel(self._m, "shards")  # (it ran without: not a home)
                return None
            return int(self._client.hget(self._m, "shards"))

        return self._retrying(go)

    def close(self) -> None:
        """See :meth:`Store.close`. (The client goes with the store that made it.)"""
        if not self._closed:
            self._closed = True
            if not self._owner:
                return
            # Closing a connection to a server that went away is not an error.
            with contextlib.suppress(Exception):
                self._client.close()

    # -- the calls of a crawl ---------------------------------------------------------

    def _add_blobs(self, entries: Sequence[Entry]) -> Offer:
        """The add script's argument for each chunk of ``entries``, leaving out those
        whose fingerprint the seen-set is known to hold for good (counted by the first
        chunk, one with no entries when all are left out, if the set's id is still the
        one they were known under)."""
        known = self._known
        sent_at: list[int] | None = None
        if len(known):
            sent_at = [i for i, e in enumerate(entries) if e[0] is None or e[0] not in known]
            if len(sent_at) == len(entries):
                sent_at = None
        todo = entries if sent_at is None else [entries[i] for i in sent_at]
        answered = len(entries) - len(todo)
        shape = self.bloom
        grouped = groups(self.policy)
        # Lua's cmsgpack reads no msgpack "bin" type: bytes go as raw strings.
        packb = msgpack.Packer(use_bin_type=False).pack
        blobs = []
        for start in range(0, max(len(todo), 1 if answered else 0), CHUNK):
            # (with each chunk, the domain of each of its queues: one the chunk makes
            # is kept in it, and Lua cannot read the Public Suffix List)
            domains = ({k: domain_of(k) for k in {e[1] for e in todo[start:start + CHUNK]}}
                       if grouped else {})
            rows: list[tuple[Any, ...]]
            if shape is None:
                rows = [(fp, key, prio, retries.to_bytes(2, "big") + payload, nb, rv)
                        for fp, key, prio, payload, nb, rv, retries in
                        todo[start:start + CHUNK]]
            else:
                rows = [(fp, key, prio, retries.to_bytes(2, "big") + payload, nb, rv,
                         None if fp is None else _bloom_spec(shape, fp))
                        for fp, key, prio, payload, nb, rv, retries in
                        todo[start:start + CHUNK]]
            blobs.append(packb((rows, domains, answered if start == 0 else 0,
                                os.urandom(8).hex(), self._seen_id)))
        return Offer(blobs, sent_at, self._seen_id, self._generation)

    def _statuses(self, entries: Sequence[Entry], offer: Offer, replies: Sequence[bytes],
                  now: float) -> list[int]:
        """Each entry's status from the add script's ``replies`` to ``offer`` (the
        seen-set's id, then a status character per entry sent; see lua/add.lua), those
        not sent duplicates; the fingerprints now known to be in the seen-set for good
        are remembered. When what was known may no longer hold (the set's id changed:
        another client cleared or loaded the crawl; or the call went down a new
        connection, see _connected), it is forgotten and the entries not sent are
        offered now (their count taken back if the script counted them)."""
        got = bytearray()
        renewed = offer.generation != self._generation
        for reply in replies:
            if reply[:16] != self._seen_id:
                renewed = True
                self._known.clear()
                self._seen_id = reply[:16]
            got += reply[16:]
        sent_at = offer.sent_at
        todo = entries if sent_at is None else [entries[i] for i in sent_at]
        known = self._known
        out: list[int] = []
        for e, c in zip(todo, got):
            # (b"1": a duplicate for good; b"0": added without a revisit time, for good)
            if (c == 49 or (c == 48 and e[5] is None)) and e[0] is not None:
                known.add(e[0])
            out.append(DUPLICATE if c == 53 else c - 48)
        if sent_at is None:
            return out
        statuses = [DUPLICATE] * len(entries)
        for i, st in zip(sent_at, out):
            statuses[i] = st
        if renewed:
            unsent = sorted(set(range(len(entries))) - set(sent_at))
            if replies and replies[0][:16] == offer.seen_id:  # (counted: take it back)
                self._cmd("hincrby", self._m, "duplicates", -len(unsent))
            for i, st in zip(unsent, self.add([entries[i] for i in unsent], now)):
                statuses[i] = st
        return statuses

    def add(self, entries: Sequence[Entry], now: float) -> list[int]:
        """See :meth:`Store.add`."""
        offer = self._add_blobs(entries)
        if not offer.blobs:
            return []
        return self._statuses(entries, offer,
                              self._run_chunks("add", [now], [[b] for b in offer.blobs]), now)

    def add_begin(self, entries: Sequence[Entry], now: float) -> Callable[[], list[int]]:
        """Send an :meth:`add` without waiting; the returned function waits for its
        statuses. The Frontier prepares the next part of a big batch meanwhile, so the
        client's and the server's work overlap. Parts sent from one Frontier.add go
        down one connection, so the server runs them in order."""
        redis = self._redis
        pool = None if self.cluster else self._client.connection_pool
        conn = None
        if pool is not None:
            # No connection means the server is away: add() below retries.
            with contextlib.suppress(redis.ConnectionError, redis.TimeoutError):
                conn = pool.get_connection()
        if pool is None or conn is None:  # Cluster, or no connection: add now
            statuses = self.add(entries, now)
            return lambda: statuses
        offer = self._add_blobs(entries)
        blobs = offer.blobs
        sent = 0
        try:
            for blob in blobs:
                conn.send_command(*self._evalsha("add", (now, blob)))
                sent += 1
        except (redis.ConnectionError, redis.TimeoutError):
            pass  # what was not sent (or not answered) goes again through add()

        def result() -> list[int]:
            out: list[bytes] = []
            done = 0
            try:
                for i in range(sent):
                    try:
                        res = conn.read_response()
                    except redis.exceptions.NoScriptError:  # a restarted or flushed server
                        res = self._run("add", now, blobs[i])
                    except redis.ResponseError as exc:
                        raise self.refused(exc) from exc
                    out.append(res)
                    done += 1
            except (redis.ConnectionError, redis.TimeoutError):
                pass
            finally:
                if done < sent:
                    conn.disconnect()  # replies left unread: never reuse the connection
                pool.release(conn)
            if done < len(blobs):
                # Retried parts may have run already: their requests then show up as
                # duplicates of themselves (accepted once, never lost).
                out.extend(self._run_chunks("add", [now], [[b] for b in blobs[done:]]))
            return self._statuses(entries, offer, out, now)

        return result

    def lease(self, now: float, limit: int, ttl: float,
              queue: str | None = None) -> list[Leased]:
        """See :meth:`Store.lease`."""
        if limit <= 0:
            return []
        return _leased(self._run("lease", now, limit, ttl, queue or ""), now + ttl)

    @staticmethod
    def ready_line_reply(reply: list[Any]) -> Line:
        """The reply of the ``line`` script (arguments ``now, limit``, run with
        :func:`run_many`: what came due woken, then the first ``limit`` queues of the
        ready line in order, each level's count of ready queues, and the earliest time
        something may become ready) as a :class:`Line`."""
        return _line(reply[0], reply[1])

    def exchange(self, entries: Sequence[Entry], acks: Sequence[Ack], limit: int,
                 ttl: float, now: float) -> tuple[list[int], list[bool], list[Leased]]:
        """See :class:`~crawlq.stores.base.Exchanges`: add's, release's and lease's
        work in one script (lua/exchange.lua), one round trip, all of it or none of it:
        a full Redis (maxmemory) refuses it before the links are added, and so before
        the pages that found them are answered. Retried whole when the connection fails
        (what ran already then answers as a duplicate or a late answer; leases whose
        reply was lost come back after their TTL, as a lost lease reply always does)."""
        offer, args = self.exchange_call(entries, acks, limit, ttl, now)
        got = self.exchange_reply(entries, offer, self._run("exchange", *args), now, ttl)
        return got.statuses, got.held, got.leases

    def exchange_call(self, entries: Sequence[Entry], acks: Sequence[Ack], limit: int,
                      ttl: float, now: float,
                      share: tuple[int, Sequence[str], int] | None = None
                      ) -> tuple[Offer, tuple[Any, ...]]:
        """The exchange script's arguments for :meth:`exchange` (with what was
        offered, for :meth:`exchange_reply`), or, for :func:`run_many`, a sharded
        crawl's one call of a shard: ``share`` = (line, park, heads): park the queues
        in ``park`` (ready queues of a full domain the crawl's line passed over), lease
        in one pass over the first ``line`` queues of the ready line at most (line 0:
        as :meth:`lease` does), then list the first ``heads`` queues of the line
        (see :class:`Line`)."""
        offer, answers = self._add_blobs(entries), _ack_blobs(acks)
        adds = offer.blobs
        args: tuple[Any, ...] = (now, len(adds), *adds, len(answers), *answers,
                                 max(limit, 0), ttl)
        if share is not None:
            line, park, heads = share
            packed = msgpack.packb(list(park), use_bin_type=False) if park else b""
            args += (max(line, 0), packed, max(heads, 0))
        return offer, args

    def exchange_reply(self, entries: Sequence[Entry], offer: Offer, res: list[Any],
                       now: float, ttl: float) -> Exchanged:
        """What the exchange script's reply ``res`` to :meth:`exchange_call` says."""
        statuses = (self._statuses(entries, offer, [res[3] + res[0]], now)
                    if offer.blobs else [])
        held, leases = [c == 49 for c in res[1]], _leased(res[2], now + ttl)
        if len(res) < 7:
            return Exchanged(statuses, held, leases, False, None)
        return Exchanged(statuses, held, leases, bool(int(res[4])), _line(res[5], res[6]))

    def release(self, acks: Sequence[Ack], now: float) -> list[bool]:
        """See :meth:`Store.release`."""
        chunks = [[blob] for blob in _ack_blobs(acks)]
        if not chunks:
            return []
        out: list[bool] = []
        for res in self._run_chunks("release", [now], chunks):
            out.extend(c == 49 for c in res)
        return out

    def next_ready_at(self, now: float) -> float | None:
        """See :meth:`Store.next_ready_at`."""
        r = self._run("ready_at", now)
        return None if r is None else float(r)

    def renew(self, tokens: Sequence[int], expires: float, now: float) -> list[bool]:
        """See :meth:`Store.renew`."""
        if not tokens:
            return []
        return [bool(x) for x in self._run("renew", now, expires, *tokens)]

    # -- looking and steering --------------------------------------------------------

    def block(self, queue: str, until: float, now: float) -> None:
        """See :meth:`Store.block`."""
        self._queue_op(now, "block", queue, until)

    def unblock(self, queue: str, now: float) -> None:
        """See :meth:`Store.unblock`."""
        self._queue_op(now, "unblock", queue)

    def set_policy(self, policy: QueuePolicy) -> None:
        """See :meth:`Store.set_policy`."""
        self.policy = _lua_policy(policy)
        self._pargs = self._policy_args()

    def configure_queue(self, queue: str, settings: Mapping[str, float | None],
                        now: float) -> None:
        """See :meth:`Store.configure_queue`."""
        clean = check_settings(settings)
        # The queue's settings as they will be, checked before the script keeps them
        # (Lua cannot run QueuePolicy's checks). Read first, then written: a change
        # another process makes in between is checked by its own call.
        key = queue.encode("utf-8", "surrogateescape")
        kept = {f.decode(): float(v) for f, v in self._retrying(
            lambda: self._client.hgetall(self._p.encode() + b":qset:" + key)).items()}
        self.policy.merged(changed_settings(kept, clean))  # (raises: nothing kept)
        args: list[Any] = []
        for k, v in clean.items():
            args += [k, "" if v is None else v]
        self._queue_op(now, "configure", queue, *args)

    def count_rejected(self, reasons: Mapping[str, int]) -> None:
        """See :meth:`Store.count_rejected`."""
        def go() -> None:
            pipe = self._client.pipeline(transaction=False)
            for r, n in reasons.items():
                pipe.hincrby(f"{self._p}:rej", r, n)
            pipe.execute()

        self._retrying(go)

    def count_duplicates(self, n: int) -> None:
        """See :meth:`Store.count_duplicates`."""
        self._retrying(lambda: self._client.hincrby(self._m, "duplicates", n))

    def put_values(self, items: Sequence[tuple[str, bytes, float | None]]) -> None:
        """See :meth:`Store.put_values`. One hash, ``{prefix}:kv``: name -> expiry (a
        little-endian double, +inf for none) then the value; and the expiries again in a
        sorted set, ``{prefix}:kvx``, from which waking drops the values whose time is
        up (common.lua ``drop_old_values``). (Redis's own expiry counts on the server's
        clock; stores take the time from their caller.)"""
        if not items:
            return
        mapping = {n: _kv(v, e) for n, v, e in items}
        due = {n: e for n, _, e in items if e is not None}
        lasting = [n for n, _, e in items if e is None]

        def go() -> None:
            pipe = self._client.pipeline(transaction=False)
            pipe.hset(f"{self._p}:kv", mapping=mapping)
            if due:
                pipe.zadd(f"{self._p}:kvx", due)
            if lasting:
                pipe.zrem(f"{self._p}:kvx", *lasting)
            pipe.execute()

        self._retrying(go)

    def tally(self, deltas: Mapping[str, int]) -> list[int]:
        """See :meth:`Store.tally`: one HINCRBY a count (each
        atomic; pipelined, not one transaction), in the hash ``{prefix}:tl``."""
        if not deltas:
            return []
        key = f"{self._p}:tl"

        def go() -> list[Any]:
            pipe = self._client.pipeline(transaction=False)
            for name, d in deltas.items():
                pipe.hincrby(key, name, int(d))
            return list(pipe.execute())

        got = [int(n) for n in self._retrying(go)]
        below = [name for name, n in zip(deltas, got) if n <= 0]
        if below:  # (a count never goes below 0; one at 0 is forgotten)
            self._cmd("hdel", key, *below)
        return [max(0, n) for n in got]

    def tallies(self, names: Sequence[str]) -> list[int]:
        """See :meth:`Store.tallies`."""
        if not names:
            return []
        got = self._cmd("hmget", f"{self._p}:tl", list(names))
        return [max(0, int(n)) if n is not None else 0 for n in got]

    def drop_tallies(self, names: Sequence[str]) -> None:
        """See :meth:`Store.drop_tallies`."""
        if names:
            self._cmd("hdel", f"{self._p}:tl", *names)

    def drop_values(self, names: Sequence[str]) -> None:
        """See :meth:`Store.drop_values`."""
        if not names:
            return

        def go() -> None:
            pipe = self._client.pipeline(transaction=False)
            pipe.hdel(f"{self._p}:kv", *names)
            pipe.zrem(f"{self._p}:kvx", *names)
            pipe.execute()

        self._retrying(go)

    def get_values(self, names: Sequence[str], now: float) -> list[bytes | None]:
        """See :meth:`Store.get_values`."""
        if not names:
            return []
        got = self._retrying(lambda: self._client.hmget(f"{self._p}:kv", list(names)))
        return [None if g is None or _EXPIRES.unpack_from(g)[0] <= now else g[8:]
                for g in got]

    def stats(self, now: float, per_queue: int = 0) -> Stats:
        """See :meth:`Store.stats`."""
        meta, rej, scheduled, leased, dead, total, ready, resting = self._run(
            "maintain", now, "stats")
        c = {meta[i].decode(): meta[i + 1] for i in range(0, len(meta), 2)}

        def n(name: str) -> int:
            try:
                return int(c.get(name, 0))
            except ValueError:
                return 0

        nonempty = n("nonempty")
        return Stats(
            seen=n("seen"), added=n("added"), queued=n("queued") + scheduled,
            scheduled=scheduled, leased=leased, done=n("done"), failed=n("failed"),
            retried=n("retried"), dead=dead, redelivered=n("redelivered"),
            late_acks=n("late_acks"), duplicates=n("duplicates"),
            rejected={rej[i].decode(): int(rej[i + 1]) for i in range(0, len(rej), 2)},
            queues_total=total, queues_ready=ready, queues_resting=resting,
            queues_busy=nonempty - ready - resting,
            queues_exhausted=total - nonempty,
            per_queue=tuple(self.queues(now, per_queue)) if per_queue else (),
        )

    def _queue_infos(self, keys: list[bytes], now: float) -> list[QueueInfo]:
        """QueueInfo of each queue in ``keys`` (queues that vanished are left out)."""
        p = self._p.encode()

        def go() -> list[Any]:
            pipe = self._client.pipeline(transaction=False)
            for k in keys:
                pipe.get(p + b":qm:" + k)
            return list(pipe.execute())

        recs = self._retrying(go)
        with_settings = [k for k, rec in zip(keys, recs) if rec and _QREC.unpack_from(rec)[8]]

        def go_settings() -> list[Any]:
            pipe = self._client.pipeline(transaction=False)
            for k in with_settings:
                pipe.hgetall(p + b":qset:" + k)
            return list(pipe.execute())

        overrides = dict(zip(with_settings, self._retrying(go_settings))) if with_settings \
            else {}
        out: list[QueueInfo] = []
        for k, rec in zip(keys, recs):
            if rec is None:
                continue
            n, inflight, ready_at, _, accepted, _, _, _, _ = _QREC.unpack_from(rec)
            settings = {f.decode(): float(v) for f, v in overrides.get(k, {}).items()}
            pol = self.policy.merged(settings)
            out.append(QueueInfo(
                k.decode("utf-8", "surrogateescape"), int(n), int(inflight), ready_at,
                int(accepted), label(int(n), int(inflight), pol.concurrency, ready_at, now),
                typed_settings(settings)))
        return out

    def _all_queue_keys(self) -> list[bytes]:
        return self._retrying(
            lambda: list(self._client.sscan_iter(f"{self._p}:qk", count=5000)))

    def queues(self, now: float, limit: int = 100) -> list[QueueInfo]:
        """See :meth:`Store.queues`. Reads every queue's record (in pipelined chunks,
        never blocking the server): a listing costs time in proportion to the queues."""
        if limit <= 0:
            return []
        self.next_ready_at(now)  # (what came due is woken first, as on the other stores)
        keys = self._all_queue_keys()
        best: list[QueueInfo] = []
        for i in range(0, len(keys), 1000):
            best = heapq.nlargest(limit, best + self._queue_infos(keys[i:i + 1000], now),
                                  key=lambda q: (q.queued, q.leased))
        if not best:
            return best
        waiting = self._cmd("hmget", f"{self._p}:scq",
                            [q.key.encode("utf-8", "surrogateescape") for q in best])
        return [dataclasses.replace(q, scheduled=int(w or 0)) for q, w in zip(best, waiting)]

    def dead(self, limit: int = 100) -> list[DeadEntry]:
        """See :meth:`Store.dead`."""
        if limit <= 0:
            return []

        def go() -> list[DeadEntry]:
            ids = self._client.zrange(f"{self._p}:dz", 0, limit - 1)
            if not ids:
                return []
            recs = self._client.hmget(f"{self._p}:dead", ids)
            return [_dead(int(i), r) for i, r in zip(ids, recs) if r is not None]

        return self._retrying(go)

    def requeue_dead(self, ids: Iterable[int] | None, now: float) -> int:
        """See :meth:`Store.requeue_dead`."""
        chosen: list[Any] = ["*"] if ids is None else [int(i) for i in ids]
        if not chosen:
            return 0
        return int(self._run("maintain", now, "requeue_dead", *chosen))

    # -- dump and load ----------------------------------------------------------------

    def delete_queue(self, queue: str, now: float) -> int:
        """See :meth:`Store.delete_queue`."""
        return int(self._queue_op(now, "delete", queue))

    def remove_queued(self, queue: str, where: Pick, now: float) -> int:
        """See :meth:`Store.remove_queued`. The entries are read
        here and removed by one script, which takes out only those still there (one
        leased or come due since stays). What came due by ``now`` is woken first, so
        an entry due already is picked from its queue, as on the other stores."""
        self.next_ready_at(now)  # (wakes)
        p, k = self._p, queue.encode("utf-8", "surrogateescape")
        picked: list[Any] = []
        for level in self._cmd("zrange", f"{p}:qp:".encode() + k, 0, -1):
            for item in self._cmd("lrange", f"{p}:q:".encode() + level + b":" + k, 0, -1):
                if where(int(level), *_item(item), None):
                    picked += [level, item]
        picked.append("")
        # (every scheduled entry is read: an admin call, as delete_queue's scan)
        for sid, at, key, prio, item in self._scheduled():
            if key == k and where(prio, *_item(item), at):
                picked.append(sid)
        if len(picked) == 1:
            return 0
        return int(self._queue_op(now, "remove", queue, *picked))

    def _scheduled(self) -> Iterator[tuple[bytes, float, bytes, int, bytes]]:
        """Every scheduled entry: (id, due, queue key, priority, item), read in parts."""
        p = self._p
        sched = self._retrying(lambda: self._client.zrange(f"{p}:sc", 0, -1, withscores=True))
        for i in range(0, len(sched), 1000):
            part = sched[i:i + 1000]
            for (sid, at), rec in zip(part, self._cmd("hmget", f"{p}:scd",
                                                      [s for s, _ in part])):
                if rec is not None:  # (gone since the list was read)
                    key, prio, item = _unpack(rec)
                    yield sid, at, key, prio, item

    def prefixes_under(self, start: str) -> list[str]:
        """The prefixes of the crawls on this server whose prefix begins with ``start``
        (found by their main key, with SCAN: for listing, not for hot paths)."""
        pattern = "{" + re.sub(r"([*?\[\]\\])", r"\\\1", start) + "*}:m"

        def go() -> list[str]:
            return sorted({k.decode("utf-8", "replace")[1:-3]
                           for k in self._client.scan_iter(match=pattern, count=1000)})

        return self._retrying(go)

    def shards_of(self, prefix: str) -> int | None:
        """The shard count kept by the crawl of ``prefix`` on this server (None: it is
        not a sharded crawl's home)."""
        kept = self._retrying(lambda: self._client.hget("{" + prefix + "}:m", "shards"))
        return None if kept is None else int(kept)

    def destroy(self) -> int:
        """Delete every key of this crawl (its prefix); returns how many were deleted."""
        def go() -> int:
            n = 0
            for key in self._client.scan_iter(match=f"{self._p}:*", count=1000):
                n += int(self._client.delete(key))
            return n

        return self._retrying(go)

    def clear(self) -> None:
        """See :meth:`Store.clear`: every key of the crawl goes
        (one round trip per 1,000, so another client may see it half cleared), then
        the seen-set's shape is recorded again."""
        token, shards, version = self._cmd("hmget", self._m, ["token", "shards", "v"])
        self.destroy()
        if shards is not None:  # (a sharded crawl's home stays one)
            self._cmd("hset", self._m, "shards", shards)
        if version is not None:  # (a shard's line version only grows: redis_shards)
            self._cmd("hset", self._m, "v", version)
        self._known.clear()  # (the seen-set has no id now: the next add gives it one)
        self._check_shape(create=True)
        if token is not None:  # (a late answer to a lease of before must not find a
            self._cmd("hset", self._m, "token", token)  # lease of after under its token)

    # -- dump and load ---------------------------------------------------------------

    def dump(self) -> Iterator[dict[str, Any]]:
        """See :meth:`Store.dump`. Reads while others may write: dump a quiet crawl."""
        r, p = self._client, self._p
        meta = self._retrying(lambda: r.hgetall(self._m))
        rej = self._retrying(lambda: r.hgetall(f"{p}:rej"))
        c = {k.decode(): int(v) for k, v in meta.items() if k.decode() in _COUNTERS}
        c["dead"] = int(self._retrying(lambda: r.hlen(f"{p}:dead")))
        yield dumpfmt.counters(c, {k.decode(): int(v) for k, v in rej.items()})
        counts = {k.decode("utf-8", "surrogateescape"): int(v) for k, v in
                  self._retrying(lambda: r.hgetall(f"{p}:tl")).items() if int(v) > 0}
        if counts:
            yield dumpfmt.tallies(dict(sorted(counts.items())))
        keys = sorted(self._all_queue_keys())
        for i in range(0, len(keys), 500):
            part = keys[i:i + 500]
            recs = self._cmd("mget", [f"{p}:qm:".encode() + k for k in part])
            since = {k: _QREC.unpack_from(rec)[3] for k, rec in zip(part, recs) if rec}
            for info in self._queue_infos(part, 0.0):
                k = info.key.encode("utf-8", "surrogateescape")
                yield dumpfmt.queue(info.key, info.accepted, info.ready_at, info.settings,
                                    since.get(k, 0.0), info.leased > 0 and info.state in (
                                        QueueState.BUSY.label, QueueState.EXHAUSTED.label))
        # Leased entries first, in the order they were leased (as if they had expired),
        # then each queue's in the order it hands them out (a list is served from its
        # left end, or its right end with LIFO), then the scheduled ones.
        leased = self._retrying(lambda: r.hgetall(f"{p}:ls"))
        for token in sorted(leased, key=int):
            key, prio, item = _unpack(leased[token])
            yield dumpfmt.entry(key.decode("utf-8", "surrogateescape"), prio, *_item(item),
                                None)
        for k in keys:
            name = k.decode("utf-8", "surrogateescape")
            for level in self._cmd("zrange", f"{p}:qp:".encode() + k, 0, -1):
                items = self._cmd("lrange", f"{p}:q:".encode() + level + b":" + k, 0, -1)
                for item in (reversed(items) if self.lifo else items):
                    yield dumpfmt.entry(name, int(level), *_item(item), None)
        for _, at, key, prio, item in sorted(self._scheduled(),
                                             key=lambda e: (e[1], int(e[0]))):
            yield dumpfmt.entry(key.decode("utf-8", "surrogateescape"), prio, *_item(item), at)
        for d in self.dead(2**31):
            yield dumpfmt.dead(d)
        # (read in parts: the values of a big crawl would hold the server up in one)
        kept = self._retrying(lambda: dict(r.hscan_iter(f"{p}:kv", count=1000)))
        for name in sorted(kept):
            if _EXPIRES.unpack_from(kept[name])[0] == math.inf:
                yield dumpfmt.value(name.decode("utf-8", "surrogateescape"), kept[name][8:],
                                    None)
        if self.bloom is not None:
            bits = bytearray(self.bloom.size_bytes)
            for b in range(self.bloom.blocks):
                block = self._cmd("get", f"{p}:bl:{b}")
                if block:
                    bits[b * BLOCK_BYTES:b * BLOCK_BYTES + len(block)] = block.translate(
                        _BIT_ORDER)
            yield dumpfmt.bloom(bits)
        revisit = {k: float(v) for k, v in self._retrying(lambda: r.hgetall(f"{p}:rv")).items()}
        strings = self._retrying(lambda: r.hget(self._m, "seenset")) == b"exact-sb2"
        buckets = self._retrying(lambda: list(r.scan_iter(match=f"{p}:sb:*", count=5000)))
        if strings:  # (16-byte fingerprints one after the other; other lengths: hashes)
            for bucket in buckets:
                packed = self._retrying(lambda b=bucket: r.get(b)) or b""  # type: ignore[misc]
                for i in range(0, len(packed), 16):
                    yield dumpfmt.seen(packed[i:i + 16], revisit.get(packed[i:i + 16]))
            buckets = self._retrying(
                lambda: list(r.scan_iter(match=f"{p}:sbh:*", count=5000)))
        for bucket in buckets:
            for fp in self._retrying(lambda b=bucket: r.hkeys(b)):  # type: ignore[misc]
                yield dumpfmt.seen(fp, revisit.get(fp))

    def load(self, records: Iterable[dict[str, Any]], now: float) -> int:
        """See :meth:`Store.load`. The records' writes (:class:`_Loader`'s) go 1,000 at
        a time, each part in one pipelined round trip (:meth:`_write_loaded`): a load
        is not one atomic step here."""
        n = 0
        loader = _Loader(self.bloom)
        for rec in records:
            n += dumpfmt.apply(loader, rec)
            if len(loader.writes) >= 1000:
                self._write_loaded(loader.take(), now)
        self._write_loaded(loader.finish(), now)
        # Loaded fingerprints may carry revisit times: every client's record of the
        # seen-set goes (the next add gives the set a new id).
        self._cmd("hdel", self._m, "seen_id")
        self._known.clear()
        return n

    def _write_loaded(self, writes: list[_Write], now: float) -> None:
        """Write a part of a load (:class:`_Loader`'s writes, in their order) in one
        pipelined round trip, retried whole when the connection fails: the keys each
        kind of write goes to are the ones :meth:`dump` reads. A dumped Bloom filter is
        merged first, a read and a write of each of its blocks."""
        if not writes:
            return
        for w in writes:
            if w[0] == "bloom":
                self._merge_bloom(w[1])
        script = self._scripts["maintain"]
        p = self._p

        def go() -> None:
            pipe = self._client.pipeline(transaction=False)
            # redis-py's cluster pipeline refuses EVALSHA: scripts go one by one there.
            target = self._client if self.cluster else pipe
            seen = [w[1] for w in writes if w[0] == "seen"]
            if seen:  # added by the script: it knows the seen-set's buckets
                script(keys=self._keys, args=[*self._pargs, now, "load_seen", *seen],
                       client=target)
            for kind, *args in writes:
                if kind == "seen":
                    fp, at = args
                    if at is not None:
                        pipe.hset(f"{p}:rv", fp, at)
                elif kind == "bloom_bit":
                    pipe.setbit(f"{p}:bl:{args[0]}", args[1], 1)
                elif kind == "counter":
                    pipe.hincrby(self._m, *args)
                elif kind == "rejected":
                    pipe.hincrby(f"{p}:rej", *args)
                elif kind == "tally":
                    pipe.hincrby(f"{p}:tl", *args)
                elif kind == "value":
                    name, data, expires = args
                    pipe.hset(f"{p}:kv", name, _kv(data, expires))
                    if expires is not None:
                        pipe.zadd(f"{p}:kvx", {name: expires})
                elif kind != "bloom":  # maintain.lua's load_entry, load_queue, ...
                    if kind in ("load_entry", "load_queue"):  # (with the queue's domain)
                        args.insert(1, self._domain_of(args[0]))
                    script(keys=self._keys, args=[*self._pargs, now, kind, *args],
                           client=target)
            pipe.execute()

        self._retrying(go)

    def _merge_bloom(self, bits: bytes) -> None:
        """OR a dumped Bloom filter's ``bits`` (of this crawl's shape) into the
        crawl's, block by block (each a read, then a write)."""
        assert self.bloom is not None
        for b in range(self.bloom.blocks):
            new = bits[b * BLOCK_BYTES:(b + 1) * BLOCK_BYTES].translate(_BIT_ORDER)
            if not any(new):
                continue
            key = f"{self._p}:bl:{b}"
            old = (self._cmd("get", key) or b"").ljust(BLOCK_BYTES, b"\0")
            self._cmd("set", key, bytes(x | y for x, y in zip(old, new)))


_BIT_ORDER = bytes(int(f"{i:08b}"[::-1], 2) for i in range(256))
"""Each byte's bits reversed: Redis numbers a string's bits from the high bit of each
byte (SETBIT), the dump format (and the memory and SQLite filters) from the low bit."""


def _lua_policy(policy: QueuePolicy) -> QueuePolicy:
    """``policy``, if the Lua scripts can follow it: they take its numbers and compute
    the politeness delay themselves (lua/release.lua), so a QueuePolicy subclass with a
    delay() of its own would be silently ignored there. It is refused instead."""
    if type(policy).delay is not QueuePolicy.delay:
        raise ConfigError(
            f"the Redis store cannot use {type(policy).__name__}: its scripts compute the "
            "politeness delay from the policy's numbers (min_delay, max_delay, "
            "delay_factor), not from a delay() of its own; set those numbers, or use the "
            "memory or SQLite store for a custom delay()")
    return policy


def _bloom_spec(shape: BloomShape, fp: bytes) -> list[int]:
    block, bits = shape.locate(fp)
    return [block, *bits]


def run_many(calls: Sequence[tuple[RedisStore, str, Sequence[Any]]]) -> list[Any]:
    """Run script calls of stores that share one client (one store's chunks, or the
    shards of one crawl), each ``(store, script name, its arguments)``, in one round
    trip per server: on a cluster, one pipeline per node that serves the calls' slots.
    By their SHA (EVALSHA), not through redis-py's Script objects, whose pipeline first
    asks SCRIPT EXISTS: a second round trip, which a far server makes dear. Each runs
    or is refused on its own: a call the server could not run here (a script it lacks:
    it restarted or was flushed; a slot that moved or is moving; a lost connection) is
    run again on its own through its store, which loads scripts, follows redirections
    and retries; a call it refused raises as any call does (:meth:`RedisStore.refused`)."""
    if not calls:
        return []
    first = calls[0][0]
    if first._closed:
        raise StoreError("the store is closed")
    redis = first._redis
    errors = redis.exceptions
    again = (errors.NoScriptError, errors.AskError, errors.TryAgainError,
             errors.ClusterDownError)
    client = first._client
    # node name (None: not a cluster) -> the node itself and the calls it serves (the
    # node is kept: asked again by its name it may be gone from the client's view by
    # then, which a slot moving refreshes at any time)
    groups: dict[str | None, tuple[Any, list[int]]] = {}
    out: list[Any] = [None] * len(calls)
    failed: list[int] = []
    for i, (store, _, _) in enumerate(calls):
        node = None
        if first.cluster:
            try:
                node = client.get_node_from_key(store._m)
            except errors.RedisClusterException:  # (no node serves the slot now)
                failed.append(i)
                continue
        groups.setdefault(None if node is None else node.name, (node, []))[1].append(i)
    for node, places in groups.values():
        try:
            target = client if node is None else client.get_redis_connection(node)
            pipe = target.pipeline(transaction=False)
            for i in places:
                store, script, args = calls[i]
                pipe.execute_command(*store._evalsha(script, args))
            replies = list(pipe.execute(raise_on_error=False))
        except (redis.ConnectionError, redis.TimeoutError):
            failed += places
            continue
        for i, reply in zip(places, replies):
            if isinstance(reply, again):
                failed.append(i)
            elif isinstance(reply, redis.ResponseError):
                raise calls[i][0].refused(reply) from reply
            else:
                out[i] = reply
    for i in failed:
        store, script, args = calls[i]
        out[i] = store._run(script, *args)
    return out


def _line(listed: list[Any] | None, brief: list[Any]) -> Line:
    """A :class:`Line` from common.lua's ready_heads (None: not listed) and
    ready_levels replies."""
    heads = [(int(listed[i]), float(listed[i + 1]),
              listed[i + 2].decode("utf-8", "surrogateescape"), int(listed[i + 3]),
              listed[i + 4].decode("utf-8", "surrogateescape"), int(listed[i + 5]))
             for i in range(0, len(listed or ()), 6)] if listed is not None else None
    levels = [(int(brief[i]), int(brief[i + 1])) for i in range(0, len(brief) - 2, 2)]
    return Line(heads, levels, float(brief[-2]) if brief[-2] else None, int(brief[-1]))


def _leased(flat: list[Any], expires: float) -> list[Leased]:
    """The rows of the lease script's flat reply (token, queue, priority, item)."""
    out: list[Leased] = []
    for i in range(0, len(flat), 4):
        retries, payload = _item(flat[i + 3])
        out.append((int(flat[i]), flat[i + 1].decode("utf-8", "surrogateescape"),
                    int(flat[i + 2]), retries, payload, expires))
    return out


def _item(item: bytes) -> tuple[int, bytes]:
    """A queued, scheduled or leased item's retries and payload. Its layout is
    common.lua's (``payload_of``): 2 bytes of retries, then ``\\0`` and 2 bytes of its
    expired leases once one expired, then the payload (a msgpack array: never 0 first)."""
    if item[2] == 0:
        return int.from_bytes(item[:2], "big"), item[5:]
    return int.from_bytes(item[:2], "big"), item[2:]


def _ack_blobs(acks: Sequence[Ack]) -> list[bytes]:
    """The release script's argument for each chunk of ``acks``."""
    packb = msgpack.Packer(use_bin_type=False).pack
    return [packb(acks[start:start + CHUNK]) for start in range(0, len(acks), CHUNK)]


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


_Write = tuple[Any, ...]
"""One write of a load, named for what it writes (``seen``, ``bloom_bit``, ``bloom``,
``counter``, ``rejected``, ``tally``, ``value``) or by the maintain.lua op that makes
it (``load_entry``, ``load_queue``, ``load_dead``, ``load_since``), then its
arguments: :meth:`RedisStore._write_loaded` knows the keys and scripts."""


class _Loader:
    """The Redis store's :class:`~.dumpfmt.Loader`: it turns each record into the
    writes it makes (:data:`_Write`), in order, for its store's ``load`` to send
    (:meth:`RedisStore._write_loaded`). It holds no store and no key: only the crawl's
    Bloom filter shape, to place a fingerprint's bits and to check a dumped filter
    against."""

    def __init__(self, bloom: BloomShape | None) -> None:
        self.bloom = bloom
        self.writes: list[_Write] = []
        self.since: dict[str, float] = {}  # queue -> since when it waited, as dumped

    def take(self) -> list[_Write]:
        """The writes gathered since the last take."""
        writes, self.writes = self.writes, []
        return writes

    def finish(self) -> list[_Write]:
        """The writes left, then those that give the loaded queues that are ready their
        places in the ready line."""
        flat: list[Any] = []
        for key, since in self.since.items():
            flat += [key, since]
        for i in range(0, len(flat), 2000):
            self.writes.append(("load_since", *flat[i:i + 2000]))
        return self.take()

    def load_seen(self, fp: bytes, revisit_at: float | None) -> None:
        if self.bloom is not None:
            block, bits = self.bloom.locate(fp)
            self.writes.extend(("bloom_bit", block, b) for b in bits)
        else:
            self.writes.append(("seen", fp, revisit_at))

    def load_bloom(self, bits: bytes) -> None:
        if self.bloom is None or len(bits) != self.bloom.size_bytes:
            raise ConfigError("dump has a Bloom filter of another shape than this store")
        self.writes.append(("bloom", bits))

    def load_entry(self, key: str, priority: int, retries: int, payload: bytes,
                   not_before: float | None) -> None:
        self.writes.append(("load_entry", key, priority, retries.to_bytes(2, "big") + payload,
                            "" if not_before is None else not_before))

    def load_queue(self, key: str, accepted: int, ready_at: float,
                   settings: Mapping[str, float], since: float | None) -> None:
        if since is not None:
            self.since[key] = since
        clean = check_settings(settings)
        flat: list[Any] = []
        for k, v in clean.items():
            if v is not None:
                flat += [k, v]
        self.writes.append(("load_queue", key, accepted, ready_at, *flat))

    def load_dead(self, queue: str, priority: int, retries: int, payload: bytes,
                  error: str, died_at: float) -> None:
        self.writes.append(("load_dead", queue, priority, retries, payload, error,
                            repr(float(died_at))))

    def load_counters(self, counters: Mapping[str, int], rejected: Mapping[str, int]) -> None:
        self.writes.extend(("counter", k, int(v)) for k, v in counters.items()
                           if k in _COUNTERS)
        self.writes.extend(("rejected", k, int(v)) for k, v in rejected.items())

    def load_tallies(self, counts: Mapping[str, int]) -> None:
        self.writes.extend(("tally", name, int(n)) for name, n in counts.items())

    def load_value(self, name: str, data: bytes, expires: float | None) -> None:
        self.writes.append(("value", name, data, expires))
