"""What the crawler sends: headers, a proxy (named or from the environment), cookies
only when asked. The test web is also an HTTP proxy for its own hosts."""

from __future__ import annotations

import os
import subprocess
import sys

from crawlq.testing.web import SiteSpec, serve

FAST = ["--min-delay", "0", "--max-delay", "0", "--delay-factor", "0", "--progress", "0"]


def cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "crawlq.cli", *args], capture_output=True,
                          text=True, timeout=60, env=env)


def test_every_request_goes_through_the_proxy() -> None:
    spec = SiteSpec(hosts=2, pages=4, special_links=False)
    # Targets resolve to 127.0.0.2 (allowed by name), the proxy is the test web on
    # 127.0.0.1: a proxy the user names is not refused, though loopback.
    target = ["--allow-domain", "crawlq.test", "--resolve", "*.crawlq.test=127.0.0.2",
              "--allow-address", "127.0.0.2", *FAST]
    with serve(spec) as web:
        proxy = f"http://127.0.0.1:{web.port}"
        run = cli("crawl", web.url(0, "/"), *target, "--proxy", proxy)
        assert run.returncode == 0, run.stderr
        hits = web.hits()
        assert len(hits) > 4 and all(h.proxied for h in hits), hits[:3]
        n = len(hits)
        env = {**os.environ, "HTTP_PROXY": proxy, "NO_PROXY": ""}
        run = cli("crawl", web.url(1, "/"), *target, "--proxy-from-env", env=env)
        assert run.returncode == 0, run.stderr
        assert len(web.hits()) > n and all(h.proxied for h in web.hits())
    bad = cli("crawl", "http://a.test/", "--proxy", "socks5://x:1")
    assert bad.returncode == 2 and bad.stderr.startswith("crawlq: error: --proxy")


def test_cookies_are_kept_only_when_asked() -> None:
    spec = SiteSpec(hosts=1, pages=3, special_links=False)
    local = ["--allow-domain", "crawlq.test", "--resolve", "*.crawlq.test=127.0.0.1",
             "--allow-private", *FAST]
    with serve(spec) as web:
        seed = web.url(0, "/cookie/set")
        assert cli("crawl", seed, *local).returncode == 0
        assert not any(h.cookie for h in web.hits())
        first = len(web.hits())
        assert cli("crawl", seed, *local, "--cookies").returncode == 0
        later = [h for h in web.hits()[first:] if h.path not in ("/cookie/set", "/robots.txt")]
    assert later and all(h.cookie == "visit=1" for h in later), later


def test_the_crawl_serves_its_own_metrics() -> None:
    """Pages by status, bytes, fetch latency and errors, scraped over HTTP from the
    prometheus-client server the crawl runs (CrawlMetrics, as --metrics starts it)."""
    import asyncio
    import urllib.request

    from crawlq.crawler import CrawlConfig, Crawler
    from crawlq.crawler.metrics import CrawlMetrics

    spec = SiteSpec(hosts=1, pages=6, special_links=False)
    metrics = CrawlMetrics(0)
    try:
        with serve(spec) as web:
            config = CrawlConfig(seeds=[web.url(0, "/"), web.url(0, "/status/404")],
                                 resolve={"*.crawlq.test": "127.0.0.1"}, allow_private=True,
                                 allow_domains=["crawlq.test"], min_delay=0, max_delay=0,
                                 delay_factor=0)
            s = asyncio.run(Crawler(config, events=metrics.events()).run())
        with urllib.request.urlopen(f"http://127.0.0.1:{metrics.port}/metrics",
                                    timeout=10) as r:
            text = r.read().decode()
    finally:
        metrics.close()
    assert f'crawlq_crawl_pages_total{{status="200"}} {float(s.statuses[200])}' in text
    assert 'crawlq_crawl_pages_total{status="404"} 1.0' in text
    assert f"crawlq_crawl_fetch_seconds_count {float(s.fetched)}" in text
    assert "crawlq_crawl_bytes_total" in text


def test_crawl_metrics_flag_says_where() -> None:
    spec = SiteSpec(hosts=1, pages=2, special_links=False)
    with serve(spec) as web:
        r = subprocess.run([sys.executable, "-m", "crawlq.cli", "crawl", web.url(0, "/"),
                            "--allow-domain", "crawlq.test", "--allow-private", "--resolve",
                            "*.crawlq.test=127.0.0.1", "--metrics", "0", "--progress", "0"],
                           capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "metrics on http://127.0.0.1:" in r.stderr
