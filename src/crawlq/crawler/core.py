"""The crawler: one :class:`Crawler`, whose parts are, in this order, its state (options,
scope, counters, event hooks), stopping and answering a lease (after its output record
and links are durable), visiting one leased page (robots.txt, the fetch, what its status
means, its links or sitemap or redirect, its output record), and the crawl loop (leases
from the frontier, at most ``concurrency`` fetches in flight, sleeping until
``Frontier.next_ready_at()`` when nothing is ready).

All politeness comes from the frontier (per-host concurrency and delays fed with real
fetch durations, Crawl-delay as a per-queue minimum, Retry-After as a block).
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Callable, Mapping
from typing import Any

from ..aio import AsyncFrontier
from ..errors import CrawlqError, StoreError
from ..models import Lease, Outcome, Request
from . import robots as robots_mod
from . import seeds
from .commit import Acks
from .config import BACKOFF_STATUSES, DEFAULT_AGENT, CrawlConfig, Summary, backoff
from .decode import ACCEPT_ENCODING
from .discover import Links
from .fetch import Blocked, Fetched, Fetcher, FetchError
from .links import resolve
from .output import Output, OutputError, open_output
from .parsing import ParseFailed, ParseMemory, Parsers, ParseTimeout
from .scope import Scope, host_of

log = logging.getLogger("crawlq.crawl")

EVENTS = ("start", "round_start", "page", "error", "round_end", "shutdown")

__all__ = ["DEFAULT_AGENT", "EVENTS", "CrawlConfig", "Crawler", "Summary"]


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
        domains = config.allow_domains or [h for h in map(host_of, config.seeds) if h]
        self.scope = Scope(domains, config.include, config.exclude, config.max_depth,
                           priority=config.priority_rules, target=config.target)
        self.summary = Summary()
        self._robots = robots_mod.RobotsCache(
            config.user_agent, self.summary.errors, self._archive,
            config.robots_error_window, in_scope=lambda u: self.scope.on_domain(host_of(u)))
        self._stop = False
        self._fatal: CrawlqError | None = None
        self._acks: Acks | None = None
        self._out: Output | None = None
        self._unanswered: list[Lease] = []  # leases to put back when the run ends
        self._ready: list[Lease] = []  # leases taken ahead, not fetched yet
        self._latency = 0.0  # seconds the store takes to answer a step (moving average)
        self._asking = 0  # leases asked for by commits under way
        self._closing = False
        self._started = time.monotonic()
        self._parsers = Parsers(config.parse_timeout, max_bytes=config.max_bytes)
        self.frontier: AsyncFrontier | None = None
        """The frontier while :meth:`run` runs (for progress displays)."""
        self.links = Links(self.scope, self.summary)

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
        if not isinstance(exc, StoreError):
            self._unanswered += held  # not durable: put back when the run ends

    async def _put_back(self, frontier: AsyncFrontier, leases: list[Lease]) -> None:
        """Leases not answered, back to their queues unfailed, for the next run (rather
        than after their ``lease_ttl``)."""
        log.info("%d page(s) in flight put back for the next run", len(leases))
        try:
            await frontier.retry(leases)
        except StoreError as exc:
            self._fail(exc)

    def _ack(self, lease: Lease, outcome: Outcome = Outcome.DONE, *, wrote: bool = False,
             error: str | None = None, duration: float | None = None) -> None:
        """Answer a lease at the next commit of :class:`Acks` (grouped with the other
        pages'), after the links found so far are queued and, for a page with an output
        record (``wrote``), once the output is durable."""
        assert self._acks is not None  # (set while run() runs)
        self._acks.add(lease, outcome, error=error, duration=duration)

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

    async def _robots_for(self, fetcher: Fetcher, frontier: AsyncFrontier, url: str,
                          queue: str) -> robots_mod.Robots:
        rules, fresh = await self._robots.rules(fetcher, url, frontier)
        if fresh:  # just fetched: its Crawl-delay and sitemaps take effect
            if rules.parser is not None and rules.parser.ignored_delays:
                log.warning("%s: robots.txt Crawl-delay %s ignored (no delay)",
                            robots_mod.origin(url), ", ".join(rules.parser.ignored_delays))
            delay = self._crawl_delay(rules.crawl_delay, url)
            if delay is not None:
                await frontier.configure_queue(queue, min_delay=delay)
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

    async def _visit(self, frontier: AsyncFrontier, fetcher: Fetcher, lease: Lease,
                     out: Output | None) -> None:
        try:
            await self._fetch_one(frontier, fetcher, lease, out)
        except StoreError as exc:
            self._fail(exc)
        except Exception as exc:  # a bug or a broken response must not stop the crawl
            log.exception("crawling %s failed", lease.request.url)
            self.summary.errors[type(exc).__name__] += 1
            self._emit("error", lease.request, exc)
            self._ack(lease, Outcome.FAILED, error=f"{type(exc).__name__}: {exc}")

    async def _fetch_one(self, frontier: AsyncFrontier, fetcher: Fetcher, lease: Lease,
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
                    await frontier.block(lease.queue, until=rules.expires)
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
                if not await rules.permits(req.url):
                    s.robots_denied += 1
                    why = "robots.txt disallows it (--ignore-robots to crawl anyway)"
                    await frontier.count_rejected("robots-denied")  # (in crawlq stats)
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
            await frontier.block(lease.queue, seconds=wait)
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
            target = resolve(req.url, r.location)  # (WHATWG, as the fetch reads it)
            if hops > self.config.max_redirects:
                s.out_of_scope["too-many-redirects"] += 1
            elif target is None:
                s.out_of_scope["bad-url"] += 1
            else:
                self.links.follow(frontier, [target], req.depth, req.url, {"redirects": hops})
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

    async def run(self) -> Summary:
        """Crawl until nothing in scope is left, a limit is reached or :meth:`stop`.

        Raises :class:`~crawlq.errors.StoreError` when the frontier fails for good and
        :class:`~crawlq.crawler.output.OutputError` when the output cannot be written;
        either way nothing is lost: what was not acknowledged is fetched again.
        """
        c = self.config
        started = self._started = time.monotonic()
        self._closing = False
        out = (open_output(c.out, c.out_format, save=c.save, rotate=c.out_rotate)
               if c.out else None)
        try:
            frontier = await AsyncFrontier.open(
                c.store, concurrency=c.per_host, min_delay=c.min_delay,
                max_delay=c.max_delay, delay_factor=c.delay_factor,
                max_queue_urls=c.max_per_host, max_retries=c.max_retries,
                domain_concurrency=c.per_domain or 4 * c.per_host,
                max_domain_urls=c.max_per_domain, max_domain_queues=c.max_hosts_per_domain,
                retry_backoff=c.retry_backoff, lease_ttl=c.lease_ttl or c.timeout * 3 + 60,
                revisit_after=c.revisit_after, max_redeliveries=c.max_redeliveries)
        except BaseException:
            if out is not None:
                out.close()
            raise
        self.frontier = frontier
        fetcher = Fetcher(user_agent=c.user_agent, timeout=c.timeout, max_bytes=c.max_bytes,
                          resolve=c.resolve, allow_private=c.allow_private,
                          allow_addresses=c.allow_addresses, connections=c.concurrency,
                          ca_file=c.ca_file, headers=c.headers, proxy=c.proxy,
                          proxy_from_env=c.proxy_from_env, cookies=c.cookies,
                          accept_encoding=(out.accept_encoding if out is not None else None)
                          or ACCEPT_ENCODING, keep_wire=out is not None and out.keeps_wire)
        self._out = out
        inflight: dict[asyncio.Task[None], Lease] = {}

        async def step(links: list[Request], done: list[Lease],
                       durations: list[float | None]) -> None:
            # The pages' links, their answers and the leases for the fetch slots they
            # free, in one store call: with a store far away, a slot's cycle is its
            # fetch plus one round trip.
            sent = time.monotonic()
            n = self._room(inflight)
            self._asking += n  # (commits overlap: what the others ask is not at hand yet)
            try:
                got = await self.links.send(frontier, links, done, durations, n)
            finally:
                self._asking -= n
            self._latency = 0.8 * self._latency + 0.2 * (time.monotonic() - sent)
            self._ready.extend(got)  # (after the await: the list may be another by then)

        acks = self._acks = Acks(frontier, out, self._fail, step=step, links=self.links)
        committer = asyncio.create_task(acks.run())
        renewer = asyncio.create_task(self._renew(frontier, inflight))
        try:
            self._emit("start", self)
            await seeds.revive(frontier, c.seeds)
            for n in range(1, max(c.rounds, 1) + 1):
                self.summary.rounds = n
                self.links.new_round()
                # Seeds again each round: with revisit_after they are accepted anew once
                # their interval has passed, and so are the pages they lead to.
                await seeds.offer(frontier, c.seeds, self.scope, self.summary,
                                  report=n == 1)
                self._emit("round_start", n)
                deadline = time.monotonic() + c.duration if c.duration else None
                try:
                    self.summary.finished = await self._round(frontier, fetcher, out,
                                                              inflight, deadline)
                except StoreError as exc:  # (a flush, lease or wait call failed)
                    self._fail(exc)  # nothing more is acknowledged in this run
                    raise
                if self._fatal is not None:
                    raise self._fatal
                self._emit("round_end", n, self.summary)
                if self._stop or n == c.rounds or self._limit_left(inflight) == 0:
                    break
                pause_until = time.monotonic() + c.round_delay
                while not self._stop and time.monotonic() < pause_until:
                    await asyncio.sleep(min(0.2, pause_until - time.monotonic()))
        finally:
            renewer.cancel()
            for t in inflight:
                t.cancel()
            await acks.stop(committer)  # (a commit under way finishes first)
            await fetcher.close()
            await self._parsers.aclose()
            self._closing = True  # (the last commit takes no lease)
            try:
                if self._fatal is None:
                    await acks.commit()  # the last pages written: durable, then acknowledged
                if self._fatal is None:
                    await self.links.flush(frontier)
                back, self._unanswered = self._unanswered + self._ready, []
                self._ready = []
                if back and not isinstance(self._fatal, StoreError):
                    await self._put_back(frontier, back)
            finally:
                if out is not None:
                    try:
                        out.close()
                    except OSError as exc:  # (nothing it held was acknowledged)
                        if self._fatal is None:
                            raise OutputError(f"closing the output {out.path} failed: "
                                              f"{exc}") from None
                self.frontier = None
                await frontier.aclose()
                self.summary.seconds = time.monotonic() - started
                self._emit("shutdown", self.summary)
        return self.summary

    def _limit_left(self, inflight: Mapping[asyncio.Task[None], Lease]) -> int | None:
        if self.config.max_pages is None:
            return None
        return max(self.config.max_pages - self.summary.fetched - len(inflight)
                   - len(self._ready), 0)

    def _room(self, inflight: Mapping[asyncio.Task[None], Lease]) -> int:
        """Leases to take now: the fetch slots free, and leases to have at hand when
        slots free up, less those taken ahead already, within ``--max-pages``; none once
        the crawl is stopping. At hand: what the crawl fetches in four store answer
        times (its pages/s so far times the store's recent answer time, four times: a
        page waits for the commit under way, then for its own, and the fsync and the
        loop take their share), so that a store far away is not waited for between two
        fetches: next to nothing on a store nearby, up to 7 x ``--concurrency`` on one
        far away. (A lease taken ahead counts in its host's
        and domain's concurrency in the store: politeness is the same.)"""
        if self._stop or self._closing:
            return 0
        c = self.config.concurrency
        rate = self.summary.fetched / max(time.monotonic() - self._started, 1e-3)
        ahead = min(7 * c, math.ceil(4 * rate * self._latency))
        # (what commits under way asked for is not subtracted: the store grants a call
        # only the slots free when it runs, often fewer; it only bounds the whole)
        free = min(c + ahead - len(inflight) - len(self._ready),
                   8 * c - len(inflight) - len(self._ready) - self._asking)
        left = self._limit_left(inflight)
        return max(free if left is None else min(free, left - self._asking), 0)

    async def _round(self, frontier: AsyncFrontier, fetcher: Fetcher, out: Output | None,
                     inflight: dict[asyncio.Task[None], Lease],
                     deadline: float | None) -> bool:
        """Crawl until the frontier is empty (True), or a limit, the deadline or a stop."""
        c = self.config
        finished = False
        while not self._stop:
            if deadline is not None and time.monotonic() >= deadline:
                break
            limit_left = self._limit_left(inflight)
            slots = c.concurrency - len(inflight)
            if slots <= 0 and inflight:  # every slot busy: wait for one to free up
                await self._wait(inflight, None)
                continue
            if not self._ready:
                room = self._room(inflight)
                if self._acks is not None and len(self._acks) and room > 0:
                    # Pages being answered: their commit takes the leases for the free
                    # slots in the same store call (a lease call now would find their
                    # hosts still busy).
                    await self._wait(inflight, None)
                    continue
                # (what the last pages found is leasable too)
                if room > 0:  # (no page is being answered: its links are not waiting)
                    got = await self.links.flush(frontier, n=room)
                    self._ready.extend(got)
            slots = c.concurrency - len(inflight)  # (the same: nothing ended meanwhile)
            leases, self._ready = self._ready[:slots], self._ready[slots:]
            for lease in leases:
                task = asyncio.create_task(self._visit(frontier, fetcher, lease, out))
                inflight[task] = lease
            if leases:
                continue
            if limit_left == 0 and not inflight:
                break
            when = await frontier.next_ready_at()
            if when is None and not inflight:
                finished = True
                break
            wait = 1.0 if when is None else min(max(when - time.time(), 0.005), 1.0)
            if deadline is not None:
                wait = max(min(wait, deadline - time.monotonic()), 0.0)
            await self._wait(inflight, wait)
        if inflight:
            await self._drain(frontier, inflight)
        return finished

    async def _wait(self, inflight: dict[asyncio.Task[None], Lease],
                    timeout: float | None) -> None:
        """Until a fetch ends, held acknowledgements are committed (their hosts may be
        free again) or ``timeout`` passes."""
        waiters: set[asyncio.Future[Any]] = set(inflight)
        if self._acks is not None and len(self._acks):  # (an answer frees its host)
            waiters.add(self._acks.released())
        if not waiters:
            await asyncio.sleep(timeout or 0)
            return
        done, _ = await asyncio.wait(waiters, timeout=timeout,
                                     return_when=asyncio.FIRST_COMPLETED)
        for t in done:
            inflight.pop(t, None)

    async def _drain(self, frontier: AsyncFrontier,
                     inflight: dict[asyncio.Task[None], Lease]) -> None:
        """Let the fetches in flight finish and be acknowledged: all of them at a limit,
        for :attr:`STOP_GRACE` seconds after a stop. Those still running then are
        cancelled and put back unfailed; when the frontier is gone they are only
        cancelled (their leases come back after ``lease_ttl``); when the output failed,
        every fetch is cancelled and put back."""
        if self._fatal is None:
            grace = self.STOP_GRACE if self.summary.interrupted else None
            _, pending = await asyncio.wait(inflight, timeout=grace)
        else:
            pending = set(inflight)
        for t in pending:
            t.cancel()
        if pending:
            await asyncio.wait(pending)
        back = [inflight[t] for t in pending]
        inflight.clear()
        if back and not isinstance(self._fatal, StoreError):
            await self._put_back(frontier, back)

    async def _renew(self, frontier: AsyncFrontier,
                     inflight: dict[asyncio.Task[None], Lease]) -> None:
        """Renew the leases of the pages still worked on (fetched, parsed, or written
        and waiting for their commit) every third of the lease time: a slow page or a
        slow disk does not let its lease expire and the page go to another crawler."""
        every = frontier.lease_ttl / 3
        while True:
            await asyncio.sleep(every)
            leases = list(inflight.values()) + self._ready
            if self._acks is not None:
                leases += self._acks.held()
            if leases and self._fatal is None:
                try:
                    await frontier.renew(leases)
                except StoreError as exc:
                    self._fail(exc)
                    return

