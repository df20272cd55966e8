"""A crawl whose disk fills (the store's, the output's) or whose Redis refuses writes
loses nothing: a page is acknowledged only once its record and its links are durable,
so the same command run again, with room, finds every page of the site.

The filesystems are real: a tmpfs mounted for the test (the test command runs as
root, as the Redis and Chromium tests assume), filled and freed while a crawl runs.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from hostile_web import NOT_FOUND, Answer, Hit, HostileWeb, page_with_links, serve_routes

from crawlq import AsyncFrontier, Request
from crawlq.crawler import CrawlConfig, Crawler
from crawlq.crawler.config import Summary
from crawlq.crawler.discover import Links
from crawlq.crawler.scope import Scope
from crawlq.errors import StoreError, StoreFull
from crawlq.testing.redis_server import LocalRedis

TREE = 1111  # a tree of ten children per page: 1 + 10 + 100 + 1000 pages


def tree_page(hit: Hit) -> Answer:
    """``/n/<i>`` links to its ten children: losing one page's links loses a subtree."""
    if not hit.path.startswith("/n/"):
        return NOT_FOUND
    i = int(hit.path[3:])
    return page_with_links(str(i), [f"/n/{c}" for c in range(i * 10 + 1, i * 10 + 11)
                                    if c < TREE])


@pytest.fixture
def tree() -> Iterator[HostileWeb]:
    with serve_routes({}, fallback=tree_page) as web:
        yield web


def every_page(web: HostileWeb) -> set[str]:
    return {web.url("tree.test", f"/n/{i}") for i in range(TREE)}


@pytest.fixture
def small_fs(tmp_path: Path) -> Iterator[Path]:
    """A real tmpfs of 8 MiB at a folder of its own (root is needed to mount it): small,
    as a store must work on a small disk once it has room again (its WAL kept small)."""
    where = tmp_path / "fs"
    where.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs",
                              str(where)], capture_output=True, text=True)
    assert mounted.returncode == 0, (
        f"cannot mount a tmpfs (the full-disk tests need root): {mounted.stderr}")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


def fill(where: Path) -> Path:
    """Fill the filesystem of ``where`` to the last byte; returns the filler file."""
    filler = where / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT)
    block = b"\0" * 65536
    try:
        while True:
            os.write(fd, block)
    except OSError:
        pass
    try:
        while True:
            os.write(fd, b"\0")
    except OSError:
        pass
    finally:
        os.close(fd)
    return filler


def config(web: HostileWeb, store: str, out: Path, **more: object) -> CrawlConfig:
    return CrawlConfig(seeds=[web.url("tree.test", "/n/0")], store=store, out=str(out),
                       resolve={"*.test": "127.0.0.1"}, allow_private=True,
                       min_delay=0.0, max_delay=0.0, delay_factor=0.0, per_host=4,
                       lease_ttl=2.0, **more)  # type: ignore[arg-type]


def urls_in(path: Path) -> list[str]:
    return [json.loads(line)["url"] for line in path.read_text().splitlines()]


def test_links_stay_buffered_while_the_store_disk_is_full(small_fs: Path) -> None:
    """Links whose add failed are kept, and offered again by the next flush."""
    store = f"sqlite:///{small_fs}/frontier.db"

    async def go() -> None:
        async with await AsyncFrontier.open(store) as frontier:
            await frontier.add(["http://a.test/"])
            summary = Summary()
            links = Links(Scope(["a.test"], [], [], None), summary)
            found = [f"http://a.test/{i}/" + "x" * 200 for i in range(3000)]
            links.follow(frontier, found, 1, "http://a.test/")
            filler = fill(small_fs)
            with pytest.raises(StoreFull):
                await links.flush(frontier)
            filler.unlink()
            await links.flush(frontier)
            assert summary.links_added == len(found)
            assert (await frontier.stats()).queued == len(found) + 1

    asyncio.run(go())


def test_a_store_disk_that_fills_mid_crawl_loses_no_page(tree: HostileWeb, small_fs: Path,
                                                          tmp_path: Path) -> None:
    """The store's disk fills while pages are being written and their links added, and
    space comes back a moment later (another program freed it): the crawl stops or
    goes on, but a page whose links did not reach the store is never acknowledged."""
    out = tmp_path / "pages.jsonl"
    store = f"sqlite:///{small_fs}/frontier.db"
    for at in (15, 120):  # (twice: the fill lands on different calls)
        seen = 0

        def page(req: Request, resp: object, at: int = at) -> None:
            nonlocal seen
            seen += 1
            if seen == at:
                filler = fill(small_fs)
                threading.Timer(0.2, filler.unlink).start()

        try:
            asyncio.run(Crawler(config(tree, store, out), events={"page": page}).run())
        except StoreError as exc:
            assert "full" in str(exc)
    rerun = subprocess.run(
        [sys.executable, "-m", "crawlq.cli", "crawl", tree.url("tree.test", "/n/0"),
         "--store", store, "--out", str(out), "--resolve", "*.test=127.0.0.1",
         "--allow-private", "--min-delay", "0", "--max-delay", "0", "--delay-factor", "0",
         "--per-host", "4", "--lease-ttl", "2", "--progress", "0"],
        capture_output=True, text=True, timeout=120)
    assert rerun.returncode == 0, rerun.stderr
    assert set(urls_in(out)) == every_page(tree)


def test_a_full_output_disk_stops_the_crawl_and_the_rerun_writes_every_page(
        tree: HostileWeb, small_fs: Path, tmp_path: Path) -> None:
    out = small_fs / "pages.jsonl"
    cmd = [sys.executable, "-m", "crawlq.cli", "crawl", tree.url("tree.test", "/n/0"),
           "--state", str(tmp_path / "state"), "--out", str(out),
           "--resolve", "*.test=127.0.0.1", "--allow-private", "--min-delay", "0",
           "--max-delay", "0", "--delay-factor", "0", "--per-host", "4",
           "--lease-ttl", "2", "--progress", "0"]
    filler = small_fs / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT)
    os.write(fd, b"\0" * (os.statvfs(small_fs).f_bavail * os.statvfs(small_fs).f_frsize
                          - 40_000))  # room for a hundred records or so
    os.close(fd)
    full = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert full.returncode == 2, full.stderr
    errors = [ln for ln in full.stderr.splitlines() if ln.startswith("crawlq: error:")]
    assert len(errors) == 1 and "No space left on device" in errors[0], full.stderr
    assert "Traceback" not in full.stderr
    # (its last record may be torn: the next run cuts it off)
    assert 0 < out.read_text().count("\n") < TREE
    filler.unlink()
    again = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert again.returncode == 0, again.stderr
    assert set(urls_in(out)) == every_page(tree)


def test_redis_refusing_writes_stops_the_crawl_and_the_rerun_fetches_every_page(
        tree: HostileWeb, tmp_path: Path) -> None:
    """``maxmemory`` with ``noeviction``: Redis refuses writes (OOM) once it is full."""
    import redis

    with LocalRedis(tmp_path / "redis", extra=("--maxmemory-policy", "noeviction")) as server:
        client = redis.Redis.from_url(server.url)
        out = tmp_path / "pages.jsonl"
        store = server.url + "?prefix=tree"
        seen = 0

        def page(req: Request, resp: object) -> None:
            nonlocal seen
            seen += 1
            if seen == 30:  # full from now on: every write refused
                used = int(client.info("memory")["used_memory"])
                client.config_set("maxmemory", used)

        with pytest.raises(StoreFull, match="maxmemory"):
            asyncio.run(Crawler(config(tree, store, out), events={"page": page}).run())
        assert len(urls_in(out)) < TREE
        client.config_set("maxmemory", 0)
        asyncio.run(Crawler(config(tree, store, out)).run())
        assert set(urls_in(out)) == every_page(tree)
