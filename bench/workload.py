#!/usr/bin/env python3
"""The scheduler benchmarks' workload: offered requests as a crawler would offer them.

``generate(n, hosts, seed)`` returns ``(urls, priorities, unique)``: ``n`` offered URLs
over ``hosts`` hosts whose popularity follows Zipf's law (host k gets a share ~ 1/k),
of which about 20% repeat an earlier URL exactly, about 5% repeat one with its query
arguments in another order or a ``#fragment`` added (the same page once canonical), and
the rest are new; priorities are uniform in [-5, 5]; ``unique`` is the number of
distinct pages. The same arguments always give the same workload.

To measure on another workload instead (for example the one other figures were
measured on), give a JSON Lines file of ``{"url": ..., "priority": ...}`` records in
``$CRAWLQ_WORKLOAD``: :func:`load` reads it, and the benchmarks use it when it is set.

    python bench/workload.py --n 200000 --hosts 5000 > workload.jsonl
"""

from __future__ import annotations

import argparse
import bisect
import contextlib
import itertools
import json
import os
import random
import sys

_SECTIONS = ("news", "shop", "wiki", "blog", "docs", "forum", "item", "user", "tag", "video")


def generate(n: int, hosts: int = 5000, seed: int = 42) -> tuple[list[str], list[int], int]:
    """(offered URLs, their priorities, the number of distinct pages among them)."""
    if os.environ.get("CRAWLQ_WORKLOAD"):
        return load(os.environ["CRAWLQ_WORKLOAD"], n)
    rng = random.Random(seed)
    weights = list(itertools.accumulate(1.0 / k for k in range(1, hosts + 1)))
    top = weights[-1]
    pages: list[tuple[str, str, list[tuple[str, str]]]] = []  # host+path, and its query
    urls: list[str] = []
    prios: list[int] = []
    for i in range(n):
        roll = rng.random()
        if pages and roll < 0.20:  # the same URL again
            base, path, query = pages[rng.randrange(len(pages))]
            url = _url(base, path, query)
        elif pages and roll < 0.25:  # the same page, spelled another way
            base, path, query = pages[rng.randrange(len(pages))]
            if len(query) > 1:
                query = query[1:] + query[:1]
                url = _url(base, path, query)
            else:
                url = _url(base, path, query) + f"#part{rng.randrange(10)}"
        else:  # a new page
            host = bisect.bisect_left(weights, rng.random() * top)
            base = f"https://www.site{host}.example"
            path = f"/{rng.choice(_SECTIONS)}/{i}"
            query = [(f"p{k}", str(rng.randrange(1000))) for k in range(rng.randrange(3))]
            pages.append((base, path, query))
            url = _url(base, path, query)
        urls.append(url)
        prios.append(rng.randint(-5, 5))
    return urls, prios, len(pages)


def _url(base: str, path: str, query: list[tuple[str, str]]) -> str:
    return base + path + ("?" + "&".join(f"{k}={v}" for k, v in query) if query else "")


def load(path: str, n: int | None = None) -> tuple[list[str], list[int], int]:
    """The workload in a JSON Lines file (its first ``n`` records); ``unique`` counted
    with crawlq's default canonical form."""
    from crawlq.policies.canonical import Canonicalizer

    canon = Canonicalizer()
    urls: list[str] = []
    prios: list[int] = []
    with open(path, encoding="utf-8") as f:
        for line in itertools.islice(f, n):
            rec = json.loads(line)
            urls.append(rec["url"])
            prios.append(int(rec.get("priority", 0)))
    distinct = set()
    for u in urls:
        with contextlib.suppress(ValueError):  # (an invalid URL is no page)
            distinct.add(canon(u))
    return urls, prios, len(distinct)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=200_000)
    ap.add_argument("--hosts", type=int, default=5000)
    ap.add_argument("--seed", type=int, default=42)
    a = ap.parse_args()
    urls, prios, _ = generate(a.n, a.hosts, a.seed)
    for u, p in zip(urls, prios):
        sys.stdout.write(json.dumps({"url": u, "priority": p}) + "\n")


if __name__ == "__main__":
    main()
