"""Registered domains and public suffixes, by the Public Suffix List.

The list comes from the ``publicsuffixlist`` package, which ships it (nothing is
downloaded at run time) and is kept current by its releases. Names under a suffix the
list does not know fall under its default rule (``*``): their last label is the suffix,
so ``a.test`` is the registered domain of ``h5.a.test`` and ``test`` is a public suffix.
"""

from __future__ import annotations

import functools
import ipaddress
from typing import Any

from ..errors import ConfigError

_PSL: Any = None


def public_suffix_list() -> Any:
    """The loaded list (a ``publicsuffixlist.PublicSuffixList``); raises
    :class:`~crawlq.errors.ConfigError` when the package is missing."""
    global _PSL
    if _PSL is None:
        try:
            from publicsuffixlist import PublicSuffixList  # type: ignore[import-not-found,unused-ignore]
        except ImportError as exc:
            raise ConfigError("the Public Suffix List is needed: "
                              "pip install 'crawlq[domain]'") from exc
        _PSL = PublicSuffixList()
    return _PSL


def _is_address(host: str) -> bool:
    try:
        ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return False
    return True


def registered_domain(host: str) -> str:
    """The registered domain of ``host`` (``news.example.co.uk`` -> ``example.co.uk``,
    ``u1.github.io`` -> ``u1.github.io``). An IP address, or a name that is itself a
    public suffix, is its own domain. ``host`` is a lowercase name without port."""
    if not host or _is_address(host):
        return host
    domain = public_suffix_list().privatesuffix(host)
    return str(domain) if domain else host


def is_public_suffix(name: str) -> bool:
    """Whether ``name`` (lowercase, no leading dot) is a public suffix: ``com``,
    ``co.uk``, ``github.io``, or any single label the list does not know (``test``)."""
    if not name or _is_address(name):
        return False
    return bool(public_suffix_list().is_public(name))


_HOST_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789-._")


@functools.lru_cache(maxsize=65_536)  # (a store asks once per queue it makes; a trap makes many)
def domain_of(queue_key: str) -> str:
    """The domain a queue belongs to (the stores bound a domain as a whole: see
    :mod:`crawlq.stores.rules`): for a queue key that is a host, with or without a
    port, its registered domain with that port (``h5.a.test:8080`` -> ``a.test:8080``,
    ``en.wikipedia.org`` -> ``wikipedia.org``); for an IP literal, or a key that is not
    a host name (a custom ``queue_by``), the key itself. The port is kept: two servers
    on one name are two sites (and loopback test sites differ only by port)."""
    host, colon, port = queue_key.rpartition(":")
    if not colon or not port.isdigit() or host.endswith("]"):
        host, port = queue_key, ""
    if not host or host[0] == "[" or not _HOST_CHARS.issuperset(host):
        return queue_key
    domain = registered_domain(host)
    return f"{domain}:{port}" if port else domain
