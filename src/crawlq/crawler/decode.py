"""Content-Encoding decoding with a cap on the output: a decompression-bomb guard.

The fetcher keeps the bytes as received (for WARC) and decodes them here, never
producing more than ``max_bytes``.
"""

from __future__ import annotations

import zlib

try:  # br is optional: advertised only when the brotli package is there
    import brotli
except ImportError:  # pragma: no cover - brotli ships with the crawl extra's deps
    brotli = None

ACCEPT_ENCODING = "gzip, deflate, br" if brotli is not None else "gzip, deflate"
_CHUNK = 65536


class DecodeError(Exception):
    """The body does not decode with its declared Content-Encoding."""


def decode(raw: bytes, content_encoding: str | None, max_bytes: int) -> tuple[bytes, bool]:
    """``(decoded body, truncated)`` for ``raw`` sent with ``content_encoding``."""
    codings = [c.strip().lower() for c in (content_encoding or "").split(",") if c.strip()]
    data, truncated = raw, False
    for coding in reversed(codings):  # applied in order, so undone in reverse
        if coding in ("identity", ""):
            continue
        if coding in ("gzip", "x-gzip", "deflate"):
            data, cut = _zlib(data, coding, max_bytes)
        elif coding == "br" and brotli is not None:
            data, cut = _brotli(data, max_bytes)
        else:
            raise DecodeError(f"unsupported Content-Encoding {coding!r}")
        truncated = truncated or cut
    if len(data) > max_bytes:
        data, truncated = data[:max_bytes], True
    return data, truncated


def _zlib(data: bytes, coding: str, max_bytes: int) -> tuple[bytes, bool]:
    """gzip, zlib or raw deflate data, every member of a multi-member gzip body (RFC
    1952, 2.2: members one after another; zlib's decoder stops after the first)."""
    # 47 = auto-detect gzip or zlib headers; some servers send raw deflate (-15).
    for wbits in ((47,) if coding != "deflate" else (47, -15)):
        d = zlib.decompressobj(wbits)
        try:
            out = d.decompress(data, max_bytes + 1)
        except zlib.error as exc:
            last = exc
            continue
        while d.eof and d.unused_data[:2] == b"\x1f\x8b" and len(out) <= max_bytes:
            rest, d = d.unused_data, zlib.decompressobj(31)  # the next gzip member
            try:
                out += d.decompress(rest, max_bytes + 1 - len(out))
            except zlib.error:  # (bytes after the members that are none: ignored,
                break  # as gzip -d does)
        return (out[:max_bytes], True) if len(out) > max_bytes else (out, False)
    raise DecodeError(f"bad {coding} data: {last}")


def _brotli(data: bytes, max_bytes: int) -> tuple[bytes, bool]:
    d = brotli.Decompressor()
    out = bytearray()
    try:
        for i in range(0, len(data), _CHUNK):
            out += d.process(data[i:i + _CHUNK], output_buffer_limit=_CHUNK)
            while len(out) <= max_bytes and not d.can_accept_more_data():
                out += d.process(b"", output_buffer_limit=_CHUNK)
            if len(out) > max_bytes:
                return bytes(out[:max_bytes]), True
    except brotli.error as exc:
        raise DecodeError(f"bad br data: {exc}") from None
    return bytes(out), False
