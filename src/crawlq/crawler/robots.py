"""robots.txt: fetched once per host, cached, parsed with protego (Google's rules)."""

from __future__ import annotations

import time
from dataclasses import dataclass

from protego import Protego

ROBOTS_TTL = 24 * 3600.0
ERROR_RETRY = 30.0  # robots.txt 5xx/unreachable: ask again this soon


@dataclass
class Robots:
    """The rules of one host and until when they hold."""

    parser: Protego | None
    """None: no rules (4xx: everything allowed)."""
    disallow_all: bool
    """5xx or unreachable: nothing may be fetched until ``expires`` (Google's spec)."""
    expires: float
    reason: str = ""
    """Why robots.txt could not be had (with ``disallow_all``): status or network error."""

    def allows(self, url: str, agent: str) -> bool:
        """May ``agent`` fetch ``url``?"""
        if self.disallow_all:
            return False
        return self.parser is None or bool(self.parser.can_fetch(url, agent))

    def crawl_delay(self, agent: str) -> float | None:
        """The Crawl-delay for ``agent``, if any."""
        if self.parser is None:
            return None
        d = self.parser.crawl_delay(agent)
        return float(d) if d is not None else None


def from_response(status: int | None, text: str, now: float | None = None,
                  error: str = "") -> Robots:
    """Rules from a robots.txt fetch: ``status`` None means unreachable (``error``)."""
    now = time.time() if now is None else now
    if status is None or status >= 500 or status == 429:
        reason = error or (f"HTTP {status}" if status else "unreachable")
        return Robots(None, True, now + ERROR_RETRY, reason)
    if status >= 400:
        return Robots(None, False, now + ROBOTS_TTL)
    if status >= 300:  # redirects were followed by the fetcher; a leftover 3xx: no rules
        return Robots(None, False, now + ROBOTS_TTL)
    return Robots(Protego.parse(text), False, now + ROBOTS_TTL)
