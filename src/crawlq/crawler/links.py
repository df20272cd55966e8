"""Link extraction from HTML with lexbor (selectolax): fast, forgiving of broken markup.

Links are resolved against the page as a browser resolves them: by the WHATWG URL
Standard (ada, through the ``ada-url`` binding's ``join_url``; the faster ``can_ada``
binding that canonical URLs use has no resolution against a base).
"""

from __future__ import annotations

import re
from typing import NamedTuple

from ada_url import join_url
from selectolax.lexbor import LexborHTMLParser

_SELECTOR = "a[href], area[href], iframe[src], frame[src], link[href]"
_META_CHARSET = re.compile(rb"""<meta[^>]+charset\s*=\s*["']?([A-Za-z0-9_\-:.]+)""", re.I)


class Page(NamedTuple):
    """What the crawler needs from an HTML page."""

    title: str | None
    links: list[str]
    """Absolute http(s) URLs to follow, in document order, without duplicates."""
    nofollow: int
    """How many links were skipped for rel=nofollow."""


def decode_html(body: bytes, header_charset: str | None) -> str:
    """Text of an HTML body: the header's charset, else a <meta> charset, else UTF-8;
    undecodable bytes become U+FFFD rather than an error."""
    for charset in (header_charset, _meta_charset(body), "utf-8"):
        if charset:
            try:
                return body.decode(charset, errors="replace")
            except (LookupError, UnicodeError):  # an unknown charset, or one that only
                continue                          # decodes strictly (idna): the next guess
    return body.decode("utf-8", errors="replace")


def _meta_charset(body: bytes) -> str | None:
    m = _META_CHARSET.search(body[:2048])
    return m.group(1).decode("ascii", "replace") if m else None


def extract(html: str, base_url: str, *, follow_nofollow: bool = False) -> Page:
    """Title and outlinks of ``html`` fetched from ``base_url`` (``<base href>`` honoured)."""
    tree = LexborHTMLParser(html)
    title_node = tree.css_first("title")
    title = title_node.text(strip=True) if title_node is not None else None
    base = tree.css_first("base[href]")
    if base is not None:
        base_url = resolve(base_url, base.attributes.get("href") or "") or base_url
    seen: set[str] = set()
    tried: set[str] = set()
    links: list[str] = []
    nofollow = 0
    for node in tree.css(_SELECTOR):
        attrs = node.attributes
        if node.tag == "link" and "next" not in (attrs.get("rel") or "").lower().split():
            continue  # of <link>s, only rel=next is a page to crawl
        if not follow_nofollow and "nofollow" in (attrs.get("rel") or "").lower().split():
            nofollow += 1
            continue
        raw = attrs.get("href") if node.tag in ("a", "area", "link") else attrs.get("src")
        if not raw:
            continue
        # Pages repeat their links (half of a documentation page's are repeats), and
        # every "#..." is the page itself: each is resolved once (the same base and
        # reference resolve alike).
        if raw[0] == "#":
            raw = "#"
        if raw in tried:
            continue
        tried.add(raw)
        url = resolve(base_url, raw)
        if url is None:  # e.g. a malformed IPv6 literal: not a link we can follow
            continue
        url = url.partition("#")[0]
        if url.startswith(("http://", "https://")) and url not in seen:
            seen.add(url)
            links.append(url)
    return Page(title, links, nofollow)


def resolve(base: str, ref: str) -> str | None:
    """``ref`` resolved against ``base`` by the WHATWG rules, or None where they fail."""
    try:
        return str(join_url(base, ref))
    except ValueError:
        return None
