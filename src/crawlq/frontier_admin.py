"""The Frontier's calls that look at and steer a crawl rather than run it: blocks,
per-queue and default settings, listings and stats, dead requests, removing queued
requests, named values and counts from outside, dump and load (:class:`FrontierAdmin`, extended by
:class:`~crawlq.frontier.Frontier`)."""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, cast

from .errors import ConfigError
from .frontier_core import FrontierCore
from .models import (
    DeadRequest,
    QueueInfo,
    Request,
    Stats,
)
from .stores import dumpfmt
from .stores.base import (
    Dumps,
    as_count,
    as_seconds,
    check_settings,
)


class FrontierAdmin(FrontierCore):
    """Looking at and steering a crawl (see :class:`crawlq.frontier.Frontier`)."""

    # -- named values and counts from outside ---------------------------------------

    def put_value(self, name: str, value: bytes, ttl: float | None = None) -> None:
        """Keep ``value`` under ``name`` for every process sharing the store, for
        ``ttl`` seconds (None: for good); see :meth:`get_value`. For what a crawler
        learns about a host once (``crawlq crawl`` keeps each origin's robots.txt
        here); values are not part of a dump."""
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
        set_policy = getattr(self.store, "set_policy", None)
        if set_policy is None:
            raise ConfigError(f"{type(self.store).__name__} cannot change its default "
                              "policy while open")
        clean = {k: v for k, v in check_settings(settings).items() if v is not None}
        set_policy(self.store.policy.merged(clean))

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
        back); its settings, the seen-set (its URLs stay known) and dead requests stay.
        """
        if not isinstance(queue, str) or not queue:
            raise ConfigError(f"a queue is a non-empty string, not {queue!r}")
        delete = getattr(self.store, "delete_queue", None)
        if delete is None:
            raise ConfigError(f"{type(self.store).__name__} cannot delete a queue")
        return int(delete(queue, self.clock()))

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
        remove = getattr(self.store, "remove_queued", None)
        if remove is None:
            raise ConfigError(f"{type(self.store).__name__} cannot remove queued requests")
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
        with the dump's id and the crawl's canonical form. ConfigError on a store that
        cannot dump (see :class:`~crawlq.stores.base.Dumps`)."""
        store = self._dumps()
        yield dumpfmt.header(uuid.uuid4().hex, self.clock(),
                             self._stored_form() or self.canonical_form)
        yield from store.dump()

    def records(self) -> Iterator[dict[str, Any]]:
        """The crawl's records as its store dumps them, without a header: for a scan of
        the whole crawl (``crawlq serve``'s ListURLs and GetURLStatus)."""
        return self._dumps().dump()

    def _dumps(self) -> Dumps:
        """The store, if it can dump and load; else ConfigError."""
        store = self.store
        if not (callable(getattr(store, "dump", None))
                and callable(getattr(store, "load", None))):
            raise ConfigError(f"{type(store).__name__} cannot dump or load a crawl")
        return cast(Dumps, store)

    def load(self, records: Iterable[Mapping[str, Any]]) -> int:
        """Merge records from :meth:`dump`; returns how many were applied. Each request
        is checked as :meth:`add` checks it (a bad one raises :class:`ConfigError`
        before anything reaches the store). A dump is loaded once: loading one whose
        header says it was loaded into this store already raises ConfigError and
        changes nothing. A dump of another canonical form (its header says which) is
        re-fingerprinted: each queued and dead request is also marked seen under this
        frontier's form. (Fetched URLs are in the dump only as fingerprints: one whose
        canonical spelling changed between the forms may be fetched once more.)"""
        store = self._dumps()
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
        extra = [0 if marker is None else 1]  # records of ours, not the dump's

        def records_then_marker() -> Iterator[dict[str, Any]]:
            # (each request is checked by dumpfmt.apply, as the store applies it)
            for rec in itertools.chain((first,), it):
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

        return store.load(records_then_marker()) - extra[0]


_REST_SETTINGS = ("min_delay", "max_delay", "delay_factor")
"""The policy settings :meth:`Frontier.configure_default` may change while open."""


