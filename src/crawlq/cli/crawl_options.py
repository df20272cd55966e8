"""The options of ``crawlq crawl``, in their groups (state, scope, politeness and
fetching, rounds, output)."""

from __future__ import annotations

import argparse

from ..stores.base import MAX_REDELIVERIES
from .argtypes import count, duration, seconds, size


def add_options(c: argparse.ArgumentParser) -> None:
    """The options of ``crawlq crawl``, in their groups, on parser ``c``."""
    g = c.add_argument_group("state")
    g.add_argument("--state", metavar="DIR",
                   help="keep the crawl in DIR/frontier.db (resumable); default: in memory")
    g.add_argument("--store", dest="crawl_store", metavar="URL",
                   help="a store URL instead of --state, e.g. redis://host/0?prefix=crawl "
                        "to share the crawl (default: $CRAWLQ_STORE, else --state, else in "
                        "memory)")
    s = c.add_argument_group("scope")
    s.add_argument("--allow-domain", action="append", default=[], metavar="DOMAIN",
                   help="follow links on DOMAIN and its subdomains (repeatable; default: "
                        "the seeds' hosts)")
    s.add_argument("--include", action="append", default=[], metavar="REGEX",
                   help="only follow URLs matching REGEX (repeatable)")
    s.add_argument("--exclude", action="append", default=[], metavar="REGEX",
                   help="never follow URLs matching REGEX (repeatable)")
    s.add_argument("--priority", action="append", default=[], metavar="REGEX=N",
                   help="add N to the priority of URLs matching REGEX: N > 0 fetches them "
                        "sooner, N < 0 later (repeatable; matching rules add up)")
    s.add_argument("--target", action="append", default=[], metavar="REGEX",
                   help="save only pages matching REGEX to the output; the others are only "
                        "followed for their links (repeatable; default: save every page)")
    s.add_argument("--max-depth", type=count(0), help="links deeper than this are not followed")
    s.add_argument("--max-pages", type=count(1),
                   help="stop after fetching this many pages (in this run: a resumed crawl "
                        "counts afresh)")
    s.add_argument("--max-per-host", type=count(0), default=0,
                   help="accept at most this many URLs per host (spider-trap guard)")
    s.add_argument("--max-per-domain", type=count(0), default=100_000, metavar="N",
                   help="accept at most N URLs per registered domain, its hosts together "
                        "(0: no cap; default 100000)")
    s.add_argument("--max-hosts-per-domain", type=count(0), default=1_000, metavar="N",
                   help="accept URLs of at most N host names per registered domain "
                        "(wildcard-subdomain trap guard; 0: no cap; default 1000)")
    p = c.add_argument_group("politeness and fetching")
    p.add_argument("--concurrency", type=count(1), default=16,
                   help="fetches in flight (default 16)")
    p.add_argument("--workers", type=count(1), default=1, metavar="N",
                   help="crawl with N processes sharing the store (--state or --store "
                        "redis://...): one progress line, one summary, one output file "
                        "per worker (pages.jsonl -> pages.w1.jsonl ...); politeness holds "
                        "across them (default 1)")
    p.add_argument("--per-host", type=count(1), default=1,
                   help="fetches in flight per host (default 1)")
    p.add_argument("--per-domain", type=count(1), default=None, metavar="N",
                   help="fetches in flight per registered domain, its hosts together, so "
                        "that one site of many host names keeps no more than its share "
                        "(default 4 x --per-host)")
    p.add_argument("--min-delay", type=seconds(0), default=1.0,
                   help="shortest pause between fetches from one host, seconds (default 1)")
    p.add_argument("--max-delay", type=seconds(0), default=30.0,
                   help="longest pause, seconds (default 30)")
    p.add_argument("--delay-factor", type=seconds(0), default=5.0,
                   help="pause = factor x fetch time, clamped (default 5)")
    p.add_argument("--user-agent", default=None, help="User-Agent header and robots.txt name")
    p.add_argument("--header", action="append", default=[], metavar="'NAME: VALUE'",
                   help="send this header with every request (repeatable; may replace the "
                        "User-Agent)")
    p.add_argument("--proxy", metavar="URL",
                   help="send every request through this HTTP proxy (http://host:port; "
                        "it may be at a private address)")
    p.add_argument("--proxy-from-env", action="store_true",
                   help="use the proxy HTTP_PROXY / HTTPS_PROXY / NO_PROXY name")
    p.add_argument("--cookies", action="store_true",
                   help="keep the cookies sites set and send them back (per host, by the "
                        "cookie rules); default: no cookies")
    p.add_argument("--ca-file", metavar="PEM",
                   help="also trust the CA certificates in PEM for HTTPS (e.g. an internal CA)")
    p.add_argument("--sitemaps", action="store_true",
                   help="also crawl the pages listed in the sitemaps robots.txt names "
                        "(sitemap indexes and .xml.gz files included)")
    p.add_argument("--ignore-robots", action="store_true",
                   help="do not obey robots.txt (be sure you may)")
    p.add_argument("--robots-error-window", type=duration, default=30 * 86400.0,
                   metavar="TIME",
                   help="while a host's robots.txt errs (5xx, 429, unreachable) its URLs "
                        "wait, the host backed off (RFC 9309); after erring this long it "
                        "is taken as absent (default 30d)")
    p.add_argument("--allow-private", action="store_true",
                   help="allow fetching every special-purpose address (loopback, private, "
                        "link-local, CGNAT...)")
    p.add_argument("--allow-address", action="append", default=[], metavar="CIDR",
                   help="allow fetching this special-purpose address or block, e.g. "
                        "10.1.0.0/16 (repeatable)")
    p.add_argument("--resolve", action="append", default=[], metavar="HOST=IP",
                   help="resolve HOST (a glob, e.g. *.example.test) to IP (repeatable)")
    p.add_argument("--timeout", type=seconds(0.001), default=20.0,
                   help="seconds per fetch (default 20)")
    p.add_argument("--parse-timeout", type=seconds(0.001), default=10.0, metavar="SECONDS",
                   help="seconds the link extraction of a page may take; a page over it is "
                        "saved without following its links (default 10)")
    p.add_argument("--loop", choices=("auto", "uvloop", "asyncio"), default="auto",
                   help="the event loop: uvloop (libuv's, ~5%% less CPU a page and ~9%% "
                        "more pages/s on real sites), asyncio (Python's own), or auto: "
                        "uvloop where it is installed (default auto)")
    p.add_argument("--max-redirects", type=count(0), default=10,
                   help="redirect hops followed from one URL (default 10)")
    p.add_argument("--lease-ttl", type=seconds(0.5), default=None,
                   help="seconds before a URL whose crawler died is crawled again; the "
                        "crawl renews the leases of the pages it works on every third of "
                        "it (default 3 x timeout + 60)")
    p.add_argument("--metrics", type=count(0), default=None, metavar="PORT",
                   help="serve the crawl's Prometheus metrics (pages by status, bytes, "
                        "fetch latency, errors) at http://127.0.0.1:PORT/metrics "
                        "(needs crawlq[serve]; 0 picks a free port)")
    p.add_argument("--max-retries", type=count(0), default=2,
                   help="retries of a failed fetch before it is dead (default 2)")
    p.add_argument("--max-redeliveries", type=count(0), default=MAX_REDELIVERIES,
                   help="times a URL may be handed out again after its crawler died "
                        "with it before it is dead: a page that kills or stalls the "
                        f"crawler stops coming back (default {MAX_REDELIVERIES})")
    p.add_argument("--max-backoff", type=duration, default=86400.0, metavar="TIME",
                   help="longest a host is left alone after a 429 or 503: the wait is its "
                        "Retry-After or the retry backoff, doubled with each failure of the "
                        "URL, at most TIME (default 1d)")
    p.add_argument("--max-bytes", type=count(1), default=5_000_000,
                   help="largest body kept, after decompression (default 5 MB)")
    r = c.add_argument_group("rounds (Spiderman's schedule) and revisits")
    r.add_argument("--rounds", type=count(1), default=1, help="crawl rounds (default 1)")
    r.add_argument("--duration", type=duration, metavar="TIME",
                   help="stop each round after TIME (e.g. 90s, 10m, 2h)")
    r.add_argument("--delay", type=duration, default=0.0, metavar="TIME",
                   help="wait TIME between rounds (e.g. 1h)")
    r.add_argument("--revisit", type=duration, metavar="TIME",
                   help="fetch a page again in a later round once TIME has passed (e.g. 1d)")
    o = c.add_argument_group("output")
    o.add_argument("--out", metavar="FILE",
                   help="write fetched pages to FILE: JSON Lines (.jsonl, .jsonl.gz) or WARC "
                        "(.warc, .warc.gz); - is standard output (JSON Lines). A page is "
                        "acknowledged only once its record is on disk")
    o.add_argument("--rotate", type=size, default=0, metavar="SIZE",
                   help="start a new output file (NAME-00001.EXT...) once one holds SIZE "
                        "(e.g. 1G, 500M); default: one file")
    o.add_argument("--save", action="append", default=[], choices=("text", "body"),
                   help="JSON Lines records also carry the decoded text of text pages "
                        "(text) and/or the body in base64 (body); repeatable")
    o.add_argument("--format", choices=("jsonl", "warc"),
                   help="output format, when the file name does not tell (gzip if it ends "
                        "in .gz)")
    o.add_argument("--progress", type=seconds(0), metavar="SECONDS",
                   help="report progress every SECONDS (default: a live line redrawn every "
                        "0.5 s on a terminal, a log line every 10 s otherwise; 0: never)")
    o.add_argument("--log-level", default="WARNING", help="logging level (default WARNING)")
