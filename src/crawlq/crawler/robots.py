"""robots.txt: fetched once per origin while it holds, kept in the frontier's store for
every process of the crawl, decided as Google's matcher decides (see robotstxt)."""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from can_ada import parse as _parse

from .links import resolve
from .robotstxt import RobotsTxt, product_token

if TYPE_CHECKING:
    from ..aio import AsyncFrontier
    from .fetch import Fetched, Fetcher

log = logging.getLogger("crawlq.crawl")

ROBOTS_TTL = 24 * 3600.0
ERROR_RETRY = 30.0
"""robots.txt 5xx, 429 or unreachable: asked again this soon, the wait doubling with each
error in a row, up to :data:`ERROR_MAX_WAIT`."""
ERROR_MAX_WAIT = 3600.0
MAX_BYTES = 500 * 1024
"""robots.txt is read up to this size, as Google reads it (RFC 9309, 2.5: a limit of at
least 500 KiB); what follows, and the line the limit cuts, is ignored."""
MAX_REDIRECTS = 5
"""Redirects of a robots.txt followed (RFC 9309, 2.3.1.2: at least five); past them the
file is unavailable."""
UNAVAILABLE = 0
"""The status kept for a robots.txt that could not be had through no fault of the host's
network (too many redirects, a redirect out of the crawl's domains, to another scheme or
to a refused address): unavailable, as a 4xx (RFC 9309, 2.3.1.3): everything allowed."""
ERROR_WINDOW = 30 * 86400.0
"""How long robots.txt may err before it is taken as absent (RFC 9309, 2.3.1.4: "a
reasonably long period of time (for example, 30 days)"); the ``robots_error_window``
crawl option."""


@dataclass
class Robots:
    """The rules of one host and until when they hold."""

    parser: RobotsTxt | None
    """None: no rules (4xx: everything allowed)."""
    disallow_all: bool
    """5xx, 429 or unreachable: nothing may be fetched until ``expires`` (RFC 9309)."""
    expires: float
    reason: str = ""
    """Why robots.txt could not be had (status or network error), while it errs."""
    erring_since: float | None = None
    """When the run of errors began (None: the last answer was no error)."""
    errors: int = 0
    """Errors in a row."""
    reachable: bool = True
    """False when the last error was the network's (refused, timed out, a certificate
    that does not verify): the host's pages would fail the same way."""

    def allows(self, url: str) -> bool:
        """May the crawler (the agent the rules were parsed for) fetch ``url``?"""
        if self.disallow_all:
            return False
        return self.parser is None or self.parser.allows(url)

    async def permits(self, url: str) -> bool:
        """:meth:`allows`, decided on a worker thread when the file has many rules (a
        decision may then try thousands of patterns: never on the event loop)."""
        if self.parser is not None and self.parser.many and not self.disallow_all:
            return await asyncio.to_thread(self.parser.allows, url)
        return self.allows(url)

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


def _within_limit(text: str) -> str:
    """``text`` up to :data:`MAX_BYTES` of UTF-8, less the line the limit cuts (a cut
    rule may say something else): a file fetched up to the limit, or kept whole by an
    older crawlq."""
    if len(text) * 4 < MAX_BYTES:  # (a character is at most 4 bytes)
        return text
    raw = text.encode()
    if len(raw) < MAX_BYTES:
        return text
    raw = raw[:MAX_BYTES]
    return raw[:raw.rfind(b"\n") + 1].decode("utf-8", "replace")


def from_response(status: int | None, text: str, agent: str, now: float | None = None,
                  error: str = "", *, erring_since: float | None = None, errors: int = 0,
                  window: float = ERROR_WINDOW) -> Robots:
    """Rules for ``agent`` (a user agent) from a robots.txt fetch: ``status`` None means
    unreachable (``error``).

    An error (5xx, 429, unreachable) disallows everything for now (RFC 9309), until a
    retry ``ERROR_RETRY`` seconds later, doubled with each error in a row (``errors``
    before this one, the run begun at ``erring_since``), at most ``ERROR_MAX_WAIT``.
    Once the errors have lasted ``window`` seconds the file is taken as absent
    (everything allowed) while it keeps erring."""
    now = time.time() if now is None else now
    if status is None or status >= 500 or status == 429:
        reason = error or (f"HTTP {status}" if status else "unreachable")
        since = now if erring_since is None else erring_since
        wait = min(ERROR_RETRY * 2.0 ** min(errors, 32), ERROR_MAX_WAIT)
        absent = now - since >= window
        return Robots(None, not absent, now + wait, reason, since, errors + 1,
                      reachable=status is not None)
    if status >= 400 or status == UNAVAILABLE:
        return Robots(None, False, now + ROBOTS_TTL, error)
    if status >= 300:  # redirects were followed by the fetcher; a leftover 3xx: no rules
        return Robots(None, False, now + ROBOTS_TTL)
    return Robots(RobotsTxt.parse(_within_limit(text), product_token(agent)), False,
                  now + ROBOTS_TTL)


def _freeze(fetched_at: float, status: int | None, text: str, error: str,
            rules: Robots) -> bytes:
    """A robots.txt answer as kept in the store: enough to parse it again."""
    return json.dumps([fetched_at, status, error, text, rules.erring_since,
                       rules.errors]).encode()


def _thaw(value: bytes, agent: str, window: float) -> Robots | None:
    """Rules from a kept answer; None for a value this code cannot read."""
    try:
        fetched_at, status, error, text, *run = json.loads(value)
        since, errors = run if run else (None, 0)
        # (the run of errors up to and including this answer)
        return from_response(status, text, agent, float(fetched_at), error,
                             erring_since=since, errors=max(int(errors) - 1, 0),
                             window=window)
    except (ValueError, TypeError):
        return None


def origin(url: str) -> str:
    """``scheme://host[:port]`` of ``url`` as the fetch reads it (WHATWG: lowercased,
    IDNA, no user info, no default port): whose robots.txt applies to it. Raises
    :class:`~crawlq.crawler.fetch.Blocked` for a string that is no such URL."""
    try:
        return str(_parse(url).origin)
    except (ValueError, TypeError):
        from .fetch import Blocked

        raise Blocked.invalid(url) from None


class RobotsCache:
    """The rules of each origin for ``agent``, fetched once while they hold (one fetch
    at a time per origin); fetch failures are counted in ``errors``; each response (redirects
    included) is handed to ``on_response`` (to be archived). A redirect is followed only
    to a host ``in_scope`` accepts (the crawl's domains), like any fetch of the crawl.

    A file is parsed on a worker thread, never on the event loop: one of 500 KiB of
    wildcard rules takes a tenth of a second to index."""

    def __init__(self, agent: str, errors: Counter[str],
                 on_response: Callable[[str, Fetched], None] | None = None,
                 window: float = ERROR_WINDOW,
                 in_scope: Callable[[str], bool] | None = None) -> None:
        self.agent = agent
        self.in_scope = in_scope
        self.window = window
        self.errors = errors
        self.on_response = on_response
        self._rules: dict[str, Robots] = {}
        self._locks: dict[str, asyncio.Lock] = {}

    async def rules(self, fetcher: Fetcher, url: str, frontier: AsyncFrontier | None = None
                    ) -> tuple[Robots, bool]:
        """The rules for ``url``, and whether they were just fetched. With a
        ``frontier``, rules another process (or an earlier run) fetched are taken from
        its store while they hold, and rules fetched here are kept there. Raises
        :class:`~crawlq.crawler.fetch.Blocked` when the host may not be fetched."""
        key = origin(url)
        rules = self._rules.get(key)
        if rules is not None and rules.expires > time.time():
            return rules, False  # (the usual case: no lock to take)
        async with self._locks.setdefault(key, asyncio.Lock()):
            rules = self._rules.get(key)
            if rules is not None and rules.expires > time.time():
                return rules, False
            name = "robots:" + key
            kept = await frontier.get_value(name) if frontier is not None else None
            last = (await asyncio.to_thread(_thaw, kept, self.agent, self.window)
                    if kept is not None else rules)
            if last is not None and last.expires > time.time():
                self._rules[key] = last
                return last, False
            now = time.time()
            status, text, error = await self._fetch(fetcher, key)
            rules = self._rules[key] = await asyncio.to_thread(
                functools.partial(  # (a run of errors goes on)
                    from_response, status, text, self.agent, now, error,
                    erring_since=last.erring_since if last else None,
                    errors=last.errors if last else 0, window=self.window))
            if rules.erring_since is not None:
                self.errors["robots.txt unavailable"] += 1
                log.warning("robots.txt of %s unavailable (%s, %d in a row): %s",
                            key, rules.reason, rules.errors,
                            "its URLs wait, the host backed off until it answers"
                            if rules.disallow_all else
                            f"erring for over {self.window:g}s, taken as absent")
            if frontier is not None:
                # (kept past its expiry while erring, until the window has passed: the
                # next process, or a run days later, continues the run of errors)
                keep = (max(ROBOTS_TTL, rules.erring_since + self.window + ERROR_MAX_WAIT
                            - now) if rules.erring_since is not None
                        else rules.expires - now)
                await frontier.put_value(name, _freeze(now, status, text, error, rules),
                                   ttl=max(keep, 1.0))
            return rules, True

    async def _fetch(self, fetcher: Fetcher, key: str) -> tuple[int | None, str, str]:
        """(status, text, error) of the origin's robots.txt; status None: unreachable,
        :data:`UNAVAILABLE`: could not be had (``error`` says why)."""
        from .fetch import Blocked, FetchError

        url = key + "/robots.txt"
        for hop in range(MAX_REDIRECTS + 1):
            if hop:  # a redirect's target: judged like any fetch of the crawl
                why = self._refusal(url)
                if why is not None:
                    return self._unavailable(key, f"redirected {why}")
            try:
                # (its connection closed after it: the host's first page follows at
                # once, with no politeness delay in which stray bytes would show)
                r = await fetcher.get(url, keep_alive=False, max_bytes=MAX_BYTES)
            except Blocked as exc:
                if not hop:  # (the host itself is refused: so are its pages)
                    raise
                return self._unavailable(key, f"redirected to a refused address: {exc}")
            except FetchError as exc:
                log.warning("robots.txt of %s unreachable: %s", key, exc)
                self.errors[f"robots.txt {exc.kind}"] += 1
                return None, "", str(exc)
            if self.on_response is not None:
                self.on_response(url, r)
            if r.status in (301, 302, 303, 307, 308) and r.location:
                target = resolve(url, r.location)  # (WHATWG, as the fetch reads it)
                if target is None:
                    return self._unavailable(key, f"redirected to no URL ({r.location!r})")
                url = target
                continue
            if r.truncated:
                log.info("robots.txt of %s is over %d bytes: the rest is ignored", key,
                         MAX_BYTES)
            return r.status, decode(r.body), ""
        return self._unavailable(key, f"more than {MAX_REDIRECTS} redirects")

    def _refusal(self, url: str) -> str | None:
        """Why a robots.txt redirect's target is not fetched, None if it may be."""
        if not url.startswith(("http://", "https://")):
            return f"to another scheme ({url[:40]!r})"
        if self.in_scope is not None and not self.in_scope(url):
            return f"out of the crawl's domains ({url[:80]})"
        return None

    def _unavailable(self, key: str, why: str) -> tuple[int, str, str]:
        log.warning("robots.txt of %s unavailable (%s): everything allowed (RFC 9309)",
                    key, why)
        self.errors["robots.txt redirect not followed"] += 1
        return UNAVAILABLE, "", why
