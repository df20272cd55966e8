"""The scheduler's record of requests the frontier has already seen.

Most requests a spider yields are duplicates (links to pages already found). Asking the
store about each costs a store call; this record answers most of them in the process,
and the store is asked only about requests it does not hold. It is exact: a key enters
it only after the store has said the request is in its seen-set, and a seen-set only
grows (unless ``revisit_after`` is set, and then the record is not used).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from scrapy import Request as ScrapyRequest

from ...stores.known import KnownSeen

_NOT_CACHEABLE = ("revisit_after", "fingerprint", "source_aware")
"""``Frontier.open`` options under which a seen URL may later be new again, or its
fingerprint depends on more than the URL."""


def seen_cache_applies(options: Mapping[str, Any]) -> bool:
    """Whether the frontier options let a process remember seen requests."""
    return not any(options.get(name) for name in _NOT_CACHEABLE)


class SeenKeys:
    """A bounded set of dedup keys the frontier has seen (a
    :class:`~crawlq.stores.known.KnownSeen` of ``limit`` keys).

    The key of a request is its Scrapy fingerprint when fingerprints are Scrapy's, else
    its URL for a GET without a body (crawlq's fingerprint is then a function of the URL
    alone); other requests have no key and are always offered to the store.
    """

    def __init__(self, limit: int, fingerprints: str) -> None:
        self.known = KnownSeen(limit)
        self.scrapy_fp = fingerprints == "scrapy"

    def key(self, request: ScrapyRequest, fp: bytes | None) -> object:
        """The request's dedup key, or None when it has none (or the record is off)."""
        if not self.known.half:
            return None
        if self.scrapy_fp:
            return fp
        return request.url if request.method == "GET" and not request.body else None

    def __contains__(self, key: object) -> bool:
        return key in self.known

    def add(self, key: object) -> None:
        """Remember ``key`` (the store has it in its seen-set)."""
        self.known.add(key)
