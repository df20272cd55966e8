"""A drop-in Scrapy scheduler on a crawlq frontier: crash-safe resume, per-domain
politeness and fairness, and crawls shared by many processes through Redis.

Settings (only the first is needed)::

    SCHEDULER = "crawlq.contrib.scrapy.Scheduler"
    CRAWLQ_STORE = "sqlite:///crawl.db"   # or "redis://localhost:6379/0?prefix=myspider"

How a request travels: ``enqueue_request`` serializes it with Scrapy's own
``Request.to_dict`` (callbacks and errbacks by name) and adds it to the frontier, which
deduplicates it and files it under its host's queue. ``next_request`` leases requests
whose host is neither at its concurrency cap nor resting. The lease is acknowledged when
the engine is completely done with the request: its response (or final failure) has
left the downloader *and* the spider's callback has handed over the requests it yields,
so a process killed at any moment (``kill -9``) and restarted with the same settings
fetches again exactly the requests that were in flight, and loses none of the links
they led to. A redirect or a retry made by a downloader middleware is a new request
(added before its parent is acknowledged). Failures are kept as dead requests with
their error (``crawlq --store ... dead``).

See ``docs/scrapy.md`` for the settings, how Scrapy's politeness settings map onto the
frontier's policy, and the stats.
"""

from __future__ import annotations

import base64
import logging
import pickle
import time
from collections import deque
from typing import Any

from scrapy import Request as ScrapyRequest
from scrapy import Spider, signals
from scrapy.crawler import Crawler
from scrapy.http import Response
from scrapy.utils.request import request_from_dict

from ..errors import CrawlqError
from ..frontier import Frontier
from ..models import Lease, Outcome
from ..models import Request as CrawlqRequest

logger = logging.getLogger(__name__)

TOKEN = "crawlq_lease"
"""``request.meta`` key of the lease a request was handed out under."""

_SCHEMES = ("http", "https", "ftp", "s3")


def frontier_options(settings: Any) -> dict[str, Any]:
    """The frontier options that Scrapy's settings call for (see docs/scrapy.md).

    ``CONCURRENT_REQUESTS_PER_DOMAIN`` (or ``CONCURRENT_REQUESTS_PER_IP`` when set)
    becomes the per-host ``concurrency``; ``DOWNLOAD_DELAY`` the ``min_delay`` (with
    ``RANDOMIZE_DOWNLOAD_DELAY``, up to 1.5 times that: ``max_delay``); AutoThrottle
    makes the rest follow the fetch time (``delay_factor`` = 1 / target concurrency, up
    to ``AUTOTHROTTLE_MAX_DELAY``). ``CRAWLQ_OPTIONS`` (a dict of Frontier.open options)
    overrides any of them.
    """
    per_ip = settings.getint("CONCURRENT_REQUESTS_PER_IP")
    concurrency = per_ip or settings.getint("CONCURRENT_REQUESTS_PER_DOMAIN", 8)
    delay = settings.getfloat("DOWNLOAD_DELAY", 0.0)
    opts: dict[str, Any] = _slot_policy(concurrency, delay, settings)
    if settings.getbool("AUTOTHROTTLE_ENABLED"):
        target = settings.getfloat("AUTOTHROTTLE_TARGET_CONCURRENCY", 1.0) or 1.0
        opts["delay_factor"] = 1.0 / target
        opts["max_delay"] = max(settings.getfloat("AUTOTHROTTLE_MAX_DELAY", 60.0), delay)
        opts["min_delay"] = delay
    opts.update(settings.getdict("CRAWLQ_OPTIONS"))
    return opts


def _slot_policy(concurrency: int, delay: float, settings: Any) -> dict[str, Any]:
    """A download slot's concurrency and delay as queue policy. Scrapy fetches one
    request at a time from a slot with a delay, so such a queue gets concurrency 1."""
    opts: dict[str, Any] = {"concurrency": 1 if delay > 0 else max(concurrency, 1),
                            "min_delay": delay, "max_delay": delay, "delay_factor": 0.0}
    if settings.getbool("RANDOMIZE_DOWNLOAD_DELAY", True) and delay:
        opts["max_delay"] = 1.5 * delay
        opts["delay_factor"] = 1.0  # within [delay, 1.5 delay]: longer for slow hosts
    return opts


def slot_overrides(settings: Any) -> dict[str, dict[str, Any]]:
    """Per-queue policy from ``DOWNLOAD_SLOTS`` (slot key = host name = queue key)."""
    default_conc = settings.getint("CONCURRENT_REQUESTS_PER_DOMAIN", 8)
    out = {}
    for key, conf in settings.getdict("DOWNLOAD_SLOTS").items():
        delay = float(conf.get("delay", settings.getfloat("DOWNLOAD_DELAY", 0.0)))
        out[key] = _slot_policy(int(conf.get("concurrency", default_conc)), delay, settings)
    return out


class Scheduler:
    """Scrapy's scheduler interface on a crawlq :class:`~crawlq.Frontier`."""

    def __init__(self, crawler: Crawler) -> None:
        s = crawler.settings
        self.crawler = crawler
        self.stats = crawler.stats
        name = getattr(crawler.spidercls, "name", None) or "spider"
        self.store_url: str = s.get("CRAWLQ_STORE") or f"sqlite:///{name}.crawlq.db"
        self.options = frontier_options(s)
        self.fingerprints = s.get("CRAWLQ_FINGERPRINT", "crawlq")
        if self.fingerprints not in ("crawlq", "scrapy"):
            raise CrawlqError("CRAWLQ_FINGERPRINT must be 'crawlq' or 'scrapy'")
        self.unserializable = s.get("CRAWLQ_UNSERIALIZABLE", "log")
        if self.unserializable not in ("log", "fail"):
            raise CrawlqError("CRAWLQ_UNSERIALIZABLE must be 'log' or 'fail'")
        self.batch = s.getint("CRAWLQ_LEASE_BATCH", 8)
        self.poll = s.getfloat("CRAWLQ_POLL", 1.0)
        self.frontier: Frontier | None = None
        self.spider: Spider | None = None
        self._ready: deque[Lease] = deque()  # leased, not yet handed to Scrapy
        self._held: dict[int, Lease] = {}  # handed to Scrapy, not yet finished
        self._latency: dict[int, float] = {}  # held tokens that got a response
        self._replaced: set[int] = set()  # held tokens that a redirect/retry replaced
        self._resumed = False
        self._redelivered0 = 0
        self._acks: list[tuple[Lease, float | None, str | None]] = []  # to send
        # Fingerprints this process added: most duplicates are links found again, and
        # they are answered here without serializing them or asking the store.
        self._added: set[bytes] = set()
        self._added_max = s.getint("CRAWLQ_LOCAL_SEEN", 1_000_000)
        self._timer: Any = None  # our pending wake-up of the engine
        self._timer_due = 0.0

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Scheduler:
        """Scrapy's factory."""
        return cls(crawler)

    # -- lifecycle ----------------------------------------------------------------------

    def open(self, spider: Spider) -> None:
        """Open the frontier and attach to the engine."""
        self.spider = spider
        opts: dict[str, Any] = {"max_retries": 0, "schemes": _SCHEMES, **self.options}
        if self.fingerprints == "scrapy":
            opts["fingerprint"] = _fingerprint_from_meta
        self.frontier = Frontier.open(self.store_url, **opts)
        for key, policy in slot_overrides(self.crawler.settings).items():
            self.frontier.configure_queue(key, **policy)
        s = self.frontier.stats()
        self._resumed = s.seen > 0
        self._redelivered0 = s.redelivered
        if self._resumed:
            logger.info("crawlq: resuming %s: %d seen, %d queued, %d done (%s)", spider.name,
                        s.seen, s.queued, s.done, self.store_url)
        self.crawler.signals.connect(self._response_received, signals.response_received)
        engine = self.crawler.engine
        slot = getattr(engine, "_slot", None)
        if slot is None or not callable(getattr(slot, "remove_request", None)):
            raise CrawlqError("crawlq's Scrapy scheduler cannot attach to this Scrapy "
                              "engine (no _slot.remove_request): unsupported Scrapy version")
        # The engine calls remove_request when it is completely done with a request
        # (downloaded, or failed, and its callback's output scheduled): the one moment
        # at which acknowledging loses nothing.
        original = slot.remove_request

        def remove_request(request: ScrapyRequest) -> None:
            try:
                self._finished(request)
            finally:
                original(request)

        slot.remove_request = remove_request

    def close(self, reason: str) -> None:
        """Give back what this process still holds, and close the frontier."""
        f = self.frontier
        if f is None:
            return
        try:
            self._flush_acks()
            back = list(self._ready) + list(self._held.values())
            if back:  # fetched again later, by this or another process; no failure counted
                f.retry(back)
            s = f.stats()
            self.stats.set_value("crawlq/redelivered", s.redelivered - self._redelivered0)
            self.stats.set_value("crawlq/queued", s.queued)
            self.stats.set_value("crawlq/dead", s.dead)
        finally:
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
            self._ready.clear()
            self._held.clear()
            f.close()
            self.frontier = None

    # -- the interface ------------------------------------------------------------------

    def has_pending_requests(self) -> bool:
        """True while anything is queued or in flight anywhere (every process sharing
        the frontier): the crawl is over only when the frontier says so."""
        if self._ready or self._held:
            return True
        self._flush_acks()
        assert self.frontier is not None
        return self.frontier.next_ready_at() is not None

    def __len__(self) -> int:
        assert self.frontier is not None
        return self.frontier.stats().queued + len(self._ready)

    def enqueue_request(self, request: ScrapyRequest) -> bool:
        """Add a request; False when it is a duplicate (or rejected, with a log line)."""
        assert self.frontier is not None
        parent = request.meta.get(TOKEN)
        if parent in self._held:
            # A redirect or retry of a leased request: the new request is in the
            # frontier before its parent is acknowledged (when the engine is done).
            self._replaced.add(parent)
        fp = self._local_fingerprint(request)
        if fp is not None and fp in self._added:
            self.stats.inc_value("dupefilter/filtered")
            return False
        try:
            creq = self._to_crawlq(request)
        except Exception as exc:
            if self.unserializable == "fail":
                raise
            self.stats.inc_value("crawlq/unserializable")
            logger.error("crawlq: cannot serialize %s, not scheduled: %s", request, exc)
            return False
        result = self.frontier.add(creq)
        if fp is not None and (result.added or not result.rejected):
            if len(self._added) >= self._added_max:
                self._added.clear()  # a cache: the store still knows them all
            self._added.add(fp)
        if result.added:
            self.stats.inc_value("scheduler/enqueued/crawlq")
            self.stats.inc_value("scheduler/enqueued")
            return True
        if result.rejected:
            r = result.rejected[0]
            self.stats.inc_value(f"crawlq/rejected/{r.reason}")
            logger.warning("crawlq: rejected %s (%s%s)", request.url, r.reason,
                           f": {r.detail}" if r.detail else "")
            return False
        self.stats.inc_value("dupefilter/filtered")
        return False

    def next_request(self) -> ScrapyRequest | None:
        """A request whose host may be fetched now, or None (then the engine is woken
        when one may be)."""
        f = self.frontier
        assert f is not None
        self._flush_acks()
        while True:
            if not self._ready:
                self._ready.extend(f.next(self.batch))
                if not self._ready:
                    self._wake_engine_later()
                    return None
            lease = self._ready.popleft()
            try:
                request = self._from_crawlq(lease.request)
            except Exception as exc:  # e.g. a callback renamed since the request was stored
                logger.error("crawlq: cannot restore %s: %s", lease.request.url, exc)
                self.stats.inc_value("crawlq/unrestorable")
                f.done(lease, Outcome.FAILED, error=f"cannot restore: {exc!r}")
                continue
            request.meta[TOKEN] = lease.token
            self._held[lease.token] = lease
            self.stats.inc_value("scheduler/dequeued/crawlq")
            self.stats.inc_value("scheduler/dequeued")
            return request

    # -- acknowledgements ---------------------------------------------------------------

    def _local_fingerprint(self, request: ScrapyRequest) -> bytes | None:
        """The frontier's fingerprint of a plain request, when a local answer is safe
        (not with revisits, Scrapy's fingerprints, dont_filter or odd URLs)."""
        if (request.dont_filter and not request.meta.get("is_start_request")) \
                or self.fingerprints != "crawlq" or self.options.get("revisit_after"):
            return None
        assert self.frontier is not None
        try:
            return self.frontier.fingerprint_of(CrawlqRequest(
                request.url, method=request.method, body=request.body))
        except Exception:
            return None  # let add() say what is wrong with it

    def _flush_acks(self) -> None:
        """Send the acknowledgements gathered since the last call, in one batch."""
        acks, self._acks = self._acks, []
        f = self.frontier
        if not acks or f is None:
            return
        by_queue: dict[tuple[str, bool], list[tuple[Lease, float | None]]] = {}
        for lease, latency, error in acks:
            if error is not None:
                f.done(lease, Outcome.FAILED, error=error)
            else:
                by_queue.setdefault((lease.queue, latency is None), []).append(
                    (lease, latency))
        # One call per queue: its politeness rest follows its own fetch times.
        for (_, untimed), group in by_queue.items():
            leases = [lease for lease, _ in group]
            if untimed:
                f.done(leases)
            else:
                f.done(leases, duration=sum(x or 0.0 for _, x in group) / len(group))

    def _response_received(self, response: Response, request: ScrapyRequest,
                           spider: Spider) -> None:
        token = request.meta.get(TOKEN)
        if token in self._held:
            self._latency[token] = float(response.meta.get("download_latency") or 0.0)

    def _finished(self, request: ScrapyRequest) -> None:
        token = request.meta.get(TOKEN)
        if not isinstance(token, int):
            return
        lease = self._held.pop(token, None)
        if lease is None or self.frontier is None:
            return  # not one of ours (robots.txt, engine.download), or already given back
        # Gathered and sent with the next step of the engine (next_request): one store
        # call for the requests finished in one tick. A crash before that re-fetches
        # them; nothing is lost.
        latency = self._latency.pop(token, None)
        if latency is not None:
            self._acks.append((lease, latency, None))
        elif token in self._replaced:
            self._replaced.discard(token)
            self._acks.append((lease, None, None))  # its redirect or retry carries on
        else:
            self.stats.inc_value("crawlq/failed")
            self._acks.append((lease, None,
                               "no response (download error or request ignored)"))

    def _wake_engine_later(self) -> None:
        """Make the engine ask again when a host may be ready (or in ``poll`` seconds:
        another process may add work), instead of at its 5-second heartbeat. Our own
        timer, which then schedules the engine's next step: the engine's step timer
        holds one call at a time and must stay free for its immediate wake-ups."""
        assert self.frontier is not None
        at = self.frontier.next_ready_at()
        if at is None:
            return
        due = time.time() + min(max(at - time.time(), 0.005), self.poll)
        if self._timer is not None:
            if self._timer_due <= due:
                return  # an earlier wake-up is on its way
            self._timer.cancel()
        from scrapy.utils.asyncio import call_later  # Scrapy >= 2.14: asyncio or Twisted

        self._timer = call_later(due - time.time(), self._poke)
        self._timer_due = due

    def _poke(self) -> None:
        self._timer = None
        slot = getattr(self.crawler.engine, "_slot", None)
        nextcall = getattr(slot, "nextcall", None)
        if nextcall is not None and self.frontier is not None:
            nextcall.schedule()

    # -- serialization --------------------------------------------------------------------

    def _to_crawlq(self, request: ScrapyRequest) -> CrawlqRequest:
        d = request.to_dict(spider=self.spider)
        meta = d.get("meta")
        if meta and TOKEN in meta:
            d["meta"] = {k: v for k, v in meta.items() if k != TOKEN}
        blob = base64.b64encode(pickle.dumps(d, protocol=4)).decode("ascii")
        cmeta: dict[str, Any] = {"scrapy": blob}
        if self.fingerprints == "scrapy":
            fp = self.crawler.request_fingerprinter.fingerprint(request)
            cmeta["fp"] = fp.hex()
        # Start requests carry dont_filter; they are deduplicated like any other
        # request, so that a resumed crawl does not fetch its start pages again.
        dont_filter = request.dont_filter and not request.meta.get("is_start_request")
        return CrawlqRequest(request.url, method=request.method, body=request.body,
                             priority=request.priority, depth=request.meta.get("depth", 0),
                             meta=cmeta, dont_filter=dont_filter)

    def _from_crawlq(self, creq: CrawlqRequest) -> ScrapyRequest:
        # Pickle, as Scrapy's JOBDIR: the store is the user's own, trusted data.
        d = pickle.loads(base64.b64decode(creq.meta["scrapy"]))
        return request_from_dict(d, spider=self.spider)


def _fingerprint_from_meta(req: CrawlqRequest, canonical: str) -> bytes:
    """The Scrapy fingerprint computed by the scheduler (CRAWLQ_FINGERPRINT='scrapy')."""
    return bytes.fromhex(req.meta["fp"])


__all__ = ["TOKEN", "Scheduler", "frontier_options", "slot_overrides"]
