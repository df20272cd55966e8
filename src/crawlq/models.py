"""Plain data: requests, leases, outcomes, statistics.

All are immutable; a :class:`Request` serializes compactly with msgpack (see
:meth:`Request.to_payload`), the one encoding every store keeps.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from .errors import ConfigError
from .payload import PayloadError
from .payload import decode as _decode
from .payload import encode as _encode

NO_META: Mapping[str, Any] = MappingProxyType({})
"""A request's ``meta`` when it has none: one empty mapping shared by every request (no
dict per request)."""

PRIORITY_MAX = 2**31 - 1
"""Priorities must lie in [-PRIORITY_MAX, PRIORITY_MAX]."""
RETRIES_MAX = 2**16 - 1
DEPTH_MAX = 2**32 - 1
"""A request's depth must lie in [0, DEPTH_MAX]."""


class Outcome(enum.Enum):
    """How a leased request ended."""

    DONE = "done"
    """Fetched; the request is finished."""
    FAILED = "failed"
    """Failed; retried with backoff until ``max_retries``, then kept as dead."""
    RETRY = "retry"
    """Put back to be fetched later without counting a failure."""
    DEAD = "dead"
    """Failed for good: kept as dead with ``error`` at once, no retries (e.g. a URL the
    crawler may not fetch); :meth:`~crawlq.Frontier.requeue_dead` revives it."""


@dataclass(slots=True)
class Request:
    """A URL to fetch and what the crawler knows about it.

    Treat a request as immutable (derive changed copies with ``dataclasses.replace``).
    It is not a frozen dataclass on purpose: frozen construction costs about six times
    as much, and the frontier builds one per URL on its hot paths.

    ``priority``: higher runs sooner. ``not_before``: earliest fetch time (epoch seconds).
    ``revisit_after``: seconds after which the same URL may be accepted again (overrides
    the frontier's ``revisit_after``). ``retries``: failures so far (set by the frontier).
    ``meta`` must be JSON-serializable. ``queue``: the queue to wait in, instead of the
    one the frontier's ``queue_by`` gives the URL (as Scrapy's ``download_slot``); a
    leased request has it as ``Lease.queue``.
    """

    url: str
    method: str = "GET"
    body: bytes = b""
    priority: int = 0
    depth: int = 0
    referrer: str | None = None
    meta: Mapping[str, Any] = field(default_factory=lambda: NO_META, hash=False)
    dont_filter: bool = False
    not_before: float | None = None
    retries: int = 0
    revisit_after: float | None = None
    queue: str | None = None

    def to_payload(self, key: str | None = None) -> bytes:
        """Encode the parts a store keeps opaque (priority and retries live beside it).

        ``key``: the request's queue key. When the URL is ``http(s)://<key>`` followed by
        ``/`` or ``:`` (the default host queues), that prefix is left out, and out of the
        referrer too when it shares it: the queue already says it, and it is most of the
        bytes of a queued URL. Pass the same key to :meth:`from_payload`. The format:
        :mod:`crawlq.payload`. Raises :class:`~crawlq.errors.ConfigError` for a request
        that cannot be encoded (fields of the wrong type, a meta msgpack cannot hold).
        """
        try:
            return _encode(self.url, key, self.depth, self.referrer, self.method, self.body,
                           dict(self.meta) if self.meta else None, self.dont_filter,
                           self.revisit_after)
        except PayloadError as exc:
            raise ConfigError(str(exc)) from exc
        except TypeError as exc:  # a field of the wrong type
            raise ConfigError(f"request is not serializable: {exc}") from exc

    @classmethod
    def from_payload(
        cls, payload: bytes, priority: int = 0, retries: int = 0,
        not_before: float | None = None, key: str | None = None,
    ) -> Request:
        """Decode :meth:`to_payload` output (made with the same ``key``); the inverse,
        for any request. Raises ValueError for bytes that are not a payload."""
        url, method, body, depth, ref, meta, dont_filter, revisit = _decode(payload, key)
        return cls(url, method, body, priority, depth, ref,
                   NO_META if meta is None else meta, dont_filter, not_before, retries,
                   revisit, None)


@dataclass(slots=True)
class Lease:
    """A request handed to a fetcher until ``expires_at``; answer it with done/retry.

    Not frozen for the same reason as :class:`Request`; do not change its fields."""

    token: int
    request: Request
    queue: str
    leased_at: float
    expires_at: float


@dataclass(frozen=True, slots=True)
class Rejection:
    """A request ``add`` did not accept because it is invalid or over a budget."""

    index: int
    url: str
    reason: str
    detail: str = ""


@dataclass(frozen=True, slots=True)
class AddResult:
    """What ``Frontier.add`` did with a batch: counts and the rejected requests."""

    added: int
    duplicates: int
    rejected: tuple[Rejection, ...] = ()
    added_flags: tuple[bool, ...] = ()

    def __bool__(self) -> bool:
        return self.added > 0


@dataclass(frozen=True, slots=True)
class QueueInfo:
    """One queue as seen by ``Frontier.queues`` and ``Stats.per_queue``."""

    key: str
    queued: int
    leased: int
    ready_at: float
    accepted: int
    state: str
    settings: Mapping[str, float] = field(default_factory=dict, hash=False)
    scheduled: int = 0
    """Its entries waiting for a time (``not_before``, a retry later): not queued yet."""

    def as_dict(self) -> dict[str, Any]:
        """A JSON-friendly dict of every field (``ready_at`` None for never)."""
        return {**{k: getattr(self, k) for k in self.__dataclass_fields__},
                "ready_at": None if math.isinf(self.ready_at) else self.ready_at,
                "settings": dict(self.settings)}


@dataclass(frozen=True, slots=True)
class DeadRequest:
    """A request that failed ``max_retries`` times, with its last error."""

    id: int
    request: Request
    queue: str
    error: str
    died_at: float


@dataclass(frozen=True, slots=True)
class Stats:
    """Frontier counters (WebMagic/Scrapy/Heritrix style).

    ``seen``: unique requests accepted through the seen-set. ``added``: every accepted
    request (``seen`` plus ``dont_filter`` ones). ``queued`` includes requests waiting
    for ``not_before``; ``scheduled`` is that subset. ``failed`` counts failures
    (including the final ones), ``dead`` the requests that ran out of retries.
    Queue counts, by the states of ``queues()``: ``queues_ready`` can be leased now,
    ``queues_busy`` have requests but as many leases out as their concurrency,
    ``queues_resting`` have requests but wait (politeness delay, a block, the end of a
    session), ``queues_exhausted`` have nothing queued.
    """

    seen: int = 0
    added: int = 0
    queued: int = 0
    scheduled: int = 0
    leased: int = 0
    done: int = 0
    failed: int = 0
    retried: int = 0
    dead: int = 0
    redelivered: int = 0
    late_acks: int = 0
    duplicates: int = 0
    rejected: Mapping[str, int] = field(default_factory=dict, hash=False)
    queues_total: int = 0
    queues_ready: int = 0
    queues_busy: int = 0
    queues_resting: int = 0
    queues_exhausted: int = 0
    per_queue: tuple[QueueInfo, ...] = ()

    @property
    def finished(self) -> bool:
        """True when nothing is queued and nothing is in flight: the crawl is over."""
        return self.queued == 0 and self.leased == 0

    def as_dict(self) -> dict[str, Any]:
        """A JSON-friendly dict of every field (``per_queue`` as dicts)."""
        d: dict[str, Any] = {}
        for name in self.__dataclass_fields__:
            v = getattr(self, name)
            if name == "rejected":
                v = dict(v)
            elif name == "per_queue":
                v = [q.as_dict() for q in v]
            d[name] = v
        d["finished"] = self.finished
        return d


def request_problem(req: Request) -> str | None:
    """What is wrong with a request's fields (types, ranges), or None: the rules of
    ``Frontier.add`` (which checks the same inline, on its hot path, and asks here what
    failed) and of a dump's records (``dumpfmt.apply``, under every store's load)."""
    if req.url.__class__ is not str:
        return f"url must be a string, not {req.url!r}"
    if req.priority.__class__ is not int or not -PRIORITY_MAX <= req.priority <= PRIORITY_MAX:
        return f"priority must be an int within ±{PRIORITY_MAX}: {req.priority!r}"
    if req.retries.__class__ is not int or not 0 <= req.retries <= RETRIES_MAX:
        return f"retries must be an int in [0, {RETRIES_MAX}], not {req.retries!r}"
    if req.body.__class__ is not bytes:
        return f"body must be bytes, not {type(req.body).__name__}"
    if req.referrer is not None and req.referrer.__class__ is not str:
        return f"referrer must be a URL (a string) or None, not {req.referrer!r}"
    if req.depth.__class__ is not int or not 0 <= req.depth <= DEPTH_MAX:
        return f"depth must be an int in [0, {DEPTH_MAX}], not {req.depth!r}"
    if req.method.__class__ is not str or not req.method:
        return f"method must be a non-empty string, not {req.method!r}"
    if req.dont_filter.__class__ is not bool:
        return f"dont_filter must be True or False, not {req.dont_filter!r}"
    if not isinstance(req.meta, Mapping):
        return f"meta must be a mapping, not {type(req.meta).__name__}"
    ra = req.revisit_after
    if ra is not None and (ra.__class__ not in (float, int) or not 0 < ra < math.inf):
        return f"revisit_after must be a number of seconds > 0, not {ra!r}"
    nb = req.not_before
    if nb is not None and (nb.__class__ not in (float, int) or not math.isfinite(nb)):
        return f"not_before must be a finite number of epoch seconds, not {nb!r}"
    return None
