"""The Scrapy scheduler on a crawlq frontier (see the package docstring and
docs/scrapy.md): one :class:`Scheduler`, whose parts are, in this order, its state and
the steps its calls share (settings, the requests it keeps in memory rather than in the
frontier, a request's queue and start rank, the acknowledgements it gathers), then its
life cycle and the interface Scrapy's engine calls.

It stands on Scrapy's public API (the scheduler interface, settings, stats, signals,
the request fingerprinter, the downloader's ``get_slot_key``, ``call_later``) but for
three of the engine's internals, for which Scrapy (2.18, 2.19) has no public
equivalent: :meth:`Scheduler._attach` wraps ``engine._slot.remove_request`` (when the
engine is done with a request) and ``engine.scraper.enqueue_scrape`` (how its download
ended), and :meth:`Scheduler._poke` schedules ``engine._slot.nextcall`` (the engine's
next step). Each says why; docs/scrapy.md lists them too."""

from __future__ import annotations

import gc
import heapq
import itertools
import logging
import os
import secrets
import time
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

from scrapy import Request as ScrapyRequest
from scrapy import Spider, signals
from scrapy.crawler import Crawler
from scrapy.dupefilters import RFPDupeFilter
from scrapy.exceptions import IgnoreRequest
from scrapy.utils.misc import build_from_crawler, load_object
from twisted.python.failure import Failure

from ...errors import ConfigError, CrawlqError
from ...frontier import Frontier
from ...models import AddResult, Lease, Outcome
from ...models import Request as CrawlqRequest
from ...policies.fingerprint import Fingerprinter
from ...stores import StoreURL, destroy_store
from .codec import BAND, LIVE, TOKEN, from_crawlq, to_crawlq
from .config import (
    fingerprint_choice,
    frontier_options,
    lease_batch,
    slot_overrides,
    start_order,
    store_choice,
)
from .seen import SeenKeys, seen_cache_applies

logger = logging.getLogger("crawlq.contrib.scrapy")

_SCHEMES = ("http", "https", "ftp", "s3")
"""Schemes the frontier keeps (they have a host to queue by); any other request goes
to the downloader through this process's memory, as with Scrapy's own scheduler."""

_UNSERIALIZABLE = ("memory", "drop", "fail")

_ADD_BATCH_MAX = 500
"""Requests taken before they are added without waiting any longer."""

_AHEAD_MIN = 8
"""The least lease batch (``CRAWLQ_LEASE_BATCH``, by default ``CONCURRENT_REQUESTS``)
with which a scheduler on a server's store takes its next leases ahead, in the worker
thread: with fewer, the order of a small crawl would change (a request added while the
next ones are leased ahead waits for the batch after)."""

_FLUSH_AFTER = 0.05
"""Seconds new requests and acknowledgements may wait to be sent together with later
ones while leased requests are still at hand (then the store is called anyway)."""

# What became of a request handed to Scrapy (see _finished).
_Ack = tuple[Lease, float | None, str | None]  # lease, fetch time, error (None: done)
_Pending = list[tuple[ScrapyRequest, CrawlqRequest, object]]  # request, entry, dedup key
# A call in the worker thread: the requests it adds, its answer (what the store did
# with them, the leases), and how many leases it asked for (0: it only sends).
_Job = tuple[_Pending, "Future[tuple[AddResult | None, list[Lease]]]", int]


_S = TypeVar("_S", bound="Scheduler")

_freezers = 0
"""Open schedulers that hold the collector's heap frozen (see :func:`freeze_heap`)."""


def freeze_heap() -> bool:
    """Leave the objects alive when a spider opens out of the cyclic garbage
    collector's full collections until it closes (``gc.freeze``; ``CRAWLQ_GC_FREEZE``).

    A Scrapy process holds ~80,000 objects tracked by the collector when its spider
    opens (modules, classes, the crawler and its components), nearly all of which live
    as long as the crawl. A crawl's requests and responses set off a full collection
    every ~125 pages, and each walks all of them again: ~60 ms, ~16% of the CPU of a
    crawl of the local test web. Frozen, they are skipped; objects made later are
    collected as before. :func:`thaw_heap` gives them back when the last scheduler
    closes, so garbage they become afterwards is collected as usual.

    Returns whether it froze: a process that froze objects of its own (e.g. before
    forking workers) is left as it is, and never unfrozen by a scheduler.
    """
    global _freezers
    if _freezers == 0:
        if gc.get_freeze_count():
            return False
        gc.collect()  # (nothing already garbage is kept for the crawl)
    gc.freeze()
    _freezers += 1
    return True


def thaw_heap() -> None:
    """Undo :func:`freeze_heap` (the last open scheduler unfreezes the heap)."""
    global _freezers
    _freezers = max(_freezers - 1, 0)
    if _freezers == 0:
        gc.unfreeze()


def on_a_server(store_url: str) -> bool:
    """Whether the store's calls wait on a server over the network (Redis)."""
    return StoreURL.parse(store_url).kind == "redis"


class Scheduler:
    """Scrapy's scheduler interface on a crawlq :class:`~crawlq.Frontier`."""

    def __init__(self, crawler: Crawler) -> None:
        s = crawler.settings
        self.crawler = crawler
        self.stats = crawler.stats
        self.choice = store_choice(s)
        self.store_url: str = self.choice.url
        self.options = frontier_options(s)
        self.start_order = start_order(s)
        self._start_ranks = itertools.count()  # (see _start_rank)
        self.fingerprints: str = fingerprint_choice(s)
        self.unserializable = s.get("CRAWLQ_UNSERIALIZABLE", "memory")
        if self.unserializable not in _UNSERIALIZABLE:
            raise CrawlqError(f"CRAWLQ_UNSERIALIZABLE must be one of {_UNSERIALIZABLE}")
        df_cls = load_object(s.get("DUPEFILTER_CLASS") or "scrapy.dupefilters.BaseDupeFilter")
        # Scrapy's default dupefilter is the frontier's seen-set (durable, shared); an
        # instance without a file still logs and counts duplicates as Scrapy's does, and
        # filters the requests that stay in memory. Any other class is called as
        # Scrapy's scheduler calls it, and the frontier then keeps every request.
        self.own_dupefilter = df_cls is RFPDupeFilter
        self.df: Any = (RFPDupeFilter(debug=s.getbool("DUPEFILTER_DEBUG"),
                                      fingerprinter=crawler.request_fingerprinter)
                        if self.own_dupefilter else build_from_crawler(df_cls, crawler))
        # As many as the engine may download at once: one store call can fill them all.
        self.batch = lease_batch(s)
        self.poll = s.getfloat("CRAWLQ_POLL", 1.0)
        self.frontier: Frontier | None = None
        self.spider: Spider | None = None
        self._ready: deque[Lease] = deque()  # leased, not yet handed to Scrapy
        self._held: dict[int, Lease] = {}  # handed to Scrapy, not yet finished
        self._latency: dict[int, float] = {}  # held tokens that got a response
        self._failures: dict[int, Failure] = {}  # held tokens whose download failed
        self._replaced: set[int] = set()  # held tokens that a redirect/retry replaced
        self._memory: list[tuple[int, int, ScrapyRequest]] = []  # heap: not in the frontier
        self._seq = itertools.count()
        # Requests handed back as the live objects Scrapy gave (as Scrapy's memory
        # queues do), by handle. A memory:// store lives and dies with this process:
        # its requests are kept here until finished and never serialized. A durable
        # store gets each request serialized, and the newest CRAWLQ_LIVE_CACHE of
        # them stay here too, so that this process need not rebuild the requests it
        # added itself (~50 µs each: Request() re-parses the URL); any other process,
        # or this one after a restart, reads the serialized copy.
        self._memory_store = StoreURL.parse(self.store_url).kind == "memory"
        self._live_max = s.getint("CRAWLQ_LIVE_CACHE", 10_000)
        if self._live_max < 0:
            raise ConfigError(f"CRAWLQ_LIVE_CACHE must be >= 0, not {self._live_max}")
        self._live: dict[int | str, ScrapyRequest] = {}
        self._live_prefix = f"{os.getpid()}.{secrets.token_hex(4)}."  # (unique: see LIVE)
        self._logged_unserializable = False
        self._redelivered0 = 0
        self._acks: list[_Ack] = []  # to send
        self._pending: _Pending = []  # to add
        self._pending_keys: set[object] = set()  # their dedup keys
        self._local_duplicates = 0  # answered by _seen, to count in the store
        self._dequeued = 0  # handed to Scrapy, not yet in its stats (see _flush_stats)
        self._filtered = 0  # duplicates logged, not yet in its stats
        self._duplicates_sent = 0.0  # when they were last counted (monotonic)
        self._since: float | None = None  # when the oldest unsent add or ack was taken
        self._seen = (SeenKeys(s.getint("CRAWLQ_SEEN_CACHE", 100_000), self.fingerprints)
                      if self.own_dupefilter and seen_cache_applies(self.options) else None)
        self._timer: Any = None  # our pending wake-up of the engine
        self._timer_due = 0.0
        # A store on a server (Redis) makes each call wait on the network: there the
        # scheduler sends what waits, and takes its next leases ahead, from a worker
        # thread while the reactor goes on (see Scheduler._send); in process
        # (memory, SQLite) the calls are CPU work, which a thread would not overlap.
        self.background = s.getbool("CRAWLQ_BACKGROUND", on_a_server(self.store_url))
        self.gc_freeze = s.getbool("CRAWLQ_GC_FREEZE", True)  # (see freeze_heap)
        self._frozen = False
        self._job: _Job | None = None  # the call in flight (see _Job)
        self._worker: ThreadPoolExecutor | None = None  # its thread

    @classmethod
    def from_crawler(cls: type[_S], crawler: Crawler) -> _S:
        """Scrapy's factory."""
        return cls(crawler)

    def _forget(self, creq: CrawlqRequest) -> None:
        """Let go of a live request that is finished (or never queued)."""
        handle = creq.meta.get(LIVE)
        if handle is not None and self._live:
            self._live.pop(handle, None)

    # -- requests the frontier does not keep ----------------------------------------------

    def _keep_in_memory(self, request: ScrapyRequest, why: str) -> bool:
        """Hand a request the frontier cannot queue (``data:``, an unknown scheme, a URL
        it finds invalid) to the downloader as Scrapy's scheduler would, through this
        process's memory; the downloader or the errback says what is wrong with it."""
        if self.own_dupefilter and not request.dont_filter and self.df.request_seen(request):
            self._log_duplicate(request)
            return False
        heapq.heappush(self._memory, (-request.priority, next(self._seq), request))
        self.stats.inc_value(f"crawlq/memory/{why}")
        self.stats.inc_value("scheduler/enqueued/memory")
        self.stats.inc_value("scheduler/enqueued")
        return True

    def _log_duplicate(self, request: ScrapyRequest) -> None:
        """What Scrapy's ``RFPDupeFilter.log`` does with a duplicate of ours: its log
        line while it writes them (``DUPEFILTER_DEBUG``, or the first duplicate), else
        only the count, gathered into ``dupefilter/filtered`` by :meth:`_flush_stats`
        (a Scrapy stats call costs more than the rest of a duplicate's handling)."""
        df = self.df
        if getattr(df, "debug", True) or getattr(df, "logdupes", True):
            df.log(request, self.spider)  # (it counts this one)
        else:
            self._filtered += 1

    def _flush_stats(self) -> None:
        """Add the counts gathered since the last call to Scrapy's stats: called by each
        send-and-lease round (``Scheduler._send``) and at close, so during the crawl
        the stats lag by about one lease batch."""
        if self._dequeued:
            self.stats.inc_value("scheduler/dequeued/crawlq", self._dequeued)
            self.stats.inc_value("scheduler/dequeued", self._dequeued)
            self._dequeued = 0
        if self._filtered:
            self.stats.inc_value("dupefilter/filtered", self._filtered)
            self._filtered = 0

    def _unserializable(self, request: ScrapyRequest, exc: Exception) -> bool:
        if self.unserializable == "fail":
            raise exc
        self.stats.inc_value("scheduler/unserializable")
        if self.unserializable == "drop" or not self._logged_unserializable:
            self._logged_unserializable = True
            logger.warning("crawlq: cannot serialize %s (%s): %s", request, exc,
                           "dropped" if self.unserializable == "drop" else
                           "kept in this process's memory (no more such warnings)")
        if self.unserializable == "drop":
            return False
        return self._keep_in_memory(request, "unserializable")

    def _to_crawlq(self, request: ScrapyRequest, fp: bytes | None) -> CrawlqRequest:
        assert self.spider is not None
        handle: int | str | None = None
        if self._memory_store:
            handle = next(self._seq)
        elif self._live_max:
            handle = self._live_prefix + str(next(self._seq))
        creq = to_crawlq(request, self.spider, queue=self._slot_key(request),
                         start_rank=self._start_rank(request),
                         dont_filter=request.dont_filter or not self.own_dupefilter,
                         fingerprint=fp, handle=handle)
        if handle is not None:  # (let go of by _forget if it is not filed)
            live = self._live
            live[handle] = request
            if not self._memory_store and len(live) > self._live_max:
                del live[next(iter(live))]  # the oldest: read back from the store
        return creq

    def _start_rank(self, request: ScrapyRequest) -> int | None:
        """A start request's level in its priority band (see ``frontier_priority``):
        rising for LIFO start requests, falling for FIFO ones when the frontier pops
        the last added first (else one level: the store's own order is theirs)."""
        if self.start_order is None or not request.meta.get("is_start_request"):
            return None
        lifo_store = bool(self.options.get("lifo"))
        if (self.start_order == "lifo") == lifo_store:
            return 0
        n = next(self._start_ranks)
        return n if self.start_order == "lifo" else BAND - 2 - n

    def _slot_key(self, request: ScrapyRequest) -> str:
        """The request's download slot (Scrapy's downloader decides it): its queue."""
        engine: Any = self.crawler.engine
        key = engine.downloader.get_slot_key(request)
        return key if isinstance(key, str) and key else request.url.partition(":")[0]

    # -- acknowledgements ---------------------------------------------------------------

    def _flush_acks(self) -> None:
        """Send the acknowledgements gathered since the last call."""
        acks, self._acks = self._acks, []
        if acks and self.frontier is not None:
            self._send_acks(self.frontier, acks)

    @staticmethod
    def _send_acks(f: Frontier, acks: list[_Ack]) -> None:
        """One store call for the finished requests (each queue's politeness rest
        follows its own fetch time), and one per failure (each with its error). Store
        work only: it may run in the worker thread."""
        finished = [(lease, latency) for lease, latency, error in acks if error is None]
        if finished:
            f.done([lease for lease, _ in finished],
                   duration=[latency for _, latency in finished])
        for lease, _, error in acks:
            if error is not None:
                f.done(lease, Outcome.FAILED, error=error)

    def _finished(self, request: ScrapyRequest) -> None:
        token = request.meta.get(TOKEN)
        if not isinstance(token, int):
            return
        lease = self._held.pop(token, None)
        failure = self._failures.pop(token, None)
        if lease is None or self.frontier is None:
            return  # not one of ours (robots.txt, engine.download), or already given back
        self._forget(lease.request)
        # Gathered and sent by next_request with the others of the same few steps
        # (see _FLUSH_AFTER): one store call for them. A crash before that re-fetches
        # them; nothing is lost.
        if self._since is None:
            self._since = time.monotonic()
        latency = self._latency.pop(token, None)
        if latency is not None:
            self._acks.append((lease, latency, None))
        elif token in self._replaced:
            self._replaced.discard(token)
            self._acks.append((lease, None, None))  # its redirect or retry carries on
        elif failure is not None and isinstance(failure.value, IgnoreRequest):
            # Refused on purpose (robots.txt, a middleware): finished, not failed.
            self.stats.inc_value("crawlq/ignored")
            self._acks.append((lease, None, None))
        else:
            self.stats.inc_value("crawlq/failed")
            error = ("no response" if failure is None
                     else f"{type(failure.value).__name__}: {failure.getErrorMessage()}")
            self._acks.append((lease, None, error[:1000]))

    def _wake_engine_later(self) -> None:
        """Make the engine ask again when a queue may be ready (or in ``poll`` seconds:
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
        """Schedule the engine's next step, which asks :meth:`next_request` again.

        A private hook, ``engine._slot.nextcall``: Scrapy has no public call that makes
        the engine ask its scheduler again (``engine.crawl`` does it only along with a
        new request; ``unpause`` does not). Where it is missing, the engine asks again
        on its own 5-second heartbeat: a crawl slower where queues rest, never wrong."""
        self._timer = None
        slot = getattr(self.crawler.engine, "_slot", None)
        nextcall = getattr(slot, "nextcall", None)
        if nextcall is not None and self.frontier is not None:
            nextcall.schedule()

    # -- lifecycle ----------------------------------------------------------------------

    def open(self, spider: Spider) -> Any:
        """Open the frontier, say what it resumes, and attach to the engine."""
        self.spider = spider
        opts: dict[str, Any] = {"max_retries": 0, "schemes": _SCHEMES, **self.options}
        if self.fingerprints == "scrapy":
            opts["fingerprint"] = _fingerprint_from_meta
        if self.choice.flush_on_start:
            destroy_store(Frontier.open(self.store_url, **opts).store)
        self.frontier = Frontier.open(self.store_url, **opts)
        for key, policy in slot_overrides(self.crawler.settings).items():
            self.frontier.configure_queue(key, **policy)
        s = self.frontier.stats()
        self._redelivered0 = s.redelivered
        if s.seen or s.added:
            logger.info("crawlq: resuming the crawl in %s (%s): %d seen, %d queued, "
                        "%d leased, %d done, %d dead", self.store_url, self.choice.origin,
                        s.seen, s.queued, s.leased, s.done, s.dead)
        else:
            logger.info("crawlq: a new crawl in %s (%s)", self.store_url, self.choice.origin)
        self._attach(self.crawler.engine)
        if self.gc_freeze and not self._frozen:
            self._frozen = freeze_heap()
        return self.df.open()

    def _attach(self, engine: Any) -> None:
        """Learn when the engine is done with a request, and how its download ended:
        two hooks into the engine's internals, for which Scrapy has no public API.

        - ``engine._slot.remove_request`` (private): the engine calls it when it is
          completely done with a request: downloaded or failed, and every request its
          callback or errback yields handed to :meth:`enqueue_request`. That is the one
          moment at which acknowledging loses nothing. No signal comes then:
          ``request_left_downloader`` and ``response_received`` come before the
          callback runs, ``item_scraped`` once per item, and a request that a
          downloader middleware redirected or ignored gets none after it.
        - ``engine.scraper.enqueue_scrape`` (a method of an engine part that Scrapy
          does not document): its argument is the download's outcome, a response or
          a failure. The failure tells a request refused on purpose (``IgnoreRequest``,
          e.g. robots.txt: done) from a download error (dead, with its error), and no
          signal carries it (scrapy/scrapy#6990 asks for one for ``IgnoreRequest``). A
          response alone is what the public ``response_received`` signal gives; the
          wrapper, needed for failures anyway, reads both in one place.
        """
        slot: Any = getattr(engine, "_slot", None)
        scraper: Any = getattr(engine, "scraper", None)
        if slot is None or not callable(getattr(slot, "remove_request", None)) \
                or not callable(getattr(scraper, "enqueue_scrape", None)):
            raise CrawlqError("crawlq's Scrapy scheduler cannot attach to this Scrapy "
                              "engine (no _slot.remove_request or scraper.enqueue_scrape): "
                              "unsupported Scrapy version")
        remove = slot.remove_request

        def remove_request(request: ScrapyRequest) -> None:
            try:
                self._finished(request)
            finally:
                remove(request)

        slot.remove_request = remove_request
        enqueue_scrape = scraper.enqueue_scrape

        def scrape(result: Any, request: ScrapyRequest, *args: Any, **kw: Any) -> Any:
            # (a response or a failure of the download)
            token = request.meta.get(TOKEN)
            if token in self._held:
                if isinstance(result, Failure):
                    self._failures[token] = result
                else:
                    latency = request.meta.get("download_latency")
                    self._latency[token] = float(latency or 0.0)
            return enqueue_scrape(result, request, *args, **kw)

        scraper.enqueue_scrape = scrape

    def close(self, reason: str) -> Any:
        """Give back what this process still holds, and close (or flush) the frontier."""
        f = self.frontier
        if f is None:
            return self.df.close(reason)
        try:
            if self._job is not None:
                self._collect()
            self._flush_adds()
            self._count_duplicates(force=True)
            self._flush_acks()
            self._flush_stats()
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
            if self._worker is not None:
                self._worker.shutdown(wait=True)
                self._worker = None
            self._job = None
            self._ready.clear()
            self._held.clear()
            self._memory.clear()
            self._live.clear()
            self.frontier = None
            if self._frozen:
                thaw_heap()
                self._frozen = False
            if self.choice.persist:
                f.close()
            else:
                destroy_store(f.store)
        return self.df.close(reason)

    # -- the interface ------------------------------------------------------------------

    def has_pending_requests(self) -> bool:
        """True while anything is queued or in flight anywhere (every process sharing
        the frontier): the crawl is over only when the frontier says so."""
        if self._ready or self._held or self._memory or self._pending or self._job:
            return True
        self._flush()
        assert self.frontier is not None
        return self.frontier.next_ready_at() is not None

    def __len__(self) -> int:
        assert self.frontier is not None
        if self._job is not None:
            self._collect()
        return (self.frontier.stats().queued + len(self._ready) + len(self._memory)
                + len(self._pending))

    def enqueue_request(self, request: ScrapyRequest) -> bool:
        """Take a request; False when it is a known duplicate.

        A request is added to the frontier with the others taken in the same few
        engine steps, in one store call (from :meth:`next_request`, see
        ``_FLUSH_AFTER``; before the acknowledgement of its parent, so a crash in
        between re-fetches the parent). A duplicate the store finds then is logged,
        counted and signalled (``request_dropped``) as if refused here.
        """
        assert self.frontier is not None and self.spider is not None
        parent = request.meta.get(TOKEN)
        if parent in self._held:
            # A redirect or retry of a leased request: the new request is in the
            # frontier before its parent is acknowledged (when the engine is done).
            self._replaced.add(parent)
        filtered = not request.dont_filter
        if filtered and not self.own_dupefilter and self.df.request_seen(request):
            self.df.log(request, self.spider)
            return False
        if request.url.partition(":")[0].lower() not in _SCHEMES:
            return self._keep_in_memory(request, "scheme")
        fp = (self.crawler.request_fingerprinter.fingerprint(request)
              if self.fingerprints == "scrapy" else None)
        key: object = None
        if filtered and self.own_dupefilter and self._seen is not None:
            key = self._seen.key(request, fp)
            if key is not None and (key in self._seen or key in self._pending_keys):
                self._local_duplicates += 1
                self._log_duplicate(request)  # counts dupefilter/filtered
                return False
        try:
            creq = self._to_crawlq(request, fp)
        except Exception as exc:
            return self._unserializable(request, exc)
        self._pending.append((request, creq, key))
        if self._since is None:
            self._since = time.monotonic()
        if key is not None:
            self._pending_keys.add(key)
        if len(self._pending) >= _ADD_BATCH_MAX and self._job is None:
            self._flush_adds()
        return True

    def _flush(self) -> None:
        """Send what was gathered, now (see :meth:`_send`)."""
        self._send(0, wait=True)

    def _count_duplicates(self, force: bool) -> None:
        """Report the duplicates answered in process to the store's counter, at most
        once a second (a store call each), and when the crawl closes."""
        f = self.frontier
        now = time.monotonic()
        if f is not None and self._local_duplicates and (
                force or now - self._duplicates_sent >= 1.0):
            f.count_duplicates(self._local_duplicates)
            self._local_duplicates = 0
            self._duplicates_sent = now

    def _flush_adds(self) -> None:
        """Add the requests taken since the last call, in one store call."""
        pending, self._pending = self._pending, []
        self._pending_keys.clear()
        f = self.frontier
        if f is None:
            return
        self._count_duplicates(force=False)
        if pending:
            self._added(pending, f.add([creq for _, creq, _ in pending]))

    def _added(self, pending: _Pending, result: AddResult) -> None:
        """What the store did with the requests ``pending`` (stats, the seen record,
        requests handed over or dropped): on the reactor thread."""
        rejected = {r.index: r for r in result.rejected}
        if result.added:  # (one stats call a batch: Scrapy's stats calls are slow)
            self.stats.inc_value("scheduler/enqueued/crawlq", result.added)
            self.stats.inc_value("scheduler/enqueued", result.added)
        seen = self._seen
        for i, (request, creq, key) in enumerate(pending):
            if result.added_flags[i]:
                if key is not None and seen is not None:
                    seen.add(key)
                continue
            self._forget(creq)
            r = rejected.get(i)
            if r is not None and r.reason != "queue-budget":
                # Not a URL crawlq can queue: handed over as Scrapy would.
                if self._keep_in_memory(request, r.reason):
                    continue
            elif r is not None:
                self.stats.inc_value(f"crawlq/rejected/{r.reason}")
                logger.debug("crawlq: rejected %s (%s)", request.url, r.reason)
            else:  # a duplicate the store knew of (another process added it)
                if key is not None and seen is not None:
                    seen.add(key)
                self._log_duplicate(request)  # counts dupefilter/filtered
            self.crawler.signals.send_catch_log(signals.request_dropped, request=request,
                                                spider=self.spider)

    def next_request(self) -> ScrapyRequest | None:
        """A request whose queue may be fetched now, or None (then the engine is woken
        when one may be)."""
        f = self.frontier
        assert f is not None and self.spider is not None
        if self._job is not None and self._job[1].done():
            self._collect()
        if self._since is not None and time.monotonic() - self._since >= _FLUSH_AFTER:
            if not self.background:
                self._flush()
            elif self._job is None:
                self._send(0, wait=False)
        if self._memory:
            _, _, request = heapq.heappop(self._memory)
            self.stats.inc_value("scheduler/dequeued/memory")
            self.stats.inc_value("scheduler/dequeued")
            return request
        while True:
            if not self._ready and self._job is not None:
                self._collect()  # (waits for the call in flight, if it is not back yet)
            if not self._ready:
                self._send(self.batch, wait=True)  # (the store is called anyway)
                if not self._ready:
                    self._wake_engine_later()
                    return None
            lease = self._ready.popleft()
            try:
                request = self._restore(lease.request)
            except Exception as exc:  # e.g. a callback renamed since the request was stored
                logger.error("crawlq: cannot restore %s: %s", lease.request.url, exc)
                self.stats.inc_value("crawlq/unrestorable")
                f.done(lease, Outcome.FAILED, error=f"cannot restore: {exc!r}")
                self._forget(lease.request)
                continue
            if (self.background and self._job is None and self.batch >= _AHEAD_MIN
                    and len(self._ready) <= self.batch // 2):
                # Half the leases at hand are handed out: the next ones are taken in
                # the worker thread while the engine fetches these.
                self._send(self.batch, wait=False)
            request.meta[TOKEN] = lease.token
            self._held[lease.token] = lease
            self._dequeued += 1  # (in Scrapy's stats with the next store call)
            return request

    # -- sending what was gathered, and leasing -------------------------------------------

    def _send(self, n: int, wait: bool) -> None:
        """Send what was gathered (new requests first, then acknowledgements) and take
        up to ``n`` leases (0: none), in one transaction of the store where it has them
        (elsewhere a crash in between re-fetches the parents: nothing is lost either
        way). ``wait``: now; else in the worker thread (a store on a server), while the
        reactor goes on: the next ``next_request`` that finds the call answered, or
        needs its leases (it then waits), takes the answer (:meth:`_collect`). One call
        in flight at a time, and every other send waits for it: the store sees them in
        the order they were gathered."""
        f = self.frontier
        self._since = None
        self._flush_stats()
        if f is None:
            return
        pending, self._pending = self._pending, []
        self._pending_keys.clear()
        acks, self._acks = self._acks, []
        self._count_duplicates(force=False)
        creqs = [creq for _, creq, _ in pending]
        if wait:
            self._answered(pending, *self._lease_call(f, creqs, acks, n))
            return
        if self._worker is None:
            self._worker = ThreadPoolExecutor(1, thread_name_prefix="crawlq-scheduler")
        self._job = (pending, self._worker.submit(self._lease_call, f, creqs, acks, n), n)
        self.stats.inc_value("crawlq/background_calls")

    @classmethod
    def _lease_call(cls, f: Frontier, creqs: list[CrawlqRequest], acks: list[Any],
                    n: int) -> tuple[AddResult | None, list[Lease]]:
        """The store calls of :meth:`_send` (they may run in the worker thread)."""
        with f.transaction():
            result = f.add(creqs) if creqs else None
            cls._send_acks(f, acks)
            return result, f.next(n) if n else []

    def _collect(self) -> None:
        """Take the answer of the call in flight, waiting for it if need be (its
        store's error, if any, is raised here, as an inline call would raise it)."""
        assert self._job is not None
        pending, future, _ = self._job
        self._job = None
        self._answered(pending, *future.result())

    def _answered(self, pending: _Pending, result: AddResult | None,
                  leases: list[Lease]) -> None:
        """On the reactor thread: what the store did with ``pending``, and its leases."""
        if result is not None:
            self._added(pending, result)
        self._ready.extend(leases)

    def _restore(self, creq: CrawlqRequest) -> ScrapyRequest:
        """The Scrapy request a leased frontier request stands for."""
        handle = creq.meta.get(LIVE)
        if self._memory_store and isinstance(handle, int):
            request = self._live.get(handle)
            if request is None:
                raise LookupError(f"live request {handle} is already finished")
            return request
        if isinstance(handle, str):
            # Ours if this scheduler added it and still has it; handed out once (a
            # lease that expired and comes back reads the serialized copy instead).
            request = self._live.pop(handle, None)
            if request is not None:
                return request
        assert self.spider is not None
        return from_crawlq(creq, self.spider)

def _fingerprint_from_meta(req: CrawlqRequest, canonical: str) -> bytes:
    """The Scrapy fingerprint computed by the scheduler (REQUEST_FINGERPRINTER_CLASS)."""
    fp = req.meta.get("fp")
    if isinstance(fp, str):
        return bytes.fromhex(fp)
    # A request another producer added: crawlq's default fingerprint.
    return _CRAWLQ_FINGERPRINT(req, canonical)


_CRAWLQ_FINGERPRINT = Fingerprinter()
