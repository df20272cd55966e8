"""The crawl loop: leases from the frontier, fetches, follows links, reports done.

All politeness comes from the frontier (per-host concurrency and delays fed with real
fetch durations, Crawl-delay as a per-queue minimum, Retry-After as a block); the loop
only keeps at most ``concurrency`` fetches in flight and sleeps until
``Frontier.next_ready_at()`` when nothing is ready.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urljoin, urlsplit

from ..errors import StoreError
from ..frontier import Frontier
from ..models import Lease, Outcome, Request
from . import robots as robots_mod
from . import sitemaps
from .fetch import Blocked, Fetched, Fetcher, FetchError
from .links import decode_html, extract
from .output import Output, open_output
from .scope import Scope

log = logging.getLogger("crawlq.crawl")

DEFAULT_AGENT = "crawlq/0.1 (+https://pypi.org/project/crawlq/)"
EVENTS = ("start", "round_start", "page", "error", "round_end", "shutdown")


@dataclass
class CrawlConfig:
    """Everything a crawl needs; the CLI fills it from its options."""

    seeds: list[str]
    store: str = "memory://"
    allow_domains: list[str] = field(default_factory=list)
    """Empty: the seeds' hosts (and their subdomains)."""
    include: list[str] = field(default_factory=list)
    exclude: list[str] = field(default_factory=list)
    priority_rules: list[tuple[str, int]] = field(default_factory=list)
    """(regex, n): URLs matching regex get n added to their priority (higher: sooner)."""
    target: list[str] = field(default_factory=list)
    """Regexes of the pages to save (written to the output); others are only
    followed. Empty: every page is saved."""
    max_redirects: int = 10
    """Redirect hops followed from one URL before giving up."""
    max_pages: int | None = None
    max_depth: int | None = None
    max_per_host: int = 0
    concurrency: int = 16
    per_host: int = 1
    min_delay: float = 1.0
    max_delay: float = 30.0
    delay_factor: float = 5.0
    user_agent: str = DEFAULT_AGENT
    obey_robots: bool = True
    allow_private: bool = False
    allow_addresses: tuple[str, ...] = ()
    """Special-purpose addresses or CIDR blocks that may be fetched all the same."""
    resolve: dict[str, str] = field(default_factory=dict)
    ca_file: str | None = None
    """A PEM file of CA certificates trusted for HTTPS, besides the system's."""
    timeout: float = 20.0
    max_bytes: int = 5_000_000
    max_retries: int = 2
    lease_ttl: float | None = None
    """How long a fetch may take before its URL is handed out again (after a crash);
    default ``3 * timeout + 60``."""
    retry_backoff: float = 5.0
    """Seconds before the first retry of a failed fetch; doubles with each failure."""
    out: str | None = None
    out_format: str | None = None
    """``jsonl`` or ``warc``; default: from the file name (.warc, .warc.gz)."""
    rounds: int = 1
    """Crawl rounds (Spiderman's schedule): each re-offers the seeds."""
    duration: float | None = None
    """Seconds a round may last; None: until the frontier is empty."""
    round_delay: float = 0.0
    """Seconds to wait between rounds."""
    revisit_after: float | None = None
    """Seconds after which a fetched URL may be fetched again (in a later round)."""
    sitemaps: bool = False
    """Also fetch the sitemaps robots.txt names and queue the pages they list."""


@dataclass
class Summary:
    """What a crawl did."""

    fetched: int = 0
    statuses: Counter[int] = field(default_factory=Counter)
    errors: Counter[str] = field(default_factory=Counter)
    robots_denied: int = 0
    blocked: Counter[str] = field(default_factory=Counter)
    out_of_scope: Counter[str] = field(default_factory=Counter)
    links_added: int = 0
    sitemap_urls: int = 0
    not_saved: int = 0
    """Pages fetched and followed but not saved (no target rule matched)."""
    seconds: float = 0.0
    finished: bool = False
    rounds: int = 0

    def lines(self) -> list[str]:
        rate = self.fetched / self.seconds if self.seconds else 0.0
        rounds = f" over {self.rounds} rounds" if self.rounds > 1 else ""
        out = [f"fetched {self.fetched} pages{rounds} in {self.seconds:.1f}s ({rate:.1f}/s); "
               f"{'frontier empty' if self.finished else 'stopped at a limit'}",
               "statuses: " + (", ".join(f"{k}: {v}" for k, v in sorted(self.statuses.items()))
                               or "-"),
               f"new links queued: {self.links_added}; robots.txt denied: {self.robots_denied}"]
        if self.not_saved:
            out.append(f"pages followed but not saved (not a --target): {self.not_saved}")
        if self.sitemap_urls:
            out.append(f"URLs listed in sitemaps: {self.sitemap_urls}")
        if self.errors:
            out.append("errors: " + ", ".join(f"{k}: {v}" for k, v in self.errors.items()))
        if self.blocked:
            out.append("blocked: " + ", ".join(f"{k}: {v}" for k, v in self.blocked.items()))
        if self.out_of_scope:
            out.append("links out of scope: " + ", ".join(
                f"{k}: {v}" for k, v in sorted(self.out_of_scope.items())))
        return out


class Crawler:
    """A polite crawler on a :class:`~crawlq.Frontier`.

    ``events`` maps ``start``, ``round_start``, ``page``, ``error``, ``round_end`` and
    ``shutdown`` to callables; an exception in one is logged, never fatal.
    """

    def __init__(self, config: CrawlConfig,
                 events: Mapping[str, Callable[..., Any]] | None = None) -> None:
        unknown = set(events or {}) - set(EVENTS)
        if unknown:
            raise ValueError(f"unknown event(s) {sorted(unknown)}; known: {EVENTS}")
        self.config = config
        self.events = dict(events or {})
        domains = config.allow_domains or [urlsplit(s).hostname or "" for s in config.seeds]
        self.scope = Scope(domains, config.include, config.exclude, config.max_depth,
                           priority=config.priority_rules, target=config.target)
        self.summary = Summary()
        self._robots: dict[str, robots_mod.Robots] = {}
        self._robot_locks: dict[str, asyncio.Lock] = {}
        self._stop = False
        self._fatal: StoreError | None = None
        self.frontier: Frontier | None = None
        """The frontier while :meth:`run` runs (for progress displays)."""
        # With revisits, a URL may be fetched again once per round at most, however soon
        # its interval passes: the hashes of canonical URLs offered this round.
        self._this_round: set[int] = set()

    def stop(self) -> None:
        """Finish the fetches in flight, then return (Ctrl-C does this)."""
        self._stop = True

    def _emit(self, name: str, *args: Any) -> None:
        fn = self.events.get(name)
        if fn is not None:
            try:
                fn(*args)
            except Exception:  # a hook must never kill the crawl
                log.exception("the %r event hook failed", name)

    async def run(self) -> Summary:
        """Crawl until nothing in scope is left, a limit is reached or :meth:`stop`."""
        c = self.config
        started = time.monotonic()
        frontier = Frontier.open(
            c.store, concurrency=c.per_host, min_delay=c.min_delay, max_delay=c.max_delay,
            delay_factor=c.delay_factor, max_queue_urls=c.max_per_host,
            max_retries=c.max_retries, retry_backoff=c.retry_backoff,
            lease_ttl=c.lease_ttl or c.timeout * 3 + 60, revisit_after=c.revisit_after)
        self.frontier = frontier
        fetcher = Fetcher(user_agent=c.user_agent, timeout=c.timeout, max_bytes=c.max_bytes,
                          resolve=c.resolve, allow_private=c.allow_private,
                          allow_addresses=c.allow_addresses, connections=c.concurrency,
                          ca_file=c.ca_file)
        out = open_output(c.out, c.out_format) if c.out else None
        inflight: set[asyncio.Task[None]] = set()
        try:
            self._emit("start", self)
            for n in range(1, max(c.rounds, 1) + 1):
                self.summary.rounds = n
                self._this_round.clear()
                # Seeds again each round: with revisit_after they are accepted anew once
                # their interval has passed, and so are the pages they lead to.
                frontier.add([Request(s, priority=self.scope.priority(s)) for s in c.seeds])
                self._emit("round_start", n)
                deadline = time.monotonic() + c.duration if c.duration else None
                self.summary.finished = await self._round(frontier, fetcher, out, inflight,
                                                          deadline)
                if self._fatal is not None:
                    raise self._fatal
                self._emit("round_end", n, self.summary)
                if self._stop or n == c.rounds or self._limit_left(inflight) == 0:
                    break
                pause_until = time.monotonic() + c.round_delay
                while not self._stop and time.monotonic() < pause_until:
                    await asyncio.sleep(min(0.2, pause_until - time.monotonic()))
        finally:
            for t in inflight:
                t.cancel()
            await fetcher.close()
            if out is not None:
                out.close()
            self.frontier = None
            frontier.close()
            self.summary.seconds = time.monotonic() - started
            self._emit("shutdown", self.summary)
        return self.summary

    def _limit_left(self, inflight: set[asyncio.Task[None]]) -> int | None:
        if self.config.max_pages is None:
            return None
        return max(self.config.max_pages - self.summary.fetched - len(inflight), 0)

    async def _round(self, frontier: Frontier, fetcher: Fetcher, out: Output | None,
                     inflight: set[asyncio.Task[None]], deadline: float | None) -> bool:
        """Crawl until the frontier is empty (True), or a limit, the deadline or a stop."""
        c = self.config
        finished = False
        while not self._stop:
            if deadline is not None and time.monotonic() >= deadline:
                break
            limit_left = self._limit_left(inflight)
            free = c.concurrency - len(inflight)
            if limit_left is not None:
                free = min(free, limit_left)
            if free <= 0 and inflight:  # every slot busy: wait for one to free up
                done, _ = await asyncio.wait(inflight, return_when=asyncio.FIRST_COMPLETED)
                inflight -= done
                continue
            leases = frontier.next(free) if free > 0 else []
            for lease in leases:
                inflight.add(asyncio.create_task(self._visit(frontier, fetcher, lease, out)))
            if leases:
                continue
            if limit_left == 0 and not inflight:
                break
            when = frontier.next_ready_at()
            if when is None and not inflight:
                finished = True
                break
            wait = 1.0 if when is None else min(max(when - time.time(), 0.005), 1.0)
            if deadline is not None:
                wait = max(min(wait, deadline - time.monotonic()), 0.0)
            if inflight:
                done, _ = await asyncio.wait(inflight, timeout=wait,
                                             return_when=asyncio.FIRST_COMPLETED)
                inflight -= done
            else:
                await asyncio.sleep(wait)
        if inflight:  # let the fetches in flight finish and be acknowledged
            if self._fatal is not None:  # ...unless the frontier is gone: they come back
                for t in inflight:       # after lease_ttl, when it is there again
                    t.cancel()
            await asyncio.wait(inflight)
            inflight.clear()
        return finished

    def _fail(self, exc: StoreError) -> None:
        """The frontier failed for good (e.g. Redis gone past its retry deadline): stop
        at once. Nothing is lost: unacknowledged leases return after ``lease_ttl``."""
        if self._fatal is None:
            log.error("the frontier failed, stopping the crawl: %s", exc)
            self._fatal = exc
        self._stop = True

    async def _robots_for(self, fetcher: Fetcher, frontier: Frontier, url: str,
                          queue: str) -> robots_mod.Robots:
        parts = urlsplit(url)
        origin = f"{parts.scheme}://{parts.netloc}"
        lock = self._robot_locks.setdefault(origin, asyncio.Lock())
        async with lock:
            rules = self._robots.get(origin)
            if rules is not None and rules.expires > time.time():
                return rules
            rules = await self._fetch_robots(fetcher, origin)
            self._robots[origin] = rules
            delay = rules.crawl_delay(self.config.user_agent)
            if delay:
                frontier.configure_queue(queue, min_delay=delay)
            if self.config.sitemaps and rules.parser is not None:
                self._add_sitemaps(frontier, list(rules.parser.sitemaps),
                                   origin + "/robots.txt")
            return rules

    async def _fetch_robots(self, fetcher: Fetcher, origin: str) -> robots_mod.Robots:
        url = origin + "/robots.txt"
        for _ in range(5):  # follow a few redirects, each checked like any fetch
            try:
                r = await fetcher.get(url)
            except FetchError as exc:  # (Blocked goes up: the page itself is blocked)
                log.warning("robots.txt of %s unreachable: %s", origin, exc)
                self.summary.errors[f"robots.txt {exc.kind}"] += 1
                return robots_mod.from_response(None, "", error=str(exc))
            if r.status in (301, 302, 303, 307, 308) and r.location:
                url = urljoin(url, r.location)
                continue
            return robots_mod.from_response(r.status, r.body.decode("utf-8", "replace"))
        return robots_mod.from_response(None, "")

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
        try:
            if self.config.obey_robots:
                rules = await self._robots_for(fetcher, frontier, req.url, lease.queue)
                if not rules.allows(req.url, self.config.user_agent):
                    s.robots_denied += 1
                    if rules.disallow_all:
                        # robots.txt 5xx or unreachable: nothing may be fetched for now
                        # (Google's rule); a failure, retried with backoff, then dead.
                        frontier.done(lease, Outcome.FAILED,
                                      error=f"robots.txt unavailable ({rules.reason})")
                    else:
                        frontier.done(lease)
                    return
            r = await fetcher.get(req.url)
            if self._fatal is not None:  # the frontier is gone: the lease will come back
                return
        except Blocked as exc:
            s.blocked[exc.reason] += 1
            self._emit("error", req, exc)
            frontier.done(lease)
            return
        except FetchError as exc:
            kind = exc.kind
            s.errors[kind] += 1
            self._emit("error", req, exc)
            frontier.done(lease, Outcome.FAILED, error=f"{kind}: {exc}")
            return
        s.fetched += 1
        s.statuses[r.status] += 1
        retry_after = _retry_after(r)
        if r.status in (429, 503) and retry_after is not None:
            frontier.block(lease.queue, seconds=retry_after)
            frontier.retry(lease, after=retry_after, duration=r.elapsed)
            self._write(out, req, r, None, 0)
            return
        if r.status >= 500:
            frontier.done(lease, Outcome.FAILED, error=f"HTTP {r.status}", duration=r.elapsed)
            self._write(out, req, r, None, 0)
            return
        links: list[str] = []
        title = None
        if req.meta.get("sitemap") and r.status < 300:
            self._sitemap(frontier, req, r)
        elif r.location and 300 <= r.status < 400:
            hops = int(req.meta.get("redirects", 0)) + 1
            if hops > self.config.max_redirects:
                s.out_of_scope["too-many-redirects"] += 1
            else:
                self._follow(frontier, [urljoin(req.url, r.location)], req.depth, req.url,
                             {"redirects": hops})
        elif r.content_type in ("text/html", "application/xhtml+xml") and r.status < 300:
            page = await asyncio.to_thread(
                extract, decode_html(r.body, r.charset), req.url)
            links, title = page.links, page.title
        if links:
            self._follow(frontier, links, req.depth + 1, req.url)
        if self.scope.is_target(req.url):
            self._write(out, req, r, title, len(links))
        else:
            s.not_saved += 1
        frontier.done(lease, duration=r.elapsed)
        self._emit("page", req, r)

    def _sitemap(self, frontier: Frontier, req: Request, r: Fetched) -> None:
        try:
            found = sitemaps.parse(r.body, self.config.max_bytes)
        except sitemaps.SitemapError as exc:
            log.warning("sitemap %s: %s", req.url, exc)
            self.summary.errors["bad-sitemap"] += 1
            return
        if found.kind == "sitemapindex":
            self._add_sitemaps(frontier, found.locs, req.url)
        else:
            self.summary.sitemap_urls += len(found.locs)
            self._follow(frontier, found.locs, req.depth + 1, req.url)

    def _add_sitemaps(self, frontier: Frontier, urls: list[str], referrer: str) -> None:
        """Queue sitemaps (from robots.txt or an index) that are in scope; at depth 0,
        as a sitemap is not a page: no depth limit."""
        self._follow(frontier, urls, 0, referrer, {"sitemap": 1})

    def _follow(self, frontier: Frontier, links: list[str], depth: int, referrer: str,
                meta: dict[str, Any] | None = None) -> None:
        new = []
        once = self._this_round if self.config.revisit_after else None
        for url in links:
            why = self.scope.why_not(url, depth)
            if why is not None:
                self.summary.out_of_scope[why] += 1
                continue
            if once is not None:
                try:
                    key = hash(frontier.canonicalize(url))
                except ValueError:  # invalid: let the frontier say why
                    key = hash(url)
                if key in once:
                    continue
                once.add(key)
            new.append(Request(url, depth=depth, referrer=referrer, meta=meta or {},
                               priority=self.scope.priority(url)))
        if new:
            result = frontier.add(new)
            self.summary.links_added += result.added
            for rej in result.rejected:
                self.summary.out_of_scope[rej.reason] += 1

    def _write(self, out: Output | None, req: Request, r: Fetched, title: str | None,
               outlinks: int) -> None:
        if out is not None:
            out.write(req, r, title, outlinks)


def _retry_after(r: Fetched) -> float | None:
    raw = r.headers.get("retry-after")
    if raw is None:
        return None
    with contextlib.suppress(ValueError):
        seconds = float(raw)
        # ("nan" and "inf" parse as floats but are no delay a server can mean)
        return max(seconds, 0.0) if math.isfinite(seconds) else None
    from email.utils import parsedate_to_datetime

    try:
        return max(parsedate_to_datetime(raw).timestamp() - time.time(), 0.0)
    except (TypeError, ValueError):
        return None
