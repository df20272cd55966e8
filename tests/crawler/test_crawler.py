"""The crawler against the local test web: real HTTP on 127.0.0.1, real frontier."""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

from crawlq import Frontier
from crawlq.crawler import CrawlConfig, Crawler, Summary
from crawlq.testing.redis_server import LocalRedis
from crawlq.testing.web import SiteSpec, TestWeb, pages, reachable, serve

LOCAL: dict[str, Any] = {"resolve": {"*.crawlq.test": "127.0.0.1"}, "allow_private": True,
                         "allow_domains": ["crawlq.test"]}
FAST: dict[str, Any] = {"min_delay": 0.0, "max_delay": 0.0, "delay_factor": 0.0}


def crawl(web: TestWeb, **options: Any) -> Summary:
    seeds = options.pop("seeds", [web.url(0, "/")])
    config = CrawlConfig(seeds=seeds, **{**LOCAL, **options})
    return asyncio.run(Crawler(config).run())


def test_every_reachable_page_once_and_robots_once_per_host() -> None:
    spec = SiteSpec(hosts=3, pages=15, special_links=False)
    with serve(spec) as web:
        s = crawl(web, **FAST, concurrency=6)
        fetched = pages(web)
        assert s.finished
        assert Counter(fetched).most_common(1)[0][1] == 1          # nothing twice
        assert set(fetched) == reachable(spec, web.port)           # nothing missed
        robots = Counter(h.host for h in web.hits() if h.path == "/robots.txt")
        assert set(robots.values()) == {1} and len(robots) == len({h for h, _ in fetched})
        assert s.fetched == len(fetched)


def test_politeness_per_host_spacing() -> None:
    spec = SiteSpec(hosts=2, pages=6, links=2, cross_links=1, special_links=False,
                    crawl_delay={})
    with serve(spec) as web:
        crawl(web, min_delay=0.15, max_delay=0.15, delay_factor=0.0, concurrency=8)
        for host in spec.host_names():
            times = sorted(h.at for h in web.hits(host) if h.path != "/robots.txt")
            gaps = [b - a for a, b in itertools.pairwise(times)]
            assert len(times) > 3 and min(gaps) >= 0.14, (host, gaps)


def test_robots_rules_traps_redirects_and_backoff(tmp_path: Path) -> None:
    spec = SiteSpec(hosts=3, pages=12, slow_seconds=0.05, big_bytes=100_000)
    out = tmp_path / "pages.jsonl"
    store = f"sqlite:///{tmp_path}/frontier.db"
    with serve(spec) as web:
        # (max_delay 0.5: a Crawl-delay is kept within [min_delay, max_delay])
        s = crawl(web, **{**FAST, "max_delay": 0.5}, concurrency=6, max_per_host=40,
                  max_retries=1, retry_backoff=0.2, out=str(out), store=store)
        hits = web.hits()
        assert s.finished
        # robots.txt: /private/ is off limits where robots.txt says so (site2 has none)
        assert not [h for h in hits if h.path.startswith("/private/")
                    and h.host != spec.host(2)]
        assert [h for h in hits if h.path.startswith("/private/") and h.host == spec.host(2)]
        assert s.robots_denied > 0
        with Frontier.open(store) as f:  # counted in the store too, with its reason
            assert f.stats().rejected["robots-denied"] == s.robots_denied
        # Crawl-delay 0.2 on site1
        t1 = sorted(h.at for h in web.hits(1) if h.path != "/robots.txt")
        assert min(b - a for a, b in itertools.pairwise(t1)) >= 0.19
        # the calendar trap stopped at the per-host budget
        assert s.out_of_scope["queue-budget"] > 0
        # (40 accepted URLs + robots.txt; retries repeat a path, not add one)
        assert all(len({h.path for h in web.hits(i)}) <= 40 + 1 for i in range(3))
        # nofollow, off-domain and private redirect targets were never requested
        assert not [h for h in hits if "ref=nofollow" in h.path]
        assert {h.host for h in hits} <= set(spec.host_names())
        assert s.out_of_scope["off-domain"] > 0
        # 429 / 503 with Retry-After: 2 -> the same path again, at least 2 s later
        for path in ("/ratelimited", "/unavailable"):
            for i in range(3):
                times = [h.at for h in web.hits(i) if h.path == path]
                if times:
                    assert len(times) == 2 and times[1] - times[0] >= 1.9
        # a 500 is retried max_retries times, then given up
        assert Counter(h.path for h in web.hits(0))["/error"] == 2
    records = [json.loads(line) for line in out.read_text().splitlines()]
    titles = {r["url"].split("/", 3)[3]: r["title"] for r in records}
    assert titles.get("latin1") == "Café crème à Zürich"
    assert titles.get("meta-charset") == "日本語のページ"
    assert titles.get("broken") == "broken"
    big = next(r for r in records if r["url"].endswith("/big"))
    assert big["length"] >= 90_000 and big["status"] == 200
    gz = next(r for r in records if r["url"].endswith("/gzip"))
    assert gz["title"] == "gzipped"
    assert {"url", "final_url", "status", "headers", "fetched_at", "depth", "referrer",
            "content_type", "length", "sha1", "title", "outlinks"} <= set(records[0])


def test_private_addresses_are_refused_by_default() -> None:
    with serve(SiteSpec(hosts=1, pages=3)) as web:
        s = crawl(web, **{**FAST, "allow_private": False})
        assert s.blocked["private-address"] == 1 and s.fetched == 0
        assert web.hits() == []


def test_a_response_with_huge_headers_is_a_counted_failure(tmp_path: Path) -> None:
    from crawlq import Frontier

    store = f"sqlite:///{tmp_path}/frontier.db"
    spec = SiteSpec(hosts=1, pages=3, special_links=False)
    with serve(spec) as web:
        s = crawl(web, **FAST, store=store, max_retries=0,
                  seeds=[web.url(0, "/huge-header"), web.url(0, "/")])
        assert s.finished and sum(s.errors.values()) == 1
        assert set(pages(web)) >= reachable(spec, web.port)  # the rest of the crawl went on
    with Frontier.open(store) as frontier:
        [dead] = frontier.dead()
        assert dead.request.url.endswith("/huge-header") and "header" in dead.error.lower()


def test_a_stopped_crawl_resumes_without_refetching(tmp_path: Path) -> None:
    spec = SiteSpec(hosts=2, pages=10, special_links=False)
    store = f"sqlite:///{tmp_path}/frontier.db"
    with serve(spec) as web:
        first = crawl(web, **FAST, store=store, max_pages=7)
        assert first.fetched == 7 and not first.finished
        second = crawl(web, **FAST, store=store)
        assert second.finished
        fetched = pages(web)
        assert Counter(fetched).most_common(1)[0][1] == 1
        assert set(fetched) == reachable(spec, web.port)
        # robots.txt is kept in the store: the second run did not fetch it again
        robots = Counter(h.host for h in web.hits() if h.path == "/robots.txt")
        assert robots == {spec.host(0): 1, spec.host(1): 1}


def test_a_failing_event_hook_does_not_stop_the_crawl() -> None:
    calls: list[Any] = []  # "page" per page event, then the Summary at shutdown

    def bad(*args: Any) -> None:
        calls.append("page")
        raise RuntimeError("hook bug")

    with serve(SiteSpec(hosts=1, pages=5, special_links=False)) as web:
        config = CrawlConfig(seeds=[web.url(0, "/")], **LOCAL, **FAST)
        s = asyncio.run(Crawler(config, events={"page": bad, "shutdown": calls.append}).run())
        assert s.finished and calls.count("page") == s.fetched and calls[-1] is s


def test_demo_command(tmp_path: Path) -> None:
    r = subprocess.run([sys.executable, "-m", "crawlq.cli", "demo", "--hosts", "2",
                        "--pages", "8", "--out", str(tmp_path / "d.jsonl"),
                        "--state", str(tmp_path / "state")],
                       capture_output=True, text=True, timeout=120,
                       env={**os.environ, "PYTHONUNBUFFERED": "1"})
    assert r.returncode == 0, r.stderr
    assert "frontier empty" in r.stdout
    assert len((tmp_path / "d.jsonl").read_text().splitlines()) > 16
    assert (tmp_path / "state" / "frontier.db").exists()


def test_the_cli_reports_progress_and_a_summary(tmp_path: Path) -> None:
    spec = SiteSpec(hosts=3, pages=10, special_links=False, latency=0.05)
    with serve(spec) as web:
        r = subprocess.run(
            [sys.executable, "-m", "crawlq.cli", "crawl", web.url(0, "/"), "--state",
             str(tmp_path), "--allow-domain", "crawlq.test", "--allow-private",
             "--resolve", "*.crawlq.test=127.0.0.1", "--min-delay", "0.05", "--max-delay",
             "0.05", "--progress", "0.2"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    lines = [ln for ln in r.stderr.splitlines() if ln.startswith("pages ")]
    assert len(lines) >= 2, r.stderr
    m = re.match(r"pages (\d+)  [\d.]+/s  queued (\d+)  in flight (\d+)  hosts ready (\d+) "
                 r"busy (\d+) resting (\d+)  errors 0  0:00:\d\d$", lines[0])
    assert m, lines[0]
    assert int(lines[-1].split()[1]) >= int(m.group(1))  # pages only go up
    assert "fetched " in r.stdout and "frontier empty" in r.stdout


def test_warc_output_keeps_the_bytes_as_received(tmp_path: Path) -> None:
    import gzip

    from warcio.archiveiterator import ArchiveIterator

    spec = SiteSpec(hosts=1, pages=4, special_links=True, slow_seconds=0.01,
                    big_bytes=50_000)
    out = tmp_path / "crawl.warc.gz"
    with serve(spec) as web:
        s = crawl(web, **FAST, max_per_host=30, max_retries=0, out=str(out))
    with open(out, "rb") as f:
        records = [(r.rec_type, r.rec_headers.get_header("WARC-Target-URI"),
                    r.http_headers, r.raw_stream.read()) for r in ArchiveIterator(f)]
    kinds = Counter(k for k, *_ in records)
    # (and one robots.txt response, archived with its request)
    assert kinds["warcinfo"] == 1 and kinds["request"] == kinds["response"] == s.fetched + 1
    gz = next(r for r in records if r[0] == "response" and r[1].endswith("/gzip"))
    assert gz[2].get_header("Content-Encoding") == "gzip"
    assert gz[3][:2] == b"\x1f\x8b" and b"gzipped" in gzip.decompress(gz[3])  # as sent
    req = next(r for r in records if r[0] == "request" and r[1].endswith("/page/1"))
    assert (req[2].protocol, req[2].statusline) == ("GET", "/page/1 HTTP/1.1")
    assert req[2].get_header("Host") == f"{spec.host(0)}:{web.port}"


def test_decompression_bombs_are_cut() -> None:
    import gzip
    import zlib

    from crawlq.crawler.decode import DecodeError, decode

    bomb = gzip.compress(b"\0" * 50_000_000)
    body, truncated = decode(bomb, "gzip", 1_000_000)
    assert len(body) == 1_000_000 and truncated
    assert decode(zlib.compress(b"hello"), "deflate", 100) == (b"hello", False)
    raw_deflate = zlib.compressobj(wbits=-15)
    data = raw_deflate.compress(b"hi") + raw_deflate.flush()
    assert decode(data, "deflate", 100) == (b"hi", False)
    try:
        import brotli

        assert decode(brotli.compress(b"x" * 10_000_000), "br", 5000)[1] is True
    except ImportError:  # pragma: no cover
        pass
    import pytest

    with pytest.raises(DecodeError):
        decode(b"not gzip", "gzip", 100)
    with pytest.raises(DecodeError):
        decode(b"x", "compress", 100)


def test_sigkilled_crawls_resume_and_lose_nothing(tmp_path: Path) -> None:
    import random
    import signal
    import time

    spec = SiteSpec(hosts=3, pages=40, special_links=False, latency=0.03)
    store = f"sqlite:///{tmp_path}/frontier.db"
    rng = random.Random(3)
    with serve(spec) as web:
        cmd = [sys.executable, "-m", "crawlq.cli", "crawl", web.url(0, "/"), "--store", store,
               "--allow-domain", "crawlq.test", "--resolve", "*.crawlq.test=127.0.0.1",
               "--allow-private", "--min-delay", "0", "--max-delay", "0",
               "--delay-factor", "0", "--concurrency", "3", "--timeout", "1",
               "--parse-timeout", "0.5", "--lease-ttl", "2"]
        kills = 0
        for _ in range(4):
            p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            time.sleep(rng.uniform(0.4, 0.9))
            if p.poll() is not None:
                break
            p.send_signal(signal.SIGKILL)
            p.wait()
            kills += 1
        assert kills >= 2, "the crawl finished before it could be killed twice"
        final = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        assert final.returncode == 0, final.stderr
        assert "frontier empty" in final.stdout
        fetched = Counter(pages(web))
        assert set(fetched) == reachable(spec, web.port)          # nothing lost
        extra = sum(n - 1 for n in fetched.values())
        assert extra <= kills * 3, (extra, kills)                  # only in-flight ones


def test_rounds_revisit_pages() -> None:
    spec = SiteSpec(hosts=2, pages=6, special_links=False)
    starts: list[int] = []
    with serve(spec) as web:
        config = CrawlConfig(seeds=[web.url(0, "/")], **LOCAL, **FAST, rounds=3,
                             round_delay=0.3, revisit_after=0.2)
        s = asyncio.run(Crawler(config, events={"round_start": starts.append}).run())
        fetched = Counter(pages(web))
    assert starts == [1, 2, 3] and s.rounds == 3
    assert set(fetched.values()) == {3}                      # every page once per round
    assert set(fetched) == reachable(spec, web.port)


def test_a_round_stops_at_its_duration() -> None:
    spec = SiteSpec(hosts=1, pages=30, special_links=False, latency=0.05)
    with serve(spec) as web:
        config = CrawlConfig(seeds=[web.url(0, "/")], **LOCAL, **FAST, duration=0.5)
        s = asyncio.run(Crawler(config).run())
    assert not s.finished and 3 <= s.fetched < 25


def test_duration_parsing() -> None:
    import argparse

    import pytest

    from crawlq.cli.argtypes import duration

    assert [duration(x) for x in ("90", "90s", "10m", "2h", "1d", "0.5s")] == \
        [90, 90, 600, 7200, 86400, 0.5]
    for bad in ("ten", "-1s", "5x"):
        with pytest.raises(argparse.ArgumentTypeError):
            duration(bad)


def test_two_crawl_processes_share_one_redis_frontier(redis_server: LocalRedis) -> None:
    """`crawlq crawl --store redis://...` twice at once: one crawl, every page fetched
    once, and both processes end by themselves when nothing is left anywhere."""
    spec = SiteSpec(hosts=4, pages=30, special_links=False, latency=0.02)
    store = f"{redis_server.url}?prefix=crawl-shared"
    with serve(spec) as web:
        cmd = [sys.executable, "-m", "crawlq.cli", "crawl", web.url(0, "/"), "--store", store,
               "--allow-domain", "crawlq.test", "--resolve", "*.crawlq.test=127.0.0.1",
               "--allow-private", "--min-delay", "0.05", "--max-delay", "0.05",
               "--concurrency", "4", "--timeout", "5"]
        procs = [subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  text=True) for _ in range(2)]
        outs = [p.communicate(timeout=120) for p in procs]
        fetched = Counter(pages(web))
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0, err
        assert "frontier empty" in out
    assert set(fetched) == reachable(spec, web.port)
    assert set(fetched.values()) == {1}                        # one crawl, not two
    fetched_by = [int(re.search(r"fetched (\d+) pages", out).group(1))  # type: ignore[union-attr]
                  for out, _ in outs]
    assert min(fetched_by) > 0 and sum(fetched_by) == len(fetched)  # both took part


def test_sitemaps_from_robots_txt() -> None:
    spec = SiteSpec(hosts=2, pages=5, special_links=False, sitemap_pages=6)
    orphans = {(spec.host(i), f"/orphan/{n}") for i in range(2) for n in range(6)}
    with serve(spec) as web:
        s = crawl(web, **FAST, seeds=[web.url(0, "/"), web.url(1, "/")])
        assert not orphans & set(pages(web))  # without --sitemaps: never seen
    with serve(spec) as web:
        s = crawl(web, **FAST, sitemaps=True, seeds=[web.url(0, "/"), web.url(1, "/")])
        fetched = pages(web)
        assert s.finished and Counter(fetched).most_common(1)[0][1] == 1
        assert orphans <= set(fetched)
        assert {(spec.host(i), p) for i in range(2)
                for p in ("/sitemap.xml", "/sitemap-1.xml.gz")} <= set(fetched)
        assert s.sitemap_urls == 2 * 7 and s.out_of_scope["off-domain"] >= 2
        assert "URLs listed in sitemaps: 14" in s.lines()


def test_sitemap_parsing() -> None:
    import gzip

    import pytest

    from crawlq.crawler.sitemaps import SitemapError, parse

    ns = 'xmlns="http://www.sitemaps.org/schemas/sitemap/0.9"'
    xml = f'<?xml version="1.0"?><urlset {ns}><url><loc> http://a.test/1 </loc></url>' \
          '<url><loc>http://a.test/2</loc><lastmod>2026-01-01</lastmod></url></urlset>'
    assert parse(xml.encode()).locs == ["http://a.test/1", "http://a.test/2"]
    assert parse(gzip.compress(xml.encode())).kind == "urlset"
    index = f'<sitemapindex {ns}><sitemap><loc>http://a.test/s1.xml</loc></sitemap>' \
            '</sitemapindex>'
    assert parse(index.encode()).kind == "sitemapindex"
    assert parse(b"http://a.test/x\n\nhttps://a.test/y\n").locs == ["http://a.test/x",
                                                                     "https://a.test/y"]
    bomb = (b'<?xml version="1.0"?><!DOCTYPE l [<!ENTITY a "aaaaaaaaaa">'
            b'<!ENTITY b "&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;">'
            b'<!ENTITY c "&b;&b;&b;&b;&b;&b;&b;&b;&b;&b;">]><urlset><url><loc>&c;</loc>'
            b'</url></urlset>')
    for bad in (b"<html><body>not a sitemap</body></html>", b"<urlset><url>", b"junk",
                b"\x1f\x8bnot gzip"):
        with pytest.raises(SitemapError):
            parse(bad)
    assert len(parse(bomb).locs[0]) == 1000  # small entities expand, boundedly
    levels = '<!ENTITY a0 "aaaaaaaaaa">' + "".join(
        f'<!ENTITY a{i} "{f"&a{i - 1};" * 10}">' for i in range(1, 10))
    laughs = f'<!DOCTYPE l [{levels}]><urlset><url><loc>&a9;</loc></url></urlset>'
    with pytest.raises(SitemapError, match="amplification"):  # 10 GB, refused by expat
        parse(laughs.encode())


def test_https_with_a_trusted_ca_and_refused_without(tmp_path: Path) -> None:
    from crawlq import Frontier

    spec = SiteSpec(hosts=2, pages=6, special_links=False, sitemap_pages=2)
    for engine in ("threads", "asyncio"):
        with serve(spec, engine=engine, tls=True) as web:
            assert web.url(0).startswith("https://") and web.ca_file
            s = crawl(web, **FAST, ca_file=web.ca_file, sitemaps=True)
            fetched = pages(web)
            assert s.finished and s.fetched == len(fetched) and not s.errors
            want = {(h, p.replace("http://", "https://")) for h, p in
                    reachable(spec, web.port)}
            assert want <= set(fetched) and ("site1.crawlq.test", "/orphan/1") in fetched
    store = f"sqlite:///{tmp_path}/frontier.db"
    with serve(spec, tls=True) as web:  # the test CA not trusted: certificate errors
        s = crawl(web, **FAST, store=store, max_retries=0)
        assert s.fetched == 0 and sum(s.errors.values()) >= 1 and pages(web) == []
    with Frontier.open(store) as frontier:
        [dead] = frontier.dead()
        assert "certificate" in dead.error.lower(), dead.error


def test_priority_and_target_rules_and_the_redirect_cap(tmp_path: Path) -> None:
    spec = SiteSpec(hosts=1, pages=30, special_links=False, crawl_delay={})
    out = tmp_path / "pages.jsonl"
    with serve(spec) as web:
        seeds = [web.url(0, f"/page/{n}") for n in range(10)]
        s = crawl(web, **FAST, seeds=seeds, concurrency=1, out=str(out),
                  priority_rules=[(r"/page/[5-9]$", 5), (r"/page/0$", -5)],
                  target=[r"/page/\d*[02468]$"])
        order = [path for _, path in pages(web)]
        assert s.finished and set(order) == {f"/page/{n}" for n in range(30)}
        # every seed was queued before the first fetch: the raised ones go first, the
        # lowered one after everything else found later
        assert set(order[:5]) == {f"/page/{n}" for n in range(5, 10)}
        assert order[-1] == "/page/0"
        saved = {json.loads(line)["url"].split("/", 3)[3] for line in out.read_text().splitlines()}
        assert saved == {f"page/{n}" for n in range(0, 30, 2)} and s.not_saved == 15
    with serve(spec) as web:
        s = crawl(web, **FAST, seeds=[web.url(0, "/redirect-loop/0")], max_redirects=3)
        assert [p for _, p in pages(web)] == [f"/redirect-loop/{n}" for n in range(4)]
        assert s.out_of_scope["too-many-redirects"] == 1 and s.finished


def test_bad_rules_are_clear_cli_errors() -> None:
    for args in (["--priority", "nonumber"], ["--priority", "x=high"],
                 ["--include", "("], ["--target", "[a-"], ["--priority", "(=3"]):
        r = subprocess.run([sys.executable, "-m", "crawlq.cli", "crawl", "http://a.test/",
                            *args], capture_output=True, text=True, timeout=60)
        assert r.returncode == 2 and r.stderr.startswith("crawlq: error: --"), (args, r.stderr)


def test_redis_going_away_stops_the_crawl_clearly_and_it_resumes(tmp_path: Path) -> None:
    """The frontier's Redis is killed mid-crawl: the crawl stops with a StoreError (the
    CLI prints it and exits 2), loses nothing, and the same crawl resumes once Redis is
    back (AOF always), re-fetching only what was in flight."""
    import time

    import pytest

    from crawlq.errors import StoreError

    server = LocalRedis(tmp_path / "r", appendonly=True, appendfsync="always").start()
    spec = SiteSpec(hosts=3, pages=40, special_links=False, latency=0.01)
    try:
        with serve(spec) as web:
            store = f"{server.url}?prefix=gone&retry_deadline=1"
            n = 0

            def page(req: Any, resp: Any) -> None:
                nonlocal n
                n += 1
                if n == 30:
                    server.kill()

            config = CrawlConfig(seeds=[web.url(0, "/")], store=store, concurrency=4,
                                 lease_ttl=1.0, **LOCAL, **FAST)
            started = time.monotonic()
            with pytest.raises(StoreError):
                asyncio.run(Crawler(config, events={"page": page}).run())
            assert time.monotonic() - started < 15  # stopped, not stuck retrying
            first = len(pages(web))
            server.start()
            time.sleep(1.1)  # the leases of the first run expire
            s = crawl(web, **FAST, store=store, concurrency=4)
            fetched = Counter(pages(web))
            assert s.finished and set(fetched) == reachable(spec, web.port)
            assert sum(fetched.values()) - len(fetched) <= 4 + (first - 30)
    finally:
        server.stop()


def test_retry_after_values() -> None:
    """Unit test of the header parser: seconds, dates, and what is no delay at all
    ("nan" and "inf" parse as floats, and would have reached Frontier.block)."""
    from crawlq.crawler.config import retry_after as _retry_after
    from crawlq.crawler.fetch import Fetched

    def parse(value: str) -> float | None:
        return _retry_after(Fetched("http://127.0.0.1/", 429, {"retry-after": value}, b"", 0.1))

    assert parse("2") == 2.0
    assert parse("-3") == 0.0
    assert parse("Wed, 21 Oct 2015 07:28:00 GMT") == 0.0  # a date in the past: now
    for junk in ("nan", "inf", "-inf", "soon"):
        assert parse(junk) is None, junk
