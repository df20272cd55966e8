"""The Frontier's own policies, one small frozen object per concept, each checked once
when it is made (a bad value is a :class:`~crawlq.ConfigError` naming the option):

- :class:`URLPolicy`: what ``add`` makes of a request (its canonical URL, its seen-set
  key, its queue, its priority, when it may be seen again);
- :class:`RetryPolicy`: what a failed fetch means (backoff, then dead);
- :class:`LeasePolicy`: how long a lease lasts, and whether a late answer raises.

``Frontier(store, url_policy=..., retry_policy=..., lease_policy=...)`` takes them;
``Frontier.open(url, **options)`` builds them from its flat options of the same names
(docs/options.md). Politeness, budgets and the domain caps are the store's
(:class:`~crawlq.QueuePolicy`, given to the store when it is opened), not these.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, fields
from typing import Any, TypeVar

from ..errors import ConfigError
from ..models import Request
from ..stores.policy import as_count, as_seconds, flag
from .canonical import DEFAULT_MAX_LENGTH, Canonicalizer
from .fingerprint import Fingerprinter, FingerprintFunction
from .queueing import QueueKeyFunction, resolve_queue_key


def _keep(obj: object, name: str, value: object) -> None:
    """Set a checked (normalized) value on a frozen policy while it is made."""
    object.__setattr__(obj, name, value)


def name_list(text: object, option: str, example: str) -> tuple[str, ...]:
    """An option that is a list of names (``schemes``, ``local_values``) as a tuple;
    ConfigError for a single string (a list of its letters, otherwise) or anything but
    strings."""
    got = (None if isinstance(text, str) or not isinstance(text, Iterable)
           else tuple(text))
    if got is None or not all(isinstance(x, str) for x in got):
        raise ConfigError(f"{option} must be a list of {example}, not {text!r}")
    return got


def check_function(option: str, fn: object) -> None:
    """ConfigError unless ``fn`` can be called (the options that are functions)."""
    if not callable(fn):
        raise ConfigError(f"{option} must be a function, not {fn!r}")


@dataclass(frozen=True, kw_only=True, slots=True)
class URLPolicy:
    """What :meth:`~crawlq.Frontier.add` makes of each request: its canonical URL
    (``canonicalize``, ``max_url_length``, ``schemes``), its seen-set key
    (``fingerprint``, ``source_aware``, ``dedup_post``, ``revisit_after``), its queue
    (``queue_by``) and its priority (``priority``). A crawl's URLs keep one form: a
    store records the canonical form of the first frontier that crawls it.

    Each option means what the :meth:`~crawlq.Frontier.open` option of the same name
    means (docs/options.md). What they name is at hand once made: ``canonicalizer``,
    ``fingerprinter`` and ``queue_key``.
    """

    canonicalize: bool | Callable[[str], str] = True
    """True: the default :class:`~crawlq.Canonicalizer`; False: WHATWG parsing and
    validation only; or a function ``url -> canonical url`` of your own."""
    max_url_length: int = DEFAULT_MAX_LENGTH
    """Longer URLs are rejected (``too-long``); with ``canonicalize`` True or False."""
    schemes: Iterable[str] = ("http", "https")
    """The accepted URL schemes (kept as a tuple); with ``canonicalize`` True or False."""
    fingerprint: FingerprintFunction | None = None
    """A function ``(request, canonical_url) -> bytes`` replacing the default."""
    source_aware: bool = False
    """Mix the referrer into the default fingerprint."""
    dedup_post: bool = True
    """False: POST requests are never deduplicated."""
    queue_by: str | QueueKeyFunction = "host"
    """``"host"``, ``"domain"`` (needs ``crawlq[domain]``) or a function
    ``canonical_url -> queue key``."""
    priority: Callable[[Request], int] | None = None
    """A function ``request -> int`` overriding ``request.priority``."""
    revisit_after: float | None = None
    """Seconds after which a seen URL may be accepted again; None: never."""

    canonicalizer: Callable[[str], str] = field(init=False, repr=False, compare=False)
    """The function ``canonicalize`` names."""
    fingerprinter: FingerprintFunction = field(init=False, repr=False, compare=False)
    """``fingerprint``, or the default :class:`~crawlq.Fingerprinter`."""
    queue_key: QueueKeyFunction = field(init=False, repr=False, compare=False)
    """The function ``queue_by`` names."""

    def __post_init__(self) -> None:
        length = as_count("max_url_length", self.max_url_length, 1)
        schemes = name_list(self.schemes, "schemes", "scheme names, like ['https']")
        if self.revisit_after is not None:
            _keep(self, "revisit_after",
                  as_seconds("revisit_after", self.revisit_after, positive=True))
        for option in ("priority", "fingerprint"):
            fn = getattr(self, option)
            if fn is not None:
                check_function(option, fn)
        source_aware = flag("source_aware", self.source_aware)
        _keep(self, "dedup_post", flag("dedup_post", self.dedup_post))
        canonicalize = self.canonicalize
        canonicalizer: Callable[[str], str]
        if canonicalize is True:
            canonicalizer = Canonicalizer(schemes=schemes, max_length=length)
        elif canonicalize is False:
            # crawlq's steps off: the URL as the WHATWG parser serializes it (what the
            # fetcher requests), validated (scheme, host, length).
            canonicalizer = Canonicalizer(
                drop_fragment=False, normalize_percent=False, sort_query=False,
                drop_params=(), drop_prefixes=(), session_params=(),
                drop_session_in_path=False, schemes=schemes, max_length=length)
        elif callable(canonicalize):
            canonicalizer = canonicalize
        else:
            raise ConfigError("canonicalize must be True, False or a callable")
        _keep(self, "max_url_length", length)
        _keep(self, "schemes", schemes)
        _keep(self, "source_aware", source_aware)
        _keep(self, "canonicalizer", canonicalizer)
        _keep(self, "fingerprinter",
              self.fingerprint or Fingerprinter(source_aware=source_aware))
        _keep(self, "queue_key", resolve_queue_key(self.queue_by))


@dataclass(frozen=True, kw_only=True, slots=True)
class RetryPolicy:
    """What :meth:`~crawlq.Frontier.done` with ``Outcome.FAILED`` means: the request is
    tried again after ``retry_backoff`` seconds, doubled with each failure up to
    ``retry_backoff_max``, until it has failed ``max_retries`` times; one more failure
    keeps it as dead, with its error (:meth:`backoff`)."""

    max_retries: int = 3
    """Failures before a request is dead (0: dead at its first failure)."""
    retry_backoff: float = 60.0
    """Seconds before the first retry; doubles with each failure."""
    retry_backoff_max: float = 3600.0
    """The longest wait before a retry."""

    def __post_init__(self) -> None:
        # (checked when made, not where they are used: a bad retry_backoff would
        # otherwise raise only at the first failed fetch, deep into a crawl)
        _keep(self, "max_retries", as_count("max_retries", self.max_retries))
        _keep(self, "retry_backoff", as_seconds("retry_backoff", self.retry_backoff))
        _keep(self, "retry_backoff_max",
              as_seconds("retry_backoff_max", self.retry_backoff_max))

    def backoff(self, failures: int) -> float | None:
        """Seconds before a request that has failed ``failures`` times (1 at its first
        failure) is tried again, or None when that is more than ``max_retries``: it is
        dead."""
        if failures > self.max_retries:
            return None
        # (2.0 ** 1023 is the largest power of two a float holds: more failures than
        # that wait retry_backoff_max, rather than overflow)
        return min(self.retry_backoff * 2.0 ** min(failures - 1, 1023),
                   self.retry_backoff_max)


@dataclass(frozen=True, kw_only=True, slots=True)
class LeasePolicy:
    """How long a lease of :meth:`~crawlq.Frontier.next` lasts unless renewed (its
    request then returns to its queue), and what a late answer does."""

    lease_ttl: float = 300.0
    """Seconds a lease lasts (``next(ttl=...)`` and ``renew`` may say otherwise)."""
    strict_acks: bool = False
    """True: answering or renewing an expired or unknown lease raises
    :class:`~crawlq.LeaseError` (after the others are applied); False: it is counted
    as a late answer."""

    def __post_init__(self) -> None:
        _keep(self, "lease_ttl", as_seconds("lease_ttl", self.lease_ttl, positive=True))
        _keep(self, "strict_acks", flag("strict_acks", self.strict_acks))


_Policy = TypeVar("_Policy", URLPolicy, RetryPolicy, LeasePolicy)


def options_of(kind: type[_Policy]) -> tuple[str, ...]:
    """The options a policy takes: the flat options of ``Frontier.open`` it gathers."""
    return tuple(f.name for f in fields(kind) if f.init)


def gathered(kind: type[_Policy], name: str, options: dict[str, Any]) -> _Policy:
    """The policy ``kind`` that ``Frontier.open``'s ``options`` give, taken out of them:
    the object itself under ``name``, or one made of its flat options (its defaults for
    those not given). ConfigError for both at once, or for something else under
    ``name``."""
    flat = {k: options.pop(k) for k in options_of(kind) if k in options}
    given = options.pop(name, None)
    if given is None:
        return kind(**flat)
    if not isinstance(given, kind):
        raise ConfigError(f"{name} must be a {kind.__name__}, not {given!r}")
    if flat:
        one = len(flat) == 1
        raise ConfigError(f"{', '.join(flat)} {'is' if one else 'are'} part of {name}: "
                          f"give {'it' if one else 'them'} in the {kind.__name__} or "
                          f"alone, not both")
    return given
