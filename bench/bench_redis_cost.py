#!/usr/bin/env python3
"""What a crawl costs its Redis server: CPU per crawled page and memory per URL.

Two parts, each on a throwaway redis-server of its own on a free loopback port:

crawl
    ``crawlq crawl --store redis://...`` on the test web (--hosts x --pages, every page
    with ``L`` links: L-1 on its host, one to another host; robots.txt obeyed; no
    politeness delay), for each ``--links L``. Reported: redis-server's own CPU
    (user + system, from /proc) over the pages fetched.
dataset
    ``Frontier.add`` of --urls URLs over ``H`` hosts, for each ``--dataset-hosts H``;
    Redis's ``used_memory_dataset`` over the URLs queued; then every URL leased and
    done: the dataset over the URLs seen (what is left is the seen-set and the
    queues' records).

``--src DIR`` (repeatable) runs each part with crawlq imported from each source tree in
turn (PYTHONPATH), the rounds alternated (--rounds), so that an older build and this one
meet the same machine; without it, the installed crawlq.

    python bench/bench_redis_cost.py
    python bench/bench_redis_cost.py --src /tmp/old/src --src src --rounds 3
    python bench/bench_redis_cost.py --tiny
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))


def crawl_part(src: str | None, hosts: int, pages: int, links: int,
               shards: int = 0, spread: bool = False) -> dict[str, Any]:
    """One crawl of the test web on a fresh Redis (``shards`` > 0: a crawl of that
    many shards; ``spread``: every host a registered domain of its own, else all of
    one): pages fetched, server CPU."""
    from bench_crawl import cpu_seconds, crawlq_command, run_crawl

    from crawlq.testing.redis_server import LocalRedis
    from crawlq.testing.web import SiteSpec, TestWeb

    spec = SiteSpec(hosts=hosts, pages=pages, links=links - 1, cross_links=1,
                    special_links=False, crawl_delay={}, robots_404=frozenset(),
                    own_domains=spread)
    web = TestWeb(spec, engine="asyncio").start()
    tmp = tempfile.mkdtemp(prefix="crawlq-bench-redis-cost-")
    try:
        with LocalRedis(Path(tmp) / "redis") as server:
            assert server.proc is not None
            seeds = [web.url(i, "/") for i in range(spec.hosts)]
            store = server.url + "?prefix=cost" + (f"&shards={shards}" if shards else "")
            cmd = crawlq_command(seeds, ["--store", store], 16, 4, 0.0,
                                 f"{tmp}/pages.jsonl", 16,
                                 None if spread else "crawlq.test", spec.resolve_glob())
            env = dict(os.environ)
            if src:
                env["PYTHONPATH"] = src
            cpu0 = cpu_seconds(server.proc.pid)
            seconds, _ = run_crawl(cmd, env=env)
            cpu = cpu_seconds(server.proc.pid) - cpu0
        fetched = {(h.host, h.path) for h in web.hits() if h.path != "/robots.txt"}
    finally:
        web.stop()
    return {"pages": len(fetched), "seconds": seconds, "cpu": cpu}


def dataset_child(url: str, urls: int, hosts: int) -> None:
    """(In a child process, crawlq from its PYTHONPATH.) Add, measure, drain, measure."""
    import random

    import redis

    from crawlq import Frontier

    r = redis.Redis.from_url(url)

    def dataset() -> int:
        return int(r.info("memory")["used_memory_dataset"])

    base = dataset()
    rnd = random.Random(7)
    f = Frontier.open(url + "?prefix=cost", min_delay=0, max_delay=0, delay_factor=0,
                      concurrency=1_000_000)
    batch: list[str] = []
    for i in range(urls):
        batch.append(f"http://www.site{rnd.randrange(hosts)}.com/docs/p{i}.html?q={i * 7}")
        if len(batch) == 5000:
            f.add(batch)
            batch = []
    if batch:
        f.add(batch)
    queued = dataset() - base
    while True:
        leases = f.next(5000)
        if not leases:
            break
        f.done(leases)
    seen = dataset() - base
    f.close()
    print(json.dumps({"queued": queued / urls, "seen": seen / urls}))


def dataset_part(src: str | None, urls: int, hosts: int) -> dict[str, Any]:
    """Bytes of Redis dataset per queued and per seen URL (a fresh server)."""
    from crawlq.testing.redis_server import LocalRedis

    tmp = tempfile.mkdtemp(prefix="crawlq-bench-redis-cost-")
    env = dict(os.environ)
    if src:
        env["PYTHONPATH"] = src
    with LocalRedis(Path(tmp) / "redis") as server:
        out = subprocess.run([sys.executable, __file__, "--child",
                              json.dumps([server.url, urls, hosts])],
                             capture_output=True, text=True, env=env, timeout=3600)
    if out.returncode != 0:
        raise RuntimeError(f"the dataset child failed:\n{out.stderr[-2000:]}")
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--src", action="append", help="a crawlq source tree (repeatable)")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--hosts", type=int, default=100, help="hosts of the crawled web")
    ap.add_argument("--pages", type=int, default=100, help="pages per host")
    ap.add_argument("--links", type=int, action="append", help="links a page (repeatable; "
                    "default 20 and 60)")
    ap.add_argument("--urls", type=int, default=200_000, help="URLs of the dataset part")
    ap.add_argument("--dataset-hosts", type=int, action="append",
                    help="hosts of the dataset part (repeatable; default 100 and 20,000)")
    ap.add_argument("--shards", type=int, action="append",
                    help="crawl part: also a crawl of this many shards (repeatable; "
                         "0: one crawl in one slot, the default)")
    ap.add_argument("--web", choices=["one", "spread"], action="append",
                    help="crawl part: the test web's hosts all of one registered domain "
                         "(one), or each its own (spread: what shards spread); "
                         "repeatable; default both")
    ap.add_argument("--only", choices=["crawl", "dataset"], action="append")
    ap.add_argument("--tiny", action="store_true",
                    help="a few seconds' run that checks the benchmark works")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        dataset_child(*json.loads(a.child))
        return
    if a.tiny:
        a.hosts, a.pages, a.urls = 2, 10, 2000
        a.links = a.links or [5]
        a.dataset_hosts = a.dataset_hosts or [20]
    links = a.links or [20, 60]
    dhosts = a.dataset_hosts or [100, 20_000]
    srcs: list[str | None] = list(a.src) if a.src else [None]
    parts = a.only or ["crawl", "dataset"]
    for rnd in range(1, a.rounds + 1):
        for src in srcs:
            name = src or "installed"
            if "crawl" in parts:
                for n, web, shards in itertools.product(links, a.web or ["one", "spread"],
                                                        a.shards or [0]):
                    r = crawl_part(src, a.hosts, a.pages, n, shards, web == "spread")
                    kind = f", {shards} shards" if shards else ""
                    where = "1 domain" if web == "one" else f"{a.hosts} domains"
                    print(f"round {rnd} {name:<24} crawl {a.hosts}x{a.pages} ({where}), "
                          f"{n} links{kind}: {r['pages']} pages in {r['seconds']:.1f} s, "
                          f"redis-server {r['cpu'] * 1e6 / max(r['pages'], 1):.0f} µs "
                          "a page", flush=True)
            if "dataset" in parts:
                for h in dhosts:
                    r = dataset_part(src, a.urls, h)
                    print(f"round {rnd} {name:<24} dataset {a.urls:,} URLs, {h:,} hosts: "
                          f"{r['queued']:.1f} B a queued URL, {r['seen']:.1f} B a seen URL",
                          flush=True)


if __name__ == "__main__":
    main()
