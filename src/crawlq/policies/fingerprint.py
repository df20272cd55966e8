"""Request fingerprints: 128-bit keys of the seen-set.

Default: BLAKE2b-128 of ``method``, the canonical URL and the body (Scrapy's idea).
``source_aware=True`` mixes in the canonical referrer (Spiderman's non-strict mode:
the same URL found from two pages is two requests).
"""

from __future__ import annotations

from collections.abc import Callable
from hashlib import blake2b

from .._native import native
from ..models import Request

FingerprintFunction = Callable[[Request, str], bytes]
"""``(request, canonical_url) -> fingerprint bytes`` (16 bytes recommended)."""


def _hashlib_blake2b_128(data: bytes) -> bytes:
    return blake2b(data, digest_size=16).digest()


_blake2b_128: Callable[[bytes], bytes] = native("blake2b_128") or _hashlib_blake2b_128
"""BLAKE2b-128 of bytes: crawlq._speedups' (hashlib's object and keyword arguments
cost more than the hash of a URL), or hashlib's where it is not built."""


def url_fingerprint(canonical_url: str) -> bytes:
    """The default fingerprint of a GET without a body (nearly every request): what
    :class:`Fingerprinter` gives it, asked with its canonical URL alone."""
    return _blake2b_128(canonical_url.encode("utf-8", "surrogatepass"))


class Fingerprinter:
    """Callable ``(request, canonical_url) -> 16-byte fingerprint``."""

    def __init__(self, *, source_aware: bool = False) -> None:
        self.source_aware = source_aware

    def __call__(self, request: Request, canonical_url: str) -> bytes:
        """Return the fingerprint of ``request`` whose URL canonicalizes to ``canonical_url``."""
        if request.method == "GET" and not request.body and not self.source_aware:
            return url_fingerprint(canonical_url)
        head = canonical_url if request.method == "GET" else f"{request.method} {canonical_url}"
        if self.source_aware and request.referrer:
            head = f"{request.referrer}\x00{head}"
        h = blake2b(head.encode("utf-8", "surrogatepass"), digest_size=16)
        if request.body:
            h.update(b"\x00")
            h.update(request.body)
        return h.digest()
