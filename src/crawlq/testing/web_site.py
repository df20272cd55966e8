"""The test web's generated site: its shape (:class:`SiteSpec`: hosts, pages, links,
robots.txt), what it records of each request (:class:`Hit`), and which pages a
complete crawl must reach (:func:`reachable`). Served by :mod:`crawlq.testing.web`."""

from __future__ import annotations

import random
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import NamedTuple

DOMAIN = "crawlq.test"


@dataclass(frozen=True)
class SiteSpec:
    """The shape of the generated site."""

    hosts: int = 5
    pages: int = 50
    """Pages per host (``/page/0`` .. ``/page/<pages-1>``)."""
    links: int = 4
    """Same-host links per page."""
    cross_links: int = 1
    """Links per page to other hosts of the site."""
    seed: int = 1
    slow_seconds: float = 0.5
    big_bytes: int = 2_000_000
    crawl_delay: dict[int, float] = field(default_factory=lambda: {1: 0.2}, hash=False)
    """Host index -> the ``Crawl-delay`` its robots.txt announces."""
    robots_5xx: frozenset[int] = frozenset()
    """Hosts whose robots.txt answers 503 (Google's rule: treat as full disallow)."""
    robots_404: frozenset[int] = frozenset({2})
    """Hosts without a robots.txt (everything allowed)."""
    special_links: bool = True
    """Whether pages link to the special paths (traps, redirects, errors...)."""
    latency: float = 0.0
    """Seconds every ``/page/<n>`` takes to answer."""
    host_pages: dict[int, int] = field(default_factory=dict, hash=False)
    """Host index -> its number of pages, where it differs from ``pages``."""
    page_bytes: int = 0
    """When > 0, each ``/page/<n>`` carries paragraphs of text up to about this many
    bytes (real documentation pages weigh tens of KB: parsing and reading them is part
    of a crawl's work)."""
    sitemap_pages: int = 0
    """When > 0, robots.txt names a sitemap index, ``/sitemap.xml``, which points to a
    gzipped sitemap listing ``/orphan/0`` .. ``/orphan/<sitemap_pages-1>``: pages no
    link leads to (and one URL on a host outside the site)."""
    own_domains: bool = False
    """Whether each host is a registered domain of its own, ``site<i>-crawlq.test``
    (a crawl over many sites, as a sharded store spreads them), instead of
    ``site<i>.crawlq.test`` (one domain's hosts)."""

    def pages_of(self, i: int) -> int:
        """How many pages host ``i`` has."""
        return self.host_pages.get(i, self.pages)

    def host(self, i: int) -> str:
        """The name of host ``i``."""
        return f"site{i}{'-' if self.own_domains else '.'}{DOMAIN}"

    def resolve_glob(self) -> str:
        """A glob of every host name of the site (for ``crawlq crawl --resolve``)."""
        return f"*{'-' if self.own_domains else '.'}{DOMAIN}"

    def host_names(self) -> list[str]:
        """Every host of the site."""
        return [self.host(i) for i in range(self.hosts)]

    def host_index(self, name: str) -> int | None:
        """``i`` for the name of host ``i`` (port ignored), else None."""
        name = name.split(":")[0].lower()
        if not (name.startswith("site") and name.endswith(self.resolve_glob()[1:])):
            return None
        num = name[4:-len(DOMAIN) - 1]
        return int(num) if num.isdigit() and int(num) < self.hosts else None

    def robots(self, i: int, port: int | None = None, scheme: str = "http") -> str:
        """robots.txt of host ``i``: /private/ is off limits, maybe a Crawl-delay and a
        Sitemap (which names the server's ``port`` when given)."""
        lines = ["User-agent: *", "Disallow: /private/", "Allow: /private/open"]
        if i in self.crawl_delay:
            lines.append(f"Crawl-delay: {self.crawl_delay[i]}")
        lines += ["", "User-agent: evilbot", "Disallow: /", ""]
        if self.sitemap_pages:
            at = f":{port}" if port else ""
            lines += [f"Sitemap: {scheme}://{self.host(i)}{at}/sitemap.xml", ""]
        return "\n".join(lines)

    def page_links(self, i: int, n: int, port: int | None = None,
                   scheme: str = "http") -> list[tuple[str, bool]]:
        """Links of ``/page/<n>`` on host ``i`` as (absolute or relative URL, nofollow);
        links to other hosts carry ``port`` (the server's) when given."""
        at = f":{port}" if port else ""
        rng = random.Random(f"{self.seed}:{i}:{n}")
        out: list[tuple[str, bool]] = []
        pages = self.pages_of(i)
        # A chain keeps every page reachable; random links make it a web.
        if n + 1 < pages:
            out.append((f"/page/{n + 1}", False))
        for _ in range(self.links - 1):
            out.append((f"/page/{rng.randrange(pages)}", False))
        for _ in range(self.cross_links):
            j = rng.randrange(self.hosts)
            out.append((f"{scheme}://{self.host(j)}{at}/page/{rng.randrange(self.pages_of(j))}",
                        False))
        if self.special_links and n % 10 == 3:
            out += [(f"/private/{n}", False), (f"/redirect/{(n * 7) % pages}", False),
                    ("/redirect-out", False), ("/redirect-private", False),
                    ("/calendar/2026/1", False), ("/broken", False), ("/latin1", False),
                    ("/meta-charset", False), (f"/slow/{n}", False), ("/ratelimited", False),
                    ("/unavailable", False), ("/gzip", False), ("/error", False),
                    ("mailto:someone@example.org", False), ("javascript:void(0)", False)]
        if self.special_links and n % 10 == 5:
            out += [(f"/page/{(n * 3) % pages}?ref=nofollow", True), ("/big", False)]
        return out


class Hit(NamedTuple):
    """One request the test web answered."""

    at: float
    host: str
    path: str
    status: int
    user_agent: str
    proxied: bool = False
    """Asked for in absolute form (``GET http://host/path``): through a proxy."""
    cookie: str = ""
    """The request's Cookie header."""


def page_html(title: str, links: list[tuple[str, bool]], extra: str = "") -> str:
    """A page of the site: ``title``, then ``extra`` HTML and a list of ``links``
    ((href, nofollow) pairs)."""
    anchors = "\n".join(
        f'<li><a href="{href}"{" rel=nofollow" if nofollow else ""}>{href}</a></li>'
        for href, nofollow in links)
    return (f"<!doctype html><html><head><title>{title}</title></head><body>"
            f"<h1>{title}</h1>{extra}<ul>\n{anchors}\n</ul></body></html>")



def page_padding(size: int) -> str:
    """Paragraphs of text of about ``size`` bytes (a page's weight, SiteSpec.page_bytes)."""
    para = "<p>" + "The quick brown fox jumps over the lazy dog. " * 10 + "</p>\n"
    return para * (size // len(para))


def reachable(spec: SiteSpec, port: int, seeds: Iterable[int] = (0,)
              ) -> set[tuple[str, str]]:
    """(host, path) of every page reachable from the index of the hosts ``seeds``
    (site0's by default; no special links): what a complete crawl from their
    ``web.url(i, "/")`` must fetch."""
    todo = [(i, "/") for i in seeds]
    seen: set[tuple[int, str]] = set()
    while todo:
        i, path = todo.pop()
        if (i, path) in seen:
            continue
        seen.add((i, path))
        if path == "/":
            todo += [(i, f"/page/{n}") for n in range(min(spec.pages_of(i), spec.links + 1))]
            continue
        n = int(path.rsplit("/", 1)[1])
        for href, _ in spec.page_links(i, n, port):
            if href.startswith("http://"):  # (the same links as https, with a TLS server)
                host, rest = href[7:].split("/", 1)
                j = spec.host_index(host)
                if j is None:
                    raise ValueError(f"a link to an unknown host: {href}")
                todo.append((j, "/" + rest))
            else:
                todo.append((i, href))
    return {(spec.host(i), p) for i, p in seen}
