"""Per-queue politeness and budget settings (:class:`QueuePolicy`), and the checks of
option values. The politeness delay after each fetch is :meth:`QueuePolicy.delay`, the
one definition every store uses (the Redis store's Lua scripts mirror it).

setup.py compiles this module with mypyc (the stores call ``delay`` and read the
settings once per queue and call); the .py runs where it cannot be compiled. A
compiled QueuePolicy checks its fields' types when it is made: a wrong type is a
TypeError there, so callers with values from users build it with :meth:`QueuePolicy.of`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from typing import Any, Final

from mypy_extensions import mypyc_attr

from ..errors import ConfigError


def flag(name: str, value: object) -> bool:
    """An on/off option: True or False (or 1 and 0). Anything else is a ConfigError
    rather than its truth value: ``-o lifo=maybe`` or ``lifo="false"`` must not quietly
    turn LIFO on."""
    if value is True or value is False:
        return value
    if value.__class__ is int and value in (0, 1):
        return bool(value)
    raise ConfigError(f"{name} must be true or false, not {value!r}")


def as_seconds(name: str, value: object, *, positive: bool = False,
               signed: bool = False) -> float:
    """A time option or argument: a finite number of seconds, >= 0 (> 0 with
    ``positive``; any sign with ``signed``, for a time that may already be past)."""
    if (not isinstance(value, (int, float)) or isinstance(value, bool)
            or not math.isfinite(value)):
        raise ConfigError(f"{name} must be a number of seconds, not {value!r}")
    if not signed and (value < 0 or (positive and value == 0)):
        raise ConfigError(f"{name} must be {'>' if positive else '>='} 0 seconds, "
                          f"not {value!r}")
    return float(value)


def as_count(name: str, value: object, minimum: int = 0) -> int:
    """A count option or argument: an integer >= ``minimum``."""
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise ConfigError(f"{name} must be an integer >= {minimum}, not {value!r}")
    return value


DOMAIN_SETTINGS: Final = ("domain_concurrency", "max_domain_urls", "max_domain_queues")
"""The settings of a queue's domain: the store's, never a queue's override."""


@mypyc_attr(allow_interpreted_subclasses=True)  # (a subclass may have its own delay)
@dataclass(frozen=True)
class QueuePolicy:
    """Per-queue politeness and budget settings; the store's defaults, overridable per queue.

    After a lease ends, its queue rests ``clamp(delay_factor * duration, min_delay,
    max_delay)`` seconds. ``concurrency``: leases in flight per queue at most.
    ``max_queue_urls``: how many entries a queue may ever accept (spider-trap guard;
    0 = no cap). ``session_budget``: after that many leases in a row a queue yields:
    it rests ``session_rest`` seconds and goes to the back of the ready line (0 = off).

    The ``domain_*`` settings bound a queue's domain (its key's registered domain,
    :func:`crawlq.policies.domains.domain_of`: the hosts of one site), and are the
    store's alone (no queue overrides them): ``domain_concurrency``, leases in flight
    per domain at most; ``max_domain_urls``, entries a domain may ever accept;
    ``max_domain_queues``, queues a domain may have (the cap on a wildcard-subdomain
    trap's host names). 0 = no cap.
    """

    concurrency: int = 1
    min_delay: float = 1.0
    max_delay: float = 30.0
    delay_factor: float = 5.0
    max_queue_urls: int = 0
    session_budget: int = 0
    session_rest: float = 0.0
    domain_concurrency: int = 0
    max_domain_urls: int = 0
    max_domain_queues: int = 0

    @classmethod
    def of(cls, settings: Mapping[str, object]) -> QueuePolicy:
        """A policy from option values a caller gave (``Frontier.open``'s keywords, ``-o``):
        each checked first, so a wrong type is a ConfigError that names it, as a wrong
        value is."""
        return cls(**{k: _checked(k, v) for k, v in settings.items()})

    def __post_init__(self) -> None:
        as_count("concurrency", self.concurrency, 1)
        as_count("max_queue_urls", self.max_queue_urls)
        as_count("session_budget", self.session_budget)
        for name in DOMAIN_SETTINGS:
            as_count(name, getattr(self, name))
        for name in ("min_delay", "max_delay", "delay_factor", "session_rest"):
            as_seconds(name, getattr(self, name))
        if self.max_delay < self.min_delay:
            raise ConfigError("max_delay must be >= min_delay")

    def delay(self, duration: float | None) -> float:
        """The politeness rest after a fetch that took ``duration`` seconds."""
        d = self.delay_factor * (duration or 0.0)
        return min(max(d, self.min_delay), self.max_delay)

    def merged(self, overrides: Mapping[str, float] | None) -> QueuePolicy:
        """This policy with a queue's overrides applied."""
        if not overrides:
            return self
        changes: dict[str, Any] = {k: _typed(k, v) for k, v in overrides.items()}
        if "max_delay" not in changes and changes.get("min_delay", 0) > self.max_delay:
            # A queue told to wait longer than the default cap (Crawl-delay: 60) gets it.
            changes["max_delay"] = changes["min_delay"]
        return replace(self, **changes)


QUEUE_SETTINGS = tuple(f.name for f in fields(QueuePolicy) if f.name not in DOMAIN_SETTINGS)
"""The settings a queue may override (``configure_queue``)."""
_INT_SETTINGS = {"concurrency", "max_queue_urls", "session_budget", *DOMAIN_SETTINGS}


def _checked(name: str, value: object) -> Any:
    """A setting's value as a caller gave it, checked: a count or a number of seconds."""
    return as_count(name, value) if name in _INT_SETTINGS else as_seconds(name, value)


def _typed(name: str, value: float) -> Any:  # (an int or a float: not coerced when compiled)
    return int(value) if name in _INT_SETTINGS else float(value)


def typed_settings(settings: Mapping[str, float]) -> dict[str, Any]:
    """A queue's overrides as listings show them: counts as ints, times as floats
    (whatever form a store keeps them in)."""
    return {k: _typed(k, v) for k, v in settings.items()}


def changed_settings(current: Mapping[str, float],
                     changes: Mapping[str, float | None]) -> dict[str, float]:
    """A queue's overrides ``current`` after ``changes`` (from :func:`check_settings`;
    ``None`` removes an override)."""
    out = dict(current)
    for k, v in changes.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = v
    return out


def check_settings(settings: Mapping[str, Any]) -> dict[str, float | None]:
    """Validate per-queue overrides; ``None`` removes an override."""
    unknown = set(settings) - set(QUEUE_SETTINGS)
    store_wide = sorted(unknown & set(DOMAIN_SETTINGS))
    if store_wide:
        raise ConfigError(f"{', '.join(store_wide)}: a setting of every domain, set when the "
                          "frontier is opened, not of one queue")
    if unknown:
        raise ConfigError(f"unknown queue setting(s) {sorted(unknown)}; "
                          f"known: {list(QUEUE_SETTINGS)}")
    # (strict here, on what a caller gives; _typed is lenient with what stores give back)
    clean: dict[str, float | None] = {
        k: None if v is None else _checked(k, v) for k, v in settings.items()}
    QueuePolicy().merged({k: v for k, v in clean.items() if v is not None})  # validates
    return clean


