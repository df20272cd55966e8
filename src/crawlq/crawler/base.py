"""The crawler's state and the steps its parts share: options, scope, counters, event
hooks, stopping, answering a lease (after its output record is durable), and writing
output (:class:`CrawlerBase`, extended by :class:`~crawlq.crawler.visits.PageVisits`
and :class:`~crawlq.crawler.core.Crawler`)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import urlsplit

from ..errors import CrawlqError, StoreError
from ..frontier import Frontier
from ..models import Lease, Outcome, Request
from . import robots as robots_mod
from .commit import Acks
from .config import CrawlConfig, Summary
from .discover import Links
from .fetch import Fetched
from .output import Output
from .parsing import Parsers
from .scope import Scope

log = logging.getLogger("crawlq.crawl")

EVENTS = ("start", "round_start", "page", "error", "round_end", "shutdown")


class CrawlerBase:
    """The crawler's state and shared steps (the crawler is
    :class:`crawlq.crawler.core.Crawler`)."""

    def __init__(self, config: CrawlConfig,
                 events: Mapping[str, Callable[..., Any]] | None = None) -> None:
        unknown = set(events or {}) - set(EVENTS)
        if unknown:
            raise ValueError(f"unknown event(s) {sorted(unknown)}; known: {EVENTS}")
        self.config = config
        self.events = dict(events or {})
        domains = config.allow_domains or [_host(s) for s in config.seeds]
        self.scope = Scope(domains, config.include, config.exclude, config.max_depth,
                           priority=config.priority_rules, target=config.target)
        self.summary = Summary()
        self._robots = robots_mod.RobotsCache(config.user_agent, self.summary.errors,
                                              self._archive, config.robots_error_window)
        self._stop = False
        self._fatal: CrawlqError | None = None
        self._acks: Acks | None = None
        self._out: Output | None = None
        self._parsers = Parsers(config.parse_timeout, max_bytes=config.max_bytes)
        self.frontier: Frontier | None = None
        """The frontier while :meth:`run` runs (for progress displays)."""
        self.links = Links(self.scope, self.summary, once_per_round=bool(config.revisit_after))

    def stop(self) -> None:
        """Stop soon (Ctrl-C and SIGTERM do this): fetches in flight get
        :attr:`STOP_GRACE` seconds to finish; the others are put back, unfailed, for the
        next run. Everything fetched is written and acknowledged before :meth:`run`
        returns."""
        if not self._stop:
            self.summary.interrupted = True
        self._stop = True

    STOP_GRACE = 2.0

    def _emit(self, name: str, *args: Any) -> None:
        fn = self.events.get(name)
        if fn is not None:
            try:
                fn(*args)
            except Exception:  # a hook must never kill the crawl
                log.exception("the %r event hook failed", name)

    def _fail(self, exc: CrawlqError) -> None:
        """The frontier (e.g. Redis gone past its retry deadline) or the output (a full
        disk) failed for good: stop at once. Nothing is lost: unacknowledged leases
        return after ``lease_ttl``."""
        if self._fatal is None:
            if isinstance(exc, StoreError):
                log.error("the frontier failed, stopping the crawl: %s", exc)
            self._fatal = exc
        self._stop = True
        held = self._acks.forget() if self._acks is not None else []
        if held and self.frontier is not None and not isinstance(exc, StoreError):
            self._put_back(self.frontier, held)  # not durable: fetched again next run

    def _put_back(self, frontier: Frontier, leases: list[Lease]) -> None:
        """Leases not answered, back to their queues unfailed, for the next run (rather
        than after their ``lease_ttl``)."""
        log.info("%d page(s) in flight put back for the next run", len(leases))
        try:
            frontier.retry(leases)
        except StoreError as exc:
            self._fail(exc)

    def _ack(self, lease: Lease, outcome: Outcome = Outcome.DONE, *, wrote: bool = False,
             error: str | None = None, duration: float | None = None) -> None:
        """Answer a lease; after an output record (``wrote``), once it is durable."""
        if wrote and self._acks is not None:
            self._acks.add(lease, outcome, error=error, duration=duration)
        else:
            assert self.frontier is not None  # (set while run() runs)
            self.links.flush(self.frontier)  # (never done while its links are not queued)
            self.frontier.done(lease, outcome, error=error, duration=duration)

    def _archive(self, url: str, r: Fetched) -> None:
        """A robots.txt response: into a WARC output too (archives keep what decided
        what was fetched); a JSON Lines output lists pages only."""
        out = self._out
        if out is not None and out.archives_robots:
            out.write(Request(url), r, None, 0)

    def _write(self, out: Output | None, req: Request, r: Fetched, title: str | None,
               outlinks: int) -> bool:
        if out is None:
            return False
        out.write(req, r, title, outlinks)
        return True


def _host(url: str) -> str:
    """The host of a seed, "" for one that is no URL (reported when it is offered)."""
    try:
        return urlsplit(url).hostname or ""
    except ValueError:
        return ""
