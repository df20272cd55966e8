"""Registered domains and public suffixes, by the Public Suffix List.

The list comes from the ``publicsuffixlist`` package, which ships it (nothing is
downloaded at run time) and is kept current by its releases. Names under a suffix the
list does not know fall under its default rule (``*``): their last label is the suffix,
so ``a.test`` is the registered domain of ``h5.a.test`` and ``test`` is a public suffix.
"""

from __future__ import annotations

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
