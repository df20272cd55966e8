"""A bounded record, kept by a client, of keys a store's seen-set is known to hold.

A crawl meets most links again and again (menus, footers, pages linking each other):
once the store has answered that a fingerprint is in its seen-set for good, a client
that remembers it can answer the next offers of it itself, a duplicate, without a
round trip or any of the store's work. Used by the Redis store (per store object) and
by the Scrapy scheduler (per spider).
"""

from __future__ import annotations


class KnownSeen:
    """A bounded set: two generations of at most ``limit // 2`` keys each. When the
    young one fills, the old one is dropped and the young one becomes old: memory stays
    bounded, the keys met most recently stay, and a key forgotten only costs its next
    offer a store call. ``limit`` 0: it remembers nothing."""

    def __init__(self, limit: int) -> None:
        self.half = max(limit // 2, 1) if limit > 0 else 0
        self.young: set[object] = set()
        self.old: set[object] = set()

    def __contains__(self, key: object) -> bool:
        return key in self.young or key in self.old

    def __len__(self) -> int:
        return len(self.young) + len(self.old)

    def add(self, key: object) -> None:
        """Remember ``key`` (the store holds it for good)."""
        if not self.half:
            return
        young = self.young
        young.add(key)
        if len(young) >= self.half:
            self.old, self.young = young, set()

    def clear(self) -> None:
        """Forget every key (the store's seen-set may have lost or requalified some)."""
        self.young = set()
        self.old = set()
