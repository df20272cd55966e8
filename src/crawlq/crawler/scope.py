"""What the crawler may follow (domains, URL patterns, depth, trap guards), which pages
go first (priority rules) and which are saved (target rules)."""

from __future__ import annotations

import re
from collections.abc import Iterable
from urllib.parse import urlsplit


class Scope:
    """Decides whether a discovered URL is in scope; ``why_not`` returns the reason.

    ``allow_domains``: a host matches a domain when equal to it or a subdomain of it.
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
        self.domains = tuple(d.lower().strip(".") for d in allow_domains)
        self.include = [re.compile(p) for p in include]
        self.exclude = [re.compile(p) for p in exclude]
        self.priority_rules = [(re.compile(p), n) for p, n in priority]
        self.target = [re.compile(p) for p in target]
        self.max_depth = max_depth
        self.max_url_length = max_url_length
        self.max_repeats = max_repeats

    def why_not(self, url: str, depth: int) -> str | None:
        """None when ``url`` at ``depth`` is in scope, else a short reason."""
        if len(url) > self.max_url_length:
            return "url-too-long"
        if self.max_depth is not None and depth > self.max_depth:
            return "too-deep"
        try:
            parts = urlsplit(url)
            host = (parts.hostname or "").lower()
        except ValueError:  # e.g. http://[zzz]/ in a sitemap: this URL only is left out
            return "bad-url"
        if self.domains and not any(host == d or host.endswith("." + d) for d in self.domains):
            return "off-domain"
        if self.include and not any(p.search(url) for p in self.include):
            return "not-included"
        if any(p.search(url) for p in self.exclude):
            return "excluded"
        segments = [s for s in parts.path.split("/") if s]
        if segments and max(segments.count(s) for s in set(segments)) > self.max_repeats:
            return "repeated-path"
        return None

    def priority(self, url: str) -> int:
        """The priority of ``url`` by the priority rules (higher is fetched sooner)."""
        return sum(n for p, n in self.priority_rules if p.search(url))

    def is_target(self, url: str) -> bool:
        """Whether the page at ``url`` is saved (True for all without target rules)."""
        return not self.target or any(p.search(url) for p in self.target)
