"""Where a crawl goes next: the links and sitemap entries a page yields, through the
crawl's scope, to the frontier (which drops duplicates and says what it rejected)."""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Sequence
from typing import Any
from urllib.parse import urlsplit

from ..aio import AsyncFrontier
from ..models import Lease, Rejection, Request
from . import sitemaps
from .config import Summary
from .fetch import Fetched
from .scope import Scope

log = logging.getLogger("crawlq.crawl")

OFFERED_KEPT = 100_000
"""How many URLs the frontier took that :class:`Links` remembers, so as not to offer
them again (then it forgets them all and starts again: ~18 MB at most, URLs of ~85
characters)."""


class Links:
    """Queues what pages lead to, counting in ``summary`` what was left out and why.

    Links in scope wait in a buffer until :meth:`flush` offers them all to the frontier
    in one call (one store transaction for many pages, not one per page). The crawler
    flushes before it acknowledges a page (so a page is never done while its links are
    not in the frontier) and before it asks the frontier for work. Pages go on finding
    links while a call waits for the store: those wait for the next one.

    A URL the frontier took (added, or known already) is not offered again: the links
    of a site's pages are mostly the same few, and the frontier would only find each
    again a duplicate, after canonicalizing it and looking it up in the store. Up to
    :data:`OFFERED_KEPT` such URLs are remembered, as written (then all are forgotten,
    and remembering starts again); a URL the frontier rejected (a budget, a full queue)
    is offered again when found again. That is per round (:meth:`new_round` starts
    one): with revisits a URL the frontier took is not offered again in the round,
    however soon its revisit interval passes. Scope is judged each time a link is met,
    so what is left out is counted each time, as before.
    """

    def __init__(self, scope: Scope, summary: Summary) -> None:
        self.scope = scope
        self.summary = summary
        self._pending: list[Request] = []
        self._sitemaps: Counter[str] = Counter()  # sitemap files queued, per host
        self._sitemap_urls: Counter[str] = Counter()  # page URLs they listed, per host
        self._offered: set[str] = set()  # the URLs the frontier took (this round)

    def new_round(self) -> None:
        """Forget which URLs the frontier took (a round of revisits begins)."""
        self._offered.clear()

    def sitemap(self, frontier: AsyncFrontier, req: Request, r: Fetched, max_bytes: int) -> None:
        """Queue what a fetched sitemap (or sitemap index) lists, within the bounds of
        :mod:`.sitemaps` (nesting, sitemaps and URLs per host), counting what is left
        out in ``out_of_scope``."""
        try:
            found = sitemaps.parse(r.body, max_bytes)
        except sitemaps.SitemapError as exc:
            log.warning("sitemap %s: %s", req.url, exc)
            self.summary.errors["bad-sitemap"] += 1
            return
        if found.kind == "sitemapindex":
            level = int(req.meta.get("sitemap", 1))
            if level >= sitemaps.MAX_NESTING:
                log.warning("sitemap index %s at level %d: the %d sitemaps it names are "
                            "not followed (nesting over %d)", req.url, level,
                            len(found.locs), sitemaps.MAX_NESTING)
                self.summary.out_of_scope["sitemap-too-deep"] += len(found.locs)
                return
            self.add_sitemaps(frontier, found.locs, req.url, level + 1)
        else:
            locs = self._within(self._sitemap_urls, found.locs,
                                sitemaps.MAX_URLS_PER_HOST, "sitemap-urls-cap")
            self.summary.sitemap_urls += len(locs)
            self.follow(frontier, locs, req.depth + 1, req.url)

    def add_sitemaps(self, frontier: AsyncFrontier, urls: list[str], referrer: str,
                     level: int = 1) -> None:
        """Queue sitemaps (from robots.txt: ``level`` 1, or an index: its level + 1)
        that are in scope, at most :data:`~.sitemaps.MAX_SITEMAPS_PER_HOST` per host;
        at depth 0, as a sitemap is not a page: no depth limit."""
        urls = self._within(self._sitemaps, urls, sitemaps.MAX_SITEMAPS_PER_HOST,
                            "sitemaps-cap")
        self.follow(frontier, urls, 0, referrer, {"sitemap": level})

    def _within(self, counts: Counter[str], urls: list[str], cap: int,
                reason: str) -> list[str]:
        """The ``urls`` that fit under ``cap`` per host (``counts`` so far, updated);
        the others are counted as left out for ``reason``."""
        kept = []
        for url in urls:
            try:
                host = urlsplit(url).hostname or ""
            except ValueError:  # (the frontier says why when it is offered)
                host = ""
            if counts[host] >= cap:
                self.summary.out_of_scope[reason] += 1
                continue
            counts[host] += 1
            kept.append(url)
        return kept

    def follow(self, frontier: AsyncFrontier, links: list[str], depth: int, referrer: str,
               meta: dict[str, Any] | None = None) -> None:
        """Queue the ``links`` in scope, at ``depth`` (offered at the next :meth:`flush`)."""
        new = []
        offered = self._offered
        scope = self.scope
        for url in links:
            why = scope.why_not(url, depth)  # (first: counted each time met)
            if why is not None:
                self.summary.out_of_scope[why] += 1
                continue
            if url in offered:
                continue
            new.append(Request(url, depth=depth, referrer=referrer, meta=meta or {},
                               priority=scope.priority(url)))
        self._pending += new

    def take(self) -> list[Request]:
        """The links waiting in the buffer, taken out (for a commit of answers: see
        :class:`~crawlq.crawler.commit.Acks`)."""
        new, self._pending = self._pending, []
        return new

    def give_back(self, links: list[Request]) -> None:
        """Links taken that did not reach the frontier: back, ahead of newer ones."""
        self._pending[:0] = links

    async def send(self, frontier: AsyncFrontier, links: list[Request],
                   done: Sequence[Lease] = (), durations: Sequence[float | None] = (),
                   n: int = 0) -> list[Lease]:
        """Offer ``links`` (taken with :meth:`take`); with ``done`` (leases of pages
        answered DONE, their fetch ``durations``) or ``n`` (leases wanted), answer
        those and lease up to ``n`` in the same store call
        (:meth:`~crawlq.Frontier.exchange`: one round trip to a far store); returns the
        new leases. When the frontier fails (a full disk, Redis gone), the links go back
        to the buffer and the error goes up: the pages that found them are not
        acknowledged until links and answers reach the store together."""
        if not links and not done and n <= 0:
            return []
        try:
            if done or n > 0:
                ex = await frontier.exchange(links, done, n, duration=list(durations))
                result, leases = ex.added, ex.leases
            else:
                result, leases = await frontier.add(links), []
        except BaseException:
            self.give_back(links)  # (nothing was taken)
            raise
        self.summary.links_added += result.added
        for rej in result.rejected:
            self.summary.out_of_scope[rej.reason] += 1
        self._took(links, result.rejected)
        return leases

    def _took(self, links: list[Request], rejected: Sequence[Rejection]) -> None:
        """Remember the ``links`` the frontier took (all but the ``rejected``)."""
        offered = self._offered
        if len(offered) + len(links) > OFFERED_KEPT:  # (a bound on memory: start again)
            offered.clear()
        out = {r.index for r in rejected}
        offered.update(req.url for i, req in enumerate(links) if i not in out)

    async def flush(self, frontier: AsyncFrontier, n: int = 0) -> list[Lease]:
        """Offer the links waiting in the buffer, and lease up to ``n`` in the same
        call; returns the new leases. Only when no page is being answered (a page's
        links go in its own answer's call: see :class:`~crawlq.crawler.commit.Acks`)."""
        return await self.send(frontier, self.take(), n=n)
