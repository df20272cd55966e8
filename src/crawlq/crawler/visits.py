"""One leased page, start to end: robots.txt, the fetch, what its status means (a
backoff, a failure), its links or sitemap or redirect, its output record and its
answer (:class:`PageVisits`)."""

from __future__ import annotations

from urllib.parse import urljoin

from ..errors import StoreError
from ..frontier import Frontier
from ..models import Lease, Outcome
from . import robots as robots_mod
from . import seeds
from .base import CrawlerBase, log
from .config import BACKOFF_STATUSES, backoff
from .fetch import Blocked, Fetcher, FetchError
from .output import Output
from .parsing import ParseFailed, ParseMemory, ParseTimeout


class PageVisits(CrawlerBase):
    """Visiting one leased page (see :class:`crawlq.crawler.core.Crawler`)."""

    async def _robots_for(self, fetcher: Fetcher, frontier: Frontier, url: str,
                          queue: str) -> robots_mod.Robots:
        rules, fresh = await self._robots.rules(fetcher, url, frontier)
        if fresh:  # just fetched: its Crawl-delay and sitemaps take effect
            if rules.parser is not None and rules.parser.ignored_delays:
                log.warning("%s: robots.txt Crawl-delay %s ignored (no delay)",
                            robots_mod.origin(url), ", ".join(rules.parser.ignored_delays))
            delay = self._crawl_delay(rules.crawl_delay, url)
            if delay is not None:
                frontier.configure_queue(queue, min_delay=delay)
            if self.config.sitemaps and rules.sitemaps:
                self.links.add_sitemaps(frontier, rules.sitemaps,
                                        robots_mod.origin(url) + "/robots.txt")
        return rules

    def _crawl_delay(self, asked: float | None, url: str) -> float | None:
        """The host's minimum delay from its robots.txt ``Crawl-delay``, kept within the
        user's ``[min_delay, max_delay]``: a site may ask for more rest than
        ``--min-delay`` (never less), and never park itself beyond ``--max-delay``.
        None when there is nothing to set (no Crawl-delay, or one at or under
        ``--min-delay``). Non-finite and negative values never get here: the robots.txt
        reader ignores them."""
        c = self.config
        if asked is None or asked <= c.min_delay:
            return None
        if asked > c.max_delay:
            log.warning("%s: robots.txt asks Crawl-delay %g s; kept to --max-delay %g s",
                        robots_mod.origin(url), asked, c.max_delay)
            self.summary.crawl_delays_capped += 1
            return c.max_delay
        return asked

    async def _visit(self, frontier: Frontier, fetcher: Fetcher, lease: Lease,
                     out: Output | None) -> None:
        try:
            await self._fetch_one(frontier, fetcher, lease, out)
        except StoreError as exc:
            self._fail(exc)
        except Exception as exc:  # a bug or a broken response must not stop the crawl
            log.exception("crawling %s failed", lease.request.url)
            self.summary.errors[type(exc).__name__] += 1
            self._emit("error", lease.request, exc)
            try:
                frontier.done(lease, Outcome.FAILED, error=f"{type(exc).__name__}: {exc}")
            except StoreError as store_exc:
                self._fail(store_exc)

    async def _fetch_one(self, frontier: Frontier, fetcher: Fetcher, lease: Lease,
                         out: Output | None) -> None:
        req = lease.request
        s = self.summary
        seed = req.depth == 0 and req.referrer is None
        try:
            if self.config.obey_robots:
                rules = await self._robots_for(fetcher, frontier, req.url, lease.queue)
                if rules.disallow_all and rules.reachable:
                    # robots.txt answered 5xx or 429: nothing may be fetched for now (RFC
                    # 9309). The host is backed off in the store until robots.txt is
                    # asked again, and the URL waits there: no failure is counted.
                    s.robots_waits += 1
                    frontier.block(lease.queue, until=rules.expires)
                    self._ack(lease, Outcome.RETRY)
                    return
                if rules.disallow_all:
                    # robots.txt unreachable (refused, timed out, a certificate that does
                    # not verify): the page would fail the same way. A failure, retried
                    # with backoff, then dead with the reason: a host nobody can reach
                    # does not keep the crawl waiting.
                    why = f"robots.txt unavailable ({rules.reason})"
                    self._ack(lease, Outcome.FAILED, error=why)
                    if seed:
                        seeds.refuse(self.summary, req.url, why)
                    return
                if not rules.allows(req.url):
                    s.robots_denied += 1
                    why = "robots.txt disallows it (--ignore-robots to crawl anyway)"
                    frontier.count_rejected("robots-denied")  # (in crawlq stats)
                    self._ack(lease)
                    if seed:
                        seeds.refuse(self.summary, req.url, why)
                    return
            r = await fetcher.get(req.url)
            if self._fatal is not None:  # the frontier is gone: the lease will come back
                return
        except Blocked as exc:
            s.blocked[exc.reason] += 1
            self._emit("error", req, exc)
            if exc.reason == "unresolvable":  # DNS may be back soon: retried, then dead
                self._ack(lease, Outcome.FAILED, error=str(exc))
            else:  # not fetched with these options: given up now (a rerun with the
                s.given_up[exc.reason] += 1  # option revives a seed, see _revive_seeds)
                self._ack(lease, Outcome.DEAD, error=str(exc))
            if seed:
                seeds.refuse(self.summary, req.url, str(exc))
            return
        except FetchError as exc:
            kind = exc.kind
            s.errors[kind] += 1
            log.debug("- %s failed: %s", req.url, exc)
            self._emit("error", req, exc)
            self._ack(lease, Outcome.FAILED, error=f"{kind}: {exc}")
            if seed:
                seeds.refuse(self.summary, req.url, str(exc))
            return
        s.fetched += 1
        s.statuses[r.status] += 1
        # the crawl log (as Heritrix's crawl.log): one line per fetch, at DEBUG
        log.debug("%d %s %d bytes %.3fs depth %d via %s", r.status, req.url, len(r.raw),
                  r.elapsed, req.depth, req.referrer or "-")
        if seed:
            s.seeds_refused.pop(req.url, None)
        if r.status in BACKOFF_STATUSES:
            # "Come back later": the host is left alone (in the store, so every process
            # sharing it obeys), and the URL counts a failure: dead after its retries.
            wait = backoff(r, req.retries, self.config.retry_backoff, self.config.max_backoff)
            frontier.block(lease.queue, seconds=wait)
            wrote = self._write(out, req, r, None, 0)
            self._ack(lease, Outcome.FAILED, wrote=wrote, duration=r.elapsed,
                      error=f"HTTP {r.status} (host backed off {wait:.0f}s)")
            return
        if r.status >= 500:
            wrote = self._write(out, req, r, None, 0)
            self._ack(lease, Outcome.FAILED, wrote=wrote, error=f"HTTP {r.status}",
                      duration=r.elapsed)
            return
        links: list[str] = []
        title = None
        if req.meta.get("sitemap") and r.status < 300:
            self.links.sitemap(frontier, req, r, self.config.max_bytes)
        elif r.location and 300 <= r.status < 400:
            hops = int(req.meta.get("redirects", 0)) + 1
            if hops > self.config.max_redirects:
                s.out_of_scope["too-many-redirects"] += 1
            else:
                self.links.follow(frontier, [urljoin(req.url, r.location)], req.depth, req.url,
                             {"redirects": hops})
        elif r.content_type in ("text/html", "application/xhtml+xml") and r.status < 300:
            try:
                page = await self._parsers.extract(r.body, r.charset, req.url)
                links, title = page.links, page.title
            except (ParseTimeout, ParseFailed) as exc:  # saved, its links not followed
                kind = ("parse-timeout" if isinstance(exc, ParseTimeout) else
                        "parse-memory" if isinstance(exc, ParseMemory) else "parse-failed")
                s.errors[kind] += 1
                log.warning("%s: %s (saved; its links are not followed)", req.url, exc)
        if links:
            self.links.follow(frontier, links, req.depth + 1, req.url)
        wrote = False
        if self.scope.is_target(req.url):
            wrote = self._write(out, req, r, title, len(links))
        else:
            s.not_saved += 1
        self._ack(lease, wrote=wrote, duration=r.elapsed)
        self._emit("page", req, r)
