"""crawlq's Scrapy scheduler, proven with real Scrapy spiders (tests/scrapy_runner.py,
each in its own process) crawling the local multi-host test web on 127.0.0.1."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
import warnings
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from crawlq import Frontier, Request
from crawlq.testing.redis_server import LocalRedis
from crawlq.testing.web import SiteSpec, TestWeb, pages, reachable, serve

RUNNER = str(Path(__file__).with_name("scrapy_runner.py"))
ROOT = Path(__file__).resolve().parents[2]
PREVIOUS_SCRAPY = ROOT / ".venv" / "scrapy-previous"
"""Scrapy's previous minor release, installed there by scripts/test.sh."""


def run_spider(store: str, web: TestWeb, *, spider: str = "site", timeout: float = 120,
               env: dict[str, str] | None = None, cwd: Path | None = None,
               **settings: Any) -> dict[str, Any]:
    r = subprocess.run([sys.executable, RUNNER, store, web.url(0, "/"), "--spider", spider,
                        "--hosts", str(web.spec.hosts), "--settings", json.dumps(settings)],
                       capture_output=True, text=True, timeout=timeout, cwd=cwd,
                       env={**os.environ, **(env or {})})
    assert r.returncode == 0, r.stderr[-3000:]
    stats: dict[str, Any] = json.loads(r.stdout.strip().splitlines()[-1])
    stats["_log"] = r.stderr
    return stats


def fetched(web: TestWeb) -> Counter[tuple[str, str]]:
    return Counter(pages(web))


def test_a_multi_domain_site_is_crawled_completely_once(tmp_path: Path) -> None:
    spec = SiteSpec(hosts=4, pages=25, special_links=False)
    with serve(spec) as web:
        stats = run_spider(f"sqlite:///{tmp_path}/f.db", web)
        got = fetched(web)
    assert set(got) == reachable(spec, web.port) and set(got.values()) == {1}
    assert stats["finish_reason"] == "finished"
    n = len(got)
    assert stats["scheduler/enqueued/crawlq"] == stats["scheduler/dequeued/crawlq"] == n
    assert stats["dupefilter/filtered"] > n  # the site links back and forth a lot
    with Frontier.open(f"sqlite:///{tmp_path}/f.db") as f:
        s = f.stats()
    assert (s.done, s.queued, s.leased, s.dead) == (n, 0, 0, 0)
    assert s.queues_total == 4


def test_previous_scrapy_minor_release_works_too(tmp_path: Path) -> None:
    assert (PREVIOUS_SCRAPY / "scrapy").is_dir(), (
        "Scrapy's previous minor release is missing: scripts/test.sh installs it in "
        f"{PREVIOUS_SCRAPY}")
    spec = SiteSpec(hosts=3, pages=10, special_links=False)
    with serve(spec) as web:
        stats = run_spider(f"sqlite:///{tmp_path}/f.db", web,
                           env={"PYTHONPATH": str(PREVIOUS_SCRAPY)})
        got = fetched(web)
    assert "Scrapy 2.18." in stats["_log"]  # really the previous release
    assert set(got) == reachable(spec, web.port) and set(got.values()) == {1}


def test_sigkilled_spider_resumes_and_loses_nothing(tmp_path: Path) -> None:
    """kill -9 the spider process several times; the same command finishes the crawl,
    fetching again only what was in flight."""
    spec = SiteSpec(hosts=4, pages=40, special_links=False, latency=0.02)
    store = f"sqlite:///{tmp_path}/f.db"
    # The dead process's leases come back after 2 s; a polite 0.1 s per host.
    settings: dict[str, Any] = {"CRAWLQ_OPTIONS": {"lease_ttl": 2}, "DOWNLOAD_DELAY": 0.1}
    rng = random.Random(5)
    with serve(spec) as web:
        cmd = [sys.executable, RUNNER, store, web.url(0, "/"), "--hosts", "4",
               "--settings", json.dumps(settings)]
        kills = 0
        for _ in range(3):
            before = len(web.hits())
            p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            # Kill it mid-crawl: once it has fetched a few pages, at a random moment.
            deadline = time.monotonic() + 60
            while len(web.hits()) < before + 5 and p.poll() is None \
                    and time.monotonic() < deadline:
                time.sleep(0.02)
            time.sleep(rng.uniform(0.0, 0.5))
            if p.poll() is not None:
                break
            p.send_signal(signal.SIGKILL)
            p.wait()
            kills += 1
        assert kills >= 2, "the crawl finished before it could be killed twice"
        assert len(fetched(web)) > 0
        stats = run_spider(store, web, **settings)
        got = fetched(web)
    assert stats["finish_reason"] == "finished"
    assert set(got) == reachable(spec, web.port)                 # nothing lost
    # The start request (dont_filter=True, as Scrapy makes it) is fetched by every run,
    # as with Scrapy's JOBDIR; the links are not.
    start = ("site0.crawlq.test", "/")
    assert got[start] == kills + 1
    extra = sum(n - 1 for page, n in got.items() if page != start)
    # Only requests in flight at a kill are fetched twice: at most 8 per kill (the
    # leased batch), here CONCURRENT_REQUESTS_PER_DOMAIN (2) x 4 hosts.
    assert extra <= kills * 8, (extra, kills)
    with Frontier.open(store) as f:
        s = f.stats()
    # Every page once, and the start page once more per restart, each acknowledged once.
    assert s.finished and s.dead == 0 and s.done == s.added == len(got) + kills


def test_two_spider_processes_share_one_redis_crawl(redis_server: LocalRedis) -> None:
    # Long enough (60 pages a host, 0.05 s apart: at least 3 s) that the second process
    # is up before the first one could finish alone, however the two start-ups skew.
    spec = SiteSpec(hosts=4, pages=60, special_links=False, latency=0.02)
    store = f"{redis_server.url}?prefix=scrapy-shared"
    with serve(spec) as web:
        cmd = [sys.executable, RUNNER, store, web.url(0, "/"), "--hosts", "4",
               "--settings", json.dumps({"DOWNLOAD_DELAY": 0.05,
                                         "RANDOMIZE_DOWNLOAD_DELAY": False})]
        procs = [subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  text=True) for _ in range(2)]
        outs = [p.communicate(timeout=180) for p in procs]
        got = fetched(web)
    for p, (_, err) in zip(procs, outs):
        assert p.returncode == 0, err[-3000:]
    stats = [json.loads(out.strip().splitlines()[-1]) for out, _ in outs]
    assert all(s["finish_reason"] == "finished" for s in stats)
    # Each process fetches its start request (dont_filter=True); every link once.
    start = ("site0.crawlq.test", "/")
    assert set(got) == reachable(spec, web.port) and got[start] == 2
    assert {n for page, n in got.items() if page != start} == {1}
    by = [s.get("scheduler/dequeued/crawlq", 0) for s in stats]
    assert min(by) > 0 and sum(by) == sum(got.values())          # both took part


@pytest.mark.parametrize("background", [True, False])
def test_a_redis_crawl_with_and_without_the_worker_thread(redis_server: LocalRedis,
                                                         background: bool) -> None:
    """On a store on a server the scheduler sends and leases ahead from a worker thread
    (CRAWLQ_BACKGROUND, on by default there); with it or without, every page once."""
    spec = SiteSpec(hosts=3, pages=40, special_links=False)
    store = f"{redis_server.url}?prefix=scrapy-bg-{background}"
    with serve(spec) as web:  # (the default on Redis: the worker thread)
        stats = (run_spider(store, web) if background
                 else run_spider(store, web, CRAWLQ_BACKGROUND=False))
        got = fetched(web)
    assert set(got) == reachable(spec, web.port) and set(got.values()) == {1}
    assert stats["finish_reason"] == "finished"
    assert stats["scheduler/enqueued/crawlq"] == stats["scheduler/dequeued/crawlq"] == len(got)
    calls = stats.get("crawlq/background_calls", 0)
    assert (calls > 10) if background else (calls == 0), calls


def test_priorities_are_honored_within_a_host(tmp_path: Path) -> None:
    spec = SiteSpec(hosts=2, pages=12, special_links=False)
    with serve(spec) as web:
        run_spider(f"sqlite:///{tmp_path}/f.db", web, spider="priorities",
                   CONCURRENT_REQUESTS_PER_DOMAIN=1, DOWNLOAD_DELAY=0.05)
        order = [h.path for h in web.hits() if h.host.startswith("site1")]
    assert order == [f"/page/{p}" for p in range(9, -1, -1)]


def test_unserializable_requests_are_kept_in_memory_dropped_or_raised(tmp_path: Path) -> None:
    spec = SiteSpec(hosts=1, pages=5, special_links=False)
    with serve(spec) as web:
        # By default, as Scrapy's scheduler with a JOBDIR: kept in this process's memory.
        stats = run_spider(f"sqlite:///{tmp_path}/f.db", web, spider="bad")
        assert sorted(h.path for h in web.hits()) == ["/", "/page/1", "/page/2"]
        assert stats["scheduler/unserializable"] == 1
        assert stats["scheduler/enqueued/memory"] == 1
        assert "cannot serialize" in stats["_log"]
        n = len(web.hits())
        stats = run_spider(f"sqlite:///{tmp_path}/d.db", web, spider="bad",
                           CRAWLQ_UNSERIALIZABLE="drop")
        assert sorted(h.path for h in web.hits()[n:]) == ["/", "/page/2"]
        assert stats["scheduler/unserializable"] == 1 and "dropped" in stats["_log"]
        failing = subprocess.run(
            [sys.executable, RUNNER, f"sqlite:///{tmp_path}/g.db", web.url(0, "/"),
             "--spider", "bad", "--hosts", "1", "--settings",
             json.dumps({"CRAWLQ_UNSERIALIZABLE": "fail"})],
            capture_output=True, text=True, timeout=120)
    assert "ValueError" in failing.stderr  # raised where the spider yielded it


def test_a_memory_store_keeps_requests_live_as_scrapy_does() -> None:
    """On memory:// (the default store) nothing is serialized: a request with a lambda
    callback goes through the frontier like any other, and is fetched."""
    spec = SiteSpec(hosts=1, pages=5, special_links=False)
    with serve(spec) as web:
        stats = run_spider("-", web, spider="bad")
        assert sorted(h.path for h in web.hits()) == ["/", "/page/1", "/page/2"]
    assert "scheduler/unserializable" not in stats and "cannot serialize" not in stats["_log"]
    assert stats["scheduler/enqueued/crawlq"] == stats["scheduler/dequeued/crawlq"] == 3
    assert stats["finish_reason"] == "finished"


def test_a_durable_store_hands_back_the_live_requests_this_process_added(
        tmp_path: Path) -> None:
    """On SQLite every request is serialized (another process, or this one after a
    crash, reads that copy), yet the process that added a request gets the very object
    back, as from Scrapy's memory queues: up to CRAWLQ_LIVE_CACHE of them, the oldest
    then read back from the store. Every page is fetched once either way."""
    spec = SiteSpec(hosts=2, pages=30, special_links=False)
    with serve(spec) as web:
        runs = {}
        for cache in (10_000, 3, 0):
            n = len(web.hits())
            runs[cache] = run_spider(f"sqlite:///{tmp_path}/l{cache}.db", web, spider="live",
                                     CRAWLQ_LIVE_CACHE=cache)
            got = Counter((h.host, h.path) for h in web.hits()[n:])
            assert set(got) == reachable(spec, web.port) and set(got.values()) == {1}
    pages_ = len(reachable(spec, web.port))
    everything, few, none = runs[10_000], runs[3], runs[0]
    # (the start request comes from start_urls: not a MarkedRequest, unmarked either way)
    assert everything.get("got/rebuilt", 0) == 1
    assert everything["got/live"] == pages_ - 1
    assert none.get("got/live", 0) == 0 and none["got/rebuilt"] == pages_
    assert 0 < few["got/live"] < pages_ - 1 and few["got/rebuilt"] > 1
    bad = subprocess.run([sys.executable, RUNNER, f"sqlite:///{tmp_path}/bad.db",
                          "http://site0.crawlq.test:1/", "--spider", "live", "--settings",
                          json.dumps({"CRAWLQ_LIVE_CACHE": -1})],
                         capture_output=True, text=True, timeout=120)
    assert "ConfigError: CRAWLQ_LIVE_CACHE must be >= 0, not -1" in bad.stderr


@pytest.mark.parametrize("fingerprints", ["crawlq", "scrapy"])
def test_fingerprint_choice(tmp_path: Path, fingerprints: str) -> None:
    spec = SiteSpec(hosts=2, pages=8, special_links=False)
    with serve(spec) as web:
        stats = run_spider(f"sqlite:///{tmp_path}/f.db", web, CRAWLQ_FINGERPRINT=fingerprints)
        got = fetched(web)
    assert set(got.values()) == {1} and stats["dupefilter/filtered"] > 0


def test_politeness_settings_map_onto_the_frontier_policy() -> None:
    from scrapy.exceptions import ScrapyDeprecationWarning
    from scrapy.settings import Settings

    from crawlq.contrib.scrapy import frontier_options, slot_overrides

    # A lease lasts download and callback: twice the slot's downloads may be leased,
    # and a lease batch (CONCURRENT_REQUESTS, 16 by default) besides.
    assert frontier_options(Settings({"CONCURRENT_REQUESTS_PER_DOMAIN": 4})) == {
        "concurrency": 8 + 16, "min_delay": 0.0, "max_delay": 0.0, "delay_factor": 0.0,
        "lifo": True}  # Scrapy's default memory queue is LIFO
    assert frontier_options(Settings({
        "SCHEDULER_MEMORY_QUEUE": "scrapy.squeues.FifoMemoryQueue"}))["lifo"] is False
    # A delay with Scrapy's default jitter (±50%), one request at a time.
    polite = frontier_options(Settings({"DOWNLOAD_DELAY": 2.0}))
    assert polite == {"concurrency": 1, "min_delay": 1.0, "max_delay": 3.0,
                      "delay_factor": 1.0, "lifo": True}
    fixed = frontier_options(Settings({"DOWNLOAD_DELAY": 2.0, "DOWNLOAD_DELAY_JITTER": 0}))
    assert (fixed["min_delay"], fixed["max_delay"]) == (2.0, 2.0)
    auto = frontier_options(Settings({"AUTOTHROTTLE_ENABLED": True,
                                      "AUTOTHROTTLE_TARGET_CONCURRENCY": 2.0,
                                      "AUTOTHROTTLE_MAX_DELAY": 30.0}))
    assert (auto["delay_factor"], auto["max_delay"]) == (0.5, 30.0)
    with warnings.catch_warnings():
        # (Scrapy 2.19 deprecated the setting; it still takes it, and so do we)
        warnings.simplefilter("ignore", ScrapyDeprecationWarning)
        per_ip = frontier_options(Settings({"CONCURRENT_REQUESTS_PER_IP": 3,
                                            "CRAWLQ_OPTIONS": {"lease_ttl": 60}}))
    assert (per_ip["concurrency"], per_ip["lease_ttl"]) == (6 + 16, 60)
    assert frontier_options(Settings({"CRAWLQ_LEASE_BATCH": 5}))["concurrency"] == 16 + 5
    slots = slot_overrides(Settings({"DOWNLOAD_SLOTS": {
        "big.example": {"delay": 0.5}, "fast.example": {"concurrency": 16},
        "jittery.example": {"delay": 1.0, "jitter": 0.2}},
        "DOWNLOAD_DELAY_JITTER": 0}))
    assert slots["big.example"] == {"concurrency": 1, "min_delay": 0.5, "max_delay": 0.5,
                                    "delay_factor": 0.0}
    assert slots["fast.example"]["concurrency"] == 32 + 16
    assert (slots["jittery.example"]["min_delay"], slots["jittery.example"]["max_delay"]) \
        == (0.8, 1.2)


def test_priority_bands_keep_scrapy_order_and_start_request_order() -> None:
    from scrapy.settings import Settings

    from crawlq.contrib.scrapy import frontier_priority, scrapy_priority
    from crawlq.contrib.scrapy.codec import BAND, SCRAPY_PRIORITY_MAX
    from crawlq.contrib.scrapy.config import start_order

    for p in (-SCRAPY_PRIORITY_MAX, -3, -1, 0, 1, 7, SCRAPY_PRIORITY_MAX):
        other = frontier_priority(p, None)
        starts = [frontier_priority(p, r) for r in (0, 1, BAND - 2, BAND + 5, -4)]
        assert scrapy_priority(other) == p and {scrapy_priority(x) for x in starts} == {p}
        assert all(x < other for x in starts)  # at one priority the others go first
        assert frontier_priority(p + 1, 0) > other if p < SCRAPY_PRIORITY_MAX else True
    assert frontier_priority(10**9, None) == frontier_priority(SCRAPY_PRIORITY_MAX, None)
    assert frontier_priority(-(10**9), 0) >= -(2**31 - 1)
    assert start_order(Settings()) == "fifo"  # Scrapy's default start queue
    assert start_order(Settings({
        "SCHEDULER_START_MEMORY_QUEUE": "scrapy.squeues.LifoMemoryQueue"})) == "lifo"
    assert start_order(Settings({"SCHEDULER_START_MEMORY_QUEUE": None})) is None


def test_what_scrapy_users_rely_on(tmp_path: Path) -> None:
    """Retries of start requests, dont_filter, data: and unknown schemes, robots.txt,
    download slots, dedup and failures, with a real spider and RetryMiddleware on."""
    spec = SiteSpec(hosts=1, pages=5, special_links=False)
    store = f"sqlite:///{tmp_path}/f.db"
    with serve(spec) as web:
        stats = run_spider(store, web, spider="semantics", ROBOTSTXT_OBEY=True,
                           RETRY_ENABLED=True, RETRY_TIMES=1, RETRY_HTTP_CODES=[503, 500],
                           HTTPERROR_ALLOWED_CODES=[])
        got = fetched(web)
    host = "site0.crawlq.test"
    assert got[(host, "/unavailable")] == 2 and stats["got/retried"] == 1
    assert stats["got/data"] == 1                                  # data: reached Scrapy
    assert stats["err/weird"] == 1                                 # the downloader said no
    assert (host, "/private/x") not in got and stats["err/robots"] == 1
    assert stats["got/slot"] == 1
    assert got[(host, "/page/2")] == 1 and stats["got/dup"] == 1
    assert got[(host, "/page/3")] == 2 and stats["got/dont_filter"] == 2
    # A 500 after its retry is a response (HttpErrorMiddleware hands it to the errback):
    # fetched, so done; a download error after its retries is a failure.
    assert got[(host, "/error")] == 2 and stats["err/error"] == 1
    assert stats["err/refused"] == 1 and "got/refused" not in stats
    # Honest accounting: a duplicate is a duplicate in both counts; robots.txt's refusal
    # is not a failure; the failure is kept as dead with its real error.
    assert stats["dupefilter/filtered"] == 1
    assert stats["crawlq/ignored"] == 1 and stats["crawlq/failed"] == 1
    assert stats["crawlq/memory/scheme"] == 2
    with Frontier.open(store) as f:
        s = f.stats()
        keys = {q.key for q in f.queues()}
        (dead,) = f.dead()
    assert s.duplicates == stats["dupefilter/filtered"]
    assert s.dead == 1 and dead.request.url.endswith(":1/")
    assert "ConnectionRefused" in dead.error, dead.error
    assert "my-slot" in keys and host in keys                     # the slot is the queue


def test_a_custom_dupefilter_is_called_as_scrapy_calls_it(tmp_path: Path) -> None:
    spec = SiteSpec(hosts=1, pages=5, special_links=False)
    with serve(spec) as web:
        stats = run_spider(f"sqlite:///{tmp_path}/f.db", web, spider="semantics",
                           DUPEFILTER_CLASS="scrapy.dupefilters.BaseDupeFilter")
        got = fetched(web)
    assert got[("site0.crawlq.test", "/page/2")] == 2 and stats["got/dup"] == 2
    assert "dupefilter/filtered" not in stats


@pytest.mark.parametrize("debug", [False, True])
def test_duplicates_are_logged_and_counted_as_scrapys_dupefilter_does(
        tmp_path: Path, debug: bool) -> None:
    # RFPDupeFilter logs the first duplicate (or, with DUPEFILTER_DEBUG, each one) and
    # counts them all in dupefilter/filtered; the scheduler gathers the count into
    # Scrapy's stats a batch at a time, and the total at close must be exact.
    spec = SiteSpec(hosts=2, pages=20, special_links=False)
    with serve(spec) as web:
        stats = run_spider(f"sqlite:///{tmp_path}/f.db", web, LOG_LEVEL="DEBUG",
                           DUPEFILTER_DEBUG=debug)
        got = fetched(web)
    lines = [line for line in stats["_log"].splitlines() if "Filtered duplicate" in line]
    filtered = stats["dupefilter/filtered"]
    assert filtered > len(got) and set(got.values()) == {1}
    assert len(lines) == (filtered if debug else 1)
    assert stats["scheduler/dequeued"] == stats["scheduler/dequeued/crawlq"] == len(got)
    with Frontier.open(f"sqlite:///{tmp_path}/f.db") as f:
        assert f.stats().duplicates == filtered


@pytest.mark.parametrize("freeze", [True, False])
def test_the_heap_is_frozen_for_the_crawl_and_given_back_at_close(
        tmp_path: Path, freeze: bool) -> None:
    # CRAWLQ_GC_FREEZE (default on): the objects alive when the spider opens are left
    # out of the collector's full collections during the crawl, and given back after.
    spec = SiteSpec(hosts=2, pages=5, special_links=False)
    with serve(spec) as web:
        stats = run_spider(f"sqlite:///{tmp_path}/f.db", web, CRAWLQ_GC_FREEZE=freeze)
        got = fetched(web)
    assert set(got) == reachable(spec, web.port) and set(got.values()) == {1}
    if freeze:
        assert stats["test/gc_frozen"] > 10_000  # Scrapy's modules, crawler, engine...
    else:
        assert stats["test/gc_frozen"] == 0
    assert stats["test/gc_frozen_after"] == 0


def test_a_process_that_froze_its_own_heap_is_left_alone() -> None:
    import gc

    from crawlq.contrib.scrapy.scheduler import freeze_heap, thaw_heap

    assert gc.get_freeze_count() == 0
    assert freeze_heap() and gc.get_freeze_count() > 0
    assert freeze_heap()  # a second scheduler of the process
    thaw_heap()
    assert gc.get_freeze_count() > 0  # the first one is still open
    thaw_heap()
    assert gc.get_freeze_count() == 0
    gc.freeze()  # the process's own (e.g. before forking workers)
    try:
        frozen = gc.get_freeze_count()
        assert not freeze_heap() and gc.get_freeze_count() == frozen
    finally:
        gc.unfreeze()


def test_persistence_the_scrapy_way(tmp_path: Path) -> None:
    """No store and no JOBDIR: fresh every run, nothing written. JOBDIR: the crawl lives
    there and resumes. CRAWLQ_FLUSH_ON_START / CRAWLQ_PERSIST: as scrapy-redis'."""
    spec = SiteSpec(hosts=2, pages=6, special_links=False)
    work = tmp_path / "cwd"
    work.mkdir()
    with serve(spec) as web:
        n = len(reachable(spec, web.port))
        for _ in range(2):
            before = len(web.hits())
            stats = run_spider("-", web, cwd=work)
            assert len(web.hits()) - before == n and "a new crawl in memory://" in stats["_log"]
        assert list(work.iterdir()) == []

        jobdir = tmp_path / "job"
        before = len(web.hits())
        stats = run_spider("-", web, JOBDIR=str(jobdir))
        assert len(web.hits()) - before == n and (jobdir / "crawlq.db").is_file()
        before = len(web.hits())
        stats = run_spider("-", web, JOBDIR=str(jobdir))   # finished: only the start page
        assert [h.path for h in web.hits()[before:]] == ["/"]
        assert "resuming the crawl in sqlite:///" in stats["_log"]

        store = f"sqlite:///{tmp_path}/kept.db"
        run_spider(store, web)
        before = len(web.hits())
        run_spider(store, web, CRAWLQ_FLUSH_ON_START=True)
        assert len(web.hits()) - before == n
        run_spider(store, web, CRAWLQ_PERSIST=False)
        assert not (tmp_path / "kept.db").exists()


@pytest.mark.parametrize("fingerprints", ["crawlq", "scrapy"])
def test_a_shared_feed_from_other_producers(redis_server: LocalRedis,
                                            fingerprints: str) -> None:
    """URLs another producer adds to the store (here the CLI and the Python API) reach
    the spider's parse."""
    spec = SiteSpec(hosts=1, pages=5, special_links=False)
    store = f"{redis_server.url}?prefix=scrapy-feed-{fingerprints}"
    with serve(spec) as web:
        r = subprocess.run([sys.executable, "-m", "crawlq.cli", "--store", store, "add",
                            web.url(0, "/page/4")], capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        with Frontier.open(store) as f:
            f.add(Request(web.url(0, "/orphan/1"), meta={"source": "api"}))
        stats = run_spider(store, web, spider="semantics", CRAWLQ_FINGERPRINT=fingerprints)
        got = fetched(web)
    assert stats["got/fed"] == 2 and stats["got/fed-with-meta"] == 1
    assert got[("site0.crawlq.test", "/page/4")] == 1
    assert got[("site0.crawlq.test", "/orphan/1")] == 1
    assert "crawlq/unrestorable" not in stats
