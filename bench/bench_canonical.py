#!/usr/bin/env python3
"""Canonical URL + fingerprint per URL: crawlq's canonicalizer against w3lib's (Scrapy's).

On the same URLs (bench/workload.py's generated requests, or $CRAWLQ_WORKLOAD), each
contender turns every URL into its canonical form and a fingerprint, as a frontier does
for each offered request:

- crawlq: ``Canonicalizer.split`` (WHATWG parsing by ada, then crawlq's steps) and the
  default ``Fingerprinter`` (BLAKE2b-128);
- w3lib: ``canonicalize_url`` and SHA-1 of the result (Scrapy's default fingerprint
  hashes the canonical URL with SHA-1, among other fields);
- can_ada alone: parse and serialize, the floor under crawlq's figure.

Each contender keeps its fastest of --repeat rounds.

    python bench/bench_canonical.py                # 100,000 URLs
    python bench/bench_canonical.py --n 20000 --repeat 5
"""

from __future__ import annotations

import argparse
import hashlib
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from workload import generate

from crawlq import Canonicalizer, Fingerprinter, Request


def best(fn: Callable[[], object], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=100_000, help="URLs")
    ap.add_argument("--repeat", type=int, default=3, help="rounds; the fastest counts")
    args = ap.parse_args()
    urls, _, _ = generate(args.n)
    split = Canonicalizer().split
    fingerprint = Fingerprinter()
    requests = [Request(u) for u in urls]

    def crawlq() -> None:
        for r in requests:
            fingerprint(r, split(r.url)[0])

    def floor() -> None:
        from can_ada import parse

        for u in urls:
            parse(u).href  # noqa: B018

    contenders: dict[str, Callable[[], None]] = {"crawlq": crawlq, "can_ada alone": floor}
    try:
        from w3lib.url import canonicalize_url

        def w3lib() -> None:
            for u in urls:
                hashlib.sha1(canonicalize_url(u).encode()).digest()

        contenders["w3lib"] = w3lib
    except ImportError:
        print("(w3lib is not installed: pip install w3lib)")
    rates = {name: len(urls) / best(fn, args.repeat) for name, fn in contenders.items()}
    print(f"{len(urls):,} URLs (bench/workload.py), fastest of {args.repeat} rounds")
    base = rates.get("w3lib")
    for name, rate in rates.items():
        ratio = f"{rate / base:6.2f}x w3lib" if base else ""
        print(f"{name:<14} {rate:>12,.0f} URLs/s  {ratio}")


if __name__ == "__main__":
    main()
