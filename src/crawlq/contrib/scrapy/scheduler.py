"""The Scrapy scheduler on a crawlq frontier (see the package docstring and
docs/scrapy.md): its life cycle and the interface Scrapy's engine calls, on
:class:`~crawlq.contrib.scrapy.scheduler_core.SchedulerCore`."""

from __future__ import annotations

import heapq
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from scrapy import Request as ScrapyRequest
from scrapy import Spider, signals
from twisted.python.failure import Failure

from ...errors import CrawlqError
from ...frontier import Frontier
from ...models import AddResult, Lease, Outcome
from ...models import Request as CrawlqRequest
from ...stores import destroy_store
from .codec import LIVE, TOKEN, from_crawlq
from .config import (
    slot_overrides,
)
from .scheduler_core import (
    _ADD_BATCH_MAX,
    _AHEAD_MIN,
    _FLUSH_AFTER,
    _SCHEMES,
    SchedulerCore,
    _fingerprint_from_meta,
    _Pending,
    freeze_heap,
    logger,
    thaw_heap,
)


class Scheduler(SchedulerCore):
    """Scrapy's scheduler interface on a crawlq :class:`~crawlq.Frontier`."""

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
        """Learn when the engine is done with a request, and how its download ended."""
        slot: Any = getattr(engine, "_slot", None)
        scraper: Any = getattr(engine, "scraper", None)
        if slot is None or not callable(getattr(slot, "remove_request", None)) \
                or not callable(getattr(scraper, "enqueue_scrape", None)):
            raise CrawlqError("crawlq's Scrapy scheduler cannot attach to this Scrapy "
                              "engine (no _slot.remove_request): unsupported Scrapy version")
        # remove_request is called when the engine is completely done with a request
        # (downloaded, or failed, and its callback's output scheduled): the one moment
        # at which acknowledging loses nothing.
        remove = slot.remove_request

        def remove_request(request: ScrapyRequest) -> None:
            try:
                self._finished(request)
            finally:
                remove(request)

        slot.remove_request = remove_request
        enqueue_scrape = scraper.enqueue_scrape

        def scrape(result: Any, request: ScrapyRequest, *args: Any, **kw: Any) -> Any:
            # (a response or a failure of the download; here rather than from the
            # response_received signal, whose dispatch costs more than the rest)
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

