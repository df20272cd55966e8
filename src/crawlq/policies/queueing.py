"""Queue keys: which per-host queue a request waits in (Heritrix's work queues)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..errors import ConfigError

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
    """The registered domain (``news.example.co.uk`` -> ``example.co.uk``).

    Needs the ``publicsuffixlist`` package (which ships the list, no download); hosts
    that are IP literals or have no known suffix keep their full host as key.
    """
    host = host_key(canonical_url)
    if host.startswith("["):
        return host  # an IPv6 literal has no registered domain
    host = host.partition(":")[0]
    if host.replace(".", "").isdigit():
        return host  # nor has an IPv4 address
    psl = _psl()
    domain = psl.privatesuffix(host)
    return domain if domain else host


_PSL: Any = None


def _psl() -> Any:
    global _PSL
    if _PSL is None:
        try:
            from publicsuffixlist import PublicSuffixList  # type: ignore[import-not-found,unused-ignore]
        except ImportError as exc:
            raise ConfigError("queue_by='domain' needs: pip install 'crawlq[domain]'") from exc
        _PSL = PublicSuffixList()
    return _PSL


def resolve_queue_key(queue_by: str | QueueKeyFunction) -> QueueKeyFunction:
    """Turn the ``queue_by`` option (``'host'``, ``'domain'`` or a callable) into a function."""
    if callable(queue_by):
        return queue_by
    if queue_by == "host":
        return host_key
    if queue_by == "domain":
        _psl()
        return domain_key
    raise ConfigError(f"queue_by must be 'host', 'domain' or a callable, not {queue_by!r}")
