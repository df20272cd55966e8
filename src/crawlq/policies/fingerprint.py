"""Request fingerprints: 128-bit keys of the seen-set.

Default: BLAKE2b-128 of ``method``, the canonical URL and the body (Scrapy's idea).
``source_aware=True`` mixes in the canonical referrer (Spiderman's non-strict mode:
the same URL found from two pages is two requests).
"""

from __future__ import annotations

from collections.abc import Callable
from hashlib import blake2b

from ..models import Request

FingerprintFunction = Callable[[Request, str], bytes]
"""``(request, canonical_url) -> fingerprint bytes`` (16 bytes recommended)."""


class Fingerprinter:
    """Callable ``(request, canonical_url) -> 16-byte fingerprint``."""

    def __init__(self, *, source_aware: bool = False) -> None:
        self.source_aware = source_aware

    def __call__(self, request: Request, canonical_url: str) -> bytes:
        """Return the fingerprint of ``request`` whose URL canonicalizes to ``canonical_url``."""
        head = canonical_url if request.method == "GET" else f"{request.method} {canonical_url}"
        if self.source_aware and request.referrer:
            head = f"{request.referrer}\x00{head}"
        h = blake2b(head.encode("utf-8", "surrogatepass"), digest_size=16)
        if request.body:
            h.update(b"\x00")
            h.update(request.body)
        return h.digest()
