"""What Scrapy's settings mean for the frontier: its store, its persistence, its policy
and its fingerprints (docs/scrapy.md has the table)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from ...errors import ConfigError

JOBDIR_FILE = "crawlq.db"
"""The frontier's file inside ``JOBDIR``."""


@dataclass(frozen=True)
class StoreChoice:
    """Where a spider's frontier lives and what happens to it at start and close.

    ``url``: the store. ``origin``: the setting that chose it (for the log).
    ``persist``: keep the state when the spider closes (else it is deleted).
    ``flush_on_start``: delete any earlier state before the crawl starts.
    """

    url: str
    origin: str
    persist: bool
    flush_on_start: bool


def store_choice(settings: Any) -> StoreChoice:
    """The store Scrapy's settings ask for, the Scrapy way.

    ``CRAWLQ_STORE`` set: that store. Else ``JOBDIR`` set: a SQLite file in it, so the
    job resumes (after a crash too, unlike Scrapy's own JOBDIR). Else ``memory://``: a
    fresh crawl every run that writes nothing anywhere. ``CRAWLQ_PERSIST`` (default
    True) keeps a store's state on close; ``CRAWLQ_FLUSH_ON_START`` (default False)
    starts from an empty one (scrapy-redis' SCHEDULER_PERSIST and
    SCHEDULER_FLUSH_ON_START).
    """
    persist = settings.getbool("CRAWLQ_PERSIST", True)
    flush = settings.getbool("CRAWLQ_FLUSH_ON_START", False)
    url = settings.get("CRAWLQ_STORE")
    if url:
        if not isinstance(url, str):
            raise ConfigError(f"CRAWLQ_STORE must be a store URL, not {url!r}")
        return StoreChoice(url, "CRAWLQ_STORE", persist, flush)
    jobdir = settings.get("JOBDIR")
    if jobdir:
        path = os.path.abspath(os.path.join(str(jobdir), JOBDIR_FILE))
        os.makedirs(os.path.dirname(path), exist_ok=True)
        return StoreChoice("sqlite:///" + path, "JOBDIR", persist, flush)
    return StoreChoice("memory://", "default", True, False)


def frontier_options(settings: Any) -> dict[str, Any]:
    """The frontier options that Scrapy's settings call for (see docs/scrapy.md).

    ``CONCURRENT_REQUESTS_PER_DOMAIN`` (or ``CONCURRENT_REQUESTS_PER_IP`` when set)
    sets the per-queue ``concurrency`` (see ``_slot_policy``); ``DOWNLOAD_DELAY`` with
    its jitter the ``min_delay`` and ``max_delay``; AutoThrottle makes the rest follow
    the fetch time (``delay_factor`` = 1 / target concurrency, up to
    ``AUTOTHROTTLE_MAX_DELAY``).
    ``SCHEDULER_MEMORY_QUEUE`` (``SCHEDULER_DISK_QUEUE`` with a JOBDIR) picks LIFO or
    FIFO within a priority. ``CRAWLQ_OPTIONS`` (a dict of Frontier.open options)
    overrides any of them.
    """
    delay = settings.getfloat("DOWNLOAD_DELAY", 0.0)
    opts: dict[str, Any] = _slot_policy(_concurrency(settings), delay,
                                        default_jitter(settings), lease_batch(settings))
    if settings.getbool("AUTOTHROTTLE_ENABLED"):
        target = settings.getfloat("AUTOTHROTTLE_TARGET_CONCURRENCY", 1.0) or 1.0
        opts["delay_factor"] = 1.0 / target
        opts["max_delay"] = max(settings.getfloat("AUTOTHROTTLE_MAX_DELAY", 60.0), delay)
        opts["min_delay"] = delay
    queue = settings.get("SCHEDULER_DISK_QUEUE" if settings.get("JOBDIR")
                         else "SCHEDULER_MEMORY_QUEUE")
    opts["lifo"] = "lifo" in class_name(queue).lower()
    opts.update(settings.getdict("CRAWLQ_OPTIONS"))
    return opts


def start_order(settings: Any) -> str | None:
    """The order of start requests among themselves, when they have queues of their
    own (Scrapy's ``SCHEDULER_START_*_QUEUE``, FIFO by default): ``"lifo"`` or
    ``"fifo"``; None when the setting is empty (start requests share the others'
    queues and order)."""
    name = "SCHEDULER_START_DISK_QUEUE" if settings.get("JOBDIR") \
        else "SCHEDULER_START_MEMORY_QUEUE"
    queue = settings.get(name)
    if not queue:
        return None
    return "lifo" if "lifo" in class_name(queue).lower() else "fifo"


def default_jitter(settings: Any) -> float:
    """Scrapy's delay jitter: ``DOWNLOAD_DELAY_JITTER`` (2.19), or the older
    ``RANDOMIZE_DOWNLOAD_DELAY`` (±50% or none) where it is set above it, or where
    Scrapy has no jitter setting (before 2.19)."""
    randomize = settings.getpriority("RANDOMIZE_DOWNLOAD_DELAY") or 0
    jitter = settings.getpriority("DOWNLOAD_DELAY_JITTER")
    if jitter is None or randomize > jitter:
        return 0.5 if settings.getbool("RANDOMIZE_DOWNLOAD_DELAY", True) else 0.0
    return max(float(settings.getfloat("DOWNLOAD_DELAY_JITTER", 0.5)), 0.0)


LEASES_PER_DOWNLOAD = 2
"""Leases a queue without a delay may hold per download its Scrapy slot allows, besides
a lease batch (see ``_slot_policy``)."""


def lease_batch(settings: Any) -> int:
    """Requests the scheduler leases per store call: ``CRAWLQ_LEASE_BATCH``, else as
    many as the engine may download at once (``CONCURRENT_REQUESTS``)."""
    batch = int(settings.getint("CRAWLQ_LEASE_BATCH"))
    return batch or max(int(settings.getint("CONCURRENT_REQUESTS")), 1)


def _slot_policy(concurrency: int, delay: float, jitter: float, batch: int,
                 throttle: bool = True) -> dict[str, Any]:
    """A download slot's concurrency and delay as queue policy.

    Scrapy's slot concurrency counts downloads; a lease lasts from the store call until
    the callback is done. A queue without a delay may therefore hold
    ``LEASES_PER_DOWNLOAD`` times the slot's concurrency (while some responses are
    parsed, as many requests can be downloading) plus one lease ``batch`` (leased
    requests that wait in the scheduler, or in the downloader's queue for the slot).
    With less, a crawl of few hosts leaves Scrapy's downloader idle: ``scrapy bench``
    (one host) fetched ~15% fewer pages with twice the slot's concurrency alone.
    Scrapy's downloader still caps each process's downloads per slot. Scrapy fetches
    one request at a time from a slot with a delay, so such a queue gets concurrency 1.
    Its delay varies by ±jitter: the frontier's rest lies in the same range, following
    the fetch time (longer for slow hosts)."""
    low, high = delay * max(1.0 - jitter, 0.0), delay * (1.0 + jitter)
    held = LEASES_PER_DOWNLOAD * max(concurrency, 1) + max(batch, 1)
    return {"concurrency": 1 if delay > 0 else held,
            "min_delay": low, "max_delay": high,
            "delay_factor": 1.0 if high > low and throttle else 0.0}


def slot_overrides(settings: Any) -> dict[str, dict[str, Any]]:
    """Per-queue policy from ``DOWNLOAD_SLOTS`` (a slot's key is its queue's key)."""
    default_conc = _concurrency(settings)
    default_delay = settings.getfloat("DOWNLOAD_DELAY", 0.0)
    jitter = default_jitter(settings)
    batch = lease_batch(settings)
    out = {}
    for key, conf in settings.getdict("DOWNLOAD_SLOTS").items():
        if "jitter" in conf:
            j = float(conf["jitter"])
        elif "randomize_delay" in conf:
            j = 0.5 if conf["randomize_delay"] else 0.0
        else:
            j = jitter
        out[key] = _slot_policy(int(conf.get("concurrency", default_conc)),
                                float(conf.get("delay", default_delay)), j, batch,
                                bool(conf.get("throttle", True)))
    return out


def fingerprint_choice(settings: Any) -> str:
    """``"crawlq"`` (canonical fingerprints) or ``"scrapy"`` (the project's
    fingerprinter): ``CRAWLQ_FINGERPRINT``, and ``"scrapy"`` whenever
    ``REQUEST_FINGERPRINTER_CLASS`` names a class of the project's own."""
    choice = settings.get("CRAWLQ_FINGERPRINT", "crawlq")
    if choice not in ("crawlq", "scrapy"):
        raise ConfigError("CRAWLQ_FINGERPRINT must be 'crawlq' or 'scrapy'")
    if class_name(settings.get("REQUEST_FINGERPRINTER_CLASS")) not in ("", _FINGERPRINTER):
        return "scrapy"  # the project's own notion of "the same request"
    return str(choice)


_FINGERPRINTER = "scrapy.utils.request.RequestFingerprinter"


def _concurrency(settings: Any) -> int:
    """Requests at once per slot: ``CONCURRENT_REQUESTS_PER_IP`` when set, else
    ``CONCURRENT_REQUESTS_PER_DOMAIN``."""
    per_ip = settings.getint("CONCURRENT_REQUESTS_PER_IP")
    return int(per_ip or settings.getint("CONCURRENT_REQUESTS_PER_DOMAIN", 8))


def class_name(obj: Any) -> str:
    """The dotted name of a setting that holds a class or its name ("" for None)."""
    if obj is None:
        return ""
    return obj if isinstance(obj, str) else f"{obj.__module__}.{obj.__qualname__}"
