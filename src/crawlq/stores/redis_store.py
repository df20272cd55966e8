"""The Redis store: one crawl shared by many processes and machines.

Every state change is one Lua script run atomically by the server (files in
``crawlq/stores/lua``, each prefixed with ``common.lua``); redis-py loads a script once
and reloads it after a ``NOSCRIPT`` (a restarted or flushed server). Batches are cut
into chunks of :data:`CHUNK` entries, sent in one pipelined round trip: each chunk is
atomic, and no script runs long enough to stall the other workers.

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
from collections.abc import Callable, Sequence
from typing import Any

import msgpack

from .base import (
    Ack,
    Entry,
    Leased,
)
from .redis_core import CHUNK, _bloom_spec
from .redis_dump import RedisDump


class RedisStore(RedisDump):
    """A store on a Redis server or cluster; see :class:`crawlq.stores.base.Store`.

    ``url`` is a redis-py URL (``redis://``, ``rediss://``, ``unix://``) with optional
    crawlq query arguments ``prefix`` (default ``crawlq``), ``cluster`` (``1`` for a
    Redis Cluster) and ``retry_deadline`` (the keyword argument wins). A password comes
    from the URL or ``$CRAWLQ_REDIS_PASSWORD``. Its parts, each a class the next one
    extends: :class:`~.redis_core.RedisCore` (the client, scripts and call plumbing),
    :class:`~.redis_admin.RedisAdmin` (looking and steering),
    :class:`~.redis_dump.RedisDump` (dump and load); here the calls of a crawl.
    """

    def _add_blobs(self, entries: Sequence[Entry]) -> list[bytes]:
        """The add script's argument for each chunk of ``entries``."""
        shape = self.bloom
        # Lua's cmsgpack reads no msgpack "bin" type: bytes go as raw strings.
        packb = msgpack.Packer(use_bin_type=False).pack
        blobs = []
        for start in range(0, len(entries), CHUNK):
            rows: list[tuple[Any, ...]]
            if shape is None:
                rows = [(fp, key, prio, retries.to_bytes(2, "big") + payload, nb, rv)
                        for fp, key, prio, payload, nb, rv, retries in
                        entries[start:start + CHUNK]]
            else:
                rows = [(fp, key, prio, retries.to_bytes(2, "big") + payload, nb, rv,
                         None if fp is None else _bloom_spec(shape, fp))
                        for fp, key, prio, payload, nb, rv, retries in
                        entries[start:start + CHUNK]]
            blobs.append(packb(rows))
        return blobs

    def add(self, entries: Sequence[Entry], now: float) -> list[int]:
        """See :meth:`Store.add`."""
        blobs = self._add_blobs(entries)
        if not blobs:
            return []
        out: list[int] = []
        for res in self._run_chunks("add", [now], [[b] for b in blobs]):
            out.extend(res)  # bytes of b"0"/b"1"/b"2": their ord minus 48
        return [c - 48 for c in out]

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
        blobs = self._add_blobs(entries)
        script = self._scripts["add"]
        sent = 0
        try:
            for blob in blobs:
                conn.send_command("EVALSHA", script.sha, 1, self._m, *self._pargs, now, blob)
                sent += 1
        except (redis.ConnectionError, redis.TimeoutError):
            pass  # what was not sent (or not answered) goes again through add()

        def result() -> list[int]:
            out: list[int] = []
            done = 0
            try:
                for i in range(sent):
                    try:
                        res = conn.read_response()
                    except redis.exceptions.NoScriptError:  # a restarted or flushed server
                        res = self._run("add", now, blobs[i])
                    except redis.ResponseError as exc:
                        raise self.refused(exc) from exc
                    out.extend(res)
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
                for res in self._run_chunks("add", [now], [[b] for b in blobs[done:]]):
                    out.extend(res)
            return [c - 48 for c in out]

        return result

    def lease(self, now: float, limit: int, ttl: float,
              queue: str | None = None) -> list[Leased]:
        """See :meth:`Store.lease`."""
        if limit <= 0:
            return []
        flat = self._run("lease", now, limit, ttl, queue or "")
        expires = now + ttl
        out: list[Leased] = []
        for i in range(0, len(flat), 4):
            item = flat[i + 3]
            out.append((int(flat[i]), flat[i + 1].decode("utf-8", "surrogateescape"),
                        int(flat[i + 2]), int.from_bytes(item[:2], "big"), item[2:], expires))
        return out

    def release(self, acks: Sequence[Ack], now: float) -> list[bool]:
        """See :meth:`Store.release`."""
        packb = msgpack.Packer(use_bin_type=False).pack
        chunks = [[packb(acks[start:start + CHUNK])] for start in range(0, len(acks), CHUNK)]
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


__all__ = ["CHUNK", "RedisStore"]
