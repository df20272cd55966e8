"""The commands that feed and read a frontier, each one call of its API: ``add``,
``next`` and the answers to its leases (``done``, ``fail``, ``retry``), ``stats``,
``queues``, ``dead`` and ``requeue-dead``."""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections.abc import Iterable, Iterator
from typing import IO, Any

from .. import handles
from ..errors import CrawlqError
from ..frontier import Frontier
from ..models import Outcome, Request, Stats
from ..stores.dumpfmt import request_from_json, request_to_json
from .argtypes import count
from .report import Progress

COMMANDS = ("add", "next", "done", "fail", "retry", "stats", "queues", "dead",
            "requeue-dead")
"""The subcommands this module adds and runs."""
BATCH = 5_000


def register(sub: Any) -> None:
    """Add this module's subcommands to the CLI's subparsers."""
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


def command(f: Frontier, args: argparse.Namespace, out: IO[str], stdin: IO[str]) -> int:
    """Run one of :data:`COMMANDS` on frontier ``f``; returns the exit status."""
    cmd = args.command
    if cmd in ("done", "fail", "retry"):
        return _cmd_answer(f, args, out, stdin)
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
    raise AssertionError(f"unhandled command {cmd}")


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


def _cmd_answer(f: Frontier, args: argparse.Namespace, out: IO[str], stdin: IO[str]) -> int:
    """``done`` / ``fail`` / ``retry``: answer leases by their handles."""
    given: list[str] = []
    for item in args.leases:
        if item != "-":
            given.append(item)
            continue
        for line in stdin:
            line = line.strip()
            if line.startswith("{"):
                try:
                    given.append(json.loads(line)["lease"])
                except (ValueError, KeyError, TypeError) as exc:
                    raise CrawlqError(f"not a line of next's output: {line[:80]!r} "
                                      f"({exc!r})") from None
            elif line:
                given.append(line)
    leases = [handles.lease_of(h) for h in given]
    if args.command == "done":
        held = f.done(leases)
    elif args.command == "fail":
        held = f.done(leases, Outcome.FAILED, error=args.error)
    else:
        held = f.done(leases, Outcome.RETRY, after=args.after)
    late = len(leases) - held
    print(f"answered {held} lease(s)" + (f"; {late} had expired or were answered before "
                                         "(nothing changed for those)" if late else ""),
          file=out)
    return 0
