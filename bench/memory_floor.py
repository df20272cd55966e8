"""How fast can any in-memory Python frontier on crawlq's canonical URLs be? A lower
bound on the work per request, run by bench_frontier.py as the contender "floor-memory".

Not a frontier: the least one must do on the reference workload with crawlq's canonical
form and public types, and nothing else:

- add: the caller builds a ``crawlq.Request`` per offered URL (as every contender
  builds its own request objects); its URL is canonicalized by crawlq's
  ``Canonicalizer`` (WHATWG parsing through ada, then crawlq's steps) and fingerprinted
  (BLAKE2b-128), the fingerprint looked up in a set, and a new URL appended to its
  host's list;
- drain: the hosts taken round-robin, one URL each per turn, each handed out as a new
  ``Request`` inside a ``Lease`` (what a caller of ``next()`` receives).

No priorities, politeness, validation, payload encoding, lease records,
acknowledgements, retries or statistics: every frontier does more. Its combined rate
against Scrapy's scheduler in the same run is the most any frontier with these parts
could reach on this machine.
"""

from __future__ import annotations

from pathlib import Path
from time import perf_counter
from typing import Any


def run_floor(urls: list[str], prios: list[int], batch: int, tmp: Path) -> dict[str, Any]:
    """Add and drain the workload the least possible way (see the module docstring);
    the figures bench_frontier.py reports for a contender."""
    from crawlq import Request
    from crawlq.models import Lease
    from crawlq.policies.canonical import Canonicalizer
    from crawlq.policies.fingerprint import url_fingerprint

    split = Canonicalizer().split
    pairs = list(zip(urls, prios))
    seen: set[bytes] = set()
    queues: dict[str, list[tuple[str, int]]] = {}
    t0 = perf_counter()
    for i in range(0, len(pairs), batch):
        for req in [Request(u, priority=p) for u, p in pairs[i:i + batch]]:
            canon, host = split(req.url)
            fp = url_fingerprint(canon)
            if fp in seen:
                continue
            seen.add(fp)
            q = queues.get(host)
            if q is None:
                q = queues[host] = []
            q.append((req.url, req.priority))
    t1 = perf_counter()
    for q in queues.values():
        q.reverse()  # (popped from the end: first in, first out)
    token = 0
    hosts = list(queues)
    while hosts:
        leases = []
        left = []
        for host in hosts:
            q = queues[host]
            url, prio = q.pop()
            token += 1
            leases.append(Lease(token, Request(url, "GET", b"", prio), host, 0.0, 30.0))
            if q:
                left.append(host)
        hosts = left
    t2 = perf_counter()
    return {"unique": token, "add_s": t1 - t0, "drain_s": t2 - t1, "rss": 0,
            "disk": None, "heap": None, "server": None}
