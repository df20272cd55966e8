"""Queue keys: which per-host queue a request waits in (Heritrix's work queues)."""

from __future__ import annotations

from collections.abc import Callable

from ..errors import ConfigError
from .domains import public_suffix_list, registered_domain

QueueKeyFunction = Callable[[str], str]
"""``canonical_url -> queue key``."""


def host_key(canonical_url: str) -> str:
    """The URL's authority (host, and port when not the default): one queue per site."""
    start = canonical_url.find("://") + 3
    end = len(canonical_url)
    for ch in "/?#":
        i = canonical_url.find(ch, start)
        if 0 <= i < end:
            end = i
    netloc = canonical_url[start:end]
    return netloc.rpartition("@")[2]


def domain_key(canonical_url: str) -> str:
    """The registered domain (``news.example.co.uk`` -> ``example.co.uk``), by the
    Public Suffix List (:mod:`crawlq.policies.domains`); an IP literal, or a host
    that is a public suffix, keeps its full host as key."""
    host = host_key(canonical_url)
    if host.startswith("["):
        return host  # an IPv6 literal has no registered domain
    return registered_domain(host.partition(":")[0])


def resolve_queue_key(queue_by: str | QueueKeyFunction) -> QueueKeyFunction:
    """Turn the ``queue_by`` option (``'host'``, ``'domain'`` or a callable) into a function."""
    if callable(queue_by):
        return queue_by
    if queue_by == "host":
        return host_key
    if queue_by == "domain":
        public_suffix_list()
        return domain_key
    raise ConfigError(f"queue_by must be 'host', 'domain' or a callable, not {queue_by!r}")
