"""What a crawl tells its user: refused seeds (with the option that allows them),
bounded back-off on 429/503, DNS failures retried, SIGINT/SIGTERM that stop soon."""

from __future__ import annotations

import asyncio
import itertools
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from crawlq import Frontier
from crawlq.crawler import CrawlConfig, Crawler, Summary
from crawlq.testweb import SiteSpec, TestWeb, pages, reachable, serve

LOCAL = ["--allow-domain", "crawlq.test", "--resolve", "*.crawlq.test=127.0.0.1"]
FAST = ["--min-delay", "0", "--max-delay", "0", "--delay-factor", "0", "--progress", "0"]


def cli(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "crawlq.cli", *args], capture_output=True,
                          text=True, timeout=timeout)


def one_error(run: subprocess.CompletedProcess[str]) -> str:
    errors = [ln for ln in run.stderr.splitlines() if ln.startswith("crawlq: error:")]
    assert run.returncode == 2 and len(errors) == 1, (run.returncode, run.stderr)
    assert "Traceback" not in run.stderr
    return errors[0]


def test_a_blocked_seed_is_reported_not_done_and_a_rerun_with_the_option_crawls_it(
        tmp_path: Path) -> None:
    spec = SiteSpec(hosts=1, pages=4, special_links=False)
    state = ["--state", str(tmp_path / "state")]
    with serve(spec) as web:
        seed = web.url(0, "/")  # resolved to 127.0.0.1: loopback, refused by default
        run = cli("crawl", seed, *state, *LOCAL, *FAST)
        error = one_error(run)
        assert f"no page could be fetched: {seed}: private-address" in error
        assert "--allow-private" in error and "--allow-address" in error
        assert f"seed not crawled: {seed}" in run.stdout
        assert web.hits() == []  # not one connection
        again = cli("crawl", seed, *state, *LOCAL, *FAST, "--allow-address", "127.0.0.1")
        assert again.returncode == 0, again.stderr
        assert "frontier empty" in again.stdout and len(pages(web)) > 1


def test_invalid_seeds_are_reported_with_their_reason() -> None:
    run = cli("crawl", "ftp://example.test/", "not a url", "http://a.test:99999/", *FAST)
    error = one_error(run)
    assert "no page could be fetched: ftp://example.test/: bad-scheme" in error
    assert "and 2 more seeds" in error
    assert "not a url: not-absolute" in run.stdout and "bad-port" in run.stdout


def test_a_finished_crawl_run_again_is_no_error(tmp_path: Path) -> None:
    spec = SiteSpec(hosts=1, pages=3, special_links=False)
    state = ["--state", str(tmp_path / "state")]
    with serve(spec) as web:
        first = cli("crawl", web.url(0, "/"), *state, *LOCAL, "--allow-private", *FAST)
        second = cli("crawl", web.url(0, "/"), *state, *LOCAL, "--allow-private", *FAST)
    assert first.returncode == 0 and second.returncode == 0, second.stderr
    assert "fetched 0 pages" in second.stdout and "frontier empty" in second.stdout


def _crawl(web: TestWeb, seeds: list[str], store: str, **options: Any) -> Summary:
    config = CrawlConfig(seeds=seeds, store=store, resolve={"*.crawlq.test": "127.0.0.1"},
                         allow_private=True, allow_domains=["crawlq.test"], min_delay=0.0,
                         max_delay=0.0, delay_factor=0.0, **options)
    return asyncio.run(Crawler(config).run())


@pytest.mark.parametrize(("path", "least", "most"), [
    ("/status/429?retry-after=0", [1.0, 2.0], [1.6, 2.6]),        # 0: not hammered
    ("/status/503?retry-after=99999999999", [1.5, 1.5], [2.1, 2.1]),  # years: clamped
    ("/status/429", [1.0, 2.0], [1.6, 2.6]),                     # no Retry-After: backoff
])
def test_429_and_503_back_the_host_off_boundedly_then_the_url_dies(
        tmp_path: Path, path: str, least: list[float], most: list[float]) -> None:
    spec = SiteSpec(hosts=1, pages=2, special_links=False)
    store = f"sqlite:///{tmp_path}/f.db"
    with serve(spec) as web:
        s = _crawl(web, [web.url(0, path)], store, max_retries=2, retry_backoff=0.2,
                   max_backoff=1.5 if "99999" in path else 3600.0, obey_robots=False)
        times = [h.at for h in web.hits() if h.path.startswith("/status/")]
    assert len(times) == 3, times  # the first fetch and two retries, then dead
    gaps = [b - a for a, b in itertools.pairwise(times)]
    assert all(lo <= g <= hi for g, lo, hi in zip(gaps, least, most)), gaps
    assert s.finished and sum(s.statuses.values()) == 3
    with Frontier.open(store) as f:
        (dead,) = f.dead()
        assert dead.error.startswith(f"HTTP {path[8:11]} (host backed off")
        assert f.stats().done == 0  # a 429 is no success


def test_dns_failures_are_retried_then_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[str] = []

    async def no_such_name(self: Any, host: str, *args: Any, **kwargs: Any) -> Any:
        asked.append(host)  # a resolver that fails: no query leaves this machine
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    monkeypatch.setattr(asyncio.base_events.BaseEventLoop, "getaddrinfo", no_such_name)
    config = CrawlConfig(seeds=["http://nowhere.example/"], max_retries=2,
                         retry_backoff=0.1, min_delay=0.0)
    s = asyncio.run(Crawler(config).run())
    assert asked == ["nowhere.example"] * 3  # tried, then retried twice
    assert s.blocked["unresolvable"] == 3 and s.fetched == 0
    failure = s.failure()
    assert failure is not None and "unresolvable: nowhere.example" in failure


@pytest.mark.parametrize(("sig", "code"), [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_a_signal_stops_the_crawl_soon_and_it_resumes(tmp_path: Path, sig: int,
                                                        code: int) -> None:
    spec = SiteSpec(hosts=2, pages=20, special_links=False, latency=0.05, slow_seconds=5)
    cmd = [sys.executable, "-m", "crawlq.cli", "crawl", "--state", str(tmp_path / "s"),
           *LOCAL, "--allow-private", *FAST, "--concurrency", "2", "--timeout", "60"]
    with serve(spec) as web:
        seeds = [web.url(0, "/"), web.url(1, "/slow/1")]  # one fetch hangs for 5 s
        p = subprocess.Popen([*cmd, *seeds], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True)
        time.sleep(2.0)
        assert p.poll() is None
        asked = time.monotonic()
        p.send_signal(sig)
        out, err = p.communicate(timeout=30)
        took = time.monotonic() - asked
        assert p.returncode == code, err
        assert took < Crawler.STOP_GRACE + 2.0, took
        assert "interrupted" in out and "Traceback" not in err
        spec_done = cli(*cmd[3:], *seeds, timeout=90)  # resumes: the slow page is back
        assert spec_done.returncode == 0, spec_done.stderr
        fetched = set(pages(web))
    assert reachable(spec, web.port) | {(spec.host(1), "/slow/1")} <= fetched
