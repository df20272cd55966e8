"""The Redis store's dump and load: every piece of a crawl's state as the records of
:mod:`crawlq.stores.dumpfmt`, and the writers that load such records back (pipelined)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from ..errors import ConfigError
from . import dumpfmt
from .base import (
    check_settings,
)
from .bloom import BLOCK_BYTES
from .redis_admin import RedisAdmin
from .redis_core import _COUNTERS, _kv, _unpack


class RedisDump(RedisAdmin):
    """The Redis store's dump and load."""

    def dump(self) -> Iterator[dict[str, Any]]:
        """See :meth:`Store.dump`. Reads while others may write: dump a quiet crawl."""
        r, p = self._client, self._p
        meta = self._retrying(lambda: r.hgetall(self._m))
        rej = self._retrying(lambda: r.hgetall(f"{p}:rej"))
        c = {k.decode(): int(v) for k, v in meta.items() if k.decode() in _COUNTERS}
        c["dead"] = int(self._retrying(lambda: r.hlen(f"{p}:dead")))
        yield dumpfmt.counters(c, {k.decode(): int(v) for k, v in rej.items()})
        keys = self._all_queue_keys()
        for i in range(0, len(keys), 500):
            part = keys[i:i + 500]
            for k, info in zip(part, self._queue_infos(part, 0.0)):
                yield dumpfmt.queue(info.key, info.accepted, info.ready_at, info.settings)
                levels = self._cmd("zrange", f"{p}:qp:".encode() + k, 0, -1)
                for level in levels:
                    lk = f"{p}:q:".encode() + level + b":" + k
                    for item in self._cmd("lrange", lk, 0, -1):
                        yield dumpfmt.entry(info.key, int(level),
                                            int.from_bytes(item[:2], "big"), item[2:], None)
        for rec in self._retrying(lambda: r.hvals(f"{p}:ls")):
            key, prio, item = _unpack(rec)
            yield dumpfmt.entry(key.decode("utf-8", "surrogateescape"), prio,
                                int.from_bytes(item[:2], "big"), item[2:], None)
        for _, at, key, prio, item in self._scheduled():
            yield dumpfmt.entry(key.decode("utf-8", "surrogateescape"), prio,
                                int.from_bytes(item[:2], "big"), item[2:], at)
        for d in self.dead(2**31):
            yield dumpfmt.dead(d)
        if self.bloom is not None:
            bits = bytearray(self.bloom.size_bytes)
            for b in range(self.bloom.blocks):
                block = self._cmd("get", f"{p}:bl:{b}")
                if block:
                    bits[b * BLOCK_BYTES:b * BLOCK_BYTES + len(block)] = block
            yield dumpfmt.bloom(bits)
        revisit = {k: float(v) for k, v in self._retrying(lambda: r.hgetall(f"{p}:rv")).items()}
        buckets = self._retrying(lambda: list(r.scan_iter(match=f"{p}:sb:*", count=5000)))
        for bucket in buckets:
            for fp in self._retrying(lambda b=bucket: r.hkeys(b)):  # type: ignore[misc]
                yield dumpfmt.seen(fp, revisit.get(fp))

    def load(self, records: Iterable[dict[str, Any]]) -> int:
        """See :meth:`Store.load`."""
        n = 0
        self._pending: list[tuple[str, tuple[Any, ...]]] = []
        for rec in records:
            n += dumpfmt.apply(self, rec)
            if len(self._pending) >= 1000:
                self._flush()
        self._flush()
        return n

    def _flush(self) -> None:
        pending, self._pending = self._pending, []
        if not pending:
            return
        script = self._scripts["maintain"]

        def go() -> None:
            pipe = self._client.pipeline(transaction=False)
            # redis-py's cluster pipeline refuses EVALSHA: scripts go one by one there.
            target = self._client if self.cluster else pipe
            seen = [args[0] for op, args in pending if op == "seen"]
            if seen:  # added by the script: it knows the seen-set's buckets
                script(keys=self._keys, args=[*self._pargs, 0.0, "load_seen", *seen],
                       client=target)
            for op, args in pending:
                if op == "seen":
                    fp, at = args
                    if at is not None:
                        pipe.hset(f"{self._p}:rv", fp, at)
                elif op == "setbit":
                    pipe.setbit(args[0], args[1], 1)
                elif op == "hincrby":
                    pipe.hincrby(*args)
                elif op == "hset":
                    pipe.hset(*args)
                elif op == "zadd":
                    pipe.zadd(*args)
                else:
                    script(keys=self._keys, args=[*self._pargs, 0.0, op, *args],
                           client=target)
            pipe.execute()

        self._retrying(go)

    # Primitive writers used by dumpfmt.apply (load); not part of the contract.

    def _load_seen(self, fp: bytes, revisit_at: float | None) -> None:
        if self.bloom is not None:
            block, bits = self.bloom.locate(fp)
            key = f"{self._p}:bl:{block}"
            self._pending.extend(("setbit", (key, b)) for b in bits)
        else:
            self._pending.append(("seen", (fp, revisit_at)))

    def _load_bloom(self, bits: bytes) -> None:
        if self.bloom is None or len(bits) != self.bloom.size_bytes:
            raise ConfigError("dump has a Bloom filter of another shape than this store")
        p = self._p
        for b in range(self.bloom.blocks):
            new = bits[b * BLOCK_BYTES:(b + 1) * BLOCK_BYTES]
            if not any(new):
                continue
            key = f"{p}:bl:{b}"
            old = (self._cmd("get", key) or b"").ljust(BLOCK_BYTES, b"\0")
            merged = bytes(x | y for x, y in zip(old, new))
            self._cmd("set", key, merged)

    def _load_entry(self, key: str, priority: int, retries: int, payload: bytes,
                    not_before: float | None) -> None:
        self._pending.append(("load_entry", (key, priority,
                                             retries.to_bytes(2, "big") + payload,
                                             "" if not_before is None else not_before)))

    def _load_queue(self, key: str, accepted: int, ready_at: float,
                    settings: Mapping[str, float]) -> None:
        clean = check_settings(settings)
        flat: list[Any] = []
        for k, v in clean.items():
            if v is not None:
                flat += [k, v]
        self._pending.append(("load_queue", (key, accepted, ready_at, *flat)))

    def _load_dead(self, queue: str, priority: int, retries: int, payload: bytes,
                   error: str, died_at: float) -> None:
        self._pending.append(("load_dead", (queue, priority, retries, payload, error,
                                            repr(float(died_at)))))

    def _load_counters(self, counters: Mapping[str, int], rejected: Mapping[str, int]) -> None:
        for k, v in counters.items():
            if k in _COUNTERS:
                self._pending.append(("hincrby", (self._m, k, int(v))))
        for k, v in rejected.items():
            self._pending.append(("hincrby", (f"{self._p}:rej", k, int(v))))

    def _load_value(self, name: str, data: bytes, expires: float | None) -> None:
        self._pending.append(("hset", (f"{self._p}:kv", name, _kv(data, expires))))
        if expires is not None:
            self._pending.append(("zadd", (f"{self._p}:kvx", {name: expires})))
