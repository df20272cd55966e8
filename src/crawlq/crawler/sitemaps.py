"""Sitemaps (sitemaps.org): the page URLs of a sitemap, or the sitemaps of an index.

The crawler finds sitemaps through robots.txt's ``Sitemap:`` lines and fetches them
like pages (through scope, robots and politeness). A sitemap may be XML, gzipped XML
(``.xml.gz``, decompressed here with the fetcher's size cap) or plain text with one
URL per line. The standard library's expat parser refuses entity expansion bombs.
"""

from __future__ import annotations

import io
import xml.etree.ElementTree as ET
from dataclasses import dataclass

from .decode import DecodeError, decode

MAX_URLS = 50_000
"""The protocol's limit of URLs per sitemap file; more are ignored."""
MAX_NESTING = 3
"""Sitemap levels followed: a sitemap robots.txt names is level 1, one an index at level
n names is level n + 1. The protocol has one level of indexes; a deeper chain (indexes
of ever-new indexes, a trap) stops here."""
MAX_SITEMAPS_PER_HOST = 1_000
"""Sitemap files queued per host in one crawl run (each may list 50,000 URLs)."""
MAX_URLS_PER_HOST = 500_000
"""Page URLs taken from one host's sitemaps in one crawl run."""


class SitemapError(ValueError):
    """The body is not a sitemap."""


@dataclass
class Sitemap:
    """``kind`` is ``urlset`` (``locs`` are pages) or ``sitemapindex`` (``locs`` are
    sitemaps)."""

    kind: str
    locs: list[str]


def parse(body: bytes, max_bytes: int = 50_000_000) -> Sitemap:
    """The URLs a sitemap lists; raises :class:`SitemapError`."""
    if body[:2] == b"\x1f\x8b":  # a .gz sitemap, served as it is (no Content-Encoding)
        try:
            body, _ = decode(body, "gzip", max_bytes)
        except DecodeError as exc:
            raise SitemapError(f"bad gzip: {exc}") from None
    if body.lstrip()[:1] != b"<":
        lines = body.decode("utf-8", "replace").splitlines()
        urls = [u.strip() for u in lines if u.strip().startswith(("http://", "https://"))]
        if not urls and body.strip():
            raise SitemapError("neither XML nor a list of URLs")
        return Sitemap("urlset", urls[:MAX_URLS])
    kind = ""
    locs: list[str] = []
    try:
        for event, elem in ET.iterparse(io.BytesIO(body), events=("start", "end")):
            name = elem.tag.rpartition("}")[2]
            if event == "start":
                if not kind:
                    kind = name
                continue
            if name == "loc" and elem.text and elem.text.strip():
                locs.append(elem.text.strip())
                if len(locs) >= MAX_URLS:
                    break
            elem.clear()  # keep memory flat on big sitemaps
    except ET.ParseError as exc:
        raise SitemapError(f"bad XML: {exc}") from None
    if kind not in ("urlset", "sitemapindex"):
        raise SitemapError(f"the root element is <{kind}>, not <urlset> or <sitemapindex>")
    return Sitemap(kind, locs)
