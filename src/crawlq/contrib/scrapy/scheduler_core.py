"""The Scrapy scheduler's state and the steps its calls share: its settings, the
requests it keeps in memory rather than in the frontier, a request's queue and start
rank, and the acknowledgements it gathers (:class:`SchedulerCore`, extended by
:class:`~crawlq.contrib.scrapy.scheduler.Scheduler`)."""

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
from scrapy import Spider
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
from ...stores import REDIS_SCHEMES
from .codec import BAND, LIVE, TOKEN, to_crawlq
from .config import (
    fingerprint_choice,
    frontier_options,
    lease_batch,
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


_S = TypeVar("_S", bound="SchedulerCore")

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
    return store_url.partition(":")[0].lower() in REDIS_SCHEMES


class SchedulerCore:
    """The scheduler's state and shared steps (the scheduler Scrapy calls is
    :class:`~crawlq.contrib.scrapy.scheduler.Scheduler`)."""

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
        self._memory_store = self.store_url.partition(":")[0].lower() == "memory"
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
        self._timer = None
        slot = getattr(self.crawler.engine, "_slot", None)
        nextcall = getattr(slot, "nextcall", None)
        if nextcall is not None and self.frontier is not None:
            nextcall.schedule()



def _fingerprint_from_meta(req: CrawlqRequest, canonical: str) -> bytes:
    """The Scrapy fingerprint computed by the scheduler (REQUEST_FINGERPRINTER_CLASS)."""
    fp = req.meta.get("fp")
    if isinstance(fp, str):
        return bytes.fromhex(fp)
    # A request another producer added: crawlq's default fingerprint.
    return _CRAWLQ_FINGERPRINT(req, canonical)


_CRAWLQ_FINGERPRINT = Fingerprinter()

