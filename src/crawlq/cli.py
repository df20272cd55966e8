"""The ``crawlq`` command line: crawl, or look at and feed a frontier on any store URL.

    crawlq demo                                              # crawl the local test web
    crawlq crawl https://example.com/ --state ./crawl --max-pages 1000 --out pages.jsonl

    crawlq add https://example.com/ https://example.org/     # or: ... | crawlq add -
    crawlq stats
    crawlq queues
    crawlq next -n 10 --ack
    crawlq dump > state.jsonl ; crawlq --store sqlite:///copy.db load state.jsonl
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from collections.abc import Iterable, Iterator, Sequence
from typing import IO, Any, NoReturn

from . import __version__, handles
from .cli_state import Progress, cmd_answer, cmd_dump, cmd_load
from .errors import CommandError, CrawlqError, StoreCorrupt
from .frontier import Frontier
from .models import Request, Stats
from .stores import sqlite_file
from .stores.dumpfmt import request_from_json, request_to_json
from .stores.sqlite_schema import check

DEFAULT_STORE = "sqlite:///crawlq.db"
READ_ONLY = ("stats", "queues", "dead", "dump", "check")
"""Commands that only look: they never create a store."""
BATCH = 5_000


class _Parser(argparse.ArgumentParser):
    """argparse, with its errors as one ``crawlq: error:`` line like every other error
    (argparse prints the usage and ``crawlq crawl: error:``)."""

    def error(self, message: str) -> NoReturn:
        command = self.prog.split(" ", 1)[1] + " " if " " in self.prog else ""
        raise CommandError(f"{message} (see crawlq {command}--help)")


def _parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="crawlq",
        description="crawlq: a durable, polite crawl frontier. These commands inspect and "
                    "feed a frontier stored at --store.",
        epilog="Store URLs: sqlite:///relative.db, sqlite:////absolute/path.db, memory:// "
               "(gone when the command ends). Docs: docs/cli.md.",
    )
    p.add_argument("--version", action="version", version=f"crawlq {__version__}")
    p.add_argument("--store", default=None,
                   help=f"store URL (default: $CRAWLQ_STORE or {DEFAULT_STORE}; for crawl: "
                        "$CRAWLQ_STORE or memory)")
    p.add_argument("-o", "--option", action="append", default=[], metavar="NAME=VALUE",
                   help="a Frontier.open option, e.g. -o min_delay=2 -o concurrency=4 "
                        "(repeatable; see docs/options.md)")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    a = sub.add_parser("add", help="offer URLs to the frontier",
                       description="Offer URLs. Arguments are URLs; '-' reads standard input: "
                                   "one URL per line, or one JSON request object per line "
                                   '({"url": ..., "priority": 5, ...}).')
    a.add_argument("urls", nargs="+", metavar="URL", help="a URL, or - for standard input")
    a.add_argument("--priority", type=int, default=0, help="priority of plain URLs "
                   "(higher runs sooner; default 0)")
    a.add_argument("--depth", type=int, default=0, help="depth of plain URLs (default 0)")
    a.add_argument("--show-rejected", action="store_true",
                   help="print each rejected URL and why on standard error")

    n = sub.add_parser("next", help="lease requests that may be fetched now",
                       description="Lease up to N ready requests and print them as JSON "
                                   "lines. Without --ack they stay leased until the lease "
                                   "expires (then they return to their queues).")
    n.add_argument("-n", type=count(0), default=1, help="how many (default 1)")
    n.add_argument("--ack", action="store_true", help="mark them done right away")

    s = sub.add_parser("stats", help="show counters and queue states")
    s.add_argument("--json", action="store_true", help="print JSON")
    s.add_argument("--queues", type=count(0), default=0, metavar="N",
                   help="also list the N largest queues")

    q = sub.add_parser("queues", help="list queues, largest first")
    q.add_argument("-n", type=count(0), default=20, help="how many (default 20)")
    q.add_argument("--json", action="store_true", help="print JSON lines")

    d = sub.add_parser("dead", help="list requests that ran out of retries")
    d.add_argument("-n", type=count(0), default=20, help="how many (default 20)")
    sub.add_parser("requeue-dead", help="give every dead request a fresh start")

    du = sub.add_parser("dump", help="export the whole state as JSON lines",
                        description="Write every queue, request (queued, leased, scheduled, "
                                    "dead), counter and seen fingerprint as JSON lines.")
    du.add_argument("file", nargs="?", default="-", help="output file (default: stdout)")

    lo = sub.add_parser("load", help="import JSON lines written by dump",
                        description="Merge a dump into the store (in one transaction).")
    lo.add_argument("file", nargs="?", default="-", help="input file (default: stdin)")

    for name, what in (("done", "fetched"), ("fail", "failed: retried with backoff, then "
                                              "dead"), ("retry", "back to its queue")):
        an = sub.add_parser(name, help=f"answer leases taken by next: {what}",
                            description=f"Answer leases (their 'lease' handle, as next prints "
                                        f"it; '-' reads next's JSON lines): {what}.")
        an.add_argument("leases", nargs="+", metavar="LEASE", help="a lease handle, or -")
        if name == "fail":
            an.add_argument("--error", default="failed", help="the error to keep")
        if name == "retry":
            an.add_argument("--after", type=float, default=0.0, metavar="SECONDS",
                            help="not before this many seconds (default 0)")

    sub.add_parser("check", help="look for damage in a SQLite store",
                   description="Run SQLite's integrity check on the store's file (read "
                               "only) and check that it is a crawlq store.")

    from .crawler.cli import register
    from .serve import register as register_serve

    register(sub)
    register_serve(sub)
    return p


def count(least: int) -> Any:
    """An argparse type: a whole number >= ``least`` (a usage error naming the flag
    otherwise)."""
    def parse(text: str) -> int:
        try:
            n = int(text)
        except ValueError:
            n = least - 1
        if n < least:
            raise argparse.ArgumentTypeError(
                f"must be a whole number >= {least}, not {text!r}")
        return n
    return parse


def _options(pairs: Sequence[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for pair in pairs:
        name, eq, raw = pair.partition("=")
        if not eq or not name:
            raise CrawlqError(f"--option wants NAME=VALUE, got {pair!r}")
        try:
            value: Any = json.loads(raw)
        except json.JSONDecodeError:
            value = raw
        out[name.strip().replace("-", "_")] = value
    return out


def _read_requests(args: argparse.Namespace, stdin: IO[str]) -> Iterator[Request | str]:
    for url in args.urls:
        if url != "-":
            yield Request(url, priority=args.priority, depth=args.depth)
            continue
        for line in stdin:
            line = line.strip()
            if not line:
                continue
            if line.startswith("{"):
                try:
                    yield request_from_json(json.loads(line))
                except (ValueError, TypeError, OverflowError, CrawlqError) as exc:
                    # Keep going: the frontier counts it as rejected, like any bad URL.
                    print(f"crawlq: bad JSON request line: {exc}", file=sys.stderr)
                    yield line
            else:
                yield Request(line, priority=args.priority, depth=args.depth)


def _batches(items: Iterable[Any], size: int) -> Iterator[list[Any]]:
    batch: list[Any] = []
    for item in items:
        batch.append(item)
        if len(batch) >= size:
            yield batch
            batch = []
    if batch:
        yield batch


def _cmd_add(f: Frontier, args: argparse.Namespace, out: IO[str], stdin: IO[str]) -> int:
    added = dups = offered = 0
    reasons: dict[str, int] = {}
    progress = Progress("adding")
    for batch in _batches(_read_requests(args, stdin), BATCH):
        r = f.add(batch)
        offered += len(batch)
        added += r.added
        dups += r.duplicates
        for rej in r.rejected:
            reasons[rej.reason] = reasons.get(rej.reason, 0) + 1
            if args.show_rejected:
                print(f"rejected {rej.reason}: {rej.url[:200]} {rej.detail}", file=sys.stderr)
        progress.update(offered)
    progress.close()
    rejected = sum(reasons.values())
    msg = f"offered {offered}, added {added}, duplicates {dups}, rejected {rejected}"
    if reasons:
        msg += " (" + ", ".join(f"{k}: {v}" for k, v in sorted(reasons.items())) + ")"
    print(msg, file=out)
    return 0


def _cmd_next(f: Frontier, args: argparse.Namespace, out: IO[str]) -> int:
    leases = handles.lease_out(f, args.n)
    for le in leases:
        print(json.dumps(handles.record(le), ensure_ascii=False), file=out)
    if args.ack and leases:
        f.done(leases)
    if not leases:
        s = f.stats()
        when = f.next_ready_at()
        why = "the frontier is empty" if when is None else \
            f"nothing ready now ({s.queued} queued, {s.leased} leased; next {_fmt_time(when)})"
        print(f"crawlq: no request: {why}", file=sys.stderr)
    return 0


def _fmt_time(t: float) -> str:
    if t <= 0 or math.isinf(t):
        return "-"
    left = t - time.time()
    return "now" if left <= 0 else f"in {left:.1f}s"


def _print_stats(s: Stats, out: IO[str]) -> None:
    rows = [
        ("seen (unique)", s.seen), ("added", s.added), ("queued", s.queued),
        ("  scheduled later", s.scheduled), ("leased", s.leased), ("done", s.done),
        ("failed", s.failed), ("retried", s.retried), ("dead", s.dead),
        ("redelivered", s.redelivered), ("late acks", s.late_acks),
        ("duplicates", s.duplicates), ("rejected", sum(s.rejected.values())),
    ]
    rows += [(f"  {k}", v) for k, v in sorted(s.rejected.items())]
    rows += [("queues", s.queues_total), ("  ready", s.queues_ready),
             ("  busy", s.queues_busy), ("  resting", s.queues_resting),
             ("  exhausted", s.queues_exhausted)]
    width = max(len(k) for k, _ in rows)
    for k, v in rows:
        print(f"{k:<{width}}  {v:>12,}", file=out)
    print(f"{'finished':<{width}}  {'yes' if s.finished else 'no':>12}", file=out)
    if s.per_queue:
        _print_queues(s.per_queue, out)


def _print_queues(queues: Iterable[Any], out: IO[str]) -> None:
    print(f"\n{'queue':<40} {'queued':>9} {'later':>7} {'leased':>7} {'accepted':>9}  "
          f"{'state':<9} ready", file=out)
    for q in queues:
        print(f"{q.key[:40]:<40} {q.queued:>9,} {q.scheduled:>7,} {q.leased:>7} "
              f"{q.accepted:>9,}  {q.state:<9} {_fmt_time(q.ready_at)}", file=out)


ERROR = "crawlq: error: "
"""How every error line of the command line begins (``crawlq crawl --workers`` reads its
workers' by it)."""


def report(exc: CrawlqError) -> int:
    """The one way the command line reports an error: one ``crawlq: error:`` line on
    standard error (then a :class:`~crawlq.errors.CommandError`'s advice line), and the
    exit status (the CommandError's, else 2)."""
    print(f"{ERROR}{exc}", file=sys.stderr)
    if isinstance(exc, CommandError):
        if exc.advice:
            print(exc.advice, file=sys.stderr)
        return exc.status
    return 2


def run(argv: Sequence[str] | None = None, out: IO[str] | None = None,
        stdin: IO[str] | None = None) -> int:
    """Run the CLI; returns the exit status (0 ok, 2 usage or crawlq error). Commands
    raise their errors (:class:`~crawlq.errors.CrawlqError`); they are reported here,
    by :func:`report`."""
    try:
        return _run(argv, out, stdin)
    except CrawlqError as exc:
        return report(exc)
    except BrokenPipeError:
        return 0


def _run(argv: Sequence[str] | None, out: IO[str] | None, stdin: IO[str] | None) -> int:
    out = out or sys.stdout
    stdin = stdin or sys.stdin
    args = _parser().parse_args(argv)
    args.argv = list(argv) if argv is not None else sys.argv[1:]  # (--workers runs it)
    if args.command in ("crawl", "demo"):
        from .crawler.cli import command

        return command(args)
    store = args.store or os.environ.get("CRAWLQ_STORE") or DEFAULT_STORE
    path = sqlite_file(store)
    if args.command == "check":  # (before opening it: a damaged file cannot be)
        if path is None:
            raise CrawlqError(f"check reads sqlite:// stores, not {store}")
        if not os.path.exists(path):
            raise CrawlqError(f"no crawl at {store}: {path} does not exist")
        problems = check(path)
        if problems:
            raise StoreCorrupt(f"{path} is damaged: {'; '.join(problems[:3])} "
                               f"({len(problems)} problem(s); a dump may save what is "
                               "readable)")
        print(f"{path}: no damage found (SQLite's integrity check)", file=out)
        return 0
    if args.command == "load" and args.file != "-":  # (before a store is created)
        try:
            with open(args.file, "rb"):
                pass
        except OSError as exc:
            raise CrawlqError(f"cannot read {args.file}: {exc.strerror or exc}") from None
    options = _options(args.option)
    if args.command == "serve":
        from .serve import command as serve

        return serve(args, store, options)
    if args.command in READ_ONLY:
        # (opening it would create an empty store, and print zeros as if it were one)
        options["create"] = False
    with Frontier.open(store, **options) as f:
        cmd = args.command
        if cmd in ("done", "fail", "retry"):
            return cmd_answer(f, args, out, stdin)
        if cmd == "add":
            return _cmd_add(f, args, out, stdin)
        if cmd == "next":
            return _cmd_next(f, args, out)
        if cmd == "stats":
            s = f.stats(per_queue=args.queues)
            if args.json:
                print(json.dumps(s.as_dict(), ensure_ascii=False), file=out)
            else:
                _print_stats(s, out)
            return 0
        if cmd == "queues":
            qs = f.queues(args.n)
            if args.json:
                for q in qs:
                    print(json.dumps(q.as_dict()), file=out)
            else:
                _print_queues(qs, out)
            return 0
        if cmd == "dead":
            for d in f.dead(args.n):
                print(json.dumps({"id": d.id, "queue": d.queue, "error": d.error,
                                  "died_at": d.died_at, **request_to_json(d.request)},
                                 ensure_ascii=False), file=out)
            return 0
        if cmd == "requeue-dead":
            print(f"requeued {f.requeue_dead()}", file=out)
            return 0
        if cmd == "dump":
            return cmd_dump(f, args.file, out)
        if cmd == "load":
            return cmd_load(f, args.file, out, stdin)
    raise AssertionError(f"unhandled command {args.command}")


def main() -> None:
    """Console-script entry point: every error is one ``crawlq: error:`` line."""
    try:
        sys.exit(run())
    except KeyboardInterrupt:
        sys.exit(report(CommandError("interrupted", status=130)))
    except Exception as exc:  # a bug: still one line (CRAWLQ_TRACEBACK=1 shows it whole)
        if os.environ.get("CRAWLQ_TRACEBACK"):
            raise
        sys.exit(report(CommandError(f"internal error, please report it: "
                                     f"{type(exc).__name__}: {exc} (CRAWLQ_TRACEBACK=1 "
                                     "shows where)")))


if __name__ == "__main__":
    main()
