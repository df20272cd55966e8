"""The Frontier: policies on top of a Store, turning add / next / done into store calls.

It reads time only through its injected ``clock`` (only :meth:`Frontier.wait` sleeps);
all state lives in the store, so a Frontier object is cheap, thread-safe (stores lock)
and can be opened by many processes on the same SQLite file or Redis database. One
class, in this order: its options and how a request becomes a store entry (the one
definition of what ``add`` accepts), the calls of a crawl (add, next, done, renew),
then the calls that look at and steer a crawl (blocks, settings, listings, stats,
values, dump and load).
"""

from __future__ import annotations

import functools
import gc
import itertools
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from typing import Any, Concatenate, NamedTuple, ParamSpec, TypeVar

from .entries import EntryMaker, url_of
from .entries import leases as leases_of
from .errors import ConfigError, CrawlqError, LeaseError
from .models import (
    AddResult,
    DeadRequest,
    Lease,
    Outcome,
    QueueInfo,
    Rejection,
    Request,
    Stats,
)
from .policies.canonical import Canonicalizer
from .policies.fingerprint import Fingerprinter, FingerprintFunction, url_fingerprint
from .policies.frontier import (
    LeasePolicy,
    RetryPolicy,
    URLPolicy,
    check_function,
    gathered,
    name_list,
)
from .policies.queueing import host_key
from .stores import dumpfmt
from .stores.base import (
    ACK_DEAD,
    ACK_DONE,
    ACK_REQUEUE,
    ADDED,
    DUPLICATE,
    REFUSALS,
    Ack,
    Entry,
    Exchanges,
    PipelinedAdd,
    Store,
    Transactions,
    ack,
    as_count,
    as_seconds,
    check_settings,
    flag,
)

_FORM = "crawlq:canonical-form"
"""The store value holding the canonical form of a crawl's URLs."""
_OWN_OPTIONS = ("clock", "pause_gc", "local_values")
"""The options of :meth:`Frontier.open` that are the Frontier's own keywords (not the
store's, nor a policy's)."""

_F = TypeVar("_F", bound="Frontier")
_P = ParamSpec("_P")
_R = TypeVar("_R")
_T = TypeVar("_T")


def _policy(name: str, given: _T | None, kind: type[_T]) -> _T:
    """A policy given to the Frontier (None: the defaults), checked."""
    if given is None:
        return kind()
    if not isinstance(given, kind):
        raise ConfigError(f"{name} must be a {kind.__name__}, not {given!r}")
    return given


def _gc_paused(
        method: Callable[Concatenate[_F, _P], _R]) -> Callable[Concatenate[_F, _P], _R]:
    """Run a hot-path method with Python's cyclic garbage collector paused (unless the
    frontier's ``pause_gc`` is off, or the collector is off already).

    CPython starts a collection every 700 container objects allocated, and every tenth
    of those collections walks an older generation, every hundredth the whole heap. A
    batch call allocates thousands of short-lived tuples (rows, entries, leases) but
    makes no reference cycles, so each batch set off several collections that only
    walked the caller's heap (the crawler's, the benchmark's) and freed nothing. Paused,
    the allocations still count: the next allocation after the call starts one
    collection instead of several, so cycles anywhere are still collected, later.
    (Mercurial does the same around its big parses, for the same reason.)
    """

    @functools.wraps(method)
    def paused(self: _F, /, *args: _P.args, **kwargs: _P.kwargs) -> _R:
        with PausedGC(self.pause_gc):
            return method(self, *args, **kwargs)

    return paused


class PausedGC:
    """A block run with Python's cyclic garbage collector paused (as it was, when it is
    off already; nothing changes when ``pause`` is False, a frontier's ``pause_gc`` off):
    the rule of the frontier's batch calls, for a caller that runs a batch of its own
    around them, as ``crawlq serve`` does for a batch of a client's messages::

        with PausedGC(frontier.pause_gc):
            items = [parse(m) for m in messages]
            frontier.add(items)
    """

    __slots__ = ("_pause", "_paused")

    def __init__(self, pause: bool = True) -> None:
        self._pause = pause

    def __enter__(self) -> None:
        self._paused = self._pause and gc.isenabled()
        if self._paused:
            gc.disable()

    def __exit__(self, *exc: object) -> None:
        if self._paused:
            gc.enable()


_Leases = Lease | Iterable[Lease]
_PART = 1000
"""Requests per part of a batch handed to a store's ``add_begin`` (see Frontier.add)."""


class Frontier:
    """The crawl frontier. Open one with :meth:`open` (a store URL and flat options),
    or make one on a store object with its policies (``Frontier(store,
    url_policy=URLPolicy(...), ...)``); use it as a context manager.

    See ``docs/options.md`` for every option. The hot paths take batches: pass many
    requests to :meth:`add`, ask :meth:`next` for many leases, acknowledge many at once.
    """

    def __init__(
        self,
        store: Store,
        *,
        url_policy: URLPolicy | None = None,
        retry_policy: RetryPolicy | None = None,
        lease_policy: LeasePolicy | None = None,
        clock: Callable[[], float] = time.time,
        pause_gc: bool = True,
        local_values: Iterable[str] = (),
    ) -> None:
        """A frontier on ``store`` as it is (:meth:`open` opens a store by URL, and
        builds the policies from flat options).

        ``url_policy``, ``retry_policy``, ``lease_policy``: the frontier's policies
        (:mod:`crawlq.policies.frontier`; None: the defaults). ``clock``: the time
        source. ``pause_gc``: pause Python's cyclic garbage collector during batch
        calls. ``local_values``: name prefixes of the values that are this store's own
        rather than the crawl's (:meth:`put_value`). It does not touch the store: call
        :meth:`check_canonical_form` before adding, as :meth:`open` does.
        """
        url_policy = _policy("url_policy", url_policy, URLPolicy)
        retry_policy = _policy("retry_policy", retry_policy, RetryPolicy)
        lease_policy = _policy("lease_policy", lease_policy, LeasePolicy)
        check_function("clock", clock)
        self.url_policy = url_policy
        """What add() makes of each request."""
        self.retry_policy = retry_policy
        """What a failed fetch means."""
        self.lease_policy = lease_policy
        """How long leases last, and whether late answers raise."""
        self.local_values = name_list(local_values, "local_values",
                                      "name prefixes, like ['myserver:']")
        """Name prefixes of this store's own values: not dumped, not loaded."""
        if not all(self.local_values):
            raise ConfigError("local_values must be non-empty name prefixes, not ''")
        self.store = store  # (and what it can: see the property)
        # The values each call reads, as plain attributes (the hot paths read them once
        # per call; the policies are the record of what was asked).
        self.canonicalize: Callable[[str], str] = url_policy.canonicalizer
        self.fingerprint: FingerprintFunction = url_policy.fingerprinter
        self.queue_key = url_policy.queue_key
        self.lease_ttl = lease_policy.lease_ttl
        self.strict_acks = lease_policy.strict_acks
        self.max_retries = retry_policy.max_retries
        self.retry_backoff = retry_policy.retry_backoff
        self.retry_backoff_max = retry_policy.retry_backoff_max
        self.pause_gc = flag("pause_gc", pause_gc)
        self.clock = clock
        if isinstance(self.canonicalize, Canonicalizer) and self.queue_key is host_key:
            # The canonicalizer has the host at hand: one step instead of two.
            self._split: Callable[[str], tuple[str, str]] = self.canonicalize.split
        else:
            canon_fn, key_fn = self.canonicalize, self.queue_key

            def split(url: str) -> tuple[str, str]:
                c = canon_fn(url)
                return c, key_fn(c)

            self._split = split
        fp = self.fingerprint
        self._entries = EntryMaker(
            self._split, fp,
            url_fingerprint if type(fp) is Fingerprinter and not fp.source_aware else None,
            url_policy.priority, url_policy.dedup_post, url_policy.revisit_after)
        """The one definition of what add() accepts: each request's store entry."""

    @property
    def priority(self) -> Callable[[Request], int] | None:
        """The function that gives each added request its priority, if any."""
        return self.url_policy.priority

    @property
    def dedup_post(self) -> bool:
        """Whether POST requests are deduplicated like GETs."""
        return self.url_policy.dedup_post

    @property
    def store(self) -> Store:
        """The store this frontier works on."""
        return self._store

    @store.setter
    def store(self, store: Store) -> None:
        self._store = store
        # (what it can do, asked once: a runtime Protocol check costs microseconds, and
        # the hot paths ask at every call)
        self._exchanges = store if isinstance(store, Exchanges) else None
        self._transactions = store if isinstance(store, Transactions) else None

    @property
    def revisit_after(self) -> float | None:
        """Seconds after which a fetched URL is accepted again (None: never)."""
        return self.url_policy.revisit_after

    @classmethod
    def open(cls: type[_F], url: str = "memory://", **options: Any) -> _F:
        """Open a frontier on the store named by ``url``.

        ``memory://``, ``sqlite:///path/to/file.db`` (relative: ``sqlite:///crawl.db``;
        absolute: ``sqlite:////abs/path.db``), ``redis://...``. Options are flat
        keywords (see ``docs/options.md``): the store's (politeness, budgets,
        seen-set), the fields of the frontier's policies (``canonicalize``,
        ``max_retries``, ``lease_ttl``...: each gathered into its policy, which may
        also be given whole, as ``url_policy=``, ``retry_policy=``, ``lease_policy=``)
        and the frontier's own (``clock``, ``pause_gc``, ``local_values``). A bad or
        unknown option is a ConfigError naming it. The crawl's canonical form is
        checked (:meth:`check_canonical_form`) unless the store is opened only to
        look (``create=False``: a crawl of another form can still be read, and dumped
        to move it to this one).
        """
        from .stores import STORE_OPTIONS, open_store

        store_opts = {k: options.pop(k) for k in list(options) if k in STORE_OPTIONS}
        url_policy = gathered(URLPolicy, "url_policy", options)
        retry_policy = gathered(RetryPolicy, "retry_policy", options)
        lease_policy = gathered(LeasePolicy, "lease_policy", options)
        unknown = [k for k in options if k not in _OWN_OPTIONS]
        if unknown:
            raise ConfigError(f"unknown option: {', '.join(unknown)} (see docs/options.md)")
        if store_opts.get("bloom_capacity") and url_policy.revisit_after is not None:
            raise ConfigError("revisit_after needs the exact seen-set: a Bloom filter cannot "
                              "remember when a URL was seen (drop bloom_capacity)")
        try:
            store = open_store(url, **store_opts)
        except CrawlqError:
            raise
        except (TypeError, ValueError) as exc:  # e.g. concurrency="four"
            raise ConfigError(f"bad store option: {exc}") from None
        try:
            frontier = cls(store, url_policy=url_policy, retry_policy=retry_policy,
                           lease_policy=lease_policy, **options)
            if store_opts.get("create", True) is not False:
                frontier.check_canonical_form()
            return frontier
        except BaseException:
            store.close()
            raise

    def fingerprint_of(self, request: Request | str) -> bytes | None:
        """The seen-set key :meth:`add` would use for ``request`` (None: it bypasses
        dedup). Raises :class:`InvalidURL` for a URL that add() would reject."""
        req = Request(request) if isinstance(request, str) else request
        canon, _ = self._split(req.url)
        return self._entries.seen_key(req, canon)

    def queue_of(self, url: str) -> str:
        """The queue key a URL would wait in."""
        return self.queue_key(self.canonicalize(url))

    @property
    def canonical_form(self) -> str | None:
        """The version of the canonical form this frontier gives URLs
        (:attr:`Canonicalizer.version`), or None for a canonicalize function of the
        user's own (whose forms crawlq cannot tell apart)."""
        canon = self.canonicalize
        return canon.version if isinstance(canon, Canonicalizer) else None

    def check_canonical_form(self) -> None:
        """Record this frontier's canonical form with a new crawl; refuse (ConfigError)
        a crawl whose URLs were canonicalized another way: mixed, the same page would
        be queued once per form and the seen-set would miss. :meth:`open` calls it
        (but for a store opened only to look, ``create=False``); a frontier made on a
        store object calls it before it adds. Nothing for a canonicalize function of
        your own (:attr:`canonical_form` None)."""
        form = self.canonical_form
        if form is None:
            return
        theirs = self._stored_form()
        if theirs is None:
            self.store.put_values([(_FORM, form.encode(), None)])
        elif theirs != form:
            raise ConfigError(
                f"this crawl's URLs are in canonical form {theirs}, this frontier's are in "
                f"form {form} (another crawlq version or canonicalizer steps): move it with "
                "`crawlq dump` and `crawlq load` into a new store, which re-fingerprints "
                "its requests, or open it with the same steps")

    def _stored_form(self) -> str | None:
        """The canonical form the crawl recorded; ``"1"`` for a crawl with requests but
        none recorded (written before crawlq recorded forms, by its RFC 3986 parser);
        None for a new crawl."""
        stored = self.store.get_values([_FORM], self.clock())[0]
        if stored is not None:
            return stored.decode("utf-8", "replace")
        st = self.store.stats(self.clock(), 0)
        if not (st.seen or st.added or st.queued or st.dead):
            return None
        # (another process may have recorded its form and added between the two reads:
        # every crawlq that records forms records before it adds, so look once more)
        stored = self.store.get_values([_FORM], self.clock())[0]
        return "1" if stored is None else stored.decode("utf-8", "replace")

    def close(self) -> None:
        """Close the store; the frontier cannot be used afterwards."""
        self.store.close()

    def __enter__(self: _F) -> _F:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<Frontier store={type(self.store).__name__}>"

    # -- adding ---------------------------------------------------------------------

    @_gc_paused
    def add(self, requests: Request | str | Iterable[Request | str]) -> AddResult:
        """Offer requests (or plain URL strings); duplicates are dropped atomically.

        Invalid URLs and requests over a queue budget are rejected with a reason in
        ``AddResult.rejected`` and counted in ``stats().rejected``; nothing raises
        because one request of a batch is bad.
        """
        requests = _as_requests(requests)
        now = self.clock()
        rejected: list[Rejection] = []
        make = self._entries.make
        entries: list[Entry] = []
        index: list[int] = []  # the position in requests of each entry
        # A store that can take part of a batch without waiting (Redis) gets a big batch
        # in parts as they are ready: its server works while the rest is canonicalized.
        total = len(requests)
        begin = (self.store.add_begin if total > _PART and isinstance(self.store, PipelinedAdd)
                 else None)
        pending: list[Callable[[], list[int]]] = []
        step = _PART if begin is not None else max(total, 1)
        for start in range(0, total, step):
            sent = len(entries)
            make(requests, start, start + step, now, rejected, entries, index)
            if begin is not None and len(entries) > sent:
                pending.append(begin(entries[sent:], now))
        if pending:
            statuses = [st for wait in pending for st in wait()]
        else:
            statuses = self.store.add(entries, now) if entries else []
        return self._added(requests, statuses, index, rejected)

    def _added(self, requests: Sequence[Request | str], statuses: list[int],
               index: list[int], rejected: list[Rejection]) -> AddResult:
        """The AddResult of ``requests`` from the store's ``statuses`` of their entries
        (``index``: each entry's request) and the ``rejected`` ones that made no entry
        (counted here; the store counted its own refusals)."""
        added, dups = statuses.count(ADDED), statuses.count(DUPLICATE)
        if len(index) == len(requests):  # (every request made an entry: index is 0, 1, ...)
            flags = [st == ADDED for st in statuses]
        else:
            flags = [False] * len(requests)
            for pos, st in zip(index, statuses):
                if st == ADDED:
                    flags[pos] = True
        refused = len(rejected)
        if added + dups < len(statuses):
            rejected += [Rejection(pos, url_of(requests[pos]), REFUSALS[st])
                         for pos, st in zip(index, statuses) if st != ADDED and st != DUPLICATE]
        reasons: dict[str, int] = {}
        for r in rejected[:refused]:  # (the store counted its refusals itself)
            reasons[r.reason] = reasons.get(r.reason, 0) + 1
        if reasons:
            self.store.count_rejected(reasons)
        if rejected:
            rejected.sort(key=lambda r: r.index)
        return AddResult(added, dups, tuple(rejected), tuple(flags))

    # -- leasing --------------------------------------------------------------------

    @_gc_paused
    def next(self, n: int = 1, *, ttl: float | None = None,
             queue: str | None = None) -> list[Lease]:
        """Lease up to ``n`` requests that may be fetched now (an empty list: none ready).

        Each lease must be answered with :meth:`done` or :meth:`retry` before ``ttl``
        seconds (default ``lease_ttl``); otherwise its request returns to its queue.
        ``queue``: lease from that queue only (under its politeness, as always).
        """
        if n.__class__ is not int:
            raise ConfigError(f"next() takes an int, not {n!r}")
        ttl = self.lease_ttl if ttl is None else as_seconds("ttl", ttl, positive=True)
        now = self.clock()
        if queue is None:
            leased = self.store.lease(now, n, ttl)
        elif not isinstance(queue, str) or not queue:
            raise ConfigError(f"a queue is a non-empty string, not {queue!r}")
        else:
            leased = self.store.lease(now, n, ttl, queue)
        return leases_of(leased if leased.__class__ is list else list(leased), now)

    def done(
        self,
        leases: _Leases,
        outcome: Outcome = Outcome.DONE,
        *,
        error: str | None = None,
        duration: float | Sequence[float | None] | None = None,
        after: float = 0.0,
    ) -> int:
        """Acknowledge leases; returns how many were still held.

        ``Outcome.DONE``: finished. ``Outcome.FAILED``: retried after an exponential
        backoff until ``max_retries``, then kept as dead with ``error``.
        ``Outcome.RETRY``: back to the queue after ``after`` seconds, no failure counted.
        ``Outcome.DEAD``: kept as dead with ``error`` at once, whatever its retries.
        ``duration`` (seconds the fetch took) feeds the politeness delay: one number for
        every lease, or a sequence with one (or None) per lease, so that the leases of
        many queues are answered in one call. Leases that
        expired or are unknown change nothing (counted as ``late_acks``; with
        ``strict_acks`` a :class:`LeaseError` is raised after the others are applied).
        """
        if (type(leases) is Lease and outcome is Outcome.DONE and not after
                and (duration is None or duration.__class__ is float)):
            # One lease done (README's loop, once per fetch): its answer alone, without
            # the batch path (nor its garbage-collector pause, which pays off for batches).
            d = None if duration is None else as_seconds("duration", duration)
            return sum(self._release([ack(leases.token, ACK_DONE, d)], self.clock()))
        return sum(self._done(leases, outcome, error, duration, after))

    def done_each(
        self,
        leases: Iterable[Lease],
        outcome: Outcome = Outcome.DONE,
        *,
        error: str | None = None,
        duration: float | Sequence[float | None] | None = None,
        after: float = 0.0,
    ) -> list[bool]:
        """:meth:`done`, with one flag per lease: whether the answer took effect (the
        lease was still held); False for one that expired, was answered already, or
        is unknown (a late answer, which changes nothing)."""
        return self._done(list(leases), outcome, error, duration, after)

    @_gc_paused
    def _done(self, leases: _Leases, outcome: Outcome, error: str | None,
              duration: float | Sequence[float | None] | None, after: float) -> list[bool]:
        """:meth:`done` for any leases and outcome; a flag per lease."""
        now = self.clock()
        return self._release(self._acks(leases, outcome, error, duration, after, now), now)

    def _acks(self, leases: _Leases, outcome: Outcome, error: str | None,
              duration: float | Sequence[float | None] | None, after: float,
              now: float) -> list[Ack]:
        """The store's answers to ``leases`` (see :meth:`done`), checked."""
        if isinstance(leases, Lease):
            leases = (leases,)
        durations: Iterable[float | None]
        if duration is None or duration.__class__ in (float, int):
            durations = itertools.repeat(
                None if duration is None else as_seconds("duration", duration))
        else:
            leases, durations = _per_lease_durations(leases, duration)
        if after:
            after = as_seconds("after", after, signed=True)
        acks: list[Ack] = []
        if outcome is Outcome.DONE:
            acks = [(le.token, ACK_DONE, d, None, 0, None, False, None)
                    for le, d in zip(leases, durations)]
        elif outcome is Outcome.RETRY:
            acks = [ack(le.token, ACK_REQUEUE, d, now + after, le.request.retries)
                    for le, d in zip(leases, durations)]
        elif outcome is Outcome.FAILED:
            backoff_of = self.retry_policy.backoff
            for le, d in zip(leases, durations):
                n = le.request.retries + 1
                backoff = backoff_of(n)
                if backoff is None:
                    acks.append(ack(le.token, ACK_DEAD, d, None, n, error, True))
                else:
                    acks.append(ack(le.token, ACK_REQUEUE, d, now + backoff, n,
                                    error, True))
        elif outcome is Outcome.DEAD:
            acks = [ack(le.token, ACK_DEAD, d, None, le.request.retries + 1, error, True)
                    for le, d in zip(leases, durations)]
        else:
            raise ConfigError(f"unknown outcome {outcome!r}")
        return acks

    def renew(self, leases: _Leases, ttl: float | None = None) -> list[Lease]:
        """Extend leases still held (a page still being worked on) to ``ttl`` seconds
        from now (default ``lease_ttl``), never shortening one; returns them with the
        ``expires_at`` they now have (the later of the two).
        Leases expired or answered are left out (with ``strict_acks`` a
        :class:`LeaseError` is raised for them). The SQLite store keeps one expiry per
        ``next()`` call: renewing one of its leases extends its unanswered siblings too.
        """
        if isinstance(leases, Lease):
            leases = (leases,)
        leases = list(leases)
        ttl = self.lease_ttl if ttl is None else as_seconds("ttl", ttl, positive=True)
        now = self.clock()
        expires = now + ttl
        # Each lease is renewed to the later of now + ttl and the expiry it has, so no
        # store is asked to shorten one (one store call per distinct expiry: almost
        # always one), and the expiry reported is the one the store keeps.
        by_expiry: dict[float, list[int]] = {}
        for i, le in enumerate(leases):
            by_expiry.setdefault(max(expires, le.expires_at), []).append(i)
        held = [False] * len(leases)
        for until, at in by_expiry.items():
            for i, ok in zip(at, self.store.renew([leases[i].token for i in at], until, now)):
                held[i] = ok
        if self.strict_acks and not all(held):
            raise LeaseError([le.token for le, ok in zip(leases, held) if not ok])
        return [Lease(le.token, le.request, le.queue, le.leased_at,
                      max(expires, le.expires_at))
                for le, ok in zip(leases, held) if ok]

    def retry(self, leases: _Leases, after: float = 0.0, *,
              duration: float | None = None) -> int:
        """Put leased requests back to be fetched ``after`` seconds from now, no failure."""
        return self.done(leases, Outcome.RETRY, after=after, duration=duration)

    def _release(self, acks: list[Ack], now: float) -> list[bool]:
        if not acks:
            return []
        held = self.store.release(acks, now)
        if self.strict_acks and not all(held):
            raise LeaseError([a[0] for a, ok in zip(acks, held) if not ok])
        return held

    @_gc_paused
    def exchange(self, add: Request | str | Iterable[Request | str] = (),
                 done: Iterable[Lease] = (), n: int = 0, *,
                 duration: float | Sequence[float | None] | None = None,
                 ttl: float | None = None) -> Exchanged:
        """A crawl loop's step in one store call: :meth:`add` what pages found, then
        :meth:`done` their leases (``Outcome.DONE``, with ``duration``), then :meth:`next`
        for up to ``n`` leases, in that order. On Redis the three are one round trip
        (pipelined on one connection), on SQLite one transaction; what each part
        answers is what the separate call would (on a sharded Redis crawl, the leases
        follow each shard's line, shared across shards by priority and in proportion:
        docs/stores.md). With a store far away (a network round trip per call) this is
        what keeps a fetch slot's cycle to one round trip."""
        requests = _as_requests(add)
        if n.__class__ is not int:
            raise ConfigError(f"exchange() takes an int n, not {n!r}")
        ttl = self.lease_ttl if ttl is None else as_seconds("ttl", ttl, positive=True)
        now = self.clock()
        rejected: list[Rejection] = []
        entries: list[Entry] = []
        index: list[int] = []
        self._entries.make(requests, 0, len(requests), now, rejected, entries, index)
        acks = self._acks(list(done), Outcome.DONE, None, duration, 0.0, now)
        exchanges = self._exchanges
        if exchanges is not None:
            statuses, held, leased = exchanges.exchange(entries, acks, n, ttl, now)
        else:
            store = self._store
            with self.transaction():
                statuses = store.add(entries, now) if entries else []
                held = store.release(acks, now) if acks else []
                leased = store.lease(now, n, ttl) if n > 0 else []
        added = self._added(requests, statuses, index, rejected)
        if self.strict_acks and not all(held):
            raise LeaseError([a[0] for a, ok in zip(acks, held) if not ok])
        return Exchanged(added, held,
                         leases_of(leased if leased.__class__ is list else list(leased), now))

    def transaction(self) -> AbstractContextManager[None]:
        """A block whose calls are one atomic step of the store, where it has them
        (SQLite): e.g. a page's links added and the page acknowledged together, or an
        acknowledgement and the next lease in one commit instead of two::

            with frontier.transaction():
                frontier.add(links)
                frontier.done(lease)
                leases = frontier.next(10)

        They take effect together when the block ends; an exception leaving the block
        undoes them all (leases handed out inside it are void), and so does a call that
        fails inside it. Blocks nest; other threads' calls wait until it ends. On a
        store without transactions (memory, Redis) each call inside takes effect on its
        own, as outside a block. See :class:`~crawlq.stores.base.Transactions`.
        """
        store = self._transactions
        return store.transaction() if store is not None else nullcontext()

    # -- waiting --------------------------------------------------------------------

    def next_ready_at(self) -> float | None:
        """When :meth:`next` may next return something (epoch seconds; now or later),
        or ``None`` when nothing is queued or leased: the crawl is over. A fetch loop
        sleeps until then instead of polling."""
        return self.store.next_ready_at(self.clock())

    def wait(self, timeout: float | None = None, poll: float = 1.0) -> bool:
        """Sleep until :meth:`next` may return something (True), or until the crawl is
        over for every worker sharing this frontier: nothing queued and nothing leased
        anywhere (False). After ``timeout`` seconds it returns True: go and look.

        Idle detection across processes and machines (the scrapy-redis complaint)::

            while frontier.wait():
                for lease in frontier.next(100):
                    ...  # fetch, add(new links), then done(lease)

        Add the links a page yields *before* acknowledging it: then "nothing queued,
        nothing leased" cannot be seen while a worker is about to add more. Sleeps at
        most ``poll`` seconds at a time, since another worker may add work sooner.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            pause = self.idle_for(poll, deadline)
            if pause is None:
                return False
            if pause <= 0:
                return True
            time.sleep(pause)

    def idle_for(self, poll: float = 1.0, deadline: float | None = None) -> float | None:
        """One look of :meth:`wait`: the seconds to sleep before looking again (0 or
        less: :meth:`next` may return something now, or ``deadline``, a
        ``time.monotonic()`` time, has passed; at most ``poll``, since another worker
        may add work sooner), or None when the crawl is over for every worker sharing
        the frontier. For a loop with a sleep of its own (an event loop's)."""
        at = self.next_ready_at()
        if at is None:
            return None
        pause = min(at - self.clock(), poll)
        return pause if deadline is None else min(pause, deadline - time.monotonic())

    # -- named values and counts from outside ---------------------------------------

    def put_value(self, name: str, value: bytes, ttl: float | None = None) -> None:
        """Keep ``value`` under ``name`` for every process sharing the store, for
        ``ttl`` seconds (None: for good); see :meth:`get_value`. For what a crawler
        learns about a host once (``crawlq crawl`` keeps each origin's robots.txt
        here). A value kept for good is part of a dump (one with a ``ttl`` belongs to
        this store's times), but for those named under a prefix of the frontier's
        ``local_values``: this store's own state (such as a server's pause), which a
        dump leaves out and a load leaves as it is."""
        if not isinstance(name, str) or not name:
            raise ConfigError(f"a value's name is a non-empty string, not {name!r}")
        if not isinstance(value, bytes):
            raise ConfigError(f"a value is bytes, not {type(value).__name__}")
        expires = None if ttl is None else self.clock() + as_seconds("ttl", ttl,
                                                                     positive=True)
        self.store.put_values([(name, value, expires)])

    def get_value(self, name: str) -> bytes | None:
        """The value kept under ``name`` (:meth:`put_value`); None if there is none or
        its time is up."""
        if not isinstance(name, str):
            raise ConfigError(f"a value's name is a string, not {name!r}")
        return self.store.get_values([name], self.clock())[0]

    def drop_value(self, name: str) -> None:
        """Forget the value kept under ``name`` (:meth:`put_value`) before its time is
        up; nothing if there is none."""
        if not isinstance(name, str):
            raise ConfigError(f"a value's name is a string, not {name!r}")
        self.store.drop_values([name])

    def count_rejected(self, reason: str, n: int = 1) -> None:
        """Count ``n`` requests refused for ``reason`` after they were accepted (e.g.
        ``robots-denied``): they appear in ``stats().rejected`` with those refused at
        :meth:`add`."""
        if not isinstance(reason, str) or not reason:
            raise ConfigError(f"a reason is a non-empty string, not {reason!r}")
        n = as_count("count_rejected()", n)
        if n:
            self.store.count_rejected({reason: n})

    def count_duplicates(self, n: int) -> None:
        """Count ``n`` duplicates the caller recognized itself, without offering them.

        For a caller that keeps its own record of URLs this frontier has already seen
        (as the Scrapy scheduler does, to answer most duplicates without a store call):
        ``stats().duplicates`` then still counts every duplicate offered.
        """
        n = as_count("count_duplicates()", n)
        if n:
            self.store.count_duplicates(n)

    # -- queues ---------------------------------------------------------------------

    def block(self, queue: str, until: float | None = None, *,
              seconds: float | None = None) -> None:
        """Keep ``queue`` from being leased until ``until`` (epoch) or for ``seconds``."""
        now = self.clock()
        if (until is None) == (seconds is None):
            raise ConfigError("block() takes exactly one of until= or seconds=")
        if until is None:
            until = now + as_seconds("seconds", seconds, signed=True)
        self.store.block(queue, as_seconds("until", until, signed=True), now)

    def unblock(self, queue: str) -> None:
        """End ``queue``'s rest now, whatever began it (a :meth:`block`, a politeness
        rest, a Retry-After, the rest after a session): it is served again at once."""
        self.store.unblock(queue, self.clock())

    def configure_queue(self, queue: str, **settings: float | None) -> None:
        """Override ``concurrency``, ``min_delay``, ``max_delay``, ``delay_factor``,
        ``max_queue_urls``, ``session_budget`` or ``session_rest`` for one queue
        (``None`` restores the default). Stored durably with the queue."""
        self.store.configure_queue(queue, settings, self.clock())

    def configure_default(self, **settings: float) -> None:
        """Change the rest of the queues that have no rest of their own: ``min_delay``,
        ``max_delay``, ``delay_factor``, as the options of the same names. Each queue
        takes it from its next answer on. It holds in this process until the store is
        closed: the store keeps the options each process opens it with (``crawlq
        serve`` keeps URLFrontier's default delay in the store for every server)."""
        unknown = set(settings) - set(_REST_SETTINGS)
        if not settings or unknown:
            raise ConfigError(f"configure_default() changes {', '.join(_REST_SETTINGS)}; "
                              f"not {sorted(unknown) or 'nothing'} (the other settings "
                              "are options of the store's open)")
        if any(v is None for v in settings.values()):
            raise ConfigError("a default rest is a number of seconds (or a factor), "
                              "not None")
        store = self.store
        clean = {k: v for k, v in check_settings(settings).items() if v is not None}
        store.set_policy(store.policy.merged(clean))

    def queues(self, limit: int = 100) -> list[QueueInfo]:
        """Up to ``limit`` queues, most queued first."""
        return self.store.queues(self.clock(), as_count("limit", limit))

    # -- reporting and maintenance ------------------------------------------------------

    def stats(self, per_queue: int = 0) -> Stats:
        """Counters and queue states; ``per_queue`` > 0 adds the largest queues."""
        return self.store.stats(self.clock(), as_count("per_queue", per_queue))

    def dead(self, limit: int = 100) -> list[DeadRequest]:
        """Requests that ran out of retries, with their last error."""
        return [DeadRequest(d.id, Request.from_payload(d.payload, d.priority, d.retries, None,
                                                       d.queue),
                            d.queue, d.error, d.died_at)
                for d in self.store.dead(as_count("limit", limit))]

    def delete_queue(self, queue: str) -> int:
        """Remove the queued and scheduled requests of ``queue``; returns how many. Its
        leased requests stay leased (answer them as usual; one whose lease ends comes
        back); the seen-set (its URLs stay known) and dead requests stay. A queue left
        with no lease out and no dead request is forgotten, its settings and counts with
        it: it is no longer listed or counted, and a URL added for it later starts it
        afresh."""
        if not isinstance(queue, str) or not queue:
            raise ConfigError(f"a queue is a non-empty string, not {queue!r}")
        return int(self.store.delete_queue(queue, self.clock()))

    def clear(self) -> None:
        """Empty the store, this frontier still open on it: every queued, scheduled and
        leased request (answers to those leases come late), the seen-set (every URL may
        be added again), dead requests, queues and their settings, counters and named
        values go. The options it was opened with stay."""
        self.store.clear()

    def remove_queued(self, where: Callable[[Request], bool],
                      queue: str | None = None) -> int:
        """Remove the queued and scheduled requests of ``queue`` (None: of every queue)
        for which ``where(request)`` is true; returns how many. Leased requests stay
        leased (one whose lease ends comes back), dead ones stay, and their URLs stay
        seen (adding one again is a duplicate). Each queue is one atomic step of the
        store, and ``where`` runs inside it: keep it quick, do not call the frontier
        from it; an error it raises removes nothing of that queue. A scan of the queues'
        requests: for maintenance, not for a crawl's hot path."""
        if queue is not None and (not isinstance(queue, str) or not queue):
            raise ConfigError(f"a queue is a non-empty string, not {queue!r}")
        if not callable(where):
            raise ConfigError(f"where is a function of a Request, not {where!r}")
        remove = self.store.remove_queued
        keys = [queue] if queue is not None else [
            q.key for q in self.store.queues(self.clock(), 2**31 - 1)]
        removed = 0
        for key in keys:
            def pick(priority: int, retries: int, payload: bytes, not_before: float | None,
                     key: str = key) -> bool:
                return bool(where(Request.from_payload(payload, priority, retries,
                                                       not_before, key)))

            removed += int(remove(key, pick, self.clock()))
        return removed

    def requeue_dead(self, ids: Iterable[int] | None = None) -> int:
        """Give dead requests (all, or those ``ids``) a fresh start in their queues."""
        if ids is not None:
            if isinstance(ids, (str, bytes)) or not isinstance(ids, Iterable):
                raise ConfigError(f"requeue_dead() takes ids of dead requests, not {ids!r}")
            ids = [as_count("a dead request's id", i, 1) for i in ids]
        return self.store.requeue_dead(ids, self.clock())

    def dump(self) -> Iterator[dict[str, Any]]:
        """The whole state as JSON-friendly records (for ``crawlq dump``), after a header
        with the dump's id and the crawl's canonical form; values named under a prefix
        of ``local_values`` (the store's own) are left out."""
        yield dumpfmt.header(uuid.uuid4().hex, self.clock(),
                             self._stored_form() or self.canonical_form)
        yield from self.records()

    def records(self) -> Iterator[dict[str, Any]]:
        """The crawl's records as its store dumps them, without a header: for a scan of
        the whole crawl (``crawlq serve``'s ListURLs and GetURLStatus)."""
        # (the store's canonical form is the header's: as a value, loading it would
        # replace the form of the store loaded into)
        local = self.local_values
        return (r for r in self.store.dump() if not _not_dumped(r, local))

    def load(self, records: Iterable[Mapping[str, Any]]) -> int:
        """Merge records from :meth:`dump`; returns how many were applied. Each request
        is checked as :meth:`add` checks it (a bad one raises :class:`ConfigError`
        before anything reaches the store). A dump is loaded once: loading one whose
        header says it was loaded into this store already raises ConfigError and
        changes nothing. A dump of another canonical form (its header says which) is
        re-fingerprinted: each queued and dead request is also marked seen under this
        frontier's form. (Fetched URLs are in the dump only as fingerprints: one whose
        canonical spelling changed between the forms may be fetched once more.) Values
        named under a prefix of ``local_values`` are skipped: this store keeps its
        own."""
        store = self.store
        it = iter(records)
        first = next(it, None)
        if first is None:
            return 0
        marker = None
        if first.get("type") == "dump" and first.get("id"):
            marker = f"crawlq:loaded:{first['id']}"
            if self.get_value(marker) is not None:
                raise ConfigError(f"this dump (id {first['id']}) was loaded into this store "
                                  "already; loading it again would queue its requests twice")

        form = first.get("canonical_form") if first.get("type") == "dump" else None
        refingerprint = form is not None and form != self.canonical_form
        fingerprint_of = self.fingerprint_of
        local = self.local_values
        extra = [0 if marker is None else 1]  # records of ours, not the dump's

        def records_then_marker() -> Iterator[dict[str, Any]]:
            # (each request is checked by dumpfmt.apply, as the store applies it)
            for rec in itertools.chain((first,), it):
                if _not_dumped(rec, local):
                    continue  # (the form is the header's; this store keeps its own)
                yield dict(rec)
                if refingerprint and rec.get("type") in ("entry", "dead"):
                    # A dump of another canonical form: each request it holds is known
                    # by its fingerprint in this frontier's form too, so offering it
                    # again is a duplicate, as it was in the crawl dumped.
                    fp = fingerprint_of(dumpfmt.request_from_json(rec["request"]))
                    if fp is not None:
                        extra[0] += 1
                        yield dumpfmt.seen(fp, None)
            if marker is not None:  # (in the same transaction, where the store has one)
                yield dumpfmt.value(marker, repr(self.clock()).encode(), None)

        return store.load(records_then_marker(), self.clock()) - extra[0]


def _not_dumped(rec: Mapping[str, Any], local: tuple[str, ...]) -> bool:
    """Whether a store's record stays out of dumps and loads: the canonical-form marker
    (the dump's header carries the form) and the store's own values (named under one
    of the ``local`` prefixes: a frontier's ``local_values``)."""
    if rec.get("type") != "value":
        return False
    name = str(rec.get("name"))
    return name == _FORM or name.startswith(local)


_REST_SETTINGS = ("min_delay", "max_delay", "delay_factor")
"""The policy settings :meth:`Frontier.configure_default` may change while open."""

def _as_requests(requests: Request | str | Iterable[Request | str]
                 ) -> Sequence[Request | str]:
    """add()'s argument as a sequence of requests (checked)."""
    if isinstance(requests, (str, Request)):
        return [requests]
    if isinstance(requests, (list, tuple)):
        return requests
    if not isinstance(requests, Iterable):
        raise ConfigError("add() takes a Request, a URL or an iterable of them, "
                          f"not {requests!r}")
    return list(requests)


class Exchanged(NamedTuple):
    """What :meth:`Frontier.exchange` answers."""

    added: AddResult
    """What :meth:`Frontier.add` would answer for the requests offered."""
    held: list[bool]
    """Per lease answered: whether it was still held (as :meth:`Frontier.done_each`)."""
    leases: list[Lease]
    """The new leases (as :meth:`Frontier.next`)."""


def _per_lease_durations(leases: Iterable[Lease], durations: object,
                         ) -> tuple[list[Lease], list[float | None]]:
    """``done()``'s leases and their durations, one each (checked)."""
    if isinstance(durations, (str, bytes)) or not isinstance(durations, Sequence):
        raise ConfigError("duration must be a number of seconds or a sequence of them, "
                          f"not {durations!r}")
    leases = list(leases)
    if len(durations) != len(leases):
        raise ConfigError(f"{len(durations)} durations for {len(leases)} leases")
    return leases, [None if d is None else as_seconds("duration", d) for d in durations]
