"""``crawlq crawl`` and ``crawlq demo``: the crawler's command line."""

from __future__ import annotations

import argparse
import asyncio
import logging
import math
import os
import re
import signal
import sys
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from ..cli import count
from ..stores.base import MAX_REDELIVERIES

DEMO_HELP = ("Serve the built-in test web on 127.0.0.1 and crawl it with the real crawler: "
             "no internet needed.")


def register(sub: Any) -> None:
    """Add the ``crawl`` and ``demo`` subcommands to the CLI's subparsers."""
    c = sub.add_parser(
        "crawl", help="crawl from seed URLs, politely, until nothing in scope is left",
        description="Crawl from SEED URLs. Politeness (one request at a time per host, "
                    "delays from fetch times and robots.txt Crawl-delay, Retry-After) comes "
                    "from the frontier. With --state, an interrupted crawl (Ctrl-C, kill -9) "
                    "continues where it stopped when the same command is run again.")
    c.add_argument("seeds", nargs="+", metavar="SEED", help="start URL(s)")
    _options(c)
    d = sub.add_parser("demo", help="crawl the built-in local test web (no internet needed)",
                       description=DEMO_HELP)
    d.add_argument("--hosts", type=count(1), default=4, help="hosts in the test web (default 4)")
    d.add_argument("--pages", type=count(1), default=40, help="pages per host (default 40)")
    d.add_argument("--out", default="demo-pages.jsonl",
                   help="JSON Lines output (default %(default)s)")
    d.add_argument("--state", default="demo-crawl", metavar="DIR",
                   help="the frontier's SQLite file goes to DIR/frontier.db, fresh each run "
                        "(default %(default)s)")
    d.add_argument("--log-level", default="WARNING", help="logging level (default WARNING)")


def _options(c: argparse.ArgumentParser) -> None:
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
    p = c.add_argument_group("politeness and fetching")
    p.add_argument("--concurrency", type=count(1), default=16,
                   help="fetches in flight (default 16)")
    p.add_argument("--per-host", type=count(1), default=1,
                   help="fetches in flight per host (default 1)")
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


_UNITS = {"": 1.0, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def size(text: str) -> int:
    """An argparse type: bytes, with an optional K, M or G (powers of 1024)."""
    t = text.strip().upper().removesuffix("B")
    scale = 1024 ** (" KMG".index(t[-1])) if t and t[-1] in "KMG" else 1
    try:
        n = int(float(t[:-1] if scale > 1 else t) * scale)
    except (ValueError, OverflowError):
        n = 0
    if n < 1:
        raise argparse.ArgumentTypeError(f"want a size like 500M or 1G, not {text!r}")
    return n


def seconds(least: float) -> Any:
    """An argparse type: a finite number of seconds >= ``least``."""
    def parse(text: str) -> float:
        try:
            x = float(text)
        except ValueError:
            x = math.nan
        if not math.isfinite(x) or x < least:
            raise argparse.ArgumentTypeError(
                f"want a number of seconds >= {least:g}, not {text!r}")
        return x
    return parse


def duration(text: str) -> float:
    """``90``, ``90s``, ``10m``, ``2h``, ``1d`` -> seconds (an argparse type)."""
    t = text.strip().lower()
    unit = t[-1] if t and t[-1] in "smhd" else ""
    try:
        value = float(t[: len(t) - len(unit)])
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"not a duration: {text!r} (try 30s, 10m, 2h, 1d)") from None
    if value < 0 or not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"not a duration: {text!r} (try 30s, 10m, 2h, 1d)")
    return value * _UNITS[unit]


def command(args: argparse.Namespace) -> int:
    """Run ``crawl`` or ``demo``; returns the exit status."""
    try:
        from .addresses import networks
        from .core import DEFAULT_AGENT, CrawlConfig
    except ImportError as exc:
        print(f"crawlq: error: crawl needs the crawl extra: pip install 'crawlq[crawl]' ({exc})",
              file=sys.stderr)
        return 2
    logging.basicConfig(level=args.log_level.upper(),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if args.command == "demo":
        return _demo(args)
    if args.ignore_robots:
        logging.getLogger("crawlq.crawl").warning(
            "--ignore-robots: robots.txt will not be obeyed")
    resolve = {}
    for pair in args.resolve:
        host, eq, ip = pair.partition("=")
        if not eq:
            print(f"crawlq: error: --resolve wants HOST=IP, got {pair!r}", file=sys.stderr)
            return 2
        resolve[host] = ip
    try:
        networks(args.allow_address)
    except ValueError as exc:
        print(f"crawlq: error: --allow-address: {exc}", file=sys.stderr)
        return 2
    priority = []
    for rule in args.priority:
        pattern, eq, n = rule.rpartition("=")
        try:
            priority.append((pattern, int(n)))
        except ValueError:
            eq = ""
        if not eq:
            print(f"crawlq: error: --priority wants REGEX=N (N an integer), got {rule!r}",
                  file=sys.stderr)
            return 2
    for option, patterns in (("--include", args.include), ("--exclude", args.exclude),
                             ("--target", args.target),
                             ("--priority", [p for p, _ in priority])):
        for pattern in patterns:
            try:
                re.compile(pattern)
            except re.error as exc:
                print(f"crawlq: error: {option}: bad regular expression {pattern!r}: {exc}",
                      file=sys.stderr)
                return 2
    headers = {}
    for raw in args.header:
        name, colon, value = raw.partition(":")
        name, value = name.strip(), value.strip()
        if (not colon or not re.fullmatch(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+", name)
                or any(ch in value for ch in "\r\n\0")):
            print(f"crawlq: error: --header wants 'NAME: VALUE', got {raw!r}",
                  file=sys.stderr)
            return 2
        headers[name] = value
    if args.proxy is not None:
        try:
            parts = urlsplit(args.proxy)
            ok = parts.scheme == "http" and bool(parts.hostname) and parts.port != 0
        except ValueError:
            ok = False
        if not ok:
            print(f"crawlq: error: --proxy wants http://host:port, got {args.proxy!r}",
                  file=sys.stderr)
            return 2
        if args.proxy_from_env:
            print("crawlq: error: --proxy and --proxy-from-env: give one", file=sys.stderr)
            return 2
    if args.out:
        from .output import OutputError, output_kind

        try:
            output_kind(args.out, args.format, tuple(args.save), args.rotate)
        except OutputError as exc:
            print(f"crawlq: error: --out: {exc}", file=sys.stderr)
            return 2
    given = {s for s in (args.store, args.crawl_store) if s}  # (before or after 'crawl')
    if len(given) > 1:
        print(f"crawlq: error: two different --store values: {' and '.join(sorted(given))}",
              file=sys.stderr)
        return 2
    store = next(iter(given), None)
    if store and args.state:
        print("crawlq: error: --state and --store both say where the crawl is kept: give "
              "one of them", file=sys.stderr)
        return 2
    if store is None and not args.state:
        store = os.environ.get("CRAWLQ_STORE") or None
    if store is None and args.state:
        Path(args.state).mkdir(parents=True, exist_ok=True)
        store = f"sqlite:///{Path(args.state).resolve()}/frontier.db"
    config = CrawlConfig(
        seeds=args.seeds, store=store or "memory://", allow_domains=args.allow_domain,
        include=args.include, exclude=args.exclude, priority_rules=priority,
        target=args.target, max_redirects=args.max_redirects, max_pages=args.max_pages,
        max_depth=args.max_depth, max_per_host=args.max_per_host,
        concurrency=args.concurrency, per_host=args.per_host, min_delay=args.min_delay,
        max_delay=args.max_delay, delay_factor=args.delay_factor,
        user_agent=args.user_agent or DEFAULT_AGENT, obey_robots=not args.ignore_robots,
        allow_private=args.allow_private, allow_addresses=tuple(args.allow_address),
        resolve=resolve, timeout=args.timeout, parse_timeout=args.parse_timeout,
        headers=headers, save=tuple(args.save), proxy=args.proxy,
        proxy_from_env=args.proxy_from_env, cookies=args.cookies,
        max_bytes=args.max_bytes, max_retries=args.max_retries, lease_ttl=args.lease_ttl,
        max_redeliveries=args.max_redeliveries, max_backoff=args.max_backoff,
        out=args.out, out_format=args.format, out_rotate=args.rotate, rounds=args.rounds,
        duration=args.duration,
        round_delay=args.delay, revisit_after=args.revisit,
        sitemaps=args.sitemaps, ca_file=args.ca_file)
    return _run(config, resumable=bool(args.state or store), every=args.progress,
                metrics_port=args.metrics)


def _run(config: Any, resumable: bool, every: float | None = None,
         metrics_port: int | None = None) -> int:
    from ..errors import CrawlqError, StoreError
    from .core import Crawler
    from .progress import Progress

    metrics = None
    if metrics_port is not None:
        from .metrics import CrawlMetrics

        try:
            metrics = CrawlMetrics(metrics_port)
        except CrawlqError as exc:
            print(f"crawlq: error: {exc}", file=sys.stderr)
            return 2
        print(f"metrics on http://127.0.0.1:{metrics.port}/metrics", file=sys.stderr,
              flush=True)
    crawler = Crawler(config, events=metrics.events() if metrics is not None else None)
    progress = Progress(crawler, every)
    stopped_by: list[int] = []
    report = sys.stderr if config.out == "-" else sys.stdout  # (stdout has the pages)

    def stop(signum: int) -> None:
        if stopped_by:  # a second Ctrl-C: stop now (in-flight pages come back later)
            raise KeyboardInterrupt
        stopped_by.append(signum)
        print("stopping: finishing the fetches in flight (Ctrl-C again to quit now)",
              file=sys.stderr, flush=True)
        crawler.stop()

    async def main() -> Any:
        loop = asyncio.get_running_loop()
        loop.add_signal_handler(signal.SIGINT, stop, signal.SIGINT)
        loop.add_signal_handler(signal.SIGTERM, stop, signal.SIGTERM)
        ticker = asyncio.create_task(progress.run()) if progress.interval > 0 else None
        try:
            return await crawler.run()
        finally:
            if ticker is not None:
                ticker.cancel()
            if metrics is not None:
                metrics.close()

    try:
        summary = asyncio.run(main())
    except CrawlqError as exc:
        progress.clear()
        print(f"crawlq: error: {exc}", file=sys.stderr)
        if isinstance(exc, StoreError) and resumable:
            print("nothing is lost: run the same command again once the store is back "
                  "(pages in flight are fetched again)", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        progress.clear()
        print("crawlq: error: interrupted twice: stopped at once" + (
            "; pages in flight are fetched again by the next run" if resumable else ""),
            file=sys.stderr)
        return 128 + (stopped_by[0] if stopped_by else signal.SIGINT)
    progress.clear()
    for line in summary.lines():
        print(line, file=report)
    if stopped_by:
        if resumable:
            print("interrupted: run the same command again to continue where it stopped",
                  file=report)
        return 128 + stopped_by[0]  # 130 for SIGINT, 143 for SIGTERM, as shells report
    failure = summary.failure()
    if failure is not None:
        print(f"crawlq: error: {failure}", file=sys.stderr)
        return 2
    return 0


def _demo(args: argparse.Namespace) -> int:
    from ..testweb import SiteSpec, serve
    from .core import CrawlConfig

    spec = SiteSpec(hosts=args.hosts, pages=args.pages, slow_seconds=0.2,
                    big_bytes=300_000)
    Path(args.out).unlink(missing_ok=True)
    state = Path(args.state)
    state.mkdir(parents=True, exist_ok=True)
    for suffix in ("", "-wal", "-shm"):  # the test web's port changes: start afresh
        (state / f"frontier.db{suffix}").unlink(missing_ok=True)
    with serve(spec) as web:
        print(f"test web: {spec.hosts} hosts x {spec.pages} pages on 127.0.0.1:{web.port} "
              f"(robots.txt rules, redirects, a calendar trap, 429/503, broken pages...)")
        config = CrawlConfig(
            seeds=[web.url(i, "/") for i in range(spec.hosts)], allow_domains=["crawlq.test"],
            store=f"sqlite:///{state.resolve()}/frontier.db",
            resolve={"*.crawlq.test": "127.0.0.1"}, allow_private=True, min_delay=0.05,
            max_delay=0.5, delay_factor=1.0, concurrency=8, max_per_host=spec.pages + 40,
            max_retries=1, retry_backoff=1.0, timeout=5.0, out=args.out)
        status = _run(config, resumable=False)
    print(f"pages written to {args.out}; the frontier is in {state}/frontier.db "
          f"(try: crawlq --store sqlite:///{state}/frontier.db stats)")
    return status
