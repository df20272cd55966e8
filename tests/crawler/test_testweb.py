"""The local test web answers like the web it stands for (real HTTP on 127.0.0.1)."""

from __future__ import annotations

import gzip
import http.client
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

from crawlq.testing.web import SiteSpec, TestWeb, serve


@pytest.fixture(scope="module", params=["threads", "asyncio"])
def web(request: pytest.FixtureRequest) -> Iterator[TestWeb]:
    with serve(SiteSpec(hosts=4, pages=30, slow_seconds=0.2, big_bytes=300_000,
                        robots_5xx=frozenset({3})), engine=request.param) as w:
        yield w


def get(web: TestWeb, host: str, path: str) -> tuple[int, dict[str, str], bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", web.port, timeout=10)
    try:
        conn.request("GET", path, headers={"Host": f"{host}:{web.port}",
                                           "User-Agent": "crawlq-test"})
        r = conn.getresponse()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
    finally:
        conn.close()


def test_pages_and_links(web: TestWeb) -> None:
    status, headers, body = get(web, "site0.crawlq.test", "/page/3")
    assert status == 200 and headers["content-type"].startswith("text/html")
    assert b'href="/page/4"' in body and b"site0.crawlq.test page 3" in body
    assert b'href="/private/3"' in body and b'href="/calendar/2026/1"' in body
    assert get(web, "site0.crawlq.test", "/page/30")[0] == 404
    assert get(web, "nowhere.test", "/")[0] == 404


def test_links_are_deterministic() -> None:
    a, b = SiteSpec(seed=5), SiteSpec(seed=5)
    assert a.page_links(1, 7) == b.page_links(1, 7)
    assert a.page_links(1, 7) != SiteSpec(seed=6).page_links(1, 7)


def test_robots_variants(web: TestWeb) -> None:
    status, _, body = get(web, "site1.crawlq.test", "/robots.txt")
    assert status == 200 and b"Disallow: /private/" in body and b"Crawl-delay: 0.2" in body
    assert get(web, "site2.crawlq.test", "/robots.txt")[0] == 404
    assert get(web, "site3.crawlq.test", "/robots.txt")[0] == 503


def test_redirects(web: TestWeb) -> None:
    status, headers, _ = get(web, "site0.crawlq.test", "/redirect/5")
    assert status == 301 and headers["location"] == "/page/5"
    assert get(web, "site0.crawlq.test", "/redirect-out")[1]["location"] == \
        "http://elsewhere.test/"
    assert get(web, "site0.crawlq.test", "/redirect-private")[1]["location"].startswith(
        "http://10.")


def test_rate_limits_once_per_host(web: TestWeb) -> None:
    status, headers, _ = get(web, "site2.crawlq.test", "/ratelimited")
    assert status == 429 and headers["retry-after"] == "2"
    assert get(web, "site2.crawlq.test", "/ratelimited")[0] == 200
    assert get(web, "site2.crawlq.test", "/unavailable")[0] == 503
    assert get(web, "site2.crawlq.test", "/unavailable")[0] == 200


def test_trap_encodings_and_sizes(web: TestWeb) -> None:
    _, _, body = get(web, "site0.crawlq.test", "/calendar/2026/12")
    assert b'href="/calendar/2027/1"' in body
    _, headers, body = get(web, "site0.crawlq.test", "/latin1")
    assert "iso-8859-1" in headers["content-type"] and "Café".encode("iso-8859-1") in body
    _, _, body = get(web, "site0.crawlq.test", "/meta-charset")
    assert "こんにちは".encode("shift_jis") in body
    _, headers, body = get(web, "site0.crawlq.test", "/gzip")
    assert headers["content-encoding"] == "gzip" and b"gzipped" in gzip.decompress(body)
    assert len(get(web, "site0.crawlq.test", "/big")[2]) >= 290_000
    assert b"\xff" in get(web, "site0.crawlq.test", "/broken")[2]
    assert get(web, "site0.crawlq.test", "/error")[0] == 500


def test_slow_pages_and_the_log(web: TestWeb) -> None:
    t = time.monotonic()
    assert get(web, "site1.crawlq.test", "/slow/1")[0] == 200
    assert time.monotonic() - t >= 0.2
    hits = web.hits("site1.crawlq.test")
    assert hits[-1].path == "/slow/1" and hits[-1].user_agent == "crawlq-test"
    assert web.url(1, "/page/2") == f"http://site1.crawlq.test:{web.port}/page/2"


def test_keep_alive_head_and_slow_answers_in_order(web: TestWeb) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", web.port, timeout=10)
    try:
        for path, title in (("/page/1", b"page 1"), ("/slow/2", b"slow"),
                            ("/page/2", b"page 2")):  # one connection, in order
            conn.request("GET", path, headers={"Host": "site0.crawlq.test"})
            r = conn.getresponse()
            assert r.status == 200 and b"<title>" + title in r.read().replace(
                b"site0.crawlq.test ", b"")
        conn.request("HEAD", "/page/3", headers={"Host": "site0.crawlq.test"})
        r = conn.getresponse()
        assert r.status == 200 and int(r.getheader("Content-Length") or 0) > 0
        assert r.read() == b""
    finally:
        conn.close()
    assert [h.path for h in web.hits("site0.crawlq.test")][-4:] == \
        ["/page/1", "/slow/2", "/page/2", "/page/3"]


def test_unknown_engine() -> None:
    with pytest.raises(ValueError, match="engine"):
        TestWeb(SiteSpec(), engine="twisted")


def test_the_servers_load_without_pytest() -> None:
    """crawlq.testing's servers import nothing of the contract suite, which needs
    pytest: ``crawlq demo`` serves the test web on an install without the dev tools."""
    code = ("import sys\n"
            "import crawlq.testing.delayproxy, crawlq.testing.redis_server, crawlq.testing.web\n"
            "assert 'pytest' not in sys.modules, 'pytest imported'\n"
            "from crawlq.testing import FrontierContract\n"
            "assert 'pytest' in sys.modules  # (the contract suite, on first use)\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stderr
