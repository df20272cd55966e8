"""Every script in bench/ runs, at a tiny size, so that a renamed function breaks the
build and not the next person's measurement (issue 61, item 3).

Each case runs one script as a subprocess with arguments that make it take seconds,
and checks that it exits 0, printed no FAILED row, and printed the figures it exists
to print (its last table rows and ratio lines: what a bench broken half-way would not
print). The figures themselves mean nothing at these sizes and are not judged. Benches
that need Redis start their own throwaway redis-server (crawlq.testing.redis_server), and
bench_docs.py its own nginx (nginx and wget installed by scripts/test.sh, or by the bench
as root); every bench talks to 127.0.0.1 only.

By hand, the same runs:  .venv/bin/python -m pytest tests/test_benches.py
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench"
_N = r"[\d,.]+"  # a figure as the benches print them: 1,234 or 0.56


@dataclass(frozen=True)
class Tiny:
    """One tiny run of a bench script: its arguments, and regular expressions (each
    matched against the output, line by line with ``re.M``) that must all be found."""

    args: tuple[str, ...]
    expect: tuple[str, ...]


TINY: dict[str, tuple[Tiny, ...]] = {
    "bench_aio.py": (Tiny(
        ("--n", "500", "--rounds", "1"),
        (rf"^memory\s+per call\s+add\s+{_N}\s+{_N}\s+{_N}x$",
         rf"^sqlite\s+batch\s+done\s+{_N}\s+{_N}\s+{_N}x$")),),
    "bench_canonical.py": (Tiny(
        ("--n", "2000", "--repeat", "1"),
        (rf"^crawlq\s+{_N} URLs/s\s+{_N}x w3lib$", rf"^w3lib\s+{_N} URLs/s\s+1\.00x w3lib$")),),
    "bench_crawl.py": (Tiny(
        ("--tiny",),
        # (crawlq's rows: no page fetched twice, none missing, in both scenarios)
        (rf"== throughput[^=]*^crawlq\s+\d+\s+0\s+0\s+{_N}\s+{_N}\s*$"
         rf"[^=]*crawlq: {_N}x the pages/s of bare-aiohttp$",
         rf"== efficiency[^=]*^crawlq\s+\d+\s+0\s+0\s+{_N}\s+{_N}\s+{_N}$"
         rf"[^=]*crawlq: {_N}x the pages/s of bare-aiohttp$")),),
    "bench_docs.py": (Tiny(
        ("--tiny", "--rounds", "1"),
        # (every contender's row: 40 pages, none twice, the same set as wget's; the
        # ratios; the tiny sites' 4 unlinked pages)
        (*(rf"^{c}\s+1\s+40\s+0\s+\d+\s+\d+\s+\+0/-0(?:\s+{_N}){{6}}$"
           for c in ("crawlq-jsonl", "crawlq-warc", "wget-parallel", "wget-serial")),
         rf"^  crawlq-warc: {_N}x wget-parallel's pages/s, {_N}x its pages per CPU-second$",
         r"^  HTML files in the trees: 40; fetched by none of the contenders .*: 4: ")),),
    "bench_domains.py": (Tiny(
        ("--lookups", "5000", "--n", "2000", "--seconds", "1"),
        (rf"^lookup: {_N} us per new key, {_N} us per key seen before$",
         rf"^  sqlite\s+rules off\s+{_N}/s\s+on\s+{_N}/s\s+on/off {_N}x$",
         rf"^  beside the trap, no bounds .* worst site {_N}x alone$")),),
    "bench_frontier.py": (Tiny(
        ("--n", "2000", "--hosts", "50", "--batch", "500"),
        (rf"^scrapy-memory\s+{_N}\s+{_N}\s+{_N}\s.*\s1\.00x$",
         rf"^floor-memory\s.*\s{_N}x$",
         rf"^crawlq-sqlite conc=1 per-call\s.*\s{_N}x$",
         rf"^  crawlq-redis conc=1 +combined {_N}x, next\+done {_N}x; per-call {_N}x Scrapy's",
         rf"^crawlq-redis vs scrapy-redis \(same redis-server\): {_N}x$")),),
    "bench_percall.py": (
        Tiny(("--urls", "2000"),
             (rf"^sqlite \(group_commit=0\.0\): batch {_N}/s, one done\(\) per lease {_N}/s: "
              rf"{_N}x$",)),
        Tiny(("--store", "memory", "--urls", "2000"),
             (rf"^memory.*: batch {_N}/s, one done\(\) per lease {_N}/s: {_N}x$",)),
        Tiny(("--store", "redis", "--urls", "1000"),
             (rf"^redis.*: batch {_N}/s, one done\(\) per lease {_N}/s: {_N}x$",)),
        Tiny(("--store", "sharded", "--urls", "1000"),
             (rf"^sharded.*: batch {_N}/s, one done\(\) per lease {_N}/s: {_N}x$",))),
    "bench_redis.py": (Tiny(
        ("--n", "2000", "--hosts", "50", "--clients", "1", "--clients", "2"),
        (rf"^\s+2\s+{_N}\s+{_N}\s+{_N}\s+{_N}x$",)),),
    "bench_redis_cost.py": (Tiny(
        ("--tiny", "--shards", "0", "--shards", "2"),
        (r"^round 1 installed +crawl 2x10 \(1 domain\), 5 links: 22 pages in [\d.]+ s, "
         r"redis-server \d+ µs a page$",
         r"^round 1 installed +crawl 2x10 \(2 domains\), 5 links, 2 shards: 22 pages in "
         r"[\d.]+ s, redis-server \d+ µs a page$",
         rf"^round 1 installed +dataset 2,000 URLs, 20 hosts: {_N} B a queued URL, {_N} B a "
         r"seen URL$")),),
    "bench_remote.py": (Tiny(
        ("--delay", "0", "--delay", "0.001", "--hosts", "2", "--pages", "20",
         "--page-bytes", "1000", "--links", "4"),
        # (each way, PING, pages, twice, missing 0, seconds, pages/s, ratio)
        (rf"^\s+1ms\s+{_N}\s+\d+\s+\d+\s+0\s+{_N}\s+{_N}\s+{_N}x$",)),),
    "bench_robots.py": (Tiny(
        ("--files", "30"),
        (rf"^crawlq\s+{_N} decisions/s on parsed rules; {_N} parses/s; agreement {_N}%$",
         rf"^  crawlq: {_N}x protego's decisions/s, {_N}x Google's matcher's$")),),
    "bench_scale.py": (Tiny(
        ("--at", "2000", "--at", "4000", "--hosts", "100", "--window", "1000",
         "--repeat", "1", "--batch", "500"),
        (rf"^\s+4,000\s+{_N}\s+{_N}\s+{_N}x\s+{_N}x\s+{_N}\s+{_N}$",)),),
    "bench_scrapy.py": (Tiny(
        ("--tiny", "--rounds", "1"),
        (rf"^  bare-list: {_N} s, {_N}x the pages/s of Scrapy's default scheduler$",
         rf"^  crawlq-memory: small hosts done in {_N} s, {_N}x sooner than",
         rf"^crawlq-redis\s+median\s+{_N} pages/min\s+{_N}x Scrapy's default scheduler$",
         rf"^bare-list\s+median\s+{_N} pages/min\s+{_N}x Scrapy's default scheduler$")),),
    "bench_scrapy_scheduler.py": (Tiny(
        ("--rounds", "1"),
        (rf"^  crawlq-redis\s+{_N} µs CPU/page, {_N}x Scrapy's default scheduler$",)),),
    "bench_serve.py": (Tiny(
        ("--urls", "2000", "--batch", "500"),
        (rf"^  served: {_N}x in-process add, {_N}x next\+ack$",)),),
    "bench_sqlite_layouts.py": (
        Tiny(("--keys", "20000", "--batch", "1000", "--l0", "5000", "--slices", "2",
              "--slices2", "2", "--layout", "one", "--layout", "three", "--layout", "four"),
             (rf"^seen\s+four: 20,000 rows in {_N} s \({_N}/s\)$",)),
        Tiny(("--table", "entries", "--keys", "20000", "--batch", "1000", "--l0", "5000",
              "--queues", "100"),
             (rf"^entries\s+three: 20,000 rows in {_N} s \({_N}/s\)$",))),
    "bench_urlfrontier.py": (Tiny(
        ("--urls", "2000", "--batch", "500"),
        (rf"^in-process\s+{_N}\s+{_N}$",
         rf"^crawlq serve \(native\), pb\s+{_N}\s+{_N}\s+{_N}\s+{_N}\s+{_N} MB$",
         *(rf"^  {kind}, {client} client: crawlq over gRPC {_N}x in-process add .* "
           rf"{_N}x the do-nothing"
           for kind in ("native", "grpcio") for client in ("pb", "raw")))),
        Tiny(("--urls", "1000", "--batch", "500", "--rounds", "2", "--client", "raw",
              "--grpc-server", "native", "--one-server"),
             (rf"^crawlq serve \(native\), raw\s+{_N}\s+{_N}\s+{_N}\s+{_N}\s+{_N} MB$",
              rf"^    rounds: put/s {_N}, {_N}; get\+ack/s {_N}, {_N}; "
              rf"CPU µs/URL {_N}/{_N}, {_N}/{_N}$"))),
    "bench_workers.py": (Tiny(
        ("--hosts", "2", "--pages", "20", "--page-bytes", "1000", "--links", "4"),
        # (workers, pages, twice, missing 0, ..., speed, per CPU)
        (rf"^\s+2\s+\d+\s+\d+\s+0\s+.*\s{_N}x\s+{_N}x$",)),),
    "call_path.py": tuple(
        Tiny(("--tiny", "--store", store),
             # (a next() enters the frontier, the store and the engine, with no callback)
             (r"^next\(10\)\s+([4-9]|\d\d)\s+\d+\s+0$", r"^done\(1 lease\)\s+\d+\s+\d+\s+0$"))
        for store in ("sqlite", "memory")),
    "crawl_floor.py": (Tiny(
        ("--n", "50"),
        (rf"^CPU per page: parse {_N} us \({_N} links\), .* output {_N} us: {_N} us in all$",)),),
    "instructions.py": (Tiny(
        ("--n", "2000", "--hosts", "50"),  # (--callgrind needs valgrind: not in CI)
        (r"^[1-9][\d,]* leased$",)),),
    "profile_sqlite.py": (Tiny(
        ("--n", "2000", "--top", "3"),
        (rf"^add: 2,000 in {_N} s \({_N}/s\); SQL {_N} s$",
         rf"^next\+done: {_N} in {_N} s \({_N}/s\); SQL {_N} s\n  +{_N} s +{_N} calls")),),
    "sqlite_floor.py": tuple(
        Tiny(("--n", "2000", "--hosts", "50", "--leases", leases),
             (rf"add {_N}/s, next\+done {_N}/s, combined {_N}/s$",))
        for leases in ("rows", "batch", "none")),
    "workload.py": (Tiny(
        ("--n", "1000", "--hosts", "50"),
        # (exactly 1,000 records, one a line)
        (r'\A(?:\{"url": "https?://[^"]+", "priority": -?\d\}\n){1000}\Z',)),),
}
"""The tiny runs of each script that has a ``__main__``."""

HELPERS: dict[str, str] = {
    "memory_floor.py": "bench_frontier.py",
}
"""Modules of bench/ without a command line, and the script that runs them (its tiny
run covers them)."""

CASES = [pytest.param(script, tiny, id=script if len(cases) == 1 else f"{script}-{i + 1}")
         for script, cases in sorted(TINY.items()) for i, tiny in enumerate(cases)]


def _has_main(path: Path) -> bool:
    return re.search(r"^if __name__ == .__main__.:", path.read_text(), re.M) is not None


def test_every_bench_has_a_tiny_run() -> None:
    """A new bench cannot be forgotten: every script with a ``__main__`` has a tiny run
    here, every other module is a helper some script imports, and nothing here names a
    file that is gone."""
    scripts = sorted(p.name for p in BENCH.glob("*.py"))
    assert scripts, f"no scripts in {BENCH}"
    for name in scripts:
        if _has_main(BENCH / name):
            assert name in TINY, f"bench/{name} has no tiny run in tests/test_benches.py"
        else:
            assert name in HELPERS, (f"bench/{name} has no __main__ and is not a known "
                                     "helper: give it a tiny run or list it in HELPERS")
    for name, user in HELPERS.items():
        assert name in scripts, f"HELPERS names bench/{name}, which is gone"
        assert not _has_main(BENCH / name), f"bench/{name} has a __main__: give it a tiny run"
        assert re.search(rf"\b{Path(name).stem}\b", (BENCH / user).read_text()), \
            f"bench/{user} does not use bench/{name}"
    gone = sorted(set(TINY) - set(scripts))
    assert not gone, f"TINY names scripts that are gone: {gone}"


@pytest.mark.timeout(300)
@pytest.mark.parametrize(("script", "tiny"), CASES)
def test_bench_runs_tiny(script: str, tiny: Tiny, tmp_path: Path) -> None:
    """The script exits 0 at its tiny size and prints the figures it exists for."""
    # (the benches' temporary files and databases land in tmp_path)
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    env.pop("CRAWLQ_WORKLOAD", None)  # (the generated workload, not a user's file)
    env.pop("CRAWLQ_BENCH_REDIS", None)  # (a throwaway redis-server, not a user's)
    start = time.monotonic()
    run = subprocess.run([sys.executable, str(BENCH / script), *tiny.args], cwd=tmp_path,
                         env=env, capture_output=True, text=True, timeout=240)
    seconds = time.monotonic() - start
    out = run.stdout + run.stderr
    shown = f"bench/{script} {' '.join(tiny.args)} ({seconds:.1f} s):\n{out[-4000:]}"
    assert run.returncode == 0, f"exit code {run.returncode}: {shown}"
    assert not re.search(r"\bFAILED\b", out), f"a contender FAILED: {shown}"
    for expect in tiny.expect:
        assert re.search(expect, run.stdout, re.M), f"no match for {expect!r}: {shown}"
