"""One crawl spread over many Redis hash slots: the Redis store's ``shards=N`` option.

A crawl on one Redis store lives in one hash slot (``{prefix}``), so on a Redis Cluster
one node serves it all. :class:`ShardedRedisStore` cuts the crawl into ``N`` shards,
each a whole :class:`~crawlq.stores.redis_store.RedisStore` under the prefix
``<prefix>#<i>`` (its own hash tag: Redis Cluster places the shards over its nodes),
and a home store under ``<prefix>`` for what is crawl-wide. A queue belongs to the shard
of its registered domain, so everything a queue rule needs (its seen URLs, politeness,
the domain's caps and parking, leases, budgets) stays in one shard and every script in
one slot. What is crawl-wide:

- ``stats()``: each shard's and the home's counters added up (read one after the
  other: exact on a quiet crawl, a moment's drift under load);
- the ready line: ``next(n)`` reads the first ``n`` queues of every shard's line (the
  ``line`` script, :meth:`RedisStore.ready_line_reply`), merges them by priority and
  waiting time as one line, plans its round-robin over it (:func:`.rules.rounds`) and
  leases from each shard its share (its queues in that line, as many leases as the
  plan gives them): the order of one store, but not atomic across shards (another
  client's call in between may change a shard's line; a domain cap may park a queue
  the plan counted on);
- an exchange (the crawl loop's call) costs each shard it involves one script, all in
  one round trip, so its leases are shared from each shard's line in brief (ready
  queues per level, :meth:`_shares`): by priority, then in proportion, not in the exact
  waiting order across shards (within a shard, its line's order);
- named values, tallies and the counts of refusals and duplicates the caller
  recognized: in the home store, exact;
- tokens and dead entries' ids: a shard's number times ``N`` plus the shard;
- ``dump``: the home's records, then each shard's (counters added up on load); a seen
  URL's record carries its shard (``"shard": [i, N]``), which a sharded crawl of as many
  shards loads into that shard; a seen record without one (from another store, or
  another count of shards) carries no domain, so it goes to every shard.

The shard count is kept in the home store: a crawl is always opened with its own.
A Bloom seen-set is one filter per shard, each sized for its share of the crawl.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import threading
import zlib
from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

from ..errors import ConfigError
from ..models import QueueInfo, Stats
from ..policies.domains import domain_of
from . import dumpfmt
from .base import (
    MAX_REDELIVERIES,
    Ack,
    DeadEntry,
    Entry,
    Leased,
    Pick,
    QueuePolicy,
    check_settings,
)
from .bloom import BloomShape
from .redis_store import Exchanged, Head, Line, RedisStore, run_many
from .rules import domain_room, joins_line, rounds, share_domains

__all__ = ["ShardedRedisStore"]

LOAD_BATCH = 10_000
"""Records a load routes before it hands each shard its part."""

SEP = "#"
"""Between a sharded crawl's prefix and a shard's number in the shard's prefix: a
character ``crawlq serve`` escapes in the crawl IDs it puts in prefixes, so that no
crawl's prefix is another's shard."""

RECHECK = 1.0
"""Seconds, at most, that the heads of a shard's ready line, once read, serve a store
object's lease calls while it changes nothing in that shard (and nothing there comes
due): what other clients change in a shard reaches this object's line within as long."""

_Head = tuple[int, float, str, int, str, int, int]
"""A queue of a shard's ready line: (-level, since, key, room, domain, domain's leases
out, shard)."""


@dataclasses.dataclass(frozen=True)
class _View:
    """A shard's ready line as a store object last read it."""

    heads: list[_Head] | None
    """Its first queues (None: not listed)."""
    ask: int
    """How many were asked."""
    levels: list[tuple[int, int]]
    """Each level's count of ready queues, best level first."""
    until: float
    """When it stops serving: something may come due there (or RECHECK is up)."""
    version: int
    """The line's version when read (:class:`~.redis_store.Line`)."""


def _as_heads(got: Sequence[Head], shard: int) -> list[_Head]:
    """A shard's listing of its line as heads to sort into the crawl-wide line."""
    return [(-level, since, key, room, dom, dinf, shard)
            for level, since, key, room, dom, dinf in got]


class ShardedRedisStore:
    """A crawl over ``shards`` Redis stores (see the module); the Store protocol."""

    in_process = False
    """Every call waits on the network (as :attr:`RedisStore.in_process`)."""

    def __init__(self, url: str, policy: QueuePolicy | None = None, *, shards: int,
                 lifo: bool = False, bloom: BloomShape | None = None,
                 prefix: str | None = None, retry_deadline: float | None = None,
                 max_redeliveries: int = MAX_REDELIVERIES, create: bool = True) -> None:
        if shards < 1:
            raise ConfigError(f"shards must be a count of 1 or more, not {shards!r}")
        self.n = shards
        self.home = RedisStore(url, policy, lifo=lifo, bloom=None, prefix=prefix,
                               retry_deadline=retry_deadline,
                               max_redeliveries=max_redeliveries, create=create, home=True)
        kept = self.home.shard_count(shards)
        if kept != shards:
            self.home.close()
            if kept is None:
                raise ConfigError(f"the crawl {self.home.prefix!r} is not sharded: open it "
                                  "without shards=")
            raise ConfigError(f"the crawl {self.home.prefix!r} has {kept} shards, not "
                              f"{shards}: open it with shards={kept}")
        part = None if bloom is None else BloomShape(
            max(1, math.ceil(bloom.capacity / shards)), bloom.error_rate)
        self.shards = [
            RedisStore(url, policy, lifo=lifo, bloom=part, prefix=f"{self.home.prefix}{SEP}{i}",
                       retry_deadline=retry_deadline, max_redeliveries=max_redeliveries,
                       share=self.home)
            for i in range(shards)]
        # shard -> its line as last read; and how many times this object changed each
        # shard other than by an exchange script (a reading that raced with such a
        # change is not kept: threads share the object)
        self._views: dict[int, _View] = {}
        self._changes = [0] * shards
        self._lock = threading.Lock()  # (over both)
        self._turn = 0  # (where the remainder of an exchange's leases starts: see _shares)
        self._owed: dict[int, float] = {}  # (shard -> leases owed it: see _shares)

    # -- routing ---------------------------------------------------------------------

    def shard_of(self, queue: str) -> int:
        """The shard of ``queue``: its registered domain's."""
        # (CRC-32 alone, modulo a power of two, keeps only its low bits, which names
        # alike share: 100 names site<i>.test fell on 4 of 8 shards. Multiplied by the
        # golden ratio's 32-bit constant, the product's high bits mix every bit.)
        crc = zlib.crc32(domain_of(queue).encode("utf-8", "surrogateescape"))
        return ((crc * 0x9E3779B1) & 0xFFFFFFFF) * self.n >> 32

    def _by_shard(self, keys: Iterable[str]) -> dict[int, list[int]]:
        """Shard -> the places, in order, of the ``keys`` (queues) it holds."""
        parts: dict[int, list[int]] = defaultdict(list)
        for i, key in enumerate(keys):
            parts[self.shard_of(key)].append(i)
        return parts

    def _global(self, leases: list[Leased], shard: int) -> list[Leased]:
        n = self.n
        return [(t * n + shard, *rest) for t, *rest in leases]  # type: ignore[misc]

    def _tokens(self, tokens: Iterable[int]) -> dict[int, list[tuple[int, int]]]:
        """Shard -> (place, its own token) of each of ``tokens``."""
        parts: dict[int, list[tuple[int, int]]] = defaultdict(list)
        for i, t in enumerate(tokens):
            parts[t % self.n].append((i, t // self.n))
        return parts

    # -- the Store protocol -----------------------------------------------------------

    @property
    def policy(self) -> QueuePolicy:
        """See :attr:`Store.policy`."""
        return self.home.policy

    def set_policy(self, policy: QueuePolicy) -> None:
        """See :meth:`Store.set_policy`."""
        with self._changing(range(self.n)):
            for s in (self.home, *self.shards):
                s.set_policy(policy)

    def add(self, entries: Sequence[Entry], now: float) -> list[int]:
        """See :meth:`Store.add`: each shard adds its part, all in one round trip."""
        return self._change(entries, (), 0, 0.0, now)[0]

    def release(self, acks: Sequence[Ack], now: float) -> list[bool]:
        """See :meth:`Store.release`: each shard answers its leases, all in one round
        trip. Answers of one shard only (one ``done()`` per lease) run its plain release
        script, without reading its line back (a third of the exchange script's server
        CPU): its line read is forgotten, and read again when leases are next shared."""
        parts = self._tokens(a[0] for a in acks)
        if len(parts) != 1:
            return self._change((), acks, 0, 0.0, now)[1]
        [(shard, mine)] = parts.items()
        with self._changing([shard]):
            return self.shards[shard].release([(t, *acks[i][1:]) for i, t in mine], now)

    def exchange(self, entries: Sequence[Entry], acks: Sequence[Ack], limit: int,
                 ttl: float, now: float) -> tuple[list[int], list[bool], list[Leased]]:
        """See :class:`~crawlq.stores.base.Exchanges`: one call of each shard the links
        and the answers go to or that has a share of the leases (its links first, then
        its answers, then its leases, so that a page is never answered before the links
        it found are in), all in one round trip. The shares follow each shard's line
        in brief as last read (:meth:`_shares`): within a shard the order of its line;
        across shards, each level's ready queues share the call's leases."""
        return self._change(entries, acks, limit, ttl, now)

    def _change(self, entries: Sequence[Entry], acks: Sequence[Ack], limit: int,
                ttl: float, now: float) -> tuple[list[int], list[bool], list[Leased]]:
        """Add ``entries``, answer ``acks``, then lease up to ``limit``: one exchange
        script on each shard with a part in it."""
        adds = self._by_shard(e[1] for e in entries)
        answers = self._tokens(a[0] for a in acks)
        touched = set(adds) | set(answers)
        shares: dict[int, tuple[int, int]] = {}
        if limit > 0:
            lone = self._lone(touched, now)
            # (the one shard whose line may hold a ready queue: its line is the crawl's,
            # and it leases as one store would)
            shares = {lone: (limit, 0)} if lone is not None else \
                self._shares(limit, touched, now)
        steps = {shard: ([entries[i] for i in adds.get(shard, ())],
                         [(t, *acks[i][1:]) for i, t in answers.get(shard, ())],
                         *shares.get(shard, (0, 1)), ())
                 for shard in [*shares, *sorted(touched - set(shares))]}
        replies = self._steps(steps, ttl, now, 0)
        statuses, held = [0] * len(entries), [False] * len(acks)
        leases: list[Leased] = []
        for shard, got in replies.items():
            for i, st in zip(adds.get(shard, ()), got.statuses):
                statuses[i] = st
            for (i, _), h in zip(answers.get(shard, ()), got.held):
                held[i] = h
            leases += self._global(got.leases, shard)
        return statuses, held, leases

    def _lone(self, touched: set[int], now: float) -> int | None:
        """The one shard whose ready line may hold a queue now, if only one may: the
        line last read of every other shard serves and is empty, and no other is
        ``touched`` (changed by the call at hand)."""
        with self._lock:
            views = dict(self._views)
        maybe = set(touched)
        for shard in range(self.n):
            if len(maybe) > 1:
                return None
            view = views.get(shard)
            if view is None or view.until <= now or view.levels:
                maybe.add(shard)
        return next(iter(maybe)) if len(maybe) == 1 else None

    def _shares(self, limit: int, touched: set[int], now: float
                ) -> dict[int, tuple[int, int]]:
        """Shard -> (leases, queues of its line) for an exchange's ``limit`` leases,
        best served first, from each shard's line in brief as last read (no listing of
        queues: an exchange costs each shard one script, and as few shards as fair).
        Level by level, best first, each ready queue one lease while the level's fit;
        a level with more ready queues than leases left is served from few shards, each
        up to its ready queues, those owed the most first: each of the level's shards
        is owed its part of the leases in proportion to its ready queues, call after
        call, until served (a shard the call changes anyway counts one lease more owed:
        its script runs in any case). What is left goes in equal parts to the shards
        served and those ``touched`` (more leases from their queues, or queues the call
        makes ready), and to those whose line is not known now when none is known to
        hold a ready queue; a shard whose line is not known now is read in the same
        call (what it was owed it keeps)."""
        with self._lock:  # (the debts are this object's, whichever thread asks)
            return self._shares_locked(limit, touched, now)

    def _shares_locked(self, limit: int, touched: set[int], now: float
                       ) -> dict[int, tuple[int, int]]:
        """:meth:`_shares`, with the lock held."""
        views = {shard: v for shard, v in self._views.items() if v.until > now}
        by_level: dict[int, list[tuple[int, int]]] = defaultdict(list)
        for shard, view in views.items():
            for level, count in view.levels:
                by_level[level].append((shard, count))
        leases: dict[int, int] = defaultdict(int)
        queues: dict[int, int] = defaultdict(int)
        left = limit
        owed = self._owed
        for level in sorted(by_level, reverse=True):
            group = by_level[level]
            total = sum(c for _, c in group)
            if total > left:
                for shard in (set(owed) & set(views)) - {sh for sh, _ in group}:
                    del owed[shard]  # (nothing ready at the level now: owed nothing)
                for shard, count in group:
                    owed[shard] = owed.get(shard, 0.0) + left * count / total
                for shard, count in sorted(group, key=lambda g: (
                        -owed[g[0]] - (g[0] in touched), g[0])):
                    k = min(count, left)
                    leases[shard] += k
                    queues[shard] += k
                    owed[shard] -= k
                    left -= k
                    if not left:
                        break
                break
            for shard, count in group:
                leases[shard] += count
                queues[shard] += count
            left -= total
        unknown = set(range(self.n)) - set(views)
        # (none known to hold a ready queue: the shards read in this call may)
        more = sorted(set(leases) | touched | (unknown if not leases else set()))
        if left > 0 and more:
            self._turn = (self._turn + 1) % len(more)  # (a remainder goes round)
            for i, shard in enumerate(more[self._turn:] + more[:self._turn]):
                k = left // len(more) + (i < left % len(more))
                if k:
                    leases[shard] += k
                    if shard in touched or shard in unknown:
                        queues[shard] += k
        for shard in unknown:
            leases.setdefault(shard, 0)  # (read in the same call)
        return {shard: (k, max(queues[shard], 1)) for shard, k in leases.items()}

    def _steps(self, steps: Mapping[int, tuple[Sequence[Entry], Sequence[Ack], int, int,
                                               Sequence[str]]],
               ttl: float, now: float, ask: int) -> dict[int, Exchanged]:
        """Run, in one round trip per node, one exchange script on each shard of
        ``steps`` (shard -> its entries to add, its answers (its own tokens), leases
        wanted, queues of the line they come from at most (0: every pass, as one
        store), queues to park) that also lists the first ``ask`` queues of its line
        once done: the line then read is kept as the shard's (see :meth:`_keep`)."""
        with self._lock:
            marks = {shard: self._changes[shard] for shard in steps}
        offers, calls = [], []
        for shard, (entries, acks, limit, line, park) in steps.items():
            offer, args = self.shards[shard].exchange_call(entries, acks, limit, ttl, now,
                                                           (line, park, ask))
            offers.append(offer)
            calls.append((self.shards[shard], "exchange", args))
        try:
            replies = run_many(calls)
        except BaseException:
            self._touched(steps)
            raise
        out: dict[int, Exchanged] = {}
        for (shard, (entries, *_)), offer, reply in zip(steps.items(), offers, replies):
            got = self.shards[shard].exchange_reply(entries, offer, reply, now, ttl)
            out[shard] = got
            if got.line is not None:
                self._keep(shard, got.line, ask, now, marks[shard])
        return out

    def _keep(self, shard: int, line: Line, ask: int, now: float, mark: int) -> None:
        """Keep ``line``, ``shard``'s line as read at ``now`` (its first ``ask`` queues
        listed), until something may come due there (or RECHECK): unless a newer
        reading is kept (calls of this object in several threads: their replies come
        back in any order), or this object changed the shard otherwise since the
        reading began (its count of such changes was ``mark``)."""
        until = now + RECHECK if line.due is None else min(line.due, now + RECHECK)
        heads = None if line.heads is None else _as_heads(line.heads, shard)
        with self._lock:
            kept = self._views.get(shard)
            if kept is not None and kept.until <= now:
                kept = None  # (no longer serving: a version from before a clear, or a
                # failover to a replica behind, must not hold the new readings off)
            if self._changes[shard] != mark or (kept is not None and (
                    kept.version > line.version
                    or (kept.version == line.version and heads is None))):
                return
            self._views[shard] = _View(heads, ask, line.levels, until, line.version)

    def lease(self, now: float, limit: int, ttl: float,
              queue: str | None = None) -> list[Leased]:
        """See :meth:`Store.lease` and the module: passes over the crawl-wide line (a
        queue whose session ended without a rest is ready again at once, behind the
        others), each planned, then each shard's share leased."""
        if limit <= 0:
            return []
        if queue is not None:
            shard = self.shard_of(queue)
            with self._changing([shard]):
                return self._global(self.shards[shard].lease(now, limit, ttl, queue), shard)
        out: list[Leased] = []
        # Another pass when a queue served is ready again at once, as one store's
        # passes. (A pass that leases nothing is the last.)
        for _ in range(limit):
            got, again = self._lease_pass(now, limit - len(out), ttl)
            out += got
            if len(out) >= limit or not again or not got:
                break
        return out

    def _lease_pass(self, now: float, limit: int, ttl: float
                    ) -> tuple[list[Leased], bool]:
        """One pass of :meth:`lease` over the crawl-wide line: the leases, and whether a
        queue served is ready again at once. The line is built as one store builds
        its own (the engine's rules: a queue of a full domain does not join it, and is
        parked; the queues of a domain share its room), from the shards' heads."""
        lone = self._lone(set(), now)
        if lone is not None:  # (its line is the crawl's: it leases as one store would)
            did = self._steps({lone: ((), (), limit, 0, ())}, ttl, now, 0)[lone]
            return self._global(did.leases, lone), False
        policy = self.policy
        capped = policy.domain_concurrency > 0
        ask = limit
        while True:
            heads: list[_Head] = []
            full: set[int] = set()  # (shards that may have more ready queues than listed)
            for shard, (got, asked) in self._read_heads(now, ask).items():
                if len(got) >= asked:
                    full.add(shard)
                heads += got
            heads.sort()
            line: list[_Head] = []
            park: dict[int, list[str]] = defaultdict(list)  # shard -> queues to park
            ahead: dict[str, int] = defaultdict(int)
            for h in heads:
                if len(line) >= limit:
                    break
                dom = h[4]
                if capped and dom:
                    if not joins_line(policy, h[5], ahead[dom]):
                        park[h[6]].append(h[2])
                        continue
                    ahead[dom] += 1
                line.append(h)
            # (the line came short while a shard listed all it was asked: ask more)
            if len(line) >= limit or not full or ask >= 1_000_000:
                break
            ask *= 4
        if not line and not park:
            return [], False
        rooms = [h[3] for h in line]
        if capped:
            inflight = {h[4]: h[5] for h in line if h[4]}  # domain -> its leases out
            number = {d: i for i, d in enumerate(inflight)}
            share_domains(rooms, [number.get(h[4], -1) for h in line],
                          {number[d]: domain_room(policy, n) for d, n in inflight.items()})
        plan = [pair for each in rounds(rooms, limit) for pair in each]
        want: dict[int, int] = defaultdict(int)  # shard -> leases planned
        queues: dict[int, int] = defaultdict(int)  # shard -> its queues in the line
        for i, k in plan:
            want[line[i][6]] += k
        for h in line:
            queues[h[6]] += 1
        steps = {shard: ((), (), want.get(shard, 0), max(queues.get(shard, 0), 1),
                         park.get(shard, ()))
                 for shard in sorted(set(want) | set(park))}
        got_by: dict[str, list[Leased]] = defaultdict(list)  # queue -> its leases
        again = False
        for shard, did in self._steps(steps, ttl, now, limit).items():
            again = again or did.again
            for le in self._global(did.leases, shard):
                got_by[le[1]].append(le)
        out: list[Leased] = []
        for i, k in plan:  # (in the plan's serving order)
            mine = got_by[line[i][2]]
            out.extend(mine[:k])
            del mine[:k]
        for rest in got_by.values():  # (a shard's line moved meanwhile: still handed out)
            out.extend(rest)
        return out, again

    def _read_heads(self, now: float, ask: int) -> dict[int, tuple[list[_Head], int]]:
        """The heads of every shard's ready line, and how many were asked: read again,
        all in one round trip per node, where the last reading does not serve (too old,
        something came due there, another call of this object changed the shard, not
        listed, or fewer asked than the line held)."""
        with self._lock:
            views = dict(self._views)
            changes = list(self._changes)
        out: dict[int, tuple[list[_Head], int]] = {}
        need = []
        for shard in range(self.n):
            view = views.get(shard)
            if (view is None or view.heads is None or view.until <= now
                    or (view.ask < ask and len(view.heads) >= view.ask)):
                need.append(shard)
            else:
                out[shard] = (view.heads, view.ask)
        replies = run_many([(self.shards[shard], "line", (now, ask)) for shard in need])
        for shard, reply in zip(need, replies):
            line = RedisStore.ready_line_reply(reply)
            out[shard] = (_as_heads(line.heads or [], shard), ask)
            self._keep(shard, line, ask, now, changes[shard])
        return out

    @contextlib.contextmanager
    def _changing(self, shards: Iterable[int]) -> Iterator[None]:
        """Around a change of ``shards``: their lines read are forgotten, before (a
        reading under way is then not kept) and once it is done."""
        touched = list(shards)
        self._touched(touched)
        try:
            yield
        finally:
            self._touched(touched)

    def _touched(self, shards: Iterable[int]) -> None:
        """Forget the lines read of ``shards``: this object changes them."""
        with self._lock:
            for shard in shards:
                self._changes[shard] += 1
                self._views.pop(shard, None)

    def renew(self, tokens: Sequence[int], expires: float, now: float) -> list[bool]:
        """See :meth:`Store.renew`."""
        out = [False] * len(tokens)
        for shard, items in self._tokens(tokens).items():
            got = self.shards[shard].renew([t for _, t in items], expires, now)
            for (i, _), held in zip(items, got):
                out[i] = held
        return out

    def next_ready_at(self, now: float) -> float | None:
        """See :meth:`Store.next_ready_at`: the earliest of the shards'."""
        replies = run_many([(s, "ready_at", (now,)) for s in self.shards])
        times = [float(r) for r in replies if r]
        return min(times) if times else None

    def block(self, queue: str, until: float, now: float) -> None:
        """See :meth:`Store.block`."""
        shard = self.shard_of(queue)
        with self._changing([shard]):
            self.shards[shard].block(queue, until, now)

    def unblock(self, queue: str, now: float) -> None:
        """See :meth:`Store.unblock`."""
        shard = self.shard_of(queue)
        with self._changing([shard]):
            self.shards[shard].unblock(queue, now)

    def configure_queue(self, queue: str, settings: Mapping[str, float | None],
                        now: float) -> None:
        """See :meth:`Store.configure_queue`."""
        shard = self.shard_of(queue)
        with self._changing([shard]):
            self.shards[shard].configure_queue(queue, settings, now)

    def count_rejected(self, reasons: Mapping[str, int]) -> None:
        """See :meth:`Store.count_rejected` (in the home store)."""
        self.home.count_rejected(reasons)

    def count_duplicates(self, n: int) -> None:
        """See :meth:`Store.count_duplicates` (in the home store)."""
        self.home.count_duplicates(n)

    def put_values(self, items: Sequence[tuple[str, bytes, float | None]]) -> None:
        """See :meth:`Store.put_values` (in the home store)."""
        self.home.put_values(items)

    def get_values(self, names: Sequence[str], now: float) -> list[bytes | None]:
        """See :meth:`Store.get_values`."""
        return self.home.get_values(names, now)

    def drop_values(self, names: Sequence[str]) -> None:
        """See :meth:`Store.drop_values`."""
        self.home.drop_values(names)

    def tally(self, deltas: Mapping[str, int]) -> list[int]:
        """See :meth:`Store.tally`."""
        return self.home.tally(deltas)

    def tallies(self, names: Sequence[str]) -> list[int]:
        """See :meth:`Store.tallies`."""
        return self.home.tallies(names)

    def drop_tallies(self, names: Sequence[str]) -> None:
        """See :meth:`Store.drop_tallies`."""
        self.home.drop_tallies(names)

    def stats(self, now: float, per_queue: int = 0) -> Stats:
        """See :meth:`Store.stats`: the shards' and the home's added up."""
        parts = [s.stats(now, per_queue) for s in (self.home, *self.shards)]
        rejected: dict[str, int] = defaultdict(int)
        for p in parts:
            for reason, k in p.rejected.items():
                rejected[reason] += k
        per = sorted((q for p in parts for q in p.per_queue),
                     key=lambda q: (q.queued, q.leased), reverse=True)[:per_queue]
        sums = {f: sum(getattr(p, f) for p in parts) for f in _SUMMED}
        return Stats(**sums, rejected=dict(rejected), per_queue=tuple(per))

    def queues(self, now: float, limit: int = 100) -> list[QueueInfo]:
        """See :meth:`Store.queues`: the biggest of every shard's."""
        every = [q for s in self.shards for q in s.queues(now, limit)]
        return sorted(every, key=lambda q: (q.queued, q.leased), reverse=True)[:limit]

    def dead(self, limit: int = 100) -> list[DeadEntry]:
        """See :meth:`Store.dead`: in the order they died."""
        every = [d._replace(id=d.id * self.n + i)
                 for i, s in enumerate(self.shards) for d in s.dead(limit)]
        return sorted(every, key=lambda d: (d.died_at, d.id))[:limit]

    def delete_queue(self, queue: str, now: float) -> int:
        """See :meth:`Store.delete_queue`."""
        shard = self.shard_of(queue)
        with self._changing([shard]):
            return self.shards[shard].delete_queue(queue, now)

    def remove_queued(self, queue: str, where: Pick, now: float) -> int:
        """See :meth:`Store.remove_queued`."""
        shard = self.shard_of(queue)
        with self._changing([shard]):
            return self.shards[shard].remove_queued(queue, where, now)

    def requeue_dead(self, ids: Iterable[int] | None, now: float) -> int:
        """See :meth:`Store.requeue_dead`."""
        with self._changing(range(self.n)):
            if ids is None:
                return sum(s.requeue_dead(None, now) for s in self.shards)
            parts: dict[int, list[int]] = defaultdict(list)
            for i in ids:
                parts[i % self.n].append(i // self.n)
            return sum(self.shards[k].requeue_dead(mine, now) for k, mine in parts.items())

    def clear(self) -> None:
        """See :meth:`Store.clear`: every shard, then the home (its shard count kept)."""
        with self._changing(range(self.n)):
            for s in self.shards:
                s.clear()
            self.home.clear()  # (which keeps its shard count)

    @property
    def prefix(self) -> str:
        """The crawl's prefix: its home's (each shard's is it, SEP and its number)."""
        return self.home.prefix

    def prefixes_under(self, start: str) -> list[str]:
        """The prefixes of the crawls on the same server that begin with ``start``
        (``crawlq serve``'s crawl IDs, see :class:`~.base.Namespaced`): a sharded
        crawl's, not those of its shards."""
        found = self.home.prefixes_under(start)
        homes = set(found)
        out = []
        for p in found:
            base, _, number = p.rpartition(SEP)
            if number.isdigit() and base in homes and number == str(int(number)):
                kept = self.home.shards_of(base)
                if kept is not None and int(number) < kept:
                    continue  # (a shard of the crawl ``base``)
            out.append(p)
        return out

    def destroy(self) -> int:
        """Delete every key of the crawl (each shard's and the home's)."""
        with self._changing(range(self.n)):
            return sum(s.destroy() for s in (*self.shards, self.home))

    def dump(self) -> Iterator[dict[str, Any]]:
        """See :meth:`Store.dump` and the module: one counters record (every store's
        added up: each dump starts with its own), then the home's records, then each
        shard's."""
        dumps = [s.dump() for s in (self.home, *self.shards)]
        firsts = [next(d) for d in dumps]
        counts: dict[str, int] = defaultdict(int)
        rejected: dict[str, int] = defaultdict(int)
        for rec in firsts:
            assert rec["type"] == "counters"  # (a Redis store's dump starts with them)
            for k, v in rec["counters"].items():
                counts[k] += v
            for k, v in rec["rejected"].items():
                rejected[k] += v
        yield dumpfmt.counters(counts, rejected)
        yield from dumps[0]
        for i, d in enumerate(dumps[1:]):
            for rec in d:
                if rec["type"] in ("seen", "bloom"):
                    rec["shard"] = [i, self.n]
                yield rec

    def load(self, records: Iterable[dict[str, Any]], now: float) -> int:
        """See :meth:`Store.load` and the module: records routed to their shard, a
        batch at a time (not one atomic step, as on one Redis store)."""
        with self._changing(range(self.n)):
            n = 0
            batch: list[dict[str, Any]] = []
            for rec in records:
                batch.append(rec)
                if len(batch) >= LOAD_BATCH:
                    n += self._load(batch, now)
                    batch = []
            return n + self._load(batch, now)

    def _load(self, records: list[dict[str, Any]], now: float) -> int:
        checker = _Checker()
        for rec in records:  # (every record checked before any is written)
            dumpfmt.apply(checker, rec)
        home: list[dict[str, Any]] = []
        parts: dict[int, list[dict[str, Any]]] = defaultdict(list)
        for rec in records:
            kind = rec.get("type")
            if kind in ("queue", "entry", "dead"):
                key = rec.get("key") or rec.get("queue")
                if not isinstance(key, str):
                    raise ConfigError(f"a {kind} record without its queue: {rec!r}")
                parts[self.shard_of(key)].append(rec)
            elif kind in ("seen", "bloom"):
                where = rec.get("shard")
                if isinstance(where, list) and len(where) == 2 and where[1] == self.n \
                        and isinstance(where[0], int) and 0 <= where[0] < self.n:
                    parts[where[0]].append(rec)
                elif kind == "bloom":
                    raise ConfigError("this dump's Bloom filter is not one of a crawl of "
                                      f"{self.n} shards: a sharded crawl keeps a filter "
                                      "per shard")
                else:  # (no domain known: every shard has it)
                    for k in range(self.n):
                        parts[k].append(rec)
            else:
                home.append(rec)
        for k, mine in parts.items():
            self.shards[k].load(mine, now)
        # (the home's last: Frontier.load's mark of a dump loaded is one of its values)
        return self.home.load(home, now) + len(records) - len(home)

    def close(self) -> None:
        """See :meth:`Store.close`."""
        for s in self.shards:
            s.close()
        self.home.close()


class _Checker:
    """A :class:`~.dumpfmt.Loader` that writes nothing: :func:`.dumpfmt.apply` checks
    each record through it (and the queue settings are checked as the stores' loaders
    check them)."""

    def load_seen(self, fp: bytes, revisit_at: float | None) -> None:
        pass

    def load_bloom(self, bits: bytes) -> None:
        pass

    def load_entry(self, key: str, priority: int, retries: int, payload: bytes,
                   not_before: float | None) -> None:
        pass

    def load_queue(self, key: str, accepted: int, ready_at: float,
                   settings: Mapping[str, float], since: float | None) -> None:
        check_settings(settings)

    def load_dead(self, queue: str, priority: int, retries: int, payload: bytes,
                  error: str, died_at: float) -> None:
        pass

    def load_counters(self, counters: Mapping[str, int], rejected: Mapping[str, int]) -> None:
        pass

    def load_value(self, name: str, data: bytes, expires: float | None) -> None:
        pass

    def load_tallies(self, counts: Mapping[str, int]) -> None:
        pass


_SUMMED = tuple(f.name for f in dataclasses.fields(Stats)
                if f.name not in ("rejected", "per_queue"))
"""The fields of :class:`~crawlq.models.Stats` a sharded crawl adds up (its counts)."""

