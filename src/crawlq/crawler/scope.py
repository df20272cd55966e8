"""What the crawler may follow (domains, URL patterns, depth, trap guards), which pages
go first (priority rules) and which are saved (target rules).

A URL's host is judged as the fetch will read it: by the WHATWG URL Standard, the parser
of the canonical form (ada, through ``can_ada``), so ``http://evil.test:81\\@a.test/``
is on evil.test (a backslash ends the authority), not on a.test as urllib reads it.
Host names are compared in their ASCII (IDNA) form without a trailing dot: a seed
``http://bücher.test/``, ``--allow-domain bücher.test`` and a link to
``http://xn--bcher-kva.test./`` are in one scope (the canonical form, as browsers, keeps
a trailing-dot host apart: its own queue). The port is no part of a domain: an
allowed host is allowed on every port.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from can_ada import parse as _parse


def host_of(url: str) -> str:
    """The host of ``url`` as the fetch reads it (WHATWG: lowercased, IDNA, IPv6 in
    brackets), without a trailing dot; "" for a string that is no URL with a host."""
    try:
        return _parse(url).hostname.rstrip(".")
    except (ValueError, TypeError):  # (TypeError: a lone surrogate)
        return ""


def domain_name(domain: str) -> str:
    """``domain`` (as a user writes it: Unicode or not, any case, dots around) in the
    form :func:`host_of` gives; raises ValueError for one that is no host name."""
    name = domain.strip().strip(".")
    host = host_of("http://" + name + "/")
    if not host or any(c in name for c in "/@*") or (
            ":" in name.rpartition("]")[2]):  # (a port: no part of a domain)
        raise ValueError(f"{domain!r} is no domain name")
    return host


VERDICTS_KEPT = 65_536
"""How many URLs' verdicts a :class:`Scope` keeps (then it forgets them all and starts
again: ~11 MB at most, URLs of ~85 characters)."""

_UNJUDGED = "(not judged yet)"  # (no verdict is this string)


class Scope:
    """Decides whether a discovered URL is in scope; ``why_not`` returns the reason.

    ``allow_domains``: a host matches a domain when equal to it or a subdomain of it
    (see :func:`domain_name`; a bad one raises ValueError).
    ``include``/``exclude``: regular expressions searched in the URL (include: at least
    one must match, when any are given). ``max_depth``: links deeper are dropped.
    ``max_url_length`` and ``max_repeats`` (the same path segment repeated more than
    this many times, as in /a/b/a/b/a/b) guard against spider traps.
    ``priority``: (regex, n) rules; a URL's priority is the sum of the ``n`` of every rule
    that matches it (0 when none does). ``target``: regexes of the pages to save; when
    any are given, other pages are only followed (Spiderman's target and source rules).
    A bad regular expression raises ``re.error``.
    """

    def __init__(self, allow_domains: Iterable[str] = (), include: Iterable[str] = (),
                 exclude: Iterable[str] = (), max_depth: int | None = None,
                 max_url_length: int = 2048, max_repeats: int = 3,
                 priority: Iterable[tuple[str, int]] = (),
                 target: Iterable[str] = ()) -> None:
        self.domains = tuple(domain_name(d) for d in allow_domains)
        self.include = [re.compile(p) for p in include]
        self.exclude = [re.compile(p) for p in exclude]
        self.priority_rules = [(re.compile(p), n) for p, n in priority]
        self.target = [re.compile(p) for p in target]
        self.max_depth = max_depth
        self.max_url_length = max_url_length
        self.max_repeats = max_repeats
        # what each URL met lately was judged (None: in scope), the depth aside: the
        # links of a site's pages are mostly the same few (navigation, the same
        # off-site links), and judging one again costs a WHATWG parse and the patterns
        self._verdicts: dict[str, str | None] = {}

    def why_not(self, url: str, depth: int) -> str | None:
        """None when ``url`` at ``depth`` is in scope, else a short reason."""
        if len(url) > self.max_url_length:
            return "url-too-long"
        if self.max_depth is not None and depth > self.max_depth:
            return "too-deep"
        verdicts = self._verdicts
        why = verdicts.get(url, _UNJUDGED)
        if why is _UNJUDGED:
            why = self._judge(url)
            if len(verdicts) >= VERDICTS_KEPT:  # (a bound on memory: start again)
                verdicts.clear()
            verdicts[url] = why
        return why

    def _judge(self, url: str) -> str | None:
        """What :meth:`why_not` says of ``url`` apart from its length and depth."""
        try:
            parts = _parse(url)
        except (ValueError, TypeError):  # e.g. http://[zzz]/ in a sitemap: this URL
            return "bad-url"  # only is left out
        if not self.on_domain(parts.hostname.rstrip(".")):
            return "off-domain"
        if self.include and not any(p.search(url) for p in self.include):
            return "not-included"
        if any(p.search(url) for p in self.exclude):
            return "excluded"
        segments = [s for s in parts.pathname.split("/") if s]
        if segments and max(segments.count(s) for s in set(segments)) > self.max_repeats:
            return "repeated-path"
        return None

    def on_domain(self, host: str) -> bool:
        """Is ``host`` (as :func:`host_of` gives it) one of the allowed domains or a
        subdomain of one (True for any host without ``allow_domains``)?"""
        return not self.domains or any(host == d or host.endswith("." + d)
                                       for d in self.domains)

    def priority(self, url: str) -> int:
        """The priority of ``url`` by the priority rules (higher is fetched sooner)."""
        return sum(n for p, n in self.priority_rules if p.search(url))

    def is_target(self, url: str) -> bool:
        """Whether the page at ``url`` is saved (True for all without target rules)."""
        return not self.target or any(p.search(url) for p in self.target)
