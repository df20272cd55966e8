"""``crawlq crawl`` and ``crawlq demo``: the crawler's command line (its options are
:mod:`crawl_options`, ``--workers`` is :mod:`crawl_workers`; the crawler itself is
:mod:`crawlq.crawler`)."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import re
import signal
import sys
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from ..crawler.scope import domain_name
from ..errors import CommandError
from .argtypes import count
from .crawl_options import add_options

COMMANDS = ("crawl", "demo")
"""The subcommands this module adds and runs."""
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
    add_options(c)
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


def command(args: argparse.Namespace) -> int:
    """Run ``crawl`` or ``demo``; returns the exit status."""
    try:
        from ..crawler.addresses import networks
        from ..crawler.core import DEFAULT_AGENT, CrawlConfig
        from . import crawl_workers
    except ImportError as exc:
        raise CommandError(f"crawl needs the crawl extra: pip install 'crawlq[crawl]' "
                           f"({exc})") from None
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
            raise CommandError(f"--resolve wants HOST=IP, got {pair!r}")
        resolve[host] = ip
    try:
        networks(args.allow_address)
    except ValueError as exc:
        raise CommandError(f"--allow-address: {exc}") from None
    priority = []
    for rule in args.priority:
        pattern, eq, n = rule.rpartition("=")
        try:
            priority.append((pattern, int(n)))
        except ValueError:
            eq = ""
        if not eq:
            raise CommandError(f"--priority wants REGEX=N (N an integer), got {rule!r}")
    for option, patterns in (("--include", args.include), ("--exclude", args.exclude),
                             ("--target", args.target),
                             ("--priority", [p for p, _ in priority])):
        for pattern in patterns:
            try:
                re.compile(pattern)
            except re.error as exc:
                raise CommandError(
                    f"{option}: bad regular expression {pattern!r}: {exc}") from None
    for domain in args.allow_domain:
        try:
            domain_name(domain)
        except ValueError as exc:
            raise CommandError(f"--allow-domain: {exc}") from None
    headers = {}
    for raw in args.header:
        name, colon, value = raw.partition(":")
        name, value = name.strip(), value.strip()
        if (not colon or not re.fullmatch(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+", name)
                or any(ch in value for ch in "\r\n\0")):
            raise CommandError(f"--header wants 'NAME: VALUE', got {raw!r}")
        headers[name] = value
    if args.proxy is not None:
        try:
            parts = urlsplit(args.proxy)
            ok = parts.scheme == "http" and bool(parts.hostname) and parts.port != 0
        except ValueError:
            ok = False
        if not ok:
            raise CommandError(f"--proxy wants http://host:port, got {args.proxy!r}")
        if args.proxy_from_env:
            raise CommandError("--proxy and --proxy-from-env: give one")
    if args.out:
        from ..crawler.output import OutputError, output_kind

        try:
            output_kind(args.out, args.format, tuple(args.save), args.rotate)
        except OutputError as exc:
            raise CommandError(f"--out: {exc}") from None
    given = {s for s in (args.store, args.crawl_store) if s}  # (before or after 'crawl')
    if len(given) > 1:
        raise CommandError(f"two different --store values: {' and '.join(sorted(given))}")
    store = next(iter(given), None)
    if store and args.state:
        raise CommandError("--state and --store both say where the crawl is kept: give "
                           "one of them")
    if store is None and not args.state:
        store = os.environ.get("CRAWLQ_STORE") or None
    if store is None and args.state:
        Path(args.state).mkdir(parents=True, exist_ok=True)
        store = f"sqlite:///{Path(args.state).resolve()}/frontier.db"
    worker = crawl_workers.worker_index()
    if args.workers > 1 and worker is None:
        crawl_workers.check(store or "memory://", args.out, args.workers, args.metrics)
        assert store is not None
        return crawl_workers.run(args.argv, args.workers, store, args.progress)
    out = args.out
    if worker is not None and out:
        out = crawl_workers.worker_out(out, worker[0])
    config = CrawlConfig(
        seeds=args.seeds, store=store or "memory://", allow_domains=args.allow_domain,
        include=args.include, exclude=args.exclude, priority_rules=priority,
        target=args.target, max_redirects=args.max_redirects, max_pages=args.max_pages,
        max_depth=args.max_depth, max_per_host=args.max_per_host,
        max_per_domain=args.max_per_domain, max_hosts_per_domain=args.max_hosts_per_domain,
        per_domain=args.per_domain,
        concurrency=args.concurrency, per_host=args.per_host, min_delay=args.min_delay,
        max_delay=args.max_delay, delay_factor=args.delay_factor,
        user_agent=args.user_agent or DEFAULT_AGENT, obey_robots=not args.ignore_robots,
        allow_private=args.allow_private, allow_addresses=tuple(args.allow_address),
        resolve=resolve, timeout=args.timeout, parse_timeout=args.parse_timeout,
        headers=headers, save=tuple(args.save), proxy=args.proxy,
        proxy_from_env=args.proxy_from_env, cookies=args.cookies,
        max_bytes=args.max_bytes, max_retries=args.max_retries, lease_ttl=args.lease_ttl,
        max_redeliveries=args.max_redeliveries, max_backoff=args.max_backoff,
        out=out, out_format=args.format, out_rotate=args.rotate, rounds=args.rounds,
        duration=args.duration,
        round_delay=args.delay, revisit_after=args.revisit,
        sitemaps=args.sitemaps, ca_file=args.ca_file,
        robots_error_window=args.robots_error_window)
    return _run(config, resumable=bool(args.state or store),
                every=0 if worker is not None else args.progress, metrics_port=args.metrics,
                loop=args.loop)


def _runner(loop: str) -> Callable[[Coroutine[Any, Any, Any]], Any]:
    """What runs the crawl's event loop: ``asyncio.run``, or uvloop's (``--loop``;
    ``auto``: uvloop when it is installed, as the crawl extra installs it)."""
    if loop != "asyncio":
        try:
            import uvloop
        except ImportError:
            if loop == "uvloop":
                raise CommandError("--loop uvloop: uvloop is not installed",
                                   advice="pip install uvloop (or crawlq[crawl])") from None
        else:
            return uvloop.run
    return asyncio.run


def _run(config: Any, resumable: bool, every: float | None = None,
         metrics_port: int | None = None, loop: str = "auto") -> int:
    from ..crawler.core import Crawler
    from ..crawler.progress import Progress
    from ..errors import CrawlqError
    from . import crawl_workers

    run = _runner(loop)  # (first: a loop asked for and missing is an error of its own)
    metrics = None
    if metrics_port is not None:
        from ..crawler.metrics import CrawlMetrics

        metrics = CrawlMetrics(metrics_port)  # (its CrawlqError is the command's)
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
        logging.getLogger("crawlq.crawl").debug("event loop: %s.%s", type(loop).__module__,
                                                type(loop).__name__)
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
        summary = run(main())
    except CrawlqError as exc:
        progress.clear()
        raise CommandError(str(exc), advice=_advice(exc, resumable)) from exc
    except KeyboardInterrupt:
        progress.clear()
        raise CommandError("interrupted twice: stopped at once" + (
            "; pages in flight are fetched again by the next run" if resumable else ""),
            status=128 + (stopped_by[0] if stopped_by else signal.SIGINT)) from None
    progress.clear()
    left_for = os.environ.get(crawl_workers.SUMMARY)
    if left_for:  # a worker of --workers: the process that started it reports
        Path(left_for).write_text(summary.to_json())
    for line in summary.lines():
        print(line, file=report)
    if stopped_by:
        if resumable:
            print("interrupted: run the same command again to continue where it stopped",
                  file=report)
        return 128 + stopped_by[0]  # 130 for SIGINT, 143 for SIGTERM, as shells report
    failure = summary.failure()
    if failure is not None:
        raise CommandError(failure)
    return 0


def _demo(args: argparse.Namespace) -> int:
    from ..crawler.core import CrawlConfig
    from ..stores import SQLITE_SUFFIXES
    from ..testing.web import SiteSpec, serve

    spec = SiteSpec(hosts=args.hosts, pages=args.pages, slow_seconds=0.2,
                    big_bytes=300_000)
    Path(args.out).unlink(missing_ok=True)
    state = Path(args.state)
    state.mkdir(parents=True, exist_ok=True)
    for suffix in SQLITE_SUFFIXES:  # the test web's port changes: start afresh
        (state / f"frontier.db{suffix}").unlink(missing_ok=True)
    with serve(spec) as web:
        print(f"test web: {spec.hosts} hosts x {spec.pages} pages on 127.0.0.1:{web.port} "
              f"(robots.txt rules, redirects, a calendar trap, 429/503, broken pages...)")
        config = CrawlConfig(
            seeds=[web.url(i, "/") for i in range(spec.hosts)], allow_domains=["crawlq.test"],
            store=f"sqlite:///{state.resolve()}/frontier.db",
            resolve={"*.crawlq.test": "127.0.0.1"}, allow_private=True, min_delay=0.05,
            max_delay=0.5, delay_factor=1.0, concurrency=8, max_per_host=spec.pages + 40,
            # (the test web's hosts are one registered domain, crawlq.test, standing for
            # separate sites: the trap it has is on one host)
            per_domain=8,
            max_retries=1, retry_backoff=1.0, timeout=5.0, out=args.out)
        status = _run(config, resumable=False)
    print(f"pages written to {args.out}; the frontier is in {state}/frontier.db "
          f"(try: crawlq --store sqlite:///{state}/frontier.db stats)")
    return status


def _advice(exc: Exception, resumable: bool) -> str | None:
    """What to do after the store failed a crawl: a store that comes back by itself (a
    server gone, a lock, a full disk freed) and one that someone must mend differ."""
    from ..errors import StoreCorrupt, StoreError, StoreReadOnly

    if not isinstance(exc, StoreError) or not resumable:
        return None
    if isinstance(exc, StoreReadOnly):
        return ("nothing is lost: make the store writable (its file, its directory, the "
                "mount) and run the same command again")
    if isinstance(exc, StoreCorrupt):
        return ("the store is damaged or no crawlq store: `crawlq check` tells more; "
                "`crawlq dump` saves what it still holds, or use another --state")
    return ("nothing is lost: run the same command again once the store is back (pages "
            "in flight are fetched again)")
