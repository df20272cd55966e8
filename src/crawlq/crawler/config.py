"""What a crawl is told (:class:`CrawlConfig`), what it reports (:class:`Summary`), and
how long a host that answers 429 or 503 is left alone (:func:`backoff`)."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import time
from collections import Counter
from dataclasses import dataclass, field

from ..stores.base import MAX_REDELIVERIES
from .fetch import Fetched

DEFAULT_AGENT = "crawlq/0.1 (+https://pypi.org/project/crawlq/)"
BACKOFF_STATUSES = (429, 503)
"""Statuses that mean "too many requests, come back later": the host is backed off."""


@dataclass
class CrawlConfig:
    """Everything a crawl needs; the CLI fills it from its options."""

    seeds: list[str]
    store: str = "memory://"
    allow_domains: list[str] = field(default_factory=list)
    """Empty: the seeds' hosts (and their subdomains)."""
    include: list[str] = field(default_factory=list)
    exclude: list[str] = field(default_factory=list)
    priority_rules: list[tuple[str, int]] = field(default_factory=list)
    """(regex, n): URLs matching regex get n added to their priority (higher: sooner)."""
    target: list[str] = field(default_factory=list)
    """Regexes of the pages to save (written to the output); others are only
    followed. Empty: every page is saved."""
    max_redirects: int = 10
    """Redirect hops followed from one URL before giving up."""
    max_pages: int | None = None
    max_depth: int | None = None
    max_per_host: int = 0
    max_per_domain: int = 100_000
    """URLs accepted per registered domain (the hosts of one site together; 0: no cap)."""
    max_hosts_per_domain: int = 1_000
    """Host names accepted per registered domain (a wildcard-subdomain trap's bound)."""
    concurrency: int = 16
    per_host: int = 1
    per_domain: int | None = None
    """Fetches in flight per registered domain (None: 4 x per_host)."""
    min_delay: float = 1.0
    max_delay: float = 30.0
    delay_factor: float = 5.0
    user_agent: str = DEFAULT_AGENT
    obey_robots: bool = True
    allow_private: bool = False
    allow_addresses: tuple[str, ...] = ()
    """Special-purpose addresses or CIDR blocks that may be fetched all the same."""
    resolve: dict[str, str] = field(default_factory=dict)
    headers: dict[str, str] = field(default_factory=dict)
    """Headers sent with every request (e.g. ``{"Accept-Language": "fr"}``)."""
    proxy: str | None = None
    """An http:// proxy for every request."""
    proxy_from_env: bool = False
    """Use the proxy the standard environment variables name (HTTP_PROXY...)."""
    cookies: bool = False
    """Keep cookies (per host, by the cookie rules); off: none are sent."""
    save: tuple[str, ...] = ()
    """What JSON Lines records carry besides the metadata: ``text`` (the decoded text
    of text pages) and/or ``body`` (the body, base64)."""
    ca_file: str | None = None
    """A PEM file of CA certificates trusted for HTTPS, besides the system's."""
    timeout: float = 20.0
    parse_timeout: float = 10.0
    """Seconds the link extraction of one page may take (in a worker process, killed
    after that: the page is saved, its links not followed)."""
    max_bytes: int = 5_000_000
    max_retries: int = 2
    lease_ttl: float | None = None
    """How long a fetch may take before its URL is handed out again (after a crash);
    default ``3 * timeout + 60``."""
    max_redeliveries: int = MAX_REDELIVERIES
    """Times a URL may be handed out again after its lease expired (its crawler died
    with it) before it is dead."""
    retry_backoff: float = 5.0
    """Seconds before the first retry of a failed fetch; doubles with each failure."""
    max_backoff: float = 86400.0
    """Longest a host is backed off after a 429 or 503 (a longer Retry-After is cut)."""
    out: str | None = None
    out_rotate: int = 0
    """> 0: size-rotated output files of about that many bytes (see output.Rotating)."""
    out_format: str | None = None
    """``jsonl`` or ``warc``; default: from the file name (see ``output.SUFFIXES``)."""
    rounds: int = 1
    """Crawl rounds (Spiderman's schedule): each re-offers the seeds."""
    duration: float | None = None
    """Seconds a round may last; None: until the frontier is empty."""
    round_delay: float = 0.0
    """Seconds to wait between rounds."""
    revisit_after: float | None = None
    """Seconds after which a fetched URL may be fetched again (in a later round)."""
    sitemaps: bool = False
    """Also fetch the sitemaps robots.txt names and queue the pages they list."""
    robots_error_window: float = 30 * 86400.0
    """Seconds robots.txt may keep erring (5xx, 429, unreachable) before it is taken as
    absent; until then the host's URLs wait (RFC 9309)."""


@dataclass
class Summary:
    """What a crawl did."""

    fetched: int = 0
    statuses: Counter[int] = field(default_factory=Counter)
    errors: Counter[str] = field(default_factory=Counter)
    robots_denied: int = 0
    robots_waits: int = 0
    """Leases put back because their host's robots.txt erred (the host backed off)."""
    crawl_delays_capped: int = 0
    """Hosts whose robots.txt Crawl-delay was over ``max_delay`` (kept to it)."""
    blocked: Counter[str] = field(default_factory=Counter)
    out_of_scope: Counter[str] = field(default_factory=Counter)
    links_added: int = 0
    sitemap_urls: int = 0
    not_saved: int = 0
    """Pages fetched and followed but not saved (no target rule matched)."""
    seconds: float = 0.0
    finished: bool = False
    rounds: int = 0
    interrupted: bool = False
    """Stopped by :meth:`Crawler.stop` (Ctrl-C, SIGTERM) before the frontier was empty."""
    seeds_refused: dict[str, str] = field(default_factory=dict)
    """Seeds that could not be crawled, with the reason (and the option that allows it)."""
    seeds_known: int = 0
    """Seeds the frontier already had (crawled, or queued by an earlier run)."""
    given_up: Counter[str] = field(default_factory=Counter)
    """URLs put aside as dead at once, by reason (e.g. a private address)."""

    def lines(self) -> list[str]:
        rate = self.fetched / self.seconds if self.seconds else 0.0
        rounds = f" over {self.rounds} rounds" if self.rounds > 1 else ""
        out = [f"fetched {self.fetched} pages{rounds} in {self.seconds:.1f}s ({rate:.1f}/s); "
               f"{self.ending()}",
               "statuses: " + (", ".join(f"{k}: {v}" for k, v in sorted(self.statuses.items()))
                               or "-"),
               f"new links queued: {self.links_added}; robots.txt denied: {self.robots_denied}"]
        if self.crawl_delays_capped:
            out.append(f"hosts whose Crawl-delay was cut to --max-delay: "
                       f"{self.crawl_delays_capped}")
        if self.robots_waits:
            out.append(f"pages put back while their robots.txt erred (host backed off): "
                       f"{self.robots_waits}")
        if self.not_saved:
            out.append(f"pages followed but not saved (not a --target): {self.not_saved}")
        if self.sitemap_urls:
            out.append(f"URLs listed in sitemaps: {self.sitemap_urls}")
        if self.errors:
            out.append("errors: " + ", ".join(f"{k}: {v}" for k, v in self.errors.items()))
        if self.blocked:
            out.append("blocked: " + ", ".join(f"{k}: {v}" for k, v in self.blocked.items()))
        for url, why in self.seeds_refused.items():
            out.append(f"seed not crawled: {url}: {why}")
        if self.out_of_scope:
            out.append("links out of scope: " + ", ".join(
                f"{k}: {v}" for k, v in sorted(self.out_of_scope.items())))
        return out

    def to_json(self) -> str:
        """The summary as JSON (a worker's, for the process that started it)."""
        # (not dataclasses.asdict: it rebuilds a Counter from its (key, count) pairs,
        # which a Counter counts as keys)
        return json.dumps({f.name: getattr(self, f.name) for f in dataclasses.fields(self)})

    @classmethod
    def from_json(cls, text: str) -> Summary:
        """A summary from :meth:`to_json`."""
        raw = json.loads(text)
        for name in ("statuses", "errors", "blocked", "out_of_scope", "given_up"):
            counts = Counter(raw.get(name, {}))
            raw[name] = (Counter({int(k): v for k, v in counts.items()})
                         if name == "statuses" else counts)
        return cls(**raw)

    @classmethod
    def combined(cls, parts: list[Summary]) -> Summary:
        """The summary of one crawl run by several workers on one store: their counts
        added up; its time the longest worker's; finished when they all found the
        frontier empty; seeds known as the first worker to offer them saw it (the
        others find them queued by it)."""
        out = cls()
        for part in parts:
            for f in dataclasses.fields(cls):
                mine, theirs = getattr(out, f.name), getattr(part, f.name)
                if isinstance(mine, dict):  # (a Counter's update adds up)
                    mine.update(theirs)
                elif isinstance(mine, int) and not isinstance(mine, bool):
                    setattr(out, f.name, mine + theirs)
        out.seconds = max((p.seconds for p in parts), default=0.0)
        out.rounds = max((p.rounds for p in parts), default=0)
        out.finished = bool(parts) and all(p.finished for p in parts)
        out.interrupted = any(p.interrupted for p in parts)
        out.seeds_known = min((p.seeds_known for p in parts), default=0)
        return out

    def ending(self) -> str:
        """Why the crawl ended, in a few words."""
        if self.finished:
            return "frontier empty"
        return "interrupted" if self.interrupted else "stopped at a limit"

    def failure(self) -> str | None:
        """Why nothing could be crawled, when no page was fetched for a reason the user
        should hear about (refused seeds); None otherwise (e.g. every seed was already
        crawled by an earlier run with the same state)."""
        if self.fetched or self.interrupted or not self.seeds_refused:
            return None
        first, why = next(iter(self.seeds_refused.items()))
        more = len(self.seeds_refused) - 1
        return f"no page could be fetched: {first}: {why}" + (
            f" (and {more} more seed{'s' if more > 1 else ''}, see above)" if more else "")


def retry_after(r: Fetched) -> float | None:
    """Seconds the server asked to wait (Retry-After: seconds or an HTTP date), or None
    when absent or meaningless."""
    raw = r.headers.get("retry-after")
    if raw is None:
        return None
    with contextlib.suppress(ValueError):
        seconds = float(raw)
        # ("nan" and "inf" parse as floats but are no delay a server can mean)
        return max(seconds, 0.0) if math.isfinite(seconds) else None
    from email.utils import parsedate_to_datetime

    try:
        return max(parsedate_to_datetime(raw).timestamp() - time.time(), 0.0)
    except (TypeError, ValueError):
        return None


def backoff(r: Fetched, failures: int, base: float, cap: float) -> float:
    """Seconds to leave a host alone after it answered 429/503 to a URL that had
    ``failures`` failed fetches before: the server's Retry-After (at least a second),
    else ``base``, doubled with each earlier failure, never beyond ``cap``. A Retry-After
    of years is cut to ``cap``; one of 0, answered again and again, is not hammered."""
    asked = retry_after(r)
    first = max(asked, 1.0) if asked is not None else max(base, 1.0)
    return min(first * 2.0 ** min(failures, 64), cap)
