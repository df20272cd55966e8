"""What a crawl tells its user: refused seeds (with the option that allows them),
bounded back-off on 429/503, DNS failures retried, SIGINT/SIGTERM that stop soon."""

from __future__ import annotations

import asyncio
import itertools
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from crawlq import AsyncFrontier, Frontier
from crawlq.crawler import CrawlConfig, Crawler, Summary
from crawlq.testing.web import SiteSpec, TestWeb, pages, reachable, serve

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


def test_a_page_that_takes_too_long_to_parse_is_saved_and_does_not_stall_the_crawl(
        tmp_path: Path) -> None:
    """80,000 nested <div> take lexbor about ten seconds: the parse budget cuts it off
    (its worker process is killed) while the other pages are crawled."""
    spec = SiteSpec(hosts=2, pages=15, special_links=False)
    out = tmp_path / "p.jsonl"
    with serve(spec) as web:
        started = time.monotonic()
        s = _crawl(web, [web.url(1, "/nested/80000"), web.url(0, "/")],
                   f"sqlite:///{tmp_path}/f.db", parse_timeout=0.5, concurrency=4,
                   out=str(out))
        took = time.monotonic() - started
        fetched = set(pages(web))
    assert s.errors["parse-timeout"] == 1 and s.finished
    assert reachable(spec, web.port) <= fetched
    assert took < 6, took
    assert any("/nested/80000" in line for line in out.read_text().splitlines())


def test_robots_txt_with_a_byte_order_mark_keeps_its_first_group() -> None:
    from crawlq.crawler import robots

    body = b"\xef\xbb\xbfUser-agent: *\nDisallow: /private\n"
    rules = robots.from_response(200, robots.decode(body), "crawlq/1.0")
    assert not rules.allows("http://a.test/private/1")
    assert rules.allows("http://a.test/public")
    assert robots.origin("https://a.test:8443/x?y") == "https://a.test:8443"


def test_the_store_options_mean_what_they_say(tmp_path: Path) -> None:
    import os

    spec = SiteSpec(hosts=1, pages=3, special_links=False)
    with serve(spec) as web:
        seed = [web.url(0, "/"), *LOCAL, "--allow-private", *FAST]
        before = cli("--store", f"sqlite:///{tmp_path}/global.db", "crawl", *seed)
        assert before.returncode == 0, before.stderr
        env = {**os.environ, "CRAWLQ_STORE": f"sqlite:///{tmp_path}/env.db"}
        from_env = subprocess.run([sys.executable, "-m", "crawlq.cli", "crawl", *seed],
                                  capture_output=True, text=True, timeout=60, env=env)
        assert from_env.returncode == 0, from_env.stderr
    for name in ("global.db", "env.db"):  # the crawl was kept where it was told
        with Frontier.open(f"sqlite:///{tmp_path}/{name}") as f:
            assert f.stats().done > 3, name
    both = cli("crawl", "http://a.test/", "--state", str(tmp_path / "s"), "--store",
               f"sqlite:///{tmp_path}/b.db")
    assert "--state and --store" in one_error(both)
    twice = cli("--store", "memory://", "crawl", "http://a.test/", "--store",
                f"sqlite:///{tmp_path}/b.db")
    assert "two different --store values" in one_error(twice)
    assert not (tmp_path / "s").exists() and not (tmp_path / "b.db").exists()


def test_a_page_in_an_unknown_or_strict_only_charset_decodes_with_replacements() -> None:
    from crawlq.crawler.links import decode_html

    assert decode_html(b"<p>caf\xc3\xa9 \xff</p>", "idna") == "<p>café \ufffd</p>"
    assert decode_html(b"<p>x</p>", "no-such-charset") == "<p>x</p>"


def test_debug_logging_has_a_line_per_fetch() -> None:
    spec = SiteSpec(hosts=1, pages=3, special_links=False)
    with serve(spec) as web:
        run = cli("crawl", web.url(0, "/"), *LOCAL, "--allow-private", *FAST,
                  "--log-level", "DEBUG")
        n = len(pages(web))
    assert run.returncode == 0, run.stderr
    lines = [ln for ln in run.stderr.splitlines() if "crawlq.crawl: 200 http://" in ln]
    assert len(lines) == n and " bytes " in lines[0], run.stderr[-2000:]


@pytest.mark.parametrize(("loop", "shadowed", "want"), [
    ("auto", False, "uvloop.Loop"), ("uvloop", False, "uvloop.Loop"),
    ("asyncio", False, "asyncio.unix_events._UnixSelectorEventLoop"),
    ("auto", True, "asyncio.unix_events._UnixSelectorEventLoop"),  # not installed
    ("uvloop", True, None),
])
def test_the_crawl_runs_on_the_event_loop_asked_for(tmp_path: Path, loop: str, shadowed: bool,
                                                    want: str | None) -> None:
    """``--loop``: uvloop where installed (the crawl extra installs it), else asyncio's;
    asked for and missing, one error line. "Missing" is a uvloop that fails to import,
    put first on the path."""
    (tmp_path / "uvloop.py").write_text("raise ImportError('no uvloop here')\n")
    env = {**os.environ, "PYTHONPATH": str(tmp_path)} if shadowed else None
    spec = SiteSpec(hosts=1, pages=3, special_links=False)
    with serve(spec) as web:
        run = subprocess.run(
            [sys.executable, "-m", "crawlq.cli", "crawl", web.url(0, "/"), *LOCAL,
             "--allow-private", *FAST, "--log-level", "DEBUG", "--loop", loop],
            capture_output=True, text=True, timeout=60, env=env)
        n = len(pages(web))
    if want is None:
        assert "--loop uvloop: uvloop is not installed" in one_error(run)
        assert "pip install uvloop" in run.stderr  # (the advice, on the next line)
        return
    assert run.returncode == 0 and f"fetched {n} pages" in run.stdout, run.stderr
    assert f"event loop: {want}" in run.stderr, run.stderr[-2000:]


def test_a_script_without_a_main_guard_runs_once(tmp_path: Path) -> None:
    """The parse workers are plain subprocesses: nothing of the caller's script is run
    again in them (multiprocessing's spawn and forkserver would import it anew)."""
    script = tmp_path / "crawl_script.py"
    script.write_text(
        "import asyncio\n"
        "from crawlq.crawler import CrawlConfig, Crawler\n"
        "from crawlq.testing.web import SiteSpec, serve\n"
        "print('script body ran', flush=True)\n"
        "with serve(SiteSpec(hosts=1, pages=3, big_bytes=60_000)) as web:\n"
        "    config = CrawlConfig(seeds=[web.url(0, '/big')], allow_private=True,\n"
        "                         resolve={'*.crawlq.test': '127.0.0.1'}, min_delay=0,\n"
        "                         max_delay=0, delay_factor=0, max_pages=3)\n"
        "    s = asyncio.run(Crawler(config).run())\n"
        "print('fetched', s.fetched, 'errors', dict(s.errors))\n")
    run = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                         timeout=60, cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    assert run.stdout.count("script body ran") == 1, run.stdout
    assert "fetched 3 errors {}" in run.stdout, run.stdout


def test_a_page_slower_than_the_lease_is_renewed_not_fetched_twice(tmp_path: Path) -> None:
    spec = SiteSpec(hosts=1, pages=3, special_links=False, slow_seconds=2.5)
    with serve(spec) as web:
        s = _crawl(web, [web.url(0, "/slow/1"), web.url(0, "/")], f"sqlite:///{tmp_path}/f.db",
                   lease_ttl=0.9, timeout=10, concurrency=4, per_host=2, duration=20)
        slow = [h for h in web.hits() if h.path == "/slow/1"]
    assert s.finished and len(slow) == 1, slow  # its lease was renewed while it waited
    with Frontier.open(f"sqlite:///{tmp_path}/f.db") as f:
        assert f.stats().redelivered == 0


def test_one_bad_loc_in_a_sitemap_leaves_the_others() -> None:
    from crawlq.crawler.config import Summary
    from crawlq.crawler.discover import Links
    from crawlq.crawler.scope import Scope

    scope = Scope(["a.test"], [], [], None)
    assert scope.why_not("http://[zzz]/", 1) == "bad-url"
    summary = Summary()

    async def go() -> None:
        async with await AsyncFrontier.open("memory://") as f:  # a sitemap's <loc>s
            links = Links(scope, summary)
            links.follow(f, ["http://a.test/1", "http://[zzz]/", "http://a.test/2"], 1,
                         "http://a.test/map.xml")
            assert (await f.stats()).queued == 0  # (offered at the next flush)
            await links.flush(f)
            assert (await f.stats()).queued == 2 and summary.out_of_scope["bad-url"] == 1

    asyncio.run(go())


def test_a_page_that_kills_its_crawler_is_dead_after_its_redeliveries(tmp_path: Path) -> None:
    """The crawler dies (SIGKILL) each time it is fetching /slow/1; after
    --max-redeliveries expired leases that URL is dead with the reason, and the crawl
    finishes the other pages instead of handing it out for ever."""
    spec = SiteSpec(hosts=1, pages=3, special_links=False, slow_seconds=4)
    state = tmp_path / "state"
    with serve(spec) as web:
        cmd = [sys.executable, "-m", "crawlq.cli", "crawl", web.url(0, "/"),
               "--state", str(state), *LOCAL, *FAST, "--allow-address", "127.0.0.1",
               "--lease-ttl", "0.6", "--max-redeliveries", "2", "--timeout", "10"]
        for _ in range(3):
            before = web.started("/slow/1")
            # (named as a seed in these runs only: a seed named again is tried again)
            p = subprocess.Popen([*cmd[:4], web.url(0, "/slow/1"), *cmd[4:]],
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            deadline = time.monotonic() + 30
            while web.started("/slow/1") == before:  # until it is fetching the page
                assert p.poll() is None and time.monotonic() < deadline
                time.sleep(0.02)
            p.send_signal(signal.SIGKILL)
            p.wait()
            time.sleep(0.7)  # past its lease
        final = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
        assert final.returncode == 0, final.stderr
        assert "frontier empty" in final.stdout
        assert {"/", "/page/0", "/page/1", "/page/2"} <= {p for _, p in pages(web)}
        assert web.started("/slow/1") == 3  # not once more after it died
    dead = cli("--store", f"sqlite:///{state}/frontier.db", "dead")
    assert dead.returncode == 0, dead.stderr
    assert "/slow/1" in dead.stdout
    assert "lease expired unanswered 3 times (max_redeliveries 2)" in dead.stdout


def test_a_read_only_or_damaged_state_says_what_to_mend(tmp_path: Path) -> None:
    """A crawl whose --state cannot be written (a read-only mount: it says no even to
    root), or whose store file is damaged, is one error line that says so, and advice
    that fits: neither will come back by itself, unlike a server gone for a while."""
    state = tmp_path / "state"
    state.mkdir()
    assert cli("--store", f"sqlite:///{state}/frontier.db", "add",
               "http://a.crawlq.test/").returncode == 0
    crawl = [sys.executable, "-m", "crawlq.cli", "crawl", "http://a.crawlq.test/",
             "--state", str(state), *LOCAL, *FAST]
    # (a mount namespace of its own, where the state's folder is mounted read-only)
    script = (f"mount --bind -o ro {state} {state} && "
              + " ".join(f"'{a}'" for a in crawl))
    run = subprocess.run(["unshare", "-m", "sh", "-c", script], capture_output=True,
                         text=True, timeout=60)
    assert "cannot be written" in one_error(run), run.stderr
    assert "make the store writable" in run.stderr
    assert "once the store is back" not in run.stderr
    script = (f"mount --bind -o ro {state} {state} && '{sys.executable}' -m crawlq.cli "
              f"--store 'sqlite:///{state}/frontier.db' check")
    run = subprocess.run(["unshare", "-m", "sh", "-c", script], capture_output=True,
                         text=True, timeout=60)  # (check reads read-only media in place)
    assert run.returncode == 0 and "no damage found" in run.stdout, run.stderr
    fresh = tmp_path / "fresh"  # a new crawl in a folder that cannot be written
    fresh.mkdir()
    script = (f"mount --bind -o ro {fresh} {fresh} && "
              + " ".join(f"'{a}'" for a in crawl).replace(str(state), str(fresh)))
    run = subprocess.run(["unshare", "-m", "sh", "-c", script], capture_output=True,
                         text=True, timeout=60)
    assert "no permission to create files" in one_error(run), run.stderr
    assert "make the store writable" in run.stderr
    (state / "frontier.db").write_bytes(b"SQLite format 3\0" + b"\xff" * 4096)
    run = cli("crawl", "http://a.crawlq.test/", "--state", str(state), *LOCAL, *FAST)
    one_error(run)
    assert "crawlq check" in run.stderr and "once the store is back" not in run.stderr
