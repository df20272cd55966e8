"""The crawler against hostile or careless sites (real HTTP on 127.0.0.1): Crawl-delay
kept within the user's bounds, cookies refused for public suffixes, WARC files warcio
reads whatever the content coding, robots.txt errors that make URLs wait (RFC 9309),
bounded sitemap nesting and a bounded parse memory."""

from __future__ import annotations

import asyncio
import gzip
import itertools
import logging
import subprocess
import sys
import zlib
from pathlib import Path
from typing import Any

import brotli
import pytest
from hostile_web import Answer, Hit, HostileWeb, html, page_with_links, serve_routes
from warcio.archiveiterator import ArchiveIterator

from crawlq import Frontier
from crawlq.crawler import CrawlConfig, Crawler, Summary
from crawlq.crawler import robots as robots_mod
from crawlq.crawler.fetch import Fetcher
from crawlq.crawler.parsing import ParseMemory, Parsers

FAST: dict[str, Any] = {"min_delay": 0.0, "max_delay": 0.0, "delay_factor": 0.0}


def crawl(web: HostileWeb, seeds: list[str], **options: Any) -> Summary:
    config = CrawlConfig(seeds=seeds, resolve={"*.test": "127.0.0.1"}, allow_private=True,
                         allow_domains=["test"], **options)
    return asyncio.run(Crawler(config).run())


def robots(text: str) -> Any:
    return lambda hit: (200, [("Content-Type", "text/plain")], text.encode())


def site(host: str, pages: int, robots_txt: str) -> dict[tuple[str, str], Any]:
    """``host`` with ``/`` linking to ``/p/1`` .. ``/p/<pages>`` and a robots.txt."""
    routes: dict[tuple[str, str], Any] = {
        (host, "/robots.txt"): robots(robots_txt),
        (host, "/"): lambda hit: page_with_links("home", [f"/p/{i}"
                                                          for i in range(1, pages + 1)])}
    for i in range(1, pages + 1):
        routes[(host, f"/p/{i}")] = lambda hit, i=i: page_with_links(f"p{i}", [])
    return routes


# -- Crawl-delay -------------------------------------------------------------------------

def test_crawl_delay_is_kept_within_min_and_max_delay(caplog: pytest.LogCaptureFixture,
                                                      tmp_path: Path) -> None:
    routes = {**site("huge.test", 3, "User-agent: *\nCrawl-delay: 1e308\n"),
              **site("tiny.test", 3, "User-agent: *\nCrawl-delay: 1e-300\n"),
              **site("nan.test", 3, "User-agent: *\nCrawl-delay: nan\n"),
              **site("day.test", 3, "User-agent: *\nCrawl-delay: 86400\n")}
    store = f"sqlite:///{tmp_path}/f.db"
    with serve_routes(routes) as web, caplog.at_level(logging.WARNING, "crawlq.crawl"):
        hosts = ("huge.test", "tiny.test", "nan.test", "day.test")
        s = crawl(web, [web.url(h) for h in hosts], min_delay=0.3, max_delay=0.6,
                  delay_factor=0.0, store=store)
        assert s.finished and s.fetched == 16  # (a parked host would never finish)
        for host in hosts:
            times = [h.at for h in web.hits(host) if h.path != "/robots.txt"]
            gaps = [b - a for a, b in itertools.pairwise(times)]
            assert len(times) == 4 and min(gaps) >= 0.29, (host, gaps)
            if host in ("huge.test", "day.test"):  # capped at --max-delay
                assert min(gaps) >= 0.59 and max(gaps) < 5, (host, gaps)
    assert s.crawl_delays_capped == 2 and not s.errors
    assert "Crawl-delay nan ignored" in caplog.text
    with Frontier.open(store) as f:  # no absurd wait in `crawlq queues`
        for q in f.queues():
            assert q.settings.get("min_delay", 0.0) <= 0.6


# -- cookies -----------------------------------------------------------------------------

def test_cookies_for_a_public_suffix_are_refused() -> None:
    def setting(*cookies: str) -> Any:
        return lambda hit: html("<p>set</p>", *(("Set-Cookie", c) for c in cookies))

    def echo(hit: Hit) -> Answer:
        return html("<p>echo</p>")

    routes: dict[tuple[str, str], Any] = {
        ("a.test", "/set"): setting("psl=1; Domain=test; Path=/",
                                    "site=1; Domain=a.test; Path=/", "host=1; Path=/"),
        ("evil.com", "/set"): setting("com=1; Domain=com; Path=/"),
        ("x.github.io", "/set"): setting("io=1; Domain=github.io; Path=/",
                                         "own=1; Domain=x.github.io; Path=/"),
        ("test", "/set"): setting("self=1; Domain=test; Path=/")}
    with serve_routes(routes, fallback=echo) as web:
        async def go() -> dict[str, str]:
            f = Fetcher(user_agent="t", resolve={"*": "127.0.0.1"}, allow_private=True,
                        cookies=True)
            try:
                for host in ("a.test", "evil.com", "x.github.io", "test"):
                    await f.get(web.url(host, "/set"))
                for host in ("a.test", "www.a.test", "b.test", "other.com", "y.github.io",
                             "x.github.io", "test"):
                    await f.get(web.url(host, "/echo"))
            finally:
                await f.close()
            return {h.host: h.headers.get("Cookie", "") for h in web.hits()
                    if h.path == "/echo"}

        sent = asyncio.run(go())
    cookies = {host: sorted(c.split("; ")) if c else [] for host, c in sent.items()}
    assert cookies == {
        "a.test": ["host=1", "site=1"],
        "www.a.test": ["site=1"],  # the site's own Domain cookie, as browsers send it
        "b.test": [],  # nothing planted through Domain=test
        "other.com": [],  # nor through Domain=com
        "y.github.io": [],  # nor from one github.io site to another
        "x.github.io": ["own=1"],
        "test": ["self=1"],  # a suffix's own host may set a host-only cookie
    }


# -- WARC --------------------------------------------------------------------------------

BODY = "<html><head><title>{}</title></head><body><p>{}</p></body></html>"
CODINGS = {"identity": lambda b: b, "gzip": gzip.compress, "deflate": zlib.compress,
           "br": brotli.compress}


def encoded(name: str, coding: str, chunked: bool, always: bool) -> Any:
    def answer(hit: Hit) -> Answer:
        body = BODY.format(name, "x" * 3000).encode()
        asked = hit.headers.get("Accept-Encoding", "")
        use = coding if always or coding in asked or coding == "identity" else "identity"
        headers = [("Content-Type", "text/html")]
        if use != "identity":
            headers.append(("Content-Encoding", use))
        if chunked:
            headers.append(("Transfer-Encoding", "chunked"))
        return 200, headers, CODINGS[use](body)
    return answer


@pytest.mark.parametrize("name", ["c.warc", "c.warc.gz"])
def test_warc_files_with_every_content_coding_pass_warcio(tmp_path: Path, name: str) -> None:
    routes: dict[tuple[str, str], Any] = {}
    paths = []
    for coding, chunked, always in itertools.product(CODINGS, (False, True), (False, True)):
        path = f"/{coding}-{'chunked' if chunked else 'plain'}-{'always' if always else 'asked'}"
        routes[("w.test", path)] = encoded(path, coding, chunked, always)
        paths.append(path)
    routes[("w.test", "/")] = lambda hit: page_with_links("home", paths)
    out = tmp_path / name
    with serve_routes(routes) as web:
        s = crawl(web, [web.url("w.test")], **FAST, out=str(out))
        assert s.fetched == len(paths) + 1
        asked = {h.headers.get("Accept-Encoding") for h in web.hits("w.test")}
        assert asked == {"gzip, deflate"}  # a WARC crawl does not ask for br
    warcio = str(Path(sys.executable).with_name("warcio"))
    for command in (["check", "-v"], ["index"]):
        run = subprocess.run([warcio, *command, str(out)], capture_output=True, text=True,
                             timeout=60)
        assert run.returncode == 0, run.stdout + run.stderr
        assert "Traceback" not in run.stdout + run.stderr
    bodies = {}
    with open(out, "rb") as f:
        for record in ArchiveIterator(f):
            if record.rec_type != "response":
                continue
            url = record.rec_headers.get_header("WARC-Target-URI")
            coding = record.http_headers.get_header("Content-Encoding")
            bodies[url.rsplit("/", 1)[1]] = (coding, record.content_stream().read(),
                                             record.http_headers)
    for path in paths:
        coding, body, headers = bodies[path[1:]]
        assert body == BODY.format(path, "x" * 3000).encode(), path  # warcio decoded it
        if path.startswith("/br-") and path.endswith("always"):  # sent unasked: decoded
            assert coding is None
            assert headers.get_header("X-Crawlq-Original-Content-Encoding") == "br"
            assert headers.get_header("Content-Length") == str(len(body))
        elif path.startswith(("/gzip", "/deflate")):  # archived as sent
            assert coding == path[1:].split("-")[0]


def test_a_jsonl_crawl_asks_for_brotli_and_decodes_it(tmp_path: Path) -> None:
    routes = {("w.test", "/"): encoded("/", "br", False, False)}
    with serve_routes(routes) as web:
        s = crawl(web, [web.url("w.test")], **FAST, out=str(tmp_path / "p.jsonl"))
        assert "br" in web.hits("w.test")[-1].headers["Accept-Encoding"]
    assert s.fetched == 1
    assert '"title": "/"' in (tmp_path / "p.jsonl").read_text()


# -- robots.txt errors -------------------------------------------------------------------

def flaky_robots(errors: int, text: str) -> Any:
    """robots.txt answering 503 ``errors`` times, then ``text``."""
    count = itertools.count()

    def answer(hit: Hit) -> Answer:
        if next(count) < errors:
            return 503, [("Content-Type", "text/plain")], b"busy"
        return 200, [("Content-Type", "text/plain")], text.encode()
    return answer


def test_urls_wait_while_robots_txt_errs_and_none_dies(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(robots_mod, "ERROR_RETRY", 0.3)  # (30 s in real crawls)
    routes = site("r.test", 3, "")
    routes[("r.test", "/robots.txt")] = flaky_robots(3, "User-agent: *\nDisallow: /p/3\n")
    store = f"sqlite:///{tmp_path}/f.db"
    with serve_routes(routes) as web:
        s = crawl(web, [web.url("r.test")], **FAST, max_retries=0, store=store)
        fetched = [h.path for h in web.hits("r.test")]
    assert s.finished
    assert fetched.count("/robots.txt") == 4  # 3 errors, backed off 0.3, 0.6, 1.2 s
    assert sorted(p for p in fetched if p != "/robots.txt") == ["/", "/p/1", "/p/2"]
    assert s.robots_waits >= 3 and s.robots_denied == 1
    with Frontier.open(store) as f:
        assert f.stats().dead == 0  # no URL died because robots.txt erred
    assert s.errors["robots.txt unavailable"] == 3


def test_robots_txt_erring_past_the_window_is_taken_as_absent(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(robots_mod, "ERROR_RETRY", 0.2)
    routes = site("r.test", 2, "")
    routes[("r.test", "/robots.txt")] = flaky_robots(1000, "")
    with serve_routes(routes) as web:
        s = crawl(web, [web.url("r.test")], **FAST, max_retries=0, robots_error_window=1.0)
        fetched = [h.path for h in web.hits("r.test")]
    assert s.finished and s.fetched == 3
    assert 2 <= fetched.count("/robots.txt") <= 5


def test_the_error_run_of_robots_txt_is_kept_in_the_store() -> None:
    """Another process (or the next run) continues the backoff and the window."""
    first = robots_mod.from_response(503, "", "a", now=100.0)
    assert first.disallow_all and first.expires == 100.0 + robots_mod.ERROR_RETRY
    kept = robots_mod._freeze(100.0, 503, "", "", first)
    again = robots_mod._thaw(kept, "a", 1000.0)
    assert again is not None and again.erring_since == 100.0 and again.errors == 1
    third = robots_mod.from_response(503, "", "a", now=200.0, erring_since=100.0, errors=2)
    assert third.errors == 3 and third.expires == 200.0 + 4 * robots_mod.ERROR_RETRY
    late = robots_mod.from_response(None, "", "a", now=100.0 + robots_mod.ERROR_WINDOW,
                                    error="refused", erring_since=100.0, errors=50)
    assert not late.disallow_all and late.allows("http://x.test/a")
    assert late.expires - (100.0 + robots_mod.ERROR_WINDOW) == robots_mod.ERROR_MAX_WAIT
    ok = robots_mod.from_response(200, "User-agent: *\nDisallow: /x", "a", now=300.0)
    assert ok.erring_since is None and not ok.allows("http://x.test/x")


# -- robots.txt size and redirects -------------------------------------------------------

def test_a_huge_robots_txt_neither_stalls_other_sites_nor_counts_past_500_kib() -> None:
    """4.6 MB of wildcard rules (under the 5 MB page cap): read up to 500 KiB, parsed
    off the event loop, decided through the needle index; 18,000 rules that share their
    needle, whose URLs each try them all, decided off the loop; another site, crawled at
    the same time with a short timeout and no retries, gets every page."""
    rules = "".join(f"Disallow: /*x{i}-*q\n" for i in range(200_000))
    assert 4_000_000 < len(rules) < 5_000_000
    shared = "".join(f"Disallow: /*abcdefgh*-{i}q\n" for i in range(18_000))
    routes = {**site("big.test", 20, "User-agent: *\n" + rules),
              **site("shared.test", 0, "User-agent: *\n" + shared),
              **site("small.test", 200, "")}
    for path in ("/ax5-q", "/ax199999-q"):  # an early rule's URL, a late (ignored) one's
        routes[("big.test", path)] = lambda hit: page_with_links("x", [])
    routes[("big.test", "/")] = lambda hit: page_with_links(
        "home", [f"/p/{i}" for i in range(1, 21)] + ["/ax5-q", "/ax199999-q"])
    needled = [f"/abcdefgh/{'y' * 1500}/-{i}" for i in range(40)] + ["/abcdefgh-7q"]
    for path in needled:
        routes[("shared.test", path)] = lambda hit: page_with_links("x", [])
    routes[("shared.test", "/")] = lambda hit: page_with_links("home", needled)
    lag = [0.0]

    async def run(config: CrawlConfig) -> Summary:
        async def ticks() -> None:  # the longest the event loop was held
            while True:
                start = asyncio.get_running_loop().time()
                await asyncio.sleep(0.02)
                lag[0] = max(lag[0], asyncio.get_running_loop().time() - start - 0.02)

        ticker = asyncio.create_task(ticks())
        try:
            return await Crawler(config).run()
        finally:
            ticker.cancel()

    with serve_routes(routes) as web:
        config = CrawlConfig(seeds=[web.url("big.test"), web.url("shared.test"),
                                    web.url("small.test")],
                             resolve={"*.test": "127.0.0.1"}, allow_private=True,
                             allow_domains=["test"], max_retries=0, timeout=3.0,
                             concurrency=8, **FAST)
        s = asyncio.run(run(config))
        small = {h.path for h in web.hits("small.test")}
        big = {h.path for h in web.hits("big.test")}
        by_shared = {h.path for h in web.hits("shared.test")}
    assert lag[0] < 1.0, lag  # (parsed on the loop, this file held it ~10 s)
    assert len(small - {"/robots.txt"}) == 201, s
    assert "/ax5-q" not in big and "/ax199999-q" in big and len(big) == 23
    assert by_shared == {"/robots.txt", "/", *needled[:-1]}  # /abcdefgh-7q: disallowed
    assert s.robots_denied == 2 and not s.errors, s.errors


def test_a_kept_robots_txt_over_the_limit_is_cut_as_a_fetched_one_is() -> None:
    """A file an older crawlq kept whole in the store (4.6 MB) is read up to 500 KiB
    when it is taken from there, as a fetched one: a rule past the limit is ignored."""
    text = "User-agent: *\n" + "".join(f"Disallow: /*x{i}-*q\n" for i in range(200_000))
    kept = robots_mod._freeze(0.0, 200, text, "", robots_mod.from_response(200, "", "a"))
    rules = robots_mod._thaw(kept, "a", robots_mod.ERROR_WINDOW)
    assert rules is not None and rules.parser is not None
    assert not rules.allows("http://a.test/ax5-q") and rules.allows("http://a.test/ax199999-q")
    assert len(rules.parser.rules) < 25_000


def test_a_file_of_many_rules_is_decided_off_the_event_loop() -> None:
    """Rules that share their needle are all tried for a URL that holds it (18,000
    regular expressions over a long path: tenths of a second): past MANY_RULES rules
    the decision runs on a worker thread, a small file's on the loop."""
    import threading

    many = robots_mod.from_response(200, "User-agent: *\n" + "".join(
        f"Disallow: /*abcdefgh*-{i}q\n" for i in range(2000)), "a", now=0.0)
    few = robots_mod.from_response(200, "User-agent: *\nDisallow: /x\n", "a", now=0.0)
    assert many.parser is not None and many.parser.many
    assert few.parser is not None and not few.parser.many
    threads: list[int] = []
    for rules in (many, few):
        decide = rules.parser.allows  # type: ignore[union-attr]

        def spy(url: str, decide: Any = decide) -> bool:
            threads.append(threading.get_ident())
            return bool(decide(url))

        rules.parser.allows = spy  # type: ignore[method-assign, union-attr]

    async def both() -> tuple[bool, bool, int]:
        return (await many.permits("http://a.test/abcdefgh-7q"),
                await few.permits("http://a.test/y"), threading.get_ident())

    denied, allowed, loop = asyncio.run(both())
    assert not denied and allowed
    assert threads[0] != loop and threads[1] == loop


def test_robots_txt_redirects_up_to_five_then_unavailable() -> None:
    """Five redirects are followed (RFC 9309); a sixth, one to another scheme, to a
    refused address or out of the crawl's domains: robots.txt is unavailable (all
    allowed), the host's pages are fetched, and nothing is asked of the target."""
    def hops(n: int, last: str) -> dict[tuple[str, str], Any]:
        host = f"r{n}.test"
        routes = site(host, 2, "")
        for i in range(n):
            routes[(host, "/robots.txt" if i == 0 else f"/hop{i}")] = (
                lambda hit, i=i: (302, [("Location", f"/hop{i + 1}")], b""))
        routes[(host, f"/hop{n}" if n else "/robots.txt")] = (
            lambda hit: (302, [("Location", last)], b"") if last else
            robots("User-agent: *\nDisallow: /p/2\n")(hit))
        return routes

    routes = {**hops(5, ""), **hops(6, ""),
              **hops(1, "file:///etc/passwd"),
              **hops(2, "http://169.254.169.254/robots.txt"),
              **hops(3, "http://evil.test/robots.txt"),
              **site("r7.test", 2, "")}
    # a redirect in capitals (a scheme and host are case-insensitive): followed
    routes[("r7.test", "/robots.txt")] = lambda hit: (302, [(
        "Location", f"HTTP://R7.TEST:{hit.headers['Host'].rpartition(':')[2]}/r.txt")], b"")
    routes[("r7.test", "/r.txt")] = robots("User-agent: *\nDisallow: /p/2\n")
    with serve_routes(routes) as web:
        seeds = [web.url(f"r{n}.test") for n in (5, 6, 1, 2, 3, 7)]
        config = CrawlConfig(seeds=seeds, resolve={"*.test": "127.0.0.1"},
                             allow_addresses=("127.0.0.1",), max_retries=0, **FAST)
        s = asyncio.run(Crawler(config).run())
        hits = {n: [h.path for h in web.hits(f"r{n}.test")] for n in (5, 6, 1, 2, 3, 7)}
        assert not web.hits("evil.test")
    assert "/p/2" not in hits[5] and "/p/1" in hits[5]  # the rules behind five redirects
    assert "/p/2" not in hits[7] and "/p/1" in hits[7] and "/r.txt" in hits[7]
    for n in (6, 1, 2, 3):
        assert {"/", "/p/1", "/p/2"} <= set(hits[n]), (n, hits[n])
    assert "/hop6" not in hits[6]
    assert s.errors["robots.txt redirect not followed"] == 4, s.errors
    assert s.fetched == 2 + 2 + 4 * 3 and not s.blocked


# -- sitemaps and parsing ----------------------------------------------------------------

def test_a_chain_of_sitemap_indexes_stops_at_the_nesting_bound() -> None:
    def index(hit: Hit) -> Answer:
        n = int(hit.path.split("/")[2].split(".")[0])
        nxt = f"http://s.test:{hit.headers['Host'].rpartition(':')[2]}/sm/{n + 1}.xml"
        xml = ('<?xml version="1.0"?><sitemapindex xmlns="http://www.sitemaps.org/'
               f'schemas/sitemap/0.9"><sitemap><loc>{nxt}</loc></sitemap></sitemapindex>')
        return 200, [("Content-Type", "application/xml")], xml.encode()

    with serve_routes({}) as web:
        web.routes[("s.test", "/robots.txt")] = robots(
            f"User-agent: *\nSitemap: {web.url('s.test', '/sm/1.xml')}\n")
        web.routes[("s.test", "/")] = lambda hit: page_with_links("home", [])
        for n in range(1, 20):
            web.routes[("s.test", f"/sm/{n}.xml")] = index
        s = crawl(web, [web.url("s.test")], **FAST, sitemaps=True)
        fetched = sorted(h.path for h in web.hits("s.test") if h.path.startswith("/sm/"))
    assert fetched == ["/sm/1.xml", "/sm/2.xml", "/sm/3.xml"]
    assert s.out_of_scope["sitemap-too-deep"] == 1 and s.finished


def test_a_page_over_the_parse_memory_bound_is_reported_and_the_worker_replaced() -> None:
    flood = "".join(f'<a href="/p/{i}">x</a>' for i in range(700_000)).encode()  # ~15 MB

    async def go() -> None:
        parsers = Parsers(10.0, workers=1, max_bytes=1_000_000)  # 256 MiB: the floor
        try:
            with pytest.raises(ParseMemory, match="256 MiB"):
                await parsers.extract(flood, "utf-8", "http://a.test/")
            page = await parsers.extract(b"<title>t</title>" + b"<a href=/x>x</a>" * 900,
                                         "utf-8", "http://a.test/")
            assert page.title == "t" and page.links == ["http://a.test/x"]
            # (a page's title is no reply kind: one titled "memory" parses as any)
            page = await parsers.extract(b"<title>memory</title>" + b"<a href=/y>y</a>" * 900,
                                         "utf-8", "http://a.test/")
            assert page.title == "memory" and page.links == ["http://a.test/y"]
        finally:
            await parsers.aclose()

    asyncio.run(go())


# -- a wildcard-subdomain trap -------------------------------------------------------------

def _trap_routes(normal: list[str], pages: int) -> tuple[dict[tuple[str, str], Any], Any]:
    """``normal`` sites of ``pages`` pages each, and a fallback that answers every host
    of ``a.test`` (a DNS wildcard): a page linking to ten host names never seen before."""
    routes: dict[tuple[str, str], Any] = {}
    for host in normal:
        routes.update(site(host, pages, "User-agent: *\nAllow: /\n"))
    fresh = itertools.count()

    def trap(hit: Hit) -> Answer:
        if not hit.host.endswith("a.test") or hit.path != "/":
            return 404, [("Content-Type", "text/plain")], b"not found"
        port = hit.headers.get("Host", "").rpartition(":")[2]
        return page_with_links("trap", [f"http://h{next(fresh)}.a.test:{port}/"
                                        for _ in range(10)])

    return routes, trap


@pytest.mark.parametrize("store", ["memory", "sqlite", "redis"])
def test_a_wildcard_subdomain_trap_takes_only_its_domains_share(
        store: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    """Three sites crawled for a while alone, then again beside a site whose every page
    links to ten new host names of its registered domain: each site gets at least 80% of
    the pages it got alone in the same time; the trap stops growing at
    --max-hosts-per-domain host names, the rest
    counted as refused (domain-queues). (That a domain holds no more than its share of
    leases at once is the store contract's: crawlq.testing.domains.)"""
    normal = ["s1.test", "s2.test", "s3.test"]
    routes, trap = _trap_routes(normal, 40)
    options: dict[str, Any] = {"min_delay": 0.2, "max_delay": 0.2, "delay_factor": 0.0,
                               "duration": 3.0, "max_hosts_per_domain": 40}
    got: list[dict[str, int]] = []
    for n, seeds in enumerate(([], ["a.test"])):
        if store == "sqlite":
            options["store"] = f"sqlite:///{tmp_path}/trap{n}.db"
        elif store == "redis":
            redis = request.getfixturevalue("redis_server")
            options["store"] = f"{redis.url}?prefix=trap-{n}"
        with serve_routes(routes, trap) as web:
            summary = crawl(web, [web.url(h) for h in [*normal, *seeds]], **options)
            pages = {h: sum(1 for hit in web.hits(h) if hit.path != "/robots.txt")
                     for h in normal}
            got.append(pages)
            trap_hits = [hit for hit in web.hits() if hit.host.endswith("a.test")]
    alone, beside = got
    assert all(n >= 10 for n in alone.values()), alone  # (the time lets each do a lot)
    assert all(beside[h] >= 0.8 * alone[h] for h in normal), (alone, beside)
    trap_hosts = {hit.host for hit in trap_hits}
    assert 10 < len(trap_hosts) <= 40  # (a.test and up to 39 more host names of it)
    assert summary.out_of_scope["domain-queues"] > 0
