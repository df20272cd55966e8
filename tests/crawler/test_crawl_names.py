"""Host names and scope as the fetch reads them: international (IDNA) and trailing-dot
names for seeds and ``--allow-domain``, a redirect whose authority urllib and WHATWG
read differently, and the rule that a domain is allowed on every port. Real HTTP on
127.0.0.1 (the raw server), every name resolved there by the crawl's ``resolve``."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from typing import Any

import pytest
from raw_web import Part, RawWeb, response, serve_raw

from crawlq.crawler import CrawlConfig, Crawler, Summary
from crawlq.crawler.scope import Scope, domain_name, host_of

FAST: dict[str, Any] = {"min_delay": 0.0, "max_delay": 0.0, "delay_factor": 0.0}


def crawl(seeds: list[str], allow_domains: list[str], **options: Any) -> Summary:
    config = CrawlConfig(seeds=seeds, resolve={"*.test": "127.0.0.1"}, allow_private=True,
                         allow_domains=allow_domains, max_retries=0, **FAST, **options)
    return asyncio.run(Crawler(config).run())


def site(host: str, path: str) -> list[Part]:
    """/ links to /a and /b (relative links), each a page without links."""
    if path == "/robots.txt":
        return [(0.0, response("404 Not Found", b""))]
    links = ["a", "/b"] if path == "/" else []
    body = "".join(f'<a href="{u}">{u}</a>' for u in links)
    return [(0.0, response("200 OK", f"<html><body>{body}</body></html>".encode()))]


def pages(web: RawWeb) -> set[tuple[str, str]]:
    return {(host, path) for _, host, path, _ in web.hits() if path != "/robots.txt"}


@pytest.mark.parametrize("seed_host, allow", [
    ("bücher.test", []),                        # a Unicode seed, no --allow-domain
    ("xn--bcher-kva.test", ["bücher.test"]),    # --allow-domain in Unicode
    ("BÜCHER.test", ["XN--BCHER-KVA.TEST."]),   # any case, a trailing dot
    ("dot.test.", []),                          # a trailing-dot seed
    ("dot.test", ["dot.test."]),
])
def test_international_and_trailing_dot_names_follow_their_links(
        seed_host: str, allow: list[str]) -> None:
    with serve_raw(site) as web:
        s = crawl([web.url(seed_host)], allow)
        host = host_of(web.url(seed_host)).rstrip(".")
        got = {(h.rstrip("."), p) for h, p in pages(web)}
    assert got == {(host, "/"), (host, "/a"), (host, "/b")}, (got, s.out_of_scope)
    assert not s.out_of_scope


def test_scope_reads_the_url_as_the_fetch_does() -> None:
    """urllib takes ``evil.test:81\\@a.test`` as user info and host a.test; WHATWG (the
    fetch and the canonical form) ends the authority at the backslash: evil.test."""
    scope = Scope(["a.test"])
    assert scope.why_not("http://evil.test:81\\@a.test/", 1) == "off-domain"
    assert scope.why_not("http://evil.test:P2\\@a.test/", 1) == "bad-url"
    assert scope.why_not("http://x:y@a.test/", 1) is None
    assert host_of("http://A.TEST.:8080/") == "a.test"
    for bad in ("a.test/x", "u@a.test", "a.test:80", "", "http://a.test/", "[::1]:80",
                "*.a.test"):
        with pytest.raises(ValueError):
            domain_name(bad)
    assert domain_name("[::1]") == "[::1]"


def test_a_redirect_is_judged_by_its_whatwg_host_and_any_port_is_in_scope() -> None:
    """A redirect to ``http://evil.test:PORT\\@a.test/`` goes to evil.test: out of scope,
    never fetched. A redirect to another port of an allowed host is followed (the
    documented rule: a domain is allowed on every port)."""
    with serve_raw(site) as other:
        def answer(host: str, path: str) -> list[Part]:
            if path == "/":
                links = ["/to-evil", "/to-other-port"]
                body = "".join(f'<a href="{u}">{u}</a>' for u in links)
                return [(0.0, response("200 OK", f"<html>{body}</html>".encode()))]
            if path == "/to-evil":
                where = f"http://evil.test:{other.port}\\@a.test/"
                return [(0.0, response("302 Found", b"", ("Location", where)))]
            if path == "/to-other-port":
                where = other.url("a.test", "/b")
                return [(0.0, response("302 Found", b"", ("Location", where)))]
            return site(host, path)

        with serve_raw(answer) as web:
            s = crawl([web.url("a.test")], ["a.test"])
        assert ("a.test", "/b") in pages(other)
        assert not any(h == "evil.test" for _, h, _, _ in other.hits() + web.hits())
    assert s.out_of_scope["off-domain"] == 1, s.out_of_scope


def test_a_bad_allow_domain_is_one_error_line() -> None:
    run = subprocess.run([sys.executable, "-m", "crawlq.cli", "crawl", "http://a.test/",
                          "--allow-domain", "a.test:80"], capture_output=True, text=True,
                         timeout=60)
    assert run.returncode == 2
    assert run.stderr.startswith("crawlq: error: --allow-domain: 'a.test:80' is no domain")
    assert len(run.stderr.strip().splitlines()) == 1
