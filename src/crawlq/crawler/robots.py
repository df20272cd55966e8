"""robots.txt: fetched once per origin while it holds, kept in the frontier's store for
every process of the crawl, decided as Google's matcher decides (see robotstxt)."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import urljoin, urlsplit

from .robotstxt import RobotsTxt, product_token

if TYPE_CHECKING:
    from ..frontier import Frontier
    from .fetch import Fetched, Fetcher

log = logging.getLogger("crawlq.crawl")

ROBOTS_TTL = 24 * 3600.0
ERROR_RETRY = 30.0  # robots.txt 5xx/unreachable: ask again this soon


@dataclass
class Robots:
    """The rules of one host and until when they hold."""

    parser: RobotsTxt | None
    """None: no rules (4xx: everything allowed)."""
    disallow_all: bool
    """5xx or unreachable: nothing may be fetched until ``expires`` (Google's spec)."""
    expires: float
    reason: str = ""
    """Why robots.txt could not be had (with ``disallow_all``): status or network error."""

    def allows(self, url: str) -> bool:
        """May the crawler (the agent the rules were parsed for) fetch ``url``?"""
        if self.disallow_all:
            return False
        return self.parser is None or self.parser.allows(url)

    @property
    def crawl_delay(self) -> float | None:
        """The Crawl-delay of the agent's group, if any."""
        return None if self.parser is None else self.parser.crawl_delay

    @property
    def sitemaps(self) -> list[str]:
        """The file's ``Sitemap:`` URLs."""
        return [] if self.parser is None else self.parser.sitemaps


def decode(body: bytes) -> str:
    """robots.txt text: UTF-8 (RFC 9309), a byte order mark dropped (else it would hide
    the first line's field name, and with it the first group), bad bytes replaced."""
    return body.decode("utf-8-sig", "replace")


def from_response(status: int | None, text: str, agent: str, now: float | None = None,
                  error: str = "") -> Robots:
    """Rules for ``agent`` (a user agent) from a robots.txt fetch: ``status`` None means
    unreachable (``error``)."""
    now = time.time() if now is None else now
    if status is None or status >= 500 or status == 429:
        reason = error or (f"HTTP {status}" if status else "unreachable")
        return Robots(None, True, now + ERROR_RETRY, reason)
    if status >= 400:
        return Robots(None, False, now + ROBOTS_TTL)
    if status >= 300:  # redirects were followed by the fetcher; a leftover 3xx: no rules
        return Robots(None, False, now + ROBOTS_TTL)
    return Robots(RobotsTxt.parse(text, product_token(agent)), False, now + ROBOTS_TTL)


def _freeze(fetched_at: float, status: int | None, text: str, error: str) -> bytes:
    """A robots.txt answer as kept in the store: enough to parse it again."""
    return json.dumps([fetched_at, status, error, text]).encode()


def _thaw(value: bytes, agent: str) -> Robots | None:
    """Rules from a kept answer; None for a value this code cannot read."""
    try:
        fetched_at, status, error, text = json.loads(value)
        return from_response(status, text, agent, float(fetched_at), error)
    except (ValueError, TypeError):
        return None


def origin(url: str) -> str:
    """``scheme://host[:port]`` of ``url``: whose robots.txt applies to it."""
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"


class RobotsCache:
    """The rules of each origin for ``agent``, fetched once while they hold (one fetch
    at a time per origin); fetch failures are counted in ``errors``; each response (redirects
    included) is handed to ``on_response`` (to be archived)."""

    def __init__(self, agent: str, errors: Counter[str],
                 on_response: Callable[[str, Fetched], None] | None = None) -> None:
        self.agent = agent
        self.errors = errors
        self.on_response = on_response
        self._rules: dict[str, Robots] = {}
        self._locks: dict[str, asyncio.Lock] = {}

    async def rules(self, fetcher: Fetcher, url: str, frontier: Frontier | None = None
                    ) -> tuple[Robots, bool]:
        """The rules for ``url``, and whether they were just fetched. With a
        ``frontier``, rules another process (or an earlier run) fetched are taken from
        its store while they hold, and rules fetched here are kept there. Raises
        :class:`~crawlq.crawler.fetch.Blocked` when the host may not be fetched."""
        key = origin(url)
        async with self._locks.setdefault(key, asyncio.Lock()):
            rules = self._rules.get(key)
            if rules is not None and rules.expires > time.time():
                return rules, False
            name = "robots:" + key
            kept = frontier.get_value(name) if frontier is not None else None
            rules = _thaw(kept, self.agent) if kept is not None else None
            if rules is not None and rules.expires > time.time():
                self._rules[key] = rules
                return rules, False
            now = time.time()
            status, text, error = await self._fetch(fetcher, key)
            rules = self._rules[key] = from_response(status, text, self.agent, now, error)
            if frontier is not None:
                frontier.put_value(name, _freeze(now, status, text, error),
                                   ttl=max(rules.expires - now, 1.0))
            return rules, True

    async def _fetch(self, fetcher: Fetcher, key: str) -> tuple[int | None, str, str]:
        """(status, text, error) of the origin's robots.txt; status None: unreachable."""
        from .fetch import FetchError

        url = key + "/robots.txt"
        for _ in range(5):  # follow a few redirects, each checked like any fetch
            try:
                r = await fetcher.get(url)
            except FetchError as exc:  # (Blocked goes up: the page itself is blocked)
                log.warning("robots.txt of %s unreachable: %s", key, exc)
                self.errors[f"robots.txt {exc.kind}"] += 1
                return None, "", str(exc)
            if self.on_response is not None:
                self.on_response(url, r)
            if r.status in (301, 302, 303, 307, 308) and r.location:
                url = urljoin(url, r.location)
                continue
            return r.status, decode(r.body), ""
        return None, "", "too many redirects"
