"""``crawlq crawl --workers N``: real worker processes on one store (SQLite file, real
redis-server), crawling a real test web on 127.0.0.1; politeness checked from the
server's own log of requests."""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
from collections import Counter, defaultdict
from pathlib import Path

import pytest

from crawlq.testing.redis_server import LocalRedis
from crawlq.testing.web import SiteSpec, reachable, serve

LOCAL = ["--allow-domain", "crawlq.test", "--resolve", "*.crawlq.test=127.0.0.1",
         "--allow-private", "--progress", "0"]


def cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "crawlq.cli", *args], capture_output=True,
                          text=True, timeout=timeout)


@pytest.mark.parametrize("kind", ["sqlite", "redis", "sharded"])
def test_workers_share_one_crawl_politely(kind: str, tmp_path: Path,
                                          redis_server: LocalRedis,
                                          request: pytest.FixtureRequest) -> None:
    # (more hosts than one worker may hold leases for, 8 x --concurrency: a worker
    # takes every host ready when it asks, so with fewer one could take them all)
    # sharded: one crawl over 8 shards of a 3-node Redis Cluster, each host a
    # registered domain of its own (spread over the shards)
    spec = SiteSpec(hosts=20, pages=12, special_links=False, crawl_delay={},
                    robots_404=frozenset(), own_domains=kind == "sharded")
    prefix = f"prefix=workers-{tmp_path.name}"
    if kind == "sqlite":
        where = ["--state", str(tmp_path / "state")]
    elif kind == "redis":
        where = ["--store", f"{redis_server.url}?{prefix}"]
    else:
        cluster = request.getfixturevalue("redis_cluster")
        where = ["--store", f"{cluster.url}&{prefix}&shards=8"]
    scope = (["--resolve", f"{spec.resolve_glob()}=127.0.0.1", "--allow-private",
              "--progress", "0"] if kind == "sharded" else LOCAL)
    out = tmp_path / "pages.jsonl"
    delay = 0.1
    with serve(spec) as web:
        run = cli("crawl", *[web.url(i, "/") for i in range(spec.hosts)], *where, *scope,
                  "--workers", "2", "--concurrency", "2", "--per-host", "1",
                  "--min-delay", str(delay),
                  "--max-delay", str(delay), "--delay-factor", "0", "--out", str(out),
                  "--progress", "0.3")
        hits = [h for h in web.hits() if h.path != "/robots.txt"]
        want = reachable(spec, web.port) | {(spec.host(i), "/") for i in range(spec.hosts)}
    assert run.returncode == 0, run.stderr
    # one output file per worker, every page in exactly one of them, each worker used
    files = [tmp_path / "pages.w1.jsonl", tmp_path / "pages.w2.jsonl"]
    written = [[json.loads(line)["url"] for line in f.read_text().splitlines()]
               for f in files]
    assert all(written), [len(w) for w in written]
    urls = Counter(u for w in written for u in w)
    assert max(urls.values()) == 1 and len(urls) == len(want)
    assert not out.exists()
    # every page fetched once; one summary for the whole crawl
    fetched = Counter((h.host, h.path) for h in hits)
    assert set(fetched) == want and max(fetched.values()) == 1
    assert f"fetched {len(want)} pages" in run.stdout and "frontier empty" in run.stdout
    assert run.stdout.count("fetched ") == 1 and "(2 workers on " in run.stdout
    # one progress line for both (the workers show none of their own)
    progress = [ln for ln in run.stderr.splitlines() if ln.startswith("pages ")]
    assert progress and all("workers " in ln for ln in progress), run.stderr
    # politeness across the processes, from the server's log: one request at a time per
    # host, each at least the delay after the one before
    by_host: dict[str, list[float]] = defaultdict(list)
    for h in hits:
        by_host[h.host].append(h.at)
    for host, times in by_host.items():
        times.sort()
        gaps = [b - a for a, b in itertools.pairwise(times)]
        assert min(gaps) >= delay * 0.9, (host, min(gaps))


def test_workers_need_a_shared_store_and_a_file(tmp_path: Path) -> None:
    def one_error(run: subprocess.CompletedProcess[str]) -> str:
        errors = [ln for ln in run.stderr.splitlines() if ln.startswith("crawlq: error:")]
        assert run.returncode == 2 and len(errors) == 1, (run.returncode, run.stderr)
        assert "Traceback" not in run.stderr
        return errors[0]

    memory = cli("crawl", "http://a.test/", "--workers", "2")
    assert "needs a store the workers share" in one_error(memory)
    stdout = cli("crawl", "http://a.test/", "--workers", "2", "--state",
                 str(tmp_path / "s"), "--out", "-")
    assert "one output file per worker" in one_error(stdout)
    metrics = cli("crawl", "http://a.test/", "--workers", "2", "--state",
                  str(tmp_path / "s"), "--metrics", "0")
    assert "--metrics" in one_error(metrics)


def test_a_worker_that_fails_makes_the_run_fail_with_its_reason(tmp_path: Path) -> None:
    """Redis away: each worker fails with the store error; the run says so in one line."""
    run = cli("crawl", "http://a.test/", "--workers", "2", "--store",
              "redis://127.0.0.1:1/0?retry_deadline=0.2", *LOCAL)
    errors = [ln for ln in run.stderr.splitlines() if ln.startswith("crawlq: error:")]
    assert run.returncode == 2 and len(errors) == 1, run.stderr
    assert "worker 1 of 2 failed" in errors[0] and "Redis" in errors[0]
