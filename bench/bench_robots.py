#!/usr/bin/env python3
"""robots.txt decisions: crawlq's rules against Google's matcher and protego, one run.

The corpus is the 4,231 real robots.txt files of protego's sdist (scripts/test.sh puts
it in .venv/robots-sdist). For every file and agent, each rule's pattern made concrete
is asked about (as tests/crawler/test_robots_conformance.py does). Reported: decisions per
second on rules parsed beforehand (crawlq, protego) or on the file itself (Google's
matcher parses it for every URL), parses per second, and agreement with Google.
``--files N`` takes the corpus's first N files (in name order) instead of all of them:
a handful check that the benchmark runs.

    python bench/bench_robots.py
    python bench/bench_robots.py --files 500
"""

from __future__ import annotations

import argparse
import re
import time
from pathlib import Path

from jwm.robotstxt import googlebot

from crawlq.crawler.robots import decode
from crawlq.crawler.robotstxt import RobotsTxt, path_params_query

CORPUS = (Path(__file__).resolve().parent.parent / ".venv" / "robots-sdist" /
          "protego-0.7.0" / "tests" / "test_data")
AGENTS = ("Googlebot", "crawlq", "bingbot")
_RULE = re.compile(r"^\s*(?:allow|disallow)\s*:\s*(\S+)", re.I | re.M)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--files", type=int, help="the corpus's first FILES files (default: all)")
    limit = ap.parse_args().files
    if not CORPUS.is_dir():
        raise SystemExit(f"{CORPUS} is missing: run bash scripts/test.sh once")
    files = []
    for f in sorted(CORPUS.iterdir())[:limit]:
        text = decode(f.read_bytes())
        paths = {"/", "/robots.txt", "/index.html"}
        for m in _RULE.finditer(text):
            p = m.group(1).replace("*", "x").rstrip("$")
            if p.startswith("/"):
                paths.update((p, p + "more"))
        urls = [f"http://{f.name}{path_params_query('http://x' + p)}"
                for p in sorted(paths)[:60]]
        files.append((text, urls))
    n = sum(len(u) for _, u in files) * len(AGENTS)
    print(f"{len(files)} files, {n:,} decisions")

    t = time.perf_counter()
    parsed = [[RobotsTxt.parse(text, a) for a in AGENTS] for text, _ in files]
    parse_s = time.perf_counter() - t
    t = time.perf_counter()
    ours = [r.allows(u) for (_, urls), rs in zip(files, parsed) for r in rs for u in urls]
    ours_s = time.perf_counter() - t

    google = googlebot.RobotsMatcher()
    t = time.perf_counter()
    want = [google.OneAgentAllowedByRobots(text, a, u)
            for text, urls in files for a in AGENTS for u in urls]
    google_s = time.perf_counter() - t
    agree = sum(x == y for x, y in zip(ours, want)) / n
    print(f"crawlq   {n / ours_s:>10,.0f} decisions/s on parsed rules; "
          f"{len(files) * len(AGENTS) / parse_s:,.0f} parses/s; agreement {agree:.4%}")
    print(f"google   {n / google_s:>10,.0f} decisions/s (the whole file parsed per URL)")
    try:
        from protego import Protego
    except ImportError:
        return
    t = time.perf_counter()
    prot = [Protego.parse(text) for text, _ in files]
    p_parse = time.perf_counter() - t
    t = time.perf_counter()
    theirs = [p.can_fetch(u, a) for (_, urls), p in zip(files, prot) for a in AGENTS
              for u in urls]
    p_s = time.perf_counter() - t
    agree = sum(x == y for x, y in zip(theirs, want)) / n
    print(f"protego  {n / p_s:>10,.0f} decisions/s on parsed rules; "
          f"{len(files) / p_parse:,.0f} parses/s; agreement {agree:.4%}")
    print(f"  crawlq: {(n / ours_s) / (n / p_s):.2f}x protego's decisions/s, "
          f"{(n / ours_s) / (n / google_s):.1f}x Google's matcher's")


if __name__ == "__main__":
    main()
